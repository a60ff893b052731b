#!/usr/bin/env bash
# Side-by-side: sonde and the StatsD peers under the same load in one run.
#
# Method (docs/BENCHMARKS.md, "How the peers were measured"): each agent
# alone on udp://127.0.0.1:8125, pinned to CPU 1; `sonde bench` pinned to
# CPU 0 sends StatsD packed into 1400-byte datagrams at fixed rates, for
# two shapes:
# plain-1k (1,000 series, no tags, mix 4:2:2 because collectd rejects `h`)
# and dog-100k (100,000 series, 3 DogStatsD tags, mix 4:2:2:2).
# CPU = the agent's utime+stime from the start of the load until its
# socket drained; memory = VmHWM; loss = sonde's own counters for sonde,
# kernel RcvbufErrors for every agent (peers that drop inside their own
# queues are not seen there; "How the peers were measured" says which).
#
# Usage: scripts/bench-peers.sh [--install] [--duration 5s] [--rates "100k 1M"]
#   --install   install the peers first: collectd from Debian, statsd_exporter
#               and telegraf with `go install` (Telegraf takes many minutes).
# A peer that is not installed is skipped, and the output says so.
# Output: one line per run, and a markdown table with ratios to sonde.
set -uo pipefail
cd "$(dirname "$0")/.."

DURATION=5s
RATES="100k 500k 1M"
INSTALL=0
while [ $# -gt 0 ]; do
  case "$1" in
    --install) INSTALL=1 ;;
    --duration) DURATION="$2"; shift ;;
    --rates) RATES="$2"; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

PEERS_BIN="${PEERS_BIN:-$HOME/.cache/sonde-peers/bin}"
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$WORK"' EXIT

if [ "$INSTALL" = 1 ]; then
  mkdir -p "$PEERS_BIN"
  command -v collectd >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq collectd-core; }
  [ -x "$PEERS_BIN/statsd_exporter" ] || GOBIN="$PEERS_BIN" go install github.com/prometheus/statsd_exporter@v0.31.0
  [ -x "$PEERS_BIN/telegraf" ] || GOBIN="$PEERS_BIN" go install github.com/influxdata/telegraf/cmd/telegraf@v1.37.2
  # gostatsd: the Go module proxy refuses github.com/atlassian/gostatsd (403),
  # so it cannot be installed on this machine.
fi

cargo build --profile dist --quiet || exit 1
SONDE=./target/dist/sonde

cat > "$WORK/sonde.toml" <<TOML
[agent]
interval = "10s"
admin_listen = "127.0.0.1:18686"
[[receivers]]
protocol = "statsd"
listen = "udp://127.0.0.1:8125"
[[sinks]]
type = "file"
path = "/dev/null"
TOML
cat > "$WORK/collectd.conf" <<CONF
Interval 10
FQDNLookup false
LoadPlugin logfile
<Plugin logfile>
  File "$WORK/collectd.log"
</Plugin>
LoadPlugin statsd
<Plugin statsd>
  Host "127.0.0.1"
  Port "8125"
  TimerPercentile 50
  TimerPercentile 90
  TimerPercentile 99
  CounterSum true
</Plugin>
CONF
cat > "$WORK/telegraf.conf" <<CONF
[agent]
  interval = "10s"
  flush_interval = "10s"
  omit_hostname = true
[[inputs.statsd]]
  protocol = "udp"
  service_address = "127.0.0.1:8125"
  datadog_extensions = true
  percentiles = [50.0, 90.0, 99.0]
[[outputs.discard]]
CONF

# name|command|supports DogStatsD tags
PEERS=(
  "sonde|$SONDE run --config $WORK/sonde.toml|yes"
  "collectd|collectd -f -C $WORK/collectd.conf|no"
  "statsd_exporter|$PEERS_BIN/statsd_exporter --statsd.listen-udp=127.0.0.1:8125 --statsd.listen-tcp= --web.listen-address=127.0.0.1:19102|yes"
  "telegraf|$PEERS_BIN/telegraf --config $WORK/telegraf.conf|yes"
)

wait_port() {
  for _ in $(seq 100); do
    ss -uln | grep -q '127.0.0.1:8125 ' && return 0
    sleep 0.1
  done
  return 1
}

RESULTS="$WORK/results.tsv"
: > "$RESULTS"
for entry in "${PEERS[@]}"; do
  IFS='|' read -r name cmd tags <<<"$entry"
  bin=${cmd%% *}
  if ! command -v "$bin" >/dev/null 2>&1 && [ ! -x "$bin" ]; then
    echo "skip $name: not installed ($bin); scripts/bench-peers.sh --install installs it"
    continue
  fi
  for shape in plain-1k dog-100k; do
    if [ "$shape" = dog-100k ] && [ "$tags" = no ]; then
      echo "skip $name $shape: no DogStatsD tag support"
      continue
    fi
    case "$shape" in
      plain-1k) args="--series 1000 --tags 0 --mix 4:2:2" ;;   # collectd rejects the h type
      dog-100k) args="--series 100000 --tags 3" ;;
    esac
    for rate in $RATES; do
      # A fresh agent per run, so VmHWM is this run's peak.
      taskset -c 1 $cmd >"$WORK/$name.out" 2>&1 &
      pid=$!
      if ! wait_port; then
        echo "skip $name: did not listen on 127.0.0.1:8125"; kill $pid 2>/dev/null; wait $pid 2>/dev/null
        continue 2
      fi
      admin=none
      [ "$name" = sonde ] && admin=127.0.0.1:18686
      taskset -c 0 $SONDE bench --to udp://127.0.0.1:8125 --rate "$rate" --duration "$DURATION" $args \
        --admin "$admin" --pid "$pid" --json >"$WORK/run.json" 2>/dev/null
      kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null
      line=$(python3 - "$name" "$shape" "$rate" "$WORK/run.json" <<'PY'
import json, sys
name, shape, rate, path = sys.argv[1:5]
try:
    r = json.load(open(path))
except ValueError:
    print(f"{name}\t{shape}\t{rate}\tfailed\t\t\t"); sys.exit()
sent = r["points_sent"]
us = r["agent_cpu_seconds"] * 1e6 / max(sent, 1)
if r["loss_percent"] is not None:
    loss = r["loss_percent"]
else:
    loss = 100.0 * r["kernel_rcvbuf_drops"] / max(r["datagrams_sent"], 1)
print(f"{name}\t{shape}\t{rate}\t{us:.3f}\t{loss:.2f}\t{r['agent_peak_rss_bytes']/1048576:.1f}\t{r['send_rate']:.0f}")
PY
)
      echo "$line" | tee -a "$RESULTS"
    done
  done
done

echo
echo "| agent | shape | rate | µs CPU per line | loss % | peak RSS MiB | ratio of CPU to sonde |"
echo "|---|---|---|---|---|---|---|"
python3 - "$RESULTS" <<'PY'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
base = {(r[1], r[2]): float(r[3]) for r in rows if r[0] == "sonde" and r[3] != "failed"}
for r in rows:
    if r[3] == "failed":
        print(f"| {r[0]} | {r[1]} | {r[2]} | failed | | | |"); continue
    b = base.get((r[1], r[2]))
    ratio = f"{float(r[3]) / b:.1f}x" if b else "n/a"
    print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]} | {r[5]} | {ratio} |")
PY

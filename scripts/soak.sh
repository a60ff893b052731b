#!/usr/bin/env bash
# A long run under mixed good and bad load (not part of CI): the release
# agent receives StatsD and msgpack at a steady rate from `sonde bench`
# while a second sender throws malformed lines, non-finite values, bad
# tags, invalid UTF-8, 64 KB datagrams, truncated msgpack and a flood of
# new series at it. Every INTERVAL it prints the agent's RSS and CPU; at the
# end, drops by reason and the sink's counters. It fails (exit 1) if the
# agent dies, or if its RSS at the end is more than twice its RSS after the
# first minute (growth without bound).
#
# The two `sonde bench` reports read the agent's totals, which include the
# other sender's points, so their loss lines are meaningless here.
#
# Usage: scripts/soak.sh [DURATION_SECONDS] [GOOD_RATE]   (default 600 200000)
#   SONDE_BIN=path   use this binary instead of building target/dist/sonde
#   INTERVAL=10      seconds between samples
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/bench-agent.sh
duration=${1:-600}
rate=${2:-200000}
interval=${INTERVAL:-10}
if [ -z "${SONDE_BIN:-}" ]; then
  cargo build --profile dist --quiet -p sonde -p sonde-bench
  SONDE_BIN=target/dist/sonde
fi

dir=$(mktemp -d)
agent_pid=
cleanup() {
  [ -z "$agent_pid" ] || kill "$agent_pid" 2>/dev/null || true
  jobs -p | xargs -r kill 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
statsd=$(port) msgpack=$(port) admin=$(port)
bench_agent_config "$dir/sonde.toml" 10s "127.0.0.1:$admin" "127.0.0.1:$statsd" "127.0.0.1:$msgpack" /dev/null 'max_series = 100000'
"$SONDE_BIN" run --config "$dir/sonde.toml" 2>"$dir/agent.log" &
agent_pid=$!
for _ in $(seq 100); do
  curl -fs "http://127.0.0.1:$admin/health" >/dev/null 2>&1 && break
  sleep 0.1
done
echo "agent pid $agent_pid, log $dir/agent.log; ${duration}s at ${rate} good points/s plus bad input"

# Good load: StatsD with DogStatsD tags and msgpack bunches, half each.
"$SONDE_BIN" bench --protocol statsd --to "udp://127.0.0.1:$statsd" --admin "127.0.0.1:$admin" \
  --rate $((rate / 2)) --duration "${duration}s" --series 20000 --tags 3 >"$dir/bench-statsd.txt" 2>&1 &
"$SONDE_BIN" bench --protocol msgpack --to "udp://127.0.0.1:$msgpack" --admin "127.0.0.1:$admin" \
  --rate $((rate / 2)) --duration "${duration}s" --series 20000 --max-bytes 8192 >"$dir/bench-msgpack.txt" 2>&1 &

# Bad load, about 2,000 datagrams/s of every kind of garbage, and new
# series without end (the series limit must hold them).
python3 - "$statsd" "$msgpack" "$duration" <<'EOF' &
import os, random, socket, sys, time
statsd, msgpack, duration = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
bad_statsd = [
    b"no.colon", b"x:1|zz", b"x:abc|c", b"x:nan|g", b"x:inf|ms", b"x:1e400|c",
    b"x:1|c|@2", b"x:1|c|#\xff\xfe", b"\xc3\x28:1|c", b":1|c", b"_e{5,4}:title|text",
    b"_sc|check|0", b"x:1|c|#" + b"k:v," * 2000, b"x" * 65000,
]
bad_msgpack = [
    b"\xdc\x00\x05\x96", b"\x93\xa4emit", b"\xc1\xc1\xc1", os.urandom(300),
    b"\x96\xa4emit\xa7counter\xa1x\xa3nan\xa0\xa0",
]
end = time.time() + duration
n = 0
while time.time() < end:
    for _ in range(20):
        n += 1
        try:
            s.sendto(random.choice(bad_statsd), ("127.0.0.1", statsd))
            s.sendto(random.choice(bad_msgpack), ("127.0.0.1", msgpack))
            s.sendto(b"flood.%d:1|c|#i:%d" % (n, n), ("127.0.0.1", statsd))
        except OSError:
            pass
    time.sleep(0.02)
EOF

hz=$(getconf CLK_TCK)
printf '%8s %10s %10s %12s\n' "seconds" "rss_MiB" "cpu_s" "series"
start=$(date +%s)
rss_first=
while :; do
  now=$(( $(date +%s) - start ))
  if ! kill -0 "$agent_pid" 2>/dev/null; then
    echo "FAIL: the agent died after ${now}s; its log:"
    tail -20 "$dir/agent.log"
    exit 1
  fi
  rss=$(awk '/VmRSS/ {printf "%.1f", $2/1024}' "/proc/$agent_pid/status")
  cpu=$(awk -v hz="$hz" '{printf "%.1f", ($14 + $15) / hz}' "/proc/$agent_pid/stat")
  series=$(curl -fs "http://127.0.0.1:$admin/metrics" | awk '$1 == "sonde_series" {print $2}')
  printf '%8d %10s %10s %12s\n' "$now" "$rss" "$cpu" "${series:-?}"
  [ -n "$rss_first" ] || { [ "$now" -lt 60 ] || rss_first=$rss; }
  [ "$now" -lt "$duration" ] || break
  sleep "$interval"
done
wait_jobs=$(jobs -p | grep -v "^$agent_pid\$" || true)
[ -z "$wait_jobs" ] || wait $wait_jobs 2>/dev/null || true

echo
echo "drops by reason (non-zero):"
curl -fs "http://127.0.0.1:$admin/metrics" |
  awk '/^sonde_receiver_dropped_total/ && $2 > 0 {print "  " $0}'
curl -fs "http://127.0.0.1:$admin/metrics" |
  grep -E '^sonde_(receiver_points_total|sink_points_total|sink_dropped_points_total|series |receiver_kernel_dropped_total)' |
  awk '$2 > 0 || /sonde_series/ {print "  " $0}'
echo
echo "good load:"
tail -n 8 "$dir/bench-statsd.txt" "$dir/bench-msgpack.txt"
rss_end=$(awk '/VmRSS/ {printf "%.1f", $2/1024}' "/proc/$agent_pid/status")
echo
if [ -n "$rss_first" ] && python3 -c "import sys; sys.exit(0 if $rss_end > 2 * $rss_first else 1)"; then
  echo "FAIL: RSS grew from ${rss_first} MiB (first minute) to ${rss_end} MiB"
  exit 1
fi
echo "ok: the agent survived ${duration}s; RSS ${rss_first:-?} MiB after the first minute, ${rss_end} MiB at the end"

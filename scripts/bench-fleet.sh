#!/usr/bin/env bash
# The fleet profile store at scale, on Debian's ClickHouse 18.16.
#
# Each mode runs its own clickhouse-server on loopback (free ports, its
# data under target/bench-fleet/, removed at the end unless KEEP=1).
#
#   scripts/bench-fleet.sh --agent [DURATION_S=600]
#     What one agent ships: a cargo build loops (a release build of
#     sonde-profile into a scratch target dir) to keep both cores busy with
#     real stacks, and two agents run side by side at 19 Hz, one with a
#     clickhouse sink and one with only [profiler]. After 60 s of warm-up,
#     over DURATION_S: each agent's CPU (utime + stime, /proc/PID/stat),
#     its VmHWM, and the sink's bytes (sonde_sink_bytes_total, before
#     compression, and sonde_sink_sent_bytes_total) a minute. The agent
#     with the sink keeps its stored periods in
#     target/bench-fleet/profiles, the source of --store.
#
#   scripts/bench-fleet.sh --store [HOSTS=100] [HOURS=24] [RUNS=3]
#     sonde-fleetgen makes HOSTS hosts' HOURS of periods from
#     target/bench-fleet/profiles (seed 1) and loads them, then
#     OPTIMIZE ... FINAL settles the merges and sonde-fleetgen measure
#     prints bytes and rows per host-day and the views' median times.
#     STACKS=new inserts each stack once for the fleet rather than each
#     host's every hour (the tables end the same once merged; the load
#     is shorter, and the stack rows the agents would send are counted).
#
# Needs root (or CAP_PERFMON) for the profiler; figures:
# docs/BENCHMARKS.md, "Fleet profile store".
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:?usage: scripts/bench-fleet.sh --agent [DURATION_S] | --store [HOSTS] [HOURS] [RUNS]}
shift
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
SONDE=${SONDE_BIN:-$CARGO_TARGET_DIR/release/sonde}
FLEETGEN=$CARGO_TARGET_DIR/release/sonde-fleetgen
OUT=$CARGO_TARGET_DIR/bench-fleet
W=$OUT/run.$$
mkdir -p "$W"
cleanup() {
  kill $(jobs -p) 2>/dev/null || true
  wait 2>/dev/null || true
  [ "${KEEP:-0}" = 1 ] || rm -rf "$W"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
HTTP=$(free_port) TCP=$(free_port) INTER=$(free_port)
mkdir -p "$W/ch"
cat >"$W/ch/config.xml" <<EOF
<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>$W/ch/clickhouse.log</log><errorlog>$W/ch/clickhouse.err.log</errorlog><size>20M</size><count>1</count></logger>
  <listen_host>127.0.0.1</listen_host>
  <http_port>$HTTP</http_port>
  <tcp_port>$TCP</tcp_port>
  <interserver_http_port>$INTER</interserver_http_port>
  <path>$W/ch/data/</path>
  <tmp_path>$W/ch/tmp/</tmp_path>
  <user_files_path>$W/ch/user_files/</user_files_path>
  <format_schema_path>$W/ch/format_schemas/</format_schema_path>
  <users_config>$W/ch/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <timezone>UTC</timezone>
  <mark_cache_size>268435456</mark_cache_size>
  <uncompressed_cache_size>0</uncompressed_cache_size>
  <mlock_executable>false</mlock_executable>
</yandex>
EOF
cat >"$W/ch/users.xml" <<EOF
<?xml version="1.0"?>
<yandex>
  <profiles><default>
    <max_memory_usage>8000000000</max_memory_usage>
    <max_threads>2</max_threads>
    <background_pool_size>4</background_pool_size>
  </default></profiles>
  <users><default>
    <password></password>
    <networks><ip>127.0.0.1</ip></networks>
    <profile>default</profile>
    <quota>default</quota>
  </default></users>
  <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors>
    <result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time></interval></default></quotas>
</yandex>
EOF
CH=/usr/sbin/clickhouse-server
[ -x "$CH" ] || CH=clickhouse-server
# Run under a name of its own, so that another job's `pkill
# clickhouse-server` on a shared machine spares it.
ln -s "$(command -v "$CH")" "$W/ch/fleet-ch-server"
(cd "$W/ch" && exec "$W/ch/fleet-ch-server" --config-file="$W/ch/config.xml" >"$W/ch/out" 2>&1) &
for _ in $(seq 100); do
  [ "$(curl -s "127.0.0.1:$HTTP/ping" || true)" = "Ok." ] && break
  sleep 0.2
done
[ "$(curl -s "127.0.0.1:$HTTP/ping")" = "Ok." ] || { cat "$W/ch/out" "$W/ch/clickhouse.err.log"; exit 1; }
chq() { curl -sS --fail-with-body "127.0.0.1:$HTTP/" --data-binary "$1"; }
echo "ClickHouse $(chq 'SELECT version()') on 127.0.0.1:$HTTP, data in $W/ch/data"

cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"; }
metric() { curl -s "127.0.0.1:$1/metrics" | awk -v m="$2" '$1 ~ "^"m"({|$)" { s += $2 } END { printf "%.0f\n", s }'; }

if [ "$MODE" = --agent ]; then
  D=${1:-600}
  [ -n "${SONDE_BIN:-}" ] || cargo build --release --locked -q -p sonde  # each run: no stale binary
  # The load: a release build of sonde-profile, again and again.
  (while :; do
     rm -rf "$W/burn-target"
     CARGO_TARGET_DIR="$W/burn-target" cargo build -q --release --locked -p sonde-profile >/dev/null 2>&1 || true
   done) &
  burn=$!
  for a in sink nosink; do
    port=$(free_port)
    printf '[agent]\nhostname = "bench-%s"\ndata_dir = "%s"\nadmin_listen = "127.0.0.1:%s"\n\n[profiler]\nfrequency = 19\n' \
      "$a" "$W/data-$a" "$port" >"$W/$a.toml"
    [ $a = sink ] && printf '\n[[sinks]]\ntype = "clickhouse"\nurl = "http://127.0.0.1:%s"\ninputs = ["profiles"]\n' "$HTTP" >>"$W/$a.toml"
    "$SONDE" run --config "$W/$a.toml" 2>"$W/$a.log" &
    eval "pid_$a=$! port_$a=$port"
  done
  sleep 60
  c0s=$(cpu_s "$pid_sink") c0n=$(cpu_s "$pid_nosink")
  b0=$(metric "$port_sink" sonde_sink_bytes_total) s0=$(metric "$port_sink" sonde_sink_sent_bytes_total)
  sleep "$D"
  c1s=$(cpu_s "$pid_sink") c1n=$(cpu_s "$pid_nosink")
  b1=$(metric "$port_sink" sonde_sink_bytes_total) s1=$(metric "$port_sink" sonde_sink_sent_bytes_total)
  hwm() { awk '/VmHWM/ { printf "%.1f", $2 / 1024 }' "/proc/$1/status"; }
  awk -v a="$c0s" -v b="$c1s" -v c="$c0n" -v e="$c1n" -v d="$D" -v hs="$(hwm "$pid_sink")" -v hn="$(hwm "$pid_nosink")" \
    'BEGIN { printf "with the sink      %7.3f CPU-s over %d s  %6.3f%% of a core  VmHWM %s MiB\n", b-a, d, (b-a)*100/d, hs;
             printf "without the sink   %7.3f CPU-s over %d s  %6.3f%% of a core  VmHWM %s MiB\n", e-c, d, (e-c)*100/d, hn;
             printf "the sink\x27s share  %7.3f CPU-s            %6.3f%% of a core\n", (b-a)-(e-c), ((b-a)-(e-c))*100/d }'
  awk -v b0="$b0" -v b1="$b1" -v s0="$s0" -v s1="$s1" -v d="$D" \
    'BEGIN { printf "sink bytes a minute: %.0f before compression, %.0f sent\n", (b1-b0)*60/d, (s1-s0)*60/d }'
  curl -s "127.0.0.1:$port_sink/metrics" | grep -E '^sonde_(sink|profiler)_' | grep -v ' 0$' | tr '\n' ' '; echo
  kill "$burn" "$pid_sink" "$pid_nosink" 2>/dev/null || true
  wait "$pid_sink" "$pid_nosink" 2>/dev/null || true
  mkdir -p "$OUT/profiles"
  cp "$W/data-sink/profiles/"*.pb.gz "$OUT/profiles/"
  echo "stored periods: $(ls "$OUT/profiles" | wc -l) in $OUT/profiles"
  chq "SELECT 'rows: samples, stacks, periods', (SELECT count() FROM sonde.profile_samples), (SELECT count() FROM sonde.profile_stacks), (SELECT uniqExact(period) FROM sonde.profile_samples) FORMAT TabSeparated"
  exit 0
fi

HOSTS=${1:-100} HOURS=${2:-24} RUNS=${3:-3}
cargo build --release --locked -q -p sonde-loadgen --bin sonde-fleetgen
"$FLEETGEN" load --profiles "$OUT/profiles" --hosts "$HOSTS" --hours "$HOURS" \
  --url "http://127.0.0.1:$HTTP" --database sonde --seed 1 --stacks "${STACKS:-all}"
# Each partition merged into one part, so the sizes are those the merges
# settle at.
for t in profile_stacks profile_samples; do
  for p in $(chq "SELECT DISTINCT partition FROM system.parts WHERE active AND database = 'sonde' AND table = '$t'"); do
    s=$(date +%s%N)
    [ "$p" = tuple\(\) ] && part= || part=" PARTITION $p"
    chq "OPTIMIZE TABLE sonde.$t$part FINAL"
    echo "OPTIMIZE TABLE sonde.$t$part FINAL: $(( ($(date +%s%N) - s) / 1000000 )) ms"
  done
done
store=clickhouse://127.0.0.1:$HTTP/sonde
"$FLEETGEN" measure --store "$store" --hours 1 --warmup 1 --runs "$RUNS"
"$FLEETGEN" measure --store "$store" --hours 24 --warmup 0 --runs "$RUNS" --all-hosts false
# A day of every host, once (each view reads some 95 M rows).
"$FLEETGEN" measure --store "$store" --hours 24 --warmup 0 --runs 1 --one-host false
du -sh "$W/ch/data"

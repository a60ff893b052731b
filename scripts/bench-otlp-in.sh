#!/usr/bin/env bash
# The whole agent's CPU per point received, OTLP/HTTP against StatsD over
# UDP, for the same points: 1,000 series of a counter with three tags.
# One agent (a StatsD receiver, an OTLP/HTTP receiver, a blackhole sink,
# 10 s windows) pinned to CPU 1, the senders to CPU 0, alternated RUNS
# times for DURATION each:
#   statsd: `sonde bench --protocol statsd --series 1000 --tags 3
#           --mix 1:0:0` at RATE points/s, datagrams of one MTU (1,400
#           bytes, ~30 lines); its report gives the agent's CPU per point;
#   otlp:   tests/python/otlp_load.py posts the same points as 1,000-point
#           protobuf requests (a delta sum, three attributes) at RATE
#           points/s over one keep-alive connection; the agent's CPU from
#           /proc/PID/stat, its points from /metrics.
# Prints each run and the medians. Figures: docs/BENCHMARKS.md, "OTLP in".
#
# Usage: scripts/bench-otlp-in.sh [RATE=200000] [DURATION_S=10] [RUNS=3]
# SONDE_BIN picks the agent (default target/release/sonde, built with
# sonde-bench each run).
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=${1:-200000}
D=${2:-10}
RUNS=${3:-3}
TARGET=${CARGO_TARGET_DIR:-target}
SONDE=${SONDE_BIN:-$TARGET/release/sonde}
# Built every time SONDE_BIN is not given (a no-op when up to date): a
# binary left from an older tree would measure that tree.
if [ -z "${SONDE_BIN:-}" ] || [ ! -x "$(dirname "$SONDE")/sonde-bench" ]; then
  cargo build --release --quiet -p sonde -p sonde-bench
fi
W=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$W"' EXIT
ADMIN=127.0.0.1:18689
cat >"$W/sonde.toml" <<EOF
[agent]
interval = "10s"
admin_listen = "$ADMIN"
data_dir = "$W/data"

[[receivers]]
protocol = "statsd"
listen = "udp://127.0.0.1:18127"

[[receivers]]
protocol = "otlp"
listen = "http://127.0.0.1:14318"

[[sinks]]
type = "blackhole"
EOF
taskset -c 1 "$SONDE" run --config "$W/sonde.toml" 2>"$W/sonde.log" &
PID=$!
for _ in $(seq 100); do grep -q "sonde running" "$W/sonde.log" && break; sleep 0.1; done
grep -q "sonde running" "$W/sonde.log" || { cat "$W/sonde.log"; exit 1; }

statsd() {
  taskset -c 0 "$SONDE" bench --protocol statsd --to udp://127.0.0.1:18127 \
    --series 1000 --tags 3 --mix 1:0:0 --rate "$RATE" --duration "${D}s" \
    --admin "$ADMIN" --pid "$PID" --json >"$W/statsd.json" 2>/dev/null
  python3 -c "import json; r = json.load(open('$W/statsd.json')); print(f\"{r['agent_cpu_us_per_1000_points']:.1f} {r['loss_percent']:.3f}\")"
}
otlp() {
  taskset -c 0 python3 tests/python/otlp_load.py --url http://127.0.0.1:14318/v1/metrics \
    --admin "http://$ADMIN" --pid "$PID" --rate "$RATE" --duration "$D"
}

# Both once first: the series exist before anything is measured.
RATE_SAVE=$RATE; D_SAVE=$D; D=3
statsd >/dev/null; otlp >/dev/null
D=$D_SAVE; RATE=$RATE_SAVE
S=(); O=()
for r in $(seq "$RUNS"); do
  read -r s sl < <(statsd)
  read -r o ol < <(otlp)
  printf 'run %d: statsd %6s ns/point (loss %s%%), otlp %6s ns/point (refused %s%%)\n' "$r" "$s" "$sl" "$o" "$ol"
  S+=("$s"); O+=("$o")
done
python3 - "${S[*]}" "${O[*]}" <<'PY'
import statistics, sys
s = [float(x) for x in sys.argv[1].split()]
o = [float(x) for x in sys.argv[2].split()]
ms, mo = statistics.median(s), statistics.median(o)
print(f"median: statsd {ms:.1f} ns/point, otlp {mo:.1f} ns/point, otlp/statsd {mo / ms:.2f}x")
PY

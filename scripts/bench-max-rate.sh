#!/usr/bin/env bash
# The highest rate sonde sustains under a loss threshold, found the way
# the peers were measured (docs/BENCHMARKS.md, "How the peers were
# measured"): double the rate until loss reaches the threshold, then
# bisect. Agent pinned to CPU 1 (one receive thread), `sonde bench` to
# CPU 0, each step DURATION long.
#
# Usage: scripts/bench-max-rate.sh [--duration 5s] [--max-loss 0.1] [--start 1M] [--steps 4] [--warmup 0s] -- BENCH_ARGS...
#   SONDE_BIN=path runs that binary instead of target/dist/sonde (for A/B).
#   e.g. scripts/bench-max-rate.sh -- --protocol statsd --series 1000
#        scripts/bench-max-rate.sh -- --protocol msgpack --series 10000 --tags 3 --max-bytes 32768
# Prints one line per step and the result: the highest rate whose loss was
# under the threshold, with the agent's CPU per point there.
#
# --warmup D first sends the load at the start rate for D, unmeasured, so
# that the steps measure the steady state: with D of two windows (20s) the
# series exist and both of a worker's window buffers have been used once.
# Without it the first step also pays for creating every series.
#
# The agent's file sink writes to /dev/null: it still encodes every point
# of every window, but the page cache's writeback of ~50 MB of JSON a
# window (kernel threads, on the agent's core too) is not part of the load.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/bench-agent.sh

DURATION=5s
MAX_LOSS=0.1
START=1000000
STEPS=4
WARMUP=
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) DURATION="$2"; shift ;;
    --max-loss) MAX_LOSS="$2"; shift ;;
    --start) START=$(python3 -c "s='$2'.upper(); m={'K':1e3,'M':1e6}; print(int(float(s[:-1])*m[s[-1]]) if s[-1] in m else int(s))"); shift ;;
    --steps) STEPS="$2"; shift ;;
    --warmup) WARMUP="$2"; shift ;;
    --) shift; break ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
BENCH_ARGS=("$@")

WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$WORK"' EXIT
ADMIN=127.0.0.1:18688
bench_agent_config "$WORK/sonde.toml" 10s "$ADMIN" 127.0.0.1:18126 127.0.0.1:19124 /dev/null

cargo build --profile dist --quiet -p sonde -p sonde-bench
SONDE=${SONDE_BIN:-./target/dist/sonde}
taskset -c 1 "$SONDE" run --config "$WORK/sonde.toml" 2> "$WORK/sonde.log" &
SPID=$!
for _ in $(seq 100); do grep -q "sonde running" "$WORK/sonde.log" && break; sleep 0.1; done
case " ${BENCH_ARGS[*]} " in
  *" msgpack "*) TO=udp://127.0.0.1:19124 ;;
  *) TO=udp://127.0.0.1:18126 ;;
esac

# step RATE -> "loss cpu_us_per_point"
step() {
  taskset -c 0 "$SONDE" bench "${BENCH_ARGS[@]}" --to "$TO" --rate "$1" --duration "$DURATION" \
    --admin "$ADMIN" --pid "$SPID" --json > "$WORK/run.json" 2>/dev/null
  python3 - "$WORK/run.json" "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
cpu = r["agent_cpu_us_per_1000_points"] / 1000
print(f"{r['loss_percent']:.3f} {cpu:.4f} {r['send_rate']:.0f}")
PY
}

if [ -n "$WARMUP" ] && [ "$WARMUP" != 0s ]; then
  taskset -c 0 "$SONDE" bench "${BENCH_ARGS[@]}" --to "$TO" --rate "$START" --duration "$WARMUP" \
    --admin "$ADMIN" --pid "$SPID" --json >/dev/null 2>&1
  echo "warmed up: $START points/s for $WARMUP"
fi

good=0; good_cpu=; bad=0
rate=$START
while :; do
  read -r loss cpu sent < <(step "$rate")
  printf 'rate %9d  sent %9d/s  loss %7.3f%%  %.4f us CPU/point\n' "$rate" "$sent" "$loss" "$cpu"
  # A generator that cannot reach the rate ends the doubling too.
  if python3 -c "import sys; sys.exit(0 if $loss < $MAX_LOSS and $sent > 0.95 * $rate else 1)"; then
    good=$rate; good_cpu=$cpu; rate=$((rate * 2))
  else
    bad=$rate; break
  fi
done
for _ in $(seq "$STEPS"); do
  [ "$good" -eq 0 ] && mid=$((bad / 2)) || mid=$(((good + bad) / 2))
  read -r loss cpu sent < <(step "$mid")
  printf 'rate %9d  sent %9d/s  loss %7.3f%%  %.4f us CPU/point\n' "$mid" "$sent" "$loss" "$cpu"
  if python3 -c "import sys; sys.exit(0 if $loss < $MAX_LOSS and $sent > 0.95 * $mid else 1)"; then
    good=$mid; good_cpu=$cpu
  else
    bad=$mid
  fi
done
kill -TERM "$SPID"; wait "$SPID" || true
echo "max rate under ${MAX_LOSS}% loss: $good points/s (${good_cpu:-?} us CPU per point); first failing rate $bad"

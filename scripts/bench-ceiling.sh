#!/usr/bin/env bash
# The machine's UDP receive ceiling, and sonde as a fraction of it.
#
# For each datagram shape, `sonde bench` (pinned to CPU 0) sends flat out
# for DURATION to, in turn:
#   1. tools/trivial-receiver (pinned to CPU 1): recv() or recvmmsg() in a
#      loop, no parsing: the most one core can take off a socket here;
#   2. sonde with one receive thread (pinned to CPU 1).
# and prints what each took per second, and sonde's share of the ceiling.
#
# Usage: scripts/bench-ceiling.sh [--duration 5s] [--shapes "one packed 8k 32k"]
# Shapes:
#   one     StatsD, one line per datagram (~40 bytes)
#   packed  StatsD lines packed into 1400-byte datagrams
#   8k      msgpack bunches of up to 8 KiB
#   32k     msgpack bunches of up to 32 KiB
# Needs gcc, python3 and a dist build (made here).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/bench-agent.sh

DURATION=5s
SHAPES="one packed 8k 32k"
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) DURATION="$2"; shift ;;
    --shapes) SHAPES="$2"; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$WORK"' EXIT
PORT_STATSD=18125
PORT_MSGPACK=19123
ADMIN=127.0.0.1:18687

gcc -O2 -Wall -Wextra -o "$WORK/trivial_receiver" tools/trivial-receiver/trivial_receiver.c
cargo build --profile dist --quiet -p sonde -p sonde-bench
SONDE=./target/dist/sonde

bench_agent_config "$WORK/sonde.toml" 10s "$ADMIN" "127.0.0.1:$PORT_STATSD" "127.0.0.1:$PORT_MSGPACK" "$WORK/points.jsonl"

shape_args() {
  case "$1" in
    one) echo "--protocol statsd --points-per-datagram 1 --series 1000" ;;
    packed) echo "--protocol statsd --series 1000" ;;
    8k) echo "--protocol msgpack --series 10000 --tags 3 --max-bytes 8192" ;;
    32k) echo "--protocol msgpack --series 10000 --tags 3 --max-bytes 32768" ;;
    *) echo "unknown shape $1" >&2; exit 2 ;;
  esac
}
shape_port() {
  case "$1" in one|packed) echo $PORT_STATSD ;; *) echo $PORT_MSGPACK ;; esac
}

# Waits (up to 10 s) until a file has a line matching a pattern.
wait_for_line() {
  for _ in $(seq 100); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "timed out waiting for '$2' in $1" >&2
  return 1
}

printf '%-7s %-9s %14s %14s %10s %10s\n' shape receiver "sent dgram/s" "taken dgram/s" "bytes/dgram" "of ceiling"
for shape in $SHAPES; do
  port=$(shape_port "$shape")
  # shellcheck disable=SC2046
  args=$(shape_args "$shape")
  best=0
  for mode in recv recvmmsg; do
    taskset -c 1 "$WORK/trivial_receiver" "$port" "$mode" > "$WORK/trivial.out" &
    rpid=$!
    wait_for_line "$WORK/trivial.out" ready
    # shellcheck disable=SC2086
    taskset -c 0 "$SONDE" bench $args --to "udp://127.0.0.1:$port" --duration "$DURATION" \
      --admin none --pid "$rpid" --json > "$WORK/bench.json" 2>/dev/null
    wait "$rpid"
    line=$(python3 - "$WORK/bench.json" "$WORK/trivial.out" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))
t = dict(kv.split("=") for kv in open(sys.argv[2]).read().split("\n")[1].split())
sent = b["datagrams_sent"] / b["seconds"]
taken = int(t["datagrams"]) / max(float(t["seconds"]), 1e-9)
size = int(t["bytes"]) / max(int(t["datagrams"]), 1)
print(f"{sent:.0f} {taken:.0f} {size:.0f}")
PY
)
    read -r sent taken size <<< "$line"
    printf '%-7s %-9s %14s %14s %10s %10s\n' "$shape" "$mode" "$sent" "$taken" "$size" "-"
    if [ "${taken%.*}" -gt "$best" ]; then best=${taken%.*}; fi
  done

  taskset -c 1 "$SONDE" run --config "$WORK/sonde.toml" 2> "$WORK/sonde.log" &
  spid=$!
  wait_for_line "$WORK/sonde.log" "sonde running"
  # shellcheck disable=SC2086
  taskset -c 0 "$SONDE" bench $args --to "udp://127.0.0.1:$port" --duration "$DURATION" \
    --admin "$ADMIN" --pid "$spid" --json > "$WORK/bench.json" 2>/dev/null
  kill -TERM "$spid"; wait "$spid" || true
  python3 - "$WORK/bench.json" "$best" "$shape" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))
best = float(sys.argv[2])
sent = b["datagrams_sent"] / b["seconds"]
share = (b["points_accounted"] or 0) / max(b["points_sent"], 1)
taken = sent * share
size = 0
print(f"{sys.argv[3]:<7} {'sonde':<9} {sent:>14.0f} {taken:>14.0f} {'':>10} {100 * taken / best:>9.1f}%"
      f"   loss {b['loss_percent']:.2f}%, {b['agent_cpu_us_per_1000_points']:.1f} us CPU per 1000 points")
PY
done

#!/usr/bin/env bash
# Same-run A/B of two `sonde` binaries on the whole agent: agent CPU per
# point under one fixed `sonde bench` load, runs alternated A B B A A B ...
# so drift in the machine's load falls on both alike. Each run starts a
# fresh agent (pinned to CPU 1, file sink to /dev/null, 10 s window) and drives it from
# CPU 0 with the generator GEN (default: binary A, so the load is the same
# for both), then prints every run and the median of each binary.
#
# Usage: scripts/ab-agent-cpu.sh [--runs N] A_BINARY B_BINARY -- BENCH_ARGS...
#   e.g. scripts/ab-agent-cpu.sh --runs 5 target/dist/sonde target/pgo/sonde \
#          -- --protocol statsd --series 1000 --rate 1M --duration 5s
# Ports 38126 (StatsD), 39124 (msgpack), 38688 (admin); PORT_BASE moves them.
#   WARMUP="RATE DURATION" first sends the same load at RATE for DURATION,
#   unmeasured, so that the run measures the steady state (e.g. "2.5M 20s":
#   every series exists and both window buffers have been used once).
# Also prints each binary's median loss, and kernel drops of each run.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/bench-agent.sh
RUNS=3
[[ ${1:-} == --runs ]] && { RUNS=$2; shift 2; }
A=$1 B=$2
shift 2
[[ ${1:-} == -- ]] && shift
GEN=${GEN:-$A}
BASE=${PORT_BASE:-38000}
STATSD=127.0.0.1:$((BASE + 126)) MSGPACK=127.0.0.1:$((BASE + 1124)) ADMIN=127.0.0.1:$((BASE + 688))
case " $* " in *" msgpack "*) TO=udp://$MSGPACK ;; *) TO=udp://$STATSD ;; esac
work=$(mktemp -d)
trap 'kill "${agent:-}" 2>/dev/null || true; rm -rf "$work"' EXIT
bench_agent_config "$work/sonde.toml" 10s "$ADMIN" "$STATSD" "$MSGPACK" /dev/null
one() { # binary label bench-args... -> one line: label cpu_us_per_point loss%
    local bin=$1 label=$2
    shift 2
    taskset -c 1 "$bin" run --config "$work/sonde.toml" 2>"$work/agent.log" &
    agent=$!
    for _ in $(seq 100); do grep -q "sonde running" "$work/agent.log" && break; sleep 0.1; done
    if [[ -n ${WARMUP:-} ]]; then
        read -r wrate wdur <<<"$WARMUP"
        local warm=() skip=
        for a in "$@"; do # the load's own --rate and --duration give way
            if [[ -n $skip ]]; then skip=; continue; fi
            case $a in --rate | --duration) skip=1 ;; *) warm+=("$a") ;; esac
        done
        taskset -c 0 "$GEN" bench --to "$TO" --admin "$ADMIN" --pid "$agent" --json "${warm[@]}" \
            --rate "$wrate" --duration "$wdur" >/dev/null 2>&1
    fi
    taskset -c 0 "$GEN" bench --to "$TO" --admin "$ADMIN" --pid "$agent" --json "$@" >"$work/run.json" 2>/dev/null
    kill -TERM "$agent"; wait "$agent" || true; agent=
    python3 -c "
import json; r = json.load(open('$work/run.json'))
print('$label', f\"{r['agent_cpu_us_per_1000_points'] / 1000:.4f}\", f\"{r['loss_percent']:.3f}\", r['kernel_rcvbuf_drops'])"
}
for i in $(seq "$RUNS"); do
    if (( i % 2 )); then order="A B"; else order="B A"; fi
    for x in $order; do
        if [[ $x == A ]]; then one "$A" A "$@"; else one "$B" B "$@"; fi >>"$work/all"
        tail -n1 "$work/all" | awk -v n="$(wc -l <"$work/all")" '{printf "run %-2d %s  %s us CPU/point  loss %s%%  kernel drops %s\n", n, $1, $2, $3, $4}'
    done
done
python3 - "$work/all" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {k: statistics.median(float(r[1]) for r in rows if r[0] == k) for k in "AB"}
loss = {k: statistics.median(float(r[2]) for r in rows if r[0] == k) for k in "AB"}
print(f"median A {med['A']:.4f}  B {med['B']:.4f} us CPU/point  (B/A {med['B'] / med['A'] - 1:+.1%})")
print(f"median loss A {loss['A']:.3f}%  B {loss['B']:.3f}%")
PY

#!/usr/bin/env bash
# What [host_metrics] costs: the agent without it and with it (10 s
# interval, every group, the top 10 processes), each for DURATION_S after
# a warm-up, alternated RUNS times (the first of each pair swapped every
# run). Both agents have one idle StatsD receiver on loopback and a
# blackhole sink, 10 s windows.
#
# Per agent: CPU seconds over the run (utime + stime of /proc/PID/stat,
# every thread) as a % of one core, peak RSS (VmHWM of /proc/PID/status)
# at the end; for the agent with the input, the CPU of its two threads
# (host-metrics, the collector, and host-metrics-wo, its worker) from
# /proc/PID/task/TID/stat, and that per collection. Prints each run and
# the medians.
#
# Usage: scripts/bench-host-metrics.sh [DURATION_S=300] [RUNS=3]
# HOST_METRICS_EXTRA adds keys to the section (e.g. "tcp = true").
# SONDE_BIN picks the binary (default: target/release/sonde, built each
# run). Figures: docs/BENCHMARKS.md, "Host metrics".
set -euo pipefail
cd "$(dirname "$0")/.."
D=${1:-300}
RUNS=${2:-3}
WARMUP=${WARMUP:-15}
TARGET=${CARGO_TARGET_DIR:-target}
SONDE=${SONDE_BIN:-$TARGET/release/sonde}
# Built every time SONDE_BIN is not given (a no-op when up to date): a
# binary left from an older tree would measure that tree.
[ -n "${SONDE_BIN:-}" ] || cargo build --release --quiet -p sonde --bin sonde
W=$(mktemp -d)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$W"' EXIT
TCK=$(getconf CLK_TCK)

config() { # name, port, with (0 or 1)
  {
    printf '[agent]\ninterval = "10s"\nadmin_listen = ""\ndata_dir = "%s/%s-data"\n\n' "$W" "$1"
    printf '[[receivers]]\nprotocol = "statsd"\nlisten = "udp://127.0.0.1:%s"\n\n' "$2"
    printf '[[sinks]]\ntype = "blackhole"\n\n'
    if [ "$3" = 1 ]; then printf '[host_metrics]\ninterval = "10s"\n%s\n' "${HOST_METRICS_EXTRA:-}"; fi
  } >"$W/$1.toml"
}
config without 28931 0
config with 28932 1

ticks() { # pid: utime + stime
  awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"
}
thread_ticks() { # pid: the host-metrics threads' utime + stime
  local t total=0
  for t in /proc/"$1"/task/*; do
    case "$(cat "$t/comm" 2>/dev/null)" in
      host-metrics*) total=$((total + $(awk '{ sub(/.*\) /, ""); print $12 + $13 }' "$t/stat"))) ;;
    esac
  done
  echo "$total"
}

one() { # name: runs the agent, prints "cpu% hwm_kib thread_ticks"
  "$SONDE" run --config "$W/$1.toml" >"$W/$1.log" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  sleep "$WARMUP"
  local t0 h0
  t0=$(ticks "$pid"); h0=$(thread_ticks "$pid")
  sleep "$D"
  local t1 h1 hwm
  t1=$(ticks "$pid"); h1=$(thread_ticks "$pid")
  hwm=$(awk '/^VmHWM/ { print $2 }' "/proc/$pid/status")
  kill -TERM "$pid"; wait "$pid" || true
  awk -v a="$t0" -v b="$t1" -v d="$D" -v hz="$TCK" -v m="$hwm" -v h=$((h1 - h0)) \
    'BEGIN { printf "%.4f %d %d\n", (b - a) / hz * 100 / d, m, h }'
}

: >"$W/results"
for run in $(seq "$RUNS"); do
  if [ $((run % 2)) = 1 ]; then order="without with"; else order="with without"; fi
  for m in $order; do
    r=$(one "$m")
    echo "$m $r" >>"$W/results"
    read -r cpu hwm th <<<"$r"
    printf 'run %d %-8s CPU %.4f%% of a core  VmHWM %.1f MiB  host-metrics threads %d ticks\n' \
      "$run" "$m" "$cpu" "$(echo "$hwm / 1024" | bc -l)" "$th"
  done
done
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
for m in without with; do
  cpu=$(awk -v m="$m" '$1 == m { print $2 }' "$W/results" | median)
  hwm=$(awk -v m="$m" '$1 == m { print $3 }' "$W/results" | median)
  printf 'median %-8s CPU %.4f%% of a core  VmHWM %.2f MiB\n' "$m" "$cpu" "$(echo "$hwm / 1024" | bc -l)"
done
th=$(awk '$1 == "with" { print $4 }' "$W/results" | median)
collections=$((D / 10))
awk -v t="$th" -v hz="$TCK" -v d="$D" -v n="$collections" \
  'BEGIN { printf "median host-metrics threads: %.4f%% of a core, %.2f ms of CPU per collection (%d collections)\n", t / hz * 100 / d, t / hz * 1000 / n, n }'

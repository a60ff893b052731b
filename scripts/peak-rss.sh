#!/usr/bin/env bash
# Whole-agent peak RSS under sustained StatsD load, one run per series count.
#
#   scripts/peak-rss.sh [BINARY] [SERIES...]
#
# Starts BINARY (default target/dist/sonde) pinned to CPU 1 with a 5 s
# window, a file sink in a temporary directory, StatsD on UDP loopback and
# the admin server on ports away from the defaults (18125, 18686), so it
# can run beside an agent on the default ports. Then runs the load
# generator on CPU 0 (`--tags 3 --rate 500k --duration 12s`, two flushes)
# and prints the agent's VmHWM (peak RSS) and its RSS when idle, both in
# KiB, and the points the file sink wrote. VERBOSE=1 adds the generator's
# report (loss, CPU) after each row.
set -euo pipefail
bin=${1:-target/dist/sonde}
shift || true
if [[ $# -gt 0 ]]; then counts=("$@"); else counts=(10000 100000 250000); fi
statsd_port=${STATSD_PORT:-18125}
admin_port=${ADMIN_PORT:-18686}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat >"$dir/sonde.toml" <<TOML
[agent]
interval = "5s"
admin_listen = "127.0.0.1:$admin_port"
data_dir = "$dir"

[[receivers]]
protocol = "statsd"
listen = "udp://127.0.0.1:$statsd_port"

[[sinks]]
type = "file"
path = "$dir/points.jsonl"
TOML
printf '%-8s %-12s %-12s %s\n' series idle_kib peak_kib sink_lines
for n in "${counts[@]}"; do
    rm -f "$dir/points.jsonl"
    taskset -c 1 "$bin" run --config "$dir/sonde.toml" 2>"$dir/agent.log" &
    pid=$!
    for _ in $(seq 50); do
        grep -q VmRSS "/proc/$pid/status" 2>/dev/null && ss -lun | grep -q ":$statsd_port " && break
        sleep 0.1
    done
    sleep 0.5
    idle=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
    taskset -c 0 "$bin" bench --to "udp://127.0.0.1:$statsd_port" --admin "127.0.0.1:$admin_port" \
        --pid "$pid" --series "$n" --tags 3 --rate 500k --duration 12s >"$dir/bench.out" 2>&1
    # Let the window that was open when the load stopped flush too.
    sleep 6
    peak=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
    kill -INT "$pid"
    wait "$pid" || true
    printf '%-8s %-12s %-12s %s\n' "$n" "$idle" "$peak" "$(wc -l <"$dir/points.jsonl")"
    [[ -n "${VERBOSE:-}" ]] && cat "$dir/bench.out"
done

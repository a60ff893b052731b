#!/usr/bin/env bash
# The agent's CPU per scraped sample: a real node_exporter scraped every
# second, against a baseline agent that scrapes nothing, both run at once.
#
#   scripts/bench-scrape.sh [BINARY] [SECONDS]
#
# Starts Debian's prometheus-node-exporter on 127.0.0.1:19100, then two
# agents (BINARY, default target/release/sonde) with a 10 s window and a
# file sink writing to /dev/null: one with a [[scrape]] of the exporter
# every 1 s, one with an idle StatsD receiver only. After 15 s of warm-up
# it reads each agent's utime + stime (/proc/PID/stat) and the scrape
# input's bodies and points (/metrics), waits SECONDS (default 180), reads
# them again, and prints the CPU of each, the scrapes, the samples per
# scrape, and the scrape agent's CPU above the baseline per scrape and per
# sample. Ports 19100, 18687, 18688 and 18126 must be free.
set -euo pipefail
bin=${1:-target/release/sonde}
secs=${2:-180}
exporter=/usr/bin/prometheus-node-exporter
dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

"$exporter" --web.listen-address=127.0.0.1:19100 >"$dir/exporter.log" 2>&1 &
pids+=($!)

config() { # NAME ADMIN_PORT INPUT
  mkdir -p "$dir/$1"
  cat >"$dir/$1/sonde.toml" <<TOML
[agent]
interval = "10s"
admin_listen = "127.0.0.1:$2"
data_dir = "$dir/$1"

$3

[[sinks]]
type = "file"
path = "/dev/null"
TOML
}
config scrape 18687 $'[[scrape]]\nurl = "http://127.0.0.1:19100/metrics"\njob = "node"\ninterval = "1s"'
config idle 18688 $'[[receivers]]\nprotocol = "statsd"\nlisten = "udp://127.0.0.1:18126"'
"$bin" run --config "$dir/scrape/sonde.toml" 2>"$dir/scrape.log" &
scrape_pid=$!
pids+=($scrape_pid)
"$bin" run --config "$dir/idle/sonde.toml" 2>"$dir/idle.log" &
idle_pid=$!
pids+=($idle_pid)
sleep 15

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
metric() { # NAME
  curl -s http://127.0.0.1:18687/metrics |
    awk -v n="$1{receiver=\"scrape\",protocol=\"prometheus\"}" '$1 == n {print $2}'
}
hz=$(getconf CLK_TCK)
s0=$(ticks $scrape_pid) i0=$(ticks $idle_pid)
b0=$(metric sonde_receiver_datagrams_total) p0=$(metric sonde_receiver_points_total)
sleep "$secs"
s1=$(ticks $scrape_pid) i1=$(ticks $idle_pid)
b1=$(metric sonde_receiver_datagrams_total) p1=$(metric sonde_receiver_points_total)
samples=$(curl -s http://127.0.0.1:19100/metrics | grep -vc '^#')

awk -v s=$((s1 - s0)) -v i=$((i1 - i0)) -v hz="$hz" -v secs="$secs" \
  -v scrapes=$((b1 - b0)) -v points=$((p1 - p0)) -v samples="$samples" 'BEGIN {
  cs = s / hz; ci = i / hz; extra = cs - ci
  printf "seconds %d, scrapes %d, samples a scrape %d, points %d\n", secs, scrapes, samples, points
  printf "scrape agent: %.2f CPU-s (%.3f%% of a core); baseline: %.2f CPU-s (%.3f%%)\n", cs, 100 * cs / secs, ci, 100 * ci / secs
  printf "above baseline: %.1f us a scrape, %.3f us a sample\n", 1e6 * extra / scrapes, 1e6 * extra / (scrapes * samples)
}'

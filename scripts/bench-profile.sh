#!/usr/bin/env bash
# The profiler's own cost and its agreement with perf, on a busy host.
#
# Two CPU-bound C programs (the test suite's hot/cold burner, one built
# with frame pointers and one without) keep both cores busy. Then, in
# turn:
#   sonde profile --duration D --frequency F          (F = 19 and 99)
#   perf record -a -g --call-graph dwarf -F F -- sleep D; perf report
# each one's CPU seconds (user + system, from GNU time, the report
# included for perf) and peak RSS are printed, with the top 10 functions
# of both by self samples.
#
# With --agent, the always-on profiler instead: the agent runs with only
# [profiler] (60 s periods, so the run crosses period ends and writes
# profiles) at 19 and then 99 Hz; after 20 s of warm-up its CPU seconds
# over the next DURATION_S (from /proc/PID/stat: the whole agent, every
# thread), its peak RSS (VmHWM) and its /metrics are printed.
#
# With --churn, the agent's footprint on a host that keeps running new
# binaries: the agent at 19 Hz (60 s periods) while a loop runs one fresh
# copy after another of a short C program (each copy a new file with no
# build id, so a new module to the profiler, removed after it exits);
# every 60 s its RSS, open descriptors and the sonde_profiler_processes,
# _modules and _symbol_cache_entries gauges are printed.
#
# With --build, the agent's footprint on a host running a large build:
# the agent at 19 Hz (PERIOD_S, default 60 s, periods) while `cargo build
# --release -p sonde-config` runs from scratch in a scratch target dir,
# again and again (rustc loads librustc_driver, a 150 MB library, in each
# process); every 10 s its RSS (heap and mapped file) and peak, the
# gauges, and at the end the five files with the most resident pages
# (from /proc/PID/smaps) and the peak RSS (VmHWM).
#
# With --debug-load, the agent's footprint on a host running large debug
# binaries, as a developer's or a CI machine does: the agent at 19 Hz
# (PERIOD_S, default 60 s, periods) while a debug build of sonde
# (target/debug/sonde, about 230 MB with its debug info) takes StatsD
# from a Python sender, and every debug test binary of over 50 MB under
# target/debug/deps (a crate's unit tests, sonde_*) runs its tests in a loop; the
# same lines as --build every 10 s, the top files at the end, the peak
# RSS and the share of a core. Whatever else runs on the host (builds)
# counts too: say what it was with the figures.
#
# Usage: scripts/bench-profile.sh [--agent | --churn | --build | --debug-load] [DURATION_S=60]
# Needs root (or CAP_PERFMON) and linux-perf; figures: docs/BENCHMARKS.md,
# "The profiler".
set -euo pipefail
cd "$(dirname "$0")/.."
AGENT=0 CHURN=0 BUILD=0 DEBUG_LOAD=0
if [ "${1:-}" = --agent ]; then AGENT=1; shift; fi
if [ "${1:-}" = --debug-load ]; then DEBUG_LOAD=1; shift; fi
if [ "${1:-}" = --churn ]; then CHURN=1; shift; fi
if [ "${1:-}" = --build ]; then BUILD=1; shift; fi
D=${1:-60}
SONDE=${SONDE_BIN:-target/dist/sonde}
[ -x "$SONDE" ] || cargo build --profile dist -p sonde
W=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$W"' EXIT
src=crates/sonde/tests/profile/burn.c
cc -O2 -g -fno-omit-frame-pointer -o "$W/burn_fp" "$src"
cc -O2 -g -fomit-frame-pointer -o "$W/burn_nofp" "$src"
"$W/burn_fp" $((D * 6)) >/dev/null &
"$W/burn_nofp" $((D * 6)) >/dev/null &

cost() { # label, then the command; prints CPU-s, % of a core, peak RSS
  local label=$1; shift
  /usr/bin/time -f "%U %S %M" -o "$W/time" "$@" >"$W/out" 2>"$W/err" || { cat "$W/err"; exit 1; }
  read -r u s m <"$W/time"
  awk -v l="$label" -v u="$u" -v s="$s" -v m="$m" -v d="$D" \
    'BEGIN { printf "%-28s %7.3f CPU-s  %6.3f%% of a core  peak RSS %6.1f MiB\n", l, u+s, (u+s)*100/d, m/1024 }'
}

follow() { # pid, admin port, what: its status every 10 s for D, then the
  # largest mappings, its peak RSS and its CPU over the run
  local pid=$1 port=$2 c0
  c0=$(cpu_s "$pid")
  for ((t = 10; t <= D; t += 10)); do
    sleep 10
    status "$t" "$pid" "$port"
  done
  awk '/^[0-9a-f]+-[0-9a-f]+ / { f = $6 } /^Rss:/ { if (f != "") r[f] += $2 } END {
    for (f in r) printf "%8.1f MiB  %s\n", r[f]/1024, f }' "/proc/$pid/smaps" | sort -rn | head -5
  awk -v c="$(cpu_s "$pid")" -v c0="$c0" -v d="$D" -v what="$3" '/VmHWM/ {
    printf "agent [profiler] 19 Hz %s: peak RSS %.1f MiB, %.2f%% of a core\n", what, $2/1024, (c-c0)*100/d }' "/proc/$pid/status"
}
cpu_s() { # utime + stime of a process, in seconds
  awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"
}

status() { # t, pid, admin port: RSS split, peak and the profiler's gauges
  awk -v t="$1" '/VmRSS|VmHWM|RssAnon|RssFile/ { m[$1] = $2 } END {
    printf "%5d s  RSS %6.1f MiB (anon %5.1f, file %5.1f; peak %6.1f)  ", t, m["VmRSS:"]/1024, m["RssAnon:"]/1024, m["RssFile:"]/1024, m["VmHWM:"]/1024 }' "/proc/$2/status"
  curl -s "127.0.0.1:$3/metrics" | awk '/^sonde_profiler_(processes|modules|symbol_cache_entries) / { printf "%s ", $0 } END { print "" }'
}

if [ "$BUILD" = 1 ]; then
  # The build, not the burners, keeps the cores busy.
  kill $(jobs -p); wait || true
  port=18660
  printf '[agent]\ndata_dir = "%s"\nadmin_listen = "127.0.0.1:%s"\n\n[profiler]\nfrequency = 19\nperiod = "%ss"\n' \
    "$W/data" "$port" "${PERIOD_S:-60}" >"$W/agent.toml"
  "$SONDE" run --config "$W/agent.toml" 2>"$W/agent.log" &
  pid=$!
  # Its own session, so that the build's every process is stopped at the end.
  setsid bash -c 'while :; do rm -rf "$1"; cargo build -q --offline --release -p sonde-config --target-dir "$1" || exit 1; done' \
    _ "$W/build" >"$W/build.log" 2>&1 &
  build=$!
  follow "$pid" "$port" "during a build"
  kill -- -$build; kill $pid; wait $pid || true
  exit 0
fi

if [ "$DEBUG_LOAD" = 1 ]; then
  kill $(jobs -p); wait || true
  [ -x target/debug/sonde ] || cargo build -p sonde
  # A crate's unit tests (sonde_<crate>-<hash>) list tests; a binary
  # of the same shape (sonde_logwrite) does not, and is left alone.
  tests=()
  for b in $(find target/debug/deps -maxdepth 1 -type f -executable -name 'sonde_*-*' -size +50M); do
    if "$b" --list 2>/dev/null | grep -q ': test$'; then tests+=("$b"); fi
  done
  [ ${#tests[@]} -gt 0 ] || { echo "no crate unit-test binary over 50 MB in target/debug/deps (cargo test --no-run --lib -p sonde-sinks -p sonde-profiler -p sonde-metrics)"; exit 1; }
  printf '[agent]\ndata_dir = "%s"\nadmin_listen = "127.0.0.1:18671"\n\n[[receivers]]\nprotocol = "statsd"\nlisten = "udp://127.0.0.1:18125"\n\n[[sinks]]\ntype = "blackhole"\n' \
    "$W/work" >"$W/work.toml"
  target/debug/sonde run --config "$W/work.toml" 2>"$W/work.log" &
  python3 - "$((D + 30))" <<'PY' &
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
end, i = time.time() + float(sys.argv[1]), 0
while time.time() < end:
    s.sendto("\n".join(f"app.metric.{(i + k) % 5000}:{k}|c|#host:h{k % 7},env:prod" for k in range(40)).encode(), ("127.0.0.1", 18125))
    i += 40
PY
  (while :; do for b in "${tests[@]}"; do "$b" -q >/dev/null 2>&1; done; done) &
  port=18672
  printf '[agent]\ndata_dir = "%s"\nadmin_listen = "127.0.0.1:%s"\n\n[profiler]\nfrequency = 19\nperiod = "%ss"\n' \
    "$W/data" "$port" "${PERIOD_S:-60}" >"$W/agent.toml"
  "$SONDE" run --config "$W/agent.toml" 2>"$W/agent.log" &
  pid=$!
  sleep 1
  follow "$pid" "$port" "beside debug binaries"
  kill $pid; wait $pid || true
  exit 0
fi

if [ "$CHURN" = 1 ]; then
  cc -O2 -Wl,--build-id=none -o "$W/short" crates/sonde/tests/profile/shortburn.c
  port=18650
  printf '[agent]\ndata_dir = "%s"\nadmin_listen = "127.0.0.1:%s"\n\n[profiler]\nfrequency = 19\n' \
    "$W/data" "$port" >"$W/agent.toml"
  "$SONDE" run --config "$W/agent.toml" 2>"$W/agent.log" &
  pid=$!
  mkdir "$W/bin"
  (i=0; while :; do i=$((i + 1)); cp "$W/short" "$W/bin/b$i"; "$W/bin/b$i"; rm "$W/bin/b$i"; echo $i >"$W/count"; done) &
  churn=$!
  c0=$(cpu_s $pid)
  for ((t = 60; t <= D; t += 60)); do
    sleep 60
    n=$(ls /proc/$pid/fd | wc -l)
    awk -v t="$t" -v b="$(cat "$W/count" 2>/dev/null || echo 0)" -v n="$n" -v c="$(cpu_s $pid)" -v c0="$c0" '/VmRSS|VmHWM|RssAnon|RssFile/ { m[$1] = $2 } END {
      printf "%5d s  %5d binaries run  RSS %6.1f MiB (anon %5.1f, file %5.1f; peak %6.1f)  fds %4d  CPU %.2f%% of a core  ", t, b, m["VmRSS:"]/1024, m["RssAnon:"]/1024, m["RssFile:"]/1024, m["VmHWM:"]/1024, n, (c-c0)*100/t }' "/proc/$pid/status"
    curl -s "127.0.0.1:$port/metrics" | awk '/^sonde_profiler_(processes|modules|symbol_cache_entries|samples_total) / { printf "%s ", $0 } END { print "" }'
  done
  kill $churn; kill $pid; wait $pid || true
  exit 0
fi

if [ "$AGENT" = 1 ]; then
  for F in 19 99; do
    port=$((18600 + F))
    printf '[agent]\ndata_dir = "%s"\nadmin_listen = "127.0.0.1:%s"\n\n[profiler]\nfrequency = %s\n' \
      "$W/data$F" "$port" "$F" >"$W/agent$F.toml"
    "$SONDE" run --config "$W/agent$F.toml" 2>"$W/agent$F.log" &
    pid=$!
    sleep 20
    c0=$(cpu_s $pid)
    sleep "$D"
    c1=$(cpu_s $pid)
    hwm=$(awk '/VmHWM/ { print $2 }' "/proc/$pid/status")
    awk -v f="$F" -v a="$c0" -v b="$c1" -v d="$D" -v m="$hwm" \
      'BEGIN { printf "agent [profiler] %3d Hz  %7.3f CPU-s over %d s  %6.3f%% of a core  peak RSS %6.1f MiB\n", f, b-a, d, (b-a)*100/d, m/1024 }'
    curl -s "127.0.0.1:$port/metrics" | grep '^sonde_profiler' | tr '\n' ' '; echo
    kill $pid; wait $pid || true
    ls "$W/data$F/profiles"
  done
  exit 0
fi

for F in 19 99; do
  cost "sonde profile ${F} Hz" "$SONDE" profile --duration "${D}s" --frequency "$F" --top 10
  cp "$W/out" "$W/sonde.$F"
  cost "perf record dwarf ${F} Hz" perf record -q -o "$W/perf.data" -a -g --call-graph dwarf -F "$F" -- sleep "$D"
  cost "perf report (${F} Hz data)" perf report -i "$W/perf.data" --no-children --sort sym -g none --stdio --percent-limit 0.5
  cp "$W/out" "$W/perf.$F"
  echo "-- top 10, sonde ${F} Hz"; sed -n '3,12p' "$W/sonde.$F"
  echo "-- top 10, perf ${F} Hz"; grep -v '^#' "$W/perf.$F" | grep -v '^$' | head -10
done

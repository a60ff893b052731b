#!/usr/bin/env bash
# Instructions per point of OTLP metrics in (read and map a request in
# place, record its points) against the StatsD receiver's (parse, record)
# for the same 1,000 points, counted by callgrind: deterministic, so it
# compares two versions on a noisy machine. Runs the per_point example
# with 1 and 3 rounds of each path and divides the difference by the
# points of 2 rounds; the first round also creates the series.
#
# Usage: scripts/callgrind-otlp.sh   (figures: docs/BENCHMARKS.md, "OTLP in")
# Builds into $CARGO_TARGET_DIR (default target) in the cargo profile
# $SONDE_PROFILE (default release).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)"; exit 1; }
profile=${SONDE_PROFILE:-release}
cargo build --profile "$profile" --quiet -p sonde-otlp-in --example per_point
BIN=${CARGO_TARGET_DIR:-target}/$profile/examples/per_point
count() { # mode rounds -> "instructions points"
  local out
  out=$(mktemp)
  valgrind --tool=callgrind --callgrind-out-file="$out" "$BIN" "$1" "$2" 2>/dev/null >"$out.points"
  echo "$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}') $(cat "$out.points")"
  rm -f "$out" "$out.points"
}
declare -A per
for mode in statsd map otlp; do
  read -r i1 p1 < <(count "$mode" 1)
  read -r i3 p3 < <(count "$mode" 3)
  per[$mode]=$(python3 -c "print(round(($i3 - $i1) / ($p3 - $p1), 1))")
  printf '%-8s %8s instr/point\n' "$mode" "${per[$mode]}"
done
python3 -c "print(f'otlp/statsd {${per[otlp]} / ${per[statsd]}:.2f}x; record {${per[otlp]} - ${per[map]}:.1f} of otlp')"

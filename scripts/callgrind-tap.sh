#!/usr/bin/env bash
# Instructions per point of a receive worker's whole stage (parse, record,
# counters) while nobody watches, while `sonde top` counts metric names,
# and while `sonde tap` samples one metric name in 100 or every point,
# counted by callgrind: deterministic, so the differences are the taps'
# own. Runs the ingest_tap example with 1 and 3 passes over the same
# datagrams and divides the difference by the points of 2 passes.
#
# Usage: scripts/callgrind-tap.sh [MODE ...]   (default: none top tap tap-all)
# Builds into $CARGO_TARGET_DIR (default target) in the cargo profile
# $SONDE_PROFILE (default dist, what ships).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)"; exit 1; }
profile=${SONDE_PROFILE:-dist}
cargo build --profile "$profile" --quiet -p sonde-metrics --example ingest_tap
BIN=${CARGO_TARGET_DIR:-target}/$profile/examples/ingest_tap
count() { # mode passes -> "instructions points"
  local out
  out=$(mktemp)
  valgrind --tool=callgrind --callgrind-out-file="$out" "$BIN" "$1" 10000 "$2" 2>/dev/null | cut -d' ' -f1 >"$out.points"
  echo "$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}') $(cat "$out.points")"
  rm -f "$out" "$out.points"
}
printf '%-10s %14s\n' "mode" "instr/point"
for mode in "${@:-none top tap tap-all}"; do
  for m in $mode; do
    read -r i1 p1 < <(count "$m" 1)
    read -r i3 p3 < <(count "$m" 3)
    printf '%-10s %14.1f\n' "$m" "$(python3 -c "print(($i3 - $i1) / ($p3 - $p1))")"
  done
done

#!/usr/bin/env bash
# Instructions per point of parse + record into live series, counted by
# callgrind: deterministic, so it compares two versions of the hot path on
# a noisy machine. Runs the hot_path example with 1 and 3 passes over the
# same datagrams and divides the difference by the points of 2 passes.
#
# Usage: scripts/callgrind-hot-path.sh [SHAPE ...]   (default: statsd:10000 msgpack:10000 statsd:100000)
# Builds into $CARGO_TARGET_DIR (default target) with the caller's RUSTFLAGS,
# in the cargo profile $SONDE_PROFILE (default dist, what ships; release to
# compare the quick build).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)"; exit 1; }
profile=${SONDE_PROFILE:-dist}
cargo build --profile "$profile" --quiet -p sonde-aggregate --example hot_path
BIN=${CARGO_TARGET_DIR:-target}/$profile/examples/hot_path
count() { # shape series passes -> "instructions points"
  local out
  out=$(mktemp)
  valgrind --tool=callgrind --callgrind-out-file="$out" "$BIN" "$1" "$2" "$3" 2>/dev/null | cut -d' ' -f1 >"$out.points"
  echo "$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}') $(cat "$out.points")"
  rm -f "$out" "$out.points"
}
printf '%-16s %14s\n' "shape" "instr/point"
for spec in "${@:-statsd:10000 msgpack:10000 statsd:100000}"; do
  for s in $spec; do
    shape=${s%%:*}; series=${s##*:}
    read -r i1 p1 < <(count "$shape" "$series" 1)
    read -r i3 p3 < <(count "$shape" "$series" 3)
    printf '%-16s %14.1f\n' "$s" "$(python3 -c "print(($i3 - $i1) / ($p3 - $p1))")"
  done
done

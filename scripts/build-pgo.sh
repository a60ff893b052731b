#!/usr/bin/env bash
# A profile-guided (PGO) release build of `sonde`, kept out of the default
# `cargo build` and of CI: see docs/benchmarks/LOG.md ("profile-guided
# optimisation") for what it gains and docs/ARCHITECTURE.md.
#
#   scripts/build-pgo.sh            # -> $CARGO_TARGET_DIR/pgo/sonde
#   PGO_HOT_PATH=1 scripts/build-pgo.sh   # also the hot_path example, for callgrind
#
# 1. builds `sonde` (and the hot_path example of sonde-aggregate)
#    instrumented, with -Cprofile-generate, into $T/pgo/instrumented;
# 2. trains it: the hot_path example over StatsD and msgpack datagrams,
#    then the agent (`sonde run`, 2 s windows, file sink) under `sonde
#    bench` load: plain StatsD with 1k series, DogStatsD with 3 tags and
#    100k series, msgpack 32 KiB bunches with 10k series;
#    Only these runs are kept (LLVM_PROFILE_FILE, into $T/pgo/training):
#    the build scripts of the instrumented build are instrumented too;
# 3. merges the raw profiles with llvm-profdata (from rustup's llvm-tools
#    component, added if missing) into $T/pgo/merged.profdata;
# 4. rebuilds from scratch with -Cprofile-use into $T/pgo/optimized (cargo
#    does not see a changed profile, so nothing stale is reused), keeping
#    the dist profile (fat LTO, one codegen unit), and copies the binary
#    to $T/pgo/sonde.
# $T is $CARGO_TARGET_DIR, default `target`. The ports used while training
# (28126, 29124, admin 28688) can be moved with PGO_PORT_BASE (default 28000).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/bench-agent.sh
T=${CARGO_TARGET_DIR:-target}
mkdir -p "$T/pgo"
T=$(cd "$T" && pwd)
PGO=$T/pgo
BASE=${PGO_PORT_BASE:-28000}
STATSD=127.0.0.1:$((BASE + 126))
MSGPACK=127.0.0.1:$((BASE + 1124))
ADMIN=127.0.0.1:$((BASE + 688))

# llvm-profdata must match rustc's LLVM: take it from rustup's llvm-tools.
sysroot=$(rustc --print sysroot)
host=$(rustc -vV | awk '/^host:/ {print $2}')
PROFDATA=$sysroot/lib/rustlib/$host/bin/llvm-profdata
if [[ ! -x $PROFDATA ]]; then
    rustup component add llvm-tools
fi

build() { # target-dir rustflags
    CARGO_TARGET_DIR=$1 RUSTFLAGS="${RUSTFLAGS:-} $2" cargo build --profile dist --locked -p sonde -p sonde-bench
    if [[ -n ${PGO_HOT_PATH:-} || $1 == "$PGO/instrumented" ]]; then
        CARGO_TARGET_DIR=$1 RUSTFLAGS="${RUSTFLAGS:-} $2" \
            cargo build --profile dist --locked -p sonde-aggregate --example hot_path
    fi
}

echo "== 1/4 instrumented build" >&2
# (The build scripts of this build write into $PGO/profiles; ignored.)
build "$PGO/instrumented" "-Cprofile-generate=$PGO/profiles"

echo "== 2/4 training" >&2
I=$PGO/instrumented/dist
rm -rf "$PGO/training"
export LLVM_PROFILE_FILE=$PGO/training/%m_%p.profraw
for run in "statsd 10000 3" "msgpack 10000 3" "statsd 100000 1"; do
    # shellcheck disable=SC2086
    "$I/examples/hot_path" $run >/dev/null
done
work=$(mktemp -d)
trap 'kill "${agent:-}" 2>/dev/null || true; rm -rf "$work"' EXIT
bench_agent_config "$work/sonde.toml" 2s "$ADMIN" "$STATSD" "$MSGPACK" "$work/points.jsonl"
"$I/sonde" run --config "$work/sonde.toml" 2>"$work/agent.log" &
agent=$!
for _ in $(seq 100); do grep -q "sonde running" "$work/agent.log" && break; sleep 0.1; done
grep -q "sonde running" "$work/agent.log" || { cat "$work/agent.log" >&2; exit 1; }
bench() {
    "$I/sonde" bench --admin "$ADMIN" --pid "$agent" --duration 5s "$@" >&2
}
bench --to "udp://$STATSD" --protocol statsd --series 1000 --rate 1M
bench --to "udp://$STATSD" --protocol statsd --series 100000 --tags 3 --rate 500k
bench --to "udp://$MSGPACK" --protocol msgpack --series 10000 --tags 3 --max-bytes 32768 --rate 1M
# SIGTERM: the agent flushes and exits normally, which writes its profile.
kill -TERM "$agent"
wait "$agent"
agent=
unset LLVM_PROFILE_FILE

echo "== 3/4 merging $(find "$PGO/training" -name '*.profraw' | wc -l) raw profiles" >&2
"$PROFDATA" merge -o "$PGO/merged.profdata" "$PGO/training"

echo "== 4/4 optimised build" >&2
rm -rf "$PGO/optimized"
build "$PGO/optimized" "-Cprofile-use=$PGO/merged.profdata"
cp "$PGO/optimized/dist/sonde" "$PGO/sonde"
echo "PGO binary: $PGO/sonde" >&2

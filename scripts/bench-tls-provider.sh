#!/usr/bin/env bash
# rustls' crypto providers side by side, ring (what sonde links) against
# aws-lc-rs, on what the agent does with TLS: a client and a server
# connected in memory (no sockets), built from tools/tls-provider-bench,
# a cargo project of its own so that aws-lc-rs stays out of the agent's
# workspace and Cargo.lock.
#
#   scripts/bench-tls-provider.sh [--callgrind] [bench options...]
#
# Bench options (passed on): --runs N (7), --mib N (512), --handshakes N
# (300), --writes 16,256 (KiB), --suites A,B, --providers A,B,
# --bulk-only, --handshakes-only; `--help` lists them.
#
# How to read it:
# * bulk: CPU-s per GB of application data (the same number as ns per
#   byte), the client's side (encrypt: what the agent pays for a produce
#   request) apart from the server's (decrypt), per cipher suite and write
#   size (a produce request is 64 KiB to 1 MiB, written to rustls whole).
#   Thread CPU time, so a busy machine slows a run more than it moves the
#   figure; the median of the runs, the runs after it, providers
#   alternating run by run. Includes rustls' own copies into and out of
#   its records, which are the same for both providers.
# * handshakes: full TLS 1.3 handshakes (X25519, no resumption, the
#   server's CA-signed certificate verified) per CPU-second of the client
#   and of the server, with an ECDSA P-256 and an RSA-2048 certificate.
# * --callgrind adds instructions per byte of the client's and the
#   server's side (64 MiB, TLS 1.3 AES-128-GCM, 256 KiB writes), counted
#   by valgrind: stable on a noisy machine, but valgrind hides AVX-512 and
#   VAES from the program, so both providers run their AES-NI/AVX code
#   there and not the code they run on the bare CPU (VAES-AVX2 for ring,
#   AVX-512 for aws-lc-rs on a CPU that has it). It shows what rustls
#   itself costs around the cipher, not which provider is faster.
#
# The first line printed says which of AES-NI, PCLMULQDQ, VAES,
# VPCLMULQDQ, AVX2 and AVX-512F the CPU has: both providers pick their
# AES-GCM code by them, so the figures hold for CPUs with the same set.
# Builds into $CARGO_TARGET_DIR (default tools/tls-provider-bench/target).
set -euo pipefail
cd "$(dirname "$0")/.."
callgrind=0
args=()
for a in "$@"; do
  if [[ $a == --callgrind ]]; then callgrind=1; else args+=("$a"); fi
done
manifest=tools/tls-provider-bench/Cargo.toml
cargo build --release --locked --quiet --manifest-path "$manifest"
BIN=${CARGO_TARGET_DIR:-tools/tls-provider-bench/target}/release/tls-provider-bench

echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores; flags:" \
  "$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -x -E 'aes|pclmulqdq|vaes|vpclmulqdq|avx2|avx512f' | tr '\n' ' ')"
case " ${args[*]-} " in
  *" --help "* | *" -h "*) exec "$BIN" --help ;;
esac
"$BIN" --runs 7 --mib 512 --handshakes 300 ${args[@]+"${args[@]}"}

if ((callgrind)); then
  command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)"; exit 1; }
  mib=64
  echo
  echo "callgrind: TLS 1.3 AES-128-GCM, 256 KiB writes, $mib MiB; instructions per byte of application data"
  echo "| provider | client (encrypt) | server (decrypt) |"
  echo "|---|---:|---:|"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  for provider in ring aws-lc-rs; do
    row="| $provider |"
    for side in client_encrypt server_decrypt; do
      valgrind --tool=callgrind --callgrind-out-file="$tmp/out" \
        --toggle-collect="tls_provider_bench::$side" \
        "$BIN" --callgrind --providers "$provider" --suites tls13-aes128gcm \
        --writes 256 --mib "$mib" >"$tmp/stdout" 2>"$tmp/stderr"
      bytes=$(sed -n 's/.*bytes \([0-9]*\):.*/\1/p' "$tmp/stdout")
      instr=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$tmp/stderr")
      row+=" $(python3 -c "print(f'{$instr / $bytes:.2f}')") ($instr) |"
    done
    echo "$row"
  done
fi

#!/usr/bin/env python3
"""Times one split of a 1 KiB tag string: the byte loop (`split_scalar`),
the AVX2 backend and `split` (the backend this CPU gets), by the least
user CPU time of ROUNDS alternated runs of the `tag_split` example
(`ru_utime` from wait4, ns per split). Least-of-N rather than criterion's
median because criterion drifts by 20% from run to run on this shared
machine; alternating puts any drift on all three alike.

Usage: scripts/tag-split-time.py [ROUNDS]   (default 9; x86-64 only)
Builds the example first. Prints ns per split for the benchmark string
(as `tags/split` in benches/parse.rs builds it) and for the `varied`
strings (64 strings with tags of 6 to 33 bytes), and the ratios.
"""
import os
import subprocess
import sys

os.chdir(os.path.join(os.path.dirname(__file__), ".."))
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 9
subprocess.run(["cargo", "build", "--profile", "dist", "--quiet", "-p", "sonde-proto",
                "--example", "tag_split"], check=True)
exe = os.path.join(os.environ.get("CARGO_TARGET_DIR", "target"), "dist/examples/tag_split")
repeats = 1_000_000
variants = {"scalar": ["scalar"], "avx2": ["avx2"], "split": []}
for extra in ([], ["varied"]):
    best = {k: float("inf") for k in variants}
    for _ in range(rounds):
        for name, args in variants.items():
            n = repeats // 8 if name == "scalar" else repeats
            p = subprocess.Popen([exe, "msgpack", "1024", str(n), *args, *extra],
                                 stdout=subprocess.DEVNULL)
            _, status, usage = os.wait4(p.pid, 0)
            if status != 0:
                sys.exit(f"{exe} failed")
            best[name] = min(best[name], usage.ru_utime / n * 1e9)
    label = "varied strings" if extra else "benchmark string"
    print(f"{label:17} scalar {best['scalar']:7.1f} ns  avx2 {best['avx2']:6.1f} ns  "
          f"split {best['split']:6.1f} ns  scalar/avx2 {best['scalar'] / best['avx2']:5.2f}x  "
          f"scalar/split {best['scalar'] / best['split']:5.2f}x  "
          f"split {1024 / best['split']:.2f} GB/s")

#!/usr/bin/env python3
"""Time per point of parse + record in process, for one or more builds of
the `hot_path` example, alternated so that machine noise hits each alike.

Each round runs every binary with PASSES passes and with BASE passes (1
unless --base-passes), pinned to one CPU; the difference of their user +
system time (from wait4) over the difference of their points is the time
per point of passes BASE+1 to PASSES alone, without datagram generation
or start-up. Prints each round and the median.

A pass is 50,000 points (or one per series, when there are more): at 10k
series, 5 points of each series. With the default BASE of 1, a timer
series is measured over its samples 10 to 5 * PASSES: at 21 passes
most of them while its sketch still fills its raw samples or has just
started its buckets. A BASE of 21 or more measures the bucketed steady
state that a series with thousands of samples a window is in
(docs/benchmarks/LOG.md, "the sketch's start-up in the in-process figure").

Usage: scripts/hot-path-time.py [--rounds N] [--passes P] [--base-passes B] [--cpu C] SHAPE SERIES BIN [BIN ...]
Build a binary with: cargo build --profile dist -p sonde-aggregate --example hot_path
(target/dist/examples/hot_path).
"""
import argparse
import os
import statistics
import subprocess


def run(binary, shape, series, passes, cpu):
    """(cpu seconds, points recorded) of one run."""
    proc = subprocess.Popen(
        ["taskset", "-c", str(cpu), binary, shape, str(series), str(passes)],
        stdout=subprocess.PIPE,
        text=True,
    )
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"{binary} exited with status {status}")
    return usage.ru_utime + usage.ru_stime, int(out.split()[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--passes", type=int, default=21)
    ap.add_argument("--base-passes", type=int, default=1)
    ap.add_argument("--cpu", type=int, default=1)
    ap.add_argument("shape")
    ap.add_argument("series", type=int)
    ap.add_argument("binaries", nargs="+")
    a = ap.parse_args()
    results = {b: [] for b in a.binaries}
    for r in range(a.rounds):
        for b in a.binaries:
            t_many, p_many = run(b, a.shape, a.series, a.passes, a.cpu)
            t_one, p_one = run(b, a.shape, a.series, a.base_passes, a.cpu)
            ns = (t_many - t_one) / (p_many - p_one) * 1e9
            results[b].append(ns)
            print(f"round {r + 1}  {ns:7.1f} ns/point  {b}", flush=True)
    print()
    for b, v in results.items():
        print(f"median {statistics.median(v):7.1f} ns/point  ({', '.join(f'{x:.1f}' for x in v)})  {b}")


if __name__ == "__main__":
    main()

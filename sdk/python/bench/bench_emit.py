#!/usr/bin/env python3
"""Cost of one emit on the caller's thread, and what it keeps allocated.

    python3 sdk/python/bench/bench_emit.py [--number N] [--repeat R]

For each case: the median and best of R timeit runs of N emits, in ns per
emit; then, with tracemalloc, the bytes one emit leaves allocated in steady
state (the buffered point; temporaries are freed before the next emit and
do not show). A last line gives the flusher's cost per point (sum, encode,
send), which runs on the background thread.

The client sends to a UDP socket bound here and never read, so sends
succeed and the kernel discards what overflows; the flusher is kept idle
during timing (long interval, buffer larger than N) so the figures are the
emit path alone. Not run by pytest.
"""

from __future__ import annotations

import argparse
import itertools
import os
import socket
import statistics
import sys
import timeit
import tracemalloc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from sonde_client import Client  # noqa: E402

TAGS_DICT = {"host": "web-1", "dc": "eu-west", "route": "checkout"}
TAGS_PAIRS = (("host", "web-1"), ("dc", "eu-west"), ("route", "checkout"))
# 500 series in turn, as a hot loop over many keys would emit them; next()
# on the cycle costs a few tens of ns of its own, included in the figure.
SERIES = itertools.cycle([f"bench.requests.{i}" for i in range(500)])

CASES = [
    ("counter, 3 tags (dict)", "c.counter('bench.requests', 1, tags=TAGS_DICT)"),
    ("counter, 3 tags (pairs)", "c.counter('bench.requests', 1, tags=TAGS_PAIRS)"),
    ("counter, 500 series", "c.counter(next(SERIES), 1, tags=TAGS_DICT)"),
    ("store, 3 tags (dict)", "c.store('bench.depth', 7, tags=TAGS_DICT)"),
    ("timer, no tags", "c.timer('bench.latency', 12.5)"),
    ("timer, 3 tags (dict)", "c.timer('bench.latency', 12.5, tags=TAGS_DICT)"),
    ("timed() block", "with c.timed('bench.block'):\n    pass"),
]


def bytes_per_emit(c: Client, stmt: str, n: int) -> float:
    code = compile(stmt, "<bench>", "exec")
    env = {"c": c, "TAGS_DICT": TAGS_DICT, "TAGS_PAIRS": TAGS_PAIRS, "SERIES": SERIES}
    exec(code, env)  # warm the name cache before measuring
    c.flush()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(n):
            exec(code, env)
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    c.flush()
    return (after - before) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--number", type=int, default=100_000, help="emits per timeit run")
    ap.add_argument("--repeat", type=int, default=5, help="timeit runs per case")
    args = ap.parse_args()

    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.bind(("127.0.0.1", 0))
    address = f"udp://127.0.0.1:{sink.getsockname()[1]}"
    c = Client(address, prefix="bench", buffer_size=args.number + 1, flush_interval=3600)
    env = {"c": c, "TAGS_DICT": TAGS_DICT, "TAGS_PAIRS": TAGS_PAIRS, "SERIES": SERIES}

    # Warm-up: the first N buffered points make the allocator take fresh
    # memory from the OS; without this the first case pays for it.
    for _ in range(args.number):
        c.timer("bench.warmup", 1.0, tags=TAGS_DICT)
    c.flush()

    print(f"python {sys.version.split()[0]}, {args.repeat} runs of {args.number} emits per case")
    print(f"{'case':<26} {'median ns':>10} {'best ns':>10} {'bytes kept':>11}")
    for label, stmt in CASES:
        # setup runs before every run: it empties the buffer so no run drops.
        runs = timeit.Timer(stmt, setup="c.flush()", globals=env).repeat(
            repeat=args.repeat, number=args.number
        )
        per = [r / args.number * 1e9 for r in runs]
        kept = bytes_per_emit(c, stmt, args.number)
        print(f"{label:<26} {statistics.median(per):>10.0f} {min(per):>10.0f} {kept:>11.1f}")
    assert c.dropped == 0, f"{c.dropped} points dropped: the figures above are not emits"

    # The background side: sum, encode and send, per point.
    flush_runs = []
    for _ in range(args.repeat):
        for _ in range(args.number):
            c.timer("bench.latency", 12.5, tags=TAGS_DICT)
        flush_runs.append(timeit.timeit(c.flush, number=1) / args.number * 1e9)
    print(f"{'flush, per timer point':<26} {statistics.median(flush_runs):>10.0f} {min(flush_runs):>10.0f}")
    c.close()
    sink.close()


if __name__ == "__main__":
    main()

"""A Python burner for tests/profile_runtimes.rs: `hot` does 70% of the
work and `cold` 30%, until the given number of seconds has passed.
Run it with `python3.12 -X perf` so that CPython writes the perf map
that names these functions (/tmp/perf-PID.map).

Each round's length is drawn at random (1 to 16 times the base), so that
a sampler ticking at a fixed rate does not lock onto one phase of the
round: a fixed round of about 10 ms, sampled at 99 Hz, drifts through its
phase so slowly that a few seconds see mostly one function."""

import random
import sys
import time


def hot(n):
    x = 0
    for i in range(n):
        x = (x * 31 + i) & 0xFFFFFFFF
    return x


def cold(n):
    x = 0
    for i in range(n):
        x = (x * 17 + i) & 0xFFFFFFFF
    return x


def work(seconds):
    end = time.monotonic() + seconds
    ready = False
    while time.monotonic() < end:
        scale = random.randint(1, 16)
        hot(7_000 * scale)
        cold(3_000 * scale)
        if not ready:
            # Both functions have run, so both are in the perf map.
            print("ready", flush=True)
            ready = True


if __name__ == "__main__":
    work(float(sys.argv[1]))

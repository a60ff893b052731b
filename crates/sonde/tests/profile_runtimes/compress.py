# A Python program for the hot-spot classes of tests/profile_runtimes.rs:
# its CPU goes to the zlib module, that is to libz (class compression).
#
# usage: python3 compress.py SECONDS   (exits by itself after SECONDS)
# prints "ready" once running.
import random
import sys
import time
import zlib

rng = random.Random(7)
data = bytes(rng.choice(b"abcdefghijklmnop") for _ in range(256 * 1024))
end = time.monotonic() + float(sys.argv[1])
zlib.compress(data, 6)
print("ready", flush=True)
while time.monotonic() < end:
    zlib.compress(data, 6)

"""Helpers shared by the SDK tests: a msgpack reader for what the SDK
writes, local receiving sockets, and waiting on conditions with deadlines.

The reader is independent of the SDK's encoder on purpose, so a bug in the
encoder cannot cancel itself out in a round trip.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Callable, List, Optional, Tuple, TypeVar

T = TypeVar("T")

Message = Tuple[str, str, str, str, str, str]


def wait_for(what: str, cond: Callable[[], T], timeout: float = 10.0) -> T:
    """Polls ``cond`` until it returns something truthy, failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_tcp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _read_str(data: bytes, pos: int) -> Tuple[str, int]:
    b = data[pos]
    if 0xA0 <= b <= 0xBF:
        n, pos = b & 0x1F, pos + 1
    elif b == 0xD9:
        n, pos = data[pos + 1], pos + 2
    elif b == 0xDA:
        n, pos = int.from_bytes(data[pos + 1 : pos + 3], "big"), pos + 3
    elif b == 0xDB:
        n, pos = int.from_bytes(data[pos + 1 : pos + 5], "big"), pos + 5
    else:
        raise AssertionError(f"byte {b:#x} at {pos} is not a msgpack str")
    end = pos + n
    assert end <= len(data), "str runs past the end of the datagram"
    return data[pos:end].decode("utf-8"), end


def _read_message(data: bytes, pos: int) -> Tuple[Message, int]:
    assert data[pos] == 0x96, f"message at {pos} starts with {data[pos]:#x}, not fixarray(6)"
    pos += 1
    fields = []
    for _ in range(6):
        s, pos = _read_str(data, pos)
        fields.append(s)
    assert fields[0] == "emit"
    return tuple(fields), pos  # type: ignore[return-value]


def decode(data: bytes) -> List[Message]:
    """Reads one datagram (a message or an array16 bunch) into its messages."""
    if data[0] == 0xDC:
        count = int.from_bytes(data[1:3], "big")
        assert count >= 2, "a bunch of fewer than two messages should be a plain message"
        pos, out = 3, []
        for _ in range(count):
            m, pos = _read_message(data, pos)
            out.append(m)
    else:
        m, pos = _read_message(data, 0)
        out = [m]
    assert pos == len(data), f"{len(data) - pos} trailing bytes"
    return out


class DatagramReceiver:
    """A bound unix datagram or UDP socket standing in for the agent."""

    def __init__(self, kind: str, path: Optional[str] = None) -> None:
        self.kind = kind
        self.path = path
        if kind == "unixgram":
            assert path is not None
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self.sock.bind(path)
            self.address = f"unixgram://{path}"
        else:
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.sock.bind(("127.0.0.1", 0))
            self.address = f"udp://127.0.0.1:{self.sock.getsockname()[1]}"
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)

    def recv(self, timeout: float = 5.0) -> bytes:
        """The next datagram; fails the test if none arrives in time."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1 << 17)
        except socket.timeout:
            raise AssertionError(f"no datagram within {timeout}s") from None

    def pending(self) -> List[bytes]:
        """Every datagram already queued, without waiting."""
        self.sock.setblocking(False)
        out = []
        try:
            while True:
                out.append(self.sock.recv(1 << 17))
        except BlockingIOError:
            pass
        return out

    def messages(self) -> List[Message]:
        """Every message already queued, in order."""
        return [m for d in self.pending() for m in decode(d)]

    def read_in_background(self) -> List[bytes]:
        """Starts a thread that drains the socket into the returned list, as
        the agent would; needed once a flush holds more datagrams than the
        receive queue (net.unix.max_dgram_qlen is often 10)."""
        got: List[bytes] = []
        self.sock.settimeout(0.05)

        def drain() -> None:
            while self.sock.fileno() != -1:
                try:
                    got.append(self.sock.recv(1 << 17))
                except socket.timeout:
                    continue
                except OSError:
                    return

        threading.Thread(target=drain, daemon=True).start()
        return got

    def close(self) -> None:
        self.sock.close()
        if self.path is not None and os.path.exists(self.path):
            os.unlink(self.path)


def msg(kind: str, name: str, value: str, tags: str = "", ts: str = "") -> Message:
    return ("emit", kind, name, value, tags, ts)

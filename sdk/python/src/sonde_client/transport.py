"""Address strings and the datagram transports behind them.

| address                     | socket                                   |
|-----------------------------|------------------------------------------|
| ``unixgram:///path``        | ``AF_UNIX`` / ``SOCK_DGRAM``, connected  |
| ``unixseq:///path``         | ``AF_UNIX`` / ``SOCK_SEQPACKET``         |
| ``udp://host:port``         | ``AF_INET(6)`` / ``SOCK_DGRAM``, connected |

A transport connects lazily on its first send and drops its socket after
any error, so the next send connects again: an agent that restarted (and
re-created its socket file, or re-bound its port) is picked up without the
application doing anything.

Transports are not thread-safe; the client serialises all sends.
"""

from __future__ import annotations

import os
import socket
from typing import Any, Optional, Tuple

from .errors import InvalidAddressError

__all__ = [
    "DEFAULT_UNIXGRAM",
    "DEFAULT_UDP",
    "SEND_TIMEOUT",
    "default_address",
    "Address",
    "Transport",
]

DEFAULT_UNIXGRAM = "unixgram:///tmp/metric.sock"
DEFAULT_UDP = "udp://127.0.0.1:9123"

#: Seconds one send may block. A unix datagram socket blocks while the
#: agent's queue is full (net.unix.max_dgram_qlen is often just 10), so a
#: short wait rides out a burst; the bound keeps a stalled agent from
#: hanging the flusher, and ``close()`` at interpreter exit, indefinitely.
SEND_TIMEOUT = 1.0


def default_address() -> str:
    """The address used when none is given (SPEC.md, Transports and addresses).

    ``SONDE_ADDRESS`` when set and non-empty; else ``unixgram:///tmp/metric.sock``
    if that file exists; else ``udp://127.0.0.1:9123``.
    """
    env = os.environ.get("SONDE_ADDRESS")
    if env:
        return env
    if os.path.exists("/tmp/metric.sock"):
        return DEFAULT_UNIXGRAM
    return DEFAULT_UDP


class Address:
    """A parsed address string. Raises :class:`InvalidAddressError` when invalid.

    Host names are resolved when the transport connects (on the flusher
    thread), never here, so building a client does no I/O.
    """

    __slots__ = ("text", "scheme", "path", "host", "port")

    def __init__(self, text: str) -> None:
        if not isinstance(text, str):
            raise InvalidAddressError(f"address must be a str, not {type(text).__name__}")
        scheme, sep, rest = text.partition("://")
        self.text = text
        self.scheme = scheme
        self.path: Optional[str] = None
        self.host: Optional[str] = None
        self.port: Optional[int] = None
        if not sep:
            raise InvalidAddressError(
                f"address {text!r} has no scheme; use unixgram:///path, unixseq:///path or udp://host:port"
            )
        if scheme in ("unixgram", "unixseq"):
            if not rest.startswith("/") or len(rest) < 2:
                raise InvalidAddressError(
                    f"address {text!r} needs an absolute socket path, e.g. {scheme}:///tmp/metric.sock"
                )
            self.path = rest
        elif scheme == "udp":
            self.host, self.port = _host_port(text, rest)
        else:
            raise InvalidAddressError(
                f"address {text!r} has unknown scheme {scheme!r}; use unixgram://, unixseq:// or udp://"
            )

    def __repr__(self) -> str:
        return f"Address({self.text!r})"


def _host_port(text: str, rest: str) -> Tuple[str, int]:
    host, sep, port_text = rest.rpartition(":")
    if host.startswith("[") and host.endswith("]"):  # [::1]:9123
        host = host[1:-1]
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise InvalidAddressError(f"address {text!r} is not udp://host:port (port 1-65535)")
    return host, int(port_text)


class Transport:
    """Sends whole datagrams to one address, reconnecting after errors.

    :meth:`send` raises :class:`OSError` (including :class:`socket.timeout`)
    and leaves the transport disconnected; the client counts the error.
    """

    def __init__(self, address: Address) -> None:
        self.address = address
        self._sock: Optional[socket.socket] = None

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def _connect(self) -> socket.socket:
        a = self.address
        if a.scheme == "udp":
            assert a.host is not None and a.port is not None
            family, kind, proto, _, sockaddr = socket.getaddrinfo(a.host, a.port, type=socket.SOCK_DGRAM)[0]
            sock = socket.socket(family, kind, proto)
            target: Any = sockaddr
        else:
            kind = socket.SOCK_DGRAM if a.scheme == "unixgram" else socket.SOCK_SEQPACKET
            sock = socket.socket(socket.AF_UNIX, kind)
            target = a.path
        try:
            sock.settimeout(SEND_TIMEOUT)
            # Connecting a datagram socket too: the kernel then reports a
            # vanished receiver (ECONNREFUSED, ENOENT) on send instead of
            # silently dropping, which is what lets us count and reconnect.
            sock.connect(target)
        except BaseException:
            sock.close()
            raise
        return sock

    def send(self, datagram: bytes) -> None:
        """Sends one datagram; raises :class:`OSError` on failure."""
        sock = self._sock
        if sock is None:
            sock = self._sock = self._connect()
        try:
            sent = sock.send(datagram)
        except BaseException:
            self.close()
            raise
        if sent != len(datagram):  # datagram sockets never split; guard anyway
            self.close()
            raise OSError(f"short send: {sent} of {len(datagram)} bytes")

    def close(self) -> None:
        """Drops the socket; the next :meth:`send` connects again."""
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

"""The client: validates on the caller's thread, sends on its own.

# Lifecycle

A :class:`Client` starts one daemon flusher thread when it is built. Each
emit validates its arguments (raising :class:`ValueError` subclasses for bad
input), then, under a lock, adds the point to a bounded buffer; it never
formats, encodes or touches a socket. The flusher wakes every
``flush_interval`` seconds (200 ms by default), or as soon as the buffer
fills, swaps the buffer for an empty one, encodes and sends.

# Buffering

The buffer holds at most ``buffer_size`` entries. A ``counter`` or
``rate_counter`` for a series (type, name, rendered tags) that already has
an entry is added into it, and a ``store`` replaces its value (the agent
keeps the window's last one), so a hot loop over fewer series than the
capacity takes no room and loses nothing; a dict from series to entry
finds it. Every other type takes one entry per emit.

``flush()`` does the same synchronously on the caller's thread.
``close()`` stops the flusher, sends what is pending and closes the socket;
it is registered with :mod:`atexit`, so a program that never calls it still
sends its last points when the interpreter exits. After ``close()``, emits
are dropped and counted rather than raised: at interpreter exit other
threads may still be emitting, and a metrics call must not crash them.

# Fork

A forked child has no flusher thread (threads do not survive ``fork``)
and may have inherited a lock held mid-emit. An ``os.register_at_fork``
hook gives every live client in the child fresh locks, an empty buffer (the
parent sends what was pending, so keeping it would count it twice), a new
socket and a new flusher.
"""

from __future__ import annotations

import atexit
import functools
import inspect
import os
import socket
import threading
import weakref
from time import perf_counter
from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar, Union, cast

from .transport import Address, Transport, default_address
from .wire import (
    Number,
    Tags,
    check_name,
    check_value,
    encode_frame,
    format_ts,
    format_value,
    join_name,
    pack_datagrams,
    pack_str,
    render_tags,
)

__all__ = ["Client", "Timed"]

F = TypeVar("F", bound=Callable[..., Any])

# (type, full name, value, rendered tags, ts text): what an emit buffers.
_Point = Tuple[str, str, Number, str, str]

_INT_LIMIT = 10**15

# Full names are cached per client so a steady-state emit validates a name
# with one dict probe instead of a regex scan and a join. Bounded because a
# caller that puts IDs in names would otherwise grow it forever; clearing
# the whole cache when full is crude but costs one re-validation per name.
_NAME_CACHE_SIZE = 4096

# Seconds close() waits for the flusher to finish a flush in progress:
# longer than one flush takes (sends give up after SEND_TIMEOUT).
_JOIN_TIMEOUT = 5.0

_live_clients: "weakref.WeakSet[Client]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for client in list(_live_clients):
        client._reset_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Client:
    """A sonde client: ``with Client(prefix="shop") as m: m.counter("orders")``.

    :param address: ``unixgram:///path``, ``unixseq:///path`` or
        ``udp://host:port``. ``None`` picks the default: ``$SONDE_ADDRESS``
        if set, else ``unixgram:///tmp/metric.sock`` if that file exists,
        else ``udp://127.0.0.1:9123``.
    :param prefix: joined to every name with a dot (``prefix.name``).
    :param buffer_size: points held between flushes; further emits are
        dropped and counted in :attr:`dropped`.
    :param flush_interval: seconds between background flushes.
    :raises InvalidAddressError: for an address that names no transport.
    :raises InvalidNameError: for a prefix containing ``|``, a space or a newline.
    """

    def __init__(
        self,
        address: Optional[str] = None,
        prefix: str = "",
        buffer_size: int = 10000,
        flush_interval: float = 0.2,
    ) -> None:
        if prefix != "":
            check_name(prefix, "prefix")
        if type(buffer_size) is not int or buffer_size < 1:
            raise ValueError(f"buffer_size must be a positive int, not {buffer_size!r}")
        if (
            isinstance(flush_interval, bool)
            or not isinstance(flush_interval, (int, float))
            or not flush_interval > 0
        ):
            raise ValueError(f"flush_interval must be a positive number of seconds, not {flush_interval!r}")
        self._address = Address(address if address is not None else default_address())
        self._prefix = prefix
        self._capacity = buffer_size
        self._interval = float(flush_interval)
        self._transport = Transport(self._address)
        self._buf: List[Any] = []
        # The entry in _buf of each merged series (type, name, tags).
        self._index: Dict[Tuple[str, str, str], List[Any]] = {}
        # _lock guards _buf, _index, _closed and _dropped (held for an
        # append or a merge only).
        # Reentrant because a signal handler runs on the thread it interrupts:
        # a handler that emits while that thread is inside an emit would
        # deadlock on a plain Lock (measured: no slower in CPython 3.11).
        # _send_lock serialises flushes so datagrams leave in emit order and
        # the transport is used by one thread at a time; reentrant for the
        # same reason (a SIGTERM handler that calls close() mid-flush).
        self._lock = threading.RLock()
        self._send_lock = threading.RLock()
        self._wake = threading.Event()
        self._closed = False
        self._stopping = False
        self._dropped = 0
        self._send_errors = 0
        self._names: Dict[str, str] = {}
        self._thread: Optional[threading.Thread] = None
        self._start_flusher()
        _live_clients.add(self)
        atexit.register(self.close)

    # ----------------------------------------------------------- emitting

    def counter(self, name: str, value: Number = 1, tags: Tags = None) -> None:
        """Adds ``value`` to a counter; the agent reports its running total."""
        self._merge("counter", name, value, tags, False)

    def rate_counter(self, name: str, value: Number = 1, tags: Tags = None) -> None:
        """Adds ``value`` to a counter the agent reports as a per-second rate."""
        self._merge("rate_counter", name, value, tags, False)

    def meter(self, name: str, value: Number = 1, tags: Tags = None) -> None:
        """Marks ``value`` events; the agent reports a running total and ``name.rate``."""
        self._emit("meter", name, value, tags)

    def timer(self, name: str, value: Number, tags: Tags = None) -> None:
        """Records one duration in milliseconds (min, max, avg, sum, count, percentiles)."""
        self._emit("timer", name, value, tags)

    def store(self, name: str, value: Number, tags: Tags = None) -> None:
        """Sets a gauge; the agent reports the last value of the window."""
        self._merge("store", name, value, tags, True)

    def ts_store(self, name: str, value: Number, ts: Union[int, float, Any], tags: Tags = None) -> None:
        """Sets a gauge at a timestamp of your own: unix seconds (int or
        float, the fraction dropped) or a ``datetime``."""
        self._emit("ts_store", name, value, tags, format_ts(ts))

    def histogram(self, name: str, value: Number, tags: Tags = None) -> None:
        """Counts ``value`` into the agent's histogram buckets for ``name``."""
        self._emit("histogram", name, value, tags)

    def timed(self, name: str, tags: Tags = None) -> "Timed":
        """Times a block or a function in milliseconds, as a :meth:`timer`.

        ``with client.timed("db.query"): ...`` or ``@client.timed("db.query")``.
        The name and tags are checked here, once, so a bad one raises where
        the timer is made rather than when the block ends.
        """
        return Timed(self, self._full_name(name), render_tags(tags))

    def _emit(self, kind: str, name: str, value: object, tags: Tags, ts: str = "") -> None:
        # The hot path: every step is inlined or cached because each call
        # costs ~50 ns and this runs once per data point (see BENCHMARKS.md).
        try:
            full = self._names[name]
        except (KeyError, TypeError):
            full = self._new_name(name)
        t = type(value)
        if t is float:
            if value - value != 0.0:  # type: ignore[operator]  # NaN or infinity
                value = check_value(value)  # raises with the message
        elif t is not int or not -_INT_LIMIT < value < _INT_LIMIT:  # type: ignore[operator]
            value = check_value(value)
        point = (kind, full, value, render_tags(tags) if tags else "", ts)
        with self._lock:
            buf = self._buf
            if self._closed or len(buf) >= self._capacity:
                self._dropped += 1
                return
            buf.append(point)
            if len(buf) == self._capacity:
                self._wake.set()

    def _merge(self, kind: str, name: str, value: object, tags: Tags, replace: bool) -> None:
        # _emit for the types that merge into their series' entry (see the
        # module doc, Buffering): the same checks, inlined here rather than
        # shared, because a call costs as much as the rest of a step.
        try:
            full = self._names[name]
        except (KeyError, TypeError):
            full = self._new_name(name)
        t = type(value)
        if t is float:
            if value - value != 0.0:  # type: ignore[operator]  # NaN or infinity
                value = check_value(value)  # raises with the message
        elif t is not int or not -_INT_LIMIT < value < _INT_LIMIT:  # type: ignore[operator]
            value = check_value(value)
        rendered = render_tags(tags) if tags else ""
        key = (kind, full, rendered)
        with self._lock:
            entry = self._index.get(key)
            if entry is not None:
                # After close() the buffer and index are empty, so a closed
                # client never gets here and the drop below counts the point.
                if replace:
                    entry[2] = value
                    return
                total = entry[2] + value
                if -_INT_LIMIT < total < _INT_LIMIT or _fits_a_double(total):
                    entry[2] = total
                    return
                # The sum would overflow a double (infinity, which the agent
                # drops, or an int the encoder cannot write): this point
                # starts a new entry and later ones add into it.
            buf = self._buf
            if self._closed or len(buf) >= self._capacity:
                self._dropped += 1
                return
            entry = [kind, full, value, rendered, ""]
            self._index[key] = entry
            buf.append(entry)
            if len(buf) == self._capacity:
                self._wake.set()

    def _append(self, point: _Point) -> None:
        with self._lock:
            buf = self._buf
            if self._closed or len(buf) >= self._capacity:
                self._dropped += 1
                return
            buf.append(point)
            if len(buf) == self._capacity:
                self._wake.set()

    def _full_name(self, name: str) -> str:
        try:
            return self._names[name]
        except (KeyError, TypeError):
            return self._new_name(name)

    def _new_name(self, name: object) -> str:
        checked = check_name(name)
        full = join_name(self._prefix, checked)
        names = self._names
        if len(names) >= _NAME_CACHE_SIZE:
            names.clear()
        names[checked] = full
        return full

    # ------------------------------------------------------------ sending

    def flush(self) -> None:
        """Sends every pending point now, on the calling thread."""
        with self._send_lock:
            self._flush_locked()

    def close(self) -> None:
        """Stops the flusher, sends what is pending and closes the socket.

        Idempotent. Emits after this are dropped and counted in :attr:`dropped`.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._stopping = True
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread() and thread.is_alive():
            # Bounded: if close() runs in a signal handler that interrupted a
            # flush on this thread, the flusher waits for the send lock this
            # thread holds and would never finish.
            thread.join(_JOIN_TIMEOUT)
        with self._send_lock:
            self._flush_locked()
            self._transport.close()
        _live_clients.discard(self)
        # Drop atexit's reference so a closed client can be garbage collected.
        atexit.unregister(self.close)

    def _flush_locked(self) -> None:
        with self._lock:
            points = self._buf
            if not points:
                return
            self._buf = []
            self._index = {}
        self._send_all(list(pack_datagrams(_encode(points))))

    def _send_all(self, datagrams: List[bytes]) -> None:
        transport = self._transport
        for i, datagram in enumerate(datagrams):
            try:
                transport.send(datagram)
                continue
            except socket.timeout:
                # The agent is alive but not reading: every further send
                # would wait as long, so give up on the rest of this flush.
                self._send_errors += len(datagrams) - i
                return
            except OSError:
                pass
            # Any other error usually means the receiver went away (the
            # agent restarted, its socket file was re-created). The failed
            # send dropped the socket, so this retry connects afresh and a
            # restarted agent loses nothing.
            try:
                transport.send(datagram)
            except socket.timeout:
                self._send_errors += len(datagrams) - i
                return
            except OSError:
                self._send_errors += 1

    def _start_flusher(self) -> None:
        thread = threading.Thread(target=self._run, name="sonde-client-flusher", daemon=True)
        self._thread = thread
        thread.start()

    def _run(self) -> None:
        wake = self._wake
        interval = self._interval
        while True:
            wake.wait(interval)
            wake.clear()
            if self._stopping:
                return  # close() sends what is left
            try:
                self.flush()
            except Exception:  # noqa: BLE001 - the flusher must outlive any bug
                self._send_errors += 1

    def _reset_after_fork(self) -> None:
        self._lock = threading.RLock()
        self._send_lock = threading.RLock()
        self._wake = threading.Event()
        self._buf = []
        self._index = {}
        self._transport.close()
        self._transport = Transport(self._address)
        self._thread = None
        if not self._closed:
            self._start_flusher()

    # ------------------------------------------------------------- status

    @property
    def dropped(self) -> int:
        """Points dropped because the buffer was full or the client closed."""
        return self._dropped

    @property
    def send_errors(self) -> int:
        """Datagrams that could not be delivered (each may hold many points)."""
        return self._send_errors

    @property
    def address(self) -> str:
        """The address this client sends to."""
        return self._address.text

    @property
    def prefix(self) -> str:
        return self._prefix

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"Client(address={self.address!r}, prefix={self._prefix!r}, {state})"


class Timed:
    """A timer for a block (``with``) or a function (decorator), in milliseconds.

    The timing is recorded whether or not the block raises. As a decorator
    it times every call, including ``async def`` functions (awaited time).
    As a context manager it nests, and :attr:`elapsed_ms` holds the last
    measurement; share one object between threads only as a decorator.
    """

    __slots__ = ("_client", "_name", "_tags", "_starts", "elapsed_ms")

    def __init__(self, client: Client, full_name: str, tags: str) -> None:
        self._client = client
        self._name = full_name
        self._tags = tags
        self._starts: List[float] = []
        self.elapsed_ms: Optional[float] = None

    def __enter__(self) -> "Timed":
        self._starts.append(perf_counter())
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._record(self._starts.pop())

    def _record(self, start: float) -> None:
        ms = (perf_counter() - start) * 1000.0
        self.elapsed_ms = ms
        self._client._append(("timer", self._name, ms, self._tags, ""))

    def __call__(self, fn: F) -> F:
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def timed_coroutine(*args: Any, **kwargs: Any) -> Any:
                start = perf_counter()
                try:
                    return await fn(*args, **kwargs)
                finally:
                    self._record(start)

            return cast(F, timed_coroutine)

        @functools.wraps(fn)
        def timed_call(*args: Any, **kwargs: Any) -> Any:
            start = perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self._record(start)

        return cast(F, timed_call)


def _fits_a_double(total: Number) -> bool:
    """Whether a sum is finite as a double: a float that is not infinite, or
    an int within the double range (ints are exact and never overflow)."""
    try:
        f = float(total)
    except OverflowError:
        return False
    return f - f == 0.0


def _encode(points: List[Any]) -> List[bytes]:
    """Encodes every buffered entry as one message, in buffer order.

    Counters and stores were already merged per series as they were
    emitted (see the module doc, Buffering).
    """
    # Everything but VALUE repeats from flush to flush, so the bytes before
    # and after it are cached per series; VALUE text is at most 24 ASCII
    # characters (repr of a float), always a fixstr.
    frames = _FRAMES
    out = []
    for kind, name, value, tags, ts in points:
        series = (kind, name, tags, ts)
        frame = frames.get(series)
        if frame is None:
            if len(frames) >= _FRAME_CACHE_SIZE:
                frames.clear()
            frame = frames[series] = encode_frame(kind, name, tags, ts)
        text = format_value(value).encode()
        n = len(text)
        out.append(frame[0] + (_FIXSTR[n] + text if n < 32 else pack_str(text.decode())) + frame[1])
    return out


_FRAME_CACHE_SIZE = 4096
_FRAMES: Dict[Tuple[str, str, str, str], Tuple[bytes, bytes]] = {}
_FIXSTR = [bytes((0xA0 | n,)) for n in range(32)]

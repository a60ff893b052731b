"""The msgpack wire format of sonde (metricserver2 protocol), with no I/O.

A message is ``["emit", TYPE, NAME, VALUE, TAGS, TS]``, six msgpack strings
in their smallest form; a datagram holds one message, or an array16 *bunch*
of messages kept under 32 KiB. ``sdk/SPEC.md`` is the contract and
``testdata/vectors/msgpack/`` pins the bytes.

The functions here are pure and synchronous so the byte-exact tests can
drive them directly; :mod:`sonde_client.client` calls them from its
flusher thread.

# Design

The encoder is hand-written instead of depending on ``msgpack``: the SDK
writes only three msgpack forms (fixarray of 6, array16, str), the package
stays free of runtime dependencies, and the per-message work is a handful
of ``bytes`` concatenations.
"""

from __future__ import annotations

import decimal
import math
import numbers
import re
from typing import Dict, Iterable, Iterator, List, Mapping, Sequence, Tuple, Union

from .errors import InvalidNameError, InvalidTagError, InvalidValueError

__all__ = [
    "TYPES",
    "MAX_DATAGRAM",
    "Number",
    "Tags",
    "pack_str",
    "encode_message",
    "encode_frame",
    "encode_datagram",
    "pack_datagrams",
    "format_value",
    "check_value",
    "check_name",
    "render_tags",
    "join_name",
    "format_ts",
]

#: The metric types of the protocol, as they go on the wire.
TYPES = ("counter", "rate_counter", "meter", "timer", "store", "ts_store", "histogram")

#: A datagram must stay strictly under this many bytes (SPEC.md: "under 32 KiB").
MAX_DATAGRAM = 32768

Number = Union[int, float]
Tags = Union[Mapping[str, object], Sequence[Tuple[str, object]], None]

# Integral values below this magnitude are written without a decimal point.
_INT_LIMIT = 10**15
_BUNCH_HEADER = 3  # 0xdc + u16 count

# "emit" and the type never change, so each type's first three msgpack
# items are encoded once.
_HEADS = {t: b"\x96\xa4emit" + bytes((0xA0 | len(t),)) + t.encode() for t in TYPES}

# Characters that would break the framing of NAME or TAGS: the agent splits
# tags on `|` and on spaces, and a newline would split a point in every
# line-oriented output (console sink, logs).
_BAD_NAME = re.compile(r"[|= \n\r]")
_BAD_TAG = re.compile(r"[|= \n\r]")
_BAD_TAG_TEXT = re.compile(r"[ \n\r]")


def pack_str(text: str) -> bytes:
    """Encodes ``text`` as a msgpack str in its smallest form (fixstr, str8, str16, str32)."""
    data = text.encode("utf-8")
    n = len(data)
    if n <= 31:
        return bytes((0xA0 | n,)) + data
    if n <= 0xFF:
        return b"\xd9" + bytes((n,)) + data
    if n <= 0xFFFF:
        return b"\xda" + n.to_bytes(2, "big") + data
    return b"\xdb" + n.to_bytes(4, "big") + data


def encode_message(kind: str, name: str, value: str, tags: str, ts: str) -> bytes:
    """Encodes one message from its five wire strings (``"emit"`` is implied).

    ``kind`` must be one of :data:`TYPES`; the other fields are written as
    given, so callers validate first (the client does).
    """
    before, after = encode_frame(kind, name, tags, ts)
    return before + pack_str(value) + after


def encode_frame(kind: str, name: str, tags: str, ts: str) -> Tuple[bytes, bytes]:
    """The bytes of a message before and after its VALUE.

    Only VALUE changes between emits of one series, so the client caches
    these two halves and joins them around each value.
    """
    try:
        head = _HEADS[kind]
    except KeyError:
        raise ValueError(f"unknown metric type {kind!r}; expected one of {', '.join(TYPES)}") from None
    return head + pack_str(name), pack_str(tags) + pack_str(ts)


def encode_datagram(messages: Sequence[bytes]) -> bytes:
    """Frames encoded messages as one datagram: the message itself if there
    is one, else an array16 bunch. Does not check the size."""
    if len(messages) == 1:
        return messages[0]
    if not messages or len(messages) > 0xFFFF:
        raise ValueError(f"a bunch holds 2 to 65535 messages, not {len(messages)}")
    return b"\xdc" + len(messages).to_bytes(2, "big") + b"".join(messages)


def pack_datagrams(messages: Iterable[bytes], limit: int = MAX_DATAGRAM) -> Iterator[bytes]:
    """Groups messages, in order, into datagrams each under ``limit`` bytes.

    A bunch is closed when the next message would bring it to ``limit``
    bytes or more. A single message that alone reaches the limit is still
    sent, alone, rather than dropped here: the agent accepts datagrams up
    to 64 KiB, and a transport that cannot carry it counts a send error.
    """
    batch: List[bytes] = []
    size = _BUNCH_HEADER
    for message in messages:
        if batch and (size + len(message) >= limit or len(batch) == 0xFFFF):
            yield encode_datagram(batch)
            batch = []
            size = _BUNCH_HEADER
        batch.append(message)
        size += len(message)
    if batch:
        yield encode_datagram(batch)


def check_value(value: object) -> Number:
    """Returns ``value`` as an ``int`` or ``float`` the encoder can write,
    or raises :class:`InvalidValueError`.

    Bools are rejected although Python treats them as ints, because
    ``counter("x", True)`` is far more likely a bug than a count.
    """
    t = type(value)
    if t is int:
        if -_INT_LIMIT < value < _INT_LIMIT:  # type: ignore[operator]
            return value  # type: ignore[return-value]
        try:
            float(value)  # type: ignore[arg-type]
        except OverflowError:
            raise InvalidValueError(f"value {value!r} is too large for a 64-bit float") from None
        return value  # type: ignore[return-value]
    if t is float:
        # x - x is 0.0 for every finite x and NaN for NaN and infinities.
        if value - value == 0.0:  # type: ignore[operator]
            return value  # type: ignore[return-value]
        raise InvalidValueError(f"value {value!r} is not finite; NaN and infinities cannot be sent")
    if t is bool or isinstance(value, bool):
        raise InvalidValueError(f"value {value!r} is a bool, not a number")
    # Subclasses and other numeric types (numpy scalars, Fraction, Decimal).
    if isinstance(value, numbers.Integral):
        return check_value(int(value))
    if isinstance(value, (numbers.Real, decimal.Decimal)):
        try:
            as_float = float(value)
        except (OverflowError, ValueError):
            raise InvalidValueError(f"value {value!r} is not a finite number") from None
        return check_value(as_float)
    raise InvalidValueError(f"value {value!r} of type {t.__name__} is not a number")


def format_value(value: Number) -> str:
    """Writes a checked number as VALUE text (SPEC.md, Message encoding).

    Integral values with absolute value below 1e15 are written as integers
    (``12.0`` -> ``"12"``); other values as the shortest round-trip digits,
    in plain notation for ``1e-6 <= |v| < 1e21`` (``"0.000025"``) and in
    exponent form outside it (``"1e+21"``, ``"1.5e-07"``, which is what
    ``repr`` writes there).
    """
    if type(value) is int:
        if -_INT_LIMIT < value < _INT_LIMIT:
            return str(value)
        return _plain(float(value))
    f = float(value)
    if not math.isfinite(f):
        raise InvalidValueError(f"value {value!r} is not finite; NaN and infinities cannot be sent")
    if -1e15 < f < 1e15 and f.is_integer():
        return str(int(f))
    return _plain(f)


def _plain(f: float) -> str:
    """The shortest round-trip digits of ``f``, plain inside [1e-6, 1e21)."""
    if not 1e-6 <= abs(f) < 1e21:
        return repr(f)
    text = format(decimal.Decimal(repr(f)), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def check_name(name: object, what: str = "name") -> str:
    """Returns ``name`` if it is a usable metric name, else raises :class:`InvalidNameError`."""
    if type(name) is not str:
        raise InvalidNameError(f"{what} must be a str, not {type(name).__name__}")
    if not name:
        raise InvalidNameError(f"{what} is empty")
    bad = _BAD_NAME.search(name)
    if bad is not None:
        raise InvalidNameError(
            f"{what} {name!r} contains {bad.group()!r}; | = space \\n and \\r are not allowed"
        )
    return name


def render_tags(tags: Tags) -> str:
    """Renders tags as TAGS text: ``k=v`` pairs joined with ``|``.

    A mapping is rendered sorted by key (its order carries no meaning on
    the wire); a sequence of pairs in the order given. Keys and values are
    converted with ``str``. Raises :class:`InvalidTagError` for an empty
    key, a key or value containing ``|``, ``=``, a space, ``\\n`` or
    ``\\r``, or an element that is not a pair.
    """
    if not tags:
        return ""
    # Services emit the same few tag sets over and over, so renderings are
    # cached: a hit costs a tuple hash and a dict probe (~0.3 us for three
    # tags) instead of sorting, formatting and scanning (~1.5 us). Dicts and
    # pair sequences have separate caches because the same items render
    # sorted from a dict and in order from pairs.
    kind = type(tags)
    if kind is dict:
        cache = _DICT_TAGS
        key: Tuple[object, ...] = tuple(tags.items())  # type: ignore[union-attr]
    elif kind is tuple:
        cache = _PAIR_TAGS
        key = tags  # type: ignore[assignment]
    elif kind is list:
        cache = _PAIR_TAGS
        key = tuple(tags)
    else:
        return _render(tags)[0]
    try:
        text = cache.get(key)
    except TypeError:  # an unhashable key or value: no caching
        return _render(tags)[0]
    if text is None:
        text, cacheable = _render(tags)
        if cacheable:
            if len(cache) >= _TAG_CACHE_SIZE:
                cache.clear()  # crude, but a cache miss only costs a render
            cache[key] = text
    return text


# Only all-str tag sets are cached: 1, 1.0 and True are equal as dict keys
# but render as "1", "1.0" and "True".
_TAG_CACHE_SIZE = 4096
_DICT_TAGS: Dict[Tuple[object, ...], str] = {}
_PAIR_TAGS: Dict[Tuple[object, ...], str] = {}


def _render(tags: Tags) -> Tuple[str, bool]:
    """Renders and checks tags; returns the text and whether every key and
    value was a ``str`` (only those renderings are cached)."""
    if isinstance(tags, Mapping):
        try:
            items: List[Tuple[object, object]] = sorted(tags.items())
        except TypeError:  # keys of mixed types
            items = sorted(tags.items(), key=lambda kv: str(kv[0]))
    elif isinstance(tags, (str, bytes)):
        raise InvalidTagError(
            f"tags must be a dict or a sequence of (key, value) pairs, not {type(tags).__name__}"
        )
    else:
        try:
            items = list(tags)  # type: ignore[arg-type]
        except TypeError:
            raise InvalidTagError(
                f"tags must be a dict or a sequence of (key, value) pairs, not {type(tags).__name__}"
            ) from None
        # A 2-character str would unpack as a (key, value) pair: ["ab"] -> "a=b".
        if str in map(type, items):
            raise InvalidTagError(f"tags must be (key, value) pairs, got a str in {tags!r}")
    try:
        pairs = [f"{k}={v}" for k, v in items]
    except (TypeError, ValueError):
        raise InvalidTagError(
            f"tags must be a dict or a sequence of (key, value) pairs, got {tags!r}"
        ) from None
    text = "|".join(pairs)
    # One scan of the joined text proves every pair clean when it has
    # exactly one `=` per pair, one `|` between pairs, no empty key and none
    # of the other forbidden characters. Only a bad call pays for the
    # per-pair walk, which names the offending tag.
    n = len(pairs)
    if (
        text.count("=") != n
        or text.count("|") != n - 1
        or text[0] == "="
        or "|=" in text
        or _BAD_TAG_TEXT.search(text) is not None
    ):
        _raise_bad_tag(items, tags)
    return text, all(type(k) is str and type(v) is str for k, v in items)


def _raise_bad_tag(items: Iterable[Tuple[object, object]], tags: Tags) -> None:
    for k, v in items:
        key, value = str(k), str(v)
        if not key:
            raise InvalidTagError(f"tag ({k!r}, {v!r}) has an empty key")
        for part, text in (("key", key), ("value", value)):
            bad = _BAD_TAG.search(text)
            if bad is not None:
                raise InvalidTagError(
                    f"tag {part} {text!r} contains {bad.group()!r}; | = space \\n and \\r are not allowed"
                )
    raise InvalidTagError(f"tags {tags!r} cannot be rendered")


def join_name(prefix: str, name: str) -> str:
    """``prefix.name``, or ``name`` alone when the prefix is empty."""
    return f"{prefix}.{name}" if prefix else name


def format_ts(ts: object) -> str:
    """Writes a ``ts_store`` timestamp as unix seconds text.

    Accepts an ``int``, a finite ``float`` (``time.time()``; the fraction is
    dropped, rounding down, because the agent reads whole seconds) or a
    ``datetime`` (naive ones are taken as local time, as ``timestamp()``
    does).
    """
    if type(ts) is int:
        return str(ts)
    if isinstance(ts, bool):
        raise InvalidValueError(f"timestamp {ts!r} is a bool, not unix seconds")
    if isinstance(ts, numbers.Integral):
        return str(int(ts))
    if isinstance(ts, numbers.Real):
        f = float(ts)
        if not math.isfinite(f):
            raise InvalidValueError(f"timestamp {ts!r} is not finite")
        return str(math.floor(f))
    timestamp = getattr(ts, "timestamp", None)
    if callable(timestamp) and hasattr(ts, "tzinfo"):  # datetime.datetime
        return str(math.floor(timestamp()))
    raise InvalidValueError(f"timestamp {ts!r} is not unix seconds (int, float or datetime)")

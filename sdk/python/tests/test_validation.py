"""Bad names, tags, values and settings raise at the call, and send nothing."""

from __future__ import annotations

import pytest

from sonde_client import (
    Client,
    InvalidAddressError,
    InvalidNameError,
    InvalidTagError,
    InvalidValueError,
    ValidationError,
)
from sonde_test_support import msg

BAD_NAME_CHARS = ["|", "=", " ", "\n", "\r"]
BAD_TAG_CHARS = ["|", "=", " ", "\n", "\r"]


def test_every_validation_error_is_a_value_error():
    for cls in (InvalidNameError, InvalidTagError, InvalidValueError):
        assert issubclass(cls, ValidationError) and issubclass(cls, ValueError)
    assert issubclass(InvalidAddressError, ValueError)


def test_an_empty_name_is_rejected(make_client, receiver):
    c = make_client(receiver.address)
    with pytest.raises(InvalidNameError, match="empty"):
        c.counter("")


@pytest.mark.parametrize("ch", BAD_NAME_CHARS)
def test_names_with_a_separator_or_newline_are_rejected(make_client, receiver, ch):
    c = make_client(receiver.address)
    with pytest.raises(InvalidNameError, match="not allowed"):
        c.timer(f"web{ch}latency", 1)


def test_a_name_that_is_not_a_str_is_rejected(make_client, receiver):
    c = make_client(receiver.address)
    for bad in (None, 5, b"web", ["web"]):
        with pytest.raises(InvalidNameError, match="must be a str"):
            c.store(bad, 1)  # type: ignore[arg-type]


@pytest.mark.parametrize("ch", BAD_NAME_CHARS)
def test_prefixes_with_a_separator_or_newline_are_rejected(receiver, ch):
    with pytest.raises(InvalidNameError, match="prefix"):
        Client(receiver.address, prefix=f"app{ch}x")


def test_an_empty_tag_key_is_rejected(make_client, receiver):
    c = make_client(receiver.address)
    with pytest.raises(InvalidTagError, match="empty key"):
        c.counter("a", tags={"": "x"})
    with pytest.raises(InvalidTagError, match="empty key"):
        c.counter("a", tags=[("host", "a"), ("", "x")])


@pytest.mark.parametrize("ch", BAD_TAG_CHARS)
def test_tag_keys_with_a_forbidden_character_are_rejected(make_client, receiver, ch):
    c = make_client(receiver.address)
    with pytest.raises(InvalidTagError, match="tag key"):
        c.counter("a", tags={f"ho{ch}st": "a"})


@pytest.mark.parametrize("ch", BAD_TAG_CHARS)
def test_tag_values_with_a_forbidden_character_are_rejected(make_client, receiver, ch):
    c = make_client(receiver.address)
    with pytest.raises(InvalidTagError, match="tag value"):
        c.counter("a", tags=[("dc", "x"), ("host", f"a{ch}b")])


def test_tags_that_are_not_pairs_are_rejected(make_client, receiver):
    c = make_client(receiver.address)
    for bad in ("host=a", [("host",)], [("a", "b", "c")], ["ab"], 5, [5]):
        with pytest.raises(InvalidTagError):
            c.counter("a", tags=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf"), True, "12", None])
def test_values_that_are_not_finite_numbers_are_rejected(make_client, receiver, bad):
    c = make_client(receiver.address)
    with pytest.raises(InvalidValueError):
        c.timer("a", bad)


def test_a_rejected_call_buffers_nothing(make_client, receiver):
    c = make_client(receiver.address, flush_interval=60)
    for call in (
        lambda: c.counter("bad name"),
        lambda: c.counter("a", tags={"k": "v v"}),
        lambda: c.counter("a", float("nan")),
        lambda: c.ts_store("a", 1, ts=float("nan")),
    ):
        with pytest.raises(ValidationError):
            call()
    c.counter("good")
    c.flush()
    assert receiver.messages() == [msg("counter", "good", "1")]
    assert c.dropped == 0


@pytest.mark.parametrize(
    "address",
    [
        "",
        "/tmp/metric.sock",
        "tcp://127.0.0.1:9123",
        "unixgram://relative.sock",
        "unixseq://",
        "udp://127.0.0.1",
        "udp://:9123",
        "udp://h:0",
        "udp://h:port",
    ],
)
def test_addresses_that_name_no_transport_are_rejected(address):
    with pytest.raises(InvalidAddressError):
        Client(address)


@pytest.mark.parametrize(
    ("kwargs"),
    [
        {"buffer_size": 0},
        {"buffer_size": 1.5},
        {"flush_interval": 0},
        {"flush_interval": -1},
        {"flush_interval": True},
    ],
)
def test_nonsense_settings_are_rejected(receiver, kwargs):
    with pytest.raises(ValueError):
        Client(receiver.address, **kwargs)

"""Byte-exact encoding: the shared vectors, value text and msgpack str forms."""

from __future__ import annotations

import json
import math
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest

from sonde_client.errors import InvalidValueError
from sonde_client.wire import (
    MAX_DATAGRAM,
    check_value,
    encode_datagram,
    encode_message,
    format_ts,
    format_value,
    pack_datagrams,
    pack_str,
)
from sonde_test_support import decode, msg

VECTORS = Path(__file__).resolve().parents[3] / "testdata" / "vectors"


def vectors_with_emits():
    files = sorted((VECTORS / "msgpack").glob("*.json"))
    cases = []
    for f in files:
        case = json.loads(f.read_text())
        if case.get("emits") is not None:
            cases.append(pytest.param(case, id=f.stem))
    return cases


CASES = vectors_with_emits()


def test_the_vector_directory_holds_cases_with_emits():
    # Guards the parametrized test below: with no cases it would pass vacuously.
    assert len(CASES) >= 9, f"found only {len(CASES)} msgpack vectors with emits in {VECTORS}"


@pytest.mark.parametrize("case", CASES)
def test_every_vector_with_emits_encodes_to_exactly_its_bytes(case):
    messages = [encode_message(e["type"], e["name"], e["value"], e["tags"], e["ts"]) for e in case["emits"]]
    assert encode_datagram(messages).hex() == case["bytes_hex"]


def test_values_json_cases_are_written_as_pinned():
    data = json.loads((VECTORS / "values.json").read_text())
    assert data["cases"], "values.json has no cases"
    for number, text in data["cases"]:
        assert format_value(check_value(number)) == text, number


@pytest.mark.parametrize("text", json.loads((VECTORS / "values.json").read_text())["rejected"])
def test_values_json_rejected_values_raise(text):
    with pytest.raises(InvalidValueError, match="finite"):
        check_value(float(text))
    with pytest.raises(InvalidValueError):
        format_value(float(text))


def test_integral_values_from_1e15_up_use_plain_digits_below_1e21():
    assert format_value(1e15) == "1000000000000000"
    assert format_value(10**15) == "1000000000000000"
    assert format_value(-(10**15)) == "-1000000000000000"
    assert format_value(10**20) == "100000000000000000000"
    assert format_value(10**21) == "1e+21"
    assert format_value(999999999999999.0) == "999999999999999"
    assert format_value(-0.0) == "0"


def test_non_integral_values_use_the_shortest_round_trip_text():
    for v in (0.1, 1 / 3, 2.5e-10, 1.7976931348623157e308, -123.456, 2.5e-5):
        assert float(format_value(v)) == v
        assert len(format_value(v)) <= 25
    # repr's exponent form outside [1e-6, 1e21), plain digits inside it.
    assert format_value(2.5e-10) == repr(2.5e-10)
    assert format_value(2.5e-5) == "0.000025"


def test_bools_and_non_numbers_are_rejected_as_values():
    for bad in (True, False, "1", None, [1], b"1", complex(1, 0)):
        with pytest.raises(InvalidValueError):
            check_value(bad)


def test_ints_too_large_for_a_float_are_rejected():
    with pytest.raises(InvalidValueError, match="too large"):
        check_value(10**400)


def test_other_numeric_types_are_accepted_as_numbers():
    assert format_value(check_value(Fraction(1, 4))) == "0.25"
    assert format_value(check_value(Decimal("12.5"))) == "12.5"
    with pytest.raises(InvalidValueError):
        check_value(Decimal("NaN"))

    class MyFloat(float):
        pass

    assert format_value(check_value(MyFloat(3.0))) == "3"


@pytest.mark.parametrize(
    ("length", "header"),
    [
        (0, b"\xa0"),
        (31, b"\xbf"),
        (32, b"\xd9\x20"),
        (255, b"\xd9\xff"),
        (256, b"\xda\x01\x00"),
        (65535, b"\xda\xff\xff"),
        (65536, b"\xdb\x00\x01\x00\x00"),
    ],
)
def test_strings_use_the_smallest_msgpack_form_at_each_boundary(length, header):
    assert pack_str("x" * length) == header + b"x" * length


def test_string_lengths_count_utf8_bytes_not_characters():
    # 16 characters, 32 bytes: one past fixstr.
    assert pack_str("é" * 16) == b"\xd9\x20" + "é".encode() * 16


def test_timestamps_are_whole_unix_seconds():
    import datetime

    assert format_ts(1763800200) == "1763800200"
    assert format_ts(1763800200.9) == "1763800200"
    assert format_ts(-1.5) == "-2"
    when = datetime.datetime(2025, 11, 22, 8, 30, tzinfo=datetime.timezone.utc)
    assert format_ts(when) == "1763800200"
    for bad in (True, math.nan, "1763800200", None):
        with pytest.raises(InvalidValueError):
            format_ts(bad)


def test_one_message_is_sent_without_a_bunch_header():
    m = encode_message("counter", "a", "1", "", "")
    assert list(pack_datagrams([m])) == [m]


def test_two_messages_make_an_array16_bunch():
    a = encode_message("counter", "a", "1", "", "")
    b = encode_message("store", "b", "2", "", "")
    (datagram,) = pack_datagrams([a, b])
    assert datagram == b"\xdc\x00\x02" + a + b
    assert decode(datagram) == [msg("counter", "a", "1"), msg("store", "b", "2")]


def test_bunches_stay_under_32_kib_and_are_filled_before_splitting():
    messages = [
        encode_message("timer", f"svc.latency.{i}", "12.5", "host=a|" + "k=" + "v" * 80, "")
        for i in range(2000)
    ]
    datagrams = list(pack_datagrams(messages))
    assert len(datagrams) > 1
    assert all(len(d) < MAX_DATAGRAM for d in datagrams)
    # Every datagram but the last was closed only because the next message
    # would not have fitted.
    sent = 0
    for d in datagrams[:-1]:
        sent += len(decode(d))
        assert len(d) + len(messages[sent]) >= MAX_DATAGRAM
    decoded = [m for d in datagrams for m in decode(d)]
    assert [m[2] for m in decoded] == [f"svc.latency.{i}" for i in range(2000)]


def test_a_bunch_exactly_one_byte_under_the_limit_is_kept_whole():
    def with_tag_length(k):
        return encode_message("counter", "n", "1", "t=" + "x" * k, "")

    one = with_tag_length(100)
    overhead = len(with_tag_length(1000)) - 1000  # str16 tags from here on
    fill = MAX_DATAGRAM - 1 - 3 - len(one) - overhead
    two = with_tag_length(fill)
    assert 3 + len(one) + len(two) == MAX_DATAGRAM - 1
    assert len(list(pack_datagrams([one, two]))) == 1
    assert len(list(pack_datagrams([one, with_tag_length(fill + 1)]))) == 2


def test_a_message_larger_than_the_limit_is_sent_alone():
    small = encode_message("counter", "a", "1", "", "")
    huge = encode_message("counter", "b", "1", "t=" + "x" * 40000, "")
    assert list(pack_datagrams([small, huge, small])) == [small, huge, small]


def test_unknown_types_cannot_be_encoded():
    with pytest.raises(ValueError, match="unknown metric type"):
        encode_message("gauge", "a", "1", "", "")


def test_the_same_items_render_sorted_from_a_dict_and_in_order_from_pairs():
    from sonde_client.wire import render_tags

    # Twice each, so the second call of each form is a cache hit.
    for _ in range(2):
        assert render_tags({"b": "2", "a": "1"}) == "a=1|b=2"
        assert render_tags((("b", "2"), ("a", "1"))) == "b=2|a=1"
        assert render_tags([("b", "2"), ("a", "1")]) == "b=2|a=1"


def test_equal_but_differently_typed_tag_values_render_as_themselves():
    from sonde_client.wire import render_tags

    # 1, 1.0 and True are one dict key; a cache keyed on them must not
    # hand one's rendering to another.
    for _ in range(2):
        assert [render_tags({"v": v}) for v in ("1", 1, 1.0, True)] == ["v=1", "v=1", "v=1.0", "v=True"]
        assert [render_tags([("v", v)]) for v in (True, 1.0, 1, "1")] == ["v=True", "v=1.0", "v=1", "v=1"]


def test_a_rejected_tag_set_is_rejected_every_time():
    from sonde_client.errors import InvalidTagError
    from sonde_client.wire import render_tags

    for _ in range(3):
        with pytest.raises(InvalidTagError):
            render_tags({"k": "a b"})

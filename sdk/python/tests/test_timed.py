"""client.timed(): a context manager and a decorator measuring milliseconds."""

from __future__ import annotations

import asyncio
import time

import pytest

from sonde_client import InvalidNameError, InvalidTagError


def timers(receiver):
    return [(m[1], m[2], float(m[3]), m[4]) for m in receiver.messages()]


def test_a_with_block_is_timed_in_milliseconds(make_client, receiver):
    c = make_client(receiver.address, prefix="app", flush_interval=3600)
    with c.timed("block", tags={"step": "load"}) as t:
        time.sleep(0.03)
    c.flush()
    ((kind, name, value, tags),) = timers(receiver)
    assert (kind, name, tags) == ("timer", "app.block", "step=load")
    # Milliseconds, not seconds: 30 ms of sleep is at least 30.
    assert 30.0 <= value < 5000.0
    assert t.elapsed_ms == value


def test_a_decorated_function_is_timed_on_every_call(make_client, receiver):
    c = make_client(receiver.address, flush_interval=3600)

    @c.timed("work")
    def work(ms, *, result):
        time.sleep(ms / 1000)
        return result

    assert work(20, result="a") == "a"
    assert work(40, result="b") == "b"
    assert work.__name__ == "work"
    c.flush()
    values = [v for _, _, v, _ in timers(receiver)]
    assert len(values) == 2
    assert 20.0 <= values[0] < 5000.0
    assert 40.0 <= values[1] < 5000.0


def test_the_time_is_recorded_when_the_block_raises(make_client, receiver):
    c = make_client(receiver.address, flush_interval=3600)

    @c.timed("fails")
    def fails():
        raise KeyError("x")

    with pytest.raises(KeyError):
        fails()
    with pytest.raises(RuntimeError):
        with c.timed("fails.too"):
            raise RuntimeError("boom")
    c.flush()
    assert [name for _, name, _, _ in timers(receiver)] == ["fails", "fails.too"]


def test_an_async_function_is_timed_until_it_finishes(make_client, receiver):
    c = make_client(receiver.address, flush_interval=3600)

    @c.timed("async.work")
    async def work():
        await asyncio.sleep(0.03)
        return 5

    assert asyncio.iscoroutinefunction(work)
    assert asyncio.run(work()) == 5
    c.flush()
    ((_, name, value, _),) = timers(receiver)
    assert name == "async.work"
    assert value >= 30.0


def test_nested_blocks_with_one_timer_each_measure_their_own_span(make_client, receiver):
    c = make_client(receiver.address, flush_interval=3600)
    t = c.timed("nested")
    with t:
        with t:
            pass
        time.sleep(0.02)
    c.flush()
    inner, outer = [v for _, _, v, _ in timers(receiver)]
    assert inner < 20.0 <= outer


def test_a_bad_name_or_tag_raises_when_the_timer_is_made(make_client, receiver):
    c = make_client(receiver.address)
    with pytest.raises(InvalidNameError):
        c.timed("bad name")
    with pytest.raises(InvalidTagError):
        c.timed("ok", tags={"k": "v|w"})

"""Client behaviour against local sockets standing in for the agent."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from sonde_client import Client, default_address
from sonde_client import transport as transport_module
from sonde_client.wire import MAX_DATAGRAM
from sonde_test_support import DatagramReceiver, decode, msg, wait_for

SRC = str(Path(__file__).resolve().parents[1] / "src")


# ------------------------------------------------------------- encoding


def test_the_prefix_and_the_name_are_joined_with_a_dot(make_client, receiver):
    c = make_client(receiver.address, prefix="shop.eu")
    c.counter("orders")
    c.flush()
    assert receiver.messages() == [msg("counter", "shop.eu.orders", "1")]


def test_without_a_prefix_the_name_is_sent_alone(make_client, receiver):
    c = make_client(receiver.address)
    c.counter("orders")
    c.flush()
    assert receiver.messages() == [msg("counter", "orders", "1")]


def test_dict_tags_are_sorted_by_key_and_pairs_keep_their_order(make_client, receiver):
    c = make_client(receiver.address)
    c.store("a", 1, tags={"host": "a", "dc": "x", "az": 3})
    c.store("b", 1, tags=[("host", "a"), ("dc", "x"), ("az", 3)])
    c.store("c", 1, tags=(("only", "one"),))
    c.store("d", 1, tags={})
    c.flush()
    assert [(m[2], m[4]) for m in receiver.messages()] == [
        ("a", "az=3|dc=x|host=a"),
        ("b", "host=a|dc=x|az=3"),
        ("c", "only=one"),
        ("d", ""),
    ]


def test_every_method_sends_its_type_value_and_timestamp(make_client, receiver):
    c = make_client(receiver.address, prefix="p")
    c.counter("c")
    c.rate_counter("rc", 1024)
    c.meter("m", 3)
    c.timer("t", 12.5, tags={"host": "a"})
    c.store("s", -300.0)
    c.ts_store("ts", 42, ts=1763800200)
    c.histogram("h", 0.25)
    c.flush()
    assert receiver.messages() == [
        msg("counter", "p.c", "1"),
        msg("rate_counter", "p.rc", "1024"),
        msg("meter", "p.m", "3"),
        msg("timer", "p.t", "12.5", "host=a"),
        msg("store", "p.s", "-300"),
        msg("ts_store", "p.ts", "42", "", "1763800200"),
        msg("histogram", "p.h", "0.25"),
    ]


def test_one_pending_emit_is_sent_as_a_plain_message(make_client, receiver):
    c = make_client(receiver.address)
    c.meter("m")
    c.flush()
    (datagram,) = receiver.pending()
    assert datagram[0] == 0x96


# ---------------------------------------------------------- aggregation


def test_counters_are_summed_and_stores_replaced_where_the_first_was(make_client, receiver):
    c = make_client(receiver.address, flush_interval=60)
    c.counter("hits", 1, tags={"host": "a"})
    c.store("size", 5)
    c.counter("hits", 2, tags=[("host", "a")])  # same rendered tags
    c.counter("hits", 10, tags={"host": "b"})  # another series
    c.rate_counter("hits", 3, tags={"host": "a"})  # another type
    c.rate_counter("hits", 4, tags={"host": "a"})
    c.counter("hits", 0.5, tags={"host": "a"})
    c.store("size", 6)
    c.timer("lat", 1)
    c.timer("lat", 1)
    c.flush()
    assert receiver.messages() == [
        msg("counter", "hits", "3.5", "host=a"),
        msg("store", "size", "6"),
        msg("counter", "hits", "10", "host=b"),
        msg("rate_counter", "hits", "7", "host=a"),
        msg("timer", "lat", "1"),
        msg("timer", "lat", "1"),
    ]


def test_a_hot_loop_over_as_many_series_as_the_capacity_drops_nothing(make_client, receiver):
    c = make_client(receiver.address, buffer_size=501, flush_interval=3600)
    # The send lock keeps the flusher from emptying the buffer mid-loop, so
    # the 501 series must fit in 501 entries however many emits there are.
    with c._send_lock:
        for i in range(20_000):
            c.counter(f"hits.{i % 500}")
            c.store("depth", i)
        assert c.dropped == 0
        c.timer("lat", 1)  # a series with no entry yet finds no room
        assert c.dropped == 1
    c.flush()
    got = {m[2]: m[3] for m in receiver.messages()}
    assert got == {**{f"hits.{i}": "40" for i in range(500)}, "depth": "19999"}


def test_tags_in_another_order_are_not_summed_together(make_client, receiver):
    # The client compares rendered tags; the agent merges the two series.
    c = make_client(receiver.address, flush_interval=60)
    c.counter("x", tags=[("a", 1), ("b", 2)])
    c.counter("x", tags=[("b", 2), ("a", 1)])
    c.flush()
    assert [m[4] for m in receiver.messages()] == ["a=1|b=2", "b=2|a=1"]


def test_counters_are_not_summed_across_flushes(make_client, receiver):
    c = make_client(receiver.address, flush_interval=60)
    c.counter("hits", 2)
    c.flush()
    c.counter("hits", 3)
    c.flush()
    assert receiver.messages() == [msg("counter", "hits", "2"), msg("counter", "hits", "3")]


def test_a_sum_that_would_overflow_starts_a_new_message(make_client, receiver):
    c = make_client(receiver.address, flush_interval=60)
    c.counter("big", 1e308)
    c.counter("big", 1e308)
    c.flush()
    assert [m[3] for m in receiver.messages()] == ["1e+308", "1e+308"]


def test_an_int_sum_past_the_double_range_starts_a_new_message(make_client, receiver):
    c = make_client(receiver.address, flush_interval=60)
    c.counter("big", 10**308)
    c.counter("big", 10**308)
    c.counter("big", 1)  # adds into the second entry
    c.flush()
    assert c.send_errors == 0
    assert [m[3] for m in receiver.messages()] == ["1e+308", "1e+308"]


def test_a_large_flush_is_split_into_bunches_under_32_kib(make_client, receiver):
    c = make_client(receiver.address, flush_interval=60)
    tags = {f"tag{i:02}": f"value{i:02}" for i in range(20)}
    for i in range(1000):
        c.timer("service.frontend.latency", i, tags=tags)
    datagrams = receiver.read_in_background()
    c.flush()
    assert c.send_errors == 0
    wait_for("every message", lambda: sum(len(decode(d)) for d in datagrams) >= 1000)
    assert len(datagrams) > 1
    assert all(len(d) < MAX_DATAGRAM for d in datagrams)
    values = [m[3] for d in datagrams for m in decode(d)]
    assert values == [str(i) for i in range(1000)]


# ---------------------------------------------------- buffering, flushing


def test_a_full_buffer_drops_and_counts_further_points(make_client, receiver):
    c = make_client(receiver.address, buffer_size=3, flush_interval=60)
    # Holding the send lock keeps the flusher (woken by the full buffer)
    # from draining it, so exactly the points past capacity are dropped.
    with c._send_lock:
        for i in range(5):
            c.timer("s", i)
        assert c.dropped == 2
    c.flush()
    assert [m[3] for m in receiver.messages()] == ["0", "1", "2"]
    c.timer("s", 9)
    c.flush()
    assert c.dropped == 2
    assert [m[3] for m in receiver.messages()] == ["9"]


def test_a_full_buffer_is_sent_without_waiting_for_the_interval(make_client, receiver):
    c = make_client(receiver.address, buffer_size=4, flush_interval=3600)
    for i in range(4):
        c.timer("s", i)
    got = []
    wait_for("the full buffer to be sent", lambda: got.extend(receiver.messages()) or len(got) == 4)
    assert c.dropped == 0


def test_the_flusher_sends_pending_points_on_its_own(make_client, receiver):
    c = make_client(receiver.address, flush_interval=0.05)
    c.counter("tick")
    assert wait_for("a background flush", receiver.messages) == [msg("counter", "tick", "1")]


def test_the_default_flush_interval_is_200_ms(make_client, receiver):
    start = time.monotonic()
    c = make_client(receiver.address)
    c.counter("tick")
    wait_for("a background flush", receiver.messages)
    # The flusher's first wake-up is 200 ms after the client was built: not
    # earlier, and (generously, on a shared noisy machine) not much later.
    assert 0.2 <= time.monotonic() - start < 2.0


def test_flush_has_sent_everything_when_it_returns(make_client, receiver):
    c = make_client(receiver.address, flush_interval=3600)
    c.counter("a")
    c.timer("b", 1)
    assert receiver.pending() == []
    c.flush()
    # pending() does not wait: the datagram is already in the socket.
    assert receiver.messages() == [msg("counter", "a", "1"), msg("timer", "b", "1")]


def test_emitting_does_no_io_on_the_callers_thread(make_client, sock_dir, monkeypatch):
    # No receiver exists, so any send would fail; an emit must neither raise
    # nor connect, only buffer.
    c = make_client(f"unixgram://{sock_dir}/absent.sock", flush_interval=3600)
    connects = []

    def connect():
        connects.append(threading.current_thread())
        raise OSError("no agent here")

    monkeypatch.setattr(c._transport, "_connect", connect)
    c.counter("a")
    c.timer("b", 1, tags={"k": "v"})
    assert connects == []
    c.flush()  # the explicit flush is where I/O happens
    assert connects == [threading.current_thread()] * 2


def test_close_sends_pending_points_and_stops_the_flusher(receiver):
    c = Client(receiver.address, flush_interval=3600)
    c.counter("last", 7)
    c.close()
    assert receiver.messages() == [msg("counter", "last", "7")]
    assert not c._thread.is_alive()
    assert c.closed


def test_emits_after_close_are_counted_as_dropped(receiver):
    c = Client(receiver.address)
    c.close()
    c.counter("late")
    c.timer("late", 1)
    with c.timed("late"):
        pass
    assert c.dropped == 3
    c.flush()
    assert receiver.pending() == []


def test_close_is_idempotent(receiver):
    c = Client(receiver.address)
    c.counter("a")
    c.close()
    c.close()
    assert receiver.messages() == [msg("counter", "a", "1")]


def test_the_with_block_closes_the_client(receiver):
    with Client(receiver.address, flush_interval=3600) as c:
        c.store("s", 1)
    assert c.closed
    assert receiver.messages() == [msg("store", "s", "1")]


def test_a_closed_client_can_be_garbage_collected(receiver):
    import gc
    import weakref

    c = Client(receiver.address)
    c.counter("a")
    ref = weakref.ref(c)
    c.close()
    del c
    gc.collect()
    assert ref() is None, "atexit or the flusher thread still holds the closed client"


def test_pending_points_are_sent_at_interpreter_exit(receiver):
    # A program that neither flushes nor closes still delivers: close() is
    # registered with atexit.
    code = (
        "from sonde_client import Client\n"
        f"c = Client({receiver.address!r}, flush_interval=3600)\n"
        "c.counter('at.exit', 3)\n"
    )
    subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": SRC}, check=True, timeout=30
    )
    assert receiver.messages() == [msg("counter", "at.exit", "3")]


def test_a_signal_handler_can_emit_while_its_thread_is_inside_an_emit(receiver):
    # Holding the buffer lock stands for being interrupted mid-emit. With a
    # non-reentrant lock the handler's emit would hang, so this runs in a
    # subprocess with a deadline.
    code = (
        "import os, signal\n"
        "from sonde_client import Client\n"
        f"c = Client({receiver.address!r}, flush_interval=3600)\n"
        "signal.signal(signal.SIGUSR1, lambda *_: c.counter('from.handler'))\n"
        "with c._lock:\n"
        "    c.counter('interrupted')\n"
        "    os.kill(os.getpid(), signal.SIGUSR1)\n"
        "    for _ in range(1000): pass  # the handler runs between bytecodes\n"
        "c.close()\n"
    )
    subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": SRC}, check=True, timeout=20
    )
    assert sorted(m[2] for m in receiver.messages()) == ["from.handler", "interrupted"]


def test_close_in_a_signal_handler_that_interrupted_a_flush_finishes(receiver):
    code = (
        "import os, signal, time\n"
        "import sonde_client.client as sc\n"
        "sc._JOIN_TIMEOUT = 0.5\n"
        f"c = sc.Client({receiver.address!r}, flush_interval=0.01)\n"
        "signal.signal(signal.SIGUSR1, lambda *_: c.close())\n"
        "with c._send_lock:  # stands for being inside flush()\n"
        "    c.counter('pending')\n"
        "    time.sleep(0.1)  # the flusher is now waiting for the send lock\n"
        "    os.kill(os.getpid(), signal.SIGUSR1)\n"
        "    for _ in range(1000): pass\n"
        "assert c.closed\n"
    )
    subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": SRC}, check=True, timeout=20
    )
    assert receiver.messages() == [msg("counter", "pending", "1")]


def test_a_forked_child_sends_its_own_points_and_not_its_parents(make_client, receiver):
    c = make_client(receiver.address, flush_interval=3600)
    c.counter("parent")
    pid = os.fork()
    if pid == 0:  # child: exit without running pytest's teardown
        try:
            c.counter("child")
            c.flush()
            code = 0 if c._thread is not None and c._thread.is_alive() else 3
        except BaseException:
            code = 2
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    c.flush()
    assert sorted(m[2] for m in receiver.messages()) == ["child", "parent"]


# ------------------------------------------------- send errors, reconnect


def test_send_errors_are_counted_not_raised(make_client, sock_dir):
    c = make_client(f"unixgram://{sock_dir}/absent.sock", flush_interval=3600)
    c.counter("a")
    c.flush()
    c.counter("b")
    c.flush()
    assert c.send_errors == 2
    assert c.dropped == 0


def test_a_receiver_that_appears_later_gets_the_next_flush(make_client, sock_dir):
    path = f"{sock_dir}/late.sock"
    c = make_client(f"unixgram://{path}", flush_interval=3600)
    c.counter("lost")
    c.flush()
    assert c.send_errors == 1
    r = DatagramReceiver("unixgram", path)
    try:
        c.counter("found")
        c.flush()
        assert r.messages() == [msg("counter", "found", "1")]
    finally:
        r.close()


def test_the_client_reconnects_after_the_unixgram_socket_is_recreated(make_client, receiver):
    c = make_client(receiver.address, flush_interval=3600)
    c.counter("before")
    c.flush()
    assert receiver.messages() == [msg("counter", "before", "1")]
    # The agent restarts: its socket file is removed and bound anew. The
    # client's connected socket still points at the old, dead one.
    path = receiver.path
    receiver.close()
    restarted = DatagramReceiver("unixgram", path)
    try:
        c.counter("after")
        c.flush()
        assert restarted.messages() == [msg("counter", "after", "1")]
        assert c.send_errors == 0
    finally:
        restarted.close()


def test_points_sent_while_the_receiver_is_down_are_counted_as_errors(make_client, receiver):
    c = make_client(receiver.address, flush_interval=3600)
    c.counter("before")
    c.flush()
    path = receiver.path
    receiver.close()
    c.counter("during")
    c.flush()
    assert c.send_errors == 1
    restarted = DatagramReceiver("unixgram", path)
    try:
        c.counter("after")
        c.flush()
        assert restarted.messages() == [msg("counter", "after", "1")]
    finally:
        restarted.close()


def test_a_stalled_receiver_costs_one_timeout_per_flush_not_one_per_datagram(
    make_client, sock_dir, monkeypatch
):
    monkeypatch.setattr(transport_module, "SEND_TIMEOUT", 0.2)
    stalled = DatagramReceiver("unixgram", f"{sock_dir}/stalled.sock")
    try:
        c = make_client(stalled.address, flush_interval=3600)
        # Fill the receiver's queue (net.unix.max_dgram_qlen, often 10) with
        # datagrams nobody reads, until a send times out.
        for i in range(200):
            c.store("s", i)
            c.flush()
            if c.send_errors:
                break
        assert c.send_errors == 1
        tags = {f"t{i}": "x" * 200 for i in range(10)}
        for i in range(2000):  # about 70 datagrams in one flush
            c.timer("t", i, tags=tags)
        start = time.monotonic()
        c.flush()
        elapsed = time.monotonic() - start
        # One 0.2 s timeout, then the rest of the flush is given up and
        # counted, instead of 70 timeouts in a row.
        assert elapsed < 2.0
        assert c.send_errors > 50
    finally:
        stalled.close()


# ----------------------------------------------------------- transports


def test_udp_delivers_messages():
    r = DatagramReceiver("udp")
    try:
        with Client(r.address, flush_interval=3600) as c:
            c.counter("over.udp", 2, tags={"t": "u"})
            c.flush()
            assert r.messages() == [msg("counter", "over.udp", "2", "t=u")]
    finally:
        r.close()


def test_unixseq_sends_one_datagram_per_packet_and_reconnects(make_client, sock_dir):
    path = f"{sock_dir}/seq.sock"

    def listen():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.bind(path)
        s.listen(1)
        s.settimeout(5)
        return s

    server = listen()
    c = make_client(f"unixseq://{path}", flush_interval=3600)
    c.counter("a")
    c.store("b", 2)
    c.flush()
    conn, _ = server.accept()
    conn.settimeout(5)
    assert decode(conn.recv(1 << 16)) == [msg("counter", "a", "1"), msg("store", "b", "2")]
    # The agent restarts: the connection and the listening socket go away.
    conn.close()
    server.close()
    os.unlink(path)
    server = listen()
    try:
        c.counter("c")
        c.flush()
        conn, _ = server.accept()
        conn.settimeout(5)
        assert decode(conn.recv(1 << 16)) == [msg("counter", "c", "1")]
        conn.close()
    finally:
        server.close()


# --------------------------------------------------------------- address


def test_sonde_address_overrides_the_default(monkeypatch):
    monkeypatch.setenv("SONDE_ADDRESS", "udp://10.0.0.1:1234")
    assert default_address() == "udp://10.0.0.1:1234"
    c = Client(flush_interval=3600)
    try:
        assert c.address == "udp://10.0.0.1:1234"
    finally:
        c.close()


def test_an_explicit_address_beats_sonde_address(monkeypatch, receiver):
    monkeypatch.setenv("SONDE_ADDRESS", "udp://10.0.0.1:1234")
    c = Client(receiver.address)
    c.close()
    assert c.address == receiver.address


def test_the_default_is_the_unix_socket_when_it_exists_else_udp(monkeypatch):
    # Patched rather than creating /tmp/metric.sock, which a real agent on
    # this machine may own.
    monkeypatch.delenv("SONDE_ADDRESS", raising=False)
    seen = []
    monkeypatch.setattr(transport_module.os.path, "exists", lambda p: seen.append(p) or True)
    assert default_address() == "unixgram:///tmp/metric.sock"
    monkeypatch.setattr(transport_module.os.path, "exists", lambda p: False)
    assert default_address() == "udp://127.0.0.1:9123"
    assert seen == ["/tmp/metric.sock"]
    monkeypatch.setenv("SONDE_ADDRESS", "")
    assert default_address() == "udp://127.0.0.1:9123"

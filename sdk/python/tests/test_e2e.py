"""End-to-end: the SDK against the real sonde binary (SPEC.md, End-to-end test).

The agent runs with a one-hour window, so everything sent lands in the
window that SIGTERM flushes; the file sink's JSON lines are then checked
against what was emitted. Skipped when the binary is missing, unless
SONDE_REQUIRE_E2E=1.
"""

from __future__ import annotations

import re
from typing import Dict

from sonde_client import Client
from sonde_test_support import free_udp_port, wait_for

TS = 1763800200

# Messages each transport's script below puts on the wire; counters and
# rate counters are summed per flush, so this is not the number of calls.
MESSAGES_PER_TRANSPORT = 2 + 10 + 3 + 2 + 1 + 2 + 1


def emit_everything(c: Client) -> None:
    for _ in range(3):
        c.counter("requests", tags={"host": "a", "dc": "x"})
    c.rate_counter("bytes", 1000)
    c.rate_counter("bytes", 24)
    for v in range(1, 11):
        c.timer("latency", v, tags=[("host", "a")])
    for v in (0.5, 3, 700):
        c.histogram("payload", v)
    c.store("pool", 5)
    c.ts_store("daily", 42, ts=TS)
    c.meter("consumed", 3)
    c.flush()  # one datagram: the three counters went out as one message of 3
    c.counter("requests", 5, tags=[("dc", "x"), ("host", "a")])
    c.store("pool", 7)
    c.meter("consumed", 4)
    c.close()  # sends the rest


def received_by_receiver(agent) -> Dict[str, float]:
    out: Dict[str, float] = {}
    for line in agent.metrics().splitlines():
        m = re.match(r'sonde_receiver_points_total\{receiver="([^"]+)",protocol="msgpack"\} (\S+)', line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def test_every_type_over_every_transport_reaches_the_agent_and_aggregates(agent_factory, sock_dir):
    port = free_udp_port()
    addresses = {
        "gram": f"unixgram://{sock_dir}/agent.sock",
        "udp": f"udp://127.0.0.1:{port}",
        "seq": f"unixseq://{sock_dir}/agent-seq.sock",
    }
    agent = agent_factory(
        "".join(f'[[receivers]]\nprotocol = "msgpack"\nlisten = "{a}"\n' for a in addresses.values())
    )
    clients = {
        label: Client(address, prefix=f"e2e.{label}", flush_interval=3600)
        for label, address in addresses.items()
    }
    for c in clients.values():
        emit_everything(c)
    for label, c in clients.items():
        assert (c.dropped, c.send_errors) == (0, 0), label

    wait_for(
        "every message at the agent",
        lambda: all(
            received_by_receiver(agent).get(a, 0) >= MESSAGES_PER_TRANSPORT for a in addresses.values()
        ),
        timeout=20,
    )
    assert received_by_receiver(agent) == {a: MESSAGES_PER_TRANSPORT for a in addresses.values()}
    assert agent.metric_sum("sonde_receiver_dropped_total") == 0
    agent.stop()

    points = agent.points()
    by_name: Dict[str, list] = {}
    for p in points:
        by_name.setdefault(p["name"], []).append(p)

    def one(name: str) -> dict:
        found = by_name.get(name, [])
        assert len(found) == 1, f"{name}: {found}"
        return found[0]

    for label in addresses:
        n = f"e2e.{label}"
        requests = one(f"{n}.requests")
        assert requests["tags"] == {"dc": "x", "host": "a"}
        assert requests["value"] == 8  # running total: 3 (summed by the client) + 5
        assert one(f"{n}.bytes")["value"] > 0  # 1024 over the elapsed window
        assert one(f"{n}.latency.counter")["value"] == 10
        assert one(f"{n}.latency.max")["value"] == 10
        assert one(f"{n}.latency.min")["value"] == 1
        assert one(f"{n}.latency.sum")["value"] == 55
        assert one(f"{n}.latency.max")["tags"] == {"host": "a"}
        assert one(f"{n}.payload.count")["value"] == 3
        assert one(f"{n}.payload.sum")["value"] == 703.5
        assert one(f"{n}.pool")["value"] == 7
        daily = one(f"{n}.daily")
        assert (daily["value"], daily["timestamp"]) == (42, TS)
        assert one(f"{n}.consumed")["value"] == 7
        assert one(f"{n}.consumed.rate")["value"] > 0
        # Both rates divide by the same window length, so their ratio pins
        # the rate counter's total: 1000 + 24, summed by the client.
        ratio = one(f"{n}.bytes")["value"] / one(f"{n}.consumed.rate")["value"]
        assert abs(ratio - 1024 / 7) < 1e-6


def test_the_background_flusher_delivers_to_the_agent_without_a_flush_call(agent_factory, sock_dir):
    address = f"unixgram://{sock_dir}/agent.sock"
    agent = agent_factory(f'[[receivers]]\nprotocol = "msgpack"\nlisten = "{address}"\n')
    c = Client(address)  # default 200 ms interval
    try:
        c.store("e2e.background", 11)
        wait_for(
            "the point at the agent", lambda: received_by_receiver(agent).get(address, 0) >= 1, timeout=20
        )
    finally:
        c.close()
    agent.stop()
    assert [p["value"] for p in agent.points() if p["name"] == "e2e.background"] == [11]


def test_a_hot_loop_of_counters_over_500_series_loses_nothing(agent_factory, sock_dir):
    # 20,000 increments over 500 series, as fast as a loop can emit them:
    # twice the default buffer of 10,000 points, but only 500 series, so
    # every increment must be summed into its series' entry (SPEC.md,
    # Client behaviour). The hour-long interval sends everything in close(),
    # one message per series, so the agent's count of received messages
    # says when all of them have arrived.
    address = f"unixgram://{sock_dir}/agent.sock"
    agent = agent_factory(f'[[receivers]]\nprotocol = "msgpack"\nlisten = "{address}"\n')
    c = Client(address, prefix="burst", flush_interval=3600)
    sent = 20_000
    for i in range(sent):
        c.counter(f"hits.{i % 500}", tags={"host": "a"})
    c.close()
    wait_for("500 messages at the agent", lambda: received_by_receiver(agent).get(address, 0) >= 500, timeout=20)
    assert agent.metric_sum("sonde_receiver_dropped_total") == 0
    agent.stop()

    # A counter reports its running total, so a series' last point is its
    # total even if the run crossed a window boundary.
    totals = {p["name"]: p["value"] for p in agent.points() if p["name"].startswith("burst.hits.")}
    assert len(totals) == 500
    assert sum(totals.values()) + c.dropped == sent
    assert c.dropped == 0

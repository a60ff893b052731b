"""The agent driven by real StatsD client libraries from PyPI."""

from conftest import free_port, wait_for


def by_name(points, name):
    return [p for p in points if p["name"] == name]


def test_dogstatsd_client_counters_gauges_timers_sets_with_tags(agent_factory):
    from datadog.dogstatsd import DogStatsd

    port = free_port()
    agent = agent_factory(f'[[receivers]]\nprotocol = "statsd"\nlisten = "udp://127.0.0.1:{port}"\n')
    client = DogStatsd(host="127.0.0.1", port=port, disable_telemetry=True)
    for _ in range(10):
        client.increment("shop.checkout", tags=["env:prod", "region:eu"])
    # Same series with tags in the other order.
    client.increment("shop.checkout", value=5, tags=["region:eu", "env:prod"])
    client.gauge("shop.queue", 40, tags=["urgent"])
    client.gauge("shop.queue", 42, tags=["urgent"])
    for v in range(1, 101):
        client.timing("shop.latency", v)
    client.histogram("shop.size", 3)
    client.distribution("shop.dist", 9)
    for user in ["ann", "bob", "ann", "cy"]:
        client.set("shop.users", user)
    client.flush()
    client.close_socket()
    wait_for("all points", lambda: agent.points_received() >= 11 + 2 + 100 + 1 + 1 + 4)
    agent.stop()
    pts = agent.points()

    checkout = by_name(pts, "shop.checkout")
    assert len(checkout) == 1
    assert checkout[0]["tags"] == {"env": "prod", "region": "eu"}
    assert checkout[0]["value"] == 15
    queue = by_name(pts, "shop.queue")
    assert [(q["tags"], q["value"]) for q in queue] == [({"urgent": ""}, 42)]
    lat = {p["name"]: p["value"] for p in pts if p["name"].startswith("shop.latency.")}
    assert lat["shop.latency.counter"] == 100
    assert lat["shop.latency.min"] == 1 and lat["shop.latency.max"] == 100
    assert abs(lat["shop.latency.pct90"] - 90) <= 0.9
    assert by_name(pts, "shop.size.max")[0]["value"] == 3
    assert by_name(pts, "shop.dist.sum")[0]["value"] == 9
    assert by_name(pts, "shop.users")[0]["value"] == 3


def test_statsd_client_pipeline_packs_lines_into_one_datagram(agent_factory):
    import statsd

    port = free_port()
    agent = agent_factory(f'[[receivers]]\nprotocol = "statsd"\nlisten = "udp://127.0.0.1:{port}"\n')
    client = statsd.StatsClient("127.0.0.1", port, prefix="app")
    with client.pipeline() as pipe:
        for _ in range(20):
            pipe.incr("jobs.done")
        pipe.gauge("jobs.pending", 7)
        pipe.gauge("jobs.pending", 3, delta=True)
        pipe.timing("jobs.took", 250)
    client.decr("jobs.done", 2)
    wait_for("all points", lambda: agent.points_received() >= 24)
    datagrams = [
        l for l in agent.metrics().splitlines() if l.startswith("sonde_receiver_datagrams_total{")
    ]
    # The pipeline's 23 lines arrived in very few datagrams, plus the decr.
    assert float(datagrams[0].rsplit(" ", 1)[1]) <= 4
    agent.stop()
    pts = agent.points()
    assert by_name(pts, "app.jobs.done")[0]["value"] == 18
    assert by_name(pts, "app.jobs.pending")[0]["value"] == 10
    assert by_name(pts, "app.jobs.took.max")[0]["value"] == 250


def test_dogstatsd_client_events_and_service_checks_become_log_records(agent_factory):
    from datadog.dogstatsd import DogStatsd

    port = free_port()
    agent = agent_factory(
        f'[[receivers]]\nprotocol = "statsd"\nlisten = "udp://127.0.0.1:{port}"\n', events=True
    )
    client = DogStatsd(host="127.0.0.1", port=port, disable_telemetry=True)
    client.event(
        "Deploy | v2",
        "rolled out\nto 3 hosts",
        alert_type="success",
        aggregation_key="deploy-v2",
        source_type_name="ci",
        date_happened=1700000000,
        priority="low",
        tags=["env:prod", "team:web"],
        hostname="web-1",
    )
    client.service_check("db.up", DogStatsd.CRITICAL, tags=["env:prod"], message="no reply in 10s")
    client.service_check("cache.up", DogStatsd.OK)
    client.increment("after.events")
    client.flush()
    client.close_socket()
    wait_for("three records", lambda: len(agent.events()) >= 3)
    wait_for("the counter", lambda: agent.points_received() >= 1)
    agent.stop()
    event, failing, ok = agent.events()

    assert event["type"] == "event"
    assert event["title"] == "Deploy | v2"
    assert event["message"] == "rolled out\nto 3 hosts"
    assert event["alert_type"] == "success"
    assert event["priority"] == "low"
    assert event["aggregation_key"] == "deploy-v2"
    assert event["source_type_name"] == "ci"
    assert event["timestamp"] == 1700000000
    assert event["host"] == "web-1"
    assert event["source"] == "dogstatsd_events"
    assert event["tags"] == ["env:prod", "team:web"]
    assert "file" not in event and "offset" not in event

    assert failing["type"] == "service_check"
    assert (failing["check"], failing["status"]) == ("db.up", "critical")
    assert failing["message"] == "no reply in 10s"
    assert failing["tags"] == ["env:prod"]
    assert (ok["check"], ok["status"], ok["message"]) == ("cache.up", "ok", "")
    assert "tags" not in ok
    # Received, not dropped; the metric beside them is aggregated as usual.
    assert by_name(agent.points(), "after.events")[0]["value"] == 1


def test_events_without_a_sink_that_takes_them_are_counted_as_dropped(agent_factory):
    from datadog.dogstatsd import DogStatsd

    port = free_port()
    agent = agent_factory(f'[[receivers]]\nprotocol = "statsd"\nlisten = "udp://127.0.0.1:{port}"\n')
    client = DogStatsd(host="127.0.0.1", port=port, disable_telemetry=True)
    client.event("t", "x")
    client.service_check("c", DogStatsd.WARNING)
    client.flush()
    client.close_socket()
    dropped = 'sonde_receiver_dropped_total{receiver="udp://127.0.0.1:%d",protocol="statsd",reason=' % port
    wait_for("the event counted", lambda: agent.metric(dropped + '"event"}') == 1)
    wait_for("the service check counted", lambda: agent.metric(dropped + '"service_check"}') == 1)

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

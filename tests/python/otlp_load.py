"""OTLP/HTTP load for scripts/bench-otlp-in.sh: posts 1,000-point metrics
requests (a delta monotonic sum over 1,000 series, three attributes each,
the points `sonde bench --series 1000 --tags 3` sends over StatsD) at a
rate, over one keep-alive connection, and prints the agent's CPU per point
taken (nanoseconds, from /proc/PID/stat and the receiver's points on
/metrics) and the share of requests refused."""

import argparse
import http.client
import os
import time
import urllib.parse
import urllib.request

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AggregationTemporality,
    Metric,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)

SERIES = 1000


def body() -> bytes:
    now = time.time_ns()
    points = [
        NumberDataPoint(
            attributes=[
                KeyValue(key="s", value=AnyValue(string_value=f"s{i}")),
                KeyValue(key="host", value=AnyValue(string_value=f"web-{i % 10}")),
                KeyValue(key="route", value=AnyValue(string_value=f"/r{i % 100}")),
            ],
            start_time_unix_nano=now - 10_000_000_000,
            time_unix_nano=now,
            as_int=1,
        )
        for i in range(SERIES)
    ]
    metric = Metric(
        name="bench.counter",
        sum=Sum(
            data_points=points,
            aggregation_temporality=AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA,
            is_monotonic=True,
        ),
    )
    req = ExportMetricsServiceRequest(
        resource_metrics=[ResourceMetrics(scope_metrics=[ScopeMetrics(metrics=[metric])])]
    )
    return req.SerializeToString()


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def points_taken(admin: str) -> float:
    text = urllib.request.urlopen(f"{admin}/metrics", timeout=5).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("sonde_receiver_points_total{") and 'protocol="otlp"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--admin", required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--rate", type=float, required=True, help="points per second")
    ap.add_argument("--duration", type=float, required=True, help="seconds")
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    payload = body()
    headers = {"Content-Type": "application/x-protobuf"}
    p0, c0 = points_taken(a.admin), cpu_seconds(a.pid)
    start = time.monotonic()
    sent = refused = 0
    while time.monotonic() - start < a.duration:
        due = start + sent * SERIES / a.rate
        wait = due - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        conn.request("POST", u.path, payload, headers)
        r = conn.getresponse()
        r.read()
        sent += 1
        if r.status != 200:
            refused += 1
    # The worker records a request after it is answered: wait for the
    # last ones.
    deadline = time.monotonic() + 10
    want = p0 + (sent - refused) * SERIES
    while points_taken(a.admin) < want and time.monotonic() < deadline:
        time.sleep(0.05)
    p1, c1 = points_taken(a.admin), cpu_seconds(a.pid)
    print(f"{(c1 - c0) * 1e9 / max(p1 - p0, 1):.1f} {100 * refused / max(sent, 1):.3f}")


if __name__ == "__main__":
    main()

"""Sends metrics (and logs) to sonde with the OpenTelemetry Python SDK.

usage: send.py http|grpc ENDPOINT metrics|logs

metrics: a delta counter `orders` (3 + 4, exported, then 5), a cumulative
counter `requests` (2, exported, then 3 more), an up-down counter
`queue.depth` (10 - 3), a gauge `temperature` (42.5) and a histogram
`latency` (5, 50, 500 with the SDK's default bounds), each export forced
with force_flush; prints "sent" when every export succeeded.
"""
import sys

from opentelemetry.sdk.metrics import (
    Counter,
    Histogram,
    MeterProvider,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    UpDownCounter,
)
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource

transport, endpoint, what = sys.argv[1], sys.argv[2], sys.argv[3]
resource = Resource.create(
    {"service.name": "checkout", "host.name": "web-1", "process.pid": 4242}
)

if transport == "http":
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
        OTLPMetricExporter,
    )
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter

    def metric_exporter(temporality):
        return OTLPMetricExporter(
            endpoint=endpoint + "/v1/metrics",
            preferred_temporality=temporality,
            timeout=10,
        )

    def log_exporter():
        return OTLPLogExporter(endpoint=endpoint + "/v1/logs", timeout=10)

else:
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
        OTLPMetricExporter,
    )
    from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter

    def metric_exporter(temporality):
        return OTLPMetricExporter(
            endpoint=endpoint,
            insecure=True,
            preferred_temporality=temporality,
            timeout=10,
        )

    def log_exporter():
        return OTLPLogExporter(endpoint=endpoint, insecure=True, timeout=10)


DELTA = {
    Counter: AggregationTemporality.DELTA,
    Histogram: AggregationTemporality.DELTA,
}
CUMULATIVE = {
    Counter: AggregationTemporality.CUMULATIVE,
    UpDownCounter: AggregationTemporality.CUMULATIVE,
    Histogram: AggregationTemporality.CUMULATIVE,
    ObservableCounter: AggregationTemporality.CUMULATIVE,
    ObservableUpDownCounter: AggregationTemporality.CUMULATIVE,
    ObservableGauge: AggregationTemporality.CUMULATIVE,
}


def provider(temporality):
    reader = PeriodicExportingMetricReader(
        metric_exporter(temporality), export_interval_millis=3_600_000
    )
    return MeterProvider(resource=resource, metric_readers=[reader])


def flush(p):
    if not p.force_flush(timeout_millis=20_000):
        sys.exit("an export failed")


def metrics():
    delta = provider(DELTA)
    cumulative = provider(CUMULATIVE)
    dm = delta.get_meter("shop", "1.0")
    cm = cumulative.get_meter("shop", "1.0")

    orders = dm.create_counter("orders")
    orders.add(3, {"route": "/a"})
    orders.add(4, {"route": "/a"})
    latency = dm.create_histogram("latency", unit="ms")
    for v in (5, 50, 500):
        latency.record(v, {"route": "/a"})
    flush(delta)
    orders.add(5, {"route": "/a"})
    flush(delta)

    requests = cm.create_counter("requests")
    depth = cm.create_up_down_counter("queue.depth")
    gauge = cm.create_gauge("temperature")
    requests.add(2, {"code": 200})
    depth.add(10)
    gauge.set(42.5, {"room": "b"})
    flush(cumulative)
    requests.add(3, {"code": 200})
    depth.add(-3)
    flush(cumulative)
    delta.shutdown()
    cumulative.shutdown()


def logs():
    import logging

    from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
    from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor

    lp = LoggerProvider(resource=resource)
    lp.add_log_record_processor(SimpleLogRecordProcessor(log_exporter()))
    log = logging.getLogger("shop")
    log.propagate = False
    log.setLevel(logging.INFO)
    log.addHandler(LoggingHandler(level=logging.INFO, logger_provider=lp))
    log.warning("payment declined", extra={"order.id": 77, "card": "visa"})
    log.info("order placed")
    lp.force_flush()
    lp.shutdown()


if what == "metrics":
    metrics()
else:
    logs()
print("sent")

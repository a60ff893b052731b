"""Floods sonde's OTLP receiver with log records, as a raw gRPC client or
through the OpenTelemetry Python SDK's exporters.

usage: flood.py grpc ENDPOINT PREFIX RECORDS MAX_REQUESTS
       flood.py sdk http|grpc ENDPOINT PREFIX N
       flood.py big ENDPOINT BYTES
       flood.py malformed ENDPOINT

grpc: sends ExportLogsServiceRequest messages of RECORDS records each
(the message of record i of request r is "PREFIX-r-i" and 1,000 bytes of
padding) until one is refused with RESOURCE_EXHAUSTED, then one more, at
most MAX_REQUESTS; prints one JSON object: the ids taken ("accepted"),
the records refused ("refused"), each answer's status code ("codes"),
and the first refusal's retry delay in seconds as its status details
("details_delay") and its google.rpc.retryinfo-bin trailer
("trailer_delay") say.

sdk: logs N records "PREFIX-i" and 300,000 bytes of padding (more than
a full queue has room for) through the SDK's OTLP exporter, each
exported on its own (SimpleLogRecordProcessor) and retried as the SDK
retries; prints "sent" when every export succeeded.

big: sends over gRPC one log record of 1,000 bytes, then one of BYTES
bytes, then the same gzip-compressed, then the small one gzip-compressed;
prints each answer as JSON: its status code and whether it had status
details.

malformed: sends over gRPC bytes that are no protobuf message to the
metrics and then the logs service, then a small log record; prints each
answer's status code as JSON.
"""
import json
import sys


def logs_request(messages):
    from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue
    from opentelemetry.proto.logs.v1.logs_pb2 import (
        LogRecord,
        ResourceLogs,
        ScopeLogs,
    )

    records = [LogRecord(body=AnyValue(string_value=m)) for m in messages]
    return logs_service_pb2.ExportLogsServiceRequest(
        resource_logs=[ResourceLogs(scope_logs=[ScopeLogs(log_records=records)])]
    )


def stub_of(endpoint):
    import grpc
    from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc

    return logs_service_pb2_grpc.LogsServiceStub(grpc.insecure_channel(endpoint))


def big(endpoint, size):
    import grpc

    stub = stub_of(endpoint)
    small = logs_request(["s" * 1000])
    large = logs_request(["b" * size])
    out = []
    for request, compression in [
        (small, grpc.Compression.NoCompression),
        (large, grpc.Compression.NoCompression),
        (large, grpc.Compression.Gzip),
        (small, grpc.Compression.Gzip),
    ]:
        try:
            stub.Export(request, timeout=10, compression=compression)
            out.append({"code": "OK", "details": False})
        except grpc.RpcError as e:
            trailers = dict(e.trailing_metadata() or ())
            out.append(
                {
                    "code": e.code().name,
                    "details": "grpc-status-details-bin" in trailers,
                }
            )
    print(json.dumps(out))


def malformed(endpoint):
    import grpc

    channel = grpc.insecure_channel(endpoint)
    out = []
    for service in ["metrics", "logs"]:
        # No serializer: the bytes go as the message, as sent.
        export = channel.unary_unary(
            f"/opentelemetry.proto.collector.{service}.v1.{service.capitalize()}Service/Export"
        )
        try:
            # Field 1 as a length-delimited message 127 bytes long, of
            # which 2 follow.
            export(b"\x0a\x7f\x01\x02", timeout=10)
            out.append("OK")
        except grpc.RpcError as e:
            out.append(e.code().name)
    try:
        stub_of(endpoint).Export(logs_request(["after"]), timeout=10)
        out.append("OK")
    except grpc.RpcError as e:
        out.append(e.code().name)
    print(json.dumps(out))


def raw_grpc(endpoint, prefix, per_request, max_requests):
    import grpc
    from google.rpc import error_details_pb2, status_pb2

    stub = stub_of(endpoint)
    out = {"accepted": [], "refused": 0, "codes": []}
    refusals = 0
    for r in range(max_requests):
        ids = [f"{prefix}-{r}-{i}" for i in range(per_request)]
        request = logs_request([f"{id} " + "x" * 1000 for id in ids])
        try:
            stub.Export(request, timeout=10)
            out["accepted"].extend(ids)
            out["codes"].append("OK")
        except grpc.RpcError as e:
            out["codes"].append(e.code().name)
            if e.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                break
            out["refused"] += len(ids)
            if refusals == 0:
                trailers = dict(e.trailing_metadata())
                status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
                info = error_details_pb2.RetryInfo()
                assert status.details[0].Unpack(info), status
                out["details_delay"] = info.retry_delay.ToTimedelta().total_seconds()
                info = error_details_pb2.RetryInfo.FromString(
                    trailers["google.rpc.retryinfo-bin"]
                )
                out["trailer_delay"] = info.retry_delay.ToTimedelta().total_seconds()
            refusals += 1
            if refusals == 2:
                break
    print(json.dumps(out))


def sdk(transport, endpoint, prefix, n):
    import logging

    from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
    from opentelemetry.sdk._logs.export import (
        LogRecordExporter,
        SimpleLogRecordProcessor,
    )

    if transport == "http":
        from opentelemetry.exporter.otlp.proto.http._log_exporter import (
            OTLPLogExporter,
        )

        inner = OTLPLogExporter(endpoint=endpoint + "/v1/logs", timeout=30)
    else:
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import (
            OTLPLogExporter,
        )

        inner = OTLPLogExporter(endpoint=endpoint, insecure=True, timeout=30)

    failed = []

    class Checked(LogRecordExporter):
        """The SDK's exporter, each export's final result noted."""

        def export(self, batch):
            result = inner.export(batch)
            if result.name != "SUCCESS":
                failed.append(result)
            return result

        def force_flush(self, timeout_millis=30_000):
            return inner.force_flush(timeout_millis)

        def shutdown(self):
            inner.shutdown()

    lp = LoggerProvider()
    lp.add_log_record_processor(SimpleLogRecordProcessor(Checked()))
    log = logging.getLogger("flood")
    log.propagate = False
    log.setLevel(logging.INFO)
    log.addHandler(LoggingHandler(level=logging.INFO, logger_provider=lp))
    for i in range(n):
        log.info(f"{prefix}-{i} " + "x" * 300_000)
    lp.shutdown()
    if failed:
        sys.exit(f"{len(failed)} exports failed")
    print("sent")


if sys.argv[1] == "grpc":
    raw_grpc(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
elif sys.argv[1] == "big":
    big(sys.argv[2], int(sys.argv[3]))
elif sys.argv[1] == "malformed":
    malformed(sys.argv[2])
else:
    sdk(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))

//! OTLP/HTTP: `POST /v1/metrics` and `POST /v1/logs` with a protobuf
//! body (`application/x-protobuf`) or the OTLP JSON mapping
//! (`application/json`), plain or `Content-Encoding: gzip`; a 200 answer
//! is in the request's encoding, an error's `Status` in protobuf.
//!
//! | answer | when | counted as |
//! |---|---|---|
//! | 200, an `Export…ServiceResponse` | taken; its `partial_success` says how many data points were refused and why | points, and `rejected` |
//! | 400 | a body that does not decode, or a gzip stream that breaks | `malformed` (one per request) |
//! | 404, 405 | another path, another method | not counted |
//! | 413 | a body over `max_body` bytes, before or after decompression | `oversized` (one per request) |
//! | 415 | another content type or encoding | `malformed` |
//! | 429, `Retry-After: 1` | the worker's queue (the log source's, for logs) is full: the agent is behind; nothing of the request was taken. OTLP exporters retry it once the `Retry-After` delay has passed | `queue_full` (its data points or log records) |
//! | 503, `Retry-After: 1` | the agent is stopping (the worker or the log source is gone); nothing of the request was taken | `queue_full` |
//!
//! Error bodies are a `google.rpc.Status` message, as the OTLP
//! specification asks. The body is read with its length bounded
//! ([`http_body_util::Limited`]) and inflated with its output bounded, so
//! neither a long upload nor a gzip bomb takes more than `max_body` bytes.

use std::convert::Infallible;
use std::io::Read;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::TrySendError;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONTENT_ENCODING, CONTENT_TYPE, RETRY_AFTER};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsPartialSuccess, ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use prost::Message;
use sonde_log_sources::events::{EventQueue, PushAllError};
use sonde_metrics::input::PointsSender;
use sonde_metrics::receiver::ReceiverStats;
use sonde_runtime::drops::DropLabel;

use crate::metrics::Mapper;
use crate::wire::Malformed;
use crate::Settings;

/// How often the accept loop checks whether it must stop.
pub(crate) const STOP_CHECK: Duration = Duration::from_millis(100);

/// How long a client may take to send a request's head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// What every connection of a receiver shares.
pub struct Shared {
    settings: Settings,
    tx: PointsSender,
    stats: Arc<ReceiverStats>,
    mapper: Mutex<Mapper>,
    logs: Option<EventQueue>,
}

impl Shared {
    /// The state of a receiver with `settings`, sending to its worker
    /// through `tx`; `since` is when it began listening (nanoseconds since
    /// the epoch); log records go to `logs`, when a sink takes them.
    pub fn new(
        settings: Settings,
        tx: PointsSender,
        stats: Arc<ReceiverStats>,
        since: u64,
        logs: Option<EventQueue>,
    ) -> Shared {
        let mapper = Mapper::new(
            settings.resource_attributes.clone(),
            settings.max_cumulative_series,
            since,
        );
        Shared {
            settings,
            tx,
            stats,
            mapper: Mutex::new(mapper),
            logs,
        }
    }

    /// The receiver's counters.
    pub fn stats(&self) -> &Arc<ReceiverStats> {
        &self.stats
    }

    /// The most bytes of a request body.
    pub fn max_body(&self) -> usize {
        self.settings.max_body
    }

    pub(crate) fn count(&self, label: DropLabel, n: u64) {
        self.stats.drops[label as usize].fetch_add(n, Relaxed);
    }
}

/// `google.rpc.Status`, the body of an OTLP error answer.
#[derive(Clone, PartialEq, Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

/// Serves `listener` until `stop` says so.
pub async fn serve(
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    stop: Box<dyn Fn() -> bool + Send>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(receiver = %shared.stats.listen, error = %e, "otlp receiver cannot listen");
            return;
        }
    };
    let mut tick = tokio::time::interval(STOP_CHECK);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let shared = Arc::clone(&shared);
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let shared = Arc::clone(&shared);
                        async move { Ok::<_, Infallible>(handle(&shared, req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .timer(hyper_util::rt::TokioTimer::new())
                        .header_read_timeout(HEAD_TIMEOUT)
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
            _ = tick.tick() => {
                if stop() {
                    return;
                }
            }
        }
    }
}

/// Whether the client speaks protobuf or JSON.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Encoding {
    Protobuf,
    /// The OTLP JSON mapping, decoded by opentelemetry-proto's serde
    /// implementations (camelCase keys, 64-bit integers as strings or
    /// numbers, trace and span ids in hex).
    Json,
}

/// Decodes a request body of either encoding.
fn decode<T: Message + Default + for<'de> serde::Deserialize<'de>>(
    encoding: Encoding,
    body: &[u8],
) -> Result<T, String> {
    match encoding {
        Encoding::Protobuf => T::decode(body).map_err(|e| e.to_string()),
        Encoding::Json => serde_json::from_slice(body).map_err(|e| e.to_string()),
    }
}

/// A 200 answer with `response` in the request's encoding.
fn ok<T: Message + serde::Serialize>(encoding: Encoding, response: &T) -> Response<Full<Bytes>> {
    match encoding {
        Encoding::Protobuf => answer(StatusCode::OK, response.encode_to_vec()),
        Encoding::Json => {
            let mut r = answer(
                StatusCode::OK,
                serde_json::to_vec(response).unwrap_or_else(|_| b"{}".to_vec()),
            );
            r.headers_mut().insert(
                CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/json"),
            );
            r
        }
    }
}

fn answer(status: StatusCode, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/x-protobuf"),
    );
    r
}

fn error(status: StatusCode, message: impl Into<String>) -> Response<Full<Bytes>> {
    // gRPC codes: 3 INVALID_ARGUMENT, 8 RESOURCE_EXHAUSTED, 14 UNAVAILABLE.
    let code = match status {
        StatusCode::PAYLOAD_TOO_LARGE | StatusCode::TOO_MANY_REQUESTS => 8,
        StatusCode::SERVICE_UNAVAILABLE => 14,
        _ => 3,
    };
    let body = RpcStatus {
        code,
        message: message.into(),
    }
    .encode_to_vec();
    let mut r = answer(status, body);
    if matches!(
        status,
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
    ) {
        r.headers_mut()
            .insert(RETRY_AFTER, hyper::header::HeaderValue::from_static("1"));
    }
    r
}

/// The answer to a request refused whole: 429 while the agent is behind,
/// 503 while it stops, both with `Retry-After: 1`.
fn refused(refused: Refused) -> Response<Full<Bytes>> {
    match refused {
        Refused::Behind(why) => error(StatusCode::TOO_MANY_REQUESTS, why),
        Refused::Stopping => error(StatusCode::SERVICE_UNAVAILABLE, STOPPING),
    }
}

/// Why a body could not be read.
enum BodyError {
    TooLarge,
    Broken(String),
}

/// The request's body, read and inflated, at most `max` bytes either way.
async fn read_body(req: Request<Incoming>, max: usize) -> Result<Bytes, BodyError> {
    let gzip = match req.headers().get(CONTENT_ENCODING).map(|v| v.as_bytes()) {
        None | Some(b"identity") => false,
        Some(b"gzip") => true,
        Some(other) => {
            return Err(BodyError::Broken(format!(
                "Content-Encoding {:?} is not supported: send gzip or none",
                String::from_utf8_lossy(other)
            )))
        }
    };
    let body = match Limited::new(req.into_body(), max).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => return Err(BodyError::TooLarge),
        Err(e) => return Err(BodyError::Broken(format!("reading the body: {e}"))),
    };
    if !gzip {
        return Ok(body);
    }
    let mut out = Vec::new();
    let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
    flate2::read::MultiGzDecoder::new(&body[..])
        .take(limit)
        .read_to_end(&mut out)
        .map_err(|e| BodyError::Broken(format!("gzip: {e}")))?;
    if out.len() > max {
        return Err(BodyError::TooLarge);
    }
    Ok(Bytes::from(out))
}

async fn handle(shared: &Shared, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let logs = match req.uri().path() {
        "/v1/metrics" => false,
        "/v1/logs" => true,
        _ => {
            return error(
                StatusCode::NOT_FOUND,
                "OTLP/HTTP paths: /v1/metrics, /v1/logs",
            )
        }
    };
    if req.method() != Method::POST {
        return error(StatusCode::METHOD_NOT_ALLOWED, "send with POST");
    }
    let content_type = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let encoding = match content_type.split(';').next().unwrap_or("").trim() {
        "application/x-protobuf" => Encoding::Protobuf,
        "application/json" => Encoding::Json,
        other => {
            shared.count(DropLabel::Malformed, 1);
            return error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!("Content-Type {other:?} is not supported: send application/x-protobuf or application/json"),
            );
        }
    };
    let max = shared.settings.max_body;
    let body = match read_body(req, max).await {
        Ok(b) => b,
        Err(BodyError::TooLarge) => {
            shared.count(DropLabel::Oversized, 1);
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the body is over {max} bytes (the receiver's max_body)"),
            );
        }
        Err(BodyError::Broken(why)) => {
            shared.count(DropLabel::Malformed, 1);
            return error(StatusCode::BAD_REQUEST, why);
        }
    };
    shared.stats.bytes.fetch_add(body.len() as u64, Relaxed);
    if logs {
        let request: ExportLogsServiceRequest = match decode(encoding, &body) {
            Ok(r) => r,
            Err(e) => {
                shared.count(DropLabel::Malformed, 1);
                return error(
                    StatusCode::BAD_REQUEST,
                    format!("not an OTLP logs request: {e}"),
                );
            }
        };
        return match export_logs(shared, &request) {
            Ok(partial) => ok(
                encoding,
                &ExportLogsServiceResponse {
                    partial_success: partial,
                },
            ),
            Err(r) => refused(r),
        };
    }
    // A JSON request is re-encoded in protobuf, which the mapping reads
    // in place ([`crate::wire`]): JSON is the slow path either way.
    let protobuf;
    let body = match encoding {
        Encoding::Protobuf => &body[..],
        Encoding::Json => match decode::<ExportMetricsServiceRequest>(encoding, &body) {
            Ok(r) => {
                protobuf = r.encode_to_vec();
                &protobuf[..]
            }
            Err(e) => return malformed_metrics(shared, e),
        },
    };
    match export_metrics(shared, body) {
        Ok(Ok(partial)) => ok(
            encoding,
            &ExportMetricsServiceResponse {
                partial_success: partial,
            },
        ),
        Ok(Err(r)) => refused(r),
        Err(e) => malformed_metrics(shared, e.to_string()),
    }
}

fn malformed_metrics(shared: &Shared, why: String) -> Response<Full<Bytes>> {
    shared.count(DropLabel::Malformed, 1);
    error(
        StatusCode::BAD_REQUEST,
        format!("not an OTLP metrics request: {why}"),
    )
}

/// A request refused as a whole, nothing of it taken, for the client to
/// send again; its data points or log records are counted as
/// `queue_full` either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The worker's queue (the log source's, for logs) is full: HTTP 429,
    /// gRPC `RESOURCE_EXHAUSTED` with a `RetryInfo`.
    Behind(&'static str),
    /// The worker or the log source is gone, as when the agent stops:
    /// HTTP 503, gRPC `UNAVAILABLE`.
    Stopping,
}

/// What a refusal while the agent stops says.
pub const STOPPING: &str = "the agent is stopping";

/// Queues a logs request's records to the receiver's log source; the
/// partial success to answer with (every record refused when no sink
/// takes the source).
///
/// # Errors
///
/// When the source's queue has no room for them all ([`Refused::Behind`]),
/// or the source is gone ([`Refused::Stopping`]): nothing was queued, and
/// the records are counted as `queue_full`.
pub fn export_logs(
    shared: &Shared,
    request: &ExportLogsServiceRequest,
) -> Result<Option<ExportLogsPartialSuccess>, Refused> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    let records = crate::logs::records(request, &shared.settings.resource_attributes, now);
    let n = records.len() as u64;
    if n == 0 {
        return Ok(None);
    }
    let Some(queue) = &shared.logs else {
        return Ok(Some(ExportLogsPartialSuccess {
            rejected_log_records: i64::try_from(n).unwrap_or(i64::MAX),
            error_message: format!(
                "no sink takes the log source {:?}: add it to a sink's inputs",
                shared.settings.name
            ),
        }));
    };
    match queue.push_all(records) {
        Ok(()) => {
            shared.stats.datagrams.fetch_add(1, Relaxed);
            Ok(None)
        }
        Err(e) => {
            shared.count(DropLabel::QueueFull, n);
            Err(match e {
                PushAllError::Full => Refused::Behind("the log sinks are behind: send again later"),
                PushAllError::Gone => Refused::Stopping,
            })
        }
    }
}

/// Maps and queues a metrics request, an `ExportMetricsServiceRequest`
/// in protobuf; the partial success to answer with.
///
/// # Errors
///
/// When the body is not such a request (the outer error: nothing taken,
/// counted by the caller); when the worker's queue is full
/// ([`Refused::Behind`]) or gone ([`Refused::Stopping`]) (the inner one:
/// nothing of the request was taken, and its data points are counted as
/// `queue_full`).
pub fn export_metrics(
    shared: &Shared,
    body: &[u8],
) -> Result<Result<Option<ExportMetricsPartialSuccess>, Refused>, Malformed> {
    let mut mapper = shared.mapper.lock().unwrap_or_else(|e| e.into_inner());
    let mut mapped = mapper.map_into(body, shared.tx.batch())?;
    let partial = (mapped.rejected > 0).then(|| ExportMetricsPartialSuccess {
        rejected_data_points: i64::try_from(mapped.rejected).unwrap_or(i64::MAX),
        error_message: std::mem::take(&mut mapped.message),
    });
    shared.count(DropLabel::BadValue, mapped.rejected - mapped.state_full);
    shared.count(DropLabel::SeriesLimit, mapped.state_full);
    if mapped.points.is_empty() {
        mapper.commit(&mut mapped);
        return Ok(Ok(partial));
    }
    let points = std::mem::take(&mut mapped.points);
    Ok(match shared.tx.try_send(points) {
        Ok(()) => {
            mapper.commit(&mut mapped);
            Ok(partial)
        }
        Err(TrySendError::Full(_)) => {
            shared.count(DropLabel::QueueFull, mapped.data_points);
            Err(Refused::Behind("the agent is behind: send again later"))
        }
        Err(TrySendError::Disconnected(_)) => {
            shared.count(DropLabel::QueueFull, mapped.data_points);
            Err(Refused::Stopping)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
    use opentelemetry_proto::tonic::metrics::v1::{
        metric::Data, number_data_point, AggregationTemporality, Metric, NumberDataPoint,
        ResourceMetrics, ScopeMetrics, Sum,
    };
    use sonde_metrics::input::Points;

    fn cumulative(time: u64, value: i64) -> Vec<u8> {
        ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                scope_metrics: vec![ScopeMetrics {
                    metrics: vec![Metric {
                        name: "hits".into(),
                        data: Some(Data::Sum(Sum {
                            data_points: vec![NumberDataPoint {
                                attributes: vec![KeyValue {
                                    key: "k".into(),
                                    value: Some(AnyValue {
                                        value: Some(any_value::Value::StringValue("v".into())),
                                    }),
                                    ..Default::default()
                                }],
                                start_time_unix_nano: 10,
                                time_unix_nano: time,
                                value: Some(number_data_point::Value::AsInt(value)),
                                ..Default::default()
                            }],
                            aggregation_temporality: AggregationTemporality::Cumulative as i32,
                            is_monotonic: true,
                        })),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
        .encode_to_vec()
    }

    fn value(p: &Points) -> f64 {
        let mut v = f64::NAN;
        p.each(|p| {
            if let sonde_proto::Value::Number(n) = p.value {
                v = n;
            }
        });
        v
    }

    #[test]
    fn a_full_queue_refuses_the_request_whole_and_leaves_the_state_for_the_retry() {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        // The test reads the queue itself: its own thread is the one woken.
        let tx = PointsSender::new(tx, std::thread::current());
        let stats = Arc::new(ReceiverStats::new("http://test".into(), "otlp"));
        let shared = Shared::new(Settings::default(), tx, Arc::clone(&stats), 0, None);
        assert!(matches!(
            export_metrics(&shared, &cumulative(20, 5)),
            Ok(Ok(_))
        ));
        // The queue holds one batch: the next request is refused.
        assert!(matches!(
            export_metrics(&shared, &cumulative(30, 8)),
            Ok(Err(Refused::Behind(_)))
        ));
        assert_eq!(stats.dropped(DropLabel::QueueFull), 1);
        assert_eq!(value(&rx.recv().unwrap()), 5.0);
        // The retry counts the change from the point taken, not from the
        // refused one.
        assert!(matches!(
            export_metrics(&shared, &cumulative(30, 8)),
            Ok(Ok(_))
        ));
        assert_eq!(value(&rx.recv().unwrap()), 3.0);
        // The worker gone: refused too.
        drop(rx);
        assert!(matches!(
            export_metrics(&shared, &cumulative(40, 9)),
            Ok(Err(Refused::Stopping))
        ));
        assert_eq!(stats.dropped(DropLabel::QueueFull), 2);
    }
}

#[cfg(test)]
mod answer_tests {
    use super::*;

    fn status_of(r: &Response<Full<Bytes>>) -> (u16, Option<&str>) {
        (
            r.status().as_u16(),
            r.headers().get(RETRY_AFTER).and_then(|v| v.to_str().ok()),
        )
    }

    async fn body(r: Response<Full<Bytes>>) -> RpcStatus {
        let bytes = r.into_body().collect().await.unwrap().to_bytes();
        RpcStatus::decode(bytes).unwrap()
    }

    #[test]
    fn a_refusal_is_429_while_behind_and_503_while_stopping_both_retry_after_one_second() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let behind = refused(Refused::Behind("behind"));
        assert_eq!(status_of(&behind), (429, Some("1")));
        let status = rt.block_on(body(behind));
        assert_eq!((status.code, status.message.as_str()), (8, "behind"));
        let stopping = refused(Refused::Stopping);
        assert_eq!(status_of(&stopping), (503, Some("1")));
        let status = rt.block_on(body(stopping));
        assert_eq!((status.code, status.message.as_str()), (14, STOPPING));
        // Other errors ask for no retry.
        assert_eq!(
            status_of(&error(StatusCode::PAYLOAD_TOO_LARGE, "big")),
            (413, None)
        );
    }
}

#[cfg(test)]
mod json_tests {
    use super::*;

    /// The OTLP JSON mapping as the specification's examples write it:
    /// camelCase keys, 64-bit integers as strings, enums as numbers.
    #[test]
    fn the_otlp_json_mapping_decodes() {
        let body = br#"{"resourceMetrics":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"api"}}]},
          "scopeMetrics":[{"scope":{"name":"s"},"metrics":[{"name":"hits","sum":{"aggregationTemporality":1,"isMonotonic":true,
          "dataPoints":[{"asInt":"5","timeUnixNano":"1700000000000000000","attributes":[{"key":"n","value":{"intValue":"7"}}]}]}}]}]}]}"#;
        let r: ExportMetricsServiceRequest = serde_json::from_slice(body).unwrap();
        let mut m = Mapper::new(vec!["service.name".into()], 10, 0);
        let mapped = m.map(&r.encode_to_vec()).unwrap();
        let mut got = Vec::new();
        mapped.points.each(|p| {
            got.push((
                sonde_metrics::input::tags_text(p.tags),
                format!("{:?}", p.value),
            ))
        });
        assert_eq!(
            got,
            [(
                "service.name:api,n:7".to_string(),
                "Number(5.0)".to_string()
            )]
        );
        let logs = br#"{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"timeUnixNano":"1700000000000000000","severityNumber":13,
          "body":{"stringValue":"hi"},"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174"}]}]}]}"#;
        let r: ExportLogsServiceRequest = serde_json::from_slice(logs).unwrap();
        let rec = &r.resource_logs[0].scope_logs[0].log_records[0];
        assert_eq!(rec.trace_id.len(), 16);
        assert_eq!(rec.span_id.len(), 8);
        assert_eq!(rec.time_unix_nano, 1_700_000_000_000_000_000);
    }
}

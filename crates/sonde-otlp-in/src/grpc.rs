//! OTLP/gRPC: `MetricsService/Export` and `LogsService/Export`, served by
//! tonic on the receiver's single-threaded runtime, plain or gzip.
//!
//! | status | when | counted as |
//! |---|---|---|
//! | OK, an `Export…ServiceResponse` | taken; its `partial_success` as over HTTP | points, and the refused ones |
//! | RESOURCE_EXHAUSTED with a `google.rpc.RetryInfo` of 1 s | the worker's (or the log source's) queue is full: the agent is behind; nothing was taken. OTLP exporters retry it (the specification: only with a `RetryInfo`, as Go's does) | `queue_full` (its data points or log records) |
//! | UNAVAILABLE | the agent is stopping; nothing was taken. OTLP exporters retry it | `queue_full` |
//! | OUT_OF_RANGE | a message over `max_body` as sent (tonic's limit, checked from the message's length prefix before it is read) | `oversized` (one per request) |
//! | RESOURCE_EXHAUSTED without details | a gzip message over `max_body` once inflated (tonic's inflating stops at the limit) | `oversized` |
//! | INVALID_ARGUMENT | a metrics message that does not decode ([`crate::wire`]) | `malformed` |
//! | INTERNAL | a logs message that does not decode (tonic's decoder, before the service) | not counted |
//!
//! The `RetryInfo` goes in the status details (`grpc-status-details-bin`),
//! where the specification puts it and Go's OTLP exporter reads it, and
//! again as the trailer `google.rpc.retryinfo-bin`, where the Python
//! SDK's exporter reads it. tonic refuses an oversized message before
//! the services see it; a layer around them (in [`serve`]) reads the status of each answer and
//! counts those.

use std::sync::Arc;

use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::{
    LogsService, LogsServiceServer,
};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse;
use prost::bytes::{Buf, Bytes};
use prost::Message;
use sonde_runtime::drops::DropLabel;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{Context, Poll};
use std::time::Duration;
use tonic::codec::{Codec, CompressionEncoding, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Code, Request, Response, Status};
use tonic_types::{ErrorDetails, RetryInfo, StatusExt};
use tower::util::MapResponseLayer;

use crate::http::{export_logs, export_metrics, Refused, Shared, STOPPING};

/// How long a client refused while the agent is behind should wait.
const RETRY_DELAY: Duration = Duration::from_secs(1);

/// The trailer the Python SDK's OTLP exporter reads a `RetryInfo` from.
const RETRY_INFO_TRAILER: &str = "google.rpc.retryinfo-bin";

/// The status of a request refused whole: `RESOURCE_EXHAUSTED` with a
/// `RetryInfo` while the agent is behind (the OTLP specification makes
/// `RESOURCE_EXHAUSTED` retryable only when the server sends one),
/// `UNAVAILABLE` while it stops.
fn refused(refused: Refused) -> Status {
    match refused {
        Refused::Behind(why) => {
            let info = tonic_types::pb::RetryInfo::from(RetryInfo::new(Some(RETRY_DELAY)));
            let mut trailers = MetadataMap::new();
            trailers.insert_bin(
                RETRY_INFO_TRAILER,
                MetadataValue::from_bytes(&info.encode_to_vec()),
            );
            Status::with_error_details_and_metadata(
                Code::ResourceExhausted,
                why,
                ErrorDetails::with_retry_info(Some(RETRY_DELAY)),
                trailers,
            )
        }
        Refused::Stopping => Status::unavailable(STOPPING),
    }
}

struct Logs(Arc<Shared>);

/// `MetricsService`, served by hand rather than by opentelemetry-proto's
/// generated server: that one decodes each request into owned types
/// before the service sees it, and the mapping reads the message in place
/// ([`crate::wire`]), so this one takes the message's bytes as sent
/// ([`Raw`]).
#[derive(Clone)]
struct MetricsServer(Arc<Shared>);

const METRICS_EXPORT: &str = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export";

impl tonic::server::NamedService for MetricsServer {
    const NAME: &'static str = "opentelemetry.proto.collector.metrics.v1.MetricsService";
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, Infallible>> + Send>>;

impl tower::Service<http::Request<tonic::body::Body>> for MetricsServer {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let shared = Arc::clone(&self.0);
        Box::pin(async move {
            if req.uri().path() != METRICS_EXPORT {
                return Ok(
                    Status::unimplemented("MetricsService has one method: Export").into_http(),
                );
            }
            let mut grpc = tonic::server::Grpc::new(Raw)
                .accept_compressed(CompressionEncoding::Gzip)
                .max_decoding_message_size(shared.max_body());
            Ok(grpc.unary(ExportMetrics(shared), req).await)
        })
    }
}

struct ExportMetrics(Arc<Shared>);

impl tonic::server::UnaryService<Bytes> for ExportMetrics {
    type Response = ExportMetricsServiceResponse;
    type Future = std::future::Ready<Result<Response<ExportMetricsServiceResponse>, Status>>;

    fn call(&mut self, request: Request<Bytes>) -> Self::Future {
        let body = request.into_inner();
        self.0.stats().bytes.fetch_add(body.len() as u64, Relaxed);
        std::future::ready(match export_metrics(&self.0, &body) {
            Ok(Ok(partial_success)) => Ok(Response::new(ExportMetricsServiceResponse {
                partial_success,
            })),
            Ok(Err(r)) => Err(refused(r)),
            Err(e) => {
                self.0.count(DropLabel::Malformed, 1);
                Err(Status::invalid_argument(format!(
                    "not an OTLP metrics request: {e}"
                )))
            }
        })
    }
}

/// The codec of [`MetricsServer`]: a request's message as its bytes, the
/// response in protobuf.
struct Raw;

impl Codec for Raw {
    type Encode = ExportMetricsServiceResponse;
    type Decode = Bytes;
    type Encoder = Raw;
    type Decoder = Raw;

    fn encoder(&mut self) -> Raw {
        Raw
    }

    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl Encoder for Raw {
    type Item = ExportMetricsServiceResponse;
    type Error = Status;

    fn encode(&mut self, item: Self::Item, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.encode(dst)
            .map_err(|e| Status::internal(format!("encoding the response: {e}")))
    }
}

impl Decoder for Raw {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

#[tonic::async_trait]
impl LogsService for Logs {
    async fn export(
        &self,
        request: Request<ExportLogsServiceRequest>,
    ) -> Result<Response<ExportLogsServiceResponse>, Status> {
        let request = request.into_inner();
        self.0
            .stats()
            .bytes
            .fetch_add(request.encoded_len() as u64, Relaxed);
        match export_logs(&self.0, &request) {
            Ok(partial_success) => Ok(Response::new(ExportLogsServiceResponse { partial_success })),
            Err(r) => Err(refused(r)),
        }
    }
}

/// Whether `headers` are those of tonic's refusal of a message over
/// `max_body`: `OUT_OF_RANGE` (its length prefix is over the limit), or
/// `RESOURCE_EXHAUSTED` without details (it inflates past the limit),
/// which the receiver's own `RESOURCE_EXHAUSTED` always has (its
/// `RetryInfo`). A refusal is an answer without a body, its status in the
/// headers (gRPC's trailers-only answer); an answer with a message has
/// its status in the trailers, never here.
fn oversized(headers: &hyper::HeaderMap) -> bool {
    match headers.get("grpc-status").map(|v| v.as_bytes()) {
        Some(b"11") => true,
        Some(b"8") => !headers.contains_key("grpc-status-details-bin"),
        _ => false,
    }
}

/// Serves `listener` with both services until `stop` says so; a layer
/// around them counts the messages tonic refuses as over `max_body`
/// (`oversized`), which the services never see.
pub async fn serve(
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    stop: Box<dyn Fn() -> bool + Send>,
) {
    let label = shared.stats().listen.clone();
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(receiver = %label, error = %e, "otlp receiver cannot listen");
            return;
        }
    };
    let max = shared.max_body();
    let metrics = MetricsServer(Arc::clone(&shared));
    let logs = LogsServiceServer::new(Logs(Arc::clone(&shared)))
        .accept_compressed(CompressionEncoding::Gzip)
        .max_decoding_message_size(max);
    let stopped = async move {
        let mut tick = tokio::time::interval(crate::http::STOP_CHECK);
        while !stop() {
            tick.tick().await;
        }
    };
    let counted = Arc::clone(&shared);
    let count_oversized = move |answer: hyper::Response<tonic::body::Body>| {
        if oversized(answer.headers()) {
            counted.count(DropLabel::Oversized, 1);
        }
        answer
    };
    let served = tonic::transport::Server::builder()
        .layer(MapResponseLayer::new(count_oversized))
        .add_service(metrics)
        .add_service(logs)
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listener),
            stopped,
        )
        .await;
    if let Err(e) = served {
        tracing::error!(receiver = %label, error = %e, "otlp gRPC receiver stopped");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: Status) -> hyper::Response<()> {
        status.into_http()
    }

    #[test]
    fn a_receiver_behind_answers_resource_exhausted_with_a_retry_info_of_one_second() {
        let status = refused(Refused::Behind("behind"));
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert_eq!(status.message(), "behind");
        let info = status.get_details_retry_info().expect("a RetryInfo detail");
        assert_eq!(info.retry_delay, Some(Duration::from_secs(1)));
        // The trailer holds the RetryInfo message itself: field 1, the
        // delay, a Duration of field 1, 1 second.
        let trailer = status
            .metadata()
            .get_bin(RETRY_INFO_TRAILER)
            .expect("the trailer")
            .to_bytes()
            .unwrap();
        assert_eq!(&trailer[..], [0x0a, 0x02, 0x08, 0x01]);
        // The answer is the receiver's own, not a refusal of size.
        assert!(!oversized(answer(status).headers()));
    }

    #[test]
    fn a_receiver_stopping_answers_unavailable() {
        let status = refused(Refused::Stopping);
        assert_eq!(status.code(), Code::Unavailable);
        assert!(status.get_details_retry_info().is_none());
        assert!(!oversized(answer(status).headers()));
    }

    #[test]
    fn only_tonics_refusals_of_size_count_as_oversized() {
        assert!(oversized(
            answer(Status::out_of_range("decoded message length too large")).headers()
        ));
        assert!(oversized(
            answer(Status::resource_exhausted(
                "size limit exceeded while decompressing"
            ))
            .headers()
        ));
        for other in [
            Status::internal("failed to decode"),
            Status::unavailable("x"),
            Status::unimplemented("x"),
        ] {
            assert!(!oversized(answer(other).headers()));
        }
        // An answer with a message: no status in its headers.
        assert!(!oversized(&hyper::HeaderMap::new()));
    }
}

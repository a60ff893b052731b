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
//! | INVALID_ARGUMENT | a message that does not decode (metrics read in place by [`crate::wire`], logs decoded by prost) | `malformed` |
//! | INTERNAL | a message that cannot be inflated or read as gRPC frames (tonic's answer, before the services) | `malformed` |
//!
//! The `RetryInfo` goes in the status details (`grpc-status-details-bin`),
//! where the specification puts it and Go's OTLP exporter reads it, and
//! again as the trailer `google.rpc.retryinfo-bin`, where the Python
//! SDK's exporter reads it. tonic refuses an oversized message, and one
//! it cannot inflate, before the services see it; a layer around them
//! (in [`serve`]) reads the status of each answer and counts those.

use std::sync::Arc;

use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse;
use prost::bytes::{Buf, Bytes};
use prost::Message;
use sonde_runtime::drops::DropLabel;
use std::convert::Infallible;
use std::future::Future;
use std::marker::PhantomData;
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

/// One `Export` method served by hand rather than by opentelemetry-proto's
/// generated servers: those decode each request into owned types before
/// the service sees it, and answer a message that does not decode with
/// tonic's `INTERNAL`, which the service never sees to count. Served by
/// hand, the method takes the message's bytes as sent ([`Raw`]): metrics
/// are read in place ([`crate::wire`]), logs decoded here, and a message
/// that does not decode is `INVALID_ARGUMENT`, counted as `malformed`.
trait Export: Send + 'static {
    /// The service's full name; its one method is `/SERVICE/Export`.
    const SERVICE: &'static str;
    /// What the method answers.
    type Response: Message + Default + Send + 'static;
    /// Takes one request's message.
    fn export(shared: &Shared, message: &[u8]) -> Result<Self::Response, Status>;
}

/// A message that does not decode as an OTLP `what` request: counted,
/// and `INVALID_ARGUMENT`, which exporters do not retry.
fn malformed(shared: &Shared, what: &str, e: impl std::fmt::Display) -> Status {
    shared.count(DropLabel::Malformed, 1);
    Status::invalid_argument(format!("not an OTLP {what} request: {e}"))
}

struct Metrics;

impl Export for Metrics {
    const SERVICE: &'static str = "opentelemetry.proto.collector.metrics.v1.MetricsService";
    type Response = ExportMetricsServiceResponse;

    fn export(shared: &Shared, message: &[u8]) -> Result<Self::Response, Status> {
        match export_metrics(shared, message) {
            Ok(Ok(partial_success)) => Ok(ExportMetricsServiceResponse { partial_success }),
            Ok(Err(r)) => Err(refused(r)),
            Err(e) => Err(malformed(shared, "metrics", e)),
        }
    }
}

struct Logs;

impl Export for Logs {
    const SERVICE: &'static str = "opentelemetry.proto.collector.logs.v1.LogsService";
    type Response = ExportLogsServiceResponse;

    fn export(shared: &Shared, message: &[u8]) -> Result<Self::Response, Status> {
        let request =
            ExportLogsServiceRequest::decode(message).map_err(|e| malformed(shared, "logs", e))?;
        match export_logs(shared, &request) {
            Ok(partial_success) => Ok(ExportLogsServiceResponse { partial_success }),
            Err(r) => Err(refused(r)),
        }
    }
}

/// The service of one [`Export`], for tonic's router.
struct Server<E>(Arc<Shared>, PhantomData<fn() -> E>);

impl<E> Clone for Server<E> {
    fn clone(&self) -> Self {
        Server(Arc::clone(&self.0), PhantomData)
    }
}

impl<E: Export> tonic::server::NamedService for Server<E> {
    const NAME: &'static str = E::SERVICE;
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, Infallible>> + Send>>;

impl<E: Export> tower::Service<http::Request<tonic::body::Body>> for Server<E> {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let shared = Arc::clone(&self.0);
        Box::pin(async move {
            let path = req.uri().path();
            let service = path
                .strip_prefix('/')
                .and_then(|p| p.strip_suffix("/Export"));
            if service != Some(E::SERVICE) {
                let what = format!("{} has one method: Export", E::SERVICE);
                return Ok(Status::unimplemented(what).into_http());
            }
            let mut grpc = tonic::server::Grpc::new(Raw::<E::Response>(PhantomData))
                .accept_compressed(CompressionEncoding::Gzip)
                .max_decoding_message_size(shared.max_body());
            Ok(grpc.unary(Unary::<E>(shared, PhantomData), req).await)
        })
    }
}

/// One call of an [`Export`].
struct Unary<E>(Arc<Shared>, PhantomData<fn() -> E>);

impl<E: Export> tonic::server::UnaryService<Bytes> for Unary<E> {
    type Response = E::Response;
    type Future = std::future::Ready<Result<Response<E::Response>, Status>>;

    fn call(&mut self, request: Request<Bytes>) -> Self::Future {
        let message = request.into_inner();
        self.0
            .stats()
            .bytes
            .fetch_add(message.len() as u64, Relaxed);
        std::future::ready(E::export(&self.0, &message).map(Response::new))
    }
}

/// The codec of the services served by hand: a request's message as its
/// bytes (inflated by tonic if it came compressed), the response `R` in
/// protobuf.
struct Raw<R>(PhantomData<fn() -> R>);

impl<R: Message + Send + 'static> Codec for Raw<R> {
    type Encode = R;
    type Decode = Bytes;
    type Encoder = Raw<R>;
    type Decoder = Raw<R>;

    fn encoder(&mut self) -> Raw<R> {
        Raw(PhantomData)
    }

    fn decoder(&mut self) -> Raw<R> {
        Raw(PhantomData)
    }
}

impl<R: Message> Encoder for Raw<R> {
    type Item = R;
    type Error = Status;

    fn encode(&mut self, item: R, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.encode(dst)
            .map_err(|e| Status::internal(format!("encoding the response: {e}")))
    }
}

impl<R> Decoder for Raw<R> {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// What tonic refused before the services saw it, by the status of its
/// answer: `OUT_OF_RANGE` (a message whose length prefix is over
/// `max_body`) or `RESOURCE_EXHAUSTED` without details (one that
/// inflates past it; the receiver's own always has its `RetryInfo`) are
/// `oversized`, and `INTERNAL` (a message that cannot be inflated, or
/// read as gRPC frames) is `malformed`. A refusal is an answer without a
/// body, its status in the headers (gRPC's trailers-only answer); an
/// answer with a message has its status in the trailers, never here, and
/// the services' own refusals are counted where they are made.
fn refused_by_tonic(headers: &hyper::HeaderMap) -> Option<DropLabel> {
    match headers.get("grpc-status").map(|v| v.as_bytes()) {
        Some(b"11") => Some(DropLabel::Oversized),
        Some(b"8") if !headers.contains_key("grpc-status-details-bin") => {
            Some(DropLabel::Oversized)
        }
        Some(b"13") => Some(DropLabel::Malformed),
        _ => None,
    }
}

/// Serves `listener` with both services until `stop` says so; a layer
/// around them counts the messages tonic refuses (over `max_body`, or
/// that it cannot inflate), which the services never see.
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
    let metrics = Server::<Metrics>(Arc::clone(&shared), PhantomData);
    let logs = Server::<Logs>(Arc::clone(&shared), PhantomData);
    let stopped = async move {
        let mut tick = tokio::time::interval(crate::http::STOP_CHECK);
        while !stop() {
            tick.tick().await;
        }
    };
    let counted = Arc::clone(&shared);
    let count_refused = move |answer: hyper::Response<tonic::body::Body>| {
        if let Some(label) = refused_by_tonic(answer.headers()) {
            counted.count(label, 1);
        }
        answer
    };
    let served = tonic::transport::Server::builder()
        .layer(MapResponseLayer::new(count_refused))
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
        // The answer is the receiver's own, not tonic's refusal.
        assert_eq!(refused_by_tonic(answer(status).headers()), None);
    }

    #[test]
    fn a_receiver_stopping_answers_unavailable() {
        let status = refused(Refused::Stopping);
        assert_eq!(status.code(), Code::Unavailable);
        assert!(status.get_details_retry_info().is_none());
        assert_eq!(refused_by_tonic(answer(status).headers()), None);
    }

    #[test]
    fn tonics_refusals_count_as_oversized_or_malformed_and_nothing_else_does() {
        for (status, label) in [
            (
                Status::out_of_range("decoded message length too large"),
                Some(DropLabel::Oversized),
            ),
            (
                Status::resource_exhausted("size limit exceeded while decompressing"),
                Some(DropLabel::Oversized),
            ),
            (
                Status::internal("failed to decompress"),
                Some(DropLabel::Malformed),
            ),
            (Status::invalid_argument("counted by the service"), None),
            (Status::unavailable("x"), None),
            (Status::unimplemented("x"), None),
        ] {
            assert_eq!(refused_by_tonic(answer(status).headers()), label);
        }
        // An answer with a message: no status in its headers.
        assert_eq!(refused_by_tonic(&hyper::HeaderMap::new()), None);
    }
}

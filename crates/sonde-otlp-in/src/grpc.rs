//! OTLP/gRPC: `MetricsService/Export` and `LogsService/Export`, served by
//! tonic on the receiver's single-threaded runtime, plain or gzip.
//!
//! | status | when | counted as |
//! |---|---|---|
//! | OK, an `Export…ServiceResponse` | taken; its `partial_success` as over HTTP | points, and the refused ones |
//! | UNAVAILABLE | the worker's (or the log source's) queue is full, or the agent is stopping; nothing was taken. OTLP exporters retry it | `queue_full` |
//! | OUT_OF_RANGE | a message over `max_body` as sent (tonic's limit, checked before decoding) | not counted: tonic answers before the receiver sees it |
//! | INTERNAL | a gzip message over `max_body` once inflated (tonic's inflating stops at the limit), or one that does not decode | not counted |

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
use tonic::codec::{Codec, CompressionEncoding, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::{Request, Response, Status};

use crate::http::{export_logs, export_metrics, Refused, Shared};

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

impl tower_service::Service<http::Request<tonic::body::Body>> for MetricsServer {
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
            Ok(Err(Refused(why))) => Err(Status::unavailable(why)),
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
            Err(Refused(why)) => Err(Status::unavailable(why)),
        }
    }
}

/// Serves `listener` with both services until `stop` says so.
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
    let served = tonic::transport::Server::builder()
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

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
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use prost::Message;
use std::sync::atomic::Ordering::Relaxed;
use tonic::codec::CompressionEncoding;
use tonic::{Request, Response, Status};

use crate::http::{export_logs, export_metrics, Refused, Shared};

struct Metrics(Arc<Shared>);
struct Logs(Arc<Shared>);

#[tonic::async_trait]
impl MetricsService for Metrics {
    async fn export(
        &self,
        request: Request<ExportMetricsServiceRequest>,
    ) -> Result<Response<ExportMetricsServiceResponse>, Status> {
        let request = request.into_inner();
        self.0
            .stats()
            .bytes
            .fetch_add(request.encoded_len() as u64, Relaxed);
        match export_metrics(&self.0, &request) {
            Ok(partial_success) => Ok(Response::new(ExportMetricsServiceResponse {
                partial_success,
            })),
            Err(Refused(why)) => Err(Status::unavailable(why)),
        }
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
    let metrics = MetricsServiceServer::new(Metrics(Arc::clone(&shared)))
        .accept_compressed(CompressionEncoding::Gzip)
        .max_decoding_message_size(max);
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

//! sonde's OTLP receiver: services instrumented with OpenTelemetry SDKs
//! send their metrics (and logs) here as they would to a Collector.
//!
//! A receiver is one listener and two threads: the server thread runs a
//! single-threaded tokio runtime that accepts connections, reads and
//! decodes each request and maps its data points onto sonde's kinds
//! ([`metrics`]); the worker thread ([`sonde_metrics::input::spawn_worker`])
//! records each request's points into its shard, as the socket receivers'
//! workers record theirs, so they are aggregated with every other input's
//! points. Log records go to the receiver's log source ([`logs`]). The
//! two threads meet at a bounded channel: a request that finds it
//! full is refused with a status the client retries (HTTP 429, gRPC
//! `RESOURCE_EXHAUSTED` with a `RetryInfo`), never taken and dropped; so
//! is one whose log records do not fit in the log source's queue (see
//! [`http`] and [`grpc`] for every status and what each counts).
#![deny(missing_docs)]

use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;

use sonde_metrics::receiver::{Ingest, ReceiverStats};

pub mod grpc;
pub mod http;
pub mod logs;
pub mod metrics;
pub mod wire;

/// The default most bytes of a request body, after decompression too.
pub const DEFAULT_MAX_BODY: usize = 4 << 20;

/// The default most cumulative series whose previous point is kept.
pub const DEFAULT_MAX_CUMULATIVE_SERIES: usize = 100_000;

/// Requests that may wait for the worker before the next is refused.
pub const QUEUE: usize = 16;

/// A receiver's settings, from its `[[receivers]]` table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// The receiver's name: the log source its records go to.
    pub name: String,
    /// The most bytes of a request body, compressed and decompressed.
    pub max_body: usize,
    /// The resource attributes kept as tags (and log fields).
    pub resource_attributes: Vec<String>,
    /// The most cumulative series whose previous point is kept.
    pub max_cumulative_series: usize,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            name: "otlp".into(),
            max_body: DEFAULT_MAX_BODY,
            resource_attributes: metrics::DEFAULT_RESOURCE_ATTRIBUTES
                .iter()
                .map(|s| s.to_string())
                .collect(),
            max_cumulative_series: DEFAULT_MAX_CUMULATIVE_SERIES,
        }
    }
}

/// Starts a receiver on `listener` (bound and listening, non-blocking),
/// OTLP/gRPC when `grpc`, else OTLP/HTTP:
/// its worker, recording through `ingest`, and its server thread (which
/// queues log records to `logs`, the receiver's log source when a sink
/// takes it), which
/// ends once `stop` says so (checked every 100 ms) and then lets the
/// worker hand over its open window and end too. Returns both threads.
///
/// # Errors
///
/// When a thread or the runtime cannot be started.
pub fn spawn(
    listener: std::net::TcpListener,
    grpc: bool,
    settings: Settings,
    ingest: Ingest,
    stop: Box<dyn Fn() -> bool + Send>,
    logs: Option<sonde_log_sources::events::EventQueue>,
) -> io::Result<Vec<JoinHandle<()>>> {
    let stats: Arc<ReceiverStats> = Arc::clone(ingest.stats());
    let label = stats.listen.clone();
    let (tx, worker) = sonde_metrics::input::spawn_worker(format!("otlp {label}"), ingest, QUEUE)?;
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    let shared = Arc::new(http::Shared::new(settings, tx, stats, since, logs));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    let server = std::thread::Builder::new()
        .name(format!("otlp {label}"))
        .spawn(move || {
            if grpc {
                rt.block_on(grpc::serve(listener, shared, stop));
            } else {
                rt.block_on(http::serve(listener, shared, stop));
            }
        })?;
    Ok(vec![worker, server])
}

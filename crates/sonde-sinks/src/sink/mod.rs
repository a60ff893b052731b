//! Sinks: where flushed windows go.
//!
//! Each sink runs on its own thread behind a bounded queue, so a slow or
//! stuck sink never delays the flusher, let alone the receivers: when the
//! queue is full the newest batch is dropped and counted
//! (`sonde_sink_dropped_batches_total{reason="queue_full"}`).

mod prometheus_exporter;
mod stats;

pub use prometheus_exporter::{Exposition, PrometheusExporter};
pub use stats::{FailReason, SinkDrop, SinkStats};

use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;

use sonde_aggregate::Batch;
use sonde_metrics::flusher::Output;

/// Points encoded per write by the text sinks: about 100 KiB of JSON, so a
/// window of a million points never needs a buffer of its size.
pub const ENCODE_CHUNK: usize = 1024;

/// Batches a sink's queue holds before the flusher starts dropping.
pub use sonde_metrics::flusher::QUEUE_BATCHES;

/// Writes flushed windows somewhere. The sink thread drives: it calls
/// [`Sink::write`] once per window, in order, and [`Sink::close`] once when
/// the agent stops.
pub trait Sink: Send + 'static {
    /// Writes one window's points.
    ///
    /// # Errors
    ///
    /// Any I/O error; it is logged and counted and the sink carries on with
    /// the next batch.
    fn write(&mut self, batch: &Batch) -> io::Result<()>;

    /// Flushes anything buffered before the agent exits.
    ///
    /// # Errors
    ///
    /// Any I/O error while flushing.
    fn close(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A sink that writes nothing: the blackhole sink's metric side, which
/// counts the points of every window it gets.
#[derive(Debug, Default)]
pub struct Discard;

impl Sink for Discard {
    fn write(&mut self, _: &Batch) -> io::Result<()> {
        Ok(())
    }
}

/// The flusher's end of a running sink.
#[derive(Debug)]
pub struct SinkHandle {
    tx: SyncSender<Arc<Batch>>,
    stats: Arc<SinkStats>,
}

impl Output for SinkHandle {
    /// The sink's name, as on `/metrics`.
    fn name(&self) -> &str {
        &self.stats.name
    }

    /// Queues a batch without blocking; a full queue drops it and counts it.
    fn send(&self, batch: Arc<Batch>) {
        match self.tx.try_send(batch) {
            Ok(()) => {}
            Err(TrySendError::Full(b)) | Err(TrySendError::Disconnected(b)) => {
                self.stats
                    .count_drop(SinkDrop::QueueFull, 1, b.len() as u64);
            }
        }
    }
}

impl SinkHandle {
    /// The flusher's end of `tx`, counting drops into `stats`.
    pub(crate) fn new(tx: SyncSender<Arc<Batch>>, stats: Arc<SinkStats>) -> SinkHandle {
        SinkHandle { tx, stats }
    }
}

/// Starts `sink` on its own thread. The thread exits once every
/// [`SinkHandle`] is dropped and the queue is drained.
pub fn spawn(
    mut sink: impl Sink,
    stats: Arc<SinkStats>,
) -> io::Result<(SinkHandle, JoinHandle<()>)> {
    let (tx, rx) = sync_channel::<Arc<Batch>>(QUEUE_BATCHES);
    let thread_stats = Arc::clone(&stats);
    let thread = std::thread::Builder::new()
        .name(format!("sink {}", stats.name))
        .spawn(move || {
            sonde_runtime::priority::enter_background();
            let stats = thread_stats;
            for batch in rx {
                match sink.write(&batch) {
                    Ok(()) => {
                        stats.batches.fetch_add(1, Relaxed);
                        stats.points.fetch_add(batch.len() as u64, Relaxed);
                    }
                    Err(e) => {
                        stats.errors.fetch_add(1, Relaxed);
                        tracing::warn!(sink = %stats.name, error = %e, "sink write failed");
                    }
                }
            }
            if let Err(e) = sink.close() {
                stats.errors.fetch_add(1, Relaxed);
                tracing::warn!(sink = %stats.name, error = %e, "sink close failed");
            }
        })?;
    Ok((SinkHandle { tx, stats }, thread))
}

//! Inputs that make their points themselves rather than parse a socket's
//! bytes: the host's own metrics, scraped Prometheus endpoints, OTLP
//! requests. Each fills a [`Points`] batch (owned names, tags and values)
//! and sends it to a worker thread of its own ([`spawn_worker`]), which
//! records it into its shard through the same [`Ingest`] stage as a
//! receiver's points: the same series limits, drop counters, tap and
//! window hand-off to the flusher.
//!
//! The channel is bounded: an input that makes points faster than its
//! worker records them finds it full ([`TrySendError::Full`]) and says so
//! to its own client (an OTLP request answered 429), or waits
//! ([`SyncSender::send`]) where it has no client to tell.

use std::io;
use std::sync::mpsc::{sync_channel, RecvTimeoutError, SyncSender};
use std::thread::JoinHandle;

#[cfg(doc)]
use std::sync::mpsc::TrySendError;

pub use crate::points::{write_tag, Points, Shared};
use crate::receiver::ingest::WAKE_INTERVAL;
use crate::receiver::Ingest;

/// Starts the worker thread `name` that records every batch sent to the
/// returned channel (at most `capacity` waiting) into `ingest`'s shard,
/// and hands its windows to the flusher as a receiver's worker does. The
/// thread ends once the agent stops (after handing over its last window)
/// or once every end of the channel is dropped (the input was removed by
/// a reload: its open window goes to the flusher first).
///
/// # Errors
///
/// When the thread cannot be spawned.
pub fn spawn_worker(
    name: String,
    mut ingest: Ingest,
    capacity: usize,
) -> io::Result<(SyncSender<Points>, JoinHandle<()>)> {
    let (tx, rx) = sync_channel::<Points>(capacity.max(1));
    let thread = std::thread::Builder::new().name(name).spawn(move || loop {
        match rx.recv_timeout(WAKE_INTERVAL) {
            Ok(points) => ingest.record(&points),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                ingest.retire_now();
                ingest.end_batch();
                return;
            }
        }
        if !ingest.end_batch() {
            return;
        }
    })?;
    Ok((tx, thread))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_proto::Kind;

    #[test]
    fn a_worker_records_each_batch_and_hands_its_window_to_the_flusher() {
        use crate::receiver::{Control, ReceiverStats};
        use sonde_aggregate::{AggregateConfig, Aggregator, Batch};
        use std::sync::atomic::Ordering;
        use std::sync::Arc;

        let config = Arc::new(AggregateConfig::default());
        let control = Arc::new(Control::default());
        let stats = Arc::new(ReceiverStats::new("host_metrics".into(), "host_metrics"));
        let (handoff, windows) = sync_channel(4);
        let ingest = Ingest::new(
            crate::receiver::Protocol::Statsd,
            Arc::clone(&stats),
            Arc::clone(&config),
            Arc::clone(&control),
            handoff,
        );
        let (tx, thread) = spawn_worker("input test".into(), ingest, 2).unwrap();
        for v in [2.0, 3.0] {
            let mut b = Points::new();
            b.push(Kind::Count, "disk.writes", [("device", "vda")], v);
            tx.send(b).unwrap();
        }
        // The worker takes both batches before it looks at the epoch
        // again: wait until it counted them.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while stats.points.load(Ordering::Relaxed) < 2 {
            assert!(std::time::Instant::now() < deadline);
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        control.epoch.fetch_add(1, Ordering::AcqRel);
        let h = windows
            .recv_timeout(std::time::Duration::from_secs(10))
            .unwrap();
        assert!(!h.last);
        let mut agg = Aggregator::new(config);
        agg.absorb_window(h.window);
        let mut out = Batch::new(1_763_800_200);
        agg.flush(1_763_800_200, 10.0, &mut out);
        let got: Vec<String> = out
            .points()
            .map(|p| {
                let tags: Vec<String> = p.series.tags().map(|(k, v)| format!("{k}={v}")).collect();
                format!("{} {} {}", p.name(), tags.join(","), p.value)
            })
            .collect();
        assert_eq!(got, ["disk.writes device=vda 5"]);
        // The input gone: the worker hands over its open window and ends.
        drop(tx);
        let h = windows
            .recv_timeout(std::time::Duration::from_secs(10))
            .unwrap();
        assert!(h.last);
        thread.join().unwrap();
    }
}

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
use std::ops::Range;
use std::sync::mpsc::{sync_channel, RecvTimeoutError, SyncSender};
use std::thread::JoinHandle;

#[cfg(doc)]
use std::sync::mpsc::TrySendError;

use sonde_proto::{Kind, Point, TagSyntax, Value};

use crate::receiver::ingest::WAKE_INTERVAL;
use crate::receiver::Ingest;

/// A batch of points an input made, with their names and tags in one
/// buffer. Tags are kept in DogStatsD's syntax (`key:value,key:value`),
/// which the shard splits as it splits a StatsD line's.
#[derive(Debug, Default, Clone)]
pub struct Points {
    bytes: Vec<u8>,
    points: Vec<Owned>,
}

#[derive(Debug, Clone)]
struct Owned {
    kind: Kind,
    name: Range<usize>,
    tags: Range<usize>,
    value: f64,
    timestamp: Option<i64>,
}

impl Points {
    /// An empty batch.
    pub fn new() -> Points {
        Points::default()
    }

    /// Adds a point of `kind` named `name` with `tags` (key, value) and
    /// `value`. A key's `:` and `,` and a value's `,` would split the tag
    /// elsewhere, so each becomes `_`; a tag with an empty key is left
    /// out. A value that is not finite, or an empty name, is refused
    /// (false) and not added.
    pub fn push<'t>(
        &mut self,
        kind: Kind,
        name: &str,
        tags: impl IntoIterator<Item = (&'t str, &'t str)>,
        value: f64,
    ) -> bool {
        if !value.is_finite() || name.is_empty() {
            return false;
        }
        let start = self.bytes.len();
        self.bytes.extend_from_slice(name.as_bytes());
        let name = start..self.bytes.len();
        let tags_start = self.bytes.len();
        for (k, v) in tags {
            if k.is_empty() {
                continue;
            }
            if self.bytes.len() > tags_start {
                self.bytes.push(b',');
            }
            self.bytes.extend(
                k.bytes()
                    .map(|b| if b == b':' || b == b',' { b'_' } else { b }),
            );
            self.bytes.push(b':');
            self.bytes
                .extend(v.bytes().map(|b| if b == b',' { b'_' } else { b }));
        }
        self.points.push(Owned {
            kind,
            name,
            tags: tags_start..self.bytes.len(),
            value,
            timestamp: None,
        });
        true
    }

    /// Points added.
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// True when no point was added.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// Empties the batch, keeping its memory.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.points.clear();
    }

    /// Each point, as the shard records it.
    pub fn each<'a>(&'a self, mut f: impl FnMut(&Point<'a>)) {
        for p in &self.points {
            f(&Point {
                kind: p.kind,
                name: &self.bytes[p.name.clone()],
                tags: &self.bytes[p.tags.clone()],
                tag_syntax: TagSyntax::DogStatsd,
                value: Value::Number(p.value),
                sample_rate: 1.0,
                timestamp: p.timestamp,
            });
        }
    }
}

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

    #[test]
    fn a_batch_keeps_names_tags_and_values_and_refuses_what_cannot_be_a_point() {
        let mut b = Points::new();
        assert!(b.push(
            Kind::Count,
            "system.network.io",
            [("device", "lo"), ("direction", "transmit")],
            1500.0
        ));
        assert!(b.push(
            Kind::Store,
            "odd",
            [("a:b,c", "x,y:z"), ("", "dropped")],
            -2.5
        ));
        assert!(!b.push(Kind::Store, "nan", [], f64::NAN));
        assert!(!b.push(Kind::Store, "", [], 1.0));
        assert_eq!(b.len(), 2);
        let mut got = Vec::new();
        b.each(|p| {
            got.push((
                p.kind,
                String::from_utf8(p.name.to_vec()).unwrap(),
                String::from_utf8(p.tags.to_vec()).unwrap(),
                p.value,
            ));
        });
        assert_eq!(
            got,
            [
                (
                    Kind::Count,
                    "system.network.io".to_string(),
                    "device:lo,direction:transmit".to_string(),
                    Value::Number(1500.0)
                ),
                (
                    Kind::Store,
                    "odd".to_string(),
                    "a_b_c:x_y:z".to_string(),
                    Value::Number(-2.5)
                ),
            ]
        );
        // The tags split back into what was given, as the shard splits
        // them.
        let mut spans = Vec::new();
        sonde_proto::tags::split_scalar(b"a_b_c:x_y:z", TagSyntax::DogStatsd, &mut spans).unwrap();
        assert_eq!(spans.len(), 1);
        b.clear();
        assert!(b.is_empty());
    }

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

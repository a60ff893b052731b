//! The `dogstatsd_events` log source: the DogStatsD events and service
//! checks that the StatsD receivers take, as log records routed like the
//! lines of any `[[logs]]` source (`inputs = ["dogstatsd_events"]`).
//!
//! # Records
//!
//! An event's record has its text as the message (the escaped newlines
//! `\n` turned back) and the attributes `type = "event"`, `title`,
//! `priority` (`normal` when not sent), `alert_type` (`info` when not
//! sent), `aggregation_key` and `source_type_name` when sent, and `tags`
//! (a list) when there are any. A service check's record has its `m:`
//! message (empty when not sent) and `type = "service_check"`, `check` (its
//! name), `status` (`ok`, `warning`, `critical` or `unknown`) and `tags`.
//! Both carry their `d:` time (else when the agent received them) and
//! their `h:` host (else the agent's), and a severity: an alert type
//! `error` or a status `critical` is ERROR, `warning` is WARN, the others
//! INFO (an `unknown` status has none). See [`super::record`] for how each
//! sink writes them.
//!
//! # Flow and bounds
//!
//! A receiver's worker parses each event line ([`EventQueue::push`]) and
//! queues its record without waiting: records of up to [`QUEUE_BYTES`]
//! may wait, each counted by the length of its line (which holds all it
//! says but the defaults). The
//! source's thread gathers them into batches, sent [`LINGER`] after their
//! first record (or at [`crate::source::BATCH_BYTES`]), and stops taking
//! records while [`MAX_IN_FLIGHT_BYTES`] are sent and not yet acknowledged
//! by every sink. The senders use UDP or a stream without replay, so a
//! record that finds the queue full cannot wait: it is dropped and counted
//! on `sonde_receiver_dropped_total{reason="events_behind"}`. A line that
//! breaks the event shapes is counted as `malformed_event`.
//!
//! The agent stops this source after its receivers, so that the events
//! they took are sent; it then waits up to [`crate::source::STOP_GRACE`]
//! for the sinks to acknowledge them.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use sonde_encode::record::{AttrValue, RecordMeta, Severity};
use sonde_logs::container::Format;
use sonde_proto::statsd::event::{self, Happening};

use crate::batch::{BatchBuilder, SourceInfo};
use crate::source::{LogInput, RunningSource, BATCH_BYTES, STOP_GRACE};
use crate::stats::LogStats;
use sonde_runtime::drops::DropLabel;

/// The name `inputs` gives this source.
pub const EVENTS_SOURCE: &str = "dogstatsd_events";

/// Bytes of records that may wait between the receivers and the source's
/// thread: a bound in bytes, since one datagram may carry a 64 KiB event.
pub const QUEUE_BYTES: usize = 4 << 20;

/// How long a record waits for others to share its batch.
pub const LINGER: Duration = Duration::from_millis(100);

/// Bytes of records sent and not acknowledged at which the source stops
/// taking records (and the queue fills).
pub const MAX_IN_FLIGHT_BYTES: usize = 4 << 20;

/// How long one wait lasts at most, so that a stop is noticed.
const MAX_WAIT: Duration = Duration::from_millis(200);

/// One record on its way from a receiver to the source.
#[derive(Debug)]
pub struct EventRecord {
    message: Vec<u8>,
    meta: RecordMeta,
}

/// The receivers' end of the source: every StatsD worker holds a clone.
#[derive(Clone, Debug)]
pub struct EventQueue {
    /// Each record with what it counts for against [`QUEUE_BYTES`].
    tx: Sender<(usize, EventRecord)>,
    /// Bytes of the records sent and not yet taken by the source.
    queued: Arc<AtomicUsize>,
}

impl EventQueue {
    /// Parses one event or service check line and queues its record.
    ///
    /// # Errors
    ///
    /// The label to count the line under when it is dropped: malformed,
    /// or the queue full (see the [module docs](self)).
    pub fn push(&self, line: &[u8]) -> Result<(), DropLabel> {
        let happening = event::parse(line).map_err(DropLabel::from)?;
        let size = line.len();
        // Several workers may pass the check at once: the bound may be
        // passed by a record per worker.
        if self.queued.load(Relaxed) + size > QUEUE_BYTES {
            return Err(DropLabel::EventsBehind);
        }
        self.queued.fetch_add(size, Relaxed);
        let r = record(&happening, unix_now());
        self.tx.send((size, r)).map_err(|_| {
            self.queued.fetch_sub(size, Relaxed);
            DropLabel::EventsBehind
        })
    }
}

impl EventQueue {
    /// Queues records made elsewhere (an OTLP request's log records, each
    /// with the bytes it counts for), all or none: none when they do not
    /// fit in what is left of [`QUEUE_BYTES`] or the source is gone, for
    /// the caller to refuse the whole request with a status its client
    /// retries.
    ///
    /// # Errors
    ///
    /// Why nothing was queued: the queue is full, or the source is gone.
    pub fn push_all(&self, records: Vec<(usize, EventRecord)>) -> Result<(), PushAllError> {
        let total: usize = records.iter().map(|(n, _)| n).sum();
        if self.queued.load(Relaxed) + total > QUEUE_BYTES {
            return Err(PushAllError::Full);
        }
        self.queued.fetch_add(total, Relaxed);
        for r in records {
            if self.tx.send(r).is_err() {
                // The source's end is gone (the agent is stopping): the
                // first send fails, and nothing was queued.
                self.queued.fetch_sub(total, Relaxed);
                return Err(PushAllError::Gone);
            }
        }
        Ok(())
    }
}

/// Why [`EventQueue::push_all`] queued nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PushAllError {
    /// The records do not fit in what is left of [`QUEUE_BYTES`]: the
    /// source's sinks are behind.
    Full,
    /// The source's thread is gone: the agent is stopping.
    Gone,
}

impl EventRecord {
    /// A record of `message` with `meta`.
    pub fn new(message: Vec<u8>, meta: RecordMeta) -> EventRecord {
        EventRecord { message, meta }
    }
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The record of `h`, received at `now` (seconds since the epoch).
pub fn record(h: &Happening<'_>, now: i64) -> EventRecord {
    let (message, common, severity, mut attributes) = match h {
        Happening::Event(e) => {
            let alert = e.alert_type.map_or_else(|| "info".to_owned(), text);
            let severity = match alert.as_str() {
                "error" => Severity::Error,
                "warning" => Severity::Warn,
                _ => Severity::Info,
            };
            let mut attrs = vec![
                ("type", AttrValue::Str("event".into())),
                ("title", AttrValue::Str(text(&event::unescape(e.title)))),
                (
                    "priority",
                    AttrValue::Str(e.priority.map_or_else(|| "normal".to_owned(), text)),
                ),
                ("alert_type", AttrValue::Str(alert)),
            ];
            if let Some(k) = e.aggregation_key {
                attrs.push(("aggregation_key", AttrValue::Str(text(k))));
            }
            if let Some(s) = e.source_type_name {
                attrs.push(("source_type_name", AttrValue::Str(text(s))));
            }
            (event::unescape(e.text), &e.common, Some(severity), attrs)
        }
        Happening::ServiceCheck(c) => {
            let (status, severity) = match c.status {
                0 => ("ok", Some(Severity::Info)),
                1 => ("warning", Some(Severity::Warn)),
                2 => ("critical", Some(Severity::Error)),
                _ => ("unknown", None),
            };
            let attrs = vec![
                ("type", AttrValue::Str("service_check".into())),
                ("check", AttrValue::Str(text(c.name))),
                ("status", AttrValue::Str(status.into())),
            ];
            let message = c.message.map(event::unescape).unwrap_or_default();
            (message, &c.common, severity, attrs)
        }
    };
    let tags: Vec<String> = common
        .tags
        .split(|&b| b == b',')
        .filter(|t| !t.is_empty())
        .map(text)
        .collect();
    if !tags.is_empty() {
        attributes.push(("tags", AttrValue::List(tags)));
    }
    EventRecord {
        message: message.into_owned(),
        meta: RecordMeta {
            host: common.host.map(text),
            timestamp: common.timestamp.unwrap_or(now),
            severity,
            attributes: attributes.into_iter().map(|(k, v)| (k.into(), v)).collect(),
        },
    }
}

/// Starts the source, sending to `sinks` and counting into `stats`;
/// returns the queue to hand to the StatsD receivers.
///
/// # Errors
///
/// The thread could not be spawned.
pub fn spawn(
    info: SourceInfo,
    sinks: Vec<LogInput>,
    stats: Arc<LogStats>,
) -> std::io::Result<(EventQueue, RunningSource)> {
    let (tx, rx) = channel();
    let queued = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let thread_stop = Arc::clone(&stop);
    let thread_queued = Arc::clone(&queued);
    let thread = std::thread::Builder::new()
        .name(format!("logs {}", info.name))
        .spawn(move || {
            sonde_runtime::priority::enter_background();
            let builder = BatchBuilder::new(Arc::new(info), Format::Lines, BATCH_BYTES);
            Run {
                rx,
                queued: thread_queued,
                sinks,
                builder,
                stats,
                first_at: None,
                sent: VecDeque::new(),
                unsent: 0,
                in_flight: 0,
            }
            .run(&thread_stop);
        })?;
    Ok((EventQueue { tx, queued }, RunningSource::new(stop, thread)))
}

struct Run {
    rx: Receiver<(usize, EventRecord)>,
    queued: Arc<AtomicUsize>,
    sinks: Vec<LogInput>,
    builder: BatchBuilder,
    stats: Arc<LogStats>,
    /// When the oldest record not yet sent came.
    first_at: Option<Instant>,
    /// `(seq, bytes)` of the batches sent and not acknowledged yet.
    sent: VecDeque<(u64, usize)>,
    /// Bytes of records taken and not sent yet.
    unsent: usize,
    in_flight: usize,
}

impl Run {
    fn run(mut self, stop: &AtomicBool) {
        let (done_tx, done_rx) = channel();
        loop {
            while let Ok(seq) = done_rx.try_recv() {
                self.acked(seq);
            }
            if stop.load(Relaxed) {
                break;
            }
            if self.in_flight >= MAX_IN_FLIGHT_BYTES {
                // The queue fills meanwhile; what does not fit is counted.
                if let Ok(seq) = done_rx.recv_timeout(MAX_WAIT) {
                    self.acked(seq);
                }
                continue;
            }
            let wait = self.first_at.map_or(MAX_WAIT, |t| {
                (t + LINGER).saturating_duration_since(Instant::now())
            });
            match self.rx.recv_timeout(wait) {
                Ok((size, r)) => self.add(size, r),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            // A full batch goes at once; what is not sent yet stays under
            // a batch, so the bytes read and not acknowledged stay bounded.
            if self.unsent >= BATCH_BYTES || self.first_at.is_some_and(|t| t.elapsed() >= LINGER) {
                self.send(&done_tx);
            }
        }
        // Stopping: the receivers are gone; send what they queued.
        while let Ok((size, r)) = self.rx.try_recv() {
            self.add(size, r);
        }
        self.send(&done_tx);
        let until = Instant::now() + STOP_GRACE;
        while !self.sent.is_empty() {
            let left = until.saturating_duration_since(Instant::now());
            match done_rx.recv_timeout(left) {
                Ok(seq) => self.acked(seq),
                Err(_) => {
                    tracing::warn!(
                        records_batches = self.sent.len(),
                        "stopping with DogStatsD events not acknowledged by every sink"
                    );
                    break;
                }
            }
        }
    }

    /// Takes `r`, which counted `size` against [`QUEUE_BYTES`].
    fn add(&mut self, size: usize, r: EventRecord) {
        self.queued.fetch_sub(size, Relaxed);
        self.stats.lines_read.fetch_add(1, Relaxed);
        self.stats
            .bytes_read
            .fetch_add(r.message.len() as u64, Relaxed);
        self.first_at.get_or_insert_with(Instant::now);
        self.unsent += r.message.len();
        self.builder.record(&r.message, r.meta);
    }

    fn send(&mut self, done: &std::sync::mpsc::Sender<u64>) {
        self.first_at = None;
        self.unsent = 0;
        for mut batch in self.builder.take() {
            batch.arm(self.sinks.len(), done, None);
            self.sent.push_back((batch.seq(), batch.bytes()));
            self.in_flight += batch.bytes();
            let batch = Arc::new(batch);
            for s in &self.sinks {
                // A sink that stopped no longer takes anything.
                let _ = s.tx.send(Arc::clone(&batch));
            }
        }
        self.stats
            .bytes_behind
            .store(self.in_flight as u64, Relaxed);
    }

    /// Batch `seq` was acknowledged by every sink.
    fn acked(&mut self, seq: u64) {
        if let Some(i) = self.sent.iter().position(|(s, _)| *s == seq) {
            let (_, bytes) = self.sent.remove(i).unwrap_or_default();
            self.in_flight -= bytes;
        }
        self.stats
            .bytes_behind
            .store(self.in_flight as u64, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(line: &str) -> EventRecord {
        record(&event::parse(line.as_bytes()).unwrap(), 42)
    }

    #[test]
    fn an_event_becomes_its_text_with_its_fields_as_attributes() {
        let r = rec("_e{6,14}:deploy|v2\\nrolled out|h:web-1|t:warning|k:dep|#env:prod,,blue");
        assert_eq!(r.message, b"v2\nrolled out");
        assert_eq!(r.meta.host.as_deref(), Some("web-1"));
        assert_eq!(r.meta.timestamp, 42);
        assert_eq!(r.meta.severity, Some(Severity::Warn));
        let s = |v: &str| AttrValue::Str(v.into());
        assert_eq!(
            r.meta
                .attributes
                .iter()
                .map(|(k, v)| (&**k, v.clone()))
                .collect::<Vec<_>>(),
            [
                ("type", s("event")),
                ("title", s("deploy")),
                ("priority", s("normal")),
                ("alert_type", s("warning")),
                ("aggregation_key", s("dep")),
                (
                    "tags",
                    AttrValue::List(vec!["env:prod".into(), "blue".into()])
                ),
            ]
        );
    }

    #[test]
    fn a_service_check_becomes_its_message_with_name_and_status() {
        let r = rec("_sc|redis|2|d:1700000000|m:down\\nfor 10s");
        assert_eq!(r.message, b"down\nfor 10s");
        assert_eq!(r.meta.timestamp, 1_700_000_000);
        assert_eq!(r.meta.host, None);
        assert_eq!(r.meta.severity, Some(Severity::Error));
        let s = |v: &str| AttrValue::Str(v.into());
        assert_eq!(
            r.meta
                .attributes
                .iter()
                .map(|(k, v)| (&**k, v.clone()))
                .collect::<Vec<_>>(),
            [
                ("type", s("service_check")),
                ("check", s("redis")),
                ("status", s("critical"))
            ]
        );
        assert_eq!(rec("_sc|x|3").meta.severity, None);
        assert!(rec("_sc|x|0").message.is_empty());
    }

    /// The source with one sink, whose batches come out of the receiver.
    fn start() -> (
        EventQueue,
        RunningSource,
        Receiver<Arc<super::super::LogBatch>>,
        Arc<LogStats>,
    ) {
        let (tx, rx) = channel();
        let stats = Arc::new(LogStats::new(EVENTS_SOURCE.into()));
        let info = SourceInfo {
            name: EVENTS_SOURCE.into(),
            host: "h".into(),
            fields: Vec::new(),
        };
        let input = LogInput {
            tx,
            restored: None,
            positions: false,
        };
        let (queue, running) = spawn(info, vec![input], Arc::clone(&stats)).unwrap();
        (queue, running, rx, stats)
    }

    #[test]
    fn records_are_batched_in_order_and_counted_and_a_stopped_source_takes_none() {
        let (queue, running, rx, stats) = start();
        for i in 0..10 {
            let text = format!("n{i}");
            let line = format!("_e{{1,{}}}:t|{text}", text.len());
            queue.push(line.as_bytes()).unwrap();
        }
        assert_eq!(queue.push(b"_e{1,1}:t|"), Err(DropLabel::MalformedEvent));
        let mut got = Vec::new();
        while got.len() < 10 {
            let b = rx.recv_timeout(Duration::from_secs(10)).expect("a batch");
            got.extend(b.lines().map(|l| l.bytes.to_vec()));
            assert!(b.lines().all(|l| l.meta.is_some() && l.path.is_empty()));
            b.ack();
        }
        let want: Vec<Vec<u8>> = (0..10).map(|i| format!("n{i}").into_bytes()).collect();
        assert_eq!(got, want);
        assert_eq!(stats.lines_read.load(Relaxed), 10);
        running.stop();
        // Stopped, the queue takes nothing more.
        assert_eq!(queue.push(b"_sc|x|0"), Err(DropLabel::EventsBehind));
    }

    #[test]
    fn a_sink_that_does_not_acknowledge_bounds_what_is_sent_and_queued() {
        let (queue, running, rx, stats) = start();
        let text = "x".repeat(60_000);
        let line = format!("_e{{1,{}}}:t|{text}", text.len());
        let mut taken = 0usize;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match queue.push(line.as_bytes()) {
                Ok(()) => taken += 1,
                Err(DropLabel::EventsBehind) => break,
                Err(other) => panic!("{other:?}"),
            }
            assert!(Instant::now() < deadline, "never behind after {taken}");
        }
        // What was taken is what the source sent (under its in-flight
        // bound, passed by the last batch of up to a batch and a record),
        // what it holds unsent (under a batch) and what waits in the queue
        // (under its bound, passed by a record).
        let per = text.len();
        let most = (MAX_IN_FLIGHT_BYTES + 2 * BATCH_BYTES + QUEUE_BYTES) / per + 3;
        assert!(
            taken <= most,
            "{taken} records taken, at most {most} expected"
        );
        let sent: Vec<Arc<super::super::LogBatch>> = rx.try_iter().collect();
        let sent_bytes: usize = sent.iter().map(|b| b.bytes()).sum();
        assert!(
            sent_bytes <= MAX_IN_FLIGHT_BYTES + BATCH_BYTES + per,
            "{sent_bytes}"
        );
        // Acknowledged, the source takes what waited and sends it.
        for b in &sent {
            b.ack();
        }
        let mut total = sent.iter().map(|b| b.len()).sum::<usize>();
        while total < taken {
            let b = rx
                .recv_timeout(Duration::from_secs(10))
                .expect("the waiting records");
            total += b.len();
            b.ack();
        }
        assert_eq!(total, taken);
        assert_eq!(stats.lines_read.load(Relaxed), taken as u64);
        running.stop();
    }
}

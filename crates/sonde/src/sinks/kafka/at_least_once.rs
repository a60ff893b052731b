//! `delivery = "at_least_once"`: one idempotent producer for every source
//! of the sink, driven by one thread.
//!
//! # Acknowledgements
//!
//! Each record carries (as librdkafka's per-message opaque) the
//! [`Pending`] of its batch, which counts the records Kafka has yet to
//! report. The report of the batch's last record acknowledges the batch to
//! its source, so a checkpoint never passes a line Kafka did not
//! acknowledge with `acks=all`.
//!
//! `message.timeout.ms = 0`: librdkafka retries a record for ever, so an
//! absent broker stalls the sink, never drops a line. What stalls is
//! bounded twice: librdkafka's queue (`queue.buffering.max.kbytes`; a full
//! queue makes the thread serve reports and retry, batch by batch), and the
//! source, which stops reading once 16 MiB are unacknowledged.
//!
//! A record Kafka refuses for good (larger than the topic's
//! `max.message.bytes`, a topic the client may not write) is counted in
//! `dropped_records{reason="rejected"}` and logged; it does not hold its
//! batch back, which is acknowledged when its other records are.
//!
//! A fatal producer error (the idempotent producer's sequence broken)
//! replaces the producer: every batch not yet acknowledged is sent again by
//! the new one, so those lines may arrive twice, never not at all.
//!
//! # Stopping
//!
//! Once every source dropped its sender, the thread waits up to
//! `shutdown_grace` for the reports of what it sent, then exits. Batches
//! still unacknowledged are purged, not acknowledged: their lines are read
//! again at the next start.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering::Relaxed};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{
    BaseProducer, BaseRecord, DeliveryResult, Partitioner, Producer, ProducerContext,
};
use rdkafka::ClientContext;
use sonde_io::logs::{LogBatch, LogInput};
use sonde_io::sink::{SinkDrop, SinkStats};

use super::record::Encoder;
use super::{producer_config, Settings};
use crate::sinks::{NetSink, Running, Start};

/// How long the thread waits for a batch when it has nothing to send and
/// nothing in flight.
const IDLE_WAIT: Duration = Duration::from_millis(100);

/// How long it waits for a batch while records are in flight: their
/// reports are served between waits, and each report that completes a
/// batch lets its source read on.
const REPORT_WAIT: Duration = Duration::from_millis(5);

/// How long it serves reports before retrying a send that found
/// librdkafka's queue full.
const FULL_WAIT: Duration = Duration::from_millis(50);

/// A batch on its way: acknowledged to its source once `left` reaches 0.
#[derive(Debug)]
pub struct Pending {
    batch: Arc<LogBatch>,
    /// Records Kafka has not reported yet.
    left: AtomicUsize,
    /// Records Kafka refused for good.
    rejected: AtomicUsize,
    /// Set when the producer that sent it is replaced: its reports no
    /// longer count.
    abandoned: AtomicBool,
}

impl Pending {
    fn new(batch: Arc<LogBatch>) -> Arc<Self> {
        Arc::new(Pending {
            left: AtomicUsize::new(batch.len()),
            batch,
            rejected: AtomicUsize::new(0),
            abandoned: AtomicBool::new(false),
        })
    }

    fn done(&self) -> bool {
        self.left.load(Relaxed) == 0
    }

    /// One record is settled; the last acknowledges the batch.
    fn settle(&self, stats: &SinkStats) {
        if self.left.fetch_sub(1, Relaxed) == 1 {
            let delivered = self.batch.len() - self.rejected.load(Relaxed);
            stats.batches.fetch_add(1, Relaxed);
            stats.records.fetch_add(delivered as u64, Relaxed);
            stats
                .bytes_raw
                .fetch_add(self.batch.bytes() as u64, Relaxed);
            self.batch.ack();
        }
    }

    /// One record is refused for good: counted, logged, settled.
    fn reject(&self, stats: &SinkStats, error: &KafkaError) {
        self.rejected.fetch_add(1, Relaxed);
        stats.dropped_records[SinkDrop::Rejected as usize].fetch_add(1, Relaxed);
        tracing::error!(sink = %stats.name, source = %self.batch.source().name, %error, "kafka refused a record; it is dropped");
        self.settle(stats);
    }
}

/// Puts every record of a batch into one partition, and each batch into
/// the next partition: the batches librdkafka builds stay as large as a
/// log batch allows, as with its sticky partitioner.
///
/// # Design
///
/// librdkafka's sticky partitioner reads the clock for every record to
/// decide when to move on (10% of the sink's CPU in `clock_gettime` when
/// shipping 150-byte lines; docs/BENCHMARKS.md, "a partition per log
/// batch"); this one reads an atomic the sending thread moves once per
/// batch. A partition without a leader is skipped while another has one.
#[derive(Debug, Default)]
pub struct BatchPartitioner {
    /// The batch being sent: its records go to partition `batch % count`.
    batch: AtomicU32,
}

impl BatchPartitioner {
    /// The records sent from now on belong to the next batch.
    fn next_batch(&self) {
        self.batch.fetch_add(1, Relaxed);
    }
}

impl Partitioner for BatchPartitioner {
    fn partition(
        &self,
        _topic: &str,
        _key: Option<&[u8]>,
        count: i32,
        available: impl Fn(i32) -> bool,
    ) -> i32 {
        let count = count.max(1);
        let first = (self.batch.load(Relaxed) % count.unsigned_abs()) as i32;
        (0..count)
            .map(|i| (first + i) % count)
            .find(|&p| available(p))
            .unwrap_or(first)
    }
}

/// Serves delivery reports (on the sink's thread, inside `poll`) and
/// chooses the records' partitions.
pub struct Reports {
    stats: Arc<SinkStats>,
    partitioner: BatchPartitioner,
}

impl ClientContext for Reports {}

impl ProducerContext<BatchPartitioner> for Reports {
    type DeliveryOpaque = Arc<Pending>;

    fn get_custom_partitioner(&self) -> Option<&BatchPartitioner> {
        Some(&self.partitioner)
    }

    fn delivery(&self, result: &DeliveryResult<'_>, pending: Arc<Pending>) {
        if pending.abandoned.load(Relaxed) {
            return;
        }
        match result {
            Ok(_) => pending.settle(&self.stats),
            Err((e, _)) => match e.rdkafka_error_code() {
                // Purged at shutdown, or lost with a fatal error (the thread
                // replays the batch): neither delivered nor refused.
                Some(
                    RDKafkaErrorCode::PurgeQueue
                    | RDKafkaErrorCode::PurgeInflight
                    | RDKafkaErrorCode::Fatal,
                ) => {}
                _ => pending.reject(&self.stats, e),
            },
        }
    }
}

type Kafka = BaseProducer<Reports, BatchPartitioner>;

fn create(k: &Settings, net: &NetSink, stats: &Arc<SinkStats>) -> anyhow::Result<Kafka> {
    let mut c = producer_config(k, net);
    // 0: no timeout; a record is retried until Kafka takes it.
    c.set("message.timeout.ms", "0");
    // Records without a key reach the custom partitioner only with the
    // sticky one off.
    c.set("sticky.partitioning.linger.ms", "0");
    c.create_with_context(Reports {
        stats: Arc::clone(stats),
        partitioner: BatchPartitioner::default(),
    })
    .with_context(|| format!("creating the kafka producer of sink {}", stats.name))
}

/// Starts the sink's log side: one channel every source sends into, one
/// thread, one producer.
///
/// # Errors
///
/// librdkafka refused the configuration, or the thread did not start.
pub fn start(k: &Settings, net: &NetSink, st: &mut Start<'_>) -> anyhow::Result<Running> {
    let stats = Arc::clone(&st.stats);
    let producer = create(k, net, &stats)?;
    let (tx, rx) = channel();
    let logs = st
        .sources
        .iter()
        .map(|s| {
            (
                s.name.clone(),
                LogInput {
                    tx: tx.clone(),
                    restored: None,
                    positions: false,
                },
            )
        })
        .collect();
    drop(tx);
    let (k, net) = (k.clone(), net.clone());
    tracing::info!(sink = %stats.name, target = %net.target, compression = net.compression.name(), "kafka sink sending lines, at least once");
    let thread = std::thread::Builder::new()
        .name(format!("sink {} logs", stats.name))
        .spawn(move || run(producer, rx, &k, &net, &stats))
        .context("starting the kafka sink's thread")?;
    Ok(Running {
        windows: None,
        logs,
        threads: vec![thread],
    })
}

/// What the thread holds between rounds.
struct Sender {
    producer: Kafka,
    encoder: Encoder,
    /// Batches received and not yet handed to librdkafka.
    backlog: VecDeque<Arc<LogBatch>>,
    /// A batch handed over in part (librdkafka's queue filled): its
    /// pending and the index of its next line.
    cursor: Option<(Arc<Pending>, usize)>,
    /// Batches handed over, in order, until acknowledged.
    in_flight: Vec<Arc<Pending>>,
}

fn run(
    producer: Kafka,
    rx: Receiver<Arc<LogBatch>>,
    k: &Settings,
    net: &NetSink,
    stats: &Arc<SinkStats>,
) {
    let mut s = Sender {
        producer,
        encoder: Encoder::new(k.format),
        backlog: VecDeque::new(),
        cursor: None,
        in_flight: Vec::new(),
    };
    let mut closed_at: Option<Instant> = None;
    let grace = net.delivery.shutdown_grace;
    loop {
        if closed_at.is_none() {
            let idle = s.backlog.is_empty() && s.cursor.is_none();
            let first = if idle {
                let wait = if s.in_flight.is_empty() {
                    IDLE_WAIT
                } else {
                    REPORT_WAIT
                };
                rx.recv_timeout(wait)
            } else {
                rx.try_recv().map_err(|e| match e {
                    std::sync::mpsc::TryRecvError::Empty => RecvTimeoutError::Timeout,
                    std::sync::mpsc::TryRecvError::Disconnected => RecvTimeoutError::Disconnected,
                })
            };
            match first {
                Ok(b) => {
                    s.backlog.push_back(b);
                    s.backlog.extend(rx.try_iter());
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => closed_at = Some(Instant::now()),
            }
        }
        let full = s.send(k, stats);
        s.producer
            .poll(if full { FULL_WAIT } else { Duration::ZERO });
        s.in_flight.retain(|p| !p.done());
        if let Some((code, reason)) = s.producer.client().fatal_error() {
            tracing::error!(sink = %stats.name, ?code, %reason, batches = s.in_flight.len(), "the kafka producer failed for good; sending what it had not delivered again with a new one");
            s.replace(k, net, stats);
        }
        if let Some(at) = closed_at {
            let idle = s.backlog.is_empty() && s.cursor.is_none() && s.in_flight.is_empty();
            if idle {
                break;
            }
            if at.elapsed() >= grace {
                let lines: usize = s.in_flight.iter().map(|p| p.batch.len()).sum::<usize>()
                    + s.backlog.iter().map(|b| b.len()).sum::<usize>();
                tracing::warn!(sink = %stats.name, lines, ?grace, "kafka did not acknowledge every line within shutdown_grace; they will be read and sent again at the next start");
                break;
            }
            if !full {
                s.producer.poll(FULL_WAIT);
            }
        }
    }
    for p in &s.in_flight {
        p.abandoned.store(true, Relaxed);
    }
}

impl Sender {
    /// Hands lines to librdkafka until its queue is full (true) or the
    /// backlog is empty (false).
    fn send(&mut self, k: &Settings, stats: &SinkStats) -> bool {
        loop {
            let (pending, next) = match self.cursor.take() {
                Some(c) => c,
                None => {
                    let Some(batch) = self.backlog.pop_front() else {
                        return false;
                    };
                    let p = Pending::new(batch);
                    if p.batch.is_empty() {
                        p.batch.ack();
                        continue;
                    }
                    self.producer.context().partitioner.next_batch();
                    self.in_flight.push(Arc::clone(&p));
                    (p, 0)
                }
            };
            let batch = Arc::clone(&pending.batch);
            let source = batch.source();
            let headers = self.encoder.headers(source);
            for (i, line) in batch.lines().enumerate().skip(next) {
                let line_headers = self.encoder.line_headers(source, &line, &headers);
                let value = self.encoder.value(source, &line);
                let mut record = BaseRecord::<(), [u8], Arc<Pending>>::with_opaque_to(
                    &k.topic,
                    Arc::clone(&pending),
                )
                .payload(value);
                if let Some(h) = line_headers {
                    record = record.headers(h);
                }
                match self.producer.send(record) {
                    Ok(()) => {}
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                        self.cursor = Some((pending, i));
                        return true;
                    }
                    Err((e, _)) => pending.reject(stats, &e),
                }
            }
        }
    }

    /// Replaces a producer that failed for good and queues every batch it
    /// had not delivered, in order, to be sent again.
    fn replace(&mut self, k: &Settings, net: &NetSink, stats: &Arc<SinkStats>) {
        let producer = loop {
            match create(k, net, stats) {
                Ok(p) => break p,
                Err(e) => {
                    tracing::error!(sink = %stats.name, error = %format!("{e:#}"), "cannot create a kafka producer; trying again");
                    std::thread::sleep(net.delivery.backoff_max);
                }
            }
        };
        self.cursor = None;
        for p in self.in_flight.drain(..).rev() {
            p.abandoned.store(true, Relaxed);
            self.backlog.push_front(Arc::clone(&p.batch));
        }
        // The old producer purges its queue on drop; its reports are
        // abandoned.
        self.producer = producer;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_io::logs::SourceInfo;

    fn batch(lines: usize) -> (Arc<LogBatch>, std::sync::mpsc::Receiver<u64>) {
        let (done, acked) = channel();
        let info = SourceInfo {
            name: "app".into(),
            host: "h".into(),
            fields: Vec::new(),
        };
        let text: Vec<(&str, u64, &[u8])> =
            (0..lines).map(|i| ("/a", i as u64, &b"x"[..])).collect();
        (Arc::new(LogBatch::for_test(info, 7, &text, 1, done)), acked)
    }

    #[test]
    fn a_batchs_records_share_a_partition_and_the_next_batch_takes_the_next() {
        let p = BatchPartitioner::default();
        let all = |_: i32| true;
        let first = p.partition("t", None, 3, all);
        assert_eq!(
            p.partition("t", None, 3, all),
            first,
            "one batch, one partition"
        );
        let mut seen = vec![first];
        for _ in 0..2 {
            p.next_batch();
            seen.push(p.partition("t", None, 3, all));
        }
        seen.sort_unstable();
        assert_eq!(seen, [0, 1, 2], "three batches over three partitions");
        p.next_batch();
        let due = p.partition("t", None, 3, all);
        let without_leader = |q: i32| q != due;
        assert_eq!(p.partition("t", None, 3, without_leader), (due + 1) % 3);
        assert_eq!(
            p.partition("t", None, 3, |_| false),
            due,
            "none has a leader"
        );
        assert_eq!(p.partition("t", None, 1, all), 0);
    }

    #[test]
    fn a_batch_is_acknowledged_once_when_its_last_record_settles() {
        let stats = SinkStats::new("k".into());
        let (b, acked) = batch(3);
        let p = Pending::new(b);
        p.settle(&stats);
        p.reject(
            &stats,
            &KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge),
        );
        assert!(
            acked.try_recv().is_err(),
            "acknowledged before its last record"
        );
        assert!(!p.done());
        p.settle(&stats);
        assert!(p.done());
        assert_eq!(acked.try_iter().collect::<Vec<_>>(), [7]);
        assert_eq!(stats.records.load(Relaxed), 2);
        assert_eq!(
            stats.dropped_records[SinkDrop::Rejected as usize].load(Relaxed),
            1
        );
        assert_eq!(stats.batches.load(Relaxed), 1);
    }
}

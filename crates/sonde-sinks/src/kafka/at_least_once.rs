//! `delivery = "at_least_once"`: sonde's own producer
//! ([`sonde_kafka`]) for every source of the sink, driven by one thread.
//!
//! Building the record batches here costs a fraction of what librdkafka
//! costs when each line is a record: docs/BENCHMARKS.md ("Logs into
//! Kafka") has the figures, docs/adr/0004-own-kafka-producer.md the
//! decision.
//!
//! # Requests
//!
//! A log batch goes whole to one partition, the next batch to the next
//! partition that has a leader. It is cut into produce requests of at
//! most 1,000,000 bytes of records (under the broker's default
//! `max.message.bytes` even uncompressed) and `max_batch_points` records,
//! each one record batch, compressed as the sink says. A partition has one
//! request in flight at a time, so its records stay in order through
//! retries; up to five requests are in flight over all partitions, one
//! connection per broker.
//!
//! # Acknowledgements and failures
//!
//! A log batch is acknowledged to its source once every request of it
//! was answered without error (`acks=all`), so a checkpoint never passes a
//! line Kafka did not take.
//!
//! * The producer is idempotent: it asks the cluster for a producer id,
//!   and each batch carries the sequence number of its first record in
//!   its partition, so the broker writes a batch sent twice only once.
//! * A connection that fails or times out is closed; its requests go back
//!   to the head of the queue, in order, and are sent again after a
//!   backoff (`retry_min_backoff` to `retry_max_backoff`) once the
//!   metadata is asked again, with the same sequence numbers: a request
//!   the broker had written is answered as a duplicate and counted as
//!   delivered. If the broker lost the producer's sequences (its id
//!   expired, say) the sink takes a new id and sends what is pending
//!   again; only then may a line arrive twice.
//! * Errors Kafka says may heal (a leader moved, not enough replicas, a
//!   timeout) are retried the same way, for ever: an absent broker stalls
//!   the sink, never drops a line, and the source stops reading once its
//!   lines in flight reach their bound.
//! * A request too large for the topic (`MESSAGE_TOO_LARGE`) is cut in
//!   two and each half sent again; a single record too large, and any
//!   other refusal (a topic the client may not write), is counted in
//!   `dropped_records{reason="rejected"}` and logged, and the rest of its
//!   batch goes on.
//!
//! # Stopping
//!
//! Once every source dropped its sender, the thread goes on for up to
//! `shutdown_grace`, then exits. Batches not yet acknowledged are left:
//! their lines are read again at the next start.

use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::sender::Backoff;
use crate::sink::{FailReason, SinkDrop, SinkStats};
use anyhow::Context as _;
use sonde_kafka::batch::next_sequence;
use sonde_kafka::client::DUPLICATE_SEQUENCE;
use sonde_kafka::client::{begin_produce, code_name, producer_refused, retriable, too_large};
use sonde_kafka::{BatchBuilder, Cluster, Compressor, Error as KafkaError, Producer};
use sonde_log_sources::{LogBatch, LogInput};

use super::record::{now_ms, Encoder};
use super::Settings;
use crate::descriptor::{NetSink, Running, Start};

/// Produce requests in flight over all connections.
const MAX_IN_FLIGHT: usize = 5;

/// Most bytes of records in one request (before compression): under the
/// broker's default `max.message.bytes` (1 MiB) even when the records do
/// not compress.
pub const MAX_REQUEST_RECORDS_BYTES: usize = 1_000_000;

/// How long the thread waits for a batch when it has nothing to do.
const IDLE_WAIT: Duration = Duration::from_millis(100);

/// Starts the sink's log side: one channel every source sends into, one
/// thread, one producer (connecting on first use).
///
/// # Errors
///
/// The compression level is refused, or the thread did not start.
pub fn start(k: &Settings, net: &NetSink, st: &mut Start<'_>) -> anyhow::Result<Running> {
    let stats = Arc::clone(&st.stats);
    let compressor = Compressor::new(net.compression)
        .with_context(|| format!("the compression of kafka sink {}", stats.name))?;
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
    let d = &net.delivery;
    k.security.warn(&stats.name);
    let dial = k
        .security
        .dial("sonde", d.request_timeout)
        .with_context(|| format!("kafka sink {}", stats.name))?;
    let mut cluster = Cluster::new(&k.brokers, &[&k.topic], dial);
    cluster.set_max_age(k.metadata_max_age);
    let sender = Sender {
        cluster,
        compressor,
        builder: BatchBuilder::new(),
        request: Vec::new(),
        encoder: Encoder::new(k.format),
        batches: HashMap::new(),
        next_id: 0,
        pending: VecDeque::new(),
        in_flight: VecDeque::new(),
        next_partition: 0,
        producer: None,
        sequences: HashMap::new(),
        backoff: Backoff::new(d.backoff_min, d.backoff_max),
        creating: None,
        next_try: Instant::now(),
        max_records: d.max_batch_points.clamp(1, i32::MAX as usize),
        timeout_ms: i32::try_from(d.request_timeout.as_millis()).unwrap_or(i32::MAX),
        stats: Arc::clone(&stats),
    };
    let grace = d.shutdown_grace;
    tracing::info!(sink = %stats.name, target = %net.target, compression = net.compression.name(), "kafka sink sending lines, at least once");
    let thread = std::thread::Builder::new()
        .name(format!("sink {} logs", stats.name))
        .spawn(move || sender.run(&rx, grace))
        .context("starting the kafka sink's thread")?;
    Ok(Running {
        windows: None,
        profiles: None,
        logs,
        threads: vec![thread],
    })
}

/// A log batch on its way.
struct Tracked {
    batch: Arc<LogBatch>,
    /// Its partition, chosen when its first request goes.
    partition: Option<i32>,
    /// Its requests not yet answered, sent or not.
    units: usize,
}

/// A run of lines of one batch, sent as one request.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Unit {
    batch: u64,
    lines: Range<usize>,
}

/// A request in flight.
struct Sent {
    unit: Unit,
    node: i32,
    partition: i32,
    /// The producer id it was sent with.
    producer_id: i64,
    bytes: usize,
}

/// How long a topic may be "being created" (see [`Sender::failed`])
/// before that is a warning; a broker creates one in well under a second.
const TOPIC_CREATION_PATIENCE: Duration = Duration::from_secs(10);

struct Sender {
    cluster: Cluster,
    compressor: Compressor,
    builder: BatchBuilder,
    request: Vec<u8>,
    encoder: Encoder,
    batches: HashMap<u64, Tracked>,
    next_id: u64,
    /// Requests to send, in order; a unit's lines may still be cut at
    /// the request size when it goes.
    pending: VecDeque<Unit>,
    /// Requests sent, oldest first, over every connection.
    in_flight: VecDeque<Sent>,
    next_partition: usize,
    /// The idempotent producer's id and epoch, once the cluster gave them.
    producer: Option<(i64, i16)>,
    /// The sequence number of the next record, per partition.
    sequences: HashMap<i32, i32>,
    backoff: Backoff,
    /// Since when the topic's metadata says it is being created, while
    /// it does, and whether that was warned of
    /// ([`TOPIC_CREATION_PATIENCE`]).
    creating: Option<(Instant, bool)>,
    /// No send before this (after a failure).
    next_try: Instant,
    max_records: usize,
    timeout_ms: i32,
    stats: Arc<SinkStats>,
}

impl Sender {
    fn run(mut self, rx: &Receiver<Arc<LogBatch>>, grace: Duration) {
        let mut closed_at: Option<Instant> = None;
        loop {
            if closed_at.is_none() {
                let got = if self.in_flight.is_empty() {
                    let wait = if self.pending.is_empty() {
                        IDLE_WAIT
                    } else {
                        self.next_try
                            .saturating_duration_since(Instant::now())
                            .min(IDLE_WAIT)
                    };
                    rx.recv_timeout(wait)
                } else {
                    rx.try_recv().map_err(|e| match e {
                        TryRecvError::Empty => RecvTimeoutError::Timeout,
                        TryRecvError::Disconnected => RecvTimeoutError::Disconnected,
                    })
                };
                match got {
                    Ok(b) => {
                        self.take(b);
                        while let Ok(b) = rx.try_recv() {
                            self.take(b);
                        }
                    }
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => {
                        closed_at = Some(Instant::now());
                        if !self.pending.is_empty() || !self.in_flight.is_empty() {
                            let lines: usize = self.batches.values().map(|t| t.batch.len()).sum();
                            tracing::info!(sink = %self.stats.name, lines, shutdown_grace = ?grace, "stopping: waiting for kafka to acknowledge what is queued");
                        }
                    }
                }
            }
            self.send_ready();
            if let Some(at) = closed_at {
                if self.pending.is_empty() && self.in_flight.is_empty() {
                    break;
                }
                let left = grace.saturating_sub(at.elapsed());
                if left.is_zero() {
                    let lines: usize = self.batches.values().map(|t| t.batch.len()).sum();
                    tracing::warn!(sink = %self.stats.name, lines, ?grace, "kafka did not acknowledge every line within shutdown_grace; they will be read and sent again at the next start");
                    break;
                }
                if self.in_flight.is_empty() {
                    std::thread::sleep(
                        self.next_try
                            .saturating_duration_since(Instant::now())
                            .min(left)
                            .min(IDLE_WAIT),
                    );
                    continue;
                }
                self.receive(Some(left));
            } else if !self.in_flight.is_empty() {
                self.receive(None);
            }
        }
    }

    /// Queues a batch from a source.
    fn take(&mut self, batch: Arc<LogBatch>) {
        if batch.is_empty() {
            batch.ack();
            return;
        }
        let id = self.next_id;
        self.next_id += 1;
        self.pending.push_back(Unit {
            batch: id,
            lines: 0..batch.len(),
        });
        self.batches.insert(
            id,
            Tracked {
                batch,
                partition: None,
                units: 1,
            },
        );
    }

    /// Sends pending requests while a connection, a partition and room in
    /// flight allow.
    fn send_ready(&mut self) {
        if self.pending.is_empty() || Instant::now() < self.next_try {
            return;
        }
        // Metadata marked stale waits for the requests in flight (their
        // answers may say more); metadata merely old is read again at once
        // (from a connection with nothing in flight).
        if self.cluster.is_stale() && (self.in_flight.is_empty() || !self.cluster.is_marked_stale())
        {
            if let Err(e) = self.cluster.refresh() {
                self.failed(&e, "cannot read the topic's metadata");
                return;
            }
        }
        if self.producer.is_none() && self.in_flight.is_empty() {
            match self.cluster.init_producer_id() {
                Ok(ids) => {
                    self.producer = Some(ids);
                    self.sequences.clear();
                }
                Err(e) => {
                    self.failed(&e, "cannot get a producer id");
                    return;
                }
            }
        }
        if self.producer.is_none() {
            return;
        }
        while self.in_flight.len() < MAX_IN_FLIGHT {
            let Some(i) = self.next_sendable() else {
                return;
            };
            let unit = self.pending.remove(i).expect("found above");
            if !self.send(unit, i) {
                return;
            }
        }
    }

    /// The first pending unit whose partition is free and has a leader
    /// (choosing a partition for a batch that has none yet).
    fn next_sendable(&mut self) -> Option<usize> {
        let busy: Vec<i32> = self.in_flight.iter().map(|s| s.partition).collect();
        let partitions = self.cluster.partitions();
        let free = |p: i32| !busy.contains(&p);
        for (i, u) in self.pending.iter().enumerate() {
            let t = self.batches.get_mut(&u.batch).expect("tracked");
            match t.partition {
                Some(p) => {
                    if free(p) && self.cluster.leader(p).is_some() {
                        return Some(i);
                    }
                }
                None => {
                    let n = partitions.len();
                    let pick = (0..n)
                        .map(|k| partitions[(self.next_partition + k) % n])
                        .find(|p| p.leader.is_some() && free(p.id))?;
                    self.next_partition = (self.next_partition + 1) % n.max(1);
                    t.partition = Some(pick.id);
                    return Some(i);
                }
            }
        }
        None
    }

    /// Encodes and sends `unit` (taken from `pending[at]`); false when it
    /// could not go (it is back in `pending`).
    fn send(&mut self, mut unit: Unit, at: usize) -> bool {
        let t = &self.batches[&unit.batch];
        let partition = t.partition.expect("chosen by next_sendable");
        let Some(node) = self.cluster.leader(partition) else {
            self.pending.insert(at, unit);
            return false;
        };
        let batch = Arc::clone(&t.batch);
        let frame = begin_produce(
            &mut self.request,
            self.cluster.client_id(),
            None,
            -1,
            self.timeout_ms,
            self.cluster.topic(),
            partition,
        );
        let limits = (MAX_REQUEST_RECORDS_BYTES, self.max_records);
        let end = self.encoder.fill(
            &mut self.builder,
            &batch,
            unit.lines.clone(),
            limits,
            now_ms(),
        );
        if end < unit.lines.end {
            // The rest of the batch goes as the next request of its
            // partition.
            self.pending.insert(
                at,
                Unit {
                    batch: unit.batch,
                    lines: end..unit.lines.end,
                },
            );
            unit.lines.end = end;
            self.batches.get_mut(&unit.batch).expect("tracked").units += 1;
        }
        let (producer_id, epoch) = self.producer.expect("set by send_ready");
        let producer = Producer {
            id: producer_id,
            epoch,
            base_sequence: self.sequences.get(&partition).copied().unwrap_or(0),
        };
        if let Err(e) = self
            .builder
            .finish(&mut self.compressor, producer, &mut self.request)
        {
            // The codec failed on these records: nothing else can be done
            // with them.
            self.builder.clear();
            self.stats.failures[FailReason::Encode as usize]
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::error!(sink = %self.stats.name, error = %e, records = unit.lines.len(), "cannot compress a record batch; its records are dropped");
            self.reject(&unit);
            return true;
        }
        let bytes = self.request.len();
        let sent = self
            .cluster
            .connection(node)
            .and_then(|c| c.send_produce(&mut self.request, frame));
        if let Err(e) = sent {
            // The records are encoded again when the unit goes again.
            self.pending.insert(at, unit);
            self.broken(node, &e);
            return false;
        }
        self.in_flight.push_back(Sent {
            unit,
            node,
            partition,
            producer_id,
            bytes,
        });
        true
    }

    /// Reads the response to the oldest request in flight, waiting at
    /// most `limit` beyond the connection's own timeout.
    fn receive(&mut self, limit: Option<Duration>) {
        let Some(node) = self.in_flight.front().map(|s| s.node) else {
            return;
        };
        let Some(conn) = self.cluster.connected(node) else {
            self.broken(
                node,
                &KafkaError::Io(std::io::Error::other("connection closed")),
            );
            return;
        };
        if let Some(limit) = limit {
            let _ = conn.set_read_timeout(limit);
        }
        let result = conn.recv_produce();
        // A quota's throttle: nothing more is sent until it is over.
        let throttled = conn.take_throttle();
        if let Some(until) = conn.throttled_until() {
            self.next_try = self.next_try.max(until);
        }
        self.stats.throttled_ms.fetch_add(
            u64::try_from(throttled.as_millis()).unwrap_or(u64::MAX),
            std::sync::atomic::Ordering::Relaxed,
        );
        let code = match result {
            Ok(r) => r.first().map_or(0, |p| p.error),
            Err(e) => {
                self.broken(node, &e);
                return;
            }
        };
        let sent = self.in_flight.pop_front().expect("front above");
        let records = sent.unit.lines.len();
        use std::sync::atomic::Ordering::Relaxed;
        if code == 0 || code == DUPLICATE_SEQUENCE {
            if self.producer.is_some_and(|(id, _)| id == sent.producer_id) {
                let next = self.sequences.entry(sent.partition).or_insert(0);
                *next = next_sequence(*next, records);
            }
            if self.backoff.failures() > 0 && self.creating.is_none() {
                tracing::info!(sink = %self.stats.name, after_failures = self.backoff.failures(), "kafka reachable again");
            }
            self.creating = None;
            self.backoff.reset();
            self.stats.records.fetch_add(records as u64, Relaxed);
            self.stats.bytes_sent.fetch_add(sent.bytes as u64, Relaxed);
            self.settle(&sent.unit);
        } else if producer_refused(code) {
            self.stats.retries.fetch_add(1, Relaxed);
            self.pending.push_front(sent.unit);
            if self.producer.is_some_and(|(id, _)| id == sent.producer_id) {
                self.producer = None;
            }
            self.failed(
                &KafkaError::Broker {
                    api: "Produce",
                    code,
                },
                "kafka lost the producer's sequence; sending again under a new producer id",
            );
        } else if retriable(code) {
            self.stats.retries.fetch_add(1, Relaxed);
            self.pending.push_front(sent.unit);
            self.cluster.mark_stale();
            self.failed(
                &KafkaError::Broker {
                    api: "Produce",
                    code,
                },
                "kafka refused a request for now",
            );
        } else if too_large(code) && records > 1 {
            let Unit { batch, lines } = sent.unit;
            let mid = lines.start + records / 2;
            self.pending.push_front(Unit {
                batch,
                lines: mid..lines.end,
            });
            self.pending.push_front(Unit {
                batch,
                lines: lines.start..mid,
            });
            self.batches.get_mut(&batch).expect("tracked").units += 1;
            tracing::info!(sink = %self.stats.name, records, "a request was too large for the topic; sending it in two halves");
        } else {
            tracing::error!(sink = %self.stats.name, error = %code_name(code), records, "kafka refused records for good; they are dropped");
            self.reject(&sent.unit);
        }
    }

    /// Counts the records of `unit` refused for good, and settles it.
    fn reject(&mut self, unit: &Unit) {
        self.stats.dropped_records[SinkDrop::Rejected as usize].fetch_add(
            unit.lines.len() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        self.settle(unit);
    }

    /// One request of a batch is answered; the last acknowledges the
    /// batch to its source.
    fn settle(&mut self, unit: &Unit) {
        use std::sync::atomic::Ordering::Relaxed;
        let t = self.batches.get_mut(&unit.batch).expect("tracked");
        t.units -= 1;
        if t.units == 0 {
            let t = self.batches.remove(&unit.batch).expect("tracked");
            self.stats.batches.fetch_add(1, Relaxed);
            self.stats
                .bytes_raw
                .fetch_add(t.batch.bytes() as u64, Relaxed);
            t.batch.ack();
        }
    }

    /// A connection failed: its requests go back to the head of the
    /// queue, in order, and everything waits a backoff.
    fn broken(&mut self, node: i32, e: &KafkaError) {
        self.cluster.disconnect(node);
        let mut back = Vec::new();
        self.in_flight.retain(|s| {
            if s.node == node {
                back.push(s.unit.clone());
                false
            } else {
                true
            }
        });
        self.stats
            .retries
            .fetch_add(back.len() as u64, std::sync::atomic::Ordering::Relaxed);
        for u in back.into_iter().rev() {
            self.pending.push_front(u);
        }
        self.failed(e, "the connection to a kafka broker failed");
    }

    /// Counts a failure and sets the backoff before the next send.
    fn failed(&mut self, e: &KafkaError, what: &str) {
        let reason = match e {
            KafkaError::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => {
                FailReason::Connect
            }
            KafkaError::Io(io)
                if matches!(
                    io.kind(),
                    std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
                ) =>
            {
                FailReason::Timeout
            }
            KafkaError::Tls { .. } => FailReason::Tls,
            KafkaError::Auth { .. } => FailReason::Auth,
            _ => FailReason::Io,
        };
        self.stats.failures[reason as usize].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let first = self.backoff.failures() == 0;
        let delay = self.backoff.next_delay();
        let now = Instant::now();
        self.next_try = now + delay;
        // A broker that creates topics on first use answers the first
        // metadata request for a new topic with UNKNOWN_TOPIC_OR_PARTITION
        // (or LEADER_NOT_AVAILABLE while it elects one): the healthy first
        // start, said at info. Only when that lasts is it a warning.
        if matches!(
            e,
            KafkaError::Broker {
                api: "Metadata",
                code: 3 | 5
            }
        ) {
            let (since, warned) = self.creating.get_or_insert((now, false));
            if first {
                tracing::info!(sink = %self.stats.name, error = %e, "the topic is not there yet; waiting for the broker to create it");
            } else if !*warned && since.elapsed() >= TOPIC_CREATION_PATIENCE {
                *warned = true;
                tracing::warn!(sink = %self.stats.name, error = %e, waited = ?since.elapsed(), "the topic still does not exist: create it, or let the broker create topics on first use (auto.create.topics.enable); will retry");
            } else {
                tracing::debug!(sink = %self.stats.name, error = %e, retry_in = ?delay, "{what}; will retry");
            }
            return;
        }
        self.creating = None;
        if first {
            tracing::warn!(sink = %self.stats.name, error = %e, retry_in = ?delay, "{what}; will retry");
        } else {
            tracing::debug!(sink = %self.stats.name, error = %e, retry_in = ?delay, "{what}; will retry");
        }
    }
}

//! `delivery = "exactly_once"`: per source, one transactional producer
//! and one thread; the lines and the source's read positions are
//! committed together, and Kafka holds the positions a restart resumes
//! from.
//!
//! # Transactions
//!
//! A transaction holds whole batches and ends after a batch that carries
//! the source's read positions ([`LogBatch::positions`]): its records go
//! to `topic`, the positions (the source's `Checkpoints` as JSON) to
//! `offsets_topic` under the key `{host}/{source}`. It is committed once a
//! second has passed since it began or [`COMMIT_BYTES`] of lines are in it,
//! whichever comes first; only then are its batches acknowledged to the
//! source.
//!
//! The producer is sonde's own ([`sonde_kafka::Transactional`]): calls
//! retry what may heal for up to 10 s (`CALL_TIMEOUT`). On any other failure
//! the producer takes a new epoch from its coordinator, which aborts the
//! open transaction (and fences a producer still using the old epoch),
//! and the same batches are produced again in a new transaction. Either
//! way nothing is acknowledged before a commit succeeded, and an aborted
//! transaction is invisible to a `read_committed` consumer. A record the
//! topic refuses (over its `max.message.bytes` once compressed: a batch
//! is halved until the record is alone) is dropped, and counted once its
//! transaction commits.
//!
//! # Start
//!
//! The `transactional.id` is `sonde-{host}-{source}`: the same at every
//! start of the same host and source. Each source's thread creates
//! `offsets_topic` (compacted) if it is missing, starts its producer (whose
//! first epoch aborts a transaction a killed predecessor left
//! open), then reads `offsets_topic` with `read_committed` up to its high
//! watermark; the source's last positions there are where it resumes,
//! wherever its checkpoint file (saved after commits, so never ahead)
//! says otherwise. Until that succeeds (the broker may be down) the thread
//! tries again, and the source reads and holds its lines meanwhile; once
//! the positions come it drops the held lines they cover.
//!
//! # A `data_dir` that cannot be written
//!
//! Nothing here writes under `agent.data_dir`: the positions live in
//! Kafka, committed with the lines they follow. While the source's
//! checkpoint file cannot be saved, this sink goes on delivering: the
//! promise rests on the committed positions, which a restart resumes from
//! wherever a stale checkpoint file says less, so holding delivery would
//! protect nothing (tests/kafka_sink.rs,
//! `exactly_once_delivers_on_while_checkpoints_cannot_be_saved_and_resumes_from_kafka`).
//!
//! # Stopping
//!
//! Once the source dropped its sender, a transaction that ends on
//! positions is committed (within `shutdown_grace`); one that does not is
//! aborted, and its lines are read again at the next start.

use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::sink::{SinkDrop, SinkStats};
use anyhow::Context as _;
use sonde_kafka::read::{read_committed, TOPIC_ALREADY_EXISTS};
use sonde_kafka::{BatchBuilder, Cluster, Compressor, Dial, ProduceError, Transactional};
use sonde_log_sources::{LogBatch, LogInput, SourceInfo};
use sonde_logs::Checkpoints;

use super::at_least_once::MAX_REQUEST_RECORDS_BYTES;
use super::record::{now_ms, Encoder};
use super::Settings;
use crate::descriptor::{NetSink, Running, Start};

/// A transaction is committed once it holds this many bytes of lines, or
/// once it is a second old ([`COMMIT_EVERY`]).
pub const COMMIT_BYTES: usize = 4 << 20;

/// How long a transaction stays open at most (when it ends on positions).
pub const COMMIT_EVERY: Duration = Duration::from_secs(1);

/// `transaction.timeout.ms`: how long the broker keeps a transaction of a
/// producer that died open. While it is open, `read_committed` readers of
/// its partitions (other hosts' sinks at their start included) wait, so it
/// is short; a transaction here lives about a second.
const TRANSACTION_TIMEOUT: Duration = Duration::from_secs(10);

/// How long starting waits for the broker: creating the offsets topic,
/// initialising the producers, reading the positions back (which may wait
/// for another producer's transaction to time out).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How long one commit or abort call may take before it is retried.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the thread waits for a batch when no transaction is open.
const IDLE_WAIT: Duration = Duration::from_millis(200);

/// The `transactional.id` of `source`.
pub fn transactional_id(source: &SourceInfo) -> String {
    format!("sonde-{}-{}", source.host, source.name)
}

/// The key of `source`'s positions in the offsets topic.
pub fn positions_key(source: &SourceInfo) -> String {
    format!("{}/{}", source.host, source.name)
}

/// The source's transactional producer, initialised: its `init` fences
/// an older producer with the same `transactional.id` and aborts what it
/// left open.
fn create(k: &Settings, dial: &Dial, source: &SourceInfo) -> anyhow::Result<Transactional> {
    let mut t = Transactional::new(
        &k.brokers,
        &[&k.topic, &k.offsets_topic],
        &transactional_id(source),
        TRANSACTION_TIMEOUT,
        CALL_TIMEOUT,
        dial.clone(),
    );
    t.set_metadata_max_age(k.metadata_max_age);
    t.init().with_context(|| {
        format!(
            "initialising the kafka transactions of {} (is a broker of {} up?)",
            transactional_id(source),
            k.brokers.join(",")
        )
    })?;
    Ok(t)
}

/// Creates `offsets_topic` if it does not exist: one partition, compacted
/// (only each source's last positions matter), the broker's replication
/// factor (3 on a broker too old to take its default, or fewer when the
/// cluster has fewer brokers).
fn create_offsets_topic(k: &Settings, dial: &Dial) -> anyhow::Result<()> {
    let mut cluster = Cluster::new(&k.brokers, &[&k.offsets_topic], dial.clone());
    let brokers = cluster.bootstrap_brokers().context("asking the brokers")?;
    let node = brokers
        .first()
        .copied()
        .context("the cluster lists no broker")?;
    let replicas = i16::try_from(brokers.len().min(3)).unwrap_or(3);
    let created = cluster.connection(node).and_then(|c| {
        c.create_topic(
            &k.offsets_topic,
            1,
            replicas,
            &[("cleanup.policy", "compact")],
            START_TIMEOUT,
        )
    });
    match created {
        Ok(()) => Ok(()),
        Err(sonde_kafka::Error::Broker { code, .. }) if code == TOPIC_ALREADY_EXISTS => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating the offsets topic {}", k.offsets_topic)),
    }
}

/// The last committed positions under each key of the offsets topic, read
/// with `read_committed` up to the end every partition had when the read
/// began.
fn read_positions(k: &Settings, dial: &Dial) -> anyhow::Result<HashMap<String, Checkpoints>> {
    let topic = k.offsets_topic.as_str();
    let mut cluster = Cluster::new(&k.brokers, &[topic], dial.clone());
    let records = read_committed(&mut cluster, Instant::now() + START_TIMEOUT)
        .with_context(|| format!("reading {topic} up to its end"))?;
    let mut last = HashMap::new();
    for r in records {
        let Some(key) = r.key else { continue };
        let key = String::from_utf8_lossy(&key).into_owned();
        match serde_json::from_slice::<Checkpoints>(&r.value) {
            Ok(c) => {
                last.insert(key, c);
            }
            Err(e) => {
                tracing::warn!(topic, %key, offset = r.offset, error = %e, "positions in the offsets topic do not parse; not trusted");
            }
        }
    }
    Ok(last)
}

/// Starts one thread per source. Each connects (see `connect`), hands
/// the source the positions `offsets_topic` holds for it, and then runs its
/// transactions. The agent starts whether or not the broker is up: the
/// source reads and holds its lines until the positions came.
///
/// # Errors
///
/// A thread could not be spawned.
pub fn start(k: &Settings, net: &NetSink, st: &mut Start<'_>) -> anyhow::Result<Running> {
    let stats = Arc::clone(&st.stats);
    let mut logs = Vec::new();
    let mut threads = Vec::new();
    for source in st.sources {
        let (tx, rx) = channel();
        let (restore_tx, restore_rx) = channel();
        logs.push((
            source.name.clone(),
            LogInput {
                tx,
                restored: Some(restore_rx),
                positions: true,
            },
        ));
        let (k, net, source, stats) = (k.clone(), net.clone(), source.clone(), Arc::clone(&stats));
        threads.push(
            std::thread::Builder::new()
                .name(format!("sink {} {}", stats.name, source.name))
                .spawn(move || {
                    let Some((producer, positions)) = connect(&k, &net, &source, &stats, &rx) else {
                        return;
                    };
                    tracing::info!(sink = %stats.name, source = %source.name, restored = positions.is_some(), "kafka sink sending lines, exactly once");
                    // A source that stopped meanwhile no longer listens.
                    let _ = restore_tx.send(positions);
                    let encoder = Encoder::new(k.format);
                    let compressor = match Compressor::new(net.compression) {
                        Ok(c) => c,
                        Err(e) => {
                            tracing::error!(sink = %stats.name, source = %source.name, error = %e, "cannot compress with the configured codec; the sink sends nothing");
                            return;
                        }
                    };
                    let mut t = Transactions {
                        txn: producer,
                        compressor,
                        builder: BatchBuilder::transactional(),
                        k,
                        net,
                        source,
                        stats,
                        encoder,
                        open: Vec::new(),
                        bytes: 0,
                        refused: Vec::new(),
                        began: None,
                        partition: 0,
                        next_partition: 0,
                        rx,
                        stash: VecDeque::new(),
                        closed_at: None,
                    };
                    t.run();
                })
                .context("starting a kafka sink thread")?,
        );
    }
    Ok(Running {
        windows: None,
        profiles: None,
        logs,
        threads,
    })
}

/// How long [`connect`] waits between attempts, at most.
const CONNECT_BACKOFF_MAX: Duration = Duration::from_secs(5);

/// Creates `offsets_topic` if it is missing, starts the source's
/// transactional producer (whose `init_transactions` aborts a transaction
/// a killed predecessor left open) and reads the source's last positions;
/// tries again with a growing pause until it succeeds, or returns `None`
/// once the source has gone (its sender dropped).
fn connect(
    k: &Settings,
    net: &NetSink,
    source: &SourceInfo,
    stats: &SinkStats,
    rx: &Receiver<Arc<LogBatch>>,
) -> Option<(Transactional, Option<Checkpoints>)> {
    let mut pause = Duration::from_millis(250);
    let mut logged = false;
    loop {
        let attempt = k
            .security
            .dial("sonde", net.delivery.request_timeout)
            .and_then(|dial| {
                create_offsets_topic(k, &dial)?;
                Ok(dial)
            })
            .and_then(|dial| {
                let producer = create(k, &dial, source)?;
                let mut positions = read_positions(k, &dial)?;
                Ok((producer, positions.remove(&positions_key(source))))
            });
        match attempt {
            Ok(connected) => return Some(connected),
            Err(e) if !logged => {
                tracing::warn!(sink = %stats.name, source = %source.name, error = format!("{e:#}"), "kafka not reachable; the source waits and sonde keeps trying");
                logged = true;
            }
            Err(e) => {
                tracing::debug!(sink = %stats.name, source = %source.name, error = format!("{e:#}"), "kafka still not reachable")
            }
        }
        match rx.recv_timeout(pause) {
            // Nothing is sent before the positions; a batch means a bug,
            // and it is kept by nobody: its lines are read again.
            Ok(_) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return None,
        }
        pause = (pause * 2).min(CONNECT_BACKOFF_MAX);
    }
}

/// A transaction that could not go on: the producer is initialised
/// again (which aborts it) and its batches produced again.
struct Failed(String);

impl From<sonde_kafka::Error> for Failed {
    fn from(e: sonde_kafka::Error) -> Self {
        Failed(e.to_string())
    }
}

/// One source's thread.
struct Transactions {
    txn: Transactional,
    compressor: Compressor,
    builder: BatchBuilder,
    k: Settings,
    net: NetSink,
    source: SourceInfo,
    stats: Arc<SinkStats>,
    encoder: Encoder,
    /// The batches of the open transaction.
    open: Vec<Arc<LogBatch>>,
    /// Their bytes.
    bytes: usize,
    /// Per open batch, its records Kafka refused.
    refused: Vec<usize>,
    /// When it began; `None` when none is open.
    began: Option<Instant>,
    /// The partition of `topic` its records go to.
    partition: i32,
    /// Where the next transaction looks for a partition.
    next_partition: usize,
    rx: Receiver<Arc<LogBatch>>,
    /// Batches received while a commit was being retried.
    stash: VecDeque<Arc<LogBatch>>,
    /// When the source dropped its sender.
    closed_at: Option<Instant>,
}

impl Transactions {
    fn run(&mut self) {
        loop {
            let wait = match self.began {
                Some(at) => COMMIT_EVERY.saturating_sub(at.elapsed()),
                None => IDLE_WAIT,
            };
            let next = match self.stash.pop_front() {
                Some(b) => Ok(b),
                None if self.closed_at.is_some() => Err(RecvTimeoutError::Disconnected),
                None => self.rx.recv_timeout(wait),
            };
            match next {
                Ok(batch) => {
                    if let Err(f) = self.add(batch) {
                        self.recover(f);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    self.closed_at.get_or_insert_with(Instant::now);
                }
            }
            let closing = self.closed_at.is_some() && self.stash.is_empty();
            let due = self.began.is_some_and(|at| at.elapsed() >= COMMIT_EVERY)
                || self.bytes >= COMMIT_BYTES
                || closing;
            if due && self.ends_on_positions() {
                self.commit();
            }
            if closing || self.give_up() {
                if !self.open.is_empty() {
                    let lines: usize = self.open.iter().map(|b| b.len()).sum();
                    tracing::warn!(sink = %self.stats.name, source = %self.source.name, lines, "stopping with lines not committed to kafka; aborting, they will be read and sent again at the next start");
                    let _ = self.txn.abort();
                }
                return;
            }
        }
    }

    /// Whether the source stopped and `shutdown_grace` has passed since:
    /// then a commit that keeps failing is given up. Batches that arrive
    /// meanwhile wait in `stash`.
    fn give_up(&mut self) -> bool {
        if self.closed_at.is_none() {
            loop {
                match self.rx.try_recv() {
                    Ok(b) => self.stash.push_back(b),
                    Err(std::sync::mpsc::TryRecvError::Empty) => break,
                    Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                        self.closed_at = Some(Instant::now());
                        break;
                    }
                }
            }
        }
        self.closed_at
            .is_some_and(|at| at.elapsed() >= self.net.delivery.shutdown_grace)
    }

    fn ends_on_positions(&self) -> bool {
        self.open.last().is_some_and(|b| b.positions().is_some())
    }

    /// Adds a batch to the open transaction (beginning one if none is).
    fn add(&mut self, batch: Arc<LogBatch>) -> Result<(), Failed> {
        self.bytes += batch.bytes();
        self.open.push(Arc::clone(&batch));
        self.refused.push(0);
        if self.began.is_none() {
            self.begin()?;
        }
        let refused = self.produce(&batch)?;
        if let Some(r) = self.refused.last_mut() {
            *r = refused;
        }
        Ok(())
    }

    /// Begins a transaction: the next partition of `topic` that has a
    /// leader, and the offsets topic's partition 0, added to it.
    fn begin(&mut self) -> Result<(), Failed> {
        let partitions = self.txn.cluster().partitions();
        let n = partitions.len();
        let p = (0..n)
            .map(|i| partitions[(self.next_partition + i) % n])
            .find(|p| p.leader.is_some())
            .ok_or_else(|| Failed(format!("no partition of {} has a leader", self.k.topic)))?;
        self.next_partition = (self.next_partition + 1) % n.max(1);
        self.partition = p.id;
        self.txn
            .add_partitions(&[(&self.k.topic, p.id), (&self.k.offsets_topic, 0)])?;
        self.began = Some(Instant::now());
        Ok(())
    }

    /// Produces a batch's records, and its positions if it has them;
    /// returns how many records Kafka refused.
    fn produce(&mut self, batch: &LogBatch) -> Result<usize, Failed> {
        let now = now_ms();
        let refused = self.send_lines(batch, 0..batch.len(), now)?;
        if let Some(p) = batch.positions() {
            let value = serde_json::to_vec(p).map_err(|e| Failed(e.to_string()))?;
            let key = positions_key(batch.source());
            self.builder.push(now, Some(key.as_bytes()), &value, &[]);
            let topic = self.k.offsets_topic.clone();
            match self
                .txn
                .produce(&topic, 0, &mut self.builder, &mut self.compressor)
            {
                Ok(()) => {}
                // The positions would be lost with the lines: the
                // transaction cannot commit them.
                Err(e) => return Err(Failed(format!("the positions record: {e}"))),
            }
        }
        Ok(refused)
    }

    /// Produces the lines `range` of `batch` in record batches of at
    /// most 1 MB of records (halving one the topic finds too large);
    /// returns how many records Kafka refused.
    fn send_lines(
        &mut self,
        batch: &LogBatch,
        range: Range<usize>,
        now: i64,
    ) -> Result<usize, Failed> {
        let limits = (
            MAX_REQUEST_RECORDS_BYTES,
            self.net.delivery.max_batch_points.max(1),
        );
        let mut refused = 0;
        let mut start = range.start;
        while start < range.end {
            let end = self
                .encoder
                .fill(&mut self.builder, batch, start..range.end, limits, now);
            let produced = self.txn.produce(
                &self.k.topic,
                self.partition,
                &mut self.builder,
                &mut self.compressor,
            );
            self.stats.throttled_ms.fetch_add(
                u64::try_from(self.txn.take_throttled().as_millis()).unwrap_or(u64::MAX),
                Relaxed,
            );
            match produced {
                Ok(()) => {}
                Err(ProduceError::TooLarge) if end - start > 1 => {
                    let mid = start + (end - start) / 2;
                    refused += self.send_lines(batch, start..mid, now)?;
                    refused += self.send_lines(batch, mid..end, now)?;
                }
                Err(ProduceError::TooLarge | ProduceError::Refused(_)) => refused += end - start,
                Err(ProduceError::Failed(e)) => return Err(e.into()),
            }
            start = end;
        }
        Ok(refused)
    }

    /// Commits the open transaction, recovering and committing again until
    /// it succeeds or [`Self::give_up`]; acknowledges its batches once it did.
    fn commit(&mut self) {
        loop {
            match self.txn.commit() {
                Ok(()) => {
                    let refused: usize = self.refused.drain(..).sum();
                    if refused > 0 {
                        self.stats.dropped_records[SinkDrop::Rejected as usize]
                            .fetch_add(refused as u64, Relaxed);
                        tracing::error!(sink = %self.stats.name, source = %self.source.name, records = refused, "records kafka refused (larger than the topic's max.message.bytes?) were dropped");
                    }
                    let records: usize = self.open.iter().map(|b| b.len()).sum::<usize>() - refused;
                    self.stats
                        .batches
                        .fetch_add(self.open.len() as u64, Relaxed);
                    self.stats.records.fetch_add(records as u64, Relaxed);
                    self.stats.bytes_raw.fetch_add(self.bytes as u64, Relaxed);
                    for b in self.open.drain(..) {
                        b.ack();
                    }
                    self.bytes = 0;
                    self.began = None;
                    return;
                }
                Err(e) => self.recover(e.into()),
            }
            if self.give_up() {
                return;
            }
        }
    }

    /// Initialises the producer again (which aborts the open transaction)
    /// and produces the open batches again in a new transaction, until that
    /// works or [`Self::give_up`].
    fn recover(&mut self, mut failed: Failed) {
        let mut pause = self.net.delivery.backoff_min;
        loop {
            tracing::warn!(sink = %self.stats.name, source = %self.source.name, error = %failed.0, "kafka transaction failed; aborting it and sending its lines again");
            self.stats.retries.fetch_add(1, Relaxed);
            self.began = None;
            match self.txn.init() {
                Ok(()) => match self.replay() {
                    Ok(()) => return,
                    Err(f) => failed = f,
                },
                Err(e) => failed = e.into(),
            }
            if self.give_up() {
                return;
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(self.net.delivery.backoff_max);
        }
    }

    /// Begins a transaction and produces the open batches into it.
    fn replay(&mut self) -> Result<(), Failed> {
        self.begin()?;
        for (i, b) in self.open.clone().iter().enumerate() {
            self.refused[i] = self.produce(b)?;
        }
        Ok(())
    }
}

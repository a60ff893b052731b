//! What the producer needs besides producing: creating a topic
//! (`CreateTopics`), the offsets a partition starts and ends at
//! (`ListOffsets`), and reading a topic from its start to its end as a
//! `read_committed` consumer sees it (`Fetch`), for the exactly-once
//! sink's start, which reads back the positions it committed.
//!
//! [`read_committed`] skips the records of aborted transactions as Kafka's
//! consumers do: the broker lists, with each fetched partition, the
//! producers whose transactions were aborted and where each began; a
//! transactional batch of such a producer from that offset on is skipped
//! until the producer's abort marker (a control batch) is passed.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use crate::batch::decode;
use crate::client::{Connection, Error};
use crate::cluster::Cluster;
use crate::wire::{
    put_i16, put_i32, put_i64, put_i8, put_nullable_str, put_str, Malformed, Reader,
};

const API_FETCH: i16 = 1;
const API_LIST_OFFSETS: i16 = 2;
const API_CREATE_TOPICS: i16 = 19;

/// Fetch 4 added the isolation level and the aborted transactions; 12 is
/// flexible. Kafka 4.0 serves 4 and up.
const FETCH_VERSIONS: (i16, i16) = (4, 11);
/// ListOffsets 2 added the isolation level; 6 is flexible.
const LIST_OFFSETS_VERSIONS: (i16, i16) = (2, 5);
/// CreateTopics 4 takes -1 for the broker's default replication factor;
/// 5 is flexible.
const CREATE_TOPICS_VERSIONS: (i16, i16) = (2, 4);

/// `TOPIC_ALREADY_EXISTS`.
pub const TOPIC_ALREADY_EXISTS: i16 = 36;

/// A record read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Its partition.
    pub partition: i32,
    /// Its offset.
    pub offset: i64,
    /// Its key.
    pub key: Option<Vec<u8>>,
    /// Its value.
    pub value: Vec<u8>,
}

/// A partition's part of a fetch response.
#[derive(Clone, Debug, Default)]
pub struct FetchedPartition {
    /// Kafka's error code (0: none).
    pub error: i16,
    /// The offset after the partition's last replicated record.
    pub high_watermark: i64,
    /// The offset after its last record a `read_committed` reader may
    /// see.
    pub last_stable_offset: i64,
    /// The producers whose transactions were aborted in the fetched
    /// range, and the offset each such transaction began at.
    pub aborted: Vec<(i64, i64)>,
    /// The record batches, as sent (the last may be cut short).
    pub records: Vec<u8>,
}

impl Connection {
    /// Creates `topic` with `partitions` partitions and `configs`, the
    /// broker's default replication factor (`-1`, on brokers that take it;
    /// `fallback_replicas` on older ones).
    ///
    /// # Errors
    ///
    /// The connection failed, or the broker refused
    /// ([`Error::Broker`]; `TOPIC_ALREADY_EXISTS` is [`TOPIC_ALREADY_EXISTS`]).
    pub fn create_topic(
        &mut self,
        topic: &str,
        partitions: i32,
        fallback_replicas: i16,
        configs: &[(&str, &str)],
        timeout: Duration,
    ) -> Result<(), Error> {
        let v = self.version("CreateTopics", API_CREATE_TOPICS, CREATE_TOPICS_VERSIONS)?;
        let timeout_ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        let body = self.call(API_CREATE_TOPICS, v, |buf| {
            put_i32(buf, 1);
            put_str(buf, topic);
            put_i32(buf, partitions);
            put_i16(buf, if v >= 4 { -1 } else { fallback_replicas });
            put_i32(buf, 0); // no assignments
            put_i32(buf, configs.len() as i32);
            for (k, val) in configs {
                put_str(buf, k);
                put_nullable_str(buf, Some(val));
            }
            put_i32(buf, timeout_ms);
            put_i8(buf, 0); // validate only: no
        })?;
        let mut r = Reader::new(&body);
        r.i32("throttle time")?;
        for _ in 0..r.count(6, "create topics results")? {
            r.str("topic")?;
            let code = r.i16("create topics error")?;
            r.nullable_str("create topics message")?;
            if code != 0 {
                return Err(Error::Broker {
                    api: "CreateTopics",
                    code,
                });
            }
        }
        Ok(())
    }

    /// The offset of `topic`'s `partition` at `at`: -1 the end (for
    /// `read_committed`, the last stable offset), -2 the start.
    ///
    /// # Errors
    ///
    /// The connection failed, or the partition came back with an error
    /// (`NOT_LEADER_OR_FOLLOWER`: ask its leader).
    pub fn list_offset(
        &mut self,
        topic: &str,
        partition: i32,
        at: i64,
        read_committed: bool,
    ) -> Result<i64, Error> {
        let v = self.version("ListOffsets", API_LIST_OFFSETS, LIST_OFFSETS_VERSIONS)?;
        let body = self.call(API_LIST_OFFSETS, v, |buf| {
            put_i32(buf, -1); // replica id: a client
            put_i8(buf, i8::from(read_committed));
            put_i32(buf, 1);
            put_str(buf, topic);
            put_i32(buf, 1);
            put_i32(buf, partition);
            if v >= 4 {
                put_i32(buf, -1); // current leader epoch: not checked
            }
            put_i64(buf, at);
        })?;
        let mut r = Reader::new(&body);
        r.i32("throttle time")?;
        for _ in 0..r.count(6, "list offsets topics")? {
            r.str("topic")?;
            for _ in 0..r.count(26, "list offsets partitions")? {
                let p = r.i32("partition")?;
                let code = r.i16("list offsets error")?;
                r.i64("timestamp")?;
                let offset = r.i64("offset")?;
                if v >= 4 {
                    r.i32("leader epoch")?;
                }
                if p == partition {
                    if code != 0 {
                        return Err(Error::Broker {
                            api: "ListOffsets",
                            code,
                        });
                    }
                    return Ok(offset);
                }
            }
        }
        Err(Malformed("a partition missing from ListOffsets").into())
    }

    /// Fetches `topic`'s `partition` from `offset`, at most `max_bytes`,
    /// waiting up to `max_wait` for at least one byte.
    ///
    /// # Errors
    ///
    /// The connection failed or the response did not parse; the
    /// partition's own error is in the result.
    pub fn fetch(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_bytes: i32,
        max_wait: Duration,
        read_committed: bool,
    ) -> Result<FetchedPartition, Error> {
        let v = self.version("Fetch", API_FETCH, FETCH_VERSIONS)?;
        let wait_ms = i32::try_from(max_wait.as_millis()).unwrap_or(i32::MAX);
        let body = self.call(API_FETCH, v, |buf| {
            put_i32(buf, -1); // replica id: a client
            put_i32(buf, wait_ms);
            put_i32(buf, 1); // min bytes
            put_i32(buf, max_bytes);
            put_i8(buf, i8::from(read_committed));
            if v >= 7 {
                put_i32(buf, 0); // session id: none
                put_i32(buf, -1); // session epoch: a full fetch, no session
            }
            put_i32(buf, 1);
            put_str(buf, topic);
            put_i32(buf, 1);
            put_i32(buf, partition);
            if v >= 9 {
                put_i32(buf, -1); // current leader epoch: not checked
            }
            put_i64(buf, offset);
            if v >= 5 {
                put_i64(buf, -1); // log start offset: a client's
            }
            put_i32(buf, max_bytes);
            if v >= 7 {
                put_i32(buf, 0); // forgotten topics
            }
            if v >= 11 {
                put_str(buf, ""); // rack id
            }
        })?;
        let mut r = Reader::new(&body);
        r.i32("throttle time")?;
        if v >= 7 {
            let code = r.i16("fetch error")?;
            r.i32("session id")?;
            if code != 0 {
                return Err(Error::Broker { api: "Fetch", code });
            }
        }
        let mut found = None;
        for _ in 0..r.count(6, "fetch topics")? {
            r.str("topic")?;
            for _ in 0..r.count(30, "fetch partitions")? {
                let p = r.i32("partition")?;
                let mut out = FetchedPartition {
                    error: r.i16("fetch partition error")?,
                    high_watermark: r.i64("high watermark")?,
                    last_stable_offset: r.i64("last stable offset")?,
                    ..FetchedPartition::default()
                };
                if v >= 5 {
                    r.i64("log start offset")?;
                }
                let aborted = r.i32("aborted transactions")?;
                for _ in 0..aborted.max(0) {
                    out.aborted
                        .push((r.i64("aborted producer")?, r.i64("aborted first offset")?));
                }
                if v >= 11 {
                    r.i32("preferred read replica")?;
                }
                let size = r.i32("records size")?;
                if size > 0 {
                    out.records = r.bytes(size as usize, "records")?.to_vec();
                }
                if p == partition {
                    found = Some(out);
                }
            }
        }
        found.ok_or_else(|| Malformed("a partition missing from Fetch").into())
    }
}

/// The whole record batches at the head of `data` (a fetch may cut the
/// last one short), each as its bytes.
fn whole_batches(mut data: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        // Base offset (8) and length (4), then `length` bytes.
        let length = i32::from_be_bytes(data.get(8..12)?.try_into().ok()?);
        let end = 12 + usize::try_from(length).ok()?;
        let batch = data.get(..end)?;
        data = &data[end..];
        Some(batch)
    })
}

/// A `read_committed` reader of one partition: keeps the transactions
/// the broker said were aborted and skips their batches.
#[derive(Debug, Default)]
struct Committed {
    /// Aborted transactions not reached yet: first offset, producers.
    pending: BTreeMap<i64, Vec<i64>>,
    /// Producers inside an aborted transaction.
    aborting: HashSet<i64>,
}

impl Committed {
    /// The records of `fetched` a `read_committed` reader sees, from
    /// `offset` on, and the offset to fetch next.
    fn take(
        &mut self,
        partition: i32,
        fetched: &FetchedPartition,
        mut offset: i64,
        out: &mut Vec<Record>,
    ) -> Result<i64, Malformed> {
        for (producer, first) in &fetched.aborted {
            self.pending.entry(*first).or_default().push(*producer);
        }
        for bytes in whole_batches(&fetched.records) {
            let batch = decode(bytes)?;
            let last = batch.base_offset + i64::from(batch.last_offset_delta);
            // The transactions aborted that began at or before this
            // batch's end now count.
            while let Some(entry) = self.pending.first_entry() {
                if *entry.key() > last {
                    break;
                }
                self.aborting.extend(entry.remove());
            }
            if batch.control {
                // The key of a control record: version, then type (0
                // abort, 1 commit). Either ends the producer's
                // transaction.
                self.aborting.remove(&batch.producer.id);
            } else if !(batch.transactional && self.aborting.contains(&batch.producer.id)) {
                for r in batch.records {
                    let at = batch.base_offset + r.offset_delta;
                    if at >= offset {
                        out.push(Record {
                            partition,
                            offset: at,
                            key: r.key,
                            value: r.value,
                        });
                    }
                }
            }
            offset = offset.max(last + 1);
        }
        Ok(offset)
    }
}

/// Every record of the main topic of `cluster` (every partition, from
/// its start to the end it had when the read began) that a
/// `read_committed` consumer sees, in partition and offset order.
/// Retries what may heal (a leader moving, a connection failing) until
/// `deadline`.
///
/// # Errors
///
/// The deadline passed (the last error, or an open transaction holding
/// the end back), or the broker refused for good.
pub fn read_committed(cluster: &mut Cluster, deadline: Instant) -> Result<Vec<Record>, Error> {
    let topic = cluster.topic().to_string();
    let mut out = Vec::new();
    let mut backoff = Duration::from_millis(20);
    let mut last_error: Option<Error> = None;
    let mut partition_index = 0;
    // Per partition: the end to reach and the next offset.
    let mut state: Option<Vec<(i32, i64, i64, Committed)>> = None;
    // The broker of the call under way.
    let mut node: Option<i32> = None;
    loop {
        if Instant::now() >= deadline {
            return Err(last_error.unwrap_or_else(|| {
                Error::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("reading {topic} to its end (an open transaction holds it back?)"),
                ))
            }));
        }
        let step = (|| -> Result<bool, Error> {
            if cluster.is_stale() {
                cluster.refresh()?;
            }
            if state.is_none() {
                let mut parts = Vec::new();
                for p in cluster.partitions().to_vec() {
                    let leader = p.leader.ok_or(Error::Broker {
                        api: "Metadata",
                        code: 5,
                    })?;
                    node = Some(leader);
                    let c = cluster.connection(leader)?;
                    let start = c.list_offset(&topic, p.id, -2, false)?;
                    let end = c.list_offset(&topic, p.id, -1, false)?;
                    parts.push((p.id, end, start, Committed::default()));
                }
                state = Some(parts);
            }
            let parts = state.as_mut().expect("set above");
            while partition_index < parts.len() {
                let (p, end, next, committed) = &mut parts[partition_index];
                if *next >= *end {
                    partition_index += 1;
                    continue;
                }
                let leader = cluster.leader(*p).ok_or(Error::Broker {
                    api: "Metadata",
                    code: 5,
                })?;
                node = Some(leader);
                let c = cluster.connection(leader)?;
                let fetched =
                    c.fetch(&topic, *p, *next, 4 << 20, Duration::from_millis(200), true)?;
                if fetched.error != 0 {
                    return Err(Error::Broker {
                        api: "Fetch",
                        code: fetched.error,
                    });
                }
                let before = *next;
                *next = committed.take(*p, &fetched, *next, &mut out)?;
                // Nothing to read below the stable offset yet: an open
                // transaction; wait for it.
                if *next == before && fetched.last_stable_offset <= *next {
                    return Ok(false);
                }
            }
            Ok(true)
        })();
        match step {
            Ok(true) => return Ok(out),
            Ok(false) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => {
                let heals = match &e {
                    Error::Io(_) | Error::Malformed(_) => true,
                    Error::Broker { code, .. } => crate::client::retriable(*code),
                    _ => false,
                };
                if !heals {
                    return Err(e);
                }
                // The connection that failed is dropped (with the others:
                // they are opened again as needed).
                if let Some(node) = node.take() {
                    cluster.disconnect(node);
                }
                cluster.mark_stale();
                last_error = Some(e);
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
    }
}

//! Metric windows to Kafka: one record per point, through the network
//! sinks' sender (batching, memory buffer, retries, drops counted in
//! `dropped_points`) over a transport of its own.
//!
//! [`PerPoint`] encodes each point alone with the `metrics_format`'s
//! encoder and frames it (a 4-byte length, then the point), so that a
//! request body is a run of records; [`Records`] produces each framed
//! point as a record with a separate idempotent producer and answers once
//! Kafka reported on every one.
//!
//! * `metrics_format = "json"` (default): the value is the point's JSON
//!   line (the file sink's format) without its newline.
//! * `"msgpack"`: the value is the point's map as the http sink's msgpack
//!   array holds it.
//!
//! A request is acknowledged to the sender when Kafka acknowledged all of
//! its records. A broker that does not answer within `request_timeout`,
//! a connection that fails and the errors Kafka calls retriable fail the
//! request, which the sender retries from the first record not
//! acknowledged ([`Records`]). A record Kafka refuses for good (too large
//! alone, a topic not allowed) fails the request for good: the sender
//! drops and counts it (`reason="rejected"`).

use std::collections::HashMap;

use crate::sender::{SendError, Transport};
use crate::sink::FailReason;
use sonde_aggregate::OutPoint;
use sonde_encode::compress::Compression;
use sonde_encode::json::Lines;
use sonde_encode::msgpack::Msgpack;
use sonde_encode::{BatchEncoder, Half};
use sonde_kafka::batch::next_sequence;
use sonde_kafka::client::{
    begin_produce, producer_refused, retriable, too_large, ProduceFrame, DUPLICATE_SEQUENCE,
};
use sonde_kafka::{BatchBuilder, Cluster, Compressor, Error as KafkaError, Producer};

use super::at_least_once::MAX_REQUEST_RECORDS_BYTES;
use super::record::now_ms;
use super::Settings;
use crate::descriptor::{NetSink, Running, Sink, Start};
use crate::net;

/// The format of a point's record (`metrics_format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PointFormat {
    /// Its JSON line.
    #[default]
    Json,
    /// Its msgpack map.
    Msgpack,
}

/// Frames each point, encoded alone by `E`, into the request body.
#[derive(Debug)]
pub struct PerPoint<E> {
    inner: E,
    /// Bytes to cut off the front of one point's encoding: the msgpack
    /// array header of a one-point batch.
    skip_front: usize,
    /// Bytes to cut off its end: a JSON line's newline.
    skip_back: usize,
    scratch: Vec<u8>,
    body: Vec<u8>,
    points: usize,
}

impl<E: BatchEncoder> PerPoint<E> {
    fn new(inner: E, skip_front: usize, skip_back: usize) -> Self {
        PerPoint {
            inner,
            skip_front,
            skip_back,
            scratch: Vec::new(),
            body: Vec::new(),
            points: 0,
        }
    }
}

impl<E: BatchEncoder> BatchEncoder for PerPoint<E> {
    fn push(&mut self, p: &OutPoint<'_>) {
        self.inner.push(p);
        self.scratch.clear();
        self.inner.finish(&mut self.scratch);
        let end = self.scratch.len().saturating_sub(self.skip_back);
        let one = &self.scratch[self.skip_front.min(end)..end];
        // A point is far below 4 GiB.
        let len = u32::try_from(one.len()).unwrap_or(u32::MAX);
        self.body.extend_from_slice(&len.to_le_bytes());
        self.body.extend_from_slice(one);
        self.points += 1;
    }

    fn points(&self) -> usize {
        self.points
    }

    fn bytes(&self) -> usize {
        self.body.len()
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        out.append(&mut self.body);
        self.points = 0;
    }

    fn content_type(&self) -> &'static str {
        self.inner.content_type()
    }

    /// Between two frames (Kafka refuses records one by one, never the
    /// request: this is here for the trait).
    fn split(body: &[u8]) -> Option<[Half; 2]> {
        let ends: Vec<usize> = frames(body)
            .scan(0, |end, f| {
                *end += 4 + f.len();
                Some(*end)
            })
            .collect();
        sonde_encode::split_at_ends(body, &ends)
    }
}

/// The records of a framed body, in order.
fn frames(body: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = body;
    std::iter::from_fn(move || {
        let (len, tail) = rest.split_first_chunk::<4>()?;
        let len = (u32::from_le_bytes(*len) as usize).min(tail.len());
        let (one, tail) = tail.split_at(len);
        rest = tail;
        Some(one)
    })
}

/// Produces a request's points as records with sonde's own idempotent
/// producer and waits for Kafka's answers.
///
/// A request goes whole to one partition (the next request to the next
/// partition with a leader), in produce requests of at most
/// [`MAX_REQUEST_RECORDS_BYTES`] of records and `max_batch_points`
/// records, one at a time, each a record batch with the producer's id
/// and the partition's sequence. When one fails, the sender retries the
/// same body: the records already acknowledged are skipped and the rest
/// sent again with the same sequence numbers to the same partition, so
/// a batch the broker wrote before its answer was lost is written once.
/// If the sender gives the body up instead, or the broker refuses the
/// producer's sequence, a new producer id starts the sequences again.
pub struct Records {
    cluster: Cluster,
    /// `metrics_topic`.
    topic: String,
    stats: std::sync::Arc<crate::sink::SinkStats>,
    compressor: Compressor,
    builder: BatchBuilder,
    request: Vec<u8>,
    /// The idempotent producer's id and epoch, once the cluster gave them.
    producer: Option<(i64, i16)>,
    /// The sequence number of the next record, per partition.
    sequences: HashMap<i32, i32>,
    next_partition: usize,
    max_records: usize,
    timeout_ms: i32,
    /// Where the last body that failed stopped: its identity (length and
    /// CRC), its partition and the records acknowledged.
    resume: Option<Resume>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Resume {
    len: usize,
    crc: u32,
    partition: i32,
    done: usize,
}

/// A Kafka error as the sender counts it.
fn send_error(e: &KafkaError) -> SendError {
    let reason = match e {
        KafkaError::Io(io) => return SendError::io(io),
        KafkaError::Tls { .. } => FailReason::Tls,
        KafkaError::Auth { .. } => FailReason::Auth,
        KafkaError::Broker { code, .. } if !retriable(*code) && !producer_refused(*code) => {
            FailReason::Rejected
        }
        _ => FailReason::Connect,
    };
    SendError::new(reason, e.to_string())
}

impl Records {
    fn new(
        k: &Settings,
        n: &NetSink,
        stats: std::sync::Arc<crate::sink::SinkStats>,
    ) -> anyhow::Result<Self> {
        let d = &n.delivery;
        let dial = k.security.dial("sonde", d.request_timeout)?;
        let mut cluster = Cluster::new(&k.brokers, &[&k.metrics_topic], dial);
        cluster.set_max_age(k.metadata_max_age);
        Ok(Records {
            cluster,
            topic: k.metrics_topic.clone(),
            stats,
            compressor: Compressor::new(n.compression)?,
            builder: BatchBuilder::new(),
            request: Vec::new(),
            producer: None,
            sequences: HashMap::new(),
            next_partition: 0,
            max_records: d.max_batch_points.clamp(1, i32::MAX as usize),
            timeout_ms: i32::try_from(d.request_timeout.as_millis()).unwrap_or(i32::MAX),
            resume: None,
        })
    }

    /// A new producer id: sequences start at 0 on every partition.
    fn reset_producer(&mut self) {
        self.producer = None;
        self.sequences.clear();
    }

    /// Sends `frames` (records `from..`) to `partition`; returns how many
    /// records were acknowledged when it failed.
    fn send_to(
        &mut self,
        partition: i32,
        frames: &[&[u8]],
        from: usize,
    ) -> Result<(), (usize, SendError)> {
        let mut done = from;
        let mut limit = self.max_records;
        while done < frames.len() {
            let producer = match self.producer {
                Some(p) => p,
                None => {
                    let p = self
                        .cluster
                        .init_producer_id()
                        .map_err(|e| (done, send_error(&e)))?;
                    self.producer = Some(p);
                    p
                }
            };
            let sequence = self.sequences.get(&partition).copied().unwrap_or(0);
            let now = now_ms();
            let mut bytes = 0;
            let mut end = done;
            while end < frames.len() && end - done < limit {
                let f = frames[end];
                if end > done && bytes + f.len() > MAX_REQUEST_RECORDS_BYTES {
                    break;
                }
                bytes += f.len();
                self.builder.push_value(now, f);
                end += 1;
            }
            let frame = begin_produce(
                &mut self.request,
                self.cluster.client_id(),
                None,
                -1,
                self.timeout_ms,
                &self.topic,
                partition,
            );
            let batch_producer = Producer {
                id: producer.0,
                epoch: producer.1,
                base_sequence: sequence,
            };
            if let Err(e) =
                self.builder
                    .finish(&mut self.compressor, batch_producer, &mut self.request)
            {
                self.builder.clear();
                return Err((done, SendError::new(FailReason::Encode, e.to_string())));
            }
            let code = self.attempt(partition, frame).map_err(|e| (done, e))?;
            match code {
                0 | DUPLICATE_SEQUENCE => {
                    self.sequences
                        .insert(partition, next_sequence(sequence, end - done));
                    done = end;
                    limit = self.max_records;
                }
                code if too_large(code) && end - done > 1 => limit = (end - done) / 2,
                code => {
                    let e = KafkaError::Broker {
                        api: "Produce",
                        code,
                    };
                    if producer_refused(code) {
                        self.reset_producer();
                    } else if retriable(code) {
                        self.cluster.mark_stale();
                    }
                    return Err((done, send_error(&e)));
                }
            }
        }
        Ok(())
    }

    /// One produce request to the partition's leader: its error code, or
    /// the connection's error (the connection is then closed and the
    /// metadata asked again).
    fn attempt(&mut self, partition: i32, frame: ProduceFrame) -> Result<i16, SendError> {
        let code = self
            .cluster
            .produce(&self.topic, partition, &mut self.request, frame)
            .map_err(|e| send_error(&e));
        let throttled = self.cluster.take_throttled();
        self.stats.throttled_ms.fetch_add(
            u64::try_from(throttled.as_millis()).unwrap_or(u64::MAX),
            std::sync::atomic::Ordering::Relaxed,
        );
        code
    }
}

impl Transport for Records {
    fn send(&mut self, body: &[u8]) -> Result<(), SendError> {
        let frames: Vec<&[u8]> = frames(body).collect();
        let (len, crc) = (body.len(), crc32fast::hash(body));
        let resume = match self.resume.take() {
            Some(r) if r.len == len && r.crc == crc => Some(r),
            // The sender gave the failed body up: whether its last batch
            // was written is unknown, so the sequences start again.
            Some(_) => {
                self.reset_producer();
                None
            }
            None => None,
        };
        if self.cluster.is_stale() {
            self.cluster.refresh().map_err(|e| send_error(&e))?;
        }
        let (partition, from) = match resume {
            Some(r) => (r.partition, r.done),
            None => {
                let with_leader: Vec<i32> = self
                    .cluster
                    .partitions()
                    .iter()
                    .filter(|p| p.leader.is_some())
                    .map(|p| p.id)
                    .collect();
                if with_leader.is_empty() {
                    self.cluster.mark_stale();
                    return Err(send_error(&KafkaError::Broker {
                        api: "Metadata",
                        code: 5,
                    }));
                }
                let p = with_leader[self.next_partition % with_leader.len()];
                self.next_partition = self.next_partition.wrapping_add(1);
                (p, 0)
            }
        };
        match self.send_to(partition, &frames, from) {
            Ok(()) => Ok(()),
            Err((done, e)) => {
                if e.reason.retryable() {
                    self.resume = Some(Resume {
                        len,
                        crc,
                        partition,
                        done,
                    });
                }
                Err(e)
            }
        }
    }
}

/// Starts the sink's window side: the network sender with [`PerPoint`]
/// over [`Records`].
///
/// # Errors
///
/// The compression level is refused, a TLS or SASL file cannot be used,
/// or the sender did not start.
pub fn start(
    s: &Sink,
    k: &Settings,
    format: PointFormat,
    n: &NetSink,
    st: &mut Start<'_>,
) -> anyhow::Result<Running> {
    let transport = Records::new(k, n, std::sync::Arc::clone(&st.stats))?;
    // The producer compresses record batches itself: the sender's bodies
    // stay as they are.
    let mut plain = s.clone();
    if let Some(plain) = plain.net.as_mut() {
        plain.compression = Compression::None;
    }
    match format {
        PointFormat::Json => {
            net::spawn(&plain, PerPoint::new(Lines::default(), 0, 1), transport, st)
        }
        PointFormat::Msgpack => {
            net::spawn(&plain, PerPoint::new(Msgpack::new(), 1, 0), transport, st)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_give_back_each_record() {
        let mut body = Vec::new();
        for r in [&b"one"[..], b"", b"three"] {
            body.extend_from_slice(&(r.len() as u32).to_le_bytes());
            body.extend_from_slice(r);
        }
        let got: Vec<&[u8]> = frames(&body).collect();
        assert_eq!(got, [&b"one"[..], b"", b"three"]);
        assert_eq!(frames(&body[..5]).collect::<Vec<_>>(), [&b"o"[..]]);
        assert_eq!(frames(&[]).count(), 0);
    }

    #[test]
    fn a_body_splits_between_two_frames() {
        let mut body = Vec::new();
        for r in [&b"one"[..], b"two", b"three"] {
            body.extend_from_slice(&(r.len() as u32).to_le_bytes());
            body.extend_from_slice(r);
        }
        type Encoder = PerPoint<sonde_encode::msgpack::Msgpack>;
        let [a, b] = <Encoder as BatchEncoder>::split(&body).unwrap();
        assert_eq!((a.points, b.points), (1, 2));
        assert_eq!(frames(&a.body).collect::<Vec<_>>(), [&b"one"[..]]);
        assert_eq!(frames(&b.body).collect::<Vec<_>>(), [&b"two"[..], b"three"]);
        assert!(<Encoder as BatchEncoder>::split(&body[..7]).is_none());
    }
}

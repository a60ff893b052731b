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
//! its records. A record librdkafka could not deliver within
//! `request_timeout` (its `message.timeout.ms` here) fails the request,
//! which the sender retries: records of that request that did arrive
//! arrive again. A record Kafka refuses for good (too large, not allowed)
//! fails the request for good: the sender drops and counts it
//! (`reason="rejected"`).

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::sender::{SendError, Transport};
use crate::sink::FailReason;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::ClientContext;
use sonde_aggregate::OutPoint;
use sonde_encode::compress::Compression;
use sonde_encode::json::Lines;
use sonde_encode::msgpack::Msgpack;
use sonde_encode::{BatchEncoder, Half};

use super::{producer_config, Settings};
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

/// Counts the reports of the records of one request.
#[derive(Default)]
pub struct Tally {
    acked: AtomicUsize,
    failed: AtomicUsize,
    /// The first failure's error and whether retrying may help.
    error: Mutex<Option<(String, bool)>>,
}

impl ClientContext for Tally {}

impl ProducerContext for Tally {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => {
                self.acked.fetch_add(1, Relaxed);
            }
            Err((e, _)) => {
                self.failed.fetch_add(1, Relaxed);
                let mut first = self.error.lock().unwrap_or_else(|p| p.into_inner());
                first.get_or_insert_with(|| (e.to_string(), retryable(e)));
            }
        }
    }
}

/// Whether a record that failed may be delivered by sending it again.
fn retryable(e: &KafkaError) -> bool {
    !matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::MessageSizeTooLarge
                | RDKafkaErrorCode::InvalidMessage
                | RDKafkaErrorCode::InvalidMessageSize
                | RDKafkaErrorCode::InvalidRecord
                | RDKafkaErrorCode::TopicAuthorizationFailed
                | RDKafkaErrorCode::ClusterAuthorizationFailed
                | RDKafkaErrorCode::InvalidTopic
        )
    )
}

/// Produces a request's points as records and waits for Kafka's reports.
pub struct Records {
    producer: BaseProducer<Tally>,
    topic: String,
    /// How long a request's records may wait for their reports.
    timeout: Duration,
}

impl Transport for Records {
    fn send(&mut self, body: &[u8]) -> Result<(), SendError> {
        let tally = self.producer.context();
        tally.acked.store(0, Relaxed);
        tally.failed.store(0, Relaxed);
        *tally.error.lock().unwrap_or_else(|p| p.into_inner()) = None;
        // librdkafka times each record out after `timeout`; a little more
        // lets its report arrive.
        let deadline = Instant::now() + self.timeout + Duration::from_secs(1);
        let mut sent = 0;
        for value in frames(body) {
            let mut record = BaseRecord::<(), [u8]>::to(&self.topic).payload(value);
            loop {
                match self.producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r))
                        if Instant::now() < deadline =>
                    {
                        record = r;
                        self.producer.poll(Duration::from_millis(50));
                    }
                    Err((e, _)) => {
                        tally.failed.fetch_add(1, Relaxed);
                        let mut first = tally.error.lock().unwrap_or_else(|p| p.into_inner());
                        first.get_or_insert_with(|| (e.to_string(), retryable(&e)));
                        break;
                    }
                }
            }
            sent += 1;
        }
        while tally.acked.load(Relaxed) + tally.failed.load(Relaxed) < sent {
            if Instant::now() >= deadline {
                return Err(SendError::new(
                    FailReason::Timeout,
                    format!(
                        "kafka reported on {} of {sent} records within {:?}",
                        tally.acked.load(Relaxed) + tally.failed.load(Relaxed),
                        self.timeout
                    ),
                ));
            }
            self.producer.poll(Duration::from_millis(50));
        }
        let error = tally.error.lock().unwrap_or_else(|p| p.into_inner()).take();
        match error {
            None => Ok(()),
            Some((message, true)) => Err(SendError::new(FailReason::Connect, message)),
            Some((message, false)) => Err(SendError::new(FailReason::Rejected, message)),
        }
    }
}

/// Starts the sink's window side: the network sender with [`PerPoint`]
/// over [`Records`].
///
/// # Errors
///
/// librdkafka refused the configuration, or the sender did not start.
pub fn start(
    s: &Sink,
    k: &Settings,
    format: PointFormat,
    n: &NetSink,
    st: &mut Start<'_>,
) -> anyhow::Result<Running> {
    let mut c = producer_config(k, n);
    let timeout = n.delivery.request_timeout;
    c.set(
        "message.timeout.ms",
        timeout.as_millis().clamp(1, i32::MAX as u128).to_string(),
    );
    let producer: BaseProducer<Tally> = c.create_with_context(Tally::default())?;
    let transport = Records {
        producer,
        topic: k.metrics_topic.clone(),
        timeout,
    };
    // librdkafka compresses record batches itself: the sender's bodies stay
    // as they are.
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

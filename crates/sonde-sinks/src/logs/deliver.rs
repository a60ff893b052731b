//! Log sinks that write records somewhere themselves: a file or standard
//! output ([`spawn_local`]), or requests to an HTTP endpoint
//! ([`spawn_http`]).
//!
//! Each runs one thread that takes the batches of its sources in order
//! and acknowledges a batch once every record of it is written (local) or
//! accepted by the endpoint (HTTP 2xx). What fails and may succeed later
//! (an I/O error, a connection refused, HTTP 408, 429, 5xx) is tried again
//! after an exponential backoff (or the endpoint's `Retry-After`, if
//! longer), the batch held meanwhile: the source stops reading once its
//! unacknowledged bytes reach its bound, so an outage costs no line and
//! bounded memory. A request the endpoint finds too large (413) is sent
//! again in halves, down to one record; a record too large alone is
//! counted in `sonde_sink_dropped_records_total{reason="too_large"}`
//! ([`crate::sender::attempt`]). A request the endpoint refuses for good
//! (another 4xx) is logged, its records counted in
//! `sonde_sink_dropped_records_total{reason="rejected"}`, and the batch
//! goes on. When the agent stops while a batch is still failing, the
//! thread leaves it unacknowledged: the source reads its lines again at
//! the next start.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use sonde_encode::compress::Compression;

pub(super) use crate::sender::Attempt;
use crate::sender::{attempt::Outgoing, Backoff, Split, Transport, Unit};
use crate::sink::{FailReason, SinkDrop, SinkStats};
use sonde_encode::Half;
use sonde_log_sources::{record, LogBatch, LogLine, SourceInfo};

/// How a local sink writes a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Text {
    /// One JSON object per line ([`record::json`]).
    Json,
    /// The record's text alone, one per line (a multiline record's lines
    /// as they were).
    Message,
}

/// Bytes encoded per write: whole records, so that a sink sharing its
/// output with another writer (the metric side of the same sink) never
/// interleaves inside a line.
const WRITE_CHUNK: usize = 64 * 1024;

/// The first retry's delay, and the longest.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(10));

/// The batches of a sink's sources, in the order they came, and the
/// ones held while a failing one is retried.
pub(super) struct Inbox {
    rx: Receiver<Arc<LogBatch>>,
    held: VecDeque<Arc<LogBatch>>,
}

impl Inbox {
    /// The next batch; `None` once every source has stopped and nothing
    /// is held.
    pub(super) fn next(&mut self) -> Option<Arc<LogBatch>> {
        self.held.pop_front().or_else(|| self.rx.recv().ok())
    }

    /// Waits `d` before a retry, holding what comes meanwhile; false when
    /// every source has stopped (nobody waits for the batch any more).
    pub(super) fn pause(&mut self, d: Duration) -> bool {
        let until = std::time::Instant::now() + d;
        loop {
            let left = until.saturating_duration_since(std::time::Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(b) => self.held.push_back(b),
                Err(RecvTimeoutError::Timeout) => return true,
                Err(RecvTimeoutError::Disconnected) => return false,
            }
        }
    }
}

/// Starts the thread of a log sink, `run` taking its batches; the
/// returned sender is where its sources send them.
pub(super) fn spawn_inbox(
    name: &str,
    run: impl FnOnce(Inbox) + Send + 'static,
) -> io::Result<(Sender<Arc<LogBatch>>, JoinHandle<()>)> {
    let (tx, rx) = channel::<Arc<LogBatch>>();
    let thread = std::thread::Builder::new()
        .name(format!("sink {name} logs"))
        .spawn(move || {
            sonde_runtime::priority::enter_background();
            run(Inbox {
                rx,
                held: VecDeque::new(),
            });
        })?;
    Ok((tx, thread))
}

/// Starts a thread writing the records of the batches sent to the returned
/// sender to `out`, as `text` says, flushing after each batch. Ends once
/// every sender is dropped.
///
/// # Errors
///
/// The thread could not be spawned.
pub fn spawn_local(
    mut out: impl Write + Send + 'static,
    text: Text,
    stats: Arc<SinkStats>,
) -> io::Result<(Sender<Arc<LogBatch>>, JoinHandle<()>)> {
    let name = stats.name.clone();
    spawn_inbox(&name, move |mut inbox| {
        let mut buf = Vec::with_capacity(WRITE_CHUNK + 4096);
        let mut backoff = Backoff::new(BACKOFF.0, BACKOFF.1);
        'batches: while let Some(batch) = inbox.next() {
            let mut lines = batch.lines().peekable();
            let mut written = 0u64;
            while lines.peek().is_some() {
                buf.clear();
                while buf.len() < WRITE_CHUNK {
                    let Some(line) = lines.next() else { break };
                    encode_text(&mut buf, text, &batch, &line);
                }
                // A failed write is tried again whole: a file may hold
                // a chunk twice after a short write, never a gap.
                while let Err(e) = out.write_all(&buf).and_then(|()| out.flush()) {
                    stats.errors.fetch_add(1, Relaxed);
                    let delay = backoff.next_delay();
                    tracing::warn!(sink = %stats.name, error = %e, retry_in = ?delay, "cannot write log records; will retry");
                    if !inbox.pause(delay) {
                        break 'batches;
                    }
                }
                backoff.reset();
                written += buf.len() as u64;
            }
            stats.batches.fetch_add(1, Relaxed);
            stats.records.fetch_add(batch.len() as u64, Relaxed);
            stats.bytes_raw.fetch_add(written, Relaxed);
            batch.ack();
        }
    })
}

fn encode_text(buf: &mut Vec<u8>, text: Text, batch: &LogBatch, line: &LogLine<'_>) {
    match text {
        Text::Json => record::json(buf, batch.source(), line),
        Text::Message => buf.extend_from_slice(line.bytes),
    }
    buf.push(b'\n');
}

/// How an HTTP log sink writes the body of a request: the records of one
/// source, pushed one by one between [`LogEncoder::begin`] and
/// [`LogEncoder::finish`].
pub trait LogEncoder: Send + 'static {
    /// The `Content-Type` of its bodies.
    fn content_type(&self) -> &'static str;
    /// Starts a request of records of `source`.
    fn begin(&mut self, source: &SourceInfo);
    /// Adds one record.
    fn push(&mut self, source: &SourceInfo, line: &LogLine<'_>);
    /// Records added since [`LogEncoder::begin`].
    fn records(&self) -> usize;
    /// The body's size so far, about.
    fn bytes(&self) -> usize;
    /// Appends the body to `out`.
    fn finish(&mut self, out: &mut Vec<u8>);

    /// Cuts a body [`LogEncoder::finish`] wrote into two valid bodies:
    /// the first with half its records (rounded down), the second with
    /// the rest, in order; `None` for fewer than two records. For an
    /// endpoint that refuses a request as too large (HTTP 413).
    fn split(body: &[u8]) -> Option<[Half; 2]>
    where
        Self: Sized;
}

/// The [`Split`] of a sink whose bodies `encoder` writes and
/// `compression` compresses.
pub(super) fn split_of<E: LogEncoder>(_: &E, compression: Compression) -> Split {
    Split::new(E::split, compression)
}

/// JSON lines: one [`record::json`] object per line.
#[derive(Debug, Default)]
pub struct JsonLines {
    buf: Vec<u8>,
    records: usize,
}

impl LogEncoder for JsonLines {
    fn content_type(&self) -> &'static str {
        "application/x-ndjson"
    }

    fn begin(&mut self, _: &SourceInfo) {
        self.buf.clear();
        self.records = 0;
    }

    fn push(&mut self, source: &SourceInfo, line: &LogLine<'_>) {
        record::json(&mut self.buf, source, line);
        self.buf.push(b'\n');
        self.records += 1;
    }

    fn records(&self) -> usize {
        self.records
    }

    fn bytes(&self) -> usize {
        self.buf.len()
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.buf);
    }

    fn split(body: &[u8]) -> Option<[Half; 2]> {
        sonde_encode::split_lines(body)
    }
}

/// How an HTTP log sink cuts, encodes and sends requests.
#[derive(Clone, Copy, Debug)]
pub struct HttpLogs {
    /// The compression of request bodies.
    pub compression: Compression,
    /// Most records in one request.
    pub max_records: usize,
    /// Most bytes in one request before compression (a request passes it
    /// by the one record that crossed it).
    pub max_bytes: usize,
    /// The first retry's delay.
    pub backoff_min: Duration,
    /// The longest delay between retries.
    pub backoff_max: Duration,
}

/// Starts a thread sending the records of the batches sent to the
/// returned sender, encoded by `encoder`, in requests of at most
/// [`HttpLogs::max_records`] records and about [`HttpLogs::max_bytes`]
/// bytes, over `transport` (whose headers say the content type and
/// encoding). Ends once every sender is dropped.
///
/// # Errors
///
/// The thread could not be spawned.
pub fn spawn_http<T: Transport>(
    mut encoder: impl LogEncoder,
    mut transport: T,
    http: HttpLogs,
    stats: Arc<SinkStats>,
) -> io::Result<(Sender<Arc<LogBatch>>, JoinHandle<()>)> {
    let name = stats.name.clone();
    let mut split = split_of(&encoder, http.compression);
    spawn_inbox(&name, move |mut inbox| {
        let mut bodies = Bodies::default();
        let mut backoff = Backoff::new(http.backoff_min, http.backoff_max);
        while let Some(batch) = inbox.next() {
            let sent = bodies.each(&mut encoder, &http, &batch, &stats, |r| loop {
                match attempt(&mut transport, r, &mut split, &mut backoff, &stats) {
                    Attempt::Delivered | Attempt::Refused => return true,
                    Attempt::Partial => {}
                    Attempt::Retry(delay) => {
                        if !inbox.pause(delay) {
                            tracing::warn!(sink = %stats.name, "stopping with log records not delivered: they are read again at the next start");
                            return false;
                        }
                    }
                }
            });
            if !sent {
                break;
            }
            stats.batches.fetch_add(1, Relaxed);
            batch.ack();
        }
    })
}

/// One request of log records, encoded and compressed.
pub(super) struct Body<'a> {
    /// As sent.
    pub body: &'a [u8],
    /// Records in it.
    pub records: u32,
    /// Its size before compression.
    pub raw_bytes: u32,
}

/// The buffers a log sink encodes and compresses its requests in, reused
/// from one request to the next.
#[derive(Default)]
pub(super) struct Bodies {
    raw: Vec<u8>,
    body: Vec<u8>,
}

impl Bodies {
    /// Cuts the records of `batch` into requests as `http` says, encodes
    /// and compresses each and hands it to `take`, in order; stops early
    /// when `take` returns false, and returns false then. A request that
    /// cannot be compressed is counted as rejected and skipped.
    pub(super) fn each(
        &mut self,
        encoder: &mut impl LogEncoder,
        http: &HttpLogs,
        batch: &LogBatch,
        stats: &SinkStats,
        mut take: impl FnMut(&Body<'_>) -> bool,
    ) -> bool {
        let mut lines = batch.lines().peekable();
        while lines.peek().is_some() {
            encoder.begin(batch.source());
            while encoder.bytes() < http.max_bytes && encoder.records() < http.max_records {
                let Some(line) = lines.next() else { break };
                encoder.push(batch.source(), &line);
            }
            let records = encoder.records();
            self.raw.clear();
            encoder.finish(&mut self.raw);
            self.body.clear();
            if let Err(e) = http.compression.compress(&self.raw, &mut self.body) {
                stats.failures[FailReason::Encode as usize].fetch_add(1, Relaxed);
                stats.dropped_records[SinkDrop::Rejected as usize]
                    .fetch_add(records as u64, Relaxed);
                tracing::error!(sink = %stats.name, error = %e, records, "cannot compress a request of log records; dropped");
                continue;
            }
            let body = Body {
                body: &self.body,
                records: u32::try_from(records).unwrap_or(u32::MAX),
                raw_bytes: u32::try_from(self.raw.len()).unwrap_or(u32::MAX),
            };
            if !take(&body) {
                return false;
            }
        }
        true
    }
}

/// Sends `r` (or, once the endpoint found it too large, its next
/// undelivered piece, kept in `split`) once over `transport`, counting
/// the outcome in `stats` and moving `backoff` on
/// ([`crate::sender::attempt::attempt`]).
pub(super) fn attempt<T: Transport>(
    transport: &mut T,
    r: &Body<'_>,
    split: &mut Split,
    backoff: &mut Backoff,
    stats: &SinkStats,
) -> Attempt {
    let front = Outgoing {
        body: r.body,
        points: r.records,
        raw_bytes: r.raw_bytes,
    };
    crate::sender::attempt::attempt(transport, front, split, backoff, stats, Unit::Records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sender::SendError;
    use std::sync::Mutex;

    fn info() -> SourceInfo {
        SourceInfo {
            name: "app".into(),
            host: "h".into(),
            fields: vec![("env".into(), "test".into())],
        }
    }

    /// The first `n` acknowledgements, waiting up to 10 s for each.
    fn acks(done: &Receiver<u64>, n: usize) -> Vec<u64> {
        (0..n)
            .map(|_| {
                done.recv_timeout(Duration::from_secs(10))
                    .expect("an acknowledgement")
            })
            .collect()
    }

    fn batch(seq: u64, lines: &[(&str, u64, &[u8])], done: &Sender<u64>) -> Arc<LogBatch> {
        Arc::new(LogBatch::for_test(info(), seq, lines, 1, done.clone()))
    }

    /// A writer into shared memory that fails its first `fail` writes.
    #[derive(Clone, Default)]
    struct Flaky {
        out: Arc<Mutex<Vec<u8>>>,
        fail: Arc<Mutex<u32>>,
    }

    impl Write for Flaky {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let mut fail = self.fail.lock().unwrap();
            if *fail > 0 {
                *fail -= 1;
                return Err(io::Error::other("disk full"));
            }
            self.out.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_local_sink_writes_every_record_and_acknowledges_after_a_failed_write_succeeds() {
        let stats = Arc::new(SinkStats::new("file".into()));
        let w = Flaky::default();
        *w.fail.lock().unwrap() = 2;
        let (tx, thread) = spawn_local(w.clone(), Text::Json, Arc::clone(&stats)).unwrap();
        let (done_tx, done_rx) = channel();
        tx.send(batch(
            0,
            &[("/a.log", 0, b"one"), ("/a.log", 4, b"two\n  at x")],
            &done_tx,
        ))
        .unwrap();
        tx.send(batch(1, &[("/b.log", 9, b"three")], &done_tx))
            .unwrap();
        // The source stays while its batches are retried.
        assert_eq!(acks(&done_rx, 2), [0, 1]);
        drop(tx);
        thread.join().unwrap();
        let out = String::from_utf8(w.out.lock().unwrap().clone()).unwrap();
        let records: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let messages: Vec<&str> = records
            .iter()
            .map(|r| r["message"].as_str().unwrap())
            .collect();
        assert_eq!(messages, ["one", "two\n  at x", "three"]);
        assert_eq!(records[2]["file"], "/b.log");
        assert_eq!(records[2]["offset"], 9);
        assert_eq!(records[0]["env"], "test");
        assert_eq!(stats.errors.load(Relaxed), 2);
        assert_eq!(stats.records.load(Relaxed), 3);
    }

    #[test]
    fn a_local_sink_in_message_form_writes_the_records_text() {
        let stats = Arc::new(SinkStats::new("console".into()));
        let w = Flaky::default();
        let (tx, thread) = spawn_local(w.clone(), Text::Message, stats).unwrap();
        let (done_tx, _done_rx) = channel();
        tx.send(batch(
            0,
            &[("/a.log", 0, b"one"), ("/a.log", 4, b"two\n  at x")],
            &done_tx,
        ))
        .unwrap();
        drop(tx);
        thread.join().unwrap();
        assert_eq!(&w.out.lock().unwrap()[..], b"one\ntwo\n  at x\n");
    }

    /// A transport that answers from a script and keeps what it accepted.
    struct Scripted {
        answers: VecDeque<Result<(), FailReason>>,
        got: Arc<Mutex<Vec<Vec<u8>>>>,
    }

    impl Transport for Scripted {
        fn send(&mut self, body: &[u8]) -> Result<(), SendError> {
            match self.answers.pop_front().unwrap_or(Ok(())) {
                Ok(()) => {
                    self.got.lock().unwrap().push(body.to_vec());
                    Ok(())
                }
                Err(reason) => Err(SendError::new(reason, "scripted")),
            }
        }
    }

    fn http(max_records: usize) -> HttpLogs {
        HttpLogs {
            compression: Compression::None,
            max_records,
            max_bytes: 1 << 20,
            backoff_min: Duration::from_millis(1),
            backoff_max: Duration::from_millis(5),
        }
    }

    #[test]
    fn an_http_sink_cuts_requests_retries_what_may_succeed_and_counts_what_is_refused() {
        let stats = Arc::new(SinkStats::new("http".into()));
        let got = Arc::new(Mutex::new(Vec::new()));
        let transport = Scripted {
            // First request: refused twice for a while, then taken. Second:
            // refused for good.
            answers: VecDeque::from([
                Err(FailReason::ServerError),
                Err(FailReason::Connect),
                Ok(()),
                Err(FailReason::Rejected),
            ]),
            got: Arc::clone(&got),
        };
        let (tx, thread) =
            spawn_http(JsonLines::default(), transport, http(2), Arc::clone(&stats)).unwrap();
        let (done_tx, done_rx) = channel();
        let lines: &[(&str, u64, &[u8])] = &[("/a", 0, b"1"), ("/a", 2, b"2"), ("/a", 4, b"3")];
        tx.send(batch(0, lines, &done_tx)).unwrap();
        tx.send(batch(1, &[("/a", 6, b"4")], &done_tx)).unwrap();
        assert_eq!(acks(&done_rx, 2), [0, 1]);
        drop(tx);
        thread.join().unwrap();
        let bodies: Vec<Vec<String>> = got
            .lock()
            .unwrap()
            .iter()
            .map(|b| {
                String::from_utf8(b.clone())
                    .unwrap()
                    .lines()
                    .map(|l| {
                        serde_json::from_str::<serde_json::Value>(l).unwrap()["message"]
                            .as_str()
                            .unwrap()
                            .to_string()
                    })
                    .collect()
            })
            .collect();
        assert_eq!(bodies, [vec!["1", "2"], vec!["4"]]);
        assert_eq!(stats.retries.load(Relaxed), 2);
        assert_eq!(stats.records.load(Relaxed), 3);
        assert_eq!(
            stats.dropped_records[SinkDrop::Rejected as usize].load(Relaxed),
            1
        );
    }

    #[test]
    fn an_http_sink_leaves_a_failing_batch_unacknowledged_when_its_sources_stop() {
        let stats = Arc::new(SinkStats::new("http".into()));
        let transport = Scripted {
            answers: std::iter::repeat_n(Err(FailReason::Connect), 1000).collect(),
            got: Arc::default(),
        };
        let (tx, thread) = spawn_http(JsonLines::default(), transport, http(10), stats).unwrap();
        let (done_tx, done_rx) = channel();
        tx.send(batch(0, &[("/a", 0, b"1")], &done_tx)).unwrap();
        drop(tx);
        thread.join().unwrap();
        assert_eq!(done_rx.try_iter().count(), 0);
    }
}

//! One attempt at delivering a request, shared by the metric senders and
//! the HTTP log sinks: what is counted, how long to wait before the next
//! try, and what becomes of a request the backend finds too large.
//!
//! # Too large (HTTP 413)
//!
//! A backend that refuses a request as too large refuses it again
//! however often it is sent, so it is cut in two and the halves are
//! sent instead, each halved again if it is refused too, down to one
//! point or record; one that is still too large alone is dropped and
//! counted (`reason="too_large"`). The halves go at once, with no
//! backoff: the backend answered, it is not down.
//!
//! # Design
//!
//! A queued request keeps only its compressed body, so the halves are
//! cut from the body itself: decompressed, cut by the encoder's own
//! [`BatchEncoder::split`](sonde_encode::BatchEncoder::split) (between
//! two lines of a line format, two series of remote write, two data
//! points or log records of OTLP, re-wrapped in the same resource and
//! scope), and compressed again. The other way, keeping each request's
//! points to encode the halves from, would cost memory (and disk) on
//! every request for a refusal that is rare; cutting costs one
//! decompression and two compressions per halving, paid only when a 413
//! comes.
//!
//! The request stays at the head of its queue until every piece of it
//! is delivered or dropped; the undelivered pieces wait in [`Split`],
//! outside the queue's bound (at most the size of the request again, as
//! the pieces of a halving sum to its whole). A piece that fails in a way
//! a retry may mend waits for the backoff like any request, and only the
//! undelivered pieces are sent again: nothing is delivered twice. If the
//! agent stops before the last piece is delivered, a disk buffer still
//! holds the whole request, and the next start sends again the pieces
//! this run delivered: the one case of a duplicate without a crash.
//!
//! # Retry-After
//!
//! When a retryable failure carries the backend's `Retry-After` (HTTP 429
//! and 503; [`super::transport::parse_retry_after`]), the next attempt
//! waits the longer of it and the backoff, so a backend asking for 2 s is
//! never retried before 2 s, and one asking for an hour is asked again
//! after [`super::transport::RETRY_AFTER_MAX`]. Such waits are counted in
//! `sonde_sink_retry_after_waits_total`.

use std::hash::{Hash, Hasher};
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use sonde_encode::compress::Compression;
use sonde_encode::Half;

use super::transport::RETRY_AFTER_MAX;
use super::{Backoff, Request, Transport};
use crate::sink::{FailReason, SinkDrop, SinkStats};

/// An encoder's [`BatchEncoder::split`](sonde_encode::BatchEncoder::split):
/// cuts an uncompressed body into two valid halves.
pub type SplitFn = fn(&[u8]) -> Option<[Half; 2]>;

/// What a sink counts its requests' contents in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Metric points (`sonde_sink_points_total`, `dropped_points`).
    Points,
    /// Log records (`sonde_sink_records_total`, `dropped_records`).
    Records,
    /// The profiler's periods (`sonde_sink_profiles_total`,
    /// `dropped_profiles`).
    Profiles,
}

impl Unit {
    fn delivered(self, stats: &SinkStats, r: &Outgoing<'_>) {
        match self {
            Unit::Points => {
                stats.batches.fetch_add(1, Relaxed);
                stats.points.fetch_add(u64::from(r.points), Relaxed);
            }
            Unit::Records => {
                stats.records.fetch_add(u64::from(r.points), Relaxed);
            }
            Unit::Profiles => {
                stats.profiles.fetch_add(u64::from(r.points), Relaxed);
            }
        }
        stats.bytes_raw.fetch_add(u64::from(r.raw_bytes), Relaxed);
        stats.bytes_sent.fetch_add(r.body.len() as u64, Relaxed);
    }

    fn dropped(self, stats: &SinkStats, why: SinkDrop, n: u32) {
        self.count_drop(stats, why, 1, u64::from(n));
    }

    /// Counts `batches` requests holding `n` of this unit dropped for
    /// `why` (log records and profiles are counted without requests).
    pub fn count_drop(self, stats: &SinkStats, why: SinkDrop, batches: u64, n: u64) {
        match self {
            Unit::Points => stats.count_drop(why, batches, n),
            Unit::Records => {
                stats.dropped_records[why as usize].fetch_add(n, Relaxed);
            }
            Unit::Profiles => {
                stats.dropped_profiles[why as usize].fetch_add(n, Relaxed);
            }
        }
    }

    /// The unit's name in log lines.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Points => "points",
            Unit::Records => "log records",
            Unit::Profiles => "profiles",
        }
    }
}

/// A request as [`attempt`] sends it.
#[derive(Clone, Copy, Debug)]
pub struct Outgoing<'a> {
    /// The body as sent (compressed).
    pub body: &'a [u8],
    /// Points or records in it.
    pub points: u32,
    /// Its size before compression.
    pub raw_bytes: u32,
}

impl<'a> From<&'a Request> for Outgoing<'a> {
    fn from(r: &'a Request) -> Self {
        Outgoing {
            body: &r.body,
            points: r.points,
            raw_bytes: r.raw_bytes,
        }
    }
}

/// The pieces of the request at the head of a queue that the backend
/// refused as too large, still to be delivered.
#[derive(Debug)]
pub struct Split {
    split: SplitFn,
    compression: Compression,
    /// The request they are pieces of: its body's length and hash.
    of: (usize, u64),
    /// Undelivered pieces, the next one last.
    stack: Vec<Request>,
    /// Points or records of that request delivered or dropped so far.
    done: u64,
}

impl Split {
    /// No pieces yet, for bodies cut by `split` and compressed by
    /// `compression`.
    pub fn new(split: SplitFn, compression: Compression) -> Split {
        Split {
            split,
            compression,
            of: (0, 0),
            stack: Vec::new(),
            done: 0,
        }
    }

    /// True while a request is being sent in pieces.
    pub fn active(&self) -> bool {
        !self.stack.is_empty()
    }

    /// Points or records of the request being sent in pieces that were
    /// delivered or dropped already.
    pub fn done(&self) -> u64 {
        self.done
    }

    /// True while `r` is being sent in pieces.
    pub fn is_of(&self, r: &Outgoing<'_>) -> bool {
        self.active() && Split::fingerprint(r.body) == self.of
    }

    /// Forgets the pieces (their request left the queue another way).
    pub fn clear(&mut self) {
        self.stack.clear();
        self.done = 0;
    }

    fn fingerprint(body: &[u8]) -> (usize, u64) {
        let mut h = std::hash::DefaultHasher::new();
        body.hash(&mut h);
        (body.len(), h.finish())
    }

    /// The next piece of `front`, taken out; `None` when `front` is not
    /// being sent in pieces (any pieces of another request are dropped:
    /// it left the queue without this sender).
    fn take(&mut self, front: &Outgoing<'_>) -> Option<Request> {
        if self.stack.is_empty() {
            return None;
        }
        if Split::fingerprint(front.body) != self.of {
            self.clear();
            return None;
        }
        self.stack.pop()
    }

    /// Halves `piece` (or `front` itself when `None`) and stacks the two
    /// halves to go next; false when it cannot be halved.
    fn halve(&mut self, front: &Outgoing<'_>, piece: Option<&Request>) -> bool {
        let whole = piece.map_or(*front, Outgoing::from);
        if whole.points < 2 {
            return false;
        }
        let Ok(raw) = self.compression.decompress(whole.body) else {
            return false;
        };
        let Some(halves) = (self.split)(&raw) else {
            return false;
        };
        let mut out = Vec::with_capacity(2);
        for h in halves {
            let mut body = Vec::with_capacity(h.body.len() / 2);
            if self.compression.compress(&h.body, &mut body).is_err() {
                return false;
            }
            out.push(Request {
                body,
                points: u32::try_from(h.points).unwrap_or(u32::MAX),
                raw_bytes: u32::try_from(h.body.len()).unwrap_or(u32::MAX),
            });
        }
        if piece.is_none() {
            self.of = Split::fingerprint(front.body);
            self.done = 0;
        }
        // The first half goes first.
        out.reverse();
        self.stack.extend(out);
        true
    }

    /// `piece` (or the whole request when `None`) was delivered (or
    /// dropped, `delivered` false): what the caller does next.
    fn finished(&mut self, piece: Option<Request>, delivered: bool) -> Attempt {
        let Some(piece) = piece else {
            return if delivered {
                Attempt::Delivered
            } else {
                Attempt::Refused
            };
        };
        self.done += u64::from(piece.points);
        if self.stack.is_empty() {
            self.done = 0;
            Attempt::Delivered
        } else {
            Attempt::Partial
        }
    }
}

/// What one attempt at a request came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// The request is done with: delivered (wholly, or in pieces some of
    /// which may have been dropped and counted). Remove it from the queue.
    Delivered,
    /// The backend refused the request for good (counted). Remove it.
    Refused,
    /// A piece of it was delivered or dropped, or it was cut into pieces:
    /// attempt it again at once.
    Partial,
    /// It may succeed later: attempt it again after this delay.
    Retry(Duration),
}

/// Sends `front`, the request at the head of the caller's queue (or,
/// once the backend found it too large, its next undelivered piece),
/// once over `transport`: counts the outcome in `stats` in `unit`s, moves
/// `backoff` on, and says what to do next.
pub fn attempt<T: Transport>(
    transport: &mut T,
    front: Outgoing<'_>,
    split: &mut Split,
    backoff: &mut Backoff,
    stats: &SinkStats,
    unit: Unit,
) -> Attempt {
    let piece = split.take(&front);
    let cur = piece.as_ref().map_or(front, Outgoing::from);
    let points = cur.points;
    match transport.send(cur.body) {
        Ok(()) => {
            if backoff.failures() > 0 {
                tracing::info!(sink = %stats.name, after_failures = backoff.failures(), "backend reachable again");
            }
            backoff.reset();
            unit.delivered(stats, &cur);
            split.finished(piece, true)
        }
        Err(e) if e.reason == FailReason::TooLarge => {
            stats.failures[FailReason::TooLarge as usize].fetch_add(1, Relaxed);
            if split.halve(&front, piece.as_ref()) {
                tracing::info!(sink = %stats.name, error = %e, "{} {points} {}: too large for the backend; sending it in two halves", if piece.is_some() { "a piece of" } else { "a request of" }, unit.name());
                return Attempt::Partial;
            }
            unit.dropped(stats, SinkDrop::TooLarge, points);
            tracing::warn!(sink = %stats.name, error = %e, "{points} {} too large for the backend even alone; dropped", unit.name());
            split.finished(piece, false)
        }
        Err(e) if e.reason.retryable() => {
            stats.failures[e.reason as usize].fetch_add(1, Relaxed);
            stats.retries.fetch_add(1, Relaxed);
            let mut delay = backoff.next_delay();
            if let Some(asked) = e.retry_after.map(|d| d.min(RETRY_AFTER_MAX)) {
                if asked > delay {
                    delay = asked;
                    stats.retry_after_waits.fetch_add(1, Relaxed);
                }
            }
            if let Some(p) = piece {
                split.stack.push(p);
            }
            // One line per failure; the delays grow to backoff_max, so a
            // long outage logs about twice a minute.
            tracing::warn!(sink = %stats.name, error = %e, retry_in = ?delay, retry_after = ?e.retry_after, "sending {} failed; will retry", unit.name());
            Attempt::Retry(delay)
        }
        Err(e) => {
            stats.failures[e.reason as usize].fetch_add(1, Relaxed);
            unit.dropped(stats, SinkDrop::Rejected, points);
            tracing::error!(sink = %stats.name, error = %e, "backend refused a request of {points} {}; dropped", unit.name());
            split.finished(piece, false)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use sonde_encode::split_lines;

    use super::*;
    use crate::sender::SendError;

    /// A backend taking bodies of at most `max` lines, answering from
    /// `script` first when it has an answer.
    struct Lines {
        max: usize,
        script: VecDeque<SendError>,
        got: Vec<String>,
    }

    impl Transport for Lines {
        fn send(&mut self, body: &[u8]) -> Result<(), SendError> {
            if let Some(e) = self.script.pop_front() {
                return Err(e);
            }
            let text = String::from_utf8(body.to_vec()).unwrap();
            if text.lines().count() > self.max || text.contains("huge") {
                return Err(SendError::new(FailReason::TooLarge, "HTTP 413"));
            }
            self.got.extend(text.lines().map(str::to_string));
            Ok(())
        }
    }

    fn request(lines: &[&str]) -> Request {
        let body: String = lines.iter().map(|l| format!("{l}\n")).collect();
        Request {
            points: lines.len() as u32,
            raw_bytes: body.len() as u32,
            body: body.into_bytes(),
        }
    }

    struct Run {
        transport: Lines,
        split: Split,
        backoff: Backoff,
        stats: SinkStats,
    }

    impl Run {
        fn new(max: usize) -> Run {
            Run {
                transport: Lines {
                    max,
                    script: VecDeque::new(),
                    got: Vec::new(),
                },
                split: Split::new(split_lines, Compression::None),
                backoff: Backoff::new(Duration::from_millis(1), Duration::from_millis(2)),
                stats: SinkStats::new("t".into()),
            }
        }

        /// Attempts `r` until it is done with, as a sender would; the
        /// outcomes on the way.
        fn deliver(&mut self, r: &Request) -> Vec<Attempt> {
            let mut seen = Vec::new();
            loop {
                let a = attempt(
                    &mut self.transport,
                    Outgoing::from(r),
                    &mut self.split,
                    &mut self.backoff,
                    &self.stats,
                    Unit::Points,
                );
                seen.push(a);
                if matches!(a, Attempt::Delivered | Attempt::Refused) {
                    return seen;
                }
            }
        }
    }

    #[test]
    fn a_request_too_large_is_halved_until_each_piece_is_taken_in_order() {
        let mut run = Run::new(2);
        let lines = ["0", "1", "2", "3", "4", "5", "6"];
        let seen = run.deliver(&request(&lines));
        assert_eq!(run.transport.got, lines);
        assert_eq!(seen.last(), Some(&Attempt::Delivered));
        let s = &run.stats;
        assert_eq!(s.points.load(Relaxed), 7);
        // 7 -> 3 + 4, 3 -> 1 + 2, 4 -> 2 + 2: four requests taken.
        assert_eq!(s.batches.load(Relaxed), 4);
        assert_eq!(s.failures[FailReason::TooLarge as usize].load(Relaxed), 3);
        assert_eq!(s.dropped(SinkDrop::TooLarge), 0);
        assert!(!run.split.active());
    }

    #[test]
    fn a_point_too_large_alone_is_dropped_and_counted_and_the_rest_delivered() {
        let mut run = Run::new(100);
        let seen = run.deliver(&request(&["a", "huge", "b", "c"]));
        assert_eq!(run.transport.got, ["a", "b", "c"]);
        assert_eq!(seen.last(), Some(&Attempt::Delivered));
        assert_eq!(run.stats.points.load(Relaxed), 3);
        assert_eq!(run.stats.dropped(SinkDrop::TooLarge), 1);
        // Alone in its request: refused, so the caller drops it.
        let mut run = Run::new(100);
        assert_eq!(run.deliver(&request(&["huge"])), [Attempt::Refused]);
        assert_eq!(run.stats.dropped(SinkDrop::TooLarge), 1);
    }

    #[test]
    fn a_piece_that_fails_for_a_while_is_retried_without_sending_delivered_pieces_again() {
        let mut run = Run::new(2);
        let r = request(&["0", "1", "2", "3"]);
        // 413 for the whole, the first half taken, then the second half
        // meets an outage.
        let first = attempt(
            &mut run.transport,
            Outgoing::from(&r),
            &mut run.split,
            &mut run.backoff,
            &run.stats,
            Unit::Points,
        );
        assert_eq!(first, Attempt::Partial);
        let second = attempt(
            &mut run.transport,
            Outgoing::from(&r),
            &mut run.split,
            &mut run.backoff,
            &run.stats,
            Unit::Points,
        );
        assert_eq!(second, Attempt::Partial);
        assert_eq!(run.split.done(), 2);
        run.transport
            .script
            .push_back(SendError::new(FailReason::ServerError, "HTTP 500"));
        let seen = run.deliver(&r);
        assert!(matches!(seen[0], Attempt::Retry(_)), "{seen:?}");
        assert_eq!(run.transport.got, ["0", "1", "2", "3"]);
        assert_eq!(run.stats.points.load(Relaxed), 4);
    }

    #[test]
    fn pieces_of_a_request_that_left_the_queue_are_forgotten() {
        let mut run = Run::new(1);
        let old = request(&["0", "1"]);
        let a = attempt(
            &mut run.transport,
            Outgoing::from(&old),
            &mut run.split,
            &mut run.backoff,
            &run.stats,
            Unit::Points,
        );
        assert_eq!(a, Attempt::Partial);
        assert!(run.split.active());
        // The queue dropped `old`; the next head is another request.
        let seen = run.deliver(&request(&["new"]));
        assert_eq!(seen, [Attempt::Delivered]);
        assert_eq!(run.transport.got, ["new"]);
        assert!(!run.split.active());
    }

    #[test]
    fn retry_after_stretches_the_wait_past_the_backoff_up_to_its_cap() {
        let mut run = Run::new(10);
        let r = request(&["0"]);
        for (asked, want) in [
            (Duration::from_secs(2), Duration::from_secs(2)),
            (Duration::from_secs(3600), RETRY_AFTER_MAX),
        ] {
            let mut e = SendError::new(FailReason::Throttled, "HTTP 429");
            e.retry_after = Some(asked);
            run.transport.script.push_back(e);
            let a = attempt(
                &mut run.transport,
                Outgoing::from(&r),
                &mut run.split,
                &mut run.backoff,
                &run.stats,
                Unit::Points,
            );
            assert_eq!(a, Attempt::Retry(want));
        }
        assert_eq!(run.stats.retry_after_waits.load(Relaxed), 2);
        assert_eq!(
            run.stats.failures[FailReason::Throttled as usize].load(Relaxed),
            2
        );
    }
}

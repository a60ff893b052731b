//! Senders: the runtime of every network sink (HTTP and TCP backends).
//!
//! A sender is one thread per sink owning an encoder
//! ([`sonde_encode::BatchEncoder`]), a [`Compression`], a [`Transport`] and
//! a [`Queue`]. The flusher drives it by handing it windows through a
//! [`SinkHandle`], which never blocks. The sender cuts each window into
//! requests of at most `max_batch_points` points and `max_batch_bytes`
//! bytes, compresses each, appends it to its queue, and delivers the queue
//! oldest first, one request at a time, so a backend sees windows in order.
//!
//! # Delivery
//!
//! * A request the backend accepts (HTTP 2xx, or a completed TCP write) is
//!   removed from the queue and counted.
//! * Connection errors, timeouts, HTTP 408, 429 and 5xx are retried after an
//!   exponential backoff with jitter ([`Backoff`]); the request stays at
//!   the head of the queue, and new windows queue behind it meanwhile.
//!   A backend's `Retry-After` (on 429 and 503) makes the wait at least
//!   that long, up to five minutes ([`attempt`]).
//! * A request the backend refuses as too large (HTTP 413) is cut in two
//!   and the halves sent in its place, down to one point; a point too
//!   large alone is dropped and counted (`reason="too_large"`). How, and
//!   why from the compressed body, is in [`attempt`].
//! * Any other HTTP 4xx is logged with the server's message, counted
//!   (`sonde_sink_dropped_points_total{reason="rejected"}`) and dropped:
//!   sending it again would fail again.
//! * The queue is bounded ([`queue::Memory`] by bytes in memory, or
//!   [`disk::Disk`] on disk); when it is full the oldest requests are
//!   dropped and counted (`reason="buffer_full"`). Receiving never waits.
//!
//! # Clean shutdown
//!
//! When the flusher drops its [`SinkHandle`] (after the last window), the
//! sender seals its partial request and keeps delivering for up to
//! `shutdown_grace`, a request in flight then cut short at its end
//! ([`Transport::stop_by`]). What is still queued then stays on disk for the next
//! start with a disk buffer, and is dropped and counted
//! (`reason="shutdown"`) with a memory one.

pub mod attempt;
pub mod disk;
pub mod queue;
pub mod transport;

use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sonde_aggregate::Batch;
use sonde_encode::compress::Compression;
use sonde_encode::BatchEncoder;

pub use attempt::{Attempt, Outgoing, Split, SplitFn, Unit};
pub use queue::{Dropped, Queue, Request};
pub use transport::{Http, SendError, Tcp, Transport};

use crate::sink::{FailReason, SinkDrop, SinkHandle, SinkStats, QUEUE_BATCHES};

/// How a sender batches, retries and stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// Most points in one request.
    pub max_batch_points: usize,
    /// Most bytes in one request, before compression (a request may pass
    /// this by the one point that crossed it).
    pub max_batch_bytes: usize,
    /// How long a partial request waits for more points before it is sent.
    /// Zero sends every window's last partial request at once.
    pub max_batch_age: Duration,
    /// How long one attempt may take, connecting included.
    pub request_timeout: Duration,
    /// The first retry's delay.
    pub backoff_min: Duration,
    /// The longest delay between retries.
    pub backoff_max: Duration,
    /// How long the sender keeps delivering after the agent is told to stop.
    pub shutdown_grace: Duration,
}

impl Default for Delivery {
    fn default() -> Self {
        Delivery {
            max_batch_points: 10_000,
            max_batch_bytes: 4 << 20,
            max_batch_age: Duration::from_secs(1),
            request_timeout: Duration::from_secs(10),
            backoff_min: Duration::from_millis(250),
            backoff_max: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(5),
        }
    }
}

/// Exponential backoff with jitter: the n-th delay in a row is drawn
/// uniformly from half to all of `min * 2^n`, capped at `max`, so that many
/// agents that lost the same backend do not retry in step.
#[derive(Debug)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    failures: u32,
    rng: fastrand::Rng,
}

impl Backoff {
    /// A backoff starting at `min` and growing to `max`.
    pub fn new(min: Duration, max: Duration) -> Backoff {
        Backoff {
            min,
            max: max.max(min),
            failures: 0,
            rng: fastrand::Rng::new(),
        }
    }

    /// The delay before the next attempt, after one more failure.
    pub fn next_delay(&mut self) -> Duration {
        let ceiling = self
            .min
            .saturating_mul(1u32 << self.failures.min(20))
            .min(self.max);
        self.failures = self.failures.saturating_add(1);
        ceiling.mul_f64(0.5 + 0.5 * self.rng.f64())
    }

    /// Failures since the last success.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Back to the first delay, after a success.
    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

/// Starts a sender thread for one sink; the returned handle goes to the
/// flusher. The thread ends after the handle is dropped and its grace
/// period is over.
///
/// # Errors
///
/// When the thread cannot be spawned.
pub fn spawn<E: BatchEncoder, T: Transport>(
    encoder: E,
    compression: Compression,
    transport: T,
    queue: Box<dyn Queue>,
    delivery: Delivery,
    stats: Arc<SinkStats>,
) -> io::Result<(SinkHandle, JoinHandle<()>)> {
    let (tx, rx) = sync_channel::<Arc<Batch>>(QUEUE_BATCHES);
    let sender = Sender {
        encoder,
        compression,
        transport,
        queue,
        delivery,
        backoff: Backoff::new(delivery.backoff_min, delivery.backoff_max),
        split: Split::new(E::split, compression),
        stats: Arc::clone(&stats),
        partial_since: None,
        next_try: Instant::now(),
        raw: Vec::new(),
    };
    sender.publish_queue();
    let thread = std::thread::Builder::new()
        .name(format!("sink {}", stats.name))
        .spawn(move || {
            sonde_runtime::priority::enter_background();
            sender.run(&rx)
        })?;
    Ok((SinkHandle::new(tx, stats), thread))
}

struct Sender<E, T> {
    encoder: E,
    compression: Compression,
    transport: T,
    queue: Box<dyn Queue>,
    delivery: Delivery,
    backoff: Backoff,
    /// The pieces of a request the backend found too large.
    split: Split,
    stats: Arc<SinkStats>,
    /// When the first point of the partial request was pushed.
    partial_since: Option<Instant>,
    /// No attempt before this (backoff).
    next_try: Instant,
    raw: Vec<u8>,
}

impl<E: BatchEncoder, T: Transport> Sender<E, T> {
    fn run(mut self, rx: &Receiver<Arc<Batch>>) {
        loop {
            let wait = self.wait(Instant::now());
            match rx.recv_timeout(wait) {
                Ok(b) => self.take(&b),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            self.seal_if_old();
            self.deliver(rx, None);
        }
        self.seal();
        let deadline = Instant::now() + self.delivery.shutdown_grace;
        self.transport.stop_by(deadline);
        while !self.queue.is_empty() && Instant::now() < deadline {
            let wait = self.next_try.saturating_duration_since(Instant::now());
            std::thread::sleep(wait.min(deadline.saturating_duration_since(Instant::now())));
            self.deliver(rx, Some(deadline));
        }
        let mut lost = self.queue.volatile();
        let kept = self.queue.len() as u64 - lost.batches;
        if kept == 0 && self.split.active() {
            // The head, lost with the rest, went partly in pieces that
            // are counted as delivered (or dropped) already.
            lost.points = lost.points.saturating_sub(self.split.done());
        }
        if kept > 0 {
            tracing::info!(
                sink = %self.stats.name,
                requests = kept,
                points = self.queue.points() - lost.points,
                "stopping with requests in the disk buffer; they are sent after the next start"
            );
        }
        if lost.batches > 0 {
            tracing::warn!(
                sink = %self.stats.name,
                requests = lost.batches,
                points = lost.points,
                "stopping with undelivered requests in memory; they are dropped"
            );
            self.stats
                .count_drop(SinkDrop::Shutdown, lost.batches, lost.points);
        }
    }

    /// How long to wait for the next window before there is work to do.
    fn wait(&self, now: Instant) -> Duration {
        let mut wait = Duration::from_secs(3600);
        if let Some(since) = self.partial_since {
            wait = wait.min((since + self.delivery.max_batch_age).saturating_duration_since(now));
        }
        if !self.queue.is_empty() {
            wait = wait.min(self.next_try.saturating_duration_since(now));
        }
        wait
    }

    /// Encodes a window into requests.
    fn take(&mut self, batch: &Batch) {
        for p in batch.points() {
            self.encoder.push(&p);
            if self.partial_since.is_none() {
                self.partial_since = Some(Instant::now());
            }
            if self.encoder.points() >= self.delivery.max_batch_points
                || self.encoder.bytes() >= self.delivery.max_batch_bytes
            {
                self.seal();
            }
        }
        if self.delivery.max_batch_age.is_zero() {
            self.seal();
        }
    }

    fn seal_if_old(&mut self) {
        if self
            .partial_since
            .is_some_and(|t| t.elapsed() >= self.delivery.max_batch_age)
        {
            self.seal();
        }
    }

    /// Finishes the partial request and queues it.
    fn seal(&mut self) {
        self.partial_since = None;
        let points = self.encoder.points() as u32;
        if points == 0 {
            return;
        }
        self.raw.clear();
        self.encoder.finish(&mut self.raw);
        let mut body = Vec::with_capacity(self.raw.len() / 4);
        if let Err(e) = self.compression.compress(&self.raw, &mut body) {
            self.stats.failures[FailReason::Encode as usize].fetch_add(1, Relaxed);
            self.stats
                .count_drop(SinkDrop::Rejected, 1, u64::from(points));
            tracing::error!(sink = %self.stats.name, error = %e, "cannot compress a request; dropped");
            return;
        }
        let req = Request {
            body,
            points,
            raw_bytes: self.raw.len() as u32,
        };
        match self.queue.push(req) {
            Ok(mut d) => {
                if d.batches > 0 && self.split.active() && !self.front_is_split() {
                    // The request being sent in pieces went with the
                    // oldest; its delivered pieces are counted already.
                    d.points = d.points.saturating_sub(self.split.done());
                    self.split.clear();
                }
                if d.batches > 0 {
                    self.stats
                        .count_drop(SinkDrop::BufferFull, d.batches, d.points);
                    tracing::warn!(
                        sink = %self.stats.name,
                        requests = d.batches,
                        points = d.points,
                        "buffer full: dropped the oldest requests"
                    );
                }
            }
            Err(e) => {
                self.stats.failures[FailReason::Buffer as usize].fetch_add(1, Relaxed);
                self.stats
                    .count_drop(SinkDrop::BufferError, 1, u64::from(points));
                tracing::error!(sink = %self.stats.name, error = %e, "cannot write to the disk buffer; request dropped");
            }
        }
        self.publish_queue();
    }

    /// True when the queue's head is the request being sent in pieces.
    fn front_is_split(&mut self) -> bool {
        match self.queue.front() {
            Ok(Some(r)) => self.split.is_of(&Outgoing::from(r)),
            _ => false,
        }
    }

    fn publish_queue(&self) {
        self.stats
            .queue_batches
            .store(self.queue.len() as u64, Relaxed);
        self.stats.queue_bytes.store(self.queue.bytes(), Relaxed);
    }

    /// Sends queued requests, oldest first, until the queue is empty or an
    /// attempt fails; takes new windows between requests so the flusher's
    /// queue never fills while a backlog drains.
    fn deliver(&mut self, rx: &Receiver<Arc<Batch>>, deadline: Option<Instant>) {
        loop {
            let now = Instant::now();
            if now < self.next_try || deadline.is_some_and(|d| now >= d) {
                return;
            }
            let front = match self.queue.front() {
                Ok(Some(r)) => r,
                Ok(None) => return,
                Err(e) => {
                    self.stats.failures[FailReason::Buffer as usize].fetch_add(1, Relaxed);
                    tracing::error!(sink = %self.stats.name, error = %e, "cannot read the disk buffer; skipping a request");
                    if self.queue.pop().is_err() {
                        // The buffer cannot even record the skip: wait
                        // rather than spin.
                        self.next_try = now + self.backoff.next_delay();
                        return;
                    }
                    self.stats.count_drop(SinkDrop::BufferError, 1, 0);
                    continue;
                }
            };
            match attempt::attempt(
                &mut self.transport,
                Outgoing::from(front),
                &mut self.split,
                &mut self.backoff,
                &self.stats,
                Unit::Points,
            ) {
                Attempt::Delivered | Attempt::Refused => self.pop(),
                Attempt::Partial => {}
                Attempt::Retry(delay) => {
                    self.next_try = Instant::now() + delay;
                    return;
                }
            }
            while let Ok(b) = rx.try_recv() {
                self.take(&b);
            }
        }
    }

    fn pop(&mut self) {
        if let Err(e) = self.queue.pop() {
            self.stats.failures[FailReason::Buffer as usize].fetch_add(1, Relaxed);
            tracing::error!(sink = %self.stats.name, error = %e, "cannot record a delivery in the disk buffer");
        }
        self.publish_queue();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_with_jitter_up_to_its_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
        let d: Vec<Duration> = (0..8).map(|_| b.next_delay()).collect();
        for (n, d) in d.iter().enumerate() {
            let ceiling = Duration::from_millis(100 << n).min(Duration::from_secs(2));
            assert!(*d >= ceiling / 2 && *d <= ceiling, "{n}: {d:?}");
        }
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(100));
    }
}

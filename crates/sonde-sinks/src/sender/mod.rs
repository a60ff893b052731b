//! Senders: the runtime of every network sink (HTTP and TCP backends).
//!
//! A sender is one thread per sink and input owning a [`Batcher`] (for
//! metric windows, an encoder ([`sonde_encode::BatchEncoder`]) in
//! [`Points`]; for the profiler's periods, a profile encoder), a
//! [`Compression`], a [`Transport`] and a [`Queue`]. The flusher (or the
//! profiler) drives it by handing it what it made through a bounded
//! channel, which never blocks. The sender cuts each window into requests
//! of at most `max_batch_points` points and `max_batch_bytes` bytes (a
//! profile is one request), compresses each, appends it to its queue, and
//! delivers the queue oldest first, one request at a time, so a backend
//! sees windows in order.
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
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sonde_aggregate::Batch;
use sonde_encode::compress::Compression;
use sonde_encode::{BatchEncoder, Half};

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

/// What a sender takes from its channel and how it cuts that into
/// request bodies.
pub trait Batcher: Send + 'static {
    /// What arrives on the channel: a metric window, a period's profile.
    type Item: Send + Sync + 'static;
    /// What the requests' contents are counted in on `/metrics`.
    const UNIT: Unit;

    /// Adds `item` to the partial body, calling `seal` each time the body
    /// reaches `limits` (the sender then finishes and queues it).
    fn take(&mut self, item: &Self::Item, limits: &Delivery, seal: &mut dyn FnMut(&mut Self));

    /// Units (points, profiles) in the partial body.
    fn pending(&self) -> usize;

    /// Appends the finished body to `out` and empties the partial one.
    fn finish(&mut self, out: &mut Vec<u8>);

    /// The body's `Content-Type`, for HTTP sinks.
    fn content_type(&self) -> &'static str;

    /// Cuts a finished body in two for a backend that refused it as too
    /// large ([`BatchEncoder::split`]); `None` when it cannot be.
    fn split(body: &[u8]) -> Option<[Half; 2]>
    where
        Self: Sized;
}

/// Metric windows through `E`: each window's points in requests of at
/// most `max_batch_points` points and `max_batch_bytes` bytes.
#[derive(Debug)]
pub struct Points<E>(pub E);

impl<E: BatchEncoder> Batcher for Points<E> {
    type Item = Batch;
    const UNIT: Unit = Unit::Points;

    fn take(&mut self, batch: &Batch, limits: &Delivery, seal: &mut dyn FnMut(&mut Self)) {
        for p in batch.points() {
            self.0.push(&p);
            if self.0.points() >= limits.max_batch_points
                || self.0.bytes() >= limits.max_batch_bytes
            {
                seal(self);
            }
        }
    }

    fn pending(&self) -> usize {
        self.0.points()
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        self.0.finish(out);
    }

    fn content_type(&self) -> &'static str {
        self.0.content_type()
    }

    fn split(body: &[u8]) -> Option<[Half; 2]> {
        E::split(body)
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
    let (tx, thread) = spawn_batcher(
        Points(encoder),
        compression,
        transport,
        queue,
        delivery,
        Arc::clone(&stats),
    )?;
    Ok((SinkHandle::new(tx, stats), thread))
}

/// A started sender: the end of its channel and its thread.
pub type Started<I> = (SyncSender<Arc<I>>, JoinHandle<()>);

/// Starts a sender thread taking what `batcher` cuts into requests; the
/// thread ends after every end of the returned channel is dropped and
/// its grace period is over.
///
/// # Errors
///
/// When the thread cannot be spawned.
pub fn spawn_batcher<B: Batcher, T: Transport>(
    batcher: B,
    compression: Compression,
    transport: T,
    queue: Box<dyn Queue>,
    delivery: Delivery,
    stats: Arc<SinkStats>,
) -> io::Result<Started<B::Item>> {
    let (tx, rx) = sync_channel::<Arc<B::Item>>(QUEUE_BATCHES);
    let sender = Sender {
        batcher,
        out: Out {
            compression,
            transport,
            queue,
            delivery,
            backoff: Backoff::new(delivery.backoff_min, delivery.backoff_max),
            split: Split::new(B::split, compression),
            stats: Arc::clone(&stats),
            partial_since: None,
            next_try: Instant::now(),
            raw: Vec::new(),
            unit: B::UNIT,
        },
    };
    sender.out.publish_queue();
    let thread = std::thread::Builder::new()
        .name(format!("sink {}", stats.name))
        .spawn(move || {
            sonde_runtime::priority::enter_background();
            sender.run(&rx)
        })?;
    Ok((tx, thread))
}

struct Sender<B, T> {
    batcher: B,
    out: Out<T>,
}

/// Everything of a sender but its batcher: what it queues and delivers.
struct Out<T> {
    compression: Compression,
    transport: T,
    queue: Box<dyn Queue>,
    delivery: Delivery,
    backoff: Backoff,
    /// The pieces of a request the backend found too large.
    split: Split,
    stats: Arc<SinkStats>,
    /// When the first unit of the partial request was taken.
    partial_since: Option<Instant>,
    /// No attempt before this (backoff).
    next_try: Instant,
    raw: Vec<u8>,
    unit: Unit,
}

impl<B: Batcher, T: Transport> Sender<B, T> {
    fn run(mut self, rx: &Receiver<Arc<B::Item>>) {
        loop {
            let wait = self.out.wait(Instant::now());
            match rx.recv_timeout(wait) {
                Ok(item) => self.take(&item),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            self.seal_if_old();
            self.deliver(rx, None);
        }
        self.out.seal(&mut self.batcher);
        let deadline = Instant::now() + self.out.delivery.shutdown_grace;
        self.out.transport.stop_by(deadline);
        while !self.out.queue.is_empty() && Instant::now() < deadline {
            let wait = self.out.next_try.saturating_duration_since(Instant::now());
            std::thread::sleep(wait.min(deadline.saturating_duration_since(Instant::now())));
            self.deliver(rx, Some(deadline));
        }
        self.out.stop();
    }

    /// Cuts what arrived into requests.
    fn take(&mut self, item: &B::Item) {
        let out = &mut self.out;
        let limits = out.delivery;
        self.batcher.take(item, &limits, &mut |b| out.seal(b));
        if self.batcher.pending() > 0 && self.out.partial_since.is_none() {
            self.out.partial_since = Some(Instant::now());
        }
        if self.out.delivery.max_batch_age.is_zero() {
            self.out.seal(&mut self.batcher);
        }
    }

    fn seal_if_old(&mut self) {
        if self
            .out
            .partial_since
            .is_some_and(|t| t.elapsed() >= self.out.delivery.max_batch_age)
        {
            self.out.seal(&mut self.batcher);
        }
    }

    /// Sends queued requests, oldest first, until the queue is empty or an
    /// attempt fails; takes what arrives between requests so the channel
    /// never fills while a backlog drains.
    fn deliver(&mut self, rx: &Receiver<Arc<B::Item>>, deadline: Option<Instant>) {
        while self.out.deliver_one(deadline) {
            while let Ok(item) = rx.try_recv() {
                self.take(&item);
            }
        }
    }
}

impl<T: Transport> Out<T> {
    /// How long to wait for the next item before there is work to do.
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

    /// Counts `batches` requests holding `units` dropped for `why`.
    fn count_drop(&self, why: SinkDrop, batches: u64, units: u64) {
        self.unit.count_drop(&self.stats, why, batches, units);
    }

    /// Finishes the partial request of `batcher` and queues it.
    fn seal<B: Batcher>(&mut self, batcher: &mut B) {
        self.partial_since = None;
        let points = batcher.pending() as u32;
        if points == 0 {
            return;
        }
        self.raw.clear();
        batcher.finish(&mut self.raw);
        let mut body = Vec::with_capacity(self.raw.len() / 4);
        if let Err(e) = self.compression.compress(&self.raw, &mut body) {
            self.stats.failures[FailReason::Encode as usize].fetch_add(1, Relaxed);
            self.count_drop(SinkDrop::Rejected, 1, u64::from(points));
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
                    self.count_drop(SinkDrop::BufferFull, d.batches, d.points);
                    tracing::warn!(
                        sink = %self.stats.name,
                        requests = d.batches,
                        dropped = %format!("{} {}", d.points, self.unit.name()),
                        "buffer full: dropped the oldest requests"
                    );
                }
            }
            Err(e) => {
                self.stats.failures[FailReason::Buffer as usize].fetch_add(1, Relaxed);
                self.count_drop(SinkDrop::BufferError, 1, u64::from(points));
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

    /// Sends the queue's oldest request unless it waits for its backoff or
    /// the `deadline` passed; true when the next may be sent at once.
    fn deliver_one(&mut self, deadline: Option<Instant>) -> bool {
        loop {
            let now = Instant::now();
            if now < self.next_try || deadline.is_some_and(|d| now >= d) {
                return false;
            }
            let front = match self.queue.front() {
                Ok(Some(r)) => r,
                Ok(None) => return false,
                Err(e) => {
                    self.stats.failures[FailReason::Buffer as usize].fetch_add(1, Relaxed);
                    tracing::error!(sink = %self.stats.name, error = %e, "cannot read the disk buffer; skipping a request");
                    if self.queue.pop().is_err() {
                        // The buffer cannot even record the skip: wait
                        // rather than spin.
                        self.next_try = now + self.backoff.next_delay();
                        return false;
                    }
                    self.count_drop(SinkDrop::BufferError, 1, 0);
                    continue;
                }
            };
            match attempt::attempt(
                &mut self.transport,
                Outgoing::from(front),
                &mut self.split,
                &mut self.backoff,
                &self.stats,
                self.unit,
            ) {
                Attempt::Delivered | Attempt::Refused => self.pop(),
                Attempt::Partial => {}
                Attempt::Retry(delay) => {
                    self.next_try = Instant::now() + delay;
                    return false;
                }
            }
            return true;
        }
    }

    fn pop(&mut self) {
        if let Err(e) = self.queue.pop() {
            self.stats.failures[FailReason::Buffer as usize].fetch_add(1, Relaxed);
            tracing::error!(sink = %self.stats.name, error = %e, "cannot record a delivery in the disk buffer");
        }
        self.publish_queue();
    }

    /// After the grace period: says what stays on disk for the next start
    /// and counts what a memory buffer loses.
    fn stop(&mut self) {
        let mut lost = self.queue.volatile();
        let kept = self.queue.len() as u64 - lost.batches;
        if kept == 0 && self.split.active() {
            // The head, lost with the rest, went partly in pieces that
            // are counted as delivered (or dropped) already.
            lost.points = lost.points.saturating_sub(self.split.done());
        }
        let unit = self.unit.name();
        if kept > 0 {
            tracing::info!(
                sink = %self.stats.name,
                requests = kept,
                kept = %format!("{} {unit}", self.queue.points() - lost.points),
                "stopping with requests in the disk buffer; they are sent after the next start"
            );
        }
        if lost.batches > 0 {
            tracing::warn!(
                sink = %self.stats.name,
                requests = lost.batches,
                lost = %format!("{} {unit}", lost.points),
                "stopping with undelivered requests in memory; they are dropped"
            );
            self.count_drop(SinkDrop::Shutdown, lost.batches, lost.points);
        }
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

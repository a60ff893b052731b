//! The host's own metrics, as OpenTelemetry's hostmetrics receiver names
//! them: CPU time, load, memory, swap, pressure stalls, disks,
//! filesystems, network interfaces, TCP connection states, the top
//! processes and containers, read from /proc and /sys
//! (docs/INPUTS.md, "Host metrics").
//!
//! [`parse`] turns each file's text into values (pure, tested on fixture
//! text); [`collect`] reads the files and keeps what one collection needs
//! of the last (counters, processes); [`spawn`] runs a collection at
//! every multiple of the interval on the wall clock and sends its
//! [`Points`] to the worker of [`sonde_metrics::input::spawn_worker`].
//!
//! # Clean shutdown
//!
//! Dropping [`Running`]'s stop sender (through [`Running::stop`]) wakes
//! the thread, which returns; a thread whose worker has gone (the agent
//! stopped) returns at its next collection.

#![deny(missing_docs)]

pub mod collect;
pub mod parse;

use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use collect::{Collector, Groups, Roots};
use sonde_metrics::input::{Points, PointsSender};

/// The collecting thread.
#[derive(Debug)]
pub struct Running {
    stop: Sender<()>,
    thread: JoinHandle<()>,
}

impl Running {
    /// Stops the thread and waits for it.
    pub fn stop(self) {
        drop(self.stop);
        let _ = self.thread.join();
    }
}

/// How long from `now` to the next multiple of `interval` since the
/// epoch (at least a millisecond, so a tick is never taken twice).
pub fn until_next(now: SystemTime, interval: Duration) -> Duration {
    let since = now
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let step = interval.as_nanos().max(1);
    let left = step - since % step;
    Duration::from_nanos(u64::try_from(left).unwrap_or(u64::MAX)).max(Duration::from_millis(1))
}

/// Starts the thread that collects with `collector` at every multiple of
/// `interval` on the wall clock and sends each batch to `points`.
///
/// # Errors
///
/// When the thread cannot be spawned.
pub fn spawn(
    mut collector: Collector,
    interval: Duration,
    points: PointsSender,
) -> std::io::Result<Running> {
    let (stop, stopped) = channel::<()>();
    let thread = std::thread::Builder::new()
        .name("host-metrics".into())
        .spawn(move || {
            // A first collection at once keeps the counters' values, so
            // that the first tick sends increases.
            collector.collect(&mut Points::new());
            loop {
                match stopped.recv_timeout(until_next(SystemTime::now(), interval)) {
                    Err(RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
                let mut batch = Points::new();
                collector.collect(&mut batch);
                if points.send(batch).is_err() {
                    return;
                }
            }
        })?;
    Ok(Running { stop, thread })
}

//! The profiler's periods in a network sink: the end of the sink's channel
//! the profiler holds ([`ProfileHandle`]), and the [`Batcher`] that makes
//! one request of each period ([`Profiles`]), which the sender queues,
//! buffers (in memory or on disk), retries and counts in profiles
//! (`sonde_sink_profiles_total`, `sonde_sink_dropped_profiles_total`) as it
//! does requests of points.

use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::Arc;

use sonde_encode::Half;
use sonde_profile::Profile;

use crate::sender::{Batcher, Delivery, Unit};
use crate::sink::{SinkDrop, SinkStats};

/// Encodes one period's profile as one request body.
pub trait ProfileEncoder: Send + 'static {
    /// Appends the body of `profile` to `out`.
    fn encode(&mut self, profile: &Profile, out: &mut Vec<u8>);

    /// The body's `Content-Type`.
    fn content_type(&self) -> &'static str;
}

/// One request per period, encoded by `E`. A period is never cut: a
/// backend that refuses one as too large has it dropped and counted
/// (`reason="too_large"`).
#[derive(Debug)]
pub struct Profiles<E> {
    encoder: E,
    body: Vec<u8>,
    pending: usize,
}

impl<E: ProfileEncoder> Profiles<E> {
    /// Periods encoded by `encoder`.
    pub fn new(encoder: E) -> Self {
        Profiles {
            encoder,
            body: Vec::new(),
            pending: 0,
        }
    }
}

impl<E: ProfileEncoder> Batcher for Profiles<E> {
    type Item = Profile;
    const UNIT: Unit = Unit::Profiles;

    fn take(&mut self, profile: &Profile, _: &Delivery, seal: &mut dyn FnMut(&mut Self)) {
        self.encoder.encode(profile, &mut self.body);
        self.pending = 1;
        seal(self);
    }

    fn pending(&self) -> usize {
        self.pending
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        out.append(&mut self.body);
        self.pending = 0;
    }

    fn content_type(&self) -> &'static str {
        self.encoder.content_type()
    }

    fn split(_: &[u8]) -> Option<[Half; 2]> {
        None
    }
}

/// The profiler's end of a sink's channel of periods.
#[derive(Debug)]
pub struct ProfileHandle {
    tx: SyncSender<Arc<Profile>>,
    stats: Arc<SinkStats>,
}

impl ProfileHandle {
    /// The profiler's end of `tx`, counting drops into `stats`.
    pub(crate) fn new(tx: SyncSender<Arc<Profile>>, stats: Arc<SinkStats>) -> Self {
        ProfileHandle { tx, stats }
    }
}

impl sonde_profiler::Output for ProfileHandle {
    fn name(&self) -> &str {
        &self.stats.name
    }

    /// Queues a period without blocking; a full channel (a sink stuck on
    /// its disk) drops it and counts it (`reason="queue_full"`).
    fn send(&self, profile: Arc<Profile>) {
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) =
            self.tx.try_send(profile)
        {
            Unit::Profiles.count_drop(&self.stats, SinkDrop::QueueFull, 1, 1);
        }
    }
}

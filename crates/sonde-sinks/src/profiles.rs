//! The profiler's periods in a network sink: the end of the sink's channel
//! the profiler holds ([`ProfileHandle`]), and the [`Batcher`] that makes
//! one request of each period ([`Profiles`]), which the sender queues,
//! buffers (in memory or on disk), retries and counts in profiles
//! (`sonde_sink_profiles_total`, `sonde_sink_dropped_profiles_total`) as it
//! does requests of points.
//!
//! # Periods a kill catches between the store and the sink
//!
//! The profiler stores each period under `data_dir` and then hands it to
//! its sinks. A sink with a disk buffer records, beside the buffer, the
//! start of the newest period it has queued there ([`Cursor`], the file
//! [`CURSOR`]). A kill between the two steps leaves a stored period
//! that no buffer holds; at the next start the sink says how far it got
//! ([`ProfileHandle`]'s `queued_through`) and the profiler sends it every
//! stored period after that, oldest first, before the new ones. A kill
//! between queueing a period and recording it sends that period twice:
//! the same rows, which a backend that keys its rows by content (the
//! `clickhouse` sink's batch ids) counts once. A sink with a memory
//! buffer keeps no record: a kill loses what its memory holds anyway.

use std::io;
use std::path::{Path, PathBuf};
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
    cursor: Option<Cursor>,
}

impl<E: ProfileEncoder> Profiles<E> {
    /// Periods encoded by `encoder`.
    pub fn new(encoder: E) -> Self {
        Profiles {
            encoder,
            body: Vec::new(),
            pending: 0,
            cursor: None,
        }
    }

    /// Records each period in `cursor` once it is queued.
    #[must_use]
    pub fn with_cursor(mut self, cursor: Option<Cursor>) -> Self {
        self.cursor = cursor;
        self
    }
}

/// The file, in a sink's disk buffer of profiles, that holds the start
/// (Unix seconds, as text) of the newest period queued there.
pub const CURSOR: &str = "queued_through";

/// How far a sink's disk buffer got: the start of the newest period
/// queued in it, kept in a file beside it.
#[derive(Debug)]
pub struct Cursor {
    path: PathBuf,
    through_s: u64,
    errors: Arc<sonde_runtime::data_dir::DataDirErrors>,
}

impl Cursor {
    /// The cursor in the buffer directory `dir`, and the start it holds
    /// from an earlier run. A buffer without one (a sink new to profiles)
    /// starts from `now_s`: the periods stored before it are not its
    /// own to send.
    pub fn open(
        dir: &Path,
        now_s: u64,
        errors: Arc<sonde_runtime::data_dir::DataDirErrors>,
    ) -> (Cursor, u64) {
        let path = dir.join(CURSOR);
        let read = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok());
        let mut c = Cursor {
            path,
            through_s: read.unwrap_or(0),
            errors,
        };
        if read.is_none() {
            c.advance(now_s);
        }
        let through = c.through_s;
        (c, through)
    }

    /// Records that the period starting at `start_s` is queued. Never
    /// goes back, so a period sent out of order cannot make the next
    /// start send again what was queued.
    pub fn advance(&mut self, start_s: u64) {
        if start_s <= self.through_s && self.path.exists() {
            return;
        }
        self.through_s = self.through_s.max(start_s);
        if let Err(e) = self.save() {
            self.errors
                .failed(sonde_runtime::data_dir::What::Buffer, &self.path, &e);
        }
    }

    /// Written whole or not at all: a temporary file renamed over the
    /// old one. Not synced: a kill keeps what the kernel holds, and a
    /// power loss at worst sends a period again, which counts once.
    fn save(&self) -> io::Result<()> {
        let tmp = self.path.with_extension("tmp");
        std::fs::write(&tmp, format!("{}\n", self.through_s))?;
        std::fs::rename(&tmp, &self.path).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
    }
}

impl<E: ProfileEncoder> Batcher for Profiles<E> {
    type Item = Profile;
    const UNIT: Unit = Unit::Profiles;

    fn take(&mut self, profile: &Profile, _: &Delivery, seal: &mut dyn FnMut(&mut Self)) {
        self.encoder.encode(profile, &mut self.body);
        self.pending = 1;
        seal(self);
        if let Some(c) = &mut self.cursor {
            c.advance(profile.start_ns / 1_000_000_000);
        }
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
    queued_through: Option<u64>,
}

impl ProfileHandle {
    /// The profiler's end of `tx`, counting drops into `stats`; the
    /// sink's disk buffer had queued the periods through
    /// `queued_through` (see [`Cursor`]), if it keeps track.
    pub(crate) fn new(
        tx: SyncSender<Arc<Profile>>,
        stats: Arc<SinkStats>,
        queued_through: Option<u64>,
    ) -> Self {
        ProfileHandle {
            tx,
            stats,
            queued_through,
        }
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

    fn send_wait(&self, profile: Arc<Profile>) -> bool {
        self.tx.send(profile).is_ok()
    }

    fn queued_through(&self) -> Option<u64> {
        self.queued_through
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_starts_at_its_first_open_keeps_its_place_and_never_goes_back() {
        let dir = tempfile::tempdir().unwrap();
        let errors = Arc::new(sonde_runtime::data_dir::DataDirErrors::default());
        // New to profiles: nothing stored before now is its to send.
        let (mut c, through) = Cursor::open(dir.path(), 1_000, Arc::clone(&errors));
        assert_eq!(through, 1_000);
        c.advance(1_060);
        c.advance(1_030);
        // The next start reads where it got, not the time of that start.
        let (mut c, through) = Cursor::open(dir.path(), 5_000, Arc::clone(&errors));
        assert_eq!(through, 1_060);
        // A buffer whose directory was removed records again.
        std::fs::remove_dir_all(dir.path()).unwrap();
        c.advance(1_120);
        assert_eq!(errors.count(sonde_runtime::data_dir::What::Buffer), 1);
        std::fs::create_dir_all(dir.path()).unwrap();
        c.advance(1_120);
        assert_eq!(Cursor::open(dir.path(), 5_000, errors).1, 1_120);
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temporary file left"
        );
    }
}

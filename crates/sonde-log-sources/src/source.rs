//! The thread that runs one log source: it finds and reads the files,
//! sends their lines in batches to the source's sinks, acknowledges to its
//! tailer what every sink delivered, and saves the checkpoints.
//!
//! # One round
//!
//! 1. Take the acknowledgements that came back. Batches are acknowledged
//!    to the tailer in the order they were read, so a batch delivered
//!    before an earlier one waits for it: a checkpoint never passes a line
//!    that some sink has not delivered.
//! 2. Save the checkpoints if they moved and the last save is a second old
//!    ([`SAVE_EVERY`]), so a SIGKILL after a quiet second re-reads nothing.
//!    A save that fails (a full or read-only `data_dir`) is counted and
//!    tried again a [`SAVE_EVERY`] later; see "A checkpoint that cannot be
//!    saved" below.
//! 3. Rescan when inotify saw files come and go, or every
//!    `rescan_interval` as the safety net.
//! 4. Read, if fewer than [`MAX_IN_FLIGHT_BYTES`] (the
//!    [`SourceConfig::max_in_flight_bytes`]) are sent and not yet
//!    acknowledged: that bound is the backpressure. A slow or absent sink
//!    stops the reading, with the files held open by the tailer until what
//!    was read from them is acknowledged, and memory bounded whatever the
//!    sink does.
//! 5. Wait for inotify, an acknowledgement or the next deadline.
//!
//! # A checkpoint that cannot be saved
//!
//! The checkpoints are only the place a restart resumes from: reading and
//! delivering do not wait for them. A failed save is counted (the source's
//! `sonde_log_checkpoint_errors_total` and
//! `sonde_data_dir_write_errors_total{what="checkpoint"}`), logged with the
//! path and a fix at most once a minute ([`DataDirErrors`]), and tried
//! again at the next save, a [`SAVE_EVERY`] later, until one goes through
//! (with no restart: once the disk has room or is writable again, the
//! next save writes the whole file). Meanwhile the checkpoint file keeps
//! the last checkpoints saved ([`CheckpointFile`] never loses them to a
//! failed save), so a restart re-sends the lines delivered since, and
//! loses none. A removed `data_dir` is made again at the next save and is
//! not a failure.
//!
//! # Stopping
//!
//! Once told to stop, the source reads nothing more, waits up to
//! [`STOP_GRACE`] for the batches in flight to be acknowledged (and for
//! lines held while a sink's offsets were awaited to be sent), saves the
//! checkpoints and drops its ends of the sinks' channels (which lets the
//! sinks stop). A clean stop therefore re-sends nothing at the next start
//! unless a sink could not deliver within the grace.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sonde_logs::tailer::{Event, PollReport, RescanReport};
use sonde_logs::{CheckpointFile, Checkpoints, Tailer, TailerConfig, Watcher};

use crate::batch::{BatchBuilder, LogBatch, SourceInfo};
use crate::stats::LogStats;
use sonde_runtime::data_dir::{DataDirErrors, What};

/// Bytes of lines a source may have sent and not had acknowledged before
/// it stops reading.
pub const MAX_IN_FLIGHT_BYTES: usize = 16 << 20;

/// Bytes of lines per batch (a batch closes after the line that reaches
/// it).
pub const BATCH_BYTES: usize = 1 << 20;

/// How often moved checkpoints are saved.
pub const SAVE_EVERY: Duration = Duration::from_secs(1);

/// How long a stopping source waits for its batches in flight.
pub const STOP_GRACE: Duration = Duration::from_secs(10);

/// How often files are read when inotify is not available.
const POLL_WITHOUT_INOTIFY: Duration = Duration::from_millis(250);

/// How long one wait may last, so that a stop is noticed.
const MAX_WAIT: Duration = Duration::from_millis(200);

/// The least time between two reads that inotify prompts: writes that
/// come closer together are read together. A write after a quiet spell is
/// read at once; under steady writing, reads come at most 10 times a
/// second. Each read costs a wake-up, a `pread` per file written and a
/// batch sent: 20 files at 10 MB/s took 4.75% of a core with a read per
/// notice, 1.7% with 10 ms and 0.95% with 100 ms (docs/BENCHMARKS.md,
/// "steady writing" and "read linger").
const READ_LINGER: Duration = Duration::from_millis(100);

/// How often a rescan stats every file even though inotify reports the
/// writes: the quick rescans in between take a known file at its known
/// path and inode without a `stat` (docs/BENCHMARKS.md, "steady writing").
const FULL_RESCAN_EVERY: Duration = Duration::from_secs(30);

/// How often the counters on `/metrics` are brought up to date.
const STATS_EVERY: Duration = Duration::from_millis(100);

/// How long a wait for acknowledgements lasts while files may have grown.
const ACK_WAIT: Duration = Duration::from_millis(10);

/// A sink's end for one log source, handed to the source when it starts.
#[derive(Debug)]
pub struct LogInput {
    /// Where the source sends its batches.
    pub tx: Sender<Arc<LogBatch>>,
    /// For a sink that keeps the offsets itself (Kafka transactions hold
    /// them with the records): where it sends, once it has read them, the
    /// checkpoints to resume from, or `None` if it holds none for this
    /// source. The source opens its files from its checkpoint file at once
    /// but reads nothing until they come; then each file the sink's offsets
    /// find further on resumes there ([`Tailer::advance`]).
    pub restored: Option<Receiver<Option<Checkpoints>>>,
    /// Whether the sink needs the read positions on the last batch of each
    /// read round ([`LogBatch::positions`]).
    pub positions: bool,
}

/// One source, validated.
#[derive(Debug, Clone)]
pub struct SourceConfig {
    /// Its name, host and fields.
    pub info: SourceInfo,
    /// Its files and how they are read.
    pub tailer: TailerConfig,
    /// The periodic rescan.
    pub rescan_interval: Duration,
    /// Where its checkpoint file lives (`{data_dir}/checkpoints`).
    pub checkpoint_dir: PathBuf,
    /// Bytes of lines sent and not yet acknowledged at which reading
    /// stops; [`MAX_IN_FLIGHT_BYTES`] in the agent.
    pub max_in_flight_bytes: usize,
    /// Who watches the records (`sonde tap --source`).
    pub tap: Arc<sonde_runtime::tap::Tap>,
    /// Where a checkpoint that cannot be saved is counted and said.
    pub data_dir: Arc<DataDirErrors>,
}

/// A running source.
#[derive(Debug)]
pub struct RunningSource {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
    /// Says once that the source watches its directories and has scanned
    /// its globs ([`RunningSource::wait_ready`]); `None` for a source that
    /// is ready when spawned.
    ready: Option<Receiver<()>>,
}

impl RunningSource {
    pub(crate) fn new(stop: Arc<AtomicBool>, thread: JoinHandle<()>) -> Self {
        RunningSource {
            stop,
            thread,
            ready: None,
        }
    }

    /// Waits up to `timeout` for the source to be ready: its inotify
    /// watches set and its first scan of the globs done, so that every
    /// file that matches from now on is either open already or will be
    /// seen being created. A file renamed after this is followed through
    /// the rename; one renamed before could have been first seen under its
    /// new name, or missed, if that name is outside the globs. Returns
    /// whether it became ready in time; a source whose thread ended (an
    /// error, logged) counts as ready, since it will never be more so.
    pub fn wait_ready(&mut self, timeout: Duration) -> bool {
        let Some(rx) = &self.ready else {
            return true;
        };
        match rx.recv_timeout(timeout) {
            Ok(()) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                self.ready = None;
                true
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => false,
        }
    }

    /// Stops the source (see the module docs) and waits for its thread.
    pub fn stop(self) {
        self.stop.store(true, Relaxed);
        let _ = self.thread.join();
    }
}

/// Why a source could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The checkpoint directory could not be made.
    #[error("cannot make the checkpoint directory {path}: {error}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        error: std::io::Error,
    },
    /// The source's name cannot name a checkpoint file.
    #[error(transparent)]
    Name(#[from] sonde_logs::checkpoint::NameError),
    /// The tailer refused the config.
    #[error(transparent)]
    Tailer(#[from] sonde_logs::tailer::BuildError),
    /// The thread could not be spawned.
    #[error("cannot start the source's thread: {0}")]
    Spawn(std::io::Error),
}

/// Starts source `config`, sending to `sinks` and counting into `stats`.
///
/// # Errors
///
/// See [`StartError`]: a checkpoint directory that cannot be made, a
/// name or globs the config check should have refused.
pub fn spawn(
    config: SourceConfig,
    sinks: Vec<LogInput>,
    stats: Arc<LogStats>,
) -> Result<RunningSource, StartError> {
    std::fs::create_dir_all(&config.checkpoint_dir).map_err(|source| StartError::Dir {
        path: config.checkpoint_dir.clone(),
        error: source,
    })?;
    let store = CheckpointFile::new(&config.checkpoint_dir, &config.info.name)?;
    // The globs are checked here, so that a bad one fails the start; the
    // tailer that reads is built on the thread, once it knows where to
    // resume.
    Tailer::new(config.tailer.clone(), None)?;
    let name = config.info.name.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let thread_stop = Arc::clone(&stop);
    let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
    let thread = std::thread::Builder::new()
        .name(format!("logs {name}"))
        .spawn(move || {
            sonde_runtime::priority::enter_background();
            let checkpoints = load(&store, &name, &stats);
            let tailer = match Tailer::new(config.tailer.clone(), checkpoints) {
                Ok(t) => t,
                Err(e) => {
                    tracing::error!(source = %name, error = %e, "the log source cannot start");
                    return;
                }
            };
            let mut sinks = sinks;
            let kept = sinks.iter_mut().find_map(|s| s.restored.take());
            let (done_tx, done_rx) = channel();
            let mut run = Run {
                saved_layout: None,
                failed_saves: 0,
                positions: sinks.iter().any(|s| s.positions),
                sinks,
                tailer,
                builder: BatchBuilder::new(
                    Arc::new(config.info.clone()),
                    config.tailer.format,
                    BATCH_BYTES.min(config.max_in_flight_bytes),
                ),
                in_flight: VecDeque::new(),
                in_flight_bytes: 0,
                done_tx,
                done_rx,
                store,
                stats,
                stop: thread_stop,
                config,
                last_errors: Vec::new(),
                kept,
                held: Vec::new(),
                held_bytes: 0,
            };
            run.run(ready_tx);
        })
        .map_err(StartError::Spawn)?;
    Ok(RunningSource {
        stop,
        thread,
        ready: Some(ready_rx),
    })
}

/// The saved checkpoints; a file that cannot be trusted is reported,
/// counted and set aside, and every file is then read from its beginning
/// (duplicates rather than a loss).
fn load(store: &CheckpointFile, name: &str, stats: &LogStats) -> Option<Checkpoints> {
    match store.load() {
        Ok(c) => c,
        Err(e) => {
            stats.corrupt_checkpoints.fetch_add(1, Relaxed);
            let aside = store.path().with_extension("checkpoint.corrupt");
            let moved = std::fs::rename(store.path(), &aside).is_ok();
            tracing::error!(
                source = %name,
                error = %e,
                kept_as = %if moved { aside.display().to_string() } else { "(not moved)".into() },
                "the checkpoint file cannot be trusted: every file is read from its beginning"
            );
            Some(Checkpoints::default())
        }
    }
}

/// A batch sent and not yet acknowledged by every sink.
struct InFlight {
    batch: Arc<LogBatch>,
    done: bool,
}

struct Run {
    config: SourceConfig,
    sinks: Vec<LogInput>,
    positions: bool,
    tailer: Tailer,
    builder: BatchBuilder,
    in_flight: VecDeque<InFlight>,
    in_flight_bytes: usize,
    done_tx: Sender<u64>,
    done_rx: Receiver<u64>,
    store: CheckpointFile,
    /// The tailer's layout at the last save that went through.
    saved_layout: Option<u64>,
    /// Saves that failed in a row.
    failed_saves: u64,
    stats: Arc<LogStats>,
    stop: Arc<AtomicBool>,
    /// The scan and read errors logged last round, so that a lasting error
    /// is logged once rather than every round.
    last_errors: Vec<String>,
    /// Where a sink that keeps offsets will send them
    /// ([`LogInput::restored`]); nothing is read until they came.
    kept: Option<Receiver<Option<Checkpoints>>>,
    /// Batches read while `kept` is awaited, and their bytes.
    held: Vec<LogBatch>,
    held_bytes: usize,
}

impl Run {
    /// Runs the rounds until told to stop; says on `ready` when the
    /// watches are set and the first scan is done.
    fn run(&mut self, ready: std::sync::mpsc::SyncSender<()>) {
        let mut ready = Some(ready);
        let name = self.config.info.name.clone();
        let mut watcher = match Watcher::start(&self.config.tailer) {
            Ok((w, refused)) => {
                for e in refused {
                    tracing::warn!(source = %name, error = %e, "directory not watched; the periodic rescan covers it");
                }
                Some(w)
            }
            Err(e) => {
                tracing::warn!(source = %name, error = %e, "no inotify: files are found by the periodic rescan and read every 250ms");
                None
            }
        };
        let now = Instant::now();
        let mut next_rescan = now;
        let mut next_save = now;
        let mut dirty = false;
        let mut read_now = true;
        let mut last_read = now;
        // When the earliest multiline record being built times out.
        let mut flush_at: Option<Instant> = None;
        // Whether the last read left bytes unread.
        let mut backlog = false;
        let mut next_stats = now;
        // When a rescan next stats every file; set to now when inotify may
        // have missed writes (an overflow, a directory not watched).
        let mut next_full = now;
        let mut overflows = 0;
        // Whether the counters moved since they were last stored.
        let mut stale = true;
        while !self.stop.load(Relaxed) {
            let now = Instant::now();
            let flush_due = flush_at.is_some_and(|at| now >= at);
            read_now |= flush_due;
            let acked = self.take_acks();
            dirty |= acked;
            stale |= acked;
            if dirty && now >= next_save {
                // A failed save stays due: the next one, a SAVE_EVERY
                // later, tries again even if nothing moves meanwhile.
                dirty = !self.save();
                next_save = now + SAVE_EVERY;
            }
            let mut rescan = now >= next_rescan;
            if let Some(w) = watcher.as_mut() {
                match w.drain() {
                    Ok(wake) => {
                        rescan |= wake.rescan;
                        read_now |= wake.poll || wake.rescan;
                        self.tailer
                            .mark_written(wake.written.iter().map(PathBuf::as_path));
                        if !wake.unwatched.is_empty() {
                            next_full = now;
                        }
                        for e in wake.unwatched {
                            tracing::warn!(source = %name, error = %e, "directory not watched; the periodic rescan covers it");
                        }
                    }
                    Err(e) => {
                        tracing::warn!(source = %name, error = %e, "inotify failed: files are found by the periodic rescan");
                        watcher = None;
                    }
                }
                if let Some(w) = watcher.as_ref() {
                    let now_overflows = w.counters().overflows;
                    if now_overflows != overflows {
                        overflows = now_overflows;
                        next_full = now;
                    }
                    self.stats.watch_overflows.store(overflows, Relaxed);
                }
            }
            if rescan {
                let report = if watcher.is_some() && now < next_full {
                    self.tailer.rescan_quick(now)
                } else {
                    next_full = now + FULL_RESCAN_EVERY;
                    self.tailer.rescan(now)
                };
                self.report_rescan(report);
                if let Some(w) = watcher.as_mut() {
                    for e in w.refresh() {
                        // Its writes go unreported: rescans stat every file.
                        next_full = now;
                        tracing::debug!(source = %name, error = %e, "directory not watched");
                    }
                }
                next_rescan = now + self.config.rescan_interval;
                // The safety net reads too, for writes inotify did not see.
                read_now = true;
                stale = true;
                // The watches were set before this scan, so every file the
                // globs match is now open or will be reported. The counters
                // say so before the agent does.
                if let Some(r) = ready.take() {
                    self.stats
                        .store(&self.tailer.counters(), self.tailer.bytes_behind());
                    let _ = r.send(());
                }
            }
            if watcher.is_none() && now >= last_read + POLL_WITHOUT_INOTIFY {
                read_now = true;
            }
            let room = self.in_flight_bytes + self.held_bytes < self.config.max_in_flight_bytes;
            let mut more = false;
            self.take_kept();
            // A read inotify prompted soon after the last one waits for the
            // rest of the linger; a backlog, a rescan or a timeout does not.
            let linger = last_read + READ_LINGER;
            if read_now && !backlog && !rescan && !flush_due && now < linger {
                std::thread::sleep(linger - now);
                continue;
            }
            if read_now && room {
                last_read = now;
                stale = true;
                // inotify names the files written: a poll reads those (and
                // those with a backlog or something timed); the rescans'
                // polls, a multiline timeout and polling without inotify
                // look at every file.
                let report = if rescan || flush_due || watcher.is_none() {
                    self.tailer.poll(now, &mut self.builder)
                } else {
                    self.tailer.poll_written(now, &mut self.builder)
                };
                more = report.more;
                backlog = more;
                flush_at = report.flush_at;
                let quiet = report.lines == 0;
                self.report_poll(report);
                self.send();
                read_now = more;
                if quiet && self.in_flight.is_empty() {
                    // Nothing coming: the buffers kept for the next
                    // batches are memory held for nothing.
                    self.builder.trim();
                }
            }
            if stale && now >= next_stats {
                // Bytes behind sums over every file: at most every
                // STATS_EVERY, not every round.
                self.stats
                    .store(&self.tailer.counters(), self.tailer.bytes_behind());
                next_stats = now + STATS_EVERY;
                stale = false;
            }
            if more && self.in_flight_bytes + self.held_bytes < self.config.max_in_flight_bytes {
                continue;
            }
            // Wait for whichever comes first: inotify, an acknowledgement,
            // a deadline.
            let mut until = next_rescan;
            if dirty {
                until = until.min(next_save);
            }
            if watcher.is_none() {
                until = until.min(last_read + POLL_WITHOUT_INOTIFY);
            }
            if let Some(at) = flush_at {
                until = until.min(at);
            }
            if stale {
                until = until.min(next_stats);
            }
            let wait = until
                .saturating_duration_since(Instant::now())
                .min(MAX_WAIT);
            if !self.in_flight.is_empty() {
                // Acknowledgements come on a channel and inotify on a fd.
                // When reading waits for acknowledgements, only they
                // matter; else wait on the channel briefly, and the next
                // round's drain reads what inotify has.
                let blocked = self.in_flight_bytes >= self.config.max_in_flight_bytes;
                let wait = if blocked { wait } else { wait.min(ACK_WAIT) };
                if let Ok(seq) = self.done_rx.recv_timeout(wait) {
                    self.mark_done(seq);
                }
            } else if let Some(w) = watcher.as_ref() {
                if let Err(e) = w.wait(Some(wait)) {
                    tracing::warn!(source = %name, error = %e, "waiting on inotify failed");
                    std::thread::sleep(wait);
                }
            } else {
                std::thread::sleep(wait);
            }
        }
        self.finish();
    }

    /// Takes the offsets a sink keeps, if they came. Until then the source
    /// reads and holds its batches (counted against the in-flight bound),
    /// so a file truncated or deleted meanwhile is read first; once they
    /// come, the held lines they cover are dropped (they were delivered
    /// before) and the rest are sent.
    fn take_kept(&mut self) {
        let Some(rx) = &self.kept else {
            return;
        };
        let name = self.config.info.name.clone();
        let floors = match rx.try_recv() {
            Ok(Some(c)) => {
                let floors = self.tailer.advance(&c);
                tracing::info!(source = %name, files = c.files.len(), moved = floors.len(), "resuming from the offsets the sink keeps");
                floors
            }
            // The sink holds no offsets for this source yet.
            Ok(None) => Vec::new(),
            Err(TryRecvError::Empty) => return,
            Err(TryRecvError::Disconnected) => {
                tracing::error!(source = %name, "the sink stopped before it read its offsets; resuming from the checkpoint file");
                Vec::new()
            }
        };
        self.kept = None;
        let mut held = std::mem::take(&mut self.held);
        self.held_bytes = 0;
        for b in &mut held {
            b.drop_below(&floors);
        }
        self.dispatch(held);
    }

    /// Sends the batches the last poll filled to every sink; holds them
    /// while a sink's offsets are awaited.
    fn send(&mut self) {
        let batches = self.builder.take();
        if self.kept.is_some() {
            self.held_bytes += batches.iter().map(LogBatch::bytes).sum::<usize>();
            self.held.extend(batches);
        } else {
            self.dispatch(batches);
        }
    }

    /// Sends `batches` to every sink, the read positions on the last one
    /// with lines if a sink asked for them. A batch left without lines is
    /// acknowledged at once.
    fn dispatch(&mut self, batches: Vec<LogBatch>) {
        let last = batches.iter().rposition(|b| !b.is_empty());
        for (i, mut batch) in batches.into_iter().enumerate() {
            let positions = (self.positions && Some(i) == last).then(|| self.tailer.positions());
            batch.arm(self.sinks.len(), &self.done_tx, positions);
            let batch = Arc::new(batch);
            self.in_flight_bytes += batch.bytes();
            let empty = batch.is_empty();
            self.in_flight.push_back(InFlight {
                batch: Arc::clone(&batch),
                // With no sink (which the config refuses) nothing would
                // ever acknowledge it.
                done: empty || self.sinks.is_empty(),
            });
            if empty {
                continue;
            }
            // One relaxed load per batch while nobody watches.
            if self.config.tap.watching() {
                self.config.tap.records(
                    &batch.source().name,
                    || batch.lines(),
                    |out, line| crate::record::json(out, batch.source(), &line),
                );
            }
            for s in &self.sinks {
                // A sink that stopped never acknowledges: its lines stay
                // unacknowledged and are read again at the next start.
                let _ = s.tx.send(Arc::clone(&batch));
            }
        }
    }

    /// Takes the acknowledgements that came back; true if a checkpoint moved.
    fn take_acks(&mut self) -> bool {
        let mut moved = false;
        while let Ok(seq) = self.done_rx.try_recv() {
            self.mark_done(seq);
        }
        while self.in_flight.front().is_some_and(|f| f.done) {
            if let Some(f) = self.in_flight.pop_front() {
                self.in_flight_bytes -= f.batch.bytes();
                for &(key, end) in f.batch.ends() {
                    self.tailer.ack(key, end);
                }
                moved = true;
            }
        }
        moved
    }

    fn mark_done(&mut self, seq: u64) {
        // Batches are numbered in order: the one acknowledged is found by
        // its distance from the oldest in flight.
        if let Some(front) = self.in_flight.front() {
            let i = seq.wrapping_sub(front.batch.seq()) as usize;
            if let Some(f) = self.in_flight.get_mut(i) {
                f.done = true;
            }
        }
    }

    /// Saves the checkpoints; false if that failed (counted and said).
    fn save(&mut self) -> bool {
        // While no file was found, dropped or moved since the last save,
        // only the open files' checkpoints can have changed: a source that
        // follows thousands of idle files compares the few it reads.
        let layout = self.tailer.layout();
        let saved = if self.saved_layout == Some(layout) {
            self.store.update_some(&self.tailer.open_checkpoints())
        } else {
            Ok(false)
        };
        let saved = match saved {
            Ok(true) => Ok(()),
            Ok(false) => self.store.update(&self.tailer.checkpoints()),
            Err(e) => Err(e),
        };
        self.saved_layout = saved.is_ok().then_some(layout);
        match saved {
            Ok(()) => {
                if self.failed_saves > 0 {
                    tracing::info!(
                        source = %self.config.info.name,
                        path = %self.store.path().display(),
                        failed = self.failed_saves,
                        "checkpoints saved again"
                    );
                    self.failed_saves = 0;
                }
                true
            }
            Err(e) => {
                self.failed_saves += 1;
                self.stats.checkpoint_errors.fetch_add(1, Relaxed);
                self.config
                    .data_dir
                    .failed(What::Checkpoint, e.path(), e.error());
                false
            }
        }
    }

    fn finish(&mut self) {
        let deadline = Instant::now() + STOP_GRACE;
        self.take_acks();
        if !self.in_flight.is_empty() || !self.held.is_empty() {
            // A sink that cannot deliver (its backend down) makes the stop
            // take this long, then its own shutdown_grace: say so now.
            tracing::info!(
                source = %self.config.info.name,
                batches = self.in_flight.len() + self.held.len(),
                bytes = self.in_flight_bytes + self.held_bytes,
                wait = ?STOP_GRACE,
                "stopping: waiting for the sinks to acknowledge what was sent"
            );
        }
        loop {
            // Lines read while a sink's offsets were awaited go out once
            // they come, within the same grace.
            self.take_kept();
            self.take_acks();
            if self.in_flight.is_empty() && self.held.is_empty() {
                break;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                tracing::warn!(
                    source = %self.config.info.name,
                    batches = self.in_flight.len() + self.held.len(),
                    bytes = self.in_flight_bytes + self.held_bytes,
                    "stopping with lines not acknowledged: they are read again at the next start"
                );
                break;
            }
            if let Ok(seq) = self.done_rx.recv_timeout(left.min(MAX_WAIT)) {
                self.mark_done(seq);
            }
        }
        if !self.save() {
            tracing::warn!(
                source = %self.config.info.name,
                path = %self.store.path().display(),
                "stopping without saving the checkpoints: the lines delivered since the last save are sent again at the next start"
            );
        }
        self.stats
            .store(&self.tailer.counters(), self.tailer.bytes_behind());
        tracing::info!(source = %self.config.info.name, "log source stopped");
        // Dropping `self.sinks` (with `self`) closes the channels.
    }

    fn report_rescan(&mut self, report: RescanReport) {
        let errors: Vec<String> = report.errors.iter().map(|e| e.to_string()).collect();
        self.log_errors(errors);
        self.log_events(&report.events);
    }

    fn report_poll(&mut self, report: PollReport) {
        if !report.errors.is_empty() {
            let errors = report.errors.iter().map(|e| e.to_string()).collect();
            self.log_errors(errors);
        }
        self.log_events(&report.events);
    }

    fn log_errors(&mut self, errors: Vec<String>) {
        for e in &errors {
            if !self.last_errors.contains(e) {
                tracing::warn!(source = %self.config.info.name, error = %e, "cannot read a log file; retrying");
            }
        }
        self.last_errors = errors;
    }

    fn log_events(&self, events: &[Event]) {
        let source = &self.config.info.name;
        for e in events {
            match e {
                Event::Opened { path, offset, from } => {
                    tracing::debug!(source = %source, path = %path.display(), offset, from = ?from, "file opened")
                }
                Event::Renamed { from, to } => {
                    tracing::info!(source = %source, from = %from.display(), to = %to.display(), "file rotated (renamed); read on to its end")
                }
                Event::Gone { path, deleted } => {
                    tracing::info!(source = %source, path = %path.display(), deleted, "file gone from the globs; read on to its end")
                }
                Event::Truncated { path } => {
                    tracing::info!(source = %source, path = %path.display(), "file truncated; read again from offset 0")
                }
                Event::Reused { path } => {
                    tracing::info!(source = %source, path = %path.display(), "a new file at a checkpoint's inode (reused); read from offset 0")
                }
                Event::Closed { path } => {
                    tracing::debug!(source = %source, path = %path.display(), "gone file read to its end and closed")
                }
                Event::Skipped { path } => {
                    tracing::info!(source = %source, path = %path.display(), "gzip-compressed file skipped")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::path::Path;
    use std::sync::mpsc::Receiver as Rx;

    use super::*;
    use sonde_logs::container::Format;
    use sonde_logs::multiline::{Multiline, Rule};

    fn info() -> SourceInfo {
        SourceInfo {
            name: "app".into(),
            host: "h".into(),
            fields: Vec::new(),
        }
    }

    fn config(logs: &Path, data: &Path, max_in_flight_bytes: usize) -> SourceConfig {
        let mut tailer = TailerConfig::new(vec![format!("{}/*.log", logs.display())]);
        tailer.read_buffer_bytes = 4096;
        SourceConfig {
            info: info(),
            tailer,
            rescan_interval: Duration::from_millis(100),
            checkpoint_dir: data.join("checkpoints"),
            max_in_flight_bytes,
            tap: Arc::default(),
            data_dir: Arc::default(),
        }
    }

    /// A sink that keeps what it gets and acknowledges nothing by itself.
    fn sink() -> (LogInput, Rx<Arc<LogBatch>>) {
        let (tx, rx) = channel();
        let input = LogInput {
            tx,
            restored: None,
            positions: false,
        };
        (input, rx)
    }

    fn append(path: &Path, text: &str) {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    fn numbered(from: usize, to: usize) -> String {
        (from..to).map(|n| format!("line {n:06}\n")).collect()
    }

    /// Waits up to 10 s for `cond`.
    fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Receives batches until `n` lines came; returns the batches.
    fn receive_lines(rx: &Rx<Arc<LogBatch>>, n: usize) -> Vec<Arc<LogBatch>> {
        let mut got = Vec::new();
        let mut lines = 0;
        while lines < n {
            let b = rx
                .recv_timeout(Duration::from_secs(10))
                .expect("timed out waiting for lines");
            lines += b.len();
            got.push(b);
        }
        got
    }

    fn texts(batches: &[Arc<LogBatch>]) -> Vec<String> {
        batches
            .iter()
            .flat_map(|b| {
                b.lines()
                    .map(|l| String::from_utf8(l.bytes.to_vec()).unwrap())
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    fn saved(data: &Path) -> Option<Checkpoints> {
        CheckpointFile::new(&data.join("checkpoints"), "app")
            .unwrap()
            .load()
            .unwrap()
    }

    fn saved_offset(data: &Path) -> u64 {
        saved(data).map_or(0, |c| c.files.iter().map(|f| f.offset).sum())
    }

    #[test]
    fn a_quiet_multiline_record_is_sent_at_its_timeout_without_other_activity() {
        let (logs, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let stats = Arc::new(LogStats::new("app".into()));
        let (input, rx) = sink();
        let mut cfg = config(logs.path(), data.path(), MAX_IN_FLIGHT_BYTES);
        // No rescan wakes the source: only the record's timeout can.
        cfg.rescan_interval = Duration::from_secs(3600);
        let mut multiline = Multiline::new(Rule::Start("^S".into()));
        multiline.timeout = Duration::from_millis(100);
        cfg.tailer.multiline = Some(multiline);
        let log = logs.path().join("a.log");
        append(&log, "S1\n  at one\n");
        let running = spawn(cfg, vec![input], Arc::clone(&stats)).unwrap();
        let got = receive_lines(&rx, 1);
        assert_eq!(texts(&got), ["S1\n  at one"]);
        got[0].ack();
        wait_for("the record acknowledged", || {
            stats.bytes_behind.load(Relaxed) == 0 && saved_offset(data.path()) == 12
        });
        assert_eq!(stats.multiline_records.load(Relaxed), 1);
        assert_eq!(stats.lines_read.load(Relaxed), 2);
        running.stop();
    }

    #[test]
    fn checkpoints_move_only_past_batches_every_sink_acknowledged_in_order() {
        let (logs, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let log = logs.path().join("a.log");
        let stats = Arc::new(LogStats::new("app".into()));
        let (first, rx1) = sink();
        let (second, rx2) = sink();
        let cfg = config(logs.path(), data.path(), MAX_IN_FLIGHT_BYTES);
        let running = spawn(cfg, vec![first, second], Arc::clone(&stats)).unwrap();
        append(&log, &numbered(0, 10));
        let a1 = receive_lines(&rx1, 10);
        let a2 = receive_lines(&rx2, 10);
        append(&log, &numbered(10, 20));
        let b1 = receive_lines(&rx1, 10);
        let b2 = receive_lines(&rx2, 10);
        assert_eq!(texts(&a1).len() + texts(&b1).len(), 20);
        // The later batch delivered by both sinks, the earlier by one: the
        // checkpoint must not pass the earlier batch's lines.
        b1.iter().chain(&b2).for_each(|b| b.ack());
        a1.iter().for_each(|b| b.ack());
        // Saves happen every second: over 1.5 s one would have come.
        std::thread::sleep(Duration::from_millis(1500));
        assert_eq!(saved_offset(data.path()), 0);
        assert_eq!(stats.bytes_behind.load(Relaxed), 240);
        // Now both batches are delivered by both sinks.
        a2.iter().for_each(|b| b.ack());
        wait_for("the checkpoint at the end", || {
            saved_offset(data.path()) == 240
        });
        wait_for("nothing behind", || stats.bytes_behind.load(Relaxed) == 0);
        assert_eq!(stats.lines_read.load(Relaxed), 20);
        running.stop();
    }

    #[test]
    fn a_checkpoint_that_cannot_be_saved_is_counted_tried_again_and_the_lines_still_flow() {
        let (logs, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let log = logs.path().join("a.log");
        let stats = Arc::new(LogStats::new("app".into()));
        let (input, rx) = sink();
        let cfg = config(logs.path(), data.path(), MAX_IN_FLIGHT_BYTES);
        let errors = Arc::clone(&cfg.data_dir);
        let running = spawn(cfg, vec![input], Arc::clone(&stats)).unwrap();
        append(&log, &numbered(0, 10));
        receive_lines(&rx, 10).iter().for_each(|b| b.ack());
        wait_for("the first checkpoint", || saved_offset(data.path()) == 120);

        // A file where the directory was: no save can go through (and
        // this holds for root too, unlike a directory's mode).
        let dir = data.path().join("checkpoints");
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::write(&dir, "not a directory").unwrap();
        append(&log, &numbered(10, 20));
        receive_lines(&rx, 10).iter().for_each(|b| b.ack());
        wait_for("a failed save counted", || {
            errors.count(What::Checkpoint) >= 1
        });
        // Nothing more is acknowledged, yet the save is tried again, about
        // once a second rather than in a loop.
        let first = errors.count(What::Checkpoint);
        std::thread::sleep(Duration::from_millis(2500));
        let retried = errors.count(What::Checkpoint) - first;
        assert!((1..=4).contains(&retried), "{retried} retries in 2.5 s");
        assert_eq!(stats.checkpoint_errors.load(Relaxed), first + retried);
        // Reading and delivering go on meanwhile.
        append(&log, &numbered(20, 30));
        receive_lines(&rx, 10).iter().for_each(|b| b.ack());

        // The directory can be made again: the next save goes through.
        std::fs::remove_file(&dir).unwrap();
        wait_for("the checkpoint at the end", || {
            saved_offset(data.path()) == 360
        });
        let settled = errors.count(What::Checkpoint);
        std::thread::sleep(Duration::from_millis(1500));
        assert_eq!(
            errors.count(What::Checkpoint),
            settled,
            "no failure once saved"
        );
        running.stop();
    }

    #[test]
    fn a_sink_that_does_not_acknowledge_stops_the_reading_and_memory_stays_bounded() {
        let (logs, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let log = logs.path().join("a.log");
        // 20,000 lines of 12 bytes (240 KB), 16 KiB may be in flight.
        append(&log, &numbered(0, 20_000));
        let stats = Arc::new(LogStats::new("app".into()));
        let (input, rx) = sink();
        let cfg = config(logs.path(), data.path(), 16 << 10);
        let running = spawn(cfg, vec![input], Arc::clone(&stats)).unwrap();
        wait_for("reading to stop", || stats.bytes_read.load(Relaxed) > 0);
        std::thread::sleep(Duration::from_millis(500));
        let held: Vec<Arc<LogBatch>> = rx.try_iter().collect();
        let bytes: usize = held.iter().map(|b| b.bytes()).sum();
        // The bound plus the batch that crossed it.
        assert!(bytes <= 2 * (16 << 10), "{bytes} bytes in flight");
        let read = stats.bytes_read.load(Relaxed);
        assert!(read < 240_000 / 2, "read {read} of 240000 bytes");
        // Acknowledging lets it go on, to the end, each line once.
        let mut all = held.clone();
        held.iter().for_each(|b| b.ack());
        let mut lines: usize = held.iter().map(|b| b.len()).sum();
        while lines < 20_000 {
            let b = rx
                .recv_timeout(Duration::from_secs(10))
                .expect("more lines");
            b.ack();
            lines += b.len();
            all.push(b);
        }
        let got = texts(&all);
        assert_eq!(got.len(), 20_000);
        assert!(got
            .iter()
            .enumerate()
            .all(|(i, t)| *t == format!("line {i:06}")));
        wait_for("the checkpoint at the end", || {
            saved_offset(data.path()) == 240_000
        });
        running.stop();
    }

    #[test]
    fn a_clean_stop_waits_for_acknowledgements_and_a_restart_resends_nothing() {
        let (logs, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let log = logs.path().join("a.log");
        append(&log, &numbered(0, 100));
        let stats = Arc::new(LogStats::new("app".into()));
        let (tx, rx) = channel::<Arc<LogBatch>>();
        let input = LogInput {
            tx,
            restored: None,
            positions: false,
        };
        // A sink that acknowledges after a delay, and ends when its input
        // is dropped.
        let slow = std::thread::spawn(move || {
            let mut lines = 0;
            for b in rx {
                std::thread::sleep(Duration::from_millis(50));
                lines += b.len();
                b.ack();
            }
            lines
        });
        let running = spawn(
            config(logs.path(), data.path(), MAX_IN_FLIGHT_BYTES),
            vec![input],
            Arc::clone(&stats),
        )
        .unwrap();
        wait_for("the lines read", || stats.lines_read.load(Relaxed) == 100);
        running.stop();
        assert_eq!(slow.join().unwrap(), 100);
        assert_eq!(saved_offset(data.path()), 1200);
        // Restarted: only the new lines come.
        append(&log, &numbered(100, 105));
        let (input, rx) = sink();
        let running = spawn(
            config(logs.path(), data.path(), MAX_IN_FLIGHT_BYTES),
            vec![input],
            Arc::new(LogStats::new("app".into())),
        )
        .unwrap();
        let batches = receive_lines(&rx, 5);
        let want: Vec<String> = (100..105).map(|n| format!("line {n:06}")).collect();
        assert_eq!(texts(&batches), want);
        batches.iter().for_each(|b| b.ack());
        // A second line would come with the first: 300 ms is many rounds.
        std::thread::sleep(Duration::from_millis(300));
        assert!(rx.try_recv().is_err(), "nothing more");
        drop(rx);
        running.stop();
    }

    #[test]
    fn a_corrupt_checkpoint_file_is_set_aside_counted_and_files_are_read_from_the_start() {
        let (logs, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let log = logs.path().join("a.log");
        append(&log, &numbered(0, 3));
        let dir = data.path().join("checkpoints");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("app.checkpoint"),
            "sonde-checkpoint 1 crc32=00000000 len=2\n{}",
        )
        .unwrap();
        let stats = Arc::new(LogStats::new("app".into()));
        let (input, rx) = sink();
        let running = spawn(
            config(logs.path(), data.path(), MAX_IN_FLIGHT_BYTES),
            vec![input],
            Arc::clone(&stats),
        )
        .unwrap();
        let batches = receive_lines(&rx, 3);
        assert_eq!(stats.corrupt_checkpoints.load(Relaxed), 1);
        assert!(dir.join("app.checkpoint.corrupt").exists());
        assert_eq!(texts(&batches)[0], "line 000000");
        batches.iter().for_each(|b| b.ack());
        running.stop();
    }

    #[test]
    fn positions_ride_on_the_last_batch_of_a_round_for_a_sink_that_asks() {
        let (logs, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let log = logs.path().join("a.log");
        append(&log, &numbered(0, 5));
        let (tx, rx) = channel();
        let input = LogInput {
            tx,
            restored: None,
            positions: true,
        };
        let running = spawn(
            config(logs.path(), data.path(), MAX_IN_FLIGHT_BYTES),
            vec![input],
            Arc::new(LogStats::new("app".into())),
        )
        .unwrap();
        let batches = receive_lines(&rx, 5);
        let last = batches.last().unwrap();
        let positions = last.positions().expect("positions on the last batch");
        assert_eq!(positions.files[0].offset, 60);
        batches.iter().for_each(|b| b.ack());
        running.stop();
    }

    #[test]
    fn a_source_waits_for_the_offsets_a_sink_keeps_and_resumes_from_them() {
        let (logs, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let log = logs.path().join("a.log");
        append(&log, &numbered(0, 5));
        // Where a first run stopped: after 3 lines.
        let mut tailer = Tailer::new(config(logs.path(), data.path(), 1).tailer, None).unwrap();
        tailer.rescan(Instant::now());
        let mut builder = BatchBuilder::new(Arc::new(info()), Format::Lines, 1 << 20);
        tailer.poll(Instant::now(), &mut builder);
        let mut kept = tailer.positions();
        kept.files[0].offset = 36;
        let (offsets_tx, offsets_rx) = channel();
        let (tx, rx) = channel();
        let input = LogInput {
            tx,
            restored: Some(offsets_rx),
            positions: true,
        };
        let running = spawn(
            config(logs.path(), data.path(), MAX_IN_FLIGHT_BYTES),
            vec![input],
            Arc::new(LogStats::new("app".into())),
        )
        .unwrap();
        // Nothing is read before the sink says where to resume.
        assert!(rx.recv_timeout(Duration::from_millis(300)).is_err());
        offsets_tx.send(Some(kept)).unwrap();
        let batches = receive_lines(&rx, 2);
        assert_eq!(texts(&batches), ["line 000003", "line 000004"]);
        batches.iter().for_each(|b| b.ack());
        running.stop();
    }
}

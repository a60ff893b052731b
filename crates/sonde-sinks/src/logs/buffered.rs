//! An HTTP log sink with a disk buffer: its requests go to the disk
//! buffer of the metric senders ([`Disk`]) and are acknowledged to their
//! sources once written there, then sent from it.
//!
//! Two threads: the *writer* takes the sources' batches, encodes and
//! compresses their requests as [`super::deliver::spawn_http`] does,
//! appends each to the buffer (`fdatasync`ed unless the buffer's `sync`
//! is off) and then acknowledges the batch, so the sources' checkpoints
//! move on while the endpoint is away and a file rotated or deleted
//! meanwhile loses nothing. The *sender* sends the buffer's oldest
//! request, retrying what may succeed later after a backoff, and removes
//! it once the endpoint took it or refused it for good.
//!
//! A full buffer never drops: the writer waits for room, its batches go
//! unacknowledged, and each source stops reading at its in-flight bound
//! (the lines wait in their files). At a clean stop the writer stores
//! what its sources sent and the sender goes on for the sink's
//! `shutdown_grace`; what is left stays on disk and is sent first at the
//! next start. A crash between a delivery and the buffer's `ack` update
//! sends that one request again.

use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::deliver::{
    attempt, spawn_inbox, split_of, Attempt, Bodies, Body, HttpLogs, Inbox, LogEncoder,
};
use crate::sender::disk::Disk;
use crate::sender::{Backoff, Queue, Request, Split, Transport};
use crate::sink::{FailReason, SinkDrop, SinkStats};
use sonde_log_sources::LogBatch;

/// How often a writer waiting for room in a full buffer looks again.
const ROOM_POLL: Duration = Duration::from_millis(50);

/// The longest a writer waits before it tries again a write the disk
/// refused (a full or read-only disk): space freed by the sender or by
/// anyone is used within it.
const RETRY_WRITE_MAX: Duration = Duration::from_secs(1);

/// The buffer, shared by the writer and the sender.
struct Shared {
    state: Mutex<State>,
    /// Signalled when a request is stored and when the writer ends.
    stored: Condvar,
}

struct State {
    disk: Disk,
    /// When the writer ended (its sources stopped); `None` while it runs.
    stopped: Option<Instant>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic in the other thread leaves the buffer usable: its
        // records are on disk and the `ack` file moves only on success.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn publish(stats: &SinkStats, disk: &Disk) {
    stats.log_buffer_records.store(disk.points(), Relaxed);
    stats.log_buffer_bytes.store(disk.bytes(), Relaxed);
}

/// Starts an HTTP log sink over `disk`: records encoded by `encoder` in
/// requests as `http` says, stored in `disk` (which may hold requests of
/// an earlier run, sent first), sent over `transport`, the sender going
/// on for `grace` after the sources stop. The returned thread ends after
/// both of the sink's threads.
///
/// # Errors
///
/// A thread could not be spawned.
pub fn spawn_http_buffered<T: Transport>(
    mut encoder: impl LogEncoder,
    transport: T,
    http: HttpLogs,
    disk: Disk,
    grace: Duration,
    stats: Arc<SinkStats>,
) -> io::Result<(Sender<Arc<LogBatch>>, JoinHandle<()>)> {
    publish(&stats, &disk);
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            disk,
            stopped: None,
        }),
        stored: Condvar::new(),
    });
    let split = split_of(&encoder, http.compression);
    let sender = {
        let (shared, stats) = (Arc::clone(&shared), Arc::clone(&stats));
        std::thread::Builder::new()
            .name(format!("sink {} log sender", stats.name))
            .spawn(move || {
                sonde_runtime::priority::enter_background();
                send(&shared, transport, split, &http, grace, &stats);
            })?
    };
    let name = stats.name.clone();
    spawn_inbox(&name, move |mut inbox| {
        let mut bodies = Bodies::default();
        let mut backoff = Backoff::new(http.backoff_min, http.backoff_max);
        let mut full = false;
        while let Some(batch) = inbox.next() {
            let stored = bodies.each(&mut encoder, &http, &batch, &stats, |r| {
                store(&shared, &mut inbox, r, &mut backoff, &mut full, &stats)
            });
            if !stored {
                tracing::warn!(sink = %stats.name, "stopping with log records not in the disk buffer: they are read again at the next start");
                break;
            }
            stats.batches.fetch_add(1, Relaxed);
            batch.ack();
        }
        shared.lock().stopped = Some(Instant::now());
        shared.stored.notify_all();
        if sender.join().is_err() {
            tracing::error!(sink = %stats.name, "the log sender thread panicked");
        }
    })
}

/// Appends `r` to the buffer once it has room, retrying a failed write
/// after a backoff; false when the sources stopped meanwhile (nobody
/// waits for the acknowledgement any more).
fn store(
    shared: &Shared,
    inbox: &mut Inbox,
    r: &Body<'_>,
    backoff: &mut Backoff,
    full: &mut bool,
    stats: &SinkStats,
) -> bool {
    loop {
        let wait = {
            let mut st = shared.lock();
            if st.disk.has_room(r.body.len()) {
                if *full {
                    *full = false;
                    tracing::info!(sink = %stats.name, "log disk buffer has room again");
                }
                let req = Request {
                    body: r.body.to_vec(),
                    points: r.records,
                    raw_bytes: r.raw_bytes,
                };
                match st.disk.push(req) {
                    Ok(_) => {
                        backoff.reset();
                        publish(stats, &st.disk);
                        drop(st);
                        shared.stored.notify_all();
                        return true;
                    }
                    Err(e) => {
                        // Counted and logged once a minute by the buffer
                        // (sonde_data_dir_write_errors_total); the sources
                        // wait meanwhile, their lines in their files.
                        stats.failures[FailReason::Buffer as usize].fetch_add(1, Relaxed);
                        let delay = backoff.next_delay().min(RETRY_WRITE_MAX);
                        tracing::debug!(sink = %stats.name, error = %e, retry_in = ?delay, "cannot write log records to the disk buffer; will retry");
                        delay
                    }
                }
            } else {
                if !*full {
                    *full = true;
                    tracing::warn!(sink = %stats.name, bytes = st.disk.bytes(), "log disk buffer full: its sources wait (their lines stay in their files)");
                }
                ROOM_POLL
            }
        };
        if !inbox.pause(wait) {
            return false;
        }
    }
}

/// The sender: delivers the buffer oldest first until the writer has
/// ended and the buffer is empty or `grace` has passed since.
fn send<T: Transport>(
    shared: &Shared,
    mut transport: T,
    mut split: Split,
    http: &HttpLogs,
    grace: Duration,
    stats: &SinkStats,
) {
    let mut backoff = Backoff::new(http.backoff_min, http.backoff_max);
    // Once the writer ended, the sender goes on until `grace` after.
    let stop_by = |st: &State| st.stopped.map(|at| at + grace);
    loop {
        let front = {
            let mut st = shared.lock();
            loop {
                let stopped = st.stopped.is_some();
                match st.disk.front() {
                    Ok(Some(r)) => break Some(r.clone()),
                    Ok(None) if stopped => return,
                    Ok(None) => {
                        st = shared
                            .stored
                            .wait(st)
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                    }
                    Err(e) => {
                        stats.failures[FailReason::Buffer as usize].fetch_add(1, Relaxed);
                        let records = st.disk.front_points().unwrap_or(0);
                        tracing::error!(sink = %stats.name, error = %e, records, "cannot read the log disk buffer; skipping a request");
                        stats.dropped_records[SinkDrop::BufferError as usize]
                            .fetch_add(u64::from(records), Relaxed);
                        let popped = st.disk.pop();
                        publish(stats, &st.disk);
                        if let Err(e) = popped {
                            // The buffer cannot even record the skip:
                            // wait rather than spin.
                            tracing::error!(sink = %stats.name, error = %e, "cannot record a skip in the log disk buffer");
                            break None;
                        }
                    }
                }
            }
        };
        let Some(front) = front else {
            std::thread::sleep(backoff.next_delay());
            continue;
        };
        let body = Body {
            body: &front.body,
            records: front.points,
            raw_bytes: front.raw_bytes,
        };
        match attempt(&mut transport, &body, &mut split, &mut backoff, stats) {
            Attempt::Delivered | Attempt::Refused => {
                let mut st = shared.lock();
                if let Err(e) = st.disk.pop() {
                    tracing::error!(sink = %stats.name, error = %e, "cannot record a delivery in the log disk buffer; it may be sent again at the next start");
                }
                publish(stats, &st.disk);
            }
            Attempt::Partial => {}
            Attempt::Retry(delay) => {
                let retry_at = Instant::now() + delay;
                let mut st = shared.lock();
                loop {
                    let until = stop_by(&st).map_or(retry_at, |s| s.min(retry_at));
                    let left = until.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    st = shared
                        .stored
                        .wait_timeout(st, left)
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .0;
                }
            }
        }
        let st = shared.lock();
        if stop_by(&st).is_some_and(|s| Instant::now() >= s) {
            if !st.disk.is_empty() {
                tracing::warn!(sink = %stats.name, requests = st.disk.len(), records = st.disk.points(), "stopping with log records in the disk buffer: they are sent at the next start");
            }
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logs::deliver::JsonLines;
    use crate::sender::SendError;
    use sonde_encode::compress::Compression;
    use sonde_log_sources::SourceInfo;
    use std::sync::atomic::AtomicBool;
    use std::sync::mpsc::{channel, Receiver};

    /// An endpoint that is down until `up` is set, and keeps what it took.
    #[derive(Clone, Default)]
    struct Endpoint {
        up: Arc<AtomicBool>,
        got: Arc<Mutex<Vec<String>>>,
    }

    impl Transport for Endpoint {
        fn send(&mut self, body: &[u8]) -> Result<(), SendError> {
            if !self.up.load(Relaxed) {
                return Err(SendError::new(FailReason::Connect, "down"));
            }
            let text = String::from_utf8(body.to_vec()).unwrap();
            let mut got = self.got.lock().unwrap();
            for l in text.lines() {
                let r: serde_json::Value = serde_json::from_str(l).unwrap();
                got.push(r["message"].as_str().unwrap().to_string());
            }
            Ok(())
        }
    }

    impl Endpoint {
        fn messages(&self) -> Vec<String> {
            self.got.lock().unwrap().clone()
        }
    }

    fn http() -> HttpLogs {
        HttpLogs {
            compression: Compression::None,
            max_records: 2,
            max_bytes: 1 << 20,
            backoff_min: Duration::from_millis(1),
            backoff_max: Duration::from_millis(5),
        }
    }

    fn batch(seq: u64, messages: &[&str], done: &Sender<u64>) -> Arc<LogBatch> {
        let info = SourceInfo {
            name: "app".into(),
            host: "h".into(),
            fields: Vec::new(),
        };
        let lines: Vec<(&str, u64, &[u8])> = messages
            .iter()
            .enumerate()
            .map(|(i, m)| ("/a.log", i as u64 * 10, m.as_bytes()))
            .collect();
        Arc::new(LogBatch::for_test(info, seq, &lines, 1, done.clone()))
    }

    fn start(
        dir: &std::path::Path,
        max_size: u64,
        endpoint: &Endpoint,
        grace: Duration,
    ) -> (Sender<Arc<LogBatch>>, JoinHandle<()>, Arc<SinkStats>) {
        let stats = Arc::new(SinkStats::new("http".into()));
        let (disk, _) = Disk::open(dir, max_size, true).unwrap();
        let (tx, thread) = spawn_http_buffered(
            JsonLines::default(),
            endpoint.clone(),
            http(),
            disk,
            grace,
            Arc::clone(&stats),
        )
        .unwrap();
        (tx, thread, stats)
    }

    fn ack(done: &Receiver<u64>) -> u64 {
        done.recv_timeout(Duration::from_secs(10))
            .expect("an acknowledgement")
    }

    fn wait_until(what: &str, cond: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn batches_are_acknowledged_once_stored_and_sent_in_order_when_the_endpoint_returns() {
        let dir = tempfile::tempdir().unwrap();
        let endpoint = Endpoint::default();
        let (tx, thread, stats) = start(dir.path(), 1 << 20, &endpoint, Duration::from_secs(5));
        let (done_tx, done_rx) = channel();
        tx.send(batch(0, &["1", "2", "3"], &done_tx)).unwrap();
        tx.send(batch(1, &["4"], &done_tx)).unwrap();
        // Acknowledged while the endpoint is down: the records are on disk.
        assert_eq!([ack(&done_rx), ack(&done_rx)], [0, 1]);
        assert_eq!(stats.log_buffer_records.load(Relaxed), 4);
        endpoint.up.store(true, Relaxed);
        wait_until("the buffer drained", || {
            stats.log_buffer_records.load(Relaxed) == 0
        });
        assert_eq!(endpoint.messages(), ["1", "2", "3", "4"]);
        assert_eq!(stats.records.load(Relaxed), 4);
        assert_eq!(stats.log_buffer_bytes.load(Relaxed), 0);
        drop(tx);
        thread.join().unwrap();
    }

    #[test]
    fn a_full_buffer_holds_batches_back_and_drops_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let endpoint = Endpoint::default();
        // Room for one request only.
        let (tx, thread, stats) = start(dir.path(), 1, &endpoint, Duration::from_secs(5));
        let (done_tx, done_rx) = channel();
        tx.send(batch(0, &["1"], &done_tx)).unwrap();
        tx.send(batch(1, &["2"], &done_tx)).unwrap();
        assert_eq!(ack(&done_rx), 0);
        // The second waits for room while the endpoint is down.
        assert!(done_rx.recv_timeout(Duration::from_millis(300)).is_err());
        assert_eq!(stats.log_buffer_records.load(Relaxed), 1);
        endpoint.up.store(true, Relaxed);
        assert_eq!(ack(&done_rx), 1);
        drop(tx);
        thread.join().unwrap();
        assert_eq!(endpoint.messages(), ["1", "2"]);
        let dropped: u64 = stats.dropped_records.iter().map(|d| d.load(Relaxed)).sum();
        assert_eq!(dropped, 0);
    }

    #[test]
    fn what_is_not_sent_by_the_stop_is_sent_first_at_the_next_start() {
        let dir = tempfile::tempdir().unwrap();
        let down = Endpoint::default();
        let (tx, thread, _) = start(dir.path(), 1 << 20, &down, Duration::from_millis(50));
        let (done_tx, done_rx) = channel();
        tx.send(batch(0, &["kept 1", "kept 2", "kept 3"], &done_tx))
            .unwrap();
        assert_eq!(ack(&done_rx), 0);
        drop(tx);
        // The sender gives up after its grace.
        thread.join().unwrap();
        assert!(down.messages().is_empty());

        let (disk, loaded) = Disk::open(dir.path(), 1 << 20, true).unwrap();
        assert_eq!((loaded.records, loaded.points), (2, 3));
        drop(disk);
        let up = Endpoint::default();
        up.up.store(true, Relaxed);
        let (tx, thread, stats) = start(dir.path(), 1 << 20, &up, Duration::from_secs(5));
        assert_eq!(stats.log_buffer_records.load(Relaxed), 3);
        tx.send(batch(1, &["new"], &done_tx)).unwrap();
        assert_eq!(ack(&done_rx), 1);
        drop(tx);
        thread.join().unwrap();
        assert_eq!(up.messages(), ["kept 1", "kept 2", "kept 3", "new"]);
        let (_, loaded) = Disk::open(dir.path(), 1 << 20, true).unwrap();
        assert_eq!(loaded.records, 0, "nothing is sent twice at a third start");
    }

    #[test]
    fn a_stop_while_the_buffer_is_full_leaves_the_waiting_batch_unacknowledged() {
        let dir = tempfile::tempdir().unwrap();
        let endpoint = Endpoint::default();
        let (tx, thread, _) = start(dir.path(), 1, &endpoint, Duration::from_millis(50));
        let (done_tx, done_rx) = channel();
        tx.send(batch(0, &["1"], &done_tx)).unwrap();
        tx.send(batch(1, &["2"], &done_tx)).unwrap();
        assert_eq!(ack(&done_rx), 0);
        drop(tx);
        thread.join().unwrap();
        assert_eq!(done_rx.try_iter().collect::<Vec<_>>(), Vec::<u64>::new());
        let (_, loaded) = Disk::open(dir.path(), 1, true).unwrap();
        assert_eq!(loaded.points, 1, "the first batch stays on disk");
    }
}

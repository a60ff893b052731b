//! The scrape thread: one thread scrapes every target, each on its own
//! interval, and sends each scrape's points to the input worker.
//!
//! # Schedule
//!
//! A target's scrapes are offset within its interval by a hash of its URL
//! and job (as Prometheus offsets them), so that targets of the same
//! interval are spread over it rather than scraped all at once. The thread
//! sleeps until the next target is due; a scrape blocks the thread for at
//! most its target's `timeout`, and a target that is late keeps its phase
//! (it skips the scrapes it missed).
//!
//! # Health
//!
//! After each scrape the target's `up` (1, or 0 when the scrape failed:
//! no connection, a status other than 2xx, a timeout, a body over
//! `max_body_size`), `scrape_duration_seconds` and
//! `scrape_samples_scraped` are sent as `Kind::Store` points with the
//! target's labels. A failing target is said in the log at most once a
//! minute, with the failures since the last line.
//!
//! # Clean shutdown
//!
//! [`Scraper::stop`] ends the thread after the scrape under way, which
//! drops its end of the worker's channel: the worker hands its open
//! window to the flusher and ends.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::io::{self, Read};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sonde_metrics::input::{Points, PointsSender};
use sonde_metrics::receiver::ReceiverStats;
use sonde_proto::Kind;
use sonde_runtime::drops::DropLabel;

use crate::state::TargetState;
use crate::Target;

/// What the scraper asks for: OpenMetrics first, then the 0.0.4 text, as
/// Prometheus does (without its protobuf format, which sonde does not
/// read).
pub const ACCEPT: &str = "application/openmetrics-text;version=1.0.0;q=0.75,\
text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// The shortest time between two log lines about one failing target.
const LOG_EVERY: Duration = Duration::from_secs(60);

/// The running scrape thread.
#[derive(Debug)]
pub struct Scraper {
    targets: Sender<Vec<Target>>,
    thread: JoinHandle<()>,
}

impl Scraper {
    /// Replaces the targets: those already scraped keep their counters
    /// and their schedule, new ones start, missing ones stop.
    pub fn update(&self, targets: Vec<Target>) {
        let _ = self.targets.send(targets);
    }

    /// Ends the thread (after the scrape under way) and waits for it.
    pub fn stop(self) {
        drop(self.targets);
        let _ = self.thread.join();
    }
}

/// Starts the thread named `name` scraping `targets` into `points`,
/// counting bodies read and what is dropped in `stats`.
///
/// # Errors
///
/// When the thread cannot be spawned.
pub fn spawn(
    name: String,
    targets: Vec<Target>,
    points: PointsSender,
    stats: Arc<ReceiverStats>,
) -> io::Result<Scraper> {
    let (tx, rx) = channel();
    let thread = std::thread::Builder::new()
        .name(name)
        .spawn(move || run(targets, &rx, &points, &stats))?;
    Ok(Scraper {
        targets: tx,
        thread,
    })
}

/// A target being scraped.
struct Running {
    target: Target,
    state: TargetState,
    next: Instant,
    /// When the last failure was logged, and failures since.
    logged: Option<Instant>,
    failed: u64,
}

impl Running {
    fn new(target: Target, now: Instant) -> Running {
        let mut h = DefaultHasher::new();
        (&target.url, &target.job).hash(&mut h);
        let nanos = u64::try_from(target.interval.as_nanos())
            .unwrap_or(u64::MAX)
            .max(1);
        let next = now + Duration::from_nanos(h.finish() % nanos);
        Running {
            target,
            state: TargetState::new(),
            next,
            logged: None,
            failed: 0,
        }
    }

    /// Moves `next` past `now`, keeping the phase.
    fn advance(&mut self, now: Instant) {
        self.next += self.target.interval;
        if self.next <= now {
            let i = self.target.interval.as_nanos().max(1);
            let behind = now.duration_since(self.next).as_nanos();
            let skip = u64::try_from((behind / i + 1) * i).unwrap_or(u64::MAX);
            self.next += Duration::from_nanos(skip);
        }
    }
}

fn run(
    targets: Vec<Target>,
    updates: &Receiver<Vec<Target>>,
    points: &PointsSender,
    stats: &ReceiverStats,
) {
    let start = Instant::now();
    let mut running: Vec<Running> = targets
        .into_iter()
        .map(|t| Running::new(t, start))
        .collect();
    let agent = ureq::Agent::from(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .user_agent(concat!("sonde/", env!("CARGO_PKG_VERSION")))
            .build(),
    );
    let mut body = Vec::new();
    loop {
        let now = Instant::now();
        let wait = running
            .iter()
            .map(|r| r.next.saturating_duration_since(now))
            .min()
            .unwrap_or(Duration::from_secs(3600));
        match updates.recv_timeout(wait) {
            Ok(targets) => {
                let now = Instant::now();
                let mut old = std::mem::take(&mut running);
                for t in targets {
                    match old.iter().position(|r| r.target == t) {
                        Some(i) => running.push(old.swap_remove(i)),
                        None => running.push(Running::new(t, now)),
                    }
                }
                continue;
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        for r in &mut running {
            if r.next > Instant::now() {
                continue;
            }
            let mut out = Points::new();
            scrape(&agent, r, &mut body, &mut out, stats);
            r.advance(Instant::now());
            if points.send(out).is_err() {
                // The worker is gone: the agent stops.
                return;
            }
        }
    }
}

/// Why a scrape failed, for the log.
enum Failure {
    Http(ureq::Error),
    Status(u16),
    Read(io::Error),
    TooLarge,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Http(e) => write!(f, "{e}"),
            Failure::Status(s) => write!(f, "answered HTTP {s}"),
            Failure::Read(e) => write!(f, "reading the body: {e}"),
            Failure::TooLarge => f.write_str("the body is larger than max_body_size"),
        }
    }
}

/// Reads `r`'s target into `body`.
fn fetch(agent: &ureq::Agent, r: &Running, body: &mut Vec<u8>) -> Result<(), Failure> {
    let t = &r.target;
    let mut resp = agent
        .get(&t.url)
        .header("Accept", ACCEPT)
        .header(
            "X-Prometheus-Scrape-Timeout-Seconds",
            format!("{}", t.timeout.as_secs_f64()),
        )
        .config()
        .timeout_global(Some(t.timeout))
        .build()
        .call()
        .map_err(Failure::Http)?;
    let status = resp.status().as_u16();
    if !(200..300).contains(&status) {
        return Err(Failure::Status(status));
    }
    body.clear();
    // One byte past the limit tells a body at the limit from a larger one.
    resp.body_mut()
        .as_reader()
        .take(t.max_body_size.saturating_add(1))
        .read_to_end(body)
        .map_err(Failure::Read)?;
    if body.len() as u64 > t.max_body_size {
        return Err(Failure::TooLarge);
    }
    Ok(())
}

/// Scrapes `r` once into `out`, its health series included.
fn scrape(
    agent: &ureq::Agent,
    r: &mut Running,
    body: &mut Vec<u8>,
    out: &mut Points,
    stats: &ReceiverStats,
) {
    let began = Instant::now();
    let fetched = fetch(agent, r, body);
    let mut samples = 0;
    let up = match fetched {
        Ok(()) => {
            // The worker counts each scrape's batch as a datagram.
            stats.bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
            let got = r.state.absorb(&r.target, body, out);
            samples = got.parsed.samples;
            for (label, n) in [
                (DropLabel::MalformedLine, got.parsed.malformed),
                (DropLabel::InvalidUtf8, got.parsed.not_utf8),
                (DropLabel::BadValue, got.not_finite),
            ] {
                if n > 0 {
                    stats.drops[label as usize].fetch_add(n as u64, Ordering::Relaxed);
                }
            }
            if r.logged.is_some() {
                tracing::info!(target_url = %r.target.url, job = %r.target.job, "scrape target is up again");
            }
            r.failed = 0;
            r.logged = None;
            1.0
        }
        Err(e) => {
            if matches!(e, Failure::TooLarge) {
                stats.drops[DropLabel::Oversized as usize].fetch_add(1, Ordering::Relaxed);
            }
            r.failed += 1;
            let now = Instant::now();
            if r.logged
                .is_none_or(|at| now.duration_since(at) >= LOG_EVERY)
            {
                tracing::warn!(
                    target_url = %r.target.url,
                    job = %r.target.job,
                    error = %e,
                    failures = r.failed,
                    "scrape failed; up is 0 (said at most once a minute)"
                );
                r.logged = Some(now);
                r.failed = 0;
            }
            0.0
        }
    };
    let duration = began.elapsed().as_secs_f64();
    let tags = r.target.tags();
    out.push(Kind::Store, "up", tags.clone(), up);
    out.push(
        Kind::Store,
        "scrape_duration_seconds",
        tags.clone(),
        duration,
    );
    out.push(Kind::Store, "scrape_samples_scraped", tags, samples as f64);
}

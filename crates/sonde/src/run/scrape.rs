//! `[[scrape]]` in the running agent: every target is scraped by one
//! thread ([`sonde_scrape::scraper`]) whose points go through one input
//! worker ([`sonde_metrics::input::spawn_worker`]), counted under
//! `sonde_receiver_*{listen="scrape",protocol="prometheus"}` on /metrics
//! like a receiver's.
//!
//! A reload that changes the targets keeps the thread and its worker:
//! targets unchanged keep their counters and schedule, new ones start,
//! removed ones stop; the thread and worker start with the first target
//! and stop with the last.

use std::sync::Arc;
use std::thread::JoinHandle;

use sonde_metrics::input::spawn_worker;
use sonde_metrics::receiver::{Ingest, Protocol, ReceiverStats};
use sonde_scrape::scraper::{self, Scraper};
use sonde_scrape::Target;

use super::{lock, Ctx};

/// Batches (one per scrape) that may wait for the worker.
const QUEUE: usize = 64;

/// The scrape thread and its worker.
pub(super) struct Scrapes {
    scraper: Scraper,
    worker: JoinHandle<()>,
    stats: Arc<ReceiverStats>,
}

/// Starts scraping `targets`; nothing when there are none.
pub(super) fn start(targets: &[Target], ctx: &Ctx) -> anyhow::Result<Option<Scrapes>> {
    if targets.is_empty() {
        return Ok(None);
    }
    let stats = Arc::new(ReceiverStats::new("scrape".into(), "prometheus"));
    let ingest = Ingest::new(
        // The protocol only chooses how a socket's bytes parse; scraped
        // points come parsed.
        Protocol::Statsd,
        Arc::clone(&stats),
        Arc::clone(&ctx.aggregate),
        Arc::clone(&ctx.control),
        ctx.shard_tx.clone(),
    )
    .tap_to(Arc::clone(&ctx.telemetry.tap));
    let (tx, worker) = spawn_worker("scrape worker".into(), ingest, QUEUE)?;
    let scraper = scraper::spawn("scrape".into(), targets.to_vec(), tx, Arc::clone(&stats))?;
    lock(&ctx.telemetry.receivers).push(Arc::clone(&stats));
    tracing::info!(targets = targets.len(), "scraping");
    Ok(Some(Scrapes {
        scraper,
        worker,
        stats,
    }))
}

/// Applies a reload's targets.
pub(super) fn reload(running: &mut Option<Scrapes>, targets: &[Target], ctx: &Ctx) {
    match running.take() {
        Some(s) if targets.is_empty() => stop(s, ctx),
        Some(s) => {
            s.scraper.update(targets.to_vec());
            *running = Some(s);
        }
        None => match start(targets, ctx) {
            Ok(s) => *running = s,
            Err(e) => tracing::error!(error = format!("{e:#}"), "SIGHUP: cannot start scraping"),
        },
    }
}

/// Stops the thread; its worker hands over its open window and ends.
pub(super) fn stop(s: Scrapes, ctx: &Ctx) {
    s.scraper.stop();
    let _ = s.worker.join();
    lock(&ctx.telemetry.receivers).retain(|r| !Arc::ptr_eq(r, &s.stats));
}

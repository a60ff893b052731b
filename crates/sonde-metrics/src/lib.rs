//! The metrics runtime: the receivers and the window flusher.
//!
//! In the order data flows:
//!
//! * **receivers** ([`receiver`]): one worker thread per listen socket
//!   reads a batch, parses and aggregates it into its own shard
//!   ([`receiver::ingest`]) and, at a window boundary, hands the window to
//!   the flusher;
//! * the **flusher** ([`flusher`]): wakes on wall-clock boundaries, merges
//!   the windows, produces points and queues them to every sink
//!   ([`flusher::Output`], which `sonde-sinks` implements) without
//!   blocking;
//! * **inputs** that make their points themselves ([`input`]: host
//!   metrics, scrapes, OTLP) hand batches to a worker of their own, which
//!   records them through the same stage as a receiver's worker.
//!
//! The flusher runs at a lower priority than the receive workers
//! (`sonde_runtime::priority`), so that a flush never takes the CPU from
//! receiving. DogStatsD events a receiver reads go to the
//! `dogstatsd_events` log source (`sonde-log-sources`).
#![deny(missing_docs)]

pub mod flusher;
pub mod input;
pub mod points;
pub mod receiver;

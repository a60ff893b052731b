//! sonde's runtime: everything that owns a thread, a socket or a file.
//! The pure stages (parsing, aggregation, encoding) live in `sonde-proto`,
//! `sonde-aggregate` and `sonde-encode`; this crate drives them.
//!
//! # Roles
//!
//! In the order data flows:
//!
//! * **receivers** ([`receiver`], addresses in [`addr`]): one worker thread
//!   per listen socket reads a batch, parses and aggregates it into its own
//!   shard ([`receiver::ingest`]) and, at a window boundary, hands the shard to the
//!   flusher;
//! * the **flusher** ([`flusher`]): wakes on wall-clock boundaries, merges
//!   the shards, produces points and queues them to every sink without
//!   blocking;
//! * **sinks** ([`sink`]): one thread each behind a bounded queue; the local
//!   ones (console, file, Prometheus exporter) write directly, the network
//!   ones are **senders** ([`sender`]), which batch, compress, buffer and
//!   retry;
//! * **log sources** ([`logs`]): one thread per source reads its files and
//!   sends batches of lines to the sinks that take it, which acknowledge
//!   them once delivered;
//! * the **HTTP listeners** ([`http`]): one thread for the admin site (an
//!   index, `/health`, `/metrics`, CPU profiles) and the exporters' scrape
//!   endpoints;
//! * the agent's **own telemetry** ([`telemetry`]): each component counts
//!   into stats it owns, and `/metrics` is rendered from a table of metric
//!   descriptors that reads them.
//!
//! The flusher, sink and HTTP threads run at a lower priority than the
//! receive workers ([`priority`]), so that a flush never takes the CPU from
//! receiving.
//!
//! # Linux only
//!
//! The agent runs on Linux: it receives with `recvmmsg`, sizes buffers with
//! `SO_RCVBUFFORCE`, counts kernel drops with `SO_RXQ_OVFL` and lowers the
//! priority of single threads. Every such call sits in the private `sys`
//! module, which lists what a port to another kernel would provide; the
//! crate refuses to build elsewhere rather than build with parts missing.
#![deny(missing_docs)]

#[cfg(not(target_os = "linux"))]
compile_error!("sonde-io runs on Linux only: see the `sys` module for the system calls it needs");

pub mod addr;
pub mod flusher;
pub mod http;
pub mod logs;
pub mod priority;
pub mod profiler;
pub mod receiver;
pub mod sender;
pub mod sink;
mod sys;
pub mod tap;
pub mod telemetry;

pub use sys::raise_open_files_limit;

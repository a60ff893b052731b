//! sonde's runtime: receivers that own sockets and drive the parsers, the
//! flusher that closes windows, sinks, and the HTTP listeners.
//!
//! Threads, and who drives whom:
//!
//! * one **receive worker** per listen address ([`receiver`]): reads a batch,
//!   parses and aggregates it into its own shard ([`ingest`]), and at a
//!   window boundary hands the shard to the flusher;
//! * the **flusher** ([`flusher`]): wakes on wall-clock boundaries, merges
//!   shards, produces points, queues them to every sink without blocking;
//! * one thread per **sink** ([`sink`]) behind a bounded queue;
//! * one **HTTP** thread ([`http`]) for `/health`, `/metrics` and exporters.
//!
//! The flusher, sink and HTTP threads run at a lower priority than the
//! receive workers ([`priority`]), so that a flush never takes the CPU from
//! receiving.
#![deny(missing_docs)]

pub mod addr;
pub mod drops;
pub mod flusher;
pub mod http;
pub mod ingest;
pub mod priority;
pub mod receiver;
pub mod sender;
pub mod sink;
pub mod telemetry;

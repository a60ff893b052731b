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
pub mod ingest;
pub mod priority;
pub mod receiver;
pub mod sender;
pub mod sink;
mod sys;
pub mod telemetry;

//! What every runtime of the agent shares: listen addresses
//! ([`addr`]) and the sockets bound for them ([`socket`]), the priority of
//! background threads ([`priority`]), the reasons input is dropped
//! ([`drops`]), the count of failed writes under `data_dir`
//! ([`data_dir`]), the live view of what flows ([`tap`]), TLS files and
//! client settings ([`tls`]) and the system calls none of the crates above
//! make themselves ([`sys`]).
//!
//! The runtimes build on it: `sonde-metrics` (receivers and the flusher),
//! `sonde-log-sources` (log sources and their batches), `sonde-profiler`
//! (the profiler thread); then `sonde-sinks` and `sonde-admin`.
//!
//! # Linux only
//!
//! The agent runs on Linux: it receives with `recvmmsg`, sizes buffers with
//! `SO_RCVBUFFORCE`, counts kernel drops with `SO_RXQ_OVFL` and lowers the
//! priority of single threads. Every such call sits in [`sys`], which
//! lists what a port to another kernel would provide; the crate refuses to
//! build elsewhere rather than build with parts missing.
#![deny(missing_docs)]

#[cfg(not(target_os = "linux"))]
compile_error!(
    "sonde-runtime runs on Linux only: see the `sys` module for the system calls it needs"
);

pub mod addr;
pub mod data_dir;
pub mod drops;
pub mod priority;
pub mod socket;
pub mod sys;
pub mod tap;
pub mod tls;

pub use sys::raise_open_files_limit;

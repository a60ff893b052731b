//! Where data leaves the agent: the sinks of metric windows and of log
//! batches, and the machinery every network sink shares.
//!
//! * [`sink`]: a metric sink's thread behind its bounded queue, its
//!   counters ([`sink::SinkStats`], also the log sinks'), and the local
//!   sinks (console, file, the Prometheus exporter's exposition);
//! * [`sender`]: batching, compression, retry with backoff, and the
//!   memory and disk buffers ([`sender::disk`]) of the network sinks;
//! * [`logs`]: the log sinks, which acknowledge each batch once
//!   delivered: local (file, console), HTTP (direct or through a disk
//!   buffer) and the blackhole;
//! * [`profiles`]: the profiler's periods, one request each, through the
//!   same sender as metric windows.
//! * [`descriptor`]: what a sink type is ([`descriptor::SinkType`]: what it
//!   accepts, its keys and how they are checked, how it starts) and what a
//!   configured sink is; [`registry`]: every type, and the checks of
//!   `[[sinks]]`;
//!   one folder per type ([`console`], [`mod@file`], [`http`], [`kafka`], ...),
//!   the network sinks' common keys and start in [`net`].
//!
//! # Adding a sink type
//!
//! One folder here with its `TYPE` (see `influxdb` for a network sink
//! with a key of its own), its `pub mod` line below and its line in
//! [`registry::REGISTRY`]; then its row in the tables of docs/SINKS.md
//! and docs/CONFIG.md, which tests check against the registry. A backend
//! reached neither over HTTP nor over TCP takes
//! [`registry::Transport::Own`] and hands its transport to [`net::spawn`].
//! `check` stays a pure parse of the keys; what the sink needs of the
//! host (files it reads: certificates, secrets) goes in `host`, which
//! `sonde validate` and every start run (see `kafka::security`).
//! Config keys and errors come from `sonde-config`, encoders from
//! `sonde-encode`; the batching, retry and buffers of [`sender`] and the
//! log delivery of [`logs`] are shared by every network sink.
#![deny(missing_docs)]

pub mod descriptor;
pub mod logs;
pub mod net;
pub mod profiles;
pub mod registry;
pub mod sender;
pub mod sink;

pub mod blackhole;
pub mod clickhouse;
pub mod console;
pub mod file;
pub mod graphite;
pub mod http;
pub mod influxdb;
pub mod kafka;
pub mod otlp_http;
pub mod prometheus_exporter;
pub mod prometheus_remote_write;
pub mod tcp;

pub use registry::{hostname, lookup, SinkType, REGISTRY};

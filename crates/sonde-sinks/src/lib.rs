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
//!   buffer) and the blackhole.
#![deny(missing_docs)]

pub mod logs;
pub mod sender;
pub mod sink;

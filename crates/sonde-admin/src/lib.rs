//! The admin site and the agent's own telemetry.
//!
//! * [`http`]: the HTTP listeners on one background thread: the admin site
//!   (the agent at a glance, `/health`, `/metrics`, the stored profiles,
//!   live taps, the agent's own CPU profile) and the Prometheus exporter
//!   sinks' scrape endpoints; and [`http::client`], the client side for
//!   the commands that talk to the agent;
//! * [`telemetry`]: each component counts into stats it owns, and
//!   `/metrics` is rendered from a table of metric descriptors that reads
//!   them.
//!
//! The HTTP thread runs at a lower priority than the receive workers, so
//! that a scrape never takes the CPU from receiving.
#![deny(missing_docs)]

pub mod http;
pub mod telemetry;

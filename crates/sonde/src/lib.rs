//! The parts of the `sonde` binary that other code needs to reach: the
//! configuration loader, so that the fuzz targets under `fuzz/` and the
//! tests can feed it arbitrary text (it checks each `[[sinks]]` table
//! with the registry of `sonde-sinks`), and the client of a running
//! agent's admin site (which `sonde-bench` shares). Everything else of the binary (the
//! command line, wiring the agent together) lives in `main.rs` and its
//! modules.

pub mod client;
pub mod config;

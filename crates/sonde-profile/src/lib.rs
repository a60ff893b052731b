//! sonde's profiler: samples the stacks of every process on the host with
//! `perf_event_open`, unwinds and symbolises them in user space, and
//! renders the views (TopN, folded stacks, pprof, flame graphs).
#![deny(missing_docs)]

pub mod cgroup;
pub mod classes;
pub mod collect;
pub mod cost;
pub mod flamegraph;
pub mod model;
pub mod module;
pub mod otlp;
pub mod perf;
pub mod pprof;
pub mod record;
pub mod sampler;
pub mod select;
pub mod store;
pub mod symbolize;
pub mod views;
mod x86;

pub use model::{Focus, Function, Process, Profile, ProfileBuilder, Root, Stack};
pub use perf::OpenError;
pub use sampler::{Footprint, Profiler};

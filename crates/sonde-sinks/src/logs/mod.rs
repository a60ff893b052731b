//! The log sinks: each takes the batches of the sources it is given and
//! acknowledges each once delivered, which lets the source's checkpoints
//! move past its lines (`sonde-log-sources`).
//!
//! * [`deliver`]: the file, console and HTTP log sinks;
//! * [`buffered`]: an HTTP log sink through a disk buffer;
//! * [`blackhole`]: the sink that acknowledges everything at once.

pub mod blackhole;
pub mod buffered;
pub mod deliver;

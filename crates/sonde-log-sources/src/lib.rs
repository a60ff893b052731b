//! Log sources at run time: one thread per `[[logs]]` source reads its
//! files with the `sonde-logs` tailer and sends the lines, in shared
//! batches, to every sink that takes the source; the sinks acknowledge
//! each batch once delivered, and only then do the source's checkpoints
//! move past its lines.
//!
//! * [`source`]: the source thread (reading, backpressure, checkpoints,
//!   stopping);
//! * [`batch`]: [`LogBatch`], the lines as the sinks see them, and the
//!   acknowledgement that goes back;
//! * [`record`]: a line as a JSON record, as the sinks and the tap see it;
//! * [`stats`]: the counters shown on `/metrics`;
//! * [`events`]: the `dogstatsd_events` source, DogStatsD events and
//!   service checks as records.
//!
//! The sinks that take the batches are in `sonde-sinks`.
#![deny(missing_docs)]

pub mod batch;
pub mod events;
pub mod record;
pub mod source;
pub mod stats;

pub use batch::{LogBatch, LogLine, SourceInfo};
pub use source::{spawn, LogInput, RunningSource, SourceConfig};
pub use stats::LogStats;

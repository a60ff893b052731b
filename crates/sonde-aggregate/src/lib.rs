//! Aggregation for sonde: series keys, per-worker shards, the quantile
//! sketch, and the flush that turns a window into points.
//!
//! The flow, and who drives it:
//!
//! * a receive thread owns a [`Shard`] and calls [`Shard::record`] for every
//!   parsed point (no lock, no allocation unless the series is new), which
//!   files it under its [`SeriesKind`] or says why it dropped it
//!   ([`RecordError`]);
//! * at a window boundary the worker closes its window
//!   ([`Shard::take_window`]) and sends it to the flusher, which calls
//!   [`Aggregator::absorb_window`] for each, then [`Aggregator::flush`], and
//!   sends the windows back for reuse ([`Aggregator::take_done`]); the
//!   series themselves stay in the shard (docs/adr/0002);
//! * `flush` fills a [`Batch`], whose [`OutPoint`]s mean what the table in
//!   ARCHITECTURE.md ("Metric semantics") says per metric type, one function
//!   per [`SeriesKind`] (`tests/reference_model.rs` checks them against a
//!   naive model of that table).
//!
//! ```
//! use std::sync::Arc;
//! use sonde_aggregate::{AggregateConfig, Aggregator, Batch, Shard};
//! use sonde_proto::{Kind, Point, TagSyntax, Value};
//!
//! let config = Arc::new(AggregateConfig::default());
//! let mut shard = Shard::new(Arc::clone(&config));
//! let point = Point {
//!     kind: Kind::Counter,
//!     name: b"web.requests",
//!     tags: b"host=a",
//!     tag_syntax: TagSyntax::Msgpack,
//!     value: Value::Number(2.0),
//!     sample_rate: 1.0,
//!     timestamp: None,
//! };
//! shard.record(&point).unwrap();
//! shard.record(&point).unwrap();
//!
//! let mut agg = Aggregator::new(config);
//! agg.absorb(&mut shard);
//! let mut out = Batch::new(1_763_800_200);
//! agg.flush(1_763_800_200, 30.0, &mut out);
//! let p = out.points().next().unwrap();
//! assert_eq!(p.name(), "web.requests");
//! assert_eq!(p.value, 4.0);
//! ```
#![deny(missing_docs)]

pub mod aggregator;
pub mod config;
pub mod error;
pub mod key;
pub mod kind;
mod limits;
pub mod point;
mod prefetch;
pub mod shard;
pub mod sketch;
mod spelling;
mod window;

pub use aggregator::{Aggregator, FlushStats};
pub use config::{AggregateConfig, Bounds, HistogramBuckets};
pub use error::RecordError;
pub use kind::SeriesKind;
pub use point::{Batch, OutPoint, SeriesRef, Shape, Suffix};
pub use shard::{SeriesCount, Shard};

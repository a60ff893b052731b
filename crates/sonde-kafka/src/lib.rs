//! sonde's own Kafka producer.
//!
//! librdkafka costs about 8 CPU-seconds per GB when every log line is one
//! record (a buffer, a queue entry, locks and a clock read per record);
//! encoding the record batches here, one reused buffer per batch,
//! measured 0.8 (docs/benchmarks/LOG.md, "sonde's own Kafka producer").
//!
//! * [`batch`]: record batches (magic 2): [`batch::BatchBuilder`] and the
//!   Kafka framing of the sink compressions (none, gzip, snappy, LZ4 frame, zstd), and [`batch::decode`] to read
//!   one back;
//! * [`client`]: a blocking connection to one broker: versions,
//!   metadata, pipelined produce requests;
//! * [`cluster`]: the brokers and a topic's partition leaders, one
//!   connection per broker;
//! * [`txn`]: a transactional producer (coordinator, producer id,
//!   partitions added, commit and abort);
//! * [`wire`]: the protocol's primitive types.
//!
//! Plaintext connections only, non-flexible request versions (Produce 3
//! to 8, Metadata 4 to 8), which every broker from Kafka 1.0 to 4.x
//! serves.

pub mod batch;
pub mod client;
pub mod cluster;
pub mod txn;
pub mod wire;

pub use batch::{BatchBuilder, Compressor, Producer};
pub use client::{Connection, Error, Metadata, PartitionResult};
pub use cluster::{Cluster, Partition};
pub use txn::{ProduceError, Transactional};
pub use wire::Malformed;

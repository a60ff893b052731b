//! sonde's own Kafka producer.
//!
//! librdkafka pays a buffer, a queue entry, locks and a clock read per
//! record, which dominates its cost when every log line is one record;
//! this crate appends each record to one reused buffer per batch and
//! compresses and checksums the batch once. What each costs per GB of
//! lines, and the commands that measure it, is in docs/BENCHMARKS.md
//! ("Logs into Kafka"); why sonde keeps a producer of its own next to
//! librdkafka is docs/adr/0004-own-kafka-producer.md.
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

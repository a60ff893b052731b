//! sonde's own Kafka producer.
//!
//! librdkafka pays a buffer, a queue entry, locks and a clock read per
//! record, which dominates its cost when every log line is one record;
//! this crate appends each record to one reused buffer per batch and
//! compresses and checksums the batch once. What each costs per GB of
//! lines, and the commands that measure it, is in docs/BENCHMARKS.md
//! ("Logs into Kafka"); why sonde has a producer of its own is
//! docs/adr/0004-own-kafka-producer.md, and why it is the agent's only
//! Kafka client docs/adr/0008-one-kafka-client.md.
//!
//! * [`batch`]: record batches (magic 2): [`batch::BatchBuilder`] and the
//!   Kafka framing of the sink compressions (none, gzip, snappy, LZ4 frame, zstd), and [`batch::decode`] to read
//!   one back;
//! * [`client`]: a blocking connection to one broker, plaintext or TLS
//!   (rustls): versions, SASL, metadata, pipelined produce requests;
//! * [`cluster`]: the brokers and a topic's partition leaders, one
//!   connection per broker;
//! * [`read`]: creating a topic, a partition's offsets, and reading a
//!   topic back as a `read_committed` consumer sees it;
//! * [`sasl`]: SASL PLAIN and SCRAM-SHA-256/512;
//! * [`txn`]: a transactional producer (coordinator, producer id,
//!   partitions added, commit and abort);
//! * [`versions`]: the Kafka release a broker's ApiVersions answer tells;
//! * [`wire`]: the protocol's primitive types.
//!
//! Non-flexible request versions (Produce 3 to 8, Metadata 4 to 8, Fetch
//! 4 to 11, ListOffsets 2 to 5, CreateTopics 2 to 4, SaslHandshake 1,
//! SaslAuthenticate 0 to 1), which every broker from Kafka 1.1 to 4.x
//! serves.

pub mod batch;
pub mod client;
pub mod cluster;
pub mod read;
pub mod sasl;
pub mod txn;
pub mod versions;
pub mod wire;

pub use batch::{BatchBuilder, Compressor, Producer};
pub use client::{Connection, Credentials, Dial, Error, Fixed, Metadata, PartitionResult};
pub use cluster::{Cluster, Partition};
pub use sasl::{Sasl, ScramHash, Secret};
pub use txn::{ProduceError, Transactional};
pub use wire::Malformed;

//! What librdkafka alone costs for one record per log line: produces
//! `COUNT` records of `BYTES` bytes each (held in memory, no file, no
//! source) to `TOPIC` with the producer settings of the `kafka` sink
//! (`acks=all`, idempotence, `linger.ms=5`, no message timeout), waits
//! until every delivery report came back, and prints the process's CPU
//! seconds (all its threads, librdkafka's included) per GB of records.
//! The floor under the `kafka` sink's CPU per GB (docs/benchmarks/LOG.md,
//! "what bounds logs into Kafka").
//!
//! ```sh
//! scripts/kafka-broker.sh start /tmp/kb 19092
//! cargo run --release -p sonde --example kafka_floor -- 127.0.0.1:19092 floor 3579140 150 lz4 [key=value ...]
//! ```
//! Extra `key=value` arguments are librdkafka settings on top.

use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::ClientContext;

struct Count {
    ok: std::sync::atomic::AtomicU64,
    failed: std::sync::atomic::AtomicU64,
}

impl ClientContext for Count {}

impl ProducerContext for Count {
    type DeliveryOpaque = ();

    fn delivery(&self, r: &DeliveryResult<'_>, _: ()) {
        let c = if r.is_ok() { &self.ok } else { &self.failed };
        c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// utime + stime of this process, in seconds.
fn cpu_seconds() -> f64 {
    sonde_loadgen::procfs::cpu_seconds(std::process::id()).expect("/proc/self/stat")
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [brokers, topic, count, bytes, compression, extra @ ..] = &args[..] else {
        eprintln!("usage: kafka_floor BROKERS TOPIC COUNT BYTES COMPRESSION [key=value ...]");
        std::process::exit(2);
    };
    let count: u64 = count.parse().expect("COUNT");
    let bytes: usize = bytes.parse().expect("BYTES");
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", brokers)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("compression.type", compression)
        .set("linger.ms", "5")
        .set("message.timeout.ms", "0");
    for kv in extra {
        let (k, v) = kv.split_once('=').expect("key=value");
        c.set(k, v);
    }
    let producer: BaseProducer<Count> = c
        .create_with_context(Count {
            ok: Default::default(),
            failed: Default::default(),
        })
        .expect("producer");
    // Lines that differ, as numbered log lines do.
    let lines = sonde_loadgen::logs::floor_lines(bytes);
    let (cpu0, t0) = (cpu_seconds(), Instant::now());
    let mut sent = 0u64;
    while sent < count {
        let line = &lines[(sent % 1024) as usize];
        match producer.send(BaseRecord::<(), [u8], ()>::to(topic).payload(&line[..])) {
            Ok(()) => sent += 1,
            Err(_) => {
                producer.poll(Duration::from_millis(1));
            }
        }
        if sent.is_multiple_of(1024) {
            producer.poll(Duration::ZERO);
        }
    }
    let ctx = producer.context();
    let done = |c: &Count| {
        c.ok.load(std::sync::atomic::Ordering::Relaxed)
            + c.failed.load(std::sync::atomic::Ordering::Relaxed)
    };
    while done(ctx) < count {
        producer.poll(Duration::from_millis(10));
    }
    let (cpu, secs) = (cpu_seconds() - cpu0, t0.elapsed().as_secs_f64());
    let gb = (count as f64) * (bytes as f64 + 1.0) / 1e9;
    println!(
        "records {count} of {bytes} B, {compression}: {secs:.2} s, {:.1} MB/s, CPU {cpu:.2} s, {:.2} CPU-s/GB, failed {}",
        gb * 1e3 / secs,
        cpu / gb,
        ctx.failed.load(std::sync::atomic::Ordering::Relaxed)
    );
}

//! What sonde's own Kafka producer (crates/sonde-kafka) costs for one
//! record per log line: produces `COUNT` records of `BYTES` bytes each
//! (held in memory, no file, no source) to `TOPIC` on one broker, in
//! batches of about 1 MB of records, `acks=-1`, five requests in flight
//! on one connection, partitions taken in turn, checks every response,
//! and prints the process's CPU seconds per GB of lines (newline
//! counted, as `bench-logs.sh` does). The same measurement as the
//! `kafka_floor` example (librdkafka); docs/benchmarks/LOG.md, "sonde's own
//! Kafka producer".
//!
//! ```sh
//! scripts/kafka-broker.sh start /tmp/kb 19192
//! cargo run --release -p sonde --example kafka_own_floor -- 127.0.0.1:19192 own 3579140 149 lz4 [floor|loadgen] [batch=1000000] [inflight=5] [level=1]
//! ```
//! `floor` (the default) sends `kafka_floor`'s 1,024 lines; `loadgen`
//! every line distinct, as the load generator writes them (they compress
//! less: lz4 about 3x). `batch` is the bytes of records per request,
//! `inflight` the requests in flight, `level` the zstd or gzip level: the
//! sink's choices by default.

use std::time::{Duration, Instant, SystemTime};

use sonde_encode::compress::Compression;
use sonde_kafka::client::begin_produce;
use sonde_kafka::{BatchBuilder, Compressor, Connection, Dial, Producer};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [broker, topic, count, bytes, compression, rest @ ..] = &args[..] else {
        eprintln!("usage: kafka_own_floor BROKER TOPIC COUNT BYTES none|gzip|lz4|zstd [floor|loadgen] [batch=N] [inflight=N] [level=N]");
        std::process::exit(2);
    };
    let count: u64 = count.parse().expect("COUNT");
    let bytes: usize = bytes.parse().expect("BYTES");
    let setting = |key: &str, default: i64| -> i64 {
        rest.iter()
            .find_map(|a| a.strip_prefix(key)?.strip_prefix('='))
            .map_or(default, |v| v.parse().expect("a number"))
    };
    // The sink's choices: about 1 MB of records per request (under the
    // broker's default max.message.bytes even uncompressed), five in
    // flight, level 1.
    let batch_bytes = setting("batch", 1_000_000) as usize;
    let in_flight_max = setting("inflight", 5) as usize;
    let level = setting("level", 1);
    let codec = match compression.as_str() {
        "none" => Compression::None,
        "gzip" => Compression::Gzip {
            level: level as u32,
        },
        "lz4" => Compression::Lz4,
        "zstd" => Compression::Zstd {
            level: level as i32,
        },
        c => panic!("compression {c}"),
    };
    let kind = rest.iter().find(|a| !a.contains('=')).map(String::as_str);
    let lines: Vec<Vec<u8>> = match kind {
        None | Some("floor") => sonde_loadgen::logs::floor_lines(bytes),
        Some("loadgen") => {
            let maker = sonde_loadgen::logs::LineMaker::new(bytes + 1);
            (0..65_536u64)
                .map(|seq| {
                    let mut l = Vec::new();
                    maker.append(&mut l, 0, seq);
                    l.pop();
                    l
                })
                .collect()
        }
        Some(s) => panic!("lines {s}: floor or loadgen"),
    };
    let mut c = Connection::connect(broker, &Dial::plain("sonde-floor", Duration::from_secs(30)))
        .expect("connect");
    let partitions: Vec<i32> = loop {
        let m = c.metadata(&[topic], true).expect("metadata");
        let t = &m.topics[0];
        if t.error == 0 && !t.partitions.is_empty() && t.partitions.iter().all(|p| p.leader >= 0) {
            break t.partitions.iter().map(|p| p.id).collect();
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut compressor = Compressor::new(codec).expect("compressor");
    let mut batch = BatchBuilder::new();
    let mut buf = Vec::with_capacity(2 * batch_bytes);
    let (mut sent, mut acked, mut batches) = (0u64, 0u64, 0usize);
    let mut in_flight = std::collections::VecDeque::new();
    let settle = |c: &mut Connection, records: u64| {
        for r in c.recv_produce().expect("produce response") {
            assert_eq!(
                r.error,
                0,
                "partition {}: {}",
                r.partition,
                sonde_kafka::client::code_name(r.error)
            );
        }
        records
    };
    let cpu0 = sonde_loadgen::procfs::cpu_seconds(std::process::id()).expect("/proc/self/stat");
    let t0 = Instant::now();
    while sent < count {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let mut n = 0u64;
        while batch.raw_bytes() + bytes + 16 <= batch_bytes && sent + n < count {
            batch.push_value(now, &lines[((sent + n) % lines.len() as u64) as usize]);
            n += 1;
        }
        let partition = partitions[batches % partitions.len()];
        let frame = begin_produce(&mut buf, "sonde-floor", None, -1, 30_000, topic, partition);
        batch
            .finish(&mut compressor, Producer::NONE, &mut buf)
            .expect("compress");
        c.send_produce(&mut buf, frame).expect("send");
        in_flight.push_back(n);
        sent += n;
        batches += 1;
        while in_flight.len() >= in_flight_max {
            let n = in_flight.pop_front().expect("in flight");
            acked += settle(&mut c, n);
        }
    }
    while let Some(n) = in_flight.pop_front() {
        acked += settle(&mut c, n);
    }
    let cpu =
        sonde_loadgen::procfs::cpu_seconds(std::process::id()).expect("/proc/self/stat") - cpu0;
    let secs = t0.elapsed().as_secs_f64();
    let gb = (count as f64) * (bytes as f64 + 1.0) / 1e9;
    println!(
        "own producer: records {count} of {bytes} B, {compression}, {batches} batches: {secs:.2} s, {:.1} MB/s, CPU {cpu:.2} s, {:.2} CPU-s/GB, acknowledged {acked}",
        gb * 1e3 / secs,
        cpu / gb,
    );
}

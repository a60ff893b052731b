//! The Kafka harness (tests/common/backends.rs) against the real broker,
//! without sonde: what the tests' client writes comes back exactly once,
//! transactions are honoured by a `read_committed` reader, and committed
//! records survive a SIGKILL of the broker. This proves the single-node
//! settings (every replication factor and min ISR 1, the transaction state
//! log included) that the Kafka sink's tests rely on.
//!
//! Needs the jars `scripts/install-kafka.sh` installs and `java`; without
//! them each test prints why it is skipped, unless `SONDE_REQUIRE_BACKENDS=1`
//! makes that a failure.

mod common;

use std::time::Duration;

use common::backends::{flush, or_skip, send_all, Isolation, Kafka, KafkaRecord};
use rdkafka::producer::Producer;

const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// `prefix-0`, `prefix-1`, ...
fn numbered(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

fn values(records: &[KafkaRecord]) -> Vec<String> {
    records
        .iter()
        .map(|r| String::from_utf8(r.value.clone()).unwrap())
        .collect()
}

#[test]
fn idempotent_producer_records_come_back_exactly_once_with_keys_and_headers() {
    let Some(kafka) = or_skip(Kafka::start()) else {
        return;
    };
    kafka.create_topic("lines", 3);
    let sent = numbered("line", 5000);
    kafka.produce("lines", &sent);

    let records = kafka.consume(
        "lines",
        Isolation::ReadUncommitted,
        sent.len(),
        READ_TIMEOUT,
    );
    assert_eq!(records.len(), sent.len(), "a record missing or duplicated");
    let mut got = values(&records);
    got.sort();
    let mut want = sent.clone();
    want.sort();
    assert_eq!(got, want);
    // Three partitions, each read from offset 0 without a gap: a
    // producer outside transactions writes no transaction markers, which
    // would take offsets of their own.
    let partitions: std::collections::BTreeSet<i32> = records.iter().map(|r| r.partition).collect();
    assert_eq!(
        partitions.len(),
        3,
        "the default partitioner spreads records"
    );
    for p in partitions {
        let offsets: Vec<i64> = records
            .iter()
            .filter(|r| r.partition == p)
            .map(|r| r.offset)
            .collect();
        assert_eq!(offsets, (0..offsets.len() as i64).collect::<Vec<_>>());
    }

    // A key and headers (one without a value) come back as sent, on the
    // same broker.
    kafka.create_topic("headers", 1);
    let producer = kafka.producer(&[]);
    let headers = rdkafka::message::OwnedHeaders::new()
        .insert(rdkafka::message::Header {
            key: "service",
            value: Some("api"),
        })
        .insert(rdkafka::message::Header::<&[u8]> {
            key: "empty",
            value: None,
        });
    producer
        .send(
            rdkafka::producer::BaseRecord::to("headers")
                .key("k1")
                .payload("v1")
                .headers(headers),
        )
        .map_err(|(e, _)| e)
        .unwrap();
    flush(&producer);
    assert_eq!(producer.context().acked(), 1);

    let records = kafka.consume("headers", Isolation::ReadUncommitted, 1, READ_TIMEOUT);
    assert_eq!(
        records,
        vec![KafkaRecord {
            partition: 0,
            offset: 0,
            key: Some(b"k1".to_vec()),
            value: b"v1".to_vec(),
            headers: vec![
                ("service".to_string(), Some(b"api".to_vec())),
                ("empty".to_string(), None),
            ],
        }]
    );
}

#[test]
fn every_compression_codec_round_trips() {
    let Some(kafka) = or_skip(Kafka::start()) else {
        return;
    };
    // The codecs the Kafka sink offers: gzip through zlib, snappy and lz4
    // built into librdkafka, zstd through libzstd; the broker keeps each
    // batch as the producer compressed it (compression.type=producer), so
    // the size of the partition's log segment shows the codec was used.
    let mut segment_bytes = Vec::new();
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let topic = format!("codec-{codec}");
        kafka.create_topic(&topic, 1);
        let producer = kafka.producer(&[("compression.type", codec)]);
        // Repetitive lines, so every codec has something to compress.
        let sent: Vec<String> = (0..2000)
            .map(|i| format!("{codec} line {i} {}", "x".repeat(100)))
            .collect();
        send_all(&producer, &topic, &sent);
        flush(&producer);
        assert!(producer.context().failed().is_empty(), "{codec}");
        assert_eq!(producer.context().acked(), sent.len(), "{codec}");
        let records = kafka.consume(&topic, Isolation::ReadUncommitted, sent.len(), READ_TIMEOUT);
        assert_eq!(values(&records), sent, "{codec}");
        let segment = kafka
            .dir()
            .join("data")
            .join(format!("{topic}-0"))
            .join("00000000000000000000.log");
        segment_bytes.push((codec, std::fs::metadata(&segment).unwrap().len()));
    }
    let uncompressed = segment_bytes[0].1;
    for &(codec, bytes) in &segment_bytes[1..] {
        assert!(
            bytes * 4 < uncompressed,
            "{codec}: {bytes} bytes on disk against {uncompressed} uncompressed"
        );
    }
}

#[test]
fn read_committed_sees_committed_transactions_and_not_aborted_ones() {
    let Some(kafka) = or_skip(Kafka::start()) else {
        return;
    };
    kafka.create_topic("txn", 1);
    let producer = kafka.producer(&[("transactional.id", "sonde-test-txn")]);
    let t = Duration::from_secs(30);
    producer.init_transactions(t).unwrap();

    let committed = numbered("committed", 100);
    producer.begin_transaction().unwrap();
    send_all(&producer, "txn", &committed);
    producer.commit_transaction(t).unwrap();

    let aborted = numbered("aborted", 100);
    producer.begin_transaction().unwrap();
    send_all(&producer, "txn", &aborted);
    flush(&producer);
    producer.abort_transaction(t).unwrap();

    let committed_again = numbered("after", 10);
    producer.begin_transaction().unwrap();
    send_all(&producer, "txn", &committed_again);
    producer.commit_transaction(t).unwrap();
    assert!(producer.context().failed().is_empty());

    let records = kafka.consume("txn", Isolation::ReadCommitted, 110, READ_TIMEOUT);
    let mut want = committed.clone();
    want.extend(committed_again.iter().cloned());
    assert_eq!(values(&records), want, "read_committed order and content");

    // The aborted records are in the log all the same: a read_uncommitted
    // reader sees all 210.
    let all = kafka.consume("txn", Isolation::ReadUncommitted, 210, READ_TIMEOUT);
    let mut want_all = committed;
    want_all.extend(aborted);
    want_all.extend(committed_again);
    assert_eq!(values(&all), want_all);
}

#[test]
fn committed_records_survive_a_broker_sigkill() {
    let Some(mut kafka) = or_skip(Kafka::start()) else {
        return;
    };
    kafka.create_topic("durable", 2);
    let plain = numbered("plain", 1000);
    kafka.produce("durable", &plain);
    let producer = kafka.producer(&[("transactional.id", "sonde-test-durable")]);
    let t = Duration::from_secs(30);
    producer.init_transactions(t).unwrap();
    let txn = numbered("txn", 1000);
    producer.begin_transaction().unwrap();
    send_all(&producer, "durable", &txn);
    producer.commit_transaction(t).unwrap();
    drop(producer);

    kafka.kill();
    let restarted = std::time::Instant::now();
    kafka.restart();
    eprintln!("Kafka restarted after SIGKILL in {:?}", restarted.elapsed());

    let records = kafka.consume("durable", Isolation::ReadCommitted, 2000, READ_TIMEOUT);
    let mut got = values(&records);
    got.sort();
    let mut want = plain;
    want.extend(txn);
    want.sort();
    assert_eq!(got, want);

    // The restarted broker takes new transactional writes with the same
    // transactional.id (the transaction state log came back too), and a
    // clean stop and start keeps everything.
    let producer = kafka.producer(&[("transactional.id", "sonde-test-durable")]);
    producer.init_transactions(t).unwrap();
    producer.begin_transaction().unwrap();
    send_all(&producer, "durable", &numbered("later", 10));
    producer.commit_transaction(t).unwrap();
    drop(producer);
    kafka.stop();
    kafka.restart();
    let records = kafka.consume("durable", Isolation::ReadCommitted, 2010, READ_TIMEOUT);
    assert_eq!(records.len(), 2010);
}

#[test]
fn cluster_ids_have_kafkas_form_and_never_look_like_an_option() {
    // The ids the broker script formats storage with.
    let out = std::process::Command::new(common::backends::KAFKA_BROKER_SCRIPT)
        .args(["cluster-id", "2000"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 2000, "{text}");
    let ids: std::collections::BTreeSet<&str> = text.lines().collect();
    assert_eq!(ids.len(), 2000, "random ids repeat");
    for id in &ids {
        assert_eq!(id.len(), 22, "{id}");
        assert!(
            id.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
            "{id}"
        );
        assert!(!id.starts_with('-'), "{id}");
        // 16 bytes are 128 bits: the last character carries 2 bits and 4
        // zero bits of padding, so it is one of A, Q, g, w.
        assert!("AQgw".contains(&id[21..]), "{id}");
    }
}

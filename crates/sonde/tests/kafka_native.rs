//! sonde's own Kafka producer (crates/sonde-kafka) against the real
//! broker: batches in every codec are taken and read back by librdkafka's
//! consumer as they were built, offsets follow each other, and what the
//! broker refuses comes back as an error code on a connection that goes
//! on working.
//!
//! Needs the jars `scripts/install-kafka.sh` installs and `java`; without
//! them each test prints why it is skipped, unless `SONDE_REQUIRE_BACKENDS=1`
//! makes that a failure.

mod common;

use std::time::Duration;

use common::backends::{or_skip, Isolation, Kafka};
use sonde_encode::compress::Compression;
use sonde_kafka::client::begin_produce;
use sonde_kafka::{BatchBuilder, Compressor, Connection, Dial, Producer, Transactional};

const TIMEOUT: Duration = Duration::from_secs(30);

/// A record as librdkafka's consumer gives it: key, value, headers.
type Read = (Option<Vec<u8>>, Vec<u8>, Vec<(String, Option<Vec<u8>>)>);

fn connect(kafka: &Kafka) -> Connection {
    Connection::connect(&kafka.bootstrap(), &Dial::plain("sonde-test", TIMEOUT)).unwrap()
}

/// Sends the records of `batch` as one request to `topic`/`partition`
/// (its answer is read with `recv_produce`).
fn send(
    c: &mut Connection,
    (topic, partition): (&str, i32),
    batch: &mut BatchBuilder,
    compressor: &mut Compressor,
    producer: Producer,
) {
    let mut buf = Vec::new();
    let frame = begin_produce(&mut buf, "sonde-test", None, -1, 30_000, topic, partition);
    batch.finish(compressor, producer, &mut buf).unwrap();
    c.send_produce(&mut buf, frame).unwrap();
}

#[test]
fn batches_in_every_codec_are_read_back_by_librdkafka_as_built() {
    let Some(kafka) = or_skip(Kafka::start()) else {
        return;
    };
    kafka.create_topic("native", 2);
    let mut c = connect(&kafka);
    assert!(c.produce_version() >= 3);
    let meta = c.metadata(&["native"], false).unwrap();
    assert_eq!(meta.brokers.len(), 1);
    let topic = &meta.topics[0];
    assert_eq!((topic.name.as_str(), topic.error), ("native", 0));
    assert_eq!(topic.partitions.len(), 2);
    assert!(topic
        .partitions
        .iter()
        .all(|p| p.leader == meta.brokers[0].id));

    let codecs = [
        Compression::None,
        Compression::Gzip { level: 1 },
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd { level: 1 },
    ];
    let mut batch = BatchBuilder::new();
    let mut want: [Vec<Read>; 2] = Default::default();
    let mut sent = Vec::new();
    for (i, codec) in codecs.into_iter().enumerate() {
        let mut compressor = Compressor::new(codec).unwrap();
        for round in 0..2 {
            let partition = (i + round) % 2;
            for n in 0..1000 {
                let value = format!("{codec:?} round {round} line {n:04} {}", "x".repeat(n % 97));
                if n % 100 == 7 {
                    let key = format!("k{n}");
                    batch.push(
                        1_700_000_000_000 + n as i64,
                        Some(key.as_bytes()),
                        value.as_bytes(),
                        &[("host", b"web-1"), ("empty", b"")],
                    );
                    want[partition].push((
                        Some(key.into_bytes()),
                        value.into_bytes(),
                        vec![
                            ("host".into(), Some(b"web-1".to_vec())),
                            ("empty".into(), Some(Vec::new())),
                        ],
                    ));
                } else {
                    batch.push_value(1_700_000_000_000 + n as i64, value.as_bytes());
                    want[partition].push((None, value.into_bytes(), Vec::new()));
                }
            }
            // Several requests in flight on the one connection.
            send(
                &mut c,
                ("native", partition as i32),
                &mut batch,
                &mut compressor,
                Producer::NONE,
            );
            sent.push(partition as i32);
        }
    }
    assert_eq!(c.in_flight(), 10);
    let mut next_offset = [0i64; 2];
    for partition in sent {
        let results = c.recv_produce().unwrap();
        assert_eq!(results.len(), 1);
        let r = &results[0];
        assert_eq!(
            (r.topic.as_str(), r.partition, r.error),
            ("native", partition, 0),
            "{r:?}"
        );
        assert_eq!(r.base_offset, next_offset[partition as usize]);
        next_offset[partition as usize] += 1000;
    }
    let records = kafka.consume("native", Isolation::ReadUncommitted, 10_000, TIMEOUT);
    assert_eq!(records.len(), 10_000);
    for (p, want) in want.iter().enumerate() {
        let got: Vec<Read> = records
            .iter()
            .filter(|r| r.partition == p as i32)
            .map(|r| (r.key.clone(), r.value.clone(), r.headers.clone()))
            .collect();
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert_eq!(g, w);
        }
    }
}

#[test]
fn refusals_come_back_as_error_codes_and_the_connection_goes_on() {
    let Some(kafka) = or_skip(Kafka::start()) else {
        return;
    };
    kafka.create_topic("small", 1);
    let mut c = connect(&kafka);
    let missing = c.metadata(&["absent"], false).unwrap();
    assert_eq!(missing.topics[0].error, 3, "UNKNOWN_TOPIC_OR_PARTITION");

    let mut none = Compressor::new(Compression::None).unwrap();
    let mut batch = BatchBuilder::new();
    let mut send = |c: &mut Connection, partition: i32, lines: usize, bytes: usize| {
        for _ in 0..lines {
            batch.push_value(0, &vec![b'a'; bytes]);
        }
        send(
            c,
            ("small", partition),
            &mut batch,
            &mut none,
            Producer::NONE,
        );
        c.recv_produce().unwrap().remove(0)
    };
    let r = send(&mut c, 5, 1, 10);
    assert_eq!(r.error, 3, "no partition 5: {r:?}");
    // The broker's default max.message.bytes is 1 MiB.
    let r = send(&mut c, 0, 3, 600_000);
    assert_eq!(r.error, 10, "MESSAGE_TOO_LARGE: {r:?}");
    assert!(!sonde_kafka::client::retriable(r.error));
    let r = send(&mut c, 0, 2, 100);
    assert_eq!((r.error, r.base_offset), (0, 0), "{r:?}");
    let records = kafka.consume("small", Isolation::ReadUncommitted, 2, TIMEOUT);
    assert_eq!(records.len(), 2);
}

#[test]
fn an_idempotent_producer_s_batch_sent_twice_is_written_once() {
    let Some(kafka) = or_skip(Kafka::start()) else {
        return;
    };
    kafka.create_topic("idem", 1);
    let mut c = connect(&kafka);
    // The broker may still be loading its producer-id state.
    let (id, epoch) = common::wait_for("a producer id", TIMEOUT, || {
        match c.init_producer_id(None, i32::MAX) {
            Ok(ids) => Some(ids),
            Err(sonde_kafka::Error::Broker { code, .. })
                if sonde_kafka::client::retriable(code) =>
            {
                None
            }
            Err(e) => panic!("{e}"),
        }
    });
    assert!(id >= 0 && epoch >= 0);
    let mut lz4 = Compressor::new(Compression::Lz4).unwrap();
    let mut batch = BatchBuilder::new();
    let mut send = |c: &mut Connection, base_sequence: i32, lines: &[&str]| {
        for l in lines {
            batch.push_value(0, l.as_bytes());
        }
        let producer = Producer {
            id,
            epoch,
            base_sequence,
        };
        send(c, ("idem", 0), &mut batch, &mut lz4, producer);
        c.recv_produce().unwrap().remove(0)
    };
    let first = send(&mut c, 0, &["a", "b", "c"]);
    assert_eq!((first.error, first.base_offset), (0, 0));
    // The same batch again, as after a lost response: not written twice.
    let again = send(&mut c, 0, &["a", "b", "c"]);
    assert!(again.error == 0 || again.error == 46, "{again:?}");
    // A gap in the sequence is refused.
    let gap = send(&mut c, 10, &["z"]);
    assert_eq!(gap.error, 45, "OUT_OF_ORDER_SEQUENCE_NUMBER: {gap:?}");
    let next = send(&mut c, 3, &["d"]);
    assert_eq!((next.error, next.base_offset), (0, 3), "{next:?}");
    let records = kafka.consume("idem", Isolation::ReadUncommitted, 4, TIMEOUT);
    let values: Vec<&[u8]> = records.iter().map(|r| &r.value[..]).collect();
    assert_eq!(values, [&b"a"[..], b"b", b"c", b"d"]);
}

#[test]
fn a_transaction_is_seen_by_read_committed_readers_once_committed_and_never_once_aborted() {
    let Some(kafka) = or_skip(Kafka::start()) else {
        return;
    };
    kafka.create_topic("txn-lines", 2);
    kafka.create_topic("txn-positions", 1);
    let topics = ["txn-lines", "txn-positions"];
    let new = || {
        Transactional::new(
            &[kafka.bootstrap()],
            &topics,
            "sonde-test-txn",
            Duration::from_secs(10),
            TIMEOUT,
            Dial::plain("sonde", TIMEOUT),
        )
    };
    let mut t = new();
    t.init().unwrap();
    assert_eq!(t.cluster().partitions().len(), 2);
    let mut zstd = Compressor::new(Compression::Zstd { level: 1 }).unwrap();
    let mut b = BatchBuilder::transactional();
    let mut put = |t: &mut Transactional, topic: &str, partition: i32, values: &[&str]| {
        for v in values {
            b.push(0, Some(b"k"), v.as_bytes(), &[]);
        }
        t.produce(topic, partition, &mut b, &mut zstd).unwrap();
    };
    t.add_partitions(&[("txn-lines", 1), ("txn-positions", 0)])
        .unwrap();
    put(&mut t, "txn-lines", 1, &["c1", "c2"]);
    put(&mut t, "txn-lines", 1, &["c3"]);
    put(&mut t, "txn-positions", 0, &["at c3"]);
    t.commit().unwrap();
    // Right after a commit the next transaction may find the last one
    // still completing (CONCURRENT_TRANSACTIONS): retried inside.
    t.add_partitions(&[("txn-lines", 0)]).unwrap();
    put(&mut t, "txn-lines", 0, &["aborted"]);
    t.abort().unwrap();
    t.add_partitions(&[("txn-lines", 0)]).unwrap();
    put(&mut t, "txn-lines", 0, &["c4"]);
    t.commit().unwrap();

    let committed = kafka.consume("txn-lines", Isolation::ReadCommitted, 4, TIMEOUT);
    let mut values: Vec<String> = committed
        .iter()
        .map(|r| String::from_utf8(r.value.clone()).unwrap())
        .collect();
    values.sort();
    assert_eq!(values, ["c1", "c2", "c3", "c4"]);
    let all = kafka.consume("txn-lines", Isolation::ReadUncommitted, 5, TIMEOUT);
    assert_eq!(all.len(), 5, "the aborted record is in the log");

    // A second producer with the same id fences the first, and aborts
    // what it left open.
    t.add_partitions(&[("txn-lines", 0)]).unwrap();
    put(&mut t, "txn-lines", 0, &["left open"]);
    let mut second = new();
    second.init().unwrap();
    let mut b2 = BatchBuilder::transactional();
    b2.push_value(0, b"from the first, fenced");
    let fenced = t.produce(
        "txn-lines",
        0,
        &mut b2,
        &mut Compressor::new(Compression::None).unwrap(),
    );
    assert!(fenced.is_err(), "the fenced producer wrote: {fenced:?}");
    assert!(t.commit().is_err());
    let committed = kafka.consume("txn-lines", Isolation::ReadCommitted, 4, TIMEOUT);
    assert_eq!(
        committed.len(),
        4,
        "nothing of the fenced producer is committed"
    );
}

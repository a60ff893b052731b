//! The kafka sink against a real broker (tests/common/backends.rs): lines
//! sent through a log input arrive once each and in order, are
//! acknowledged only once Kafka acknowledged them (a SIGKILLed broker
//! stalls the acknowledgements, never loses a line), in raw and json
//! format and with every compression; with `delivery = "exactly_once"` a
//! real log source's lines are seen once by a `read_committed` reader, the
//! positions committed with them are where the next start resumes, and a
//! transaction never committed stays invisible.
//!
//! Needs the jars `scripts/install-kafka.sh` installs and `java`; without
//! them each test prints why it is skipped, unless `SONDE_REQUIRE_BACKENDS=1`
//! makes that a failure.

mod common;

use std::collections::BTreeMap;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::backends::{or_skip, Isolation, Kafka, KafkaRecord};
use sonde_log_sources::{LogBatch, LogStats, SourceConfig, SourceInfo};
use sonde_logs::{Checkpoints, TailerConfig};
use sonde_runtime::data_dir::{DataDirErrors, What};
use sonde_sinks::registry::{Running, Sink, Start};
use sonde_sinks::sink::{FailReason, SinkStats};

const TIMEOUT: Duration = Duration::from_secs(60);

/// A kafka sink on `kafka` with `extra` keys (the receiver is there
/// because a config needs one; nothing binds it).
fn sink(kafka: &Kafka, extra: &str) -> Sink {
    let text = format!(
        "[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:8125\"\n\
         [[sinks]]\ntype = \"kafka\"\nbrokers = [\"{}\"]\nmax_batch_age = \"5ms\"\n{extra}\n",
        kafka.bootstrap()
    );
    let mut config = sonde::config::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    config.sinks.remove(0)
}

/// Starts `sink` taking the lines of `source`.
fn start(sink: &Sink, source: &SourceInfo) -> (Running, Arc<SinkStats>) {
    let stats = Arc::new(SinkStats::new(sink.name.clone()));
    let mut sites = Vec::new();
    let running = (sink.kind.start)(
        sink,
        &mut Start {
            stats: Arc::clone(&stats),
            exporters: &mut sites,
            sources: std::slice::from_ref(source),
            host: "web-1",
            key: "sinks[0]",
            data_dir: Default::default(),
        },
    )
    .unwrap();
    (running, stats)
}

/// Drops the sink's inputs and waits for its threads.
fn stop(running: Running) {
    drop(running.logs);
    drop(running.windows);
    for t in running.threads {
        t.join().unwrap();
    }
}

fn info(fields: &[(&str, &str)]) -> SourceInfo {
    SourceInfo {
        name: "app".into(),
        host: "web-1".into(),
        fields: fields
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

/// Batch `seq` of `n` lines `{prefix}-{seq}-{i}` of `/var/log/a.log`.
fn batch(
    source: &SourceInfo,
    prefix: &str,
    seq: u64,
    n: usize,
    done: &Sender<u64>,
) -> Arc<LogBatch> {
    let lines: Vec<(String, u64)> = (0..n)
        .map(|i| (format!("{prefix}-{seq}-{i}"), (seq * 1000 + i as u64) * 10))
        .collect();
    let refs: Vec<(&str, u64, &[u8])> = lines
        .iter()
        .map(|(l, o)| ("/var/log/a.log", *o, l.as_bytes()))
        .collect();
    Arc::new(LogBatch::for_test(
        source.clone(),
        seq,
        &refs,
        1,
        done.clone(),
    ))
}

fn expected(prefix: &str, batches: u64, n: usize) -> Vec<String> {
    (0..batches)
        .flat_map(|s| (0..n).map(move |i| format!("{prefix}-{s}-{i}")))
        .collect()
}

/// Waits for `count` acknowledgements; returns the batch numbers in the
/// order they came.
fn acks(done: &Receiver<u64>, count: usize) -> Vec<u64> {
    let deadline = Instant::now() + TIMEOUT;
    let mut got = Vec::new();
    while got.len() < count {
        let left = deadline.saturating_duration_since(Instant::now());
        match done.recv_timeout(left) {
            Ok(seq) => got.push(seq),
            Err(e) => panic!("{} of {count} acknowledgements, then {e}", got.len()),
        }
    }
    got
}

fn values(records: &[KafkaRecord]) -> Vec<String> {
    records
        .iter()
        .map(|r| String::from_utf8(r.value.clone()).unwrap())
        .collect()
}

#[test]
fn at_least_once_lines_arrive_once_each_in_order_with_the_fields_as_headers() {
    let Some(kafka) = or_skip(Kafka::start()) else {
        return;
    };
    kafka.create_topic("lines", 1);
    let source = info(&[("env", "prod"), ("service", "api")]);
    let (running, stats) = start(&sink(&kafka, "topic = \"lines\""), &source);
    assert_eq!(running.logs.len(), 1);
    assert_eq!(running.logs[0].0, "app");
    let input = &running.logs[0].1;
    assert!(input.restored.is_none() && !input.positions);
    let (done, acked) = channel();
    for seq in 0..20 {
        input.tx.send(batch(&source, "l", seq, 100, &done)).unwrap();
    }
    let mut got = acks(&acked, 20);
    got.sort_unstable();
    assert_eq!(got, (0..20).collect::<Vec<_>>());
    stop(running);

    let records = kafka.consume("lines", Isolation::ReadUncommitted, 2000, TIMEOUT);
    assert_eq!(values(&records), expected("l", 20, 100));
    for r in &records {
        assert_eq!(r.key, None);
        assert_eq!(
            r.headers,
            [
                ("env".to_string(), Some(b"prod".to_vec())),
                ("service".to_string(), Some(b"api".to_vec()))
            ]
        );
    }
    use std::sync::atomic::Ordering::Relaxed;
    assert_eq!(stats.records.load(Relaxed), 2000);
    assert_eq!(stats.batches.load(Relaxed), 20);
    assert!(acked.try_recv().is_err(), "a batch acknowledged twice");
}

#[test]
fn a_quota_throttles_the_sink_which_waits_as_asked_and_delivers_every_line() {
    let Some(kafka) = or_skip(Kafka::start()) else {
        return;
    };
    kafka.create_topic("quota", 1);
    // 50 kB/s for the client id sonde's producers give, and 600 kB of
    // lines sent uncompressed: the broker measures a rate over at least
    // its ten-second quota window (60 kB/s and more here) and throttles.
    kafka.set_producer_quota("sonde", 50_000);
    let source = info(&[]);
    let (running, stats) = start(
        &sink(&kafka, "topic = \"quota\"\ncompression = \"none\""),
        &source,
    );
    let (done, acked) = channel();
    let started = Instant::now();
    for seq in 0..30 {
        running.logs[0]
            .1
            .tx
            .send(batch(&source, &"q".repeat(100), seq, 200, &done))
            .unwrap();
    }
    acks(&acked, 30);
    let took = started.elapsed();
    stop(running);
    use std::sync::atomic::Ordering::Relaxed;
    let throttled = Duration::from_millis(stats.throttled_ms.load(Relaxed));
    assert!(throttled > Duration::ZERO, "never throttled in {took:?}");
    // Waiting as asked, no produce request timed out or was retried (a
    // fresh broker's first producer id may still fail once as its
    // coordinator loads: that is not counted here).
    assert_eq!(stats.retries.load(Relaxed), 0);
    for reason in [FailReason::Timeout, FailReason::Connect] {
        assert_eq!(
            stats.failures[reason as usize].load(Relaxed),
            0,
            "{reason:?}"
        );
    }
    eprintln!("600 kB at 50 kB/s: {took:?}, throttled {throttled:?}");
    let records = kafka.consume("quota", Isolation::ReadUncommitted, 6000, TIMEOUT);
    assert_eq!(values(&records), expected(&"q".repeat(100), 30, 200));
}

#[test]
fn json_records_hold_the_line_its_file_offset_host_source_and_fields() {
    let Some(kafka) = or_skip(Kafka::start()) else {
        return;
    };
    kafka.create_topic("json", 1);
    let source = info(&[("env", "prod")]);
    let (running, _) = start(
        &sink(&kafka, "topic = \"json\"\nformat = \"json\""),
        &source,
    );
    let (done, acked) = channel();
    let lines: &[(&str, u64, &[u8])] = &[
        ("/var/log/a.log", 0, b"first \"quoted\""),
        ("/var/log/b.log", 17, b"bad \xff byte"),
    ];
    running.logs[0]
        .1
        .tx
        .send(Arc::new(LogBatch::for_test(source, 0, lines, 1, done)))
        .unwrap();
    acks(&acked, 1);
    stop(running);
    let records = kafka.consume("json", Isolation::ReadUncommitted, 2, TIMEOUT);
    let got: Vec<common::Json> = records
        .iter()
        .map(|r| serde_json::from_slice(&r.value).unwrap())
        .collect();
    assert_eq!(
        got,
        [
            serde_json::json!({"message": "first \"quoted\"", "file": "/var/log/a.log",
                "offset": 0, "host": "web-1", "source": "app", "env": "prod"}),
            serde_json::json!({"message": "bad \u{fffd} byte", "file": "/var/log/b.log",
                "offset": 17, "host": "web-1", "source": "app", "env": "prod"}),
        ]
    );
    assert!(records.iter().all(|r| r.headers.is_empty()));
}

#[test]
fn every_compression_delivers_the_lines() {
    let Some(kafka) = or_skip(Kafka::start()) else {
        return;
    };
    let source = info(&[]);
    for c in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let topic = format!("c-{c}");
        kafka.create_topic(&topic, 1);
        let (running, _) = start(
            &sink(
                &kafka,
                &format!("topic = \"{topic}\"\ncompression = \"{c}\""),
            ),
            &source,
        );
        let (done, acked) = channel();
        for seq in 0..3 {
            running.logs[0]
                .1
                .tx
                .send(batch(&source, c, seq, 500, &done))
                .unwrap();
        }
        acks(&acked, 3);
        stop(running);
        let records = kafka.consume(&topic, Isolation::ReadUncommitted, 1500, TIMEOUT);
        assert_eq!(values(&records), expected(c, 3, 500), "compression {c}");
    }
}

#[test]
fn a_killed_broker_stalls_the_acknowledgements_and_loses_no_line() {
    let Some(mut kafka) = or_skip(Kafka::start()) else {
        return;
    };
    kafka.create_topic("outage", 1);
    let source = info(&[]);
    let (running, _) = start(
        &sink(&kafka, "topic = \"outage\"\nretry_max_backoff = \"500ms\""),
        &source,
    );
    let tx = running.logs[0].1.tx.clone();
    let (done, acked) = channel();
    tx.send(batch(&source, "o", 0, 100, &done)).unwrap();
    assert_eq!(acks(&acked, 1), [0]);

    kafka.kill();
    for seq in 1..10 {
        tx.send(batch(&source, "o", seq, 100, &done)).unwrap();
    }
    // The broker is away: nothing may be acknowledged. Three seconds is
    // many times the 5 ms linger and 500 ms backoff a delivery would need.
    let early = acked.recv_timeout(Duration::from_secs(3));
    assert!(
        early.is_err(),
        "batch {early:?} acknowledged with the broker down"
    );
    kafka.restart();
    let mut got = acks(&acked, 9);
    got.sort_unstable();
    assert_eq!(got, (1..10).collect::<Vec<_>>());
    drop(tx);
    stop(running);

    let records = kafka.consume("outage", Isolation::ReadUncommitted, 1000, TIMEOUT);
    let got = values(&records);
    // At least once: every line, in order once duplicates are set aside
    // (the idempotent producer should leave none).
    let mut seen = std::collections::HashSet::new();
    let firsts: Vec<&String> = got.iter().filter(|v| seen.insert(*v)).collect();
    let want = expected("o", 10, 100);
    assert_eq!(firsts, want.iter().collect::<Vec<_>>());
}

/// The last positions per key in the offsets topic.
fn committed_positions(kafka: &Kafka) -> BTreeMap<String, Checkpoints> {
    kafka
        .consume("sonde-offsets", Isolation::ReadCommitted, 1, TIMEOUT)
        .into_iter()
        .map(|r| {
            (
                String::from_utf8(r.key.unwrap()).unwrap(),
                serde_json::from_slice(&r.value).unwrap(),
            )
        })
        .collect()
}

fn append(path: &std::path::Path, from: usize, to: usize) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    let mut text = String::new();
    for i in from..to {
        text.push_str(&format!("line-{i}\n"));
    }
    f.write_all(text.as_bytes()).unwrap();
}

/// The positions the sink hands its first source, read off the channel
/// and put back on a new one for the source.
fn restored(running: &mut Running) -> Option<sonde_logs::Checkpoints> {
    let input = &mut running.logs[0].1;
    let rx = input
        .restored
        .take()
        .expect("an exactly-once sink hands positions");
    let positions = rx
        .recv_timeout(TIMEOUT)
        .expect("the sink read its positions");
    let (tx, rx) = std::sync::mpsc::channel();
    tx.send(positions.clone()).unwrap();
    input.restored = Some(rx);
    positions
}

fn spawn_source(
    dir: &std::path::Path,
    source: &SourceInfo,
    running: &mut Running,
) -> sonde_log_sources::RunningSource {
    spawn_source_counting(dir, source, running, Arc::default())
}

/// [`spawn_source`], counting failed checkpoint saves into `data_dir`.
fn spawn_source_counting(
    dir: &std::path::Path,
    source: &SourceInfo,
    running: &mut Running,
    data_dir: Arc<DataDirErrors>,
) -> sonde_log_sources::RunningSource {
    let (_, input) = running.logs.remove(0);
    sonde_log_sources::spawn(
        SourceConfig {
            info: source.clone(),
            tailer: TailerConfig::new(vec![format!("{}/*.log", dir.display())]),
            rescan_interval: Duration::from_secs(1),
            checkpoint_dir: dir.join("checkpoints"),
            max_in_flight_bytes: sonde_log_sources::source::MAX_IN_FLIGHT_BYTES,
            tap: Arc::default(),
            data_dir,
        },
        vec![input],
        Arc::new(LogStats::new(source.name.clone())),
    )
    .unwrap()
}

#[test]
fn exactly_once_lines_are_committed_with_their_positions_and_a_restart_resumes_there() {
    let Some(kafka) = or_skip(Kafka::start()) else {
        return;
    };
    kafka.create_topic("eo", 1);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("a.log");
    append(&log, 0, 3000);
    let source = info(&[]);
    let config = sink(&kafka, "topic = \"eo\"\ndelivery = \"exactly_once\"");

    let (mut running, stats) = start(&config, &source);
    assert!(running.logs[0].1.positions);
    assert_eq!(restored(&mut running), None);
    let src = spawn_source(dir.path(), &source, &mut running);
    let records = kafka.consume("eo", Isolation::ReadCommitted, 3000, TIMEOUT);
    let want: Vec<String> = (0..3000).map(|i| format!("line-{i}")).collect();
    assert_eq!(values(&records), want);
    src.stop();
    stop(running);
    assert_eq!(
        stats.records.load(std::sync::atomic::Ordering::Relaxed),
        3000
    );
    let size = std::fs::metadata(&log).unwrap().len();
    let positions = committed_positions(&kafka);
    let mine = &positions["web-1/app"];
    assert_eq!(mine.files.len(), 1);
    assert_eq!(mine.files[0].offset, size, "{mine:?}");

    // Kafka is the source of truth: without the checkpoint file, the next
    // start resumes from the committed positions and sends only new lines.
    std::fs::remove_dir_all(dir.path().join("checkpoints")).unwrap();
    append(&log, 3000, 4000);
    let (mut running, _) = start(&config, &source);
    assert_eq!(restored(&mut running).as_ref(), Some(mine));
    let src = spawn_source(dir.path(), &source, &mut running);
    let records = kafka.consume("eo", Isolation::ReadCommitted, 4000, TIMEOUT);
    let want: Vec<String> = (0..4000).map(|i| format!("line-{i}")).collect();
    assert_eq!(values(&records), want);
    src.stop();
    stop(running);
}

/// The offset the checkpoint file in `dir` saved for `app`'s one file.
fn checkpoint_offset(dir: &std::path::Path) -> Option<u64> {
    let file = sonde_logs::CheckpointFile::new(&dir.join("checkpoints"), "app").unwrap();
    Some(file.load().ok()??.files.first()?.offset)
}

/// Exactly-once does not need `data_dir`: the positions a restart resumes
/// from are committed to Kafka with the lines, so while the checkpoint
/// file cannot be written the sink delivers on (holding delivery would
/// protect nothing), and a restart that finds the checkpoint file behind
/// resumes from Kafka's positions, sending nothing twice.
#[test]
fn exactly_once_delivers_on_while_checkpoints_cannot_be_saved_and_resumes_from_kafka() {
    let Some(kafka) = or_skip(Kafka::start()) else {
        return;
    };
    kafka.create_topic("eo-ro", 1);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("a.log");
    append(&log, 0, 1000);
    let source = info(&[]);
    let config = sink(&kafka, "topic = \"eo-ro\"\ndelivery = \"exactly_once\"");
    let (mut running, _) = start(&config, &source);
    assert_eq!(restored(&mut running), None);
    let errors = Arc::new(DataDirErrors::default());
    let src = spawn_source_counting(dir.path(), &source, &mut running, Arc::clone(&errors));
    kafka.consume("eo-ro", Isolation::ReadCommitted, 1000, TIMEOUT);
    let behind = std::fs::metadata(&log).unwrap().len();
    common::wait_for("the checkpoint at 1000 lines", TIMEOUT, || {
        (checkpoint_offset(dir.path()) == Some(behind)).then_some(())
    });

    // The checkpoints directory set aside and a file put in its place: no
    // save can go through, for root too.
    let checkpoints = dir.path().join("checkpoints");
    let aside = dir.path().join("checkpoints.aside");
    std::fs::rename(&checkpoints, &aside).unwrap();
    std::fs::write(&checkpoints, "not a directory").unwrap();
    append(&log, 1000, 2000);
    let records = kafka.consume("eo-ro", Isolation::ReadCommitted, 2000, TIMEOUT);
    let want: Vec<String> = (0..2000).map(|i| format!("line-{i}")).collect();
    assert_eq!(values(&records), want, "delivered on, once each");
    common::wait_for("failed saves counted", TIMEOUT, || {
        (errors.count(What::Checkpoint) >= 1).then_some(())
    });
    src.stop();
    stop(running);

    // The checkpoint file that comes back is 1000 lines behind Kafka.
    std::fs::remove_file(&checkpoints).unwrap();
    std::fs::rename(&aside, &checkpoints).unwrap();
    assert_eq!(checkpoint_offset(dir.path()), Some(behind));
    append(&log, 2000, 3000);
    let (mut running, _) = start(&config, &source);
    let src = spawn_source(dir.path(), &source, &mut running);
    let records = kafka.consume("eo-ro", Isolation::ReadCommitted, 3000, TIMEOUT);
    let want: Vec<String> = (0..3000).map(|i| format!("line-{i}")).collect();
    assert_eq!(values(&records), want, "nothing sent twice");
    src.stop();
    stop(running);
}

#[test]
fn a_transaction_never_committed_is_invisible_to_read_committed() {
    let Some(kafka) = or_skip(Kafka::start()) else {
        return;
    };
    kafka.create_topic("torn", 1);
    let source = info(&[]);
    let config = sink(&kafka, "topic = \"torn\"\ndelivery = \"exactly_once\"");
    let (running, _) = start(&config, &source);
    let (done, acked) = channel();
    // A batch without positions: its transaction may not end after it.
    running.logs[0]
        .1
        .tx
        .send(batch(&source, "t", 0, 200, &done))
        .unwrap();
    // The records reach the broker inside the open transaction.
    let uncommitted = kafka.consume("torn", Isolation::ReadUncommitted, 200, TIMEOUT);
    assert_eq!(values(&uncommitted), expected("t", 1, 200));
    stop(running);
    assert!(
        acked.try_recv().is_err(),
        "an uncommitted batch was acknowledged"
    );

    // A new instance with the same transactional.id starts clean: nothing
    // of the interrupted transaction is visible, no positions were stored.
    let (mut running, _) = start(&config, &source);
    assert_eq!(restored(&mut running), None);
    stop(running);
    let committed = kafka.consume("torn", Isolation::ReadCommitted, 0, TIMEOUT);
    assert!(committed.is_empty(), "{} records visible", committed.len());
}

#[test]
fn metric_points_arrive_one_record_each_as_json_lines_or_msgpack_maps() {
    let Some(kafka) = or_skip(Kafka::start()) else {
        return;
    };
    kafka.create_topic("points", 1);
    kafka.create_topic("points-mp", 1);
    let udp = common::free_port();
    let agent = common::Agent::start(
        "1s",
        &format!(
            "{}[[sinks]]\ntype = \"kafka\"\nbrokers = [\"{b}\"]\ntopic = \"points\"\nmax_batch_age = \"0s\"\n\
             [[sinks]]\ntype = \"kafka\"\nname = \"kafka-mp\"\nbrokers = [\"{b}\"]\ntopic = \"points-mp\"\n\
             metrics_format = \"msgpack\"\ncompression = \"zstd\"\nmax_batch_age = \"0s\"\n",
            common::statsd_receiver(udp),
            b = kafka.bootstrap()
        ),
    );
    common::udp_send(udp, b"k.a:1|c\nk.b:2.5|g|#dc:x\nk.c:3|c\n");
    common::wait_for("three points in the file sink", TIMEOUT, || {
        (agent.points().len() >= 3).then_some(())
    });
    // A gauge repeats in later windows: stop, then compare everything.
    let mut agent = agent;
    agent.stop();
    let file = agent.points();
    // Exactly the file sink's lines, one record each.
    let records = kafka.consume("points", Isolation::ReadUncommitted, file.len(), TIMEOUT);
    let mut got: Vec<String> = records
        .iter()
        .map(|r| {
            serde_json::from_slice::<common::Json>(&r.value)
                .unwrap()
                .to_string()
        })
        .collect();
    let mut want: Vec<String> = file.iter().map(|p| p.to_string()).collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);

    // msgpack: each record one map with the same fields.
    let records = kafka.consume("points-mp", Isolation::ReadUncommitted, file.len(), TIMEOUT);
    assert_eq!(records.len(), file.len());
    let mut names = Vec::new();
    for r in &records {
        let mut rd = &r.value[..];
        let fields = rmp::decode::read_map_len(&mut rd).unwrap();
        assert_eq!(fields, 4, "{:?}", r.value);
        let mut buf = [0u8; 64];
        assert_eq!(rmp::decode::read_str(&mut rd, &mut buf).unwrap(), "name");
        names.push(
            rmp::decode::read_str(&mut rd, &mut buf)
                .unwrap()
                .to_string(),
        );
    }
    names.sort();
    let mut want: Vec<String> = file
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect();
    want.sort();
    assert_eq!(names, want);
}

#[test]
fn exactly_once_survives_a_killed_broker_without_loss_or_duplicates() {
    let Some(mut kafka) = or_skip(Kafka::start()) else {
        return;
    };
    kafka.create_topic("eo-kill", 1);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("a.log");
    append(&log, 0, 2000);
    let source = info(&[]);
    let config = sink(
        &kafka,
        "topic = \"eo-kill\"\ndelivery = \"exactly_once\"\nretry_max_backoff = \"500ms\"",
    );
    let (mut running, _) = start(&config, &source);
    let src = spawn_source(dir.path(), &source, &mut running);
    kafka.consume("eo-kill", Isolation::ReadCommitted, 2000, TIMEOUT);

    kafka.kill();
    // Lines written while the broker is away wait in the file or in an
    // open transaction; the transaction in flight at the kill is aborted
    // or committed, never both.
    append(&log, 2000, 4000);
    kafka.restart();
    append(&log, 4000, 5000);
    let records = kafka.consume("eo-kill", Isolation::ReadCommitted, 5000, TIMEOUT);
    let want: Vec<String> = (0..5000).map(|i| format!("line-{i}")).collect();
    assert_eq!(values(&records), want);
    src.stop();
    stop(running);
}

/// `len` bytes that do not compress and hold no newline (xorshift).
fn noise(len: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match x as u8 {
                b'\n' => b' ',
                b => b,
            }
        })
        .collect()
}

#[test]
fn a_record_kafka_refuses_is_counted_and_its_batch_still_acknowledged() {
    let Some(kafka) = or_skip(Kafka::start()) else {
        return;
    };
    kafka.create_topic("big", 1);
    let source = info(&[]);
    let (running, stats) = start(&sink(&kafka, "topic = \"big\""), &source);
    let (done, acked) = channel();
    // Over the topic's max.message.bytes (1 MiB) even compressed: the
    // broker refuses the request holding it, the sink sends it in halves
    // until the record is alone, and that one is refused for good.
    let huge = noise(2 << 20);
    let lines: &[(&str, u64, &[u8])] = &[
        ("/var/log/a.log", 0, b"before"),
        ("/var/log/a.log", 7, &huge),
        ("/var/log/a.log", 7 + huge.len() as u64 + 1, b"after"),
    ];
    running.logs[0]
        .1
        .tx
        .send(Arc::new(LogBatch::for_test(source, 0, lines, 1, done)))
        .unwrap();
    assert_eq!(acks(&acked, 1), [0]);
    stop(running);
    use sonde_sinks::sink::SinkDrop;
    use std::sync::atomic::Ordering::Relaxed;
    assert_eq!(
        stats.dropped_records[SinkDrop::Rejected as usize].load(Relaxed),
        1
    );
    assert_eq!(stats.records.load(Relaxed), 2);
    let records = kafka.consume("big", Isolation::ReadUncommitted, 2, TIMEOUT);
    assert_eq!(values(&records), ["before", "after"]);
}

#[test]
fn exactly_once_drops_and_counts_a_refused_record_and_commits_the_rest() {
    let Some(kafka) = or_skip(Kafka::start()) else {
        return;
    };
    // A topic that takes batches of up to 100 kB, after compression.
    kafka.create_topic_with("eo-big", 1, &[("max.message.bytes", "100000")]);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("a.log");
    // Below the source's max_line_bytes (1 MiB), above the topic's
    // max.message.bytes even compressed (bytes that do not compress).
    let big = noise(200_000);
    let mut text = b"line-0\n".to_vec();
    text.extend_from_slice(&big);
    text.extend_from_slice(b"\nline-2\n");
    std::fs::write(&log, text).unwrap();
    let source = info(&[]);
    let config = sink(&kafka, "topic = \"eo-big\"\ndelivery = \"exactly_once\"");
    let (mut running, stats) = start(&config, &source);
    let src = spawn_source(dir.path(), &source, &mut running);
    let records = kafka.consume("eo-big", Isolation::ReadCommitted, 2, TIMEOUT);
    assert_eq!(values(&records), ["line-0", "line-2"]);
    use sonde_sinks::sink::SinkDrop;
    use std::sync::atomic::Ordering::Relaxed;
    common::wait_for("the commit counted", TIMEOUT, || {
        (stats.records.load(Relaxed) == 2).then_some(())
    });
    assert_eq!(
        stats.dropped_records[SinkDrop::Rejected as usize].load(Relaxed),
        1
    );
    src.stop();
    stop(running);
    let size = std::fs::metadata(&log).unwrap().len();
    assert_eq!(
        committed_positions(&kafka)["web-1/app"].files[0].offset,
        size
    );
}

/// Not a check: prints how long 300,000 lines of 150 bytes from one file
/// take to be acknowledged, per delivery mode (run with `--ignored
/// --nocapture`).
#[test]
#[ignore]
fn throughput_probe() {
    let Some(kafka) = or_skip(Kafka::start()) else {
        return;
    };
    // The first round also warms the broker up.
    for (round, delivery) in ["at_least_once", "at_least_once", "exactly_once"]
        .into_iter()
        .enumerate()
    {
        let topic = format!("tp-{round}");
        kafka.create_topic(&topic, 2);
        let dir = tempfile::tempdir().unwrap();
        let filler = "y".repeat(140);
        let mut text = String::new();
        for i in 0..300_000 {
            text.push_str(&format!("{i:08} {filler}\n"));
        }
        std::fs::write(dir.path().join("a.log"), text).unwrap();
        let source = info(&[]);
        let config = sink(
            &kafka,
            &format!("topic = \"{topic}\"\ndelivery = \"{delivery}\""),
        );
        let t = Instant::now();
        let (mut running, stats) = start(&config, &source);
        let src = spawn_source(dir.path(), &source, &mut running);
        common::wait_for("every line acknowledged", Duration::from_secs(300), || {
            (stats.records.load(std::sync::atomic::Ordering::Relaxed) >= 300_000).then_some(())
        });
        eprintln!(
            "round {round}, {delivery}: 300,000 lines acknowledged in {:?}",
            t.elapsed()
        );
        src.stop();
        stop(running);
    }
}

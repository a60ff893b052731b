//! The log writer and the checker against a real Kafka broker: lines
//! written with rename rotation, produced to a topic, are all found; a
//! line left out is reported lost, exactly that one; a line sent twice is
//! reported duplicated and fails `--exactly-once`.
//!
//! The broker is started with `scripts/kafka-broker.sh`: Kafka
//! `SONDE_KAFKA_VERSION` (default 4.1.0), the jars from `SONDE_KAFKA_LIBS`
//! or `target/kafka/libs-VERSION`. Without the jars or
//! Java the test prints why and returns, unless `SONDE_REQUIRE_BACKENDS=1`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use sonde_loadgen::logs::{active_path, parse_line, rotated_path};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

struct Broker {
    dir: tempfile::TempDir,
    port: u16,
}

impl Broker {
    fn start() -> Option<Broker> {
        let version = std::env::var("SONDE_KAFKA_VERSION")
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| "4.1.0".to_string());
        let libs = std::env::var_os("SONDE_KAFKA_LIBS")
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(ROOT).join(format!("target/kafka/libs-{version}")));
        let java = Command::new("java").arg("-version").output().is_ok();
        if !libs.join(format!("kafka_2.13-{version}.jar")).is_file() || !java {
            let why = format!(
                "Kafka is not installed (no kafka_2.13-{version}.jar in {} or no java); \
                 run scripts/install-kafka.sh {version}",
                libs.display()
            );
            assert!(
                std::env::var("SONDE_REQUIRE_BACKENDS").as_deref() != Ok("1"),
                "SONDE_REQUIRE_BACKENDS=1 but {why}"
            );
            eprintln!("SKIPPED: {why}");
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix("sonde-loadgen-kafka-")
            .tempdir()
            .unwrap();
        let port = free_port();
        let controller = loop {
            let p = free_port();
            if p != port {
                break p;
            }
        };
        let status = Command::new(Path::new(ROOT).join("scripts/kafka-broker.sh"))
            .args(["start", &dir.path().display().to_string()])
            .args([port.to_string(), controller.to_string()])
            .env("SONDE_KAFKA_LIBS", &libs)
            .env("SONDE_KAFKA_VERSION", &version)
            .status()
            .unwrap();
        assert!(status.success(), "scripts/kafka-broker.sh start failed");
        Some(Broker { dir, port })
    }

    fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = Command::new(Path::new(ROOT).join("scripts/kafka-broker.sh"))
            .args(["stop", &self.dir.path().display().to_string()])
            .status();
    }
}

fn free_port() -> u16 {
    loop {
        let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = u.local_addr().unwrap().port();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// Every line on disk, oldest generation first, without its newline.
fn lines_on_disk(dir: &Path, files: u32, keep: u32) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for f in 0..files {
        let mut paths: Vec<PathBuf> = (1..=keep).rev().map(|g| rotated_path(dir, f, g)).collect();
        paths.push(active_path(dir, f));
        for p in paths {
            let Ok(bytes) = std::fs::read(&p) else {
                continue;
            };
            out.extend(
                bytes
                    .split(|&b| b == b'\n')
                    .filter(|l| !l.is_empty())
                    .map(<[u8]>::to_vec),
            );
        }
    }
    out
}

/// Produces `values` to `topic` with an idempotent producer and waits until
/// every one is acknowledged.
fn produce(bootstrap: &str, topic: &str, values: &[&[u8]]) {
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .create()
        .unwrap();
    for v in values {
        let mut record = BaseRecord::<(), [u8]>::to(topic).payload(*v);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((
                    rdkafka::error::KafkaError::MessageProduction(
                        rdkafka::types::RDKafkaErrorCode::QueueFull,
                    ),
                    r,
                )) => {
                    record = r;
                    producer.poll(Duration::from_millis(50));
                }
                Err((e, _)) => panic!("producing to {topic}: {e}"),
            }
        }
    }
    producer.flush(Duration::from_secs(60)).unwrap();
    assert_eq!(producer.in_flight_count(), 0);
}

/// Runs the checker on `topic`; `extra` must hold an `--idle` (a check
/// that cannot complete ends after that long without records).
fn check(broker: &Broker, topic: &str, summary: &Path, extra: &[&str]) -> (i32, serde_json::Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_sonde-logcheck"))
        .args(["--brokers", &broker.bootstrap(), "--topic", topic])
        .args(["--expect", &summary.display().to_string()])
        .args(extra)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let verdict: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "checker output is not JSON ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap(), verdict)
}

#[test]
fn the_checker_finds_every_line_and_names_the_one_left_out() {
    let Some(broker) = Broker::start() else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let logs = work.path().join("logs");
    let summary = work.path().join("summary.json");
    // 4 files × 3000 lines × 100 B, rotated every 50 kB: 6 renames each,
    // every generation kept.
    let out = Command::new(env!("CARGO_BIN_EXE_sonde-logwrite"))
        .args(["--dir", &logs.display().to_string(), "--files", "4"])
        .args([
            "--line-bytes",
            "100",
            "--lines",
            "3000",
            "--rotate",
            "rename",
        ])
        .args(["--rotate-bytes", "50000", "--keep", "10"])
        .args([
            "--chunk-bytes",
            "8192",
            "--summary",
            &summary.display().to_string(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let written: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(written["lines"], 12_000);
    assert_eq!(written["files"][2]["rotations"], 6);
    let lines = lines_on_disk(&logs, 4, 10);
    assert_eq!(lines.len(), 12_000);

    // Every line, JSON-wrapped like a shipper with metadata would send it
    // for half of them: nothing lost, nothing duplicated.
    let json: Vec<Vec<u8>> = lines
        .iter()
        .map(|l| {
            serde_json::to_vec(&serde_json::json!({
                "file": "app.log",
                "message": String::from_utf8(l.clone()).unwrap(),
            }))
            .unwrap()
        })
        .collect();
    let all: Vec<&[u8]> = lines
        .iter()
        .zip(&json)
        .enumerate()
        .map(|(i, (raw, j))| if i % 2 == 0 { &raw[..] } else { &j[..] })
        .collect();
    produce(&broker.bootstrap(), "all", &all);
    let (code, v) = check(
        &broker,
        "all",
        &summary,
        &["--idle", "20s", "--exactly-once", "--wait-offsets"],
    );
    assert_eq!(code, 0, "{v:#}");
    // The end offset already held every line when the check started.
    assert!(v["offsets_reached_s"].as_f64().unwrap() < 20.0, "{v:#}");
    assert_eq!(
        (
            v["expected"].as_u64(),
            v["unique"].as_u64(),
            v["lost"].as_u64()
        ),
        (Some(12_000), Some(12_000), Some(0)),
        "{v:#}"
    );
    assert_eq!(v["duplicated"], 0, "{v:#}");
    assert_eq!(v["unparsed"], 0, "{v:#}");
    assert_eq!(v["complete"], true, "{v:#}");

    // All but line 1234 of file 1: exactly that line is lost.
    let missing = lines
        .iter()
        .position(|l| parse_line(l) == Some((1, 1234)))
        .unwrap();
    let but_one: Vec<&[u8]> = lines
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != missing)
        .map(|(_, l)| &l[..])
        .collect();
    produce(&broker.bootstrap(), "but-one", &but_one);
    let (code, v) = check(
        &broker,
        "but-one",
        &summary,
        &["--idle", "3s", "--wait-offsets"],
    );
    assert_eq!(code, 1, "{v:#}");
    // One record short: the end offset never reaches the line count.
    assert_eq!(v["offsets_reached_s"], serde_json::Value::Null, "{v:#}");
    assert_eq!(v["lost"], 1, "{v:#}");
    assert_eq!(
        v["lost_ranges"],
        serde_json::json!([{"file": 1, "from": 1234, "to": 1234}])
    );
    assert_eq!(v["duplicated"], 0, "{v:#}");

    // One line sent twice: counted as duplicated, which only --exactly-once
    // fails on.
    produce(&broker.bootstrap(), "all", &[&lines[7][..]]);
    let (code, v) = check(&broker, "all", &summary, &["--idle", "20s"]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(
        (v["lost"].as_u64(), v["duplicated"].as_u64()),
        (Some(0), Some(1)),
        "{v:#}"
    );
    let (code, v) = check(
        &broker,
        "all",
        &summary,
        &["--idle", "20s", "--exactly-once"],
    );
    assert_eq!(code, 1, "{v:#}");
    assert_eq!(v["duplicated"], 1, "{v:#}");
}

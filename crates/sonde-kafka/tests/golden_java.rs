//! sonde's record batches checked against the Java client's (kafka-clients,
//! from the broker's jars), without a broker: `tools/kafka-golden/
//! KafkaGolden.java`, compiled here with `javac`, reads the batches
//! [`BatchBuilder`] wrote with `MemoryRecords` (CRC and sizes checked by
//! `ensureValid`) and writes batches of its own with `MemoryRecordsBuilder`
//! for [`decode`] to read.
//!
//! Every codec (none, gzip, snappy, lz4, zstd), without a producer id,
//! idempotent and transactional, records with and without keys, empty
//! and null values, headers, and a batch large enough to cross the
//! compressors' blocks: each side must read exactly what the other wrote,
//! and uncompressed batches with the same timestamps and producer fields
//! must be the same bytes.
//!
//! Needs `java`, `javac` (Debian package `openjdk-17-jdk-headless`) and
//! the broker's jars (`$SONDE_KAFKA_LIBS`, else `target/kafka/libs-4.1.0`,
//! where `scripts/install-kafka.sh` puts them); without them each test
//! prints why it is skipped, unless `SONDE_REQUIRE_BACKENDS=1` makes that
//! a failure.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::{json, Value};
use sonde_encode::compress::Compression;
use sonde_kafka::batch::{decode, Decoded, DecodedRecord};
use sonde_kafka::{BatchBuilder, Compressor, Producer};

/// The jars' default directory, as `scripts/install-kafka.sh` fills it.
const KAFKA_LIBS_DEFAULT: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/kafka/libs-4.1.0");

const JAVA_SOURCE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tools/kafka-golden/KafkaGolden.java"
);

/// The Java side: the program compiled once per test binary.
struct Java {
    java: PathBuf,
    classpath: String,
    /// Cargo's scratch directory for this crate's tests: a static is never
    /// dropped, so a temporary directory here would outlive every run.
    dir: PathBuf,
}

/// `name` in `preferred`, else on `PATH`.
fn find_binary(preferred: &str, name: &str) -> Option<PathBuf> {
    if Path::new(preferred).is_file() {
        return Some(preferred.into());
    }
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Compiles the program, or says what is missing.
fn compile() -> Result<Java, String> {
    let libs = std::env::var_os("SONDE_KAFKA_LIBS")
        .map_or_else(|| PathBuf::from(KAFKA_LIBS_DEFAULT), PathBuf::from);
    let clients = libs.join("kafka-clients-4.1.0.jar");
    if !clients.is_file() {
        return Err(format!(
            "the Java client's jars are not installed (looked for {}); install them with \
             scripts/install-kafka.sh and set SONDE_KAFKA_LIBS to the directory it prints",
            clients.display()
        ));
    }
    let missing = |name: &str| {
        format!(
            "{name} is not installed (looked in /usr/bin and on PATH); install the Debian \
             package openjdk-17-jdk-headless"
        )
    };
    let java = find_binary("/usr/bin/java", "java").ok_or_else(|| missing("java"))?;
    let javac = find_binary("/usr/bin/javac", "javac").ok_or_else(|| missing("javac"))?;
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("kafka-golden");
    std::fs::create_dir_all(&dir).unwrap();
    let jars = format!("{}/*", libs.display());
    let out = Command::new(javac)
        .arg("-cp")
        .arg(&jars)
        .arg("-d")
        .arg(&dir)
        .arg(JAVA_SOURCE)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "javac failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(Java {
        java,
        classpath: format!("{jars}:{}", dir.display()),
        dir,
    })
}

/// The compiled program, or `None` (the test returns) when java or the
/// jars are missing and `SONDE_REQUIRE_BACKENDS` is not 1.
fn java() -> Option<&'static Java> {
    static JAVA: OnceLock<Result<Java, String>> = OnceLock::new();
    match JAVA.get_or_init(compile) {
        Ok(j) => Some(j),
        Err(why) if std::env::var("SONDE_REQUIRE_BACKENDS").as_deref() == Ok("1") => {
            panic!("SONDE_REQUIRE_BACKENDS=1 but {why}")
        }
        Err(why) => {
            eprintln!("SKIPPED: {why}");
            None
        }
    }
}

impl Java {
    fn run(&self, mode: &str, input_name: &str, input: &[u8]) -> Vec<u8> {
        let path = self.dir.join(input_name);
        std::fs::write(&path, input).unwrap();
        let out = Command::new(&self.java)
            .args(["-Xmx512m", "-XX:+UseSerialGC", "-cp", &self.classpath])
            .arg("KafkaGolden")
            .arg(mode)
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "KafkaGolden {mode} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// The batches of `bytes` as the Java client reads them: one JSON
    /// object each.
    fn decode(&self, input_name: &str, bytes: &[u8]) -> Vec<Value> {
        let out = self.run("decode", input_name, bytes);
        String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The batches of `cases`, as the Java client writes them,
    /// concatenated.
    fn encode(&self, input_name: &str, cases: &[Case]) -> Vec<u8> {
        let mut spec = String::new();
        for c in cases {
            c.spec(&mut spec);
        }
        self.run("encode", input_name, spec.as_bytes())
    }
}

/// A record of a case: timestamp, key, value (null only for batches the
/// Java client writes: sonde writes none), headers.
#[derive(Clone, Debug)]
struct Rec {
    ts: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Option<Vec<u8>>)>,
}

/// One batch: its codec, producer fields, transactional flag and records.
#[derive(Clone, Debug)]
struct Case {
    name: String,
    codec: Compression,
    producer: Producer,
    transactional: bool,
    /// A transaction marker (commit when true) rather than records; the
    /// Java side only.
    control: Option<bool>,
    records: Vec<Rec>,
}

const CODECS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip { level: 6 },
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd { level: 3 },
];

fn codec_name(c: Compression) -> &'static str {
    match c {
        Compression::None => "none",
        Compression::Gzip { .. } => "gzip",
        Compression::Snappy => "snappy",
        Compression::Lz4 => "lz4",
        Compression::Zstd { .. } => "zstd",
    }
}

fn codec_id(c: Compression) -> i16 {
    CODECS.iter().position(|&k| k == c).unwrap() as i16
}

fn hex(b: &[u8]) -> String {
    b.iter()
        .fold(String::with_capacity(2 * b.len()), |mut s, x| {
            let _ = write!(s, "{x:02x}");
            s
        })
}

fn spec_bytes(b: Option<&[u8]>) -> String {
    b.map_or_else(|| "null".into(), |b| format!("x:{}", hex(b)))
}

fn json_bytes(b: Option<&[u8]>) -> Value {
    b.map_or(Value::Null, |b| Value::String(hex(b)))
}

impl Case {
    fn spec(&self, out: &mut String) {
        let p = self.producer;
        let _ = write!(
            out,
            "batch {} {} {} {} {}",
            codec_name(self.codec),
            p.id,
            p.epoch,
            p.base_sequence,
            u8::from(self.transactional)
        );
        if let Some(commit) = self.control {
            out.push_str(if commit {
                " control commit"
            } else {
                " control abort"
            });
        }
        out.push('\n');
        for r in &self.records {
            let _ = write!(
                out,
                "record {} {} {}",
                r.ts,
                spec_bytes(r.key.as_deref()),
                spec_bytes(r.value.as_deref())
            );
            for (k, v) in &r.headers {
                let _ = write!(
                    out,
                    " {} {}",
                    spec_bytes(Some(k.as_bytes())),
                    spec_bytes(v.as_deref())
                );
            }
            out.push('\n');
        }
    }

    /// Appends the case's batch as sonde writes it to `out`.
    fn build(&self, out: &mut Vec<u8>) {
        let mut b = if self.transactional {
            BatchBuilder::transactional()
        } else {
            BatchBuilder::new()
        };
        for r in &self.records {
            let headers: Vec<(&str, &[u8])> = r
                .headers
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_deref().expect("sonde writes no null")))
                .collect();
            let value = r.value.as_deref().expect("sonde writes no null value");
            b.push(r.ts, r.key.as_deref(), value, &headers);
        }
        let mut c = Compressor::new(self.codec).unwrap();
        b.finish(&mut c, self.producer, out).unwrap();
    }

    fn max_timestamp(&self) -> i64 {
        self.records.iter().map(|r| r.ts).max().unwrap()
    }

    /// The batch as the Java client's decode prints it.
    fn java_json(&self) -> Value {
        let records: Vec<Value> = self
            .records
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let headers: Vec<Value> = r
                    .headers
                    .iter()
                    .map(|(k, v)| json!([hex(k.as_bytes()), json_bytes(v.as_deref())]))
                    .collect();
                json!({
                    "offset": i,
                    "timestamp": r.ts,
                    "key": json_bytes(r.key.as_deref()),
                    "value": json_bytes(r.value.as_deref()),
                    "headers": headers,
                })
            })
            .collect();
        json!({
            "base_offset": 0,
            "last_offset_delta": self.records.len() - 1,
            "magic": 2,
            "partition_leader_epoch": -1,
            "codec": codec_name(self.codec),
            "codec_id": codec_id(self.codec),
            "timestamp_type": "CreateTime",
            "transactional": self.transactional,
            "control": self.control.is_some(),
            "producer_id": self.producer.id,
            "producer_epoch": self.producer.epoch,
            "base_sequence": self.producer.base_sequence,
            "max_timestamp": self.max_timestamp(),
            "count": self.records.len(),
            "records": records,
        })
    }
}

/// Checks the Java client's reading of one batch against the case, the
/// header first, then record by record (a large batch's diff stays
/// readable).
fn assert_java_read(case: &Case, mut got: Value) {
    let mut want = case.java_json();
    let got_records = got.as_object_mut().unwrap().remove("records").unwrap();
    let want_records = want.as_object_mut().unwrap().remove("records").unwrap();
    assert_eq!(got, want, "{}: the batch header", case.name);
    let (got_records, want_records) = (
        got_records.as_array().unwrap(),
        want_records.as_array().unwrap(),
    );
    assert_eq!(
        got_records.len(),
        want_records.len(),
        "{}: records",
        case.name
    );
    for (i, (g, w)) in got_records.iter().zip(want_records).enumerate() {
        assert_eq!(g, w, "{}: record {i}", case.name);
    }
}

/// Checks sonde's reading of one batch the Java client wrote.
fn assert_sonde_read(case: &Case, got: &Decoded) {
    let name = &case.name;
    assert_eq!(got.base_offset, 0, "{name}");
    assert_eq!(
        got.last_offset_delta as usize,
        case.records.len() - 1,
        "{name}"
    );
    assert_eq!(got.codec, codec_id(case.codec), "{name}");
    assert_eq!(got.transactional, case.transactional, "{name}");
    assert_eq!(got.control, case.control.is_some(), "{name}");
    assert_eq!(got.producer, case.producer, "{name}");
    assert_eq!(got.max_timestamp, case.max_timestamp(), "{name}");
    assert_eq!(got.records.len(), case.records.len(), "{name}: records");
    if case.control.is_some() {
        // The marker: key version 0 and type (0 abort, 1 commit); value
        // version 0 and the coordinator epoch (0).
        let commit = i16::from(case.control == Some(true));
        let r = &got.records[0];
        assert_eq!(r.timestamp_ms, case.records[0].ts, "{name}");
        assert_eq!(
            r.key.as_deref(),
            Some(&[0, 0, 0, commit as u8][..]),
            "{name}"
        );
        assert_eq!(r.value, [0u8; 6], "{name}");
        return;
    }
    for (i, (g, w)) in got.records.iter().zip(&case.records).enumerate() {
        let want = DecodedRecord {
            offset_delta: i as i64,
            timestamp_ms: w.ts,
            key: w.key.clone(),
            value: w.value.clone().unwrap_or_default(),
            null_value: w.value.is_none(),
            headers: w.headers.clone(),
        };
        assert_eq!(g, &want, "{name}: record {i}");
    }
}

/// Splits concatenated batches by their length fields.
fn split(mut data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while !data.is_empty() {
        let len = i32::from_be_bytes(data[8..12].try_into().unwrap()) as usize;
        let (batch, rest) = data.split_at(12 + len);
        out.push(batch);
        data = rest;
    }
    out
}

const BASE_TS: i64 = 1_764_300_000_000;

/// Records with and without keys, an empty value, headers (an empty
/// key, a non-ASCII key, several on one record), and timestamps out of
/// order (the second is the batch's largest, the third lies before the
/// first: a negative delta).
fn assorted(nulls: bool) -> Vec<Rec> {
    let mut recs = vec![
        Rec {
            ts: BASE_TS,
            key: Some(b"host-1".to_vec()),
            value: Some(b"cpu.user 12.5".to_vec()),
            headers: vec![("trace".into(), Some(vec![0, 1, 2, 0xff]))],
        },
        Rec {
            ts: BASE_TS + 60_000,
            key: None,
            value: Some(Vec::new()),
            headers: Vec::new(),
        },
        Rec {
            ts: BASE_TS - 1_500,
            key: Some(Vec::new()),
            value: Some("mémoire libre".as_bytes().to_vec()),
            headers: vec![
                ("".into(), Some(Vec::new())),
                ("clé".into(), Some(b"v".to_vec())),
                ("trace".into(), Some(b"again".to_vec())),
            ],
        },
        Rec {
            ts: BASE_TS + 3,
            key: Some(vec![0x80; 200]),
            value: Some(vec![b'x'; 300]),
            headers: Vec::new(),
        },
    ];
    if nulls {
        recs.push(Rec {
            ts: BASE_TS + 4,
            key: Some(b"deleted".to_vec()),
            value: None,
            headers: vec![("gone".into(), None)],
        });
        recs.push(Rec {
            ts: BASE_TS + 5,
            key: None,
            value: None,
            headers: Vec::new(),
        });
    }
    recs
}

/// Enough log lines to cross LZ4's 64 KiB and snappy's 32 KiB blocks, and
/// a value of noise that LZ4 stores uncompressed.
fn large() -> Vec<Rec> {
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let noise: Vec<u8> = (0..150_000)
        .map(|_| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng as u8
        })
        .collect();
    let mut recs: Vec<Rec> = (0..6_000)
        .map(|i| Rec {
            ts: BASE_TS + i / 7,
            key: None,
            value: Some(
                format!("2026-11-28T11:00:{:02} line {i:06} of the log", i % 60).into_bytes(),
            ),
            headers: Vec::new(),
        })
        .collect();
    recs.insert(
        3_000,
        Rec {
            ts: BASE_TS + 500,
            key: Some(b"noise".to_vec()),
            value: Some(noise),
            headers: vec![("kind".into(), Some(b"random".to_vec()))],
        },
    );
    recs
}

const IDEMPOTENT: Producer = Producer {
    id: 4_242,
    epoch: 7,
    base_sequence: 2_147_483_000,
};
const TRANSACTIONAL: Producer = Producer {
    id: 99,
    epoch: 3,
    base_sequence: 12,
};

/// Every codec, without a producer id, idempotent and transactional, for
/// the assorted records and a single one; then a large idempotent batch
/// in every codec. `nulls`: records with null values and null header
/// values too (the Java side writes those; sonde's builder does not).
fn cases(nulls: bool) -> Vec<Case> {
    let mut out = Vec::new();
    let single = vec![Rec {
        ts: 0,
        key: None,
        value: Some(b"v".to_vec()),
        headers: Vec::new(),
    }];
    for codec in CODECS {
        for (kind, producer, transactional) in [
            ("plain", Producer::NONE, false),
            ("idempotent", IDEMPOTENT, false),
            ("transactional", TRANSACTIONAL, true),
        ] {
            for (what, records) in [("assorted", assorted(nulls)), ("single", single.clone())] {
                out.push(Case {
                    name: format!("{} {kind} {what}", codec_name(codec)),
                    codec,
                    producer,
                    transactional,
                    control: None,
                    records,
                });
            }
        }
        out.push(Case {
            name: format!("{} large", codec_name(codec)),
            codec,
            producer: IDEMPOTENT,
            transactional: false,
            control: None,
            records: large(),
        });
    }
    out
}

#[test]
fn the_java_client_reads_sondes_batches_as_built() {
    let Some(java) = java() else {
        return;
    };
    let cases = cases(false);
    let mut bytes = Vec::new();
    for c in &cases {
        c.build(&mut bytes);
    }
    let got = java.decode("sonde.bin", &bytes);
    assert_eq!(got.len(), cases.len(), "batches the Java client read");
    for (case, got) in cases.iter().zip(got) {
        assert_java_read(case, got);
    }
}

#[test]
fn sonde_reads_the_java_clients_batches_as_written() {
    let Some(java) = java() else {
        return;
    };
    let mut cases = cases(true);
    for commit in [true, false] {
        cases.push(Case {
            name: format!("control {}", if commit { "commit" } else { "abort" }),
            codec: Compression::None,
            producer: TRANSACTIONAL,
            transactional: true,
            control: Some(commit),
            records: vec![Rec {
                ts: BASE_TS,
                key: None,
                value: None,
                headers: Vec::new(),
            }],
        });
    }
    let bytes = java.encode("java.spec", &cases);
    let batches = split(&bytes);
    assert_eq!(batches.len(), cases.len(), "batches the Java client wrote");
    for (case, batch) in cases.iter().zip(batches) {
        let got = decode(batch).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        assert_sonde_read(case, &got);
    }
}

#[test]
fn uncompressed_batches_are_the_java_clients_bytes() {
    let Some(java) = java() else {
        return;
    };
    let cases: Vec<Case> = cases(false)
        .into_iter()
        .filter(|c| c.codec == Compression::None)
        .collect();
    let theirs = java.encode("same.spec", &cases);
    let theirs = split(&theirs);
    assert_eq!(theirs.len(), cases.len());
    for (case, theirs) in cases.iter().zip(theirs) {
        let mut ours = Vec::new();
        case.build(&mut ours);
        assert_eq!(ours.len(), theirs.len(), "{}: batch size", case.name);
        if let Some(at) = ours.iter().zip(theirs).position(|(a, b)| a != b) {
            panic!(
                "{}: the batches differ from byte {at}: sonde {:02x?}, Java {:02x?}",
                case.name,
                &ours[at..(at + 16).min(ours.len())],
                &theirs[at..(at + 16).min(theirs.len())],
            );
        }
    }
}

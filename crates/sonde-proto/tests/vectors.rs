//! Runs the cross-language wire vectors in `testdata/vectors/`.
//!
//! Every file is one case: the datagram (`bytes_hex`) must parse to exactly
//! the `points` and `drops` the file lists. For msgpack cases with `emits`,
//! encoding the emits the canonical way must also give exactly `bytes_hex`:
//! that is the check every SDK runs on the same files, so agreeing here
//! keeps the agent and the SDKs on one definition of the wire format.

use serde::Deserialize;
use sonde_proto::{msgpack, statsd, DropReason, Point, PointSink, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Vector {
    name: String,
    emits: Option<Vec<Emit>>,
    /// StatsD only: the datagram as text.
    #[serde(default)]
    text: Option<String>,
    bytes_hex: String,
    points: Vec<VPoint>,
    drops: BTreeMap<String, u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Emit {
    #[serde(rename = "type")]
    kind: String,
    name: String,
    value: String,
    tags: String,
    ts: String,
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct VPoint {
    kind: String,
    name: String,
    tags: String,
    value: VValue,
    sample_rate: f64,
    timestamp: Option<i64>,
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(untagged)]
enum VValue {
    Number(f64),
    Delta { delta: f64 },
    Member { member: String },
}

#[derive(Default)]
struct Collect {
    points: Vec<VPoint>,
    drops: BTreeMap<String, u64>,
    /// Set when a parser produced something a vector cannot express.
    problem: Option<String>,
}

impl PointSink<'_> for Collect {
    fn point(&mut self, p: &Point<'_>) {
        let mut text = |what: &str, b: &[u8]| match std::str::from_utf8(b) {
            Ok(s) => s.to_owned(),
            Err(_) => {
                self.problem = Some(format!("{what} {b:?} is not UTF-8"));
                String::new()
            }
        };
        let name = text("name", p.name);
        let tags = text("tags", p.tags);
        let value = match p.value {
            Value::Number(v) => VValue::Number(v),
            Value::Delta(delta) => VValue::Delta { delta },
            Value::Member(m) => VValue::Member {
                member: text("member", m),
            },
        };
        self.points.push(VPoint {
            kind: p.kind.as_str().to_owned(),
            name,
            tags,
            value,
            sample_rate: p.sample_rate,
            timestamp: p.timestamp,
        });
    }

    fn drop(&mut self, reason: DropReason) {
        *self.drops.entry(reason.as_str().to_owned()).or_default() += 1;
    }
}

/// The encoding every SDK produces: one message is a fixarray of 6; more
/// are an array16 bunch (what metricserver2 SDKs send, even for 2
/// messages); every string takes its smallest str encoding.
fn canonical(emits: &[Emit]) -> Vec<u8> {
    let mut buf = Vec::new();
    if emits.len() > 1 {
        let n = u16::try_from(emits.len()).expect("at most 65535 emits");
        buf.push(0xdc);
        buf.extend_from_slice(&n.to_be_bytes());
    }
    for e in emits {
        rmp::encode::write_array_len(&mut buf, 6).unwrap();
        for field in ["emit", &e.kind, &e.name, &e.value, &e.tags, &e.ts] {
            rmp::encode::write_str(&mut buf, field).unwrap();
        }
    }
    buf
}

fn unhex(hex: &str) -> Result<Vec<u8>, String> {
    if !hex.len().is_multiple_of(2) {
        return Err("bytes_hex has an odd length".into());
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                .ok_or_else(|| format!("bytes_hex is not hex at {i}"))
        })
        .collect()
}

#[derive(Clone, Copy, PartialEq)]
enum Protocol {
    Msgpack,
    Statsd,
}

fn check(path: &Path, protocol: Protocol) -> Result<(), String> {
    let json = std::fs::read_to_string(path).map_err(|e| format!("read: {e}"))?;
    let v: Vector = serde_json::from_str(&json).map_err(|e| format!("bad vector file: {e}"))?;
    if v.name.is_empty() {
        return Err("empty name".into());
    }
    let bytes = unhex(&v.bytes_hex)?;

    match protocol {
        Protocol::Msgpack => {
            if v.text.is_some() {
                return Err("msgpack vectors have no `text`".into());
            }
            if let Some(emits) = &v.emits {
                let encoded = canonical(emits);
                if encoded != bytes {
                    return Err(format!(
                        "canonical encoding of emits differs from bytes_hex\n  emits: {}\n  file:  {}",
                        hex(&encoded),
                        v.bytes_hex
                    ));
                }
            }
        }
        Protocol::Statsd => {
            if v.emits.is_some() {
                return Err("statsd vectors have `emits: null`".into());
            }
            let text = v.text.as_deref().ok_or("statsd vectors need `text`")?;
            if text.as_bytes() != bytes {
                return Err("`text` and `bytes_hex` differ".into());
            }
        }
    }
    for (reason, count) in &v.drops {
        if !DropReason::ALL.iter().any(|r| r.as_str() == reason) || *count == 0 {
            return Err(format!(
                "drops: unknown reason or zero count: {reason:?}: {count}"
            ));
        }
    }

    let mut sink = Collect::default();
    match protocol {
        Protocol::Msgpack => msgpack::parse(&bytes, &mut sink),
        Protocol::Statsd => statsd::parse(&bytes, &mut sink),
    }
    if let Some(problem) = sink.problem {
        return Err(problem);
    }
    if sink.points != v.points {
        return Err(format!(
            "points differ\n  parsed: {:?}\n  file:   {:?}",
            sink.points, v.points
        ));
    }
    if sink.drops != v.drops {
        return Err(format!(
            "drops differ\n  parsed: {:?}\n  file:   {:?}",
            sink.drops, v.drops
        ));
    }
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn is_vector_file_name(name: &str) -> bool {
    let Some(stem) = name.strip_suffix(".json") else {
        return false;
    };
    let (num, short) = stem.split_at(stem.len().min(4));
    num.len() == 4
        && num.bytes().all(|b| b.is_ascii_digit())
        && short.len() > 1
        && short.starts_with('-')
        && short[1..]
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

fn run_dir(dir: &str, protocol: Protocol) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/vectors");
    let dir = root.join(dir);
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read vector directory {}: {e}", dir.display()));
    let mut paths: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).collect();
    paths.sort();
    assert!(!paths.is_empty(), "no vectors in {}", dir.display());

    let mut failures = Vec::new();
    let mut numbers = std::collections::BTreeSet::new();
    for path in &paths {
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        // Anything else in the directory would be silently skipped, so
        // refuse it instead.
        if !is_vector_file_name(&file) {
            failures.push(format!("{file}: not named NNNN-short-name.json"));
            continue;
        }
        if !numbers.insert(file[..4].to_owned()) {
            failures.push(format!("{file}: number used twice"));
        }
        if let Err(e) = check(path, protocol) {
            failures.push(format!("{file}: {e}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} vectors in {} failed:\n{}",
        failures.len(),
        paths.len(),
        dir.display(),
        failures.join("\n")
    );
}

#[test]
fn msgpack_vectors_parse_to_their_points_and_drops() {
    run_dir("msgpack", Protocol::Msgpack);
}

#[test]
fn statsd_vectors_parse_to_their_points_and_drops() {
    run_dir("statsd", Protocol::Statsd);
}

#[test]
fn canonical_encoding_uses_fixarray_for_one_emit_and_array16_for_more() {
    let emit = |name: &str| Emit {
        kind: "counter".into(),
        name: name.into(),
        value: "1".into(),
        tags: String::new(),
        ts: String::new(),
    };
    let one = canonical(&[emit("a")]);
    assert_eq!(hex(&one), "96a4656d6974a7636f756e746572a161a131a0a0");
    let two = canonical(&[emit("a"), emit("b")]);
    assert_eq!(&two[..4], &[0xdc, 0x00, 0x02, 0x96]);
    let long = canonical(&[emit(&"n".repeat(32))]);
    assert_eq!(&long[14..16], &[0xd9, 32], "32-byte name takes str8");
}

#[test]
fn vector_file_names_are_checked() {
    assert!(is_vector_file_name("0001-counter.json"));
    assert!(is_vector_file_name("0123-ts-store-2.json"));
    assert!(!is_vector_file_name("1-counter.json"));
    assert!(!is_vector_file_name("0001-Counter.json"));
    assert!(!is_vector_file_name("0001.json"));
    assert!(!is_vector_file_name("0001-counter.json~"));
    assert!(!is_vector_file_name("README.md"));
}

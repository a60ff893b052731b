//! Properties: the encoders round-trip through an independent decoder.
//! JSON lines through serde_json and msgpack batches through rmpv give back
//! any UTF-8 name and tags (quotes, backslashes, control characters,
//! non-BMP characters, empty values) and any finite value and timestamp
//! exactly; remote-write requests decode with prost to the sanitised name,
//! the tags as labels, and the value at the timestamp in milliseconds.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;
use sonde_aggregate::point::Shape;
use sonde_aggregate::{key, Batch};

#[derive(Debug, Clone)]
struct Pt {
    name: String,
    tags: BTreeMap<String, String>,
    value: f64,
    timestamp: i64,
}

fn finite() -> impl Strategy<Value = f64> {
    prop_oneof![
        prop::num::f64::NORMAL | prop::num::f64::SUBNORMAL | prop::num::f64::ZERO,
        (-1_000_000i64..1_000_000).prop_map(|v| v as f64),
        Just(9_007_199_254_740_993.0),
        Just(f64::MAX),
        Just(f64::MIN_POSITIVE),
    ]
}

fn pt() -> impl Strategy<Value = Pt> {
    (
        "\\PC{1,20}|[\"\\\\\\x00-\\x1f\\u{7f}-\\u{10ffff}]{1,8}",
        prop::collection::btree_map("\\PC{0,8}|[\"\\\\\\n\\t]{1,3}", any::<String>(), 0..5),
        finite(),
        any::<i64>(),
    )
        .prop_map(|(name, tags, value, timestamp)| Pt {
            name,
            tags,
            value,
            timestamp,
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn json_lines_round_trip_through_serde_json(points in prop::collection::vec(pt(), 1..8)) {
        let mut batch = Batch::new(0);
        for p in &points {
            let tags: Vec<(&str, &str)> =
                p.tags.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let k: Arc<[u8]> = key::encode(0, &p.name, &tags).into();
            batch.push(&k, Shape::Plain, None, p.timestamp, [p.value]);
        }
        let mut out = Vec::new();
        sonde_encode::json::encode(batch.points(), &mut out);
        let text = String::from_utf8(out).expect("the encoder writes UTF-8");
        prop_assert!(text.ends_with('\n'));
        let lines: Vec<&str> = text.lines().collect();
        prop_assert_eq!(lines.len(), points.len());
        for (line, p) in lines.iter().zip(&points) {
            let v: serde_json::Value = serde_json::from_str(line)
                .map_err(|e| TestCaseError::fail(format!("{e}: {line}")))?;
            let obj = v.as_object().unwrap();
            prop_assert_eq!(obj.len(), 4);
            prop_assert_eq!(obj["name"].as_str(), Some(p.name.as_str()));
            let tags: BTreeMap<String, String> = obj["tags"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                .collect();
            prop_assert_eq!(&tags, &p.tags);
            prop_assert_eq!(obj["value"].as_f64(), Some(p.value), "{}", line);
            prop_assert_eq!(obj["timestamp"].as_i64(), Some(p.timestamp));
            // Fields in the documented order: name first, timestamp last.
            prop_assert!(line.starts_with("{\"name\":"), "{}", line);
            let ts_suffix = format!(",\"timestamp\":{}}}", p.timestamp);
            prop_assert!(line.ends_with(&ts_suffix), "{}", line);
        }
    }
}

fn batch_of(points: &[Pt]) -> Batch {
    let mut batch = Batch::new(0);
    for p in points {
        let tags: Vec<(&str, &str)> = p
            .tags
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let k: Arc<[u8]> = key::encode(0, &p.name, &tags).into();
        batch.push(&k, Shape::Plain, None, p.timestamp, [p.value]);
    }
    batch
}

fn finish(mut enc: impl sonde_encode::BatchEncoder, batch: &Batch) -> Vec<u8> {
    for p in batch.points() {
        enc.push(&p);
    }
    let mut out = Vec::new();
    enc.finish(&mut out);
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// The http sink's msgpack body decodes (rmpv) to exactly the points.
    #[test]
    fn msgpack_batches_round_trip(points in prop::collection::vec(pt(), 0..8)) {
        let body = finish(sonde_encode::msgpack::Msgpack::new(), &batch_of(&points));
        let v = rmpv::decode::read_value(&mut &body[..]).unwrap();
        let arr = v.as_array().unwrap();
        prop_assert_eq!(arr.len(), points.len());
        for (m, p) in arr.iter().zip(&points) {
            let m = m.as_map().unwrap();
            let get = |k: &str| &m.iter().find(|(key, _)| key.as_str() == Some(k)).unwrap().1;
            prop_assert_eq!(get("name").as_str(), Some(p.name.as_str()));
            let tags: BTreeMap<String, String> = get("tags")
                .as_map()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.as_str().unwrap().to_string(), v.as_str().unwrap().to_string()))
                .collect();
            prop_assert_eq!(&tags, &p.tags);
            prop_assert_eq!(get("value").as_f64(), Some(p.value));
            prop_assert_eq!(get("timestamp").as_i64(), Some(p.timestamp));
        }
    }

    /// The remote-write body decodes to one series per point: the
    /// sanitised name, every tag with a value as a label (when no two keys
    /// sanitise alike), labels sorted, the value at the timestamp in ms.
    #[test]
    fn remote_write_requests_round_trip(points in prop::collection::vec(pt(), 0..8)) {
        use prost::Message;
        use sonde_encode::remote_write::prompb;
        let body = finish(sonde_encode::remote_write::RemoteWrite::new(), &batch_of(&points));
        let req = prompb::WriteRequest::decode(&body[..]).unwrap();
        prop_assert_eq!(req.timeseries.len(), points.len());
        for (ts, p) in req.timeseries.iter().zip(&points) {
            let names: Vec<&str> = ts.labels.iter().map(|l| l.name.as_str()).collect();
            let mut sorted = names.clone();
            sorted.sort_unstable();
            sorted.dedup();
            prop_assert_eq!(&names, &sorted, "labels sorted and unique");
            let mut want = String::new();
            sonde_encode::prometheus::sanitize_name(&p.name, &mut want);
            prop_assert_eq!(&ts.labels.iter().find(|l| l.name == "__name__").unwrap().value, &want);
            let mut by_label = BTreeMap::new();
            let mut collision = false;
            for (k, v) in p.tags.iter().filter(|(_, v)| !v.is_empty()) {
                let mut l = String::new();
                sonde_encode::prometheus::sanitize_label(k, &mut l);
                collision |= by_label.insert(l, v.clone()).is_some();
            }
            if !collision && !by_label.keys().any(|k| k.starts_with("__")) {
                prop_assert_eq!(ts.labels.len(), by_label.len() + 1);
                for (k, v) in &by_label {
                    prop_assert_eq!(&ts.labels.iter().find(|l| &l.name == k).unwrap().value, v);
                }
            }
            prop_assert_eq!(ts.samples.len(), 1);
            prop_assert_eq!(ts.samples[0].value, p.value);
            prop_assert_eq!(ts.samples[0].timestamp, p.timestamp.saturating_mul(1000));
        }
    }
}

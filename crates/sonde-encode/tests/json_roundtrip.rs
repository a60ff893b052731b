//! Property: the JSON lines encoder round-trips through serde_json. Any
//! UTF-8 name and tags (quotes, backslashes, control characters, non-BMP
//! characters, empty values) and any finite value and timestamp come back
//! exactly, one object per line, fields in the documented order.

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

//! A batch of points that an input made itself ([`crate::input`]), with
//! their names and tags in one buffer, as a receiver's worker records
//! them ([`crate::receiver::Ingest::record`]).

use std::ops::Range;

use sonde_proto::{Kind, Point, TagSyntax, Value};

/// A batch of points an input made, with their names and tags in one
/// buffer. Tags are kept in DogStatsD's syntax (`key:value,key:value`),
/// which the shard splits as it splits a StatsD line's.
#[derive(Debug, Default, Clone)]
pub struct Points {
    bytes: Vec<u8>,
    points: Vec<Owned>,
}

#[derive(Debug, Clone)]
struct Owned {
    kind: Kind,
    name: Range<usize>,
    tags: Range<usize>,
    value: f64,
    timestamp: Option<i64>,
}

impl Points {
    /// An empty batch.
    pub fn new() -> Points {
        Points::default()
    }

    /// Adds a point of `kind` named `name` with `tags` (key, value) and
    /// `value`. A key's `:` and `,` and a value's `,` would split the tag
    /// elsewhere, so each becomes `_`; a tag with an empty key is left
    /// out. A value that is not finite, or an empty name, is refused
    /// (false) and not added.
    pub fn push<'t>(
        &mut self,
        kind: Kind,
        name: &str,
        tags: impl IntoIterator<Item = (&'t str, &'t str)>,
        value: f64,
    ) -> bool {
        if !value.is_finite() || name.is_empty() {
            return false;
        }
        let start = self.bytes.len();
        self.bytes.extend_from_slice(name.as_bytes());
        let name = start..self.bytes.len();
        let tags_start = self.bytes.len();
        for (k, v) in tags {
            if k.is_empty() {
                continue;
            }
            if self.bytes.len() > tags_start {
                self.bytes.push(b',');
            }
            self.bytes.extend(
                k.bytes()
                    .map(|b| if b == b':' || b == b',' { b'_' } else { b }),
            );
            self.bytes.push(b':');
            self.bytes
                .extend(v.bytes().map(|b| if b == b',' { b'_' } else { b }));
        }
        self.points.push(Owned {
            kind,
            name,
            tags: tags_start..self.bytes.len(),
            value,
            timestamp: None,
        });
        true
    }

    /// Points added.
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// True when no point was added.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// Empties the batch, keeping its memory.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.points.clear();
    }

    /// Each point, as the shard records it.
    pub fn each<'a>(&'a self, mut f: impl FnMut(&Point<'a>)) {
        for p in &self.points {
            f(&Point {
                kind: p.kind,
                name: &self.bytes[p.name.clone()],
                tags: &self.bytes[p.tags.clone()],
                tag_syntax: TagSyntax::DogStatsd,
                value: Value::Number(p.value),
                sample_rate: 1.0,
                timestamp: p.timestamp,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_keeps_names_tags_and_values_and_refuses_what_cannot_be_a_point() {
        let mut b = Points::new();
        assert!(b.push(
            Kind::Count,
            "system.network.io",
            [("device", "lo"), ("direction", "transmit")],
            1500.0
        ));
        assert!(b.push(
            Kind::Store,
            "odd",
            [("a:b,c", "x,y:z"), ("", "dropped")],
            -2.5
        ));
        assert!(!b.push(Kind::Store, "nan", [], f64::NAN));
        assert!(!b.push(Kind::Store, "", [], 1.0));
        assert_eq!(b.len(), 2);
        let mut got = Vec::new();
        b.each(|p| {
            got.push((
                p.kind,
                String::from_utf8(p.name.to_vec()).unwrap(),
                String::from_utf8(p.tags.to_vec()).unwrap(),
                p.value,
            ));
        });
        assert_eq!(
            got,
            [
                (
                    Kind::Count,
                    "system.network.io".to_string(),
                    "device:lo,direction:transmit".to_string(),
                    Value::Number(1500.0)
                ),
                (
                    Kind::Store,
                    "odd".to_string(),
                    "a_b_c:x_y:z".to_string(),
                    Value::Number(-2.5)
                ),
            ]
        );
        // The tags split back into what was given, as the shard splits
        // them.
        let mut spans = Vec::new();
        sonde_proto::tags::split_scalar(b"a_b_c:x_y:z", TagSyntax::DogStatsd, &mut spans).unwrap();
        assert_eq!(spans.len(), 1);
        b.clear();
        assert!(b.is_empty());
    }
}

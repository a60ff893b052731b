//! The generated point the property tests share.

use sonde_proto::{Kind, Point, TagSyntax, Value};

/// One generated point, owned, in msgpack tag syntax.
#[derive(Clone, Debug)]
pub struct TestPoint {
    pub kind: Kind,
    pub name: &'static str,
    pub tags: &'static str,
    pub value: f64,
    /// A gauge adjustment (`+n`/`-n`) rather than a new value.
    pub delta: bool,
    /// A set's member.
    pub member: &'static str,
    pub sample_rate: f64,
    pub ts: Option<i64>,
}

impl TestPoint {
    /// The point as the parsers hand it to a shard.
    pub fn point(&self) -> Point<'_> {
        let value = match (self.kind, self.delta) {
            (Kind::Set, _) => Value::Member(self.member.as_bytes()),
            (Kind::Gauge, true) => Value::Delta(self.value),
            _ => Value::Number(self.value),
        };
        Point {
            kind: self.kind,
            name: self.name.as_bytes(),
            tags: self.tags.as_bytes(),
            tag_syntax: TagSyntax::Msgpack,
            value,
            sample_rate: self.sample_rate,
            timestamp: self.ts,
        }
    }
}

//! Checks shared by the parser targets: what every point a parser hands
//! out must satisfy, whatever the input.

use sonde_proto::{DropReason, Point, PointSink, Value};

/// Counts callbacks and checks each point against the contract of
/// `sonde_proto::Point`.
pub struct Checked<'a> {
    /// The datagram being parsed: every borrowed slice must lie inside it.
    pub input: &'a [u8],
    pub points: usize,
    pub drops: usize,
}

impl Checked<'_> {
    fn inside(&self, s: &[u8]) -> bool {
        let start = self.input.as_ptr() as usize;
        let end = start + self.input.len();
        let p = s.as_ptr() as usize;
        s.is_empty() || (p >= start && p + s.len() <= end)
    }
}

impl PointSink<'_> for Checked<'_> {
    fn point(&mut self, p: &Point<'_>) {
        self.points += 1;
        assert!(!p.name.is_empty(), "a point with an empty name");
        // Zero-copy: names, tags and members borrow from the datagram.
        assert!(self.inside(p.name), "name not borrowed from the input");
        assert!(self.inside(p.tags), "tags not borrowed from the input");
        match p.value {
            Value::Number(v) | Value::Delta(v) => assert!(v.is_finite(), "non-finite value {v}"),
            Value::Member(m) => assert!(self.inside(m), "member not borrowed from the input"),
        }
        assert!(
            p.sample_rate > 0.0 && p.sample_rate <= 1.0,
            "sample rate {} outside (0, 1]",
            p.sample_rate
        );
    }

    fn drop(&mut self, _reason: DropReason) {
        self.drops += 1;
    }
}

//! The StatsD / DogStatsD parser on arbitrary datagrams: it must not panic,
//! every point must keep the `Point` contract (see common.rs), a datagram
//! with any line that is not blank yields at least one point or one counted
//! drop, and the structural-index parser gives exactly the points and drops
//! of `parse_reference`, and the same event lines, each of which the event
//! parser takes or refuses without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sonde_proto::{DropReason, Point, PointSink};

/// Everything a parser reported, in order, as text: `Point` holds floats,
/// so compare their bits through `Debug` of the whole point.
#[derive(Default, PartialEq, Debug)]
struct Log(Vec<String>);

impl PointSink<'_> for Log {
    fn point(&mut self, p: &Point<'_>) {
        self.0.push(format!("{p:?}"));
    }
    fn drop(&mut self, reason: DropReason) {
        self.0.push(format!("drop {reason:?}"));
    }
    fn event(&mut self, line: &[u8]) {
        let parsed = sonde_proto::statsd::event::parse(line);
        self.0.push(format!("event {parsed:?}"));
    }
}

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let mut sink = common::Checked {
        input: data,
        points: 0,
        drops: 0,
    };
    sonde_proto::statsd::parse(data, &mut sink);
    let (mut fast, mut reference) = (Log::default(), Log::default());
    sonde_proto::statsd::parse(data, &mut fast);
    sonde_proto::statsd::parse_reference(data, &mut reference);
    assert_eq!(fast, reference, "the index parser disagrees with the reference");
    let has_content = data.split(|&b| b == b'\n').any(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        !line.is_empty()
    });
    if has_content {
        assert!(
            sink.points + sink.drops > 0,
            "a line vanished without a drop"
        );
    }
});

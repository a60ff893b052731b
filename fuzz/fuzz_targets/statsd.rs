//! The StatsD / DogStatsD parser on arbitrary datagrams: it must not panic,
//! every point must keep the `Point` contract (see common.rs), and a
//! datagram with any line that is not blank yields at least one point or
//! one counted drop.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let mut sink = common::Checked {
        input: data,
        points: 0,
        drops: 0,
    };
    sonde_proto::statsd::parse(data, &mut sink);
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

//! The msgpack (metricserver2) parser on arbitrary datagrams: it must not
//! panic, every point must keep the `Point` contract (see common.rs), and a
//! non-empty datagram is never silently ignored: it yields at least one
//! point or one counted drop.
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
    sonde_proto::msgpack::parse(data, &mut sink);
    if !data.is_empty() {
        assert!(
            sink.points + sink.drops > 0,
            "a datagram vanished without a drop"
        );
    }
});

//! `tcp`: JSON lines over a persistent TCP connection to `address`.

use sonde_encode::json::Lines;

use crate::descriptor::{Input, Running, Sink, SinkType, Start, Transport};
use crate::net;

/// `type = "tcp"`.
pub static TYPE: SinkType = SinkType {
    name: "tcp",
    accepts: &[Input::Metrics],
    transport: Transport::Tcp,
    // A stream of frames: snappy's block format cannot be streamed.
    compressions: &["none", "zstd", "gzip", "lz4"],
    headers: &[],
    keys: &[],
    check: crate::descriptor::no_own_keys,
    start,
    reloads: true,
    host: None,
};

fn start(s: &Sink, st: &mut Start<'_>) -> anyhow::Result<Running> {
    net::start(s, Lines::default(), st)
}

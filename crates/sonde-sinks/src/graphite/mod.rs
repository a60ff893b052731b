//! `graphite`: Graphite plaintext over TCP to `address`.

use sonde_encode::graphite::Plaintext;

use crate::descriptor::{Input, Running, Sink, SinkType, Start, Transport};
use crate::net;

/// `type = "graphite"`.
pub static TYPE: SinkType = SinkType {
    name: "graphite",
    accepts: &[Input::Metrics],
    transport: Transport::Tcp,
    // carbon reads plain text.
    compressions: &["none"],
    headers: &[],
    keys: &[],
    check: crate::descriptor::no_own_keys,
    start,
    reloads: true,
    host: None,
};

fn start(s: &Sink, st: &mut Start<'_>) -> anyhow::Result<Running> {
    net::start(s, Plaintext::new(), st)
}

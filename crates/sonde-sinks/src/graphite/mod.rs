//! `graphite`: Graphite plaintext over TCP to `address`.

use sonde_encode::graphite::Plaintext;

use crate::net;
use crate::registry::{Input, Running, Sink, SinkType, Start, Transport};

/// `type = "graphite"`.
pub static TYPE: SinkType = SinkType {
    name: "graphite",
    accepts: &[Input::Metrics],
    transport: Transport::Tcp,
    // carbon reads plain text.
    compressions: &["none"],
    headers: &[],
    keys: &[],
    check: crate::registry::no_own_keys,
    start,
    reloads: true,
};

fn start(s: &Sink, st: &mut Start<'_>) -> anyhow::Result<Running> {
    net::start(s, Plaintext::new(), st)
}

//! `console`: human-readable lines on standard output.

use std::sync::Arc;

use sonde_io::sink::{self, Console};

use super::{Input, Running, Sink, SinkType, Start, Transport};

/// `type = "console"`.
pub static TYPE: SinkType = SinkType {
    name: "console",
    accepts: &[Input::Metrics],
    transport: Transport::Local,
    compressions: &[],
    headers: &[],
    keys: &[],
    check: super::no_own_keys,
    start,
    reloads: true,
};

fn start(_: &Sink, st: &mut Start<'_>) -> anyhow::Result<Running> {
    Ok(sink::spawn(Console::default(), Arc::clone(&st.stats))?.into())
}

//! `console`: human-readable lines on standard output: metric points as
//! `TIME NAME{TAGS} VALUE`, log records as their text.

use std::sync::Arc;

mod metrics;

pub use metrics::Console;

use crate::logs::deliver::{self, Text};
use crate::sink;

use crate::descriptor::{Input, Running, Sink, SinkType, Start, Transport};

/// `type = "console"`.
pub static TYPE: SinkType = SinkType {
    name: "console",
    accepts: &[Input::Metrics, Input::Logs],
    transport: Transport::Local,
    compressions: &[],
    headers: &[],
    keys: &[],
    check: crate::descriptor::no_own_keys,
    start,
    reloads: true,
    host: None,
};

fn start(_: &Sink, st: &mut Start<'_>) -> anyhow::Result<Running> {
    let mut running: Running = sink::spawn(Console::default(), Arc::clone(&st.stats))?.into();
    if !st.sources.is_empty() {
        // Standard output's lock is taken per write of whole records, as
        // the metric side takes it per window: the two never interleave
        // inside a line.
        let (tx, thread) =
            deliver::spawn_local(std::io::stdout(), Text::Message, Arc::clone(&st.stats))?;
        running.add_logs(st, &tx, thread);
    }
    Ok(running)
}

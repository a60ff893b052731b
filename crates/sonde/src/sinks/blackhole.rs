//! `blackhole`: takes any input, acknowledges every record at once and
//! counts it; for benchmarks and for trying a log source out.

use std::sync::Arc;

use sonde_io::logs::{self, LogInput};
use sonde_io::sink::{self, Discard};

use super::{no_own_keys, Input, Running, Sink, SinkType, Start, Transport};

/// `type = "blackhole"`: no keys of its own.
pub static TYPE: SinkType = SinkType {
    name: "blackhole",
    accepts: &[Input::Metrics, Input::Logs],
    transport: Transport::Local,
    compressions: &[],
    headers: &[],
    keys: &[],
    check: no_own_keys,
    start,
    reloads: true,
};

fn start(_: &Sink, st: &mut Start<'_>) -> anyhow::Result<Running> {
    let mut running: Running = sink::spawn(Discard, Arc::clone(&st.stats))?.into();
    if !st.sources.is_empty() {
        let (tx, thread) = logs::blackhole::spawn(Arc::clone(&st.stats))?;
        for source in st.sources {
            let input = LogInput {
                tx: tx.clone(),
                restored: None,
                positions: false,
            };
            running.logs.push((source.name.clone(), input));
        }
        running.threads.push(thread);
    }
    Ok(running)
}

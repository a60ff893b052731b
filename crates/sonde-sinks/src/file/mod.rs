//! `file`: JSON lines appended to `path`: one object per metric point
//! (ARCHITECTURE.md's format) and one per log record
//! (`{"message","file","offset","host","source", fields...}`).

use std::path::Path;
use std::sync::Arc;

mod metrics;

pub use metrics::File;

use crate::logs::deliver::{self, Text};
use crate::sink;

use serde::Deserialize;

use crate::descriptor::{Input, NonEmpty, Running, Sink, SinkType, Start, Transport};
use sonde_config::ConfigError;

/// `type = "file"`: `path` (required) is the file.
pub static TYPE: SinkType = SinkType {
    name: "file",
    accepts: &[Input::Metrics, Input::Logs],
    transport: Transport::Local,
    compressions: &[],
    headers: &[],
    keys: &["path"],
    check,
    start,
    reloads: true,
    host: None,
};

/// What to do about a `path` that cannot be opened.
pub const FIX: &str = "make its directory writable by the user sonde runs as, or write a path in a directory it can write";

/// The keys of a file sink.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    /// The file the records are appended to (required).
    path: NonEmpty,
}

const EXAMPLES: &[(&str, &str)] = &[("path", "\"/var/log/sonde/metrics.jsonl\"")];

/// The file a validated sink of this type writes; `None` for a sink of
/// another type.
pub fn path(s: &Sink) -> Option<std::path::PathBuf> {
    if s.kind != &TYPE {
        return None;
    }
    let o: Options = s.typed(EXAMPLES).ok()?;
    Some(o.path.0.into())
}

fn check(s: &mut Sink) -> Result<(), ConfigError> {
    let o: Options = s.typed(EXAMPLES)?;
    s.name = format!("file:{}", Path::new(&*o.path).display());
    Ok(())
}

fn start(s: &Sink, st: &mut Start<'_>) -> anyhow::Result<Running> {
    let o: Options = s.typed(EXAMPLES)?;
    let path = Path::new(&*o.path);
    let cannot_open = |e: std::io::Error| {
        ConfigError::new(
            format!("{}.path", st.key),
            format!("cannot open {}: {e}", path.display()),
            FIX,
        )
    };
    let f = File::open(path).map_err(cannot_open)?;
    let mut running: Running = sink::spawn(f, Arc::clone(&st.stats))?.into();
    if !st.sources.is_empty() {
        // A handle of its own in append mode: each write of whole records
        // lands at the end of the file, after or before the metric side's,
        // never inside one of its lines.
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(cannot_open)?;
        let (tx, thread) = deliver::spawn_local(f, Text::Json, Arc::clone(&st.stats))?;
        running.add_logs(st, &tx, thread);
    }
    Ok(running)
}

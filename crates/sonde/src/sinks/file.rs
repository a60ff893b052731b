//! `file`: JSON lines appended to `path`.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use sonde_io::sink;

use super::{Input, Running, Sink, SinkType, Start, Transport};
use crate::config::ConfigError;

/// `type = "file"`: `path` (required) is the file.
pub static TYPE: SinkType = SinkType {
    name: "file",
    accepts: &[Input::Metrics],
    transport: Transport::Local,
    compressions: &[],
    headers: &[],
    keys: &["path"],
    check,
    start,
    reloads: true,
};

fn check(s: &mut Sink) -> Result<(), ConfigError> {
    let path = s.required("path", "\"/var/log/sonde/metrics.jsonl\"")?;
    s.name = format!("file:{}", Path::new(path).display());
    Ok(())
}

fn start(s: &Sink, st: &mut Start<'_>) -> anyhow::Result<Running> {
    let path = Path::new(s.option("path").unwrap_or_default());
    let f =
        sink::File::open(path).with_context(|| format!("opening file sink {}", path.display()))?;
    Ok(sink::spawn(f, Arc::clone(&st.stats))?.into())
}

//! Sink types that exist only in the config's tests: one that takes
//! metrics and logs (and can take its sources alone), one that takes logs
//! only, so that the checks of `inputs` can be tested on every pairing.

use sonde_config::ConfigError;
use sonde_sinks::registry::{
    no_own_keys, Input, Running, Sink, SinkType, Start, Transport, REGISTRY,
};

/// Takes metrics and logs; `alone = true` makes it take its sources
/// alone, as a transactional delivery would.
pub static BOTH: SinkType = SinkType {
    name: "both",
    accepts: &[Input::Metrics, Input::Logs],
    transport: Transport::Local,
    compressions: &[],
    headers: &[],
    keys: &["alone"],
    check: check_both,
    start,
    reloads: true,
    host: None,
};

/// Takes log lines only.
pub static LOGS_ONLY: SinkType = SinkType {
    name: "logs_only",
    accepts: &[Input::Logs],
    transport: Transport::Local,
    compressions: &[],
    headers: &[],
    keys: &[],
    check: no_own_keys,
    start,
    reloads: true,
    host: None,
};

/// The keys of `both`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct BothOptions {
    #[serde(default)]
    alone: bool,
}

fn check_both(s: &mut Sink) -> Result<(), ConfigError> {
    s.exclusive_logs = s.typed::<BothOptions>(&[("alone", "true")])?.alone;
    Ok(())
}

fn start(_: &Sink, _: &mut Start<'_>) -> anyhow::Result<Running> {
    anyhow::bail!("not started in tests")
}

/// [`REGISTRY`] and these types.
pub fn registry() -> Vec<&'static SinkType> {
    REGISTRY
        .iter()
        .copied()
        .chain([&BOTH, &LOGS_ONLY])
        .collect()
}

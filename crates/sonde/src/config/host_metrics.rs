//! `[host_metrics]`: the host's own metrics, read from /proc and /sys
//! every `interval` (docs/INPUTS.md, "Host metrics").

use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::error::{ConfigError, Source};
use super::units::HumanDuration;

fn yes() -> bool {
    true
}
fn default_interval() -> Spanned<HumanDuration> {
    Spanned::new(0..0, HumanDuration(Duration::from_secs(10)))
}
fn default_top() -> Spanned<u32> {
    Spanned::new(0..0, 10)
}

/// The most processes each top list may hold.
pub const MAX_TOP_PROCESSES: u32 = 1000;

/// `[host_metrics]`. Without the section, or with `enabled = false`, the
/// input is off.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostMetricsSection {
    /// Whether the input runs. Default `true` (the section is there to
    /// turn it on).
    #[serde(default = "yes")]
    pub enabled: bool,
    /// How often the host is read, aligned to the wall clock; 1s to
    /// `agent.interval`. Default `"10s"`.
    #[serde(default = "default_interval")]
    pub interval: Spanned<HumanDuration>,
    /// `system.cpu.time`. Default `true`.
    #[serde(default = "yes")]
    pub cpu: bool,
    /// `system.cpu.load_average.*`. Default `true`.
    #[serde(default = "yes")]
    pub load: bool,
    /// `system.memory.*`. Default `true`.
    #[serde(default = "yes")]
    pub memory: bool,
    /// `system.paging.*` (swap and page faults). Default `true`.
    #[serde(default = "yes")]
    pub paging: bool,
    /// `system.pressure.stall_time` (PSI). Default `true`.
    #[serde(default = "yes")]
    pub pressure: bool,
    /// `system.disk.*`. Default `true`.
    #[serde(default = "yes")]
    pub disk: bool,
    /// `system.filesystem.*`. Default `true`.
    #[serde(default = "yes")]
    pub filesystem: bool,
    /// `system.network.*` per interface. Default `true`.
    #[serde(default = "yes")]
    pub network: bool,
    /// `system.network.connections` by TCP state. Default `false`: the
    /// kernel walks its whole TCP hash table to list the sockets, the
    /// dearest group by far (docs/INPUTS.md, "Cost").
    #[serde(default)]
    pub tcp: bool,
    /// `process.cpu.time` and `process.memory.usage` of the top
    /// processes. Default `true`.
    #[serde(default = "yes")]
    pub processes: bool,
    /// How many processes each top list (by CPU, by memory) holds.
    /// Default 10.
    #[serde(default = "default_top")]
    pub top_processes: Spanned<u32>,
    /// `container.*` per cgroup v2 container. Default `true`.
    #[serde(default = "yes")]
    pub containers: bool,
}

/// A validated `[host_metrics]`.
#[derive(Debug, Clone, PartialEq)]
pub struct HostMetrics {
    /// How often the host is read.
    pub interval: Duration,
    /// What is read.
    pub groups: sonde_host::Groups,
}

/// Validates `[host_metrics]`: `None` when the input is off.
pub(crate) fn check(
    src: Source<'_>,
    section: Option<&HostMetricsSection>,
    agent_interval: Duration,
) -> Result<Option<HostMetrics>, ConfigError> {
    let Some(h) = section.filter(|h| h.enabled) else {
        return Ok(None);
    };
    let interval = h.interval.get_ref().0;
    if interval < Duration::from_secs(1) {
        return Err(src.error(
            h.interval.span(),
            "host_metrics.interval",
            "must be at least 1s",
            "use \"10s\" (the default)",
        ));
    }
    if interval > agent_interval {
        return Err(src.error(
            h.interval.span(),
            "host_metrics.interval",
            format!(
                "is longer than agent.interval ({agent_interval:?}): some windows would have no host metrics"
            ),
            "use at most agent.interval, e.g. \"10s\" (the default)",
        ));
    }
    let top = *h.top_processes.get_ref();
    if top > MAX_TOP_PROCESSES {
        return Err(src.error(
            h.top_processes.span(),
            "host_metrics.top_processes",
            format!("must be at most {MAX_TOP_PROCESSES}"),
            "use 10 (the default); every process's series would cost more than the rest of the host metrics",
        ));
    }
    Ok(Some(HostMetrics {
        interval,
        groups: sonde_host::Groups {
            cpu: h.cpu,
            load: h.load,
            memory: h.memory,
            paging: h.paging,
            pressure: h.pressure,
            disk: h.disk,
            filesystem: h.filesystem,
            network: h.network,
            tcp: h.tcp,
            processes: h.processes,
            containers: h.containers,
            top_processes: top as usize,
        },
    }))
}

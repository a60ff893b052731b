//! `[profiler]`: the host profiler that samples every process's stacks
//! and keeps a profile per period under `data_dir` (docs/PROFILING.md).

use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::error::{ConfigError, Source};
use super::units::{HumanDuration, HumanSize};
use sonde_profile::classes::{Classifier, RuleDef};
use sonde_profile::cost::Prices;
use sonde_sinks::clickhouse::store::FleetStore;

fn yes() -> bool {
    true
}
fn default_frequency() -> Spanned<u32> {
    Spanned::new(0..0, 19)
}
fn default_period() -> Spanned<HumanDuration> {
    Spanned::new(0..0, HumanDuration(Duration::from_secs(60)))
}
fn default_retention() -> Spanned<HumanDuration> {
    Spanned::new(0..0, HumanDuration(Duration::from_secs(24 * 3600)))
}
fn default_max_size() -> Spanned<HumanSize> {
    Spanned::new(0..0, HumanSize(256 << 20))
}

/// `[profiler]`. Without the section the profiler is off.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfilerSection {
    /// Whether the profiler runs. A host without perf-event permission
    /// logs one warning and the agent goes on without it. Default `true`
    /// (the section is there to turn it on).
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Samples per second per CPU, 1 to 1000. Default 19.
    #[serde(default = "default_frequency")]
    pub frequency: Spanned<u32>,
    /// How long each stored profile covers, aligned to the wall clock;
    /// 1s to 1h. Default `"60s"`.
    #[serde(default = "default_period")]
    pub period: Spanned<HumanDuration>,
    /// How long profiles are kept under `{data_dir}/profiles`. Default
    /// `"24h"`.
    #[serde(default = "default_retention")]
    pub retention: Spanned<HumanDuration>,
    /// The most disk the stored profiles may take; the oldest are removed
    /// beyond it. Default `"256MiB"`.
    #[serde(default = "default_max_size")]
    pub max_size: Spanned<HumanSize>,
    /// What one core costs for an hour, with its currency (`"0.048
    /// USD"`); the views add each function's cost. Default unset.
    #[serde(default)]
    pub core_cost_per_hour: Option<Spanned<String>>,
    /// Grams of CO2-equivalent one busy core emits in an hour; the views
    /// add each function's emissions. Default unset.
    #[serde(default)]
    pub co2_grams_per_core_hour: Option<Spanned<f64>>,
    /// `[[profiler.classes]]`: rules that put frames in hot-spot classes,
    /// tried before the shipped ones (docs/PROFILING.md, "What to do
    /// about it").
    #[serde(default)]
    pub classes: Vec<Spanned<RuleDef>>,
    /// A fleet store, `"clickhouse://HOST[:PORT]/DATABASE"`
    /// (`clickhouses://` for HTTPS), that the admin site's `/profiles`
    /// page and `/api/profiles/` read instead of this host's profiles.
    /// The profiler still samples this host and keeps its own store.
    /// Default unset.
    #[serde(default)]
    pub store: Option<Spanned<String>>,
}

/// A validated `[profiler]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Profiler {
    /// Samples per second per CPU.
    pub frequency: u32,
    /// Each stored profile's period.
    pub period: Duration,
    /// How long profiles are kept.
    pub retention: Duration,
    /// The store's size limit in bytes.
    pub max_bytes: u64,
    /// What a core-hour costs and emits, for the views.
    pub prices: Prices,
    /// The config's hot-spot class rules, each checked to compile.
    pub classes: Vec<RuleDef>,
    /// The fleet store the admin site's profiles come from, a URI
    /// [`FleetStore::open`] takes; `None` for this host's own store.
    pub store: Option<String>,
}

/// Validates `[profiler]`: `None` when the profiler is off.
pub(crate) fn check(
    src: Source<'_>,
    section: Option<&ProfilerSection>,
) -> Result<Option<Profiler>, ConfigError> {
    let Some(p) = section.filter(|p| p.enabled) else {
        return Ok(None);
    };
    let frequency = *p.frequency.get_ref();
    if !(1..=sonde_profile::sampler::MAX_FREQUENCY).contains(&frequency) {
        return Err(src.error(
            p.frequency.span(),
            "profiler.frequency",
            "must be between 1 and 1000 samples per second",
            "use 19 (the default, for always-on) or up to 99 for more detail",
        ));
    }
    let period = p.period.get_ref().0;
    if period < Duration::from_secs(1) || period > Duration::from_secs(3600) {
        return Err(src.error(
            p.period.span(),
            "profiler.period",
            "must be between 1s and 1h",
            "use \"60s\" (the default)",
        ));
    }
    let retention = p.retention.get_ref().0;
    if retention < period {
        return Err(src.error(
            p.retention.span(),
            "profiler.retention",
            "is shorter than one period, so nothing would be kept",
            "use at least the period, e.g. \"24h\" (the default)",
        ));
    }
    let max_bytes = p.max_size.get_ref().0;
    if max_bytes < 1 << 20 {
        return Err(src.error(
            p.max_size.span(),
            "profiler.max_size",
            "is under 1MiB",
            "use \"256MiB\" (the default) or at least \"1MiB\"",
        ));
    }
    let core_cost_per_hour = match &p.core_cost_per_hour {
        Some(price) => Some(price.get_ref().parse().map_err(|e: String| {
            src.error(
                price.span(),
                "profiler.core_cost_per_hour",
                &e,
                "write an amount and its currency code, like \"0.048 USD\"",
            )
        })?),
        None => None,
    };
    let co2_grams_per_core_hour = match &p.co2_grams_per_core_hour {
        Some(g) if !(g.get_ref().is_finite() && *g.get_ref() >= 0.0) => {
            return Err(src.error(
                g.span(),
                "profiler.co2_grams_per_core_hour",
                "must be a number of grams, 0 or more",
                "use your provider's figure for the region, such as 20.0",
            ))
        }
        Some(g) => Some(*g.get_ref()),
        None => None,
    };
    for rule in &p.classes {
        if let Err(e) = Classifier::with(std::slice::from_ref(rule.get_ref())) {
            return Err(src.error(
                rule.span(),
                "profiler.classes",
                e.to_string(),
                "write a class name and a `function` or `module` regular expression, like \
                 { class = \"compression\", function = \"^my_codec_\" }",
            ));
        }
    }
    let store = match &p.store {
        Some(uri) => {
            FleetStore::open(uri.get_ref()).map_err(|e| {
                src.error(
                    uri.span(),
                    "profiler.store",
                    e.to_string(),
                    "write clickhouse://HOST:PORT/DATABASE, like \"clickhouse://ch.example:8123/sonde\" (clickhouses:// for HTTPS), or leave it out for this host's profiles",
                )
            })?;
            Some(uri.get_ref().clone())
        }
        None => None,
    };
    Ok(Some(Profiler {
        frequency,
        period,
        retention,
        max_bytes,
        prices: Prices {
            core_cost_per_hour,
            co2_grams_per_core_hour,
        },
        classes: p.classes.iter().map(|r| r.get_ref().clone()).collect(),
        store,
    }))
}

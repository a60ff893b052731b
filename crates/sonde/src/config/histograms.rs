//! `[histograms]`: bucket bounds, with per-prefix overrides.

use serde::Deserialize;
use sonde_aggregate::{Bounds, HistogramBuckets};
use toml::Spanned;

use super::error::{ConfigError, Source};

/// `[[histograms.overrides]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistogramOverride {
    /// Metric names starting with this use `buckets`. Required.
    pub prefix: String,
    /// Upper bounds, strictly increasing. Required.
    pub buckets: Spanned<Vec<f64>>,
}

/// `[histograms]`.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct HistogramSection {
    /// Bucket upper bounds for every histogram. Default:
    /// 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 25 50 100 250 500 1000.
    pub buckets: Option<Spanned<Vec<f64>>>,
    /// Per-prefix bounds; the longest matching prefix wins. Default none.
    #[serde(default)]
    pub overrides: Vec<HistogramOverride>,
}

fn bounds(src: Source<'_>, key: String, b: &Spanned<Vec<f64>>) -> Result<Bounds, ConfigError> {
    let v = b.get_ref();
    if v.is_empty() {
        return Err(src.error(
            b.span(),
            key,
            "no bounds",
            "write at least one bound, like [0.1, 1, 10]",
        ));
    }
    if v.iter().any(|x| !x.is_finite()) || v.windows(2).any(|w| w[0] >= w[1]) {
        return Err(src.error(
            b.span(),
            key,
            "bounds must be finite and strictly increasing",
            "write finite bounds in increasing order (+Inf is added for you)",
        ));
    }
    Ok(Bounds::new(v))
}

/// Validates `[histograms]` into the aggregator's buckets.
pub(crate) fn check(
    src: Source<'_>,
    h: &HistogramSection,
) -> Result<HistogramBuckets, ConfigError> {
    let mut overrides = Vec::new();
    for (i, o) in h.overrides.iter().enumerate() {
        let key = format!("histograms.overrides[{i}].buckets");
        overrides.push((o.prefix.clone(), bounds(src, key, &o.buckets)?));
    }
    let default = match &h.buckets {
        Some(b) => bounds(src, "histograms.buckets".into(), b)?,
        None => Bounds::new(&sonde_aggregate::config::DEFAULT_BUCKETS),
    };
    Ok(HistogramBuckets::new(default, overrides))
}

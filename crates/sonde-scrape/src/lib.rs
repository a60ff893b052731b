//! Scraping Prometheus endpoints: `[[scrape]]` targets read over HTTP on
//! an interval, their text (Prometheus 0.0.4 or OpenMetrics 1.0) parsed
//! into points that go through a metrics input worker
//! ([`sonde_metrics::input::spawn_worker`]) like any receiver's.
//!
//! * [`parse`]: the exposition formats' parser, sync and without I/O.
//! * [`state`]: one target's counters between scrapes, and how each
//!   sample type becomes a point (counters become their increase).
//! * [`scraper`]: the thread that scrapes every target, spread over their
//!   intervals, and adds each target's health series (`up`,
//!   `scrape_duration_seconds`, `scrape_samples_scraped`).
//!
//! ```
//! use sonde_scrape::parse::{MetricType, Parser};
//!
//! let mut names = Vec::new();
//! let body = b"# TYPE reqs counter\nreqs_total{code=\"200\"} 7\n# EOF\n";
//! let summary = Parser::new().parse(body, |s| {
//!     names.push((s.name.to_string(), s.family.ty, s.label("code").map(String::from)));
//! });
//! assert_eq!(names, [("reqs_total".to_string(), MetricType::Counter, Some("200".to_string()))]);
//! assert!(summary.eof);
//! ```
#![deny(missing_docs)]

pub mod parse;
pub mod scraper;
pub mod state;

use std::time::Duration;

/// A validated `[[scrape]]` target.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    /// The endpoint, `http://HOST:PORT/PATH`.
    pub url: String,
    /// Time between two scrapes.
    pub interval: Duration,
    /// The longest a scrape may take, connecting included.
    pub timeout: Duration,
    /// The `job` label.
    pub job: String,
    /// The `instance` label: the URL's `HOST:PORT`.
    pub instance: String,
    /// Labels added to every series, after `job` and `instance`.
    pub labels: Vec<(String, String)>,
    /// The largest body taken; a larger one fails the scrape.
    pub max_body_size: u64,
}

impl Target {
    /// The labels the target adds to each of its points: `job`,
    /// `instance`, then the configured ones.
    pub fn tags(&self) -> impl Iterator<Item = (&str, &str)> + Clone {
        [
            ("job", self.job.as_str()),
            ("instance", self.instance.as_str()),
        ]
        .into_iter()
        .chain(self.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    }

    /// True when the target adds a label named `name`.
    pub fn has_label(&self, name: &str) -> bool {
        name == "job" || name == "instance" || self.labels.iter().any(|(k, _)| k == name)
    }
}

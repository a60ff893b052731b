//! `[[scrape]]`: Prometheus endpoints the agent scrapes (docs/INPUTS.md,
//! "Scraping").

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde::Deserialize;
use sonde_scrape::Target;
use toml::Spanned;

use super::units::{HumanDuration, HumanSize};
use sonde_config::error::{ConfigError, Source};

/// The interval when `interval` is left out.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(15);
/// The longest default `timeout`: one thread scrapes every target, so a
/// target that never answers holds the others back by this much.
pub const DEFAULT_TIMEOUT_MAX: Duration = Duration::from_secs(5);
/// `max_body_size` when left out.
pub const DEFAULT_MAX_BODY_SIZE: u64 = 16 << 20;

/// `[[scrape]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScrapeSection {
    /// The endpoint, `http://HOST:PORT/PATH` (or `https://`). Required.
    pub url: Spanned<String>,
    /// Time between two scrapes. Default `"15s"`.
    pub interval: Option<Spanned<HumanDuration>>,
    /// The longest a scrape may take, connecting included; at most the
    /// interval. Default: 80% of the interval, at most `"5s"`.
    pub timeout: Option<Spanned<HumanDuration>>,
    /// The `job` label of the target's series. Default `"scrape"`.
    pub job: Option<Spanned<String>>,
    /// Labels added to every series of the target. Default none.
    pub labels: Option<Spanned<BTreeMap<String, String>>>,
    /// Scrape a host other than this one (`localhost`, `127.0.0.0/8`,
    /// `::1`). Default `false`: such a target is refused.
    #[serde(default)]
    pub allow_remote: bool,
    /// The largest body taken; a larger one fails the scrape (`up` 0) and
    /// is counted as a drop (`oversized`). Default `"16MiB"`.
    pub max_body_size: Option<Spanned<HumanSize>>,
}

/// The `HOST:PORT` of an `http://` or `https://` URL (the scheme's port
/// when none is written), and whether the host is this one; `Err` says
/// what is wrong.
fn authority(url: &str) -> Result<(String, bool), &'static str> {
    let (rest, port) = if let Some(r) = url.strip_prefix("http://") {
        (r, 80)
    } else if let Some(r) = url.strip_prefix("https://") {
        (r, 443)
    } else {
        return Err("the URL is not http:// or https://");
    };
    let auth = rest.split(['/', '?', '#']).next().unwrap_or("");
    if auth.contains('@') {
        return Err("the URL has user information, which a scrape does not send");
    }
    let (host, port_text) = if let Some(v6) = auth.strip_prefix('[') {
        let (h, after) = v6.split_once(']').ok_or("the URL's IPv6 host has no `]`")?;
        (h, after.strip_prefix(':'))
    } else {
        match auth.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (auth, None),
        }
    };
    if host.is_empty() {
        return Err("the URL has no host");
    }
    let port: u16 = match port_text {
        None => port,
        Some(p) => p
            .parse()
            .ok()
            .filter(|p| *p > 0)
            .ok_or("the URL's port is not 1 to 65535")?,
    };
    let local = host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(sonde_config::is_loopback);
    let instance = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    Ok((instance, local))
}

fn label_name_ok(name: &str) -> bool {
    let mut b = name.bytes();
    b.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// Validates the targets: URLs on this host (unless `allow_remote`),
/// timeouts within intervals, label names Prometheus takes, no target
/// twice.
pub(crate) fn check(
    src: Source<'_>,
    sections: &[Spanned<ScrapeSection>],
) -> Result<Vec<Target>, ConfigError> {
    let mut seen: HashMap<(String, String), usize> = HashMap::new();
    let mut targets = Vec::new();
    for (i, s) in sections.iter().enumerate() {
        let s = s.get_ref();
        let key = |k: &str| format!("scrape[{i}].{k}");
        let url = s.url.get_ref().trim().to_string();
        let (instance, local) = authority(&url).map_err(|problem| {
            src.error(
                s.url.span(),
                key("url"),
                format!("{url:?}: {problem}"),
                "write it like url = \"http://127.0.0.1:9100/metrics\"",
            )
        })?;
        if !local && !s.allow_remote {
            return Err(src.error(
                s.url.span(),
                key("url"),
                format!("{instance} is not this host: the agent would scrape another host"),
                "scrape 127.0.0.1, ::1 or localhost, or set `allow_remote = true` in this [[scrape]] to allow it",
            ));
        }
        let interval = s
            .interval
            .as_ref()
            .map_or(DEFAULT_INTERVAL, |d| d.get_ref().0);
        if interval < Duration::from_millis(100) {
            let span = s.interval.as_ref().map_or(s.url.span(), Spanned::span);
            return Err(src.error(
                span,
                key("interval"),
                format!("{interval:?} is shorter than 100ms"),
                "write an interval of 100ms or more, like \"15s\"",
            ));
        }
        let timeout = match &s.timeout {
            None => (interval * 4 / 5).min(DEFAULT_TIMEOUT_MAX),
            Some(t) => {
                let t_value = t.get_ref().0;
                if t_value.is_zero() || t_value > interval {
                    return Err(src.error(
                        t.span(),
                        key("timeout"),
                        format!("{t_value:?} is not above 0 and at most the interval ({interval:?})"),
                        "write a timeout shorter than `interval`, or leave it out (80% of the interval, at most 5s)",
                    ));
                }
                t_value
            }
        };
        let job = s
            .job
            .as_ref()
            .map_or_else(|| "scrape".to_string(), |j| j.get_ref().clone());
        if job.is_empty() {
            let span = s.job.as_ref().map_or(s.url.span(), Spanned::span);
            return Err(src.error(
                span,
                key("job"),
                "the job is empty",
                "write a name, like job = \"node\", or leave it out (\"scrape\")",
            ));
        }
        let mut labels = Vec::new();
        if let Some(l) = &s.labels {
            for (name, value) in l.get_ref() {
                if !label_name_ok(name) || name.starts_with("__") {
                    return Err(src.error(
                        l.span(),
                        format!("scrape[{i}].labels.{name}"),
                        format!("{name:?} is not a Prometheus label name"),
                        "use letters, digits and `_`, not starting with a digit or `__`",
                    ));
                }
                if name == "job" || name == "instance" {
                    return Err(src.error(
                        l.span(),
                        format!("scrape[{i}].labels.{name}"),
                        format!("`{name}` is set by the target itself"),
                        if name == "job" {
                            "set `job` in the [[scrape]] table instead"
                        } else {
                            "remove it: `instance` is the URL's HOST:PORT"
                        },
                    ));
                }
                labels.push((name.clone(), value.clone()));
            }
        }
        let max_body_size = match &s.max_body_size {
            None => DEFAULT_MAX_BODY_SIZE,
            Some(m) if m.get_ref().0 == 0 => {
                return Err(src.error(
                    m.span(),
                    key("max_body_size"),
                    "0 bytes would fail every scrape",
                    "write a size like \"16MiB\", or leave it out",
                ));
            }
            Some(m) => m.get_ref().0,
        };
        let line = src.line_of(s.url.span().start);
        if let Some(first) = seen.insert((url.clone(), job.clone()), line) {
            return Err(src.error(
                s.url.span(),
                key("url"),
                format!("{url} with job {job:?} is already scraped on line {first}"),
                "remove one, or give them different `job`s",
            ));
        }
        targets.push(Target {
            url,
            interval,
            timeout,
            job,
            instance,
            labels,
            max_body_size,
        });
    }
    Ok(targets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_authority_is_found_with_the_schemes_port_and_loopback_known() {
        assert_eq!(
            authority("http://127.0.0.1:9100/metrics"),
            Ok(("127.0.0.1:9100".into(), true))
        );
        assert_eq!(
            authority("http://localhost/m"),
            Ok(("localhost:80".into(), true))
        );
        assert_eq!(authority("https://[::1]/m"), Ok(("[::1]:443".into(), true)));
        assert_eq!(
            authority("http://10.0.0.1:9100"),
            Ok(("10.0.0.1:9100".into(), false))
        );
        assert_eq!(
            authority("http://db.example:9187/"),
            Ok(("db.example:9187".into(), false))
        );
        assert!(authority("ftp://127.0.0.1/").is_err());
        assert!(authority("http://127.0.0.1:0/").is_err());
        assert!(authority("http:///metrics").is_err());
        assert!(authority("http://u:p@127.0.0.1/").is_err());
    }
}

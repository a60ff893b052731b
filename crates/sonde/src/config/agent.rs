//! `[agent]`: the window, the admin listener, limits and priorities.

use std::path::PathBuf;
use std::time::Duration;

use serde::de::{self, Deserializer};
use serde::Deserialize;
use toml::Spanned;

use super::error::{ConfigError, Source};
use super::units::{HostPort, HumanDuration, HumanSize};

fn default_interval() -> Spanned<HumanDuration> {
    Spanned::new(0..0, HumanDuration(Duration::from_secs(30)))
}
fn default_admin() -> Spanned<Option<HostPort>> {
    Spanned::new(0..0, Some(HostPort(([127, 0, 0, 1], 8686).into())))
}
fn default_data_dir() -> PathBuf {
    PathBuf::from("/var/lib/sonde")
}
fn default_expire() -> Spanned<u32> {
    Spanned::new(0..0, 5)
}
fn default_max_series() -> Spanned<usize> {
    Spanned::new(0..0, sonde_aggregate::config::DEFAULT_MAX_SERIES)
}
fn default_background_nice() -> Spanned<i64> {
    Spanned::new(0..0, i64::from(sonde_io::priority::DEFAULT_BACKGROUND_NICE))
}

/// `[agent]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSection {
    /// The aggregation window, aligned to the wall clock. Default `"30s"`.
    #[serde(default = "default_interval")]
    pub interval: Spanned<HumanDuration>,
    /// Address of `/health` and `/metrics`; `""` turns it off. Default
    /// `"127.0.0.1:8686"`.
    #[serde(default = "default_admin", deserialize_with = "admin_listen")]
    pub admin_listen: Spanned<Option<HostPort>>,
    /// Where disk buffers live (`buffers/{sink name}/`). Default
    /// `"/var/lib/sonde"`.
    #[serde(default = "default_data_dir")]
    pub data_dir: PathBuf,
    /// Windows without data after which a series is forgotten. Default 5.
    #[serde(default = "default_expire")]
    pub expire_windows: Spanned<u32>,
    /// The most live series the receive workers hold together; points for
    /// new series beyond it are dropped (reason `series_limit`) and the
    /// series already live keep their data. Default 250000 (about 90 MiB
    /// peak RSS with three tags a series).
    #[serde(default = "default_max_series")]
    pub max_series: Spanned<usize>,
    /// The most live series one metric name may have in one receive worker;
    /// beyond it, points for its new series are dropped (reason
    /// `metric_series_limit`). Default: no limit.
    pub max_series_per_metric: Option<Spanned<u32>>,
    /// Lets receivers, `admin_listen` and Prometheus exporters listen on
    /// addresses other than loopback (`127.0.0.0/8`, `::1`), where other
    /// hosts can reach them. Default `false`: such a config is refused.
    #[serde(default)]
    pub allow_non_loopback: bool,
    /// The longest name plus tag string (as sent) of a new series; points
    /// of longer ones are dropped (reason `key_too_long`). Default `"4KiB"`.
    pub max_key_size: Option<Spanned<HumanSize>>,
    /// How much nicer (lower in priority) than the receive threads the
    /// flusher, sink and HTTP threads run, 0 to 19, so that flushing a
    /// window never takes the CPU from receiving when they share a core;
    /// 0 runs every thread alike. Default 10.
    #[serde(default = "default_background_nice")]
    pub background_nice: Spanned<i64>,
    /// Who may read the admin site: `"token"`, only requests that carry
    /// the token in [`AgentSection::admin_token_file`] (everything but
    /// `/health`, which probes read); `"none"`, every client that reaches
    /// the address. Default `"none"`; the packaged config and the
    /// DaemonSet set `"token"`.
    #[serde(default)]
    pub admin_auth: AdminAuth,
    /// The file holding the admin token, made at the first start with
    /// mode 0640 (the agent's user, and [`AgentSection::admin_token_group`]
    /// if set). Default `"{data_dir}/admin.token"`.
    pub admin_token_file: Option<PathBuf>,
    /// A group given the admin token file, whose members may read it (and
    /// so the admin site). Default: the agent's own group.
    pub admin_token_group: Option<Spanned<String>>,
    /// HTTPS for the admin site: its certificate and key files. A
    /// non-loopback `admin_listen` needs it, with `admin_auth = "token"`.
    /// Default: none, plain HTTP.
    pub admin_tls: Option<AdminTls>,
    /// The host name that log records carry (`host` in a json record) and
    /// that names the Kafka sink's `transactional.id` and stored positions
    /// with `delivery = "exactly_once"`, which must be unique per agent.
    /// Default: the machine's host name.
    pub hostname: Option<Spanned<String>>,
}

/// `agent.admin_auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AdminAuth {
    /// Every client that reaches the admin address reads everything.
    #[default]
    None,
    /// Every request but `/health` carries the admin token.
    Token,
}

/// `agent.admin_tls`: `{ cert_file = "...", key_file = "..." }`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminTls {
    /// The site's certificate, then any intermediates, in PEM. It must
    /// name the address clients connect to (an IP address as an IP SAN).
    /// Required.
    pub cert_file: Spanned<PathBuf>,
    /// The private key of the first certificate, in PEM (PKCS#8, PKCS#1
    /// or SEC1). Required.
    pub key_file: Spanned<PathBuf>,
    /// The CA certificates, in PEM, that `sonde admin-url`, `sonde top`
    /// and `sonde tap` trust for this site; the agent does not read it.
    /// Default: the system's CA bundle and `cert_file`'s own
    /// certificates, so that a self-signed certificate, or a chain that
    /// holds its issuer, needs nothing more.
    pub ca_file: Option<Spanned<PathBuf>>,
}

/// `admin_listen = ""` turns the admin listener off.
fn admin_listen<'de, D: Deserializer<'de>>(d: D) -> Result<Spanned<Option<HostPort>>, D::Error> {
    let s = Spanned::<String>::deserialize(d)?;
    let span = s.span();
    let s = s.into_inner();
    if s.is_empty() {
        return Ok(Spanned::new(span, None));
    }
    HostPort::deserialize(de::value::StrDeserializer::<de::value::Error>::new(&s))
        .map(|h| Spanned::new(span, Some(h)))
        .map_err(de::Error::custom)
}

impl Default for AgentSection {
    fn default() -> Self {
        AgentSection {
            interval: default_interval(),
            admin_listen: default_admin(),
            data_dir: default_data_dir(),
            expire_windows: default_expire(),
            max_series: default_max_series(),
            max_series_per_metric: None,
            allow_non_loopback: false,
            max_key_size: None,
            background_nice: default_background_nice(),
            admin_auth: AdminAuth::None,
            admin_token_file: None,
            admin_token_group: None,
            admin_tls: None,
            hostname: None,
        }
    }
}

impl AgentSection {
    /// The address of `/health` and `/metrics`, if on.
    pub fn admin(&self) -> Option<std::net::SocketAddr> {
        self.admin_listen.get_ref().map(|h| h.0)
    }

    /// The admin site's scheme: `https` with `admin_tls`, else `http`.
    pub fn admin_scheme(&self) -> &'static str {
        if self.admin_tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// Where the admin token lives (`admin_token_file`, else
    /// `{data_dir}/admin.token`).
    pub fn admin_token_file(&self) -> PathBuf {
        self.admin_token_file
            .clone()
            .unwrap_or_else(|| self.data_dir.join("admin.token"))
    }
}

/// Checks `[agent]`'s values; returns the largest series key in bytes.
pub(crate) fn check(src: Source<'_>, agent: &AgentSection) -> Result<usize, ConfigError> {
    if let Some(h) = &agent.hostname {
        let name = h.get_ref();
        if name.is_empty()
            || name.len() > 253
            || name.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(src.error(
                h.span(),
                "agent.hostname",
                format!("{name:?} cannot name a host"),
                "write 1 to 253 characters without spaces, or remove the key for the machine's host name",
            ));
        }
    }
    let interval = agent.interval.get_ref().0;
    if interval < Duration::from_millis(100) || interval > Duration::from_secs(86_400) {
        return Err(src.error(
            agent.interval.span(),
            "agent.interval",
            format!("{interval:?} is out of range"),
            "write a duration between \"100ms\" and \"24h\"",
        ));
    }
    if *agent.expire_windows.get_ref() == 0 {
        return Err(src.error(
            agent.expire_windows.span(),
            "agent.expire_windows",
            "0 would forget every series at once",
            "write 1 or more",
        ));
    }
    if *agent.max_series.get_ref() == 0 {
        return Err(src.error(
            agent.max_series.span(),
            "agent.max_series",
            "0 would drop every point",
            "write at least 1",
        ));
    }
    if let Some(m) = &agent.max_series_per_metric {
        if *m.get_ref() == 0 {
            return Err(src.error(
                m.span(),
                "agent.max_series_per_metric",
                "0 would drop every point",
                "write at least 1, or leave it out for no limit",
            ));
        }
    }
    let mut max_key_bytes = sonde_aggregate::config::DEFAULT_MAX_KEY_BYTES;
    if let Some(m) = &agent.max_key_size {
        max_key_bytes = usize::try_from(m.get_ref().0).unwrap_or(usize::MAX);
        if !(16..=(64 << 10)).contains(&max_key_bytes) {
            return Err(src.error(
                m.span(),
                "agent.max_key_size",
                format!("{max_key_bytes} bytes is out of range"),
                "write a size between \"16B\" and \"64KiB\"",
            ));
        }
    }
    if !(0..=19).contains(agent.background_nice.get_ref()) {
        return Err(src.error(
            agent.background_nice.span(),
            "agent.background_nice",
            format!("{} is not a nice value", agent.background_nice.get_ref()),
            "write a number between 0 (same priority as receiving) and 19 (lowest)",
        ));
    }
    Ok(max_key_bytes)
}

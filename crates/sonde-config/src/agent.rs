//! `[agent]`: the window, the admin listener, limits and priorities.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{self, Deserializer};
use serde::Deserialize;
use toml::Spanned;

use crate::error::{ConfigError, Source};
use crate::units::{HostPort, HumanDuration, HumanSize};

fn default_interval() -> Spanned<HumanDuration> {
    Spanned::new(0..0, HumanDuration(Duration::from_secs(30)))
}
fn default_admin() -> Spanned<Option<AdminListen>> {
    Spanned::new(0..0, Some(AdminListen::Tcp(([127, 0, 0, 1], 8686).into())))
}

/// Permission bits of the admin site's socket file unless configured
/// (`agent.admin_socket_mode`): the agent's user and group may connect,
/// no one else.
pub const DEFAULT_ADMIN_SOCKET_MODE: u32 = 0o660;
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
    Spanned::new(
        0..0,
        i64::from(sonde_runtime::priority::DEFAULT_BACKGROUND_NICE),
    )
}

/// `[agent]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSection {
    /// The aggregation window, aligned to the wall clock. Default `"30s"`.
    #[serde(default = "default_interval")]
    pub interval: Spanned<HumanDuration>,
    /// Address of the admin site (`/health`, `/metrics`, the pages):
    /// `HOST:PORT`, or `unix:///path` for a unix socket file whose mode
    /// and group decide who may connect; `""` turns it off. Default
    /// `"127.0.0.1:8686"`.
    #[serde(default = "default_admin", deserialize_with = "admin_listen")]
    pub admin_listen: Spanned<Option<AdminListen>>,
    /// Permission bits of a `unix://` `admin_listen`'s socket file, in
    /// octal; connecting needs write permission. Default `"0660"`: the
    /// agent's user and [`AgentSection::admin_socket_group`].
    pub admin_socket_mode: Option<Spanned<String>>,
    /// The group of a `unix://` `admin_listen`'s socket file: a group name
    /// or gid, whose members may connect with the default mode. Default:
    /// the agent's own group.
    pub admin_socket_group: Option<Spanned<String>>,
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

/// Where the admin site listens (`agent.admin_listen`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminListen {
    /// A TCP address, `HOST:PORT`.
    Tcp(SocketAddr),
    /// A unix socket file, `unix:///path`.
    Unix(PathBuf),
}

impl std::fmt::Display for AdminListen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdminListen::Tcp(a) => write!(f, "{a}"),
            AdminListen::Unix(p) => write!(f, "unix://{}", p.display()),
        }
    }
}

/// `admin_listen = ""` turns the admin listener off; `unix:///path` is a
/// socket file, as receivers spell it; anything else is `HOST:PORT`.
fn admin_listen<'de, D: Deserializer<'de>>(d: D) -> Result<Spanned<Option<AdminListen>>, D::Error> {
    let s = Spanned::<String>::deserialize(d)?;
    let span = s.span();
    let s = s.into_inner();
    if s.is_empty() {
        return Ok(Spanned::new(span, None));
    }
    if let Some((scheme, _)) = s.split_once("://") {
        return match s.parse::<sonde_runtime::addr::ListenAddr>() {
            Ok(sonde_runtime::addr::ListenAddr::Unix(p)) => Ok(Spanned::new(span, Some(AdminListen::Unix(p)))),
            Err(e @ sonde_runtime::addr::AddrError::Path(_)) => Err(de::Error::custom(e)),
            _ => Err(de::Error::custom(format!(
                "{scheme}:// is not an admin address: write HOST:PORT, like \"127.0.0.1:8686\", or unix:///path, like \"unix:///run/sonde/admin.sock\""
            ))),
        };
    }
    HostPort::deserialize(de::value::StrDeserializer::<de::value::Error>::new(&s))
        .map(|h| Spanned::new(span, Some(AdminListen::Tcp(h.0))))
        .map_err(de::Error::custom)
}

impl Default for AgentSection {
    fn default() -> Self {
        AgentSection {
            interval: default_interval(),
            admin_listen: default_admin(),
            admin_socket_mode: None,
            admin_socket_group: None,
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
    /// The TCP address of the admin site, if it listens on one.
    pub fn admin(&self) -> Option<SocketAddr> {
        match self.admin_listen.get_ref() {
            Some(AdminListen::Tcp(a)) => Some(*a),
            _ => None,
        }
    }

    /// The socket file of the admin site, if it listens on one.
    pub fn admin_socket(&self) -> Option<&Path> {
        match self.admin_listen.get_ref() {
            Some(AdminListen::Unix(p)) => Some(p),
            _ => None,
        }
    }

    /// The permission bits of the admin site's socket file
    /// (`admin_socket_mode`, else [`DEFAULT_ADMIN_SOCKET_MODE`]).
    pub fn admin_socket_mode(&self) -> u32 {
        self.admin_socket_mode
            .as_ref()
            .and_then(|m| crate::units::parse_mode(m.get_ref()))
            .unwrap_or(DEFAULT_ADMIN_SOCKET_MODE)
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
pub fn check(src: Source<'_>, agent: &AgentSection) -> Result<usize, ConfigError> {
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

/// Checks the keys of a `unix://` `admin_listen`: its mode, that TLS is
/// not asked of it, that no receiver listens on the same file; and that
/// `admin_socket_mode` and `admin_socket_group` are not set without one.
/// `receiver_files` are the receivers' socket files, in their order.
///
/// # Errors
///
/// The first of these problems.
pub fn check_admin_socket(
    src: Source<'_>,
    agent: &AgentSection,
    receiver_files: &[Option<&Path>],
) -> Result<(), ConfigError> {
    let Some(path) = agent.admin_socket() else {
        for (field, value) in [
            ("admin_socket_mode", &agent.admin_socket_mode),
            ("admin_socket_group", &agent.admin_socket_group),
        ] {
            if let Some(v) = value {
                return Err(src.error(
                    v.span(),
                    format!("agent.{field}"),
                    "applies to a unix socket file only, and admin_listen is not one",
                    format!("remove `{field}`, or write admin_listen = \"unix:///run/sonde/admin.sock\""),
                ));
            }
        }
        return Ok(());
    };
    if let Some(m) = &agent.admin_socket_mode {
        crate::units::socket_mode(src, m, "agent.admin_socket_mode".into())?;
    }
    if let Some(tls) = &agent.admin_tls {
        return Err(src.error(
            tls.cert_file.span(),
            "agent.admin_tls",
            format!(
                "TLS on the socket file {}: its traffic never leaves the host, and its mode and group already decide who connects",
                path.display()
            ),
            "remove admin_tls (admin_auth = \"token\" still asks for the token), or listen on HOST:PORT to serve HTTPS",
        ));
    }
    if let Some(i) = receiver_files.iter().position(|f| *f == Some(path)) {
        return Err(src.error(
            agent.admin_listen.span(),
            "agent.admin_listen",
            format!("{} is also receivers[{i}].listen", path.display()),
            "give the admin site a socket file of its own, like unix:///run/sonde/admin.sock",
        ));
    }
    Ok(())
}

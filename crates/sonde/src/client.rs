//! The client of a running agent's admin site, for the commands that talk
//! to it (`sonde admin-url`, `sonde top`, `sonde tap`, `sonde bench
//! --config`): where it listens and the
//! credential it asks for, read from the agent's config as the agent's
//! user reads them.
//!
//! # HTTPS
//!
//! With `agent.admin_tls` set the client speaks HTTPS and checks the
//! site's certificate against `admin_tls.ca_file`, or, without it, the
//! system's CA bundle and the certificates of `admin_tls.cert_file`
//! itself (so that a self-signed certificate, or a chain that holds its
//! issuer, is trusted as it is). The certificate must name the address
//! the client connects to: the `admin_listen` address, or 127.0.0.1 (::1)
//! for a wildcard one; an IP address must be in it as an IP SAN.
//!
//! # A unix socket file
//!
//! With a `unix://` `agent.admin_listen` the client connects to the
//! socket file ([`sonde_admin::http::client::get_unix`]): the file's mode
//! and group decide whether this user may connect at all, and the token,
//! when the agent asks for one, is read and sent as over TCP.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::{self, AdminListen, AdminTls, AgentSection};
use anyhow::Context;

/// `--config` for the commands that talk to the agent.
#[derive(clap::Args, Debug, Clone)]
pub struct AgentArgs {
    /// The agent's configuration file (default: the embedded defaults).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
}

impl AgentArgs {
    /// The `[agent]` section of the config.
    fn agent(&self) -> anyhow::Result<AgentSection> {
        let config = match &self.config {
            Some(p) => read_config(p)?,
            None => config::parse(config::DEFAULT_CONFIG).context("embedded default config")?,
        };
        Ok(config.agent)
    }

    /// A client of the agent's admin site.
    pub fn client(&self) -> anyhow::Result<Client> {
        Client::new(&self.agent()?)
    }
}

/// Where this host reaches a listener on `addr`: loopback for a wildcard
/// address (`0.0.0.0`, `::`), `addr` itself otherwise.
fn reachable(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => (Ipv4Addr::LOCALHOST, addr.port()).into(),
        IpAddr::V6(ip) if ip.is_unspecified() => (Ipv6Addr::LOCALHOST, addr.port()).into(),
        _ => addr,
    }
}

/// The CA bundles of common distributions, the first that exists being
/// the system's (`$SSL_CERT_FILE` first, as OpenSSL reads it).
const SYSTEM_CA_FILES: [&str; 4] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// The certificates the client trusts for the admin site; see the module
/// docs.
fn trusted(tls: &AdminTls) -> anyhow::Result<Vec<ureq::tls::Certificate<'static>>> {
    let certs = |path: &Path| -> anyhow::Result<Vec<ureq::tls::Certificate<'static>>> {
        Ok(sonde_admin::http::certificates(path)?
            .iter()
            .map(|c| ureq::tls::Certificate::from_der(c.as_ref()).to_owned())
            .collect())
    };
    if let Some(ca) = &tls.ca_file {
        return certs(ca.get_ref()).context("agent.admin_tls.ca_file");
    }
    let system = std::env::var_os("SSL_CERT_FILE")
        .map(PathBuf::from)
        .into_iter()
        .chain(SYSTEM_CA_FILES.iter().map(PathBuf::from))
        .find(|p| p.is_file());
    let mut trusted = match system {
        Some(p) => certs(&p).with_context(|| format!("the system's CA bundle {}", p.display()))?,
        None => Vec::new(),
    };
    // Unreadable here (a directory only the agent's user may enter) is
    // not fatal: a certificate from a CA the system trusts needs nothing
    // more, and any other fails the handshake with a message that says
    // what to set.
    if let Ok(own) = certs(tls.cert_file.get_ref()) {
        trusted.extend(own);
    }
    Ok(trusted)
}

/// The admin token in `agent.admin_token_file`, if the agent asks for one.
fn token(agent: &AgentSection) -> anyhow::Result<Option<sonde_admin::http::Token>> {
    if agent.admin_auth == config::AdminAuth::None {
        return Ok(None);
    }
    let file = agent.admin_token_file();
    let text = std::fs::read_to_string(&file).with_context(|| {
        format!(
            "reading the admin token {} (agent.admin_token_file): run this as the agent's user \
             (sudo -u sonde sonde ...) or as a member of agent.admin_token_group; \
             the agent makes the file at its first start",
            file.display()
        )
    })?;
    sonde_admin::http::Token::new(text.trim())
        .with_context(|| format!("{} holds no admin token", file.display()))
        .map(Some)
}

/// How long one request may take, connecting included.
const TIMEOUT: Duration = Duration::from_secs(10);

/// A client of one agent's admin site.
pub struct Client {
    base: String,
    token: Option<sonde_admin::http::Token>,
    transport: Transport,
}

/// How the client reaches the site.
enum Transport {
    /// HTTP or HTTPS to a port.
    Tcp(ureq::Agent),
    /// HTTP on a unix socket file.
    Unix(PathBuf),
}

impl Client {
    /// The client of the admin site `agent` describes.
    ///
    /// # Errors
    ///
    /// The admin site is off, the token cannot be read, or the CA
    /// certificates of `agent.admin_tls` cannot.
    pub fn new(agent: &AgentSection) -> anyhow::Result<Client> {
        let addr = match agent.admin_listen.get_ref() {
            None => anyhow::bail!("agent.admin_listen is \"\": this agent has no admin site"),
            Some(AdminListen::Unix(path)) => {
                return Ok(Client {
                    base: format!("unix://{}", path.display()),
                    token: token(agent)?,
                    transport: Transport::Unix(path.clone()),
                })
            }
            Some(AdminListen::Tcp(addr)) => *addr,
        };
        let mut config = ureq::Agent::config_builder()
            .timeout_global(Some(TIMEOUT))
            .http_status_as_error(false);
        if let Some(tls) = &agent.admin_tls {
            let roots = ureq::tls::RootCerts::new_with_certs(&trusted(tls)?);
            config = config.tls_config(ureq::tls::TlsConfig::builder().root_certs(roots).build());
        }
        Ok(Client {
            base: format!("{}://{}", agent.admin_scheme(), reachable(addr)),
            token: token(agent)?,
            transport: Transport::Tcp(config.build().new_agent()),
        })
    }

    /// The site's address, as `http://127.0.0.1:8686`, or
    /// `unix:///run/sonde/admin.sock` for a socket file.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The token the site asks for, if any.
    pub fn token(&self) -> Option<&sonde_admin::http::Token> {
        self.token.as_ref()
    }

    /// GETs `path` (with its query) and returns the body of a 200.
    ///
    /// # Errors
    ///
    /// The agent cannot be reached, or answers anything but 200 (the error
    /// holds its status and answer).
    pub fn get(&self, path: &str) -> anyhow::Result<String> {
        let http = match &self.transport {
            Transport::Tcp(http) => http,
            Transport::Unix(socket) => return self.get_unix(socket, path),
        };
        let url = format!("{}{path}", self.base);
        let mut req = http.get(&url);
        if let Some(t) = &self.token {
            req = req.header("Authorization", &format!("Bearer {}", t.as_str()));
        }
        let mut resp = req.call().with_context(|| {
            if self.base.starts_with("https:") {
                format!(
                    "reaching the agent at {}: is it running with this config, and does its certificate name this address and come from a CA this command trusts (agent.admin_tls.ca_file; without it, the system's CAs and cert_file's own certificates)?",
                    self.base
                )
            } else {
                format!(
                    "reaching the agent at {}: is it running with this config?",
                    self.base
                )
            }
        })?;
        let status = resp.status();
        let body = resp
            .body_mut()
            .read_to_string()
            .with_context(|| format!("reading {url}"))?;
        anyhow::ensure!(status == 200, "{url} answered {status}: {}", body.trim());
        Ok(body)
    }

    /// [`Client::get`] over the socket file `socket`.
    fn get_unix(&self, socket: &Path, path: &str) -> anyhow::Result<String> {
        use sonde_admin::http::client::{get_unix, UnixGetError};
        let bearer = self
            .token
            .as_ref()
            .map(|t| format!("Bearer {}", t.as_str()));
        let headers: Vec<(&str, &str)> = bearer
            .iter()
            .map(|b| ("authorization", b.as_str()))
            .collect();
        let answer = get_unix(socket, path, &headers, TIMEOUT).map_err(|e| {
            let hint = match &e {
                UnixGetError::Connect { error, .. }
                    if error.kind() == std::io::ErrorKind::PermissionDenied =>
                {
                    "the socket file's mode and group (agent.admin_socket_mode, agent.admin_socket_group) leave this user out: run this as the agent's user (sudo -u sonde sonde ...) or as a member of the file's group"
                }
                UnixGetError::Connect { .. } => "is the agent running with this config?",
                _ => "",
            };
            anyhow::Error::new(e).context(format!(
                "reaching the agent at {}{}{hint}",
                self.base,
                if hint.is_empty() { "" } else { ": " }
            ))
        })?;
        let body = String::from_utf8_lossy(&answer.body).into_owned();
        let status = answer.status.as_u16();
        anyhow::ensure!(
            status == 200,
            "{}{path} answered {status}: {}",
            self.base,
            body.trim()
        );
        Ok(body)
    }
}

/// `sonde admin-url`: the admin site's sign-in address (or, with
/// `token_only`, the token alone); for a socket file, the curl command
/// that reads the site, as a browser cannot open one.
pub fn admin_url(args: &AgentArgs, token_only: bool) -> anyhow::Result<()> {
    let agent = args.agent()?;
    let client = Client::new(&agent)?;
    if let Some(socket) = agent.admin_socket() {
        let socket = socket.display();
        match client.token() {
            Some(t) if token_only => println!("{}", t.as_str()),
            None if token_only => {
                anyhow::bail!("agent.admin_auth is \"none\": the admin site asks for no token")
            }
            Some(t) => println!(
                "curl --unix-socket {socket} -H 'Authorization: Bearer {}' http://sonde/",
                t.as_str()
            ),
            None => println!("curl --unix-socket {socket} http://sonde/"),
        }
        if !token_only {
            eprintln!(
                "the admin site listens on the socket file {socket}, which a browser cannot open; \
                 `ssh -L 8686:{socket} HOST` forwards it to http://127.0.0.1:8686/{}",
                if client.token().is_some() {
                    ", where the token (`sonde admin-url --token`) signs in"
                } else {
                    ""
                }
            );
        }
        return Ok(());
    }
    match client.token() {
        None => {
            anyhow::ensure!(
                !token_only,
                "agent.admin_auth is \"none\": the admin site asks for no token"
            );
            println!("{}/", client.base());
        }
        Some(t) if token_only => println!("{}", t.as_str()),
        Some(t) => println!("{}/login?token={}", client.base(), t.as_str()),
    }
    Ok(())
}

/// Reads and parses a configuration file, without looking at the host:
/// for commands that only read settings from it.
///
/// # Errors
///
/// When the file cannot be read or is not a valid config.
pub fn read_config(path: &Path) -> anyhow::Result<config::Config> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading config file {}", path.display()))?;
    config::parse(&text).with_context(|| format!("invalid config file {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A CA, and a certificate it issued for 127.0.0.1 with its key, as
    /// PEM.
    struct Pki {
        ca: String,
        cert: String,
        key: String,
    }

    fn pki() -> Pki {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "sonde test CA");
        let ca = rcgen::CertifiedIssuer::self_signed(params, rcgen::KeyPair::generate().unwrap())
            .unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
            .unwrap()
            .signed_by(&key, &ca)
            .unwrap();
        Pki {
            ca: ca.as_ref().pem(),
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }

    /// An admin site served over TLS from `cert` and `key` on a free
    /// loopback port, and the `[agent]` of a config that describes it
    /// with `extra` keys in its `admin_tls`.
    fn site(dir: &Path, cert: &str, key: &str, extra: &str) -> AgentSection {
        let (c, k) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::write(&c, cert).unwrap();
        std::fs::write(&k, key).unwrap();
        let listener = sonde_admin::http::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let port = listener.local_addr().unwrap().port();
        let admin = sonde_admin::http::Admin {
            telemetry: Arc::default(),
            profiles: sonde_profile::store::Store::reader(&dir.join("data")),
            prices: Default::default(),
            classes: Default::default(),
            fleet: None,
            auth: None,
            tls: Some(sonde_admin::http::Tls::load(&c, &k).unwrap()),
        };
        // A TCP listener has no file to remove: it is served on.
        drop(
            sonde_admin::http::serve(vec![(
                listener.into(),
                sonde_admin::http::Site::Admin(Arc::new(admin)),
            )])
            .unwrap(),
        );
        let text = format!(
            "[agent]\nadmin_listen = \"127.0.0.1:{port}\"\nadmin_tls = {{ cert_file = \"{}\", key_file = \"{}\"{extra} }}\n[profiler]\n",
            c.display(),
            k.display()
        );
        config::parse(&text).unwrap().agent
    }

    /// A self-signed certificate for 127.0.0.1, as PEM, with its key;
    /// `is_ca` is its basic constraints.
    fn self_signed(is_ca: rcgen::IsCa) -> (String, String) {
        let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        params.is_ca = is_ca;
        let key = rcgen::KeyPair::generate().unwrap();
        (params.self_signed(&key).unwrap().pem(), key.serialize_pem())
    }

    #[test]
    fn the_client_trusts_a_self_signed_certificate_of_the_config_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        // As DEPLOY.md's openssl command makes it: CA:FALSE.
        let (cert, key) = self_signed(rcgen::IsCa::ExplicitNoCa);
        let agent = site(dir.path(), &cert, &key, "");
        let client = Client::new(&agent).unwrap();
        assert!(client.base().starts_with("https://127.0.0.1:"));
        assert_eq!(client.get("/health").unwrap(), "ok\n");
        assert!(client
            .get("/metrics")
            .unwrap()
            .contains("sonde_admin_tls_handshake_failures_total 0\n"));
        // One that says it is a CA (openssl's default without the
        // -addext) cannot be a site's own certificate to rustls, which
        // DEPLOY.md says.
        let (cert, key) = self_signed(rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained));
        let agent = site(dir.path(), &cert, &key, "");
        let e = format!(
            "{:#}",
            Client::new(&agent).unwrap().get("/health").unwrap_err()
        );
        assert!(e.contains("CaUsedAsEndEntity"), "{e}");
    }

    #[test]
    fn a_certificate_from_a_private_ca_needs_its_ca_file() {
        let dir = tempfile::tempdir().unwrap();
        let pki = pki();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, &pki.ca).unwrap();
        // The chain is the certificate alone: its issuer is in no file
        // the client reads by default.
        let agent = site(dir.path(), &pki.cert, &pki.key, "");
        let e = Client::new(&agent).unwrap().get("/health").unwrap_err();
        let e = format!("{e:#}");
        assert!(e.contains("agent.admin_tls.ca_file"), "{e}");
        assert!(e.contains("UnknownIssuer"), "{e}");
        let agent = site(
            dir.path(),
            &pki.cert,
            &pki.key,
            &format!(", ca_file = \"{}\"", ca.display()),
        );
        assert_eq!(Client::new(&agent).unwrap().get("/health").unwrap(), "ok\n");
        // The chain with its CA in it is trusted as it is.
        let agent = site(dir.path(), &format!("{}{}", pki.cert, pki.ca), &pki.key, "");
        assert_eq!(Client::new(&agent).unwrap().get("/health").unwrap(), "ok\n");
    }

    #[test]
    fn over_a_socket_file_the_client_sends_the_token_and_says_when_no_agent_listens() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("admin.sock");
        let token_file = dir.path().join("admin.token");
        let token = sonde_admin::http::Token::load_or_create(&token_file, None).unwrap();
        let text = format!(
            "[agent]\nadmin_listen = \"unix://{}\"\nadmin_auth = \"token\"\nadmin_token_file = \"{}\"\n[profiler]\n",
            socket.display(),
            token_file.display()
        );
        let agent = config::parse(&text).unwrap().agent;
        let e = format!(
            "{:#}",
            Client::new(&agent).unwrap().get("/health").unwrap_err()
        );
        assert!(
            e.contains(&format!(
                "reaching the agent at unix://{}: is the agent running",
                socket.display()
            )),
            "{e}"
        );
        let listener = sonde_admin::http::bind_unix(&socket, Default::default()).unwrap();
        let admin = sonde_admin::http::Admin {
            telemetry: Arc::default(),
            profiles: sonde_profile::store::Store::reader(&dir.path().join("data")),
            prices: Default::default(),
            classes: Default::default(),
            fleet: None,
            auth: Some(token),
            tls: None,
        };
        let _serving = sonde_admin::http::serve(vec![(
            listener,
            sonde_admin::http::Site::Admin(Arc::new(admin)),
        )])
        .unwrap();
        let client = Client::new(&agent).unwrap();
        assert_eq!(client.base(), format!("unix://{}", socket.display()));
        assert!(client
            .get("/metrics")
            .unwrap()
            .contains("sonde_admin_unauthorized_total 0\n"));
        let e = format!("{:#}", client.get("/nope").unwrap_err());
        assert!(e.contains("/nope answered 404: not found"), "{e}");
    }

    #[test]
    fn a_wildcard_admin_address_is_reached_on_loopback() {
        assert_eq!(
            reachable("0.0.0.0:8686".parse().unwrap()),
            "127.0.0.1:8686".parse().unwrap()
        );
        assert_eq!(
            reachable("[::]:8686".parse().unwrap()),
            "[::1]:8686".parse().unwrap()
        );
        assert_eq!(
            reachable("10.1.2.3:8686".parse().unwrap()),
            "10.1.2.3:8686".parse().unwrap()
        );
    }
}

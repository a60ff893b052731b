//! The kafka sink's `tls` and `sasl` keys: what they may hold, the checks
//! `sonde validate` makes (every file named is read, and the error names
//! the key), and the [`Dial`] each connection of the sink opens with.
//!
//! ```toml
//! tls = { ca_file = "/etc/sonde/kafka-ca.pem", cert_file = "/etc/sonde/client.pem", key_file = "/etc/sonde/client.key", verify_hostname = true }
//! sasl = { mechanism = "SCRAM-SHA-512", username = "sonde", password_file = "/etc/sonde/kafka.password" }
//! ```
//!
//! Secrets are read from a file or the environment when the sink starts
//! (and again at each reload), never written inline in the config, and
//! never printed: [`sonde_kafka::Secret`] shows `***`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Deserialize;
use sonde_config::ConfigError;
use sonde_kafka::{Credentials, Dial, Sasl, ScramHash, Secret};
use sonde_runtime::tls::{ClientTls, ClientTlsError, TlsError, TlsFile};

/// `tls = { ... }`, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TlsOptions {
    ca_file: Option<PathBuf>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    #[serde(default = "yes")]
    verify_hostname: bool,
}

fn yes() -> bool {
    true
}

/// `sasl.mechanism`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum Mechanism {
    /// `PLAIN`.
    #[serde(rename = "PLAIN")]
    Plain,
    /// `SCRAM-SHA-256`.
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    /// `SCRAM-SHA-512`.
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
    /// `OAUTHBEARER`.
    #[serde(rename = "OAUTHBEARER")]
    OAuthBearer,
}

/// `sasl = { ... }`, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SaslOptions {
    mechanism: Mechanism,
    username: Option<String>,
    password_file: Option<PathBuf>,
    password_env: Option<String>,
    /// Refused with its own message: a password never sits in the
    /// config.
    password: Option<serde::de::IgnoredAny>,
    token_file: Option<PathBuf>,
    token_url: Option<String>,
    client_id: Option<String>,
    client_secret_file: Option<PathBuf>,
    scope: Option<String>,
}

/// Where a secret is read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretSource {
    /// The whole file, without a final line break.
    File(PathBuf),
    /// An environment variable of the agent.
    Env(String),
}

/// `sasl`, validated: the mechanism with what it proves the client with,
/// so that no mechanism holds a credential it cannot use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SaslSettings {
    /// PLAIN (`hash` `None`) or SCRAM with `hash`: a user and their
    /// password.
    Password {
        /// SCRAM's hash; `None` for PLAIN.
        hash: Option<ScramHash>,
        /// The user.
        username: String,
        /// Where the password is.
        password: SecretSource,
    },
    /// OAUTHBEARER: a token (a JWT) in a file, which whoever renews it
    /// rewrites (`token_file`).
    TokenFile(PathBuf),
    /// OAUTHBEARER: a token from an OAuth 2.0 token endpoint.
    TokenEndpoint(TokenEndpoint),
}

/// An OAuth 2.0 token endpoint asked with the client credentials grant
/// (RFC 6749 4.4), the client authenticated with HTTP Basic
/// (`token_url`, `client_id`, `client_secret_file`, `scope`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenEndpoint {
    /// The endpoint.
    pub url: String,
    /// The client.
    pub client_id: String,
    /// Where its secret is.
    pub client_secret: SecretSource,
    /// The scope asked for, if any.
    pub scope: Option<String>,
}

/// `tls` and `sasl`, validated.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Security {
    /// TLS, when `tls` is set.
    pub tls: Option<ClientTls>,
    /// SASL, when `sasl` is set.
    pub sasl: Option<SaslSettings>,
}

const TLS_EXAMPLE: &str = "{ ca_file = \"/etc/sonde/kafka-ca.pem\" }";
const SASL_EXAMPLE: &str = "{ mechanism = \"SCRAM-SHA-512\", username = \"sonde\", password_file = \"/etc/sonde/kafka.password\" }";

/// Checks `tls` and `sasl` as written; the files they name are read by
/// [`check_host`].
///
/// # Errors
///
/// A [`ConfigError`] naming the key (`tls.ca_file`, `sasl.username`, ...).
pub(super) fn check(
    tls: Option<&TlsOptions>,
    sasl: Option<&SaslOptions>,
) -> Result<Security, ConfigError> {
    let tls = tls.map(check_tls).transpose()?;
    let sasl = sasl.map(check_sasl).transpose()?;
    Ok(Security { tls, sasl })
}

fn check_tls(o: &TlsOptions) -> Result<ClientTls, ConfigError> {
    let client = match (&o.cert_file, &o.key_file) {
        (None, None) => None,
        (Some(c), Some(k)) => Some((c.clone(), k.clone())),
        (Some(_), None) => {
            return Err(ConfigError::new(
                "tls.key_file",
                "`tls.cert_file` is set without the key it was issued for",
                "add key_file = \"/etc/sonde/client.key\" to `tls`, or remove cert_file",
            ))
        }
        (None, Some(_)) => {
            return Err(ConfigError::new(
                "tls.cert_file",
                "`tls.key_file` is set without its certificate",
                "add cert_file = \"/etc/sonde/client.pem\" to `tls`, or remove key_file",
            ))
        }
    };
    Ok(ClientTls {
        ca_file: o.ca_file.clone(),
        client,
        verify_hostname: o.verify_hostname,
    })
}

/// What a kafka sink needs of the host: every file `tls` and `sasl` name
/// can be read and used (the certificates parse, the key is the
/// certificate's, the password file is not empty). The environment is
/// not read: `sonde validate` may not share it with the agent.
///
/// # Errors
///
/// A [`ConfigError`] naming the key (`tls.ca_file`, ...).
pub fn check_host(s: &crate::descriptor::Sink) -> Result<(), ConfigError> {
    let security = super::settings(s)?.security;
    if let Some(tls) = &security.tls {
        // Builds the configuration once, so that every file is read and
        // parsed now; the agent builds it again at each connection.
        sonde_runtime::tls::client_config(tls).map_err(tls_error)?;
    }
    let file = match &security.sasl {
        Some(SaslSettings::Password {
            password: SecretSource::File(f),
            ..
        }) => Some(("sasl.password_file", f, "the password")),
        Some(SaslSettings::TokenFile(f)) => Some(("sasl.token_file", f, "the token")),
        Some(SaslSettings::TokenEndpoint(TokenEndpoint {
            client_secret: SecretSource::File(f),
            ..
        })) => Some(("sasl.client_secret_file", f, "the client's secret")),
        _ => None,
    };
    if let Some((key, f, what)) = file {
        read_secret(f).map_err(|problem| {
            ConfigError::new(
                key,
                problem,
                format!("write {what} alone in a file the agent's user may read (mode 0600)"),
            )
        })?;
    }
    Ok(())
}

/// A [`ClientTlsError`] as the key it is about.
fn tls_error(e: ClientTlsError) -> ConfigError {
    let (key, inner) =
        match &e {
            ClientTlsError::Ca(inner) => ("tls.ca_file", inner),
            ClientTlsError::Client(inner) => match inner.file() {
                TlsFile::Cert => ("tls.cert_file", inner),
                TlsFile::Key => ("tls.key_file", inner),
            },
            ClientTlsError::NoRoots(_) => return ConfigError::new(
                "tls",
                e.to_string(),
                "set tls.ca_file to the CA certificate (PEM) that signed the brokers' certificates",
            ),
        };
    let fix = match inner {
        TlsError::Read { .. } => "check the path and that the agent's user may read the file",
        TlsError::Mismatch { .. } => "give the key the certificate was issued for",
        _ => "give a PEM file (\"-----BEGIN CERTIFICATE-----\" or \"-----BEGIN PRIVATE KEY-----\")",
    };
    ConfigError::new(key, inner.to_string(), fix)
}

fn check_sasl(o: &SaslOptions) -> Result<SaslSettings, ConfigError> {
    if o.password.is_some() {
        return Err(ConfigError::new(
            "sasl.password",
            "sonde does not take a password written in the config, which is read by more people and tools than a secret should be",
            "write the password alone in a file the agent may read and give password_file = \"/etc/sonde/kafka.password\", or put it in an environment variable and give password_env = \"KAFKA_PASSWORD\"",
        ));
    }
    match o.mechanism {
        Mechanism::Plain => check_password(o, None),
        Mechanism::ScramSha256 => check_password(o, Some(ScramHash::Sha256)),
        Mechanism::ScramSha512 => check_password(o, Some(ScramHash::Sha512)),
        Mechanism::OAuthBearer => check_token(o),
    }
}

/// A key of `sasl` that the mechanism does not take.
fn not_for(key: &str, mechanism: &str, fix: &str) -> ConfigError {
    ConfigError::new(
        format!("sasl.{key}"),
        format!("`sasl.{key}` does not apply to {mechanism}"),
        fix,
    )
}

fn check_password(o: &SaslOptions, hash: Option<ScramHash>) -> Result<SaslSettings, ConfigError> {
    let keys = [
        ("token_file", o.token_file.is_some()),
        ("token_url", o.token_url.is_some()),
        ("client_id", o.client_id.is_some()),
        ("client_secret_file", o.client_secret_file.is_some()),
        ("scope", o.scope.is_some()),
    ];
    if let Some((key, _)) = keys.iter().find(|(_, set)| *set) {
        return Err(not_for(
            key,
            "a user and password mechanism",
            "remove it, or write mechanism = \"OAUTHBEARER\" for a token",
        ));
    }
    let username = match &o.username {
        Some(u) if !u.is_empty() => u.clone(),
        _ => {
            return Err(ConfigError::new(
                "sasl.username",
                "SASL needs `username`",
                format!("write sasl = {SASL_EXAMPLE}"),
            ))
        }
    };
    let password = secret_source(
        o.password_file.as_ref(),
        o.password_env.as_ref(),
        "password",
    )?;
    Ok(SaslSettings::Password {
        hash,
        username,
        password,
    })
}

/// `{what}_file` or `{what}_env`, exactly one.
fn secret_source(
    file: Option<&PathBuf>,
    env: Option<&String>,
    what: &str,
) -> Result<SecretSource, ConfigError> {
    match (file, env) {
        (Some(f), None) => Ok(SecretSource::File(f.clone())),
        (None, Some(v)) if !v.is_empty() => Ok(SecretSource::Env(v.clone())),
        (None, Some(_)) => Err(ConfigError::new(
            format!("sasl.{what}_env"),
            format!("`sasl.{what}_env` is empty"),
            format!("name the environment variable that holds the {what}, like {what}_env = \"KAFKA_PASSWORD\""),
        )),
        (Some(_), Some(_)) => Err(ConfigError::new(
            format!("sasl.{what}_env"),
            format!("`sasl` has both `{what}_file` and `{what}_env`"),
            "keep one of them",
        )),
        (None, None) => Err(ConfigError::new(
            format!("sasl.{what}_file"),
            format!("SASL needs a {what}, and sonde reads it from a file or the environment, never from the config"),
            format!("write {what}_file = \"/etc/sonde/kafka.{what}\" or {what}_env = \"KAFKA_PASSWORD\" in `sasl`"),
        )),
    }
}

fn check_token(o: &SaslOptions) -> Result<SaslSettings, ConfigError> {
    let keys = [
        ("username", o.username.is_some()),
        ("password_file", o.password_file.is_some()),
        ("password_env", o.password_env.is_some()),
    ];
    if let Some((key, _)) = keys.iter().find(|(_, set)| *set) {
        return Err(not_for(
            key,
            "OAUTHBEARER",
            "remove it: OAUTHBEARER takes token_file, or token_url with client_id and client_secret_file",
        ));
    }
    match (&o.token_file, &o.token_url) {
        (Some(f), None) => {
            for (key, set) in [
                ("client_id", o.client_id.is_some()),
                ("client_secret_file", o.client_secret_file.is_some()),
                ("scope", o.scope.is_some()),
            ] {
                if set {
                    return Err(not_for(key, "a token_file", "remove it, or replace token_file with token_url"));
                }
            }
            Ok(SaslSettings::TokenFile(f.clone()))
        }
        (None, Some(url)) => {
            if !(url.starts_with("https://") || url.starts_with("http://")) {
                return Err(ConfigError::new(
                    "sasl.token_url",
                    format!("{url:?} is not an http:// or https:// URL"),
                    "write the identity provider's token endpoint, like token_url = \"https://login.example.com/oauth2/token\"",
                ));
            }
            let client_id = match &o.client_id {
                Some(c) if !c.is_empty() => c.clone(),
                _ => {
                    return Err(ConfigError::new(
                        "sasl.client_id",
                        "a token_url needs `client_id`",
                        "add client_id = \"sonde\" and client_secret_file = \"/etc/sonde/kafka-client.secret\" to `sasl`",
                    ))
                }
            };
            let Some(secret) = &o.client_secret_file else {
                return Err(ConfigError::new(
                    "sasl.client_secret_file",
                    "a token_url needs `client_secret_file`, the client's secret alone in a file",
                    "add client_secret_file = \"/etc/sonde/kafka-client.secret\" to `sasl`",
                ));
            };
            Ok(SaslSettings::TokenEndpoint(TokenEndpoint {
                url: url.clone(),
                client_id,
                client_secret: SecretSource::File(secret.clone()),
                scope: o.scope.clone().filter(|s| !s.is_empty()),
            }))
        }
        (Some(_), Some(_)) => Err(ConfigError::new(
            "sasl.token_url",
            "`sasl` has both `token_file` and `token_url`",
            "keep one of them",
        )),
        (None, None) => Err(ConfigError::new(
            "sasl.token_file",
            "OAUTHBEARER needs a token: a file, or a token endpoint",
            "write token_file = \"/run/secrets/kafka-token\", or token_url, client_id and client_secret_file, in `sasl`",
        )),
    }
}

/// The secret in `path`: the whole file without its final line break.
fn read_secret(path: &Path) -> Result<Secret, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let secret = text
        .strip_suffix("\r\n")
        .or_else(|| text.strip_suffix('\n'))
        .unwrap_or(&text);
    if secret.is_empty() {
        return Err(format!("{} is empty", path.display()));
    }
    Ok(Secret::new(secret))
}

impl SecretSource {
    /// The secret, read now.
    ///
    /// # Errors
    ///
    /// The file cannot be read or is empty, or the variable is not set.
    pub fn read(&self) -> Result<Secret, String> {
        match self {
            SecretSource::File(path) => read_secret(path),
            SecretSource::Env(name) => match std::env::var(name) {
                Ok(v) if !v.is_empty() => Ok(Secret::new(v)),
                Ok(_) => Err(format!("the environment variable {name} is empty")),
                Err(_) => Err(format!("the environment variable {name} is not set")),
            },
        }
    }
}

impl Security {
    /// How the sink's connections open: `client_id` and `timeout` for
    /// every connection, TLS and SASL from the files and variables named,
    /// read again at each new connection ([`FileCredentials`]).
    ///
    /// # Errors
    ///
    /// What a first connection would meet: a file that cannot be read or
    /// used, the password's variable not set.
    pub fn dial(&self, client_id: &str, timeout: Duration) -> anyhow::Result<Dial> {
        let credentials = FileCredentials {
            security: self.clone(),
            tls: Mutex::new(None),
            token: TokenCache::default(),
        };
        // Said at start rather than at the first connection: files and
        // variables (a token endpoint is asked at the first connection,
        // and its failures are retried like a broker's).
        credentials.tls().map_err(anyhow::Error::msg)?;
        if let Some(SaslSettings::Password { password, .. }) = &self.sasl {
            password
                .read()
                .map_err(|e| anyhow::anyhow!("the SASL password: {e}"))?;
        }
        Ok(Dial {
            client_id: client_id.to_string(),
            timeout,
            credentials: Arc::new(credentials),
        })
    }

    /// Warns of what weakens the connection: hostname verification off,
    /// a PLAIN password sent without TLS.
    pub fn warn(&self, sink: &str) {
        if self.tls.as_ref().is_some_and(|t| !t.verify_hostname) {
            tracing::warn!(sink, "tls.verify_hostname = false: the brokers' certificates are checked against the CA but not against their names, so any certificate the CA signed is taken for any broker");
        }
        if self.tls.is_none()
            && self
                .sasl
                .as_ref()
                .is_some_and(|s| !matches!(s, SaslSettings::Password { hash: Some(_), .. }))
        {
            tracing::warn!(sink, "SASL PLAIN or OAUTHBEARER without tls sends the password or token in clear to every broker: add tls = {{}} (or tls = {{ ca_file = ... }})");
        }
    }

    /// Whether any of it is set.
    pub fn is_set(&self) -> bool {
        self.tls.is_some() || self.sasl.is_some()
    }
}

/// The example of each key, for the errors of the typed options.
pub(super) const EXAMPLES: [(&str, &str); 2] = [("tls", TLS_EXAMPLE), ("sasl", SASL_EXAMPLE)];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::descriptor::Sink;
    use crate::registry::parse;

    fn sink(keys: &str) -> Result<Sink, ConfigError> {
        let text = format!(
            "[[sinks]]\ntype = \"kafka\"\nbrokers = [\"127.0.0.1:9093\"]\ntopic = \"logs\"\ninputs = [\"app\"]\n{keys}"
        );
        parse(&text).map(|mut c| c.sinks.remove(0))
    }

    fn security(keys: &str) -> Security {
        super::super::settings(&sink(keys).unwrap())
            .unwrap()
            .security
    }

    /// The error of the parse, else of the host check (its key placed
    /// under the sink as the config does, no line).
    fn error(keys: &str) -> (String, Option<usize>, String, String) {
        let e = match sink(keys) {
            Err(e) => e,
            Ok(s) => {
                let e = check_host(&s).unwrap_err();
                ConfigError {
                    key: format!("sinks[0].{}", e.key),
                    ..e
                }
            }
        };
        (e.key, e.line, e.problem, e.fix)
    }

    /// A CA and a client certificate it signed, as PEM files in `dir`.
    fn files(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["sonde".into()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        let paths = (
            dir.join("ca.pem"),
            dir.join("client.pem"),
            dir.join("client.key"),
        );
        std::fs::write(&paths.0, ca_cert.pem()).unwrap();
        std::fs::write(&paths.1, cert.pem()).unwrap();
        std::fs::write(&paths.2, key.serialize_pem()).unwrap();
        paths
    }

    #[test]
    fn tls_and_sasl_are_read_with_every_file_checked() {
        let dir = tempfile::tempdir().unwrap();
        let (ca, cert, key) = files(dir.path());
        let password = dir.path().join("password");
        std::fs::write(&password, "s3cret\n").unwrap();
        let s = security(&format!(
            "tls = {{ ca_file = {ca:?}, cert_file = {cert:?}, key_file = {key:?} }}\nsasl = {{ mechanism = \"SCRAM-SHA-512\", username = \"sonde\", password_file = {password:?} }}\n"
        ));
        assert_eq!(
            s.tls,
            Some(ClientTls {
                ca_file: Some(ca.clone()),
                client: Some((cert, key)),
                verify_hostname: true,
            })
        );
        let sasl = s.sasl.clone().unwrap();
        let SaslSettings::Password {
            hash: Some(ScramHash::Sha512),
            password: source,
            ..
        } = &sasl
        else {
            panic!("{sasl:?}");
        };
        assert_eq!(source, &SecretSource::File(password.clone()));
        // The final line break is not part of the password.
        assert_eq!(source.read().unwrap().expose(), "s3cret");
        let dial = s.dial("sonde", Duration::from_secs(1)).unwrap();
        let tls = dial.credentials.tls().unwrap().unwrap();
        // Built once while the files stay as they are.
        assert!(Arc::ptr_eq(&tls, &dial.credentials.tls().unwrap().unwrap()));
        let sasl = dial.credentials.sasl().unwrap().unwrap();
        assert_eq!(sasl.mechanism(), "SCRAM-SHA-512");
        assert!(!format!("{dial:?}{sasl:?}").contains("s3cret"));
        // A changed password applies at the next connection.
        std::fs::write(&password, "n3w\n").unwrap();
        match dial.credentials.sasl().unwrap().unwrap() {
            Sasl::Scram { password, .. } => assert_eq!(password.expose(), "n3w"),
            other => panic!("{other:?}"),
        }
        // A CA file that went bad is said at the next connection, with its key.
        let good = std::fs::read(&ca).unwrap();
        std::fs::write(&ca, "not pem").unwrap();
        let e = dial.credentials.tls().unwrap_err();
        assert!(e.starts_with("tls.ca_file: "), "{e}");
        std::fs::write(&ca, good).unwrap();
        let s = security(&format!(
            "tls = {{ ca_file = {ca:?}, verify_hostname = false }}\nsasl = {{ mechanism = \"PLAIN\", username = \"u\", password_env = \"SONDE_TEST_NO_SUCH_VARIABLE\" }}\n"
        ));
        assert!(!s.tls.as_ref().unwrap().verify_hostname);
        // The environment is read when the sink starts, not by validate.
        let e = s.dial("sonde", Duration::from_secs(1)).unwrap_err();
        assert!(
            format!("{e:#}").contains("SONDE_TEST_NO_SUCH_VARIABLE is not set"),
            "{e:#}"
        );
    }

    #[test]
    fn oauthbearer_takes_a_token_file_or_an_endpoint_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "eyJ.x.\n").unwrap();
        let s = security(&format!(
            "sasl = {{ mechanism = \"OAUTHBEARER\", token_file = {token:?} }}\n"
        ));
        assert_eq!(s.sasl, Some(SaslSettings::TokenFile(token.clone())));
        match s
            .dial("sonde", Duration::from_secs(1))
            .unwrap()
            .credentials
            .sasl()
        {
            Ok(Some(Sasl::OAuthBearer { token })) => assert_eq!(token.expose(), "eyJ.x."),
            other => panic!("{other:?}"),
        }
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "s3cret").unwrap();
        let s = security(&format!(
            "sasl = {{ mechanism = \"OAUTHBEARER\", token_url = \"https://idp.example/token\", client_id = \"sonde\", client_secret_file = {secret:?}, scope = \"kafka\" }}\n"
        ));
        assert_eq!(
            s.sasl,
            Some(SaslSettings::TokenEndpoint(TokenEndpoint {
                url: "https://idp.example/token".into(),
                client_id: "sonde".into(),
                client_secret: SecretSource::File(secret.clone()),
                scope: Some("kafka".into()),
            }))
        );
        let oauth =
            |rest: &str| error(&format!("sasl = {{ mechanism = \"OAUTHBEARER\"{rest} }}\n"));
        assert_eq!(oauth("").0, "sinks[0].sasl.token_file");
        assert_eq!(oauth(", username = \"u\"").0, "sinks[0].sasl.username");
        assert_eq!(
            oauth(&format!(
                ", token_file = {token:?}, token_url = \"https://x\""
            ))
            .0,
            "sinks[0].sasl.token_url"
        );
        assert_eq!(
            oauth(", token_url = \"ftp://x\"").0,
            "sinks[0].sasl.token_url"
        );
        assert_eq!(
            oauth(", token_url = \"https://x\"").0,
            "sinks[0].sasl.client_id"
        );
        assert_eq!(
            oauth(", token_url = \"https://x\", client_id = \"c\"").0,
            "sinks[0].sasl.client_secret_file"
        );
        let missing = dir.path().join("missing");
        let (k, _, problem, _) = oauth(&format!(", token_file = {missing:?}"));
        assert_eq!(k, "sinks[0].sasl.token_file");
        assert!(problem.contains("cannot read"), "{problem}");
        let (k, _, _, fix) = error(&format!(
            "sasl = {{ mechanism = \"PLAIN\", username = \"u\", password_file = {secret:?}, token_file = {token:?} }}\n"
        ));
        assert_eq!(k, "sinks[0].sasl.token_file");
        assert!(fix.contains("OAUTHBEARER"), "{fix}");
    }

    #[test]
    fn each_bad_key_is_named_at_its_line_with_a_fix() {
        let dir = tempfile::tempdir().unwrap();
        let (ca, cert, key) = files(dir.path());
        let missing = dir.path().join("missing.pem");
        let (k, _, problem, fix) = error(&format!("tls = {{ ca_file = {missing:?} }}\n"));
        assert_eq!(k.as_str(), "sinks[0].tls.ca_file");
        assert!(
            problem.contains("cannot read") && problem.contains("missing.pem"),
            "{problem}"
        );
        assert!(fix.contains("path"), "{fix}");
        // A key file given as the CA: no certificate in it.
        let (k, _, problem, _) = error(&format!("tls = {{ ca_file = {key:?} }}\n"));
        assert_eq!(k, "sinks[0].tls.ca_file");
        assert!(problem.contains("holds no certificate"), "{problem}");
        let (k, _, _, fix) = error(&format!(
            "tls = {{ ca_file = {ca:?}, cert_file = {cert:?} }}\n"
        ));
        assert_eq!(k, "sinks[0].tls.key_file");
        assert!(fix.contains("key_file"), "{fix}");
        // The client's key swapped for the CA's certificate.
        let (k, _, problem, _) = error(&format!(
            "tls = {{ ca_file = {ca:?}, cert_file = {cert:?}, key_file = {ca:?} }}\n"
        ));
        assert_eq!(k, "sinks[0].tls.key_file");
        assert!(problem.contains("no private key"), "{problem}");
        let (k, _, problem, fix) = error("tls = { ca = \"x\" }\n");
        assert_eq!(k, "sinks[0].tls.ca");
        assert!(
            problem.contains("`tls.ca` is not a key of kafka"),
            "{problem}"
        );
        assert!(fix.contains("remove"), "{fix}");
        let (k, line, problem, fix) =
            error("sasl = { mechanism = \"GSSAPI\", username = \"u\" }\n");
        assert_eq!((k.as_str(), line), ("sinks[0].sasl.mechanism", Some(6)));
        assert!(problem.contains("\"GSSAPI\""), "{problem}");
        assert!(fix.contains("\"SCRAM-SHA-512\""), "{fix}");
        let (k, _, problem, fix) = error("sasl = { username = \"u\" }\n");
        assert_eq!(k, "sinks[0].sasl.mechanism");
        assert!(problem.contains("needs `sasl.mechanism`"), "{problem}");
        assert!(fix.starts_with("write sasl = {"), "{fix}");
        let (k, _, _, fix) = error("sasl = { mechanism = \"PLAIN\", username = \"u\" }\n");
        assert_eq!(k, "sinks[0].sasl.password_file");
        assert!(fix.contains("password_env"), "{fix}");
        let (k, _, problem, fix) =
            error("sasl = { mechanism = \"PLAIN\", username = \"u\", password = \"hunter2\" }\n");
        assert_eq!(k, "sinks[0].sasl.password");
        assert!(!problem.contains("hunter2") && !fix.contains("hunter2"));
        assert!(fix.contains("password_file"), "{fix}");
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "\n").unwrap();
        let (k, _, problem, _) = error(&format!(
            "sasl = {{ mechanism = \"PLAIN\", username = \"u\", password_file = {empty:?} }}\n"
        ));
        assert_eq!(k, "sinks[0].sasl.password_file");
        assert!(problem.ends_with("is empty"), "{problem}");
        let (k, _, _, _) = error(&format!(
            "sasl = {{ mechanism = \"PLAIN\", password_file = {empty:?} }}\n"
        ));
        assert_eq!(k, "sinks[0].sasl.username");
    }

    #[test]
    fn a_jwt_tells_its_expiry_and_other_tokens_none() {
        use base64::Engine as _;
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let jwt = |claims: &str| format!("{}.{}.sig", b64(r#"{"alg":"none"}"#), b64(claims));
        let at = |secs: f64| std::time::UNIX_EPOCH + Duration::from_secs_f64(secs);
        assert_eq!(
            jwt_expiry(&jwt(r#"{"sub":"a","exp":1700000000}"#)),
            Some(at(1.7e9))
        );
        assert_eq!(
            jwt_expiry(&jwt(r#"{"exp":1700000000.5}"#)),
            Some(at(1_700_000_000.5))
        );
        for not in [
            jwt(r#"{"sub":"a"}"#),
            jwt(r#"{"exp":-5}"#),
            jwt(r#"{"exp":"soon"}"#),
            "opaque-token".to_string(),
            "a.b".to_string(),
            format!("x.{}.y.z", b64(r#"{"exp":1}"#)),
            "a.!!!.c".to_string(),
        ] {
            assert_eq!(jwt_expiry(&not), None, "{not}");
        }
    }
}

/// When a file was last changed, and its size: a changed stamp means the
/// file is read again.
type Stamp = Vec<Option<(std::time::SystemTime, u64)>>;

/// The sink's TLS and SASL, read from their files and variables at each
/// new connection: a renewed certificate or a fixed password applies from
/// the next connection on, with no restart. The TLS configuration is
/// built again only when one of its files changed.
#[derive(Debug)]
pub struct FileCredentials {
    security: Security,
    tls: Mutex<Option<(Stamp, Arc<rustls::ClientConfig>)>>,
    token: TokenCache,
}

/// The token of a token endpoint, kept until 80% of its life has passed
/// (a minute when the endpoint does not say how long it lives). Its life
/// is the shorter of the endpoint's `expires_in` and, for a JWT, its `exp`
/// claim: `expires_in` is rounded and counted from an unknown moment, and
/// a token handed out near its end gives sessions too short to renew in
/// place.
#[derive(Debug, Default)]
struct TokenCache(Mutex<Option<(Secret, std::time::Instant)>>);

/// How long a token of an endpoint that does not say is kept.
const TOKEN_KEPT_UNSAID: Duration = Duration::from_secs(60);

impl TokenCache {
    fn get(&self, endpoint: &TokenEndpoint) -> Result<Secret, String> {
        let TokenEndpoint {
            url,
            client_id,
            client_secret,
            scope,
        } = endpoint;
        let mut cached = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((token, until)) = cached.as_ref() {
            if std::time::Instant::now() < *until {
                return Ok(token.clone());
            }
        }
        let secret = client_secret
            .read()
            .map_err(|e| format!("the OAuth client secret: {e}"))?;
        let (token, said) = fetch_token(url, client_id, &secret, scope.as_deref())?;
        let claimed = jwt_expiry(token.expose()).map(|exp| {
            exp.duration_since(std::time::SystemTime::now())
                .unwrap_or(Duration::ZERO)
        });
        let lifetime = match (said, claimed) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let keep = lifetime.map_or(TOKEN_KEPT_UNSAID, |l| l.mul_f64(0.8));
        *cached = Some((token.clone(), std::time::Instant::now() + keep));
        Ok(token)
    }
}

/// When the JWT `token` expires, by its `exp` claim (RFC 7519 4.1.4);
/// `None` for a token that is not a JWT or has no `exp`.
fn jwt_expiry(token: &str) -> Option<std::time::SystemTime> {
    use base64::Engine as _;
    let mut parts = token.split('.');
    let (_, payload) = (parts.next()?, parts.next()?);
    parts.next()?;
    if parts.next().is_some() {
        return None;
    }
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    #[derive(serde::Deserialize)]
    struct Claims {
        exp: Option<f64>,
    }
    let exp = serde_json::from_slice::<Claims>(&bytes).ok()?.exp?;
    let exp = Duration::try_from_secs_f64(exp).ok()?;
    std::time::UNIX_EPOCH.checked_add(exp)
}

/// A token from the OAuth 2.0 endpoint `url` with the client credentials
/// grant, and how long it lives if the endpoint says.
fn fetch_token(
    url: &str,
    client_id: &str,
    secret: &Secret,
    scope: Option<&str>,
) -> Result<(Secret, Option<Duration>), String> {
    use base64::Engine as _;
    // RFC 6749 2.3.1: each part form-encoded, then Basic.
    let enc = |s: &str| form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
    let basic = base64::engine::general_purpose::STANDARD.encode(format!(
        "{}:{}",
        enc(client_id),
        enc(secret.expose())
    ));
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(30)))
        .http_status_as_error(false)
        .user_agent(concat!("sonde/", env!("CARGO_PKG_VERSION")))
        .build()
        .into();
    let mut form = vec![("grant_type", "client_credentials")];
    if let Some(scope) = scope {
        form.push(("scope", scope));
    }
    let mut answer = agent
        .post(url)
        .header("Authorization", &format!("Basic {basic}"))
        .header("Accept", "application/json")
        .send_form(form)
        .map_err(|e| format!("the token endpoint {url}: {e}"))?;
    let status = answer.status().as_u16();
    let body = answer
        .body_mut()
        .with_config()
        .limit(1 << 20)
        .read_to_string()
        .map_err(|e| format!("the token endpoint {url}: {e}"))?;
    if status != 200 {
        // An OAuth error body names the error, never the secret.
        let said: String = body.chars().take(300).collect();
        return Err(format!(
            "the token endpoint {url} answered {status}: {said}"
        ));
    }
    #[derive(serde::Deserialize)]
    struct Answer {
        access_token: String,
        expires_in: Option<f64>,
    }
    let a: Answer = serde_json::from_str(&body)
        .map_err(|e| format!("the token endpoint {url} answered no access_token: {e}"))?;
    if a.access_token.is_empty() {
        return Err(format!(
            "the token endpoint {url} answered an empty access_token"
        ));
    }
    let lifetime = a
        .expires_in
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(Duration::from_secs_f64);
    Ok((Secret::new(a.access_token), lifetime))
}

impl FileCredentials {
    fn stamp(tls: &ClientTls) -> Stamp {
        let files = tls
            .ca_file
            .iter()
            .chain(tls.client.iter().flat_map(|(c, k)| [c, k]));
        files
            .map(|f| {
                let m = std::fs::metadata(f).ok()?;
                Some((m.modified().ok()?, m.len()))
            })
            .collect()
    }
}

impl Credentials for FileCredentials {
    fn tls(&self) -> Result<Option<Arc<rustls::ClientConfig>>, String> {
        let Some(tls) = &self.security.tls else {
            return Ok(None);
        };
        let stamp = Self::stamp(tls);
        let mut cached = self.tls.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((at, config)) = cached.as_ref() {
            if *at == stamp {
                return Ok(Some(Arc::clone(config)));
            }
        }
        let config = sonde_runtime::tls::client_config(tls).map_err(|e| {
            let key = match &e {
                ClientTlsError::Ca(_) => "tls.ca_file",
                ClientTlsError::Client(inner) if inner.file() == TlsFile::Key => "tls.key_file",
                ClientTlsError::Client(_) => "tls.cert_file",
                ClientTlsError::NoRoots(_) => "tls",
            };
            format!("{key}: {e}")
        })?;
        *cached = Some((stamp, Arc::clone(&config)));
        Ok(Some(config))
    }

    fn sasl(&self) -> Result<Option<Sasl>, String> {
        let Some(s) = &self.security.sasl else {
            return Ok(None);
        };
        match s {
            SaslSettings::Password {
                hash,
                username,
                password,
            } => {
                let username = username.clone();
                let password = password
                    .read()
                    .map_err(|e| format!("the SASL password: {e}"))?;
                Ok(Some(match *hash {
                    None => Sasl::Plain { username, password },
                    Some(hash) => Sasl::Scram {
                        hash,
                        username,
                        password,
                    },
                }))
            }
            SaslSettings::TokenFile(path) => {
                let token = read_secret(path).map_err(|e| format!("the OAUTHBEARER token: {e}"))?;
                Ok(Some(Sasl::OAuthBearer { token }))
            }
            SaslSettings::TokenEndpoint(endpoint) => self
                .token
                .get(endpoint)
                .map(|token| Some(Sasl::OAuthBearer { token })),
        }
    }
}

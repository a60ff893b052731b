//! TLS files and client settings every TLS user of the agent shares: PEM
//! certificate chains and private keys read with errors that name the
//! file and what is wrong with it ([`certificates`], [`certified_key`]),
//! and the rustls client configuration of an outgoing connection
//! ([`client_config`]): the system's roots or a CA file, an optional
//! client certificate (mTLS), hostname verification that can be turned
//! off, TLS 1.2 and 1.3 with rustls' ring provider.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::sign::CertifiedKey;
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};

/// Which of the two files a [`TlsError`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsFile {
    /// The certificate chain (`cert_file`).
    Cert,
    /// The private key (`key_file`).
    Key,
}

/// Why a certificate chain and key cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Which one it is.
        file: TlsFile,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A file is not PEM, or holds a broken PEM section.
    #[error("{} is not PEM: {reason}", path.display())]
    Pem {
        /// The file.
        path: PathBuf,
        /// Which one it is.
        file: TlsFile,
        /// What the PEM parser said.
        reason: pem::Error,
    },
    /// The certificate file holds no `CERTIFICATE` section.
    #[error("{} holds no certificate (a PEM \"BEGIN CERTIFICATE\" section)", path.display())]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// The key file holds no private key section.
    #[error("{} holds no private key (a PEM \"BEGIN PRIVATE KEY\", \"BEGIN RSA PRIVATE KEY\" or \"BEGIN EC PRIVATE KEY\" section)", path.display())]
    NoKey {
        /// The file.
        path: PathBuf,
    },
    /// The key is of a kind rustls cannot sign with, or is corrupt.
    #[error("{} holds a key that cannot sign: {reason}", path.display())]
    Key {
        /// The file.
        path: PathBuf,
        /// What rustls said.
        reason: rustls::Error,
    },
    /// The first certificate is not a valid X.509 certificate.
    #[error("the first certificate in {} cannot be parsed: {reason}", path.display())]
    Certificate {
        /// The file.
        path: PathBuf,
        /// What rustls said.
        reason: rustls::Error,
    },
    /// The key is not the one the first certificate was issued for.
    #[error("the key in {} does not belong to the first certificate in {}", key.display(), cert.display())]
    Mismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
    },
}

impl TlsError {
    /// The file the error is about: the key file for a key that does not
    /// match, which is what changes when a certificate is renewed with a
    /// new key.
    pub fn file(&self) -> TlsFile {
        match self {
            TlsError::Read { file, .. } | TlsError::Pem { file, .. } => *file,
            TlsError::NoCertificate { .. } | TlsError::Certificate { .. } => TlsFile::Cert,
            TlsError::NoKey { .. } | TlsError::Key { .. } | TlsError::Mismatch { .. } => {
                TlsFile::Key
            }
        }
    }
}

/// Every certificate in a PEM file, in order (other sections skipped).
///
/// # Errors
///
/// The file cannot be read, is not PEM, or holds no certificate.
pub fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let text = read(path, TlsFile::Cert)?;
    let certs = CertificateDer::pem_slice_iter(&text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|reason| TlsError::Pem {
            path: path.to_path_buf(),
            file: TlsFile::Cert,
            reason,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

fn read(path: &Path, file: TlsFile) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        file,
        source,
    })
}

/// The chain in `cert` with the key in `key`, checked to belong together.
///
/// # Errors
///
/// A file cannot be read or parsed, or the key does not belong to the
/// first certificate.
pub fn certified_key(
    cert: &Path,
    key: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let chain = certificates(cert)?;
    let text = read(key, TlsFile::Key)?;
    let der = match PrivateKeyDer::from_pem_slice(&text) {
        Ok(der) => der,
        Err(pem::Error::NoItemsFound) => {
            return Err(TlsError::NoKey {
                path: key.to_path_buf(),
            })
        }
        Err(reason) => {
            return Err(TlsError::Pem {
                path: key.to_path_buf(),
                file: TlsFile::Key,
                reason,
            })
        }
    };
    let signer = provider
        .key_provider
        .load_private_key(der)
        .map_err(|reason| TlsError::Key {
            path: key.to_path_buf(),
            reason,
        })?;
    let certified = CertifiedKey::new(chain, signer);
    // Compares the key's public half with the certificate's: a handshake
    // with a key of another certificate would fail every client.
    match certified.keys_match() {
        Ok(()) => Ok(certified),
        Err(rustls::Error::InconsistentKeys(_)) => Err(TlsError::Mismatch {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
        }),
        Err(reason) => Err(TlsError::Certificate {
            path: cert.to_path_buf(),
            reason,
        }),
    }
}

/// What an outgoing TLS connection trusts and shows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientTls {
    /// The CA certificates (PEM) that sign the server's certificate;
    /// `None`: the system's roots.
    pub ca_file: Option<PathBuf>,
    /// The client's certificate chain and key (PEM), for servers that ask
    /// for one (mTLS).
    pub client: Option<(PathBuf, PathBuf)>,
    /// Whether the server's certificate must name the host connected to
    /// (on unless turned off; the chain is checked either way).
    pub verify_hostname: bool,
}

/// Why the system's roots cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("the system's CA certificates cannot be read ({reason}); install them (Debian: ca-certificates) or name a CA file")]
pub struct NoSystemRoots {
    reason: String,
}

/// The provider every TLS connection of the agent uses: rustls' ring
/// provider (the one ureq and the admin site already bring).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The system's CA certificates, as rustls-native-certs finds them
/// (`SSL_CERT_FILE`, `SSL_CERT_DIR`, else the distribution's bundle).
///
/// # Errors
///
/// No certificate could be loaded.
pub fn system_roots() -> Result<RootCertStore, NoSystemRoots> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let reason = found
            .errors
            .first()
            .map_or_else(|| "none found".to_string(), ToString::to_string);
        return Err(NoSystemRoots { reason });
    }
    Ok(roots)
}

/// Why a client configuration cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientTlsError {
    /// The CA file cannot be read or holds no usable certificate.
    #[error("{0}")]
    Ca(TlsError),
    /// The client certificate or key cannot be used.
    #[error("{0}")]
    Client(TlsError),
    /// No CA file and no system roots.
    #[error(transparent)]
    NoRoots(#[from] NoSystemRoots),
}

/// The rustls configuration of a client that trusts and shows what
/// `tls` says, with `alpn` protocols (empty for none).
///
/// # Errors
///
/// A file cannot be read or used, or there are no roots to trust.
pub fn client_config(tls: &ClientTls) -> Result<Arc<ClientConfig>, ClientTlsError> {
    let provider = provider();
    let roots = match &tls.ca_file {
        Some(path) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates(path).map_err(ClientTlsError::Ca)? {
                roots.add(cert).map_err(|reason| {
                    ClientTlsError::Ca(TlsError::Certificate {
                        path: path.clone(),
                        reason,
                    })
                })?;
            }
            roots
        }
        None => system_roots()?,
    };
    let roots = Arc::new(roots);
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .expect("rustls' ring provider speaks TLS 1.2 and 1.3");
    let verifier = WebPkiServerVerifier::builder_with_provider(roots, Arc::clone(&provider))
        .build()
        .expect("a verifier over a non-empty root store");
    let builder = if tls.verify_hostname {
        builder.with_webpki_verifier(verifier)
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyName(verifier)))
    };
    let config = match &tls.client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let certified = certified_key(cert, key, &provider).map_err(ClientTlsError::Client)?;
            builder
                .with_client_auth_cert(
                    certified.cert.clone(),
                    load_key(key).map_err(ClientTlsError::Client)?,
                )
                .map_err(|reason| {
                    ClientTlsError::Client(TlsError::Key {
                        path: key.clone(),
                        reason,
                    })
                })?
        }
    };
    Ok(Arc::new(config))
}

fn load_key(key: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let text = read(key, TlsFile::Key)?;
    PrivateKeyDer::from_pem_slice(&text).map_err(|reason| match reason {
        pem::Error::NoItemsFound => TlsError::NoKey {
            path: key.to_path_buf(),
        },
        reason => TlsError::Pem {
            path: key.to_path_buf(),
            file: TlsFile::Key,
            reason,
        },
    })
}

/// A verifier that checks the chain, its dates and the handshake's
/// signatures as WebPKI does, but accepts a certificate that does not
/// name the host (`verify_hostname = false`).
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

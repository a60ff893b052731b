//! TLS for the admin site (`agent.admin_tls`): a certificate chain and its
//! private key, read from PEM files, served by rustls with the ring
//! provider, TLS 1.2 and 1.3, ALPN `http/1.1`.
//!
//! [`Tls`] hands every handshake the key it holds now, so that
//! [`Tls::reload`] puts a renewed certificate in place without a restart:
//! handshakes already under way finish with the one they began with.
//!
//! ```no_run
//! # fn main() -> Result<(), sonde_admin::http::TlsError> {
//! use std::path::Path;
//! let tls = sonde_admin::http::Tls::load(
//!     Path::new("/etc/sonde/admin.crt"),
//!     Path::new("/etc/sonde/admin.key"),
//! )?;
//! // Later, after the files were renewed:
//! tls.reload(Path::new("/etc/sonde/admin.crt"), Path::new("/etc/sonde/admin.key"))?;
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::path::Path;
use std::sync::{Arc, PoisonError, RwLock};

use tokio_rustls::rustls::crypto::CryptoProvider;
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{self, ServerConfig};
use tokio_rustls::TlsAcceptor;

pub use sonde_runtime::tls::{certificates, certified_key, TlsError, TlsFile};

/// The admin site's certificate and key, and the rustls configuration that
/// serves them; cheap to clone (clones share the key [`Tls::reload`]
/// replaces).
#[derive(Clone)]
pub struct Tls {
    current: Arc<Current>,
    provider: Arc<CryptoProvider>,
    acceptor: TlsAcceptor,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls").finish_non_exhaustive()
    }
}

/// The key every new handshake is given.
#[derive(Debug)]
struct Current(RwLock<Arc<CertifiedKey>>);

impl ResolvesServerCert for Current {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(
            &self.0.read().unwrap_or_else(PoisonError::into_inner),
        ))
    }
}

impl Tls {
    /// Reads the chain in `cert` (the server's certificate first, then
    /// any intermediates) and the key in `key`, both PEM.
    ///
    /// # Errors
    ///
    /// A file cannot be read or parsed, or the key does not belong to the
    /// first certificate.
    pub fn load(cert: &Path, key: &Path) -> Result<Tls, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let certified = certified_key(cert, key, &provider)?;
        let current = Arc::new(Current(RwLock::new(Arc::new(certified))));
        let mut config = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .expect("rustls' ring provider speaks TLS 1.2 and 1.3")
            .with_no_client_auth()
            .with_cert_resolver(Arc::clone(&current) as Arc<dyn ResolvesServerCert>);
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Tls {
            current,
            provider,
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }

    /// Reads `cert` and `key` again and serves them from the next
    /// handshake on; on an error the key served so far stays.
    ///
    /// # Errors
    ///
    /// As [`Tls::load`].
    pub fn reload(&self, cert: &Path, key: &Path) -> Result<(), TlsError> {
        let certified = certified_key(cert, key, &self.provider)?;
        *self
            .current
            .0
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(certified);
        Ok(())
    }

    pub(super) fn acceptor(&self) -> &TlsAcceptor {
        &self.acceptor
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A self-signed certificate for 127.0.0.1 and its key, as PEM.
    fn self_signed() -> (String, String) {
        let c = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
        (c.cert.pem(), c.signing_key.serialize_pem())
    }

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn a_chain_and_its_key_load_and_a_renewed_pair_replaces_them() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = self_signed();
        let c = write(dir.path(), "c.pem", &cert);
        let k = write(dir.path(), "k.pem", &key);
        let tls = Tls::load(&c, &k).unwrap();
        let first = tls.current.0.read().unwrap().cert.clone();
        let (cert2, key2) = self_signed();
        write(dir.path(), "c.pem", &cert2);
        // A certificate renewed with a new key, before the key is written:
        // refused, and the old pair stays.
        let e = tls.reload(&c, &k).unwrap_err();
        assert!(matches!(e, TlsError::Mismatch { .. }), "{e}");
        assert_eq!(e.file(), TlsFile::Key);
        assert_eq!(tls.current.0.read().unwrap().cert, first);
        write(dir.path(), "k.pem", &key2);
        tls.reload(&c, &k).unwrap();
        let now = tls.current.0.read().unwrap().cert.clone();
        assert_ne!(now, first);
        assert_eq!(now, certificates(&c).unwrap());
    }

    #[test]
    fn each_broken_file_is_named_with_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = self_signed();
        let c = write(dir.path(), "c.pem", &cert);
        let k = write(dir.path(), "k.pem", &key);
        let missing = dir.path().join("missing.pem");
        let e = Tls::load(&missing, &k).unwrap_err();
        assert!(
            matches!(e, TlsError::Read { .. }) && e.file() == TlsFile::Cert,
            "{e}"
        );
        let e = Tls::load(&c, &missing).unwrap_err();
        assert!(
            matches!(e, TlsError::Read { .. }) && e.file() == TlsFile::Key,
            "{e}"
        );
        // The files swapped: no certificate in the key file, no key in the
        // certificate file.
        let e = Tls::load(&k, &c).unwrap_err();
        assert!(matches!(e, TlsError::NoCertificate { .. }), "{e}");
        assert!(e.to_string().contains("k.pem holds no certificate"), "{e}");
        let e = Tls::load(&c, &c).unwrap_err();
        assert!(
            matches!(e, TlsError::NoKey { .. }) && e.file() == TlsFile::Key,
            "{e}"
        );
        let broken = write(
            dir.path(),
            "broken.pem",
            "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n",
        );
        let e = Tls::load(&broken, &k).unwrap_err();
        assert!(matches!(e, TlsError::Pem { .. }), "{e}");
        let garbage = write(
            dir.path(),
            "garbage.pem",
            "-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----\n",
        );
        let e = Tls::load(&garbage, &k).unwrap_err();
        assert!(matches!(e, TlsError::Certificate { .. }), "{e}");
        assert_eq!(e.file(), TlsFile::Cert);
    }
}

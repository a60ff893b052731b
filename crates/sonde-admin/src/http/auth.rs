//! The admin site's credential: a random token the agent writes once to a
//! file only its user (and a group the config names) can read, asked of
//! every request but `/health`.
//!
//! A script sends it as `Authorization: Bearer TOKEN`. A browser gets it
//! once, at `/login` (a form, or the address `sonde admin-url` prints),
//! which sets it as an `HttpOnly`, `SameSite=Strict` cookie and sends the
//! browser on to `/` without it in the address; the pages' own requests
//! then carry the cookie, and no link ever holds the token.
//!
//! # Design
//!
//! The token is whoever can read the file: the same rule that guards what
//! the profiler sees (its `CAP_PERFMON`), kept by the file system rather
//! than by a user database of the agent's own. Tokens are compared in
//! constant time ([`subtle`]), so the time a refusal takes says nothing of
//! how much of a guess was right.

use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use hyper::header::{HeaderMap, AUTHORIZATION, COOKIE};
use subtle::ConstantTimeEq;

/// The cookie that carries the token for the pages.
pub const COOKIE_NAME: &str = "sonde_admin";

/// Random bytes in a token (hex-encoded in the file, 64 characters).
const TOKEN_BYTES: usize = 32;

/// The admin token.
#[derive(Clone)]
pub struct Token(Box<str>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

/// Why the token file could not be read or made.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The file could not be read, made or given its owner and mode.
    #[error("the admin token file {path}: {error}")]
    Io {
        /// The file.
        path: String,
        /// What the OS said.
        error: io::Error,
    },
    /// The file holds something that is not a token.
    #[error("the admin token file {0} does not hold a token (16 to 256 characters of A-Z, a-z, 0-9, - _ . ~); delete it for a new one")]
    Malformed(String),
}

impl Token {
    /// A token of the characters a header and a cookie carry as they are.
    ///
    /// # Errors
    ///
    /// A token shorter than 16 characters, longer than 256, or with other
    /// characters: `None`.
    pub fn new(text: &str) -> Option<Token> {
        let ok = (16..=256).contains(&text.len())
            && text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.~".contains(&b));
        ok.then(|| Token(text.into()))
    }

    /// The token, as a header or the `sonde admin-url` address carries it.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Reads the token at `path`, or makes one there (32 random bytes from
    /// the kernel, in hex) if there is none. The file is the agent's user's
    /// with mode 0640, given to `group` if one is named, so that the group
    /// may read it too; an existing file readable by others is narrowed to
    /// 0640.
    ///
    /// # Errors
    ///
    /// See [`TokenError`].
    pub fn load_or_create(path: &Path, group: Option<u32>) -> Result<Token, TokenError> {
        let io_err = |error| TokenError::Io {
            path: path.display().to_string(),
            error,
        };
        let (file, made) = match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o640)
            .open(path)
        {
            Ok(mut f) => {
                let token = random_token().map_err(io_err)?;
                f.write_all(format!("{token}\n").as_bytes())
                    .and_then(|()| f.sync_all())
                    .map_err(io_err)?;
                tracing::info!(path = %path.display(), "admin token written");
                (f, Some(token))
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                (std::fs::File::open(path).map_err(io_err)?, None)
            }
            Err(e) => return Err(io_err(e)),
        };
        let meta = file.metadata().map_err(io_err)?;
        if meta.mode() & 0o037 != 0 {
            tracing::warn!(path = %path.display(), mode = format!("{:o}", meta.mode() & 0o777), "the admin token file was readable by others; narrowed to 0640");
            file.set_permissions(std::fs::Permissions::from_mode(0o640))
                .map_err(io_err)?;
        }
        if let Some(gid) = group {
            if meta.gid() != gid {
                std::os::unix::fs::fchown(&file, None, Some(gid)).map_err(io_err)?;
            }
        }
        let text = match made {
            Some(token) => token,
            None => {
                let mut text = String::new();
                (&file).read_to_string(&mut text).map_err(io_err)?;
                text
            }
        };
        Token::new(text.trim()).ok_or_else(|| TokenError::Malformed(path.display().to_string()))
    }

    /// Whether `candidate` is the token, in time that depends only on the
    /// lengths.
    pub fn matches(&self, candidate: &[u8]) -> bool {
        self.0.as_bytes().ct_eq(candidate).into()
    }

    /// Whether a request carries the token, as `Authorization: Bearer` or
    /// in the [`COOKIE_NAME`] cookie.
    pub fn admits(&self, headers: &HeaderMap) -> bool {
        let bearer = headers
            .get_all(AUTHORIZATION)
            .iter()
            .filter_map(|v| v.as_bytes().strip_prefix(b"Bearer "))
            .any(|t| self.matches(t));
        bearer
            || headers
                .get_all(COOKIE)
                .iter()
                .flat_map(|v| v.as_bytes().split(|&b| b == b';'))
                .filter_map(|c| c.trim_ascii().strip_prefix(COOKIE_NAME.as_bytes()))
                .filter_map(|c| c.strip_prefix(b"="))
                .any(|t| self.matches(t))
    }

    /// The `Set-Cookie` value that hands the token to a browser; `secure`
    /// (a site served over HTTPS) keeps browsers from sending it over
    /// plain HTTP, where a cookie would also go to any other port of the
    /// same host.
    pub fn cookie(&self, secure: bool) -> String {
        let secure = if secure { "; Secure" } else { "" };
        format!(
            "{COOKIE_NAME}={}; Path=/; HttpOnly; SameSite=Strict{secure}",
            self.0
        )
    }
}

/// 32 random bytes from the kernel, in hex.
fn random_token() -> io::Result<String> {
    let mut bytes = [0u8; TOKEN_BYTES];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn headers(pairs: &[(hyper::header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(k.clone(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn only_the_token_itself_is_admitted() {
        let t = Token::new("0123456789abcdef0123456789abcdef").unwrap();
        let right = "0123456789abcdef0123456789abcdef";
        assert!(t.admits(&headers(&[(AUTHORIZATION, &format!("Bearer {right}"))])));
        assert!(t.admits(&headers(&[(
            COOKIE,
            &format!("a=b; sonde_admin={right}; c=d")
        )])));
        let one_byte_changed = "0123456789abcdef0123456789abcdee";
        for bad in [
            String::new(),
            "Bearer ".to_string(),
            format!("Bearer {one_byte_changed}"),
            format!("Bearer {right}0"),
            format!("Bearer {}", &right[1..]),
            format!("Basic {right}"),
            right.to_string(),
        ] {
            assert!(!t.admits(&headers(&[(AUTHORIZATION, &bad)])), "{bad:?}");
        }
        assert!(!t.admits(&HeaderMap::new()));
        assert!(!t.admits(&headers(&[(
            COOKIE,
            &format!("sonde_admin={one_byte_changed}")
        )])));
        assert!(!t.admits(&headers(&[(COOKIE, &format!("other={right}"))])));
    }

    #[test]
    fn a_token_is_made_once_readable_by_the_owner_and_group_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("admin.token");
        let t = Token::load_or_create(&path, None).unwrap();
        assert_eq!(t.as_str().len(), 64);
        assert!(t.as_str().bytes().all(|b| b.is_ascii_hexdigit()));
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o640);
        // Read again, not made again.
        assert_eq!(
            Token::load_or_create(&path, None).unwrap().as_str(),
            t.as_str()
        );
        // A file others could read is narrowed.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        Token::load_or_create(&path, None).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o640);
        // Two tokens differ.
        let other = Token::load_or_create(&dir.path().join("b"), None).unwrap();
        assert_ne!(other.as_str(), t.as_str());
    }

    #[test]
    fn a_file_that_holds_no_token_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("admin.token");
        std::fs::write(&path, "short\n").unwrap();
        let e = Token::load_or_create(&path, None).unwrap_err().to_string();
        assert!(e.contains("does not hold a token"), "{e}");
        assert!(Token::new("has a space in it 0123456789").is_none());
        assert!(Token::new(&"a".repeat(257)).is_none());
    }
}

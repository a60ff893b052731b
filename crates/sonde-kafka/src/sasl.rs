//! SASL authentication of a connection: the mechanisms and their
//! exchanges, which [`crate::client::Connection`] carries in
//! `SaslHandshake` and `SaslAuthenticate` requests (KIP-43, KIP-152)
//! right after it agreed on versions.
//!
//! * `PLAIN` (RFC 4616): the user name and password in one message; only
//!   over TLS, as anyone on the path reads them otherwise.
//! * `SCRAM-SHA-256` and `SCRAM-SHA-512` (RFC 5802, RFC 7677): the
//!   password never crosses the wire; the client proves it knows the
//!   salted password, and checks the server's signature, which proves the
//!   server knows it too (a server that does not is refused).
//! * `OAUTHBEARER` (RFC 7628, KIP-255): a bearer token (a JWT from the
//!   cluster's identity provider) in one message; a broker that refuses
//!   it answers with a JSON error, which the client acknowledges with a
//!   single `0x01` so that the broker ends the exchange with its error.
//!
//! A broker may give the session a lifetime (KIP-368, its
//! `connections.max.reauth.ms`, or the token's expiry):
//! [`crate::client::Connection`] then authenticates again on the same
//! connection before it ends, with credentials asked anew.
//!
//! HMAC, PBKDF2 and the client nonce come from ring, the crypto provider
//! rustls already uses. Passwords are used as given: SASLprep, which
//! would map a few non-ASCII characters before hashing, is not applied
//! (Kafka's own clients do not apply it either).

use std::fmt;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use ring::rand::SecureRandom as _;
use ring::{digest, hmac, pbkdf2};

/// A secret (password or token) that never prints: its `Debug` and
/// `Display` show `***`, so it cannot reach a log line by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `s`.
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }

    /// The secret itself, for the exchange.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// The hash of a SCRAM mechanism.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScramHash {
    /// `SCRAM-SHA-256`.
    Sha256,
    /// `SCRAM-SHA-512`.
    Sha512,
}

impl ScramHash {
    fn hmac(self) -> hmac::Algorithm {
        match self {
            ScramHash::Sha256 => hmac::HMAC_SHA256,
            ScramHash::Sha512 => hmac::HMAC_SHA512,
        }
    }

    fn pbkdf2(self) -> pbkdf2::Algorithm {
        match self {
            ScramHash::Sha256 => pbkdf2::PBKDF2_HMAC_SHA256,
            ScramHash::Sha512 => pbkdf2::PBKDF2_HMAC_SHA512,
        }
    }

    fn digest(self) -> &'static digest::Algorithm {
        match self {
            ScramHash::Sha256 => &digest::SHA256,
            ScramHash::Sha512 => &digest::SHA512,
        }
    }

    fn len(self) -> usize {
        self.digest().output_len()
    }
}

/// How a connection authenticates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sasl {
    /// `PLAIN`.
    Plain {
        /// The user.
        username: String,
        /// Their password.
        password: Secret,
    },
    /// `SCRAM-SHA-256` or `SCRAM-SHA-512`.
    Scram {
        /// The hash.
        hash: ScramHash,
        /// The user.
        username: String,
        /// Their password.
        password: Secret,
    },
    /// `OAUTHBEARER`.
    OAuthBearer {
        /// The bearer token.
        token: Secret,
    },
}

impl Sasl {
    /// The mechanism's name, as `SaslHandshake` and Kafka's
    /// `sasl.enabled.mechanisms` write it.
    pub fn mechanism(&self) -> &'static str {
        match self {
            Sasl::Plain { .. } => "PLAIN",
            Sasl::Scram {
                hash: ScramHash::Sha256,
                ..
            } => "SCRAM-SHA-256",
            Sasl::Scram {
                hash: ScramHash::Sha512,
                ..
            } => "SCRAM-SHA-512",
            Sasl::OAuthBearer { .. } => "OAUTHBEARER",
        }
    }

    /// A new exchange: the client's first message and the state that
    /// answers the server.
    pub(crate) fn start(&self) -> (Vec<u8>, Exchange) {
        match self {
            Sasl::Plain { username, password } => {
                // authzid (empty), authcid, password, NUL-separated.
                let mut m = Vec::with_capacity(username.len() + password.0.len() + 2);
                m.push(0);
                m.extend_from_slice(username.as_bytes());
                m.push(0);
                m.extend_from_slice(password.0.as_bytes());
                (m, Exchange::Done)
            }
            Sasl::Scram {
                hash,
                username,
                password,
            } => {
                let mut raw = [0u8; 24];
                ring::rand::SystemRandom::new()
                    .fill(&mut raw)
                    .expect("the system's random source");
                let scram = Scram::new(*hash, username, password, &BASE64.encode(raw));
                (scram.first().into_bytes(), Exchange::Scram(Box::new(scram)))
            }
            // RFC 7628 3.1: the GS2 header without an authorisation id,
            // then `auth=Bearer <token>`, each key-value pair ended by 0x01.
            Sasl::OAuthBearer { token } => (
                format!("n,,\x01auth=Bearer {}\x01\x01", token.0).into_bytes(),
                Exchange::Bearer,
            ),
        }
    }
}

/// Where an exchange stands after the client's last message.
#[derive(Debug)]
pub(crate) enum Exchange {
    /// Nothing more to say: the server's answer ends it.
    Done,
    /// Waiting for the SCRAM server's first message.
    Scram(Box<Scram>),
    /// Waiting for the SCRAM server's final message, which must carry
    /// this signature.
    ScramFinal(Vec<u8>),
    /// The bearer token is sent: an empty answer accepts it; a JSON error
    /// is acknowledged, and the broker's error follows.
    Bearer,
    /// The bearer token was refused with this error.
    BearerRefused(String),
}

impl Exchange {
    /// Takes the server's `message`: the client's next message, if it
    /// has one, and the state after it.
    ///
    /// # Errors
    ///
    /// The server's message is malformed, refuses the client or does not
    /// prove it knows the password.
    pub(crate) fn next(self, message: &[u8]) -> Result<(Option<Vec<u8>>, Exchange), String> {
        match self {
            Exchange::Done => Ok((None, Exchange::Done)),
            Exchange::Scram(scram) => {
                let (last, signature) = scram.answer(message)?;
                Ok((Some(last.into_bytes()), Exchange::ScramFinal(signature)))
            }
            Exchange::ScramFinal(expected) => {
                check_server_final(message, &expected)?;
                Ok((None, Exchange::Done))
            }
            Exchange::Bearer if message.is_empty() => Ok((None, Exchange::Done)),
            Exchange::Bearer => Ok((
                Some(vec![0x01]),
                Exchange::BearerRefused(String::from_utf8_lossy(message).into_owned()),
            )),
            Exchange::BearerRefused(error) => Err(format!("the broker refused the token: {error}")),
        }
    }

    /// Whether the exchange needs another answer from the server.
    pub(crate) fn waiting(&self) -> bool {
        !matches!(self, Exchange::Done)
    }
}

/// A SCRAM client between its first message and the server's first.
pub(crate) struct Scram {
    hash: ScramHash,
    password: Secret,
    nonce: String,
    first_bare: String,
}

impl fmt::Debug for Scram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scram")
            .field("hash", &self.hash)
            .finish_non_exhaustive()
    }
}

/// The most PBKDF2 iterations a server may ask for: Kafka takes 4,096 to
/// 16,384; far more would be a server making the client burn CPU.
const MAX_ITERATIONS: u32 = 1 << 20;

impl Scram {
    fn new(hash: ScramHash, username: &str, password: &Secret, nonce: &str) -> Self {
        // RFC 5802 5.1: `=` and `,` in a name are escaped.
        let name = username.replace('=', "=3D").replace(',', "=2C");
        Scram {
            hash,
            password: password.clone(),
            nonce: nonce.to_string(),
            first_bare: format!("n={name},r={nonce}"),
        }
    }

    /// The client's first message: no channel binding, no authzid.
    fn first(&self) -> String {
        format!("n,,{}", self.first_bare)
    }

    /// The client's final message for the server's first, and the
    /// server signature the server's final message must carry.
    fn answer(&self, server_first: &[u8]) -> Result<(String, Vec<u8>), String> {
        let server_first = std::str::from_utf8(server_first)
            .map_err(|_| "the SCRAM server's first message is not UTF-8".to_string())?;
        let mut nonce = None;
        let mut salt = None;
        let mut iterations = None;
        for part in server_first.split(',') {
            match part.split_once('=') {
                Some(("r", v)) => nonce = Some(v),
                Some(("s", v)) => salt = Some(v),
                Some(("i", v)) => iterations = Some(v),
                Some(("e", v)) => return Err(format!("the SCRAM server refused: {v}")),
                Some(("m", _)) => return Err("the SCRAM server asks for an extension".into()),
                _ => {}
            }
        }
        let bad = |what: &str| format!("the SCRAM server's first message has {what}");
        let nonce = nonce.ok_or_else(|| bad("no nonce"))?;
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err(bad("a nonce that does not extend the client's"));
        }
        let salt = BASE64
            .decode(salt.ok_or_else(|| bad("no salt"))?)
            .map_err(|_| bad("a salt that is not base64"))?;
        let iterations = iterations
            .ok_or_else(|| bad("no iteration count"))?
            .parse::<u32>()
            .ok()
            .filter(|i| (1..=MAX_ITERATIONS).contains(i))
            .ok_or_else(|| bad("an iteration count out of range"))?;
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{server_first},{without_proof}", self.first_bare);
        let (proof, server_signature) = self.prove(&salt, iterations, &auth_message);
        Ok((
            format!("{without_proof},p={}", BASE64.encode(proof)),
            server_signature,
        ))
    }

    /// ClientProof and ServerSignature (RFC 5802 3).
    fn prove(&self, salt: &[u8], iterations: u32, auth_message: &str) -> (Vec<u8>, Vec<u8>) {
        let h = self.hash;
        let mut salted = vec![0u8; h.len()];
        pbkdf2::derive(
            h.pbkdf2(),
            std::num::NonZeroU32::new(iterations).expect("checked above"),
            salt,
            self.password.0.as_bytes(),
            &mut salted,
        );
        let salted = hmac::Key::new(h.hmac(), &salted);
        let client_key = hmac::sign(&salted, b"Client Key");
        let stored_key = digest::digest(h.digest(), client_key.as_ref());
        let client_signature = hmac::sign(
            &hmac::Key::new(h.hmac(), stored_key.as_ref()),
            auth_message.as_bytes(),
        );
        let proof = client_key
            .as_ref()
            .iter()
            .zip(client_signature.as_ref())
            .map(|(k, s)| k ^ s)
            .collect();
        let server_key = hmac::sign(&salted, b"Server Key");
        let server_signature = hmac::sign(
            &hmac::Key::new(h.hmac(), server_key.as_ref()),
            auth_message.as_bytes(),
        );
        (proof, server_signature.as_ref().to_vec())
    }
}

/// Checks the SCRAM server's final message against the signature the
/// password gives.
fn check_server_final(message: &[u8], expected: &[u8]) -> Result<(), String> {
    let message = std::str::from_utf8(message)
        .map_err(|_| "the SCRAM server's final message is not UTF-8".to_string())?;
    if let Some(e) = message.strip_prefix("e=") {
        return Err(format!("the SCRAM server refused: {e}"));
    }
    let v = message
        .split(',')
        .find_map(|p| p.strip_prefix("v="))
        .ok_or("the SCRAM server's final message has no signature")?;
    let got = BASE64
        .decode(v)
        .map_err(|_| "the SCRAM server's signature is not base64".to_string())?;
    // Constant time, as the signature is a secret's function.
    if !bool::from(subtle::ConstantTimeEq::ct_eq(&got[..], expected)) {
        return Err(
            "the SCRAM server's signature is wrong: it does not know the password (a server that is not the cluster's?)"
                .into(),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677 section 3: user "user", password "pencil", client nonce
    /// "rOprNGfwEbeRWgbNEkqO", 4096 iterations.
    #[test]
    fn scram_sha_256_matches_the_rfc_7677_example() {
        let s = Scram::new(
            ScramHash::Sha256,
            "user",
            &Secret::new("pencil"),
            "rOprNGfwEbeRWgbNEkqO",
        );
        assert_eq!(s.first(), "n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let server_first =
            "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let (last, signature) = s.answer(server_first.as_bytes()).unwrap();
        assert_eq!(
            last,
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        check_server_final(
            b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
            &signature,
        )
        .unwrap();
        let e = check_server_final(
            b"v=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
            &signature,
        )
        .unwrap_err();
        assert!(e.contains("does not know the password"), "{e}");
    }

    /// SHA-512 has no published example: the server's side computed here
    /// from the RFC's definitions must accept the proof and prove itself.
    #[test]
    fn scram_sha_512_proves_both_ways() {
        let password = Secret::new("s3cret,=");
        let s = Scram::new(ScramHash::Sha512, "al=ice,", &password, "abc");
        assert_eq!(s.first(), "n,,n=al=3Dice=2C,r=abc");
        let salt = b"0123456789abcdef";
        let server_first = format!("r=abcdef,s={},i=4096", BASE64.encode(salt));
        let (last, signature) = s.answer(server_first.as_bytes()).unwrap();
        // The server: StoredKey from the salted password, then the
        // client key recovered from the proof must hash to it.
        let auth = format!("n=al=3Dice=2C,r=abc,{server_first},c=biws,r=abcdef");
        let mut salted = [0u8; 64];
        pbkdf2::derive(
            pbkdf2::PBKDF2_HMAC_SHA512,
            std::num::NonZeroU32::new(4096).unwrap(),
            salt,
            b"s3cret,=",
            &mut salted,
        );
        let key = hmac::Key::new(hmac::HMAC_SHA512, &salted);
        let stored = digest::digest(&digest::SHA512, hmac::sign(&key, b"Client Key").as_ref());
        let proof = BASE64.decode(last.rsplit_once(",p=").unwrap().1).unwrap();
        let client_signature = hmac::sign(
            &hmac::Key::new(hmac::HMAC_SHA512, stored.as_ref()),
            auth.as_bytes(),
        );
        let client_key: Vec<u8> = proof
            .iter()
            .zip(client_signature.as_ref())
            .map(|(p, s)| p ^ s)
            .collect();
        assert_eq!(
            digest::digest(&digest::SHA512, &client_key).as_ref(),
            stored.as_ref()
        );
        let server_key = hmac::sign(&key, b"Server Key");
        let v = hmac::sign(
            &hmac::Key::new(hmac::HMAC_SHA512, server_key.as_ref()),
            auth.as_bytes(),
        );
        assert_eq!(signature, v.as_ref());
    }

    #[test]
    fn a_server_that_does_not_extend_the_nonce_or_asks_too_much_is_refused() {
        let s = Scram::new(ScramHash::Sha256, "u", &Secret::new("p"), "abc");
        for (first, says) in [
            ("r=xyz,s=c2FsdA==,i=4096", "does not extend"),
            ("r=abc,s=c2FsdA==,i=4096", "does not extend"),
            ("r=abcd,s=c2FsdA==,i=0", "out of range"),
            ("r=abcd,s=c2FsdA==,i=99999999", "out of range"),
            ("r=abcd,s=!!,i=4096", "not base64"),
            ("r=abcd,i=4096", "no salt"),
            ("e=unknown-user", "refused: unknown-user"),
        ] {
            let e = s.answer(first.as_bytes()).unwrap_err();
            assert!(e.contains(says), "{first}: {e}");
        }
    }

    #[test]
    fn plain_sends_the_name_and_password_and_secrets_never_print() {
        let sasl = Sasl::Plain {
            username: "alice".into(),
            password: Secret::new("hunter2"),
        };
        let (first, next) = sasl.start();
        assert_eq!(first, b"\0alice\0hunter2");
        assert!(!next.waiting());
        assert_eq!(sasl.mechanism(), "PLAIN");
        let shown = format!("{sasl:?}");
        assert!(
            !shown.contains("hunter2") && shown.contains("***"),
            "{shown}"
        );
        let scram = Sasl::Scram {
            hash: ScramHash::Sha512,
            username: "alice".into(),
            password: Secret::new("hunter2"),
        };
        let (first, next) = scram.start();
        let first = String::from_utf8(first).unwrap();
        assert!(first.starts_with("n,,n=alice,r="), "{first}");
        assert!(next.waiting() && !format!("{next:?}").contains("hunter2"));
        assert_eq!(scram.mechanism(), "SCRAM-SHA-512");
    }

    #[test]
    fn oauthbearer_sends_the_token_and_acknowledges_a_refusal() {
        let sasl = Sasl::OAuthBearer {
            token: Secret::new("eyJ.x."),
        };
        assert_eq!(sasl.mechanism(), "OAUTHBEARER");
        let (first, next) = sasl.start();
        assert_eq!(first, b"n,,\x01auth=Bearer eyJ.x.\x01\x01");
        assert!(!format!("{sasl:?}").contains("eyJ"));
        // Accepted: an empty answer ends it.
        let (more, after) = next.next(b"").unwrap();
        assert!(more.is_none() && !after.waiting());
        // Refused: 0x01 goes back, and a further answer is the error.
        let (_, next) = sasl.start();
        let (more, after) = next.next(br#"{"status":"invalid_token"}"#).unwrap();
        assert_eq!(more.unwrap(), [0x01]);
        let e = after.next(b"").unwrap_err();
        assert!(e.contains("invalid_token"), "{e}");
    }
}

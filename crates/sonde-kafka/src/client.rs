//! A blocking connection to one Kafka broker: the versions it serves
//! (ApiVersions), the cluster's brokers and partition leaders
//! (Metadata), and produce requests, several in flight at once.
//!
//! Kafka answers the requests of one connection in the order they were
//! sent, so a producer writes request after request
//! ([`Connection::send_produce`]) and reads their responses in turn
//! ([`Connection::recv_produce`]); the connection remembers the
//! correlation id each response must carry.
//!
//! A produce request is written straight into the caller's buffer:
//! [`begin_produce`] writes the header, the caller appends one record
//! batch ([`crate::BatchBuilder::finish`]), and `send_produce` fills in
//! the version, the correlation id and the sizes and writes the buffer
//! with one `write`. The same bytes can be sent again, on this connection
//! or another, after a failure.
//!
//! A connection is plaintext or TLS (rustls, as [`Dial::credentials`] say),
//! and authenticates with SASL ([`crate::sasl`]) after the versions are
//! agreed, before any other request.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;

use crate::sasl::Sasl;

use crate::wire::{put_i16, put_i32, put_i64, put_i8, put_nullable_str, put_str, set_i32};
use crate::wire::{Malformed, Reader};

const API_PRODUCE: i16 = 0;
const API_METADATA: i16 = 3;
const API_VERSIONS: i16 = 18;
const API_FIND_COORDINATOR: i16 = 10;
const API_INIT_PRODUCER_ID: i16 = 22;
const API_ADD_PARTITIONS_TO_TXN: i16 = 24;
const API_END_TXN: i16 = 26;
const API_SASL_HANDSHAKE: i16 = 17;
const API_SASL_AUTHENTICATE: i16 = 36;

/// How long after a re-authentication began the next may begin: a broker
/// refuses one within a second of the last, as measured when the request
/// reaches it (hence the margin).
const MIN_REAUTH_GAP: Duration = Duration::from_millis(1100);

/// The versions sonde speaks: the non-flexible ones, which Kafka 1.0 to
/// 4.x all serve (4.0 dropped Produce 0 to 2 and Metadata 0 to 3).
const PRODUCE_VERSIONS: (i16, i16) = (3, 8);
const METADATA_VERSIONS: (i16, i16) = (4, 8);
const INIT_PRODUCER_ID_VERSIONS: (i16, i16) = (0, 1);
const FIND_COORDINATOR_VERSIONS: (i16, i16) = (1, 2);
const ADD_PARTITIONS_TO_TXN_VERSIONS: (i16, i16) = (0, 2);
const END_TXN_VERSIONS: (i16, i16) = (0, 2);
/// Version 1 wraps the exchange in `SaslAuthenticate` requests (0 sent
/// it raw, and Kafka 4.0 dropped it).
const SASL_HANDSHAKE_VERSIONS: (i16, i16) = (1, 1);
/// Version 1 adds the session's lifetime (KIP-368); 2 is flexible.
const SASL_AUTHENTICATE_VERSIONS: (i16, i16) = (0, 1);

/// The largest response read (a metadata response of a large cluster
/// stays far below it); a larger size field is taken for garbage.
const MAX_RESPONSE: usize = 64 << 20;

/// What went wrong talking to a broker.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The connection failed or timed out.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The broker's answer did not parse.
    #[error(transparent)]
    Malformed(#[from] Malformed),
    /// The broker does not serve a version sonde speaks.
    #[error(
        "the broker ({release}, by its ApiVersions) serves {api} versions {min} to {max}; sonde speaks {want_min} to {want_max}"
    )]
    Unsupported {
        /// The broker's release, as far as its ApiVersions tell.
        release: crate::versions::Release,
        /// The API.
        api: &'static str,
        /// The broker's lowest version.
        min: i16,
        /// The broker's highest version.
        max: i16,
        /// sonde's lowest.
        want_min: i16,
        /// sonde's highest.
        want_max: i16,
    },
    /// The TLS handshake failed: the broker's certificate is not
    /// trusted or does not name it, or it refused the client's.
    #[error("TLS with {addr}: {reason}")]
    Tls {
        /// The broker.
        addr: String,
        /// What rustls said.
        reason: String,
    },
    /// SASL authentication failed: the broker refused the credentials or
    /// the mechanism, or (SCRAM) could not prove it knows the password.
    #[error("SASL {mechanism} with {addr}: {reason}")]
    Auth {
        /// The mechanism.
        mechanism: &'static str,
        /// The broker.
        addr: String,
        /// The broker's message, or what was wrong with its answer.
        reason: String,
    },
    /// The broker answered with an error code for the whole request.
    #[error("{api}: {}", code_name(*code))]
    Broker {
        /// The API.
        api: &'static str,
        /// Kafka's error code.
        code: i16,
    },
}

/// Kafka's name for an error code, for the common ones.
pub fn code_name(code: i16) -> String {
    let name = match code {
        0 => "NONE",
        1 => "OFFSET_OUT_OF_RANGE",
        2 => "CORRUPT_MESSAGE",
        3 => "UNKNOWN_TOPIC_OR_PARTITION",
        5 => "LEADER_NOT_AVAILABLE",
        6 => "NOT_LEADER_OR_FOLLOWER",
        7 => "REQUEST_TIMED_OUT",
        10 => "MESSAGE_TOO_LARGE",
        13 => "NETWORK_EXCEPTION",
        14 => "COORDINATOR_LOAD_IN_PROGRESS",
        15 => "COORDINATOR_NOT_AVAILABLE",
        16 => "NOT_COORDINATOR",
        17 => "INVALID_TOPIC_EXCEPTION",
        18 => "RECORD_LIST_TOO_LARGE",
        19 => "NOT_ENOUGH_REPLICAS",
        20 => "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
        21 => "INVALID_REQUIRED_ACKS",
        29 => "TOPIC_AUTHORIZATION_FAILED",
        32 => "INVALID_TIMESTAMP",
        35 => "UNSUPPORTED_VERSION",
        45 => "OUT_OF_ORDER_SEQUENCE_NUMBER",
        46 => "DUPLICATE_SEQUENCE_NUMBER",
        47 => "INVALID_PRODUCER_EPOCH",
        48 => "INVALID_TXN_STATE",
        51 => "CONCURRENT_TRANSACTIONS",
        56 => "KAFKA_STORAGE_ERROR",
        59 => "UNKNOWN_PRODUCER_ID",
        74 => "FENCED_LEADER_EPOCH",
        76 => "UNSUPPORTED_COMPRESSION_TYPE",
        87 => "INVALID_RECORD",
        90 => "PRODUCER_FENCED",
        _ => return format!("error code {code}"),
    };
    format!("{name} ({code})")
}

/// True for the error codes a producer may retry: the partition's leader
/// moved or is not there yet, replicas lag, a timeout, a coordinator
/// loading or moved. The others (a record too large, a topic not
/// authorised, a corrupt batch) fail again.
pub fn retriable(code: i16) -> bool {
    matches!(
        code,
        3 | 5 | 6 | 7 | 13 | 14 | 15 | 16 | 19 | 20 | 51 | 56 | 74
    )
}

/// `MESSAGE_TOO_LARGE` or `RECORD_LIST_TOO_LARGE`: the batch is larger
/// than the topic takes; its records may go in smaller batches.
pub fn too_large(code: i16) -> bool {
    matches!(code, 10 | 18)
}

/// `DUPLICATE_SEQUENCE_NUMBER`: the broker had written the batch already
/// (sent again after a lost answer), which counts as written.
pub const DUPLICATE_SEQUENCE: i16 = 46;

/// The broker refuses the producer itself (an out-of-order sequence, an
/// unknown id, an old epoch, fenced, a transaction in the wrong state):
/// only a new producer id or epoch goes on.
pub fn producer_refused(code: i16) -> bool {
    matches!(code, 45 | 47 | 48 | 59 | 90)
}

/// Returns `Err(Error::Broker)` for a non-zero error code of `api`.
fn check(api: &'static str, code: i16) -> Result<(), Error> {
    if code == 0 {
        Ok(())
    } else {
        Err(Error::Broker { api, code })
    }
}

/// A broker of the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Broker {
    /// Its node id.
    pub id: i32,
    /// Its advertised host.
    pub host: String,
    /// Its port.
    pub port: i32,
}

/// One partition of a topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionMetadata {
    /// Its index.
    pub id: i32,
    /// The node id of its leader (-1 when it has none).
    pub leader: i32,
    /// Its error code (0: none).
    pub error: i16,
}

/// One topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicMetadata {
    /// Its name.
    pub name: String,
    /// Its error code (0: none).
    pub error: i16,
    /// Its partitions, as the broker listed them.
    pub partitions: Vec<PartitionMetadata>,
}

/// A metadata response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Metadata {
    /// The cluster's brokers.
    pub brokers: Vec<Broker>,
    /// The topics asked for.
    pub topics: Vec<TopicMetadata>,
}

/// The outcome of a produce request for one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionResult {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// Kafka's error code (0: the batch is written and replicated as
    /// `acks` asked).
    pub error: i16,
    /// The offset the batch's first record got.
    pub base_offset: i64,
    /// The broker's message, when it gave one (version 8).
    pub message: Option<String>,
}

/// Where [`begin_produce`] left a request.
#[derive(Clone, Copy, Debug)]
pub struct ProduceFrame {
    /// Where the records' `i32` size goes.
    records_size_at: usize,
}

/// Writes the header of a request into `buf` (cleared): size, `api`,
/// `version` and correlation id (0 each until the request is sent when
/// not given), client id.
fn put_header(buf: &mut Vec<u8>, api: i16, version: i16, correlation: i32, client_id: &str) {
    buf.clear();
    put_i32(buf, 0); // size, set when sent
    put_i16(buf, api);
    put_i16(buf, version);
    put_i32(buf, correlation);
    put_nullable_str(buf, Some(client_id));
}

/// Starts a produce request in `buf` (cleared) for one batch to
/// `topic`/`partition`, for a transactional producer when
/// `transactional_id` is given: the caller appends the batch, then calls
/// [`Connection::send_produce`]. `acks` is -1 (all in-sync replicas) or 1
/// (the leader); 0 (no response) is not supported.
pub fn begin_produce(
    buf: &mut Vec<u8>,
    client_id: &str,
    transactional_id: Option<&str>,
    acks: i16,
    timeout_ms: i32,
    topic: &str,
    partition: i32,
) -> ProduceFrame {
    // Version and correlation id: set by `send_produce`.
    put_header(buf, API_PRODUCE, 0, 0, client_id);
    put_nullable_str(buf, transactional_id);
    put_i16(buf, acks);
    put_i32(buf, timeout_ms);
    put_i32(buf, 1);
    put_str(buf, topic);
    put_i32(buf, 1);
    put_i32(buf, partition);
    let records_size_at = buf.len();
    put_i32(buf, 0);
    ProduceFrame { records_size_at }
}

/// What a connection is secured with, asked each time one is opened, so
/// that a renewed certificate or a changed password applies from the next
/// connection on without a restart.
pub trait Credentials: Send + Sync + std::fmt::Debug {
    /// TLS with this configuration, or plaintext (`None`).
    ///
    /// # Errors
    ///
    /// What the certificates or keys lack, in words for the user.
    fn tls(&self) -> Result<Option<Arc<rustls::ClientConfig>>, String>;

    /// SASL with these credentials, or none.
    ///
    /// # Errors
    ///
    /// The secret cannot be read, in words for the user.
    fn sasl(&self) -> Result<Option<Sasl>, String>;
}

/// Credentials that do not change.
#[derive(Clone, Debug, Default)]
pub struct Fixed {
    /// TLS with this configuration (`None`: plaintext).
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// SASL with these credentials (`None`: none).
    pub sasl: Option<Sasl>,
}

impl Credentials for Fixed {
    fn tls(&self) -> Result<Option<Arc<rustls::ClientConfig>>, String> {
        Ok(self.tls.clone())
    }

    fn sasl(&self) -> Result<Option<Sasl>, String> {
        Ok(self.sasl.clone())
    }
}

/// How to open a connection: the client id every request carries, the
/// bound on each read and write, and what secures it.
#[derive(Clone, Debug)]
pub struct Dial {
    /// The client id.
    pub client_id: String,
    /// Bounds the connect, each read and each write.
    pub timeout: Duration,
    /// TLS and SASL, asked at each connection.
    pub credentials: Arc<dyn Credentials>,
}

impl Dial {
    /// Plaintext, no SASL.
    pub fn plain(client_id: &str, timeout: Duration) -> Self {
        Dial {
            client_id: client_id.to_string(),
            timeout,
            credentials: Arc::new(Fixed::default()),
        }
    }
}

/// The bytes of a connection: TCP, or TLS over TCP.
enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Stream {
    fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => &s.sock,
        }
    }
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stream::Plain(_) => f.write_str("Plain"),
            Stream::Tls(_) => f.write_str("Tls"),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.write_all(buf),
            Stream::Tls(s) => {
                s.write_all(buf)?;
                // rustls encrypts into its buffer; the records go now.
                s.flush()
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// The host of `addr` (`host:port`, an IPv6 address in brackets), as
/// TLS names it.
fn server_name(addr: &str) -> Result<ServerName<'static>, Error> {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    ServerName::try_from(host.to_string()).map_err(|_| Error::Tls {
        addr: addr.to_string(),
        reason: format!("{host:?} is not a host name TLS can check"),
    })
}

/// SASL credentials that could not be had (a secret unreadable, a token
/// endpoint refusing), as the connection's error.
fn credentials_error(addr: &str, reason: String) -> Error {
    Error::Auth {
        mechanism: "credentials",
        addr: addr.to_string(),
        reason,
    }
}

/// Takes the rustls error out of an I/O error of a TLS stream, as the
/// connection's error.
fn tls_error(addr: &str, e: io::Error) -> Error {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(reason) => Error::Tls {
            addr: addr.to_string(),
            reason: describe_tls(reason),
        },
        None => Error::Io(e),
    }
}

/// rustls' error in words a user acts on.
fn describe_tls(e: &rustls::Error) -> String {
    use rustls::{AlertDescription, CertificateError};
    match e {
        rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => {
            "the broker's certificate is not signed by a trusted CA (set tls.ca_file to the CA that signed it)".into()
        }
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => "the broker's certificate does not name the host connected to (connect by a name the certificate holds, or set tls.verify_hostname = false)".into(),
        rustls::Error::InvalidCertificate(
            CertificateError::Expired | CertificateError::ExpiredContext { .. },
        ) => "the broker's certificate has expired".into(),
        rustls::Error::AlertReceived(
            AlertDescription::CertificateRequired
            | AlertDescription::BadCertificate
            | AlertDescription::CertificateUnknown
            | AlertDescription::UnknownCA,
        ) => "the broker refused the client's certificate (set tls.cert_file and tls.key_file to one its CA signed)".into(),
        // Kafka before 3.0 (Java's TLS 1.3 of its time) answers a client
        // certificate it refuses with a record sealed under keys the
        // client no longer reads with, not with an alert: this is what
        // rustls reports then (checked against 2.8.2, kafka_security.rs).
        rustls::Error::DecryptError => "the broker's answer could not be decrypted, which is how a broker before Kafka 3.0 says it refused the client's certificate (set tls.cert_file and tls.key_file to one its CA signed)".into(),
        other => other.to_string(),
    }
}

/// A connection to one broker.
#[derive(Debug)]
pub struct Connection {
    stream: Stream,
    client_id: String,
    next_correlation: i32,
    /// Correlation ids of the produce requests sent and not yet answered.
    in_flight: VecDeque<i32>,
    /// The broker, `host:port`, for errors.
    addr: String,
    /// How long the broker keeps the SASL session, if it said.
    session_lifetime: Option<Duration>,
    /// When to authenticate again (KIP-368): 85% into the session.
    reauth_at: Option<std::time::Instant>,
    /// When the session the broker gave ends.
    session_ends: Option<std::time::Instant>,
    /// When the last re-authentication began: a broker refuses one that
    /// begins within a second of the last, and closes the connection if
    /// the session has run out meanwhile.
    reauth_began: Option<std::time::Instant>,
    /// Until when the broker asked for no more requests (the
    /// `throttle_time_ms` of its last answer, KIP-219).
    throttled_until: Option<std::time::Instant>,
    /// Throttle time of answers not yet taken by [`Connection::take_throttle`].
    throttled: Duration,
    /// Where the SASL credentials of a new authentication come from.
    credentials: Arc<dyn Credentials>,
    produce_version: i16,
    metadata_version: i16,
    /// Every API the broker serves: key, lowest and highest version.
    apis: Vec<(i16, i16, i16)>,
    response: Vec<u8>,
    scratch: Vec<u8>,
}

impl Connection {
    /// Connects to `addr` (`host:port`) as `dial` says (its credentials
    /// asked now), agrees on versions with the broker and authenticates.
    ///
    /// # Errors
    ///
    /// The broker cannot be reached, serves none of the versions sonde
    /// speaks, fails the TLS handshake ([`Error::Tls`]) or refuses the
    /// credentials ([`Error::Auth`]).
    pub fn connect(addr: &str, dial: &Dial) -> Result<Self, Error> {
        let timeout = dial.timeout;
        let tls = dial.credentials.tls().map_err(|reason| Error::Tls {
            addr: addr.to_string(),
            reason,
        })?;
        let sasl = dial
            .credentials
            .sasl()
            .map_err(|reason| credentials_error(addr, reason))?;
        let mut last = io::Error::new(
            io::ErrorKind::NotFound,
            format!("{addr} resolves to nothing"),
        );
        let mut stream = None;
        for a in addr.to_socket_addrs()? {
            match TcpStream::connect_timeout(&a, timeout) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = e,
            }
        }
        let tcp = stream.ok_or(last)?;
        tcp.set_nodelay(true)?;
        tcp.set_read_timeout(Some(timeout))?;
        tcp.set_write_timeout(Some(timeout))?;
        let secure = tls.is_some();
        let stream = match tls {
            None => Stream::Plain(tcp),
            Some(config) => {
                let tls =
                    rustls::ClientConnection::new(config, server_name(addr)?).map_err(|e| {
                        Error::Tls {
                            addr: addr.to_string(),
                            reason: describe_tls(&e),
                        }
                    })?;
                let mut s = rustls::StreamOwned::new(tls, tcp);
                // The handshake now, so that its failure is told as one
                // rather than as the first request's.
                while s.conn.is_handshaking() {
                    s.conn
                        .complete_io(&mut s.sock)
                        .map_err(|e| tls_error(addr, e))?;
                }
                Stream::Tls(Box::new(s))
            }
        };
        let mut c = Connection {
            stream,
            addr: addr.to_string(),
            client_id: dial.client_id.clone(),
            next_correlation: 0,
            in_flight: VecDeque::new(),
            produce_version: 0,
            metadata_version: 0,
            apis: Vec::new(),
            response: Vec::new(),
            scratch: Vec::new(),
            session_lifetime: None,
            reauth_at: None,
            session_ends: None,
            reauth_began: None,
            throttled_until: None,
            throttled: Duration::ZERO,
            credentials: Arc::clone(&dial.credentials),
        };
        // Under TLS 1.3 a broker that refuses the client's certificate
        // says so after the handshake, in an alert the first read meets.
        let untls = |e: Error| match e {
            Error::Io(io) if secure => tls_error(addr, io),
            e => e,
        };
        c.negotiate().map_err(untls)?;
        if let Some(sasl) = &sasl {
            c.authenticate(sasl).map_err(untls)?;
        }
        Ok(c)
    }

    /// How long the broker keeps the SASL session (KIP-368), if it said.
    pub fn session_lifetime(&self) -> Option<Duration> {
        self.session_lifetime
    }

    /// Until when the broker asked this client to send nothing more (a
    /// quota's `throttle_time_ms` in its last produce answer), if that is
    /// still ahead. A broker that throttles answers at once and then
    /// holds the connection's further requests (KIP-219): a client that
    /// waits keeps its requests' timeouts for real delays.
    pub fn throttled_until(&self) -> Option<std::time::Instant> {
        self.throttled_until
            .filter(|&t| t > std::time::Instant::now())
    }

    /// The throttle time the broker's answers asked for since the last
    /// call, for the counters.
    pub fn take_throttle(&mut self) -> Duration {
        std::mem::take(&mut self.throttled)
    }

    fn note_throttle(&mut self, ms: i32) {
        if ms > 0 {
            let d = Duration::from_millis(u64::try_from(ms).unwrap_or(0));
            self.throttled += d;
            self.throttled_until = Some(std::time::Instant::now() + d);
        }
    }

    /// Authenticates again on this connection when the session the
    /// broker gave is 85% through (KIP-368), with credentials asked anew
    /// (a token refreshed meanwhile); only with nothing in flight. A
    /// connection whose produce requests never leave it idle is closed by
    /// the broker at the session's end instead, and opened again.
    ///
    /// A broker refuses a re-authentication begun within a second of the
    /// last one ([`MIN_REAUTH_GAP`]). A session shorter than that (a token
    /// near its expiry) is renewed when the second is over; a request due
    /// after the session ended and before then waits for it, as the broker
    /// closes a connection that sends anything but a new authentication
    /// on an ended session.
    fn reauthenticate_if_due(&mut self) -> Result<(), Error> {
        let now = std::time::Instant::now();
        if self.reauth_at.is_none_or(|at| now < at) {
            return Ok(());
        }
        if let Some(allowed) = self.reauth_began.map(|b| b + MIN_REAUTH_GAP) {
            if now < allowed {
                if self.session_ends.is_some_and(|end| now < end) {
                    return Ok(());
                }
                std::thread::sleep(allowed - now);
            }
        }
        self.reauth_at = None;
        self.reauth_began = Some(std::time::Instant::now());
        let sasl = self
            .credentials
            .sasl()
            .map_err(|reason| credentials_error(&self.addr, reason))?;
        match sasl {
            Some(sasl) => self.authenticate(&sasl),
            None => Ok(()),
        }
    }

    /// Authenticates with `sasl`: `SaslHandshake` names the mechanism,
    /// then `SaslAuthenticate` requests carry the exchange.
    fn authenticate(&mut self, sasl: &Sasl) -> Result<(), Error> {
        let mechanism = sasl.mechanism();
        let refused = |addr: &str, reason: String| Error::Auth {
            mechanism,
            addr: addr.to_string(),
            reason,
        };
        let v = self.version("SaslHandshake", API_SASL_HANDSHAKE, SASL_HANDSHAKE_VERSIONS)?;
        let body = self.call(API_SASL_HANDSHAKE, v, |buf| put_str(buf, mechanism))?;
        let mut r = Reader::new(&body);
        let code = r.i16("sasl handshake error")?;
        let mut enabled = Vec::new();
        for _ in 0..r.count(2, "sasl mechanisms")? {
            enabled.push(r.str("sasl mechanism")?);
        }
        if code != 0 {
            let reason = if code == 33 {
                format!(
                    "the broker's listener does not enable it; it enables {}",
                    if enabled.is_empty() {
                        "none".to_string()
                    } else {
                        enabled.join(", ")
                    }
                )
            } else {
                code_name(code)
            };
            return Err(refused(&self.addr, reason));
        }
        let v = self.version(
            "SaslAuthenticate",
            API_SASL_AUTHENTICATE,
            SASL_AUTHENTICATE_VERSIONS,
        )?;
        let began = std::time::Instant::now();
        let (mut message, mut exchange) = sasl.start();
        loop {
            let body = self.call(API_SASL_AUTHENTICATE, v, |buf| {
                put_i32(buf, message.len() as i32);
                buf.extend_from_slice(&message);
            })?;
            let mut r = Reader::new(&body);
            let code = r.i16("sasl authenticate error")?;
            let text = r.nullable_str("sasl error message")?;
            let len = r.i32("sasl bytes size")?;
            let answer = if len < 0 {
                &[][..]
            } else {
                r.bytes(len as usize, "sasl bytes")?
            };
            let lifetime = if v >= 1 {
                r.i64("session lifetime")?
            } else {
                0
            };
            if code != 0 {
                return Err(refused(&self.addr, text.unwrap_or_else(|| code_name(code))));
            }
            let (next, after) = exchange
                .next(answer)
                .map_err(|reason| refused(&self.addr, reason))?;
            exchange = after;
            match next {
                Some(m) => message = m,
                None if exchange.waiting() => {
                    return Err(refused(&self.addr, "the exchange ended early".into()))
                }
                None => {
                    self.session_lifetime = u64::try_from(lifetime)
                        .ok()
                        .filter(|&ms| ms > 0)
                        .map(Duration::from_millis);
                    self.session_ends = self.session_lifetime.map(|l| began + l);
                    self.reauth_at = self.session_lifetime.map(|l| began + l.mul_f64(0.85));
                    return Ok(());
                }
            }
        }
    }

    /// The Produce version in use.
    pub fn produce_version(&self) -> i16 {
        self.produce_version
    }

    /// The transaction coordinator of `transactional_id`: node id and
    /// `host:port`.
    ///
    /// # Errors
    ///
    /// The connection failed, or the broker answered with an error
    /// (`COORDINATOR_NOT_AVAILABLE` while it elects one).
    pub fn find_coordinator(&mut self, transactional_id: &str) -> Result<(i32, String), Error> {
        let v = self.version(
            "FindCoordinator",
            API_FIND_COORDINATOR,
            FIND_COORDINATOR_VERSIONS,
        )?;
        let body = self.call(API_FIND_COORDINATOR, v, |buf| {
            put_str(buf, transactional_id);
            put_i8(buf, 1); // key type: transaction
        })?;
        let mut r = Reader::new(&body);
        r.i32("throttle time")?;
        let code = r.i16("find coordinator error")?;
        r.nullable_str("error message")?;
        check("FindCoordinator", code)?;
        let node = r.i32("coordinator node")?;
        let host = r.str("coordinator host")?;
        let port = r.i32("coordinator port")?;
        Ok((node, format!("{host}:{port}")))
    }

    /// Adds partitions to the open transaction of `transactional_id`
    /// (asked of its coordinator) before records are produced to them.
    ///
    /// # Errors
    ///
    /// The connection failed, or a partition came back with an error
    /// (the first one): `CONCURRENT_TRANSACTIONS` while the last
    /// transaction completes, `NOT_COORDINATOR`, a fenced producer.
    pub fn add_partitions_to_txn(
        &mut self,
        transactional_id: &str,
        producer: (i64, i16),
        partitions: &[(&str, i32)],
    ) -> Result<(), Error> {
        let v = self.version(
            "AddPartitionsToTxn",
            API_ADD_PARTITIONS_TO_TXN,
            ADD_PARTITIONS_TO_TXN_VERSIONS,
        )?;
        // Each topic once, with its partitions.
        let mut topics: Vec<&str> = Vec::new();
        for (t, _) in partitions {
            if !topics.contains(t) {
                topics.push(t);
            }
        }
        let body = self.call(API_ADD_PARTITIONS_TO_TXN, v, |buf| {
            put_str(buf, transactional_id);
            put_i64(buf, producer.0);
            put_i16(buf, producer.1);
            put_i32(buf, topics.len() as i32);
            for t in &topics {
                put_str(buf, t);
                let of_t = || partitions.iter().filter(|(pt, _)| pt == t);
                put_i32(buf, of_t().count() as i32);
                for (_, p) in of_t() {
                    put_i32(buf, *p);
                }
            }
        })?;
        let mut r = Reader::new(&body);
        r.i32("throttle time")?;
        for _ in 0..r.count(6, "add partitions topics")? {
            r.str("topic")?;
            for _ in 0..r.count(6, "add partitions results")? {
                r.i32("partition")?;
                check("AddPartitionsToTxn", r.i16("add partitions error")?)?;
            }
        }
        Ok(())
    }

    /// Commits (or aborts) the open transaction of `transactional_id`,
    /// asked of its coordinator.
    ///
    /// # Errors
    ///
    /// The connection failed (the outcome is then unknown: asking again
    /// for the same outcome is safe), or the coordinator answered with an
    /// error.
    pub fn end_txn(
        &mut self,
        transactional_id: &str,
        producer: (i64, i16),
        commit: bool,
    ) -> Result<(), Error> {
        let v = self.version("EndTxn", API_END_TXN, END_TXN_VERSIONS)?;
        let body = self.call(API_END_TXN, v, |buf| {
            put_str(buf, transactional_id);
            put_i64(buf, producer.0);
            put_i16(buf, producer.1);
            put_i8(buf, i8::from(commit));
        })?;
        let mut r = Reader::new(&body);
        r.i32("throttle time")?;
        check("EndTxn", r.i16("end txn error")?)
    }

    /// Bounds the wait for each response from now on.
    ///
    /// # Errors
    ///
    /// The socket refused the timeout.
    pub fn set_read_timeout(&mut self, timeout: Duration) -> Result<(), Error> {
        self.stream
            .tcp()
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))?;
        Ok(())
    }

    /// Produce requests sent and not yet answered.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    fn next_correlation(&mut self) -> i32 {
        let c = self.next_correlation;
        self.next_correlation = c.wrapping_add(1);
        c
    }

    fn write(&mut self, buf: &mut [u8]) -> Result<(), Error> {
        let size = i32::try_from(buf.len() - 4)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "request over 2 GiB"))?;
        set_i32(buf, 0, size);
        self.stream.write_all(buf)?;
        Ok(())
    }

    /// Reads the next response into `self.response` and checks that it
    /// answers `correlation`; returns where its body starts.
    fn read(&mut self, correlation: i32) -> Result<(), Error> {
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size)?;
        let size =
            usize::try_from(i32::from_be_bytes(size)).map_err(|_| Malformed("response size"))?;
        if !(4..=MAX_RESPONSE).contains(&size) {
            return Err(Malformed("response size").into());
        }
        self.response.resize(size, 0);
        self.stream.read_exact(&mut self.response)?;
        let got = i32::from_be_bytes(self.response[..4].try_into().expect("4 bytes"));
        if got != correlation {
            return Err(Malformed("correlation id").into());
        }
        Ok(())
    }

    /// A request of `api` at `version` whose body `body` writes, with no
    /// other in flight, and its response's body.
    pub(crate) fn call(
        &mut self,
        api: i16,
        version: i16,
        body: impl FnOnce(&mut Vec<u8>),
    ) -> Result<Vec<u8>, Error> {
        if !self.in_flight.is_empty() {
            return Err(io::Error::other("a request while produce requests are in flight").into());
        }
        self.reauthenticate_if_due()?;
        let mut buf = std::mem::take(&mut self.scratch);
        let correlation = self.next_correlation();
        put_header(&mut buf, api, version, correlation, &self.client_id);
        body(&mut buf);
        let sent = self.write(&mut buf);
        self.scratch = buf;
        sent?;
        self.read(correlation)?;
        Ok(self.response[4..].to_vec())
    }

    fn negotiate(&mut self) -> Result<(), Error> {
        let body = self.call(API_VERSIONS, 0, |_| {})?;
        let mut r = Reader::new(&body);
        check("ApiVersions", r.i16("api versions error")?)?;
        for _ in 0..r.count(6, "api versions")? {
            let (key, min, max) = (r.i16("api key")?, r.i16("min")?, r.i16("max")?);
            self.apis.push((key, min, max));
        }
        self.produce_version = self.version("Produce", API_PRODUCE, PRODUCE_VERSIONS)?;
        self.metadata_version = self.version("Metadata", API_METADATA, METADATA_VERSIONS)?;
        Ok(())
    }

    /// The version of `api` to use: the highest both sides speak.
    pub(crate) fn version(
        &self,
        name: &'static str,
        api: i16,
        ours: (i16, i16),
    ) -> Result<i16, Error> {
        pick(name, api, ours, &self.apis)
    }

    /// A producer id and epoch for an idempotent producer
    /// (`transactional_id` `None`, any broker answers), or for a
    /// transactional one (ask its transaction coordinator), whose
    /// transactions the broker aborts after `transaction_timeout_ms`.
    /// Only with no produce request in flight.
    ///
    /// # Errors
    ///
    /// The connection failed, or the broker answered with an error
    /// ([`Error::Broker`]: `COORDINATOR_LOAD_IN_PROGRESS`,
    /// `NOT_COORDINATOR` and `CONCURRENT_TRANSACTIONS` may heal).
    pub fn init_producer_id(
        &mut self,
        transactional_id: Option<&str>,
        transaction_timeout_ms: i32,
    ) -> Result<(i64, i16), Error> {
        let v = self.version(
            "InitProducerId",
            API_INIT_PRODUCER_ID,
            INIT_PRODUCER_ID_VERSIONS,
        )?;
        let body = self.call(API_INIT_PRODUCER_ID, v, |buf| {
            put_nullable_str(buf, transactional_id);
            put_i32(buf, transaction_timeout_ms);
        })?;
        let mut r = Reader::new(&body);
        r.i32("throttle time")?;
        check("InitProducerId", r.i16("init producer id error")?)?;
        Ok((r.i64("producer id")?, r.i16("producer epoch")?))
    }

    /// The brokers, and the partitions and leaders of `topics`, creating
    /// them with the broker's defaults when `auto_create` and the broker
    /// allows it. Only with no produce request in flight.
    ///
    /// # Errors
    ///
    /// The connection failed or the response did not parse. Errors of a
    /// topic or a partition are in the result.
    pub fn metadata(&mut self, topics: &[&str], auto_create: bool) -> Result<Metadata, Error> {
        let v = self.metadata_version;
        let body = self.call(API_METADATA, v, |buf| {
            put_i32(buf, topics.len() as i32);
            for t in topics {
                put_str(buf, t);
            }
            put_i8(buf, i8::from(auto_create));
            if v >= 8 {
                put_i8(buf, 0); // cluster authorized operations
                put_i8(buf, 0); // topic authorized operations
            }
        })?;
        let mut r = Reader::new(&body);
        r.i32("throttle time")?;
        let mut brokers = Vec::new();
        for _ in 0..r.count(12, "brokers")? {
            brokers.push(Broker {
                id: r.i32("node id")?,
                host: r.str("host")?,
                port: r.i32("port")?,
            });
            r.nullable_str("rack")?;
        }
        r.nullable_str("cluster id")?;
        r.i32("controller id")?;
        let mut out = Vec::new();
        for _ in 0..r.count(9, "topics")? {
            let error = r.i16("topic error")?;
            let name = r.str("topic name")?;
            r.i8("is internal")?;
            let mut partitions = Vec::new();
            for _ in 0..r.count(18, "partitions")? {
                let error = r.i16("partition error")?;
                let id = r.i32("partition index")?;
                let leader = r.i32("leader")?;
                if v >= 7 {
                    r.i32("leader epoch")?;
                }
                r.skip_i32_array("replicas")?;
                r.skip_i32_array("isr")?;
                if v >= 5 {
                    r.skip_i32_array("offline replicas")?;
                }
                partitions.push(PartitionMetadata { id, leader, error });
            }
            if v >= 8 {
                r.i32("topic authorized operations")?;
            }
            out.push(TopicMetadata {
                name,
                error,
                partitions,
            });
        }
        Ok(Metadata {
            brokers,
            topics: out,
        })
    }

    /// Sends the produce request `buf` holds, begun by `frame`
    /// ([`begin_produce`]) and followed by one batch, under this
    /// connection's Produce version and a new correlation id. A request
    /// sent before, on this connection or another, may be sent again as
    /// it is: a retry does not encode its batch again.
    ///
    /// # Errors
    ///
    /// The write failed: the connection is then unusable.
    pub fn send_produce(&mut self, buf: &mut [u8], frame: ProduceFrame) -> Result<(), Error> {
        if self.in_flight.is_empty() {
            self.reauthenticate_if_due()?;
        }
        let records = i32::try_from(buf.len() - frame.records_size_at - 4)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "batch over 2 GiB"))?;
        set_i32(buf, frame.records_size_at, records);
        // Size (4), API key (2), then the version and the correlation id.
        // Produce 3 to 8 share one request layout.
        buf[6..8].copy_from_slice(&self.produce_version.to_be_bytes());
        let correlation = self.next_correlation();
        set_i32(buf, 8, correlation);
        self.write(buf)?;
        self.in_flight.push_back(correlation);
        Ok(())
    }

    /// The response to the oldest produce request in flight: one result
    /// per partition it wrote to.
    ///
    /// # Errors
    ///
    /// Nothing is in flight, the connection failed or timed out, or the
    /// response did not parse: the connection is then unusable and every
    /// request in flight must be sent again on a new one.
    pub fn recv_produce(&mut self) -> Result<Vec<PartitionResult>, Error> {
        let Some(&correlation) = self.in_flight.front() else {
            return Err(io::Error::other("no produce request in flight").into());
        };
        self.read(correlation)?;
        self.in_flight.pop_front();
        let v = self.produce_version;
        let mut r = Reader::new(&self.response[4..]);
        let mut out = Vec::new();
        for _ in 0..r.count(6, "produce topics")? {
            let topic = r.str("topic")?;
            for _ in 0..r.count(26, "produce partitions")? {
                let partition = r.i32("partition")?;
                let error = r.i16("partition error")?;
                let base_offset = r.i64("base offset")?;
                r.i64("log append time")?;
                if v >= 5 {
                    r.i64("log start offset")?;
                }
                let mut message = None;
                if v >= 8 {
                    for _ in 0..r.count(6, "record errors")? {
                        r.i32("batch index")?;
                        r.nullable_str("record error message")?;
                    }
                    message = r.nullable_str("error message")?;
                }
                out.push(PartitionResult {
                    topic: topic.clone(),
                    partition,
                    error,
                    base_offset,
                    message,
                });
            }
        }
        let throttle = r.i32("throttle time")?;
        self.note_throttle(throttle);
        Ok(out)
    }
}

/// The highest version of API `key` (named `api`) both sides speak, the
/// broker's from its ApiVersions answer `apis` (`(key, min, max)`).
fn pick(
    api: &'static str,
    key: i16,
    ours: (i16, i16),
    apis: &[(i16, i16, i16)],
) -> Result<i16, Error> {
    let (min, max) = apis
        .iter()
        .find(|(k, _, _)| *k == key)
        .map_or((-1, -1), |&(_, min, max)| (min, max));
    let v = max.min(ours.1);
    if v < ours.0 || v < min {
        return Err(Error::Unsupported {
            release: crate::versions::Release::of(apis),
            api,
            min,
            max,
            want_min: ours.0,
            want_max: ours.1,
        });
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_highest_common_version_is_picked_or_the_gap_is_named() {
        assert_eq!(pick("Produce", 0, (3, 8), &[(0, 0, 11)]).unwrap(), 8);
        assert_eq!(pick("Produce", 0, (3, 8), &[(0, 3, 5)]).unwrap(), 5);
        // What the agent logs when it first connects to a Kafka 0.10.2.
        let old = [(0, 0, 2), (1, 0, 3), (3, 0, 2), (9, 0, 2), (18, 0, 0)];
        let e = pick("Produce", 0, (3, 8), &old).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the broker (Kafka 0.10.2, by its ApiVersions) serves Produce versions 0 to 2; \
             sonde speaks 3 to 8"
        );
        // A broker newer than any sonde knows that dropped Produce 8.
        let new = [(0, 9, 14), (1, 4, 19), (18, 0, 5)];
        let e = pick("Produce", 0, (3, 8), &new).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("the broker (Kafka 4.1 or newer, by its"),
            "{e}"
        );
        assert!(pick("Metadata", 3, (4, 8), &[(3, 9, 12)]).is_err());
        assert!(pick("Metadata", 3, (4, 8), &[]).is_err());
    }

    #[test]
    fn error_codes_have_names_and_retries_are_for_what_can_heal() {
        assert_eq!(code_name(6), "NOT_LEADER_OR_FOLLOWER (6)");
        assert_eq!(code_name(999), "error code 999");
        assert!(retriable(6) && retriable(19));
        assert!(!retriable(10) && !retriable(29) && !retriable(2));
    }
}

//! How a sender's requests reach a backend: [`Http`] POSTs each request,
//! [`Tcp`] writes it to a persistent connection.
//!
//! # Timeouts
//!
//! [`Http`] gives each request one deadline, `request_timeout` after it
//! starts, covering every phase: resolving, connecting, sending the body,
//! waiting for the answer's head and reading its body (ureq's
//! `timeout_global`, checked at every read and write). A backend that
//! accepts the connection and then answers one byte a second, or never,
//! costs one `request_timeout`, counted as `reason="timeout"`, never a
//! stuck sink thread. While the agent stops, [`Transport::stop_by`] cuts
//! the deadline down to the end of the sink's `shutdown_grace`.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant, SystemTime};

use crate::sink::FailReason;

impl FailReason {
    /// True when sending the same request again may succeed.
    pub fn retryable(self) -> bool {
        !matches!(
            self,
            FailReason::Rejected | FailReason::TooLarge | FailReason::Encode | FailReason::Buffer
        )
    }
}

/// A request the backend did not take.
#[derive(Debug, thiserror::Error)]
#[error("{}: {message}", reason.as_str())]
pub struct SendError {
    /// Why, for the counters; [`FailReason::retryable`] says whether to retry.
    pub reason: FailReason,
    /// What went wrong, with the server's own message where it sent one.
    pub message: String,
    /// How long the backend asked to wait before the next attempt (its
    /// `Retry-After`, on a 429 or 503), when it said.
    pub retry_after: Option<Duration>,
}

impl SendError {
    /// An error for `reason`, saying `message`, with no `Retry-After`.
    pub fn new(reason: FailReason, message: impl Into<String>) -> SendError {
        SendError {
            reason,
            message: message.into(),
            retry_after: None,
        }
    }

    pub(crate) fn io(e: &io::Error) -> SendError {
        let reason = match e.kind() {
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => FailReason::Timeout,
            io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::NotConnected
            | io::ErrorKind::AddrNotAvailable
            | io::ErrorKind::UnexpectedEof => FailReason::Connect,
            _ => FailReason::Io,
        };
        SendError::new(reason, e.to_string())
    }
}

/// Delivers one request body. The sender drives: it calls
/// [`Transport::send`] with the oldest queued body and removes it from the
/// queue on `Ok`; on `Err` it retries later or drops the body, as the
/// error's reason says.
pub trait Transport: Send + 'static {
    /// Sends `body` and waits for the backend to take it.
    ///
    /// # Errors
    ///
    /// A [`SendError`] saying why, and whether a retry may succeed.
    fn send(&mut self, body: &[u8]) -> Result<(), SendError>;

    /// From now on, gives up on any request still running at `deadline`
    /// (the end of the sink's grace period once the agent stops), even if
    /// its own timeout is later. Transports whose requests cannot be cut
    /// short ignore it.
    fn stop_by(&mut self, deadline: Instant) {
        let _ = deadline;
    }
}

/// POSTs each request to a URL.
#[derive(Debug)]
pub struct Http {
    agent: ureq::Agent,
    url: String,
    headers: Vec<(String, String)>,
    timeout: Duration,
    stop_by: Option<Instant>,
}

/// The longest piece of a refusing server's answer kept for the log.
const SERVER_MESSAGE_MAX: u64 = 1024;

impl Http {
    /// A transport posting to `url` with `headers` (including
    /// `Content-Type` and, when compressed, `Content-Encoding`), giving up
    /// on a request after `timeout`.
    pub fn new(url: String, headers: Vec<(String, String)>, timeout: Duration) -> Http {
        let config = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .user_agent(concat!("sonde/", env!("CARGO_PKG_VERSION")))
            .build();
        Http {
            agent: config.into(),
            url,
            headers,
            timeout,
            stop_by: None,
        }
    }
}

/// The longest wait a backend's `Retry-After` is honoured for: a server
/// asking for more (or for a date far ahead) is asked again after this.
pub const RETRY_AFTER_MAX: Duration = Duration::from_secs(300);

/// The wait a `Retry-After` header asks for at `now`: delay-seconds
/// (`120`) or an HTTP date (`Fri, 31 Dec 1999 23:59:59 GMT`, or the two
/// obsolete forms RFC 9110 asks a recipient to accept), capped at
/// [`RETRY_AFTER_MAX`]. A date in the past is no wait; `None` for a value
/// that is neither.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    let wait = if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Past u64 (20 digits and more) is past any cap.
        Duration::from_secs(value.parse().unwrap_or(u64::MAX))
    } else {
        let at = httpdate::parse_http_date(value).ok()?;
        at.duration_since(now).unwrap_or(Duration::ZERO)
    };
    Some(wait.min(RETRY_AFTER_MAX))
}

impl Transport for Http {
    fn send(&mut self, body: &[u8]) -> Result<(), SendError> {
        let mut req = self.agent.post(&self.url);
        for (k, v) in &self.headers {
            req = req.header(k, v);
        }
        if let Some(by) = self.stop_by {
            let left = by.saturating_duration_since(Instant::now());
            if left < self.timeout {
                // Zero would mean "no timeout" to nobody, but be safe.
                let left = left.max(Duration::from_millis(1));
                req = req.config().timeout_global(Some(left)).build();
            }
        }
        let mut resp = req.send(body).map_err(|e| {
            let reason = match &e {
                ureq::Error::Timeout(_) => FailReason::Timeout,
                ureq::Error::ConnectionFailed | ureq::Error::HostNotFound => FailReason::Connect,
                ureq::Error::Io(io) => SendError::io(io).reason,
                _ => FailReason::Io,
            };
            SendError::new(reason, e.to_string())
        })?;
        let status = resp.status().as_u16();
        if (200..300).contains(&status) {
            // Read the (short) answer so the connection can be reused.
            let _ = resp
                .body_mut()
                .as_reader()
                .take(64 << 10)
                .read_to_end(&mut Vec::new());
            return Ok(());
        }
        let retry_after = match status {
            429 | 503 => resp
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| parse_retry_after(v, SystemTime::now())),
            _ => None,
        };
        let mut text = String::new();
        let _ = resp
            .body_mut()
            .as_reader()
            .take(SERVER_MESSAGE_MAX)
            .read_to_string(&mut text);
        let reason = match status {
            429 => FailReason::Throttled,
            408 => FailReason::Timeout,
            413 => FailReason::TooLarge,
            500..=599 => FailReason::ServerError,
            _ => FailReason::Rejected,
        };
        Err(SendError {
            reason,
            message: format!("HTTP {status}: {}", text.trim()),
            retry_after,
        })
    }

    fn stop_by(&mut self, deadline: Instant) {
        self.stop_by = Some(deadline);
    }
}

/// Writes each request to one persistent TCP connection, connecting again
/// whenever it breaks.
///
/// TCP has no acknowledgement above the kernel's: a write succeeds once the
/// bytes are in the socket buffer. Before each write the transport checks
/// whether the peer has closed the connection (a read of 0 bytes) and
/// connects again if so, which catches a restarted backend before data is
/// written into a dead socket. A write that fails half way is sent again
/// whole on a new connection, so the backend may see one torn line.
#[derive(Debug)]
pub struct Tcp {
    address: String,
    timeout: Duration,
    conn: Option<TcpStream>,
}

impl Tcp {
    /// A transport to `address` (`host:port`), connecting lazily.
    pub fn new(address: String, timeout: Duration) -> Tcp {
        Tcp {
            address,
            timeout,
            conn: None,
        }
    }

    fn connect(&self) -> io::Result<TcpStream> {
        let addrs: Vec<SocketAddr> = self.address.to_socket_addrs()?.collect();
        let mut last = io::Error::new(io::ErrorKind::AddrNotAvailable, "no address");
        for a in addrs {
            match TcpStream::connect_timeout(&a, self.timeout) {
                Ok(s) => {
                    s.set_nodelay(true)?;
                    s.set_write_timeout(Some(self.timeout))?;
                    return Ok(s);
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// False when the peer has closed its end (or the socket failed).
    fn alive(s: &TcpStream) -> bool {
        if s.set_nonblocking(true).is_err() {
            return false;
        }
        let mut b = [0u8; 1];
        let ok = match s.peek(&mut b) {
            Ok(0) => false,
            Ok(_) => true,
            Err(e) => e.kind() == io::ErrorKind::WouldBlock,
        };
        ok && s.set_nonblocking(false).is_ok()
    }
}

impl Transport for Tcp {
    fn send(&mut self, body: &[u8]) -> Result<(), SendError> {
        if self.conn.as_ref().is_some_and(|s| !Tcp::alive(s)) {
            self.conn = None;
        }
        if self.conn.is_none() {
            self.conn = Some(self.connect().map_err(|e| {
                let mut err = SendError::io(&e);
                if err.reason == FailReason::Io {
                    err.reason = FailReason::Connect;
                }
                err
            })?);
        }
        let s = self.conn.as_mut().expect("connected above");
        if let Err(e) = s.write_all(body).and_then(|()| s.flush()) {
            let _ = s.shutdown(Shutdown::Both);
            self.conn = None;
            return Err(SendError::io(&e));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_http_dates_and_is_capped() {
        // 1999-12-31T23:59:00Z.
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(946_684_740);
        let wait = |v| parse_retry_after(v, now);
        assert_eq!(wait("2"), Some(Duration::from_secs(2)));
        assert_eq!(wait(" 0 "), Some(Duration::ZERO));
        assert_eq!(wait("86400"), Some(RETRY_AFTER_MAX));
        assert_eq!(wait("99999999999999999999999"), Some(RETRY_AFTER_MAX));
        assert_eq!(
            wait("Fri, 31 Dec 1999 23:59:59 GMT"),
            Some(Duration::from_secs(59))
        );
        // RFC 850 and asctime, the obsolete forms.
        assert_eq!(
            wait("Friday, 31-Dec-99 23:59:30 GMT"),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            wait("Fri Dec 31 23:59:10 1999"),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            wait("Fri, 31 Dec 1999 23:00:00 GMT"),
            Some(Duration::ZERO),
            "in the past"
        );
        assert_eq!(wait("Sat, 01 Jan 2000 23:59:59 GMT"), Some(RETRY_AFTER_MAX));
        for bad in ["", "-1", "1.5", "soon", "Fri, 32 Dec 1999 23:59:59 GMT"] {
            assert_eq!(wait(bad), None, "{bad:?}");
        }
    }
}

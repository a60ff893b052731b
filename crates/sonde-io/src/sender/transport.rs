//! How a sender's requests reach a backend: [`Http`] POSTs each request,
//! [`Tcp`] writes it to a persistent connection.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::sink::FailReason;

impl FailReason {
    /// True when sending the same request again may succeed.
    pub fn retryable(self) -> bool {
        !matches!(
            self,
            FailReason::Rejected | FailReason::Encode | FailReason::Buffer
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
}

impl SendError {
    fn io(e: &io::Error) -> SendError {
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
        SendError {
            reason,
            message: e.to_string(),
        }
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
}

/// POSTs each request to a URL.
#[derive(Debug)]
pub struct Http {
    agent: ureq::Agent,
    url: String,
    headers: Vec<(String, String)>,
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
        }
    }
}

impl Transport for Http {
    fn send(&mut self, body: &[u8]) -> Result<(), SendError> {
        let mut req = self.agent.post(&self.url);
        for (k, v) in &self.headers {
            req = req.header(k, v);
        }
        let mut resp = req.send(body).map_err(|e| {
            let reason = match &e {
                ureq::Error::Timeout(_) => FailReason::Timeout,
                ureq::Error::ConnectionFailed | ureq::Error::HostNotFound => FailReason::Connect,
                ureq::Error::Io(io) => SendError::io(io).reason,
                _ => FailReason::Io,
            };
            SendError {
                reason,
                message: e.to_string(),
            }
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
        let mut text = String::new();
        let _ = resp
            .body_mut()
            .as_reader()
            .take(SERVER_MESSAGE_MAX)
            .read_to_string(&mut text);
        let reason = match status {
            429 => FailReason::Throttled,
            408 => FailReason::Timeout,
            500..=599 => FailReason::ServerError,
            _ => FailReason::Rejected,
        };
        Err(SendError {
            reason,
            message: format!("HTTP {status}: {}", text.trim()),
        })
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

//! Addresses and sockets. A socket opens on first use and is dropped after
//! an error, so the next send reconnects (an agent restart is survived).

use std::io;
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use socket2::{Domain, SockAddr, Socket, Type};

use crate::Error;

/// Where the agent listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    /// `unixgram:///path`
    Unixgram(PathBuf),
    /// `unixseq:///path`
    Unixseq(PathBuf),
    /// `udp://host:port`
    Udp(SocketAddr),
}

impl FromStr for Address {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = || Error::Address(s.to_string());
        let (scheme, rest) = s.split_once("://").ok_or_else(bad)?;
        match scheme {
            "unixgram" if rest.starts_with('/') => Ok(Address::Unixgram(rest.into())),
            "unixseq" if rest.starts_with('/') => Ok(Address::Unixseq(rest.into())),
            "udp" => rest
                .to_socket_addrs()
                .ok()
                .and_then(|mut a| a.next())
                .map(Address::Udp)
                .ok_or_else(bad),
            _ => Err(bad()),
        }
    }
}

impl Address {
    /// `$SONDE_ADDRESS`, else `unixgram:///tmp/metric.sock` if it exists,
    /// else `udp://127.0.0.1:9123`.
    pub(crate) fn default_for_host() -> Result<Address, Error> {
        match std::env::var("SONDE_ADDRESS") {
            Ok(a) if !a.is_empty() => a.parse(),
            _ if std::path::Path::new("/tmp/metric.sock").exists() => {
                Ok(Address::Unixgram("/tmp/metric.sock".into()))
            }
            _ => Ok(Address::Udp(([127, 0, 0, 1], 9123).into())),
        }
    }
}

#[derive(Debug)]
enum Conn {
    Unixgram(UnixDatagram),
    Unixseq(Socket),
    Udp(UdpSocket),
}

/// A socket that reconnects after errors.
#[derive(Debug)]
pub(crate) struct Transport {
    address: Address,
    conn: Option<Conn>,
}

/// A send blocked this long (a unix agent not reading) fails instead of
/// stalling the client.
const SEND_TIMEOUT: Duration = Duration::from_secs(1);

impl Transport {
    pub(crate) fn new(address: Address) -> Transport {
        Transport {
            address,
            conn: None,
        }
    }

    pub(crate) fn address(&self) -> &Address {
        &self.address
    }

    fn connect(&self) -> io::Result<Conn> {
        match &self.address {
            Address::Unixgram(p) => {
                let s = UnixDatagram::unbound()?;
                s.connect(p)?;
                s.set_write_timeout(Some(SEND_TIMEOUT))?;
                Ok(Conn::Unixgram(s))
            }
            Address::Unixseq(p) => {
                let s = Socket::new(Domain::UNIX, Type::SEQPACKET, None)?;
                s.connect(&SockAddr::unix(p)?)?;
                s.set_write_timeout(Some(SEND_TIMEOUT))?;
                Ok(Conn::Unixseq(s))
            }
            Address::Udp(a) => {
                let local: SocketAddr = if a.is_ipv4() {
                    ([0, 0, 0, 0], 0).into()
                } else {
                    (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
                };
                let s = UdpSocket::bind(local)?;
                s.connect(a)?;
                Ok(Conn::Udp(s))
            }
        }
    }

    fn try_send(&mut self, data: &[u8]) -> io::Result<()> {
        if self.conn.is_none() {
            self.conn = Some(self.connect()?);
        }
        let n = match self.conn.as_ref() {
            Some(Conn::Unixgram(s)) => s.send(data)?,
            Some(Conn::Unixseq(s)) => s.send(data)?,
            Some(Conn::Udp(s)) => s.send(data)?,
            None => 0,
        };
        if n == data.len() {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "short datagram write",
            ))
        }
    }

    /// Sends one datagram; after an error, reconnects and tries once more
    /// (the datagram that meets a restarted agent is not lost).
    pub(crate) fn send(&mut self, data: &[u8]) -> io::Result<()> {
        match self.try_send(data) {
            Ok(()) => Ok(()),
            Err(_) => {
                self.conn = None;
                let r = self.try_send(data);
                if r.is_err() {
                    self.conn = None;
                }
                r
            }
        }
    }
}

//! Listen addresses: `udp://HOST:PORT`, `tcp://HOST:PORT`,
//! `unixgram:///path`, `unixseq:///path`, `unix:///path`, and for OTLP
//! `http://HOST:PORT` and `grpc://HOST:PORT`.

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::str::FromStr;

/// Where a receiver listens.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ListenAddr {
    /// UDP datagrams.
    Udp(SocketAddr),
    /// Newline-framed TCP stream.
    Tcp(SocketAddr),
    /// Unix datagram socket.
    Unixgram(PathBuf),
    /// Unix `SOCK_SEQPACKET` socket: connections whose packets are messages.
    Unixseq(PathBuf),
    /// Newline-framed unix stream socket.
    Unix(PathBuf),
    /// OTLP over HTTP/1.1 (a TCP listener).
    Http(SocketAddr),
    /// OTLP over gRPC (a TCP listener, HTTP/2).
    Grpc(SocketAddr),
}

/// Why an address string was rejected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AddrError {
    /// No `scheme://` prefix, or a scheme not in the list.
    #[error(
        "unknown scheme in {0:?}: expected udp://, tcp://, unixgram://, unixseq://, unix://, http:// or grpc://"
    )]
    Scheme(String),
    /// A network address that is not `HOST:PORT`.
    #[error("{0:?} is not HOST:PORT")]
    HostPort(String),
    /// A unix path that is empty or relative.
    #[error("{0:?} needs an absolute path, like unixgram:///tmp/metric.sock")]
    Path(String),
}

impl ListenAddr {
    /// True for sockets where each read is one datagram (UDP, unixgram).
    pub fn is_datagram(&self) -> bool {
        matches!(self, ListenAddr::Udp(_) | ListenAddr::Unixgram(_))
    }

    /// The IP address and port of a network address.
    pub fn socket_addr(&self) -> Option<SocketAddr> {
        match self {
            ListenAddr::Udp(a) | ListenAddr::Tcp(a) | ListenAddr::Http(a) | ListenAddr::Grpc(a) => {
                Some(*a)
            }
            _ => None,
        }
    }

    /// The socket file of a unix address.
    pub fn unix_path(&self) -> Option<&PathBuf> {
        match self {
            ListenAddr::Unixgram(p) | ListenAddr::Unixseq(p) | ListenAddr::Unix(p) => Some(p),
            _ => None,
        }
    }
}

fn resolve(s: &str, rest: &str) -> Result<SocketAddr, AddrError> {
    rest.to_socket_addrs()
        .ok()
        .and_then(|mut it| it.next())
        .ok_or_else(|| AddrError::HostPort(s.to_string()))
}

impl FromStr for ListenAddr {
    type Err = AddrError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (scheme, rest) = s
            .split_once("://")
            .ok_or_else(|| AddrError::Scheme(s.to_string()))?;
        let path = || {
            if rest.starts_with('/') && rest.len() > 1 {
                Ok(PathBuf::from(rest))
            } else {
                Err(AddrError::Path(s.to_string()))
            }
        };
        match scheme {
            "udp" => Ok(ListenAddr::Udp(resolve(s, rest)?)),
            "tcp" => Ok(ListenAddr::Tcp(resolve(s, rest)?)),
            "unixgram" => Ok(ListenAddr::Unixgram(path()?)),
            "unixseq" => Ok(ListenAddr::Unixseq(path()?)),
            "unix" => Ok(ListenAddr::Unix(path()?)),
            "http" => Ok(ListenAddr::Http(resolve(s, rest)?)),
            "grpc" => Ok(ListenAddr::Grpc(resolve(s, rest)?)),
            _ => Err(AddrError::Scheme(s.to_string())),
        }
    }
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenAddr::Udp(a) => write!(f, "udp://{a}"),
            ListenAddr::Tcp(a) => write!(f, "tcp://{a}"),
            ListenAddr::Unixgram(p) => write!(f, "unixgram://{}", p.display()),
            ListenAddr::Unixseq(p) => write!(f, "unixseq://{}", p.display()),
            ListenAddr::Unix(p) => write!(f, "unix://{}", p.display()),
            ListenAddr::Http(a) => write!(f, "http://{a}"),
            ListenAddr::Grpc(a) => write!(f, "grpc://{a}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scheme_round_trips_through_display() {
        for s in [
            "udp://127.0.0.1:9123",
            "tcp://127.0.0.1:8125",
            "unixgram:///tmp/metric.sock",
            "unixseq:///tmp/seq.sock",
            "unix:///tmp/s.sock",
            "http://127.0.0.1:4318",
            "grpc://127.0.0.1:4317",
        ] {
            assert_eq!(s.parse::<ListenAddr>().unwrap().to_string(), s);
        }
    }

    #[test]
    fn bad_addresses_say_what_is_wrong() {
        assert!(matches!(
            "https://x".parse::<ListenAddr>(),
            Err(AddrError::Scheme(_))
        ));
        assert!(matches!(
            "127.0.0.1:9".parse::<ListenAddr>(),
            Err(AddrError::Scheme(_))
        ));
        assert!(matches!(
            "udp://nohost".parse::<ListenAddr>(),
            Err(AddrError::HostPort(_))
        ));
        assert!(matches!(
            "unix://relative".parse::<ListenAddr>(),
            Err(AddrError::Path(_))
        ));
    }
}

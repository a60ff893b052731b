//! Listening sockets, bound on the caller's thread so that a port in use
//! or a bad path fails the start with a clear error before any thread
//! runs: the receivers' sockets and the admin site's unix socket file.
//!
//! # Unix socket files
//!
//! A socket file left by a crashed run is replaced: if nothing accepts a
//! connection on it, it is stale and removed. A live one (another agent)
//! is an error. Files get [`SocketOptions::mode`] (`0666` unless
//! configured, because SDKs run as other users than the agent) and, when
//! configured, an owner and group; they are removed when the socket is
//! dropped ([`SocketFile`]).

use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use socket2::{Domain, SockAddr, Socket, Type};

use crate::addr::ListenAddr;
use crate::sys;

/// How long a blocking read of a datagram socket waits at most, so that
/// a receive worker blocked in it still notices a window boundary or a
/// stop: the receivers' wake interval.
pub const READ_TIMEOUT: Duration = Duration::from_millis(100);

/// Receive buffer asked for on datagram sockets unless configured: 8 MiB,
/// about 6,000 MTU-sized datagrams, enough to ride out a flush.
pub const DEFAULT_RECV_BUFFER: usize = 8 << 20;

/// Permission bits of unix socket files unless configured: anyone may
/// connect, because SDK processes run as many users other than the agent's.
pub const DEFAULT_SOCKET_MODE: u32 = 0o666;

/// How a receiver's sockets are set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SocketOptions {
    /// Receive threads, each with its own socket (`SO_REUSEPORT`, UDP only).
    pub workers: usize,
    /// Receive buffer of datagram sockets, in bytes.
    pub receive_buffer: usize,
    /// Permission bits of a unix socket file. Default [`DEFAULT_SOCKET_MODE`].
    pub mode: u32,
    /// Owner (uid) given to a unix socket file, if any.
    pub owner: Option<u32>,
    /// Group (gid) given to a unix socket file, if any.
    pub group: Option<u32>,
    /// Most open connections of a stream or seqpacket receiver. Default
    /// [`MAX_CONNECTIONS`].
    pub max_connections: usize,
}

impl Default for SocketOptions {
    fn default() -> Self {
        SocketOptions {
            workers: 1,
            receive_buffer: DEFAULT_RECV_BUFFER,
            mode: DEFAULT_SOCKET_MODE,
            owner: None,
            group: None,
            max_connections: MAX_CONNECTIONS,
        }
    }
}

/// The uid of a user name, or of a number written as text.
///
/// Names are looked up with `getpwnam_r` (through `nix`), which writes into
/// a buffer of the caller's, so the lookup is safe from any thread.
///
/// # Errors
///
/// When no such user exists, or the user database cannot be read.
pub fn user_id(name: &str) -> io::Result<u32> {
    if let Ok(id) = name.parse() {
        return Ok(id);
    }
    match nix::unistd::User::from_name(name) {
        Ok(Some(user)) => Ok(user.uid.as_raw()),
        Ok(None) => Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no user {name:?}"),
        )),
        Err(e) => Err(io::Error::new(
            io::Error::from(e).kind(),
            format!("cannot look up user {name:?}: {}", e.desc()),
        )),
    }
}

/// The gid of a group name, or of a number written as text.
///
/// Looked up with `getgrnam_r`, as [`user_id`] does.
///
/// # Errors
///
/// When no such group exists, or the group database cannot be read.
pub fn group_id(name: &str) -> io::Result<u32> {
    if let Ok(id) = name.parse() {
        return Ok(id);
    }
    match nix::unistd::Group::from_name(name) {
        Ok(Some(group)) => Ok(group.gid.as_raw()),
        Ok(None) => Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no group {name:?}"),
        )),
        Err(e) => Err(io::Error::new(
            io::Error::from(e).kind(),
            format!("cannot look up group {name:?}: {}", e.desc()),
        )),
    }
}

/// Sets the receive buffer to `bytes` as the kernel counts it (what
/// `SO_RCVBUF` reads back and `ss -m` shows as `rb`): `SO_RCVBUFFORCE`
/// where permitted (root or CAP_NET_ADMIN, which ignores
/// `net.core.rmem_max`), else `SO_RCVBUF`, which the kernel caps at
/// `rmem_max` (212992 bytes by default). Both take half: the kernel
/// doubles what it is given, for the bookkeeping of each datagram.
fn set_receive_buffer(socket: &Socket, bytes: usize) {
    if sys::force_receive_buffer(socket, bytes).is_err() {
        // Best effort: a smaller buffer only means earlier kernel drops.
        let _ = socket.set_recv_buffer_size(bytes / 2);
    }
}

/// Removes a unix socket file when dropped.
#[derive(Debug)]
pub struct SocketFile(PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Why a receiver could not start.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// The socket could not be created or bound.
    #[error("cannot listen on {addr}: {error}")]
    Io {
        /// The address.
        addr: String,
        /// What the OS said.
        error: io::Error,
    },
    /// A live process already serves the unix socket file.
    #[error("cannot listen on {0}: another process is serving that socket file")]
    InUse(String),
    /// The path exists and is not a socket.
    #[error("cannot listen on {0}: the path exists and is not a socket")]
    NotSocket(String),
}

/// A bound socket, ready for a worker.
#[derive(Debug)]
pub struct Bound {
    addr: ListenAddr,
    socket: Socket,
    _file: Option<SocketFile>,
    max_connections: usize,
}

impl Bound {
    /// The receive buffer the kernel granted, in bytes, as `SO_RCVBUF`
    /// reads it back: the configured `receive_buffer` unless capped.
    pub fn receive_buffer(&self) -> Option<usize> {
        self.socket.recv_buffer_size().ok()
    }

    /// The listening socket and the file it is bound to (removed when
    /// dropped), for a stream socket served by other code than a
    /// receiver's worker (the admin site's).
    pub fn into_parts(self) -> (Socket, Option<SocketFile>) {
        (self.socket, self._file)
    }

    /// The address as configured.
    pub fn addr(&self) -> &ListenAddr {
        &self.addr
    }

    /// The most connections a stream or seqpacket worker keeps open
    /// ([`SocketOptions::max_connections`]).
    pub fn max_connections(&self) -> usize {
        self.max_connections
    }

    /// The address, with the real port when the config asked for port 0.
    pub fn local_addr(&self) -> ListenAddr {
        match (
            &self.addr,
            self.socket.local_addr().ok().and_then(|a| a.as_socket()),
        ) {
            (ListenAddr::Udp(_), Some(a)) => ListenAddr::Udp(a),
            (ListenAddr::Tcp(_), Some(a)) => ListenAddr::Tcp(a),
            (ListenAddr::Http(_), Some(a)) => ListenAddr::Http(a),
            (ListenAddr::Grpc(_), Some(a)) => ListenAddr::Grpc(a),
            (other, _) => other.clone(),
        }
    }
}

fn unix_type(addr: &ListenAddr) -> Type {
    match addr {
        ListenAddr::Unixgram(_) => Type::DGRAM,
        ListenAddr::Unixseq(_) => Type::SEQPACKET,
        _ => Type::STREAM,
    }
}

/// Removes `path` if it is a socket file nobody serves.
fn clear_stale(path: &Path, ty: Type, addr: &ListenAddr) -> Result<(), BindError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(BindError::Io {
                addr: addr.to_string(),
                error: source,
            })
        }
    };
    if !meta.file_type().is_socket() {
        return Err(BindError::NotSocket(addr.to_string()));
    }
    let probe = Socket::new(Domain::UNIX, ty, None).map_err(|source| BindError::Io {
        addr: addr.to_string(),
        error: source,
    })?;
    let target = SockAddr::unix(path).map_err(|source| BindError::Io {
        addr: addr.to_string(),
        error: source,
    })?;
    if probe.connect(&target).is_ok() {
        return Err(BindError::InUse(addr.to_string()));
    }
    std::fs::remove_file(path).map_err(|source| BindError::Io {
        addr: addr.to_string(),
        error: source,
    })
}

/// Binds a non-blocking TCP listener, for an HTTP server (the admin
/// site, a Prometheus exporter sink's scrape endpoint).
///
/// # Errors
///
/// When the address cannot be bound.
pub fn bind_tcp(addr: std::net::SocketAddr) -> io::Result<std::net::TcpListener> {
    let l = std::net::TcpListener::bind(addr)?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// The default of [`SocketOptions::max_connections`]: the most connections
/// one stream or seqpacket receiver keeps open; more are closed as soon as
/// they are accepted, and counted (`sonde_receiver_connections_refused_total`).
/// With the 64 KiB line limit this bounds a receiver's partial-line
/// buffers to 64 MiB.
pub const MAX_CONNECTIONS: usize = 1024;

/// Creates and binds the sockets for `addr`: one per worker, sharing the
/// port with `SO_REUSEPORT` so the kernel spreads datagrams across them.
///
/// # Errors
///
/// When a socket cannot be bound (port in use, permission, bad path), a
/// unix socket file is served by another live process, or several workers
/// are asked of an address other than UDP.
pub fn bind(addr: &ListenAddr, options: SocketOptions) -> Result<Vec<Bound>, BindError> {
    let workers = options.workers.max(1);
    if workers == 1 {
        return Ok(vec![bind_one(addr, options, false)?]);
    }
    if !matches!(addr, ListenAddr::Udp(_)) {
        return Err(BindError::Io {
            addr: addr.to_string(),
            error: io::Error::new(
                io::ErrorKind::InvalidInput,
                "several workers need a udp:// address",
            ),
        });
    }
    let first = bind_one(addr, options, true)?;
    // Port 0 resolved to a real port: the others join that one.
    let shared = first.local_addr();
    let mut all = vec![first];
    for _ in 1..workers {
        all.push(bind_one(&shared, options, true)?);
    }
    Ok(all)
}

fn bind_one(
    addr: &ListenAddr,
    options: SocketOptions,
    reuse_port: bool,
) -> Result<Bound, BindError> {
    let err = |source| BindError::Io {
        addr: addr.to_string(),
        error: source,
    };
    let (socket, file) = match addr {
        ListenAddr::Udp(a) | ListenAddr::Tcp(a) | ListenAddr::Http(a) | ListenAddr::Grpc(a) => {
            let ty = if addr.is_datagram() {
                Type::DGRAM
            } else {
                Type::STREAM
            };
            let s = Socket::new(Domain::for_address(*a), ty, None).map_err(err)?;
            if ty == Type::STREAM {
                s.set_reuse_address(true).map_err(err)?;
            }
            if reuse_port {
                s.set_reuse_port(true).map_err(err)?;
            }
            s.bind(&(*a).into()).map_err(err)?;
            (s, None)
        }
        ListenAddr::Unixgram(p) | ListenAddr::Unixseq(p) | ListenAddr::Unix(p) => {
            let ty = unix_type(addr);
            clear_stale(p, ty, addr)?;
            let s = Socket::new(Domain::UNIX, ty, None).map_err(err)?;
            s.bind(&SockAddr::unix(p).map_err(err)?).map_err(err)?;
            let file = SocketFile(p.clone());
            if options.owner.is_some() || options.group.is_some() {
                std::os::unix::fs::chown(p, options.owner, options.group).map_err(err)?;
            }
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(options.mode))
                .map_err(err)?;
            (s, Some(file))
        }
    };
    if addr.is_datagram() {
        set_receive_buffer(&socket, options.receive_buffer);
        // Kernel drop counts with every datagram (see `datagram`); best
        // effort, as an old kernel only loses the count.
        let _ = sys::report_queue_overflows(&socket);
        socket.set_read_timeout(Some(READ_TIMEOUT)).map_err(err)?;
    } else {
        socket.listen(1024).map_err(err)?;
        socket.set_nonblocking(true).map_err(err)?;
    }
    Ok(Bound {
        addr: addr.clone(),
        socket,
        _file: file,
        max_connections: options.max_connections,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_and_groups_are_found_by_name_or_number() {
        // Every Linux system has root, uid and gid 0.
        assert_eq!(user_id("root").unwrap(), 0);
        assert_eq!(group_id("root").unwrap(), 0);
        assert_eq!(user_id("4242").unwrap(), 4242);
        assert_eq!(group_id("4242").unwrap(), 4242);
    }

    #[test]
    fn an_unknown_user_or_group_is_named_in_the_error() {
        let e = user_id("no-such-sonde-user").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("\"no-such-sonde-user\""), "{e}");
        let e = group_id("no-such-sonde-group").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("\"no-such-sonde-group\""), "{e}");
    }

    #[test]
    fn lookups_run_safely_from_many_threads_at_once() {
        let threads: Vec<_> = (0..8)
            .map(|_| std::thread::spawn(|| (0..200).all(|_| user_id("root").ok() == Some(0))))
            .collect();
        for t in threads {
            assert!(t.join().unwrap());
        }
    }
}

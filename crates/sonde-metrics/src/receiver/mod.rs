//! Receivers: one bound socket per configured address, each driven by its
//! own worker thread that parses and aggregates what it reads
//! (run-to-completion, see [`ingest`]).
//!
//! Sockets are bound by [`bind`] ([`sonde_runtime::socket`]) on the
//! caller's thread, so a port in use or a bad path fails the start with a
//! clear error before any thread runs; a unix socket file is removed when
//! its worker stops.

mod conn;
mod datagram;
pub mod ingest;
mod stats;

pub use ingest::{Control, Handoff, Ingest, Protocol};
pub use stats::{LocalCounts, ReceiverStats};

use std::io;
use std::thread::JoinHandle;
use std::time::Duration;

use sonde_runtime::addr::ListenAddr;
pub use sonde_runtime::socket::{bind, BindError, Bound, SocketOptions};

/// The longest a UDP receive thread waits, after draining its socket,
/// before it reads again, so that one wake-up takes several datagrams (see
/// `datagram::run`). Measured in docs/benchmarks/LOG.md ("receive linger" and
/// "receive linger sized to the traffic").
const UDP_MAX_LINGER: Duration = Duration::from_millis(5);

/// Starts the worker thread of a bound receiver. The thread exits after
/// handing its last shard to the flusher at shutdown; the socket file (if
/// any) is removed then.
pub fn spawn(bound: Bound, ingest: Ingest) -> io::Result<JoinHandle<()>> {
    let name = format!("recv {}", bound.addr());
    std::thread::Builder::new().name(name).spawn(move || {
        let addr = bound.addr().clone();
        let max_connections = bound.max_connections();
        // The socket file (if any) lives as long as the worker.
        let (socket, _file) = bound.into_parts();
        let result = if addr.is_datagram() {
            let linger = match addr {
                ListenAddr::Udp(_) => UDP_MAX_LINGER,
                _ => Duration::ZERO,
            };
            datagram::run(&socket, ingest, linger)
        } else {
            let framing = match addr {
                ListenAddr::Unixseq(_) => conn::Framing::Packet,
                _ => conn::Framing::Lines,
            };
            conn::run(socket, framing, ingest, max_connections)
        };
        if let Err(e) = result {
            tracing::error!(receiver = %addr, error = %e, "receiver stopped");
        }
    })
}

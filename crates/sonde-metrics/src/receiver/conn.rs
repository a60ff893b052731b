//! Connection sockets (TCP, unix stream, unix seqpacket), all connections
//! of one listener served by one worker thread with `mio`.
//!
//! Streams are newline framed: complete lines are parsed straight from the
//! read buffer and only a trailing partial line is kept for the next read.
//! Seqpacket connections keep message boundaries: each read is one message.

use std::collections::HashMap;
use std::io::{self, Read};
use std::os::fd::AsRawFd;

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use socket2::Socket;
use sonde_proto::DropReason;

use super::ingest::{Ingest, WAKE_INTERVAL};

/// How bytes on a connection split into messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Framing {
    /// Newline-separated lines (StatsD over TCP or unix stream).
    Lines,
    /// One message per packet (seqpacket).
    Packet,
}

const LISTENER: Token = Token(usize::MAX);
/// Read size, and the longest line or packet accepted.
const READ: usize = 64 * 1024;

struct Conn {
    socket: Socket,
    /// An incomplete trailing line from earlier reads.
    pending: Vec<u8>,
    /// Set after an oversized line, until its newline arrives.
    discarding: bool,
}

impl Conn {
    /// Feeds `data` (just read) through the line framer. A line longer
    /// than [`READ`] is one [`DropReason::Oversized`] drop however the
    /// reads split it, and the lines after it are parsed.
    fn lines(&mut self, data: &[u8], ingest: &mut Ingest) {
        let mut data = data;
        if self.discarding {
            // Skip the tail of the oversized line.
            let Some(nl) = memchr::memchr(b'\n', data) else {
                return;
            };
            data = &data[nl + 1..];
            self.discarding = false;
        }
        let Some(last_nl) = memchr::memrchr(b'\n', data) else {
            self.pending.extend_from_slice(data);
            if self.pending.len() > READ {
                ingest.drop(DropReason::Oversized);
                self.pending.clear();
                self.discarding = true;
            }
            return;
        };
        let (complete, rest) = data.split_at(last_nl + 1);
        if self.pending.is_empty() {
            ingest.bytes(complete);
        } else {
            // The first line of `complete` ends the pending one.
            let first = memchr::memchr(b'\n', complete).unwrap_or(last_nl);
            if self.pending.len() + first > READ {
                ingest.drop(DropReason::Oversized);
                ingest.bytes(&complete[first + 1..]);
            } else {
                self.pending.extend_from_slice(complete);
                ingest.bytes(&self.pending);
            }
            self.pending.clear();
        }
        self.pending.extend_from_slice(rest);
    }
}

pub(super) fn run(
    listener: Socket,
    framing: Framing,
    mut ingest: Ingest,
    max_connections: usize,
) -> io::Result<()> {
    let mut poll = Poll::new()?;
    let mut events = Events::with_capacity(256);
    let lfd = listener.as_raw_fd();
    poll.registry()
        .register(&mut SourceFd(&lfd), LISTENER, Interest::READABLE)?;
    let mut conns: HashMap<usize, Conn> = HashMap::new();
    let mut next = 0usize;
    let mut buf = vec![0u8; READ + 1];
    loop {
        match poll.poll(&mut events, Some(WAKE_INTERVAL)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        for ev in events.iter() {
            if ev.token() == LISTENER {
                loop {
                    match listener.accept() {
                        Ok((socket, _)) if conns.len() >= max_connections => {
                            // Each connection may hold a partial line of up
                            // to 64 KiB: their number is what bounds that.
                            drop(socket);
                            ingest
                                .stats()
                                .connections_refused
                                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        Ok((socket, _)) => {
                            socket.set_nonblocking(true)?;
                            let fd = socket.as_raw_fd();
                            poll.registry().register(
                                &mut SourceFd(&fd),
                                Token(next),
                                Interest::READABLE,
                            )?;
                            conns.insert(
                                next,
                                Conn {
                                    socket,
                                    pending: Vec::new(),
                                    discarding: false,
                                },
                            );
                            ingest
                                .stats()
                                .connections
                                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            next = next.wrapping_add(1) % (usize::MAX - 1);
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            // Out of descriptors and the like: keep serving
                            // the connections we have.
                            tracing::warn!(error = %e, "accept failed");
                            break;
                        }
                    }
                }
                continue;
            }
            let id = ev.token().0;
            let Some(conn) = conns.get_mut(&id) else {
                continue;
            };
            let mut closed = false;
            loop {
                match (&conn.socket).read(&mut buf) {
                    Ok(0) => {
                        closed = true;
                        break;
                    }
                    Ok(n) => match framing {
                        Framing::Packet if n > READ => ingest.drop(DropReason::Oversized),
                        Framing::Packet => ingest.datagram(&buf[..n]),
                        Framing::Lines => {
                            ingest.count_read();
                            conn.lines(&buf[..n], &mut ingest);
                        }
                    },
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => {
                        closed = true;
                        break;
                    }
                }
            }
            if closed {
                if let Some(conn) = conns.remove(&id) {
                    // A client may end its last line with EOF instead of a newline.
                    if !conn.pending.is_empty() && !conn.discarding {
                        ingest.bytes(&conn.pending);
                    }
                    let fd = conn.socket.as_raw_fd();
                    let _ = poll.registry().deregister(&mut SourceFd(&fd));
                }
            }
        }
        if !ingest.end_batch() {
            return Ok(());
        }
    }
}

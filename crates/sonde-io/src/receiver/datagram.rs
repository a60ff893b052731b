//! Datagram sockets (UDP, unixgram), drained with `recvmmsg`.
//!
//! One `recvmmsg` call returns up to [`BATCH`] datagrams that were already
//! queued (`MSG_WAITFORONE`: block for the first, take the rest without
//! waiting), so a busy socket costs one system call per batch and the
//! window check runs once per batch.
//!
//! # Kernel drops
//!
//! Datagrams the kernel dropped because the socket's queue was full never
//! reach us, so they are counted from `SO_RXQ_OVFL`: with it set, each
//! datagram carries the socket's drop count when it was queued. Only the
//! last datagram of a batch is read (the count only grows), so it costs
//! one control-message walk per batch.

use std::io;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use socket2::Socket;
use sonde_proto::DropReason;

use crate::ingest::Ingest;

/// Datagrams per `recvmmsg` call.
const BATCH: usize = 32;
/// Bytes per datagram slot: the largest UDP payload, rounded up. A longer
/// unixgram datagram arrives truncated and is dropped as oversized.
const SLOT: usize = 64 * 1024;

/// Control-message room per datagram: one `SO_RXQ_OVFL` message (a u32
/// behind a 16-byte header, padded to 24), aligned for `cmsghdr`.
const CONTROL: usize = 32;

/// The reusable receive arena: slots, their iovecs, control buffers and
/// message headers.
struct Arena {
    buf: Vec<u8>,
    iov: Vec<libc::iovec>,
    control: Vec<[u64; CONTROL / 8]>,
    hdr: Vec<libc::mmsghdr>,
}

impl Arena {
    fn new() -> Arena {
        let mut buf = vec![0u8; BATCH * SLOT];
        let iov: Vec<libc::iovec> = buf
            .chunks_exact_mut(SLOT)
            .map(|c| libc::iovec {
                iov_base: c.as_mut_ptr().cast(),
                iov_len: SLOT,
            })
            .collect();
        let mut arena = Arena {
            buf,
            iov,
            control: vec![[0; CONTROL / 8]; BATCH],
            hdr: Vec::with_capacity(BATCH),
        };
        for i in 0..BATCH {
            // SAFETY: mmsghdr is plain data; all-zero is a valid value.
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_iov = &mut arena.iov[i];
            h.msg_hdr.msg_iovlen = 1;
            h.msg_hdr.msg_control = arena.control[i].as_mut_ptr().cast();
            arena.hdr.push(h);
        }
        arena
    }

    /// The socket's kernel drop count carried by datagram `i`, if any
    /// (`SO_RXQ_OVFL`; the kernel adds it once the count is non-zero).
    fn kernel_drops(&self, i: usize) -> Option<u32> {
        let h = &self.hdr[i].msg_hdr;
        // SAFETY: the header's control pointer and length describe this
        // arena's own control buffer, which the kernel filled with whole
        // control messages; the CMSG_* helpers stay within that length.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(h);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SO_RXQ_OVFL {
                    return Some(std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<u32>()));
                }
                c = libc::CMSG_NXTHDR(h, c);
            }
        }
        None
    }

    /// Receives up to `BATCH` datagrams; `Ok(0)` on timeout.
    fn recv(&mut self, fd: i32) -> io::Result<usize> {
        // The kernel shrinks the length to what it wrote.
        for h in &mut self.hdr {
            h.msg_hdr.msg_controllen = CONTROL as _;
        }
        // SAFETY: every header points at its own iovec and control buffer;
        // the iovec points at its
        // own SLOT-sized part of `buf`; all three live as long as `self` and
        // are never reallocated after `new`.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                self.hdr.as_mut_ptr(),
                BATCH as u32,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted => {
                Ok(0)
            }
            _ => Err(e),
        }
    }

    fn datagram(&self, i: usize) -> Result<&[u8], DropReason> {
        let h = &self.hdr[i];
        if h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
            return Err(DropReason::Oversized);
        }
        let len = (h.msg_len as usize).min(SLOT);
        Ok(&self.buf[i * SLOT..i * SLOT + len])
    }
}

/// Drains `socket` into `ingest` until the agent stops.
///
/// `linger` is how long to wait after a batch that emptied the socket
/// before asking for more. At moderate rates a socket holds one datagram
/// per wake-up, and the wake-up (a sleep, a scheduler switch, one more
/// `recvmmsg`) costs more than parsing the datagram's lines; lingering lets
/// several datagrams queue up so that one wake-up takes them all. It adds
/// at most `linger` of latency to points that wait seconds for their
/// window anyway, and the kernel queue must hold `linger` worth of
/// traffic: fine for UDP with a large `SO_RCVBUF`, not for unix datagram
/// sockets, which queue only `net.unix.max_dgram_qlen` (10) datagrams, so
/// those pass `Duration::ZERO`. A full batch never lingers.
///
/// Lingering pays only when traffic is dense: at a few datagrams per
/// `linger` it turns one wake-up per datagram into two (the sleep, then the
/// wait for the next datagram). So the thread lingers only after a batch of
/// two or more datagrams, or one that came less than `linger / 2` after the
/// previous batch: about 4,000 datagrams/s and up for 500 µs.
pub(super) fn run(socket: &Socket, mut ingest: Ingest, linger: Duration) -> io::Result<()> {
    let fd = socket.as_raw_fd();
    let mut arena = Arena::new();
    let mut last_batch = Instant::now();
    // Batches read after a reload removed this receiver.
    let mut draining = 0;
    loop {
        let n = arena.recv(fd)?;
        for i in 0..n {
            match arena.datagram(i) {
                Ok(d) => ingest.datagram(d),
                Err(reason) => ingest.drop(reason),
            }
        }
        if let Some(drops) = n.checked_sub(1).and_then(|last| arena.kernel_drops(last)) {
            ingest.kernel_drops(drops);
        }
        // A removed receiver empties its socket before its last hand-over,
        // so that nothing sent before the reload is lost (bounded, in case
        // senders keep sending).
        if n > 0 && ingest.retiring() && draining < 64 {
            draining += 1;
            continue;
        }
        if !ingest.end_batch() {
            return Ok(());
        }
        if n > 0 && n < BATCH && !linger.is_zero() {
            let now = Instant::now();
            let dense = n >= 2 || now.duration_since(last_batch) < linger / 2;
            last_batch = now;
            if dense {
                std::thread::sleep(linger);
            }
        }
    }
}

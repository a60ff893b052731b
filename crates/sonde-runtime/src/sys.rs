//! The Linux system interface: every kernel call the agent makes that the
//! standard library, `socket2` and `nix` do not wrap, and every `unsafe`
//! block that talks to the kernel, in one place.
//!
//! What the rest of the crate needs from the operating system:
//!
//! * [`RecvBatch`]: `recvmmsg` with `MSG_WAITFORONE` into a reusable arena,
//!   and the `SO_RXQ_OVFL` drop count each datagram carries;
//! * [`force_receive_buffer`]: `SO_RCVBUFFORCE`, a receive buffer above
//!   `net.core.rmem_max` for a privileged agent;
//! * [`report_queue_overflows`]: `SO_RXQ_OVFL`, so that datagrams carry
//!   the socket's drop count;
//! * [`thread_nice`] and [`set_thread_nice`]: `getpriority` and
//!   `setpriority` on the calling thread (`gettid`), which Linux applies
//!   to one thread rather than the whole process;
//! * [`raise_open_files_limit`]: `setrlimit(RLIMIT_NOFILE)`, the soft
//!   limit on descriptors up to the hard one.
//!
//! All of them are Linux-specific (`recvmmsg`, `SO_RCVBUFFORCE`,
//! `SO_RXQ_OVFL` and per-thread priorities have no portable equivalent);
//! porting the agent means providing this module for another kernel.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use nix::sys::socket::{setsockopt, sockopt};

/// Raises the soft limit on open descriptors to the hard one, as systemd
/// asks of programs that need many (its default soft limit is 1,024, the
/// hard one 524,288): a log source opens every file its globs match when
/// it first finds them, before the idle ones are closed. Returns the soft
/// limit before and after.
///
/// # Errors
///
/// The error of `getrlimit` or `setrlimit`.
pub fn raise_open_files_limit() -> io::Result<(u64, u64)> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(io::Error::from)?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).map_err(io::Error::from)?;
    }
    Ok((soft, soft.max(hard)))
}

/// Asks for a receive buffer of `bytes` with `SO_RCVBUFFORCE`, which
/// ignores `net.core.rmem_max`.
///
/// # Errors
///
/// `EPERM` unless the agent runs as root or with `CAP_NET_ADMIN`.
pub fn force_receive_buffer(socket: &impl AsFd, bytes: usize) -> io::Result<()> {
    // The kernel doubles the value for its bookkeeping, as SO_RCVBUF does.
    let half = (bytes / 2).min(libc::c_int::MAX as usize);
    setsockopt(socket, sockopt::RcvBufForce, &half).map_err(io::Error::from)
}

/// Turns on `SO_RXQ_OVFL`: every datagram then carries the number of
/// datagrams the socket dropped for a full queue, read by
/// [`RecvBatch::queue_overflows`].
///
/// # Errors
///
/// When the kernel does not know the option (before Linux 2.6.33).
pub fn report_queue_overflows(socket: &impl AsFd) -> io::Result<()> {
    setsockopt(socket, sockopt::RxqOvfl, &1).map_err(io::Error::from)
}

/// Control-message room per datagram: one `SO_RXQ_OVFL` message (a u32
/// behind a 16-byte header, padded to 24), in whole u64 for the alignment
/// `cmsghdr` needs.
const CONTROL_WORDS: usize = 4;

/// A reusable `recvmmsg` arena: `batch` slots of `slot` bytes, their
/// iovecs, control buffers and message headers.
///
/// # Design
///
/// The headers point into the other three vectors, which are allocated
/// once in [`RecvBatch::new`] and never grow, so the pointers stay valid
/// for the arena's life and a receive costs no allocation.
#[derive(Debug)]
pub struct RecvBatch {
    slot: usize,
    buf: Vec<u8>,
    iov: Vec<libc::iovec>,
    control: Vec<[u64; CONTROL_WORDS]>,
    hdr: Vec<libc::mmsghdr>,
}

impl RecvBatch {
    /// An arena for up to `batch` datagrams of up to `slot` bytes each.
    pub fn new(batch: usize, slot: usize) -> RecvBatch {
        let mut buf = vec![0u8; batch * slot];
        let iov: Vec<libc::iovec> = buf
            .chunks_exact_mut(slot)
            .map(|c| libc::iovec {
                iov_base: c.as_mut_ptr().cast(),
                iov_len: slot,
            })
            .collect();
        let mut arena = RecvBatch {
            slot,
            buf,
            iov,
            control: vec![[0; CONTROL_WORDS]; batch],
            hdr: Vec::with_capacity(batch),
        };
        for i in 0..batch {
            // SAFETY: mmsghdr is plain data (integers and raw pointers), for
            // which all-zero is a valid value: null pointers, zero lengths.
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_iov = &mut arena.iov[i];
            h.msg_hdr.msg_iovlen = 1;
            h.msg_hdr.msg_control = arena.control[i].as_mut_ptr().cast();
            arena.hdr.push(h);
        }
        arena
    }

    /// Receives up to `batch` datagrams from `fd`: blocks for the first
    /// (up to the socket's read timeout), then takes those already queued
    /// without waiting (`MSG_WAITFORONE`). `Ok(0)` on timeout or signal.
    ///
    /// # Errors
    ///
    /// Any other error of `recvmmsg`.
    pub fn recv(&mut self, fd: BorrowedFd<'_>) -> io::Result<usize> {
        // The kernel shrinks the length to what it wrote.
        for h in &mut self.hdr {
            h.msg_hdr.msg_controllen = std::mem::size_of::<[u64; CONTROL_WORDS]>() as _;
        }
        // SAFETY: `hdr` holds `hdr.len()` initialised headers; each points
        // at its own iovec and control buffer of the length it states, and
        // each iovec at its own `slot`-sized part of `buf`. All live as long
        // as `self`, which this call borrows mutably, and are never
        // reallocated after `new`. A null timeout means none; `fd` is open
        // for the duration of the borrow.
        let n = unsafe {
            libc::recvmmsg(
                fd.as_raw_fd(),
                self.hdr.as_mut_ptr(),
                self.hdr.len() as u32,
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

    /// Datagram `i` of the last [`RecvBatch::recv`], or `None` when it was
    /// longer than a slot and arrived truncated.
    pub fn datagram(&self, i: usize) -> Option<&[u8]> {
        let h = &self.hdr[i];
        if h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
            return None;
        }
        let len = (h.msg_len as usize).min(self.slot);
        Some(&self.buf[i * self.slot..i * self.slot + len])
    }

    /// The socket's kernel drop count carried by datagram `i`, if any
    /// (`SO_RXQ_OVFL`; the kernel adds it once the count is non-zero).
    pub fn queue_overflows(&self, i: usize) -> Option<u32> {
        let h = &self.hdr[i].msg_hdr;
        // SAFETY: the header's control pointer and length describe this
        // arena's own control buffer, which the kernel filled with whole
        // control messages and whose length it set; CMSG_FIRSTHDR and
        // CMSG_NXTHDR return null rather than step past that length, and
        // an SO_RXQ_OVFL message's data is one u32, read unaligned.
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
}

/// The calling thread's kernel id.
fn gettid() -> libc::id_t {
    // SAFETY: gettid takes no arguments, touches no memory and cannot fail.
    let tid = unsafe { libc::gettid() };
    tid as libc::id_t
}

/// The calling thread's nice value.
///
/// # Errors
///
/// When `getpriority` fails.
pub fn thread_nice() -> io::Result<i32> {
    // getpriority can return -1 as a valid nice; errno tells an error
    // apart, so it is cleared first.
    // SAFETY: __errno_location returns this thread's errno, valid for the
    // thread's life; getpriority only reads the priority of this thread.
    unsafe {
        *libc::__errno_location() = 0;
        let p = libc::getpriority(libc::PRIO_PROCESS, gettid());
        match *libc::__errno_location() {
            0 => Ok(p),
            e => Err(io::Error::from_raw_os_error(e)),
        }
    }
}

/// Sets the calling thread's nice value (not the process's: Linux applies
/// `setpriority(PRIO_PROCESS, tid, …)` to one thread).
///
/// # Errors
///
/// `EACCES` when lowering the nice value without `CAP_SYS_NICE`.
pub fn set_thread_nice(nice: i32) -> io::Result<()> {
    // SAFETY: setpriority takes plain integers and touches no memory of
    // ours; it changes only this thread's priority.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, gettid(), nice) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// CPU time the calling thread has used, in nanoseconds
/// (`CLOCK_THREAD_CPUTIME_ID`).
pub fn thread_cpu_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: t is a valid timespec for clock_gettime to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::time::Duration;

    #[test]
    fn a_batch_takes_every_queued_datagram_and_flags_a_truncated_one() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        report_queue_overflows(&rx).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        for d in [&b"a:1|c"[..], b"bb:2|c", b"this one is longer than a slot"] {
            tx.send_to(d, rx.local_addr().unwrap()).unwrap();
        }
        let mut batch = RecvBatch::new(4, 16);
        let mut got = Vec::new();
        while got.len() < 3 {
            let n = batch.recv(rx.as_fd()).unwrap();
            assert!(n > 0, "timed out with {got:?}");
            got.extend((0..n).map(|i| batch.datagram(i).map(<[u8]>::to_vec)));
        }
        assert_eq!(
            got,
            [Some(b"a:1|c".to_vec()), Some(b"bb:2|c".to_vec()), None]
        );
        // Nothing overflowed, so the kernel attached no count.
        assert_eq!(batch.queue_overflows(0), None);
    }

    #[test]
    fn datagrams_after_an_overflow_carry_the_sockets_drop_count() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        report_queue_overflows(&rx).unwrap();
        // The smallest buffer the kernel allows holds a few datagrams.
        socket2::SockRef::from(&rx).set_recv_buffer_size(0).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = rx.local_addr().unwrap();
        let sent = 500;
        for _ in 0..sent {
            tx.send_to(&[b'x'; 1000], to).unwrap();
        }
        let mut batch = RecvBatch::new(8, 2048);
        let mut read = 0;
        loop {
            let n = batch.recv(rx.as_fd()).unwrap();
            if n == 0 {
                break;
            }
            read += n;
        }
        assert!(read < sent, "the buffer held all {sent}");
        // The next datagram is queued after the drops and carries their count.
        tx.send_to(b"last", to).unwrap();
        assert_eq!(batch.recv(rx.as_fd()).unwrap(), 1);
        assert_eq!(batch.datagram(0), Some(&b"last"[..]));
        assert_eq!(batch.queue_overflows(0), Some((sent - read) as u32));
    }

    #[test]
    fn a_forced_receive_buffer_passes_rmem_max_where_permitted() {
        let rmem_max: usize = std::fs::read_to_string("/proc/sys/net/core/rmem_max")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let want = 4 * rmem_max;
        match force_receive_buffer(&socket, want) {
            // Linux reports the doubled size, which is what was asked for.
            Ok(()) => assert_eq!(
                socket2::SockRef::from(&socket).recv_buffer_size().unwrap(),
                want
            ),
            // Without CAP_NET_ADMIN the caller falls back to SO_RCVBUF.
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}"),
        }
    }

    #[test]
    fn a_thread_sets_its_own_nice_and_no_other() {
        let before = thread_nice().unwrap();
        let child = std::thread::spawn(move || {
            set_thread_nice((before + 3).min(19)).unwrap();
            thread_nice().unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(child, (before + 3).min(19));
        assert_eq!(thread_nice().unwrap(), before);
    }
}

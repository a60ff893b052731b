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
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use socket2::Socket;
use sonde_proto::DropReason;

use super::ingest::Ingest;
use sonde_runtime::sys::RecvBatch;

/// Datagrams per `recvmmsg` call.
const BATCH: usize = 32;
/// Bytes per datagram slot: the largest UDP payload, rounded up. A longer
/// unixgram datagram arrives truncated and is dropped as oversized.
const SLOT: usize = 64 * 1024;

/// Drains `socket` into `ingest` until the agent stops.
///
/// After a batch that emptied the socket the thread may linger, up to
/// `max_linger`, before asking for more (see [`linger_for`]). Unix
/// datagram sockets pass `Duration::ZERO`: they queue only
/// `net.unix.max_dgram_qlen` (10) datagrams.
pub(super) fn run(socket: &Socket, mut ingest: Ingest, max_linger: Duration) -> io::Result<()> {
    let fd = socket.as_fd();
    let mut arena = RecvBatch::new(BATCH, SLOT);
    // Payload the queue may take while the thread lingers: an eighth of
    // the buffer asked for (Linux reports twice that, room for each
    // datagram's kernel overhead), so that the rest still rides out a
    // flush or a busy core.
    let budget = socket.recv_buffer_size().unwrap_or(0) / 16;
    let mut last_batch = Instant::now();
    // Batches read after a reload removed this receiver.
    let mut draining = 0;
    loop {
        let n = arena.recv(fd)?;
        let mut bytes = 0;
        for i in 0..n {
            match arena.datagram(i) {
                Some(d) => {
                    bytes += d.len();
                    ingest.datagram(d);
                }
                None => ingest.drop(DropReason::Oversized),
            }
        }
        if let Some(drops) = n
            .checked_sub(1)
            .and_then(|last| arena.queue_overflows(last))
        {
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
        if n > 0 {
            let now = Instant::now();
            let linger = linger_for(n, bytes, now - last_batch, max_linger, budget);
            last_batch = now;
            if !linger.is_zero() {
                std::thread::sleep(linger);
            }
        }
    }
}

/// How long to wait, after a batch of `n` datagrams carrying `bytes` that
/// arrived over the last `since`, before reading again.
///
/// # Design
///
/// At moderate rates a socket holds a few datagrams per wake-up, and the
/// wake-up (a sleep, a scheduler switch, one more `recvmmsg`) costs more
/// than parsing their lines: at plain-1k and 1M lines/s, a fixed 500 µs
/// linger still woke the thread over a thousand times a second, and the
/// switches were a large share of the agent's CPU. So the thread waits for
/// about two batches at the rate the last batch showed, no longer than the
/// byte `budget` the queue may hold and no longer than `max`. Two rather
/// than one: a system call that reads a full batch costs less than a
/// sleep, and waiting for three quarters of a batch cost more CPU than the
/// fixed linger at high rates, every read coming back short and sleeping
/// (docs/benchmarks/LOG.md, "receive linger sized to the traffic"). A full
/// batch never waits: the socket is not drained.
/// Waiting adds at most `max` of latency to points that wait seconds for
/// their window anyway.
///
/// Waiting pays only when at least two datagrams are expected meanwhile:
/// otherwise it turns one wake-up per datagram into two (the sleep, then
/// the wait for the next datagram), so a sparse stream never waits.
fn linger_for(n: usize, bytes: usize, since: Duration, max: Duration, budget: usize) -> Duration {
    if n == 0 || n >= BATCH || max.is_zero() {
        return Duration::ZERO;
    }
    let gap = since / n as u32;
    if gap * 2 > max {
        return Duration::ZERO;
    }
    let fill = gap * (2 * BATCH) as u32;
    let within_budget = since.mul_f64(budget as f64 / bytes.max(1) as f64);
    fill.min(within_budget).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    const MAX: Duration = Duration::from_millis(5);
    const BUDGET: usize = 2 << 20;

    #[test]
    fn dense_traffic_waits_for_two_batches() {
        // 20 datagrams in 1 ms: one every 50 µs, 64 of them in 3.2 ms.
        let got = linger_for(20, 20 * 1400, MS, MAX, BUDGET);
        assert_eq!(got, Duration::from_micros(3200));
        // Twice as dense: half the wait.
        assert_eq!(
            linger_for(20, 20 * 1400, MS / 2, MAX, BUDGET),
            Duration::from_micros(1600)
        );
    }

    #[test]
    fn the_wait_is_capped() {
        // One datagram every 100 µs would take 6.4 ms for 64.
        assert_eq!(linger_for(10, 14_000, MS, MAX, BUDGET), MAX);
    }

    #[test]
    fn a_full_batch_an_empty_read_or_no_linger_never_waits() {
        assert_eq!(
            linger_for(BATCH, BATCH * 1400, MS, MAX, BUDGET),
            Duration::ZERO
        );
        assert_eq!(linger_for(0, 0, MS, MAX, BUDGET), Duration::ZERO);
        assert_eq!(
            linger_for(10, 14_000, MS, Duration::ZERO, BUDGET),
            Duration::ZERO
        );
    }

    #[test]
    fn a_sparse_stream_never_waits() {
        // One datagram every 3 ms: under two would arrive in the longest wait.
        assert_eq!(linger_for(1, 1400, 3 * MS, MAX, BUDGET), Duration::ZERO);
        assert_eq!(linger_for(2, 2800, 6 * MS, MAX, BUDGET), Duration::ZERO);
        // One every 2 ms: two fit in the 5 ms cap, so it waits the cap.
        assert_eq!(linger_for(1, 1400, 2 * MS, MAX, BUDGET), MAX);
    }

    #[test]
    fn the_wait_never_lets_more_than_the_budget_queue_up() {
        // 8 bunches of 32 KiB in 1 ms: 256 KiB a millisecond; a 512 KiB
        // budget fills in 2 ms, before 64 bunches (8 ms) or the cap.
        let got = linger_for(8, 8 << 15, MS, MAX, 512 << 10);
        assert_eq!(got, 2 * MS);
        // A socket whose buffer size is unknown (budget 0) never waits.
        assert_eq!(linger_for(8, 8 << 15, MS, MAX, 0), Duration::ZERO);
    }
}

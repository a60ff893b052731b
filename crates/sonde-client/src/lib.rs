//! A client for the sonde agent: emits metrics in the metricserver2 msgpack
//! protocol, byte for byte like sonde's Go, Python and Java SDKs (the
//! contract is `sdk/SPEC.md`, the bytes are pinned by `testdata/vectors`).
//!
//! [`Client`] never blocks the caller on I/O: points go into a bounded
//! buffer, and a background thread sends them every 200 ms (or when the
//! buffer fills) as bunches under 32 KiB. A counter or rate counter for a
//! series already pending is added into its entry, and a store replaces its
//! entry's value, so a hot loop over fewer series than the buffer holds
//! loses nothing. A full buffer drops the point and counts it
//! ([`Client::dropped`]); a failed send is counted
//! ([`Client::send_errors`]) and the socket is reopened on the next send,
//! so a restarted agent is picked up again.
//!
//! ```no_run
//! use sonde_client::{Client, Options};
//!
//! let client = Client::new(Options { prefix: "web".into(), ..Options::default() })?;
//! client.counter("requests", 1.0, &[("host", "web-1"), ("route", "/orders")])?;
//! client.timer("latency", 12.5, &[("route", "/orders")])?;
//! client.close(); // sends what is pending
//! # Ok::<(), sonde_client::Error>(())
//! ```
#![deny(missing_docs)]

mod transport;
pub mod wire;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

pub use transport::Address;
use transport::Transport;
pub use wire::Type;

/// The largest datagram a client sends: a bunch stays below 32 KiB.
pub const MAX_DATAGRAM: usize = 32 * 1024 - 1;

/// Why an emit or a client was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum Error {
    /// An empty name, or one with `|`, `=`, a space, `\n` or `\r` (prefix included).
    #[error("invalid metric name {0:?}: it must be non-empty without |, space, newline or carriage return")]
    Name(String),
    /// An empty tag key, or a key or value with `|`, `=`, a space, `\n` or `\r`.
    #[error("invalid tag {0:?}: keys must be non-empty, and keys and values cannot contain |, =, space, newline or carriage return")]
    Tag(String),
    /// NaN or an infinity, or a counter whose pending sum it would take
    /// past f64's range.
    #[error("invalid value {0}: it must be a finite number")]
    Value(f64),
    /// An address that is not `unixgram://`, `unixseq://` or `udp://`.
    #[error("invalid address {0:?}: use unixgram:///path, unixseq:///path or udp://host:port")]
    Address(String),
    /// The client was closed.
    #[error("the client is closed")]
    Closed,
}

/// Client settings; every field has a default.
#[derive(Clone, Debug)]
pub struct Options {
    /// Where the agent listens. Default: `$SONDE_ADDRESS`, else
    /// `unixgram:///tmp/metric.sock` if that file exists, else
    /// `udp://127.0.0.1:9123`.
    pub address: Option<String>,
    /// Joined to every name with a dot. Default none.
    pub prefix: String,
    /// Entries held between flushes: one per pending counter, rate counter
    /// or store series, one per other emit. Default 10,000.
    pub buffer_size: usize,
    /// How often the background thread sends. Default 200 ms.
    pub flush_interval: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            address: None,
            prefix: String::new(),
            buffer_size: 10_000,
            flush_interval: Duration::from_millis(200),
        }
    }
}

/// One pending message.
#[derive(Debug)]
struct Pending {
    ty: Type,
    name: String,
    tags: String,
    value: f64,
    ts: Option<i64>,
}

#[derive(Debug, Default)]
struct State {
    pending: Vec<Pending>,
    /// Merged series in `pending` (see [`merges`]): (type, name, tags) -> index.
    sums: HashMap<(Type, String, String), usize>,
    closed: bool,
    /// Set to wake the flusher early (buffer full, flush requested).
    wake: bool,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    cond: Condvar,
    /// Serialises sends (flusher and `flush()` callers).
    transport: Mutex<Transport>,
    dropped: AtomicU64,
    send_errors: AtomicU64,
    capacity: usize,
}

/// A sonde client. Cheap to share across threads (`&Client` or `Arc<Client>`).
#[derive(Debug)]
pub struct Client {
    shared: Arc<Shared>,
    prefix: String,
    flusher: Mutex<Option<JoinHandle<()>>>,
}

fn bad_name(s: &str) -> bool {
    s.contains(['|', '=', ' ', '\n', '\r'])
}

fn bad_tag_part(s: &str) -> bool {
    s.contains(['|', '=', ' ', '\n', '\r'])
}

/// Whether an emit for a series already pending joins its entry rather than
/// taking one: counters and rate counters add to it, a store replaces its
/// value (the agent keeps a window's last). A hot loop over a few series
/// then never fills the buffer (sdk/SPEC.md, Client behaviour).
fn merges(ty: Type) -> bool {
    ty.sums() || ty == Type::Store
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave the state inconsistent
    // (every update is one push or one add), so carry on.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Client {
    /// Starts a client and its background sender. The socket opens on the
    /// first send, so a client may start before the agent.
    ///
    /// # Errors
    ///
    /// [`Error::Address`] for an address of an unknown form,
    /// [`Error::Name`] for a prefix with forbidden characters.
    pub fn new(options: Options) -> Result<Client, Error> {
        if bad_name(&options.prefix) {
            return Err(Error::Name(options.prefix));
        }
        let address = match options.address {
            Some(a) => a.parse()?,
            None => Address::default_for_host()?,
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            cond: Condvar::new(),
            transport: Mutex::new(Transport::new(address)),
            dropped: AtomicU64::new(0),
            send_errors: AtomicU64::new(0),
            capacity: options.buffer_size.max(1),
        });
        let bg = Arc::clone(&shared);
        let interval = options.flush_interval;
        let flusher = std::thread::Builder::new()
            .name("sonde-client".into())
            .spawn(move || loop {
                let closed = {
                    let mut st = lock(&bg.state);
                    if !st.wake && !st.closed {
                        st = bg
                            .cond
                            .wait_timeout(st, interval)
                            .map(|r| r.0)
                            .unwrap_or_else(|e| e.into_inner().0);
                    }
                    st.wake = false;
                    st.closed
                };
                bg.send_pending();
                if closed {
                    return;
                }
            })
            .ok();
        Ok(Client {
            shared,
            prefix: options.prefix,
            flusher: Mutex::new(flusher),
        })
    }

    /// The address in use.
    pub fn address(&self) -> Address {
        lock(&self.shared.transport).address().clone()
    }

    fn emit(
        &self,
        ty: Type,
        name: &str,
        value: f64,
        tags: &[(&str, &str)],
        ts: Option<i64>,
    ) -> Result<(), Error> {
        let full = if self.prefix.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.prefix)
        };
        if name.is_empty() || bad_name(name) {
            return Err(Error::Name(full));
        }
        if !value.is_finite() {
            return Err(Error::Value(value));
        }
        let mut rendered = String::new();
        for (i, (k, v)) in tags.iter().enumerate() {
            if k.is_empty() || bad_tag_part(k) || bad_tag_part(v) {
                return Err(Error::Tag(format!("{k}={v}")));
            }
            if i > 0 {
                rendered.push('|');
            }
            rendered.push_str(k);
            rendered.push('=');
            rendered.push_str(v);
        }
        let mut st = lock(&self.shared.state);
        if st.closed {
            return Err(Error::Closed);
        }
        if merges(ty) {
            let key = (ty, full, rendered);
            if let Some(&i) = st.sums.get(&key) {
                let p = &mut st.pending[i];
                if ty.sums() {
                    // A sum past f64's range is refused, as the Go SDK
                    // does; the pending sum stays as it was.
                    let sum = p.value + value;
                    if !sum.is_finite() {
                        return Err(Error::Value(sum));
                    }
                    p.value = sum;
                } else {
                    p.value = value;
                }
                return Ok(());
            }
            if st.pending.len() >= self.shared.capacity {
                return self.full(st);
            }
            let i = st.pending.len();
            let (ty, name, tags) = key.clone();
            st.pending.push(Pending {
                ty,
                name,
                tags,
                value,
                ts,
            });
            st.sums.insert(key, i);
        } else {
            if st.pending.len() >= self.shared.capacity {
                return self.full(st);
            }
            st.pending.push(Pending {
                ty,
                name: full,
                tags: rendered,
                value,
                ts,
            });
        }
        if st.pending.len() >= self.shared.capacity {
            st.wake = true;
            self.shared.cond.notify_one();
        }
        Ok(())
    }

    fn full(&self, mut st: MutexGuard<'_, State>) -> Result<(), Error> {
        self.shared.dropped.fetch_add(1, Ordering::Relaxed);
        st.wake = true;
        self.shared.cond.notify_one();
        Ok(())
    }

    /// A counter increment: the agent reports the running total.
    ///
    /// # Errors
    ///
    /// [`Error::Name`], [`Error::Tag`], [`Error::Value`] or [`Error::Closed`].
    pub fn counter(&self, name: &str, value: f64, tags: &[(&str, &str)]) -> Result<(), Error> {
        self.emit(Type::Counter, name, value, tags, None)
    }

    /// A rate counter increment: reported as the window's sum per second.
    ///
    /// # Errors
    ///
    /// As [`Client::counter`].
    pub fn rate_counter(&self, name: &str, value: f64, tags: &[(&str, &str)]) -> Result<(), Error> {
        self.emit(Type::RateCounter, name, value, tags, None)
    }

    /// A meter increment: a running total plus `NAME.rate`.
    ///
    /// # Errors
    ///
    /// As [`Client::counter`].
    pub fn meter(&self, name: &str, value: f64, tags: &[(&str, &str)]) -> Result<(), Error> {
        self.emit(Type::Meter, name, value, tags, None)
    }

    /// A timer sample (milliseconds by convention).
    ///
    /// # Errors
    ///
    /// As [`Client::counter`].
    pub fn timer(&self, name: &str, value: f64, tags: &[(&str, &str)]) -> Result<(), Error> {
        self.emit(Type::Timer, name, value, tags, None)
    }

    /// A stored value: the window's last one is reported.
    ///
    /// # Errors
    ///
    /// As [`Client::counter`].
    pub fn store(&self, name: &str, value: f64, tags: &[(&str, &str)]) -> Result<(), Error> {
        self.emit(Type::Store, name, value, tags, None)
    }

    /// A value at a client timestamp (unix seconds).
    ///
    /// # Errors
    ///
    /// As [`Client::counter`].
    pub fn ts_store(
        &self,
        name: &str,
        value: f64,
        ts: i64,
        tags: &[(&str, &str)],
    ) -> Result<(), Error> {
        self.emit(Type::TsStore, name, value, tags, Some(ts))
    }

    /// A histogram sample, bucketed by the agent.
    ///
    /// # Errors
    ///
    /// As [`Client::counter`].
    pub fn histogram(&self, name: &str, value: f64, tags: &[(&str, &str)]) -> Result<(), Error> {
        self.emit(Type::Histogram, name, value, tags, None)
    }

    /// Runs `f` and records how long it took, in milliseconds, as a timer.
    ///
    /// # Errors
    ///
    /// As [`Client::counter`]; `f` runs either way.
    pub fn time<T>(
        &self,
        name: &str,
        tags: &[(&str, &str)],
        f: impl FnOnce() -> T,
    ) -> Result<T, Error> {
        let start = std::time::Instant::now();
        let out = f();
        self.timer(name, start.elapsed().as_secs_f64() * 1000.0, tags)?;
        Ok(out)
    }

    /// Sends everything pending now, on the caller's thread.
    pub fn flush(&self) {
        self.shared.send_pending();
    }

    /// Sends what is pending and stops the background thread. Later emits
    /// return [`Error::Closed`]. Also done on drop.
    pub fn close(&self) {
        lock(&self.shared.state).closed = true;
        self.shared.cond.notify_one();
        if let Some(t) = lock(&self.flusher).take() {
            let _ = t.join();
        }
        self.shared.send_pending();
    }

    /// Points dropped because the buffer was full.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Datagrams that could not be delivered.
    pub fn send_errors(&self) -> u64 {
        self.shared.send_errors.load(Ordering::Relaxed)
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.close();
    }
}

impl Shared {
    /// Takes the pending points and sends them as datagrams under 32 KiB.
    fn send_pending(&self) {
        let pending = {
            let mut st = lock(&self.state);
            st.sums.clear();
            std::mem::take(&mut st.pending)
        };
        if pending.is_empty() {
            return;
        }
        let mut transport = lock(&self.transport);
        let mut body = Vec::new();
        let mut count = 0usize;
        let mut msg = Vec::new();
        let mut send = |body: &mut Vec<u8>, count: &mut usize| {
            if *count > 0 && transport.send(&wire::datagram(body, *count)).is_err() {
                self.send_errors.fetch_add(1, Ordering::Relaxed);
            }
            body.clear();
            *count = 0;
        };
        for p in &pending {
            msg.clear();
            let ts = p.ts.map(|t| t.to_string()).unwrap_or_default();
            let value = wire::value_text(p.value).unwrap_or_else(|| "0".into());
            wire::write_message(&mut msg, p.ty.as_str(), &p.name, &value, &p.tags, &ts);
            if count > 0 && 3 + body.len() + msg.len() > MAX_DATAGRAM {
                send(&mut body, &mut count);
            }
            body.extend_from_slice(&msg);
            count += 1;
            if count == usize::from(u16::MAX) {
                send(&mut body, &mut count);
            }
        }
        send(&mut body, &mut count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixDatagram;

    struct Receiver {
        // Removed, with the socket file, when the test ends.
        _dir: tempfile::TempDir,
        path: std::path::PathBuf,
        sock: UnixDatagram,
    }

    fn receiver(name: &str) -> Receiver {
        let dir = tempfile::Builder::new()
            .prefix(&format!("sonde-client-{name}-"))
            .tempdir()
            .unwrap();
        let path = dir.path().join("r.sock");
        let sock = UnixDatagram::bind(&path).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        Receiver {
            _dir: dir,
            path,
            sock,
        }
    }

    impl Receiver {
        fn client(&self, buffer: usize) -> Client {
            Client::new(Options {
                address: Some(format!("unixgram://{}", self.path.display())),
                prefix: "app".into(),
                buffer_size: buffer,
                // Long, so tests decide when to flush.
                flush_interval: Duration::from_secs(3600),
            })
            .unwrap()
        }

        fn recv(&self) -> Vec<u8> {
            let mut buf = vec![0u8; 65536];
            let n = self.sock.recv(&mut buf).unwrap();
            buf.truncate(n);
            buf
        }
    }

    fn message(ty: &str, name: &str, value: &str, tags: &str, ts: &str) -> Vec<u8> {
        let mut m = Vec::new();
        wire::write_message(&mut m, ty, name, value, tags, ts);
        m
    }

    #[test]
    fn counters_of_one_series_are_summed_before_sending() {
        let r = receiver("sum");
        let c = r.client(100);
        c.counter("hits", 1.0, &[("host", "a")]).unwrap();
        c.timer("ms", 12.5, &[]).unwrap();
        c.counter("hits", 2.0, &[("host", "a")]).unwrap();
        c.counter("hits", 4.0, &[("host", "b")]).unwrap();
        c.flush();
        let mut want = vec![0xdc, 0, 3];
        want.extend(message("counter", "app.hits", "3", "host=a", ""));
        want.extend(message("timer", "app.ms", "12.5", "", ""));
        want.extend(message("counter", "app.hits", "4", "host=b", ""));
        assert_eq!(r.recv(), want);
    }

    #[test]
    fn a_store_replaces_the_pending_value_of_its_series() {
        let r = receiver("store");
        let c = r.client(100);
        c.store("depth", 3.0, &[]).unwrap();
        c.timer("ms", 1.0, &[]).unwrap();
        c.store("depth", 7.0, &[]).unwrap();
        c.flush();
        let mut want = vec![0xdc, 0, 2];
        want.extend(message("store", "app.depth", "7", "", ""));
        want.extend(message("timer", "app.ms", "1", "", ""));
        assert_eq!(r.recv(), want);
    }

    #[test]
    fn a_counter_sum_past_the_range_of_f64_is_refused_and_the_sum_kept() {
        let r = receiver("overflow");
        let c = r.client(100);
        c.counter("big", f64::MAX, &[]).unwrap();
        assert!(matches!(
            c.counter("big", f64::MAX, &[]),
            Err(Error::Value(v)) if v.is_infinite()
        ));
        c.flush();
        // One message travels bare, not in an array.
        let want = message(
            "counter",
            "app.big",
            &crate::wire::value_text(f64::MAX).unwrap(),
            "",
            "",
        );
        assert_eq!(r.recv(), want);
    }

    #[test]
    fn a_hot_loop_over_fewer_series_than_the_buffer_holds_drops_nothing() {
        let r = receiver("hot");
        // 501 series in 502 entries: the buffer never fills, so nothing is
        // sent before flush().
        let c = r.client(502);
        let names: Vec<String> = (0..500).map(|i| format!("hits.{i}")).collect();
        for i in 0..20_000 {
            c.counter(&names[i % 500], 1.0, &[]).unwrap();
            c.store("depth", i as f64, &[]).unwrap();
        }
        assert_eq!(c.dropped(), 0);
        c.flush();
        let d = r.recv();
        assert_eq!(u16::from_be_bytes([d[1], d[2]]), 501);
        let mut want = vec![0xdc, 0x01, 0xf5];
        for name in &names {
            want.extend(message("counter", &format!("app.{name}"), "40", "", ""));
            if name == "hits.0" {
                want.extend(message("store", "app.depth", "19999", "", ""));
            }
        }
        assert_eq!(d, want);
    }

    #[test]
    fn a_single_pending_point_is_sent_bare() {
        let r = receiver("bare");
        let c = r.client(100);
        c.ts_store("daily", 42.0, 1_700_000_000, &[]).unwrap();
        c.flush();
        assert_eq!(
            r.recv(),
            message("ts_store", "app.daily", "42", "", "1700000000")
        );
    }

    #[test]
    fn bunches_stay_under_32_kib() {
        let r = receiver("split");
        let c = r.client(10_000);
        let long = "x".repeat(200);
        for i in 0..1000 {
            c.store(&format!("s{i}"), 1.0, &[("k", &long)]).unwrap();
        }
        c.flush();
        let mut points = 0;
        while points < 1000 {
            let d = r.recv();
            assert!(d.len() <= MAX_DATAGRAM, "{} bytes", d.len());
            assert_eq!(d[0], 0xdc);
            points += usize::from(u16::from_be_bytes([d[1], d[2]]));
        }
        assert_eq!(points, 1000);
    }

    #[test]
    fn a_full_buffer_drops_and_counts() {
        let r = receiver("full");
        let c = r.client(3);
        for i in 0..5 {
            c.store(&format!("s{i}"), 1.0, &[]).unwrap();
        }
        assert_eq!(c.dropped(), 2);
        c.close();
        let d = r.recv();
        assert_eq!(u16::from_be_bytes([d[1], d[2]]), 3);
    }

    #[test]
    fn invalid_names_tags_and_values_are_errors() {
        let r = receiver("invalid");
        let c = r.client(10);
        assert!(matches!(c.counter("", 1.0, &[]), Err(Error::Name(_))));
        assert!(matches!(c.counter("a b", 1.0, &[]), Err(Error::Name(_))));
        assert!(matches!(c.counter("a|b", 1.0, &[]), Err(Error::Name(_))));
        assert!(matches!(c.counter("a=b", 1.0, &[]), Err(Error::Name(_))));
        assert!(matches!(
            c.counter("a", 1.0, &[("", "v")]),
            Err(Error::Tag(_))
        ));
        assert!(matches!(
            c.counter("a", 1.0, &[("k", "v=w")]),
            Err(Error::Tag(_))
        ));
        assert!(matches!(
            c.counter("a", 1.0, &[("k", "v\n")]),
            Err(Error::Tag(_))
        ));
        assert!(matches!(
            c.counter("a", f64::NAN, &[]),
            Err(Error::Value(_))
        ));
        assert!(
            c.counter("a", 1.0, &[("k", "")]).is_ok(),
            "an empty value is a tag"
        );
        assert!(matches!(
            Client::new(Options {
                prefix: "a b".into(),
                ..Options::default()
            }),
            Err(Error::Name(_))
        ));
        assert!(matches!(
            "tcp://x:1".parse::<Address>(),
            Err(Error::Address(_))
        ));
        c.close();
        assert_eq!(c.counter("a", 1.0, &[]), Err(Error::Closed));
    }

    #[test]
    fn the_client_reconnects_after_the_agent_restarts() {
        let r = receiver("restart");
        let c = r.client(10);
        c.store("before", 1.0, &[]).unwrap();
        c.flush();
        assert_eq!(r.recv(), message("store", "app.before", "1", "", ""));
        // The agent goes away and comes back on the same path.
        drop(r.sock);
        std::fs::remove_file(&r.path).unwrap();
        c.store("lost", 1.0, &[]).unwrap();
        c.flush();
        assert_eq!(c.send_errors(), 1);
        let again = UnixDatagram::bind(&r.path).unwrap();
        again
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        c.store("after", 2.0, &[]).unwrap();
        c.flush();
        let mut buf = vec![0u8; 1024];
        let n = again.recv(&mut buf).unwrap();
        assert_eq!(buf[..n], message("store", "app.after", "2", "", "")[..]);
        assert_eq!(c.send_errors(), 1);
    }

    #[test]
    fn the_background_thread_sends_without_a_flush() {
        let r = receiver("bg");
        let c = Client::new(Options {
            address: Some(format!("unixgram://{}", r.path.display())),
            flush_interval: Duration::from_millis(50),
            ..Options::default()
        })
        .unwrap();
        c.histogram("h", 5.0, &[]).unwrap();
        assert_eq!(r.recv(), message("histogram", "h", "5", "", ""));
    }

    #[test]
    fn time_records_milliseconds() {
        let r = receiver("time");
        let c = r.client(10);
        let v = c.time("work", &[], || 7).unwrap();
        assert_eq!(v, 7);
        c.flush();
        let d = r.recv();
        assert_eq!(&d[..2], &[0x96, 0xa4]);
        assert!(d.windows(8).any(|w| w == b"app.work"));
    }
}

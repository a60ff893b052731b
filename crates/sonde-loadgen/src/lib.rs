//! sonde's load generator: drives an agent with a known load over UDP or a
//! unix datagram socket, then reports what the agent made of it.
//!
//! The generator builds its datagrams up front ([`shape`]), then sends them
//! with `sendmmsg` in batches, pacing to a target rate (or flat out). When
//! the load ends it waits for the agent to drain its socket, then reads:
//!
//! * points the agent accounted for, from its `/metrics`
//!   (`sonde_receiver_points_total`, before and after);
//! * the agent's CPU seconds (`/proc/PID/stat`) and peak RSS (`VmHWM`);
//! * kernel drops (`RcvbufErrors` in `/proc/net/snmp`), which count drops
//!   that an agent without its own counters cannot report.
//!
//! The method follows docs/BENCHMARKS.md, "How the peers were measured",
//! so figures for sonde and its peers compare.
//!
//! For log shipping, [`logs`] writes numbered lines into rotating files
//! (`sonde-logwrite`) and counts which came back through Kafka
//! (`sonde-logcheck`): lines lost and duplicated, per file.
//!
//! For the fleet's profile store, [`fleet`] makes many hosts' profiles
//! from real ones (`sonde-fleetgen`), loaded into ClickHouse as the
//! `clickhouse` sink writes them.
#![deny(missing_docs)]

pub mod fleet;
pub mod logs;
pub mod procfs;
pub mod shape;

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use shape::{Datagram, Shape};

/// Where the load goes.
#[derive(Clone, Debug)]
pub enum Target {
    /// A UDP address.
    Udp(SocketAddr),
    /// A unix datagram socket path.
    Unixgram(PathBuf),
}

/// A load run.
#[derive(Clone, Debug)]
pub struct Load {
    /// Destination.
    pub target: Target,
    /// The load's shape.
    pub shape: Shape,
    /// Points per second; `None` sends as fast as the socket takes them.
    pub rate: Option<f64>,
    /// How long to send.
    pub duration: Duration,
    /// Where the agent's counters are read, if it has an admin site.
    pub admin: Option<Scrape>,
    /// The agent's process id, for CPU and memory.
    pub pid: Option<u32>,
    /// Show a progress bar on standard error.
    pub progress: bool,
}

/// Reads the sum of every sample of a metric of the agent's `/metrics`
/// (all label sets): [`procfs::scrape_sum`] for an admin site anyone may
/// read, or a client that carries the agent's admin token.
#[derive(Clone)]
pub struct Scrape(pub Arc<SumOf>);

/// The sum of a metric's samples, if the agent answered.
pub type SumOf = dyn Fn(&str) -> Option<f64> + Send + Sync;

impl Scrape {
    /// The admin site at `addr`, read without a token.
    pub fn open(addr: SocketAddr) -> Scrape {
        Scrape(Arc::new(move |metric| procfs::scrape_sum(addr, metric)))
    }

    fn sum(&self, metric: &str) -> Option<f64> {
        (self.0)(metric)
    }
}

impl std::fmt::Debug for Scrape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Scrape(..)")
    }
}

/// What a run measured.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Report {
    /// The shape of the load.
    pub shape: Shape,
    /// Target rate in points/s, if any.
    pub target_rate: Option<f64>,
    /// Seconds spent sending.
    pub seconds: f64,
    /// Points sent.
    pub points_sent: u64,
    /// Datagrams sent.
    pub datagrams_sent: u64,
    /// Achieved send rate, points/s.
    pub send_rate: f64,
    /// Points the agent counted as received and aggregated.
    pub points_accounted: Option<u64>,
    /// Points the agent counted as dropped (any reason).
    pub points_dropped_by_agent: Option<u64>,
    /// `1 - accounted / sent`, in percent.
    pub loss_percent: Option<f64>,
    /// UDP receive-buffer drops in the kernel during the run (whole host).
    pub kernel_rcvbuf_drops: Option<u64>,
    /// Agent CPU seconds (user + system) from the start of the load until
    /// its socket drained.
    pub agent_cpu_seconds: Option<f64>,
    /// Agent CPU microseconds per 1,000 points it accounted for (per 1,000
    /// sent when its counters cannot be read).
    pub agent_cpu_us_per_1000_points: Option<f64>,
    /// Agent peak resident memory (`VmHWM`), bytes.
    pub agent_peak_rss_bytes: Option<u64>,
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The socket could not be opened or connected.
    #[error("cannot send to {target}: {error}")]
    Connect {
        /// The target.
        target: String,
        /// What the OS said.
        error: io::Error,
    },
    /// Sending failed with something other than a full buffer.
    #[error("sending failed: {0}")]
    Send(io::Error),
}

/// A connected datagram socket.
enum Socket {
    Udp(std::net::UdpSocket),
    Unix(std::os::unix::net::UnixDatagram),
}

impl Socket {
    fn fd(&self) -> i32 {
        match self {
            Socket::Udp(s) => s.as_raw_fd(),
            Socket::Unix(s) => s.as_raw_fd(),
        }
    }
}

fn connect(target: &Target) -> Result<Socket, LoadError> {
    let err = |source| LoadError::Connect {
        target: format!("{target:?}"),
        error: source,
    };
    match target {
        Target::Udp(a) => {
            let local: SocketAddr = if a.is_ipv4() {
                ([127, 0, 0, 1], 0).into()
            } else {
                (std::net::Ipv6Addr::LOCALHOST, 0).into()
            };
            let s = std::net::UdpSocket::bind(local).map_err(err)?;
            s.connect(a).map_err(err)?;
            Ok(Socket::Udp(s))
        }
        Target::Unixgram(p) => {
            let s = std::os::unix::net::UnixDatagram::unbound().map_err(err)?;
            s.connect(p).map_err(err)?;
            Ok(Socket::Unix(s))
        }
    }
}

/// Datagrams per `sendmmsg` call.
const BATCH: usize = 64;

/// Sends `batch` with one `sendmmsg`; returns how many went out.
fn send_batch(fd: i32, batch: &[&Datagram]) -> io::Result<usize> {
    let mut iov: Vec<libc::iovec> = batch
        .iter()
        .map(|d| libc::iovec {
            iov_base: d.bytes.as_ptr() as *mut _,
            iov_len: d.bytes.len(),
        })
        .collect();
    let mut hdr: Vec<libc::mmsghdr> = iov
        .iter_mut()
        .map(|v| {
            // SAFETY: mmsghdr is plain data; all-zero is valid.
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_iov = v;
            h.msg_hdr.msg_iovlen = 1;
            h
        })
        .collect();
    // SAFETY: every header points at one iovec of `iov`, which points into a
    // datagram of `batch`; all outlive the call.
    let n = unsafe { libc::sendmmsg(fd, hdr.as_mut_ptr(), hdr.len() as u32, 0) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

impl Load {
    /// Runs the load and measures the agent.
    ///
    /// # Errors
    ///
    /// When the target cannot be reached at all.
    pub fn run(&self) -> Result<Report, LoadError> {
        // Enough points to visit every series, capped so the pool stays in memory.
        let pool_points = self.shape.series.clamp(50_000, 2_000_000);
        let pool = self.shape.datagrams(pool_points);
        let avg_points =
            pool.iter().map(|d| f64::from(d.points)).sum::<f64>() / pool.len().max(1) as f64;
        let socket = connect(&self.target)?;
        let fd = socket.fd();
        let points_metric = "sonde_receiver_points_total";
        let dropped_metric = "sonde_receiver_dropped_total";
        let before_points = self.admin.as_ref().and_then(|a| a.sum(points_metric));
        let before_dropped = self.admin.as_ref().and_then(|a| a.sum(dropped_metric));
        let before_kernel = procfs::udp_rcvbuf_errors();
        let before_cpu = self.pid.and_then(procfs::cpu_seconds);

        let bar = if self.progress {
            let b = indicatif::ProgressBar::new(self.duration.as_millis() as u64);
            b.set_style(
                indicatif::ProgressStyle::with_template("{bar:40} {elapsed}/{duration} {msg}")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            b
        } else {
            indicatif::ProgressBar::hidden()
        };

        let start = Instant::now();
        let (mut points, mut datagrams) = (0u64, 0u64);
        let mut i = 0usize;
        let mut batch: Vec<&Datagram> = Vec::with_capacity(BATCH);
        let mut last_tick = start;
        loop {
            let elapsed = start.elapsed();
            if elapsed >= self.duration {
                break;
            }
            let mut count = BATCH;
            if let Some(rate) = self.rate {
                let due = Duration::from_secs_f64(points as f64 / rate);
                if due > elapsed {
                    let ahead = due - elapsed;
                    if ahead > Duration::from_micros(200) {
                        std::thread::sleep(ahead);
                    }
                    continue;
                }
                // Send only what is owed now, so large bunches at low rates
                // do not overshoot by a whole batch.
                let owed = rate * elapsed.as_secs_f64() - points as f64;
                count = ((owed / avg_points).ceil() as usize).clamp(1, BATCH);
            }
            batch.clear();
            for k in 0..count {
                batch.push(&pool[(i + k) % pool.len()]);
            }
            match send_batch(fd, &batch) {
                Ok(n) => {
                    for d in &batch[..n] {
                        points += u64::from(d.points);
                    }
                    datagrams += n as u64;
                    i = (i + n) % pool.len();
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) => {}
                // The local send queue is momentarily full: retry.
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {}
                Err(e) => return Err(LoadError::Send(e)),
            }
            if last_tick.elapsed() >= Duration::from_millis(100) {
                last_tick = Instant::now();
                bar.set_position(start.elapsed().as_millis() as u64);
                let secs = start.elapsed().as_secs_f64();
                bar.set_message(format!("{:.0} points/s", points as f64 / secs));
            }
        }
        let seconds = start.elapsed().as_secs_f64();
        bar.finish_and_clear();
        self.drain();
        let after_cpu = self.pid.and_then(procfs::cpu_seconds);
        let after_points = self.admin.as_ref().and_then(|a| a.sum(points_metric));
        let after_dropped = self.admin.as_ref().and_then(|a| a.sum(dropped_metric));
        let accounted = before_points
            .zip(after_points)
            .map(|(b, a)| (a - b).max(0.0) as u64);
        let cpu = before_cpu.zip(after_cpu).map(|(b, a)| a - b);
        Ok(Report {
            shape: self.shape.clone(),
            target_rate: self.rate,
            seconds,
            points_sent: points,
            datagrams_sent: datagrams,
            send_rate: points as f64 / seconds,
            points_accounted: accounted,
            points_dropped_by_agent: before_dropped
                .zip(after_dropped)
                .map(|(b, a)| (a - b).max(0.0) as u64),
            loss_percent: accounted.map(|a| 100.0 * (1.0 - a as f64 / points.max(1) as f64)),
            kernel_rcvbuf_drops: before_kernel
                .zip(procfs::udp_rcvbuf_errors())
                .map(|(b, a)| a - b),
            agent_cpu_seconds: cpu,
            agent_cpu_us_per_1000_points: cpu
                .map(|c| c * 1e6 / (accounted.unwrap_or(points).max(1) as f64 / 1000.0)),
            agent_peak_rss_bytes: self.pid.and_then(procfs::peak_rss),
        })
    }

    /// Waits (up to 10 s) until the agent has taken everything queued: its
    /// point counter stops moving, or the UDP queue of the port is empty.
    fn drain(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut last = None;
        let mut still = 0;
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
            let now = match (&self.admin, &self.target) {
                (Some(a), _) => a.sum("sonde_receiver_points_total"),
                (None, Target::Udp(a)) => procfs::udp_queue(a.port()).map(|q| q as f64),
                (None, Target::Unixgram(_)) => None,
            };
            if self.admin.is_none() && now == Some(0.0) {
                return;
            }
            if now.is_some() && now == last {
                still += 1;
                if still >= 3 {
                    return;
                }
            } else {
                still = 0;
            }
            last = now;
        }
    }
}

impl Report {
    /// The report as aligned text for a terminal.
    pub fn text(&self) -> String {
        let opt = |v: Option<String>| v.unwrap_or_else(|| "n/a".into());
        let mut rows: Vec<(&str, String)> = vec![
            (
                "points sent",
                format!(
                    "{} in {:.1} s ({:.0}/s)",
                    self.points_sent, self.seconds, self.send_rate
                ),
            ),
            (
                "datagrams sent",
                format!(
                    "{} ({:.1} points each)",
                    self.datagrams_sent,
                    self.points_sent as f64 / self.datagrams_sent.max(1) as f64
                ),
            ),
            (
                "points accounted",
                opt(self.points_accounted.map(|v| v.to_string())),
            ),
            (
                "points dropped by agent",
                opt(self.points_dropped_by_agent.map(|v| v.to_string())),
            ),
            ("loss", opt(self.loss_percent.map(|v| format!("{v:.3} %")))),
            (
                "kernel rcvbuf drops",
                opt(self.kernel_rcvbuf_drops.map(|v| v.to_string())),
            ),
            (
                "agent CPU",
                opt(self.agent_cpu_seconds.map(|v| format!("{v:.2} s"))),
            ),
            (
                "agent CPU per 1000 points",
                opt(self
                    .agent_cpu_us_per_1000_points
                    .map(|v| format!("{v:.1} µs"))),
            ),
            (
                "agent peak RSS",
                opt(self
                    .agent_peak_rss_bytes
                    .map(|v| format!("{:.1} MiB", v as f64 / 1048576.0))),
            ),
        ];
        if let Some(r) = self.target_rate {
            rows.insert(0, ("target rate", format!("{r:.0} points/s")));
        }
        rows.iter().map(|(k, v)| format!("{k:<26} {v}\n")).collect()
    }
}

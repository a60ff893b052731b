//! Test harness: runs the real `sonde` binary on loopback with a temp
//! config and a file sink, and waits on conditions with deadlines.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub mod backends;
pub mod browser;
pub mod clickhouse;
pub mod http_server;

pub use serde_json::Value as Json;

/// Waits for `cond` to return `Some`, polling, or panics after `timeout`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut cond: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = cond() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until `pair` returns two equal values (and `ready` holds for
/// them), or panics after `timeout` showing both.
pub fn wait_eq<T: PartialEq + std::fmt::Debug>(
    what: &str,
    timeout: Duration,
    mut pair: impl FnMut() -> (T, T),
    ready: impl Fn(&T) -> bool,
) {
    let deadline = Instant::now() + timeout;
    loop {
        let (got, want) = pair();
        if got == want && ready(&want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}:\n got  {got:?}\n want {want:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A `[[receivers]]` table: StatsD over UDP on loopback `port`.
pub fn statsd_receiver(port: u16) -> String {
    format!("[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:{port}\"\n")
}

/// A free loopback port (UDP and TCP both free at the time of asking),
/// below the kernel's ephemeral range (32768 and up): a port the kernel
/// handed out would be free only until it gives it to an outgoing
/// connection, and a cluster's JVMs open many between the asking and
/// their bind. Each call of a test process takes the next port from a
/// start of its own, so two of its tests are never given the same one.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::OnceLock;
    const LOW: u32 = 10_000;
    const SPAN: u32 = 32_768 - LOW;
    static NEXT: OnceLock<AtomicU32> = OnceLock::new();
    let next = NEXT.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        AtomicU32::new(std::process::id().wrapping_mul(7_919).wrapping_add(nanos) % SPAN)
    });
    loop {
        let port = u16::try_from(LOW + next.fetch_add(1, Ordering::Relaxed) % SPAN).unwrap();
        if UdpSocket::bind(("127.0.0.1", port)).is_ok()
            && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
        {
            return port;
        }
    }
}

/// A loopback TCP port held, bound but not listening, until dropped: a
/// connection to it is refused, as to a backend that is down, and nothing
/// else takes it meanwhile. A test that starts its backend late would
/// otherwise lose the port to another test, or to the agent itself: a
/// client retrying a closed port in the ephemeral range connects to
/// itself when the kernel happens to pick that port as the source.
/// Both this socket and the backend's listener set SO_REUSEADDR, so the
/// backend binds the port while it is still held; drop it after.
pub struct PortHold {
    fd: libc::c_int,
    pub port: u16,
}

impl PortHold {
    pub fn new() -> PortHold {
        // SAFETY: plain socket calls on a descriptor this function owns;
        // the address structs are initialised before use.
        unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
            assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
            let one: libc::c_int = 1;
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_REUSEADDR,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
            let mut addr: libc::sockaddr_in = std::mem::zeroed();
            addr.sin_family = libc::AF_INET as libc::sa_family_t;
            addr.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
            let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            let rc = libc::bind(fd, (&addr as *const libc::sockaddr_in).cast(), len);
            assert_eq!(rc, 0, "bind: {}", std::io::Error::last_os_error());
            let mut len = len;
            libc::getsockname(fd, (&mut addr as *mut libc::sockaddr_in).cast(), &mut len);
            PortHold {
                fd,
                port: u16::from_be(addr.sin_port),
            }
        }
    }
}

impl Drop for PortHold {
    fn drop(&mut self) {
        // SAFETY: the descriptor is this struct's own.
        unsafe { libc::close(self.fd) };
    }
}

pub struct Agent {
    pub child: Child,
    pub dir: tempfile::TempDir,
    pub admin: u16,
    pub out: PathBuf,
    pub stderr_path: PathBuf,
    /// What runs the agent's command line (none: it runs itself).
    pub launcher: Vec<String>,
}

impl Agent {
    /// Starts sonde with `receivers_and_more` (TOML) plus an `[agent]`
    /// section and a file sink, and waits until `/health` answers.
    pub fn start(interval: &str, extra: &str) -> Agent {
        Agent::start_config(|admin, dir| {
            format!(
                "[agent]\ninterval = \"{interval}\"\nadmin_listen = \"127.0.0.1:{admin}\"\ndata_dir = \"{}\"\n\n{extra}\n\n[[sinks]]\ntype = \"file\"\npath = \"{}\"\n",
                dir.join("data").display(),
                dir.join("points.jsonl").display()
            )
        })
    }

    /// Starts sonde with the whole config `config(admin_port, dir)`
    /// writes (the dir is the agent's temp dir; put `data_dir` in it), and
    /// waits until `/health` answers. `points()` reads nothing unless the
    /// config has a file sink at `path("points.jsonl")`.
    pub fn start_config(config: impl FnOnce(u16, &Path) -> String) -> Agent {
        Agent::start_config_under(&[], config)
    }

    /// [`Agent::start_config`], the agent run by `launcher` (a command and
    /// its arguments, given the agent's command line after them), at every
    /// start.
    pub fn start_config_under(
        launcher: &[&str],
        config: impl FnOnce(u16, &Path) -> String,
    ) -> Agent {
        let mut agent = Agent::launch(launcher, config);
        agent.wait_healthy();
        agent
    }

    /// [`Agent::start_config`] for an admin site plain HTTP cannot ask
    /// (HTTPS): waits until `ready` holds instead.
    pub fn start_config_until(
        config: impl FnOnce(u16, &Path) -> String,
        mut ready: impl FnMut(&Agent) -> bool,
    ) -> Agent {
        let mut agent = Agent::launch(&[], config);
        wait_for("the agent to be ready", Duration::from_secs(20), || {
            if let Ok(Some(status)) = agent.child.try_wait() {
                panic!("sonde exited early with {status}: {}", agent.stderr());
            }
            ready(&agent).then_some(())
        });
        agent
    }

    /// Writes the config and starts the agent, without waiting.
    fn launch(launcher: &[&str], config: impl FnOnce(u16, &Path) -> String) -> Agent {
        let dir = tempfile::tempdir().unwrap();
        let admin = free_port();
        let out = dir.path().join("points.jsonl");
        let cfg_path = dir.path().join("sonde.toml");
        std::fs::write(&cfg_path, config(admin, dir.path())).unwrap();
        let stderr_path = dir.path().join("stderr.log");
        let launcher: Vec<String> = launcher.iter().map(|s| s.to_string()).collect();
        let child = Agent::spawn(&launcher, &cfg_path, &stderr_path);
        Agent {
            launcher,
            child,
            dir,
            admin,
            out,
            stderr_path,
        }
    }

    /// Kills the agent with SIGKILL and waits for it to be gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn spawn(launcher: &[String], cfg_path: &Path, stderr_path: &Path) -> Child {
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(stderr_path)
            .unwrap();
        let bin = env!("CARGO_BIN_EXE_sonde");
        let mut command = match launcher.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        command
            .args(["run", "--config"])
            .arg(cfg_path)
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap()
    }

    fn wait_healthy(&mut self) {
        wait_for("sonde /health", Duration::from_secs(20), || {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("sonde exited early with {status}: {}", self.stderr());
            }
            self.get("/health").filter(|b| b.starts_with("ok"))
        });
    }

    /// Stops the agent with SIGTERM and starts it again with the same
    /// config and directory (so the file sink appends and disk buffers
    /// are found again).
    pub fn restart(&mut self) {
        self.stop();
        self.start_again();
    }

    /// Starts a stopped agent again, as [`Agent::restart`] does.
    pub fn start_again(&mut self) {
        self.child = Agent::spawn(&self.launcher, &self.path("sonde.toml"), &self.stderr_path);
        self.wait_healthy();
    }

    /// [`Agent::start_again`] for an admin site plain HTTP on the port
    /// cannot ask: waits until `ready` holds instead.
    pub fn start_again_until(&mut self, mut ready: impl FnMut(&Agent) -> bool) {
        self.child = Agent::spawn(&self.launcher, &self.path("sonde.toml"), &self.stderr_path);
        wait_for("the agent to be ready", Duration::from_secs(20), || {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("sonde exited early with {status}: {}", self.stderr());
            }
            ready(self).then_some(())
        });
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// GET from the admin listener; `None` until it answers 200.
    pub fn get(&self, path: &str) -> Option<String> {
        http_get(self.admin, path)
    }

    /// The value of one line of the admin `/metrics` (exact series text).
    pub fn metric(&self, series: &str) -> Option<f64> {
        let text = self.get("/metrics")?;
        text.lines()
            .find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')))
            .and_then(|v| v.trim().parse().ok())
    }

    /// Every point the file sink has written so far.
    pub fn points(&self) -> Vec<Json> {
        read_points(&self.out)
    }

    /// Sends SIGTERM and waits for a clean exit.
    pub fn stop(&mut self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let code = wait_for("sonde to exit", Duration::from_secs(20), || {
            self.child.try_wait().unwrap()
        });
        assert!(
            code.success(),
            "sonde exited with {code}: {}",
            self.stderr()
        );
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn http_get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok()?;
    let (head, body) = resp.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.0 200")
        .then(|| body.to_string())
        .or_else(|| head.starts_with("HTTP/1.1 200").then(|| body.to_string()))
}

pub fn read_points(path: &Path) -> Vec<Json> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    // Whole lines only: the sink may be writing the last one.
    text.split_inclusive('\n')
        .filter(|l| l.ends_with('\n') && l.len() > 1)
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}")))
        .collect()
}

/// Points named `name`, as (tags, value, timestamp).
pub fn named(points: &[Json], name: &str) -> Vec<(Json, f64, i64)> {
    points
        .iter()
        .filter(|p| p["name"] == name)
        .map(|p| {
            (
                p["tags"].clone(),
                p["value"].as_f64().unwrap(),
                p["timestamp"].as_i64().unwrap(),
            )
        })
        .collect()
}

/// A msgpack `emit` message with all-string fields.
pub fn msgpack_message(ty: &str, name: &str, value: &str, tags: &str, ts: &str) -> Vec<u8> {
    let mut out = Vec::new();
    rmp::encode::write_array_len(&mut out, 6).unwrap();
    for f in ["emit", ty, name, value, tags, ts] {
        rmp::encode::write_str(&mut out, f).unwrap();
    }
    out
}

/// A bunch (array16) of pre-encoded messages.
pub fn msgpack_bunch(messages: &[Vec<u8>]) -> Vec<u8> {
    let mut out = vec![0xdc];
    out.extend_from_slice(&(messages.len() as u16).to_be_bytes());
    for m in messages {
        out.extend_from_slice(m);
    }
    out
}

pub fn udp_send(port: u16, data: &[u8]) {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.send_to(data, ("127.0.0.1", port)).unwrap();
}

/// Runs `sonde` with arguments and returns (success, stdout, stderr).
pub fn sonde(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sonde"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

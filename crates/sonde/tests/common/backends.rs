//! Real backends on loopback, for the sinks' integration tests: Prometheus
//! (remote-write receiver), InfluxDB 1.x, carbon-cache, the OpenTelemetry
//! Collector and a Kafka broker.
//!
//! Each server runs from its Debian package's binary (the collector, not
//! packaged, from the one `scripts/build-otelcol.sh` builds; Kafka from the
//! jars `scripts/install-kafka.sh` installs, through
//! `scripts/kafka-broker.sh`) with a config written
//! into its own temp dir (data, WAL, log, pid file all live there), listens
//! only on 127.0.0.1 ports picked by [`free_port`], and is started by
//! polling a readiness condition with a deadline (`/-/ready`, `/ping`, a TCP
//! connect), never by sleeping.
//!
//! # Lifecycle
//!
//! `start()` spawns and waits until ready. `stop()` sends SIGTERM and waits
//! for the exit (data is kept in the temp dir); `restart()` starts the same
//! command again on the same ports and data dir, so an outage test can take
//! a backend away and bring it back with its data. Dropping the handle
//! kills the process (SIGKILL) and removes the temp dir, also when the test
//! panics.
//!
//! # Missing binaries
//!
//! `start()` returns [`Unavailable`] when the binary is not installed; pass
//! the result through [`or_skip`], which fails the test when
//! `SONDE_REQUIRE_BACKENDS=1` (CI sets it) and otherwise prints why the test
//! is skipped. Any other failure to start (crash, deadline) panics with the
//! tail of the server's log.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, Once};
use std::time::Duration;

use serde_json::Value as Json;

use super::{free_port, wait_for};

/// How long a server may take to become ready (Prometheus replays its WAL
/// on restart; carbon is a Python program). Measured starts are well under
/// 2 s, so this only bounds a hang.
const START_DEADLINE: Duration = Duration::from_secs(30);
/// How long a server may take to exit after SIGTERM.
const STOP_DEADLINE: Duration = Duration::from_secs(30);

/// A backend binary is not installed on this machine.
#[derive(Debug)]
pub struct Unavailable {
    /// The server, e.g. "Prometheus".
    pub server: &'static str,
    /// The binaries looked for.
    pub looked_for: Vec<PathBuf>,
    /// How to get it, e.g. "install the Debian package ...".
    pub remedy: String,
}

impl Unavailable {
    /// A binary from the Debian package `package` is missing.
    fn debian(server: &'static str, looked_for: Vec<PathBuf>, package: &str) -> Unavailable {
        Unavailable {
            server,
            looked_for,
            remedy: format!(
                "install the Debian package `{package}` \
                 (apt-get install --no-install-recommends {package})"
            ),
        }
    }
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let paths: Vec<String> = self
            .looked_for
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        write!(
            f,
            "{} is not installed (looked for {}); {}",
            self.server,
            paths.join(", "),
            self.remedy
        )
    }
}

/// Unwraps a started backend, or decides what a missing one means: with
/// `SONDE_REQUIRE_BACKENDS=1` the test fails; otherwise it prints the reason
/// and returns `None`, and the test returns early (skips).
pub fn or_skip<T>(started: Result<T, Unavailable>) -> Option<T> {
    match started {
        Ok(server) => Some(server),
        Err(missing) if std::env::var("SONDE_REQUIRE_BACKENDS").as_deref() == Ok("1") => {
            panic!("SONDE_REQUIRE_BACKENDS=1 but {missing}")
        }
        Err(missing) => {
            eprintln!("SKIPPED: {missing}");
            None
        }
    }
}

/// Finds `name` as an absolute path in `preferred`, else on `PATH`.
pub fn find_binary(
    server: &'static str,
    package: &'static str,
    preferred: &str,
    name: &str,
) -> Result<PathBuf, Unavailable> {
    let mut looked_for = vec![PathBuf::from(preferred)];
    if Path::new(preferred).is_file() {
        return Ok(preferred.into());
    }
    for dir in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
        let candidate = dir.join(name);
        if candidate.is_file() {
            return Ok(candidate);
        }
        looked_for.push(candidate);
    }
    looked_for.truncate(1);
    looked_for.push(PathBuf::from(format!("{name} on PATH")));
    Err(Unavailable::debian(server, looked_for, package))
}

/// A plain-HTTP client for loopback: no proxy from the environment (a CI
/// `HTTP_PROXY` must not capture 127.0.0.1), every status returned as a
/// response rather than an error, and a timeout so a hung server fails the
/// test instead of hanging it.
pub fn http() -> ureq::Agent {
    ureq::Agent::config_builder()
        .proxy(None)
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into()
}

/// GET `url` with query parameters; `(status, body)`, or `None` when the
/// connection failed.
fn get(url: &str, query: &[(&str, &str)]) -> Option<(u16, String)> {
    let mut req = http().get(url);
    for (k, v) in query {
        req = req.query(*k, *v);
    }
    let mut resp = req.call().ok()?;
    let status = resp.status().as_u16();
    Some((status, resp.body_mut().read_to_string().unwrap_or_default()))
}

/// One server process: the command that starts it, its temp dir and log.
/// Shared by the backends.
struct Process {
    name: &'static str,
    program: PathBuf,
    args: Vec<String>,
    /// Environment variables set for the program (and its setup steps).
    env: Vec<(&'static str, std::ffi::OsString)>,
    dir: tempfile::TempDir,
    log: PathBuf,
    child: Option<Child>,
    /// Exit statuses that count as a clean stop after SIGTERM.
    clean_exit: fn(ExitStatus) -> bool,
    /// How long a start may take.
    start_deadline: Duration,
}

/// The servers running now, by pid, with their temp dirs. A server held in
/// a static (one broker shared by the tests of a file) is never dropped,
/// so the test binary kills these when it exits ([`kill_live`]).
static LIVE: Mutex<Vec<(u32, PathBuf)>> = Mutex::new(Vec::new());

/// Registered with `atexit` at the first spawn: SIGKILLs every server
/// still running, reaps it and removes its temp dir.
extern "C" fn kill_live() {
    let Ok(live) = LIVE.lock() else { return };
    for (pid, dir) in live.iter() {
        let Ok(pid) = libc::pid_t::try_from(*pid) else {
            continue;
        };
        // SAFETY: kill(2) and waitpid(2) on a child that is registered
        // until it is reaped, so the pid cannot have been reused.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn register(child: &Child, dir: &Path) {
    static AT_EXIT: Once = Once::new();
    AT_EXIT.call_once(|| {
        // SAFETY: registers a function without arguments that only takes a
        // lock, sends signals and removes files.
        unsafe {
            libc::atexit(kill_live);
        }
    });
    if let Ok(mut live) = LIVE.lock() {
        live.push((child.id(), dir.to_path_buf()));
    }
}

/// Takes a child out of [`LIVE`], before it is reaped.
fn unregister(child: &Child) {
    if let Ok(mut live) = LIVE.lock() {
        live.retain(|(pid, _)| *pid != child.id());
    }
}

impl Process {
    fn new(name: &'static str, program: PathBuf, dir: tempfile::TempDir) -> Process {
        let log = dir.path().join(format!("{}.log", name.to_lowercase()));
        Process {
            name,
            program,
            args: Vec::new(),
            env: Vec::new(),
            dir,
            log,
            child: None,
            clean_exit: |s| s.success(),
            start_deadline: START_DEADLINE,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Spawns the server (log appended, so a restart keeps the earlier run's
    /// lines) and polls `ready` until it returns true or the deadline passes.
    fn spawn_and_wait(&mut self, ready: impl FnMut() -> bool) {
        self.spawn();
        self.wait_ready(std::time::Instant::now(), ready);
    }

    /// Spawns the server (log appended) without waiting for it.
    fn spawn(&mut self) {
        assert!(self.child.is_none(), "{} is already running", self.name);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new(&self.program)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {}: {e}", self.program.display()));
        register(&child, self.dir.path());
        self.child = Some(child);
    }

    /// Polls `ready` until it returns true or [`START_DEADLINE`] after
    /// `started` passes; panics with the log tail if the server exits.
    fn wait_ready(&mut self, started: std::time::Instant, mut ready: impl FnMut() -> bool) {
        let deadline = started + self.start_deadline;
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                if let Some(c) = self.child.take() {
                    unregister(&c);
                }
                panic!(
                    "{} exited during start with {status}; log tail:\n{}",
                    self.name,
                    self.log_tail(40)
                );
            }
            if ready() {
                // Shown with a failing test's output: how long starts take.
                eprintln!(
                    "{} ready in {:?} ({})",
                    self.name,
                    started.elapsed(),
                    self.dir.path().display()
                );
                return;
            }
            if std::time::Instant::now() > deadline {
                self.kill();
                panic!(
                    "{} not ready after {:?}; log tail:\n{}",
                    self.name,
                    self.start_deadline,
                    self.log_tail(40)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Runs the program with `args` (a setup step such as formatting the
    /// data dir) to its exit, its output appended to the log; panics with
    /// the log tail unless it exits 0.
    fn run_to_completion(&self, args: &[String]) {
        let started = std::time::Instant::now();
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let status = Command::new(&self.program)
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .status()
            .unwrap_or_else(|e| panic!("running {}: {e}", self.program.display()));
        // Shown with a failing test's output, like the ready time.
        eprintln!("{} setup done in {:?}", self.name, started.elapsed());
        assert!(
            status.success(),
            "{} setup ({}) exited with {status}; log tail:\n{}",
            self.name,
            args.join(" "),
            self.log_tail(40)
        );
    }

    /// The last `n` lines of the server's log.
    fn log_tail(&self, n: usize) -> String {
        let Ok(file) = File::open(&self.log) else {
            return String::from("(no log)");
        };
        let lines: Vec<String> = BufReader::new(file).lines().map_while(Result::ok).collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// SIGTERM, then wait for the exit; panics (with the log tail) if the
    /// server does not exit in time or exits unclean.
    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            panic!("{} is not running", self.name);
        };
        unregister(&child);
        let pid = libc::pid_t::try_from(child.id()).unwrap();
        // SAFETY: kill(2) with a pid we spawned and have not yet reaped, so
        // the pid cannot have been reused.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        let status = wait_for(
            &format!("{} to exit after SIGTERM", self.name),
            STOP_DEADLINE,
            || child.try_wait().unwrap(),
        );
        assert!(
            (self.clean_exit)(status),
            "{} exited with {status} after SIGTERM; log tail:\n{}",
            self.name,
            self.log_tail(40)
        );
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            unregister(&child);
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // Before the TempDir field is dropped: the server must not be
        // writing into the directory being removed.
        self.kill();
    }
}

/// Labels of one series, `__name__` included.
pub type Labels = BTreeMap<String, String>;

/// Prometheus with the remote-write receiver enabled and no scrape jobs.
pub struct Prometheus {
    proc: Process,
    port: u16,
}

impl Prometheus {
    /// Starts `prometheus` on a free loopback port with its TSDB in a temp
    /// dir, and waits until `/-/ready` answers 200.
    ///
    /// # Errors
    ///
    /// [`Unavailable`] when the binary (Debian package `prometheus`) is not
    /// installed. Panics with the log tail if it does not become ready.
    pub fn start() -> Result<Prometheus, Unavailable> {
        let program = find_binary(
            "Prometheus",
            "prometheus",
            "/usr/bin/prometheus",
            "prometheus",
        )?;
        let dir = tempfile::Builder::new()
            .prefix("sonde-prometheus-")
            .tempdir()
            .unwrap();
        let config = dir.path().join("prometheus.yml");
        // No scrape_configs, no alerting, no remote_write: the only traffic
        // is what the test sends and the queries it makes.
        std::fs::write(&config, "global:\n  scrape_interval: 1m\n").unwrap();
        let port = free_port();
        let mut proc = Process::new("Prometheus", program, dir);
        proc.args = vec![
            format!("--config.file={}", config.display()),
            format!("--web.listen-address=127.0.0.1:{port}"),
            format!("--storage.tsdb.path={}", proc.path("data").display()),
            "--web.enable-remote-write-receiver".into(),
            "--log.level=info".into(),
        ];
        let mut prom = Prometheus { proc, port };
        prom.spawn();
        Ok(prom)
    }

    fn spawn(&mut self) {
        let url = format!("{}/-/ready", self.url());
        self.proc
            .spawn_and_wait(|| matches!(get(&url, &[]), Some((200, _))));
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The remote-write endpoint, `http://127.0.0.1:PORT/api/v1/write`.
    pub fn write_url(&self) -> String {
        format!("{}/api/v1/write", self.url())
    }

    /// The temp dir holding config, TSDB and log.
    pub fn dir(&self) -> &Path {
        self.proc.dir.path()
    }

    /// Everything the server has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.proc.log).unwrap_or_default()
    }

    /// `GET /api/v1/query`; panics on a transport error or a non-success
    /// status and returns the `data` object.
    fn api_query(&self, promql: &str, at_unix_secs: f64) -> Json {
        let at = at_unix_secs.to_string();
        let (status, body) = get(
            &format!("{}/api/v1/query", self.url()),
            &[("query", promql), ("time", &at)],
        )
        .unwrap_or_else(|| panic!("Prometheus query {promql:?}: connection failed"));
        let json: Json = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("Prometheus query {promql:?}: {e}: {body}"));
        assert!(
            status == 200 && json["status"] == "success",
            "Prometheus query {promql:?} answered {status}: {body}"
        );
        json["data"].clone()
    }

    /// An instant query at `at_unix_secs`: each series' labels and value.
    /// A series whose last sample is more than 5 minutes (the lookback)
    /// before `at` is absent.
    pub fn query(&self, promql: &str, at_unix_secs: f64) -> Vec<(Labels, f64)> {
        let data = self.api_query(promql, at_unix_secs);
        match data["resultType"].as_str() {
            Some("vector") => data["result"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| (labels(&s["metric"]), sample(&s["value"]).1))
                .collect(),
            Some("scalar") => vec![(Labels::new(), sample(&data["result"]).1)],
            other => panic!("query {promql:?}: result type {other:?}, want a vector"),
        }
    }

    /// Every raw sample of the series matching `selector` (e.g.
    /// `web_requests{host="a"}`) in the `range_secs` seconds up to
    /// `at_unix_secs`, as (labels, [(timestamp ms, value)]) sorted by
    /// labels. Raw, not resampled: a window sent twice shows up twice, a
    /// missing one is missing.
    pub fn samples(
        &self,
        selector: &str,
        range_secs: u64,
        at_unix_secs: f64,
    ) -> Vec<(Labels, Vec<(i64, f64)>)> {
        let data = self.api_query(&format!("{selector}[{range_secs}s]"), at_unix_secs);
        assert_eq!(data["resultType"], "matrix", "{data}");
        let mut out: Vec<(Labels, Vec<(i64, f64)>)> = data["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let points = s["values"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| {
                        let (t, x) = sample(v);
                        ((t * 1000.0).round() as i64, x)
                    })
                    .collect();
                (labels(&s["metric"]), points)
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// SIGTERM and wait for a clean exit; the TSDB stays in the temp dir.
    pub fn stop(&mut self) {
        self.proc.stop();
    }

    /// Starts again on the same port and data dir and waits until ready.
    pub fn restart(&mut self) {
        self.spawn();
    }
}

fn labels(metric: &Json) -> Labels {
    metric
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .collect()
}

/// `[unix secs, "value"]` as the query API writes a sample.
fn sample(v: &Json) -> (f64, f64) {
    let t = v[0].as_f64().unwrap();
    let x = match v[1].as_str().unwrap() {
        "NaN" => f64::NAN,
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        s => s.parse().unwrap(),
    };
    (t, x)
}

/// InfluxDB 1.x with only its HTTP API, on loopback.
pub struct Influx {
    proc: Process,
    port: u16,
}

impl Influx {
    /// Starts `influxd` with a generated config (everything under a temp
    /// dir, HTTP and the RPC bind address on loopback ports, every other
    /// listener and the `_internal` monitor store off) and waits until
    /// `/ping` answers 204.
    ///
    /// # Errors
    ///
    /// [`Unavailable`] when the binary (Debian package `influxdb`) is not
    /// installed. Panics with the log tail if it does not become ready.
    pub fn start() -> Result<Influx, Unavailable> {
        let program = find_binary("InfluxDB", "influxdb", "/usr/bin/influxd", "influxd")?;
        let dir = tempfile::Builder::new()
            .prefix("sonde-influxdb-")
            .tempdir()
            .unwrap();
        let port = free_port();
        let rpc_port = free_port();
        let d = dir.path().display();
        // The top-level bind-address is the RPC service for backup/restore;
        // its default (":8088") listens on every interface.
        let config = format!(
            r#"reporting-disabled = true
bind-address = "127.0.0.1:{rpc_port}"

[meta]
  dir = "{d}/meta"

[data]
  dir = "{d}/data"
  wal-dir = "{d}/wal"
  query-log-enabled = false

[monitor]
  store-enabled = false

[subscriber]
  enabled = false

[continuous_queries]
  enabled = false

[http]
  enabled = true
  bind-address = "127.0.0.1:{port}"
  log-enabled = false
  pprof-enabled = false

[ifql]
  enabled = false

[logging]
  level = "info"
  suppress-logo = true

[[graphite]]
  enabled = false

[[collectd]]
  enabled = false

[[opentsdb]]
  enabled = false

[[udp]]
  enabled = false
"#
        );
        let config_path = dir.path().join("influxdb.conf");
        std::fs::write(&config_path, config).unwrap();
        let mut proc = Process::new("InfluxDB", program, dir);
        proc.args = vec![
            "run".into(),
            "-config".into(),
            config_path.display().to_string(),
        ];
        let mut influx = Influx { proc, port };
        influx.spawn();
        Ok(influx)
    }

    fn spawn(&mut self) {
        let url = format!("{}/ping", self.url());
        self.proc
            .spawn_and_wait(|| matches!(get(&url, &[]), Some((204, _))));
    }

    /// `http://127.0.0.1:PORT`, the value of a sink's `url`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The temp dir holding config, data, WAL and log.
    pub fn dir(&self) -> &Path {
        self.proc.dir.path()
    }

    /// Everything the server has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.proc.log).unwrap_or_default()
    }

    /// `CREATE DATABASE name` (a no-op if it exists).
    pub fn create_db(&self, name: &str) {
        let q = format!("CREATE DATABASE \"{name}\"");
        let mut resp = http()
            .post(format!("{}/query", self.url()))
            .send_form([("q", q.as_str())])
            .unwrap();
        let status = resp.status().as_u16();
        let body = resp.body_mut().read_to_string().unwrap();
        assert!(
            status == 200 && !body.contains("\"error\""),
            "{q}: {status} {body}"
        );
    }

    /// Runs InfluxQL against `db` (`GET /query`, times as epoch seconds)
    /// and returns the whole JSON answer; panics on an HTTP or statement
    /// error.
    pub fn query(&self, db: &str, influxql: &str) -> Json {
        let (status, body) = get(
            &format!("{}/query", self.url()),
            &[("db", db), ("q", influxql), ("epoch", "s")],
        )
        .unwrap_or_else(|| panic!("InfluxDB query {influxql:?}: connection failed"));
        let json: Json = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("InfluxDB query {influxql:?}: {e}: {body}"));
        assert!(
            status == 200 && json["results"][0].get("error").is_none(),
            "InfluxDB query {influxql:?} answered {status}: {body}"
        );
        json
    }

    /// Every point of `measurement` in `db`, as (unix secs, tags, field
    /// `value`), sorted by time then tags; empty if the measurement does not
    /// exist (yet).
    pub fn series_values(&self, db: &str, measurement: &str) -> Vec<(i64, Labels, f64)> {
        let q = format!(
            "SELECT \"value\" FROM \"{}\" GROUP BY *",
            measurement.replace('"', "\\\"")
        );
        let json = self.query(db, &q);
        let mut out = Vec::new();
        for series in json["results"][0]["series"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let tags: Labels = series["tags"]
                .as_object()
                .map(|t| {
                    t.iter()
                        .filter(|(_, v)| v.as_str() != Some(""))
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                        .collect()
                })
                .unwrap_or_default();
            let cols = series["columns"].as_array().unwrap();
            let vi = cols.iter().position(|c| c == "value").unwrap();
            for row in series["values"].as_array().unwrap() {
                out.push((
                    row[0].as_i64().unwrap(),
                    tags.clone(),
                    row[vi].as_f64().unwrap(),
                ));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
        out
    }

    /// SIGTERM and wait for a clean exit; the data stays in the temp dir.
    pub fn stop(&mut self) {
        self.proc.stop();
    }

    /// Starts again on the same ports and data dir and waits until ready.
    pub fn restart(&mut self) {
        self.spawn();
    }
}

/// The interpreter Debian's `graphite-carbon` and `python3-whisper` install
/// into (a `python3` earlier on PATH, e.g. pyenv's, does not see them).
const DEBIAN_PYTHON: &str = "/usr/bin/python3";

/// Reads one metric's datapoints back from its whisper file, finding the
/// file exactly as carbon does: `TaggedSeries.parse(...).path` normalises a
/// tagged name (tags sorted by key), `TaggedSeries.encode(..., hash_only)`
/// maps it to a path (`_tagged/<sha256[0:3]>/<sha256[3:6]>/<sha256>.wsp`
/// for tagged series, dots to directories otherwise). Using carbon's own
/// functions keeps this in step with the installed version.
const WHISPER_READ_PY: &str = r#"
import json, os, sys
from carbon.util import TaggedSeries
import whisper

data_dir, metric, start, until = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
try:
    metric = TaggedSeries.parse(metric).path
except Exception as err:
    # carbon logs the same error and stores the name as it came
    pass
path = os.path.join(data_dir, TaggedSeries.encode(metric, os.sep, hash_only=True) + ".wsp")
points = None
if os.path.exists(path):
    (first, _end, step), values = whisper.fetch(path, start, until)
    points = [[first + i * step, v] for i, v in enumerate(values) if v is not None]
print(json.dumps({"normalized": metric, "path": path, "points": points}))
"#;

/// carbon-cache (Graphite) with its plaintext line receiver on loopback and
/// whisper files under a temp dir.
///
/// # Tags
///
/// carbon 1.1 parses `name;k=v;...` itself: the name is normalised (tags
/// sorted by key) and stored at `_tagged/<h[0:3]>/<h[3:6]>/<h>.wsp`, `h` the
/// sha256 of the normalised name. With `ENABLE_TAGS` (the default) it also
/// POSTs each new series to graphite-web's `/tags/tagMultiSeries`; there is
/// no graphite-web here, so the config turns that off. The whisper file is
/// written either way, and [`Carbon::datapoints`] reads it by the tagged
/// name.
pub struct Carbon {
    proc: Process,
    line_port: u16,
}

impl Carbon {
    /// Starts `carbon-cache --nodaemon` with a generated `carbon.conf` and a
    /// `storage-schemas.conf` (`pattern = .*`, `retentions = 10s:1d`) and
    /// waits until the line receiver accepts a TCP connection.
    ///
    /// # Errors
    ///
    /// [`Unavailable`] when `carbon-cache` (Debian package
    /// `graphite-carbon`) or the whisper module for `/usr/bin/python3`
    /// (`python3-whisper`, a dependency of it) is missing.
    pub fn start() -> Result<Carbon, Unavailable> {
        let program = find_binary(
            "carbon-cache",
            "graphite-carbon",
            "/usr/bin/carbon-cache",
            "carbon-cache",
        )?;
        let has_whisper = Command::new(DEBIAN_PYTHON)
            .args(["-c", "import whisper, carbon.util"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !has_whisper {
            return Err(Unavailable::debian(
                "the whisper module for carbon",
                vec![PathBuf::from(DEBIAN_PYTHON)],
                "python3-whisper",
            ));
        }
        let dir = tempfile::Builder::new()
            .prefix("sonde-carbon-")
            .tempdir()
            .unwrap();
        let d = dir.path().display();
        let line_port = free_port();
        for sub in ["conf", "storage/whisper", "storage/lists", "log"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        // Pickle and UDP receivers: port 0 means "not started". The cache
        // query port cannot be turned off; 0 makes it a kernel-chosen
        // loopback port. Rate limits are off so a test's new series are
        // created at once; autoflush so a read sees what was written.
        let config = format!(
            "[cache]
STORAGE_DIR = {d}/storage/
LOCAL_DATA_DIR = {d}/storage/whisper/
WHITELISTS_DIR = {d}/storage/lists/
CONF_DIR = {d}/conf/
LOG_DIR = {d}/log/
PID_DIR = {d}/
DATABASE = whisper
ENABLE_LOGROTATION = False
MAX_CACHE_SIZE = inf
MAX_UPDATES_PER_SECOND = inf
MAX_CREATES_PER_MINUTE = inf
LINE_RECEIVER_INTERFACE = 127.0.0.1
LINE_RECEIVER_PORT = {line_port}
ENABLE_UDP_LISTENER = False
UDP_RECEIVER_INTERFACE = 127.0.0.1
UDP_RECEIVER_PORT = 0
PICKLE_RECEIVER_INTERFACE = 127.0.0.1
PICKLE_RECEIVER_PORT = 0
CACHE_QUERY_INTERFACE = 127.0.0.1
CACHE_QUERY_PORT = 0
LOG_LISTENER_CONN_SUCCESS = False
LOG_UPDATES = False
LOG_CREATES = True
ENABLE_TAGS = False
TAG_HASH_FILENAMES = True
WHISPER_AUTOFLUSH = True
WHISPER_FALLOCATE_CREATE = False
"
        );
        std::fs::write(dir.path().join("conf/carbon.conf"), config).unwrap();
        std::fs::write(
            dir.path().join("conf/storage-schemas.conf"),
            "[all]\npattern = .*\nretentions = 10s:1d\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("whisper_read.py"), WHISPER_READ_PY).unwrap();
        let mut proc = Process::new("carbon-cache", program, dir);
        proc.args = vec![
            format!("--config={}", proc.path("conf/carbon.conf").display()),
            format!("--pidfile={}", proc.path("carbon-cache.pid").display()),
            "--nodaemon".into(),
            "--logfile=-".into(),
            "start".into(),
        ];
        // twistd re-raises SIGTERM after its clean shutdown (it logs
        // "Server Shut Down." first), so death by SIGTERM is a clean stop.
        proc.clean_exit = |s| {
            use std::os::unix::process::ExitStatusExt;
            s.success() || s.signal() == Some(libc::SIGTERM)
        };
        let mut carbon = Carbon { proc, line_port };
        carbon.spawn();
        Ok(carbon)
    }

    fn spawn(&mut self) {
        let port = self.line_port;
        self.proc
            .spawn_and_wait(|| TcpStream::connect(("127.0.0.1", port)).is_ok());
    }

    /// `127.0.0.1:PORT` of the plaintext line receiver, the value of a
    /// graphite sink's `address`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.line_port)
    }

    /// The temp dir holding config, whisper files and log.
    pub fn dir(&self) -> &Path {
        self.proc.dir.path()
    }

    /// Everything the server has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.proc.log).unwrap_or_default()
    }

    /// Sends plaintext lines (`path value ts\n`) on one TCP connection.
    pub fn send_lines(&self, lines: &str) {
        use std::io::Write;
        let mut s = TcpStream::connect(("127.0.0.1", self.line_port)).unwrap();
        s.write_all(lines.as_bytes()).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
    }

    /// Runs the whisper reader for `metric` (plain or `name;k=v` tagged).
    fn read(&self, metric: &str, from: i64, until: i64) -> Json {
        let out = Command::new(DEBIAN_PYTHON)
            .arg(self.proc.path("whisper_read.py"))
            .arg(self.proc.path("storage/whisper"))
            .arg(metric)
            .arg(from.to_string())
            .arg(until.to_string())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "reading whisper for {metric:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Where carbon stores `metric` (it may not exist yet).
    pub fn whisper_path(&self, metric: &str) -> PathBuf {
        let now = unix_now();
        PathBuf::from(self.read(metric, now - 60, now)["path"].as_str().unwrap())
    }

    /// The non-empty datapoints of `metric` between `from` and `until` (unix
    /// secs; whisper clips `until` to now), as (slot time, value), slots
    /// 10 s apart. Empty until carbon has created the file: carbon's writer
    /// flushes its cache about once a second, so poll with [`wait_for`].
    pub fn datapoints(&self, metric: &str, from: i64, until: i64) -> Vec<(i64, f64)> {
        let json = self.read(metric, from, until);
        json["points"]
            .as_array()
            .map(|pts| {
                pts.iter()
                    .map(|p| (p[0].as_i64().unwrap(), p[1].as_f64().unwrap()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// SIGTERM and wait: carbon writes its cache out before it exits, and
    /// the whisper files stay in the temp dir.
    pub fn stop(&mut self) {
        self.proc.stop();
    }

    /// Starts again on the same port and data dir and waits until ready.
    pub fn restart(&mut self) {
        // A pid file left by a killed run would make twistd refuse to start.
        let _ = std::fs::remove_file(self.proc.path("carbon-cache.pid"));
        self.spawn();
    }
}

/// Where `scripts/build-otelcol.sh` puts the collector by default.
const OTELCOL_DEFAULT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../target/otelcol/dist/otelcol-sonde-test"
);

/// The kind of an OTLP metric, as the debug exporter names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OtelKind {
    Gauge,
    Sum,
}

/// One number data point as the collector received it, read back from the
/// debug exporter's `detailed` output.
#[derive(Clone, Debug, PartialEq)]
pub struct OtelPoint {
    /// The `Metric`'s name.
    pub name: String,
    pub kind: OtelKind,
    /// A `Sum`'s `IsMonotonic` (false for a `Gauge`).
    pub monotonic: bool,
    /// A `Sum`'s `AggregationTemporality` (`"Cumulative"`, `"Delta"`);
    /// empty for a `Gauge`.
    pub temporality: String,
    /// The data point's attributes; string values as they are, other
    /// types as the exporter prints them (`Int(3)`).
    pub attributes: Labels,
    /// `Timestamp` in whole seconds since the epoch.
    pub unix_secs: i64,
    /// `Value`. The exporter prints doubles with six decimals (Go's `%f`),
    /// so compare `format!("{:.6}")` of both sides.
    pub value: f64,
}

/// The OpenTelemetry Collector built by `scripts/build-otelcol.sh`
/// (tools/otelcol/builder.yaml): the OTLP receiver, HTTP only, on a loopback
/// port, and the debug exporter at `verbosity: detailed`, which prints
/// every data point and log record into the log that
/// [`OtelCollector::points`] and [`OtelCollector::logs`] parse.
pub struct OtelCollector {
    proc: Process,
    port: u16,
}

impl OtelCollector {
    /// Starts the collector (`$SONDE_OTELCOL`, else
    /// `target/otelcol/dist/otelcol-sonde-test`) with a generated config and
    /// waits until its log says "Everything is ready" and the HTTP port
    /// accepts a connection.
    ///
    /// The config opens no other port: no gRPC protocol, and
    /// `service.telemetry.metrics.level: none` turns off the internal
    /// metrics endpoint (:8888 by default). Log sampling is off, so the
    /// debug exporter's output is complete however many requests arrive.
    ///
    /// # Errors
    ///
    /// [`Unavailable`] when the binary is not there; it names the script
    /// that builds it.
    pub fn start() -> Result<OtelCollector, Unavailable> {
        Self::launch(None)
    }

    /// [`OtelCollector::start`] with profiles too: the
    /// `service.profilesSupport` feature gate on, and a profiles pipeline
    /// from the OTLP receiver to the debug exporter and to an OTLP/HTTP
    /// exporter that forwards every request to
    /// `http://127.0.0.1:{forward_port}/v1development/profiles` (the debug
    /// exporter does not print stacks).
    pub fn start_with_profiles(forward_port: u16) -> Result<OtelCollector, Unavailable> {
        Self::launch(Some(forward_port))
    }

    fn launch(profiles: Option<u16>) -> Result<OtelCollector, Unavailable> {
        let program = match std::env::var_os("SONDE_OTELCOL") {
            Some(p) => PathBuf::from(p),
            None => PathBuf::from(OTELCOL_DEFAULT),
        };
        if !program.is_file() {
            return Err(Unavailable {
                server: "the OpenTelemetry Collector",
                looked_for: vec![program],
                remedy: "build it with scripts/build-otelcol.sh (Go and the Go module \
                         proxy needed) and set SONDE_OTELCOL to the path it prints, \
                         or leave SONDE_OTELCOL unset for its default output"
                    .into(),
            });
        }
        let dir = tempfile::Builder::new()
            .prefix("sonde-otelcol-")
            .tempdir()
            .unwrap();
        let port = free_port();
        let (forward, pipeline) = match profiles {
            None => (String::new(), ""),
            Some(to) => (
                format!(
                    "  otlphttp:\n    endpoint: http://127.0.0.1:{to}\n    retry_on_failure:\n      enabled: false\n"
                ),
                "    profiles:\n      receivers: [otlp]\n      exporters: [debug, otlphttp]\n",
            ),
        };
        let config = format!(
            r#"receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{port}
exporters:
  debug:
    verbosity: detailed
    sampling_initial: 1000000
    sampling_thereafter: 1
{forward}service:
  telemetry:
    metrics:
      level: none
    logs:
      level: info
      encoding: console
      sampling:
        enabled: false
  pipelines:
    metrics:
      receivers: [otlp]
      exporters: [debug]
    logs:
      receivers: [otlp]
      exporters: [debug]
{pipeline}"#
        );
        let config_path = dir.path().join("otelcol.yaml");
        std::fs::write(&config_path, config).unwrap();
        let mut proc = Process::new("otelcol", program, dir);
        proc.args = vec![format!("--config=file:{}", config_path.display())];
        if profiles.is_some() {
            proc.args
                .push("--feature-gates=service.profilesSupport".into());
        }
        let mut col = OtelCollector { proc, port };
        col.spawn();
        Ok(col)
    }

    fn spawn(&mut self) {
        let port = self.port;
        let log = self.proc.log.clone();
        // The log is appended across restarts: wait for this run's line.
        let ready_lines = || {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .matches("Everything is ready")
                .count()
        };
        let before = ready_lines();
        self.proc.spawn_and_wait(|| {
            ready_lines() > before && TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
    }

    /// The OTLP/HTTP metrics endpoint, `http://127.0.0.1:PORT/v1/metrics`,
    /// the value of an `otlp_http` sink's `url`.
    pub fn metrics_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1/metrics", self.port)
    }

    /// Every log record received so far, in arrival order.
    pub fn logs(&self) -> Vec<OtelLog> {
        parse_debug_logs(&self.log())
    }

    /// The temp dir holding config and log.
    pub fn dir(&self) -> &Path {
        self.proc.dir.path()
    }

    /// Everything the collector has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.proc.log).unwrap_or_default()
    }

    /// The TCP addresses the collector process listens on, as
    /// `IP:PORT` (IPv4 loopback shown as `127.0.0.1`), from its socket fds
    /// and /proc/net/tcp{,6}.
    pub fn listening(&self) -> Vec<String> {
        let pid = self.proc.child.as_ref().expect("collector running").id();
        super::clickhouse::listening(pid)
    }

    /// Every number data point received so far, in arrival order.
    pub fn points(&self) -> Vec<OtelPoint> {
        parse_debug_output(&self.log())
    }

    /// SIGTERM and wait for a clean exit.
    pub fn stop(&mut self) {
        self.proc.stop();
    }

    /// Starts again on the same port and waits until ready.
    pub fn restart(&mut self) {
        self.spawn();
    }
}

/// Parses the debug exporter's `detailed` text for metrics:
///
/// ```text
/// Metric #0
/// Descriptor:
///      -> Name: ot.total
///      -> Description:
///      -> Unit:
///      -> DataType: Sum
///      -> IsMonotonic: true
///      -> AggregationTemporality: Cumulative
/// NumberDataPoints #0
/// Data point attributes:
///      -> dc: Str(x)
/// StartTimestamp: 1970-01-01 00:00:00 +0000 UTC
/// Timestamp: 2026-11-23 00:00:45 +0000 UTC
/// Value: 5.000000
/// ```
///
/// A data point ends at its `Value:` line. Lines of the collector's own log
/// in between (they start with a date and a tab) are ignored.
pub fn parse_debug_output(log: &str) -> Vec<OtelPoint> {
    #[derive(PartialEq)]
    enum Section {
        Other,
        Descriptor,
        Attributes,
    }
    let mut out = Vec::new();
    let mut section = Section::Other;
    let (mut name, mut kind, mut monotonic, mut temporality) =
        (String::new(), None, false, String::new());
    let mut attributes = Labels::new();
    let mut unix_secs = None;
    for line in log.lines() {
        let t = line.trim();
        if t.starts_with("Metric #") {
            section = Section::Other;
            (name, kind, monotonic, temporality) = (String::new(), None, false, String::new());
        } else if t == "Descriptor:" {
            section = Section::Descriptor;
        } else if t.starts_with("NumberDataPoints #") {
            section = Section::Other;
            attributes.clear();
            unix_secs = None;
        } else if t == "Data point attributes:" {
            section = Section::Attributes;
        } else if let Some(arrow) = t.strip_prefix("-> ") {
            let (key, value) = arrow.split_once(':').unwrap_or((arrow, ""));
            let value = value.trim();
            match section {
                Section::Descriptor => match key {
                    "Name" => name = value.to_string(),
                    "DataType" => {
                        kind = match value {
                            "Gauge" => Some(OtelKind::Gauge),
                            "Sum" => Some(OtelKind::Sum),
                            _ => None,
                        }
                    }
                    "IsMonotonic" => monotonic = value == "true",
                    "AggregationTemporality" => temporality = value.to_string(),
                    _ => {}
                },
                Section::Attributes => {
                    let value = value
                        .strip_prefix("Str(")
                        .and_then(|v| v.strip_suffix(')'))
                        .unwrap_or(value);
                    attributes.insert(key.to_string(), value.to_string());
                }
                Section::Other => {}
            }
        } else if let Some(ts) = t.strip_prefix("Timestamp: ") {
            section = Section::Other;
            unix_secs = Some(parse_go_time(ts));
        } else if let Some(v) = t.strip_prefix("Value: ") {
            section = Section::Other;
            // Only number data points of a Gauge or a Sum; a histogram's
            // lines differ and sonde sends none.
            if let (Some(kind), Some(unix_secs)) = (kind, unix_secs) {
                out.push(OtelPoint {
                    name: name.clone(),
                    kind,
                    monotonic,
                    temporality: temporality.clone(),
                    attributes: attributes.clone(),
                    unix_secs,
                    value: v
                        .parse()
                        .unwrap_or_else(|e| panic!("debug exporter value {v:?}: {e}")),
                });
            }
        } else if !t.starts_with("StartTimestamp:") && !t.is_empty() {
            // Resource and scope lines, the collector's own log lines.
            section = Section::Other;
        }
    }
    out
}

/// One OTLP log record as the collector received it, read back from the
/// debug exporter's `detailed` output.
#[derive(Clone, Debug, PartialEq)]
pub struct OtelLog {
    /// Its resource's attributes.
    pub resource: Labels,
    /// `Body`, a string's text as it is (newlines included).
    pub body: String,
    /// Its attributes; `Str(x)` as `x`, `Int(3)` as `3`.
    pub attributes: Labels,
    /// `Timestamp` (its `time_unix_nano`) as the exporter prints it, like
    /// `2026-11-27 10:00:00.123456789 +0000 UTC`; the epoch when unset.
    pub timestamp: String,
}

/// Parses the debug exporter's `detailed` text for logs:
///
/// ```text
/// Resource attributes:
///      -> host.name: Str(web-1)
/// ScopeLogs #0
/// InstrumentationScope sonde 0.1.0
/// LogRecord #0
/// ObservedTimestamp: 2026-11-26 15:00:47.186896638 +0000 UTC
/// Body: Str(line two
///   at x)
/// Attributes:
///      -> log.file.record_offset: Int(9)
/// Trace ID:
/// ```
///
/// A body runs from `Body: Str(` to the line before `Attributes:` (or
/// `Trace ID:`), its last `)` dropped; a record ends at `Trace ID:`.
pub fn parse_debug_logs(log: &str) -> Vec<OtelLog> {
    #[derive(PartialEq)]
    enum Section {
        Other,
        Resource,
        Body,
        Attributes,
    }
    let mut out = Vec::new();
    let mut section = Section::Other;
    let mut resource = Labels::new();
    let mut body = String::new();
    let mut attributes = Labels::new();
    let mut timestamp = String::new();
    let mut in_record = false;
    for line in log.lines() {
        let t = line.trim();
        if section == Section::Body && t != "Attributes:" && !t.starts_with("Trace ID:") {
            body.push('\n');
            body.push_str(line);
            continue;
        }
        if t == "Resource attributes:" {
            section = Section::Resource;
            resource.clear();
        } else if t.starts_with("LogRecord #") {
            section = Section::Other;
            in_record = true;
            body.clear();
            attributes.clear();
            timestamp.clear();
        } else if let Some(ts) = t.strip_prefix("Timestamp: ") {
            timestamp = ts.to_string();
        } else if let Some(b) = line.strip_prefix("Body: Str(") {
            section = Section::Body;
            body = b.to_string();
        } else if t == "Attributes:" {
            if section == Section::Body {
                body.pop();
            }
            section = Section::Attributes;
        } else if t.starts_with("Trace ID:") {
            if section == Section::Body {
                body.pop();
            }
            if in_record {
                out.push(OtelLog {
                    resource: resource.clone(),
                    body: body.clone(),
                    attributes: attributes.clone(),
                    timestamp: timestamp.clone(),
                });
            }
            in_record = false;
            section = Section::Other;
        } else if let Some(arrow) = t.strip_prefix("-> ") {
            let (key, value) = arrow.split_once(": ").unwrap_or((arrow, ""));
            let value = ["Str(", "Int("]
                .iter()
                .find_map(|p| value.strip_prefix(p)?.strip_suffix(')'))
                .unwrap_or(value)
                .to_string();
            match section {
                Section::Resource => {
                    resource.insert(key.to_string(), value);
                }
                Section::Attributes => {
                    attributes.insert(key.to_string(), value);
                }
                _ => {}
            }
        } else if !line.starts_with(' ') && section == Section::Resource {
            section = Section::Other;
        }
    }
    out
}

/// Go's `time.Time.String()` in UTC, `2026-11-23 00:00:45 +0000 UTC` (a
/// fraction after the seconds is dropped), as unix seconds.
fn parse_go_time(s: &str) -> i64 {
    let bad = || panic!("unexpected time {s:?} (want `YYYY-MM-DD hh:mm:ss +0000 UTC`)");
    let Some(rest) = s.strip_suffix(" +0000 UTC") else {
        bad()
    };
    let (date, time) = rest.split_once(' ').unwrap_or_else(|| bad());
    let time = time.split('.').next().unwrap();
    let num = |x: &str| x.parse::<i64>().unwrap_or_else(|_| bad());
    let d: Vec<i64> = date.split('-').map(num).collect();
    let t: Vec<i64> = time.split(':').map(num).collect();
    if d.len() != 3 || t.len() != 3 {
        bad();
    }
    // Days from 1970-01-01 to the civil date (Howard Hinnant's algorithm).
    let (y, m, day) = (if d[1] <= 2 { d[0] - 1 } else { d[0] }, d[1], d[2]);
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    days * 86_400 + t[0] * 3600 + t[1] * 60 + t[2]
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The Kafka version the tests run against unless `SONDE_KAFKA_VERSION`
/// names another (`scripts/test` runs the Kafka suites against 3.9.2 and
/// 2.8.2 too).
pub const KAFKA_VERSION_DEFAULT: &str = "4.1.0";

/// Where `scripts/install-kafka.sh VERSION` puts the broker's jars:
/// `libs-VERSION` in this directory.
const KAFKA_LIBS_PARENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/kafka");

/// The Kafka version under test: `SONDE_KAFKA_VERSION`, else
/// [`KAFKA_VERSION_DEFAULT`].
pub fn kafka_version() -> String {
    std::env::var("SONDE_KAFKA_VERSION")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| KAFKA_VERSION_DEFAULT.to_string())
}

/// Whether the Kafka under test is `major.minor` or newer.
pub fn kafka_at_least(major: u32, minor: u32) -> bool {
    let version = kafka_version();
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let ours = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    ours >= (major, minor)
}

/// The broker's jars: `SONDE_KAFKA_LIBS`, else where
/// `scripts/install-kafka.sh` puts the version under test.
pub fn kafka_libs() -> PathBuf {
    match std::env::var_os("SONDE_KAFKA_LIBS") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => Path::new(KAFKA_LIBS_PARENT).join(format!("libs-{}", kafka_version())),
    }
}

/// The script that writes the broker's settings, formats its storage and
/// runs it: the one recipe for the tests, the benchmarks and the
/// quickstart.
pub const KAFKA_BROKER_SCRIPT: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/kafka-broker.sh");

/// The broker's maximum heap: several test brokers run at once on a
/// 2-core machine (the script's default is 1g, for the benchmarks).
const KAFKA_HEAP: &str = "512m";

/// What a Kafka consumer reads: every record (`read_uncommitted`, Kafka's
/// default), or only records of committed transactions and records written
/// outside any transaction (`read_committed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isolation {
    ReadUncommitted,
    ReadCommitted,
}

impl Isolation {
    fn config_value(self) -> &'static str {
        match self {
            Isolation::ReadUncommitted => "read_uncommitted",
            Isolation::ReadCommitted => "read_committed",
        }
    }
}

/// One record read back from a topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KafkaRecord {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Vec<u8>,
    /// The record's headers in order (`None` values are headers without
    /// a value).
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

/// A producer context that keeps every failed delivery, so a test can
/// assert that everything it sent was acknowledged.
#[derive(Default)]
pub struct Deliveries {
    acked: std::sync::atomic::AtomicUsize,
    failed: std::sync::Mutex<Vec<String>>,
}

impl Deliveries {
    /// Records the broker acknowledged so far.
    pub fn acked(&self) -> usize {
        self.acked.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The errors of the records that were not delivered.
    pub fn failed(&self) -> Vec<String> {
        self.failed.lock().unwrap().clone()
    }
}

impl rdkafka::ClientContext for Deliveries {}

impl rdkafka::producer::ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &rdkafka::producer::DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => {
                self.acked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            Err((e, _)) => self.failed.lock().unwrap().push(e.to_string()),
        }
    }
}

/// A producer whose context counts acknowledgements and failures.
pub type KafkaProducer = rdkafka::producer::BaseProducer<Deliveries>;

/// A single-node Kafka broker of the version under test
/// ([`kafka_version`]: KRaft combined mode from 3.0 on, broker and
/// controller in one JVM, `node.id=1`; before 3.0 `broker.id=1` and a
/// ZooKeeper of its own) from the jars `scripts/install-kafka.sh`
/// installs, set up and run by `scripts/kafka-broker.sh`
/// ([`KAFKA_BROKER_SCRIPT`]), which holds its settings and says why each
/// is set (every replication factor and min ISR 1, the internal topics
/// with one partition, a 4 s broker session).
pub struct Kafka {
    /// The broker's JVM: what [`Kafka::stop`] and [`Kafka::kill`] stop.
    /// Dropped before `zookeeper`, so the broker never outlives it.
    proc: Process,
    /// Before Kafka 3.0: ZooKeeper's JVM, which runs until the handle is
    /// dropped (a stopped or killed broker's restart needs it).
    zookeeper: Option<Process>,
    port: u16,
    /// Its node id (1 alone, 1 to N in a [`KafkaCluster`]).
    node: i32,
    /// Every node's address, for clients of a [`KafkaCluster`].
    all: Option<String>,
    /// The replication factor of the topics it creates.
    replicas: i32,
    /// With [`Kafka::start_secure`]: the SSL, MTLS, SASL_SSL and
    /// WRONGNAME listeners' ports.
    secure: Option<[u16; 4]>,
}

impl Kafka {
    /// One broker for the tests of a test binary that do not stop it
    /// (each test has topics of its own), started by the first that asks;
    /// `None` when it cannot run ([`or_skip`]).
    pub fn shared() -> Option<&'static Kafka> {
        static BROKER: std::sync::OnceLock<Option<Kafka>> = std::sync::OnceLock::new();
        BROKER.get_or_init(|| or_skip(Kafka::start())).as_ref()
    }

    /// Has `scripts/kafka-broker.sh prepare` write the broker's settings
    /// into a temp dir, with a broker listener and a controller listener on
    /// free loopback ports, and format its data dir; then runs the broker
    /// as this test's child (`scripts/kafka-broker.sh run`, which becomes
    /// the JVM) and waits until a metadata request through the client lists
    /// broker 1 at its address. Before Kafka 3.0 the second port is
    /// ZooKeeper's, which runs first as another child
    /// (`scripts/kafka-broker.sh zookeeper`) until the handle is dropped.
    ///
    /// # Errors
    ///
    /// [`Unavailable`] when `java` (Debian package
    /// `openjdk-17-jdk-headless`) or the broker's jars (`$SONDE_KAFKA_LIBS`,
    /// else `target/kafka/libs-$SONDE_KAFKA_VERSION`, default
    /// `target/kafka/libs-4.1.0`) are missing. Panics with the log
    /// tail if formatting fails or the broker does not become ready.
    pub fn start() -> Result<Kafka, Unavailable> {
        Kafka::start_with(None)
    }

    /// [`Kafka::start`] with four more listeners for TLS and SASL (see
    /// `scripts/kafka-broker.sh`, `SONDE_KAFKA_SECURE`), their
    /// certificates in `certs`: `ca.pem`, `broker.pem` (key, then the
    /// certificate, for 127.0.0.1) and `wrong-name.pem`.
    pub fn start_secure(certs: &Path) -> Result<Kafka, Unavailable> {
        Kafka::start_with(Some(certs))
    }

    /// `host:port` of a listener of [`Kafka::start_secure`]: `"SSL"`,
    /// `"MTLS"`, `"SASL_SSL"` or `"WRONGNAME"`.
    pub fn listener(&self, name: &str) -> String {
        let ports = self.secure.expect("a broker of Kafka::start_secure");
        let i = ["SSL", "MTLS", "SASL_SSL", "WRONGNAME"]
            .iter()
            .position(|n| *n == name)
            .unwrap_or_else(|| panic!("no listener {name}"));
        format!("127.0.0.1:{}", ports[i])
    }

    fn start_with(certs: Option<&Path>) -> Result<Kafka, Unavailable> {
        let (libs, java) = kafka_install()?;
        // free_port never hands out a port twice in a test process.
        let port = free_port();
        let controller_port = free_port();
        let mut proc = broker_process("sonde-kafka-", &libs, &java);
        let secure = certs.map(|certs| {
            let ports = std::array::from_fn(|_| free_port());
            proc.env.push(secure_env(certs, ports));
            ports
        });
        // Before 3.0 the second port is ZooKeeper's, and ZooKeeper runs
        // first (`scripts/kafka-broker.sh zookeeper`, which execs its JVM),
        // ready once it answers `ruok`: `prepare` stores the SCRAM users in
        // it, and the broker registers there.
        let zookeeper = (!kafka_at_least(3, 0)).then(|| {
            let zk_dir = tempfile::Builder::new()
                .prefix("sonde-zookeeper-")
                .tempdir()
                .unwrap();
            let zk_dir_arg = zk_dir.path().display().to_string();
            let mut zk = Process::new("ZooKeeper", PathBuf::from(KAFKA_BROKER_SCRIPT), zk_dir);
            zk.env = proc.env.clone();
            zk.args = vec![
                "zookeeper".to_string(),
                zk_dir_arg,
                controller_port.to_string(),
            ];
            zk.spawn_and_wait(|| zookeeper_ok(controller_port));
            zk
        });
        prepare_broker(&mut proc, port, controller_port);
        // A JVM's start takes 5 s on a quiet machine and over 30 s on a
        // loaded one (seen with both cores busy compiling).
        proc.start_deadline = Duration::from_secs(90);
        let mut kafka = Kafka {
            proc,
            zookeeper,
            port,
            node: 1,
            all: None,
            replicas: 1,
            secure,
        };
        kafka.spawn();
        Ok(kafka)
    }

    fn spawn(&mut self) {
        let started = std::time::Instant::now();
        let before = self.start_process();
        self.wait_started(started, before);
    }

    /// Starts the JVM; returns how many starts its log shows already.
    fn start_process(&mut self) -> usize {
        let before = self.started_lines();
        self.proc.spawn();
        before
    }

    fn started_lines(&self) -> usize {
        kafka_starts(&self.proc.log)
    }

    /// Waits until this run logged its start and the metadata lists the
    /// node at its address.
    fn wait_started(&mut self, started: std::time::Instant, before: usize) {
        let log = self.proc.log.clone();
        // The log is appended across restarts: wait for this run's line.
        let started_lines = || kafka_starts(&log);
        let bootstrap = self.bootstrap();
        let node = self.node;
        self.proc.wait_ready(started, || {
            started_lines() > before && broker_listed(&bootstrap, node, Duration::from_secs(2))
        });
    }

    /// The broker listener, `127.0.0.1:PORT`, for `bootstrap.servers`.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The temp dir holding the properties, the data dir and the log.
    pub fn dir(&self) -> &Path {
        self.proc.dir.path()
    }

    /// Everything the broker (and the storage formatter) has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.proc.log).unwrap_or_default()
    }

    /// SIGTERM and wait for the orderly shutdown; the data stays.
    pub fn stop(&mut self) {
        self.proc.stop();
    }

    /// SIGKILL: the broker dies at once, with whatever it had not flushed
    /// (acknowledged records are in the page cache, so they survive a
    /// process kill); the data stays for [`Kafka::restart`].
    pub fn kill(&mut self) {
        assert!(self.proc.child.is_some(), "Kafka is not running");
        self.proc.kill();
    }

    /// Starts again on the same ports and data dir and waits until ready.
    /// After [`Kafka::kill`] this takes a few seconds longer: the controller
    /// accepts the new incarnation of broker 1 only once the old one's
    /// session has timed out.
    pub fn restart(&mut self) {
        self.spawn();
    }

    /// Sets the produce quota of the clients with id `client_id` to
    /// `bytes_per_second`, with Kafka's own `kafka-configs` tool (the
    /// `ConfigCommand` class of the broker's jars), as an operator would.
    pub fn set_producer_quota(&self, client_id: &str, bytes_per_second: u64) {
        let var = |name: &str| {
            self.proc
                .env
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| panic!("the broker's {name} is not known"))
        };
        let mut classpath = var("SONDE_KAFKA_LIBS");
        classpath.push("/*");
        let out = Command::new(var("JAVA"))
            .arg("-cp")
            .arg(classpath)
            .args([
                "kafka.admin.ConfigCommand",
                "--bootstrap-server",
                &self.bootstrap(),
                "--alter",
                "--add-config",
                &format!("producer_byte_rate={bytes_per_second}"),
                "--entity-type",
                "clients",
                "--entity-name",
                client_id,
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "setting a quota: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A client configuration with `bootstrap.servers` set to this broker.
    pub fn client_config(&self) -> rdkafka::ClientConfig {
        let mut config = rdkafka::ClientConfig::new();
        config.set(
            "bootstrap.servers",
            self.all.clone().unwrap_or_else(|| self.bootstrap()),
        );
        config
    }

    /// Creates `topic` with `partitions` partitions (replication factor 1)
    /// and waits until the broker has a leader for every partition.
    pub fn create_topic(&self, topic: &str, partitions: i32) {
        self.create_topic_with(topic, partitions, &[]);
    }

    /// [`Kafka::create_topic`] with topic settings, e.g.
    /// `("max.message.bytes", "100000")`.
    pub fn create_topic_with(&self, topic: &str, partitions: i32, settings: &[(&str, &str)]) {
        use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
        let admin: AdminClient<rdkafka::client::DefaultClientContext> =
            self.client_config().create().unwrap();
        let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        let mut new = NewTopic::new(topic, partitions, TopicReplication::Fixed(self.replicas));
        for (k, v) in settings {
            new = new.set(k, v);
        }
        let results = block_on(admin.create_topics([&new], &options))
            .unwrap_or_else(|e| panic!("creating topic {topic}: {e}"));
        for result in results {
            if let Err((name, code)) = result {
                panic!("creating topic {name}: {code}");
            }
        }
        let consumer = self.consumer(Isolation::ReadUncommitted);
        wait_for(
            &format!("a leader for every partition of {topic}"),
            START_DEADLINE,
            || {
                use rdkafka::consumer::Consumer;
                let metadata = consumer
                    .fetch_metadata(Some(topic), Duration::from_secs(2))
                    .ok()?;
                let t = metadata.topics().iter().find(|t| t.name() == topic)?;
                let ready = t.error().is_none()
                    && t.partitions().len() == usize::try_from(partitions).unwrap()
                    && t.partitions().iter().all(|p| {
                        p.leader() >= 0 && p.isr().len() == usize::try_from(self.replicas).unwrap()
                    })
                    // A KRaft broker names itself leader in its metadata a
                    // moment before its log is open (a produce then gets
                    // NOT_LEADER_OR_FOLLOWER): its offsets answer only then.
                    && t.partitions().iter().all(|p| {
                        consumer
                            .fetch_watermarks(topic, p.id(), Duration::from_secs(2))
                            .is_ok()
                    });
                ready.then_some(())
            },
        );
    }

    /// An idempotent producer (`enable.idempotence=true`, `acks=all`) with
    /// `extra` settings on top, e.g. `transactional.id` or
    /// `compression.type`.
    pub fn producer(&self, extra: &[(&str, &str)]) -> KafkaProducer {
        let mut config = self.client_config();
        config
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("linger.ms", "5");
        for (k, v) in extra {
            config.set(*k, *v);
        }
        config
            .create_with_context(Deliveries::default())
            .unwrap_or_else(|e| panic!("creating a producer: {e}"))
    }

    /// Sends `values` to `topic` (no key, the default partitioner) with a
    /// fresh idempotent producer, and returns once the broker has
    /// acknowledged every one; panics if any delivery failed.
    pub fn produce<V: AsRef<[u8]>>(&self, topic: &str, values: &[V]) {
        use rdkafka::producer::Producer;
        let producer = self.producer(&[]);
        send_all(&producer, topic, values);
        flush(&producer);
        let failed = producer.context().failed();
        assert!(
            failed.is_empty(),
            "deliveries to {topic} failed: {failed:?}"
        );
        assert_eq!(producer.context().acked(), values.len());
    }

    /// A consumer with `isolation` that reads with explicit assignments:
    /// no group membership, nothing committed, end of partition reported.
    pub fn consumer(&self, isolation: Isolation) -> rdkafka::consumer::BaseConsumer {
        let mut config = self.client_config();
        config
            .set("group.id", "sonde-test-reader")
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "true")
            .set("isolation.level", isolation.config_value());
        config
            .create()
            .unwrap_or_else(|e| panic!("creating a consumer: {e}"))
    }

    /// Every record of every partition of `topic` from the beginning, as
    /// `isolation` sees it: reads until at least `at_least` records have
    /// arrived and every partition is at its end (for `read_committed`, the
    /// last stable offset), so a record beyond the expected count (a
    /// duplicate) is returned too. Panics after `timeout` with the count so
    /// far. Records are in partition order, then offset order.
    pub fn consume(
        &self,
        topic: &str,
        isolation: Isolation,
        at_least: usize,
        timeout: Duration,
    ) -> Vec<KafkaRecord> {
        use rdkafka::consumer::Consumer;
        use rdkafka::message::Headers;
        use rdkafka::Message;
        let consumer = self.consumer(isolation);
        let partitions: Vec<i32> = wait_for(&format!("the partitions of {topic}"), timeout, || {
            let metadata = consumer
                .fetch_metadata(Some(topic), Duration::from_secs(2))
                .ok()?;
            let t = metadata.topics().iter().find(|t| t.name() == topic)?;
            if t.error().is_some() || t.partitions().is_empty() {
                return None;
            }
            Some(t.partitions().iter().map(|p| p.id()).collect())
        });
        let mut assignment = rdkafka::TopicPartitionList::new();
        for &p in &partitions {
            assignment
                .add_partition_offset(topic, p, rdkafka::Offset::Beginning)
                .unwrap();
        }
        consumer.assign(&assignment).unwrap();
        let mut records = Vec::new();
        let mut at_end = std::collections::BTreeSet::new();
        let deadline = std::time::Instant::now() + timeout;
        while records.len() < at_least || at_end.len() < partitions.len() {
            assert!(
                std::time::Instant::now() < deadline,
                "timed out after {timeout:?} reading {topic}: {} records of at least \
                 {at_least}, {} of {} partitions at their end",
                records.len(),
                at_end.len(),
                partitions.len()
            );
            match consumer.poll(Duration::from_millis(100)) {
                None => {}
                Some(Ok(m)) => {
                    at_end.remove(&m.partition());
                    records.push(KafkaRecord {
                        partition: m.partition(),
                        offset: m.offset(),
                        key: m.key().map(<[u8]>::to_vec),
                        value: m.payload().unwrap_or_default().to_vec(),
                        headers: m
                            .headers()
                            .map(|h| {
                                h.iter()
                                    .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                                    .collect()
                            })
                            .unwrap_or_default(),
                    });
                }
                Some(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => {
                    at_end.insert(p);
                }
                Some(Err(e)) => panic!("reading {topic}: {e}"),
            }
        }
        records.sort_by_key(|r| (r.partition, r.offset));
        records
    }
}

/// Queues every value for `topic` on `producer`, serving delivery reports
/// while librdkafka's queue is full.
pub fn send_all<V: AsRef<[u8]>>(producer: &KafkaProducer, topic: &str, values: &[V]) {
    use rdkafka::error::{KafkaError, RDKafkaErrorCode};
    for value in values {
        let mut record =
            rdkafka::producer::BaseRecord::<(), [u8]>::to(topic).payload(value.as_ref());
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    producer.poll(Duration::from_millis(50));
                }
                Err((e, _)) => panic!("queueing a record for {topic}: {e}"),
            }
        }
    }
}

/// Waits until every queued record is delivered or has failed (delivery
/// reports are served meanwhile); panics after the start deadline.
pub fn flush(producer: &KafkaProducer) {
    use rdkafka::producer::Producer;
    producer
        .flush(START_DEADLINE)
        .unwrap_or_else(|e| panic!("flushing the producer: {e}"));
}

/// The jars of the Kafka version under test ([`kafka_libs`]) and a
/// Java to run them, or why the tests cannot have them.
fn kafka_install() -> Result<(PathBuf, PathBuf), Unavailable> {
    let version = kafka_version();
    let libs = kafka_libs();
    let broker_jar = libs.join(format!("kafka_2.13-{version}.jar"));
    if !broker_jar.is_file() {
        return Err(Unavailable {
            server: "Kafka",
            looked_for: vec![broker_jar],
            remedy: format!(
                "install it with scripts/install-kafka.sh {version} (a JDK, Maven and \
                 Maven Central needed) and set SONDE_KAFKA_LIBS to the directory it \
                 prints, or leave SONDE_KAFKA_LIBS unset for its default output"
            ),
        });
    }
    let java = find_binary("Java", "openjdk-17-jdk-headless", "/usr/bin/java", "java")?;
    Ok((libs, java))
}

/// A broker's process in a new temp dir named from `prefix`, with the
/// environment `scripts/kafka-broker.sh` takes; not prepared yet.
fn broker_process(prefix: &str, libs: &Path, java: &Path) -> Process {
    let dir = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
    let mut proc = Process::new("Kafka", PathBuf::from(KAFKA_BROKER_SCRIPT), dir);
    proc.env = vec![
        ("SONDE_KAFKA_LIBS", libs.as_os_str().to_owned()),
        ("SONDE_KAFKA_VERSION", kafka_version().into()),
        ("SONDE_KAFKA_HEAP", KAFKA_HEAP.into()),
        ("JAVA", java.as_os_str().to_owned()),
    ];
    proc
}

/// `SONDE_KAFKA_SECURE` for `scripts/kafka-broker.sh`: the certificates'
/// directory and the SSL, MTLS, SASL_SSL and WRONGNAME listeners' ports.
fn secure_env(certs: &Path, p: [u16; 4]) -> (&'static str, std::ffi::OsString) {
    (
        "SONDE_KAFKA_SECURE",
        format!("{} {} {} {} {}", certs.display(), p[0], p[1], p[2], p[3]).into(),
    )
}

/// Has `scripts/kafka-broker.sh prepare` write the broker's settings on
/// `port` and `controller_port` and format its data dir, and makes `run`
/// the process's command.
fn prepare_broker(proc: &mut Process, port: u16, controller_port: u16) {
    let dir_arg = proc.dir.path().display().to_string();
    proc.run_to_completion(&[
        "prepare".to_string(),
        dir_arg.clone(),
        port.to_string(),
        controller_port.to_string(),
    ]);
    proc.args = vec!["run".to_string(), dir_arg];
    // `run` execs the JVM, which exits with 128 + 15 once its shutdown
    // hooks (Kafka's orderly shutdown) have run after SIGTERM.
    proc.clean_exit = |s| s.success() || s.code() == Some(128 + libc::SIGTERM);
}

/// The certificates of a broker of [`Kafka::start_secure`] or a cluster
/// of [`KafkaCluster::start_secure`], as PEM files in a temp dir (the
/// files `scripts/kafka-broker.sh` reads from `SONDE_KAFKA_SECURE`'s
/// directory, and the client's).
pub struct KafkaCerts {
    dir: tempfile::TempDir,
}

impl KafkaCerts {
    /// A CA; the broker's certificate for 127.0.0.1 and one for
    /// `kafka.invalid`, both with their key first (Kafka's PEM keystore);
    /// a client certificate the CA signed; another CA that signed nothing
    /// the broker shows.
    pub fn new() -> KafkaCerts {
        let dir = tempfile::tempdir().unwrap();
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "sonde test CA");
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let leaf = |names: Vec<String>, path: &str, separate_key: bool| {
            let key = rcgen::KeyPair::generate().unwrap();
            let cert = rcgen::CertificateParams::new(names)
                .unwrap()
                .signed_by(&key, &issuer)
                .unwrap();
            if separate_key {
                std::fs::write(dir.path().join(format!("{path}.pem")), cert.pem()).unwrap();
                std::fs::write(dir.path().join(format!("{path}.key")), key.serialize_pem())
                    .unwrap();
            } else {
                std::fs::write(
                    dir.path().join(format!("{path}.pem")),
                    format!("{}{}", key.serialize_pem(), cert.pem()),
                )
                .unwrap();
            }
        };
        leaf(
            vec!["127.0.0.1".into(), "localhost".into()],
            "broker",
            false,
        );
        leaf(vec!["kafka.invalid".into()], "wrong-name", false);
        leaf(vec!["sonde-agent".into()], "client", true);
        std::fs::write(dir.path().join("ca.pem"), ca_cert.pem()).unwrap();
        let other_key = rcgen::KeyPair::generate().unwrap();
        let mut other = rcgen::CertificateParams::new(Vec::new()).unwrap();
        other.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        std::fs::write(
            dir.path().join("other-ca.pem"),
            other.self_signed(&other_key).unwrap().pem(),
        )
        .unwrap();
        std::fs::write(dir.path().join("good-password"), "alice-secret\n").unwrap();
        KafkaCerts { dir }
    }

    /// A file of the directory (`ca.pem`, `client.pem`, `client.key`,
    /// `other-ca.pem`, `good-password`) or one to make there.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The directory, for `SONDE_KAFKA_SECURE`.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// A cluster of Kafka nodes, each a broker and a controller of one
/// quorum (`scripts/kafka-broker.sh`, `SONDE_KAFKA_CLUSTER`), with a
/// replication factor of 3 and `min.insync.replicas` 2: what production
/// runs. Each node is a [`Kafka`] whose clients bootstrap from them all.
pub struct KafkaCluster {
    pub nodes: Vec<Kafka>,
}

impl KafkaCluster {
    /// Prepares `n` nodes on free loopback ports with one cluster id,
    /// starts them all (a node waits for the quorum, so none is ready
    /// before the others run) and waits until each is listed.
    ///
    /// # Errors
    ///
    /// [`Unavailable`] as [`Kafka::start`].
    pub fn start(n: usize) -> Result<KafkaCluster, Unavailable> {
        KafkaCluster::start_with(n, None)
    }

    /// [`KafkaCluster::start`] with every node's TLS and SASL listeners
    /// of [`Kafka::start_secure`] beside its plaintext one, all with the
    /// certificates in `certs` ([`KafkaCerts`]) and the same SCRAM users.
    ///
    /// # Errors
    ///
    /// [`Unavailable`] as [`Kafka::start`].
    pub fn start_secure(n: usize, certs: &Path) -> Result<KafkaCluster, Unavailable> {
        KafkaCluster::start_with(n, Some(certs))
    }

    /// `host:port` of listener `name` of every node of
    /// [`KafkaCluster::start_secure`] (see [`Kafka::listener`]).
    pub fn listener(&self, name: &str) -> Vec<String> {
        self.nodes.iter().map(|k| k.listener(name)).collect()
    }

    fn start_with(n: usize, certs: Option<&Path>) -> Result<KafkaCluster, Unavailable> {
        let (libs, java) = kafka_install()?;
        // free_port never hands out a port twice in a test process.
        let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
        let secure: Vec<Option<[u16; 4]>> = (0..n)
            .map(|_| certs.map(|_| std::array::from_fn(|_| free_port())))
            .collect();
        let voters: Vec<String> = ports
            .iter()
            .enumerate()
            .map(|(i, (_, c))| format!("{}@127.0.0.1:{c}", i + 1))
            .collect();
        let voters = voters.join(",");
        let all: Vec<String> = ports
            .iter()
            .map(|(p, _)| format!("127.0.0.1:{p}"))
            .collect();
        let all = all.join(",");
        let cluster_id = {
            let out = Command::new(KAFKA_BROKER_SCRIPT)
                .args(["cluster-id"])
                .output()
                .unwrap();
            String::from_utf8(out.stdout).unwrap().trim().to_string()
        };
        let mut nodes = Vec::new();
        for (i, (port, controller)) in ports.iter().enumerate() {
            let mut proc = broker_process(&format!("sonde-kafka-{}-", i + 1), &libs, &java);
            proc.env.push((
                "SONDE_KAFKA_CLUSTER",
                format!("{} {voters} {cluster_id}", i + 1).into(),
            ));
            if let (Some(certs), Some(p)) = (certs, secure[i]) {
                proc.env.push(secure_env(certs, p));
            }
            prepare_broker(&mut proc, *port, *controller);
            // Three JVMs starting at once on a small machine, each waiting
            // for the quorum.
            proc.start_deadline = Duration::from_secs(120);
            nodes.push(Kafka {
                proc,
                zookeeper: None,
                port: *port,
                node: i32::try_from(i + 1).unwrap(),
                all: Some(all.clone()),
                replicas: 3,
                secure: secure[i],
            });
        }
        let started = std::time::Instant::now();
        let before: Vec<usize> = nodes.iter_mut().map(Kafka::start_process).collect();
        for (k, before) in nodes.iter_mut().zip(before) {
            k.wait_started(started, before);
        }
        Ok(KafkaCluster { nodes })
    }

    /// Starts every node that is down, together (a node alone waits for
    /// the quorum), and waits until each is listed.
    pub fn restart_stopped(&mut self) {
        let started = std::time::Instant::now();
        let before: Vec<Option<usize>> = self
            .nodes
            .iter_mut()
            .map(|k| k.proc.child.is_none().then(|| k.start_process()))
            .collect();
        for (k, before) in self.nodes.iter_mut().zip(before) {
            if let Some(before) = before {
                k.wait_started(started, before);
            }
        }
    }

    /// Every node's address, for `brokers`.
    pub fn bootstrap(&self) -> Vec<String> {
        self.nodes.iter().map(Kafka::bootstrap).collect()
    }

    /// Node `id` (from 1).
    pub fn node(&mut self, id: i32) -> &mut Kafka {
        &mut self.nodes[usize::try_from(id - 1).unwrap()]
    }

    /// A node that runs, for the clients' calls.
    pub fn any(&self) -> &Kafka {
        self.nodes
            .iter()
            .find(|k| k.proc.child.is_some())
            .expect("a running node")
    }

    /// The node id of the leader of `topic`'s `partition`, once it has
    /// one whose in-sync replicas number `isr` at least.
    pub fn leader(&self, topic: &str, partition: i32, isr: usize) -> i32 {
        self.leader_when(topic, partition, |_, in_sync| in_sync >= isr)
    }

    /// The node id of the leader of `topic`'s `partition`, once `ready`
    /// holds for it and the number of in-sync replicas.
    pub fn leader_when(
        &self,
        topic: &str,
        partition: i32,
        ready: impl Fn(i32, usize) -> bool,
    ) -> i32 {
        use rdkafka::consumer::Consumer;
        let consumer = self.any().consumer(Isolation::ReadUncommitted);
        wait_for(
            &format!("a leader of {topic}/{partition} as the test waits for"),
            START_DEADLINE,
            || {
                let metadata = consumer
                    .fetch_metadata(Some(topic), Duration::from_secs(2))
                    .ok()?;
                let t = metadata.topics().iter().find(|t| t.name() == topic)?;
                let p = t.partitions().iter().find(|p| p.id() == partition)?;
                (p.leader() >= 0 && ready(p.leader(), p.isr().len())).then_some(p.leader())
            },
        )
    }

    /// Adds partitions to `topic` until it has `total`.
    pub fn add_partitions(&self, topic: &str, total: usize) {
        use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions};
        let admin: AdminClient<rdkafka::client::DefaultClientContext> =
            self.any().client_config().create().unwrap();
        let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        let results =
            block_on(admin.create_partitions([&NewPartitions::new(topic, total)], &options))
                .unwrap_or_else(|e| panic!("adding partitions to {topic}: {e}"));
        for r in results {
            if let Err((name, code)) = r {
                panic!("adding partitions to {name}: {code}");
            }
        }
    }
}

/// Whether a metadata request to `bootstrap` answers within `timeout` and
/// lists broker 1 at that address.
fn broker_listed(bootstrap: &str, node: i32, timeout: Duration) -> bool {
    use rdkafka::producer::Producer;
    if TcpStream::connect(bootstrap).is_err() {
        return false;
    }
    let Ok(client) = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create::<rdkafka::producer::BaseProducer>()
    else {
        return false;
    };
    let Ok(metadata) = client.client().fetch_metadata(None, timeout) else {
        return false;
    };
    metadata
        .brokers()
        .iter()
        .any(|b| b.id() == node && format!("{}:{}", b.host(), b.port()) == bootstrap)
}

/// The starts a broker's log shows: KRaft's "Kafka Server started", or
/// before 3.0 the ZooKeeper-mode server's "[KafkaServer id=N] started".
fn kafka_starts(log: &Path) -> usize {
    let log = std::fs::read_to_string(log).unwrap_or_default();
    log.matches("Kafka Server started").count()
        + log
            .lines()
            .filter(|l| l.contains("[KafkaServer id=") && l.contains("] started ("))
            .count()
}

/// Whether ZooKeeper on 127.0.0.1:`port` answers `ruok` with `imok`.
fn zookeeper_ok(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut conn) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
    let mut answer = String::new();
    conn.write_all(b"ruok").is_ok() && conn.read_to_string(&mut answer).is_ok() && answer == "imok"
}

/// Runs a future to completion on the current thread, parking between
/// polls: enough for rdkafka's admin futures, which a librdkafka background
/// thread completes (no async runtime involved).
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(std::sync::Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let std::task::Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

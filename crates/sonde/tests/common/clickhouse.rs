//! ClickHouse on loopback, for the tests of a ClickHouse sink: Debian's
//! `clickhouse-server` 18.16.1 (the server this machine can run), one
//! server or a cluster of shards, and the current engine in process
//! through chDB (`chdb-core` from PyPI), to run the same SQL on both.
//!
//! The conventions are those of [`super::backends`]: the server runs from
//! its Debian package's binary (`/usr/sbin/clickhouse-server`, else
//! `clickhouse-server` on `PATH`) with `config.xml` and `users.xml` written
//! into its own temp dir (data, tmp, user files, log and the preprocessed
//! configs all live there), listens only on 127.0.0.1 (`listen_host`; no
//! `::`) on three ports from [`free_port`], all set explicitly (HTTP,
//! native TCP, interserver HTTP; nothing else listens), and is started by
//! polling `GET /ping` (answer `Ok.`) with a deadline, never by sleeping.
//! The one user, `default`, has no password and is allowed from 127.0.0.1
//! only; caches and threads are small (mark cache 32 MiB, uncompressed
//! cache 16 MiB, `max_threads` 2, `background_pool_size` 4,
//! `max_memory_usage` 1 GB per query; 18.16 has no server-wide memory
//! limit). A server is ready in 0.1 to 0.3 s on this machine.
//!
//! # Lifecycle
//!
//! [`ClickHouse::start`] spawns and waits until ready. `stop()` sends
//! SIGTERM and waits for the exit (the data stays in the temp dir),
//! `kill()` sends SIGKILL, `restart()` starts the same command on the same
//! ports and data, so that an outage test can take the server away and
//! bring it back with its tables. Dropping the handle kills the process
//! (SIGKILL) and removes the temp dir, also when the test panics.
//!
//! # A cluster
//!
//! [`ClickHouseCluster::start`] starts N servers, each with a
//! `remote_servers` section naming the cluster `sonde`: one shard per
//! server, one replica each, `internal_replication` false. A table
//! `ENGINE = Distributed(sonde, db, local, rand())` on any of them spreads
//! inserts over the shards (asynchronously, unless
//! `insert_distributed_sync=1`) and reads all of them. `ON CLUSTER sonde`
//! DDL needs ZooKeeper in 18.16 (the DDL queue lives there): without it the
//! server answers "DDL background thread is not initialized", so [`ClickHouseCluster::on_each`] runs a statement on every
//! server instead (the local tables, the Distributed table).
//!
//! # chDB
//!
//! [`Chdb::query`] runs statements and a query in a fresh chDB session
//! (`chdb.session.Session` on a temp dir, which is also its current dir:
//! chDB reads a `config.xml` there as a server would) in a Python that has
//! `chdb-core`: `$SONDE_CHDB_PYTHON`, else `python3` on `PATH`
//! (`scripts/setup` installs it beside `tests/python/requirements.txt`).
//! Its answer is TabSeparated, as the server's HTTP default, so the two
//! compare as text.
//!
//! # ClickHouse 18.16 against the current engine (chDB 26.9)
//!
//! What a schema for both must know, each checked on both:
//!
//! * `LowCardinality(T)` works on 18.16 only with
//!   `allow_experimental_low_cardinality_type = 1` (for the CREATE, also of
//!   a Distributed table over it; inserts and reads need nothing), and
//!   26.9 refuses that setting as unknown (code 115). Send it only to a
//!   server older than 19.x, or set it in the 18.16 server's profile.
//! * Not in 18.16: column codecs (`CODEC(ZSTD)` is a syntax error), table
//!   `TTL`, `DateTime64`, `Map`, `IPv4`/`IPv6`,
//!   `SimpleAggregateFunction`, `JSONExtract*`, `toStartOfInterval`,
//!   `xxHash64`, `now64`, `arrayCompact`, the `JSONCompactEachRow` format,
//!   and the settings `insert_deduplication_token`, `async_insert` and
//!   `input_format_defaults_for_omitted_fields` (an unknown setting fails
//!   the query).
//! * In 18.16: `MergeTree`, `ReplacingMergeTree(ver)`, `SummingMergeTree`,
//!   `AggregatingMergeTree` with `AggregateFunction`, `PARTITION BY`,
//!   `ORDER BY tuple()`, `PRIMARY KEY` apart from `ORDER BY`, `SETTINGS
//!   index_granularity`, `Array(String)`, `Nested`, `Nullable`, `Enum8`,
//!   `UUID`, `Decimal`, `DateTime('UTC')`, materialized views, `ALTER
//!   TABLE ... DELETE`, `OPTIMIZE ... FINAL`, `SELECT ... FINAL`, `LIMIT
//!   BY`, `ARRAY JOIN`, `arrayJoin`, `arrayStringConcat`, `arrayReverse`,
//!   `arrayMap`, `arrayFilter`, `has`, `indexOf`, `cityHash64`, `sipHash64`
//!   (of strings and of arrays), `groupArray`, `uniqExact`, `topK`,
//!   `sumMap`, `argMax`, `toStartOfMinute`/`FiveMinute`/`Hour`, the
//!   `numbers()` table function, `insert_deduplicate`,
//!   `input_format_skip_unknown_fields`.
//! * JSONEachRow on 18.16 fills an omitted field with its type's default
//!   (`''`, 0), not with the column's `DEFAULT` expression (26.9 applies the
//!   expression); an insert with a column list, `INSERT INTO t (x) FORMAT
//!   TabSeparated`, applies it on both. An unknown JSON field fails the
//!   insert unless `input_format_skip_unknown_fields=1`.
//! * A UInt64 in JSON output is a quoted string by default on 18.16 and a
//!   number on 26.9 (`output_format_json_quote_64bit_integers`); JSONEachRow
//!   input takes a UInt64 as a number or a quoted string on both.
//! * `ANY INNER JOIN` changed meaning (20.x): 18.16 keeps every left row
//!   with any one matching right row, 26.9 one row per key of either side.
//!   `ANY LEFT JOIN`, and `INNER JOIN` against a subquery deduplicated by
//!   key, answer the same on both. 26.9 wants an alias on a joined subquery
//!   (`joined_subquery_requires_alias`); 18.16 takes one.
//! * Errors differ in words: a missing column is "Unknown identifier: x"
//!   (code 47) on 18.16, "Missing columns" / "Unknown expression
//!   identifier" on 26.9.
//! * One statement per HTTP request: the HTTP interface has no session
//!   without `session_id`, so `SET` answers "There is no session"; pass
//!   settings as URL parameters ([`ClickHouse::query_with`]).

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::backends::{find_binary, http, Unavailable};
use super::{free_port, wait_for};

/// How long a server may take to become ready (0.1 to 0.3 s measured;
/// this bounds a hang).
const START_DEADLINE: Duration = Duration::from_secs(30);
/// How long a server may take to exit after SIGTERM.
const STOP_DEADLINE: Duration = Duration::from_secs(30);
/// The cluster every server's `remote_servers` names.
pub const CLUSTER: &str = "sonde";

/// The three ports one server listens on, all on 127.0.0.1.
#[derive(Clone, Copy, Debug)]
pub struct Ports {
    pub http: u16,
    pub tcp: u16,
    pub interserver: u16,
}

impl Ports {
    fn free() -> Ports {
        Ports {
            http: free_port(),
            tcp: free_port(),
            interserver: free_port(),
        }
    }
}

/// One `clickhouse-server` on loopback.
pub struct ClickHouse {
    program: PathBuf,
    ports: Ports,
    /// Dropped after the child is killed (field order and `Drop`).
    dir: tempfile::TempDir,
    log: PathBuf,
    child: Option<Child>,
}

/// The server binary, or why it is missing.
fn server_binary() -> Result<PathBuf, Unavailable> {
    find_binary(
        "ClickHouse",
        "clickhouse-server",
        "/usr/sbin/clickhouse-server",
        "clickhouse-server",
    )
    .map_err(|mut missing| {
        missing.remedy = format!(
            "run scripts/setup, or {}, and clickhouse-client",
            missing.remedy
        );
        missing
    })
}

impl ClickHouse {
    /// Starts `clickhouse-server` on three free loopback ports with its data
    /// in a temp dir, and waits until `/ping` answers `Ok.`.
    ///
    /// # Errors
    ///
    /// [`Unavailable`] when the binary (Debian package `clickhouse-server`)
    /// is not installed.
    pub fn start() -> Result<ClickHouse, Unavailable> {
        let mut server = ClickHouse::prepare(&[])?;
        server.spawn();
        server.wait_ready(Instant::now());
        Ok(server)
    }

    /// Writes the config (with the cluster `sonde` of `shards`' native
    /// ports, when there are any) without starting the server.
    fn prepare(shards: &[Ports]) -> Result<ClickHouse, Unavailable> {
        let program = server_binary()?;
        let dir = tempfile::Builder::new()
            .prefix("sonde-clickhouse-")
            .tempdir()
            .unwrap();
        let ports = Ports::free();
        let server = ClickHouse {
            program,
            ports,
            log: dir.path().join("clickhouse.log"),
            dir,
            child: None,
        };
        server.write_config(shards);
        Ok(server)
    }

    fn write_config(&self, shards: &[Ports]) {
        let d = self.dir.path().display();
        let Ports {
            http,
            tcp,
            interserver,
        } = self.ports;
        let mut remote = String::new();
        if !shards.is_empty() {
            remote.push_str(&format!("  <remote_servers>\n    <{CLUSTER}>\n"));
            for shard in shards {
                remote.push_str(&format!(
                    "      <shard>\n        <internal_replication>false</internal_replication>\n        \
                     <replica><host>127.0.0.1</host><port>{}</port></replica>\n      </shard>\n",
                    shard.tcp
                ));
            }
            remote.push_str(&format!("    </{CLUSTER}>\n  </remote_servers>\n"));
        }
        let config = format!(
            r#"<?xml version="1.0"?>
<yandex>
  <logger>
    <level>information</level>
    <log>{d}/clickhouse.log</log>
    <errorlog>{d}/clickhouse.err.log</errorlog>
    <size>20M</size>
    <count>1</count>
  </logger>
  <listen_host>127.0.0.1</listen_host>
  <listen_try>0</listen_try>
  <http_port>{http}</http_port>
  <tcp_port>{tcp}</tcp_port>
  <interserver_http_port>{interserver}</interserver_http_port>
  <interserver_http_host>127.0.0.1</interserver_http_host>
  <path>{d}/data/</path>
  <tmp_path>{d}/tmp/</tmp_path>
  <user_files_path>{d}/user_files/</user_files_path>
  <format_schema_path>{d}/format_schemas/</format_schema_path>
  <users_config>{d}/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <timezone>UTC</timezone>
  <mark_cache_size>33554432</mark_cache_size>
  <uncompressed_cache_size>16777216</uncompressed_cache_size>
  <max_concurrent_queries>32</max_concurrent_queries>
  <max_connections>256</max_connections>
  <keep_alive_timeout>3</keep_alive_timeout>
  <mlock_executable>false</mlock_executable>
{remote}</yandex>
"#
        );
        let users = r#"<?xml version="1.0"?>
<yandex>
  <profiles>
    <default>
      <max_memory_usage>1000000000</max_memory_usage>
      <max_threads>2</max_threads>
      <background_pool_size>4</background_pool_size>
    </default>
  </profiles>
  <users>
    <default>
      <password></password>
      <networks><ip>127.0.0.1</ip></networks>
      <profile>default</profile>
      <quota>default</quota>
    </default>
  </users>
  <quotas>
    <default>
      <interval>
        <duration>3600</duration>
        <queries>0</queries>
        <errors>0</errors>
        <result_rows>0</result_rows>
        <read_rows>0</read_rows>
        <execution_time>0</execution_time>
      </interval>
    </default>
  </quotas>
</yandex>
"#;
        std::fs::write(self.path("config.xml"), config).unwrap();
        std::fs::write(self.path("users.xml"), users).unwrap();
    }

    /// Spawns the server (its stdout and stderr appended to
    /// `clickhouse.out`) without waiting for it.
    fn spawn(&mut self) {
        assert!(self.child.is_none(), "ClickHouse is already running");
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path("clickhouse.out"))
            .unwrap();
        let child = Command::new(&self.program)
            .arg(format!(
                "--config-file={}",
                self.path("config.xml").display()
            ))
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {}: {e}", self.program.display()));
        self.child = Some(child);
    }

    /// Polls `/ping` until it answers `Ok.` or the deadline after `started`
    /// passes; panics with the log tail if the server exits or misses it.
    fn wait_ready(&mut self, started: Instant) {
        let deadline = started + START_DEADLINE;
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                self.child = None;
                panic!(
                    "ClickHouse exited during start with {status}; log tail:\n{}",
                    self.log_tail(40)
                );
            }
            if self.ping() {
                // Shown with a failing test's output: how long starts take.
                eprintln!(
                    "ClickHouse ready in {:?} ({})",
                    started.elapsed(),
                    self.dir.path().display()
                );
                return;
            }
            if Instant::now() > deadline {
                self.kill();
                panic!(
                    "ClickHouse not ready after {START_DEADLINE:?}; log tail:\n{}",
                    self.log_tail(40)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether `GET /ping` answers 200 `Ok.` now.
    pub fn ping(&self) -> bool {
        let Ok(mut resp) = http().get(format!("{}/ping", self.http_url())).call() else {
            return false;
        };
        resp.status().as_u16() == 200
            && resp
                .body_mut()
                .read_to_string()
                .is_ok_and(|b| b.trim_end() == "Ok.")
    }

    /// `http://127.0.0.1:PORT`, the HTTP interface.
    pub fn http_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports.http)
    }

    /// The HTTP, native TCP and interserver ports.
    pub fn ports(&self) -> Ports {
        self.ports
    }

    /// The temp dir (config, data, log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A file in the temp dir.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Everything the server has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `n` lines of the log (and of stdout/stderr, where a failed
    /// config parse ends up).
    fn log_tail(&self, n: usize) -> String {
        let mut out = String::new();
        for path in [self.log.clone(), self.path("clickhouse.out")] {
            let Ok(file) = File::open(&path) else {
                continue;
            };
            let lines: Vec<String> = BufReader::new(file).lines().map_while(Result::ok).collect();
            out.push_str(&format!("== {}\n", path.display()));
            out.push_str(&lines[lines.len().saturating_sub(n)..].join("\n"));
            out.push('\n');
        }
        out
    }

    /// Runs one statement over HTTP (POST, the statement as the body, so
    /// an `INSERT ... FORMAT X` may carry its rows after a newline) and
    /// returns the answer; panics with the server's error text unless it
    /// answers 200.
    pub fn query(&self, sql: &str) -> String {
        self.query_with(sql, &[])
    }

    /// [`ClickHouse::query`] with settings as URL parameters (e.g.
    /// `("insert_distributed_sync", "1")`).
    pub fn query_with(&self, sql: &str, settings: &[(&str, &str)]) -> String {
        self.try_query_with(sql, settings)
            .unwrap_or_else(|e| panic!("ClickHouse query {:?}: {e}", short(sql)))
    }

    /// Runs one statement; `Err` carries the status and the server's error
    /// text (for statements expected to fail).
    pub fn try_query(&self, sql: &str) -> Result<String, String> {
        self.try_query_with(sql, &[])
    }

    /// [`ClickHouse::try_query`] with settings as URL parameters.
    pub fn try_query_with(&self, sql: &str, settings: &[(&str, &str)]) -> Result<String, String> {
        let mut req = http().post(format!("{}/", self.http_url()));
        for (k, v) in settings {
            req = req.query(*k, *v);
        }
        let mut resp = req
            .send(sql)
            .map_err(|e| format!("HTTP request failed: {e}"))?;
        let status = resp.status().as_u16();
        let body = resp
            .body_mut()
            .with_config()
            .limit(256 << 20)
            .read_to_string()
            .map_err(|e| format!("reading the answer: {e}"))?;
        if status == 200 {
            Ok(body)
        } else {
            Err(format!("{status}: {}", body.trim_end()))
        }
    }

    /// The TCP addresses the server process listens on, as `IP:PORT`
    /// (IPv6 in brackets), from its socket fds and /proc/net/tcp{,6}.
    pub fn listening(&self) -> Vec<String> {
        let pid = self.child.as_ref().expect("ClickHouse running").id();
        listening(pid)
    }

    /// The server's pid, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGTERM, then wait for the exit; panics (with the log tail) if the
    /// server does not exit in time or exits unclean. The data stays.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            panic!("ClickHouse is not running");
        };
        let pid = libc::pid_t::try_from(child.id()).unwrap();
        // SAFETY: kill(2) with a pid we spawned and have not yet reaped, so
        // the pid cannot have been reused.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        let status: ExitStatus =
            wait_for("ClickHouse to exit after SIGTERM", STOP_DEADLINE, || {
                child.try_wait().unwrap()
            });
        assert!(
            status.success(),
            "ClickHouse exited with {status} after SIGTERM; log tail:\n{}",
            self.log_tail(40)
        );
    }

    /// SIGKILL and reap (a crash: the data on disk stays).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts again on the same ports and data dir and waits until ready.
    pub fn restart(&mut self) {
        self.spawn();
        self.wait_ready(Instant::now());
    }
}

impl Drop for ClickHouse {
    fn drop(&mut self) {
        // Before the TempDir field is dropped: the server must not be
        // writing into the directory being removed.
        self.kill();
    }
}

/// A statement for an error message, its rows cut off.
fn short(sql: &str) -> &str {
    let first = sql.split('\n').next().unwrap_or(sql);
    &first[..first.len().min(200)]
}

/// The TCP addresses process `pid` listens on, as `IP:PORT`.
pub fn listening(pid: u32) -> Vec<String> {
    let inodes: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .collect();
    let mut out = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // local_address, st (0A = LISTEN), inode.
            if f.len() > 9 && f[3] == "0A" && inodes.contains(f[9]) {
                let (ip, port) = f[1].split_once(':').unwrap();
                let port = u16::from_str_radix(port, 16).unwrap();
                let ip = if ip.len() == 8 {
                    let n = u32::from_str_radix(ip, 16).unwrap();
                    std::net::Ipv4Addr::from(n.swap_bytes()).to_string()
                } else {
                    format!("[{ip}]")
                };
                out.push(format!("{ip}:{port}"));
            }
        }
    }
    out.sort();
    out
}

/// N ClickHouse servers, each a shard of the cluster `sonde` in every
/// server's `remote_servers`.
pub struct ClickHouseCluster {
    servers: Vec<ClickHouse>,
}

impl ClickHouseCluster {
    /// Starts `shards` servers (all spawned before any is waited for) and
    /// waits until each answers `/ping`.
    ///
    /// # Errors
    ///
    /// [`Unavailable`] when the binary is not installed.
    pub fn start(shards: usize) -> Result<ClickHouseCluster, Unavailable> {
        assert!(shards > 0, "a cluster of no shards");
        let mut servers = (0..shards)
            .map(|_| ClickHouse::prepare(&[]))
            .collect::<Result<Vec<_>, _>>()?;
        let ports: Vec<Ports> = servers.iter().map(ClickHouse::ports).collect();
        let started = Instant::now();
        for server in &mut servers {
            server.write_config(&ports);
            server.spawn();
        }
        for server in &mut servers {
            server.wait_ready(started);
        }
        Ok(ClickHouseCluster { servers })
    }

    /// The servers, in shard order.
    pub fn servers(&self) -> &[ClickHouse] {
        &self.servers
    }

    /// Shard `i` (from 0), to stop, kill or restart.
    pub fn server(&mut self, i: usize) -> &mut ClickHouse {
        &mut self.servers[i]
    }

    /// Runs `sql` on every server, in shard order (what `ON CLUSTER sonde`
    /// would do, which 18.16 cannot without ZooKeeper).
    pub fn on_each(&self, sql: &str) {
        for server in &self.servers {
            server.query(sql);
        }
    }
}

/// The Python with `chdb-core`, to run SQL on the current ClickHouse
/// engine in process.
pub struct Chdb {
    python: PathBuf,
}

/// The chDB runner: reads `{"setup": [...], "query": "..."}` on stdin, runs
/// each setup statement and then the query in a session whose data is the
/// current dir (a fresh temp dir), and writes the query's TabSeparated
/// answer to stdout; a failing statement is written to stderr (exit 1).
const CHDB_SCRIPT: &str = r#"
import json, os, sys
from chdb import session
job = json.load(sys.stdin)
s = session.Session(os.path.join(os.getcwd(), "session"))
try:
    for stmt in job["setup"]:
        s.query(stmt)
    out = s.query(job["query"], "TabSeparated")
    sys.stdout.buffer.write(out.bytes())
except Exception as e:
    sys.stderr.write(str(e))
    sys.exit(1)
finally:
    s.close()
"#;

impl Chdb {
    /// Finds a Python that imports `chdb` (`$SONDE_CHDB_PYTHON`, else
    /// `python3` on `PATH`); checked once per test process.
    ///
    /// # Errors
    ///
    /// [`Unavailable`] when there is none.
    pub fn find() -> Result<Chdb, Unavailable> {
        static FOUND: OnceLock<Result<PathBuf, Vec<PathBuf>>> = OnceLock::new();
        let found = FOUND.get_or_init(|| {
            let python = std::env::var_os("SONDE_CHDB_PYTHON")
                .map_or_else(|| PathBuf::from("python3"), PathBuf::from);
            let ok = Command::new(&python)
                .args(["-c", "import chdb.session"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                Ok(python)
            } else {
                Err(vec![PathBuf::from(format!(
                    "`import chdb.session` in {} ($SONDE_CHDB_PYTHON, else python3 on PATH)",
                    python.display()
                ))])
            }
        });
        match found {
            Ok(python) => Ok(Chdb {
                python: python.clone(),
            }),
            Err(looked_for) => Err(Unavailable {
                server: "chDB",
                looked_for: looked_for.clone(),
                remedy: "run scripts/setup, or pip install chdb-core==26.9.0 into that Python"
                    .to_string(),
            }),
        }
    }

    /// Runs `setup` (DDL, inserts) and then `query` in a fresh session;
    /// the query's answer in TabSeparated, or the error of the first
    /// statement that failed.
    pub fn query(&self, setup: &[&str], query: &str) -> Result<String, String> {
        let job = serde_json::json!({ "setup": setup, "query": query });
        // chDB reads a `config.xml` in its current dir, as a server would
        // (one of a ClickHouse's temp dirs would give it that server's data
        // path): it runs in a dir of its own, removed after.
        let dir = tempfile::Builder::new()
            .prefix("sonde-chdb-")
            .tempdir()
            .unwrap();
        let mut child = Command::new(&self.python)
            .args(["-c", CHDB_SCRIPT])
            .current_dir(dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {}: {e}", self.python.display()));
        child
            .stdin
            .take()
            .unwrap()
            .write_all(job.to_string().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim_end().to_string())
        }
    }
}

/// [`Chdb::query`] with the Python found by [`Chdb::find`].
///
/// # Errors
///
/// `Err(Unavailable)` without chDB; `Ok(Err(text))` when a statement fails.
pub fn chdb_query(setup: &[&str], query: &str) -> Result<Result<String, String>, Unavailable> {
    Ok(Chdb::find()?.query(setup, query))
}

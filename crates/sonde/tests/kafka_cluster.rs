//! The kafka sink against a three-node cluster (replication factor 3,
//! `min.insync.replicas` 2, `tests/common/backends.rs`, `KafkaCluster`),
//! as production runs: while lines are shipped steadily, the leader of
//! the sink's partition is SIGKILLed and restarted, every node is
//! restarted in turn and partitions are added; then the whole cluster is
//! down for 30 s and the agent is SIGKILLed meanwhile. With
//! `at_least_once` no line is lost; with `exactly_once` a
//! `read_committed` reader sees every line once.
//!
//! Each delivery runs over plaintext in one test and over TLS with
//! SCRAM-SHA-512 in the other (each node has a SASL_SSL listener with
//! certificates the test makes): exactly once over TLS and SASL while
//! leaders move, at least once over them through the outage.
//!
//! `SONDE_CLUSTER_LINES_PER_SECOND` sets the writer's rate (default
//! 20,000, what two shared cores carry beside three brokers in CI; the
//! rate reached is printed; docs/TESTING.md has a run at 100,000).
//!
//! Needs the jars `scripts/install-kafka.sh` installs and `java`; without
//! them each test prints why it is skipped, unless
//! `SONDE_REQUIRE_BACKENDS=1` makes that a failure.

mod common;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::backends::{or_skip, Isolation, KafkaCerts, KafkaCluster};
use common::Agent;

const TIMEOUT: Duration = Duration::from_secs(180);

/// The tests run one at a time: two clusters of three JVMs at once would
/// starve a small machine.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Appends `line-N` lines to a file at a steady rate until stopped.
struct Writer {
    stop: Arc<AtomicBool>,
    written: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Writer {
    fn start(path: PathBuf, per_second: u64) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let written = Arc::new(AtomicU64::new(0));
        let (s, w) = (Arc::clone(&stop), Arc::clone(&written));
        let thread = std::thread::spawn(move || {
            let mut f = std::io::BufWriter::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .unwrap(),
            );
            let started = Instant::now();
            let mut n = 0u64;
            // Every 10 ms, the lines the rate owes by now.
            while !s.load(Ordering::SeqCst) {
                let due = (started.elapsed().as_secs_f64() * per_second as f64) as u64;
                while n < due {
                    writeln!(f, "line-{n} {}", "x".repeat(40)).unwrap();
                    n += 1;
                }
                f.flush().unwrap();
                w.store(n, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(10));
            }
            f.flush().unwrap();
            w.store(n, Ordering::SeqCst);
        });
        Writer {
            stop,
            written,
            thread: Some(thread),
        }
    }

    /// Stops writing; returns how many lines were written.
    fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().unwrap().join().unwrap();
        self.written.load(Ordering::SeqCst)
    }
}

fn rate() -> u64 {
    std::env::var("SONDE_CLUSTER_LINES_PER_SECOND")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

/// How a sink reaches the cluster: its brokers and its security keys.
struct Route {
    brokers: Vec<String>,
    keys: String,
}

impl Route {
    fn plaintext(cluster: &KafkaCluster) -> Route {
        Route {
            brokers: cluster.bootstrap(),
            keys: String::new(),
        }
    }

    /// Every node's SASL_SSL listener, TLS with the test's CA and
    /// SCRAM-SHA-512 as user alice.
    fn scram_over_tls(cluster: &KafkaCluster, certs: &KafkaCerts) -> Route {
        Route {
            brokers: cluster.listener("SASL_SSL"),
            keys: format!(
                "tls = {{ ca_file = {:?} }}\nsasl = {{ mechanism = \"SCRAM-SHA-512\", username = \"alice\", password_file = {:?} }}\n",
                certs.path("ca.pem"),
                certs.path("good-password")
            ),
        }
    }

    fn brokers(&self) -> String {
        let quoted: Vec<String> = self.brokers.iter().map(|b| format!("{b:?}")).collect();
        quoted.join(", ")
    }
}

/// An agent tailing `logs/app.log` into two sinks: `alo` (at least once,
/// topic `{prefix}-alo`, by `alo`'s route) and `eoo` (exactly once,
/// topic `{prefix}-eoo`, from a second source on the same file, by
/// `eoo`'s route), both reading the metadata again every 2 s.
fn agent(logs: &Path, alo: &Route, eoo: &Route, prefix: &str) -> Agent {
    let include = logs.join("app.log");
    Agent::start_config(|admin, dir| {
        format!(
            r#"[agent]
admin_listen = "127.0.0.1:{admin}"
data_dir = "{data}"
hostname = "cluster-{prefix}"

[[logs]]
name = "a"
include = ["{include}"]
rescan_interval = "200ms"

[[logs]]
name = "b"
include = ["{include}"]
rescan_interval = "200ms"

[[sinks]]
name = "alo"
type = "kafka"
inputs = ["a"]
brokers = [{alo_brokers}]
topic = "{prefix}-alo"
metadata_max_age = "2s"
retry_max_backoff = "1s"
{alo_keys}
[[sinks]]
name = "eoo"
type = "kafka"
inputs = ["b"]
brokers = [{eoo_brokers}]
topic = "{prefix}-eoo"
delivery = "exactly_once"
offsets_topic = "{prefix}-positions"
metadata_max_age = "2s"
retry_max_backoff = "1s"
{eoo_keys}"#,
            data = dir.join("data").display(),
            include = include.display(),
            alo_brokers = alo.brokers(),
            alo_keys = alo.keys,
            eoo_brokers = eoo.brokers(),
            eoo_keys = eoo.keys,
        )
    })
}

/// How many times each of lines `0..n` was read, and the partitions the
/// records came from. At least once, a line sent twice counts toward `n`
/// records before the last lines are in: while lines are missing, the
/// topic is read again for as many more records as are missing, until
/// [`TIMEOUT`].
fn counts(
    cluster: &KafkaCluster,
    topic: &str,
    isolation: Isolation,
    n: u64,
) -> (Vec<u32>, std::collections::BTreeSet<i32>) {
    let deadline = Instant::now() + TIMEOUT;
    let mut want = n as usize;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let records = cluster.any().consume(topic, isolation, want, left);
        let read = records.len();
        let mut seen = vec![0u32; n as usize];
        let mut partitions = std::collections::BTreeSet::new();
        for r in records {
            partitions.insert(r.partition);
            let text = String::from_utf8(r.value).unwrap();
            let i: usize = text
                .strip_prefix("line-")
                .and_then(|t| t.split(' ').next())
                .and_then(|t| t.parse().ok())
                .unwrap_or_else(|| panic!("a record not written: {text:?}"));
            seen[i] += 1;
        }
        let missing = seen.iter().filter(|&&c| c == 0).count();
        if missing == 0 || Instant::now() + Duration::from_secs(5) > deadline {
            return (seen, partitions);
        }
        want = read + missing;
    }
}

/// Asserts that at least once every line arrived, and exactly once each
/// arrived once.
fn check(cluster: &KafkaCluster, prefix: &str, n: u64) {
    let (alo, _) = counts(
        cluster,
        &format!("{prefix}-alo"),
        Isolation::ReadUncommitted,
        n,
    );
    let lost: Vec<usize> = (0..alo.len()).filter(|&i| alo[i] == 0).collect();
    let twice = alo.iter().filter(|&&c| c > 1).count();
    assert!(
        lost.is_empty(),
        "at least once lost {} of {n} lines, first {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    eprintln!("{prefix}: at least once: {n} lines, {twice} more than once");
    let (eoo, partitions) = counts(
        cluster,
        &format!("{prefix}-eoo"),
        Isolation::ReadCommitted,
        n,
    );
    let lost = eoo.iter().filter(|&&c| c == 0).count();
    let twice = eoo.iter().filter(|&&c| c > 1).count();
    assert_eq!(
        (lost, twice),
        (0, 0),
        "exactly once: lines lost, lines seen twice, of {n}"
    );
    eprintln!("{prefix}: exactly once: {n} lines once each, partitions {partitions:?}");
}

#[test]
fn lines_survive_a_killed_leader_a_rolling_restart_and_added_partitions() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let certs = KafkaCerts::new();
    let Some(mut cluster) = or_skip(KafkaCluster::start_secure(3, certs.dir())) else {
        return;
    };
    for t in ["moving-alo", "moving-eoo"] {
        cluster.any().create_topic(t, 3);
    }
    let logs = tempfile::tempdir().unwrap();
    let writer = Writer::start(logs.path().join("app.log"), rate());
    // Exactly once over TLS and SCRAM, at least once over plaintext.
    let mut agent = agent(
        logs.path(),
        &Route::plaintext(&cluster),
        &Route::scram_over_tls(&cluster, &certs),
        "moving",
    );
    let started = Instant::now();
    // The leader of the first partition, killed once lines flow.
    common::wait_for("lines in Kafka", TIMEOUT, || {
        agent
            .metric("sonde_sink_records_total{sink=\"alo\"}")
            .filter(|v| *v > 0.0)
    });
    let leader = cluster.leader("moving-alo", 0, 3);
    cluster.node(leader).kill();
    // The controller fences the killed node after its session (4 s) and
    // another replica leads.
    cluster.leader_when("moving-alo", 0, |l, isr| l != leader && isr >= 2);
    cluster.node(leader).restart();
    cluster.leader("moving-alo", 0, 3);
    // Every node restarted in turn, each back in sync before the next.
    for id in 1..=3 {
        cluster.node(id).stop();
        cluster.node(id).restart();
        for t in ["moving-alo", "moving-eoo"] {
            for p in 0..3 {
                cluster.leader(t, p, 3);
            }
        }
    }
    for t in ["moving-alo", "moving-eoo"] {
        cluster.add_partitions(t, 6);
    }
    // Lines for a few metadata ages more, into the new partitions too.
    std::thread::sleep(Duration::from_secs(6));
    let n = writer.stop();
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "moving: {n} lines in {secs:.1} s ({:.0} lines/s)",
        n as f64 / secs
    );
    check(&cluster, "moving", n);
    let (_, partitions) = counts(&cluster, "moving-alo", Isolation::ReadUncommitted, n);
    assert!(
        partitions.iter().any(|&p| p >= 3),
        "no line went to the partitions added: {partitions:?}"
    );
    agent.stop();
}

#[test]
fn lines_survive_a_whole_cluster_outage_with_the_agent_killed_inside_it() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let certs = KafkaCerts::new();
    let Some(mut cluster) = or_skip(KafkaCluster::start_secure(3, certs.dir())) else {
        return;
    };
    for t in ["outage-alo", "outage-eoo"] {
        cluster.any().create_topic(t, 3);
    }
    let logs = tempfile::tempdir().unwrap();
    let writer = Writer::start(logs.path().join("app.log"), rate());
    // At least once over TLS and SCRAM, exactly once over plaintext.
    let mut agent = agent(
        logs.path(),
        &Route::scram_over_tls(&cluster, &certs),
        &Route::plaintext(&cluster),
        "outage",
    );
    common::wait_for("lines in Kafka", TIMEOUT, || {
        agent
            .metric("sonde_sink_records_total{sink=\"eoo\"}")
            .filter(|v| *v > 0.0)
    });
    // 30 s without a cluster (the outage's length is the point here),
    // the agent SIGKILLed halfway and started again.
    let down = Instant::now();
    for id in 1..=3 {
        cluster.node(id).kill();
    }
    std::thread::sleep(Duration::from_secs(15));
    agent.kill();
    agent.start_again();
    std::thread::sleep(Duration::from_secs(30).saturating_sub(down.elapsed()));
    cluster.restart_stopped();
    let n = writer.stop();
    check(&cluster, "outage", n);
    agent.stop();
}

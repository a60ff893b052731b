//! The log source's promise, checked end to end: the real `sonde` binary
//! tails files that writers append numbered lines to, ships them to a real
//! Kafka broker, and a real consumer reads the topic back. Each case does
//! to the agent what loses or duplicates lines in other agents (rotation,
//! SIGKILL, copytruncate, truncation, inode reuse, broker outages...) and
//! checks that every line arrived: exactly once as a `read_committed`
//! consumer sees it with `delivery = "exactly_once"`; at least once with
//! `at_least_once`, duplicates only where the agent was killed.
//!
//! Needs the broker's jars (scripts/install-kafka.sh) and `java`; without
//! them each test says why it is skipped, unless `SONDE_REQUIRE_BACKENDS=1`
//! makes that a failure.

mod common;

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::backends::{or_skip, Isolation, Kafka, KafkaRecord};
use common::{wait_for, Agent};

/// How long a test waits for every line to arrive.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Delivery {
    AtLeastOnce,
    ExactlyOnce,
}

impl Delivery {
    fn as_str(self) -> &'static str {
        match self {
            Delivery::AtLeastOnce => "at_least_once",
            Delivery::ExactlyOnce => "exactly_once",
        }
    }

    fn isolation(self) -> Isolation {
        match self {
            Delivery::AtLeastOnce => Isolation::ReadUncommitted,
            Delivery::ExactlyOnce => Isolation::ReadCommitted,
        }
    }
}

/// A topic name no other test uses.
fn topic(case: &str, delivery: Delivery) -> String {
    format!("{case}-{}", delivery.as_str())
}

/// What a case changes in the `[[logs]]` source, besides its include.
struct Source<'a> {
    include: &'a str,
    exclude: &'a [&'a str],
    extra: &'a str,
}

impl Default for Source<'_> {
    fn default() -> Self {
        Source {
            include: "*.log*",
            exclude: &[],
            extra: "",
        }
    }
}

/// An agent tailing `logs` into `topic`, with quick rescans so a case
/// does not wait on the defaults.
fn agent(
    kafka: &Kafka,
    logs: &Path,
    topic: &str,
    delivery: Delivery,
    source: &Source<'_>,
) -> Agent {
    let include = format!("{}/{}", logs.display(), source.include);
    let exclude: Vec<String> = source.exclude.iter().map(|e| format!("{e:?}")).collect();
    let bootstrap = kafka.bootstrap();
    let extra = source.extra;
    let delivery = delivery.as_str();
    Agent::start_config(|admin, dir| {
        format!(
            r#"[agent]
admin_listen = "127.0.0.1:{admin}"
data_dir = "{data}"
hostname = "test-{topic}"

[[logs]]
name = "app"
include = ["{include}"]
exclude = [{exclude}]
rescan_interval = "500ms"
rotate_wait = "1s"
{extra}

[[sinks]]
type = "kafka"
inputs = ["app"]
brokers = ["{bootstrap}"]
topic = "{topic}"
delivery = "{delivery}"
format = "raw"
"#,
            data = dir.join("data").display(),
            exclude = exclude.join(", "),
        )
    })
}

/// Appends numbered lines to one log file, `NAME SEQ` and some filler,
/// and rotates it the ways logrotate does.
struct Writer {
    dir: PathBuf,
    name: String,
    next: u64,
    file: File,
}

impl Writer {
    fn new(dir: &Path, name: &str) -> Writer {
        let file = Writer::open(&dir.join(format!("{name}.log")));
        Writer {
            dir: dir.to_path_buf(),
            name: name.to_string(),
            next: 0,
            file,
        }
    }

    fn open(path: &Path) -> File {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap()
    }

    fn path(&self) -> PathBuf {
        self.dir.join(format!("{}.log", self.name))
    }

    fn line(&self, seq: u64) -> String {
        format!(
            "{} {seq:08} the quick brown fox jumps over the lazy dog\n",
            self.name
        )
    }

    /// Appends `n` lines in one write.
    fn write(&mut self, n: u64) {
        let text: String = (self.next..self.next + n).map(|s| self.line(s)).collect();
        self.file.write_all(text.as_bytes()).unwrap();
        self.next += n;
    }

    /// Rename rotation: `name.log.K` becomes `name.log.K+1` (up to
    /// `keep`, the oldest deleted), `name.log` becomes `name.log.1`, and
    /// writing goes on in a new `name.log`.
    fn rotate(&mut self, keep: u32) {
        let rotated = |k: u32| self.dir.join(format!("{}.log.{k}", self.name));
        let _ = fs::remove_file(rotated(keep));
        for k in (1..keep).rev() {
            if rotated(k).exists() {
                fs::rename(rotated(k), rotated(k + 1)).unwrap();
            }
        }
        fs::rename(self.path(), rotated(1)).unwrap();
        self.file = Writer::open(&self.path());
    }

    /// logrotate's copytruncate, writes paused during the copy: the copy
    /// goes to `name.log.copy`, which the source must exclude.
    fn copytruncate(&mut self) {
        fs::copy(
            self.path(),
            self.dir.join(format!("{}.log.copy", self.name)),
        )
        .unwrap();
        self.file.set_len(0).unwrap();
    }
}

/// How often each line of each writer arrived: `counts[name][seq]`.
fn tally(records: &[KafkaRecord]) -> BTreeMap<String, BTreeMap<u64, u32>> {
    let mut counts: BTreeMap<String, BTreeMap<u64, u32>> = BTreeMap::new();
    for r in records {
        let text = String::from_utf8_lossy(&r.value);
        let mut words = text.split(' ');
        let (Some(name), Some(seq)) = (words.next(), words.next()) else {
            panic!("a record that is no line of a writer: {text:?}");
        };
        let seq: u64 = seq
            .parse()
            .unwrap_or_else(|_| panic!("a record that is no line of a writer: {text:?}"));
        *counts
            .entry(name.to_string())
            .or_default()
            .entry(seq)
            .or_default() += 1;
    }
    counts
}

/// What arrived, against what the writers wrote.
#[derive(Debug, Default)]
struct Outcome {
    lost: Vec<(String, u64)>,
    duplicated: Vec<(String, u64)>,
}

fn outcome(records: &[KafkaRecord], writers: &[(&str, u64)]) -> Outcome {
    let counts = tally(records);
    let mut o = Outcome::default();
    for (name, written) in writers {
        let seen = counts.get(*name);
        for seq in 0..*written {
            match seen.and_then(|s| s.get(&seq)).copied().unwrap_or(0) {
                0 => o.lost.push((name.to_string(), seq)),
                1 => {}
                _ => o.duplicated.push((name.to_string(), seq)),
            }
        }
    }
    for (name, seqs) in &counts {
        let written = writers.iter().find(|(n, _)| n == name).map_or(0, |w| w.1);
        assert!(
            seqs.keys().all(|s| *s < written),
            "lines of {name} that were never written arrived"
        );
    }
    o
}

/// Reads the topic until every written line arrived and the agent has
/// acknowledged every byte, then asserts the promise: nothing lost; with
/// `exactly_once`, or when `no_duplicates` (nothing was killed), nothing
/// duplicated.
fn assert_delivered(
    kafka: &Kafka,
    agent: &Agent,
    topic: &str,
    delivery: Delivery,
    writers: &[(&str, u64)],
    no_duplicates: bool,
) -> Outcome {
    let total: u64 = writers.iter().map(|w| w.1).sum();
    wait_for("every byte acknowledged", DELIVERY_TIMEOUT, || {
        (agent.metric("sonde_log_bytes_behind{source=\"app\"}") == Some(0.0)).then_some(())
    });
    // Duplicates can make the count reached before every line is in: read
    // again until none is missing, or the deadline.
    let deadline = Instant::now() + DELIVERY_TIMEOUT;
    let o = loop {
        let records = kafka.consume(
            topic,
            delivery.isolation(),
            usize::try_from(total).unwrap(),
            DELIVERY_TIMEOUT,
        );
        let o = outcome(&records, writers);
        if o.lost.is_empty() || Instant::now() > deadline {
            break o;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let few = |v: &[(String, u64)]| v.iter().take(10).cloned().collect::<Vec<_>>();
    assert!(
        o.lost.is_empty(),
        "{} of {total} lines lost, e.g. {:?}\n{}",
        o.lost.len(),
        few(&o.lost),
        agent.stderr()
    );
    if delivery == Delivery::ExactlyOnce || no_duplicates {
        assert!(
            o.duplicated.is_empty(),
            "{} of {total} lines duplicated, e.g. {:?}",
            o.duplicated.len(),
            few(&o.duplicated)
        );
    }
    o
}

/// Runs `case` for both delivery modes as two tests.
macro_rules! both_modes {
    ($case:ident) => {
        mod $case {
            #[test]
            fn at_least_once() {
                super::$case(super::Delivery::AtLeastOnce);
            }
            #[test]
            fn exactly_once() {
                super::$case(super::Delivery::ExactlyOnce);
            }
        }
    };
}

/// Case 1: rename rotation while writing, many rotations, the glob
/// covering the rotated names.
fn rename_rotation(delivery: Delivery) {
    let Some(kafka) = Kafka::shared() else {
        return;
    };
    let logs = tempfile::tempdir().unwrap();
    let topic = topic("rename", delivery);
    kafka.create_topic(&topic, 3);
    let mut w = Writer::new(logs.path(), "app");
    let agent = agent(kafka, logs.path(), &topic, delivery, &Source::default());
    for _ in 0..20 {
        w.write(500);
        w.rotate(30);
        w.write(100);
    }
    assert_delivered(kafka, &agent, &topic, delivery, &[("app", w.next)], true);
}
both_modes!(rename_rotation);

/// Case 2: SIGKILL of the agent at random moments, many times, while
/// writing and rotating.
fn sigkill_while_writing(delivery: Delivery) {
    let Some(kafka) = Kafka::shared() else {
        return;
    };
    let logs = tempfile::tempdir().unwrap();
    let topic = topic("sigkill", delivery);
    kafka.create_topic(&topic, 3);
    let mut w = Writer::new(logs.path(), "app");
    let mut agent = agent(kafka, logs.path(), &topic, delivery, &Source::default());
    for round in 0..6u64 {
        // About 20,000 lines a second, rotated every 2,000.
        let until = Instant::now() + Duration::from_millis(200 + fastrand_ms(round));
        while Instant::now() < until {
            w.write(200);
            // Enough generations kept that no file is deleted before the
            // restarted agent looked (that race is no agent's to win).
            if w.next.is_multiple_of(2000) {
                w.rotate(1000);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        agent.kill();
        w.write(300);
        agent.start_again();
    }
    w.write(100);
    assert_delivered(kafka, &agent, &topic, delivery, &[("app", w.next)], false);
}
both_modes!(sigkill_while_writing);

/// A pseudo-random pause for kill round `round` (0..800 ms), the same in
/// every run so a failure can be replayed.
fn fastrand_ms(round: u64) -> u64 {
    round.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17) % 800
}

/// Case 3: several rotations while the agent is down.
fn rotations_while_down(delivery: Delivery) {
    let Some(kafka) = Kafka::shared() else {
        return;
    };
    let logs = tempfile::tempdir().unwrap();
    let topic = topic("down", delivery);
    kafka.create_topic(&topic, 1);
    let mut w = Writer::new(logs.path(), "app");
    let mut agent = agent(kafka, logs.path(), &topic, delivery, &Source::default());
    w.write(1000);
    wait_for("the first lines read", DELIVERY_TIMEOUT, || {
        (agent.metric("sonde_log_lines_read_total{source=\"app\"}") == Some(1000.0)).then_some(())
    });
    w.write(50);
    agent.stop();
    for _ in 0..4 {
        w.write(250);
        w.rotate(10);
    }
    w.write(10);
    agent.start_again();
    assert_delivered(kafka, &agent, &topic, delivery, &[("app", w.next)], true);
}
both_modes!(rotations_while_down);

/// Case 4: copytruncate, writes paused during the copy, the copies
/// excluded from the globs.
fn copytruncate(delivery: Delivery) {
    let Some(kafka) = Kafka::shared() else {
        return;
    };
    let logs = tempfile::tempdir().unwrap();
    let topic = topic("copytruncate", delivery);
    kafka.create_topic(&topic, 1);
    let mut w = Writer::new(logs.path(), "app");
    let source = Source {
        exclude: &["*.copy"],
        ..Source::default()
    };
    let agent = agent(kafka, logs.path(), &topic, delivery, &source);
    for _ in 0..5 {
        w.write(400);
        // The lines before a truncation must be read before it happens:
        // what lands after the last read and before the truncation is only
        // in the copy (the documented caveat).
        let written = w.next;
        wait_for("the lines before the copy read", DELIVERY_TIMEOUT, || {
            let read = agent.metric("sonde_log_lines_read_total{source=\"app\"}")?;
            (read >= written as f64).then_some(())
        });
        w.copytruncate();
    }
    w.write(100);
    assert_delivered(kafka, &agent, &topic, delivery, &[("app", w.next)], true);
    assert!(agent.metric("sonde_log_truncations_total{source=\"app\"}") >= Some(5.0));
}
both_modes!(copytruncate);

/// Case 5: truncation followed by growth past the old offset before the
/// next poll: the new head differs, so the file is read again from 0.
fn truncate_and_grow(delivery: Delivery) {
    let Some(kafka) = Kafka::shared() else {
        return;
    };
    let logs = tempfile::tempdir().unwrap();
    let topic = topic("regrow", delivery);
    kafka.create_topic(&topic, 1);
    let mut w = Writer::new(logs.path(), "app");
    let agent = agent(kafka, logs.path(), &topic, delivery, &Source::default());
    w.write(100);
    wait_for("the first lines read", DELIVERY_TIMEOUT, || {
        (agent.metric("sonde_log_lines_read_total{source=\"app\"}") == Some(100.0)).then_some(())
    });
    // Truncate and write more than before in one go, as another writer
    // would: the lines of a second writer name, so the head changes.
    w.file.set_len(0).unwrap();
    let mut other = Writer {
        dir: logs.path().to_path_buf(),
        name: "new".into(),
        next: 0,
        file: Writer::open(&w.path()),
    };
    other.write(300);
    assert_delivered(
        kafka,
        &agent,
        &topic,
        delivery,
        &[("app", 100), ("new", 300)],
        true,
    );
}
both_modes!(truncate_and_grow);

/// Case 6: inode reuse: a file read to its end is deleted and a new one
/// is created at the same path, which ext4 gives the same inode.
fn inode_reuse(delivery: Delivery) {
    let Some(kafka) = Kafka::shared() else {
        return;
    };
    let logs = tempfile::tempdir().unwrap();
    let topic = topic("reuse", delivery);
    kafka.create_topic(&topic, 1);
    let mut agent = agent(kafka, logs.path(), &topic, delivery, &Source::default());
    let mut w = Writer::new(logs.path(), "old");
    w.write(200);
    wait_for("the old file read", DELIVERY_TIMEOUT, || {
        (agent.metric("sonde_log_lines_read_total{source=\"app\"}") == Some(200.0)).then_some(())
    });
    // Stopped, so the new file at the old inode is judged against the
    // checkpoint (the harder case); the running case is the next step.
    agent.stop();
    use std::os::unix::fs::MetadataExt;
    let old_ino = fs::metadata(w.path()).unwrap().ino();
    fs::remove_file(w.path()).unwrap();
    let mut n = Writer {
        dir: logs.path().to_path_buf(),
        name: "fresh".into(),
        next: 0,
        file: Writer::open(&logs.path().join("old.log")),
    };
    n.write(50);
    let reused = fs::metadata(n.path().with_file_name("old.log"))
        .unwrap()
        .ino()
        == old_ino;
    agent.start_again();
    // Running: delete the file again and make another at the same path.
    wait_for("the new file read", DELIVERY_TIMEOUT, || {
        (agent.metric("sonde_log_lines_read_total{source=\"app\"}") == Some(50.0)).then_some(())
    });
    fs::remove_file(logs.path().join("old.log")).unwrap();
    let mut third = Writer {
        dir: logs.path().to_path_buf(),
        name: "third".into(),
        next: 0,
        file: Writer::open(&logs.path().join("old.log")),
    };
    third.write(20);
    assert_delivered(
        kafka,
        &agent,
        &topic,
        delivery,
        &[("old", 200), ("fresh", 50), ("third", 20)],
        true,
    );
    if !reused {
        eprintln!("note: this filesystem did not reuse the inode; the case ran without reuse");
    }
}
both_modes!(inode_reuse);

/// Case 7: files shorter than the fingerprint, files with identical heads,
/// empty files that later grow.
fn short_identical_and_empty_files(delivery: Delivery) {
    let Some(kafka) = Kafka::shared() else {
        return;
    };
    let logs = tempfile::tempdir().unwrap();
    let topic = topic("short", delivery);
    kafka.create_topic(&topic, 1);
    let agent = agent(kafka, logs.path(), &topic, delivery, &Source::default());
    // Two files whose first 2 KiB are the same bytes.
    let head: String = (0..40)
        .map(|_| "same same same same same same same same same same\n")
        .collect();
    for name in ["twin1", "twin2"] {
        fs::write(logs.path().join(format!("{name}.log")), &head).unwrap();
    }
    let mut twins: Vec<Writer> = ["twin1", "twin2"]
        .iter()
        .map(|n| Writer {
            dir: logs.path().to_path_buf(),
            name: n.to_string(),
            next: 0,
            file: Writer::open(&logs.path().join(format!("{n}.log"))),
        })
        .collect();
    // A short file, an empty one.
    let mut short = Writer::new(logs.path(), "short");
    short.write(1);
    let mut empty = Writer::new(logs.path(), "empty");
    wait_for("the files found", DELIVERY_TIMEOUT, || {
        (agent.metric("sonde_log_files_watched{source=\"app\"}") == Some(4.0)).then_some(())
    });
    for t in &mut twins {
        t.write(10);
    }
    short.write(5);
    empty.write(3);
    wait_for("every line read", DELIVERY_TIMEOUT, || {
        (agent.metric("sonde_log_lines_read_total{source=\"app\"}")
            == Some(80.0 + 20.0 + 6.0 + 3.0))
        .then_some(())
    });
    // The "same" lines are not writer lines: drop them before the tally.
    wait_for("every byte acknowledged", DELIVERY_TIMEOUT, || {
        (agent.metric("sonde_log_bytes_behind{source=\"app\"}") == Some(0.0)).then_some(())
    });
    let records: Vec<KafkaRecord> = kafka
        .consume(&topic, delivery.isolation(), 109, DELIVERY_TIMEOUT)
        .into_iter()
        .filter(|r| !r.value.starts_with(b"same"))
        .collect();
    let o = outcome(
        &records,
        &[("twin1", 10), ("twin2", 10), ("short", 6), ("empty", 3)],
    );
    assert!(o.lost.is_empty() && o.duplicated.is_empty(), "{o:?}");
}
both_modes!(short_identical_and_empty_files);

/// Case 9: a partial last line completed later; a line longer than
/// `max_line_bytes` is cut there and counted.
fn partial_and_long_lines(delivery: Delivery) {
    let Some(kafka) = Kafka::shared() else {
        return;
    };
    let logs = tempfile::tempdir().unwrap();
    let topic = topic("partial", delivery);
    kafka.create_topic(&topic, 1);
    let source = Source {
        extra: "max_line_bytes = \"1KiB\"",
        ..Source::default()
    };
    let agent = agent(kafka, logs.path(), &topic, delivery, &source);
    let path = logs.path().join("app.log");
    let mut f = Writer::open(&path);
    f.write_all(b"app 00000000 complete\napp 00000001 half")
        .unwrap();
    wait_for("the complete line read", DELIVERY_TIMEOUT, || {
        (agent.metric("sonde_log_lines_read_total{source=\"app\"}") == Some(1.0)).then_some(())
    });
    f.write_all(b" and the rest\n").unwrap();
    let long = format!("app 00000002 {}\n", "x".repeat(3000));
    f.write_all(long.as_bytes()).unwrap();
    f.write_all(b"app 00000003 after\n").unwrap();
    wait_for("every byte acknowledged", DELIVERY_TIMEOUT, || {
        (agent.metric("sonde_log_bytes_behind{source=\"app\"}") == Some(0.0)).then_some(())
    });
    let records = kafka.consume(&topic, delivery.isolation(), 4, DELIVERY_TIMEOUT);
    let values: Vec<Vec<u8>> = records.into_iter().map(|r| r.value).collect();
    assert_eq!(values.len(), 4);
    assert_eq!(values[0], b"app 00000000 complete");
    assert_eq!(values[1], b"app 00000001 half and the rest");
    assert_eq!(values[2].len(), 1024, "cut at max_line_bytes");
    assert_eq!(values[2], long.as_bytes()[..1024]);
    assert_eq!(values[3], b"app 00000003 after");
    assert_eq!(
        agent.metric("sonde_log_lines_truncated_total{source=\"app\"}"),
        Some(1.0)
    );
}
both_modes!(partial_and_long_lines);

/// Case 11: deleted while open: a rotated file deleted before it was read
/// to its end is still read to its end, through the descriptor the agent
/// holds. The file gets far more lines than one read takes, and is
/// rotated and deleted at once.
fn deleted_while_open(delivery: Delivery) {
    let Some(kafka) = Kafka::shared() else {
        return;
    };
    let logs = tempfile::tempdir().unwrap();
    let topic = topic("deleted", delivery);
    kafka.create_topic(&topic, 1);
    let mut w = Writer::new(logs.path(), "app");
    w.write(10);
    let agent = agent(kafka, logs.path(), &topic, delivery, &Source::default());
    wait_for("the file open", DELIVERY_TIMEOUT, || {
        (agent.metric("sonde_log_lines_read_total{source=\"app\"}") == Some(10.0)).then_some(())
    });
    // Many lines at once (more than one read), rotated and deleted at
    // once: the agent reads them through its open descriptor.
    w.write(200_000);
    w.rotate(5);
    fs::remove_file(logs.path().join("app.log.1")).unwrap();
    w.write(10);
    assert_delivered(kafka, &agent, &topic, delivery, &[("app", w.next)], true);
}
both_modes!(deleted_while_open);

/// Case 8: the broker SIGKILLed for longer than the retry backoff while
/// writing and rotating go on; the agent SIGKILLed during the outage too.
fn broker_outage(delivery: Delivery) {
    // A broker of its own: this case kills it.
    let Some(mut kafka) = or_skip(Kafka::start()) else {
        return;
    };
    let logs = tempfile::tempdir().unwrap();
    let topic = topic("outage", delivery);
    kafka.create_topic(&topic, 2);
    let mut w = Writer::new(logs.path(), "app");
    let mut agent = agent(&kafka, logs.path(), &topic, delivery, &Source::default());
    w.write(1000);
    wait_for("the first lines delivered", DELIVERY_TIMEOUT, || {
        let read = agent.metric("sonde_log_lines_read_total{source=\"app\"}")?;
        let behind = agent.metric("sonde_log_bytes_behind{source=\"app\"}")?;
        (read == 1000.0 && behind == 0.0).then_some(())
    });
    kafka.kill();
    let outage = Instant::now();
    while outage.elapsed() < Duration::from_secs(4) {
        w.write(300);
        w.rotate(20);
        std::thread::sleep(Duration::from_millis(200));
    }
    // Nothing written during the outage can have been acknowledged.
    let behind = agent.metric("sonde_log_bytes_behind{source=\"app\"}");
    assert!(
        behind > Some(0.0),
        "{behind:?} bytes behind\n{}",
        agent.stderr()
    );
    agent.kill();
    w.write(300);
    agent.start_again();
    // The next rotation deletes the oldest file, which holds lines no agent
    // has read yet: once the agent holds it open they are safe (a file
    // deleted between a start and the first look is out of any agent's
    // reach).
    let files = fs::read_dir(logs.path()).unwrap().count() as f64;
    wait_for("the files open again", DELIVERY_TIMEOUT, || {
        let open = agent.metric("sonde_log_files_watched{source=\"app\"}")?;
        (open >= files).then_some(())
    });
    w.write(300);
    w.rotate(20);
    kafka.restart();
    w.write(100);
    assert_delivered(&kafka, &agent, &topic, delivery, &[("app", w.next)], false);
}
both_modes!(broker_outage);

/// Case 10: the checkpoint file after a SIGKILL at any moment loads (the
/// agent starts without reporting it corrupt, and resends at most the
/// lines in flight); a corrupt one is reported, counted and not trusted:
/// the files are read from their start (at least once), or, with
/// exactly_once, from the offsets Kafka holds.
fn checkpoint_after_kill_and_corrupt(delivery: Delivery) {
    let Some(kafka) = Kafka::shared() else {
        return;
    };
    let logs = tempfile::tempdir().unwrap();
    let topic = topic("checkpoint", delivery);
    kafka.create_topic(&topic, 1);
    let mut w = Writer::new(logs.path(), "app");
    let mut agent = agent(kafka, logs.path(), &topic, delivery, &Source::default());
    for round in 0..8u64 {
        w.write(2000);
        std::thread::sleep(Duration::from_millis(fastrand_ms(round) / 4));
        agent.kill();
        agent.start_again();
        // The file is open once the checkpoints are loaded.
        wait_for("the source running", DELIVERY_TIMEOUT, || {
            let n = agent.metric("sonde_log_files_watched{source=\"app\"}")?;
            (n == 1.0).then_some(())
        });
        assert_eq!(
            agent.metric("sonde_log_corrupt_checkpoints_total{source=\"app\"}"),
            Some(0.0),
            "a checkpoint file written before a SIGKILL did not load:\n{}",
            agent.stderr()
        );
    }
    assert_delivered(kafka, &agent, &topic, delivery, &[("app", w.next)], false);
    agent.stop();
    let file = agent.path("data/checkpoints/app.checkpoint");
    let mut bytes = fs::read(&file).unwrap();
    let last = bytes.len() - 2;
    bytes[last] ^= 0x55;
    fs::write(&file, bytes).unwrap();
    w.write(10);
    agent.start_again();
    if delivery == Delivery::AtLeastOnce {
        // With exactly_once the file is not read: Kafka holds the offsets.
        wait_for("the corrupt file reported", DELIVERY_TIMEOUT, || {
            let n = agent.metric("sonde_log_corrupt_checkpoints_total{source=\"app\"}")?;
            (n == 1.0).then_some(())
        });
        assert!(
            agent.stderr().contains("cannot be trusted"),
            "{}",
            agent.stderr()
        );
    }
    assert_delivered(kafka, &agent, &topic, delivery, &[("app", w.next)], false);
}
both_modes!(checkpoint_after_kill_and_corrupt);

/// Runs a generator from `tests/multiline/` with the real runtime
/// (`python3` or `java`) and returns the log text it wrote and the
/// records it formatted, one per logged event.
fn generated(runtime: &str, script: &str, events: usize) -> (String, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let (text, records) = (dir.path().join("text"), dir.path().join("records"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/multiline")
        .join(script);
    let out = std::process::Command::new(runtime)
        .arg(&script)
        .args([&text, &records])
        .arg(events.to_string())
        .output()
        .unwrap_or_else(|e| panic!("running {runtime}: {e}"));
    assert!(
        out.status.success(),
        "{runtime} {}: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let records = fs::read_to_string(records).unwrap();
    (
        fs::read_to_string(text).unwrap(),
        records.split('\0').map(str::to_string).collect(),
    )
}

/// Appends `text` to `f` in pieces of 1 to 700 bytes (the same cuts in
/// every run), so that reads end mid-line and mid-record.
fn write_in_pieces(f: &mut File, text: &[u8], seed: u64) {
    let mut at = 0;
    let mut round = seed;
    while at < text.len() {
        round += 1;
        let n = (1 + fastrand_ms(round) as usize * 7 / 8).min(text.len() - at);
        f.write_all(&text[at..at + n]).unwrap();
        at += n;
    }
}

/// Case 12: stack traces that real runtimes wrote, joined by a multiline
/// preset into one record per logged event; the agent is killed in the
/// middle of a trace it has read, and the trace still arrives as one
/// record (once with exactly_once).
fn multiline(delivery: Delivery, preset: &str) {
    let Some(kafka) = Kafka::shared() else {
        return;
    };
    let (text, expected) = match preset {
        "python" => generated("python3", "gen_python.py", 150),
        _ => generated("java", "Gen.java", 150),
    };
    let joined = expected.iter().filter(|r| r.contains('\n')).count();
    assert!(joined >= 20, "the generator wrote {joined} traces");
    let logs = tempfile::tempdir().unwrap();
    let topic = topic(&format!("multiline-{preset}"), delivery);
    kafka.create_topic(&topic, 1);
    // The timeout is longer than any pause of the writes below, so only
    // the last record waits for it.
    let extra = format!("[logs.multiline]\npreset = \"{preset}\"\ntimeout = \"10s\"");
    let source = Source {
        extra: &extra,
        ..Source::default()
    };
    let mut agent = agent(kafka, logs.path(), &topic, delivery, &source);
    let mut f = Writer::open(&logs.path().join("app.log"));
    // The kill comes after the first three lines of the third trace.
    let third = expected
        .iter()
        .enumerate()
        .filter(|(_, r)| r.contains('\n'))
        .nth(2)
        .map(|(i, _)| i)
        .unwrap();
    let start: usize = expected[..third].iter().map(|r| r.len() + 1).sum();
    let kill_at = start
        + text[start..]
            .match_indices('\n')
            .nth(2)
            .map(|(i, _)| i + 1)
            .unwrap();
    let head = &text.as_bytes()[..kill_at];
    write_in_pieces(&mut f, head, 1);
    let lines = head.iter().filter(|&&b| b == b'\n').count() as f64;
    wait_for("the trace's first lines read", DELIVERY_TIMEOUT, || {
        (agent.metric("sonde_log_lines_read_total{source=\"app\"}") >= Some(lines)).then_some(())
    });
    // Every event before the trace delivered (with exactly_once, committed
    // with the positions that say where reading resumes): only the
    // trace's lines are unacknowledged.
    let behind = (kill_at - start) as f64;
    wait_for(
        "the events before the trace delivered",
        DELIVERY_TIMEOUT,
        || (agent.metric("sonde_log_bytes_behind{source=\"app\"}") == Some(behind)).then_some(()),
    );
    agent.kill();
    write_in_pieces(&mut f, &text.as_bytes()[kill_at..], 2);
    agent.start_again();
    wait_for("every byte acknowledged", DELIVERY_TIMEOUT, || {
        (agent.metric("sonde_log_bytes_behind{source=\"app\"}") == Some(0.0)).then_some(())
    });
    let known: std::collections::HashSet<&[u8]> = expected.iter().map(|r| r.as_bytes()).collect();
    let records = kafka.consume(
        &topic,
        delivery.isolation(),
        expected.len(),
        DELIVERY_TIMEOUT,
    );
    let mut first_seen = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for r in &records {
        assert!(
            known.contains(&r.value[..]),
            "a record that is no logged event (a trace split?): {:?}",
            String::from_utf8_lossy(&r.value)
        );
        if seen.insert(r.value.clone()) {
            first_seen.push(String::from_utf8(r.value.clone()).unwrap());
        }
    }
    assert_eq!(first_seen, expected, "every event once, in order");
    if delivery == Delivery::ExactlyOnce {
        assert_eq!(records.len(), expected.len(), "no event twice");
    }
    assert!(
        agent.metric("sonde_log_multiline_records_total{source=\"app\"}") >= Some(1.0),
        "{}",
        agent.stderr()
    );
}

fn multiline_python(delivery: Delivery) {
    multiline(delivery, "python");
}
both_modes!(multiline_python);

fn multiline_java(delivery: Delivery) {
    multiline(delivery, "java");
}
both_modes!(multiline_java);

/// DogStatsD events and service checks through a kafka sink in `raw`
/// format: the message as the value, the rest as headers, beside the
/// metrics the same datagram carries.
#[test]
fn dogstatsd_events_become_kafka_records_with_their_fields_as_headers() {
    let Some(kafka) = Kafka::shared() else {
        return;
    };
    let udp = common::free_port();
    let bootstrap = kafka.bootstrap();
    let topic = "dogstatsd-events";
    let agent = Agent::start_config(|admin, dir| {
        format!(
            "[agent]\nadmin_listen = \"127.0.0.1:{admin}\"\ndata_dir = \"{}\"\nhostname = \"agent-1\"\n{}\
             [[sinks]]\ntype = \"blackhole\"\n\
             [[sinks]]\ntype = \"kafka\"\ninputs = [\"dogstatsd_events\"]\nbrokers = [\"{bootstrap}\"]\n\
             topic = \"{topic}\"\nformat = \"raw\"\n",
            dir.join("data").display(),
            common::statsd_receiver(udp),
        )
    });
    common::udp_send(
        udp,
        b"_e{6,5}:deploy|v2 ok|d:1700000000|p:low|#env:prod,blue\nreq:1|c\n_sc|db.up|3|h:db-1|m:no answer",
    );
    let got = kafka.consume(topic, Isolation::ReadUncommitted, 2, DELIVERY_TIMEOUT);
    assert_eq!(got.len(), 2, "{got:?}");
    let header = |r: &KafkaRecord, k: &str| -> String {
        let v = r
            .headers
            .iter()
            .find(|(hk, _)| hk == k)
            .and_then(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("no header {k} in {r:?}"));
        String::from_utf8(v).unwrap()
    };
    let (event, check) = (&got[0], &got[1]);
    assert_eq!(event.value, b"v2 ok");
    assert_eq!(header(event, "type"), "event");
    assert_eq!(header(event, "title"), "deploy");
    assert_eq!(header(event, "priority"), "low");
    assert_eq!(header(event, "alert_type"), "info");
    assert_eq!(header(event, "timestamp"), "1700000000");
    assert_eq!(header(event, "host"), "agent-1");
    assert_eq!(header(event, "tags"), "env:prod,blue");
    assert_eq!(check.value, b"no answer");
    assert_eq!(header(check, "check"), "db.up");
    assert_eq!(header(check, "status"), "unknown");
    assert_eq!(header(check, "host"), "db-1");
    wait_for("both acknowledged", Duration::from_secs(10), || {
        (agent.metric("sonde_sink_records_total{sink=\"kafka\"}") == Some(2.0)).then_some(())
    });
}

/// The README's log quickstart, step by step as a newcomer types it: its
/// `logs.toml` (paths, broker and topic moved into the test's own), the
/// agent started and `/health` awaited, one line appended and the file
/// renamed at once, another line appended: both lines reach the topic,
/// once each.
#[test]
fn the_readme_log_quickstart_delivers_every_line_once() {
    let Some(kafka) = Kafka::shared() else {
        return;
    };
    let readme = fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("README.md");
    let after = readme
        .split_once("Write `logs.toml`")
        .expect("the README's log quickstart")
        .1;
    let toml = after
        .split_once("```toml\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .expect("the quickstart's logs.toml")
        .0;
    let demo = tempfile::tempdir().unwrap();
    let topic = "readme-demo";
    let config = |admin: u16, dir: &Path| {
        toml.replace("/tmp/sonde-demo", &demo.path().display().to_string())
            .replace("/tmp/sonde-data", &dir.join("data").display().to_string())
            .replace("127.0.0.1:9092", &kafka.bootstrap())
            .replace("topic = \"demo\"", &format!("topic = \"{topic}\""))
            .replace(
                "[agent]\n",
                &format!("[agent]\nadmin_listen = \"127.0.0.1:{admin}\"\n"),
            )
    };
    // Agent::start_config returns once /health answers, as the README's
    // `curl --retry` does.
    let agent = Agent::start_config(config);
    let log = demo.path().join("app.log");
    let append = |text: &str| {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap()
    };
    append("hello from a log file\n");
    fs::rename(&log, demo.path().join("app.log.1")).unwrap();
    append("after the rotation\n");
    let records = kafka.consume(topic, Isolation::ReadUncommitted, 2, DELIVERY_TIMEOUT);
    let values: Vec<String> = records
        .iter()
        .map(|r| String::from_utf8_lossy(&r.value).into_owned())
        .collect();
    for line in ["hello from a log file", "after the rotation"] {
        assert_eq!(
            values.iter().filter(|v| v.contains(line)).count(),
            1,
            "{line:?} once in {values:?}"
        );
    }
    assert_eq!(values.len(), 2, "{values:?}");
    assert_eq!(
        agent.metric("sonde_log_lines_read_total{source=\"demo\"}"),
        Some(2.0)
    );
}

/// A first start against a broker that creates topics on first use is
/// healthy: the topic's absence while it is being created is said at
/// info, and the agent's log holds no warning.
#[test]
fn a_first_start_against_a_broker_that_creates_the_topic_warns_of_nothing() {
    let Some(kafka) = Kafka::shared() else {
        return;
    };
    let logs = tempfile::tempdir().unwrap();
    let topic = topic("auto-created", Delivery::AtLeastOnce);
    let mut w = Writer::new(logs.path(), "app");
    let mut agent = agent(
        kafka,
        logs.path(),
        &topic,
        Delivery::AtLeastOnce,
        &Source::default(),
    );
    w.write(10);
    let records = kafka.consume(&topic, Isolation::ReadUncommitted, 10, DELIVERY_TIMEOUT);
    assert_eq!(records.len(), 10);
    agent.stop();
    let log = agent.stderr();
    assert!(!log.contains(" WARN "), "{log}");
    // The broker's first answer for a new topic is an error code.
    for line in log
        .lines()
        .filter(|l| l.contains("UNKNOWN_TOPIC_OR_PARTITION"))
    {
        assert!(
            line.contains("waiting for the broker to create it"),
            "{line}"
        );
    }
}

/// SIGTERM with the broker out of reach takes the sources' wait for
/// acknowledgements, then the sink's shutdown_grace: the log says so as
/// each begins, and the agent exits after them.
#[test]
fn a_stop_with_the_broker_unreachable_says_what_it_waits_for() {
    let logs = tempfile::tempdir().unwrap();
    let nobody = common::PortHold::new();
    let include = format!("{}/*.log", logs.path().display());
    let mut agent = Agent::start_config(|admin, dir| {
        format!(
            r#"[agent]
admin_listen = "127.0.0.1:{admin}"
data_dir = "{data}"

[[logs]]
name = "app"
include = ["{include}"]

[[sinks]]
type = "kafka"
inputs = ["app"]
brokers = ["127.0.0.1:{port}"]
topic = "nowhere"
shutdown_grace = "1s"
"#,
            data = dir.join("data").display(),
            port = nobody.port,
        )
    });
    let mut w = Writer::new(logs.path(), "app");
    w.write(5);
    wait_for("the lines read", Duration::from_secs(20), || {
        (agent.metric("sonde_log_lines_read_total{source=\"app\"}")? == 5.0).then_some(())
    });
    let started = Instant::now();
    agent.stop();
    let log = agent.stderr();
    assert!(
        log.contains("stopping: waiting for the sinks to acknowledge what was sent")
            && log.contains("wait=10s"),
        "{log}"
    );
    assert!(
        log.contains("stopping: waiting for kafka to acknowledge what is queued")
            && log.contains("shutdown_grace=1s"),
        "{log}"
    );
    assert!(
        started.elapsed() >= Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

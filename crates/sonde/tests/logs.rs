//! Log sources in the real `sonde` binary, with the blackhole sink: what a
//! source reads, acknowledges and checkpoints, seen on `/metrics`, in the
//! checkpoint file and in the agent's log. The delivery promise against a
//! real broker is in logs_kafka.rs.

mod common;

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use common::{wait_for, Agent};

const TIMEOUT: Duration = Duration::from_secs(30);

fn agent(logs: &Path, extra: &str) -> Agent {
    agent_with(logs, "", extra)
}

/// [`agent`] with `source` added to the `[[logs]]` section.
fn agent_with(logs: &Path, source: &str, extra: &str) -> Agent {
    let include = format!("{}/*.log*", logs.display());
    Agent::start_config(|admin, dir| {
        format!(
            r#"[agent]
admin_listen = "127.0.0.1:{admin}"
data_dir = "{data}"

[[logs]]
name = "app"
include = ["{include}"]
rescan_interval = "500ms"
rotate_wait = "1s"
{source}

[[sinks]]
type = "blackhole"
inputs = ["app"]
{extra}
"#,
            data = dir.join("data").display(),
        )
    })
}

fn append(path: &Path, from: u32, to: u32) {
    let text: String = (from..to).map(|n| format!("line {n:06}\n")).collect();
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
}

/// The checkpoint file's text and its journal's, where the offsets saved
/// since the file was last written whole are.
fn checkpoint_text(agent: &Agent) -> Option<String> {
    let file = std::fs::read_to_string(agent.path("data/checkpoints/app.checkpoint")).ok()?;
    let journal =
        std::fs::read_to_string(agent.path("data/checkpoints/app.checkpoint.journal")).ok()?;
    Some(file + &journal)
}

/// Waits until the blackhole has counted `n` records, the source `n`
/// lines read, and every byte is acknowledged.
fn wait_records(agent: &Agent, n: u32) {
    wait_for(&format!("{n} records"), TIMEOUT, || {
        let records = agent.metric("sonde_sink_records_total{sink=\"blackhole\"}")?;
        let behind = agent.metric("sonde_log_bytes_behind{source=\"app\"}")?;
        // The source's counters reach /metrics every 100 ms: read as one.
        let lines = agent.metric("sonde_log_lines_read_total{source=\"app\"}")?;
        (records == f64::from(n) && lines == f64::from(n) && behind == 0.0).then_some(())
    });
}

#[test]
fn lines_reach_the_sink_and_the_source_counts_them_on_metrics() {
    let logs = tempfile::tempdir().unwrap();
    append(&logs.path().join("a.log"), 0, 100);
    let agent = agent(logs.path(), "");
    append(&logs.path().join("b.log"), 0, 50);
    wait_records(&agent, 150);
    assert_eq!(
        agent.metric("sonde_log_lines_read_total{source=\"app\"}"),
        Some(150.0)
    );
    assert_eq!(
        agent.metric("sonde_log_bytes_read_total{source=\"app\"}"),
        Some(150.0 * 12.0)
    );
    assert_eq!(
        agent.metric("sonde_log_files_watched{source=\"app\"}"),
        Some(2.0)
    );
    wait_for("the checkpoint file", TIMEOUT, || {
        let text = checkpoint_text(&agent)?;
        (text.contains("\"offset\":1200") && text.contains("\"offset\":600")).then_some(())
    });
}

#[test]
fn health_answers_only_once_every_source_has_scanned_its_globs() {
    // Enough files that the first scan takes a while: an agent that
    // answered /health before it would show fewer files watched.
    let logs = tempfile::tempdir().unwrap();
    const FILES: u32 = 3000;
    for f in 0..FILES {
        append(&logs.path().join(format!("f{f:05}.log")), 0, 1);
    }
    let agent = agent(logs.path(), "");
    // Agent::start_config returned at the first 200 from /health.
    assert_eq!(
        agent.metric("sonde_log_files_watched{source=\"app\"}"),
        Some(f64::from(FILES))
    );
    // A file written and renamed within the globs right after /health
    // answers is read whole, whichever name it is first seen under.
    let now = logs.path().join("new.log");
    append(&now, 0, 1);
    std::fs::rename(&now, logs.path().join("new.log.1")).unwrap();
    append(&now, 1, 2);
    wait_records(&agent, FILES + 2);
}

#[test]
fn a_clean_stop_and_a_kill_after_a_quiet_second_resend_nothing() {
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("a.log");
    append(&log, 0, 100);
    let mut agent = agent(logs.path(), "");
    wait_records(&agent, 100);
    agent.stop();
    append(&log, 100, 130);
    agent.start_again();
    // The counters start again at 0: only the new lines are sent.
    wait_records(&agent, 30);
    // The checkpoint reaches disk within a second of the acknowledgement.
    wait_for("the checkpoint at the end", TIMEOUT, || {
        let text = checkpoint_text(&agent)?;
        text.contains("\"offset\":1560").then_some(())
    });
    agent.kill();
    append(&log, 130, 140);
    agent.start_again();
    wait_records(&agent, 10);
}

#[test]
fn rotation_and_truncation_are_logged_and_counted() {
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("a.log");
    append(&log, 0, 10);
    let agent = agent(logs.path(), "");
    wait_records(&agent, 10);
    std::fs::rename(&log, logs.path().join("a.log.1")).unwrap();
    append(&log, 10, 20);
    wait_records(&agent, 20);
    OpenOptions::new()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(0)
        .unwrap();
    append(&log, 20, 23);
    wait_records(&agent, 23);
    // The source brings its counters to /metrics every 100 ms.
    wait_for("the rotation and the truncation counted", TIMEOUT, || {
        let rotations = agent.metric("sonde_log_rotations_total{source=\"app\"}")?;
        let truncations = agent.metric("sonde_log_truncations_total{source=\"app\"}")?;
        (rotations == 1.0 && truncations == 1.0).then_some(())
    });
    let log_text = agent.stderr();
    assert!(log_text.contains("file rotated"), "{log_text}");
    assert!(log_text.contains("file truncated"), "{log_text}");
}

#[test]
fn one_blackhole_takes_metric_windows_and_log_lines() {
    let logs = tempfile::tempdir().unwrap();
    append(&logs.path().join("a.log"), 0, 5);
    let port = common::free_port();
    let include = format!("{}/*.log", logs.path().display());
    let agent = Agent::start_config(|admin, dir| {
        format!(
            r#"[agent]
interval = "1s"
admin_listen = "127.0.0.1:{admin}"
data_dir = "{data}"

{receiver}
[[logs]]
name = "app"
include = ["{include}"]

[[sinks]]
type = "blackhole"
inputs = ["metrics", "app"]
"#,
            data = dir.join("data").display(),
            receiver = common::statsd_receiver(port),
        )
    });
    common::udp_send(port, b"hits:1|c\nhits:2|c\n");
    wait_records(&agent, 5);
    wait_for("the window's point", TIMEOUT, || {
        let points = agent.metric("sonde_sink_points_total{sink=\"blackhole\"}")?;
        (points >= 1.0).then_some(())
    });
}

/// The file sink takes a source and metrics into one file: every line of
/// it is one JSON object, the records whole (a multiline one included)
/// and in order, the points among them.
#[test]
fn the_file_sink_writes_log_records_and_metric_points_as_json_lines() {
    let logs = tempfile::tempdir().unwrap();
    let udp = common::free_port();
    let agent = Agent::start_config(|admin, dir| {
        format!(
            r#"[agent]
admin_listen = "127.0.0.1:{admin}"
data_dir = "{data}"
interval = "1s"
hostname = "web-1"

[[receivers]]
protocol = "statsd"
listen = "udp://127.0.0.1:{udp}"

[[logs]]
name = "app"
include = ["{logs}/*.log"]
[logs.multiline]
start = '^line'
timeout = "200ms"

[[sinks]]
type = "file"
path = "{out}"
inputs = ["metrics", "app"]
"#,
            data = dir.join("data").display(),
            logs = logs.path().display(),
            out = dir.join("points.jsonl").display(),
        )
    });
    let mut text: String = (0..2000).map(|n| format!("line {n:06}\n")).collect();
    text.push_str("line 002000 failed\n  at one\n  at two\n");
    std::fs::write(logs.path().join("a.log"), &text).unwrap();
    common::udp_send(udp, b"hits:1|c\n");
    let lines = wait_for("every record and a point", TIMEOUT, || {
        let out = std::fs::read_to_string(&agent.out).ok()?;
        let lines: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).expect("every line is one JSON object"))
            .collect();
        let records = lines.iter().filter(|l| l.get("message").is_some()).count();
        let points = lines.iter().filter(|l| l.get("message").is_none()).count();
        (records == 2001 && points >= 1).then_some(lines)
    });
    let messages: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.get("message")?.as_str())
        .collect();
    assert_eq!(messages[0], "line 000000");
    assert_eq!(messages[1999], "line 001999");
    assert_eq!(messages[2000], "line 002000 failed\n  at one\n  at two");
    let record = lines.iter().find(|l| l.get("message").is_some()).unwrap();
    assert_eq!(record["host"], "web-1");
    assert_eq!(record["source"], "app");
    assert_eq!(record["offset"], 0);
    assert!(lines.iter().any(|l| l["name"] == "hits"), "{lines:?}");
    wait_for(
        "every byte acknowledged, one multiline record",
        TIMEOUT,
        || {
            let behind = agent.metric("sonde_log_bytes_behind{source=\"app\"}")?;
            let joined = agent.metric("sonde_log_multiline_records_total{source=\"app\"}")?;
            (behind == 0.0 && joined == 1.0).then_some(())
        },
    );
}

/// The console sink prints each record's text on standard output.
#[test]
fn the_console_sink_prints_log_records() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let logs = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let cfg = data.path().join("sonde.toml");
    std::fs::write(
        &cfg,
        format!(
            "[agent]\ndata_dir = \"{}\"\nadmin_listen = \"127.0.0.1:{}\"\n\n[[logs]]\nname = \"app\"\ninclude = [\"{}/*.log\"]\n\n[[sinks]]\ntype = \"console\"\ninputs = [\"app\"]\n",
            data.path().join("data").display(),
            common::free_port(),
            logs.path().display()
        ),
    )
    .unwrap();
    std::fs::write(
        logs.path().join("a.log"),
        "hello from a file\nsecond line\n",
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sonde"))
        .args(["run", "--config"])
        .arg(&cfg)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut got = Vec::new();
    // Each read blocks until the agent prints; if it never does, the
    // test's own timeout is the harness's.
    for _ in 0..2 {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        got.push(line);
    }
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(got, ["hello from a file\n", "second line\n"]);
}

/// A rotated generation that logrotate compressed (made here by the real
/// `gzip`) is skipped by default and counted; with `gzip = "read"` its
/// lines are read.
#[test]
fn gzip_compressed_files_are_skipped_unless_asked_for() {
    let logs = tempfile::tempdir().unwrap();
    append(&logs.path().join("app.log"), 0, 10);
    let old = logs.path().join("app.log.2");
    append(&old, 100, 150);
    let status = std::process::Command::new("gzip")
        .arg(&old)
        .status()
        .expect("gzip is installed");
    assert!(status.success());
    let agent_default = agent(logs.path(), "");
    wait_records(&agent_default, 10);
    wait_for("the gzip file counted", TIMEOUT, || {
        (agent_default.metric("sonde_log_files_skipped_total{source=\"app\"}") == Some(1.0))
            .then_some(())
    });
    assert!(
        agent_default
            .stderr()
            .contains("gzip-compressed file skipped"),
        "{}",
        agent_default.stderr()
    );
    drop(agent_default);
    let reading = Agent::start_config(|admin, dir| {
        format!(
            "[agent]\nadmin_listen = \"127.0.0.1:{admin}\"\ndata_dir = \"{}\"\n\n[[logs]]\nname = \"app\"\ninclude = [\"{}/*.log*\"]\ngzip = \"read\"\n\n[[sinks]]\ntype = \"blackhole\"\ninputs = [\"app\"]\n",
            dir.join("data").display(),
            logs.path().display()
        )
    });
    wait_records(&reading, 60);
    assert_eq!(
        reading.metric("sonde_log_files_skipped_total{source=\"app\"}"),
        Some(0.0)
    );
}

/// The descriptors the agent holds on files under `dir`.
fn fds_under(agent: &Agent, dir: &Path) -> usize {
    let fds = format!("/proc/{}/fd", agent.child.id());
    std::fs::read_dir(fds)
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.starts_with(dir))
        .count()
}

#[test]
fn idle_files_are_closed_and_read_on_when_written_even_renamed_out_of_the_globs() {
    let logs = tempfile::tempdir().unwrap();
    let dir = logs.path().canonicalize().unwrap();
    let path = |i: u32| dir.join(format!("f{i:02}.log"));
    for i in 0..40 {
        append(&path(i), 0, 1);
    }
    let agent = agent_with(&dir, "close_idle = \"1s\"", "");
    wait_records(&agent, 40);
    wait_for("every file idle, its descriptor closed", TIMEOUT, || {
        let open = agent.metric("sonde_log_files_open{source=\"app\"}")?;
        let watched = agent.metric("sonde_log_files_watched{source=\"app\"}")?;
        (open == 0.0 && watched == 40.0 && fds_under(&agent, &dir) == 0).then_some(())
    });
    // Written while idle: opened again and read on from its offset.
    for i in 0..3 {
        append(&path(i), 1, 3);
    }
    wait_records(&agent, 46);
    wait_for("three files reopened", TIMEOUT, || {
        let reopened = agent.metric("sonde_log_files_reopened_total{source=\"app\"}")?;
        (reopened >= 3.0).then_some(())
    });
    // Renamed out of the globs while idle, then written through the
    // writer's old descriptor: found by its inode and read to its end.
    wait_for("f10.log idle", TIMEOUT, || {
        (agent.metric("sonde_log_files_open{source=\"app\"}")? == 0.0).then_some(())
    });
    let mut writer = OpenOptions::new().append(true).open(path(10)).unwrap();
    std::fs::rename(path(10), dir.join("f10.old")).unwrap();
    writer.write_all(b"line 000001\nline 000002\n").unwrap();
    wait_records(&agent, 48);
}

#[test]
fn a_low_soft_limit_on_descriptors_is_raised_so_that_every_file_opens() {
    // 300 files under a soft limit of 64 descriptors (the hard one as it
    // is): the agent raises its soft limit and opens them all at once.
    let logs = tempfile::tempdir().unwrap();
    for i in 0..300 {
        append(&logs.path().join(format!("f{i:03}.log")), 0, 1);
    }
    let include = format!("{}/*.log", logs.path().display());
    let agent = Agent::start_config_under(
        &["sh", "-c", "ulimit -Sn 64 && exec \"$@\"", "sh"],
        |admin, dir| {
            format!(
                "[agent]\nadmin_listen = \"127.0.0.1:{admin}\"\ndata_dir = \"{}\"\n\n\
                 [[logs]]\nname = \"app\"\ninclude = [\"{include}\"]\n\n\
                 [[sinks]]\ntype = \"blackhole\"\ninputs = [\"app\"]\n",
                dir.join("data").display()
            )
        },
    );
    wait_records(&agent, 300);
    let log = agent.stderr();
    assert!(log.contains("open files limit raised"), "{log}");
    assert!(!log.contains("cannot open"), "{log}");
}

/// The lines of source `app` in ClickHouse, each record once however
/// often it was written (`LIMIT 1 BY` its id), with the rows as
/// written: `(distinct messages in order, rows)`; `None` before the sink
/// made its table.
fn clickhouse_lines(ch: &common::clickhouse::ClickHouse) -> Option<(Vec<String>, u64)> {
    let text = ch
        .try_query(
            "SELECT message FROM (SELECT message FROM sonde.logs \
             WHERE source = 'app' LIMIT 1 BY host, source, id) ORDER BY message FORMAT TabSeparated",
        )
        .ok()?;
    let rows = ch.query("SELECT count() FROM sonde.logs");
    Some((
        text.lines().map(str::to_string).collect(),
        rows.trim().parse().unwrap(),
    ))
}

/// `line {n:06}` for each `n` in `range`, as [`append`] writes them.
fn lines(range: std::ops::Range<u32>) -> Vec<String> {
    range.map(|n| format!("line {n:06}")).collect()
}

#[test]
fn every_record_lands_in_clickhouse_once_through_an_outage_a_kill_and_a_second_reader() {
    let Some(mut ch) = common::backends::or_skip(common::clickhouse::ClickHouse::start()) else {
        return;
    };
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("a.log");
    append(&log, 0, 200);
    let include = format!("{}/*.log*", logs.path().display());
    let url = ch.http_url();
    let config = |admin: u16, dir: &Path| {
        format!(
            "[agent]\nadmin_listen = \"127.0.0.1:{admin}\"\ndata_dir = \"{}\"\nhostname = \"web-1\"\n\n\
             [[logs]]\nname = \"app\"\ninclude = [\"{include}\"]\nrescan_interval = \"500ms\"\n\
             fields = {{ env = \"test\" }}\n\n\
             [[sinks]]\ntype = \"clickhouse\"\nurl = \"{url}\"\ninputs = [\"app\"]\n\
             buffer = {{ type = \"disk\" }}\nretry_max_backoff = \"500ms\"\n",
            dir.join("data").display(),
        )
    };
    let mut agent = Agent::start_config(config);
    wait_for("200 lines in ClickHouse", TIMEOUT, || {
        (clickhouse_lines(&ch)?.0.len() == 200).then_some(())
    });
    // A row: the record, where it comes from and its fields.
    let row = ch.query(
        "SELECT host, source, file, file_offset, message, field_keys, field_values, \
         time > now() - 600 FROM sonde.logs WHERE file_offset = 12 FORMAT TabSeparated",
    );
    assert_eq!(
        row,
        format!(
            "web-1\tapp\t{}\t12\tline 000001\t['env']\t['test']\t1\n",
            log.display()
        )
    );
    // ClickHouse away: new lines wait in the disk buffer, acknowledged to
    // the source; the agent is killed and started again meanwhile, and
    // the file rotates.
    ch.stop();
    append(&log, 200, 300);
    wait_for("100 records in the disk buffer", TIMEOUT, || {
        (agent.metric("sonde_sink_log_buffer_records{sink=\"clickhouse\"}")? >= 100.0).then_some(())
    });
    agent.kill();
    std::fs::rename(&log, logs.path().join("a.log.1")).unwrap();
    append(&log, 300, 400);
    agent.start_again();
    ch.restart();
    wait_for("400 lines in ClickHouse", TIMEOUT, || {
        (clickhouse_lines(&ch)?.0.len() == 400).then_some(())
    });
    assert_eq!(clickhouse_lines(&ch).unwrap().0, lines(0..400));
    agent.stop();
    // A second agent without checkpoints reads both files again from the
    // start: every row is written twice, every record is still once.
    let mut again = Agent::start_config(config);
    let got = wait_for("every line written again", TIMEOUT, || {
        let (got, rows) = clickhouse_lines(&ch)?;
        (rows >= 800).then_some(got)
    });
    assert_eq!(got, lines(0..400));
    // After a merge, the table itself holds each record once.
    ch.query("OPTIMIZE TABLE sonde.logs FINAL");
    assert_eq!(ch.query("SELECT count() FROM sonde.logs"), "400\n");
    again.stop();
}

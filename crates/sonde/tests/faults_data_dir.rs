//! Faults of `agent.data_dir` injected into the running agent: its file
//! system full, remounted read-only, and the directory removed. Each test
//! runs the real binary with a log source delivering to a `file` sink
//! outside `data_dir` (and the profiler, where perf events work), and
//! checks that the agent keeps running and delivering, that the
//! checkpoints on disk always load and never go back, that the failures
//! are counted on `/metrics` and said once in the log rather than once a
//! save, and that the agent recovers by itself, with no restart, within a
//! stated time (docs/RELIABILITY.md, "Faults").
//!
//! The full and read-only cases mount a tmpfs (`mount -t tmpfs -o
//! size=3m`, `mount -o remount,ro`; common/tmpfs.rs), which needs root:
//! without it they say they are skipped. The removed case needs nothing.

mod common;

use std::collections::HashMap;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{wait_for, Agent, Json};
use sonde_logs::CheckpointFile;
use sonde_testkit::Tmpfs;

const WAIT: Duration = Duration::from_secs(30);

/// How long after the fault ends the checkpoints are on disk again: the
/// source tries a failed save again every second (SAVE_EVERY), and the
/// test polls; 10 s leaves room for a machine busy with other tests.
const RECOVERY: Duration = Duration::from_secs(10);

/// The log line a failed write under `data_dir` gives, at most once a
/// minute per writer.
const SAID: &str = "cannot write under agent.data_dir";

/// An agent whose `data_dir` is `data`, with source `app` reading
/// `logs/*.log` into a `file` sink in the agent's own directory (not under
/// `data`), and `extra` appended to the config.
fn agent(data: &Path, logs: &Path, extra: &str) -> Agent {
    Agent::start_config(|admin, dir| {
        format!(
            r#"[agent]
admin_listen = "127.0.0.1:{admin}"
data_dir = "{data}"

[[logs]]
name = "app"
include = ["{logs}/*.log"]
rescan_interval = "500ms"

[[sinks]]
type = "file"
name = "out"
path = "{out}"
inputs = ["app"]
{extra}
"#,
            data = data.display(),
            logs = logs.display(),
            out = dir.join("out.jsonl").display(),
        )
    })
}

/// `[profiler]`, one profile a second.
const PROFILER: &str = "\n[profiler]\nfrequency = 19\nperiod = \"1s\"\n";

/// Appends lines `from..to` of file `n` (`f{n} line {i:06}`).
fn append(logs: &Path, n: usize, from: usize, to: usize) {
    let text: String = (from..to).map(|i| format!("f{n} line {i:06}\n")).collect();
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(logs.join(format!("f{n}.log")))
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
}

/// The lines the file sink wrote, per log file, in order.
fn delivered(agent: &Agent) -> HashMap<String, Vec<String>> {
    let text = fs::read_to_string(agent.path("out.jsonl")).unwrap_or_default();
    let mut out: HashMap<String, Vec<String>> = HashMap::new();
    // Whole lines only: the sink may be writing the last one.
    for line in text.split_inclusive('\n').filter(|l| l.ends_with('\n')) {
        let record: Json = serde_json::from_str(line).unwrap();
        let message = record["message"].as_str().unwrap().to_string();
        let file = message.split(' ').next().unwrap().to_string();
        out.entry(file).or_default().push(message);
    }
    out
}

/// Waits until the sink has every line of `files` files of `lines` lines
/// each, once each and in order.
fn wait_delivered(agent: &Agent, files: usize, lines: usize) {
    let want: HashMap<String, Vec<String>> = (0..files)
        .map(|n| {
            let f = format!("f{n}");
            let l = (0..lines).map(|i| format!("f{n} line {i:06}")).collect();
            (f, l)
        })
        .collect();
    wait_for(
        &format!("{lines} lines of {files} files delivered"),
        WAIT,
        || (delivered(agent) == want).then_some(()),
    );
}

/// The offsets saved for source `app`, summed over its files; 0 when
/// there is no checkpoint file. Panics if the file does not load: no
/// fault may leave it torn.
fn saved(data: &Path) -> u64 {
    let file = CheckpointFile::new(&data.join("checkpoints"), "app").unwrap();
    let loaded = file
        .load()
        .unwrap_or_else(|e| panic!("the checkpoints do not load: {e}"));
    loaded.map_or(0, |c| c.files.iter().map(|f| f.offset).sum())
}

/// Bytes of `files` files of `lines` lines.
fn bytes(files: usize, lines: usize) -> u64 {
    (0..files)
        .map(|n| (lines * format!("f{n} line 000000\n").len()) as u64)
        .sum()
}

/// `sonde_data_dir_write_errors_total{what}`.
fn errors(agent: &Agent, what: &str) -> f64 {
    agent
        .metric(&format!(
            "sonde_data_dir_write_errors_total{{what=\"{what}\"}}"
        ))
        .expect("the counter is on /metrics")
}

/// The log lines that said a write of `what` failed.
fn said(agent: &Agent, what: &str) -> Vec<String> {
    agent
        .stderr()
        .lines()
        .filter(|l| l.contains(SAID) && l.contains(&format!("what=\"{what}\"")))
        .map(str::to_string)
        .collect()
}

/// Whether the profiler runs (perf events permitted); says so if not.
fn profiling(agent: &Agent) -> bool {
    let on = agent.metric("sonde_profiler_running") == Some(1.0);
    if !on {
        eprintln!("profiler part skipped: perf events are not permitted here");
    }
    on
}

/// The names in `dir` (none if it is missing).
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The agent has not exited.
fn still_running(agent: &mut Agent) {
    if let Some(status) = agent.child.try_wait().unwrap() {
        panic!("sonde exited with {status}: {}", agent.stderr());
    }
    assert!(agent.get("/health").is_some_and(|b| b.starts_with("ok")));
}

#[test]
fn a_full_data_dir_keeps_the_last_checkpoints_and_the_next_save_after_space_returns_moves_on() {
    let Some(tmpfs) = Tmpfs::mount("3m") else {
        return;
    };
    let logs = tempfile::tempdir().unwrap();
    let data = tmpfs.path().join("data");
    // 20 files: once the disk is full, one save's journal lines overflow
    // the page the journal has left, and the save fails at once.
    const FILES: usize = 20;
    for n in 0..FILES {
        append(logs.path(), n, 0, 10);
    }
    let mut agent = agent(&data, logs.path(), "");
    wait_delivered(&agent, FILES, 10);
    wait_for("the first checkpoints", WAIT, || {
        (saved(&data) == bytes(FILES, 10)).then_some(())
    });

    let filler = tmpfs.fill();
    let mut lines = 10;
    let full_since = Instant::now();
    while errors(&agent, "checkpoint") < 1.0 {
        assert!(full_since.elapsed() < WAIT, "no save failed on a full disk");
        for n in 0..FILES {
            append(logs.path(), n, lines, lines + 10);
        }
        lines += 10;
        // Delivery does not need data_dir: every line arrives.
        wait_delivered(&agent, FILES, lines);
    }
    // The save is tried every second; each failure counted, one said.
    let first = errors(&agent, "checkpoint");
    wait_for("failed saves tried again", WAIT, || {
        (errors(&agent, "checkpoint") >= first + 3.0).then_some(())
    });
    let said = said(&agent, "checkpoint");
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].contains("No space left on device"), "{said:?}");
    assert!(said[0].contains("free space"), "the fix: {said:?}");
    assert!(said[0].contains(&*data.join("checkpoints").to_string_lossy()));
    // The checkpoints on disk load, and are those of the last good save
    // or, file by file, later ones: never behind what was saved.
    let on_disk = saved(&data);
    assert!(
        (bytes(FILES, 10)..=bytes(FILES, lines)).contains(&on_disk),
        "{on_disk}"
    );
    still_running(&mut agent);
    let pid = agent.child.id();

    fs::remove_file(filler).unwrap();
    let freed = Instant::now();
    wait_for("the checkpoints at the end", RECOVERY, || {
        (saved(&data) == bytes(FILES, lines)).then_some(())
    });
    eprintln!(
        "checkpoints saved {:?} after space came back",
        freed.elapsed()
    );
    assert_eq!(agent.child.id(), pid, "no restart");
    // No temporary file was left to hold the space.
    assert_eq!(
        names(&data.join("checkpoints")),
        ["app.checkpoint", "app.checkpoint.journal"]
    );
    let settled = errors(&agent, "checkpoint");
    for n in 0..FILES {
        append(logs.path(), n, lines, lines + 10);
    }
    lines += 10;
    wait_delivered(&agent, FILES, lines);
    wait_for("the checkpoints at the end", RECOVERY, || {
        (saved(&data) == bytes(FILES, lines)).then_some(())
    });
    assert_eq!(errors(&agent, "checkpoint"), settled);
    assert!(agent.stderr().contains("checkpoints saved again"));
    agent.stop();
}

#[test]
fn a_read_only_data_dir_is_counted_said_once_and_writable_again_without_a_restart() {
    let Some(tmpfs) = Tmpfs::mount("3m") else {
        return;
    };
    let logs = tempfile::tempdir().unwrap();
    let data = tmpfs.path().join("data");
    append(logs.path(), 0, 0, 100);
    let mut agent = agent(&data, logs.path(), PROFILER);
    let profiler = profiling(&agent);
    wait_delivered(&agent, 1, 100);
    wait_for("the first checkpoint", WAIT, || {
        (saved(&data) == bytes(1, 100)).then_some(())
    });
    let profiles = |agent: &Agent| {
        agent
            .metric("sonde_profiler_periods_total")
            .unwrap_or_default()
    };
    if profiler {
        wait_for("a profile stored", WAIT, || {
            (profiles(&agent) >= 1.0).then_some(())
        });
    }

    tmpfs.remount("ro");
    append(logs.path(), 0, 100, 200);
    // Delivery does not need data_dir.
    wait_delivered(&agent, 1, 200);
    wait_for("failed saves counted and tried again", WAIT, || {
        (errors(&agent, "checkpoint") >= 3.0).then_some(())
    });
    let said_checkpoint = said(&agent, "checkpoint");
    assert_eq!(said_checkpoint.len(), 1, "{said_checkpoint:?}");
    assert!(said_checkpoint[0].contains("Read-only file system"));
    assert!(said_checkpoint[0].contains("remount it read-write"));
    assert_eq!(saved(&data), bytes(1, 100), "the last good checkpoint");
    if profiler {
        wait_for("profiles lost and counted", WAIT, || {
            (errors(&agent, "profile") >= 2.0).then_some(())
        });
        let lost = agent.metric("sonde_profiler_write_errors_total").unwrap();
        assert!(lost >= 2.0, "{lost}");
        assert_eq!(said(&agent, "profile").len(), 1);
        assert_eq!(agent.metric("sonde_profiler_running"), Some(1.0));
    }
    still_running(&mut agent);
    let pid = agent.child.id();

    tmpfs.remount("rw");
    let writable = Instant::now();
    wait_for("the checkpoint at the end", RECOVERY, || {
        (saved(&data) == bytes(1, 200)).then_some(())
    });
    eprintln!(
        "checkpoint saved {:?} after the remount",
        writable.elapsed()
    );
    assert_eq!(agent.child.id(), pid, "no restart");
    if profiler {
        let before = profiles(&agent);
        wait_for("profiles stored again", RECOVERY, || {
            (profiles(&agent) >= before + 1.0).then_some(())
        });
    }
    let settled = errors(&agent, "checkpoint");
    append(logs.path(), 0, 200, 300);
    wait_delivered(&agent, 1, 300);
    wait_for("the checkpoint at the end", RECOVERY, || {
        (saved(&data) == bytes(1, 300)).then_some(())
    });
    assert_eq!(errors(&agent, "checkpoint"), settled);
    agent.stop();
}

#[test]
fn a_removed_data_dir_is_made_again_at_the_next_write() {
    let logs = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    append(logs.path(), 0, 0, 100);
    let mut agent = agent(&data, logs.path(), PROFILER);
    let profiler = profiling(&agent);
    wait_delivered(&agent, 1, 100);
    // The first save writes the file, then its journal: wait for both.
    let journal = data.join("checkpoints/app.checkpoint.journal");
    wait_for("the first checkpoint", WAIT, || {
        (saved(&data) == bytes(1, 100) && journal.exists()).then_some(())
    });

    // As `rm -rf` would, again if the agent wrote into it meanwhile (the
    // profiler writes every second).
    wait_for("data_dir removed", WAIT, || fs::remove_dir_all(&data).ok());
    append(logs.path(), 0, 100, 200);
    wait_delivered(&agent, 1, 200);
    wait_for("the checkpoint in a new data_dir", RECOVERY, || {
        (saved(&data) == bytes(1, 200)).then_some(())
    });
    if profiler {
        let profiles = data.join("profiles");
        wait_for("a profile in a new data_dir", RECOVERY, || {
            names(&profiles)
                .iter()
                .any(|n| n.ends_with(".pb.gz"))
                .then_some(())
        });
    }
    // Made again, not failed. A write that ran while the removal did may
    // have failed and been counted (a profile; a checkpoint save still
    // syncing the directory), but none after: the next lines are saved
    // with no failure.
    let failed = errors(&agent, "checkpoint");
    assert!(failed <= 1.0, "{}", agent.stderr());
    append(logs.path(), 0, 200, 300);
    wait_delivered(&agent, 1, 300);
    wait_for("the checkpoint at the end", RECOVERY, || {
        (saved(&data) == bytes(1, 300)).then_some(())
    });
    assert_eq!(errors(&agent, "checkpoint"), failed);
    still_running(&mut agent);
    agent.stop();
}

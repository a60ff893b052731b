//! What a new user meets first: `sonde validate` refusing what would fail
//! at start, start errors that name their key, its line and the fix, and
//! the command line's help.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

const WAIT: Duration = Duration::from_secs(20);

/// Writes `config` to `dir/sonde.toml` and returns its path as a string.
fn write(dir: &Path, config: &str) -> String {
    let path = dir.join("sonde.toml");
    std::fs::write(&path, config).unwrap();
    path.to_str().unwrap().to_string()
}

/// `sonde run --config path`, expected to fail: its exit status and
/// stderr. An agent that starts after all is killed at the deadline.
fn run_fails(path: &str) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sonde"))
        .args(["run", "--config", path])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_for("sonde run to exit", WAIT, || child.try_wait().unwrap());
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "sonde run started:\n{err}");
    err
}

/// `sonde validate path`, expected to fail: its stderr.
fn validate_fails(path: &str) -> String {
    let (ok, out, err) = sonde(&["validate", path]);
    assert!(!ok, "validated: {out}");
    err
}

fn assert_has(text: &str, needles: &[&str]) {
    for n in needles {
        assert!(text.contains(n), "no {n:?} in:\n{text}");
    }
}

#[test]
fn validate_refuses_a_broker_with_a_scheme_naming_the_key_the_line_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        &format!(
            "[[logs]]\nname = \"app\"\ninclude = [\"{}/*.log\"]\n\n[[sinks]]\ntype = \"kafka\"\nbrokers = [\"kafka://127.0.0.1:9092\"]\ntopic = \"logs\"\ninputs = [\"app\"]\n",
            dir.path().display()
        ),
    );
    let err = validate_fails(&path);
    assert_has(
        &err,
        &[
            "line 7: sinks[0].brokers[0]",
            "\"kafka://127.0.0.1:9092\" is not \"HOST:PORT\"",
            "fix: write \"127.0.0.1:9092\", without kafka://",
        ],
    );
}

#[test]
fn a_socket_group_that_does_not_exist_fails_validate_and_run_alike() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        &format!(
            "[[receivers]]\nprotocol = \"msgpack\"\nlisten = \"unixgram://{}/metric.sock\"\nmode = \"0660\"\ngroup = \"sonde-no-such-group\"\n\n[[sinks]]\ntype = \"console\"\n",
            dir.path().display()
        ),
    );
    let expected = [
        "line 5: receivers[0].group: no group \"sonde-no-such-group\" on this host",
        "| group = \"sonde-no-such-group\"",
        "fix: create it (`groupadd sonde-no-such-group`)",
    ];
    assert_has(&validate_fails(&path), &expected);
    assert_has(&run_fails(&path), &expected);
}

#[test]
fn a_data_dir_that_cannot_be_made_names_agent_data_dir_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    // Under a regular file: no user, root included, can make it.
    std::fs::write(dir.path().join("file"), "").unwrap();
    let path = write(
        dir.path(),
        &format!(
            "[agent]\nadmin_listen = \"\"\ndata_dir = \"{0}/file/data\"\n\n[[logs]]\nname = \"app\"\ninclude = [\"{0}/*.log\"]\n\n[[sinks]]\ntype = \"console\"\ninputs = [\"app\"]\n",
            dir.path().display()
        ),
    );
    let expected = [
        "line 3: agent.data_dir: ",
        "log checkpoints",
        "fix: make it writable by the user sonde runs as",
        "or set agent.data_dir to a directory it can write",
    ];
    assert_has(&validate_fails(&path), &expected);
    assert_has(&run_fails(&path), &expected);
}

#[test]
fn a_listen_address_in_use_names_its_key_its_line_and_the_os_error_once() {
    let dir = tempfile::tempdir().unwrap();
    let held = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    let path = write(
        dir.path(),
        &format!(
            "[agent]\nadmin_listen = \"\"\n\n{}\n[[sinks]]\ntype = \"console\"\n",
            statsd_receiver(port)
        ),
    );
    // Nothing at validate: the port is free or not only when the agent
    // starts.
    let (ok, _, err) = sonde(&["validate", &path]);
    assert!(ok, "{err}");
    let err = run_fails(&path);
    assert_has(
        &err,
        &[
            &format!("line 6: receivers[0].listen: cannot listen on udp://127.0.0.1:{port}: "),
            "fix: another process listens there",
        ],
    );
    assert_eq!(err.matches("Address already in use").count(), 1, "{err}");

    let admin = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = admin.local_addr().unwrap().port();
    let path = write(
        dir.path(),
        &format!(
            "[agent]\nadmin_listen = \"127.0.0.1:{port}\"\n\n[[sinks]]\ntype = \"console\"\n{}",
            statsd_receiver(free_port())
        ),
    );
    let err = run_fails(&path);
    assert_has(
        &err,
        &[
            &format!("line 2: agent.admin_listen: cannot listen on 127.0.0.1:{port}: "),
            "admin_listen = \"\"",
        ],
    );
    assert_eq!(err.matches("Address already in use").count(), 1, "{err}");
}

#[test]
fn help_says_what_sonde_is_and_what_each_form_takes() {
    let (ok, top, _) = sonde(&["--help"]);
    assert!(ok);
    assert!(
        top.starts_with("sonde: a host telemetry agent: metrics, logs and profiles"),
        "{top}"
    );
    assert!(!top.contains("the binary (CLI, config, wiring)"), "{top}");
    for sub in [
        "run",
        "validate",
        "default-config",
        "send",
        "bench",
        "profile",
    ] {
        assert!(top.contains(&format!("\n  {sub} ")), "no {sub} in:\n{top}");
    }
    let (_, run, _) = sonde(&["run", "--help"]);
    assert_has(&run, &["SONDE_LOG", "--config", "--log-format"]);
    let (_, validate, _) = sonde(&["validate", "--help"]);
    assert_has(&validate, &["users and groups", "agent.data_dir"]);
    let (_, merge, _) = sonde(&["profile", "merge", "--help"]);
    assert!(!merge.contains("--data-dir"), "{merge}");
    assert_has(&merge, &["--config", "[profiler]"]);
    let (_, show, _) = sonde(&["profile", "--help"]);
    assert_has(&show, &["--data-dir"]);
}

#[test]
fn every_sink_type_takes_a_name_for_its_metrics_labels() {
    let agent = Agent::start_config(|admin, dir| {
        format!(
            "[agent]\nadmin_listen = \"127.0.0.1:{admin}\"\ndata_dir = \"{}\"\n\n{}\n[[sinks]]\ntype = \"file\"\nname = \"points\"\npath = \"{}\"\n\n[[sinks]]\ntype = \"console\"\nname = \"screen\"\n",
            dir.join("data").display(),
            statsd_receiver(free_port()),
            dir.join("points.jsonl").display()
        )
    });
    let text = agent.get("/metrics").unwrap();
    assert_has(
        &text,
        &[
            "sonde_sink_errors_total{sink=\"points\"} 0",
            "sonde_sink_errors_total{sink=\"screen\"} 0",
        ],
    );
    assert!(!text.contains("sink=\"file:"), "{text}");
}

//! The file as a whole: the embedded defaults, TOML syntax, unknown keys, and how an error names its key, line and fix.

use super::*;

#[test]
fn the_embedded_defaults_parse() {
    let c = parse(DEFAULT_CONFIG).unwrap();
    assert_eq!(c.receivers.len(), 3);
    assert_eq!(c.aggregate.interval, Duration::from_secs(30));
    assert_eq!(c.sinks.len(), 1);
    assert_eq!(c.sinks[0].kind.name, "console");
}

#[test]
fn unknown_keys_name_the_key_and_line() {
    let e = err(&format!(
        "{MIN}[agent]\ninterval = \"10s\"\nintervall = \"5s\"\n"
    ));
    assert_eq!((e.key.as_str(), e.line), ("agent.intervall", Some(8)));
    assert_eq!(e.line_text.as_deref(), Some("intervall = \"5s\""));
    assert_eq!(at(&format!("{MIN}path = \"x\"\n")), key("sinks[0].path", 6));
}

#[test]
fn bad_durations_name_the_line_and_the_fix() {
    let e = err(&format!("[agent]\ninterval = \"10 sec\"\n{MIN}"));
    assert_eq!((e.key.as_str(), e.line), ("agent.interval", Some(2)));
    assert!(e.problem.contains("\"10 sec\""), "{e}");
    assert!(e.fix.contains("\"10s\""), "{e}");
}

#[test]
fn an_interval_out_of_range_names_its_line() {
    let e = err(&format!("[agent]\n\ninterval = \"10ms\"\n{MIN}"));
    assert_eq!((e.key.as_str(), e.line), ("agent.interval", Some(3)));
    assert!(e.fix.contains("\"100ms\""), "{e}");
    assert_eq!(
        at(&format!("[agent]\nexpire_windows = 0\n{MIN}")),
        key("agent.expire_windows", 2)
    );
}

#[test]
fn errors_print_the_line_the_key_the_problem_and_the_fix() {
    let e = err(&format!("[agent]\ninterval = \"10ms\"\n{MIN}"));
    assert_eq!(
        e.to_string(),
        format!(
            "line 2: agent.interval: {}\n    | interval = \"10ms\"\n    fix: {}",
            e.problem, e.fix
        )
    );
    // No line; a fix of several lines stays indented under the message.
    let e = err("[[sinks]]\ntype = \"console\"\n");
    let shown = e.to_string();
    assert!(
        shown.starts_with(&format!("receivers: {}\n    fix: add one", e.problem)),
        "{shown}"
    );
    assert!(
        shown.lines().skip(1).all(|l| l.starts_with("    ")),
        "{shown}"
    );
}

#[test]
fn no_receivers_or_no_sinks_is_an_error() {
    let e = err("[[sinks]]\ntype = \"console\"\n");
    assert_eq!((e.key.as_str(), e.line), ("receivers", None));
    let e = err("[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:1\"\n");
    assert_eq!((e.key.as_str(), e.line), ("sinks", None));
}

#[test]
fn toml_syntax_errors_name_the_line() {
    let e = err(&format!("{MIN}[agent\n"));
    assert_eq!(e.line, Some(6), "{e}");
    let e = err(&format!("[agent]\ninterval = 30s\n{MIN}"));
    assert_eq!((e.key.as_str(), e.line), ("agent.interval", Some(2)));
    let e = err("[[receivers]]\nprotocol = \"statsd\"\n[[sinks]]\ntype = \"console\"\n");
    assert_eq!((e.key.as_str(), e.line), ("receivers[0].listen", Some(1)));
    assert!(e.fix.contains("`listen`"), "{e}");
}

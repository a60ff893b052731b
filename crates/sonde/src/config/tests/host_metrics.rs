//! `[host_metrics]`.

use super::*;

const SINK: &str = "[[sinks]]\ntype = \"console\"\n";

#[test]
fn host_metrics_alone_is_a_config_and_its_defaults_read_everything() {
    let c = parse(&format!("[host_metrics]\n{SINK}")).unwrap();
    let h = c.host_metrics.unwrap();
    assert_eq!(h.interval, Duration::from_secs(10));
    assert_eq!(h.groups, sonde_host::Groups::default());
    assert_eq!(h.groups.top_processes, 10);
    let c = parse(&format!(
        "[host_metrics]\ninterval = \"5s\"\ntcp = true\nprocesses = false\ntop_processes = 3\n{SINK}"
    ))
    .unwrap();
    let h = c.host_metrics.unwrap();
    assert_eq!(h.interval, Duration::from_secs(5));
    assert!(h.groups.tcp && !h.groups.processes && h.groups.cpu);
    assert_eq!(h.groups.top_processes, 3);
    // Turned off, it is not an input.
    assert!(parse(&format!("[host_metrics]\nenabled = false\n{SINK}")).is_err());
    // The embedded defaults have it off; the packaged config on.
    assert!(parse(DEFAULT_CONFIG).unwrap().host_metrics.is_none());
    let shipped = parse(include_str!("../../../../../packaging/sonde.toml")).unwrap();
    assert_eq!(
        shipped.host_metrics.unwrap().interval,
        Duration::from_secs(10)
    );
}

#[test]
fn bad_host_metrics_keys_name_the_key_its_line_and_a_fix() {
    let e = err(&format!(
        "[agent]\ninterval = \"10s\"\n\n[host_metrics]\ninterval = \"30s\"\n{SINK}"
    ));
    assert_eq!((e.key.as_str(), e.line), ("host_metrics.interval", Some(5)));
    assert!(e.problem.contains("agent.interval"), "{e}");
    assert!(e.fix.contains("at most agent.interval"), "{e}");
    let e = err(&format!("[host_metrics]\ninterval = \"500ms\"\n{SINK}"));
    assert_eq!((e.key.as_str(), e.line), ("host_metrics.interval", Some(2)));
    let e = err(&format!("[host_metrics]\ntop_processes = 5000\n{SINK}"));
    assert_eq!(
        (e.key.as_str(), e.line),
        ("host_metrics.top_processes", Some(2))
    );
    let e = err(&format!("[host_metrics]\ncpus = true\n{SINK}"));
    assert_eq!(e.line, Some(2), "{e}");
    assert!(e.to_string().contains("cpus"), "{e}");
    // Somewhere for the points to go.
    let e = err("[host_metrics]\n");
    assert_eq!(e.key, "sinks");
    let e = err("[host_metrics]\n[[logs]]\nname = \"app\"\ninclude = [\"/var/log/app.log\"]\n[[sinks]]\ntype = \"blackhole\"\ninputs = [\"app\"]\n");
    assert_eq!((e.key.as_str(), e.line), ("host_metrics", Some(1)), "{e}");
}

#[test]
fn the_host_metrics_blocks_of_the_docs_parse() {
    let docs = concat!(
        include_str!("../../../../../docs/INPUTS.md"),
        include_str!("../../../../../docs/CONFIG.md")
    );
    let mut checked = 0;
    for block in docs.split("```toml\n").skip(1) {
        let block = block.split("```").next().unwrap();
        if block.starts_with("[host_metrics]") {
            let c = parse(&format!("{block}{SINK}"))
                .unwrap_or_else(|e| panic!("a [host_metrics] block fails: {e}\n{block}"));
            assert_eq!(c.host_metrics.unwrap().groups.top_processes, 10);
            checked += 1;
        }
    }
    assert_eq!(checked, 2);
}

//! `[profiler]`: its defaults and its keys.

use super::*;

#[test]
fn profiler_section_turns_it_on_with_defaults_and_checks_its_keys() {
    assert_eq!(parse(MIN).unwrap().profiler, None);
    let c = parse("[profiler]\n").unwrap();
    assert_eq!(
        c.profiler,
        Some(Profiler {
            frequency: 19,
            period: Duration::from_secs(60),
            retention: Duration::from_secs(24 * 3600),
            max_bytes: 256 << 20,
            prices: Default::default(),
            classes: Vec::new(),
            store: None,
        })
    );
    let fleet = parse("[profiler]\nstore = \"clickhouse://ch.example:8123/fleet\"\n")
        .unwrap()
        .profiler
        .unwrap();
    assert_eq!(
        fleet.store.as_deref(),
        Some("clickhouse://ch.example:8123/fleet")
    );
    let priced =
        parse("[profiler]\ncore_cost_per_hour = \"0.048 USD\"\nco2_grams_per_core_hour = 20.5\n")
            .unwrap()
            .profiler
            .unwrap()
            .prices;
    assert_eq!(priced.core_cost_per_hour.unwrap().to_string(), "0.048 USD");
    assert_eq!(priced.co2_grams_per_core_hour, Some(20.5));
    assert_eq!(c.receivers.len(), 0, "a profiling-only agent is valid");
    assert_eq!(
        parse("[profiler]\nenabled = false\n")
            .map(|_| ())
            .unwrap_err()
            .key,
        "receivers"
    );
    for (text, key, line) in [
        ("[profiler]\nfrequency = 0\n", "profiler.frequency", 2),
        ("[profiler]\nfrequency = 5000\n", "profiler.frequency", 2),
        ("[profiler]\nperiod = \"500ms\"\n", "profiler.period", 2),
        ("[profiler]\nperiod = \"2h\"\n", "profiler.period", 2),
        (
            "[profiler]\nperiod = \"10m\"\nretention = \"5m\"\n",
            "profiler.retention",
            3,
        ),
        ("[profiler]\nmax_size = \"10KiB\"\n", "profiler.max_size", 2),
        (
            "[profiler]\ncore_cost_per_hour = \"0.048\"\n",
            "profiler.core_cost_per_hour",
            2,
        ),
        (
            "[profiler]\nstore = \"http://ch.example:8123/sonde\"\n",
            "profiler.store",
            2,
        ),
        (
            "[profiler]\nfrequency = 19\nstore = \"clickhouse://ch/not-a-db\"\n",
            "profiler.store",
            3,
        ),
        (
            "[profiler]\nco2_grams_per_core_hour = -1.0\n",
            "profiler.co2_grams_per_core_hour",
            2,
        ),
        (
            "[profiler]\n[[profiler.classes]]\nclass = \"x\"\nfunction = \"(\"\n",
            "profiler.classes",
            2,
        ),
        (
            "[profiler]\n[[profiler.classes]]\nclass = \"x\"\n",
            "profiler.classes",
            2,
        ),
    ] {
        let e = err(text);
        assert_eq!((e.key.as_str(), e.line), (key, Some(line)), "{text}");
    }
    let rules = parse("[profiler]\n[[profiler.classes]]\nclass = \"templating\"\nfunction = \"^render_\"\nremedy = \"cache pages\"\n")
        .unwrap()
        .profiler
        .unwrap()
        .classes;
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0].class, "templating");
    assert_eq!(rules[0].remedy.as_deref(), Some("cache pages"));
    let e = err("[profiler]\nstore = \"clickhouse:///sonde\"\n");
    assert!(e.problem.contains("names no host"), "{e}");
    assert!(e.fix.contains("clickhouse://HOST:PORT/DATABASE"), "{e}");
    assert!(err("[profiler]\nfrequncy = 19\n")
        .to_string()
        .contains("frequncy"));
}

#[test]
fn profiles_go_to_sinks_that_take_them_and_need_a_profiler() {
    let sink = "[[sinks]]\ntype = \"otlp_http\"\nurl = \"http://127.0.0.1:4318/v1/metrics\"\ninputs = [\"profiles\"]\n";
    let c = parse(&format!("[profiler]\n{sink}")).unwrap();
    assert_eq!(c.sinks[0].inputs, [SinkInput::Profiles]);
    assert!(c.sinks[0].takes_profiles() && !c.sinks[0].takes_metrics());
    assert_eq!(c.sinks[0].log_sources().count(), 0);
    // Without a profiler, nothing would come.
    let e = err("[[logs]]\nname = \"app\"\ninclude = [\"/l/*.log\"]\n[[sinks]]\ntype = \"otlp_http\"\nurl = \"http://127.0.0.1:4318/v1/metrics\"\ninputs = [\"app\", \"profiles\"]\n");
    assert_eq!((e.key.as_str(), e.line), ("sinks[0].inputs[1]", Some(7)));
    assert!(e.problem.contains("no [profiler]"), "{e}");
    // A type that does not take them names those that do.
    let e = err("[profiler]\n[[sinks]]\ntype = \"influxdb\"\nurl = \"http://127.0.0.1:8086/write\"\ndatabase = \"d\"\ninputs = [\"profiles\"]\n");
    assert_eq!((e.key.as_str(), e.line), ("sinks[0].inputs[0]", Some(6)));
    assert!(
        e.problem.contains("influxdb sinks do not take profiles"),
        "{e}"
    );
    assert!(e.fix.contains("\"otlp_http\""), "{e}");
    // No log source may take the name.
    let e = err("[[logs]]\nname = \"profiles\"\ninclude = [\"/l/*.log\"]\n");
    assert_eq!(e.key, "logs[0].name");
    assert!(e.problem.contains("the profiler's periods"), "{e}");
}

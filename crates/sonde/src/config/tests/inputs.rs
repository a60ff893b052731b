//! How sinks meet sources: `inputs`, which sink types take log lines, exclusive sinks, DogStatsD events.

use super::*;

#[test]
fn inputs_default_to_metrics_and_keep_their_order() {
    let c = parse(MIN).unwrap();
    assert_eq!(c.sinks[0].inputs, [SinkInput::Metrics]);
    assert!(c.sinks[0].takes_metrics());
    assert!(!c.sinks[0].exclusive_logs);
    assert!(c.logs.is_empty());
    let c = with_app(&format!(
        "{MIN}[[sinks]]\ntype = \"both\"\ninputs = [\"app\", \"metrics\"]\n[[sinks]]\ntype = \"logs_only\"\ninputs = [\"app\"]\n"
    ))
    .unwrap();
    assert_eq!(
        c.sinks[1].inputs,
        [SinkInput::Logs("app".into()), SinkInput::Metrics]
    );
    assert!(!c.sinks[2].takes_metrics());
    assert_eq!(c.sinks[2].log_sources().collect::<Vec<_>>(), ["app"]);
    // Every transport takes `inputs`.
    let (s, _) = net("type = \"tcp\"\naddress = \"a:1\"\ninputs = [\"metrics\"]\n");
    assert_eq!(s.inputs, [SinkInput::Metrics]);
}

#[test]
fn a_log_only_agent_needs_no_receivers() {
    let c = with_app("[[sinks]]\ntype = \"logs_only\"\ninputs = [\"app\"]\n").unwrap();
    assert!(c.receivers.is_empty());
    assert_eq!(c.logs.len(), 1);
    // A source that no sink takes, with no sinks at all.
    let e = app_err("");
    assert_eq!((e.key.as_str(), e.line), ("logs[0].name", Some(2)));
    assert!(e.fix.contains("\"both\", \"logs_only\""), "{e}");
}

#[test]
fn a_log_source_sent_to_a_metrics_only_sink_names_the_types_that_take_logs() {
    // The sink's table starts on line 4, `inputs` is on line 7 (8
    // after a key of the type's own).
    for (ty, own) in [
        ("tcp", "address = \"a:1\"\n"),
        ("graphite", "address = \"a:1\"\n"),
        ("prometheus_remote_write", "url = \"http://a:1/\"\n"),
    ] {
        let e = app_err(&format!(
            "[[sinks]]\ntype = \"{ty}\"\n{own}\ninputs = [\"metrics\", \"app\"]\n"
        ));
        let line = 7 + usize::from(!own.is_empty());
        assert_eq!(
            (e.key.as_str(), e.line),
            ("sinks[0].inputs[1]", Some(line)),
            "{ty}"
        );
        assert!(e.problem.contains("\"app\""), "{e}");
        assert!(e.fix.contains("\"both\", \"logs_only\""), "{e}");
        assert!(!e.fix.contains("\"graphite\""), "{e}");
    }
}

#[test]
fn an_input_that_names_nothing_lists_what_exists() {
    let e = app_err("[[sinks]]\ntype = \"both\"\ninputs = [\"ap\"]\n");
    assert_eq!((e.key.as_str(), e.line), ("sinks[0].inputs[0]", Some(6)));
    assert!(e.problem.contains("\"ap\""), "{e}");
    assert!(
        e.fix
            .contains("\"metrics\", \"profiles\" or one of \"app\""),
        "{e}"
    );
    // Without sources, the fix says how to add one.
    let e = err(&format!("{MIN}inputs = [\"metric\"]\n"));
    assert_eq!((e.key.as_str(), e.line), ("sinks[0].inputs[0]", Some(6)));
    assert!(e.fix.contains("[[logs]]"), "{e}");
}

#[test]
fn inputs_must_be_a_non_empty_list_of_distinct_names() {
    assert_eq!(
        at(&format!("{MIN}inputs = []\n")),
        key("sinks[0].inputs", 6)
    );
    assert_eq!(
        at(&format!("{MIN}inputs = \"metrics\"\n")),
        key("sinks[0].inputs", 6)
    );
    assert_eq!(
        at(&format!("{MIN}inputs = [\"metrics\", 1]\n")),
        key("sinks[0].inputs[1]", 6)
    );
    let e = app_err("[[sinks]]\ntype = \"both\"\ninputs = [\"app\", \"metrics\", \"app\"]\n");
    assert_eq!((e.key.as_str(), e.line), ("sinks[0].inputs[2]", Some(6)));
    assert!(e.problem.contains("inputs[0]"), "{e}");
    assert_eq!(
        at(&format!("{MIN}inputs = [\"metrics\", \"metrics\"]\n")),
        key("sinks[0].inputs[1]", 6)
    );
}

#[test]
fn receivers_need_a_sink_that_takes_metrics() {
    let e = parse_with_log_sinks(&format!(
        "[[logs]]\nname = \"app\"\ninclude = [\"/a/*\"]\n{}",
        MIN.replace(
            "type = \"console\"\n",
            "type = \"both\"\ninputs = [\"app\"]\n"
        )
    ))
    .unwrap_err();
    assert_eq!((e.key.as_str(), e.line), ("receivers[0]", Some(4)));
    assert!(e.fix.contains("\"metrics\""), "{e}");
    // No sinks at all keeps its own message.
    let e = err("[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:1\"\n");
    assert_eq!((e.key.as_str(), e.line), ("sinks", None));
    assert!(e.problem.contains("no [[sinks]]"), "{e}");
}

#[test]
fn a_sink_type_without_metrics_needs_inputs() {
    // `inputs` left out: the error is at the sink's table.
    let e = app_err(
        "[[sinks]]\ntype = \"logs_only\"\ninputs = [\"app\"]\n[[sinks]]\ntype = \"logs_only\"\nname = \"b\"\n",
    );
    assert_eq!((e.key.as_str(), e.line), ("sinks[1].inputs", Some(7)));
    assert!(e.problem.contains("metric windows"), "{e}");
    let e = app_err("[[sinks]]\ntype = \"logs_only\"\ninputs = [\"app\", \"metrics\"]\n");
    assert_eq!((e.key.as_str(), e.line), ("sinks[0].inputs[1]", Some(6)));
}

#[test]
fn a_source_an_exclusive_sink_takes_goes_to_it_alone() {
    let alone = "[[sinks]]\ntype = \"both\"\nalone = true\ninputs = [\"app\"]\n";
    let other = "[[sinks]]\ntype = \"logs_only\"\ninputs = [\"app\"]\n";
    let c = with_app(alone).unwrap();
    assert!(c.sinks[0].exclusive_logs);
    // Either order: the error is at the second sink's entry.
    let e = app_err(&format!("{alone}{other}"));
    assert_eq!((e.key.as_str(), e.line), ("sinks[1].inputs[0]", Some(10)));
    assert!(e.problem.contains("sinks[0]"), "{e}");
    let e = app_err(&format!("{other}{alone}"));
    assert_eq!((e.key.as_str(), e.line), ("sinks[1].inputs[0]", Some(10)));
    assert!(e.problem.contains("sinks[1]"), "{e}");
    // Two sinks that do not need it alone share a source.
    let c = with_app(&format!(
        "{other}{}",
        alone.replace("alone = true", "alone = false")
    ))
    .unwrap();
    assert_eq!(c.sinks.len(), 2);
    // An exclusive sink may take several sources and metrics.
    with_app(&format!(
        "[[logs]]\nname = \"b\"\ninclude = [\"/b/*\"]\n{}",
        alone.replace("[\"app\"]", "[\"app\", \"b\", \"metrics\"]")
    ))
    .unwrap();
}

#[test]
fn dogstatsd_events_need_a_statsd_receiver_and_an_at_least_once_sink() {
    let events = "[[sinks]]\ntype = \"logs_only\"\ninputs = [\"dogstatsd_events\"]\n";
    let c = parse_with_log_sinks(&format!("{MIN}{events}")).unwrap();
    assert_eq!(
        c.sinks[1].log_sources().collect::<Vec<_>>(),
        ["dogstatsd_events"]
    );
    // Only msgpack receivers: no events to take.
    let msgpack = MIN.replace("\"statsd\"", "\"msgpack\"");
    let e = parse_with_log_sinks(&format!("{msgpack}{events}")).unwrap_err();
    assert_eq!((e.key.as_str(), e.line), ("sinks[1].inputs[0]", Some(8)));
    assert!(e.problem.contains("statsd receivers"), "{e}");
    let alone = "[[sinks]]\ntype = \"both\"\nalone = true\ninputs = [\"dogstatsd_events\"]\n";
    let e = parse_with_log_sinks(&format!("{MIN}{alone}")).unwrap_err();
    assert_eq!((e.key.as_str(), e.line), ("sinks[1].inputs[0]", Some(9)));
    assert!(e.problem.contains("exactly once"), "{e}");
    // And no [[logs]] source may take the name.
    let e = parse_with_log_sinks(&format!(
        "{MIN}[[logs]]\nname = \"dogstatsd_events\"\ninclude = [\"/a/*\"]\n{events}"
    ))
    .unwrap_err();
    assert_eq!(e.key, "logs[0].name");
    assert!(e.problem.contains("DogStatsD events"), "{e}");
}

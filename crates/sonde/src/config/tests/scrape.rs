//! `[[scrape]]`.

use super::*;

const SINK: &str = "[[sinks]]\ntype = \"console\"\n";

#[test]
fn a_target_alone_is_a_config_and_its_defaults_apply() {
    let c = parse(&format!(
        "[[scrape]]\nurl = \"http://127.0.0.1:9100/metrics\"\nlabels = {{ env = \"prod\", team = \"infra\" }}\n{SINK}"
    ))
    .unwrap();
    let t = &c.scrape[0];
    assert_eq!(t.url, "http://127.0.0.1:9100/metrics");
    assert_eq!(t.interval, Duration::from_secs(15));
    assert_eq!(t.timeout, Duration::from_secs(5));
    assert_eq!(t.job, "scrape");
    assert_eq!(t.instance, "127.0.0.1:9100");
    assert_eq!(
        t.labels,
        [
            ("env".into(), "prod".into()),
            ("team".into(), "infra".into())
        ]
    );
    assert_eq!(t.max_body_size, 16 << 20);
    // A short interval: 80% of it.
    let c = parse(&format!(
        "[[scrape]]\nurl = \"http://localhost:9100/metrics\"\ninterval = \"1s\"\njob = \"node\"\n{SINK}"
    ))
    .unwrap();
    assert_eq!(c.scrape[0].timeout, Duration::from_millis(800));
    assert_eq!(c.scrape[0].job, "node");
}

#[test]
fn another_host_is_refused_unless_allowed_with_the_key_and_line() {
    let text = format!("[[scrape]]\njob = \"pg\"\nurl = \"http://10.1.2.3:9187/metrics\"\n{SINK}");
    let e = err(&text);
    assert_eq!((e.key.as_str(), e.line), ("scrape[0].url", Some(3)));
    assert!(e.to_string().contains("allow_remote = true"), "{e}");
    let text = format!(
        "[[scrape]]\nurl = \"http://db.example:9187/metrics\"\nallow_remote = true\n{SINK}"
    );
    assert_eq!(parse(&text).unwrap().scrape[0].instance, "db.example:9187");
}

#[test]
fn bad_keys_are_named_at_their_line() {
    let one = |rest: &str| {
        at(&format!(
            "[[scrape]]\nurl = \"http://127.0.0.1:9100/metrics\"\n{rest}\n{SINK}"
        ))
    };
    assert_eq!(one("timeout = \"20s\""), key("scrape[0].timeout", 3));
    assert_eq!(one("interval = \"10ms\""), key("scrape[0].interval", 3));
    assert_eq!(
        one("labels = { job = \"x\" }"),
        key("scrape[0].labels.job", 3)
    );
    assert_eq!(
        one("labels = { \"a-b\" = \"x\" }"),
        key("scrape[0].labels.a-b", 3)
    );
    assert_eq!(
        one("max_body_size = \"0B\""),
        key("scrape[0].max_body_size", 3)
    );
    assert_eq!(one("job = \"\""), key("scrape[0].job", 3));
    assert_eq!(
        at(&format!(
            "[[scrape]]\nurl = \"127.0.0.1:9100/metrics\"\n{SINK}"
        )),
        key("scrape[0].url", 2)
    );
    assert_eq!(
        at(&format!(
            "[[scrape]]\nurl = \"http://127.0.0.1:9100/metrics\"\n[[scrape]]\nurl = \"http://127.0.0.1:9100/metrics\"\n{SINK}"
        )),
        key("scrape[1].url", 4)
    );
    // Points that would go nowhere.
    let e = err("[[scrape]]\nurl = \"http://127.0.0.1:9100/metrics\"\n");
    assert!(e.to_string().contains("sink"), "{e}");
}

#[test]
fn the_example_of_inputs_md_is_valid_and_says_the_defaults() {
    let doc = include_str!("../../../../../docs/INPUTS.md");
    let section = doc.split("## Scraping").nth(1).unwrap();
    let example = section
        .split("```toml\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .unwrap();
    let c = parse(&format!("{example}{SINK}")).unwrap_or_else(|e| panic!("{e}\n{example}"));
    let t = &c.scrape[0];
    let defaults = parse(&format!("[[scrape]]\nurl = \"{}\"\n{SINK}", t.url)).unwrap();
    let d = &defaults.scrape[0];
    // The example writes the defaults out, but for job and labels.
    assert_eq!(
        (t.interval, t.timeout, t.max_body_size),
        (d.interval, d.timeout, d.max_body_size)
    );
    assert_eq!(t.job, "node");
    // Uncommented, `allow_remote` parses.
    let all = example.replace("# allow_remote", "allow_remote");
    assert!(parse(&format!("{all}{SINK}")).is_ok());
}

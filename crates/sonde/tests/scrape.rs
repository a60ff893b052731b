//! `[[scrape]]`: the agent scrapes a real node_exporter and test
//! exporters (tiny HTTP servers on loopback serving text the test sets),
//! and the file sink shows what it made of them.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{named, wait_for, Agent, Json, PortHold};

/// A test exporter: serves `body` with `content_type` at any path, and
/// keeps each request's Accept header and the body it served.
struct Exporter {
    port: u16,
    body: Arc<Mutex<String>>,
    served: Arc<Mutex<Vec<(String, String)>>>,
    server: Arc<tiny_http::Server>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Exporter {
    fn start(content_type: &'static str, body: &str) -> Exporter {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").unwrap());
        let port = server.server_addr().to_ip().unwrap().port();
        let body = Arc::new(Mutex::new(body.to_string()));
        let served = Arc::new(Mutex::new(Vec::new()));
        let thread = {
            let (server, body, served) = (server.clone(), body.clone(), served.clone());
            std::thread::spawn(move || {
                for req in server.incoming_requests() {
                    let accept = req
                        .headers()
                        .iter()
                        .find(|h| h.field.equiv("Accept"))
                        .map(|h| h.value.to_string())
                        .unwrap_or_default();
                    let text = body.lock().unwrap().clone();
                    served.lock().unwrap().push((accept, text.clone()));
                    let header =
                        tiny_http::Header::from_bytes("Content-Type", content_type).unwrap();
                    let _ = req.respond(tiny_http::Response::from_string(text).with_header(header));
                }
            })
        };
        Exporter {
            port,
            body,
            served,
            server,
            thread: Some(thread),
        }
    }

    fn set(&self, body: &str) {
        *self.body.lock().unwrap() = body.to_string();
    }

    /// Waits until the agent has scraped the current body twice.
    fn scraped_twice(&self) {
        let now = self.body.lock().unwrap().clone();
        wait_for("two scrapes of the body", Duration::from_secs(20), || {
            let served = self.served.lock().unwrap();
            (served.iter().rev().take_while(|(_, b)| *b == now).count() >= 2).then_some(())
        });
    }

    fn bodies(&self) -> Vec<String> {
        self.served
            .lock()
            .unwrap()
            .iter()
            .map(|(_, b)| b.clone())
            .collect()
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// An agent with a 1 s window scraping `targets` (`[[scrape]]` tables).
fn agent(targets: &str) -> Agent {
    Agent::start("1s", targets)
}

/// The sum of the points named `name` whose tags include `tags`.
fn sum(points: &[Json], name: &str, tags: &[(&str, &str)]) -> f64 {
    with_tags(points, name, tags).iter().sum()
}

/// The values of the points named `name` whose tags include `tags`, in
/// order.
fn with_tags(points: &[Json], name: &str, tags: &[(&str, &str)]) -> Vec<f64> {
    named(points, name)
        .into_iter()
        .filter(|(t, _, _)| tags.iter().all(|(k, v)| t[*k] == *v))
        .map(|(_, v, _)| v)
        .collect()
}

/// The counters' deltas the semantics give for the values `served`
/// (first scrape nothing, a drop is a reset).
fn expected_deltas(served: &[f64]) -> f64 {
    served
        .windows(2)
        .map(|w| if w[1] >= w[0] { w[1] - w[0] } else { w[1] })
        .sum()
}

#[test]
fn node_exporter_series_arrive_with_the_configured_labels() {
    let bin = "/usr/bin/prometheus-node-exporter";
    assert!(
        std::path::Path::new(bin).exists(),
        "{bin} is missing: apt-get install prometheus-node-exporter (scripts/setup does)"
    );
    let hold = PortHold::new();
    let port = hold.port;
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _exporter = Kill(
        std::process::Command::new(bin)
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for("node_exporter to answer", Duration::from_secs(20), || {
        common::http_get(port, "/metrics")
    });
    drop(hold);
    let a = agent(&format!(
        "[[scrape]]\nurl = \"http://127.0.0.1:{port}/metrics\"\njob = \"node\"\ninterval = \"500ms\"\nlabels = {{ env = \"test\", rack = \"r1\" }}\n"
    ));
    let instance = format!("127.0.0.1:{port}");
    let ours = [
        ("job", "node"),
        ("instance", instance.as_str()),
        ("env", "test"),
        ("rack", "r1"),
    ];
    // A gauge at once, a counter from the second scrape on, the health
    // series with the target's labels.
    wait_for("node_exporter's series", Duration::from_secs(30), || {
        let p = a.points();
        let ok = !with_tags(&p, "node_exporter_build_info", &ours).is_empty()
            && !with_tags(&p, "process_cpu_seconds_total", &ours).is_empty()
            && with_tags(&p, "up", &ours).contains(&1.0)
            && !with_tags(&p, "scrape_duration_seconds", &ours).is_empty();
        ok.then_some(())
    });
    let p = a.points();
    let samples = with_tags(&p, "scrape_samples_scraped", &ours);
    assert!(samples.iter().all(|n| *n > 100.0), "{samples:?}");
    // Every point of the target has its labels.
    let from_target: Vec<&Json> = p
        .iter()
        .filter(|p| p["tags"]["instance"] == instance.as_str())
        .collect();
    assert!(from_target.len() > 100);
    for pt in &from_target {
        assert_eq!(pt["tags"]["job"], "node", "{pt}");
        assert_eq!(pt["tags"]["env"], "test", "{pt}");
    }
    // The input's points are counted as a receiver's.
    let scraped = a
        .metric("sonde_receiver_points_total{receiver=\"scrape\",protocol=\"prometheus\"}")
        .unwrap_or(0.0);
    assert!(scraped > 100.0, "{scraped}");
}

#[test]
fn counter_deltas_are_exact_across_a_reset_and_histograms_map_to_deltas() {
    let body = |reqs: u32, fast: u32, all: u32, sum: f64| {
        format!(
            "# HELP reqs_total Requests.\n# TYPE reqs_total counter\nreqs_total{{code=\"200\",path=\"/a,b:c\"}} {reqs}\n\
# TYPE lat_seconds histogram\nlat_seconds_bucket{{le=\"0.1\"}} {fast}\nlat_seconds_bucket{{le=\"+Inf\"}} {all}\n\
lat_seconds_sum {sum}\nlat_seconds_count {all}\n# TYPE temp gauge\ntemp 21.5\n"
        )
    };
    let e = Exporter::start(
        "text/plain; version=0.0.4; charset=utf-8",
        &body(100, 10, 20, 2.5),
    );
    let a = agent(&format!(
        "[[scrape]]\nurl = \"http://127.0.0.1:{}/metrics\"\njob = \"app\"\ninterval = \"200ms\"\n",
        e.port
    ));
    e.scraped_twice();
    e.set(&body(130, 14, 27, 3.25));
    e.scraped_twice();
    // The exporter restarted: every counter starts again.
    e.set(&body(5, 1, 2, 0.5));
    e.scraped_twice();
    e.set(&body(12, 3, 5, 1.0));
    e.scraped_twice();
    let served = e.bodies();
    let value_of = |prefix: &str| -> Vec<f64> {
        served
            .iter()
            .map(|b| {
                let line = b.lines().find(|l| l.starts_with(prefix)).unwrap();
                line.rsplit(' ').next().unwrap().parse().unwrap()
            })
            .collect()
    };
    let job = [("job", "app")];
    for (name, prefix, tags, want) in [
        (
            "reqs_total",
            "reqs_total",
            // A label value kept byte for byte, `,` and `:` among them.
            vec![("code", "200"), ("path", "/a,b:c")],
            30.0 + 5.0 + 7.0,
        ),
        (
            "lat_seconds_bucket",
            "lat_seconds_bucket{le=\"0.1\"}",
            vec![("le", "0.1")],
            4.0 + 1.0 + 2.0,
        ),
        (
            "lat_seconds_bucket",
            "lat_seconds_bucket{le=\"+Inf\"}",
            vec![("le", "+Inf")],
            7.0 + 2.0 + 3.0,
        ),
        (
            "lat_seconds_count",
            "lat_seconds_count",
            vec![],
            7.0 + 2.0 + 3.0,
        ),
        (
            "lat_seconds_sum",
            "lat_seconds_sum",
            vec![],
            0.75 + 0.5 + 0.5,
        ),
    ] {
        let expected = expected_deltas(&value_of(prefix));
        assert_eq!(expected, want, "{name} {tags:?}");
        let tags: Vec<(&str, &str)> = tags.into_iter().chain(job).collect();
        wait_for(
            &format!("{name} {tags:?} to sum to {want}"),
            Duration::from_secs(10),
            || (sum(&a.points(), name, &tags) == want).then_some(()),
        );
        assert!(with_tags(&a.points(), name, &tags)
            .iter()
            .all(|v| *v >= 0.0));
    }
    // A gauge is its value; `_created` and the family's name alone are
    // not series.
    let p = a.points();
    assert!(with_tags(&p, "temp", &job).iter().all(|v| *v == 21.5));
    assert!(named(&p, "lat_seconds").is_empty() && named(&p, "lat_seconds_created").is_empty());
    // What was asked for: OpenMetrics first, then the 0.0.4 text.
    let accept = e.served.lock().unwrap()[0].0.clone();
    assert!(
        accept.starts_with("application/openmetrics-text;version=1.0.0")
            && accept.contains("text/plain;version=0.0.4"),
        "{accept}"
    );
}

#[test]
fn a_target_that_is_down_shows_up_0_while_another_keeps_arriving() {
    let e = Exporter::start("text/plain; version=0.0.4", "# TYPE temp gauge\ntemp 3\n");
    let down = PortHold::new();
    let a = agent(&format!(
        "[[scrape]]\nurl = \"http://127.0.0.1:{}/metrics\"\njob = \"up\"\ninterval = \"200ms\"\n\
[[scrape]]\nurl = \"http://127.0.0.1:{}/metrics\"\njob = \"down\"\ninterval = \"200ms\"\n",
        e.port, down.port
    ));
    // Several windows: the live target keeps arriving, the dead one says 0.
    wait_for(
        "three windows of both targets",
        Duration::from_secs(20),
        || {
            let p = a.points();
            let downs = with_tags(&p, "up", &[("job", "down")]);
            let ups = with_tags(&p, "up", &[("job", "up")]);
            let temps = with_tags(&p, "temp", &[("job", "up")]);
            (downs.len() >= 3 && ups.len() >= 3 && temps.len() >= 3).then_some((downs, ups))
        },
    );
    let p = a.points();
    assert!(with_tags(&p, "up", &[("job", "down")])
        .iter()
        .all(|v| *v == 0.0));
    assert!(with_tags(&p, "up", &[("job", "up")])
        .iter()
        .all(|v| *v == 1.0));
    assert!(with_tags(&p, "scrape_samples_scraped", &[("job", "down")])
        .iter()
        .all(|v| *v == 0.0));
    assert!(named(&p, "temp").iter().all(|(t, _, _)| t["job"] == "up"));
    // At most one line a minute about the dead target, though it failed
    // every 200 ms.
    let lines = a
        .stderr()
        .lines()
        .filter(|l| l.contains("scrape failed"))
        .count();
    assert_eq!(lines, 1, "{}", a.stderr());
}

#[test]
fn openmetrics_served_with_its_content_type_parses() {
    let body = |n: u32| {
        format!(
            "# TYPE jobs counter\n# HELP jobs Jobs run.\njobs_total{{queue=\"a\"}} {n} # {{trace_id=\"abc\"}} 1.0 1520879607.789\n\
jobs_created{{queue=\"a\"}} 1.6e9\n# TYPE build info\nbuild_info{{version=\"1.2\"}} 1\n# TYPE free gauge\n# UNIT free bytes\nfree 1.5e3\n# EOF\n"
        )
    };
    let e = Exporter::start(
        "application/openmetrics-text; version=1.0.0; charset=utf-8",
        &body(7),
    );
    let a = agent(&format!(
        "[[scrape]]\nurl = \"http://127.0.0.1:{}/metrics\"\ninterval = \"200ms\"\nlabels = {{ queue = \"x\" }}\n",
        e.port
    ));
    e.scraped_twice();
    e.set(&body(19));
    e.scraped_twice();
    // The exposed `queue` clashes with the configured one: kept as
    // `exported_queue`.
    let tags = [("job", "scrape"), ("queue", "x"), ("exported_queue", "a")];
    wait_for("jobs_total to sum to 12", Duration::from_secs(10), || {
        (sum(&a.points(), "jobs_total", &tags) == 12.0).then_some(())
    });
    let p = a.points();
    assert!(named(&p, "jobs_created").is_empty());
    assert!(with_tags(&p, "build_info", &[("version", "1.2")])
        .iter()
        .all(|v| *v == 1.0));
    assert!(!with_tags(&p, "free", &[("job", "scrape")]).is_empty());
    assert_eq!(
        a.metric("sonde_receiver_dropped_total{receiver=\"scrape\",protocol=\"prometheus\",reason=\"malformed_line\"}"),
        Some(0.0)
    );
    // Each scrape is counted once (a batch the worker records), give or
    // take those between the answer and the worker.
    wait_for("scrapes counted once each", Duration::from_secs(10), || {
        let counted = a.metric(
            "sonde_receiver_datagrams_total{receiver=\"scrape\",protocol=\"prometheus\"}",
        )?;
        let served = e.bodies().len() as f64;
        (counted <= served && counted + 2.0 >= served).then_some(())
    });
}

#[test]
fn a_body_over_the_limit_is_refused_and_counted() {
    let big: String = (0..200).map(|i| format!("g{i} {i}\n")).collect();
    let e = Exporter::start("text/plain; version=0.0.4", &big);
    let a = agent(&format!(
        "[[scrape]]\nurl = \"http://127.0.0.1:{}/metrics\"\ninterval = \"200ms\"\nmax_body_size = \"1KiB\"\n",
        e.port
    ));
    wait_for(
        "two oversized bodies counted",
        Duration::from_secs(20),
        || {
            let n = a.metric("sonde_receiver_dropped_total{receiver=\"scrape\",protocol=\"prometheus\",reason=\"oversized\"}")?;
            (n >= 2.0).then_some(())
        },
    );
    wait_for("up 0", Duration::from_secs(10), || {
        (!with_tags(&a.points(), "up", &[("job", "scrape")]).is_empty()).then_some(())
    });
    let p = a.points();
    assert!(with_tags(&p, "up", &[("job", "scrape")])
        .iter()
        .all(|v| *v == 0.0));
    assert!(named(&p, "g1").is_empty());
}

#[test]
fn a_reload_adds_and_removes_targets_and_keeps_the_counters_of_the_others() {
    let body = |n: u32| format!("# TYPE reqs counter\nreqs_total {n}\n");
    let a_exp = Exporter::start("text/plain; version=0.0.4", &body(10));
    let b_exp = Exporter::start("text/plain; version=0.0.4", "# TYPE b gauge\nb 1\n");
    let target = |port: u16, job: &str| {
        format!("\n[[scrape]]\nurl = \"http://127.0.0.1:{port}/metrics\"\njob = \"{job}\"\ninterval = \"200ms\"\n")
    };
    let mut a = agent(&target(a_exp.port, "a"));
    a_exp.scraped_twice();
    let config = std::fs::read_to_string(a.path("sonde.toml")).unwrap();
    let hup = |text: &str| {
        std::fs::write(a.path("sonde.toml"), text).unwrap();
        let ok = std::process::Command::new("kill")
            .args(["-HUP", &a.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok);
    };
    hup(&format!("{config}{}", target(b_exp.port, "b")));
    wait_for("b's points", Duration::from_secs(20), || {
        (!with_tags(&a.points(), "b", &[("job", "b")]).is_empty()).then_some(())
    });
    // a's counter goes on from the value scraped before the reload.
    a_exp.set(&body(25));
    a_exp.scraped_twice();
    wait_for("a's increase of 15", Duration::from_secs(10), || {
        (sum(&a.points(), "reqs_total", &[("job", "a")]) == 15.0).then_some(())
    });
    // a removed: b goes on, a is asked no more (one scrape may be under
    // way as the reload lands).
    hup(&format!(
        "{}{}",
        config.replace(&target(a_exp.port, "a"), ""),
        target(b_exp.port, "b")
    ));
    wait_for("the reload", Duration::from_secs(10), || {
        a.stderr()
            .matches("SIGHUP: config reloaded")
            .nth(1)
            .map(|_| ())
    });
    let before = a_exp.bodies().len();
    let b_before = b_exp.bodies().len();
    wait_for("five more scrapes of b", Duration::from_secs(20), || {
        (b_exp.bodies().len() >= b_before + 5).then_some(())
    });
    assert!(a_exp.bodies().len() <= before + 1);
    // Every target removed (a receiver instead, as a config must have an
    // input): the scrape thread ends, and with it the last sender to its
    // worker, which wakes, hands over its open window and ends too; the
    // agent then stops cleanly.
    hup(&config.replace(
        &target(a_exp.port, "a"),
        &format!("\n{}", common::statsd_receiver(common::free_port())),
    ));
    let scrape_threads = || {
        std::fs::read_dir(format!("/proc/{}/task", a.child.id()))
            .unwrap()
            .flatten()
            .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
            .filter(|name| name.starts_with("scrape"))
            .count()
    };
    wait_for("the scrape threads to end", Duration::from_secs(10), || {
        (scrape_threads() == 0).then_some(())
    });
    a.stop();
}

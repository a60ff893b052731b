//! The kafka sink over TLS and SASL against a real broker with a TLS
//! listener, an mTLS listener, a SASL_SSL listener (PLAIN, SCRAM-SHA-256,
//! SCRAM-SHA-512) and a TLS listener whose certificate names another host
//! (`scripts/kafka-broker.sh`, `SONDE_KAFKA_SECURE`), with certificates
//! this test makes (rcgen): every configuration delivers a file's lines;
//! a wrong password, a wrong CA, a hostname mismatch and a missing client
//! certificate are each refused with the reason on `/metrics` and in the
//! log, nothing is acknowledged, and once the file is fixed and the agent
//! reloaded every line arrives. The lines are read back over plaintext by
//! librdkafka's consumer.
//!
//! Needs the jars `scripts/install-kafka.sh` installs and `java`; without
//! them each test prints why it is skipped, unless
//! `SONDE_REQUIRE_BACKENDS=1` makes that a failure.

mod common;

use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use common::backends::{or_skip, Isolation, Kafka, KafkaCerts};
use common::{wait_for, Agent};

const TIMEOUT: Duration = Duration::from_secs(60);

/// A sink of `type = "kafka"` on `brokers` writing to `topic`, with
/// `security` keys.
fn sink(name: &str, broker: &str, topic: &str, security: &str) -> String {
    format!(
        "[[sinks]]\nname = \"{name}\"\ntype = \"kafka\"\ninputs = [\"app\"]\nbrokers = [\"{broker}\"]\ntopic = \"{topic}\"\nretry_max_backoff = \"500ms\"\n{security}\n"
    )
}

/// Starts an agent that tails `dir/app.log` into `sinks`.
fn agent(logs: &Path, sinks: &str) -> Agent {
    let include = logs.join("app.log");
    Agent::start_config(|admin, dir| {
        format!(
            "[agent]\ninterval = \"1s\"\nadmin_listen = \"127.0.0.1:{admin}\"\ndata_dir = \"{}\"\n\n[[logs]]\nname = \"app\"\ninclude = [\"{}\"]\nrescan_interval = \"200ms\"\n\n{sinks}",
            dir.join("data").display(),
            include.display()
        )
    })
}

/// Appends lines `{prefix}-{i}` for `range` to `dir/app.log`.
fn write_lines(logs: &Path, prefix: &str, range: std::ops::Range<usize>) -> Vec<String> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(logs.join("app.log"))
        .unwrap();
    let lines: Vec<String> = range.map(|i| format!("{prefix}-{i}")).collect();
    for l in &lines {
        writeln!(f, "{l}").unwrap();
    }
    lines
}

fn values(kafka: &Kafka, topic: &str, at_least: usize) -> Vec<String> {
    kafka
        .consume(topic, Isolation::ReadUncommitted, at_least, TIMEOUT)
        .into_iter()
        .map(|r| String::from_utf8(r.value).unwrap())
        .collect()
}

#[test]
fn every_tls_and_sasl_setting_delivers_every_line_once() {
    let certs = KafkaCerts::new();
    let Some(kafka) = or_skip(Kafka::start_secure(certs.dir())) else {
        return;
    };
    let logs = tempfile::tempdir().unwrap();
    let ca = certs.path("ca.pem");
    let password = certs.path("good-password");
    let tls = format!("tls = {{ ca_file = {ca:?} }}");
    let sasl = |mechanism: &str| {
        format!("{tls}\nsasl = {{ mechanism = \"{mechanism}\", username = \"alice\", password_file = {password:?} }}")
    };
    let cases = [
        ("tls", kafka.listener("SSL"), tls.clone()),
        (
            "mtls",
            kafka.listener("MTLS"),
            format!(
                "tls = {{ ca_file = {ca:?}, cert_file = {:?}, key_file = {:?} }}",
                certs.path("client.pem"),
                certs.path("client.key")
            ),
        ),
        ("plain", kafka.listener("SASL_SSL"), sasl("PLAIN")),
        (
            "scram256",
            kafka.listener("SASL_SSL"),
            sasl("SCRAM-SHA-256"),
        ),
        (
            "scram512",
            kafka.listener("SASL_SSL"),
            sasl("SCRAM-SHA-512"),
        ),
        // Off, the name is not checked (the CA still is).
        (
            "anyname",
            kafka.listener("WRONGNAME"),
            format!("tls = {{ ca_file = {ca:?}, verify_hostname = false }}"),
        ),
    ];
    let mut sinks: String = cases
        .iter()
        .map(|(name, broker, security)| sink(name, broker, &format!("sec-{name}"), security))
        .collect();
    // Exactly once takes a source alone: a second source on the same
    // file. Its offsets topic is created and read back over SCRAM too.
    sinks.push_str(&format!(
        "[[logs]]\nname = \"solo\"\ninclude = [{:?}]\nrescan_interval = \"200ms\"\n\n[[sinks]]\nname = \"exactly\"\ntype = \"kafka\"\ninputs = [\"solo\"]\nbrokers = [\"{}\"]\ntopic = \"sec-exactly\"\ndelivery = \"exactly_once\"\noffsets_topic = \"sec-positions\"\n{}\n",
        logs.path().join("app.log"),
        kafka.listener("SASL_SSL"),
        sasl("SCRAM-SHA-256")
    ));
    // Metric windows take the same producer and the same settings.
    let statsd = common::free_port();
    sinks.push_str(&format!(
        "{}\n[[sinks]]\nname = \"points\"\ntype = \"kafka\"\ninputs = [\"metrics\"]\nbrokers = [\"{}\"]\ntopic = \"sec-points\"\nmax_batch_age = \"5ms\"\n{}\n",
        common::statsd_receiver(statsd),
        kafka.listener("SASL_SSL"),
        sasl("SCRAM-SHA-512")
    ));
    let mut sent = write_lines(logs.path(), "line", 0..500);
    let mut agent = agent(logs.path(), &sinks);
    common::udp_send(statsd, b"sec.requests:3|c\nsec.queue:7|g");
    sent.extend(write_lines(logs.path(), "line", 500..1000));
    let mut names: Vec<String> = kafka
        .consume("sec-points", Isolation::ReadUncommitted, 2, TIMEOUT)
        .iter()
        .map(|r| {
            let point: common::Json = serde_json::from_slice(&r.value).unwrap();
            point["name"].as_str().unwrap().to_string()
        })
        .collect();
    names.sort();
    names.dedup();
    assert_eq!(names, ["sec.queue", "sec.requests"]);
    for (name, _, _) in &cases {
        let got = values(&kafka, &format!("sec-{name}"), sent.len());
        assert_eq!(got, sent, "sink {name}");
    }
    let committed = |at_least: usize| -> Vec<String> {
        kafka
            .consume("sec-exactly", Isolation::ReadCommitted, at_least, TIMEOUT)
            .into_iter()
            .map(|r| String::from_utf8(r.value).unwrap())
            .collect()
    };
    assert_eq!(committed(sent.len()), sent, "sink exactly");
    // A restart resumes from the positions read back over SCRAM: the new
    // lines once, nothing again.
    agent.restart();
    sent.extend(write_lines(logs.path(), "line", 1000..1200));
    assert_eq!(committed(sent.len()), sent, "sink exactly after a restart");
    for (name, _, _) in &cases {
        for reason in ["tls", "auth"] {
            assert_eq!(
                agent.metric(&format!(
                    "sonde_sink_failures_total{{sink=\"{name}\",reason=\"{reason}\"}}"
                )),
                Some(0.0),
                "sink {name}"
            );
        }
    }
    let log = agent.stderr();
    assert!(
        log.contains("tls.verify_hostname = false"),
        "no warning of verify_hostname = false:\n{log}"
    );
    assert!(!log.contains("alice-secret"), "{log}");
    agent.stop();
}

#[test]
fn each_refusal_is_said_holds_the_lines_and_a_fixed_file_and_a_reload_deliver_them() {
    let certs = KafkaCerts::new();
    let Some(kafka) = or_skip(Kafka::start_secure(certs.dir())) else {
        return;
    };
    let logs = tempfile::tempdir().unwrap();
    let ca = certs.path("ca.pem");
    // Each case's file starts wrong and is fixed later: the password, the
    // CA file, the client certificate. The certificate that names another
    // host is the broker's, not in a file of sonde's: that case is only
    // refused.
    let password = certs.path("password");
    std::fs::write(&password, "wrong-secret\n").unwrap();
    let trusted = certs.path("trusted.pem");
    std::fs::copy(certs.path("other-ca.pem"), &trusted).unwrap();
    let (client_cert, client_key) = (certs.path("mine.pem"), certs.path("mine.key"));
    let other = rcgen::generate_simple_self_signed(vec!["someone".to_string()]).unwrap();
    std::fs::write(&client_cert, other.cert.pem()).unwrap();
    std::fs::write(&client_key, other.signing_key.serialize_pem()).unwrap();
    let cases: [(&str, String, String, &str, &str); 4] = [
        (
            "password",
            kafka.listener("SASL_SSL"),
            format!("tls = {{ ca_file = {ca:?} }}\nsasl = {{ mechanism = \"SCRAM-SHA-512\", username = \"alice\", password_file = {password:?} }}"),
            "auth",
            "SASL SCRAM-SHA-512 with",
        ),
        (
            "ca",
            kafka.listener("SSL"),
            format!("tls = {{ ca_file = {trusted:?} }}"),
            "tls",
            "not signed by a trusted CA",
        ),
        (
            "client",
            kafka.listener("MTLS"),
            format!("tls = {{ ca_file = {ca:?}, cert_file = {client_cert:?}, key_file = {client_key:?} }}"),
            "tls",
            "refused the client's certificate",
        ),
        (
            "name",
            kafka.listener("WRONGNAME"),
            format!("tls = {{ ca_file = {ca:?} }}"),
            "tls",
            "does not name the host",
        ),
    ];
    let sinks: String = cases
        .iter()
        .map(|(name, broker, security, _, _)| sink(name, broker, &format!("bad-{name}"), security))
        .collect();
    let mut sent = write_lines(logs.path(), "held", 0..300);
    let mut agent = agent(logs.path(), &sinks);
    for (name, _, _, reason, says) in &cases {
        let series = format!("sonde_sink_failures_total{{sink=\"{name}\",reason=\"{reason}\"}}");
        wait_for(&format!("{series} > 0"), TIMEOUT, || {
            agent.metric(&series).filter(|v| *v > 0.0)
        });
        let log = agent.stderr();
        assert!(
            log.lines()
                .any(|l| l.contains(&format!("sink={name}")) && l.contains(says)),
            "sink {name}: no line saying {says:?}:\n{log}"
        );
    }
    // Nothing was acknowledged: the source holds every line.
    for (name, _, _, _, _) in &cases {
        assert_eq!(
            agent.metric(&format!("sonde_sink_records_total{{sink=\"{name}\"}}")),
            Some(0.0),
            "sink {name}"
        );
    }
    assert!(!agent.stderr().contains("wrong-secret"));

    // The fixes: the files, and for the name the config's key.
    std::fs::write(&password, "alice-secret\n").unwrap();
    std::fs::copy(&ca, &trusted).unwrap();
    std::fs::copy(certs.path("client.pem"), &client_cert).unwrap();
    std::fs::copy(certs.path("client.key"), &client_key).unwrap();
    // SIGHUP, as `systemctl reload` sends it.
    let hup = std::process::Command::new("kill")
        .args(["-HUP", &agent.child.id().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    sent.extend(write_lines(logs.path(), "held", 300..600));
    for (name, _, _, _, _) in &cases[..3] {
        assert_eq!(
            values(&kafka, &format!("bad-{name}"), sent.len()),
            sent,
            "sink {name}"
        );
    }
    agent.stop();
}

/// An unsecured JWT (`alg` none), as Kafka's default OAUTHBEARER
/// validator takes them: subject `alice`, expiring `lifetime_s` from now
/// (negative: expired).
fn jwt(lifetime_s: i64) -> String {
    use base64::Engine as _;
    let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    format!(
        "{}.{}.",
        b64(r#"{"alg":"none"}"#),
        b64(&format!(
            r#"{{"sub":"alice","iat":{},"exp":{}}}"#,
            now.min(now + lifetime_s - 1),
            now + lifetime_s
        ))
    )
}

/// An OAuth 2.0 token endpoint for the client credentials grant: it
/// answers a client `sonde` with secret `s3cret` (HTTP Basic) with a token
/// that lives `lifetime_s`, and counts the tokens it gave.
struct TokenEndpoint {
    url: String,
    given: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    server: std::sync::Arc<tiny_http::Server>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TokenEndpoint {
    fn start(lifetime_s: i64) -> TokenEndpoint {
        use base64::Engine as _;
        let server = std::sync::Arc::new(tiny_http::Server::http("127.0.0.1:0").unwrap());
        let port = server.server_addr().to_ip().unwrap().port();
        let given = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let expected = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("sonde:s3cret")
        );
        let (s, g) = (
            std::sync::Arc::clone(&server),
            std::sync::Arc::clone(&given),
        );
        let thread = std::thread::spawn(move || {
            for mut request in s.incoming_requests() {
                let mut body = String::new();
                std::io::Read::read_to_string(request.as_reader(), &mut body).unwrap();
                let authorised = request
                    .headers()
                    .iter()
                    .any(|h| h.field.equiv("Authorization") && h.value.as_str() == expected);
                let response = if authorised && body.contains("grant_type=client_credentials") {
                    g.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    tiny_http::Response::from_string(format!(
                        r#"{{"access_token":"{}","token_type":"bearer","expires_in":{lifetime_s}}}"#,
                        jwt(lifetime_s)
                    ))
                } else {
                    tiny_http::Response::from_string(r#"{"error":"invalid_client"}"#)
                        .with_status_code(401)
                };
                let _ = request.respond(response);
            }
        });
        TokenEndpoint {
            url: format!("http://127.0.0.1:{port}/oauth2/token"),
            given,
            server,
            thread: Some(thread),
        }
    }

    fn given(&self) -> usize {
        self.given.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for TokenEndpoint {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn oauthbearer_tokens_from_a_file_or_an_endpoint_deliver_and_sessions_are_renewed_in_place() {
    let certs = KafkaCerts::new();
    let Some(kafka) = or_skip(Kafka::start_secure(certs.dir())) else {
        return;
    };
    let logs = tempfile::tempdir().unwrap();
    let ca = certs.path("ca.pem");
    let token = certs.path("token");
    std::fs::write(&token, jwt(3600)).unwrap();
    let expired = certs.path("expired-token");
    std::fs::write(&expired, jwt(-60)).unwrap();
    let secret = certs.path("client.secret");
    std::fs::write(&secret, "s3cret\n").unwrap();
    let wrong_secret = certs.path("wrong.secret");
    std::fs::write(&wrong_secret, "guess\n").unwrap();
    // Tokens of 6 s, kept for 4.8 s: a run of 12 s needs new ones, and
    // the broker (sessions of at most 3 s) asks every connection to
    // authenticate again several times.
    let endpoint = TokenEndpoint::start(6);
    let tls = format!("tls = {{ ca_file = {ca:?} }}");
    let broker = kafka.listener("SASL_SSL");
    let mut sinks = String::new();
    for (name, sasl) in [
        ("file", format!("sasl = {{ mechanism = \"OAUTHBEARER\", token_file = {token:?} }}")),
        (
            "endpoint",
            format!(
                "sasl = {{ mechanism = \"OAUTHBEARER\", token_url = \"{}\", client_id = \"sonde\", client_secret_file = {secret:?} }}",
                endpoint.url
            ),
        ),
        ("expired", format!("sasl = {{ mechanism = \"OAUTHBEARER\", token_file = {expired:?} }}")),
        (
            "badclient",
            format!(
                "sasl = {{ mechanism = \"OAUTHBEARER\", token_url = \"{}\", client_id = \"sonde\", client_secret_file = {wrong_secret:?} }}",
                endpoint.url
            ),
        ),
    ] {
        sinks.push_str(&sink(name, &broker, &format!("oauth-{name}"), &format!("{tls}\n{sasl}")));
    }
    // Topics made first: a topic the broker creates on first use is
    // counted as a failed attempt, and every failure here must be zero.
    for name in ["file", "endpoint", "expired", "badclient"] {
        kafka.create_topic(&format!("oauth-{name}"), 1);
    }
    let mut agent = agent(logs.path(), &sinks);
    let mut sent = write_lines(logs.path(), "oauth", 0..50);
    let failures = |agent: &Agent| -> Vec<Option<f64>> {
        let mut all = Vec::new();
        for name in ["file", "endpoint"] {
            for reason in ["connect", "timeout", "io", "tls", "auth"] {
                all.push(agent.metric(&format!(
                    "sonde_sink_failures_total{{sink=\"{name}\",reason=\"{reason}\"}}"
                )));
            }
        }
        all
    };
    // Once the first lines are in (a fresh broker's coordinator may still
    // be loading at the first attempt), nothing may fail.
    for name in ["file", "endpoint"] {
        assert_eq!(
            values(&kafka, &format!("oauth-{name}"), sent.len()),
            sent,
            "sink {name}"
        );
    }
    let before = failures(&agent);
    let started = std::time::Instant::now();
    let mut i = 50;
    // Lines for 12 s, a batch every 200 ms (waiting on the clock is the
    // point here: sessions must run out while lines flow).
    while started.elapsed() < Duration::from_secs(12) {
        sent.extend(write_lines(logs.path(), "oauth", i..i + 50));
        i += 50;
        std::thread::sleep(Duration::from_millis(200));
    }
    for name in ["file", "endpoint"] {
        assert_eq!(
            values(&kafka, &format!("oauth-{name}"), sent.len()),
            sent,
            "sink {name}"
        );
    }
    assert_eq!(
        failures(&agent),
        before,
        "every session renewed in place, no connection lost:\n{}",
        agent.stderr()
    );
    assert!(
        endpoint.given() >= 2,
        "the token endpoint gave {} tokens in 12 s of 6 s tokens",
        endpoint.given()
    );
    // The expired token is refused, said, and nothing is acknowledged;
    // a renewed token file is read at the next attempt.
    let series = "sonde_sink_failures_total{sink=\"expired\",reason=\"auth\"}";
    assert!(agent.metric(series).unwrap() > 0.0);
    assert_eq!(
        agent.metric("sonde_sink_records_total{sink=\"expired\"}"),
        Some(0.0)
    );
    let log = agent.stderr();
    assert!(
        log.lines()
            .any(|l| l.contains("sink=expired") && l.contains("SASL OAUTHBEARER with")),
        "{log}"
    );
    // A client the endpoint refuses: its answer is said.
    assert!(
        agent
            .metric("sonde_sink_failures_total{sink=\"badclient\",reason=\"auth\"}")
            .unwrap()
            > 0.0
    );
    assert!(
        log.lines().any(|l| l.contains("sink=badclient")
            && l.contains("SASL credentials with")
            && l.contains("answered 401: {\"error\":\"invalid_client\"}")),
        "{log}"
    );
    std::fs::write(&expired, jwt(3600)).unwrap();
    assert_eq!(values(&kafka, "oauth-expired", sent.len()), sent);
    assert!(!log.contains("s3cret"));
    agent.stop();
}

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
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::backends::{or_skip, Isolation, Kafka};
use common::{wait_for, Agent};

const TIMEOUT: Duration = Duration::from_secs(60);

/// The certificates of the test, as PEM files.
struct Certs {
    dir: tempfile::TempDir,
}

impl Certs {
    /// A CA; the broker's certificate for 127.0.0.1 and one for
    /// `kafka.invalid`, both with their key first (Kafka's PEM keystore);
    /// a client certificate the CA signed; another CA that signed nothing
    /// the broker shows.
    fn new() -> Certs {
        let dir = tempfile::tempdir().unwrap();
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "sonde test CA");
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let leaf = |names: Vec<String>, path: &str, separate_key: bool| {
            let key = rcgen::KeyPair::generate().unwrap();
            let cert = rcgen::CertificateParams::new(names)
                .unwrap()
                .signed_by(&key, &issuer)
                .unwrap();
            if separate_key {
                std::fs::write(dir.path().join(format!("{path}.pem")), cert.pem()).unwrap();
                std::fs::write(dir.path().join(format!("{path}.key")), key.serialize_pem())
                    .unwrap();
            } else {
                std::fs::write(
                    dir.path().join(format!("{path}.pem")),
                    format!("{}{}", key.serialize_pem(), cert.pem()),
                )
                .unwrap();
            }
        };
        leaf(
            vec!["127.0.0.1".into(), "localhost".into()],
            "broker",
            false,
        );
        leaf(vec!["kafka.invalid".into()], "wrong-name", false);
        leaf(vec!["sonde-agent".into()], "client", true);
        std::fs::write(dir.path().join("ca.pem"), ca_cert.pem()).unwrap();
        let other_key = rcgen::KeyPair::generate().unwrap();
        let mut other = rcgen::CertificateParams::new(Vec::new()).unwrap();
        other.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        std::fs::write(
            dir.path().join("other-ca.pem"),
            other.self_signed(&other_key).unwrap().pem(),
        )
        .unwrap();
        std::fs::write(dir.path().join("good-password"), "alice-secret\n").unwrap();
        Certs { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

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
    let certs = Certs::new();
    let Some(kafka) = or_skip(Kafka::start_secure(certs.dir.path())) else {
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
    let certs = Certs::new();
    let Some(kafka) = or_skip(Kafka::start_secure(certs.dir.path())) else {
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

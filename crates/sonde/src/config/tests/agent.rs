//! The `[agent]` section: host name, series limits, the admin site's address, token, TLS and socket file, and listening beyond loopback.

use super::*;

#[test]
fn a_hostname_is_one_word_of_1_to_253_characters() {
    let c = parse(&format!("[agent]\nhostname = \"web-1\"\n{MIN}")).unwrap();
    assert_eq!(
        c.agent.hostname.as_ref().map(|h| h.get_ref().as_str()),
        Some("web-1")
    );
    assert!(parse(MIN).unwrap().agent.hostname.is_none());
    for bad in ["\"\"", "\"web 1\"", "\"a\\tb\""] {
        assert_eq!(
            at(&format!("[agent]\nhostname = {bad}\n{MIN}")),
            key("agent.hostname", 2),
            "{bad}"
        );
    }
}

#[test]
fn series_limits_default_to_250k_and_no_per_metric_limit() {
    let c = parse(MIN).unwrap();
    assert_eq!(c.aggregate.max_series, 250_000);
    assert_eq!(c.aggregate.max_series_per_metric, None);
    let c = parse(&format!(
        "[agent]\nmax_series = 10\nmax_series_per_metric = 3\n{MIN}"
    ))
    .unwrap();
    assert_eq!(c.aggregate.max_series, 10);
    assert_eq!(c.aggregate.max_series_per_metric, Some(3));
    assert_eq!(
        at(&format!("[agent]\nmax_series = 0\n{MIN}")),
        key("agent.max_series", 2)
    );
    assert_eq!(
        at(&format!("[agent]\n\nmax_series_per_metric = 0\n{MIN}")),
        key("agent.max_series_per_metric", 3)
    );
    assert_eq!(
        at(&format!("[agent]\nmax_series = -1\n{MIN}")),
        key("agent.max_series", 2)
    );
    assert_eq!(parse(MIN).unwrap().aggregate.max_key_bytes, 4096);
    let c = parse(&format!("[agent]\nmax_key_size = \"1KiB\"\n{MIN}")).unwrap();
    assert_eq!(c.aggregate.max_key_bytes, 1024);
    assert_eq!(
        at(&format!("[agent]\nmax_key_size = \"1MiB\"\n{MIN}")),
        key("agent.max_key_size", 2)
    );
    assert_eq!(
        at(&format!("[agent]\nbackground_nice = 20\n{MIN}")),
        key("agent.background_nice", 2)
    );
}

#[test]
fn an_admin_site_other_hosts_reach_needs_the_token_and_tls() {
    let open = "[agent]\nallow_non_loopback = true\nadmin_listen = \"0.0.0.0:8686\"\n";
    let token = "admin_auth = \"token\"\n";
    let tls = "admin_tls = { cert_file = \"/etc/sonde/admin.crt\", key_file = \"/etc/sonde/admin.key\" }\n";
    let e = err(&format!("{open}{MIN}"));
    assert_eq!((e.key.as_str(), e.line), ("agent.admin_listen", Some(3)));
    assert!(
        e.problem
            .contains("admin_auth is \"none\" and agent.admin_tls is not set"),
        "{e}"
    );
    assert!(
        e.fix.contains("admin_auth = \"token\" and admin_tls = {"),
        "{e}"
    );
    // The token alone: it would cross the network in the clear.
    let e = err(&format!("{open}{token}{MIN}"));
    assert_eq!((e.key.as_str(), e.line), ("agent.admin_listen", Some(3)));
    assert!(e.problem.contains("agent.admin_tls is not set"), "{e}");
    assert!(!e.problem.contains("admin_auth"), "{e}");
    assert!(e.fix.starts_with("set admin_tls = {"), "{e}");
    // TLS alone: anyone who reaches it reads it.
    let e = err(&format!("{open}{tls}{MIN}"));
    assert_eq!((e.key.as_str(), e.line), ("agent.admin_listen", Some(3)));
    assert!(e.problem.contains("agent.admin_auth is \"none\""), "{e}");
    assert!(e.fix.starts_with("set admin_auth = \"token\""), "{e}");
    parse(&format!("{open}{token}{tls}{MIN}")).unwrap();
    // Loopback needs neither.
    parse(&format!(
        "[agent]\nadmin_listen = \"127.0.0.1:8686\"\n{MIN}"
    ))
    .unwrap();
}

#[test]
fn a_unix_admin_listen_takes_a_mode_and_a_group_and_no_tls() {
    let unix = "[agent]\nadmin_listen = \"unix:///run/sonde/admin.sock\"\n";
    let c = parse(&format!("{unix}{MIN}")).unwrap();
    assert_eq!(
        c.agent.admin_socket(),
        Some(std::path::Path::new("/run/sonde/admin.sock"))
    );
    assert_eq!(c.agent.admin(), None);
    assert_eq!(c.agent.admin_socket_mode(), 0o660);
    let c = parse(&format!(
        "{unix}admin_socket_mode = \"0600\"\nadmin_socket_group = \"sonde\"\nadmin_auth = \"token\"\n{MIN}"
    ))
    .unwrap();
    assert_eq!(c.agent.admin_socket_mode(), 0o600);
    assert_eq!(c.agent.admin_auth, AdminAuth::Token);

    let e = err(&format!("{unix}admin_socket_mode = \"0999\"\n{MIN}"));
    assert_eq!(
        (e.key.as_str(), e.line),
        ("agent.admin_socket_mode", Some(3))
    );
    assert!(e.fix.contains("\"0660\""), "{e}");
    // TLS on a socket file: refused at admin_tls, in either form.
    let tls = "admin_tls = { cert_file = \"/etc/sonde/admin.crt\", key_file = \"/etc/sonde/admin.key\" }\n";
    let e = err(&format!("{unix}admin_auth = \"token\"\n{tls}{MIN}"));
    assert_eq!((e.key.as_str(), e.line), ("agent.admin_tls", Some(4)));
    assert!(
        e.problem
            .starts_with("TLS on the socket file /run/sonde/admin.sock:"),
        "{e}"
    );
    assert!(e.fix.starts_with("remove admin_tls"), "{e}");
    let e = err(&format!(
        "{MIN}{unix}[agent.admin_tls]\ncert_file = \"a.crt\"\nkey_file = \"a.key\"\n"
    ));
    assert_eq!(e.key, "agent.admin_tls");
    assert_eq!(e.line, Some(9));
    // The mode and group of a socket that is not there.
    for key in [
        "admin_socket_mode = \"0660\"",
        "admin_socket_group = \"sonde\"",
    ] {
        let e = err(&format!("[agent]\n{key}\n{MIN}"));
        let field = key.split(' ').next().unwrap();
        assert_eq!(
            (e.key.as_str(), e.line),
            (format!("agent.{field}").as_str(), Some(2))
        );
        assert!(e.fix.contains("unix:///run/sonde/admin.sock"), "{e}");
    }
    // One file, one listener.
    let e = err(&format!(
        "{unix}[[receivers]]\nprotocol = \"statsd\"\nlisten = \"unix:///run/sonde/admin.sock\"\n{MIN}"
    ));
    assert_eq!((e.key.as_str(), e.line), ("agent.admin_listen", Some(2)));
    assert!(e.problem.contains("is also receivers[0].listen"), "{e}");
    // Only unix:// of the receivers' schemes, and an absolute path.
    for (addr, says) in [
        ("udp://127.0.0.1:8686", "udp:// is not an admin address"),
        (
            "unixgram:///run/a.sock",
            "unixgram:// is not an admin address",
        ),
        ("unix://run/a.sock", "needs an absolute path"),
    ] {
        let e = err(&format!("[agent]\nadmin_listen = \"{addr}\"\n{MIN}"));
        assert_eq!(
            (e.key.as_str(), e.line),
            ("agent.admin_listen", Some(2)),
            "{addr}"
        );
        assert!(e.to_string().contains(says), "{addr}: {e}");
    }
}

#[test]
fn admin_tls_takes_its_files_in_either_form_of_table_and_no_other_key() {
    let tls = "admin_tls = { cert_file = \"/etc/sonde/admin.crt\", key_file = \"/etc/sonde/admin.key\" }\n";
    let c = parse(&format!("[agent]\n{tls}{MIN}")).unwrap();
    let t = c.agent.admin_tls.as_ref().unwrap();
    assert_eq!(
        t.cert_file.get_ref(),
        &PathBuf::from("/etc/sonde/admin.crt")
    );
    assert!(t.ca_file.is_none());
    assert_eq!(c.agent.admin_scheme(), "https");
    let c = parse(&format!(
        "{MIN}[agent.admin_tls]\ncert_file = \"a.crt\"\nkey_file = \"a.key\"\nca_file = \"ca.pem\"\n"
    ))
    .unwrap();
    let t = c.agent.admin_tls.as_ref().unwrap();
    assert_eq!(
        t.ca_file.as_ref().unwrap().get_ref(),
        &PathBuf::from("ca.pem")
    );
    assert_eq!(parse(MIN).unwrap().agent.admin_scheme(), "http");
    let e = err(&format!(
        "[agent]\nadmin_tls = {{ cert_file = \"a\", key_file = \"b\", key_pass = \"c\" }}\n{MIN}"
    ));
    assert_eq!(e.line, Some(2), "{e}");
    assert!(e.problem.contains("unknown field `key_pass`"), "{e}");
    let e = err(&format!(
        "[agent]\nadmin_tls = {{ cert_file = \"a\" }}\n{MIN}"
    ));
    assert_eq!(e.line, Some(2), "{e}");
    assert!(e.problem.contains("missing field `key_file`"), "{e}");
}

#[test]
fn listening_beyond_loopback_needs_allow_non_loopback() {
    let recv = |addr: &str| {
        format!("[[receivers]]\nprotocol = \"statsd\"\nlisten = \"{addr}\"\n[[sinks]]\ntype = \"console\"\n")
    };
    for addr in [
        "udp://0.0.0.0:8125",
        "tcp://[::]:8125",
        "udp://10.1.2.3:8125",
    ] {
        let e = err(&recv(addr));
        assert_eq!((e.key.as_str(), e.line), ("receivers[0].listen", Some(3)));
        assert!(e.fix.contains("allow_non_loopback = true"), "{e}");
        parse(&format!(
            "[agent]\nallow_non_loopback = true\n{}",
            recv(addr)
        ))
        .unwrap();
    }
    for addr in [
        "udp://127.0.0.1:8125",
        "udp://127.1.2.3:8125",
        "udp://[::1]:8125",
        "udp://[::ffff:127.0.0.1]:8125",
        "udp://localhost:8125",
        "unixgram:///tmp/x.sock",
    ] {
        parse(&recv(addr)).unwrap_or_else(|e| panic!("{addr}: {e}"));
    }
    let e = err(&format!("[agent]\nadmin_listen = \"0.0.0.0:8686\"\n{MIN}"));
    assert_eq!((e.key.as_str(), e.line), ("agent.admin_listen", Some(2)));
    assert!(e.fix.contains("allow_non_loopback"), "{e}");
    assert_eq!(
        at(&format!(
            "{MIN}[[sinks]]\ntype = \"prometheus_exporter\"\nlisten = \"0.0.0.0:9102\"\n"
        )),
        key("sinks[1].listen", 8)
    );
    // A sink's listener may not take the admin listener's address.
    assert_eq!(
        at(&format!(
            "{MIN}[[sinks]]\ntype = \"prometheus_exporter\"\nlisten = \"127.0.0.1:8686\"\n"
        )),
        key("sinks[1].listen", 8)
    );
    // The embedded defaults listen on loopback only.
    assert_eq!(
        parse(DEFAULT_CONFIG).unwrap().agent.admin(),
        Some(([127, 0, 0, 1], 8686).into())
    );
}

#[test]
fn an_empty_admin_listen_turns_it_off() {
    let c = parse(&format!("[agent]\nadmin_listen = \"\"\n{MIN}")).unwrap();
    assert!(c.agent.admin().is_none());
}

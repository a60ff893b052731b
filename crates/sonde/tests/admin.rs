//! The admin site's authentication (`agent.admin_auth = "token"`) in the
//! real binary: every path but `/health` refused without the token, as
//! any local user would try it; the token file's mode; the sign-in a
//! browser makes with the address `sonde admin-url` prints; HTTPS
//! (`agent.admin_tls`) as curl sees it, with and without the CA; a unix
//! socket file whose mode decides who connects.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{free_port, sonde, statsd_receiver, Agent};

/// An agent whose admin site asks for its token.
fn agent() -> Agent {
    Agent::start_config(|admin, dir| {
        format!(
            "[agent]\nadmin_listen = \"127.0.0.1:{admin}\"\ndata_dir = \"{}\"\nadmin_auth = \"token\"\n\n{}\n[[sinks]]\ntype = \"blackhole\"\n",
            dir.join("data").display(),
            statsd_receiver(free_port()),
        )
    })
}

/// A response: status, head (hyper writes header names in lower case),
/// body.
struct Answer {
    status: u16,
    head: String,
    body: String,
}

/// One HTTP/1.0 request with `headers` (and a form `body` for POST).
fn request(port: u16, method: &str, path: &str, headers: &[String], body: &str) -> Answer {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    exchange(s, method, path, headers, body)
}

/// One HTTP/1.0 GET over the unix socket file `socket`; the error is
/// what connecting said.
fn unix_get(socket: &Path, path: &str, headers: &[String]) -> std::io::Result<Answer> {
    let s = UnixStream::connect(socket)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    Ok(exchange(s, "GET", path, headers, ""))
}

/// Writes one request on `s` and reads the answer to its end.
fn exchange(
    mut s: impl Read + Write,
    method: &str,
    path: &str,
    headers: &[String],
    body: &str,
) -> Answer {
    let mut req = format!("{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n");
    for h in headers {
        req.push_str(&format!("{h}\r\n"));
    }
    if method == "POST" {
        req.push_str(&format!(
            "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).unwrap();
    let resp = String::from_utf8_lossy(&resp).into_owned();
    let (head, body) = resp.split_once("\r\n\r\n").unwrap_or((&resp, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Answer {
        status,
        head: head.to_string(),
        body: body.to_string(),
    }
}

fn get(port: u16, path: &str, headers: &[String]) -> Answer {
    request(port, "GET", path, headers, "")
}

fn token_of(agent: &Agent) -> String {
    std::fs::read_to_string(agent.path("data/admin.token"))
        .unwrap()
        .trim()
        .to_string()
}

/// Every path the admin site serves, and one it does not.
const PATHS: [&str; 12] = [
    "/",
    "/profiles",
    "/metrics",
    "/api/metrics",
    "/api/profiles/top",
    "/api/profiles/processes",
    "/api/profiles/pprof",
    "/api/tap?what=points",
    "/api/tap?what=names",
    "/debug/pprof/profile?seconds=1",
    "/debug/pprof/flamegraph?seconds=1",
    "/no/such/path",
];

#[test]
fn every_path_but_health_needs_the_token_and_refusals_are_counted() {
    let agent = agent();
    let port = agent.admin;
    let token = token_of(&agent);
    assert_eq!(token.len(), 64);
    // The file: the agent's user's, read by it and its group only.
    let meta = std::fs::metadata(agent.path("data/admin.token")).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o640);
    // SAFETY: geteuid has no preconditions.
    assert_eq!(meta.uid(), unsafe { libc::geteuid() });

    assert_eq!(get(port, "/health", &[]).body, "ok\n");
    let mut one_byte = token.clone().into_bytes();
    one_byte[10] = if one_byte[10] == b'a' { b'b' } else { b'a' };
    let one_byte = String::from_utf8(one_byte).unwrap();
    let wrong = [
        vec![],
        vec!["Authorization:".to_string()],
        vec!["Authorization: Bearer".to_string()],
        vec![format!("Authorization: Bearer {}", &token[..63])],
        vec![format!("Authorization: Bearer {token}0")],
        vec![format!("Authorization: Bearer {one_byte}")],
        vec![format!("Authorization: Basic {token}")],
        vec![format!("Cookie: sonde_admin={one_byte}")],
    ];
    let mut refused = 0;
    for path in PATHS {
        for headers in &wrong {
            let a = get(port, path, headers);
            assert_eq!(a.status, 401, "{path} {headers:?}: {}", a.head);
            assert!(
                a.head.contains("www-authenticate: Bearer realm=\"sonde\""),
                "{}",
                a.head
            );
            // Nothing of the data: no metric, no process, no function.
            assert!(
                !a.body.contains("sonde_") && !a.body.contains("\"pid\""),
                "{path}: {}",
                a.body
            );
            refused += 1;
        }
    }
    // The pages answer with the form to sign in, and nothing else.
    let page = get(port, "/", &[]);
    assert!(page
        .body
        .contains("<form method=\"post\" action=\"/login\">"));
    assert!(!page.body.contains("/api/metrics"), "{}", page.body);

    let bearer = [format!("Authorization: Bearer {token}")];
    for path in PATHS {
        let a = get(port, path, &bearer);
        assert_ne!(a.status, 401, "{path}: {}", a.head);
    }
    assert!(get(port, "/metrics", &bearer)
        .body
        .contains("sonde_receiver"));
    let counted = get(port, "/metrics", &bearer)
        .body
        .lines()
        .find_map(|l| l.strip_prefix("sonde_admin_unauthorized_total "))
        .map(|v| v.trim().parse::<f64>().unwrap());
    assert_eq!(
        counted,
        Some(f64::from(refused) + 1.0),
        "the page above too"
    );

    // Any other local user, by the network, is refused as well.
    let as_nobody = Command::new("setpriv")
        .args([
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "curl",
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            &format!("http://127.0.0.1:{port}/api/profiles/processes"),
        ])
        .output();
    if let Some(out) = as_nobody.ok().filter(|o| o.status.success()) {
        assert_eq!(String::from_utf8_lossy(&out.stdout), "401");
    }
}

#[test]
fn a_browser_signs_in_once_and_no_address_keeps_the_token() {
    let agent = agent();
    let port = agent.admin;
    let token = token_of(&agent);
    let config = agent.path("sonde.toml");
    let (ok, url, err) = sonde(&["admin-url", "--config", config.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert_eq!(
        url.trim(),
        format!("http://127.0.0.1:{port}/login?token={token}")
    );
    let (ok, alone, _) = sonde(&["admin-url", "--token", "-c", config.to_str().unwrap()]);
    assert!(ok && alone.trim() == token, "{alone}");

    // The address signs in: a cookie for every later page, and on to /
    // without the token.
    let path = url
        .trim()
        .strip_prefix(&format!("http://127.0.0.1:{port}"))
        .unwrap();
    let signed = get(port, path, &[]);
    assert_eq!(signed.status, 303, "{}", signed.head);
    assert!(
        signed.head.contains("\r\nlocation: /\r\n"),
        "{}",
        signed.head
    );
    let cookie_line = signed
        .head
        .lines()
        .find(|l| l.starts_with("set-cookie: "))
        .unwrap_or_else(|| panic!("{}", signed.head));
    assert_eq!(
        cookie_line,
        format!("set-cookie: sonde_admin={token}; Path=/; HttpOnly; SameSite=Strict")
    );
    let cookie = [format!("Cookie: sonde_admin={token}")];
    let page = get(port, "/", &cookie);
    assert_eq!(page.status, 200);
    assert!(page.body.contains("/api/metrics"));
    assert_eq!(get(port, "/api/metrics", &cookie).status, 200);
    // The page's links hold no token.
    assert!(!page.body.contains(&token));

    // The form: a wrong token is refused and said so; the right one signs
    // in as the address did.
    let form = get(port, "/login", &[]);
    assert_eq!(form.status, 200);
    let refused = request(port, "POST", "/login", &[], "token=nope");
    assert_eq!(refused.status, 401);
    assert!(refused.body.contains("not this agent's token"));
    assert!(!refused.head.contains("set-cookie"));
    let posted = request(port, "POST", "/login", &[], &format!("token={token}"));
    assert_eq!(posted.status, 303);
    assert!(posted.head.contains(&format!("sonde_admin={token}")));
    // A body past 4 KiB is refused before it is read whole.
    let long = request(port, "POST", "/login", &[], &"t".repeat(10_000));
    assert_eq!(long.status, 413);
}

#[test]
fn without_admin_auth_the_site_is_open_and_admin_url_says_so() {
    let agent = Agent::start("1h", &statsd_receiver(free_port()));
    assert_eq!(get(agent.admin, "/metrics", &[]).status, 200);
    let (ok, url, _) = sonde(&[
        "admin-url",
        "--config",
        agent.path("sonde.toml").to_str().unwrap(),
    ]);
    assert!(ok);
    assert_eq!(url.trim(), format!("http://127.0.0.1:{}/", agent.admin));
    assert!(!agent.path("data/admin.token").exists());
}

/// The pages in headless Chromium: the sign-in form and nothing else
/// without the token; the agent at a glance, its receiver's row filled in
/// from `/api/metrics` by the page's own requests, once the address
/// `sonde admin-url` prints was opened (the cookie, then `/`).
#[test]
fn the_pages_in_chromium_show_the_data_only_after_signing_in() {
    let Some(chromium) = common::browser::chromium() else {
        return;
    };
    let port = free_port();
    let agent = Agent::start_config(|admin, dir| {
        format!(
            "[agent]\nadmin_listen = \"127.0.0.1:{admin}\"\ndata_dir = \"{}\"\nadmin_auth = \"token\"\n\n{}\n[[sinks]]\ntype = \"blackhole\"\n",
            dir.join("data").display(),
            statsd_receiver(port),
        )
    });
    let row = format!("<tr data-name=\"udp://127.0.0.1:{port}\"");
    let outside = common::browser::render_page(
        &chromium,
        &format!("http://127.0.0.1:{}/", agent.admin),
        None,
    );
    assert!(outside.contains("Admin token"), "{outside}");
    assert!(!outside.contains(&row), "{outside}");

    let config = agent.path("sonde.toml");
    let (ok, url, err) = sonde(&["admin-url", "--config", config.to_str().unwrap()]);
    assert!(ok, "{err}");
    let inside = common::browser::render_page(&chromium, url.trim(), None);
    assert!(inside.contains(&row), "{inside}");
    assert!(!inside.contains("Admin token"), "{inside}");
}

/// What a client cannot make the admin site hold: a request target over
/// 8 KiB (414), a head over 16 KiB (431), a 65th open connection (503,
/// closed); each refusal counted, and the site serving again once the
/// connections are gone.
#[test]
fn oversized_requests_and_too_many_connections_are_refused_and_counted() {
    let agent = Agent::start("1h", &statsd_receiver(free_port()));
    let port = agent.admin;
    let long = format!("/metrics?pad={}", "a".repeat(10_000));
    assert_eq!(get(port, &long, &[]).status, 414);
    let big_header = [format!("X-Pad: {}", "b".repeat(20_000))];
    assert_eq!(get(port, "/metrics", &big_header).status, 431);

    let open: Vec<TcpStream> = (0..64)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    let busy = get(port, "/metrics", &[]);
    assert_eq!(busy.status, 503, "{}", busy.head);
    assert!(busy.body.contains("too many connections"));
    drop(open);
    let metrics = common::wait_for("the site to serve again", Duration::from_secs(20), || {
        let a = get(port, "/metrics", &[]);
        (a.status == 200).then_some(a.body)
    });
    let value = |name: &str| {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .map(|v| v.trim().parse::<f64>().unwrap())
    };
    assert_eq!(value("sonde_admin_too_large_total"), Some(2.0));
    assert_eq!(value("sonde_admin_connections_refused_total"), Some(1.0));
}

/// A CA and a certificate it issued for 127.0.0.1, written to `dir` as
/// `ca.pem`, `cert.pem` and `key.pem`.
fn write_pki(dir: &std::path::Path) {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "sonde test CA");
    let ca =
        rcgen::CertifiedIssuer::self_signed(params, rcgen::KeyPair::generate().unwrap()).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    std::fs::write(dir.join("ca.pem"), ca.as_ref().pem()).unwrap();
    std::fs::write(dir.join("cert.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), key.serialize_pem()).unwrap();
}

/// curl with `args`: whether it succeeded, its output and its errors.
fn curl(args: &[&str]) -> (bool, String, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20"])
        .args(args)
        .output()
        .expect("curl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn over_tls_curl_with_the_ca_reads_the_site_and_without_it_reads_nothing() {
    let agent = Agent::start_config_until(
        |admin, dir| {
            write_pki(dir);
            format!(
                "[agent]\nadmin_listen = \"127.0.0.1:{admin}\"\ndata_dir = \"{}\"\nadmin_auth = \"token\"\nadmin_tls = {{ cert_file = \"{}\", key_file = \"{}\", ca_file = \"{}\" }}\n\n{}\n[[sinks]]\ntype = \"blackhole\"\n",
                dir.join("data").display(),
                dir.join("cert.pem").display(),
                dir.join("key.pem").display(),
                dir.join("ca.pem").display(),
                statsd_receiver(free_port()),
            )
        },
        |agent| {
            let ca = agent.path("ca.pem");
            let url = format!("https://127.0.0.1:{}/health", agent.admin);
            curl(&["--cacert", ca.to_str().unwrap(), &url]).1 == "ok\n"
        },
    );
    let port = agent.admin;
    let ca = agent.path("ca.pem");
    let ca = ca.to_str().unwrap();
    let token = token_of(&agent);
    let bearer = format!("Authorization: Bearer {token}");
    let https = |path: &str| format!("https://127.0.0.1:{port}{path}");
    let metrics = || {
        let (ok, body, err) = curl(&["--cacert", ca, "-H", &bearer, &https("/metrics")]);
        assert!(ok, "{err}");
        body
    };
    let failures = |body: &str| {
        body.lines()
            .find_map(|l| l.strip_prefix("sonde_admin_tls_handshake_failures_total "))
            .map(|v| v.trim().parse::<f64>().unwrap())
    };
    let body = metrics();
    assert!(body.contains("sonde_receiver"), "{body}");
    assert_eq!(failures(&body), Some(0.0), "{body}");
    // The token is still asked for over TLS.
    let (ok, status, err) = curl(&[
        "--cacert",
        ca,
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        &https("/metrics"),
    ]);
    assert!(ok && status == "401", "{status} {err}");

    // Without the CA: a certificate error (curl's 60), and nothing read.
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20", "-H", &bearer, &https("/metrics")])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(60), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("certificate"),
        "{out:?}"
    );
    // Plain HTTP to the port: no answer of HTTP.
    let (ok, body, _) = curl(&["-H", &bearer, &format!("http://127.0.0.1:{port}/metrics")]);
    assert!(!ok && body.is_empty(), "{body}");
    let a = get(port, "/metrics", std::slice::from_ref(&bearer));
    assert_eq!((a.status, a.body.as_str()), (0, ""), "{}", a.head);
    // Each counted, once the agent has seen the client's alert or bytes.
    common::wait_for("three failed handshakes", Duration::from_secs(20), || {
        (failures(&metrics()) == Some(3.0)).then_some(())
    });

    // The address sonde admin-url prints is the HTTPS one, and signs in
    // with a cookie browsers keep to HTTPS.
    let config = agent.path("sonde.toml");
    let (ok, url, err) = sonde(&["admin-url", "--config", config.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert_eq!(url.trim(), https(&format!("/login?token={token}")));
    let (ok, head, err) = curl(&["--cacert", ca, "-D", "-", "-o", "/dev/null", url.trim()]);
    assert!(ok, "{err}");
    assert!(head.starts_with("HTTP/1.1 303"), "{head}");
    assert!(
        head.contains(&format!(
            "set-cookie: sonde_admin={token}; Path=/; HttpOnly; SameSite=Strict; Secure\r\n"
        )),
        "{head}"
    );

    // sonde's own client reads the site over TLS, trusting ca_file.
    let (ok, top, err) = sonde(&[
        "top",
        "--json",
        "--count",
        "1",
        "--config",
        config.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(
        top.trim_start().starts_with('{') && top.contains("\"receivers\""),
        "{top}"
    );

    // A renewed certificate, from a new CA, is served after a SIGHUP; the
    // old CA no longer checks it.
    std::fs::copy(agent.path("ca.pem"), agent.path("old-ca.pem")).unwrap();
    write_pki(agent.dir.path());
    let hup = Command::new("kill")
        .args(["-HUP", &agent.child.id().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    common::wait_for("the renewed certificate", Duration::from_secs(20), || {
        curl(&["--cacert", ca, &https("/health")]).0.then_some(())
    });
    let old = agent.path("old-ca.pem");
    let (ok, body, err) = curl(&["--cacert", old.to_str().unwrap(), &https("/health")]);
    assert!(!ok && body.is_empty(), "{body} {err}");
    assert!(
        agent
            .stderr()
            .contains("SIGHUP: the admin site's certificate and key read again"),
        "{}",
        agent.stderr()
    );
}

#[test]
fn validate_refuses_an_admin_site_for_other_hosts_without_the_token_or_tls() {
    let dir = tempfile::tempdir().unwrap();
    write_pki(dir.path());
    let tls = format!(
        "admin_tls = {{ cert_file = \"{}\", key_file = \"{}\" }}\n",
        dir.path().join("cert.pem").display(),
        dir.path().join("key.pem").display()
    );
    let open = "[agent]\nallow_non_loopback = true\nadmin_listen = \"0.0.0.0:8686\"\n";
    let rest = format!(
        "data_dir = \"{}\"\n{}[[sinks]]\ntype = \"blackhole\"\n",
        dir.path().join("data").display(),
        statsd_receiver(8125)
    );
    let validate = |text: &str| {
        let path = dir.path().join("sonde.toml");
        std::fs::write(&path, text).unwrap();
        sonde(&["validate", "--config", path.to_str().unwrap()])
    };
    let (ok, _, err) = validate(&format!("{open}admin_auth = \"token\"\n{rest}"));
    assert!(!ok);
    assert!(
        err.contains("line 3: agent.admin_listen: 0.0.0.0:8686 is reachable from other hosts, and agent.admin_tls is not set"),
        "{err}"
    );
    assert!(err.contains("fix: set admin_tls = {"), "{err}");
    let (ok, _, err) = validate(&format!("{open}{tls}{rest}"));
    assert!(!ok);
    assert!(
        err.contains("line 3: agent.admin_listen: 0.0.0.0:8686 is reachable from other hosts, and agent.admin_auth is \"none\""),
        "{err}"
    );
    // The files are read: a key of another certificate is refused.
    let other = rcgen::KeyPair::generate().unwrap();
    std::fs::write(dir.path().join("other.pem"), other.serialize_pem()).unwrap();
    let (ok, _, err) = validate(&format!(
        "{open}admin_auth = \"token\"\n{}{rest}",
        tls.replace("key.pem", "other.pem")
    ));
    assert!(!ok);
    assert!(
        err.contains("line 5: agent.admin_tls.key_file: the key in"),
        "{err}"
    );
    let (ok, out, err) = validate(&format!("{open}admin_auth = \"token\"\n{tls}{rest}"));
    assert!(ok, "{out}{err}");
}

/// Runs `args` as `nobody` (setpriv), when this test runs as root:
/// whether it succeeded, its output and its errors. `None` as any other
/// user, who cannot become another.
fn as_nobody(args: &[&str]) -> Option<(bool, String, String)> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let out = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .args(args)
        .output()
        .expect("setpriv");
    Some((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// An agent whose admin site listens on `admin.sock` in its directory,
/// with `extra` keys in `[agent]`, receiving StatsD on `statsd`. The
/// directory may be entered by any user, so that the socket file's own
/// mode decides who connects.
fn unix_agent(statsd: u16, extra: &str) -> Agent {
    Agent::start_config_until(
        |_, dir| {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
            format!(
                "[agent]\nadmin_listen = \"unix://{}\"\ndata_dir = \"{}\"\n{extra}\n{}\n[[sinks]]\ntype = \"blackhole\"\n",
                dir.join("admin.sock").display(),
                dir.join("data").display(),
                statsd_receiver(statsd),
            )
        },
        unix_healthy,
    )
}

/// Whether the agent's socket file answers `/health`.
fn unix_healthy(agent: &Agent) -> bool {
    unix_get(&agent.path("admin.sock"), "/health", &[]).is_ok_and(|a| a.body == "ok\n")
}

#[test]
fn on_a_unix_socket_the_files_mode_decides_who_connects_and_the_file_goes_at_stop() {
    let mut agent = unix_agent(free_port(), "");
    let socket = agent.path("admin.sock");
    let path = socket.to_str().unwrap();
    // The default mode: the agent's user and group, no one else.
    let meta = std::fs::symlink_metadata(&socket).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.mode() & 0o777, 0o660);
    // SAFETY: geteuid and getegid have no preconditions.
    assert_eq!((meta.uid(), meta.gid()), unsafe {
        (libc::geteuid(), libc::getegid())
    });

    // The agent's user reads everything: admin_auth is "none".
    let (ok, metrics, err) = curl(&["--unix-socket", path, "http://sonde/metrics"]);
    assert!(ok, "{err}");
    assert!(metrics.contains("sonde_receiver"), "{metrics}");
    // Any other user cannot even connect (curl's 7), and sonde's client
    // says why and what to do.
    let config = agent.path("sonde.toml");
    let config = config.to_str().unwrap();
    if let Some((ok, body, err)) = as_nobody(&[
        "curl",
        "-sS",
        "-w",
        "%{http_code}",
        "--unix-socket",
        path,
        "http://sonde/metrics",
    ]) {
        assert!(!ok && body == "000", "{body} {err}");
        assert!(err.starts_with("curl: (7)"), "{err}");
        let bin = env!("CARGO_BIN_EXE_sonde");
        let (ok, out, err) =
            as_nobody(&[bin, "top", "--json", "--count", "1", "--config", config]).unwrap();
        assert!(!ok, "{out}");
        assert!(err.contains("Permission denied (os error 13)"), "{err}");
        assert!(err.contains("agent.admin_socket_mode"), "{err}");
    }

    // sonde's own commands read the site through the file.
    let (ok, top, err) = sonde(&["top", "--json", "--count", "1", "--config", config]);
    assert!(ok, "{err}");
    assert!(
        top.trim_start().starts_with('{') && top.contains("\"receivers\""),
        "{top}"
    );
    let (ok, url, err) = sonde(&["admin-url", "--config", config]);
    assert!(ok, "{err}");
    assert_eq!(
        url.trim(),
        format!("curl --unix-socket {path} http://sonde/")
    );
    assert!(err.contains("a browser cannot open"), "{err}");

    agent.stop();
    assert!(!socket.exists(), "the socket file outlived the agent");
}

#[test]
fn on_a_socket_anyone_may_open_the_token_is_still_asked_for() {
    let statsd = free_port();
    let agent = unix_agent(
        statsd,
        "admin_socket_mode = \"0666\"\nadmin_auth = \"token\"\n",
    );
    let socket = agent.path("admin.sock");
    let path = socket.to_str().unwrap();
    let meta = std::fs::symlink_metadata(&socket).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o666);
    let token = token_of(&agent);
    let bearer = format!("Authorization: Bearer {token}");

    // Without the token: refused, and nothing of the data.
    let a = unix_get(&socket, "/metrics", &[]).unwrap();
    assert_eq!(a.status, 401, "{}", a.head);
    assert!(!a.body.contains("sonde_"), "{}", a.body);
    let mut refused = 1;
    if let Some((ok, status, err)) = as_nobody(&[
        "curl",
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "--unix-socket",
        path,
        "http://sonde/api/profiles/processes",
    ]) {
        assert!(ok && status == "401", "{status} {err}");
        refused += 1;
    }
    let a = unix_get(&socket, "/metrics", std::slice::from_ref(&bearer)).unwrap();
    assert_eq!(a.status, 200, "{}", a.head);
    assert!(
        a.body
            .contains(&format!("sonde_admin_unauthorized_total {refused}\n")),
        "{}",
        a.body
    );
    // Probes still need nothing.
    assert_eq!(unix_get(&socket, "/health", &[]).unwrap().body, "ok\n");

    // sonde's client reads the token as the agent's user does.
    let config = agent.path("sonde.toml");
    let config = config.to_str().unwrap();
    let (ok, top, err) = sonde(&["top", "--json", "--count", "1", "--config", config]);
    assert!(ok, "{err}");
    assert!(top.contains("\"receivers\""), "{top}");
    let (ok, url, err) = sonde(&["admin-url", "--config", config]);
    assert!(ok, "{err}");
    assert_eq!(
        url.trim(),
        format!("curl --unix-socket {path} -H 'Authorization: Bearer {token}' http://sonde/")
    );
    let (ok, alone, _) = sonde(&["admin-url", "--token", "--config", config]);
    assert!(ok && alone.trim() == token, "{alone}");
    // The load generator counts what the agent received through it too.
    let pid = agent.child.id().to_string();
    let (ok, out, err) = sonde(&[
        "bench",
        "--to",
        &format!("udp://127.0.0.1:{statsd}"),
        "--rate",
        "5k",
        "--duration",
        "1s",
        "--config",
        config,
        "--pid",
        &pid,
        "--json",
    ]);
    assert!(ok, "{err}");
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    let sent = r["points_sent"].as_u64().unwrap();
    assert!(sent > 0, "{out}");
    assert_eq!(r["points_accounted"].as_u64(), Some(sent), "{out}");
    // Another user may connect, but not read the token.
    if let Some((ok, _, err)) = as_nobody(&[
        env!("CARGO_BIN_EXE_sonde"),
        "top",
        "--json",
        "--count",
        "1",
        "--config",
        config,
    ]) {
        assert!(!ok);
        assert!(err.contains("reading the admin token"), "{err}");
    }
}

#[test]
fn a_socket_file_left_by_a_killed_agent_is_cleared_at_the_next_start() {
    let mut agent = unix_agent(free_port(), "");
    let socket = agent.path("admin.sock");
    agent.kill();
    // SIGKILL runs no cleanup: the file stays, and nobody accepts on it.
    assert!(std::fs::symlink_metadata(&socket)
        .unwrap()
        .file_type()
        .is_socket());
    assert_eq!(
        UnixStream::connect(&socket).unwrap_err().kind(),
        std::io::ErrorKind::ConnectionRefused
    );
    agent.start_again_until(unix_healthy);
    assert_eq!(std::fs::metadata(&socket).unwrap().mode() & 0o777, 0o660);

    // A live one is another agent's: a second agent is refused, and the
    // first keeps its file.
    let second = agent.path("second.toml");
    let text = std::fs::read_to_string(agent.path("sonde.toml"))
        .unwrap()
        .replace("udp://127.0.0.1:", "udp://127.0.0.2:");
    std::fs::write(&second, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sonde"))
        .args(["run", "--config", second.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("another process is serving that socket file"),
        "{err}"
    );
    assert!(unix_healthy(&agent));
}

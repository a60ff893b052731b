//! `sonde-bench` against a UDP socket of the test's own: what it reports
//! sending is what arrived, datagram by datagram and point by point.

use std::net::UdpSocket;
use std::process::Command;
use std::time::Duration;

#[test]
fn the_report_counts_what_was_sent() {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let port = socket.local_addr().unwrap().port();
    let mut bench = Command::new(env!("CARGO_BIN_EXE_sonde-bench"))
        .args(["--to", &format!("udp://127.0.0.1:{port}")])
        .args(["--rate", "20k", "--duration", "1s", "--series", "50"])
        .args(["--admin", "none", "--json"])
        .args(["--pid", &std::process::id().to_string()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (mut datagrams, mut points) = (0u64, 0u64);
    let mut buf = vec![0u8; 65_536];
    // Receive until the bench has exited and the socket stayed quiet for
    // a read timeout: every datagram sent is queued by then.
    loop {
        match socket.recv(&mut buf) {
            Ok(n) => {
                datagrams += 1;
                points += buf[..n]
                    .split(|&b| b == b'\n')
                    .filter(|l| !l.is_empty())
                    .count() as u64;
            }
            Err(_) if bench.try_wait().unwrap().is_some() => break,
            Err(_) => {}
        }
    }
    let out = bench.wait_with_output().unwrap();
    assert!(out.status.success(), "sonde-bench failed");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["datagrams_sent"].as_u64(),
        Some(datagrams),
        "{report}"
    );
    assert_eq!(report["points_sent"].as_u64(), Some(points), "{report}");
    // 20k points/s for 1 s, within what a busy machine's pacing allows.
    assert!(
        (10_000..=21_000).contains(&points),
        "{points} points: {report}"
    );
}

#[test]
fn a_target_that_is_not_a_datagram_socket_is_refused_with_the_fix() {
    let out = Command::new(env!("CARGO_BIN_EXE_sonde-bench"))
        .args(["--to", "tcp://127.0.0.1:1", "--admin", "none"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("use udp:// or unixgram://"), "{err}");
}

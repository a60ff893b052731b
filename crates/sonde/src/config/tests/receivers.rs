//! `[[receivers]]`: addresses, duplicates, protocols per transport, socket files, workers and buffers.

use super::*;

#[test]
fn bad_addresses_name_the_line() {
    let e = err("[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp:/127.0.0.1\"\n[[sinks]]\ntype = \"console\"\n");
    assert_eq!((e.key.as_str(), e.line), ("receivers[0].listen", Some(3)));
    assert!(e.problem.contains("unknown scheme"), "{e}");
}

#[test]
fn duplicate_listen_addresses_name_both_lines() {
    let e = err(&format!(
        "{MIN}[[receivers]]\nprotocol = \"msgpack\"\nlisten = \"udp://127.0.0.1:8125\"\n"
    ));
    assert_eq!((e.key.as_str(), e.line), ("receivers[1].listen", Some(8)));
    assert!(e.problem.contains("line 3"), "{e}");
}

#[test]
fn msgpack_over_a_stream_is_refused() {
    let e = err("[[receivers]]\nprotocol = \"msgpack\"\nlisten = \"tcp://127.0.0.1:9000\"\n[[sinks]]\ntype = \"console\"\n");
    assert_eq!((e.key.as_str(), e.line), ("receivers[0].listen", Some(3)));
    assert!(e.problem.contains("msgpack"), "{e}");
}

#[test]
fn unix_socket_files_take_a_mode_owner_and_group() {
    let unix = "[[receivers]]\nprotocol = \"msgpack\"\nlisten = \"unixgram:///tmp/m.sock\"\n";
    let c = parse(&format!("{unix}[[sinks]]\ntype = \"console\"\n")).unwrap();
    assert_eq!(c.receivers[0].options.mode, 0o666);
    let c = parse(&format!(
        "{unix}mode = \"0660\"\nowner = \"nobody\"\ngroup = \"0\"\n[[sinks]]\ntype = \"console\"\n"
    ))
    .unwrap();
    assert_eq!(c.receivers[0].options.mode, 0o660);
    assert_eq!(c.receivers[0].owner.as_deref(), Some("nobody"));
    assert_eq!(c.receivers[0].group.as_deref(), Some("0"));
    for bad in ["\"660x\"", "\"1777\"", "\"\"", "\"rw-rw----\""] {
        assert_eq!(
            at(&format!(
                "{unix}mode = {bad}\n[[sinks]]\ntype = \"console\"\n"
            )),
            key("receivers[0].mode", 4),
            "{bad}"
        );
    }
    let e = err(&MIN.replace(
        "listen = \"udp://127.0.0.1:8125\"\n",
        "listen = \"udp://127.0.0.1:8125\"\nmode = \"0600\"\n",
    ));
    assert_eq!((e.key.as_str(), e.line), ("receivers[0].mode", Some(4)));
    assert!(e.problem.contains("unix socket files only"), "{e}");
}

#[test]
fn workers_and_receive_buffers_are_checked() {
    let c = parse("[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:8125\"\nworkers = 2\nreceive_buffer = \"16MiB\"\n[[sinks]]\ntype = \"console\"\n").unwrap();
    assert_eq!(
        c.receivers[0].options,
        SocketOptions {
            workers: 2,
            receive_buffer: 16 << 20,
            ..SocketOptions::default()
        }
    );
    let e = err("[[receivers]]\nprotocol = \"statsd\"\nlisten = \"tcp://127.0.0.1:8125\"\nworkers = 2\n[[sinks]]\ntype = \"console\"\n");
    assert_eq!((e.key.as_str(), e.line), ("receivers[0].workers", Some(4)));
    assert!(e.problem.contains("udp://"), "{e}");
    assert_eq!(
        at("[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:8125\"\nworkers = 0\n[[sinks]]\ntype = \"console\"\n"),
        key("receivers[0].workers", 4)
    );
    let e = err("[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:8125\"\nreceive_buffer = \"8 MB\"\n[[sinks]]\ntype = \"console\"\n");
    assert_eq!(
        (e.key.as_str(), e.line),
        ("receivers[0].receive_buffer", Some(4))
    );
    assert!(e.fix.contains("MiB"), "{e}");
}

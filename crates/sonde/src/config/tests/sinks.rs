//! `[[sinks]]`: names, the network sinks' defaults and mistakes, unknown types and keys.

use super::*;

#[test]
fn network_sinks_default_to_what_their_backend_accepts() {
    let (s, rw) =
        net("type = \"prometheus_remote_write\"\nurl = \"http://127.0.0.1:9090/api/v1/write\"\n");
    assert_eq!(
        (s.name.as_str(), rw.compression),
        ("prometheus_remote_write", Compression::Snappy)
    );
    assert_eq!(rw.buffer, Buffer::Memory(64 << 20));
    assert_eq!(rw.delivery, Delivery::default());
    let (_, influx) =
        net("type = \"influxdb\"\nurl = \"http://127.0.0.1:8086/\"\ndatabase = \"my db\"\n");
    assert_eq!(
        influx.target,
        "http://127.0.0.1:8086/write?db=my%20db&precision=s"
    );
    assert_eq!(influx.compression, Compression::Gzip { level: 1 });
    let (s, http) = net("type = \"http\"\nurl = \"https://example.com/in\"\nformat = \"msgpack\"\ncompression_level = 3\n");
    assert_eq!(s.option("format"), Some("msgpack"));
    assert_eq!(http.compression, Compression::Zstd { level: 3 });
    let (_, tcp) = net("type = \"tcp\"\naddress = \"localhost:9000\"\nmax_batch_points = 5\nmax_batch_age = \"0s\"\nbuffer = { type = \"disk\", max_size = \"2GiB\" }\n");
    assert_eq!(
        (tcp.compression, tcp.delivery.max_batch_points),
        (Compression::None, 5)
    );
    assert_eq!(tcp.delivery.max_batch_age, Duration::ZERO);
    assert_eq!(
        tcp.buffer,
        Buffer::Disk {
            dir: PathBuf::from("/var/lib/sonde/buffers/tcp"),
            max_size: 2 << 30,
            sync: true
        }
    );
    let (g, _) = net("type = \"graphite\"\naddress = \"127.0.0.1:2003\"\nname = \"carbon-a\"\n");
    assert_eq!((g.name.as_str(), g.kind.name), ("carbon-a", "graphite"));
}

#[test]
fn every_sink_type_takes_a_name_and_no_two_sinks_share_one() {
    for (ty, own) in [
        ("console", ""),
        ("file", "path = \"/tmp/points.jsonl\"\n"),
        ("prometheus_exporter", "listen = \"127.0.0.1:9102\"\n"),
        ("blackhole", ""),
        ("tcp", "address = \"127.0.0.1:9000\"\n"),
    ] {
        let c = parse(&format!(
            "{MIN}[[sinks]]\ntype = \"{ty}\"\n{own}name = \"mine\"\n"
        ))
        .unwrap_or_else(|e| panic!("{ty}: {e}"));
        assert_eq!(c.sinks[1].name, "mine", "{ty}");
    }
    assert_eq!(
        parse(&format!(
            "{MIN}[[sinks]]\ntype = \"file\"\npath = \"/tmp/p\"\n"
        ))
        .unwrap()
        .sinks[1]
            .name,
        "file:/tmp/p"
    );
    // Two consoles would label their series alike on /metrics.
    let e = err(&format!("{MIN}[[sinks]]\ntype = \"console\"\n"));
    assert_eq!((e.key.as_str(), e.line), ("sinks[1].name", Some(6)));
    assert!(e.problem.contains("sinks[0]"), "{e}");
    parse(&format!(
        "{MIN}[[sinks]]\ntype = \"console\"\nname = \"second\"\n"
    ))
    .unwrap();
    assert_eq!(
        at(&format!(
            "{MIN}[[sinks]]\ntype = \"file\"\npath = \"a\"\nname = \"\"\n"
        )),
        key("sinks[1].name", 9)
    );
}

#[test]
fn network_sink_mistakes_name_the_key_and_the_line() {
    // The sink's table starts on line 6, its `type` is on line 7.
    let e = |extra: &str| at(&format!("{MIN}[[sinks]]\n{extra}"));
    let rw = err(&format!(
        "{MIN}[[sinks]]\ntype = \"prometheus_remote_write\"\nurl = \"http://a:1/\"\ncompression = \"zstd\"\n"
    ));
    assert_eq!(
        (rw.key.as_str(), rw.line),
        ("sinks[1].compression", Some(9))
    );
    assert!(rw.fix.contains("\"snappy\""), "{rw}");
    assert_eq!(
        e("type = \"influxdb\"\nurl = \"http://a:1\"\n"),
        key("sinks[1].database", 6)
    );
    let g = err(&format!(
        "{MIN}[[sinks]]\ntype = \"graphite\"\nurl = \"http://a:1\"\n"
    ));
    assert_eq!((g.key.as_str(), g.line), ("sinks[1].url", Some(8)));
    assert!(g.fix.contains("address = "), "{g}");
    let h = err(&format!(
        "{MIN}[[sinks]]\ntype = \"http\"\naddress = \"a:1\"\n"
    ));
    assert_eq!((h.key.as_str(), h.line), ("sinks[1].address", Some(8)));
    assert!(h.fix.contains("url = "), "{h}");
    assert_eq!(
        e("type = \"http\"\nurl = \"ftp://a\"\n"),
        key("sinks[1].url", 8)
    );
    assert_eq!(
        e("type = \"tcp\"\naddress = \"nowhere\"\n"),
        key("sinks[1].address", 8)
    );
    assert_eq!(
        e("type = \"http\"\nurl = \"http://a:1\"\ncompression_level = 40\n"),
        key("sinks[1].compression_level", 9)
    );
    assert_eq!(
        e("type = \"http\"\nurl = \"http://a:1\"\nbuffer = { type = \"tape\" }\n"),
        key("sinks[1].buffer.type", 9)
    );
    assert_eq!(
        e("type = \"http\"\nurl = \"http://a:1\"\nheaders = { \"Content-Type\" = \"x\" }\n"),
        key("sinks[1].headers", 9)
    );
    assert_eq!(
        e("type = \"http\"\nurl = \"http://a:1\"\nbatch_size = 1\n"),
        key("sinks[1].batch_size", 9)
    );
    assert_eq!(
        e("type = \"graphite\"\naddress = \"a:1\"\nheaders = { A = \"b\" }\n"),
        key("sinks[1].headers", 9)
    );
    assert_eq!(
        e("type = \"http\"\nurl = \"http://a:1\"\nformat = \"xml\"\n"),
        key("sinks[1].format", 9)
    );
    assert_eq!(
        e("type = \"tcp\"\naddress = \"a:1\"\nmax_batch_age = \"1 sec\"\n"),
        key("sinks[1].max_batch_age", 9)
    );
    let two =
        "type = \"http\"\nurl = \"http://a:1\"\n[[sinks]]\ntype = \"http\"\nurl = \"http://b:1\"\n";
    let e2 = err(&format!("{MIN}[[sinks]]\n{two}"));
    assert_eq!((e2.key.as_str(), e2.line), ("sinks[2].name", Some(9)));
    assert!(e2.problem.contains("sinks[1]"), "{e2}");
}

#[test]
fn unknown_sink_types_list_the_registry_and_unknown_keys_are_errors() {
    let e = err(&format!("{MIN}[[sinks]]\ntype = \"nats\"\n"));
    assert_eq!((e.key.as_str(), e.line), ("sinks[1].type", Some(7)));
    assert!(e.problem.contains("nats"), "{e}");
    for t in sonde_sinks::registry::REGISTRY {
        assert!(e.fix.contains(&format!("\"{}\"", t.name)), "{e}");
    }
    assert_eq!(
        at(&format!("{MIN}[[sinks]]\nname = \"x\"\n")),
        key("sinks[1]", 6)
    );
    let e = err(&format!(
        "{MIN}[[sinks]]\ntype = \"file\"\npath = \"a\"\nmode = 1\n"
    ));
    assert_eq!((e.key.as_str(), e.line), ("sinks[1].mode", Some(9)));
    assert!(e.fix.contains("`path`"), "{e}");
    assert_eq!(
        at(&format!("{MIN}[[sinks]]\ntype = \"file\"\n")),
        key("sinks[1].path", 6)
    );
}

//! `sonde send`: one point to a running agent, in either protocol.

use std::io::Write;

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use sonde_proto::{DropReason, Point, PointSink};
use sonde_runtime::addr::ListenAddr;

/// The wire protocol to send.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum Wire {
    /// metricserver2 msgpack (default address udp://127.0.0.1:9123).
    Msgpack,
    /// StatsD text (default address udp://127.0.0.1:8125).
    Statsd,
}

/// Arguments of `sonde send`.
#[derive(Args, Debug)]
pub struct SendArgs {
    /// The protocol.
    #[arg(long, value_enum, default_value = "msgpack")]
    pub protocol: Wire,
    /// Where the agent listens (udp://, unixgram://, unixseq://, unix://, tcp://).
    #[arg(long)]
    pub to: Option<String>,
    /// msgpack: counter, rate_counter, meter, timer, store, ts_store,
    /// histogram. StatsD: counter (c), gauge (g), timer (ms), histogram (h),
    /// distribution (d), set (s).
    pub r#type: String,
    /// The metric name.
    pub name: String,
    /// The value (a set member for StatsD sets).
    pub value: String,
    /// A tag as key=value; repeat for more.
    #[arg(long = "tag", short = 't')]
    pub tags: Vec<String>,
    /// Client timestamp in unix seconds (msgpack ts_store, StatsD |T).
    #[arg(long)]
    pub ts: Option<i64>,
    /// StatsD sample rate in (0, 1].
    #[arg(long)]
    pub rate: Option<f64>,
}

/// Characters a name, tag key or tag value cannot hold in each protocol:
/// msgpack separates tags with `|` or space and pairs with `=`; StatsD
/// separates fields with `|`, values with `:`, tags with `,`.
fn forbidden(protocol: Wire) -> (&'static [char], &'static [char]) {
    match protocol {
        Wire::Msgpack => (&['|', ' ', '\n', '\r'], &['|', ' ', '=', '\n', '\r']),
        Wire::Statsd => (
            &['|', ':', ' ', '\n', '\r'],
            &['|', ',', ':', ' ', '=', '\n', '\r'],
        ),
    }
}

fn split_tag(t: &str, protocol: Wire) -> anyhow::Result<(&str, &str)> {
    let (k, v) = t
        .split_once('=')
        .with_context(|| format!("tag {t:?} is not key=value"))?;
    let bad = forbidden(protocol).1;
    if k.is_empty() || k.contains(bad) || v.contains(bad) {
        let list: String = bad.iter().map(|c| format!("{c:?} ")).collect();
        bail!("tag {t:?}: the key cannot be empty, and neither key nor value can contain any of {list}");
    }
    Ok((k, v))
}

/// Encodes the point as the bytes the agent receives.
pub fn encode(a: &SendArgs) -> anyhow::Result<Vec<u8>> {
    let bad = forbidden(a.protocol).0;
    if a.name.is_empty() || a.name.contains(bad) {
        let list: String = bad.iter().map(|c| format!("{c:?} ")).collect();
        bail!("name {:?} cannot be empty or contain any of {list}", a.name);
    }
    let tags = a
        .tags
        .iter()
        .map(|t| split_tag(t, a.protocol))
        .collect::<anyhow::Result<Vec<_>>>()?;
    match a.protocol {
        Wire::Msgpack => {
            const TYPES: [&str; 7] = [
                "counter",
                "rate_counter",
                "meter",
                "timer",
                "store",
                "ts_store",
                "histogram",
            ];
            if !TYPES.contains(&a.r#type.as_str()) {
                bail!(
                    "msgpack type {:?} is not one of {}",
                    a.r#type,
                    TYPES.join(", ")
                );
            }
            let tags: Vec<String> = tags.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let ts = a.ts.map(|t| t.to_string()).unwrap_or_default();
            let mut out = Vec::new();
            sonde_client::wire::write_message(
                &mut out,
                &a.r#type,
                &a.name,
                &a.value,
                &tags.join("|"),
                &ts,
            );
            Ok(out)
        }
        Wire::Statsd => {
            let ty = match a.r#type.as_str() {
                "counter" | "c" => "c",
                "gauge" | "g" => "g",
                "timer" | "ms" => "ms",
                "histogram" | "h" => "h",
                "distribution" | "d" => "d",
                "set" | "s" => "s",
                other => bail!("StatsD type {other:?} is not one of counter, gauge, timer, histogram, distribution, set"),
            };
            let mut line = format!("{}:{}|{ty}", a.name, a.value);
            if let Some(r) = a.rate {
                line.push_str(&format!("|@{r}"));
            }
            if !tags.is_empty() {
                let t: Vec<String> = tags.iter().map(|(k, v)| format!("{k}:{v}")).collect();
                line.push_str(&format!("|#{}", t.join(",")));
            }
            if let Some(ts) = a.ts {
                line.push_str(&format!("|T{ts}"));
            }
            line.push('\n');
            Ok(line.into_bytes())
        }
    }
}

/// Refuses a point the agent would drop, with the reason, by running the
/// agent's own parser over the bytes: what `send` accepts is what a
/// receiver aggregates.
fn check(a: &SendArgs, bytes: &[u8]) -> anyhow::Result<()> {
    struct Verdict(Option<DropReason>);
    impl PointSink<'_> for Verdict {
        fn point(&mut self, _: &Point<'_>) {}
        fn drop(&mut self, reason: DropReason) {
            self.0.get_or_insert(reason);
        }
    }
    let mut verdict = Verdict(None);
    match a.protocol {
        Wire::Msgpack => sonde_proto::msgpack::parse(bytes, &mut verdict),
        Wire::Statsd => sonde_proto::statsd::parse(bytes, &mut verdict),
    }
    let Some(reason) = verdict.0 else {
        return Ok(());
    };
    let why = match reason {
        DropReason::BadValue => format!("the value {:?} is not a finite number", a.value),
        DropReason::BadSampleRate => format!(
            "--rate {} is not a sample rate in (0, 1]",
            a.rate.unwrap_or_default()
        ),
        DropReason::BadTimestamp => "a ts_store needs --ts, in unix seconds".to_string(),
        other => format!("it is malformed ({})", other.as_str()),
    };
    bail!(
        "the agent would drop this point ({} in sonde_receiver_dropped_total): {why}",
        reason.as_str()
    )
}

/// How long `send` listens, after a UDP datagram, for the kernel's word
/// that nothing listens at the port (an ICMP port unreachable, which on
/// loopback comes back at once). A remote host may say nothing at all.
const REFUSED_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

/// What to say when nothing listens at `addr`.
fn nothing_listens(addr: &ListenAddr) -> String {
    format!(
        "nothing listens at {addr}: is the agent running, with a receiver there? \
         (`sonde run` listens on udp://127.0.0.1:9123 for msgpack and \
         udp://127.0.0.1:8125 for StatsD by default; --to names another)"
    )
}

/// Sends one point.
///
/// # Errors
///
/// A point the agent would drop ([`check`]), an address that does not
/// parse, and nothing listening at it where the OS can tell (a unix
/// socket file, a TCP port, a UDP port on this host).
pub fn send(a: &SendArgs) -> anyhow::Result<()> {
    let bytes = encode(a)?;
    check(a, &bytes)?;
    let to = a.to.clone().unwrap_or_else(|| {
        match a.protocol {
            Wire::Msgpack => "udp://127.0.0.1:9123",
            Wire::Statsd => "udp://127.0.0.1:8125",
        }
        .to_string()
    });
    let addr: ListenAddr = to.parse().with_context(|| format!("--to {to}"))?;
    let sent = match &addr {
        ListenAddr::Udp(sa) => {
            let local: std::net::SocketAddr = if sa.is_ipv4() {
                ([0, 0, 0, 0], 0).into()
            } else {
                (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
            };
            // Connected, so that the kernel hands the port-unreachable
            // answer back to this socket as ECONNREFUSED.
            std::net::UdpSocket::bind(local).and_then(|s| {
                s.connect(sa)?;
                s.send(&bytes)?;
                s.set_read_timeout(Some(REFUSED_WAIT))?;
                match s.recv(&mut [0; 1]) {
                    Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Err(e),
                    _ => Ok(()),
                }
            })
        }
        ListenAddr::Unixgram(p) => std::os::unix::net::UnixDatagram::unbound()
            .and_then(|s| s.send_to(&bytes, p))
            .map(drop),
        ListenAddr::Unixseq(p) => {
            socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::SEQPACKET, None).and_then(
                |s| {
                    s.connect(&socket2::SockAddr::unix(p)?)?;
                    s.send(&bytes).map(drop)
                },
            )
        }
        ListenAddr::Unix(p) => {
            std::os::unix::net::UnixStream::connect(p).and_then(|mut s| s.write_all(&bytes))
        }
        ListenAddr::Tcp(sa) => {
            std::net::TcpStream::connect(sa).and_then(|mut s| s.write_all(&bytes))
        }
        ListenAddr::Http(_) | ListenAddr::Grpc(_) => {
            bail!("--to {addr}: `sonde send` speaks msgpack and StatsD; use udp://, tcp://, unixgram://, unixseq:// or unix://")
        }
    };
    match sent {
        Ok(()) => Ok(()),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound
            ) =>
        {
            bail!("{}", nothing_listens(&addr))
        }
        Err(e) => Err(e).with_context(|| format!("sending to {addr}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(protocol: Wire, ty: &str, tags: &[&str]) -> SendArgs {
        SendArgs {
            protocol,
            to: None,
            r#type: ty.into(),
            name: "web.requests".into(),
            value: "1".into(),
            tags: tags.iter().map(|s| s.to_string()).collect(),
            ts: None,
            rate: None,
        }
    }

    #[test]
    fn msgpack_is_one_emit_message_of_six_strings() {
        let b = encode(&args(Wire::Msgpack, "counter", &["host=a", "dc=x"])).unwrap();
        let mut want = vec![0x96, 0xa4];
        want.extend_from_slice(b"emit");
        want.push(0xa7);
        want.extend_from_slice(b"counter");
        want.push(0xac);
        want.extend_from_slice(b"web.requests");
        want.push(0xa1);
        want.extend_from_slice(b"1");
        want.push(0xab);
        want.extend_from_slice(b"host=a|dc=x");
        want.push(0xa0);
        assert_eq!(b, want);
    }

    #[test]
    fn statsd_lines_carry_type_rate_and_tags() {
        let mut a = args(Wire::Statsd, "timer", &["host=a"]);
        a.rate = Some(0.5);
        assert_eq!(encode(&a).unwrap(), b"web.requests:1|ms|@0.5|#host:a\n");
    }

    #[test]
    fn bad_types_and_tags_are_refused() {
        assert!(encode(&args(Wire::Msgpack, "gauge", &[])).is_err());
        assert!(encode(&args(Wire::Statsd, "counter", &["novalue"])).is_err());
        assert!(encode(&args(Wire::Statsd, "counter", &["a=b|c"])).is_err());
        assert!(encode(&args(Wire::Statsd, "counter", &["a=b,c"])).is_err());
    }

    #[test]
    fn points_the_agent_would_drop_are_refused_with_the_reason() {
        let mut a = args(Wire::Statsd, "counter", &[]);
        a.value = "abc".into();
        let e = check(&a, &encode(&a).unwrap()).unwrap_err().to_string();
        assert!(e.contains("bad_value") && e.contains("\"abc\""), "{e}");
        a.value = "NaN".into();
        assert!(check(&a, &encode(&a).unwrap()).is_err());
        a.value = "1".into();
        a.rate = Some(0.0);
        let e = check(&a, &encode(&a).unwrap()).unwrap_err().to_string();
        assert!(
            e.contains("bad_sample_rate") && e.contains("--rate 0"),
            "{e}"
        );
        a.rate = Some(0.5);
        assert!(check(&a, &encode(&a).unwrap()).is_ok());

        let mut m = args(Wire::Msgpack, "timer", &[]);
        m.value = "nan".into();
        assert!(check(&m, &encode(&m).unwrap()).is_err());
        m.r#type = "ts_store".into();
        m.value = "1".into();
        let e = check(&m, &encode(&m).unwrap()).unwrap_err().to_string();
        assert!(e.contains("--ts"), "{e}");
        m.ts = Some(1_700_000_000);
        assert!(check(&m, &encode(&m).unwrap()).is_ok());
    }

    #[test]
    fn msgpack_allows_what_only_statsd_forbids() {
        let mut a = args(Wire::Msgpack, "counter", &["a=b,c", "k=v:w"]);
        a.name = "svc:web.hits".into();
        assert!(encode(&a).is_ok());
        a.protocol = Wire::Statsd;
        a.r#type = "c".into();
        assert!(encode(&a).is_err());
    }
}

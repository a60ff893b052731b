//! rustls' ring provider against its aws-lc-rs provider, on what sonde does
//! with TLS, with a client and a server connected in memory (no sockets):
//!
//! * bulk: the client encrypts application data in writes of a produce
//!   request's size and the server decrypts it, for the cipher suites a
//!   broker picks; the CPU time of each side is reported apart, since the
//!   agent only does the client's share (it encrypts requests and decrypts
//!   small answers);
//! * handshakes: full handshakes (no resumption), X25519, TLS 1.3, against
//!   a server with an ECDSA P-256 or an RSA-2048 certificate signed by a CA
//!   of the same kind, which the client verifies; the client's CPU time.
//!
//! Times are the thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), so another
//! process on the machine slows a run without adding to its figure. Each
//! figure is the median of several runs, the providers alternating run by
//! run. `callgrind` runs one fixed workload for callgrind's instruction
//! counts (`client_encrypt` and `server_decrypt` are its two functions).

use std::io::{ErrorKind, Read, Write};
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};

use rustls::client::Resumption;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::version::{TLS12, TLS13};
use rustls::{
    CipherSuite, ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection,
    SupportedProtocolVersion,
};

/// A crypto provider under test.
#[derive(Clone, Copy)]
struct Provider {
    name: &'static str,
    make: fn() -> CryptoProvider,
}

const PROVIDERS: [Provider; 2] = [
    Provider {
        name: "ring",
        make: rustls::crypto::ring::default_provider,
    },
    Provider {
        name: "aws-lc-rs",
        make: rustls::crypto::aws_lc_rs::default_provider,
    },
];

/// A cipher suite and the certificate kind the server holds for it.
#[derive(Clone, Copy)]
struct Suite {
    name: &'static str,
    suite: CipherSuite,
    version: &'static SupportedProtocolVersion,
    rsa: bool,
}

const SUITES: [Suite; 4] = [
    Suite {
        name: "tls13-aes128gcm",
        suite: CipherSuite::TLS13_AES_128_GCM_SHA256,
        version: &TLS13,
        rsa: false,
    },
    Suite {
        name: "tls13-aes256gcm",
        suite: CipherSuite::TLS13_AES_256_GCM_SHA384,
        version: &TLS13,
        rsa: false,
    },
    Suite {
        name: "tls13-chacha20",
        suite: CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
        version: &TLS13,
        rsa: false,
    },
    Suite {
        name: "tls12-ecdhe-rsa-aes128gcm",
        suite: CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        version: &TLS12,
        rsa: true,
    },
];

/// A CA and a server certificate it signed, with the server's key.
struct Pki {
    roots: RootCertStore,
    chain: Vec<CertificateDer<'static>>,
    key: PrivatePkcs8KeyDer<'static>,
}

impl Pki {
    fn new(alg: &'static rcgen::SignatureAlgorithm) -> Pki {
        let ca_key = rcgen::KeyPair::generate_for(alg).expect("CA key");
        let mut ca_params = rcgen::CertificateParams::new(Vec::new()).expect("CA params");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "bench CA");
        let ca_cert = ca_params.self_signed(&ca_key).expect("CA certificate");
        let issuer = rcgen::Issuer::new(ca_params, ca_key);

        let key = rcgen::KeyPair::generate_for(alg).expect("server key");
        let params =
            rcgen::CertificateParams::new(vec!["broker.test".to_string()]).expect("params");
        let cert = params.signed_by(&key, &issuer).expect("server certificate");

        let mut roots = RootCertStore::empty();
        roots.add(ca_cert.der().clone()).expect("root");
        Pki {
            roots,
            chain: vec![cert.der().clone(), ca_cert.der().clone()],
            key: PrivatePkcs8KeyDer::from(key.serialize_der()),
        }
    }
}

/// A client and a server configuration on one provider, restricted to one
/// cipher suite, or to the provider's default suites and TLS 1.3.
fn configs(
    provider: Provider,
    suite: Option<Suite>,
    pki: &Pki,
) -> (Arc<ClientConfig>, Arc<ServerConfig>) {
    let mut crypto = (provider.make)();
    let version = match suite {
        Some(suite) => {
            crypto.cipher_suites.retain(|s| s.suite() == suite.suite);
            assert_eq!(
                crypto.cipher_suites.len(),
                1,
                "{} lacks {}",
                provider.name,
                suite.name
            );
            suite.version
        }
        None => &TLS13,
    };
    let crypto = Arc::new(crypto);
    let mut client = ClientConfig::builder_with_provider(crypto.clone())
        .with_protocol_versions(&[version])
        .expect("client versions")
        .with_root_certificates(pki.roots.clone())
        .with_no_client_auth();
    client.resumption = Resumption::disabled();
    let mut server = ServerConfig::builder_with_provider(crypto)
        .with_protocol_versions(&[version])
        .expect("server versions")
        .with_no_client_auth()
        .with_single_cert(pki.chain.clone(), PrivateKeyDer::Pkcs8(pki.key.clone_key()))
        .expect("server certificate");
    // No session tickets: the client would not use them.
    server.send_tls13_tickets = 0;
    (Arc::new(client), Arc::new(server))
}

/// The calling thread's CPU time, in nanoseconds.
fn cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write to.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Runs `f`, adding the CPU time it took to `acc`.
fn timed<T>(acc: &mut u64, f: impl FnOnce() -> T) -> T {
    let start = cpu_ns();
    let out = f();
    *acc += cpu_ns() - start;
    out
}

/// The CPU time a full handshake cost each side, in nanoseconds.
#[derive(Default)]
struct Costs {
    client: u64,
    server: u64,
}

/// One full handshake, returning the connected pair.
fn handshake(
    client_config: &Arc<ClientConfig>,
    server_config: &Arc<ServerConfig>,
    costs: &mut Costs,
) -> (ClientConnection, ServerConnection) {
    let name = ServerName::try_from("broker.test").expect("name");
    let mut client = timed(&mut costs.client, || {
        ClientConnection::new(client_config.clone(), name).expect("client")
    });
    let mut server = timed(&mut costs.server, || {
        ServerConnection::new(server_config.clone()).expect("server")
    });
    let mut wire = Vec::new();
    while client.is_handshaking() || server.is_handshaking() {
        wire.clear();
        timed(&mut costs.client, || {
            client.write_tls(&mut wire).expect("write")
        });
        timed(&mut costs.server, || {
            let mut rd = &wire[..];
            while !rd.is_empty() {
                server.read_tls(&mut rd).expect("read");
                server.process_new_packets().expect("server handshake");
            }
        });
        wire.clear();
        timed(&mut costs.server, || {
            server.write_tls(&mut wire).expect("write")
        });
        timed(&mut costs.client, || {
            let mut rd = &wire[..];
            while !rd.is_empty() {
                client.read_tls(&mut rd).expect("read");
                client.process_new_packets().expect("client handshake");
            }
        });
    }
    (client, server)
}

/// The client encrypts `total` bytes of `payload` in writes of
/// `payload.len()` bytes into `wire`.
#[inline(never)]
fn client_encrypt(client: &mut ClientConnection, payload: &[u8], total: usize, wire: &mut Vec<u8>) {
    let mut sent = 0;
    while sent < total {
        client.writer().write_all(payload).expect("encrypt");
        sent += payload.len();
        while client.wants_write() {
            client.write_tls(wire).expect("write_tls");
        }
    }
}

/// The server decrypts all of `wire` and reads the plaintext out; returns
/// how many bytes of plaintext it read.
#[inline(never)]
fn server_decrypt(server: &mut ServerConnection, wire: &[u8], out: &mut [u8]) -> usize {
    let mut rd = wire;
    let mut read = 0;
    while !rd.is_empty() {
        server.read_tls(&mut rd).expect("read_tls");
        server.process_new_packets().expect("decrypt");
        loop {
            match server.reader().read(out) {
                Ok(0) => break,
                Ok(n) => read += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("read: {e}"),
            }
        }
    }
    read
}

/// The rustls this is built with (Cargo.toml pins it).
const RUSTLS_VERSION: &str = "0.23.46";

/// The bytes the client encrypts before the server decrypts them.
const PHASE: usize = 4 << 20;

/// Sends `total` bytes in writes of `write` bytes; the CPU time per byte
/// of the client's and of the server's side, in nanoseconds.
fn bulk(
    client_config: &Arc<ClientConfig>,
    server_config: &Arc<ServerConfig>,
    write: usize,
    total: usize,
    warm: bool,
) -> (f64, f64) {
    let (mut client, mut server) = handshake(client_config, server_config, &mut Costs::default());
    client.set_buffer_limit(None);
    let payload: Vec<u8> = (0..write).map(|i| (i * 131 + i / 7) as u8).collect();
    let mut out = vec![0u8; 64 << 10];
    let mut wire = Vec::with_capacity(PHASE + PHASE / 32);
    let mut costs = Costs::default();
    let phase = PHASE.max(write);
    // One phase untimed, so that the buffers are faulted in and grown.
    if warm {
        client_encrypt(&mut client, &payload, phase, &mut wire);
        server_decrypt(&mut server, &wire, &mut out);
    }
    let mut sent = 0;
    while sent < total {
        wire.clear();
        timed(&mut costs.client, || {
            client_encrypt(&mut client, &payload, phase, &mut wire)
        });
        let read = timed(&mut costs.server, || {
            server_decrypt(&mut server, &wire, &mut out)
        });
        assert_eq!(read, phase.div_ceil(write) * write, "plaintext lost");
        sent += phase;
    }
    (
        costs.client as f64 / sent as f64,
        costs.server as f64 / sent as f64,
    )
}

/// Full handshakes per CPU-second of the client and of the server.
fn handshakes(
    client_config: &Arc<ClientConfig>,
    server_config: &Arc<ServerConfig>,
    count: u32,
) -> (f64, f64) {
    let mut costs = Costs::default();
    for _ in 0..count {
        handshake(client_config, server_config, &mut costs);
    }
    (
        count as f64 * 1e9 / costs.client as f64,
        count as f64 * 1e9 / costs.server as f64,
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn list(v: &[f64], decimals: usize) -> String {
    v.iter()
        .map(|x| format!("{x:.decimals$}"))
        .collect::<Vec<_>>()
        .join(" ")
}

struct Options {
    runs: usize,
    mib: usize,
    writes: Vec<usize>,
    handshakes: u32,
    suites: Vec<Suite>,
    providers: Vec<Provider>,
    bulk: bool,
    handshake: bool,
    callgrind: bool,
}

const USAGE: &str = "\
usage: tls-provider-bench [options]
  --runs N          runs per figure, the median is reported (default 5)
  --mib N           MiB the client sends per bulk run (default 256)
  --writes A,B      write sizes in KiB (default 16,256)
  --handshakes N    full handshakes per handshake run (default 300)
  --suites A,B      cipher suites (default all: tls13-aes128gcm,
                    tls13-aes256gcm, tls13-chacha20, tls12-ecdhe-rsa-aes128gcm)
  --providers A,B   ring, aws-lc-rs (default both)
  --bulk-only | --handshakes-only
  --callgrind       one bulk run of the first suite, write size and
                    provider, for valgrind --tool=callgrind";

fn parse() -> Result<Options, String> {
    let mut o = Options {
        runs: 5,
        mib: 256,
        writes: vec![16 << 10, 256 << 10],
        handshakes: 300,
        suites: SUITES.to_vec(),
        providers: PROVIDERS.to_vec(),
        bulk: true,
        handshake: true,
        callgrind: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        let number = |s: &str| s.parse::<usize>().map_err(|e| format!("{s}: {e}"));
        match arg.as_str() {
            "--runs" => o.runs = number(&value()?)?.max(1),
            "--mib" => o.mib = number(&value()?)?.max(1),
            "--handshakes" => o.handshakes = number(&value()?)?.max(1) as u32,
            "--writes" => {
                o.writes = value()?
                    .split(',')
                    .map(|s| number(s).map(|k| k.max(1) << 10))
                    .collect::<Result<_, _>>()?
            }
            "--suites" => {
                o.suites = value()?
                    .split(',')
                    .map(|s| {
                        SUITES
                            .iter()
                            .find(|x| x.name == s)
                            .copied()
                            .ok_or(format!("unknown suite {s}"))
                    })
                    .collect::<Result<_, _>>()?
            }
            "--providers" => {
                o.providers = value()?
                    .split(',')
                    .map(|s| {
                        PROVIDERS
                            .iter()
                            .find(|x| x.name == s)
                            .copied()
                            .ok_or(format!("unknown provider {s}"))
                    })
                    .collect::<Result<_, _>>()?
            }
            "--bulk-only" => o.handshake = false,
            "--handshakes-only" => o.bulk = false,
            "--callgrind" => o.callgrind = true,
            "-h" | "--help" => return Err(USAGE.to_string()),
            _ => return Err(format!("unknown argument {arg}\n{USAGE}")),
        }
    }
    if o.suites.is_empty() || o.providers.is_empty() || o.writes.is_empty() {
        return Err(USAGE.to_string());
    }
    Ok(o)
}

fn main() -> ExitCode {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    // Made when first needed: an RSA key takes a while to generate.
    let ecdsa = OnceLock::new();
    let rsa = OnceLock::new();
    let pki = |rsa_cert: bool| {
        if rsa_cert {
            rsa.get_or_init(|| Pki::new(&rcgen::PKCS_RSA_SHA256))
        } else {
            ecdsa.get_or_init(|| Pki::new(&rcgen::PKCS_ECDSA_P256_SHA256))
        }
    };

    if o.callgrind {
        let (provider, suite, write) = (o.providers[0], o.suites[0], o.writes[0]);
        let (client, server) = configs(provider, Some(suite), pki(suite.rsa));
        let (c, s) = bulk(&client, &server, write, o.mib << 20, false);
        // The bytes each of the two functions handled, for instructions
        // per byte; the CPU times are valgrind's, not the machine's.
        println!(
            "callgrind workload: {} {} {} KiB writes, bytes {}: client {c:.3} ns/B, server {s:.3} ns/B",
            provider.name,
            suite.name,
            write >> 10,
            (o.mib << 20).div_ceil(PHASE.max(write)) * PHASE.max(write)
        );
        return ExitCode::SUCCESS;
    }

    println!(
        "rustls {}; thread CPU time; median of {} runs, providers alternating",
        RUSTLS_VERSION, o.runs
    );
    if o.bulk {
        println!();
        println!(
            "bulk: {} MiB per run; CPU-s per GB of application data (= ns per byte)",
            o.mib
        );
        println!(
            "| suite | write | provider | client (encrypt), median | server (decrypt), median | client, runs | server, runs |"
        );
        println!("|---|---:|---|---:|---:|---|---|");
        for suite in &o.suites {
            let cfgs: Vec<_> = o
                .providers
                .iter()
                .map(|p| configs(*p, Some(*suite), pki(suite.rsa)))
                .collect();
            for &write in &o.writes {
                let mut runs = vec![(Vec::new(), Vec::new()); o.providers.len()];
                for _ in 0..o.runs {
                    for (i, (client, server)) in cfgs.iter().enumerate() {
                        let (c, s) = bulk(client, server, write, o.mib << 20, true);
                        runs[i].0.push(c);
                        runs[i].1.push(s);
                    }
                }
                for (p, (c, s)) in o.providers.iter().zip(runs) {
                    println!(
                        "| {} | {} KiB | {} | {:.3} | {:.3} | {} | {} |",
                        suite.name,
                        write >> 10,
                        p.name,
                        median(c.clone()),
                        median(s.clone()),
                        list(&c, 3),
                        list(&s, 3)
                    );
                }
            }
        }
    }
    if o.handshake {
        println!();
        println!(
            "full handshakes (TLS 1.3, X25519, no resumption, CA-signed certificate verified): {} per run; handshakes per CPU-second",
            o.handshakes
        );
        println!(
            "| server certificate | provider | client, median | server, median | client, runs |"
        );
        println!("|---|---|---:|---:|---|");
        for (label, rsa_cert) in [("ECDSA P-256", false), ("RSA-2048", true)] {
            let cfgs: Vec<_> = o
                .providers
                .iter()
                .map(|p| configs(*p, None, pki(rsa_cert)))
                .collect();
            let mut runs = vec![(Vec::new(), Vec::new()); o.providers.len()];
            for _ in 0..o.runs {
                for (i, (client, server)) in cfgs.iter().enumerate() {
                    let (c, s) = handshakes(client, server, o.handshakes);
                    runs[i].0.push(c);
                    runs[i].1.push(s);
                }
            }
            for (p, (c, s)) in o.providers.iter().zip(runs) {
                println!(
                    "| {label} | {} | {:.0} | {:.0} | {} |",
                    p.name,
                    median(c.clone()),
                    median(s),
                    list(&c, 0)
                );
            }
        }
    }
    ExitCode::SUCCESS
}

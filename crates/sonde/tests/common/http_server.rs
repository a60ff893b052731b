//! A test HTTP server, a backend of the HTTP sinks: it answers every
//! POST with a status the test sets (and a message for errors), and keeps
//! what it took, decompressed.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value as Json;
use sonde_encode::compress::Compression;

/// One request the test server took.
#[derive(Clone, Debug)]
pub struct Got {
    pub headers: BTreeMap<String, String>,
    /// The body, decompressed per its Content-Encoding.
    pub body: Vec<u8>,
    /// The status the server answered.
    pub status: u16,
}

/// A test HTTP server answering every POST with `status` (and a message
/// for errors), recording what it got.
pub struct Server {
    pub port: u16,
    pub status: Arc<AtomicU16>,
    pub got: Arc<Mutex<Vec<Got>>>,
    server: Arc<tiny_http::Server>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn codec(name: Option<&str>) -> Compression {
    match name {
        None => Compression::None,
        Some("zstd") => Compression::Zstd { level: 1 },
        Some("gzip") => Compression::Gzip { level: 6 },
        Some("snappy") => Compression::Snappy,
        Some("lz4") => Compression::Lz4,
        Some(x) => panic!("unexpected Content-Encoding {x}"),
    }
}

impl Server {
    pub fn start(port: u16, status: u16) -> Server {
        let server = Arc::new(tiny_http::Server::http(("127.0.0.1", port)).unwrap());
        let port = server.server_addr().to_ip().unwrap().port();
        let status = Arc::new(AtomicU16::new(status));
        let got = Arc::new(Mutex::new(Vec::new()));
        let thread = {
            let (server, status, got) = (server.clone(), status.clone(), got.clone());
            std::thread::spawn(move || {
                for mut req in server.incoming_requests() {
                    let headers: BTreeMap<String, String> = req
                        .headers()
                        .iter()
                        .map(|h| {
                            (
                                h.field.as_str().as_str().to_ascii_lowercase(),
                                h.value.to_string(),
                            )
                        })
                        .collect();
                    let mut raw = Vec::new();
                    let read = req.as_reader().read_to_end(&mut raw);
                    let short = req.body_length().is_some_and(|n| raw.len() < n);
                    if read.is_err() || short {
                        // A client killed while it sent (the tests kill
                        // agents mid-retry): no request, and the server
                        // goes on to the next.
                        eprintln!("test server: a request's body ended early: {read:?}");
                        continue;
                    }
                    let body = match codec(headers.get("content-encoding").map(String::as_str))
                        .decompress(&raw)
                    {
                        Ok(b) => b,
                        Err(e) => {
                            // Recorded as refused, so that a test waiting
                            // for it says what it waited for.
                            eprintln!("test server: cannot decompress a body: {e}");
                            got.lock().unwrap().push(Got {
                                headers,
                                body: raw,
                                status: 400,
                            });
                            let _ = req.respond(
                                tiny_http::Response::from_string("cannot decompress")
                                    .with_status_code(400),
                            );
                            continue;
                        }
                    };
                    let code = status.load(Ordering::SeqCst);
                    got.lock().unwrap().push(Got {
                        headers,
                        body,
                        status: code,
                    });
                    let text = if code < 300 {
                        ""
                    } else {
                        "test server says: no thanks"
                    };
                    let _ =
                        req.respond(tiny_http::Response::from_string(text).with_status_code(code));
                }
            })
        };
        Server {
            port,
            status,
            got,
            server,
            thread: Some(thread),
        }
    }

    pub fn accepted(&self) -> Vec<Got> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .filter(|g| g.status < 300)
            .cloned()
            .collect()
    }

    pub fn stop(mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

pub fn json_lines(body: &[u8]) -> Vec<Json> {
    body.split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect()
}

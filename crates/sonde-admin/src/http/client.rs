//! The client side of a site served on a unix socket file ([`get_unix`]):
//! what `sonde admin-url`, `sonde top`, `sonde tap` and `sonde bench
//! --config` use when `agent.admin_listen` is a `unix://` path, since
//! their HTTP client (ureq) connects to ports only.
//!
//! # Design
//!
//! hyper's own HTTP/1.1 client over a tokio `UnixStream`, on a
//! current-thread runtime made for each call, rather than a request
//! written and parsed by hand: chunked bodies, keep-alive and the parsing
//! of the answer are hyper's, the same code that serves the site. A call
//! costs a runtime and a connection (well under a millisecond); the
//! commands ask a few times a second at most.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;

/// The most bytes of an answer's body read: ureq's limit on what the same
/// commands read over TCP, so that both transports take the same answers.
pub const MAX_ANSWER_BYTES: usize = 10 << 20;

/// An answer: its status and its whole body.
#[derive(Debug)]
pub struct Answer {
    /// The status.
    pub status: StatusCode,
    /// The body, at most [`MAX_ANSWER_BYTES`].
    pub body: Bytes,
}

/// Why [`get_unix`] has no answer.
#[derive(Debug, thiserror::Error)]
pub enum UnixGetError {
    /// The socket file cannot be connected to: no such file (no agent
    /// listens there), permission denied (its mode and group leave this
    /// user out), or nobody accepts on it.
    #[error("cannot connect to {}: {error}", path.display())]
    Connect {
        /// The socket file.
        path: PathBuf,
        /// What the OS said.
        error: io::Error,
    },
    /// The request could not be made of the target and headers given.
    #[error("cannot request {target:?}: {error}")]
    Request {
        /// The path and query asked for.
        target: String,
        /// What was wrong with it.
        error: hyper::http::Error,
    },
    /// The connection broke, or the answer was not HTTP/1.1.
    #[error("{}: {error}", path.display())]
    Http {
        /// The socket file.
        path: PathBuf,
        /// What hyper said.
        error: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The body was over [`MAX_ANSWER_BYTES`].
    #[error("the answer from {} is over {} MiB", path.display(), MAX_ANSWER_BYTES >> 20)]
    TooLarge {
        /// The socket file.
        path: PathBuf,
    },
    /// No whole answer came within the time given.
    #[error("no answer from {} within {timeout:?}", path.display())]
    Timeout {
        /// The socket file.
        path: PathBuf,
        /// The time given.
        timeout: Duration,
    },
    /// The runtime of the call could not be made.
    #[error("cannot start the client's runtime: {0}")]
    Runtime(io::Error),
}

/// GETs `target` (a path and query, like `/api/metrics`) from the site
/// served on the unix socket file `path`, sending `headers` (name, value);
/// `timeout` bounds the whole call, from connecting to the body's end.
///
/// # Errors
///
/// When the file cannot be connected to, the request cannot be made of
/// `target` and `headers`, the answer is not HTTP, is over
/// [`MAX_ANSWER_BYTES`], or does not end within `timeout`. An answer of
/// any status is an answer, not an error.
pub fn get_unix(
    path: &Path,
    target: &str,
    headers: &[(&str, &str)],
    timeout: Duration,
) -> Result<Answer, UnixGetError> {
    let mut req = Request::get(target).header(hyper::header::HOST, "sonde");
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let req = req
        .body(Empty::<Bytes>::new())
        .map_err(|error| UnixGetError::Request {
            target: target.to_string(),
            error,
        })?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(UnixGetError::Runtime)?;
    let http = |error: Box<dyn std::error::Error + Send + Sync>| UnixGetError::Http {
        path: path.to_path_buf(),
        error,
    };
    rt.block_on(async {
        let call = async {
            let stream = tokio::net::UnixStream::connect(path)
                .await
                .map_err(|error| UnixGetError::Connect {
                    path: path.to_path_buf(),
                    error,
                })?;
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|e| http(e.into()))?;
            // The connection's I/O runs beside the request on this
            // runtime, and ends with it.
            tokio::spawn(conn);
            let resp = sender.send_request(req).await.map_err(|e| http(e.into()))?;
            let status = resp.status();
            let body = Limited::new(resp.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await
                .map_err(|e| {
                    if e.is::<http_body_util::LengthLimitError>() {
                        UnixGetError::TooLarge {
                            path: path.to_path_buf(),
                        }
                    } else {
                        http(e)
                    }
                })?
                .to_bytes();
            Ok(Answer { status, body })
        };
        tokio::time::timeout(timeout, call)
            .await
            .unwrap_or_else(|_| {
                Err(UnixGetError::Timeout {
                    path: path.to_path_buf(),
                    timeout,
                })
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixListener;

    /// A socket file in a temporary directory that answers its first
    /// connection with `answer`, and hands back the request it read.
    fn one_answer(
        answer: Vec<u8>,
    ) -> (tempfile::TempDir, PathBuf, std::thread::JoinHandle<Vec<u8>>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("site.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.ends_with(b"\r\n\r\n") {
                let n = conn.read(&mut buf).unwrap();
                assert!(n > 0, "the request ended early");
                request.extend_from_slice(&buf[..n]);
            }
            // The client may stop reading a long answer part way.
            let _ = conn.write_all(&answer);
            request
        });
        (dir, path, server)
    }

    #[test]
    fn a_get_sends_its_headers_and_reads_a_chunked_answer_whole() {
        let (_dir, path, server) = one_answer(
            b"HTTP/1.1 401 Unauthorized\r\ntransfer-encoding: chunked\r\n\r\n3\r\nno \r\n6\r\ntoken\n\r\n0\r\n\r\n".to_vec(),
        );
        let answer = get_unix(
            &path,
            "/metrics?x=1",
            &[("authorization", "Bearer abc")],
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
        assert_eq!(&answer.body[..], b"no token\n");
        let request = String::from_utf8(server.join().unwrap()).unwrap();
        assert!(
            request.starts_with("GET /metrics?x=1 HTTP/1.1\r\n"),
            "{request}"
        );
        assert!(request.contains("\r\nhost: sonde\r\n"), "{request}");
        assert!(
            request.contains("\r\nauthorization: Bearer abc\r\n"),
            "{request}"
        );
    }

    #[test]
    fn an_answer_one_byte_over_the_limit_is_refused() {
        for (extra, refused) in [(0, false), (1, true)] {
            let len = MAX_ANSWER_BYTES + extra;
            let mut answer =
                format!("HTTP/1.1 200 OK\r\ncontent-length: {len}\r\n\r\n").into_bytes();
            answer.resize(answer.len() + len, b'x');
            let (_dir, path, _server) = one_answer(answer);
            let got = get_unix(&path, "/", &[], Duration::from_secs(10));
            match got {
                Ok(a) => assert!(!refused && a.body.len() == len),
                Err(e) => assert!(refused && matches!(e, UnixGetError::TooLarge { .. }), "{e}"),
            }
        }
    }

    #[test]
    fn a_site_that_never_answers_times_out_and_a_missing_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("silent.sock");
        // Bound and listening, never accepted: the connection queues.
        let _listener = UnixListener::bind(&path).unwrap();
        let e = get_unix(&path, "/", &[], Duration::from_millis(200)).unwrap_err();
        assert!(matches!(e, UnixGetError::Timeout { .. }), "{e}");
        let gone = dir.path().join("gone.sock");
        let e = get_unix(&gone, "/", &[], Duration::from_secs(10)).unwrap_err();
        match &e {
            UnixGetError::Connect { error, .. } => {
                assert_eq!(error.kind(), io::ErrorKind::NotFound);
            }
            other => panic!("{other}"),
        }
        assert!(e.to_string().contains("gone.sock"), "{e}");
    }
}

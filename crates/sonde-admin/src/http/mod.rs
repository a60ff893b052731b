//! The HTTP listeners: the admin site (`/` the agent at a glance,
//! `/profiles`, `/health`, `/metrics` and `/api/metrics`, `/api/profiles/`)
//! and the Prometheus exporter sinks' scrape endpoints.
//!
//! They share one single-threaded tokio runtime on its own thread: scrapes
//! are rare and tiny next to the data path, which never touches it. The
//! admin site also serves CPU profiles of the agent
//! (`/debug/pprof/profile` and `/debug/pprof/flamegraph`).
//!
//! Listeners are bound by the caller with [`bind`] (a TCP port) or
//! [`bind_unix`] (a unix socket file) first, so an address in use fails
//! the agent's start instead of a background thread. Both kinds are served
//! by the same accept loop, with the same limits and the same routes.
//!
//! # Unix socket files
//!
//! The admin site may listen on a unix socket file instead of a port:
//! then its mode and group decide who may connect at all (connecting
//! needs write permission on the file), before any token is asked for. It
//! is bound as a unix receiver's socket is ([`sonde_runtime::socket::bind`]): a
//! stale file that nobody accepts on is replaced, a live one is an error,
//! and the file has its mode and group before the socket listens. The
//! [`Serving`] that [`serve`] returns removes the file when it is dropped,
//! which the agent does as it stops; [`client::get_unix`] is the client
//! side, for the commands that talk to the agent.
//!
//! # Who may read it
//!
//! With [`Admin::auth`] set, every request but `/health` must carry the
//! admin token ([`Token`]); one that does not gets a 401 with nothing of
//! the data (the pages: the sign-in form of `/login`). docs/SECURITY.md
//! says who can read what.
//!
//! With [`Admin::tls`] set, the admin listener speaks only HTTPS
//! ([`Tls`]): each connection's handshake runs in its own task, bounded
//! by the same 10 s as a request's head, so that a client that stalls it
//! holds one of the 64 places and never the accept loop. A handshake that
//! fails or times out (plain HTTP sent to the port, a client that does
//! not trust the certificate) is counted on `/metrics` and logged at debug
//! level only: a log line per connection would let any client fill the
//! log.
//!
//! # Limits
//!
//! Each listener serves 64 connections at once, reads 16 KiB of a
//! request head and serves targets up to 8 KiB; past them a client gets
//! 503, 431 or 414, counted on the admin site's `/metrics`, so that no
//! client can make the agent hold more than these bounds.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::CONTENT_TYPE;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

mod auth;
pub mod client;
mod profiles;
mod profiling;
mod tls;

pub use auth::{Token, TokenError, COOKIE_NAME};
use profiling::Format;
use sonde_profile::store::Store;
pub use tls::{certificates, Tls, TlsError, TlsFile};

use crate::telemetry::Telemetry;
use sonde_runtime::addr::ListenAddr;
use sonde_runtime::socket::{BindError, SocketFile, SocketOptions};
use sonde_sinks::sink::Exposition;

/// What the admin site serves from.
#[derive(Debug)]
pub struct Admin {
    /// The agent's counters, for `/metrics`.
    pub telemetry: Arc<Telemetry>,
    /// The profile store under `data_dir`, for `/api/profiles/` (read
    /// whether or not the profiler runs now: an empty store answers 404).
    pub profiles: Store,
    /// What a core-hour costs and emits (`[profiler]`), for the tables.
    pub prices: sonde_profile::cost::Prices,
    /// The hot-spot classes of `/api/profiles/classes` and `class=`: the
    /// shipped rules after `[[profiler.classes]]`.
    pub classes: Arc<sonde_profile::classes::Classifier>,
    /// The fleet store (`[profiler] store`) that `/profiles` and
    /// `/api/profiles/` read instead of [`Admin::profiles`]; `None` reads
    /// this host's.
    pub fleet: Option<sonde_sinks::clickhouse::store::FleetStore>,
    /// The token every request but `/health` must carry
    /// (`agent.admin_auth = "token"`); `None` serves everyone.
    pub auth: Option<Token>,
    /// The certificate and key of HTTPS (`agent.admin_tls`); `None`
    /// serves plain HTTP.
    pub tls: Option<Tls>,
}

/// What an HTTP listener serves.
#[derive(Clone, Debug)]
pub enum Site {
    /// `/health`, `/metrics` and the stored profiles of the agent itself.
    Admin(Arc<Admin>),
    /// A Prometheus exporter sink's latest window at `/metrics` (and `/`).
    Exporter(Exposition),
}

const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The admin site's `/`: the agent at a glance (receivers, series,
/// sinks, log sources, the profiler), refreshed every 2 s from
/// `/api/metrics`, with a link to every endpoint the site serves.
const AGENT_PAGE: &[u8] = include_bytes!("assets/agent.html");

const HTML: &str = "text/html; charset=utf-8";

/// The `/profiles` page: one file of HTML, CSS and plain JavaScript, built
/// into the binary; it reads `/api/profiles/` and loads nothing else.
const PROFILES_PAGE: &[u8] = include_bytes!("assets/profiles.html");

/// What the pages may load: only the admin site itself (their scripts and
/// styles are inline), so no request leaves the host.
const PAGE_POLICY: &str =
    "default-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'";

/// The admin site's `/login`: a form for the token.
const LOGIN_PAGE: &str = include_str!("assets/login.html");

/// The most bytes `/login` reads of a form.
const LOGIN_BODY_LIMIT: usize = 4096;

/// The longest request target (path and query) served; longer ones get
/// 414. The longest the site's own pages ask for is a few hundred bytes.
const MAX_URL_BYTES: usize = 8192;

/// hyper's read buffer, and so the most bytes of a request line and
/// headers: past it hyper answers 431 and closes.
const MAX_HEAD_BYTES: usize = 16 * 1024;

/// Connections one listener serves at once; one more is answered 503 and
/// closed, so that a client opening many cannot grow the agent's memory.
const MAX_CONNECTIONS: usize = 64;

/// How long a connection may take to send a request's head, and may
/// stay open idle between requests: a connection that sends nothing
/// gives its place back.
const HEAD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A response of `status` with `body` of type `ctype`; pages get the
/// [`PAGE_POLICY`].
fn plain(status: StatusCode, ctype: &str, body: Bytes) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = status;
    if let Ok(v) = ctype.parse() {
        r.headers_mut().insert(CONTENT_TYPE, v);
    }
    if ctype == HTML {
        r.headers_mut().insert(
            hyper::header::CONTENT_SECURITY_POLICY,
            hyper::header::HeaderValue::from_static(PAGE_POLICY),
        );
    }
    r
}

/// The login form; `refused` adds that the token given was not this
/// agent's.
fn login_page(status: StatusCode, refused: bool) -> Response<Full<Bytes>> {
    let page = if refused {
        LOGIN_PAGE.replace(
            "<!--REFUSED-->",
            "<p class=\"refused\">That is not this agent's token.</p>",
        )
    } else {
        LOGIN_PAGE.to_string()
    };
    let mut r = plain(status, HTML, Bytes::from(page));
    r.headers_mut().insert(
        hyper::header::CACHE_CONTROL,
        hyper::header::HeaderValue::from_static("no-store"),
    );
    r
}

/// What a request without the token gets: the login form for the pages,
/// a 401 that says what to send for everything else. Nothing of the data.
fn unauthorized(path: &str) -> Response<Full<Bytes>> {
    let mut r = if path == "/" || path == "/profiles" {
        login_page(StatusCode::UNAUTHORIZED, false)
    } else {
        plain(
            StatusCode::UNAUTHORIZED,
            "text/plain; charset=utf-8",
            Bytes::from_static(
                b"this agent's admin site needs its token: send Authorization: Bearer TOKEN, \
the token being in agent.admin_token_file (`sonde admin-url` prints it); only /health is open\n",
            ),
        )
    };
    r.headers_mut().insert(
        hyper::header::WWW_AUTHENTICATE,
        hyper::header::HeaderValue::from_static("Bearer realm=\"sonde\""),
    );
    r
}

/// The `token` field of a form or query string.
fn token_field(form: &[u8]) -> Option<String> {
    form_urlencoded::parse(form)
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v.into_owned())
}

/// `/login`: the form (GET), or a token to check, from the form (POST) or
/// from `?token=` (the address `sonde admin-url` prints). The right token
/// sets the cookie and sends the browser on to `/`, so that the address
/// bar, the history and every link stay without it; a wrong one is
/// counted and refused.
async fn login<B: ReqBody>(admin: &Admin, token: &Token, req: Request<B>) -> Response<Full<Bytes>> {
    let telemetry = &admin.telemetry;
    use http_body_util::{BodyExt, Limited};
    let given = match *req.method() {
        Method::GET | Method::HEAD => req.uri().query().and_then(|q| token_field(q.as_bytes())),
        Method::POST => match Limited::new(req.into_body(), LOGIN_BODY_LIMIT)
            .collect()
            .await
        {
            Ok(body) => token_field(&body.to_bytes()),
            Err(_) => {
                telemetry.admin_too_large.fetch_add(1, Relaxed);
                return plain(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "text/plain",
                    Bytes::from_static(b"a login form is at most 4 KiB\n"),
                );
            }
        },
        _ => {
            return plain(
                StatusCode::METHOD_NOT_ALLOWED,
                "text/plain",
                Bytes::from_static(b"only GET, HEAD and POST\n"),
            )
        }
    };
    match given {
        None => login_page(StatusCode::OK, false),
        Some(t) if token.matches(t.trim().as_bytes()) => {
            let mut r = plain(StatusCode::SEE_OTHER, "text/plain", Bytes::new());
            let headers = r.headers_mut();
            headers.insert(
                hyper::header::LOCATION,
                hyper::header::HeaderValue::from_static("/"),
            );
            if let Ok(v) = token.cookie(admin.tls.is_some()).parse() {
                headers.insert(hyper::header::SET_COOKIE, v);
            }
            r
        }
        Some(_) => {
            telemetry.admin_unauthorized.fetch_add(1, Relaxed);
            login_page(StatusCode::UNAUTHORIZED, true)
        }
    }
}

fn respond(site: &Site, path: &str) -> Response<Full<Bytes>> {
    let (status, ctype, body): (StatusCode, &str, Bytes) = match (site, path) {
        (Site::Admin(_), "/") => (StatusCode::OK, HTML, Bytes::from_static(AGENT_PAGE)),
        (Site::Admin(a), "/api/metrics") => (
            StatusCode::OK,
            "application/json",
            Bytes::from(a.telemetry.to_json().to_string()),
        ),
        (Site::Admin(_), "/profiles") => (StatusCode::OK, HTML, Bytes::from_static(PROFILES_PAGE)),
        (Site::Admin(_), "/health") => (StatusCode::OK, "text/plain", Bytes::from_static(b"ok\n")),
        (Site::Admin(a), "/metrics") => (
            StatusCode::OK,
            PROMETHEUS_TEXT,
            Bytes::from(a.telemetry.render()),
        ),
        (Site::Exporter(e), "/metrics" | "/") => (
            StatusCode::OK,
            PROMETHEUS_TEXT,
            Bytes::from((*e.get()).clone()),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            Bytes::from_static(b"not found\n"),
        ),
    };
    plain(status, ctype, body)
}

/// `/api/tap`: `?session=N` answers what session N gathered since its
/// last poll; otherwise a session is opened from `what` (`points`,
/// `records` or `names`), `receiver`, `source` and `metric`, and its
/// first (empty) answer says its number. See [`sonde_runtime::tap`].
fn tap(tap: &sonde_runtime::tap::Tap, query: Option<&str>) -> Response<Full<Bytes>> {
    use sonde_runtime::tap::Watch;
    let bad = |msg: String| {
        plain(
            StatusCode::BAD_REQUEST,
            "text/plain",
            Bytes::from(msg + "\n"),
        )
    };
    let mut what = None;
    let (mut receiver, mut source, mut metric, mut session) = (None, None, None, None);
    for (k, v) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        let v = v.into_owned();
        match &*k {
            "what" => what = Some(v),
            "receiver" => receiver = Some(v),
            "source" => source = Some(v),
            "metric" => metric = Some(v),
            "session" => session = Some(v),
            other => {
                return bad(format!(
                    "unknown parameter {other:?}: what, receiver, source, metric or session"
                ))
            }
        }
    }
    let json = |v: serde_json::Value| {
        plain(
            StatusCode::OK,
            "application/json",
            Bytes::from(v.to_string()),
        )
    };
    if let Some(id) = session {
        return match id.parse().ok().and_then(|id| tap.session(id)) {
            Some(s) => json(s.poll()),
            None => plain(
                StatusCode::NOT_FOUND,
                "text/plain",
                Bytes::from_static(
                    b"no such tap: it ended 10 s after its last poll; open another\n",
                ),
            ),
        };
    }
    let metric = match metric.map(|m| sonde_runtime::tap::glob(&m)) {
        None => None,
        Some(Ok(g)) => Some(g),
        Some(Err(e)) => return bad(format!("metric: {e}")),
    };
    let watch = match (what.as_deref().unwrap_or("points"), source) {
        ("points", None) => Watch::Points { receiver, metric },
        ("names", None) if metric.is_none() => Watch::Names { receiver },
        ("records", source) if receiver.is_none() && metric.is_none() => Watch::Records { source },
        (w @ ("points" | "names" | "records"), _) => {
            return bad(format!(
                "what={w} takes {}",
                match w {
                    "points" => "receiver and metric",
                    "names" => "receiver",
                    _ => "source",
                }
            ))
        }
        (w, _) => return bad(format!("what={w}: points, records or names")),
    };
    match tap.open(watch) {
        Ok(s) => json(s.poll()),
        Err(e) => plain(
            StatusCode::TOO_MANY_REQUESTS,
            "text/plain",
            Bytes::from(format!("{e}\n")),
        ),
    }
}

/// Binds a TCP listener for [`serve`] (turned into a [`Listener`] with
/// `.into()`).
pub use sonde_runtime::socket::bind_tcp as bind;

/// Binds the unix socket file `path` for [`serve`], as a unix receiver's
/// socket is bound (see the module docs): `options.mode` and
/// `options.owner` and `options.group`, when set, are the file's before
/// it listens.
///
/// # Errors
///
/// When the file cannot be bound (no such directory, permission), another
/// process serves it, or the path is a file other than a socket.
pub fn bind_unix(path: &Path, options: SocketOptions) -> Result<Listener, BindError> {
    let addr = ListenAddr::Unix(path.to_path_buf());
    let bound = sonde_runtime::socket::bind(
        &addr,
        SocketOptions {
            workers: 1,
            ..options
        },
    )?;
    match bound
        .into_iter()
        .next()
        .map(sonde_runtime::socket::Bound::into_parts)
    {
        Some((socket, Some(file))) => Ok(Listener {
            kind: Kind::Unix(std::os::fd::OwnedFd::from(socket).into()),
            file: Some(file),
        }),
        _ => Err(BindError::Io {
            addr: addr.to_string(),
            error: io::Error::other("no socket file was bound"),
        }),
    }
}

/// A listener bound for [`serve`]: a TCP port ([`bind`], then `.into()`)
/// or a unix socket file ([`bind_unix`]).
#[derive(Debug)]
pub struct Listener {
    kind: Kind,
    /// A unix socket's file, removed when the [`Serving`] is dropped.
    file: Option<SocketFile>,
}

#[derive(Debug)]
enum Kind {
    Tcp(TcpListener),
    Unix(UnixListener),
}

impl From<TcpListener> for Listener {
    fn from(l: TcpListener) -> Self {
        Listener {
            kind: Kind::Tcp(l),
            file: None,
        }
    }
}

/// What [`serve`] started. The listeners are served until the process
/// exits; dropping this removes their unix socket files, so that a
/// stopped agent leaves none behind.
#[derive(Debug)]
#[must_use = "dropping it removes the unix socket files of the listeners"]
pub struct Serving {
    _files: Vec<SocketFile>,
}

/// Serves every `(listener, site)` pair on a new background thread, until
/// the process exits.
///
/// # Errors
///
/// When the runtime or thread cannot be created.
pub fn serve(sites: Vec<(Listener, Site)>) -> io::Result<Serving> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    let mut files = Vec::new();
    let sites: Vec<(Kind, Site)> = sites
        .into_iter()
        .map(|(l, site)| {
            files.extend(l.file);
            (l.kind, site)
        })
        .collect();
    std::thread::Builder::new()
        .name("http".into())
        .spawn(move || {
            sonde_runtime::priority::enter_background();
            rt.block_on(async move {
                let mut tasks = Vec::new();
                for (listener, site) in sites {
                    if let Site::Admin(a) = &site {
                        tasks.push(tokio::spawn(end_idle_taps(Arc::clone(&a.telemetry.tap))));
                    }
                    // Registered with this thread's runtime, which only
                    // exists here.
                    let task = match listener {
                        Kind::Tcp(l) => tokio::net::TcpListener::from_std(l)
                            .map(|l| tokio::spawn(accept_loop(l, site))),
                        Kind::Unix(l) => tokio::net::UnixListener::from_std(l)
                            .map(|l| tokio::spawn(accept_loop(l, site))),
                    };
                    match task {
                        Ok(t) => tasks.push(t),
                        Err(e) => tracing::error!(error = %e, "http listener failed"),
                    }
                }
                for t in tasks {
                    let _ = t.await;
                }
            });
        })?;
    Ok(Serving { _files: files })
}

/// Ends the taps nobody polls any more, so that the data path stops
/// paying for them.
async fn end_idle_taps(tap: Arc<sonde_runtime::tap::Tap>) {
    let mut every = tokio::time::interval(std::time::Duration::from_secs(1));
    loop {
        every.tick().await;
        tap.end_idle(std::time::Instant::now());
    }
}

/// A request body the site can read (hyper's `Incoming`, or a test's
/// `Full`).
trait ReqBody:
    hyper::body::Body<Data = Bytes, Error: std::error::Error + Send + Sync + 'static> + Send + 'static
{
}
impl<B> ReqBody for B where
    B: hyper::body::Body<Data = Bytes, Error: std::error::Error + Send + Sync + 'static>
        + Send
        + 'static
{
}

async fn route<B: ReqBody>(site: Site, req: Request<B>) -> Response<Full<Bytes>> {
    if let Site::Admin(a) = &site {
        if let Some(token) = &a.auth {
            let path = req.uri().path();
            if path == "/login" {
                return login(a, token, req).await;
            }
            // Probes (a kubelet, systemd, a load balancer) need no token.
            if path != "/health" && !token.admits(req.headers()) {
                a.telemetry.admin_unauthorized.fetch_add(1, Relaxed);
                return unauthorized(path);
            }
        }
    }
    if req.uri().path_and_query().map_or(0, |p| p.as_str().len()) > MAX_URL_BYTES {
        if let Site::Admin(a) = &site {
            a.telemetry.admin_too_large.fetch_add(1, Relaxed);
        }
        return plain(
            StatusCode::URI_TOO_LONG,
            "text/plain",
            Bytes::from_static(b"the request target is over 8 KiB\n"),
        );
    }
    let query = req.uri().query().map(str::to_string);
    // Every endpoint only reads: nothing the admin site serves changes the
    // agent, so a request that is not a read is refused.
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = Response::new(Full::new(Bytes::from_static(b"only GET and HEAD\n")));
        *r.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
        return r;
    }
    match (&site, req.uri().path()) {
        (Site::Admin(a), path) if profiles::handles(path) => {
            profiles::respond(
                a.profiles.clone(),
                a.prices.clone(),
                Arc::clone(&a.classes),
                a.fleet.clone(),
                Arc::clone(&a.telemetry.profiler),
                path.to_string(),
                query,
            )
            .await
        }
        (Site::Admin(a), "/api/tap") => tap(&a.telemetry.tap, query.as_deref()),
        (Site::Admin(_), "/debug/pprof/profile") => profiling::respond(query, Format::Pprof).await,
        (Site::Admin(_), "/debug/pprof/flamegraph") => {
            profiling::respond(query, Format::FlameGraph).await
        }
        (_, path) => respond(&site, path),
    }
}

/// The answer to a connection past [`MAX_CONNECTIONS`], written before
/// it is closed.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: text/plain\r\nContent-Length: 32\r\nConnection: close\r\n\r\ntoo many connections; try again\n";

/// How long, and for how many bytes, a refused connection is read after
/// its 503 before it is closed.
const LINGER: std::time::Duration = std::time::Duration::from_secs(2);
const LINGER_BYTES: usize = 64 * 1024;

/// A listener the accept loop takes connections from: a TCP port or a
/// unix socket file.
trait Accept: Send + Sync + 'static {
    /// An accepted connection.
    type Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static;

    /// The next connection.
    fn next(&self) -> impl Future<Output = io::Result<Self::Stream>> + Send;
}

impl Accept for tokio::net::TcpListener {
    type Stream = tokio::net::TcpStream;

    async fn next(&self) -> io::Result<Self::Stream> {
        self.accept().await.map(|(s, _)| s)
    }
}

impl Accept for tokio::net::UnixListener {
    type Stream = tokio::net::UnixStream;

    async fn next(&self) -> io::Result<Self::Stream> {
        self.accept().await.map(|(s, _)| s)
    }
}

async fn accept_loop<L: Accept>(listener: L, site: Site) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let (telemetry, tls) = match &site {
        Site::Admin(a) => (Some(Arc::clone(&a.telemetry)), a.tls.clone()),
        Site::Exporter(_) => (None, None),
    };
    loop {
        let mut stream = match listener.next().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "http accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            if let Some(t) = &telemetry {
                t.admin_connections_refused.fetch_add(1, Relaxed);
            }
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let _ = stream.write_all(BUSY).await;
                let _ = stream.shutdown().await;
                // A lingering close: read what the client sends until it
                // closes (bounded in time and bytes), so that a client still
                // writing its request gets the 503 rather than a broken
                // pipe or a reset that loses the answer.
                let mut sink = [0u8; 4096];
                let _ = tokio::time::timeout(LINGER, async {
                    let mut left = LINGER_BYTES;
                    while left > 0 {
                        match stream.read(&mut sink).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => left = left.saturating_sub(n),
                        }
                    }
                })
                .await;
            });
            continue;
        };
        let site = site.clone();
        let telemetry = telemetry.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                None => serve_connection(stream, site, telemetry.as_deref()).await,
                // In this task rather than the loop, so that a client slow
                // to shake hands holds its own place and no one else's.
                Some(tls) => {
                    let failed =
                        match tokio::time::timeout(HEAD_TIMEOUT, tls.acceptor().accept(stream))
                            .await
                        {
                            Ok(Ok(stream)) => {
                                serve_connection(stream, site, telemetry.as_deref()).await;
                                None
                            }
                            Ok(Err(e)) => Some(e.to_string()),
                            Err(_) => Some("no handshake within 10 s".to_string()),
                        };
                    if let Some(error) = failed {
                        if let Some(t) = &telemetry {
                            t.admin_tls_handshake_failures.fetch_add(1, Relaxed);
                        }
                        tracing::debug!(%error, "admin site: TLS handshake failed");
                    }
                }
            }
            drop(slot);
        });
    }
}

/// Serves HTTP/1.1 on one accepted connection (TCP, a unix socket, or TLS
/// once the handshake is done) until the client or a limit closes it.
async fn serve_connection<S>(stream: S, site: Site, telemetry: Option<&Telemetry>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let svc = service_fn(move |req: Request<Incoming>| {
        let site = site.clone();
        async move { Ok::<_, Infallible>(route(site, req).await) }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(MAX_HEAD_BYTES)
        .serve_connection(TokioIo::new(stream), svc)
        .await;
    if let (Err(e), Some(t)) = (served, telemetry) {
        if e.is_parse_too_large() {
            t.admin_too_large.fetch_add(1, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An admin site with empty counters and an empty profile store.
    fn test_admin() -> Site {
        Site::Admin(Arc::new(Admin {
            telemetry: Arc::new(Telemetry::default()),
            profiles: Store::reader(&std::env::temp_dir().join("sonde-no-such-data-dir")),
            prices: Default::default(),
            classes: Default::default(),
            fleet: None,
            auth: None,
            tls: None,
        }))
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(400))]

        /// Whatever a client sends in a path, a query, a header and a
        /// body, the site answers without a panic and never with a 5xx.
        /// (The self-profile paths are left out: a valid one samples for
        /// as many seconds as it asks.)
        #[test]
        fn any_request_gets_an_answer_and_never_a_server_error(
            path in proptest::prop_oneof![
                proptest::strategy::Just("/".to_string()),
                proptest::strategy::Just("/profiles".to_string()),
                proptest::strategy::Just("/metrics".to_string()),
                proptest::strategy::Just("/api/metrics".to_string()),
                proptest::strategy::Just("/health".to_string()),
                proptest::strategy::Just("/login".to_string()),
                "/api/profiles/(top|flamegraph|folded|pprof|processes|diff|diff/flamegraph|x)",
                "/[a-z0-9/._%-]{0,24}",
            ],
            query in proptest::collection::vec(("[a-z_]{1,8}", "[ -~]{0,24}"), 0..5),
            header in "[ -~]{0,80}",
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
            method in proptest::prop_oneof![
                proptest::strategy::Just(Method::GET),
                proptest::strategy::Just(Method::HEAD),
                proptest::strategy::Just(Method::POST),
                proptest::strategy::Just(Method::DELETE),
            ],
            guarded in proptest::prelude::any::<bool>(),
        ) {
            let site = Site::Admin(Arc::new(Admin {
                telemetry: Arc::new(Telemetry::default()),
                profiles: Store::reader(&std::env::temp_dir().join("sonde-no-such-data-dir")),
                prices: Default::default(),
                classes: Default::default(),
                fleet: None,
                auth: guarded.then(|| Token::new("0123456789abcdef0123456789abcdef").unwrap()),
                tls: None,
            }));
            let mut target = path.clone();
            if !query.is_empty() {
                let mut q = form_urlencoded::Serializer::new(String::new());
                for (k, v) in &query {
                    q.append_pair(k, v);
                }
                target = format!("{target}?{}", q.finish());
            }
            let Ok(req) = Request::builder()
                .method(method)
                .uri(&target)
                .header(hyper::header::AUTHORIZATION, header.as_str())
                .header(hyper::header::COOKIE, header.as_str())
                .body(Full::new(Bytes::from(body)))
            else {
                // Not a request hyper would have parsed.
                return Ok(());
            };
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .unwrap();
            let r = rt.block_on(route(site, req));
            proptest::prop_assert!(
                r.status().as_u16() < 500,
                "{target}: {}",
                r.status()
            );
        }
    }

    fn body(r: Response<Full<Bytes>>) -> String {
        use http_body_util::BodyExt;
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let bytes = rt.block_on(r.into_body().collect()).unwrap().to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[test]
    fn admin_index_links_every_endpoint() {
        let site = test_admin();
        let r = respond(&site, "/");
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()[CONTENT_TYPE], "text/html; charset=utf-8");
        let page = body(r);
        for path in [
            "/profiles",
            "/health",
            "/metrics",
            "/debug/pprof/profile?seconds=30",
            "/debug/pprof/flamegraph?seconds=30",
        ] {
            assert!(page.contains(&format!("href=\"{path}\"")), "{path}");
        }
        // Every link leads somewhere: the plain pages answer, and the
        // profile links carry a valid duration.
        assert_eq!(respond(&site, "/health").status(), StatusCode::OK);
        assert_eq!(respond(&site, "/profiles").status(), StatusCode::OK);
        assert_eq!(respond(&site, "/metrics").status(), StatusCode::OK);
        assert_eq!(profiling::seconds_param(Some("seconds=30")), Ok(30));
    }

    #[test]
    fn an_exporter_serves_its_window_at_the_root_not_the_index() {
        let e = Exposition::default();
        let r = respond(&Site::Exporter(e), "/");
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()[CONTENT_TYPE], PROMETHEUS_TEXT);
        assert_eq!(body(r), "");
    }

    #[test]
    fn admin_answers_health_and_metrics_and_404s_the_rest() {
        let site = test_admin();
        assert_eq!(respond(&site, "/health").status(), StatusCode::OK);
        let page = respond(&site, "/profiles");
        assert_eq!(page.status(), StatusCode::OK);
        // The page may load nothing from outside the admin site.
        assert!(page.headers()[hyper::header::CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap()
            .starts_with("default-src 'self'"));
        let page = body(page);
        assert!(!page.contains("http://") && !page.contains("https://"));
        assert_eq!(respond(&site, "/metrics").status(), StatusCode::OK);
        assert_eq!(respond(&site, "/nope").status(), StatusCode::NOT_FOUND);
    }

    #[test]
    fn the_admin_listener_serves_its_index_over_http() {
        use std::io::{Read, Write};
        use std::time::{Duration, Instant};

        let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let _serving = serve(vec![(listener.into(), test_admin())]).unwrap();
        // The listener is bound before `serve` returns, so the connection
        // queues until the HTTP thread accepts it.
        let mut conn = std::net::TcpStream::connect(addr).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        conn.write_all(b"GET / HTTP/1.1\r\nHost: sonde\r\nConnection: close\r\n\r\n")
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut answer = String::new();
        while !answer.contains("</html>") && Instant::now() < deadline {
            let mut buf = [0u8; 4096];
            match conn.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => answer.push_str(&String::from_utf8_lossy(&buf[..n])),
                Err(e) => panic!("reading the answer: {e}"),
            }
        }
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(
            answer.contains("content-type: text/html; charset=utf-8\r\n"),
            "{answer}"
        );
        assert!(answer.contains("<a href=\"/metrics\">"), "{answer}");
    }

    #[test]
    fn the_busy_answer_says_its_own_length() {
        let text = std::str::from_utf8(BUSY).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let length = head
            .lines()
            .find_map(|line| line.strip_prefix("Content-Length: "))
            .unwrap();
        assert_eq!(length.parse::<usize>().unwrap(), body.len());
    }

    #[test]
    fn on_a_unix_socket_the_site_is_served_with_the_same_limits_and_the_file_goes_with_it() {
        use std::os::unix::fs::PermissionsExt;
        use std::time::Duration;

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("admin.sock");
        // A stale file, as a killed agent leaves it: bound, nobody on it.
        drop(UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let options = SocketOptions {
            mode: 0o660,
            ..SocketOptions::default()
        };
        let listener = bind_unix(&path, options).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o660);
        let telemetry = Arc::new(Telemetry::default());
        let site = Site::Admin(Arc::new(Admin {
            telemetry: Arc::clone(&telemetry),
            profiles: Store::reader(&std::env::temp_dir().join("sonde-no-such-data-dir")),
            prices: Default::default(),
            classes: Default::default(),
            fleet: None,
            auth: Some(Token::new("0123456789abcdef0123456789abcdef").unwrap()),
            tls: None,
        }));
        let serving = serve(vec![(listener, site)]).unwrap();
        let get = |target: &str, headers: &[(&str, &str)]| {
            client::get_unix(&path, target, headers, Duration::from_secs(10)).unwrap()
        };
        let health = get("/health", &[]);
        assert_eq!(
            (health.status, &health.body[..]),
            (StatusCode::OK, &b"ok\n"[..])
        );
        // The same routes and the same token.
        assert_eq!(get("/metrics", &[]).status, StatusCode::UNAUTHORIZED);
        let bearer = [("authorization", "Bearer 0123456789abcdef0123456789abcdef")];
        let metrics = get("/metrics", &bearer);
        assert_eq!(metrics.status, StatusCode::OK);
        assert!(
            String::from_utf8_lossy(&metrics.body).contains("sonde_admin_unauthorized_total 1\n")
        );
        // The same 64 places: the 65th connection is answered 503.
        let open: Vec<_> = (0..MAX_CONNECTIONS)
            .map(|_| std::os::unix::net::UnixStream::connect(&path).unwrap())
            .collect();
        // Read by hand: the refusal may come before the request is sent,
        // which hyper's client reports as an error rather than an answer.
        let refused = {
            use std::io::{Read, Write};
            let mut c = std::os::unix::net::UnixStream::connect(&path).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let _ = c.write_all(b"GET /health HTTP/1.1\r\nHost: sonde\r\n\r\n");
            let mut answer = Vec::new();
            let _ = c.read_to_end(&mut answer);
            String::from_utf8_lossy(&answer).into_owned()
        };
        assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
        assert_eq!(telemetry.admin_connections_refused.load(Relaxed), 1);
        drop(open);
        // A live file is another agent's: not replaced (after the
        // count above, as its probe is a connection too).
        assert!(matches!(
            bind_unix(&path, options),
            Err(BindError::InUse(_))
        ));

        drop(serving);
        assert!(!path.exists());
    }

    #[test]
    fn over_tls_the_admin_listener_serves_https_and_counts_failed_handshakes() {
        use std::io::{Read, Write};
        use std::time::{Duration, Instant};
        use tokio_rustls::rustls;

        let dir = tempfile::tempdir().unwrap();
        let own = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
        let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        std::fs::write(&cert, own.cert.pem()).unwrap();
        std::fs::write(&key, own.signing_key.serialize_pem()).unwrap();
        let telemetry = Arc::new(Telemetry::default());
        let site = Site::Admin(Arc::new(Admin {
            telemetry: Arc::clone(&telemetry),
            profiles: Store::reader(&std::env::temp_dir().join("sonde-no-such-data-dir")),
            prices: Default::default(),
            classes: Default::default(),
            fleet: None,
            auth: None,
            tls: Some(Tls::load(&cert, &key).unwrap()),
        }));
        let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let _serving = serve(vec![(listener.into(), site)]).unwrap();
        let read_all = |conn: &mut dyn Read| {
            let mut got = Vec::new();
            let _ = conn.read_to_end(&mut got);
            String::from_utf8_lossy(&got).into_owned()
        };

        // Plain HTTP: no answer of HTTP, and the failure counted.
        let mut plain = std::net::TcpStream::connect(addr).unwrap();
        plain
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        plain
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: sonde\r\nConnection: close\r\n\r\n")
            .unwrap();
        let answer = read_all(&mut plain);
        assert!(!answer.contains("HTTP/1.1"), "{answer}");
        let deadline = Instant::now() + Duration::from_secs(10);
        while telemetry.admin_tls_handshake_failures.load(Relaxed) == 0 {
            assert!(
                Instant::now() < deadline,
                "the failed handshake is not counted"
            );
            std::thread::sleep(Duration::from_millis(10));
        }

        // A client that trusts the certificate, over TLS 1.2 and 1.3, is
        // served while another sits silent where its handshake should be.
        let _silent = std::net::TcpStream::connect(addr).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(rustls_pki_types::CertificateDer::from(
                own.cert.der().to_vec(),
            ))
            .unwrap();
        for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let mut config = rustls::ClientConfig::builder_with_provider(provider)
                .with_protocol_versions(&[version])
                .unwrap()
                .with_root_certificates(roots.clone())
                .with_no_client_auth();
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            let name = rustls_pki_types::ServerName::try_from("127.0.0.1").unwrap();
            let conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
            let tcp = std::net::TcpStream::connect(addr).unwrap();
            tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut tls = rustls::StreamOwned::new(conn, tcp);
            tls.write_all(b"GET /health HTTP/1.1\r\nHost: sonde\r\nConnection: close\r\n\r\n")
                .unwrap();
            let answer = read_all(&mut tls);
            assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
            assert!(answer.ends_with("\r\n\r\nok\n"), "{answer}");
            assert_eq!(tls.conn.protocol_version(), Some(version.version));
            assert_eq!(tls.conn.alpn_protocol(), Some(&b"http/1.1"[..]));
        }
        assert_eq!(telemetry.admin_tls_handshake_failures.load(Relaxed), 1);
    }
}

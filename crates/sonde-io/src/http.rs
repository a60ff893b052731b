//! The HTTP listeners: the admin endpoint (`/health`, `/metrics`) and the
//! Prometheus exporter sinks' scrape endpoints.
//!
//! They share one single-threaded tokio runtime on its own thread: scrapes
//! are rare and tiny next to the data path, which never touches it.
//! Listeners are bound by the caller with [`bind`] first, so an address in
//! use fails the agent's start instead of a background thread.

use std::convert::Infallible;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::CONTENT_TYPE;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

use crate::sink::Exposition;
use crate::telemetry::Telemetry;

/// What an HTTP listener serves.
#[derive(Clone, Debug)]
pub enum Site {
    /// `/health` and `/metrics` of the agent itself.
    Admin(Arc<Telemetry>),
    /// A Prometheus exporter sink's latest window at `/metrics` (and `/`).
    Exporter(Exposition),
}

const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

fn respond(site: &Site, path: &str) -> Response<Full<Bytes>> {
    let (status, ctype, body): (StatusCode, &str, Bytes) = match (site, path) {
        (Site::Admin(_), "/health") => (StatusCode::OK, "text/plain", Bytes::from_static(b"ok\n")),
        (Site::Admin(t), "/metrics") => (StatusCode::OK, PROMETHEUS_TEXT, Bytes::from(t.render())),
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
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = status;
    if let Ok(v) = ctype.parse() {
        r.headers_mut().insert(CONTENT_TYPE, v);
    }
    r
}

/// Binds a listener for [`serve`].
///
/// # Errors
///
/// When the address cannot be bound.
pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let l = TcpListener::bind(addr)?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// Serves every `(listener, site)` pair on a new background thread, until
/// the process exits.
///
/// # Errors
///
/// When the runtime or thread cannot be created.
pub fn serve(sites: Vec<(TcpListener, Site)>) -> io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    std::thread::Builder::new()
        .name("http".into())
        .spawn(move || {
            rt.block_on(async move {
                let mut tasks = Vec::new();
                for (listener, site) in sites {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            tracing::error!(error = %e, "http listener failed");
                            continue;
                        }
                    };
                    tasks.push(tokio::spawn(accept_loop(listener, site)));
                }
                for t in tasks {
                    let _ = t.await;
                }
            });
        })?;
    Ok(())
}

async fn accept_loop(listener: tokio::net::TcpListener, site: Site) {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "http accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let site = site.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req: Request<Incoming>| {
                let r = respond(&site, req.uri().path());
                async move { Ok::<_, Infallible>(r) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_answers_health_and_metrics_and_404s_the_rest() {
        let site = Site::Admin(Arc::new(Telemetry::default()));
        assert_eq!(respond(&site, "/health").status(), StatusCode::OK);
        assert_eq!(respond(&site, "/metrics").status(), StatusCode::OK);
        assert_eq!(respond(&site, "/nope").status(), StatusCode::NOT_FOUND);
    }
}

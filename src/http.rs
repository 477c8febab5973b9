//! The `/metrics` endpoint (feature `http`): a fresh snapshot per scrape, rendered by
//! [`Prometheus`](crate::output::Prometheus), served by `tiny_http` on a thread of its own
//! (`spanprof-metrics`).
//!
//! A scrape takes a snapshot as [`ProfileHandle::snapshot`](crate::ProfileHandle::snapshot)
//! does: it reads the recording threads' histograms and counters without stopping them, and
//! renders on this thread, so recording goes on while it runs. The server stops when the
//! session finishes (the guard drops, or `finish` is called).
//!
//! Bound to [`Builder::DEFAULT_METRICS_ADDR`](crate::Builder::DEFAULT_METRICS_ADDR)
//! (127.0.0.1:9464) or the address of [`Builder::with_metrics_addr`](crate::Builder::with_metrics_addr)
//! / `SPANPROF_METRICS_ADDR`; port 0 takes any free port, which
//! [`ProfileHandle::metrics_addr`](crate::ProfileHandle::metrics_addr) tells. To let a
//! Prometheus server on another machine scrape it, bind `0.0.0.0:<port>`.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tiny_http::{Header, Method, Response, Server};

use crate::output::Prometheus;
use crate::profile::Snapshot;

/// What a scrape reads: a fresh snapshot, or `None` once the session is gone.
pub(crate) type SnapshotSource = Box<dyn Fn() -> Option<Snapshot> + Send>;

/// A bound listener, not yet serving: [`Builder::build`](crate::Builder::build) binds early so
/// that an address in use is an error before anything else starts.
pub(crate) struct Listener {
    server: Server,
    addr: SocketAddr,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("addr", &self.addr)
            .finish()
    }
}

/// Binds `addr`; the error names nothing (the caller does).
pub(crate) fn bind(addr: SocketAddr) -> io::Result<Listener> {
    let server = Server::http(addr).map_err(|e| match e.downcast::<io::Error>() {
        Ok(e) => *e,
        Err(e) => io::Error::other(e),
    })?;
    let addr = server.server_addr().to_ip().unwrap_or(addr);
    Ok(Listener { server, addr })
}

/// The endpoint's server thread; stopped (and joined) by [`MetricsServer::stop`] or on drop.
pub(crate) struct MetricsServer {
    server: Arc<Server>,
    addr: SocketAddr,
    stopping: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for MetricsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl MetricsServer {
    /// Serves `/metrics` from `listener` on a new thread, each scrape rendering `snapshot()`.
    pub(crate) fn start(listener: Listener, snapshot: SnapshotSource) -> io::Result<Self> {
        let server = Arc::new(listener.server);
        let stopping = Arc::new(AtomicBool::new(false));
        let thread = std::thread::Builder::new()
            .name("spanprof-metrics".to_string())
            .spawn({
                let (server, stopping) = (server.clone(), stopping.clone());
                move || serve(&server, &stopping, &snapshot)
            })?;
        Ok(Self {
            server,
            addr: listener.addr,
            stopping,
            thread: Some(thread),
        })
    }

    /// The address it is bound to (the port chosen where port 0 was asked for).
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops serving and waits for the thread (unless called on it).
    pub(crate) fn stop(&mut self) {
        self.stopping.store(true, Ordering::Release);
        self.server.unblock();
        if let Some(thread) = self.thread.take() {
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The server loop: one request at a time until stopped.
fn serve(server: &Server, stopping: &AtomicBool, snapshot: &SnapshotSource) {
    loop {
        match server.recv() {
            Ok(request) => {
                let response = respond(request.method(), request.url(), snapshot);
                // A client that went away is its own business.
                let _ = request.respond(response);
            }
            Err(_) if stopping.load(Ordering::Acquire) => return,
            // An accept error (e.g. out of file descriptors): try again shortly.
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

fn header(name: &str, value: &str) -> Header {
    // UNWRAP: constant, valid header names and values.
    Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("a valid header")
}

fn text(status: u16, body: impl Into<String>) -> Response<io::Cursor<Vec<u8>>> {
    Response::from_string(body)
        .with_status_code(status)
        .with_header(header("Content-Type", "text/plain; charset=utf-8"))
}

/// The response to one request: the exposition at `/metrics` (a query string is ignored), a
/// pointer to it at `/`, 404 elsewhere, 405 for methods other than GET and HEAD.
fn respond(method: &Method, url: &str, snapshot: &SnapshotSource) -> Response<io::Cursor<Vec<u8>>> {
    let path = url.split('?').next().unwrap_or("");
    if !matches!(method, Method::Get | Method::Head) {
        return text(405, "spanprof: only GET and HEAD\n")
            .with_header(header("Allow", "GET, HEAD"));
    }
    match path {
        "/metrics" => {
            // A panic while rendering is answered as an error; the thread serves on.
            let rendered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                snapshot().map(|s| Prometheus::new().to_string(&s))
            }));
            match rendered {
                Ok(Some(body)) => Response::from_string(body)
                    .with_header(header("Content-Type", Prometheus::CONTENT_TYPE)),
                Ok(None) => text(503, "spanprof: the profiling session has ended\n"),
                Err(_) => text(500, "spanprof: rendering the metrics failed\n"),
            }
        }
        "/" => text(200, "spanprof: Prometheus metrics at /metrics\n"),
        _ => text(404, "spanprof: not found; metrics are at /metrics\n"),
    }
}

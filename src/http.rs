//! The `/metrics` endpoint (feature `http`): a fresh snapshot per scrape, rendered by
//! [`Prometheus`](crate::output::Prometheus), served by `tiny_http` on a thread of its own
//! (`spanprof-metrics`).
//!
//! A scrape takes a snapshot as [`ProfileHandle::snapshot`](crate::ProfileHandle::snapshot)
//! does: it reads the recording threads' histograms and counters without stopping them, and
//! renders on this thread, so recording goes on while it runs. The server stops when the
//! session finishes (the guard drops, or `finish` is called).
//!
//! The server thread renders; each response is written on a thread of its connection's
//! (`spanprof-metrics-write`, one at a time per connection, ended once its queue is empty), so
//! a client that stops reading holds up only itself: other scrapes are answered, and finishing
//! the session waits at most [`STOP_WAIT`] for the server thread, never for a client.
//!
//! Bound to [`Builder::DEFAULT_METRICS_ADDR`](crate::Builder::DEFAULT_METRICS_ADDR)
//! (127.0.0.1:9464) or the address of [`Builder::with_metrics_addr`](crate::Builder::with_metrics_addr)
//! / `SPANPROF_METRICS_ADDR`; port 0 takes any free port, which
//! [`ProfileHandle::metrics_addr`](crate::ProfileHandle::metrics_addr) tells. To let a
//! Prometheus server on another machine scrape it, bind `0.0.0.0:<port>`.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tiny_http::{Header, Method, Request, Response, Server};

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

    /// Stops serving and waits for the thread (unless called on it), at most [`STOP_WAIT`]: it
    /// renders, and writes nothing itself. Responses still being written to clients are left
    /// to their threads.
    pub(crate) fn stop(&mut self) {
        self.stopping.store(true, Ordering::Release);
        self.server.unblock();
        if let Some(thread) = self.thread.take() {
            if thread.thread().id() == std::thread::current().id() {
                return;
            }
            let start = Instant::now();
            while !thread.is_finished() && start.elapsed() < STOP_WAIT {
                std::thread::sleep(Duration::from_millis(5));
            }
            if thread.is_finished() {
                let _ = thread.join();
            } else {
                tracing::warn!(target: crate::PERF_TARGET, "spanprof's /metrics server did not stop within 1 s; left to finish alone");
            }
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The longest [`MetricsServer::stop`] waits for the server thread.
pub(crate) const STOP_WAIT: Duration = Duration::from_secs(1);

type Answer = (Request, Response<io::Cursor<Vec<u8>>>);

/// The connections with responses being written: each one's queue, which its writer thread
/// empties.
#[derive(Default)]
struct Writers(Mutex<HashMap<SocketAddr, Sender<Answer>>>);

impl Writers {
    /// Writes `response` to `request`'s client on its connection's writer thread (made if it
    /// has none): a client that does not read blocks that thread only. tiny_http writes a
    /// connection's responses in order, so one thread per connection loses nothing.
    fn send(self: &Arc<Self>, request: Request, response: Response<io::Cursor<Vec<u8>>>) {
        let Some(peer) = request.remote_addr().copied() else {
            // Not a TCP client (tiny_http serves TCP here): answered in place.
            let _ = request.respond(response);
            return;
        };
        let mut queues = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let answer = match queues.get(&peer) {
            // Queued under the lock: its writer takes it before it may end (`write`).
            Some(queue) => match queue.send((request, response)) {
                Ok(()) => return,
                Err(mpsc::SendError(answer)) => answer,
            },
            None => (request, response),
        };
        let (queue, answers) = mpsc::channel();
        let writers = self.clone();
        let spawned = std::thread::Builder::new()
            .name("spanprof-metrics-write".to_string())
            .stack_size(64 * 1024)
            .spawn(move || writers.write(peer, &answers));
        if spawned.is_ok() {
            // The writer waits for the lock, held until both are done, before it looks.
            let _ = queue.send(answer);
            queues.insert(peer, queue);
        } else {
            // No thread to be had: the server thread writes it.
            drop(queues);
            let (request, response) = answer;
            let _ = request.respond(response);
        }
    }

    /// A connection's writer: answers what is queued, then ends (removing the queue under the
    /// lock the server thread queues under, so nothing is queued to a writer that ended).
    fn write(&self, peer: SocketAddr, answers: &mpsc::Receiver<Answer>) {
        loop {
            while let Ok((request, response)) = answers.try_recv() {
                // A client that went away is its own business.
                let _ = request.respond(response);
            }
            let mut queues = self.0.lock().unwrap_or_else(|e| e.into_inner());
            if let Ok(answer) = answers.try_recv() {
                drop(queues);
                let (request, response) = answer;
                let _ = request.respond(response);
                continue;
            }
            queues.remove(&peer);
            return;
        }
    }
}

/// The server loop: renders each request's response, and hands it to its connection's writer,
/// until stopped.
fn serve(server: &Server, stopping: &AtomicBool, snapshot: &SnapshotSource) {
    let writers = Arc::new(Writers::default());
    loop {
        match server.recv() {
            Ok(request) => {
                let response = respond(request.method(), request.url(), snapshot);
                writers.send(request, response);
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

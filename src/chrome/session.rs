//! The state of one tracing session: the backend's writer, the step count, and the window open
//! now. The schedule, the bound on pending windows, the files and the errors are the same for
//! both backends; only [`Writer`] differs.
//!
//! With tracing-chrome, one `tracing_chrome::ChromeLayer` serves the whole session; each window
//! is one file, switched with `FlushGuard::start_new`. One layer (not one per window) because
//! tracing-chrome keeps its channel and thread ids in thread-locals the first time a thread
//! traces: a second layer would not get the events of threads that traced into the first.
//! Between windows, tracing-chrome writes into `io::sink()` and the layer forwards nothing. For
//! the same reason only one chrome session may be alive in a process: building a second one
//! while the first is not finished is refused ([`Session::new`]).
//!
//! With tracing-perfetto-file, each window has a layer of its own (see `perfetto`), whose
//! per-thread state is its own: sessions need no such claim.

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use tracing_chrome::{ChromeLayerBuilder, FlushGuard};
use tracing_core::span::Id;
use tracing_core::Subscriber;
use tracing_subscriber::registry::LookupSpan;

use super::counters::CounterSource;
use super::layer::{ChromeTraceLayer, Forward};
use super::trace_file::{Results, WindowInfo, WindowWriter};
use super::{ChromeOptions, Output, StepWindow, TraceBackend};
use crate::error::{Error, Result};

/// How long closing a window waits for forwarding calls of other threads to return.
pub(super) const DRAIN_LIMIT: Duration = Duration::from_millis(200);

/// Windows opened and not yet completed (the open one included) past which a window that should
/// open is skipped: at most this many windows' events wait in memory for tracing-chrome's writer
/// thread.
pub(crate) const MAX_PENDING_WINDOWS: usize = 4;

/// How long [`Session::finish`] waits for the trace files to be completed.
pub(crate) const FINISH_LIMIT: Duration = Duration::from_secs(30);

/// Whether a session is alive in this process (see [`Claim`]).
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// The process's one chrome session: held from [`Session::new`] until tracing-chrome's writer
/// thread of the session has ended (or the session is dropped without a layer).
struct Claim;

impl Claim {
    fn take() -> Option<Self> {
        ACTIVE
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
            .then_some(Claim)
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        ACTIVE.store(false, Ordering::Release);
    }
}

pub(crate) struct Session {
    options: ChromeOptions,
    /// The open window's number (from 1), 0 between windows: the hot path's only check.
    pub(super) current: AtomicU64,
    /// Each traced thread's in-flight flag: the window it is forwarding a call into, 0 if none
    /// (a window is closed once the calls into it returned). Registered at a thread's first call.
    threads: Mutex<Vec<Arc<AtomicU64>>>,
    /// The span id of the step span whose close ends the open window (0: none yet).
    pub(super) last_step: AtomicU64,
    /// Step spans created since tracing began.
    steps: AtomicU64,
    state: Mutex<State>,
    results: Arc<Results>,
    counters: OnceLock<Arc<dyn CounterSource>>,
    /// How long `finish` waits for the files ([`FINISH_LIMIT`]; tests shorten it).
    finish_limit: Mutex<Duration>,
    /// Tests only: the simulated disk's free bytes (see `trace_file::Disk`).
    disk: OnceLock<Arc<AtomicI64>>,
    /// The dispatcher the chrome layer is part of, when tracing told it (`on_register_dispatch`;
    /// not through `Option<ChromeTraceLayer>`): where warnings raised in a callback go.
    pub(super) dispatch: OnceLock<tracing_core::dispatcher::WeakDispatch>,
}

/// The library that writes the session's windows.
enum Writer {
    Chrome(FlushGuard),
    #[cfg(feature = "perfetto")]
    Perfetto(super::perfetto::Windows),
}

impl Writer {
    /// Sends the events of window `number` to `writer` from now on.
    fn start_window(&mut self, number: u64, writer: WindowWriter, options: &ChromeOptions) {
        match self {
            Writer::Chrome(flush) => {
                let _ = (number, options);
                flush.start_new(Some(Box::new(writer)));
            }
            #[cfg(feature = "perfetto")]
            Writer::Perfetto(windows) => windows.start_window(number, writer, options),
        }
    }

    /// Ends the open window: its writer is dropped once its events are written, which
    /// completes the file (on the backend's thread).
    fn end_window(&mut self) {
        match self {
            // tracing-chrome ends the window's file ("]"), drops its writer (which completes
            // the file: see `trace_file`) and writes into a sink until the next window.
            Writer::Chrome(flush) => flush.start_new(Some(Box::new(std::io::sink()))),
            #[cfg(feature = "perfetto")]
            Writer::Perfetto(windows) => windows.end_window(),
        }
    }

    /// Ends tracing and waits until every window's file is complete.
    fn finish(self) {
        match self {
            // Dropping the guard joins tracing-chrome's writer thread.
            Writer::Chrome(flush) => drop(flush),
            #[cfg(feature = "perfetto")]
            Writer::Perfetto(windows) => windows.finish(),
        }
    }
}

#[derive(Default)]
struct State {
    layer_taken: bool,
    finished: bool,
    /// Dropped before `claim` (fields drop in order): the writer thread has ended when the
    /// claim is given back.
    writer: Option<Writer>,
    claim: Option<Claim>,
    /// tracing-chrome's time base, taken right after its layer was built (the Perfetto
    /// backend's files use a system clock: any instant serves).
    base: Option<Instant>,
    open: Option<OpenWindow>,
    windows_opened: u64,
    /// The last cycle a window was opened for: a cycle is never traced twice.
    last_cycle: Option<u64>,
}

struct OpenWindow {
    cycle: u64,
    info: Arc<WindowInfo>,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("options", &self.options)
            .field("window", &self.current.load(Ordering::Relaxed))
            .field("steps", &self.steps.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Session {
    /// Checks the options, creates the output directory, and (with tracing-chrome) claims the
    /// process's one chrome session.
    ///
    /// # Errors
    /// [`Error::InvalidChromeOptions`] for an empty file path or step span name, a step schedule
    /// with a single file, or while another chrome session is alive in the process (built and
    /// not finished); [`Error::Io`] if the directory cannot be created.
    pub(crate) fn new(options: ChromeOptions) -> Result<Self> {
        let dir = match &options.output {
            Output::Dir(dir) => Some(dir.as_path()),
            Output::File(file) => {
                if file.as_os_str().is_empty() {
                    return Err(Error::InvalidChromeOptions {
                        reason: "the trace file path is empty (ChromeOptions::file)",
                    });
                }
                if options.steps.is_some() {
                    return Err(Error::InvalidChromeOptions {
                        reason: "a step schedule writes one file per window: give a directory \
                                 (ChromeOptions::dir), not a file",
                    });
                }
                file.parent().filter(|p| !p.as_os_str().is_empty())
            }
        };
        if let Some((step, _)) = &options.steps {
            if step.is_empty() {
                return Err(Error::InvalidChromeOptions {
                    reason: "the step span name is empty",
                });
            }
        }
        if let Some(dir) = dir {
            std::fs::create_dir_all(dir).map_err(|source| Error::Io {
                action: "creating the chrome trace directory",
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let claim = match options.backend {
            TraceBackend::Chrome => Some(Claim::take().ok_or(Error::InvalidChromeOptions {
                reason: "another chrome trace session is alive in this process (tracing-chrome \
                         keeps per-thread state, so two sessions would write wrong files): \
                         finish or drop its guard before building a new one",
            })?),
            #[cfg(feature = "perfetto")]
            TraceBackend::Perfetto => None,
        };
        Ok(Self {
            options,
            current: AtomicU64::new(0),
            threads: Mutex::new(Vec::new()),
            last_step: AtomicU64::new(0),
            steps: AtomicU64::new(0),
            state: Mutex::new(State {
                claim,
                ..State::default()
            }),
            results: Arc::new(Results::default()),
            counters: OnceLock::new(),
            finish_limit: Mutex::new(FINISH_LIMIT),
            disk: OnceLock::new(),
            dispatch: OnceLock::new(),
        })
    }

    /// Windows skipped because [`MAX_PENDING_WINDOWS`] earlier ones were still being written.
    pub(crate) fn skipped_windows(&self) -> u64 {
        self.results.skipped.load(Ordering::Relaxed)
    }

    /// Tests: how long `finish` waits for the files.
    #[cfg(test)]
    pub(crate) fn set_finish_limit(&self, limit: Duration) {
        *self.finish_limit.lock().unwrap() = limit;
    }

    /// Tests: every trace file of the session goes to a "disk" with `bytes` free (returned, to
    /// change it); set it before the first window opens.
    #[cfg(test)]
    pub(crate) fn set_disk_space(&self, bytes: i64) -> Arc<AtomicI64> {
        self.disk
            .get_or_init(|| Arc::new(AtomicI64::new(bytes)))
            .clone()
    }

    /// Tests: whether a session is alive in the process.
    #[cfg(test)]
    pub(crate) fn any_alive() -> bool {
        ACTIVE.load(Ordering::Acquire)
    }

    /// Where resource samples for the counter tracks come from. Set it once, before the first
    /// window opens (windows opened earlier get no counters); later calls are ignored.
    pub(crate) fn set_counter_source(&self, source: Arc<dyn CounterSource>) {
        let _ = self.counters.set(source);
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new thread's in-flight flag (see `threads`).
    pub(super) fn thread_flag(&self) -> Arc<AtomicU64> {
        let flag = Arc::new(AtomicU64::new(0));
        self.threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(flag.clone());
        flag
    }

    pub(super) fn include_args(&self) -> bool {
        self.options.include_args
    }

    /// The step span name, if windows follow a schedule.
    #[inline(always)]
    pub(super) fn step_name(&self) -> Option<&str> {
        self.options.steps.as_ref().map(|(name, _)| name.as_str())
    }

    /// Builds the session's one trace layer (and starts the backend's writer thread); `None` if
    /// it was built before or the session is finished.
    pub(crate) fn layer<S>(self: &Arc<Self>) -> Option<ChromeTraceLayer<S>>
    where
        S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
    {
        let mut state = self.state();
        if state.layer_taken || state.finished {
            return None;
        }
        state.layer_taken = true;
        let forward = match self.options.backend {
            TraceBackend::Chrome => {
                let (chrome, flush) = ChromeLayerBuilder::new()
                    .writer(std::io::sink())
                    .include_args(self.options.include_args)
                    .include_locations(self.options.include_locations)
                    .build();
                state.writer = Some(Writer::Chrome(flush));
                Forward::Chrome(chrome)
            }
            #[cfg(feature = "perfetto")]
            TraceBackend::Perfetto => {
                let windows = super::perfetto::Windows::start();
                let slot = windows.slot();
                state.writer = Some(Writer::Perfetto(windows));
                Forward::Perfetto(slot)
            }
        };
        // tracing-chrome reads `Instant::now()` as the last step of `build` and computes every
        // `ts` as microseconds since then; this reading is within a few tens of nanoseconds
        // after it (unless the thread is preempted in between).
        state.base = Some(Instant::now());
        if self.options.steps.is_none() {
            self.open_window(&mut state, None);
        }
        Some(ChromeTraceLayer::new(forward, self.clone()))
    }

    /// A step span was created: counts it, and opens or prepares to close a window.
    pub(super) fn step_created(&self, id: &Id) {
        let step = self.steps.fetch_add(1, Ordering::Relaxed);
        let Some((_, schedule)) = &self.options.steps else {
            return;
        };
        // Wait and warm-up steps return here, without a lock.
        let Some(window) = schedule.window(step) else {
            return;
        };
        let mut state = self.state();
        if state.finished || state.writer.is_none() {
            return;
        }
        let open_cycle = state.open.as_ref().map(|o| o.cycle);
        if open_cycle != Some(window.cycle) {
            if open_cycle.is_some() {
                // The previous window's last step is still open: its window ends here.
                self.close_window(&mut state);
            }
            if state.last_cycle.is_some_and(|c| c >= window.cycle) {
                return;
            }
            if self.results.pending_count() >= MAX_PENDING_WINDOWS {
                // The writer is behind: skip this window rather than queue its events.
                state.last_cycle = Some(window.cycle);
                let skipped = self.results.skipped.fetch_add(1, Ordering::Relaxed) + 1;
                drop(state);
                if skipped == 1 {
                    self.warn_skipping(window);
                }
                return;
            }
            self.open_window(&mut state, Some(window));
        }
        let open_here = state.open.as_ref().is_some_and(|o| o.cycle == window.cycle);
        if open_here && step == window.last {
            self.last_step.store(id.into_u64(), Ordering::Release);
        }
    }

    /// The span `id` closed while a window is open: ends the window if it was its last step.
    pub(super) fn span_closed(&self, id: &Id) {
        let mut state = self.state();
        if self.last_step.load(Ordering::Acquire) == id.into_u64() && state.open.is_some() {
            self.close_window(&mut state);
        }
    }

    /// The one warning about skipped windows. Raised inside a callback of the subscriber, where
    /// tracing drops events sent to a scoped (`with_default`) dispatcher, so it is emitted from
    /// a thread of its own: into the chrome layer's dispatcher if known, else the global one.
    fn warn_skipping(&self, window: StepWindow) {
        let dispatch = self.dispatch.get().and_then(|d| d.upgrade());
        let warn = move || {
            tracing::warn!(
                target: crate::PERF_TARGET,
                first_skipped = window.first,
                last_skipped = window.last,
                "spanprof: trace windows come faster than they are written \
                 ({MAX_PENDING_WINDOWS} not completed yet); skipping windows until the writer \
                 catches up (counted; this warning is not repeated)"
            );
        };
        let _ = std::thread::Builder::new()
            .name("spanprof-chrome-warn".into())
            .spawn(move || match dispatch {
                Some(d) => tracing::dispatcher::with_default(&d, warn),
                None => warn(),
            });
    }

    fn file_name(&self, window: Option<StepWindow>) -> PathBuf {
        let backend = self.options.backend;
        match (&self.options.output, &self.options.steps, window) {
            (Output::File(file), _, _) => file.clone(),
            (Output::Dir(dir), Some((step, _)), Some(w)) => dir.join(format!(
                "{}_steps_{}-{}.{}",
                sanitize(step),
                w.first,
                w.last,
                backend.extension()
            )),
            (Output::Dir(dir), _, _) => dir.join(backend.whole_run_file()),
        }
    }

    fn open_window(&self, state: &mut State, window: Option<StepWindow>) {
        let (Some(_), Some(base)) = (&state.writer, state.base) else {
            return;
        };
        let label = match (&self.options.steps, window) {
            (Some((step, _)), Some(w)) => format!("{step} steps {}-{}", w.first, w.last),
            _ => "whole run".to_string(),
        };
        let number = state.windows_opened + 1;
        let info = Arc::new(WindowInfo {
            backend: self.options.backend,
            number,
            path: self.file_name(window),
            label,
            base,
            start: Instant::now(),
            end: OnceLock::new(),
            thread_names: self.options.thread_names,
            counters: self.counters.get().cloned(),
            results: self.results.clone(),
            disk: self.disk.get().cloned(),
        });
        let writer = match WindowWriter::create(info.clone()) {
            Ok(w) => w,
            Err(e) => {
                self.results.failed(None, e);
                // Not retried at each of its steps: one error per window.
                state.last_cycle = Some(window.map_or(0, |w| w.cycle));
                return;
            }
        };
        self.results.opened(number, info.path.clone());
        if let Some(backend) = &mut state.writer {
            backend.start_window(number, writer, &self.options);
        }
        state.windows_opened = number;
        let cycle = window.map_or(0, |w| w.cycle);
        state.last_cycle = Some(cycle);
        state.open = Some(OpenWindow { cycle, info });
        // Published after `start_new` was sent: every event forwarded in this window reaches
        // tracing-chrome's channel after the switch to this window's file.
        self.current.store(state.windows_opened, Ordering::SeqCst);
    }

    fn close_window(&self, state: &mut State) {
        let Some(open) = state.open.take() else {
            return;
        };
        let number = self.current.swap(0, Ordering::SeqCst);
        self.last_step.store(0, Ordering::Relaxed);
        // Forwarding calls that saw the window open finish before the file is switched.
        let deadline = Instant::now() + DRAIN_LIMIT;
        for flag in self
            .threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            while number != 0 && flag.load(Ordering::SeqCst) == number && Instant::now() < deadline
            {
                std::thread::yield_now();
            }
        }
        let _ = open.info.end.set(Instant::now());
        if let Some(writer) = &mut state.writer {
            writer.end_window();
        }
    }

    /// Ends the open window, stops tracing for good, and waits (up to [`FINISH_LIMIT`]) until
    /// the backend's writer thread has finished every file. Returns the files written by the
    /// whole session.
    ///
    /// # Errors
    /// Every window that could not be written (one error, or [`Error::Outputs`] with all), and
    /// if the files were not all complete in time an [`Error::Io`] (`TimedOut`) naming those
    /// that were not (they are completed in the background if the process lives on).
    pub(crate) fn finish(&self) -> Result<Vec<PathBuf>> {
        let (writer, claim) = {
            let mut state = self.state();
            state.finished = true;
            self.close_window(&mut state);
            (state.writer.take(), state.claim.take())
        };
        let mut timed_out = None;
        if let Some(writer) = writer {
            let limit = *self.finish_limit.lock().unwrap_or_else(|e| e.into_inner());
            let (done_tx, done_rx) = mpsc::channel::<()>();
            // Ending the writer joins the backend's writer thread, which completes every
            // window's file; done on a thread of its own so that the wait is bounded. The claim
            // is given back once the writer thread has ended. (If the thread cannot be started,
            // the closure is dropped here, which ends the writer inline.)
            let _ = std::thread::Builder::new()
                .name("spanprof-chrome-finish".into())
                .spawn(move || {
                    writer.finish();
                    drop(claim);
                    let _ = done_tx.send(());
                });
            if let Err(mpsc::RecvTimeoutError::Timeout) = done_rx.recv_timeout(limit) {
                timed_out = Some(limit);
            }
        } else {
            drop(claim);
        }
        let mut errors = self.results.take_errors();
        if let Some(limit) = timed_out {
            let pending = self.results.pending();
            if let Some(first) = pending.first() {
                let names: Vec<String> = pending.iter().map(|p| p.display().to_string()).collect();
                errors.push(Error::Io {
                    action: "completing chrome trace",
                    path: first.clone(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!(
                            "{} trace window(s) not completed within {limit:?}: {}",
                            pending.len(),
                            names.join(", ")
                        ),
                    ),
                });
            }
        }
        match Error::collect(errors) {
            Some(e) => Err(e),
            None => Ok(self.results.written()),
        }
    }

    /// The trace files completed so far.
    pub(crate) fn written(&self) -> Vec<PathBuf> {
        self.results.written()
    }
}

/// A span name as a file name: characters other than ASCII letters, digits, `_`, `-` and `.`
/// become `_`.
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn file_names_are_sanitized() {
        assert_eq!(super::sanitize("train_step"), "train_step");
        assert_eq!(super::sanitize("a::b/c d"), "a__b_c_d");
    }
}

//! The state of one chrome-tracing session: the one tracing-chrome layer and its `FlushGuard`,
//! the step count, and the window open now.
//!
//! One `tracing_chrome::ChromeLayer` serves the whole session; each window is one file, switched
//! with `FlushGuard::start_new`. One layer (not one per window) because tracing-chrome keeps its
//! channel and thread ids in thread-locals the first time a thread traces: a second layer would
//! not get the events of threads that traced into the first. Between windows, tracing-chrome
//! writes into `io::sink()` and the layer forwards nothing.

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use tracing_chrome::{ChromeLayerBuilder, FlushGuard};
use tracing_core::span::Id;
use tracing_core::Subscriber;
use tracing_subscriber::registry::LookupSpan;

use super::counters::CounterSource;
use super::layer::ChromeTraceLayer;
use super::trace_file::{Results, WindowInfo, WindowWriter};
use super::{ChromeOptions, Output, StepWindow};
use crate::error::{Error, Result};

/// How long closing a window waits for forwarding calls of other threads to return.
const DRAIN_LIMIT: Duration = Duration::from_millis(200);

pub(crate) struct Session {
    options: ChromeOptions,
    /// The open window's number (from 1), 0 between windows: the hot path's only check.
    pub(super) current: AtomicU64,
    /// Calls forwarding to tracing-chrome right now (a window is closed once they returned).
    pub(super) inflight: AtomicUsize,
    /// The span id of the step span whose close ends the open window (0: none yet).
    pub(super) last_step: AtomicU64,
    /// Step spans created since tracing began.
    steps: AtomicU64,
    state: Mutex<State>,
    results: Arc<Results>,
    counters: OnceLock<Arc<dyn CounterSource>>,
}

#[derive(Default)]
struct State {
    layer_taken: bool,
    finished: bool,
    flush: Option<FlushGuard>,
    /// tracing-chrome's time base, taken right after its layer was built.
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
    /// Checks the options and creates the output directory.
    pub(crate) fn new(options: ChromeOptions) -> Result<Self> {
        let dir = match &options.output {
            Output::Dir(dir) => Some(dir.as_path()),
            Output::File(file) => {
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
        Ok(Self {
            options,
            current: AtomicU64::new(0),
            inflight: AtomicUsize::new(0),
            last_step: AtomicU64::new(0),
            steps: AtomicU64::new(0),
            state: Mutex::new(State::default()),
            results: Arc::new(Results::default()),
            counters: OnceLock::new(),
        })
    }

    /// Where resource samples for the counter tracks come from. Set it once, before the first
    /// window opens (windows opened earlier get no counters); later calls are ignored.
    #[cfg_attr(not(test), allow(dead_code))] // wired to the resource sampler at merge
    pub(crate) fn set_counter_source(&self, source: Arc<dyn CounterSource>) {
        let _ = self.counters.set(source);
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn include_args(&self) -> bool {
        self.options.include_args
    }

    /// The step span name, if windows follow a schedule.
    #[inline(always)]
    pub(super) fn step_name(&self) -> Option<&str> {
        self.options.steps.as_ref().map(|(name, _)| name.as_str())
    }

    /// Builds the session's one tracing-chrome layer; `None` if it was built before or the
    /// session is finished.
    pub(crate) fn layer<S>(self: &Arc<Self>) -> Option<ChromeTraceLayer<S>>
    where
        S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
    {
        let mut state = self.state();
        if state.layer_taken || state.finished {
            return None;
        }
        state.layer_taken = true;
        let (chrome, flush) = ChromeLayerBuilder::new()
            .writer(std::io::sink())
            .include_args(self.options.include_args)
            .include_locations(self.options.include_locations)
            .build();
        // tracing-chrome reads `Instant::now()` as the last step of `build` and computes every
        // `ts` as microseconds since then; this reading is within a few tens of nanoseconds
        // after it (unless the thread is preempted in between).
        state.base = Some(Instant::now());
        state.flush = Some(flush);
        if self.options.steps.is_none() {
            self.open_window(&mut state, None);
        }
        Some(ChromeTraceLayer::new(chrome, self.clone()))
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
        if state.finished || state.flush.is_none() {
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

    fn file_name(&self, window: Option<StepWindow>) -> PathBuf {
        match (&self.options.output, &self.options.steps, window) {
            (Output::File(file), _, _) => file.clone(),
            (Output::Dir(dir), Some((step, _)), Some(w)) => dir.join(format!(
                "{}_steps_{}-{}.json",
                sanitize(step),
                w.first,
                w.last
            )),
            (Output::Dir(dir), _, _) => dir.join(super::WHOLE_RUN_FILE),
        }
    }

    fn open_window(&self, state: &mut State, window: Option<StepWindow>) {
        let (Some(flush), Some(base)) = (&state.flush, state.base) else {
            return;
        };
        let label = match (&self.options.steps, window) {
            (Some((step, _)), Some(w)) => format!("{step} steps {}-{}", w.first, w.last),
            _ => "whole run".to_string(),
        };
        let info = Arc::new(WindowInfo {
            path: self.file_name(window),
            label,
            base,
            start: Instant::now(),
            end: OnceLock::new(),
            thread_names: self.options.thread_names,
            counters: self.counters.get().cloned(),
            results: self.results.clone(),
        });
        let writer = match WindowWriter::create(info.clone()) {
            Ok(w) => w,
            Err(e) => {
                self.results.failed(e);
                return;
            }
        };
        flush.start_new(Some(Box::new(writer)));
        state.windows_opened += 1;
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
        self.current.store(0, Ordering::SeqCst);
        self.last_step.store(0, Ordering::Relaxed);
        // Forwarding calls that saw the window open finish before the file is switched.
        let deadline = Instant::now() + DRAIN_LIMIT;
        while self.inflight.load(Ordering::SeqCst) != 0 && Instant::now() < deadline {
            std::thread::yield_now();
        }
        let _ = open.info.end.set(Instant::now());
        if let Some(flush) = &state.flush {
            // tracing-chrome ends the window's file ("]"), drops its writer (which completes
            // the file: see `trace_file`) and writes into a sink until the next window.
            flush.start_new(Some(Box::new(std::io::sink())));
        }
    }

    /// Ends the open window, stops tracing for good, and waits until tracing-chrome's writer
    /// thread has finished every file. Returns the files written by the whole session.
    pub(crate) fn finish(&self) -> Result<Vec<PathBuf>> {
        let flush = {
            let mut state = self.state();
            state.finished = true;
            self.close_window(&mut state);
            state.flush.take()
        };
        // Joins tracing-chrome's writer thread: every window's file is complete after this.
        drop(flush);
        match self.results.take_error() {
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

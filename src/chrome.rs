//! Chrome / Perfetto traces of chosen steps or of the whole run, through
//! [`tracing-chrome`](tracing_chrome) or (feature `perfetto`) natively for Perfetto through
//! `tracing-perfetto-file`, with resource counters.
//!
//! # Backends
//!
//! [`ChromeOptions::with_backend`] chooses the library that writes the files:
//! [`TraceBackend::Chrome`] (the default: Chrome's JSON trace format, `.json`) or
//! `TraceBackend::Perfetto` (feature `perfetto`, Rust 1.88: Perfetto's protobuf format,
//! `.pftrace`: in the guide's measurements about 2× cheaper per traced span on the traced
//! thread, 7× counting the writer thread, and files a quarter of the size). Everything below holds for both
//! unless it names one: the schedule, the windows and their files, the bound on windows waiting
//! to be written, the errors, the counter tracks. `SPANPROF_TRACE` chooses the backend and the
//! windows without code (see [`Builder::with_chrome`](crate::Builder::with_chrome) and the
//! guide's `docs/traces.md`).
//!
//! spanprof forwards the spans of the steps a [`Schedule`] selects to the real
//! `tracing_chrome::ChromeLayer`, one file per window of active steps, composed in the same
//! registry as the [`ProfileLayer`](crate::ProfileLayer). One guard ends everything: dropping
//! (or [finishing](crate::ProfileGuard::finish)) the [`ProfileGuard`](crate::ProfileGuard)
//! finishes the open window and waits until every trace file is complete.
//!
//! ```
//! use spanprof::chrome::{ChromeOptions, Schedule};
//! use tracing_subscriber::prelude::*;
//!
//! let dir = std::env::temp_dir().join(format!("spanprof-doc-{}", std::process::id()));
//! // Steps 0 and 1 wait, 2 warms up, 3 and 4 are traced; once.
//! let schedule = Schedule::new(2, 1, 2)?.with_repeat(1);
//! let (layer, guard) = spanprof::ProfileLayer::builder()
//!     .with_env(false)
//!     .with_report(spanprof::ReportTarget::Off)
//!     .with_chrome(ChromeOptions::dir(&dir).with_steps("train_step", schedule))
//!     .build()?;
//! // The two-line composition: the chrome layer is generic over the subscriber below it.
//! let subscriber = tracing_subscriber::registry().with(layer);
//! let subscriber = subscriber.with(guard.chrome_layer());
//!
//! tracing::subscriber::with_default(subscriber, || {
//!     for step in 0..8 {
//!         let _step = tracing::info_span!("train_step", step).entered();
//!         let _fwd = tracing::info_span!("forward").entered();
//!     }
//! });
//! let outputs = guard.finish()?; // finishes the window, writes the report and profile
//! assert_eq!(outputs.traces, vec![dir.join("train_step_steps_3-4.json")]);
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Windows and files
//!
//! With [`ChromeOptions::with_steps`], every span named like the step span (e.g. `train_step`)
//! is one step, counted from 0 in the order the spans are created. The [`Schedule`] has
//! `torch.profiler.schedule` semantics: `skip_first` steps ignored, then cycles of `wait`,
//! `warmup` and `active` steps, `repeat` times (0: forever). The active steps of a cycle are one
//! *window*: it opens when the span of its first step is created and ends when the span of its
//! last step closes; it is written to `<dir>/<step span>_steps_<first>-<last>.json` (the span
//! name with characters other than `[A-Za-z0-9_.-]` replaced by `_`). Warm-up steps are not
//! written: tracing-chrome has no start-up cost to hide, so they are wait steps (see
//! [`StepAction::Warmup`]).
//!
//! Without steps, the whole run is one window: [`ChromeOptions::file`] names the file,
//! [`ChromeOptions::dir`] writes [`WHOLE_RUN_FILE`] into the directory.
//!
//! In a window every span entered on any thread is traced (as `B`/`E` events of
//! tracing-chrome's threaded style), with events as instant events. A span entered before the
//! window (the epoch around the steps, a model layer's span created once) appears only for its
//! entries inside the window. A span still entered when the window closes (work on another
//! thread, a step cut short) gets an `E` at the window's end with `"args": {"unfinished":
//! true}`, so every `B` has its `E`.
//!
//! # Opening the traces
//!
//! Open <https://ui.perfetto.dev> and drag a trace file onto the page (or use *Open trace
//! file*); Perfetto reads it in the browser, nothing is uploaded. In Chrome or Chromium,
//! `chrome://tracing` and *Load* open it too. Each thread is a track with its spans nested as
//! slices (click one for its duration, and its fields if
//! [`ChromeOptions::with_args`] is on); resource counters are tracks of their own at the top of
//! the process. The process is labelled with the window's steps (e.g. `train_step steps 16-18`).
//!
//! # Counter tracks
//!
//! tracing-chrome writes only span and instant events, so spanprof adds the resource samples
//! (RSS, heap, CPU %, GPU memory, utilisation, power) itself. spanprof hands tracing-chrome a
//! writer of its own for each window, which writes into a temporary file beside the window's
//! (`.<file>.<pid>.<n>.partial`); when tracing-chrome closes the window (it ends the JSON array
//! and drops the writer on its writer thread), that writer reads the temporary file back with
//! `serde_json`, completes unfinished spans as above, appends the counter events, writes the
//! result to another temporary file, syncs it and renames it into place. Every track has a
//! `"ph": "C"` event with the latest readings at the window's start and at its end, and one per
//! sample taken in between: a window shorter than the sampling interval (a 4 ms step under the
//! default 100 ms) still shows each counter's value. The `ts` use tracing-chrome's own time
//! base: microseconds since the `Instant` tracing-chrome reads when its layer is built, which
//! spanprof reads right after building it (they differ by tens of nanoseconds). Completing a
//! window costs memory of a few times the file's size on tracing-chrome's writer thread, not
//! on yours.
//!
//! # Failures
//!
//! Nothing is written at a window's path until its file is complete. If writing fails (a full
//! disk, an unwritable directory), the temporary files are removed, what was at the path before
//! (a file of an earlier run) is left as it was, and the failure is returned by
//! [`ProfileGuard::finish`](crate::ProfileGuard::finish) and
//! [`ProfileHandle::finish_chrome`](crate::ProfileHandle::finish_chrome): one
//! [`Error::Io`](crate::Error::Io) naming the file, or [`Error::Outputs`](crate::Error::Outputs)
//! with one per failed window. Later windows are still attempted.
//!
//! # Windows faster than the writer
//!
//! Windows wait in memory (as tracing-chrome's queued events) until its writer thread has
//! written and completed them. At most 4 windows are pending, the open one included: a window
//! that should open while 4 earlier ones are not complete yet is skipped (not traced), with
//! one warning at `spanprof::perf` for the session, and counted. So memory stays bounded when
//! windows come faster than they are written (short windows that repeat forever). Finishing
//! waits at most 30 s for the files; past that it returns an [`Error::Io`](crate::Error::Io)
//! (`TimedOut`) listing the windows not completed, which are completed in the background if the
//! process goes on.
//!
//! # Ctrl-C, panics and normal ends
//!
//! Trace files are valid JSON when the guard drops at the end of `main`, when it drops during a
//! panic's unwinding (the writer thread completes the files, not the panicking thread), and,
//! after [`ProfileHandle::install_signal_handler`](crate::ProfileHandle::install_signal_handler)
//! (feature `signals`),
//! when the program is interrupted by Ctrl-C, `kill` (SIGTERM) or a hang-up: the handler
//! finishes the open window, waits for the files, and exits with 128 + the signal (a second
//! signal while it waits exits at once, removing the temporary files first). Without it, a
//! signal kills the process while the window is half written (with tracing-chrome alone, the
//! truncated-file complaint of its users; here, the window's file is not written and its
//! `.partial` temporary is left). A process that aborts (`panic = "abort"`, `SIGKILL`) leaves
//! the open window's `.partial` temporary too; files of earlier windows are complete.
//!
//! # Cost
//!
//! Between windows each callback of the chrome layer returns after one atomic load; creating a
//! span also compares its name with the step span's name. `cargo bench -p spanprof-peers --bench
//! chrome` measures it beside spanprof alone and beside a traced step.
//!
//! # Limits
//!
//! * One chrome tracing session per process at a time: tracing-chrome caches its channel and
//!   thread ids in thread-locals, so two sessions would write each other's events. Building a
//!   second one while the first is alive (built and not finished) is an
//!   [`Error::InvalidChromeOptions`](crate::Error::InvalidChromeOptions); after the first
//!   finished, a new one may be built, but a thread that traced into the earlier session
//!   (other than the one that calls `chrome_layer`) keeps sending there. Perfetto sessions
//!   have no such limit: each window has a tracing-perfetto-file layer of its own.
//! * With the Perfetto backend, spans are slices on the thread tracks (each entry one slice, as
//!   in tracing-chrome's threaded style); a span still entered when its window closes gets a
//!   slice end at the window's end annotated `unfinished: true`; thread tracks are always
//!   named; spans created before a window have no fields, as with tracing-chrome.
//! * The warning about skipped windows is emitted from a thread of its own into the chrome
//!   layer's dispatcher: tracing tells the layer its dispatcher only when it is added as
//!   `ChromeTraceLayer`, not as the `Option` [`chrome_layer`](crate::ProfileGuard::chrome_layer)
//!   returns; then the warning goes to the global default subscriber, if any.
//! * With [`ChromeOptions::with_args`], spans created before a window have no `args`
//!   (tracing-chrome reads fields when a span is created).
//! * Spans are drawn per thread (tracing-chrome's threaded style): an async task's span entered
//!   on several threads shows once per entry on each.

#[cfg(feature = "perfetto")]
mod announced;
mod counters;
mod env;
mod layer;
#[cfg(feature = "perfetto")]
mod perfetto;
mod schedule;
mod session;
#[cfg(test)]
mod tests;
mod trace_file;

use std::path::PathBuf;

pub(crate) use counters::TimelineCounters;
pub(crate) use env::{describe as describe_options, TraceSetting, TRACE_ACCEPTED};
pub use layer::ChromeTraceLayer;
pub use schedule::{Schedule, StepAction, StepWindow};
pub(crate) use session::Session;

/// The file [`ChromeOptions::dir`] writes without a step schedule, with the chrome backend.
pub const WHOLE_RUN_FILE: &str = "trace.json";

/// The file [`ChromeOptions::dir`] writes without a step schedule, with the Perfetto backend.
#[cfg(feature = "perfetto")]
pub const WHOLE_RUN_PERFETTO_FILE: &str = "trace.pftrace";

/// Which library writes the trace files: [`ChromeOptions::with_backend`], `SPANPROF_TRACE`.
///
/// Both follow the same [`Schedule`], write the same windows atomically, bound the windows
/// waiting to be written the same way, and carry the same counter tracks; they differ in the
/// file format and in cost (see the guide's `docs/traces.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum TraceBackend {
    /// [`tracing-chrome`](tracing_chrome): Chrome's JSON trace format (`.json`), which
    /// Perfetto and `chrome://tracing` open. The default.
    #[default]
    Chrome,
    /// [`tracing-perfetto-file`](tracing_perfetto_file): Perfetto's native protobuf format
    /// (`.pftrace`), which ui.perfetto.dev and Perfetto's trace processor open. Feature
    /// `perfetto` (Rust 1.88 or later).
    #[cfg(feature = "perfetto")]
    Perfetto,
}

impl TraceBackend {
    /// `SPANPROF_TRACE`'s spelling: `chrome` or `perfetto`.
    pub fn as_str(self) -> &'static str {
        match self {
            TraceBackend::Chrome => "chrome",
            #[cfg(feature = "perfetto")]
            TraceBackend::Perfetto => "perfetto",
        }
    }

    /// The extension of its files, without the dot: `json` or `pftrace`.
    pub fn extension(self) -> &'static str {
        match self {
            TraceBackend::Chrome => "json",
            #[cfg(feature = "perfetto")]
            TraceBackend::Perfetto => "pftrace",
        }
    }

    /// The file [`ChromeOptions::dir`] writes without a step schedule: [`WHOLE_RUN_FILE`] or
    /// `WHOLE_RUN_PERFETTO_FILE`.
    pub fn whole_run_file(self) -> &'static str {
        match self {
            TraceBackend::Chrome => WHOLE_RUN_FILE,
            #[cfg(feature = "perfetto")]
            TraceBackend::Perfetto => WHOLE_RUN_PERFETTO_FILE,
        }
    }
}

impl std::fmt::Display for TraceBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Output {
    Dir(PathBuf),
    File(PathBuf),
}

/// What [`Builder::with_chrome`](crate::Builder::with_chrome) traces, and where it writes.
///
/// ```
/// use spanprof::chrome::{ChromeOptions, Schedule};
/// let options = ChromeOptions::dir("target/traces")
///     .with_steps("train_step", Schedule::new(5, 1, 3)?.with_repeat(2))
///     .with_args(true);
/// # Ok::<(), spanprof::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct ChromeOptions {
    pub(crate) backend: TraceBackend,
    pub(crate) output: Output,
    pub(crate) steps: Option<(String, Schedule)>,
    pub(crate) include_args: bool,
    pub(crate) include_locations: bool,
    pub(crate) thread_names: bool,
}

impl ChromeOptions {
    /// Whether span fields are written as `args` unless [`ChromeOptions::with_args`] says.
    pub const DEFAULT_ARGS: bool = false;
    /// Whether source locations are written unless [`ChromeOptions::with_locations`] says.
    pub const DEFAULT_LOCATIONS: bool = true;
    /// Whether threads are named unless [`ChromeOptions::with_thread_names`] says.
    pub const DEFAULT_THREAD_NAMES: bool = true;

    fn new(output: Output) -> Self {
        Self {
            backend: TraceBackend::default(),
            output,
            steps: None,
            include_args: Self::DEFAULT_ARGS,
            include_locations: Self::DEFAULT_LOCATIONS,
            thread_names: Self::DEFAULT_THREAD_NAMES,
        }
    }

    /// Trace files go into `dir` (created when the layer is built): one per window with
    /// [`ChromeOptions::with_steps`], else the whole run into [`WHOLE_RUN_FILE`] (`trace.json`;
    /// `trace.pftrace` with [`TraceBackend::Perfetto`]).
    pub fn dir(dir: impl Into<PathBuf>) -> Self {
        Self::new(Output::Dir(dir.into()))
    }

    /// The whole run is traced into one file (its directory is created when the layer is
    /// built). Cannot be combined with [`ChromeOptions::with_steps`]; an empty path is an
    /// [`Error::InvalidChromeOptions`](crate::Error::InvalidChromeOptions) from `build`.
    pub fn file(path: impl Into<PathBuf>) -> Self {
        Self::new(Output::File(path.into()))
    }

    /// Traces only the steps `schedule` selects, a step being one span named `step_span`
    /// (e.g. `"train_step"`, the name `#[instrument]` gives a function). Needs
    /// [`ChromeOptions::dir`].
    pub fn with_steps(self, step_span: impl Into<String>, schedule: Schedule) -> Self {
        Self {
            steps: Some((step_span.into(), schedule)),
            ..self
        }
    }

    /// Which library writes the files (default [`TraceBackend::Chrome`]); `SPANPROF_TRACE`
    /// overrides it.
    pub fn with_backend(self, backend: TraceBackend) -> Self {
        Self { backend, ..self }
    }

    /// The backend that writes the files.
    pub fn backend(&self) -> TraceBackend {
        self.backend
    }

    /// Writes span and event fields as `args` (default [`ChromeOptions::DEFAULT_ARGS`]): the
    /// analogue of torch.profiler's `record_shapes`. tracing-chrome's `include_args`.
    pub fn with_args(self, include_args: bool) -> Self {
        Self {
            include_args,
            ..self
        }
    }

    /// Writes each event's source file and line (default
    /// [`ChromeOptions::DEFAULT_LOCATIONS`]). tracing-chrome's `include_locations`.
    pub fn with_locations(self, include_locations: bool) -> Self {
        Self {
            include_locations,
            ..self
        }
    }

    /// Names each thread's track with the thread's name (or its number if it has none)
    /// (default [`ChromeOptions::DEFAULT_THREAD_NAMES`]).
    pub fn with_thread_names(self, thread_names: bool) -> Self {
        Self {
            thread_names,
            ..self
        }
    }
}

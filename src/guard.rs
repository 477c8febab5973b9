//! The guard that ends a profiling session, and cloneable handles for reading it.

use std::fmt;
use std::io::Write;
use std::sync::Arc;

use crate::error::Result;
use crate::output::Outputs;
use crate::profile::Snapshot;
use crate::session::{ProfileSession, Tell};
use crate::switches::Resources;
use crate::worker::{Use, WeakUse};

/// A cloneable, cheap handle to read a running profile from anywhere.
///
/// While a handle lives, spanprof's threads keep running (as they do while a layer lives): the
/// sampler, so that its snapshots and [`finish`](ProfileHandle::finish) have resource figures
/// up to date, the back-off and the export cadence.
#[derive(Clone)]
pub struct ProfileHandle {
    session: Arc<ProfileSession>,
    /// Keeps spanprof's threads running. `None` in the guard's own handle: a leaked guard must
    /// not keep them running. Only held, for what dropping it means.
    _uses: Option<Use>,
}

impl fmt::Debug for ProfileHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProfileHandle").finish_non_exhaustive()
    }
}

impl ProfileHandle {
    pub(crate) fn new(session: Arc<ProfileSession>) -> Self {
        Self {
            session,
            _uses: None,
        }
    }

    /// Everything recorded so far. Recording goes on; spans still open are counted in `open`
    /// and their completed entries are included.
    pub fn snapshot(&self) -> Snapshot {
        self.session.snapshot()
    }

    /// The statistics since the previous interval: what was recorded between the previous call
    /// and this one (since the start for the first call), exactly — histogram differences, see
    /// [`Snapshot::since`]. Cumulative totals are not reset: [`snapshot`](Self::snapshot) and
    /// the outputs still see the whole run.
    ///
    /// The previous interval's end is kept once per profiling session, not per handle: every
    /// handle (and the guard) of a session shares it, so the intervals returned to all callers
    /// follow one another without gap or overlap, and their counts add up to the total exactly.
    /// Concurrent callers are served one after the other.
    ///
    /// `calls`, `created` and `instances` add up exactly whatever the timing (they come from
    /// counters that never go down). Histograms and totals add up exactly between snapshots
    /// taken while no span of the name closes; a snapshot taken while one closes may count that
    /// span's first entry both as open and as closed, one sample more in its entry histograms
    /// until the next snapshot. The export cadence
    /// ([`Builder::with_every`](crate::Builder::with_every)) keeps its own windows and does not
    /// move this one.
    ///
    /// ```
    /// # use tracing_subscriber::prelude::*;
    /// let (layer, guard) = spanprof::ProfileLayer::builder()
    ///     .with_env(false)
    ///     .with_report(spanprof::ReportTarget::Off)
    ///     .build()?;
    /// let handle = guard.handle();
    /// tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
    ///     for _ in 0..3 {
    ///         tracing::info_span!("step").in_scope(|| {});
    ///     }
    ///     assert_eq!(handle.interval_snapshot().span("step").unwrap().calls, 3);
    ///     tracing::info_span!("step").in_scope(|| {});
    ///     assert_eq!(handle.interval_snapshot().span("step").unwrap().calls, 1);
    /// });
    /// assert_eq!(handle.snapshot().span("step").unwrap().calls, 4);
    /// # Ok::<(), spanprof::Error>(())
    /// ```
    pub fn interval_snapshot(&self) -> Snapshot {
        self.session.interval_snapshot()
    }

    /// The console report of a fresh snapshot, as configured (top rows).
    pub fn render_report(&self) -> String {
        self.session.table().to_string(&self.snapshot())
    }

    /// Writes the console report of a fresh snapshot to `out`.
    ///
    /// # Errors
    /// The writer's errors.
    pub fn render_report_to(&self, out: &mut impl Write) -> std::io::Result<()> {
        out.write_all(self.render_report().as_bytes())
    }

    /// Starts the `/metrics` endpoint on `listener` (see [`crate::http`]).
    #[cfg(feature = "http")]
    pub(crate) fn serve_metrics(&self, listener: crate::http::Listener) {
        ProfileSession::serve_metrics(&self.session, listener);
    }

    /// The address the Prometheus `/metrics` endpoint is bound to (the port chosen where port 0
    /// was asked for), while it serves: `None` without
    /// [`Builder::with_metrics_addr`](crate::Builder::with_metrics_addr) or
    /// `SPANPROF_METRICS_ADDR`, and once the profile has finished (feature `http`).
    #[cfg(feature = "http")]
    pub fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        self.session.metrics_addr()
    }

    /// The resources recorded per span now.
    pub fn resources(&self) -> Resources {
        self.session.resources()
    }

    /// Switches resources per span on or off while the program runs, e.g. to step detail down
    /// in a long run. Only resources the profile was built with can be on (the sampler thread
    /// samples only those); figures already recorded are kept. Returns the set now in effect.
    ///
    /// Spans entered or opened before the change keep the readings they started with.
    pub fn set_resources(&self, resources: Resources) -> Resources {
        self.session.set_resources(resources)
    }

    /// Stops recording and the sampler, finishes the Chrome traces, writes the report and the
    /// outputs: what the guard does when it drops, and the signal handler before it exits.
    /// Only the first call writes; later ones return what it wrote.
    ///
    /// Then a few lines name every file written, the HTML report first: the report's last
    /// lines where it goes to stderr or stdout, on stderr otherwise. A run that recorded
    /// nothing (no span, no metric) writes nothing, so that the files of an earlier run stay
    /// as they are, and says so in one line naming the filters in force (`RUST_LOG`,
    /// `SPANPROF_FILTER`). A span filter directive whose target matches no callsite's target
    /// but is a span's name gets a line suggesting `[name]`.
    ///
    /// # Errors
    /// The error of the one output that failed ([`Error::Io`](crate::Error::Io) naming its
    /// file), or [`Error::Outputs`](crate::Error::Outputs) with each error when several did.
    /// Every output is attempted even if an earlier one failed.
    pub fn finish(&self) -> Result<Outputs> {
        self.session.finish(Tell::Log)
    }
}

#[cfg(feature = "chrome")]
impl ProfileHandle {
    /// The chrome tracing layer, to add to the same registry as the
    /// [`ProfileLayer`](crate::ProfileLayer); see [`ProfileGuard::chrome_layer`].
    pub fn chrome_layer<S>(&self) -> Option<crate::chrome::ChromeTraceLayer<S>>
    where
        S: tracing_core::Subscriber
            + for<'a> tracing_subscriber::registry::LookupSpan<'a>
            + Send
            + Sync,
    {
        self.session.chrome()?.layer()
    }

    #[cfg(test)]
    pub(crate) fn chrome_session(&self) -> Option<Arc<crate::chrome::Session>> {
        self.session.chrome().cloned()
    }

    /// The trace files completed so far (a window's file is listed once tracing-chrome has
    /// closed it and spanprof has added its counters).
    pub fn chrome_traces(&self) -> Vec<std::path::PathBuf> {
        self.session
            .chrome()
            .map(|c| c.written())
            .unwrap_or_default()
    }

    /// Finishes the open trace window and stops tracing for good, waiting until every trace file
    /// is complete; returns them all. The guard does this when it drops; call it yourself from
    /// your own signal handling. Further calls return the same files.
    ///
    /// # Errors
    /// [`Error::Io`](crate::Error::Io) naming the trace file that could not be written or
    /// completed, or [`Error::Outputs`](crate::Error::Outputs) with one error per such window;
    /// an `Error::Io` of kind `TimedOut` naming the windows not completed when writing them
    /// took longer than the bound (see [`crate::chrome`]).
    pub fn finish_chrome(&self) -> Result<Vec<std::path::PathBuf>> {
        match self.session.chrome() {
            Some(c) => c.finish(),
            None => Ok(Vec::new()),
        }
    }
}

/// Ends the profiling session when dropped: stops recording, prints the report, writes the
/// configured files and names them (see [`ProfileHandle::finish`]). Errors on drop are told on
/// stderr, one line each, never raised; call [`ProfileGuard::finish`] to get them as a
/// `Result` (it logs them at the `spanprof::perf` target instead).
///
/// Bind it to a named variable: `let _ = ...` drops it at once and ends profiling before
/// anything ran.
///
/// The outputs are written only when the guard drops or [`finish`](ProfileGuard::finish) is
/// called (or by [`ProfileHandle::finish`], or the handler of
/// [`ProfileHandle::install_signal_handler`] on a signal). Nothing is written — no report, no
/// profile, the open trace window left incomplete — if the program ends without that:
/// `std::process::exit` (it runs no destructors: drop or finish the guard before calling it),
/// a signal with no handler installed, an abort, or a guard leaked with `mem::forget` (or kept
/// in a `static`). A leaked guard keeps none of spanprof's threads running (the resource
/// sampler, the back-off, the export cadence): they stop once the layers and every
/// [`ProfileHandle`] are dropped.
#[must_use = "dropping the guard ends profiling at once; bind it: `let _guard = ...`"]
pub struct ProfileGuard {
    handle: ProfileHandle,
    finished: bool,
    /// Makes the uses of the handles it gives out, without keeping the threads running.
    uses: WeakUse,
}

impl fmt::Debug for ProfileGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProfileGuard")
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}

impl ProfileGuard {
    pub(crate) fn new(handle: ProfileHandle) -> Self {
        Self {
            handle,
            finished: false,
            uses: WeakUse::default(),
        }
    }

    /// Gives the guard the profile's use of its threads, for the handles it gives out; the
    /// guard itself keeps only a weak reference to it.
    pub(crate) fn with_use(mut self, uses: &Use) -> Self {
        self.uses = uses.downgrade();
        self
    }

    /// A handle that outlives nothing: reading it after the guard is gone still works. While
    /// it lives, spanprof's threads keep running (the resource sampler keeps sampling).
    pub fn handle(&self) -> ProfileHandle {
        ProfileHandle {
            session: self.handle.session.clone(),
            _uses: self.uses.upgrade(),
        }
    }

    /// Everything recorded so far; see [`ProfileHandle::snapshot`].
    pub fn snapshot(&self) -> Snapshot {
        self.handle.snapshot()
    }

    /// The address of the Prometheus `/metrics` endpoint; see [`ProfileHandle::metrics_addr`].
    #[cfg(feature = "http")]
    pub fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        self.handle.metrics_addr()
    }

    /// The statistics since the previous interval; see [`ProfileHandle::interval_snapshot`].
    pub fn interval_snapshot(&self) -> Snapshot {
        self.handle.interval_snapshot()
    }

    /// Stops recording, writes the report and the outputs, and says where they went.
    ///
    /// # Errors
    /// See [`ProfileHandle::finish`].
    pub fn finish(mut self) -> Result<Outputs> {
        self.finished = true;
        self.handle.finish()
    }

    /// The chrome tracing layer, generic over the subscriber it is added to: `None` without
    /// [`Builder::with_chrome`](crate::Builder::with_chrome), with the `off` preset, and on
    /// every call after the first (a session has one layer). `Option<L>` is a layer itself:
    ///
    /// ```
    /// # use tracing_subscriber::prelude::*;
    /// # let (layer, guard) = spanprof::ProfileLayer::builder().with_env(false)
    /// #     .with_report(spanprof::ReportTarget::Off).build()?;
    /// let subscriber = tracing_subscriber::registry().with(layer);
    /// let subscriber = subscriber.with(guard.chrome_layer()); // None here: no with_chrome
    /// # drop(subscriber);
    /// # Ok::<(), spanprof::Error>(())
    /// ```
    ///
    /// Building it starts tracing-chrome's writer thread. Dropping the guard finishes the open
    /// window and joins that thread.
    #[cfg(feature = "chrome")]
    pub fn chrome_layer<S>(&self) -> Option<crate::chrome::ChromeTraceLayer<S>>
    where
        S: tracing_core::Subscriber
            + for<'a> tracing_subscriber::registry::LookupSpan<'a>
            + Send
            + Sync,
    {
        self.handle.chrome_layer()
    }
}

impl Drop for ProfileGuard {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        // A drop returns nothing, and the program's subscriber may show no warning (the
        // profiling layer alone, as in the quick start): each failed output is one line on
        // stderr. `finish` returns them instead, and logs them at `spanprof::perf`.
        let _ = self.handle.session.finish(Tell::Stderr);
    }
}

//! The guard that ends a profiling session, and cloneable handles for reading it.

use std::fmt;
use std::io::Write;
use std::sync::Arc;

use crate::error::Result;
use crate::output::Outputs;
use crate::profile::Snapshot;
use crate::session::ProfileSession;
use crate::switches::Resources;
use crate::PERF_TARGET;

/// A cloneable, cheap handle to read a running profile from anywhere.
#[derive(Clone)]
pub struct ProfileHandle {
    session: Arc<ProfileSession>,
}

impl fmt::Debug for ProfileHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProfileHandle").finish_non_exhaustive()
    }
}

impl ProfileHandle {
    pub(crate) fn new(session: ProfileSession) -> Self {
        Self {
            session: Arc::new(session),
        }
    }

    /// Everything recorded so far. Recording goes on; spans still open are counted in `open`
    /// and their completed entries are included.
    pub fn snapshot(&self) -> Snapshot {
        self.session.snapshot()
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
    /// outputs: what the guard does when it drops, and the Ctrl-C handler before it exits.
    /// Only the first call writes; later ones return what it wrote.
    ///
    /// # Errors
    /// The error of the one output that failed ([`Error::Io`](crate::Error::Io) naming its
    /// file), or [`Error::Outputs`](crate::Error::Outputs) with each error when several did.
    /// Every output is attempted even if an earlier one failed.
    pub fn finish(&self) -> Result<Outputs> {
        self.session.finish()
    }

    /// Installs a Ctrl-C (`SIGINT`; Ctrl-C and Ctrl-Break on Windows) handler that does what
    /// the guard does when it drops — finishes the open trace window, prints the report, writes
    /// the outputs — then says so on stderr and exits the process with
    /// [`CTRLC_EXIT_CODE`](crate::CTRLC_EXIT_CODE) (130). An interrupted training run keeps its
    /// profile and complete traces.
    ///
    /// It uses the [`ctrlc`] crate: one thread named `ctrl-c` waits for the signal.
    ///
    /// # Errors
    /// [`Error::CtrlC`](crate::Error::CtrlC) if a handler for `SIGINT` is already installed (by
    /// this function, by another crate, or by the program itself): spanprof does not replace
    /// it.
    #[cfg(feature = "ctrlc")]
    pub fn install_ctrlc_handler(&self) -> Result<()> {
        let handle = self.clone();
        ctrlc::try_set_handler(move || {
            // Everything the guard would write: traces, report, profile.
            match handle.finish() {
                Ok(outputs) => eprintln!(
                    "spanprof: interrupted; {} trace file(s) complete{}",
                    outputs.traces.len(),
                    outputs
                        .profile()
                        .map(|p| format!(", profile in {}", p.display()))
                        .unwrap_or_default()
                ),
                Err(e) => eprintln!("spanprof: interrupted; {e}"),
            }
            std::process::exit(crate::CTRLC_EXIT_CODE);
        })
        .map_err(|source| crate::Error::CtrlC { source })
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
    /// [`Error::Io`](crate::Error::Io) naming the first trace file that could not be written or
    /// completed.
    pub fn finish_chrome(&self) -> Result<Vec<std::path::PathBuf>> {
        match self.session.chrome() {
            Some(c) => c.finish(),
            None => Ok(Vec::new()),
        }
    }
}

/// Ends the profiling session when dropped: stops recording, prints the report and writes the
/// configured files. Errors on drop are logged (one line at the `spanprof::perf` target and one
/// on stderr), never raised; call [`ProfileGuard::finish`] to get them as a `Result`.
///
/// Bind it to a named variable: `let _ = ...` drops it at once and ends profiling before
/// anything ran.
#[must_use = "dropping the guard ends profiling at once; bind it: `let _guard = ...`"]
pub struct ProfileGuard {
    handle: ProfileHandle,
    finished: bool,
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
        }
    }

    /// A handle that outlives nothing: reading it after the guard is gone still works.
    pub fn handle(&self) -> ProfileHandle {
        self.handle.clone()
    }

    /// Everything recorded so far; see [`ProfileHandle::snapshot`].
    pub fn snapshot(&self) -> Snapshot {
        self.handle.snapshot()
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
        if let Err(e) = self.handle.finish() {
            tracing::warn!(target: PERF_TARGET, error = %e, "spanprof could not write its outputs");
            eprintln!("spanprof: {e}");
        }
    }
}

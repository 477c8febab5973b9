//! The guard that ends a profiling session, and cloneable handles for reading it.

use std::fmt;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use crate::config::ReportTarget;
use crate::error::{Error, Result};
use crate::profiler::Inner;
use crate::report::Report;
use crate::snapshot::Snapshot;
use crate::{PERF_TARGET, PROFILING_TARGET};

/// Name of the JSON profile written into the output directory.
pub const PROFILE_FILE: &str = "profile.json";

/// A cloneable, cheap handle to read a running profile from anywhere.
#[derive(Clone)]
pub struct ProfileHandle {
    pub(crate) inner: Arc<Inner>,
}

impl fmt::Debug for ProfileHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProfileHandle").finish_non_exhaustive()
    }
}

impl ProfileHandle {
    /// Stops recording and the sampler, finishes the Chrome traces, writes the report and the
    /// profile (what the guard does when it drops, and the Ctrl-C handler before it exits).
    /// Only the first call writes; later ones return what it wrote.
    pub(crate) fn finish_outputs(&self) -> Result<Outputs> {
        let inner = &self.inner;
        let mut done = inner.finished.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(outputs) = done.as_ref() {
            return Ok(outputs.clone());
        }
        inner.active.store(false, Relaxed);
        inner.stop_sampler();
        let snapshot = inner.snapshot();
        summary_event(&snapshot);
        let config = &inner.config;
        let mut outputs = Outputs::default();
        let mut first_error = None;
        // Chrome traces: finish the open window, wait until every trace file is complete.
        match self.finish_chrome() {
            Ok(traces) => outputs.traces = traces,
            Err(e) => first_error = Some(e),
        }
        let report = || Report::new(&snapshot).top(config.top).to_string();
        match &config.report {
            ReportTarget::Off => {}
            ReportTarget::Stderr => {
                let _ = std::io::stderr().lock().write_all(report().as_bytes());
            }
            ReportTarget::File(path) => {
                match write_file(path, report().as_bytes(), "writing report") {
                    Ok(()) => outputs.report = Some(path.clone()),
                    Err(e) => first_error = Some(e),
                }
            }
        }
        if let Some(dir) = &config.output_dir {
            let path = dir.join(PROFILE_FILE);
            match snapshot.write_json(&path) {
                Ok(()) => outputs.profile = Some(path),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Some(p) = &outputs.profile {
            tracing::info!(target: PROFILING_TARGET, path = %p.display(), "spanprof wrote the JSON profile");
        }
        *done = Some(outputs.clone());
        match first_error {
            Some(e) => Err(e),
            None => Ok(outputs),
        }
    }

    /// Everything recorded so far. Recording goes on; spans still open are counted in `open`
    /// and their completed entries are included.
    pub fn snapshot(&self) -> Snapshot {
        self.inner.snapshot()
    }

    /// The console report of a fresh snapshot, as configured (top rows).
    pub fn render_report(&self) -> String {
        Report::new(&self.snapshot())
            .top(self.inner.config.top)
            .to_string()
    }

    /// Writes the console report of a fresh snapshot to `out`.
    pub fn render_report_to(&self, out: &mut impl Write) -> std::io::Result<()> {
        out.write_all(self.render_report().as_bytes())
    }
}

/// What [`ProfileGuard::finish`] wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Outputs {
    /// The report file, if the report went to a file.
    pub report: Option<PathBuf>,
    /// The JSON profile, if an output directory was configured.
    pub profile: Option<PathBuf>,
    /// Chrome trace files written during the run (see [`crate::chrome`]).
    pub traces: Vec<PathBuf>,
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

    /// Stops recording, writes the report and the profile, and says where they went.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file that could not be written. Every output is attempted even
    /// if an earlier one failed; the first error is returned.
    pub fn finish(mut self) -> Result<Outputs> {
        self.finished = true;
        self.flush()
    }

    fn flush(&self) -> Result<Outputs> {
        self.handle.finish_outputs()
    }
}

/// One summary event at the performance target: how much was profiled and the hottest span.
fn summary_event(snapshot: &Snapshot) {
    let inside: u64 = snapshot.spans.iter().map(|s| s.entry_self.total_ns).sum();
    let hottest = snapshot.spans.iter().max_by_key(|s| s.entry_self.total_ns);
    let (name, share) = hottest.map_or(("-", 0.0), |s| {
        let share = if inside == 0 {
            0.0
        } else {
            100.0 * s.entry_self.total_ns as f64 / inside as f64
        };
        (s.name.as_str(), share)
    });
    tracing::info!(
        target: PERF_TARGET,
        span_names = snapshot.spans.len(),
        run_ms = snapshot.run.duration_ns / 1_000_000,
        hottest = name,
        hottest_self_pct = share,
        "spanprof summary"
    );
}

fn write_file(path: &PathBuf, bytes: &[u8], action: &'static str) -> Result<()> {
    let io = |source| Error::Io {
        action,
        path: path.clone(),
        source,
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    std::fs::write(path, bytes).map_err(io)
}

impl Drop for ProfileGuard {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        if let Err(e) = self.flush() {
            tracing::warn!(target: PERF_TARGET, error = %e, "spanprof could not write its outputs");
            eprintln!("spanprof: {e}");
        }
    }
}

//! One profiling session: the recorder, the sampler thread, the chrome traces and the outputs,
//! and the sequence that ends it. The guard and every handle share it.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::backoff::Backoff;
use crate::error::{truncate, Error, Result};
use crate::export::{ExportSettings, Exporter};
use crate::filter_hint::SeenCallsites;
use crate::output::{self, Format, Output, Outputs, Selection, Table};
use crate::profile::Snapshot;
use crate::record::Recorder;
use crate::samplers::Sampler;
use crate::switches::Resources;
use crate::worker::{WeakUse, STOP_WAIT};
use crate::PERF_TARGET;

pub(crate) struct ProfileSession {
    recorder: Arc<Recorder>,
    sampler: Mutex<Option<Sampler>>,
    /// The back-off thread, if running.
    backoff: Mutex<Option<Backoff>>,
    #[cfg(feature = "chrome")]
    chrome: Option<Arc<crate::chrome::Session>>,
    /// What the session writes when it ends, in order.
    outputs: Vec<Output>,
    /// The console table as configured (rows shown).
    table: Table,
    /// The span names every output shows.
    selection: Selection,
    /// What the lines at the end of the run say, and where they go.
    notes: EndNotes,
    /// Whether the session records at all (not the off preset): if not, it ends silently.
    records: bool,
    /// What the first finish wrote (the guard's drop, `finish`, or the Ctrl-C handler).
    finished: Mutex<Option<Outputs>>,
    /// The `/metrics` endpoint, while it serves.
    #[cfg(feature = "http")]
    metrics: Mutex<Option<crate::http::MetricsServer>>,
    /// The export thread (periodic summaries, outputs and OTLP pushes), if a cadence is set;
    /// taken by the finish for the last window.
    exporter: Mutex<Option<Exporter>>,
    /// The snapshot at the end of the last [`ProfileSession::interval_snapshot`].
    interval_start: Mutex<Option<Snapshot>>,
    /// Whether a periodic re-write failed already (warned about once).
    periodic_warned: AtomicBool,
    /// The thread resolving GPU times (feature `cuda`), if spans are timed on the GPU.
    #[cfg(feature = "cuda")]
    gpu_resolver: Mutex<Option<crate::worker::Worker<crate::record::gpu::Resolver>>>,
}

impl fmt::Debug for ProfileSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProfileSession")
            .field("recorder", &self.recorder)
            .field("outputs", &self.outputs)
            .finish_non_exhaustive()
    }
}

/// What a session writes when it ends: its outputs, the report (also for
/// [`ProfileSession`]'s text report) and the span names they show.
pub(crate) struct SessionOutputs {
    pub(crate) outputs: Vec<Output>,
    pub(crate) table: Table,
    pub(crate) selection: Selection,
    pub(crate) notes: EndNotes,
}

/// What the lines at the end of a run say (the files written, or why nothing was), and where
/// they go.
#[derive(Debug, Default)]
pub(crate) struct EndNotes {
    /// Standard output when the report goes there; standard error otherwise.
    pub(crate) to_stdout: bool,
    /// `RUST_LOG` when the profile was built: the filter of most subscribers (`EnvFilter`),
    /// which decides which spans exist.
    pub(crate) rust_log: Option<String>,
    /// spanprof's span filter: where it came from (`SPANPROF_FILTER`,
    /// `Builder::with_filter`) and its directives.
    pub(crate) filter: Option<(&'static str, String)>,
    /// The output directory, if any.
    pub(crate) output_dir: Option<PathBuf>,
    /// The callsites registered, with a span filter: for its hint.
    pub(crate) seen: Option<Arc<SeenCallsites>>,
}

impl ProfileSession {
    pub(crate) fn new(
        recorder: Arc<Recorder>,
        backoff: Option<Backoff>,
        sampler: Option<Sampler>,
        #[cfg(feature = "chrome")] chrome: Option<Arc<crate::chrome::Session>>,
        SessionOutputs {
            outputs,
            table,
            selection,
            notes,
        }: SessionOutputs,
        records: bool,
    ) -> Self {
        Self {
            recorder,
            sampler: Mutex::new(sampler),
            backoff: Mutex::new(backoff),
            #[cfg(feature = "chrome")]
            chrome,
            outputs,
            table,
            selection,
            notes,
            records,
            finished: Mutex::new(None),
            #[cfg(feature = "http")]
            metrics: Mutex::new(None),
            exporter: Mutex::new(None),
            interval_start: Mutex::new(None),
            periodic_warned: AtomicBool::new(false),
            #[cfg(feature = "cuda")]
            gpu_resolver: Mutex::new(None),
        }
    }

    /// Starts the export thread of `session` (once), which ends once no `uses` is left.
    pub(crate) fn start_exporter(session: &Arc<Self>, settings: ExportSettings, uses: &WeakUse) {
        let mut exporter = session.exporter.lock().unwrap_or_else(|e| e.into_inner());
        if exporter.is_none() {
            *exporter = Exporter::start(settings, Arc::downgrade(session), uses);
        }
    }

    /// The statistics since the previous call (by any handle of this session), or since the
    /// start for the first: see `ProfileHandle::interval_snapshot`.
    pub(crate) fn interval_snapshot(&self) -> Snapshot {
        let mut start = self
            .interval_start
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let now = self.snapshot();
        let interval = match start.as_ref() {
            Some(earlier) => now.since(earlier),
            None => now.clone(),
        };
        *start = Some(now);
        interval
    }

    /// Re-writes the outputs whose format is periodic with `snapshot`, unless the session is
    /// finishing or finished (its final outputs are never overwritten by an older snapshot).
    /// The first failure is warned about; the final write reports every error.
    pub(crate) fn write_periodic(&self, snapshot: &Snapshot) {
        let Ok(done) = self.finished.try_lock() else {
            return;
        };
        // A run that recorded nothing so far leaves the files of an earlier run as they are.
        if done.is_some() || !self.records || !recorded_anything(snapshot) {
            return;
        }
        let selected = self.selection.apply(snapshot);
        for output in self.outputs.iter().filter(|o| o.format.periodic()) {
            if let Err(e) = output.write(&selected) {
                if !self.periodic_warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!(target: PERF_TARGET, error = %e, "spanprof could not re-write a periodic output (further failures are reported when the profile ends)");
                }
            }
        }
    }

    /// Serves `/metrics` from `listener`, each scrape a snapshot of `session` (held weakly:
    /// the server thread does not keep the session alive). A thread that cannot be started is
    /// logged once; the profile goes on without the endpoint.
    #[cfg(feature = "http")]
    pub(crate) fn serve_metrics(session: &std::sync::Arc<Self>, listener: crate::http::Listener) {
        let weak = std::sync::Arc::downgrade(session);
        // The span names every output shows (`Builder::with_output_filter`).
        let source = Box::new(move || weak.upgrade().map(|s| s.selection.apply(&s.snapshot())));
        match crate::http::MetricsServer::start(listener, source) {
            Ok(server) => {
                tracing::info!(target: crate::PROFILING_TARGET, addr = %server.addr(), "spanprof serves Prometheus metrics at http://{}/metrics", server.addr());
                *session.metrics.lock().unwrap_or_else(|e| e.into_inner()) = Some(server);
            }
            Err(e) => {
                tracing::warn!(target: PERF_TARGET, error = %e, "spanprof could not start its /metrics thread; no endpoint");
            }
        }
    }

    /// The address the `/metrics` endpoint is bound to, while it serves.
    #[cfg(feature = "http")]
    pub(crate) fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        self.metrics
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(crate::http::MetricsServer::addr)
    }

    /// Keeps the thread that resolves GPU times (feature `cuda`), stopped at the end.
    #[cfg(feature = "cuda")]
    pub(crate) fn set_gpu_resolver(
        &self,
        worker: Option<crate::worker::Worker<crate::record::gpu::Resolver>>,
    ) {
        *self.gpu_resolver.lock().unwrap_or_else(|e| e.into_inner()) = worker;
    }

    pub(crate) fn snapshot(&self) -> Snapshot {
        let mut snapshot = self.recorder.snapshot();
        if let Some(backoff) = &*self.backoff.lock().unwrap_or_else(|e| e.into_inner()) {
            (snapshot.backoff, snapshot.dropped.backoff_steps) = backoff.steps();
        }
        #[cfg(feature = "chrome")]
        let snapshot = {
            let mut snapshot = snapshot;
            if let Some(chrome) = &self.chrome {
                snapshot.dropped.trace_windows_skipped = chrome.skipped_windows();
            }
            snapshot
        };
        snapshot
    }

    pub(crate) fn table(&self) -> Table {
        self.table
    }

    pub(crate) fn set_resources(&self, resources: Resources) -> Resources {
        self.recorder.set_resources(resources)
    }

    pub(crate) fn resources(&self) -> Resources {
        self.recorder.resources()
    }

    #[cfg(feature = "chrome")]
    pub(crate) fn chrome(&self) -> Option<&Arc<crate::chrome::Session>> {
        self.chrome.as_ref()
    }

    /// Ends the session: stops recording and the sampler, finishes the Chrome traces, takes the
    /// final snapshot and writes every output. Every step is attempted even if an earlier one
    /// failed. Only the first call writes; later ones return what it wrote. Each failed output
    /// is told once, as `tell` says.
    pub(crate) fn finish(&self, tell: Tell) -> Result<Outputs> {
        let mut done = self.finished.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(outputs) = done.as_ref() {
            return Ok(outputs.clone());
        }
        #[cfg(feature = "http")]
        {
            // Taken out first: the server thread may be answering a scrape that holds the
            // session; it is joined outside the lock.
            let server = self
                .metrics
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            drop(server);
        }
        self.recorder.stop();
        if let Some(backoff) = self
            .backoff
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            if !backoff.stop() {
                tracing::warn!(target: PERF_TARGET, "spanprof's back-off thread did not stop within 1 s; left to finish alone");
            }
        }
        self.stop_sampler();
        #[cfg(feature = "cuda")]
        {
            let resolver = self
                .gpu_resolver
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            if let Some(mut resolver) = resolver {
                resolver.stop(STOP_WAIT);
            }
            // The GPU work still queued: waited for (bounded), then counted as abandoned.
            self.recorder.settle_gpu();
        }
        let mut outputs = Outputs::default();
        let mut errors = Vec::new();
        #[cfg(feature = "chrome")]
        if let Some(chrome) = &self.chrome {
            // Finish the open window, wait until every trace file is complete.
            match chrome.finish() {
                Ok(traces) => outputs.traces = traces,
                Err(e) => errors.push(e),
            }
        }
        let snapshot = self.snapshot();
        for e in &errors {
            tell.failed(e, None);
        }
        if self.records {
            // The report (its header says what the run recorded), then the lines that name
            // the files written; a run that recorded nothing writes nothing (the files of an
            // earlier run stay as they are) and says why.
            let mut lines = if recorded_anything(&snapshot) {
                let selected = self.selection.apply(&snapshot);
                for failed in output::write_all(&self.outputs, &selected, &mut outputs) {
                    tell.failed(&failed.error, failed.to_stderr_instead);
                    errors.push(failed.error);
                }
                // For structured logs (DEBUG: the lines below say it to the user).
                if !outputs.files.is_empty() || !outputs.traces.is_empty() {
                    let files: Vec<_> = outputs.files.iter().map(|(_, p)| p.display()).collect();
                    tracing::debug!(
                        target: crate::PROFILING_TARGET,
                        files = ?files,
                        traces = outputs.traces.len(),
                        "spanprof wrote {} files",
                        files.len() + outputs.traces.len()
                    );
                }
                files_written(&outputs)
            } else {
                vec![self.notes.nothing_recorded(snapshot.run.duration_ns)]
            };
            lines.extend(self.notes.filter_hints());
            self.notes.tell(&lines);
        }
        let exporter = self
            .exporter
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(exporter) = exporter {
            // The last window's summary and OTLP push, waited for a bounded time.
            if !exporter.finish(snapshot) {
                tracing::warn!(target: PERF_TARGET, "spanprof's last export (summary, OTLP push) did not complete in time; left to finish alone");
            }
        }
        *done = Some(outputs.clone());
        match Error::collect(errors) {
            Some(e) => Err(e),
            None => Ok(outputs),
        }
    }

    /// Stops the sampler thread (waiting up to a second); later snapshots keep its samples.
    fn stop_sampler(&self) {
        let sampler = self
            .sampler
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(sampler) = sampler {
            if !sampler.stop(STOP_WAIT) {
                tracing::warn!(target: PERF_TARGET, "spanprof's sampler thread did not stop within 1 s; left to finish alone");
            }
        }
    }
}

/// Where [`ProfileSession::finish`] tells each failed output, once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tell {
    /// A warning at `spanprof::perf` (the caller also gets the errors back).
    Log,
    /// A line on stderr: a guard's drop, which can return nothing, and whose warnings may go
    /// to no subscriber, or to one that shows nothing (the profiling layer alone).
    Stderr,
}

impl Tell {
    /// Tells that an output failed (`to_stderr_instead`: the format written to stderr in its
    /// place).
    fn failed(self, e: &crate::Error, to_stderr_instead: Option<&str>) {
        let instead = to_stderr_instead
            .map(|format| format!("; it wrote its {format} to stderr instead"))
            .unwrap_or_default();
        match self {
            Tell::Log => {
                tracing::warn!(target: PERF_TARGET, error = %e, "spanprof could not write an output{instead}");
            }
            Tell::Stderr => {
                use std::io::Write;
                // Not `eprintln!`: a closed stderr must not panic in a drop.
                let _ = writeln!(
                    std::io::stderr().lock(),
                    "spanprof: could not write an output: {e}{instead}"
                );
            }
        }
    }
}

/// Whether `snapshot` holds anything to write: a span name, or a metric from events.
fn recorded_anything(snapshot: &Snapshot) -> bool {
    !snapshot.spans.is_empty() || !snapshot.metrics.is_empty()
}

impl EndNotes {
    /// Writes `lines` where the report goes (standard error unless it goes to standard output).
    /// Never panics: a closed stream loses them.
    fn tell(&self, lines: &[String]) {
        if lines.is_empty() {
            return;
        }
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        let _ = if self.to_stdout {
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes()).and_then(|()| out.flush())
        } else {
            std::io::stderr().lock().write_all(text.as_bytes())
        };
    }

    /// The line of a run that recorded nothing: the filters in force, and what was (not)
    /// written.
    fn nothing_recorded(&self, run_ns: u64) -> String {
        let rust_log = match &self.rust_log {
            Some(v) => format!("RUST_LOG={:?}", truncate(v)),
            None => "RUST_LOG unset".to_string(),
        };
        let filters = match (&self.filter, &self.rust_log) {
            (None, None) => "no filter: RUST_LOG unset".to_string(),
            (None, Some(_)) => format!("filter {rust_log}"),
            (Some((origin, directives)), _) => {
                let ours = match *origin {
                    "SPANPROF_FILTER" => format!("SPANPROF_FILTER={:?}", truncate(directives)),
                    method => format!("{method}({:?})", truncate(directives)),
                };
                format!("filters {rust_log} and {ours}")
            }
        };
        let written = match &self.output_dir {
            Some(dir) => format!("nothing written, {} left as it was", dir.display()),
            None => "nothing written".to_string(),
        };
        format!(
            "spanprof: no span was recorded (run {}, {filters}): {written}",
            crate::output::format_duration(run_ns)
        )
    }

    /// The span filter's hints: directives that name a span where a target is read.
    fn filter_hints(&self) -> Vec<String> {
        match (&self.filter, &self.seen) {
            (Some((origin, directives)), Some(seen)) => seen.hints(directives, origin),
            _ => Vec::new(),
        }
    }
}

/// Most trace files named one by one at the end of a run (the others are counted).
const TRACES_NAMED: usize = 3;

/// The lines that name every file written: the HTML report first, then the others grouped by
/// directory in the order they were written, then the Chrome traces. None if nothing was.
pub(crate) fn files_written(outputs: &crate::output::Outputs) -> Vec<String> {
    let html = crate::output::Html.name();
    let mut files: Vec<&Path> = outputs
        .files
        .iter()
        .filter(|(format, _)| *format == html)
        .chain(outputs.files.iter().filter(|(format, _)| *format != html))
        .map(|(_, path)| path.as_path())
        .collect();
    let mut lines = Vec::new();
    if !files.is_empty() {
        let first = files.remove(0);
        lines.push(format!("spanprof: wrote {}", first.display()));
        for (dir, names) in by_directory(&files) {
            lines.push(format!("  and in {}: {}", dir.display(), names.join(", ")));
        }
    }
    let traces: Vec<&Path> = outputs.traces.iter().map(PathBuf::as_path).collect();
    let trace_dirs = by_directory(&traces);
    if !trace_dirs.is_empty() {
        let lead = if lines.is_empty() {
            "spanprof: wrote"
        } else {
            "  and"
        };
        for (dir, names) in trace_dirs {
            let count = names.len();
            let mut named = names[..count.min(TRACES_NAMED)].join(", ");
            if count > TRACES_NAMED {
                named.push_str(", …");
            }
            let what = if count == 1 { "trace" } else { "traces" };
            lines.push(format!(
                "{lead} {count} {what} in {}: {named}",
                dir.display()
            ));
        }
    }
    lines
}

/// `files` grouped by their directory, in the order the directories first come, each file
/// by its name.
fn by_directory<'a>(files: &[&'a Path]) -> Vec<(&'a Path, Vec<String>)> {
    let mut groups: Vec<(&Path, Vec<String>)> = Vec::new();
    for file in files {
        let dir = file
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let name = file.file_name().map_or_else(
            || file.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        match groups.iter_mut().find(|(d, _)| *d == dir) {
            Some((_, names)) => names.push(name),
            None => groups.push((dir, vec![name])),
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_files_written_html_first_then_by_directory() {
        let mut outputs = Outputs::default();
        for (format, path) in [
            ("table", "r.txt"),
            ("json", "out/profile.json"),
            ("html", "out/report.html"),
            ("csv", "out/report.csv"),
            ("folded", "out/profile.folded"),
            ("json", "/tmp/copy.json"),
        ] {
            outputs.files.push((format, PathBuf::from(path)));
        }
        outputs.traces = (1..=5)
            .map(|i| PathBuf::from(format!("out/traces/step_{i}.json")))
            .collect();
        assert_eq!(
            files_written(&outputs),
            [
                "spanprof: wrote out/report.html",
                "  and in .: r.txt",
                "  and in out: profile.json, report.csv, profile.folded",
                "  and in /tmp: copy.json",
                "  and 5 traces in out/traces: step_1.json, step_2.json, step_3.json, …",
            ]
        );
        // Traces alone; nothing at all.
        outputs.files.clear();
        outputs.traces.truncate(1);
        assert_eq!(
            files_written(&outputs),
            ["spanprof: wrote 1 trace in out/traces: step_1.json"]
        );
        assert!(files_written(&Outputs::default()).is_empty());
    }

    #[test]
    fn a_run_that_recorded_nothing_names_the_filters_in_force() {
        let line = |rust_log: Option<&str>, filter: Option<(&'static str, &str)>| {
            EndNotes {
                rust_log: rust_log.map(str::to_string),
                filter: filter.map(|(o, d)| (o, d.to_string())),
                output_dir: Some(PathBuf::from("target/spanprof")),
                ..EndNotes::default()
            }
            .nothing_recorded(0)
        };
        assert_eq!(
            line(Some("warn"), None),
            "spanprof: no span was recorded (run 0 ns, filter RUST_LOG=\"warn\"): nothing \
             written, target/spanprof left as it was"
        );
        assert_eq!(
            line(None, None),
            "spanprof: no span was recorded (run 0 ns, no filter: RUST_LOG unset): nothing \
             written, target/spanprof left as it was"
        );
        assert_eq!(
            line(None, Some(("SPANPROF_FILTER", "decode,checksum"))),
            "spanprof: no span was recorded (run 0 ns, filters RUST_LOG unset and \
             SPANPROF_FILTER=\"decode,checksum\"): nothing written, target/spanprof left as it \
             was"
        );
        assert!(line(Some("info"), Some(("Builder::with_filter", "app")))
            .contains("filters RUST_LOG=\"info\" and Builder::with_filter(\"app\")"));
        let no_dir = EndNotes::default().nothing_recorded(0);
        assert!(no_dir.ends_with("): nothing written"), "{no_dir}");
    }
}

//! One profiling session: the recorder, the sampler thread, the chrome traces and the outputs,
//! and the sequence that ends it. The guard and every handle share it.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::backoff::Backoff;
use crate::error::{Error, Result};
use crate::export::{ExportSettings, Exporter};
use crate::output::{self, Output, Outputs, Selection, Table};
use crate::profile::Snapshot;
use crate::record::Recorder;
use crate::samplers::Sampler;
use crate::switches::Resources;
use crate::PERF_TARGET;

/// How long finishing waits for the sampler thread to stop.
const SAMPLER_STOP_WAIT: Duration = Duration::from_secs(1);

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
    /// Whether the session records at all (not the off preset): if not, it ends silently.
    records: bool,
    /// What the first finish wrote (the guard's drop, `finish`, or the Ctrl-C handler).
    finished: Mutex<Option<Outputs>>,
    /// The `/metrics` endpoint, while it serves.
    #[cfg(feature = "http")]
    metrics: Mutex<Option<crate::http::MetricsServer>>,
    /// The export thread (periodic summaries, outputs and OTLP pushes), if a cadence is set.
    exporter: OnceLock<Exporter>,
    /// The snapshot at the end of the last [`ProfileSession::interval_snapshot`].
    interval_start: Mutex<Option<Snapshot>>,
    /// Whether a periodic re-write failed already (warned about once).
    periodic_warned: AtomicBool,
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
            records,
            finished: Mutex::new(None),
            #[cfg(feature = "http")]
            metrics: Mutex::new(None),
            exporter: OnceLock::new(),
            interval_start: Mutex::new(None),
            periodic_warned: AtomicBool::new(false),
        }
    }

    /// Starts the export thread of `session` (once).
    pub(crate) fn start_exporter(session: &Arc<Self>, settings: ExportSettings) {
        if let Some(exporter) = Exporter::start(settings, Arc::downgrade(session)) {
            let _ = session.exporter.set(exporter);
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
        if done.is_some() || !self.records {
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
            backoff.stop();
        }
        self.stop_sampler();
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
        if self.records {
            summary_event(&snapshot);
        }
        for e in &errors {
            tell.failed(e, None);
        }
        let selected = self.selection.apply(&snapshot);
        for failed in output::write_all(&self.outputs, &selected, &mut outputs) {
            tell.failed(&failed.error, failed.to_stderr_instead);
            errors.push(failed.error);
        }
        if let Some(p) = outputs.profile() {
            tracing::info!(target: crate::PROFILING_TARGET, path = %p.display(), "spanprof wrote the JSON profile");
        }
        if let Some(exporter) = self.exporter.get() {
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
            if !sampler.stop(SAMPLER_STOP_WAIT) {
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

/// One summary event at the performance target: how much was profiled and the hottest span.
fn summary_event(snapshot: &Snapshot) {
    // A sum of u64s: in u128, it does not wrap.
    let inside: u128 = snapshot
        .spans
        .iter()
        .map(|s| u128::from(s.entry_self.total_ns))
        .sum();
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

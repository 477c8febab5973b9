//! One profiling session: the recorder, the sampler thread, the chrome traces and the outputs,
//! and the sequence that ends it. The guard and every handle share it.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::{Error, Result};
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
}

impl fmt::Debug for ProfileSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProfileSession")
            .field("recorder", &self.recorder)
            .field("outputs", &self.outputs)
            .finish_non_exhaustive()
    }
}

impl ProfileSession {
    pub(crate) fn new(
        recorder: Arc<Recorder>,
        sampler: Option<Sampler>,
        #[cfg(feature = "chrome")] chrome: Option<Arc<crate::chrome::Session>>,
        outputs: Vec<Output>,
        table: Table,
        selection: Selection,
        records: bool,
    ) -> Self {
        Self {
            recorder,
            sampler: Mutex::new(sampler),
            #[cfg(feature = "chrome")]
            chrome,
            outputs,
            table,
            selection,
            records,
            finished: Mutex::new(None),
        }
    }

    pub(crate) fn snapshot(&self) -> Snapshot {
        let snapshot = self.recorder.snapshot();
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
    /// failed. Only the first call writes; later ones return what it wrote.
    pub(crate) fn finish(&self) -> Result<Outputs> {
        let mut done = self.finished.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(outputs) = done.as_ref() {
            return Ok(outputs.clone());
        }
        self.recorder.stop();
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
        let selected = self.selection.apply(&snapshot);
        errors.extend(output::write_all(&self.outputs, &selected, &mut outputs));
        if let Some(p) = outputs.profile() {
            tracing::info!(target: crate::PROFILING_TARGET, path = %p.display(), "spanprof wrote the JSON profile");
        }
        for e in &errors {
            // One line per failed output, whoever finishes the session.
            tracing::warn!(target: PERF_TARGET, error = %e, "spanprof could not write an output");
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

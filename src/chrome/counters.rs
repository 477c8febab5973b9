//! The seam between resource samplers and chrome traces: counter samples that become counter
//! tracks (`"ph": "C"` events) in each window's trace file.

use std::time::Instant;

/// One resource sample on one counter track.
///
/// In the trace it becomes `{"ph": "C", "name": name, "ts": at, "args": {series: value, ...}}`;
/// Perfetto and chrome://tracing draw one track per `name` with one line per series.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Counter {
    /// When the sample was taken.
    pub(crate) at: Instant,
    /// The track, e.g. `"memory"`, `"cpu"`, `"gpu0"`.
    pub(crate) name: String,
    /// The series of the track and their values, e.g. `("rss_mb", 812.0)`. Non-finite values
    /// are left out of the trace (JSON has no NaN).
    pub(crate) values: Vec<(String, f64)>,
}

/// Where counter samples come from: the resource sampler (RSS, heap, CPU %, GPU memory,
/// utilisation and power) implements it.
///
/// It is asked once per trace window, on tracing-chrome's writer thread after the window's file
/// is closed, for the samples taken while the window was open. It must not block for long and
/// must not panic; it may return samples slightly outside the interval (they are kept).
pub(crate) trait CounterSource: Send + Sync {
    /// The samples taken between `from` and `to` (the window's first and last instant).
    fn counters_between(&self, from: Instant, to: Instant) -> Vec<Counter>;
}

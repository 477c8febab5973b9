//! The seam between resource samplers and chrome traces: counter samples that become counter
//! tracks (`"ph": "C"` events) in each window's trace file.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::profile::Sample;
use crate::samplers::Timeline;

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
/// It is asked once per trace window, when the window's file is completed (after the window
/// closed, off the traced threads), for [`CounterSource::window`]. It must not block for long
/// and must not panic; it may return samples slightly outside the interval (they are kept).
pub(crate) trait CounterSource: Send + Sync {
    /// The samples taken between `from` and `to` (the window's first and last instant).
    fn counters_between(&self, from: Instant, to: Instant) -> Vec<Counter>;

    /// The latest readings published at `at`: the last sample taken at or before `at` (the
    /// first one after it if there is none), stamped `at`. Empty without any sample.
    fn latest(&self, at: Instant) -> Vec<Counter>;

    /// A window's counter tracks: the latest readings at `from`, the samples in between, and
    /// the latest readings at `to`. A window shorter than the sampling interval (a 4 ms step
    /// under a 100 ms sampler) thus still has a value at each end of every track.
    fn window(&self, from: Instant, to: Instant) -> Vec<Counter> {
        let mut out = self.latest(from);
        out.extend(self.counters_between(from, to));
        out.extend(self.latest(to));
        out
    }
}

/// The sampler's timeline as counter tracks: RSS and heap, process CPU %, and per GPU its
/// utilisation, memory and power.
pub(crate) struct TimelineCounters {
    timeline: Arc<Timeline>,
    /// Time 0 of the timeline's samples.
    origin: Instant,
}

impl TimelineCounters {
    pub(crate) fn new(timeline: Arc<Timeline>, origin: Instant) -> Self {
        Self { timeline, origin }
    }
}

impl TimelineCounters {
    fn at(&self, s: &Sample) -> Instant {
        self.origin + Duration::from_nanos(s.t_ns)
    }

    /// The last sample at or before `at`, else the first after it.
    fn latest_in<'a>(&self, samples: &'a [Sample], at: Instant) -> Option<&'a Sample> {
        let after = samples.partition_point(|s| self.at(s) <= at);
        match after {
            0 => samples.first(),
            n => samples.get(n - 1),
        }
    }
}

impl CounterSource for TimelineCounters {
    fn counters_between(&self, from: Instant, to: Instant) -> Vec<Counter> {
        let mut out = Vec::new();
        for s in self.timeline.snapshot() {
            let at = self.at(&s);
            if at < from || at > to {
                continue;
            }
            push_sample(&mut out, &s, at);
        }
        out
    }

    fn latest(&self, at: Instant) -> Vec<Counter> {
        let samples = self.timeline.snapshot();
        let mut out = Vec::new();
        if let Some(s) = self.latest_in(&samples, at) {
            push_sample(&mut out, s, at);
        }
        out
    }

    /// One snapshot of the timeline for the whole window.
    fn window(&self, from: Instant, to: Instant) -> Vec<Counter> {
        let samples = self.timeline.snapshot();
        let mut out = Vec::new();
        if let Some(s) = self.latest_in(&samples, from) {
            push_sample(&mut out, s, from);
        }
        for s in &samples {
            let at = self.at(s);
            if from <= at && at <= to {
                push_sample(&mut out, s, at);
            }
        }
        if let Some(s) = self.latest_in(&samples, to) {
            push_sample(&mut out, s, to);
        }
        out
    }
}

/// One sample as counter tracks at `at`: memory, cpu, and one track per GPU.
fn push_sample(out: &mut Vec<Counter>, s: &Sample, at: Instant) {
    const MIB: f64 = 1024.0 * 1024.0;
    let mut memory = Vec::new();
    if let Some(rss) = s.rss_bytes {
        memory.push(("rss_mib".to_string(), rss as f64 / MIB));
    }
    if let Some(heap) = s.heap_bytes {
        memory.push(("heap_mib".to_string(), heap as f64 / MIB));
    }
    if !memory.is_empty() {
        out.push(Counter {
            at,
            name: "memory".to_string(),
            values: memory,
        });
    }
    if let Some(pct) = s.process_cpu_pct {
        out.push(Counter {
            at,
            name: "cpu".to_string(),
            values: vec![("process_pct".to_string(), f64::from(pct))],
        });
    }
    for (dev, g) in s.gpus.iter().enumerate() {
        let mut values = Vec::new();
        if let Some(u) = g.utilization_pct {
            values.push(("util_pct".to_string(), f64::from(u)));
        }
        if let Some(m) = g.memory_used_bytes {
            values.push(("mem_mib".to_string(), m as f64 / MIB));
        }
        if let Some(p) = g.power_mw {
            values.push(("power_w".to_string(), f64::from(p) / 1e3));
        }
        if !values.is_empty() {
            out.push(Counter {
                at,
                name: format!("gpu{dev}"),
                values,
            });
        }
    }
}

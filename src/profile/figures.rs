//! The catalogue of figures: each per-span-name figure described once (its key, help text,
//! unit, kind and how it is read from a [`SpanStats`]), and the derived values every output
//! shows (total self time, shares, the hottest name, the totals of sampled names) computed in
//! one place, on [`Snapshot`].
//!
//! Every output picks its columns from here, as metrics-rs exporters render the one
//! description of a metric: the console table, Markdown and HTML show an entry's value in
//! human units ([`crate::output::format_duration`] and its siblings, by [`Kind`]), CSV writes
//! it under its [`Figure::key`], Prometheus and OTLP under the names made from
//! [`Figure::metric`] and its kind ([`Figure::prometheus_name`], [`Figure::otlp_name`]), with
//! its [`Figure::help`]. Adding a figure is one entry here plus the outputs that choose it.
//!
//! # Totals of sampled names
//!
//! Where the automatic back-off sampled a span name ([`SpanStats::sampled`]), its histograms
//! hold the spans recorded while its counts hold every span. Its totals (busy and self time,
//! the figures whose [`Figure::scaled`] is set) are scaled to every call by one rule,
//! [`SpanStats::scaled_total_ns`], and are estimates ([`Figure::is_estimate`]; the text
//! outputs mark them `≈`). Shares, the total self time and the hottest name are computed from
//! the scaled totals, so every output orders and shares names alike.
//!
//! ```
//! use spanprof::profile::figures::{self, Kind};
//! # let snapshot = spanprof::Snapshot::from_json(
//! #     include_str!("../../tests/data/golden-profile.json"), "doc")?;
//! let totals = snapshot.totals();
//! let hottest = snapshot.hottest().expect("spans were recorded");
//! assert_eq!(hottest.name, "backward");
//! let share = figures::SELF_SHARE.value(hottest, &totals).unwrap().as_f64();
//! assert_eq!(share, snapshot.self_share_pct(hottest));
//! assert_eq!(figures::SELF.kind, Kind::Duration);
//! assert_eq!(figures::SELF.key, "self_ns");
//! assert_eq!(figures::SELF.prometheus_name(), "spanprof_span_self_time_seconds_total");
//! assert_eq!(figures::SELF.otlp_name(), "spanprof.span.self_time");
//! # Ok::<(), spanprof::Error>(())
//! ```

use std::cmp::Ordering;
use std::fmt;

use super::{Snapshot, SpanStats, Stat};

/// What a figure measures: how it is converted for metric exports and written for people.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Kind {
    /// A number of things (calls, instances, errors), exact: `1234567`.
    Count,
    /// A sum of a span field (`items`, `bytes`, `flops`): SI prefixes for people (`1.25 M`).
    Quantity,
    /// A plain number (a ratio of counts, such as calls per instance).
    Number,
    /// A time, ns (seconds in metric exports).
    Duration,
    /// A size, bytes.
    Bytes,
    /// A share of a whole, % (0 to 100; a ratio, 0 to 1, in metric exports).
    Percent,
    /// A sum of a span field per second of busy time.
    Rate,
    /// Energy, joules.
    Energy,
    /// Mass, grams (CO2-equivalent).
    Mass,
}

impl Kind {
    /// The unit suffix of a [`Figure::key`] of this kind: `_ns`, `_bytes`, `_pct`, `_per_s`,
    /// `_j`, `_g`, or none (a key already ending in its unit keeps one: `bytes`).
    pub fn key_suffix(self) -> &'static str {
        match self {
            Kind::Count | Kind::Quantity | Kind::Number => "",
            Kind::Duration => "_ns",
            Kind::Bytes => "_bytes",
            Kind::Percent => "_pct",
            Kind::Rate => "_per_s",
            Kind::Energy => "_j",
            Kind::Mass => "_g",
        }
    }

    /// The base unit's suffix of a Prometheus name of this kind: `_seconds`, `_bytes`,
    /// `_ratio`, `_per_second`, `_joules`, `_grams`, or none.
    pub fn prometheus_suffix(self) -> &'static str {
        match self {
            Kind::Count | Kind::Quantity | Kind::Number => "",
            Kind::Duration => "_seconds",
            Kind::Bytes => "_bytes",
            Kind::Percent => "_ratio",
            Kind::Rate => "_per_second",
            Kind::Energy => "_joules",
            Kind::Mass => "_grams",
        }
    }

    /// `x` of this kind in the base unit of metric exports (Prometheus, OTLP): ns in seconds
    /// (`x / 1e9`, as every exporter divides), % as a ratio (`x / 100`); others as they are.
    pub fn in_base_unit(self, x: f64) -> f64 {
        match self {
            Kind::Duration => x / 1e9,
            Kind::Percent => x / 100.0,
            _ => x,
        }
    }
}

/// One figure's value for one span name.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Value {
    /// A whole number (counts, ns, bytes), exact.
    Int(u64),
    /// A whole number that can be negative (memory deltas), exact.
    Signed(i64),
    /// Any other number (means, shares, rates).
    Real(f64),
}

impl Value {
    /// The value as a float (a whole number past 2^53 rounded).
    pub fn as_f64(self) -> f64 {
        match self {
            Value::Int(n) => n as f64,
            Value::Signed(n) => n as f64,
            Value::Real(x) => x,
        }
    }
}

impl fmt::Display for Value {
    /// Plain digits: whole numbers exact, others as the shortest decimal that reads back
    /// (nothing for a number that is not finite).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Int(n) => write!(f, "{n}"),
            Value::Signed(n) => write!(f, "{n}"),
            Value::Real(x) if x.is_finite() => write!(f, "{x}"),
            Value::Real(_) => Ok(()),
        }
    }
}

/// How a figure is read: from a span name's statistics, and the snapshot's [`Totals`] for the
/// figures that are shares of them. `None` where the span name has no such figure.
pub type Read = fn(&SpanStats, &Totals) -> Option<Value>;

/// One figure of a span name, described once for every output.
#[derive(Clone, Copy)]
#[non_exhaustive]
pub struct Figure {
    /// The figure's name in tables of data, unit included (`self_ns`, `self_pct`,
    /// `items_per_s`; the suffix is [`Kind::key_suffix`]): the CSV report's column.
    pub key: &'static str,
    /// Its name in metric exports, without the unit: Prometheus `spanprof_span_<metric>` plus
    /// the unit ([`Figure::prometheus_name`]), OTLP `spanprof.span.<metric>`.
    pub metric: &'static str,
    /// A short heading for people (`self %`, `rss Δ/ins`).
    pub label: &'static str,
    /// What it is, one sentence (Prometheus `# HELP`, OTLP description, HTML tooltips).
    pub help: &'static str,
    /// The unit of the value read, in UCUM (`ns`, `By`, `%`, `{call}`, `{item}/s`).
    pub unit: &'static str,
    /// What it measures.
    pub kind: Kind,
    /// Whether it adds up over the run (a counter: totals, counts) rather than being a level
    /// (a gauge: means, percentiles, shares, open instances).
    pub cumulative: bool,
    /// Whether it is scaled to every call where the back-off sampled the name (totals, and
    /// shares of them): an estimate there ([`Figure::is_estimate`]).
    pub scaled: bool,
    /// Reads the value.
    pub read: Read,
}

impl fmt::Debug for Figure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Figure")
            .field("key", &self.key)
            .field("metric", &self.metric)
            .field("unit", &self.unit)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl Figure {
    /// This figure of span name `s` (`totals`: [`Snapshot::totals`] of its snapshot).
    pub fn value(&self, s: &SpanStats, totals: &Totals) -> Option<Value> {
        (self.read)(s, totals)
    }

    /// Whether this figure of `s` is an estimate: a total scaled to every call where the
    /// back-off left spans of the name out. The text outputs mark it `≈`.
    pub fn is_estimate(&self, s: &SpanStats) -> bool {
        self.scaled && s.is_estimate()
    }

    /// The Prometheus name: `spanprof_span_` + [`Figure::metric`] + the base unit
    /// ([`Kind::prometheus_suffix`], unless the metric ends in it) + `_total` for a
    /// [`Figure::cumulative`] one (`spanprof_span_self_time_seconds_total`,
    /// `spanprof_span_open_instances`).
    pub fn prometheus_name(&self) -> String {
        let suffix = self.kind.prometheus_suffix();
        let unit = if self.metric.ends_with(suffix) {
            ""
        } else {
            suffix
        };
        let total = if self.cumulative { "_total" } else { "" };
        format!("spanprof_span_{}{unit}{total}", self.metric)
    }

    /// The OTLP name: `spanprof.span.` + [`Figure::metric`].
    pub fn otlp_name(&self) -> String {
        format!("spanprof.span.{}", self.metric)
    }

    /// The OTLP unit: the base unit for durations (`s`) and shares (`1`), else
    /// [`Figure::unit`].
    pub fn otlp_unit(&self) -> &'static str {
        match self.kind {
            Kind::Duration => "s",
            Kind::Percent => "1",
            _ => self.unit,
        }
    }

    /// A value of this figure in the base unit of metric exports ([`Kind::in_base_unit`]).
    pub fn in_base_unit(&self, value: Value) -> f64 {
        self.kind.in_base_unit(value.as_f64())
    }
}

/// The derived values of a snapshot that every output shows, computed once
/// ([`Snapshot::totals`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Totals {
    /// Self time of every span name, ns: what self % is a share of. Of the whole profile where
    /// this one holds the names an output filter selected ([`Snapshot::selection`]); totals of
    /// sampled names scaled to every call.
    pub self_ns: u64,
    /// Self time of the span names in this snapshot, ns (`self_ns` for a whole profile).
    pub shown_self_ns: u64,
    /// Busy time of the span names in this snapshot, ns (scaled likewise).
    pub busy_ns: u64,
    /// Span names of the whole profile.
    pub span_names: u64,
    /// The span names of this snapshot the back-off sampled.
    pub sampled: SampledTotals,
}

/// The totals of the span names the back-off sampled ([`SpanStats::sampled`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SampledTotals {
    /// Sampled span names.
    pub names: u64,
    /// Their spans left out.
    pub skipped: u64,
    /// Their self time, scaled to every call, ns: the estimated part of
    /// [`Totals::shown_self_ns`] (when `skipped` > 0).
    pub self_ns: u64,
    /// Their busy time, scaled to every call, ns.
    pub busy_ns: u64,
}

impl Totals {
    /// `part` ns as a share of [`Totals::self_ns`], % (0 when it is 0).
    pub fn self_share_pct(&self, part: u64) -> f64 {
        share_pct(part, self.self_ns)
    }
}

/// `part` as a share of `whole`, % (0 when `whole` is 0).
pub(crate) fn share_pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

/// A sum of `u64`s, saturated.
fn sum(values: impl Iterator<Item = u64>) -> u64 {
    values.fold(0, u64::saturating_add)
}

impl SpanStats {
    /// Self time of all calls, ns: the entries' self time, scaled to every call where the
    /// back-off sampled the name ([`SpanStats::scaled_total_ns`]). The figure every output
    /// shows ([`SELF`]).
    pub fn self_ns(&self) -> u64 {
        self.scaled_total_ns(&self.entry_self)
    }

    /// Busy time of all calls, ns, scaled likewise ([`BUSY`]).
    pub fn busy_ns(&self) -> u64 {
        self.scaled_total_ns(&self.entry_busy)
    }

    /// Whether this name's totals are estimates: the back-off left some of its spans out.
    pub fn is_estimate(&self) -> bool {
        self.sampled.as_ref().is_some_and(|s| s.skipped > 0)
    }
}

/// The order of every report: most self time first, then most busy time, then by name and
/// target (a total order, so equal figures print the same way every time).
pub fn by_self_time(a: &SpanStats, b: &SpanStats) -> Ordering {
    b.self_ns()
        .cmp(&a.self_ns())
        .then(b.busy_ns().cmp(&a.busy_ns()))
        .then(a.name.cmp(&b.name))
        .then(a.target.cmp(&b.target))
}

impl Snapshot {
    /// The derived values every output shows: total self time (what shares are of), busy
    /// time, the sampled names' totals.
    pub fn totals(&self) -> Totals {
        let shown_self_ns = sum(self.spans.iter().map(SpanStats::self_ns));
        let sampled: Vec<&SpanStats> = self.spans.iter().filter(|s| s.sampled.is_some()).collect();
        Totals {
            self_ns: self.selection.as_ref().map_or(shown_self_ns, |w| w.self_ns),
            shown_self_ns,
            busy_ns: sum(self.spans.iter().map(SpanStats::busy_ns)),
            span_names: self
                .selection
                .as_ref()
                .map_or(self.spans.len() as u64, |w| w.span_names),
            sampled: SampledTotals {
                names: sampled.len() as u64,
                skipped: sum(sampled
                    .iter()
                    .filter_map(|s| Some(s.sampled.as_ref()?.skipped))),
                self_ns: sum(sampled.iter().map(|s| s.self_ns())),
                busy_ns: sum(sampled.iter().map(|s| s.busy_ns())),
            },
        }
    }

    /// Span name `s`'s share of all self time, % ([`Totals::self_share_pct`]; for many names,
    /// take [`Snapshot::totals`] once).
    pub fn self_share_pct(&self, s: &SpanStats) -> f64 {
        self.totals().self_share_pct(s.self_ns())
    }

    /// The span names in the order of every report: most self time first ([`by_self_time`]).
    pub fn by_self_time(&self) -> Vec<&SpanStats> {
        let mut spans: Vec<&SpanStats> = self.spans.iter().collect();
        spans.sort_by(|a, b| by_self_time(a, b));
        spans
    }

    /// The span name with the most self time (the first of [`Snapshot::by_self_time`]).
    pub fn hottest(&self) -> Option<&SpanStats> {
        self.spans.iter().min_by(|a, b| by_self_time(a, b))
    }
}

/// The figures of a [`Stat`] per call or instance: not scaled, levels.
const fn level(
    key: &'static str,
    metric: &'static str,
    label: &'static str,
    help: &'static str,
    read: Read,
) -> Figure {
    Figure {
        key,
        metric,
        label,
        help,
        unit: "ns",
        kind: Kind::Duration,
        cumulative: false,
        scaled: false,
        read,
    }
}

fn int(n: u64) -> Option<Value> {
    Some(Value::Int(n))
}

fn real(x: f64) -> Option<Value> {
    Some(Value::Real(x))
}

/// `total / n`, `None` when `n` is 0.
fn per(total: f64, n: u64) -> Option<Value> {
    (n > 0).then(|| Value::Real(total / n as f64))
}

/// `part` as a share of `whole`, %, `None` when `whole` is 0.
fn pct(part: u64, whole: u64) -> Option<Value> {
    (whole > 0).then(|| Value::Real(share_pct(part, whole)))
}

fn heap(s: &SpanStats) -> Option<&super::HeapUse> {
    s.resources.as_ref()?.heap.as_ref()
}

fn memory(s: &SpanStats) -> Option<&super::MemoryUse> {
    s.resources.as_ref()?.memory.as_ref()
}

fn cpu(s: &SpanStats) -> Option<&super::CpuUse> {
    s.resources.as_ref()?.cpu.as_ref()
}

/// The CPU figures of a name some of whose entries got a CPU read (none: nothing to show but
/// the entries sampled out).
fn cpu_read(s: &SpanStats) -> Option<&super::CpuUse> {
    cpu(s).filter(|c| c.any_read())
}

fn entry(s: &SpanStats) -> &Stat {
    &s.entry_busy
}

/// Completed entries.
pub const CALLS: Figure = Figure {
    key: "calls",
    metric: "calls",
    label: "calls",
    help: "Completed entries (enter to exit) of spans of this name: how many times the code \
           ran (every span, where the back-off sampled the name).",
    unit: "{call}",
    kind: Kind::Count,
    cumulative: true,
    scaled: false,
    read: |s, _| int(s.calls),
};

/// Closed instances.
pub const INSTANCES: Figure = Figure {
    key: "instances",
    metric: "instances",
    label: "instances",
    help: "Closed instances (creation to close) of spans of this name.",
    unit: "{instance}",
    kind: Kind::Count,
    cumulative: true,
    scaled: false,
    read: |s, _| int(s.instances),
};

/// Instances open at the snapshot.
pub const OPEN: Figure = Figure {
    key: "open",
    metric: "open_instances",
    label: "open",
    help: "Instances open when the snapshot was taken.",
    unit: "{instance}",
    kind: Kind::Count,
    cumulative: false,
    scaled: false,
    read: |s, _| int(s.open),
};

/// Entries per instance created.
pub const CALLS_PER_INSTANCE: Figure = Figure {
    key: "calls_per_instance",
    metric: "calls_per_instance",
    label: "calls/ins",
    help: "Completed entries per instance created.",
    unit: "{call}/{instance}",
    kind: Kind::Number,
    cumulative: false,
    scaled: false,
    read: |s, _| per(s.calls as f64, s.created),
};

/// `error`-level events.
pub const ERRORS: Figure = Figure {
    key: "errors",
    metric: "errors",
    label: "errors",
    help: "Error-level events inside spans of this name.",
    unit: "{error}",
    kind: Kind::Count,
    cumulative: true,
    scaled: false,
    read: |s, _| int(s.errors),
};

/// Closed instances with an `error`-level event.
pub const ERRORED_INSTANCES: Figure = Figure {
    key: "errored_instances",
    metric: "errored_instances",
    label: "errored",
    help: "Closed instances that had at least one error-level event.",
    unit: "{instance}",
    kind: Kind::Count,
    cumulative: true,
    scaled: false,
    read: |s, _| int(s.errored_instances),
};

/// Busy time of all calls, scaled where sampled.
pub const BUSY: Figure = Figure {
    key: "total_ns",
    metric: "busy_time",
    label: "total",
    help: "Busy time of all calls (enter to exit) of spans of this name; where the back-off \
           sampled the name, the mean of the spans recorded times every call (an estimate).",
    unit: "ns",
    kind: Kind::Duration,
    cumulative: true,
    scaled: true,
    read: |s, _| int(s.busy_ns()),
};

/// Self time of all calls, scaled where sampled.
pub const SELF: Figure = Figure {
    key: "self_ns",
    metric: "self_time",
    label: "self",
    help: "Self time of all calls (busy time minus time in child spans) of spans of this name; \
           where the back-off sampled the name, the mean of the spans recorded times every call \
           (an estimate).",
    unit: "ns",
    kind: Kind::Duration,
    cumulative: true,
    scaled: true,
    read: |s, _| int(s.self_ns()),
};

/// The share of all self time.
pub const SELF_SHARE: Figure = Figure {
    key: "self_pct",
    metric: "self_share",
    label: "self %",
    help: "Self time of spans of this name as a share of the self time of every span name (of \
           the whole profile where an output filter selected names).",
    unit: "%",
    kind: Kind::Percent,
    cumulative: false,
    scaled: true,
    read: |s, t| pct(s.self_ns(), t.self_ns),
};

/// Mean busy time per call.
pub const MEAN: Figure = level(
    "mean_ns",
    "mean",
    "mean",
    "Mean busy time per call (exact).",
    |s, _| real(entry(s).mean_ns),
);
/// Shortest call.
pub const MIN: Figure = level("min_ns", "min", "min", "Shortest call (exact).", |s, _| {
    int(entry(s).min_ns)
});
/// Median busy time per call.
pub const P50: Figure = level(
    "p50_ns",
    "p50",
    "p50",
    "Median busy time per call.",
    |s, _| int(entry(s).p50_ns),
);
/// 90th percentile of busy time per call.
pub const P90: Figure = level(
    "p90_ns",
    "p90",
    "p90",
    "90th percentile of busy time per call.",
    |s, _| int(entry(s).p90_ns),
);
/// 99th percentile of busy time per call.
pub const P99: Figure = level(
    "p99_ns",
    "p99",
    "p99",
    "99th percentile of busy time per call.",
    |s, _| int(entry(s).p99_ns),
);
/// 99.9th percentile of busy time per call.
pub const P999: Figure = level(
    "p999_ns",
    "p999",
    "p99.9",
    "99.9th percentile of busy time per call.",
    |s, _| int(entry(s).p999_ns),
);
/// Longest call.
pub const MAX: Figure = level("max_ns", "max", "max", "Longest call (exact).", |s, _| {
    int(entry(s).max_ns)
});
/// Standard deviation of busy time per call.
pub const STDDEV: Figure = level(
    "stddev_ns",
    "stddev",
    "stddev",
    "Standard deviation of busy time per call.",
    |s, _| real(entry(s).stddev_ns),
);
/// Mean self time per call.
pub const SELF_MEAN: Figure = level(
    "self_mean_ns",
    "self_mean",
    "self mean",
    "Mean self time per call (exact).",
    |s, _| real(s.entry_self.mean_ns),
);
/// Median self time per call.
pub const SELF_P50: Figure = level(
    "self_p50_ns",
    "self_p50",
    "self p50",
    "Median self time per call.",
    |s, _| int(s.entry_self.p50_ns),
);
/// 99th percentile of self time per call.
pub const SELF_P99: Figure = level(
    "self_p99_ns",
    "self_p99",
    "self p99",
    "99th percentile of self time per call.",
    |s, _| int(s.entry_self.p99_ns),
);
/// Longest self time of a call.
pub const SELF_MAX: Figure = level(
    "self_max_ns",
    "self_max",
    "self max",
    "Longest self time of a call (exact).",
    |s, _| int(s.entry_self.max_ns),
);

/// Wall time of all closed instances, scaled where sampled.
pub const WALL_TOTAL: Figure = Figure {
    key: "wall_total_ns",
    metric: "wall_time",
    label: "wall",
    help: "Wall time (creation to close) of all closed instances; where the back-off sampled \
           the name, the mean of the instances recorded times every instance (an estimate).",
    unit: "ns",
    kind: Kind::Duration,
    cumulative: true,
    scaled: true,
    read: |s, _| int(s.scaled_total_ns(&s.wall)),
};
/// Median wall time per instance.
pub const WALL_P50: Figure = level(
    "wall_p50_ns",
    "wall_p50",
    "wall p50",
    "Median wall time (creation to close) per closed instance.",
    |s, _| int(s.wall.p50_ns),
);
/// 90th percentile of wall time per instance.
pub const WALL_P90: Figure = level(
    "wall_p90_ns",
    "wall_p90",
    "wall p90",
    "90th percentile of wall time per closed instance.",
    |s, _| int(s.wall.p90_ns),
);
/// 99th percentile of wall time per instance.
pub const WALL_P99: Figure = level(
    "wall_p99_ns",
    "wall_p99",
    "wall p99",
    "99th percentile of wall time per closed instance.",
    |s, _| int(s.wall.p99_ns),
);
/// Longest wall time of an instance.
pub const WALL_MAX: Figure = level(
    "wall_max_ns",
    "wall_max",
    "wall max",
    "Longest wall time of a closed instance (exact).",
    |s, _| int(s.wall.max_ns),
);
/// Median busy time per instance.
pub const INSTANCE_BUSY_P50: Figure = level(
    "instance_busy_p50_ns",
    "instance_busy_p50",
    "busy p50",
    "Median busy time (the sum of its entries) per closed instance.",
    |s, _| int(s.busy.p50_ns),
);
/// 90th percentile of busy time per instance.
pub const INSTANCE_BUSY_P90: Figure = level(
    "instance_busy_p90_ns",
    "instance_busy_p90",
    "busy p90",
    "90th percentile of busy time per closed instance.",
    |s, _| int(s.busy.p90_ns),
);
/// 99th percentile of busy time per instance.
pub const INSTANCE_BUSY_P99: Figure = level(
    "instance_busy_p99_ns",
    "instance_busy_p99",
    "busy p99",
    "99th percentile of busy time per closed instance.",
    |s, _| int(s.busy.p99_ns),
);
/// Longest busy time of an instance.
pub const INSTANCE_BUSY_MAX: Figure = level(
    "instance_busy_max_ns",
    "instance_busy_max",
    "busy max",
    "Longest busy time of a closed instance (exact).",
    |s, _| int(s.busy.max_ns),
);

/// Busy time as a share of wall time, over closed instances.
pub const BUSY_WALL: Figure = Figure {
    key: "busy_wall_pct",
    metric: "busy_wall",
    label: "busy/wall",
    help: "Busy time of the closed instances as a share of their wall time: the share of its \
           life an instance ran.",
    unit: "%",
    kind: Kind::Percent,
    cumulative: false,
    scaled: false,
    read: |s, _| pct(s.busy.total_ns, s.wall.total_ns),
};

/// Time inside entries in progress.
pub const IN_PROGRESS: Figure = Figure {
    key: "in_progress_ns",
    metric: "in_progress",
    label: "running",
    help: "Time inside entries still in progress when the snapshot was taken.",
    unit: "ns",
    kind: Kind::Duration,
    cumulative: false,
    scaled: false,
    read: |s, _| int(s.in_progress_ns),
};

/// Sum of the `items` field.
pub const ITEMS: Figure = Figure {
    key: "items",
    metric: "items",
    label: "items",
    help: "Sum of the `items` field of spans of this name.",
    unit: "{item}",
    kind: Kind::Quantity,
    cumulative: true,
    scaled: false,
    read: |s, _| s.items.map(Value::Int),
};

/// `items` per second of busy time.
pub const ITEMS_RATE: Figure = Figure {
    key: "items_per_s",
    metric: "items",
    label: "items/s",
    help: "Sum of the `items` field divided by the busy time of the entries.",
    unit: "{item}/s",
    kind: Kind::Rate,
    cumulative: false,
    scaled: false,
    read: |s, _| s.rate(s.items).map(Value::Real),
};

/// Sum of the `bytes` field.
pub const BYTES: Figure = Figure {
    key: "bytes",
    metric: "bytes",
    label: "bytes",
    help: "Sum of the `bytes` field of spans of this name.",
    unit: "By",
    kind: Kind::Quantity,
    cumulative: true,
    scaled: false,
    read: |s, _| s.bytes.map(Value::Int),
};

/// `bytes` per second of busy time.
pub const BYTES_RATE: Figure = Figure {
    key: "bytes_per_s",
    metric: "bytes",
    label: "bytes/s",
    help: "Sum of the `bytes` field divided by the busy time of the entries.",
    unit: "By/s",
    kind: Kind::Rate,
    cumulative: false,
    scaled: false,
    read: |s, _| s.rate(s.bytes).map(Value::Real),
};

/// Sum of the `flops` field.
pub const FLOPS: Figure = Figure {
    key: "flops",
    metric: "flops",
    label: "FLOP",
    help: "Sum of the `flops` field of spans of this name.",
    unit: "{flop}",
    kind: Kind::Quantity,
    cumulative: true,
    scaled: false,
    read: |s, _| s.flops.map(Value::Int),
};

/// `flops` per second of busy time.
pub const FLOPS_RATE: Figure = Figure {
    key: "flops_per_s",
    metric: "flops",
    label: "FLOP/s",
    help: "Sum of the `flops` field divided by the busy time of the entries.",
    unit: "{flop}/s",
    kind: Kind::Rate,
    cumulative: false,
    scaled: false,
    read: |s, _| s.rate(s.flops).map(Value::Real),
};

/// Thread CPU time during entries.
pub const CPU: Figure = Figure {
    key: "cpu_ns",
    metric: "cpu",
    label: "cpu",
    help: "Thread CPU time (user + system) during entries (an estimate from the entries read \
           where cpu_skipped_entries is above 0).",
    unit: "ns",
    kind: Kind::Duration,
    cumulative: true,
    scaled: false,
    read: |s, _| cpu_read(s).map(|c| Value::Int(c.cpu_ns)),
};

/// CPU time per busy time.
pub const CPU_PCT: Figure = Figure {
    key: "cpu_pct",
    metric: "cpu_utilization",
    label: "cpu %",
    help: "Thread CPU time during entries divided by their busy time.",
    unit: "%",
    kind: Kind::Percent,
    cumulative: false,
    scaled: false,
    read: |s, _| cpu_read(s).map(|c| Value::Real(c.utilization_pct)),
};

/// Entries whose CPU time was not read.
pub const CPU_SKIPPED: Figure = Figure {
    key: "cpu_skipped_entries",
    metric: "cpu_skipped_entries",
    label: "cpu skipped",
    help: "Entries whose CPU time was not read (short spans are sampled): where above 0, the \
           CPU time is an estimate from the entries read.",
    unit: "{entry}",
    kind: Kind::Count,
    cumulative: true,
    scaled: false,
    read: |s, _| cpu(s).map(|c| Value::Int(c.skipped_entries)),
};

/// RSS growth per closed instance.
pub const RSS_DELTA: Figure = Figure {
    key: "rss_delta_per_instance_bytes",
    metric: "rss_delta_per_instance",
    label: "rss Δ/ins",
    help: "RSS at close minus RSS at creation, mean per closed instance.",
    unit: "By",
    kind: Kind::Bytes,
    cumulative: false,
    scaled: false,
    read: |s, _| memory(s).and_then(|m| per(m.rss_delta_bytes as f64, m.instances)),
};

/// Highest RSS while an instance was open.
pub const PEAK_RSS: Figure = Figure {
    key: "peak_rss_bytes",
    metric: "peak_rss",
    label: "peak rss",
    help: "Highest RSS while an instance was open.",
    unit: "By",
    kind: Kind::Bytes,
    cumulative: false,
    scaled: false,
    read: |s, _| memory(s).map(|m| Value::Int(m.peak_rss_bytes)),
};

/// Highest heap while an instance was open.
pub const PEAK_HEAP: Figure = Figure {
    key: "peak_heap_bytes",
    metric: "peak_heap",
    label: "peak heap",
    help: "Highest net heap while an instance was open (counting allocator).",
    unit: "By",
    kind: Kind::Bytes,
    cumulative: false,
    scaled: false,
    read: |s, _| memory(s)?.peak_heap_bytes.map(Value::Signed),
};

/// Heap bytes allocated per entry.
pub const ALLOC_PER_ENTRY: Figure = Figure {
    key: "alloc_per_entry_bytes",
    metric: "alloc_per_entry",
    label: "alloc",
    help: "Heap bytes allocated per call (counting allocator).",
    unit: "By",
    kind: Kind::Bytes,
    cumulative: false,
    scaled: false,
    read: |s, _| heap(s).and_then(|h| per(h.allocated_bytes as f64, h.entries)),
};

/// Heap allocations per entry.
pub const ALLOCS_PER_ENTRY: Figure = Figure {
    key: "allocs_per_entry",
    metric: "allocs_per_entry",
    label: "allocs",
    help: "Heap allocations per call (counting allocator).",
    unit: "{allocation}",
    kind: Kind::Number,
    cumulative: false,
    scaled: false,
    read: |s, _| heap(s).and_then(|h| per(h.allocations as f64, h.entries)),
};

/// Heap kept per entry, children included.
pub const KEPT_PER_ENTRY: Figure = Figure {
    key: "kept_per_entry_bytes",
    metric: "kept_per_entry",
    label: "kept",
    help: "Heap allocated minus freed per call, child spans included.",
    unit: "By",
    kind: Kind::Bytes,
    cumulative: false,
    scaled: false,
    read: |s, _| heap(s).and_then(|h| per(h.net_retained_bytes as f64, h.entries)),
};

/// Heap kept per entry, children excluded.
pub const SELF_KEPT_PER_ENTRY: Figure = Figure {
    key: "self_kept_per_entry_bytes",
    metric: "self_kept_per_entry",
    label: "self kept",
    help: "Heap allocated minus freed per call, child spans excluded.",
    unit: "By",
    kind: Kind::Bytes,
    cumulative: false,
    scaled: false,
    read: |s, _| heap(s).and_then(|h| per(h.self_retained_bytes as f64, h.entries)),
};

/// Heap bytes allocated during entries.
pub const HEAP_ALLOCATED: Figure = Figure {
    key: "heap_allocated_bytes",
    metric: "heap_allocated",
    label: "heap alloc",
    help: "Heap bytes allocated during entries (counting allocator).",
    unit: "By",
    kind: Kind::Bytes,
    cumulative: true,
    scaled: false,
    read: |s, _| heap(s).map(|h| Value::Int(h.allocated_bytes)),
};

/// Heap allocations during entries.
pub const HEAP_ALLOCATIONS: Figure = Figure {
    key: "heap_allocations",
    metric: "heap_allocations",
    label: "heap allocs",
    help: "Heap allocations during entries (counting allocator).",
    unit: "{allocation}",
    kind: Kind::Count,
    cumulative: true,
    scaled: false,
    read: |s, _| heap(s).map(|h| Value::Int(h.allocations)),
};

/// CPU package and GPU energy over instances.
pub const ENERGY: Figure = Figure {
    key: "energy_j",
    metric: "energy",
    label: "energy",
    help: "CPU package and GPU energy over the instances' lifetimes.",
    unit: "J",
    kind: Kind::Energy,
    cumulative: true,
    scaled: false,
    read: |s, _| s.resources.as_ref()?.energy_j.map(Value::Real),
};

/// CO2-equivalent of that energy.
pub const CO2E: Figure = Figure {
    key: "co2e_g",
    metric: "co2e",
    label: "CO2e",
    help: "CO2-equivalent of the energy, at the grid intensity given.",
    unit: "g",
    kind: Kind::Mass,
    cumulative: true,
    scaled: false,
    read: |s, _| s.resources.as_ref()?.co2e_g.map(Value::Real),
};

/// spanprof's estimated cost in spans of this name.
pub const OVERHEAD: Figure = Figure {
    key: "overhead_ns",
    metric: "overhead",
    label: "spanprof est.",
    help: "spanprof's estimated cost in spans of this name (their count times the calibrated \
           cost of a span, plus their readings).",
    unit: "ns",
    kind: Kind::Duration,
    cumulative: true,
    scaled: false,
    read: |s, _| s.overhead_ns.map(Value::Int),
};

/// That cost as a share of the name's busy time.
pub const OVERHEAD_PCT: Figure = Figure {
    key: "overhead_pct",
    metric: "overhead_share",
    label: "% of busy",
    help: "spanprof's estimated cost in spans of this name as a share of their busy time.",
    unit: "%",
    kind: Kind::Percent,
    cumulative: false,
    scaled: true,
    read: |s, _| s.overhead_ns.and_then(|ns| pct(ns, s.busy_ns())),
};

/// N where the back-off sampled the name.
pub const SAMPLE_EVERY: Figure = Figure {
    key: "sample_every",
    metric: "sample_every",
    label: "1 in N",
    help: "N where the automatic back-off sampled this span name: at least 1 span in N \
           recorded in its histograms; its counts are exact (the spans left out counted, one \
           call each).",
    unit: "1",
    kind: Kind::Count,
    cumulative: false,
    scaled: false,
    read: |s, _| s.sampled.as_ref().map(|x| Value::Int(u64::from(x.every))),
};

/// Spans the back-off left out.
pub const SAMPLED_OUT: Figure = Figure {
    key: "sampled_out",
    metric: "sampled_out",
    label: "left out",
    help: "Spans of this name the automatic back-off left out of its histograms (sampling).",
    unit: "{span}",
    kind: Kind::Count,
    cumulative: true,
    scaled: false,
    read: |s, _| s.sampled.as_ref().map(|x| Value::Int(x.skipped)),
};

fn gpu(s: &SpanStats) -> Option<&super::GpuTime> {
    s.gpu_time.as_ref()
}

/// The GPU time of the timed entries, where any was timed.
fn gpu_timed(s: &SpanStats) -> Option<&Stat> {
    gpu(s).map(|g| &g.time).filter(|t| t.count > 0)
}

/// Entries timed on the GPU.
pub const GPU_CALLS: Figure = Figure {
    key: "gpu_calls",
    metric: "gpu_calls",
    label: "gpu calls",
    help: "Entries of spans of this name timed on the GPU with CUDA events.",
    unit: "{call}",
    kind: Kind::Count,
    cumulative: true,
    scaled: false,
    read: |s, _| gpu(s).map(|g| Value::Int(g.time.count)),
};

/// GPU time of the timed entries.
pub const GPU_TOTAL: Figure = Figure {
    key: "gpu_total_ns",
    metric: "gpu_time",
    label: "gpu",
    help: "GPU time of the timed entries: on each entry's CUDA stream, from an event recorded at \
           enter to one recorded at exit (the work queued in the span, plus idle gaps while the \
           CPU was slow to queue more).",
    unit: "ns",
    kind: Kind::Duration,
    cumulative: true,
    scaled: false,
    read: |s, _| gpu(s).map(|g| Value::Int(g.time.total_ns)),
};

/// Mean GPU time per timed entry.
pub const GPU_MEAN: Figure = level(
    "gpu_mean_ns",
    "gpu_mean",
    "gpu mean",
    "Mean GPU time per timed entry (exact).",
    |s, _| gpu_timed(s).map(|t| Value::Real(t.mean_ns)),
);
/// Median GPU time per timed entry.
pub const GPU_P50: Figure = level(
    "gpu_p50_ns",
    "gpu_p50",
    "gpu p50",
    "Median GPU time per timed entry.",
    |s, _| gpu_timed(s).map(|t| Value::Int(t.p50_ns)),
);
/// 90th percentile of GPU time per timed entry.
pub const GPU_P90: Figure = level(
    "gpu_p90_ns",
    "gpu_p90",
    "gpu p90",
    "90th percentile of GPU time per timed entry.",
    |s, _| gpu_timed(s).map(|t| Value::Int(t.p90_ns)),
);
/// 99th percentile of GPU time per timed entry.
pub const GPU_P99: Figure = level(
    "gpu_p99_ns",
    "gpu_p99",
    "gpu p99",
    "99th percentile of GPU time per timed entry.",
    |s, _| gpu_timed(s).map(|t| Value::Int(t.p99_ns)),
);
/// Longest GPU time of a timed entry.
pub const GPU_MAX: Figure = level(
    "gpu_max_ns",
    "gpu_max",
    "gpu max",
    "Longest GPU time of a timed entry (exact).",
    |s, _| gpu_timed(s).map(|t| Value::Int(t.max_ns)),
);

/// GPU time per busy time.
pub const GPU_BUSY: Figure = Figure {
    key: "gpu_busy_pct",
    metric: "gpu_busy",
    label: "gpu/busy",
    help: "Mean GPU time per timed entry divided by the mean busy (CPU-side) time per entry: \
           over 100 the span waits on the GPU's queue being worked off elsewhere (GPU-bound), \
           well under 100 its time goes to launching work (launch- or CPU-bound).",
    unit: "%",
    kind: Kind::Percent,
    cumulative: false,
    scaled: false,
    read: |s, _| gpu_busy_pct(s).map(Value::Real),
};

/// Entries of a chosen name not timed.
pub const GPU_UNTIMED: Figure = Figure {
    key: "gpu_untimed",
    metric: "gpu_untimed",
    label: "gpu untimed",
    help: "Entries of spans of this name chosen for GPU timing but not timed: no free event pair \
           on their thread (the GPU further behind than the pool), no CUDA context, or a failed \
           driver call.",
    unit: "{call}",
    kind: Kind::Count,
    cumulative: true,
    scaled: false,
    read: |s, _| gpu(s).map(|g| Value::Int(g.untimed)),
};

/// Timed entries whose events were never read.
pub const GPU_ABANDONED: Figure = Figure {
    key: "gpu_abandoned",
    metric: "gpu_abandoned",
    label: "gpu abandoned",
    help: "Entries of spans of this name whose GPU events were recorded but never read: still \
           queued when the run ended and its bounded wait was over, or not readable.",
    unit: "{call}",
    kind: Kind::Count,
    cumulative: true,
    scaled: false,
    read: |s, _| gpu(s).map(|g| Value::Int(g.abandoned)),
};

/// [`GPU_BUSY`] of `s`: the mean GPU time per timed entry over the mean busy time per entry,
/// % (`None` where no entry was timed, or no busy time).
pub fn gpu_busy_pct(s: &SpanStats) -> Option<f64> {
    let t = gpu_timed(s)?;
    let busy = &s.entry_busy;
    (busy.count > 0 && busy.mean_ns > 0.0).then(|| 100.0 * t.mean_ns / busy.mean_ns)
}

/// Spans with a time over the histograms' highest value.
pub const CLAMPED: Figure = Figure {
    key: "clamped",
    metric: "clamped",
    label: "clamped",
    help: "Spans with a time over the histograms' highest value, counted in the percentiles as \
           that value (totals and maxima stay exact).",
    unit: "{span}",
    kind: Kind::Count,
    cumulative: true,
    scaled: false,
    read: |s, _| int(clamped_spans(s)),
};

/// How many spans of a name had a time clamped to the histograms' highest value, counting each
/// span once: a span entered once is clamped in all five histograms, and a closed instance with
/// a clamped entry has a clamped wall time too. Entries of instances still open are in no
/// instance histogram: the entry count stands for them when it is the larger.
pub(crate) fn clamped_spans(s: &SpanStats) -> u64 {
    [
        s.entry_busy.clamped,
        s.entry_self.clamped,
        s.busy.clamped,
        s.self_time.clamped,
        s.wall.clamped,
    ]
    .into_iter()
    .max()
    .unwrap_or(0)
}

/// Every figure of a span name, in the order of the CSV report's columns (which adds one group
/// per GPU device before [`ENERGY`]).
pub const SPAN_FIGURES: &[&Figure] = &[
    &CALLS,
    &INSTANCES,
    &OPEN,
    &CALLS_PER_INSTANCE,
    &ERRORS,
    &ERRORED_INSTANCES,
    &BUSY,
    &SELF,
    &SELF_SHARE,
    &MEAN,
    &MIN,
    &P50,
    &P90,
    &P99,
    &P999,
    &MAX,
    &STDDEV,
    &SELF_MEAN,
    &SELF_P50,
    &SELF_P99,
    &SELF_MAX,
    &WALL_TOTAL,
    &WALL_P50,
    &WALL_P90,
    &WALL_P99,
    &WALL_MAX,
    &INSTANCE_BUSY_P50,
    &INSTANCE_BUSY_P90,
    &INSTANCE_BUSY_P99,
    &INSTANCE_BUSY_MAX,
    &BUSY_WALL,
    &IN_PROGRESS,
    &ITEMS,
    &ITEMS_RATE,
    &BYTES,
    &BYTES_RATE,
    &FLOPS,
    &FLOPS_RATE,
    &CPU,
    &CPU_PCT,
    &CPU_SKIPPED,
    &RSS_DELTA,
    &PEAK_RSS,
    &PEAK_HEAP,
    &ALLOC_PER_ENTRY,
    &ALLOCS_PER_ENTRY,
    &KEPT_PER_ENTRY,
    &SELF_KEPT_PER_ENTRY,
    &HEAP_ALLOCATED,
    &HEAP_ALLOCATIONS,
    &ENERGY,
    &CO2E,
    &GPU_CALLS,
    &GPU_TOTAL,
    &GPU_MEAN,
    &GPU_P50,
    &GPU_P90,
    &GPU_P99,
    &GPU_MAX,
    &GPU_BUSY,
    &GPU_UNTIMED,
    &GPU_ABANDONED,
    &OVERHEAD,
    &OVERHEAD_PCT,
    &SAMPLE_EVERY,
    &SAMPLED_OUT,
    &CLAMPED,
];

/// The figure whose [`Figure::key`] is `key`.
pub fn by_key(key: &str) -> Option<&'static Figure> {
    SPAN_FIGURES.iter().copied().find(|f| f.key == key)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn keys_are_unique_and_carry_their_unit() {
        let mut keys = HashSet::new();
        let mut names = HashSet::new();
        for f in SPAN_FIGURES {
            assert!(keys.insert(f.key), "{} twice", f.key);
            assert!(names.insert(f.prometheus_name()), "{f:?}");
            let suffix = f.kind.key_suffix();
            assert!(
                f.key.ends_with(suffix) || f.metric.ends_with(&suffix[1..]),
                "{f:?}"
            );
            assert!(!f.help.is_empty() && f.help.ends_with('.'), "{f:?}");
            assert!(
                f.scaled
                    == matches!(
                        f.key,
                        "total_ns" | "self_ns" | "self_pct" | "wall_total_ns" | "overhead_pct"
                    ),
                "{f:?}"
            );
            assert_eq!(by_key(f.key).map(|g| g.key), Some(f.key));
        }
    }

    /// The names the exporters have always used come out of the entries.
    #[test]
    fn metric_names_follow_the_rule() {
        for (f, name) in [
            (&CALLS, "spanprof_span_calls_total"),
            (&OPEN, "spanprof_span_open_instances"),
            (&IN_PROGRESS, "spanprof_span_in_progress_seconds"),
            (&BYTES, "spanprof_span_bytes_total"),
            (&BYTES_RATE, "spanprof_span_bytes_per_second"),
            (&CPU, "spanprof_span_cpu_seconds_total"),
            (&HEAP_ALLOCATED, "spanprof_span_heap_allocated_bytes_total"),
            (&ENERGY, "spanprof_span_energy_joules_total"),
            (&OVERHEAD, "spanprof_span_overhead_seconds_total"),
            (&SAMPLE_EVERY, "spanprof_span_sample_every"),
            (&SELF_SHARE, "spanprof_span_self_share_ratio"),
        ] {
            assert_eq!(f.prometheus_name(), name);
        }
        assert_eq!(SELF.otlp_name(), "spanprof.span.self_time");
        assert_eq!(SELF.otlp_unit(), "s");
        assert_eq!(SELF_SHARE.otlp_unit(), "1");
        assert_eq!(BYTES.otlp_unit(), "By");
        assert_eq!(SELF_SHARE.in_base_unit(Value::Real(25.0)), 0.25);
    }

    /// Sampled names: totals scaled by the one rule, estimates marked; shares and the hottest
    /// name from the scaled totals; an output filter keeps shares of the whole.
    #[test]
    fn derived_values_scale_sampled_names_and_keep_shares_of_the_whole() {
        let mut snap = crate::profile::detailed_test_profile();
        let plain = snap.totals();
        assert_eq!(plain.self_ns, plain.shown_self_ns);
        assert_eq!(plain.sampled, SampledTotals::default());
        let coldest = snap.by_self_time().last().unwrap().name.clone();
        let s = snap.spans.iter_mut().find(|s| s.name == coldest).unwrap();
        let skipped = 1_000_000;
        s.calls += skipped;
        // `Sampled` as a profile holds it (non-exhaustive: made from its JSON).
        s.sampled = serde_json::from_value(serde_json::json!({
            "every": 1024, "since_ns": 0, "skipped": skipped
        }))
        .unwrap();
        let scaled = s.scaled_total_ns(&s.entry_self);
        assert_eq!(s.self_ns(), scaled);
        assert!(s.is_estimate() && SELF.is_estimate(s) && !CALLS.is_estimate(s));
        let totals = snap.totals();
        assert_eq!(totals.sampled.names, 1);
        assert_eq!(totals.sampled.skipped, skipped);
        assert_eq!(totals.sampled.self_ns, scaled);
        assert_eq!(
            totals.self_ns,
            snap.spans
                .iter()
                .map(|s| s.scaled_total_ns(&s.entry_self))
                .sum::<u64>()
        );
        assert_eq!(
            snap.hottest().unwrap().name,
            coldest,
            "scaled past the others"
        );
        let hot = snap.hottest().unwrap();
        let share = SELF_SHARE.value(hot, &totals).unwrap().as_f64();
        assert_eq!(share, 100.0 * scaled as f64 / totals.self_ns as f64);
        assert_eq!(share, snap.self_share_pct(hot));

        let selected = crate::output::Selection::new()
            .with_name(coldest.clone())
            .apply(&snap);
        let t = selected.totals();
        assert_eq!(t.self_ns, totals.self_ns, "shares stay of the whole");
        assert_eq!(t.shown_self_ns, scaled);
        assert_eq!(t.span_names, snap.spans.len() as u64);
        assert_eq!(selected.self_share_pct(&selected.spans[0]), share);
    }
}

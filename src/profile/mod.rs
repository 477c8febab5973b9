//! The profile model: a [`Snapshot`] of everything recorded up to one moment, as plain data.
//!
//! A snapshot stands alone: it holds no live state, no sampler types and no prose, and every
//! output and analysis reads only it. So a snapshot written as JSON and read back
//! ([`Snapshot::from_json`], [`Snapshot::read_json`]) renders byte for byte as the live one did.
//!
//! The JSON profile is this model serialised with `serde_json`; its schema is documented in the
//! guide's `docs/profile-format.md`. Histograms are stored whole, as HdrHistogram V2 + deflate,
//! base64, so profiles merge and compare exactly and any HdrHistogram implementation can read
//! them.
//!
//! # Versions
//!
//! This crate writes schema version [`SCHEMA_VERSION`] (5) and reads versions 1 to 5:
//! - **1**: timing only.
//! - **2**: adds `resources` to the profile and to each span.
//! - **3**: drops the per-span `resources.leak` (leak suspicion is now an analysis of the
//!   profile, [`leaks`]) and adds `resources.rss_bytes_at_end` and
//!   `resources.heap_bytes_at_end`, which that analysis reads.
//! - **4**: adds optional fields only: the `tree` ([`CallTree`], statistics per call path),
//!   spanprof's own cost (`overhead`, and `overhead_ns` per
//!   span), the entries whose CPU time was sampled out (`resources.cpu.skipped_entries`), and
//!   `metrics`, the metrics events recorded ([`metrics`]; empty in profiles of earlier
//!   versions),
//!   and `sources`, the runs a merged profile was made from ([`Snapshot::merge`]), each with
//!   its metadata and resource timeline (absent in a profile of one run); the back-off's
//!   second stage: `sampled` per span name ([`SpanStats::sampled`]), `sampled` per back-off
//!   step ([`BackoffStep::sampled`]) and `dropped.backoff_steps`, absent where empty, so a
//!   version 4 profile written before them reads as one where nothing was sampled.
//! - **5**: adds optional fields only, the GPU time per span from CUDA events: `gpu_time` per
//!   span name ([`SpanStats::gpu_time`]), `gpu_calls` and `gpu_ns` per call-tree node, and
//!   `gpu_streams` ([`Snapshot::gpu_streams`]); absent where nothing was timed on the GPU, so a
//!   profile of an earlier version reads as one without GPU time.
//!
//! An older profile is read into the current model and its `version` becomes the current one.

pub mod buckets;
mod combine;
pub mod figures;
pub(crate) mod glob;
mod hdr;
mod interval;
mod json;
pub mod leaks;
mod merge;
pub mod metrics;
mod resources;
mod tree;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

pub use buckets::Buckets;
pub use figures::{Figure, Kind, Totals, Value};
pub use metrics::{Metric, MetricKind, MetricValue};
pub use resources::{
    CpuUse, GpuDevice, GpuSample, GpuUse, HeapUse, MemoryUse, ResourceInfo, Sample, SpanResources,
};
pub(crate) use tree::PathIds;
pub use tree::{CallTree, TreeNode};

/// The `schema` field of every profile.
pub const SCHEMA: &str = "spanprof.profile";
/// The version of the profile schema this crate writes; it reads this one and every earlier one.
pub const SCHEMA_VERSION: u32 = 5;

/// Significant decimal digits kept by every histogram: values are exact to within 1 part in 128
/// (better than 0.8 %).
pub const SIGNIFICANT_DIGITS: u8 = 2;
/// Lowest value the histograms tell apart from zero, in nanoseconds.
pub const LOWEST_NS: u64 = 1;
/// Highest value the histograms record, in nanoseconds (one hour). Longer durations are recorded
/// as this value and counted in [`Stat::clamped`].
pub const HIGHEST_NS: u64 = 3_600_000_000_000;

/// A profile: everything recorded up to one moment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Snapshot {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// Schema version, [`SCHEMA_VERSION`] when written by this crate.
    pub version: u32,
    /// What ran, where and when.
    pub run: RunInfo,
    /// How the histograms are bounded and encoded.
    pub histograms: HistogramSpec,
    /// One entry per span name (name + target), in no particular order.
    #[serde(deserialize_with = "json::path::spans")]
    pub spans: Vec<SpanStats>,
    /// What could not be recorded.
    pub dropped: Dropped,
    /// Resource samplers (absent at the `basic` preset). In a merged profile: what every
    /// source sampled together (peaks, sampler CPU), the timelines staying in [`Source`]s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceInfo>,
    /// Statistics per call path (absent when the tree was not recorded; schema version 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree: Option<CallTree>,
    /// spanprof's own cost in this run (schema 4; absent in older profiles and where it was not
    /// calibrated: a mock clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overhead: Option<Overhead>,
    /// Steps the automatic back-off took, in order (schema 4; empty when it took none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backoff: Vec<BackoffStep>,
    /// Metrics recorded from events' `counter.`, `monotonic_counter.`, `histogram.` and
    /// `gauge.` fields, one per metric and span name, in no particular order ([`metrics`]).
    /// Empty (and absent from the JSON) when no event had one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metrics: Vec<Metric>,
    /// The runs this profile was merged from, in the order given (schema v4; empty for the
    /// profile of one run). See [`Snapshot::merge`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<Source>,
    /// Where this profile holds only the span names an output filter selected
    /// ([`Selection::apply`](crate::output::Selection::apply)): the filter, and the figures of
    /// the whole profile that shares stay shares of. Absent for a whole profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<Selected>,
    /// GPU time per CUDA stream, over the entries of the spans timed on the GPU (schema 5;
    /// empty, and absent from the JSON, when none was: see [`SpanStats::gpu_time`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_streams: Vec<GpuStream>,
}

/// The GPU time of one CUDA stream ([`Snapshot::gpu_streams`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct GpuStream {
    /// The stream: `default` for the legacy default stream, else its handle in hex
    /// (`0x7f3a2c000b70`), as the program passed it to `spanprof::cuda::set_stream`. Handles
    /// are per process: a merge of several processes adds up streams of equal handles.
    pub stream: String,
    /// Entries timed on it.
    pub calls: u64,
    /// Their GPU time, ns.
    pub total_ns: u64,
}

combine::rules! { GpuStream {
    stream: first,
    calls: sum,
    total_ns: sum,
} }

impl GpuStream {
    /// The name of the legacy default stream.
    pub const DEFAULT: &'static str = "default";

    /// The stream's name for a raw handle (0: [`GpuStream::DEFAULT`]).
    pub fn name_of(handle: usize) -> String {
        if handle == 0 {
            Self::DEFAULT.to_string()
        } else {
            format!("{handle:#x}")
        }
    }
}

/// GPU time of the entries of a span name timed with CUDA events ([`SpanStats::gpu_time`]).
///
/// Each timed entry is the time on its CUDA stream between an event recorded when the span was
/// entered and one recorded when it was exited: the kernels and copies queued on that stream
/// in the span, plus any idle gap while the stream waited for the CPU to queue more. It is not
/// the time of each kernel (that needs CUPTI), nor of work queued on other streams.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct GpuTime {
    /// GPU time of each timed entry (the driver's resolution: about 0.5 µs).
    pub time: Stat,
    /// Entries not timed: no free event pair on their thread (the GPU further behind than the
    /// pool), no CUDA context on the thread, or a driver call that failed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub untimed: u64,
    /// Entries whose events were recorded but never read: still queued on the GPU when the
    /// run ended and the bounded wait for them was over, or the driver failed to read them.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub abandoned: u64,
}

combine::rules! { GpuTime {
    time: hist,
    untimed: sum,
    abandoned: sum,
} }

/// The output filter a profile of selected span names was made with, and what the whole
/// profile held: a report of the selection keeps its self % a share of all the self time
/// inside profiled spans, and tells a filter that matched nothing from a run that recorded
/// nothing, live or from a saved profile alike.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Selected {
    /// The filter, in the syntax of `SPANPROF_OUTPUT_FILTER` (filters applied one after the
    /// other joined by ` then `).
    pub filter: String,
    /// Span names in the whole profile.
    pub span_names: u64,
    /// Self time of every span name in the whole profile, ns (totals of names the back-off
    /// sampled scaled to every call): what self % is a share of.
    pub self_ns: u64,
}

/// One run a merged profile was made from: its metadata, what it dropped and its resources,
/// timeline included, as that run's own profile held them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Source {
    /// Where the run's profile was read from (a path), if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// What ran, where and when (host, pid, start time, command line).
    pub run: RunInfo,
    /// What that run could not record.
    pub dropped: Dropped,
    /// Its resource samplers and timeline (absent at the `basic` preset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceInfo>,
}

/// One step of the automatic back-off
/// ([`Builder::with_max_overhead`](crate::Builder::with_max_overhead)).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct BackoffStep {
    /// When, ns since the profile started.
    pub at_ns: u64,
    /// `true`: the readings were switched back on; `false`: off.
    pub on: bool,
    /// The per-span readings switched (`cpu`, `heap`, `memory`, `gpu`, `energy`), for every
    /// span name.
    pub resources: Vec<String>,
    /// spanprof's estimated cost over the second before, % of the process's CPU time (with
    /// the readings, predicted, for a step back on).
    pub overhead_pct: f64,
    /// A step of the second stage (sampling), when not empty: the span names whose sampling
    /// changed, each with its new N (1: recorded whole again); `resources` is then empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sampled: Vec<SampledName>,
}

/// A span name's sampling set by a back-off step ([`BackoffStep::sampled`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SampledName {
    /// Span name.
    pub name: String,
    /// Span target.
    pub target: String,
    /// 1 span in `every` recorded from this step on (1: every span).
    pub every: u32,
}

impl BackoffStep {
    pub(crate) fn new(
        at_ns: u64,
        on: bool,
        resources: crate::switches::Resources,
        overhead_pct: f64,
    ) -> Self {
        Self {
            at_ns,
            on,
            resources: resources.names().into_iter().map(str::to_string).collect(),
            overhead_pct,
            sampled: Vec::new(),
        }
    }

    /// A step of the second stage: `names` (name, target, N) sampled further (`on` false) or
    /// less (`on` true).
    pub(crate) fn sampling(
        at_ns: u64,
        on: bool,
        names: Vec<(String, String, u32)>,
        overhead_pct: f64,
    ) -> Self {
        Self {
            at_ns,
            on,
            resources: Vec::new(),
            overhead_pct,
            sampled: names
                .into_iter()
                .map(|(name, target, every)| SampledName {
                    name,
                    target,
                    every,
                })
                .collect(),
        }
    }
}

/// spanprof's own cost: each span name's cost per span (measured as the program ran, where that
/// is sure, else calibrated at start-up) times its spans recorded, plus the measured time of its
/// readings on the span path.
///
/// The estimate leaves out the sampler thread (well under 0.1% of a core at 100 ms), the
/// tracing registry's own cost (there with or without spanprof) and start-up and output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Overhead {
    /// Cost of one span at `basic` (open, enter, exit, close), calibrated at start-up, ns.
    pub span_cost_ns: f64,
    /// Cost of one span (or one entry of a span entered several times) as measured while the
    /// program ran, over every span name: every callback of 1 span in 64 timed whole (table
    /// lookups and cache misses included), each name charged the trimmed mean of its own timed
    /// callbacks (the fastest and slowest tenth left out; every name's together for a name
    /// with fewer than 32) times its callbacks, a thread's first span of each name left out (a
    /// one-time cost). Present only when sure: [`Overhead::SURE_SAMPLES`] callbacks timed
    /// ([`Overhead::measured_samples`]). Where present, the estimate uses it instead of
    /// `span_cost_ns`: callbacks cost what the program around them leaves in the caches (a
    /// long span's exit and close miss them), more than the calibration's loop. (Profiles
    /// written before `measured_samples` hold a plain mean of 32 callbacks or more here:
    /// unsure, [`Overhead::span_ns_sure`].)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_span_ns: Option<f64>,
    /// Warm callbacks timed whole behind `measured_span_ns` (absent: none, or a profile written
    /// before they were counted). Under [`Overhead::SURE_SAMPLES`] the estimate is unsure: it
    /// uses `span_cost_ns`, the reports say so and name no costly span names, and the back-off
    /// goes by the calibrated cost.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub measured_samples: u64,
    /// Cost of one read of the thread CPU clock, calibrated at start-up, ns (0 where there is
    /// none).
    pub cpu_read_ns: f64,
    /// Names whose mean entry is shorter than this get their CPU time read for 1 entry in
    /// [`Overhead::cpu_sample_every`] (so the clock costs under 0.1% of the entries it reads),
    /// ns.
    pub cpu_every_entry_from_ns: u64,
    /// See [`Overhead::cpu_every_entry_from_ns`].
    pub cpu_sample_every: u64,
    /// Where the CPU clock's reads switch threads out (`CLOCK_THREAD_CPUTIME_ID`): a thread's
    /// sampled entries are read at least this much of its time apart, and
    /// [`Overhead::cpu_every_entry_from_ns`] is at least this, ns (absent: no gap). Most of the
    /// scheduler's switches then happen at ticks, where they would without spanprof; see the
    /// guide's `docs/resources-and-gpu.md`, "Thread CPU time" (its "No distortion" paragraph).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cpu_sample_gap_ns: u64,
    /// spanprof's measured time reading resources at enters and exits (CPU clock, heap
    /// counters), preemption inside included, ns: kept out of every span's busy and self time.
    pub readings_ns: u64,
    /// Estimated total: over every span name, its spans × its cost per span (measured where
    /// sure, else `span_cost_ns`), plus `readings_ns`, ns.
    pub estimated_ns: u64,
    /// The process's CPU time (every thread) at the snapshot, ns, where readable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_cpu_ns: Option<u64>,
    /// `estimated_ns` as a share of the process's CPU time (of the run's wall time where that
    /// is not readable), %: for a program that keeps its threads busy, its slowdown.
    pub percent: f64,
    /// The thread CPU clock read per span: `"perf task-clock"` or `"CLOCK_THREAD_CPUTIME_ID"`
    /// (where perf events are not allowed, e.g. a container's seccomp profile, or with
    /// `SPANPROF_CPU_CLOCK=thread`); absent when none was read. The latter draws the scheduler's
    /// switches into its reads on a shared CPU: spanprof shares those waits out over the spans
    /// (see the guide's `docs/resources-and-gpu.md`, "Thread CPU time"), less exactly than the
    /// perf event avoids them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_clock: Option<String>,
}

impl Overhead {
    /// The fewest warm callbacks timed for a sure measured cost of a span
    /// ([`Overhead::measured_samples`]).
    pub const SURE_SAMPLES: u64 = 64;

    /// The measured cost of one span, ns, where it is sure: measured from at least
    /// [`Overhead::SURE_SAMPLES`] timed callbacks. `None`: unsure (too few spans, or a profile
    /// written before the samples were counted); the estimate is then the calibrated cost
    /// [`Overhead::span_cost_ns`], and no note on costly span names is raised from it.
    pub fn span_ns_sure(&self) -> Option<f64> {
        self.measured_span_ns
            .filter(|ns| ns.is_finite() && *ns > 0.0)
            .filter(|_| self.measured_samples >= Self::SURE_SAMPLES)
    }

    /// The cost of one span the estimate charged, ns: [`Overhead::span_ns_sure`], else the
    /// calibrated [`Overhead::span_cost_ns`].
    pub fn span_ns(&self) -> f64 {
        self.span_ns_sure().unwrap_or(self.span_cost_ns)
    }
}

// spanprof's cost in several runs or an interval: times added or subtracted, the share
// recomputed from them, the calibrated costs the largest (the later's in an interval).
combine::rules! { Overhead {
    span_cost_ns: max,
    measured_span_ns: custom(merge::sure_span_ns),
    measured_samples: custom(merge::sure_samples),
    cpu_read_ns: max,
    cpu_every_entry_from_ns: first,
    cpu_sample_every: first,
    cpu_sample_gap_ns: first,
    readings_ns: sum,
    estimated_ns: sum,
    process_cpu_ns: custom(merge::process_cpu_ns, interval::process_cpu_ns),
    percent: custom(merge::overhead_percent, interval::overhead_percent),
    cpu_clock: custom(merge::cpu_clocks),
} }

/// Metadata of the profiled run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RunInfo {
    /// When profiling started, RFC 3339 (UTC).
    pub start_time: String,
    /// When profiling started, nanoseconds since the Unix epoch.
    pub start_unix_ns: u64,
    /// Time from the start of profiling to this snapshot, ns.
    pub duration_ns: u64,
    /// Host name of the machine.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// The program's command line.
    pub command_line: Vec<String>,
    /// Version of spanprof that wrote the profile.
    pub crate_version: String,
    /// The preset in effect (`basic`, `detailed`, `full`).
    pub preset: String,
    /// The span filter in effect (`SPANPROF_FILTER` or the builder's), if any.
    pub filter: Option<String>,
}

// The run of several: from the earliest start to the latest end, on every host; of an
// interval: from the earlier snapshot to the later one.
combine::rules! { RunInfo {
    start_time: custom(merge::earliest_start_time, interval::start_time),
    start_unix_ns: custom(merge::earliest_start, interval::start_unix_ns),
    duration_ns: custom(merge::duration, interval::duration),
    host: custom(merge::hosts),
    pid: first,
    command_line: first,
    crate_version: first,
    preset: first,
    filter: first,
} }

/// Bounds and encoding of the histograms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct HistogramSpec {
    /// Unit of every recorded value: `ns`.
    pub unit: String,
    /// Significant decimal digits kept.
    pub significant_digits: u8,
    /// Lowest discernible value.
    pub lowest: u64,
    /// Highest trackable value; larger values are recorded as this and counted in `clamped`.
    pub highest: u64,
    /// `hdrhistogram-v2-deflate-base64`.
    pub encoding: String,
}

/// What spanprof had to leave out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Dropped {
    /// Spans not profiled because the open-span table was full.
    pub spans_table_full: u64,
    /// Spans not profiled because [`MAX_SPAN_NAMES`](crate::builder::MAX_SPAN_NAMES) names were in use.
    pub spans_too_many_names: u64,
    /// Chrome trace windows skipped because earlier ones were still being written (see
    /// [`crate::chrome`]); 0 in profiles written before it was counted.
    #[serde(default)]
    pub trace_windows_skipped: u64,
    /// Metric values of events not recorded because
    /// [`MAX_METRICS`](crate::builder::MAX_METRICS) metrics or
    /// [`MAX_METRIC_SITES`](crate::builder::MAX_METRIC_SITES) event callsites with metric
    /// fields were in use; absent when 0, and 0 in profiles before version 4.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub metric_values: u64,
    /// Automatic back-off steps taken past the [`Snapshot::backoff`] bound (64): counted, not
    /// kept; absent when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub backoff_steps: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

combine::rules! { Dropped {
    spans_table_full: sum,
    spans_too_many_names: sum,
    trace_windows_skipped: sum,
    metric_values: sum,
    backoff_steps: sum,
} }

/// Statistics of one span name.
///
/// Two kinds of sample: an **entry** is one enter→exit interval of a span (the code ran once;
/// an async span is entered at every poll, a long-lived span at every use); an **instance** is a
/// span from creation to close. For a span entered once (a plain `#[instrument]` function) the
/// two are the same.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SpanStats {
    /// Span name.
    pub name: String,
    /// Span target (module path unless set).
    pub target: String,
    /// Completed entries (enter→exit intervals): how many times the code ran.
    pub calls: u64,
    /// Instances created.
    pub created: u64,
    /// Instances closed.
    pub instances: u64,
    /// Instances open when the snapshot was taken.
    pub open: u64,
    /// Time inside entries still in progress when the snapshot was taken, ns (not part of the
    /// histograms).
    pub in_progress_ns: u64,
    /// Busy time of each entry.
    #[serde(deserialize_with = "json::path::entry_busy")]
    pub entry_busy: Stat,
    /// Self time of each entry: busy time minus time in child spans entered during it on the
    /// same thread.
    #[serde(deserialize_with = "json::path::entry_self")]
    pub entry_self: Stat,
    /// Busy time of each closed instance: the sum of its entries.
    #[serde(deserialize_with = "json::path::busy")]
    pub busy: Stat,
    /// Self time of each closed instance: the sum of its entries' self time.
    #[serde(rename = "self")]
    #[serde(deserialize_with = "json::path::self_time")]
    pub self_time: Stat,
    /// Wall time of each closed instance, creation to close.
    #[serde(deserialize_with = "json::path::wall")]
    pub wall: Stat,
    /// Sum of the `items` field of the spans, if any span had one.
    pub items: Option<u64>,
    /// Sum of the `bytes` field, if any.
    pub bytes: Option<u64>,
    /// Sum of the `flops` field, if any.
    pub flops: Option<u64>,
    /// `error`-level events inside spans of this name.
    pub errors: u64,
    /// Closed instances that had at least one `error`-level event: the errors of span names
    /// entered more than once per instance (async tasks, long-lived spans), counted per
    /// instance rather than per event or entry. 0 in profiles written before it was recorded.
    #[serde(default)]
    pub errored_instances: u64,
    /// Resources used by spans of this name (`detailed` and `full` presets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<SpanResources>,
    /// spanprof's estimated cost in spans of this name (their count, or their entries for spans
    /// entered several times, × the name's cost per span: measured where sure
    /// ([`Overhead::span_ns_sure`]), else calibrated; plus the measured time of their
    /// readings), ns; absent where not calibrated (schema 4). Compare with
    /// `entry_busy.total_ns`: a span of 80 ns instrumented at 40 ns is mostly spanprof.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overhead_ns: Option<u64>,
    /// Set when the automatic back-off sampled this name's spans (its second stage): the
    /// histograms, the call tree, the resources and the throughput sums (their rates stay
    /// unbiased) hold 1 span in [`Sampled::every`] from
    /// [`Sampled::since_ns`] on, while `calls`, `created` and `instances` count every span
    /// (schema 4, absent otherwise). [`SpanStats::scaled_total_ns`] gives a total for all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampled: Option<Sampled>,
    /// GPU time of the entries, where the name was timed on the GPU with CUDA events (schema 5;
    /// absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_time: Option<GpuTime>,
}

// Span names are matched by (name, target) in a merge and an interval; `open` and
// `in_progress_ns` are states: side by side in a merge, the later's in an interval.
combine::rules! { SpanStats {
    name: first,
    target: first,
    calls: sum,
    created: sum,
    instances: sum,
    open: level,
    in_progress_ns: level,
    entry_busy: hist,
    entry_self: hist,
    busy: hist,
    self_time: hist,
    wall: hist,
    items: sum,
    bytes: sum,
    flops: sum,
    errors: sum,
    errored_instances: sum,
    resources: opt,
    overhead_ns: sum,
    sampled: opt,
    gpu_time: opt,
} }

/// How a span name was sampled by the automatic back-off ([`SpanStats::sampled`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Sampled {
    /// The largest N in effect: at least 1 span in N of the name was recorded (a power of two).
    pub every: u32,
    /// When sampling began, ns since the profile started.
    pub since_ns: u64,
    /// Spans of this name not recorded (sampled out): counted in `calls` (one entry each),
    /// `created` and `instances`, in no histogram.
    pub skipped: u64,
    /// The estimated busy time of the skipped spans, ns: for each, the name's running mean
    /// busy time on its thread when it was left out, which is also what its parent's child
    /// time got. Absent in profiles written before it (their totals are scaled as mean ×
    /// count).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped_ns: u64,
}

// Two runs' sampling of one name: the largest N, the earliest start, the skipped spans added;
// in an interval, the skipped spans in it, N and its start as at its end.
combine::rules! { Sampled {
    every: max,
    since_ns: min,
    skipped: sum,
    skipped_ns: sum,
} }

impl SpanStats {
    /// `stat.total_ns` with the spans the back-off left out when the name was sampled: the
    /// skipped spans' estimated busy time ([`Sampled::skipped_ns`], what their parents' child
    /// time got, so the names' self times add up to the roots' busy time) at the recorded
    /// entries' ratio of `stat` to busy time; in profiles without that estimate, the mean of
    /// the recorded × their count plus the skipped ones. `stat.total_ns` otherwise (exact).
    /// The one rule every output and analysis uses for a sampled name's totals.
    ///
    /// ```
    /// # let snapshot: spanprof::Snapshot = spanprof::Snapshot::from_json(
    /// #     include_str!("../../tests/data/profile-v2-detailed.json"), "x").unwrap();
    /// for s in &snapshot.spans {
    ///     // Unsampled: the exact sum.
    ///     assert_eq!(s.scaled_total_ns(&s.busy), s.busy.total_ns);
    /// }
    /// ```
    pub fn scaled_total_ns(&self, stat: &Stat) -> u64 {
        match &self.sampled {
            Some(s) if s.skipped > 0 && s.skipped_ns > 0 => stat.total_ns.saturating_add(
                tree::scale(s.skipped_ns, stat.total_ns, self.entry_busy.total_ns),
            ),
            Some(s) if s.skipped > 0 && stat.count > 0 => {
                (stat.mean_ns * stat.count.saturating_add(s.skipped) as f64).round() as u64
            }
            _ => stat.total_ns,
        }
    }

    /// Rate of a throughput sum over the busy time of this span's entries (per second).
    pub fn rate(&self, sum: Option<u64>) -> Option<f64> {
        let sum = sum?;
        (self.entry_busy.total_ns > 0).then(|| sum as f64 * 1e9 / self.entry_busy.total_ns as f64)
    }
}

/// Statistics of one histogram.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Stat {
    /// Samples.
    pub count: u64,
    /// Exact sum of the samples, ns.
    pub total_ns: u64,
    /// Exact smallest sample, ns (0 when empty).
    pub min_ns: u64,
    /// Exact largest sample, ns (0 when empty).
    pub max_ns: u64,
    /// Exact mean, ns.
    pub mean_ns: f64,
    /// Standard deviation, from the histogram, ns.
    pub stddev_ns: f64,
    /// Median, ns (histogram precision).
    pub p50_ns: u64,
    /// 90th percentile, ns.
    pub p90_ns: u64,
    /// 99th percentile, ns.
    pub p99_ns: u64,
    /// 99.9th percentile, ns.
    pub p999_ns: u64,
    /// Samples above the histogram's highest value, recorded as that value.
    pub clamped: u64,
    /// The full histogram, stored as its non-empty buckets ([`Buckets::to_histogram`] gives an
    /// `hdrhistogram::Histogram`).
    #[serde(with = "json::hdr_base64")]
    pub histogram: Buckets,
}

impl Stat {
    /// Builds the statistics of a histogram and its exact figures.
    pub(crate) fn new(
        histogram: Histogram<u64>,
        total_ns: u64,
        min_ns: u64,
        max_ns: u64,
        clamped: u64,
    ) -> Self {
        let count = histogram.len();
        // A sample being recorded while the snapshot is taken may have set the smallest value
        // and not yet the largest: the largest is then that sample.
        let max_ns = max_ns.max(min_ns);
        let clamp = |v: u64| v.clamp(min_ns, max_ns);
        let q = |q: f64| {
            if count == 0 {
                0
            } else if count == u64::MAX {
                // Possibly more samples than a u64 counts (histograms of several profiles
                // added): hdrhistogram's `value_at_quantile` would overflow adding them up.
                // The same walk, saturating.
                let rank = ((q * count as f64).ceil() as u64).max(1);
                let mut seen = 0u64;
                clamp(
                    histogram
                        .iter_recorded()
                        .find(|v| {
                            seen = seen.saturating_add(v.count_at_value());
                            seen >= rank
                        })
                        .map_or(max_ns, |v| v.value_iterated_to()),
                )
            } else {
                clamp(histogram.value_at_quantile(q))
            }
        };
        Stat {
            count,
            total_ns,
            min_ns,
            max_ns,
            mean_ns: if count == 0 {
                0.0
            } else {
                total_ns as f64 / count as f64
            },
            stddev_ns: if count == 0 { 0.0 } else { histogram.stdev() },
            p50_ns: q(0.5),
            p90_ns: q(0.9),
            p99_ns: q(0.99),
            p999_ns: q(0.999),
            clamped,
            histogram: Buckets::from_histogram(&histogram),
        }
    }
}

impl Snapshot {
    /// The statistics of the first span name `name` in [`Snapshot::spans`], whatever its
    /// target. Spans of one name from two targets (two modules each with a `step` span) are two
    /// entries: [`Snapshot::span_in`] picks one by its target.
    pub fn span(&self, name: &str) -> Option<&SpanStats> {
        self.spans.iter().find(|s| s.name == name)
    }

    /// The metrics named `name` (without their prefix), of every kind and span name.
    pub fn metrics_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Metric> + 'a {
        self.metrics.iter().filter(move |m| m.name == name)
    }

    /// The statistics of span name `name` in target `target` (the key spans are recorded
    /// under).
    pub fn span_in(&self, name: &str, target: &str) -> Option<&SpanStats> {
        self.spans
            .iter()
            .find(|s| s.name == name && s.target == target)
    }
}

/// `x` saturated at `±f64::MAX` (a NaN counts 0), as the recorder keeps a counter's float sum.
pub(crate) fn finite(x: f64) -> f64 {
    if x.is_nan() {
        0.0
    } else {
        x.clamp(f64::MIN, f64::MAX)
    }
}

/// `a + b` kept [`finite`]: what merges and intervals add and subtract floats with, so that a
/// profile holds only finite floats, which JSON can write and read back.
pub(crate) fn add_finite(a: f64, b: f64) -> f64 {
    finite(finite(a) + finite(b))
}

/// The schema v2 profile of `tests/data` (preset `detailed`), read into the current model: the
/// fixture of the unit tests.
#[cfg(test)]
pub(crate) fn detailed_test_profile() -> Snapshot {
    Snapshot::from_json(
        include_str!("../../tests/data/profile-v2-detailed.json"),
        "test data",
    )
    .expect("the test profile reads")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampled(every: u32, since_ns: u64, skipped: u64) -> Option<Sampled> {
        Some(Sampled {
            every,
            since_ns,
            skipped,
            skipped_ns: 0,
        })
    }

    #[test]
    fn sampled_names_are_optional_kept_through_json_since_and_merge() {
        // A v4 profile written before sampling existed reads: no name sampled, no step count.
        let old = Snapshot::from_json(
            include_str!("../../tests/data/cli-detailed.json"),
            "test data",
        )
        .expect("reads");
        assert_eq!(old.version, SCHEMA_VERSION);
        assert!(old.spans.iter().all(|s| s.sampled.is_none()));
        assert_eq!(old.dropped.backoff_steps, 0);
        assert!(
            !old.to_json().contains("\"sampled\""),
            "absent when not sampled"
        );

        let mut a = old.clone();
        a.spans[0].sampled = sampled(8, 2_000_000_000, 700);
        a.dropped.backoff_steps = 3;
        a.backoff.push(BackoffStep::sampling(
            2_000_000_000,
            false,
            vec![(a.spans[0].name.clone(), a.spans[0].target.clone(), 8)],
            7.5,
        ));
        let json = a.to_json();
        assert!(json.contains("\"sampled\""));
        let back = Snapshot::from_json(&json, "round trip").unwrap();
        assert_eq!(back, a);
        assert_eq!(back.backoff[0].sampled[0].every, 8);

        // The interval: the skipped spans in it, N as at its end.
        let mut later = a.clone();
        later.spans[0].sampled = sampled(16, 2_000_000_000, 1_000);
        let interval = later.since(&a);
        assert_eq!(interval.spans[0].sampled, sampled(16, 2_000_000_000, 300));
        assert_eq!(interval.dropped.backoff_steps, 0);

        // Merged with a run sampled at another N, and one not sampled.
        let mut b = old.clone();
        b.spans[0].sampled = sampled(32, 1_000_000_000, 50);
        let merged = Snapshot::merge(&[a.clone(), b, old.clone()], &[]).unwrap();
        let name = &a.spans[0].name;
        let span = merged.spans.iter().find(|s| &s.name == name).unwrap();
        assert_eq!(span.sampled, sampled(32, 1_000_000_000, 750));
        assert_eq!(merged.dropped.backoff_steps, 3);
        let others = merged.spans.iter().filter(|s| &s.name != name);
        assert!(others.clone().all(|s| s.sampled.is_none()));
    }
}

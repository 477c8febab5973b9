//! `metrics.prom`: the Prometheus text exposition, [`Prometheus`].

use std::io::{self, Write};

use prometheus::proto::{
    Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType,
};

use std::collections::{BTreeMap, HashSet};

use super::Format;
use crate::profile::buckets::{bucket_top, export_bounds_ns};
use crate::profile::figures::{self as fig, Figure};
use crate::profile::metrics::{HistogramValue, FLOAT_SCALE};
use crate::profile::{Metric as EventMetric, MetricKind, MetricValue, Sample, Snapshot};
use crate::profile::{SpanStats, Stat, Totals, HIGHEST_NS};

/// Name of the metrics file in an output directory (node_exporter textfile style: point its
/// `--collector.textfile.directory` at the output directory).
pub const METRICS_FILE: &str = "metrics.prom";

/// The Prometheus text exposition of a profile (format 0.0.4, what `promtool check metrics`
/// and node_exporter's textfile collector read), encoded by the `prometheus` crate's
/// `TextEncoder`.
///
/// Every metric is named `spanprof_…`, in seconds, bytes and joules, counters ending in
/// `_total`. Per span name, labelled `span` (the name) and `target`; the families of single
/// values are figures of the catalogue ([`crate::profile::figures`]), named, typed and
/// described by their entries:
///
/// | metric | type | what |
/// |---|---|---|
/// | `spanprof_span_busy_seconds` | histogram | busy time of each entry (enter→exit): the report's per-call times |
/// | `spanprof_span_self_seconds` | histogram | self time of each entry (busy minus child spans) |
/// | `spanprof_span_instance_wall_seconds` | histogram | creation→close of each closed instance, only for span names whose instances are not one entry each (calls ≠ instances: async tasks, long-lived spans), as in the report's instance section |
/// | `spanprof_span_calls_total` | counter | completed entries |
/// | `spanprof_span_instances_total` | counter | closed instances |
/// | `spanprof_span_errors_total` | counter | `error`-level events inside the spans |
/// | `spanprof_span_open_instances` | gauge | instances open at the snapshot |
/// | `spanprof_span_in_progress_seconds` | gauge | time inside entries still in progress |
/// | `spanprof_span_busy_time_seconds_total`, `spanprof_span_self_time_seconds_total` | counter | busy and self time of all calls, the report's `total` and `self`: where the back-off sampled the name, scaled to every call (the histograms' `_sum` holds the spans recorded) |
/// | `spanprof_span_self_share_ratio` | gauge | self time as a share of every span name's (0 to 1), the report's self % |
/// | `spanprof_span_{items,bytes,flops}_total` | counter | sums of the `items`, `bytes`, `flops` fields (span names that have them) |
/// | `spanprof_span_{items,bytes,flops}_per_second` | gauge | those sums ÷ busy time, the report's throughput |
/// | `spanprof_span_cpu_seconds_total` | counter | thread CPU time during entries (`detailed`) |
/// | `spanprof_span_heap_allocated_bytes_total`, `spanprof_span_heap_allocations_total` | counter | heap allocated during entries (counting allocator) |
/// | `spanprof_span_energy_joules_total` | counter | CPU package + GPU energy over instances (`full`) |
/// | `spanprof_span_gpu_seconds` | histogram | GPU time of each entry timed with CUDA events (feature `cuda`), for span names timed on the GPU |
/// | `spanprof_span_gpu_calls_total`, `spanprof_span_gpu_time_seconds_total` | counter | entries timed on the GPU and their GPU time |
/// | `spanprof_span_gpu_p50_seconds`, `spanprof_span_gpu_p99_seconds`, `spanprof_span_gpu_max_seconds` | gauge | GPU time per timed entry |
/// | `spanprof_span_gpu_busy_ratio` | gauge | mean GPU time per timed entry ÷ mean busy time per entry (over 1: GPU-bound) |
/// | `spanprof_span_gpu_untimed_total`, `spanprof_span_gpu_abandoned_total` | counter | entries of a chosen name not timed, and timed entries never read |
///
/// Per CUDA stream (labelled `stream`: `default`, or the handle in hex), where entries were
/// timed on the GPU: `spanprof_gpu_stream_seconds_total`, `spanprof_gpu_stream_calls_total`.
///
/// For the run: `spanprof_run_info` (1, labelled `host`, `pid`, `preset`, `version`),
/// `spanprof_run_start_time_seconds` (Unix time), `spanprof_run_duration_seconds`,
/// `spanprof_dropped_spans_total` (labelled `reason`). From the resource samplers, the latest
/// reading: `spanprof_process_resident_memory_bytes`, `spanprof_process_resident_memory_max_bytes`,
/// `spanprof_process_heap_bytes`, `spanprof_process_cpu_cores` (CPU time over the last sample
/// interval, in cores), `spanprof_process_cpu_energy_joules_total`, and per GPU (labelled `gpu`,
/// its position in the profile's device list) `spanprof_gpu_utilization_ratio`,
/// `spanprof_gpu_memory_used_bytes`, `spanprof_gpu_process_memory_bytes`,
/// `spanprof_gpu_power_watts`, `spanprof_gpu_energy_joules_total`,
/// `spanprof_gpu_temperature_celsius`, `spanprof_gpu_sm_clock_hertz`. A figure the profile does
/// not have is left out, never written as 0.
///
/// spanprof's own cost, where the profile has its estimate: `spanprof_overhead_ratio` (the
/// estimate as a share of the process's CPU time, 0 to 1), `spanprof_overhead_estimated_seconds_total`,
/// `spanprof_overhead_readings_seconds_total`, `spanprof_overhead_span_cost_seconds` (the
/// calibrated cost of one span), `spanprof_process_cpu_seconds_total`; per span name
/// `spanprof_span_overhead_seconds_total` and `spanprof_span_cpu_skipped_entries_total` (entries
/// whose CPU time was sampled out: above 0, `spanprof_span_cpu_seconds_total` is an estimate);
/// where the back-off sampled a span name, `spanprof_span_sample_every` (its N: the span
/// histograms hold 1 span in N, `_count` the spans recorded; `spanprof_span_calls_total` stays
/// exact) and `spanprof_span_sampled_out_total`;
/// after back-off steps, `spanprof_backoff_steps_total` (labelled `direction`, `off` or `on`) and
/// `spanprof_backoff_reading_off` (labelled `resource`: 1 while the back-off holds that
/// per-span reading off).
///
/// # Metrics from events
///
/// Each metric from events ([`Snapshot::metrics`]) is a family of its own, named
/// `spanprof_metric_<name>`, its samples labelled `span` and `target` (no labels for events
/// outside every span); the help text names the event field it comes from:
///
/// | field | type | family |
/// |---|---|---|
/// | `monotonic_counter.<name>` | counter | `spanprof_metric_<name>_total`: the sum |
/// | `counter.<name>` (up-down) | gauge | `spanprof_metric_<name>`: the sum |
/// | `histogram.<name>` | histogram | `spanprof_metric_<name>`: `_bucket`, `_sum`, `_count` |
/// | `gauge.<name>` | gauge | `spanprof_metric_<name>` (last value), `spanprof_metric_<name>_min`, `_max` |
///
/// The name is made a Prometheus name: camel case to snake case (`queueLength` →
/// `queue_length`), every character but ASCII letters, digits and `_` replaced by `_`, lower
/// case, a trailing `_total` dropped (counters get one). A unit suffix of the metric's name
/// ([`unit_of`](crate::profile::metrics::unit_of)) becomes the Prometheus base unit, the values
/// converted: `_milliseconds`, `_microseconds` and `_nanoseconds` are written in `_seconds`,
/// `_percent` in `_ratio` (0 to 1), `_seconds`, `_bytes` and `_ratio` stay; the unit comes last
/// (`gauge.hit_percent` → `spanprof_metric_hit_ratio`, `spanprof_metric_hit_min_ratio`).
/// Two metrics whose names give the same family (`hit.rate` and `hit_rate`, or a gauge `x` and a
/// histogram `x`) never share it: in the order of their names and kinds, the first gets it,
/// the next `spanprof_metric_<name>_2`, and so on; each family's help names its field.
///
/// A metric histogram's `le` bounds are in its unit: the 1-2.5-5 series from the power of ten
/// at or below its smallest non-zero value up to the power of ten above its largest (integer
/// values from 1, float values from 10⁻⁹ to 1000), each rounded up to the top of its HDR bucket
/// in the scale the values were recorded in (integers as they are, floats in nano-units,
/// [`FLOAT_SCALE`]): the counts are the histogram's, exact (`le="1003"` for 1000 bytes,
/// `le="0.001003519"` for 1 ms). Only a metric recorded with both integer and float values is
/// counted at each part's own bucket top, its `le` the higher of the two (within one HDR bucket,
/// 1/128, of exact). `_sum` is the exact sum, `_count` every value.
///
/// # Buckets
///
/// The histograms' `le` bounds are [`export_bounds_ns`] in seconds: a 1-2.5-5 series from 1 µs
/// to 100 s, each rounded up to the top of its HDR bucket (`le="0.000001003"` for 1 µs). At a
/// bucket top the HDR histogram's cumulative count is exact, so every `_bucket` sample is the
/// profile's count, not an interpolation; `+Inf` is the number of samples, `_sum` their exact
/// total.
///
/// # Periodic
///
/// `metrics.prom` is re-written atomically at each window of the export cadence
/// ([`Builder::with_every`](crate::Builder::with_every), `SPANPROF_EVERY`), node_exporter
/// textfile style, as well as at the end ([`Format::periodic`]).
///
/// ```
/// use spanprof::output::{Format, Prometheus};
/// # let snapshot = spanprof::profile::Snapshot::from_json(
/// #     include_str!("../../tests/data/profile-v1-basic.json"), "doc")?;
/// let text = Prometheus::new().to_string(&snapshot);
/// assert!(text.contains("# TYPE spanprof_span_busy_seconds histogram"));
/// assert!(text.contains("spanprof_span_calls_total{span=\""));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Prometheus;

impl Prometheus {
    /// The HTTP content type of the exposition: the Prometheus text format 0.0.4.
    pub const CONTENT_TYPE: &'static str = "text/plain; version=0.0.4; charset=utf-8";

    /// The exposition format.
    pub fn new() -> Self {
        Self
    }

    /// The exposition of `snapshot` as text.
    pub fn to_string(&self, snapshot: &Snapshot) -> String {
        let mut text = Vec::new();
        // Writing into memory does not fail, and the families are built non-empty and named:
        // the encoder's other errors do not arise.
        let _ = write_families(snapshot, &mut text);
        // The encoder writes UTF-8 (names and label values are Rust strings).
        String::from_utf8(text).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into())
    }
}

impl Format for Prometheus {
    fn name(&self) -> &'static str {
        "prometheus"
    }

    fn file_name(&self) -> &'static str {
        METRICS_FILE
    }

    fn action(&self) -> &'static str {
        "writing metrics"
    }

    fn render(&self, snapshot: &Snapshot, out: &mut dyn Write) -> io::Result<()> {
        write_families(snapshot, out)
    }

    /// `metrics.prom` is re-written at each window of the export cadence, node_exporter
    /// textfile style: a scraper sees the profile so far while the program runs.
    fn periodic(&self) -> bool {
        true
    }
}

/// Metric families, each encoded into `out` as it is added and then dropped, so that one
/// family is held at a time; families without a sample are left out.
struct Families<'a> {
    out: &'a mut dyn Write,
    /// The name and type of each family written, in order.
    written: Vec<(String, MetricType)>,
    /// The first error of the writer; nothing more is written after it.
    error: Option<io::Error>,
}

impl Families<'_> {
    fn add(&mut self, name: &str, help: &str, kind: MetricType, metrics: Vec<Metric>) {
        if metrics.is_empty() || self.error.is_some() {
            return;
        }
        let mut family = MetricFamily::default();
        family.set_name(format!("spanprof_{name}"));
        family.set_help(help.to_string());
        family.set_field_type(kind);
        family.set_metric(metrics);
        let encoded =
            prometheus::Encoder::encode(&prometheus::TextEncoder::new(), &[family], &mut self.out);
        match encoded {
            Ok(()) => self.written.push((format!("spanprof_{name}"), kind)),
            Err(prometheus::Error::Io(e)) => self.error = Some(e),
            Err(e) => self.error = Some(io::Error::other(e.to_string())),
        }
    }

    /// A family with one sample per span name that `value` gives a value for.
    fn per_span(
        &mut self,
        spans: &[&SpanStats],
        name: &str,
        help: &str,
        kind: MetricType,
        value: impl Fn(&SpanStats) -> Option<f64>,
    ) {
        let metrics = spans
            .iter()
            .filter_map(|s| Some(sample(kind, span_labels(s), value(s)?)))
            .collect();
        self.add(name, help, kind, metrics);
    }

    /// The family of a figure of the catalogue: its name, help and type from the entry
    /// ([`Figure::prometheus_name`]; a counter where it is cumulative), one sample per span name
    /// that has it, in the base unit.
    fn figure(&mut self, spans: &[&SpanStats], totals: &Totals, figure: &Figure) {
        let kind = if figure.cumulative {
            MetricType::COUNTER
        } else {
            MetricType::GAUGE
        };
        let name = figure.prometheus_name();
        let name = name.strip_prefix("spanprof_").unwrap_or(&name);
        self.per_span(spans, name, figure.help, kind, |s| {
            Some(figure.in_base_unit(figure.value(s, totals)?))
        });
    }

    /// A histogram family of the `stat` of each span name `keep` selects.
    fn histograms(
        &mut self,
        spans: &[&SpanStats],
        name: &str,
        help: &str,
        stat: impl Fn(&SpanStats) -> &Stat,
        keep: impl Fn(&SpanStats) -> bool,
    ) {
        let bounds = export_bounds_ns();
        let metrics = spans
            .iter()
            .filter(|s| keep(s))
            .map(|s| {
                let stat = stat(s);
                let buckets = bounds
                    .iter()
                    .zip(stat.histogram.cumulative_counts(bounds))
                    .map(|(&le, below)| {
                        let mut bucket = Bucket::default();
                        bucket.set_upper_bound(seconds(le));
                        bucket.set_cumulative_count(below);
                        bucket
                    })
                    .collect();
                let mut histogram = Histogram::default();
                histogram.set_sample_count(stat.count);
                histogram.set_sample_sum(seconds(stat.total_ns));
                histogram.set_bucket(buckets);
                let mut metric = Metric::from_label(span_labels(s));
                metric.set_histogram(histogram);
                metric
            })
            .collect();
        self.add(name, help, MetricType::HISTOGRAM, metrics);
    }
}

/// Nanoseconds in seconds.
fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

fn labels(pairs: &[(&str, &str)]) -> Vec<LabelPair> {
    pairs
        .iter()
        .map(|&(name, value)| {
            let mut pair = LabelPair::default();
            pair.set_name(name.to_string());
            pair.set_value(value.to_string());
            pair
        })
        .collect()
}

fn span_labels(s: &SpanStats) -> Vec<LabelPair> {
    labels(&[("span", &s.name), ("target", &s.target)])
}

/// One counter or gauge sample.
fn sample(kind: MetricType, labels: Vec<LabelPair>, value: f64) -> Metric {
    let mut metric = Metric::from_label(labels);
    if kind == MetricType::COUNTER {
        let mut counter = Counter::default();
        counter.set_value(value);
        metric.set_counter(counter);
    } else {
        let mut gauge = Gauge::default();
        gauge.set_value(value);
        metric.set_gauge(gauge);
    }
    metric
}

/// Whether a span name's instances are not one entry each (the report's instance section).
fn multi_entry(s: &SpanStats) -> bool {
    s.calls != s.instances
}

/// The figures of each span name exported, after the histograms, in order (each a family named
/// by [`Figure::prometheus_name`]).
const SPAN_FIGURES: &[&Figure] = &[
    &fig::CALLS,
    &fig::INSTANCES,
    &fig::ERRORS,
    &fig::OPEN,
    &fig::IN_PROGRESS,
    &fig::BUSY,
    &fig::SELF,
    &fig::SELF_SHARE,
    &fig::ITEMS,
    &fig::ITEMS_RATE,
    &fig::BYTES,
    &fig::BYTES_RATE,
    &fig::FLOPS,
    &fig::FLOPS_RATE,
    &fig::CPU,
    &fig::HEAP_ALLOCATED,
    &fig::HEAP_ALLOCATIONS,
    &fig::ENERGY,
    &fig::GPU_CALLS,
    &fig::GPU_TOTAL,
    &fig::GPU_P50,
    &fig::GPU_P99,
    &fig::GPU_MAX,
    &fig::GPU_BUSY,
    &fig::GPU_UNTIMED,
    &fig::GPU_ABANDONED,
];

/// The figures of each span name on spanprof's own cost and the back-off, in order.
const OVERHEAD_FIGURES: &[&Figure] = &[
    &fig::OVERHEAD,
    &fig::CPU_SKIPPED,
    &fig::SAMPLE_EVERY,
    &fig::SAMPLED_OUT,
];

/// Writes the exposition of `snap` into `out`, one family at a time.
fn write_families(snap: &Snapshot, out: &mut dyn Write) -> io::Result<()> {
    use MetricType::{COUNTER, GAUGE};
    let mut spans: Vec<&SpanStats> = snap.spans.iter().collect();
    spans.sort_by(|a, b| (&a.name, &a.target).cmp(&(&b.name, &b.target)));
    let spans = &spans[..];
    let mut f = Families {
        out,
        written: Vec::new(),
        error: None,
    };

    let run = &snap.run;
    let pid = run.pid.to_string();
    f.add(
        "run_info",
        "The profiled run: host, process id, spanprof preset and version (always 1).",
        GAUGE,
        vec![sample(
            GAUGE,
            labels(&[
                ("host", &run.host),
                ("pid", &pid),
                ("preset", &run.preset),
                ("version", &run.crate_version),
            ]),
            1.0,
        )],
    );
    f.add(
        "run_start_time_seconds",
        "When profiling started, Unix time in seconds.",
        GAUGE,
        vec![sample(GAUGE, Vec::new(), seconds(run.start_unix_ns))],
    );
    f.add(
        "run_duration_seconds",
        "Time from the start of profiling to this snapshot, seconds.",
        GAUGE,
        vec![sample(GAUGE, Vec::new(), seconds(run.duration_ns))],
    );
    let d = &snap.dropped;
    f.add(
        "dropped_spans_total",
        "Spans not profiled, by reason.",
        COUNTER,
        vec![
            sample(
                COUNTER,
                labels(&[("reason", "table_full")]),
                d.spans_table_full as f64,
            ),
            sample(
                COUNTER,
                labels(&[("reason", "too_many_names")]),
                d.spans_too_many_names as f64,
            ),
        ],
    );

    f.histograms(
        spans,
        "span_busy_seconds",
        "Busy time of each entry (enter to exit) of spans of this name, seconds.",
        |s| &s.entry_busy,
        |_| true,
    );
    f.histograms(
        spans,
        "span_self_seconds",
        "Self time of each entry (busy time minus time in child spans), seconds.",
        |s| &s.entry_self,
        |_| true,
    );
    f.histograms(
        spans,
        "span_instance_wall_seconds",
        "Creation to close of each closed instance, for span names whose instances are entered \
         more than once (async tasks, long-lived spans), seconds.",
        |s| &s.wall,
        multi_entry,
    );
    f.histograms(
        spans,
        "span_gpu_seconds",
        "GPU time of each entry timed with CUDA events (on its stream, enter to exit), for span \
         names timed on the GPU, seconds.",
        |s| s.gpu_time.as_ref().map_or(&s.entry_busy, |g| &g.time),
        |s| s.gpu_time.is_some(),
    );
    let totals = snap.totals();
    for figure in SPAN_FIGURES {
        f.figure(spans, &totals, figure);
    }
    if !snap.gpu_streams.is_empty() {
        let per_stream = |value: fn(&crate::profile::GpuStream) -> f64| {
            snap.gpu_streams
                .iter()
                .map(|g| sample(COUNTER, labels(&[("stream", &g.stream)]), value(g)))
                .collect()
        };
        f.add(
            "gpu_stream_seconds_total",
            "GPU time of the entries timed with CUDA events on each stream, seconds.",
            COUNTER,
            per_stream(|g| seconds(g.total_ns)),
        );
        f.add(
            "gpu_stream_calls_total",
            "Entries timed with CUDA events on each stream.",
            COUNTER,
            per_stream(|g| g.calls as f64),
        );
    }
    if let Some(info) = &snap.resources {
        let last = info.timeline.last();
        process_gauges(&mut f, info.rss_bytes_at_end, info.heap_bytes_at_end, last);
        f.add(
            "process_resident_memory_max_bytes",
            "Highest resident set size seen, bytes.",
            GAUGE,
            info.peak_rss_bytes
                .map(|v| sample(GAUGE, Vec::new(), v as f64))
                .into_iter()
                .collect(),
        );
        if let Some(last) = last {
            gpu_gauges(&mut f, last);
        }
    }
    overhead(&mut f, snap, spans, &totals);
    event_metrics(&mut f, &snap.metrics);
    f.error.map_or(Ok(()), Err)
}

/// spanprof's own cost: the estimate, per span name, the sampled CPU readings and the back-off.
fn overhead(f: &mut Families<'_>, snap: &Snapshot, spans: &[&SpanStats], totals: &Totals) {
    use MetricType::{COUNTER, GAUGE};
    let one = |v: f64| vec![sample(GAUGE, Vec::new(), v)];
    let total = |v: f64| vec![sample(COUNTER, Vec::new(), v)];
    if let Some(o) = &snap.overhead {
        f.add(
            "overhead_ratio",
            "spanprof's estimated cost as a share of the process's CPU time (of the run's wall \
             time where that is not readable), 0 to 1.",
            GAUGE,
            one(o.percent / 100.0),
        );
        f.add(
            "overhead_estimated_seconds_total",
            "spanprof's estimated cost: spans times the calibrated cost of one, plus its \
             measured readings, seconds.",
            COUNTER,
            total(seconds(o.estimated_ns)),
        );
        f.add(
            "overhead_readings_seconds_total",
            "spanprof's measured time reading resources at enters and exits, seconds.",
            COUNTER,
            total(seconds(o.readings_ns)),
        );
        f.add(
            "overhead_span_cost_seconds",
            "Calibrated cost of one span (open, enter, exit, close) at the basic preset, seconds.",
            GAUGE,
            one(o.span_cost_ns / 1e9),
        );
        f.add(
            "process_cpu_seconds_total",
            "CPU time of the process (every thread) at the snapshot, seconds.",
            COUNTER,
            o.process_cpu_ns
                .map(|ns| sample(COUNTER, Vec::new(), seconds(ns)))
                .into_iter()
                .collect(),
        );
    }
    for figure in OVERHEAD_FIGURES {
        f.figure(spans, totals, figure);
    }
    if snap.backoff.is_empty() {
        return;
    }
    let steps = |on: bool| {
        let n = snap.backoff.iter().filter(|s| s.on == on).count();
        let direction = if on { "on" } else { "off" };
        sample(COUNTER, labels(&[("direction", direction)]), n as f64)
    };
    f.add(
        "backoff_steps_total",
        "Steps of the automatic back-off: per-span readings switched off, or back on; span \
         names sampled more (off), or less (on).",
        COUNTER,
        vec![steps(false), steps(true)],
    );
    // The state of each reading the back-off switched: the last step that named it.
    let mut state: BTreeMap<&str, bool> = BTreeMap::new();
    for step in &snap.backoff {
        for resource in &step.resources {
            state.insert(resource, step.on);
        }
    }
    f.add(
        "backoff_reading_off",
        "1 where the back-off has switched this per-span reading off, 0 where back on.",
        GAUGE,
        state
            .into_iter()
            .map(|(resource, on)| {
                sample(
                    GAUGE,
                    labels(&[("resource", resource)]),
                    f64::from(u8::from(!on)),
                )
            })
            .collect(),
    );
}

/// How a metric's unit (from its name) is written by Prometheus conventions: the base unit's
/// suffix and the factor from the metric's unit to it.
fn prometheus_unit(unit: Option<&str>) -> Option<(&'static str, f64)> {
    Some(match unit? {
        "seconds" => ("seconds", 1.0),
        "milliseconds" => ("seconds", 1e-3),
        "microseconds" => ("seconds", 1e-6),
        "nanoseconds" => ("seconds", 1e-9),
        "bytes" => ("bytes", 1.0),
        "ratio" => ("ratio", 1.0),
        "percent" => ("ratio", 1e-2),
        _ => return None,
    })
}

/// A metric name as a Prometheus name part: snake case (`stepTime` → `step_time`), every
/// character but ASCII letters, digits and `_` replaced by `_`, lower case.
fn sanitize(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut previous_lower = false;
    for c in name.chars() {
        if c.is_ascii_uppercase() && previous_lower {
            out.push('_');
        }
        previous_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        out.push(if c.is_ascii_alphanumeric() {
            c.to_ascii_lowercase()
        } else {
            '_'
        });
    }
    out
}

/// The names a family of `kind` called `name` writes samples under.
fn series_names(name: &str, kind: MetricType) -> Vec<String> {
    let mut names = vec![name.to_string()];
    if kind == MetricType::HISTOGRAM {
        names.extend(["_bucket", "_sum", "_count"].map(|s| format!("{name}{s}")));
    }
    names
}

/// Families of the metrics from events, one per metric name and kind, its samples labelled
/// `span` and `target` (none for events outside every profiled span). See
/// [`Prometheus`]'s documentation for the names.
fn event_metrics(f: &mut Families<'_>, metrics: &[EventMetric]) {
    let mut by_key: BTreeMap<(&str, MetricKind), Vec<&EventMetric>> = BTreeMap::new();
    for m in metrics {
        by_key.entry((&m.name, m.kind)).or_default().push(m);
    }
    let mut taken: HashSet<String> = f
        .written
        .iter()
        .flat_map(|(name, kind)| series_names(name, *kind))
        .collect();
    for ((name, kind), mut metrics) in by_key {
        metrics.sort_by(|a, b| (&a.span, &a.span_target).cmp(&(&b.span, &b.span_target)));
        let unit = prometheus_unit(metrics.iter().find_map(|m| m.unit.as_deref()));
        let (suffix, factor) = unit.map_or(("", 1.0), |(u, factor)| (u, factor));
        let mut base = sanitize(name);
        if let Some(unit) = metrics.iter().find_map(|m| m.unit.as_deref()) {
            if let Some(rest) = base.strip_suffix(unit) {
                base = rest.trim_end_matches('_').to_string();
            }
        }
        while let Some(rest) = base.strip_suffix("_total") {
            base = rest.to_string();
        }
        let unit_part = if suffix.is_empty() {
            String::new()
        } else {
            format!("_{suffix}")
        };
        let field = format!("{}{name}", kind.prefix());
        let unit_help = unit.map_or(String::new(), |(u, _)| format!(", {u}"));
        // One family per (name, kind): the first free of `base`, `base_2`, `base_3`, ...
        // (names sanitized alike never share a family silently: the help names the field).
        let mut n = 1;
        let family = |stem: &str, extra: &str| match kind {
            MetricKind::MonotonicCounter => format!("metric_{stem}{extra}{unit_part}_total"),
            _ => format!("metric_{stem}{extra}{unit_part}"),
        };
        let stem = loop {
            let stem = if n == 1 {
                base.clone()
            } else {
                format!("{base}_{n}")
            };
            let names: Vec<String> = match kind {
                MetricKind::Histogram => series_names(
                    &format!("spanprof_{}", family(&stem, "")),
                    MetricType::HISTOGRAM,
                ),
                MetricKind::Gauge => ["", "_min", "_max"]
                    .map(|e| format!("spanprof_{}", family(&stem, e)))
                    .to_vec(),
                _ => vec![format!("spanprof_{}", family(&stem, ""))],
            };
            if names.iter().all(|n| !taken.contains(n)) {
                taken.extend(names);
                break stem;
            }
            n += 1;
        };
        let labels_of = |m: &EventMetric| match (&m.span, &m.span_target) {
            (Some(span), target) => {
                labels(&[("span", span), ("target", target.as_deref().unwrap_or(""))])
            }
            (None, _) => Vec::new(),
        };
        let values = |read: &dyn Fn(&MetricValue) -> Option<f64>, kind| {
            metrics
                .iter()
                .filter_map(|m| Some(sample(kind, labels_of(m), read(&m.value)? * factor)))
                .collect::<Vec<_>>()
        };
        use MetricType::{COUNTER, GAUGE, HISTOGRAM};
        match kind {
            MetricKind::MonotonicCounter | MetricKind::Counter => {
                let prom_kind = if kind == MetricKind::Counter {
                    GAUGE
                } else {
                    COUNTER
                };
                let what = if kind == MetricKind::Counter {
                    "up-down counter: the sum of its values"
                } else {
                    "counter: the sum of its values"
                };
                f.add(
                    &family(&stem, ""),
                    &format!("Event metric `{field}`, {what}{unit_help}."),
                    prom_kind,
                    values(
                        &|v| match v {
                            MetricValue::Sum(sum) => Some(sum.total()),
                            _ => None,
                        },
                        prom_kind,
                    ),
                );
            }
            MetricKind::Gauge => {
                type Read = fn(&crate::profile::metrics::GaugeValue) -> f64;
                let parts: [(&str, &str, Read); 3] = [
                    ("", "the last value set", |g| g.last),
                    ("_min", "the smallest value set", |g| g.min),
                    ("_max", "the largest value set", |g| g.max),
                ];
                for (extra, what, read) in parts {
                    f.add(
                        &family(&stem, extra),
                        &format!("Event metric `{field}`, gauge: {what}{unit_help}."),
                        GAUGE,
                        values(
                            &|v| match v {
                                MetricValue::Gauge(g) => Some(read(g)),
                                _ => None,
                            },
                            GAUGE,
                        ),
                    );
                }
            }
            MetricKind::Histogram => {
                let series = metrics
                    .iter()
                    .filter_map(|m| match &m.value {
                        MetricValue::Histogram(h) => {
                            let mut metric = Metric::from_label(labels_of(m));
                            metric.set_histogram(value_histogram(h, factor));
                            Some(metric)
                        }
                        _ => None,
                    })
                    .collect();
                f.add(
                    &family(&stem, ""),
                    &format!("Event metric `{field}`, histogram of its values{unit_help}."),
                    HISTOGRAM,
                    series,
                );
            }
        }
    }
}

/// The nominal bounds of a metric's histogram, in its unit: the 1-2.5-5 series from the power
/// of ten at or below its smallest non-zero value to the power of ten above its largest (from
/// 1 for integer values; floats from 10⁻⁹ and to 1000, what their nano-unit scale holds).
fn nominal_bounds(h: &HistogramValue) -> Vec<f64> {
    let mut smallest = f64::INFINITY;
    for (stat, scale) in parts(h) {
        if let Some((v, _)) = stat.histogram.iter().find(|&(v, n)| v > 0 && n > 0) {
            smallest = smallest.min(v as f64 / scale);
        }
    }
    let (_, largest) = h.min_max();
    let floats = h.floats.as_ref().is_some_and(|s| s.count > 0);
    let lowest = if h.integers.as_ref().is_some_and(|s| s.count > 0) && !floats {
        0
    } else {
        -9
    };
    let highest = if floats { 3 } else { 12 };
    let exponent = |v: f64| (v.log10().floor() as i32).clamp(lowest, highest);
    let from = if smallest.is_finite() {
        exponent(smallest)
    } else {
        lowest.max(0)
    };
    let to = if largest > 0.0 {
        exponent(largest)
    } else {
        from
    }
    .max(from);
    let mut bounds: Vec<f64> = (from..=to)
        .flat_map(|e| [1.0, 2.5, 5.0].map(|m| m * 10f64.powi(e)))
        .collect();
    // A bound at or above the largest value, where the scale holds one.
    if to < highest {
        bounds.push(10f64.powi(to + 1));
    }
    bounds
}

/// The parts of a histogram metric with their scale (recorded units per unit of the metric).
fn parts(h: &HistogramValue) -> impl Iterator<Item = (&Stat, f64)> {
    h.integers
        .iter()
        .map(|s| (s, 1.0))
        .chain(h.floats.iter().map(|s| (s, FLOAT_SCALE)))
}

/// The Prometheus histogram of a metric's values, `factor` converting its unit to the base
/// unit: buckets at [`nominal_bounds`], each rounded up to the top of its HDR bucket in the
/// scale of the values (see [`Prometheus`]), `_sum` and `_count` exact.
fn value_histogram(h: &HistogramValue, factor: f64) -> Histogram {
    let mut buckets: Vec<Bucket> = Vec::new();
    for nominal in nominal_bounds(h) {
        let mut le = 0.0f64;
        let mut below = 0u64;
        for (stat, scale) in parts(h) {
            let scaled = (nominal * scale).round().min(HIGHEST_NS as f64) as u64;
            let top = bucket_top(scaled);
            if top >= HIGHEST_NS {
                // The clamped values' bucket: not a bound of the values.
                continue;
            }
            le = le.max(top as f64 / scale);
            below += stat.histogram.count_at_or_below(top);
        }
        let le = le * factor;
        if buckets.last().is_some_and(|b| b.upper_bound() >= le) || le == 0.0 {
            continue;
        }
        let mut bucket = Bucket::default();
        bucket.set_upper_bound(le);
        bucket.set_cumulative_count(below);
        buckets.push(bucket);
    }
    let sum: f64 = parts(h)
        .map(|(stat, scale)| stat.total_ns as f64 / scale)
        .sum();
    let mut histogram = Histogram::default();
    histogram.set_sample_count(h.count());
    histogram.set_sample_sum(sum * factor);
    histogram.set_bucket(buckets);
    histogram
}

/// The latest process-wide readings: resident and heap memory (at the snapshot where the
/// profile has them, else from the last sample), CPU and CPU energy from the last sample.
fn process_gauges(
    f: &mut Families<'_>,
    rss: Option<u64>,
    heap: Option<i64>,
    last: Option<&Sample>,
) {
    use MetricType::{COUNTER, GAUGE};
    let one = |kind, v: Option<f64>| {
        v.filter(|v| v.is_finite())
            .map(|v| sample(kind, Vec::new(), v))
            .into_iter()
            .collect()
    };
    let rss = rss.or(last.and_then(|s| s.rss_bytes));
    f.add(
        "process_resident_memory_bytes",
        "Resident set size of the process, bytes (latest reading).",
        GAUGE,
        one(GAUGE, rss.map(|v| v as f64)),
    );
    let heap = heap.or(last.and_then(|s| s.heap_bytes));
    f.add(
        "process_heap_bytes",
        "Net heap of the process (counting allocator), bytes (latest reading).",
        GAUGE,
        one(GAUGE, heap.map(|v| v as f64)),
    );
    f.add(
        "process_cpu_cores",
        "Process CPU time over the last sample interval, in cores (1 = one core busy).",
        GAUGE,
        one(
            GAUGE,
            last.and_then(|s| s.process_cpu_pct)
                .map(|p| f64::from(p) / 100.0),
        ),
    );
    f.add(
        "process_cpu_energy_joules_total",
        "CPU package energy since the sampler started (RAPL), joules.",
        COUNTER,
        one(
            COUNTER,
            last.and_then(|s| s.cpu_energy_uj).map(|uj| uj as f64 / 1e6),
        ),
    );
}

/// Per GPU device, its latest reading.
fn gpu_gauges(f: &mut Families<'_>, last: &Sample) {
    use MetricType::{COUNTER, GAUGE};
    type Reading = fn(&crate::profile::GpuSample) -> Option<f64>;
    let readings: [(&str, &str, MetricType, Reading); 7] = [
        (
            "gpu_utilization_ratio",
            "Share of the last sample period during which kernels ran (0 to 1).",
            GAUGE,
            |g| g.utilization_pct.map(|p| f64::from(p) / 100.0),
        ),
        (
            "gpu_memory_used_bytes",
            "Device memory in use by all processes, bytes.",
            GAUGE,
            |g| g.memory_used_bytes.map(|v| v as f64),
        ),
        (
            "gpu_process_memory_bytes",
            "Device memory used by this process, bytes.",
            GAUGE,
            |g| g.process_memory_bytes.map(|v| v as f64),
        ),
        (
            "gpu_power_watts",
            "Power draw of the board, watts.",
            GAUGE,
            |g| g.power_mw.map(|v| f64::from(v) / 1e3),
        ),
        (
            "gpu_energy_joules_total",
            "Energy since the sampler started, joules.",
            COUNTER,
            |g| g.energy_mj.map(|v| v as f64 / 1e3),
        ),
        (
            "gpu_temperature_celsius",
            "Core temperature, degrees Celsius.",
            GAUGE,
            |g| g.temperature_c.map(f64::from),
        ),
        (
            "gpu_sm_clock_hertz",
            "Streaming multiprocessor clock, hertz.",
            GAUGE,
            |g| g.sm_clock_mhz.map(|v| f64::from(v) * 1e6),
        ),
    ];
    for (name, help, kind, read) in readings {
        let metrics = last
            .gpus
            .iter()
            .enumerate()
            .filter_map(|(i, g)| Some(sample(kind, labels(&[("gpu", &i.to_string())]), read(g)?)))
            .collect();
        f.add(name, help, kind, metrics);
    }
}

//! `report.csv`: the CSV report, [`Csv`]; `metrics.csv`: the metrics from events, [`CsvMetrics`].

use std::io::{self, Write};

use super::{metrics_in_order, Format};
use crate::profile::figures::{self as fig, Figure};
use crate::profile::metrics::FLOAT_SCALE;
use crate::profile::{GpuUse, Snapshot, SpanResources, SpanStats, Totals};
use crate::profile::{Metric, MetricValue};

/// Name of the CSV report in an output directory.
pub const CSV_FILE: &str = "report.csv";

/// Name of the CSV file of metrics from events in an output directory.
pub const METRICS_CSV_FILE: &str = "metrics.csv";

/// `report.csv`: one row per span name with every figure of the console report, for
/// spreadsheets and data frames. Written with the `csv` crate: names holding commas, quotes or
/// newlines are quoted and read back as they were.
///
/// Rows come in the report's order (self time, highest first). Headers carry the unit
/// (`_ns`, `_bytes`, `_pct`, `_per_s`, `_j`, `_g`); cells hold plain numbers (integers for
/// counts, nanoseconds and bytes, shortest round-trip decimals for the rest) and are empty
/// where the profile has no such figure. Each column but the names and the GPU devices' is a
/// figure of the catalogue ([`crate::profile::figures`]), headed by its key. The columns:
///
/// - `name`, `target`, `calls`, `instances`, `open`, `calls_per_instance`, `errors`,
///   `errored_instances`;
/// - per entry (enter→exit): `total_ns` (busy), `self_ns`, `self_pct` (share of all self time),
///   `mean_ns`, `min_ns`, `p50_ns`, `p90_ns`, `p99_ns`, `p999_ns`, `max_ns`, `stddev_ns`,
///   `self_mean_ns`, `self_p50_ns`, `self_p99_ns`, `self_max_ns`;
/// - per closed instance (creation→close): `wall_total_ns`, `wall_p50_ns`, `wall_p90_ns`,
///   `wall_p99_ns`, `wall_max_ns`, `instance_busy_p50_ns`, `instance_busy_p90_ns`,
///   `instance_busy_p99_ns`, `instance_busy_max_ns`, `busy_wall_pct`, and `in_progress_ns`
///   (time inside entries still running);
/// - throughput: `items`, `items_per_s`, `bytes`, `bytes_per_s`, `flops`, `flops_per_s`;
/// - resources: `cpu_ns`, `cpu_pct`, `rss_delta_per_instance_bytes`, `peak_rss_bytes`,
///   `peak_heap_bytes`, `alloc_per_entry_bytes`, `allocs_per_entry`, `kept_per_entry_bytes`,
///   `self_kept_per_entry_bytes`, then per GPU device `i` of the profile `gpu<i>_util_pct`,
///   `gpu<i>_mem_delta_per_instance_bytes`, `gpu<i>_peak_mem_bytes`, `gpu<i>_energy_j`, then
///   where some span name was timed on the GPU with CUDA events (feature `cuda`)
///   `gpu_calls`, `gpu_total_ns`, `gpu_mean_ns`, `gpu_p50_ns`, `gpu_p90_ns`, `gpu_p99_ns`,
///   `gpu_max_ns`, `gpu_busy_pct`, `gpu_untimed`, `gpu_abandoned`, then `energy_j`, `co2e_g`;
/// - `cpu_skipped_entries` (after `cpu_pct`): entries whose CPU time was not read; above 0,
///   `cpu_ns` and `cpu_pct` are estimates from the entries read (short spans are sampled);
/// - spanprof's own cost: `overhead_ns` (its estimated cost in spans of this name) and
///   `overhead_pct` (that cost as a share of their busy time, `total_ns`), empty where the
///   profile has no estimate;
/// - `sample_every` and `sampled_out`: set where the automatic back-off sampled the name (1
///   span in `sample_every` recorded at most, `sampled_out` spans left out): `calls` is exact,
///   the per-call figures come from the spans recorded, and `total_ns`, `self_ns`,
///   `self_pct`, `wall_total_ns` and `overhead_pct` are computed from totals scaled to every
///   call ([`SpanStats::scaled_total_ns`], as in every other output);
/// - `clamped`: spans with a time over the histograms' highest value (the report's note).
///
/// The metrics from events are in a file of their own, [`CsvMetrics`] (`metrics.csv`): one
/// row per metric and span name, which columns of this one-row-per-span-name table cannot
/// hold (a metric may be recorded outside every span, and each has its own figures).
///
/// ```
/// use spanprof::output::Csv;
/// # let snapshot = spanprof::profile::Snapshot::from_json(
/// #     include_str!("../../tests/data/profile-v1-basic.json"), "doc")?;
/// let text = Csv::new().to_string(&snapshot)?;
/// assert!(text.starts_with("name,target,calls,"));
/// assert_eq!(text.lines().count(), 1 + snapshot.spans.len());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Csv;

impl Csv {
    /// The CSV report.
    pub fn new() -> Self {
        Self
    }

    /// The report as text.
    ///
    /// # Errors
    /// None in practice (it writes to memory); the CSV writer's errors otherwise.
    pub fn to_string(&self, snapshot: &Snapshot) -> io::Result<String> {
        render_to_string(self, snapshot)
    }
}

impl Format for Csv {
    fn name(&self) -> &'static str {
        "csv"
    }

    fn file_name(&self) -> &'static str {
        CSV_FILE
    }

    fn action(&self) -> &'static str {
        "writing CSV report"
    }

    fn render(&self, snapshot: &Snapshot, out: &mut dyn Write) -> io::Result<()> {
        let columns = columns(snapshot);
        let totals = snapshot.totals();
        let mut writer = ::csv::Writer::from_writer(out);
        writer.write_record(columns.iter().map(|c| c.header.as_str()))?;
        for s in snapshot.by_self_time() {
            writer.write_record(columns.iter().map(|c| (c.cell)(s, &totals)))?;
        }
        writer.flush()
    }
}

/// What `format` renders of `snapshot`, as text.
fn render_to_string(format: &dyn Format, snapshot: &Snapshot) -> io::Result<String> {
    let mut bytes = Vec::new();
    format.render(snapshot, &mut bytes)?;
    String::from_utf8(bytes).map_err(io::Error::other)
}

/// The figures of `report.csv` before the columns of each GPU device, in order.
const BEFORE_GPUS: &[&Figure] = &[
    &fig::CALLS,
    &fig::INSTANCES,
    &fig::OPEN,
    &fig::CALLS_PER_INSTANCE,
    &fig::ERRORS,
    &fig::ERRORED_INSTANCES,
    &fig::BUSY,
    &fig::SELF,
    &fig::SELF_SHARE,
    &fig::MEAN,
    &fig::MIN,
    &fig::P50,
    &fig::P90,
    &fig::P99,
    &fig::P999,
    &fig::MAX,
    &fig::STDDEV,
    &fig::SELF_MEAN,
    &fig::SELF_P50,
    &fig::SELF_P99,
    &fig::SELF_MAX,
    &fig::WALL_TOTAL,
    &fig::WALL_P50,
    &fig::WALL_P90,
    &fig::WALL_P99,
    &fig::WALL_MAX,
    &fig::INSTANCE_BUSY_P50,
    &fig::INSTANCE_BUSY_P90,
    &fig::INSTANCE_BUSY_P99,
    &fig::INSTANCE_BUSY_MAX,
    &fig::BUSY_WALL,
    &fig::IN_PROGRESS,
    &fig::ITEMS,
    &fig::ITEMS_RATE,
    &fig::BYTES,
    &fig::BYTES_RATE,
    &fig::FLOPS,
    &fig::FLOPS_RATE,
    &fig::CPU,
    &fig::CPU_PCT,
    &fig::CPU_SKIPPED,
    &fig::RSS_DELTA,
    &fig::PEAK_RSS,
    &fig::PEAK_HEAP,
    &fig::ALLOC_PER_ENTRY,
    &fig::ALLOCS_PER_ENTRY,
    &fig::KEPT_PER_ENTRY,
    &fig::SELF_KEPT_PER_ENTRY,
];

/// The GPU time per span's columns, where the profile has GPU time (CUDA events), after the
/// columns of each GPU device.
const GPU_TIME: &[&Figure] = &[
    &fig::GPU_CALLS,
    &fig::GPU_TOTAL,
    &fig::GPU_MEAN,
    &fig::GPU_P50,
    &fig::GPU_P90,
    &fig::GPU_P99,
    &fig::GPU_MAX,
    &fig::GPU_BUSY,
    &fig::GPU_UNTIMED,
    &fig::GPU_ABANDONED,
];

/// The figures of `report.csv` after the columns of the GPU devices and of GPU time, in order.
const AFTER_GPUS: &[&Figure] = &[
    &fig::ENERGY,
    &fig::CO2E,
    &fig::OVERHEAD,
    &fig::OVERHEAD_PCT,
    &fig::SAMPLE_EVERY,
    &fig::SAMPLED_OUT,
    &fig::CLAMPED,
];

/// How a span name's cell of a column is written.
type CellFn<'a> = Box<dyn Fn(&SpanStats, &Totals) -> String + 'a>;

/// One column: its header and how a span name's cell is written.
struct Column<'a> {
    header: String,
    cell: CellFn<'a>,
}

fn column<'a>(
    header: impl Into<String>,
    cell: impl Fn(&SpanStats, &Totals) -> String + 'a,
) -> Column<'a> {
    Column {
        header: header.into(),
        cell: Box::new(cell),
    }
}

/// The column of a figure: its key, its value in plain digits (empty where the name has none).
fn figure(figure: &'static Figure) -> Column<'static> {
    column(figure.key, move |s, totals| {
        figure
            .value(s, totals)
            .map(|v| v.to_string())
            .unwrap_or_default()
    })
}

fn int(v: impl Into<i128>) -> String {
    v.into().to_string()
}

/// A decimal, empty when not finite.
fn real(v: f64) -> String {
    if v.is_finite() {
        v.to_string()
    } else {
        String::new()
    }
}

fn opt<T>(v: Option<T>, f: impl Fn(T) -> String) -> String {
    v.map(f).unwrap_or_default()
}

/// `total / n`, empty when `n` is 0.
fn per(total: f64, n: u64) -> String {
    if n == 0 {
        String::new()
    } else {
        real(total / n as f64)
    }
}

fn resources(s: &SpanStats) -> Option<&SpanResources> {
    s.resources.as_ref()
}

fn columns(snap: &Snapshot) -> Vec<Column<'static>> {
    let mut c = vec![
        column("name", |s, _| s.name.clone()),
        column("target", |s, _| s.target.clone()),
    ];
    c.extend(BEFORE_GPUS.iter().map(|f| figure(f)));
    // One group of columns per GPU device of the profile (or seen in a span).
    let devices = snap
        .spans
        .iter()
        .filter_map(resources)
        .flat_map(|r| r.gpus.iter().map(|g| g.device as usize + 1))
        .chain(snap.resources.as_ref().map(|i| i.gpu_devices.len()))
        .max()
        .unwrap_or(0);
    for i in 0..devices {
        let gpu = move |s: &SpanStats| -> Option<GpuUse> {
            resources(s)?
                .gpus
                .iter()
                .find(|g| g.device as usize == i)
                .cloned()
        };
        c.push(column(format!("gpu{i}_util_pct"), move |s, _| {
            opt(gpu(s).and_then(|g| g.mean_utilization_pct), real)
        }));
        c.push(column(
            format!("gpu{i}_mem_delta_per_instance_bytes"),
            move |s, _| opt(gpu(s), |g| per(g.memory_delta_bytes as f64, g.instances)),
        ));
        c.push(column(format!("gpu{i}_peak_mem_bytes"), move |s, _| {
            opt(gpu(s), |g| int(g.peak_memory_bytes))
        }));
        c.push(column(format!("gpu{i}_energy_j"), move |s, _| {
            opt(gpu(s).and_then(|g| g.energy_j), real)
        }));
    }
    // GPU time per span (CUDA events), where some name was timed.
    if snap.spans.iter().any(|s| s.gpu_time.is_some()) {
        c.extend(GPU_TIME.iter().map(|f| figure(f)));
    }
    c.extend(AFTER_GPUS.iter().map(|f| figure(f)));
    c
}

/// `metrics.csv`: the metrics from events ([`Snapshot::metrics`]), one row per metric and span
/// name, written with the `csv` crate like [`Csv`].
///
/// Rows are sorted by metric name, kind, span name and target (events outside every span
/// first). Figures are in the metric's unit (the `unit` column, from the name's suffix: a
/// `histogram.step_seconds` row is in seconds), shortest round-trip decimals; a cell is empty
/// where the kind has no such figure. The columns:
///
/// - `metric` (the name without its prefix), `kind` (`counter`, `monotonic_counter`,
///   `histogram`, `gauge`), `unit`, `span`, `target` (empty outside every span), `records`
///   (values recorded), `rejected` (values refused: wrong sign, not finite, not a number);
/// - `sum`: a counter's sum, a histogram's exact sum;
/// - `last`: a gauge's last value; `min`, `max`: a gauge's or histogram's extremes (exact);
/// - `count`, `mean`, `p50`, `p90`, `p99`: a histogram's values, mean exact, quantiles to the
///   histograms' precision (2 significant digits).
///
/// ```
/// use spanprof::output::CsvMetrics;
/// # let snapshot = spanprof::profile::Snapshot::from_json(
/// #     include_str!("../../tests/data/profile-v1-basic.json"), "doc")?;
/// let text = CsvMetrics::new().to_string(&snapshot)?;
/// assert!(text.starts_with("metric,kind,unit,span,target,records,rejected,sum,"));
/// assert_eq!(text.lines().count(), 1 + snapshot.metrics.len());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CsvMetrics;

impl CsvMetrics {
    /// The CSV file of metrics.
    pub fn new() -> Self {
        Self
    }

    /// The file as text.
    ///
    /// # Errors
    /// None in practice (it writes to memory); the CSV writer's errors otherwise.
    pub fn to_string(&self, snapshot: &Snapshot) -> io::Result<String> {
        render_to_string(self, snapshot)
    }
}

/// The header of `metrics.csv`.
const METRIC_COLUMNS: [&str; 16] = [
    "metric", "kind", "unit", "span", "target", "records", "rejected", "sum", "last", "min", "max",
    "count", "mean", "p50", "p90", "p99",
];

impl Format for CsvMetrics {
    fn name(&self) -> &'static str {
        "csv-metrics"
    }

    fn file_name(&self) -> &'static str {
        METRICS_CSV_FILE
    }

    fn action(&self) -> &'static str {
        "writing CSV metrics"
    }

    fn render(&self, snapshot: &Snapshot, out: &mut dyn Write) -> io::Result<()> {
        let metrics = metrics_in_order(snapshot);
        let mut writer = ::csv::Writer::from_writer(out);
        writer.write_record(METRIC_COLUMNS)?;
        for m in metrics {
            writer.write_record(metric_row(m))?;
        }
        writer.flush()
    }
}

/// The cells of one metric's row, in the order of [`METRIC_COLUMNS`].
fn metric_row(m: &Metric) -> [String; 16] {
    let text = |v: &Option<String>| v.clone().unwrap_or_default();
    let mut row: [String; 16] = Default::default();
    row[0].clone_from(&m.name);
    row[1] = m.kind.as_str().to_string();
    row[2] = text(&m.unit);
    row[3] = text(&m.span);
    row[4] = text(&m.span_target);
    row[5] = int(m.records);
    row[6] = int(m.rejected);
    match &m.value {
        MetricValue::Sum(sum) => row[7] = real(sum.total()),
        MetricValue::Gauge(g) => {
            row[8] = real(g.last);
            row[9] = real(g.min);
            row[10] = real(g.max);
        }
        MetricValue::Histogram(h) => {
            let count = h.count();
            let (min, max) = h.min_max();
            let sum = h.integers.as_ref().map_or(0.0, |s| s.total_ns as f64)
                + h.floats
                    .as_ref()
                    .map_or(0.0, |s| s.total_ns as f64 / FLOAT_SCALE);
            row[7] = real(sum);
            row[11] = int(count);
            if count > 0 {
                row[9] = real(min);
                row[10] = real(max);
                row[12] = real(h.mean());
                row[13] = real(h.quantile(0.5));
                row[14] = real(h.quantile(0.9));
                row[15] = real(h.quantile(0.99));
            }
        }
    }
    row
}

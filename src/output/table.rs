//! The console report: one row per span name, sorted by self time, like `torch.profiler`'s
//! `key_averages().table()`, then sections for span instances (latency per instance of spans
//! entered more than once), throughput, errors (of every span name), metrics from events,
//! resources and leak suspicions, and notes, then the call tree ([`TreeView`]) when the profile
//! has one. Fits a 100-column terminal; a run without spans says why.

use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::io::{self, Write};
use std::ops::Deref;

use super::units::{escape_controls, format_bytes, format_count, format_duration, format_metric};
use super::{shown, Format, TreeView};
use crate::profile::figures::{self as fig, clamped_spans, Figure};
use crate::profile::leaks::{leaks, Leak, LeakSource};
use crate::profile::{
    BackoffStep, CpuUse, MetricKind, MetricValue, Overhead, ResourceInfo, Snapshot, SpanResources,
    SpanStats, Totals,
};

/// Name of the report file in an output directory.
pub const REPORT_FILE: &str = "report.txt";

const NAME_WIDTH: usize = 22;
/// The name and span columns of the metrics section.
const METRIC_NAME_WIDTH: usize = 20;
const METRIC_SPAN_WIDTH: usize = 12;
/// Columns of the report: every line fits a 100-column terminal.
const REPORT_WIDTH: usize = 100;
/// The figures of the span table, after the name, in the console report and in Markdown.
pub(super) const SPAN_COLUMNS: [&Figure; 9] = [
    &fig::CALLS,
    &fig::BUSY,
    &fig::SELF,
    &fig::SELF_SHARE,
    &fig::MEAN,
    &fig::P50,
    &fig::P90,
    &fig::P99,
    &fig::MAX,
];
/// Span names whose instrumentation (spanprof's estimated cost in them) is more than this share
/// of their own busy time are named in the report, %.
pub(crate) const COSTLY_PCT: f64 = 5.0;
/// The most such names listed.
const COSTLY_SHOWN: usize = 10;

/// The console report of a [`Snapshot`].
///
/// ```
/// # use spanprof::{ProfileLayer, ReportTarget};
/// # use tracing_subscriber::prelude::*;
/// use spanprof::output::Table;
/// let (layer, guard) = ProfileLayer::builder()
///     .with_env(false)
///     .with_report(ReportTarget::Off)
///     .build()?;
/// let subscriber = tracing_subscriber::registry().with(layer);
/// tracing::subscriber::with_default(subscriber, || {
///     tracing::info_span!("work").in_scope(|| std::hint::black_box(1 + 1));
/// });
/// let text = Table::new().with_top(10).to_string(&guard.snapshot());
/// assert!(text.contains("work"));
/// # Ok::<(), spanprof::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Table {
    top: usize,
    tree: Option<TreeView>,
}

impl Default for Table {
    fn default() -> Self {
        Self::new()
    }
}

impl Table {
    /// A report of every span name.
    pub fn new() -> Self {
        Self {
            top: usize::MAX,
            tree: Some(TreeView::new()),
        }
    }

    /// Shows only the `n` span names with the most self time (at least one).
    pub fn with_top(self, n: usize) -> Self {
        Self {
            top: n.max(1),
            ..self
        }
    }

    /// The call tree shown after the table of span names (default: [`TreeView::new`]), or
    /// none. A profile without a tree shows none either way.
    pub fn with_tree(self, tree: Option<TreeView>) -> Self {
        Self { tree, ..self }
    }

    /// The report as text.
    pub fn to_string(&self, snapshot: &Snapshot) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = View::new(snapshot, self.top).write(&mut out);
        if let Some(tree) = &self.tree {
            let text = tree.to_string(snapshot);
            if !text.is_empty() {
                out.push('\n');
                out.push_str(&text);
            }
        }
        out
    }
}

impl Format for Table {
    fn name(&self) -> &'static str {
        "table"
    }

    fn file_name(&self) -> &'static str {
        REPORT_FILE
    }

    fn action(&self) -> &'static str {
        "writing report"
    }

    fn render(&self, snapshot: &Snapshot, out: &mut dyn Write) -> io::Result<()> {
        out.write_all(self.to_string(snapshot).as_bytes())
    }
}

/// The rows of a report: every span name sorted by self time, and the ones shown.
struct View<'a> {
    snap: &'a Snapshot,
    rows: Vec<Row<'a>>,
    top: usize,
    /// The derived values: all self time (what self % is a share of), ...
    totals: Totals,
}

/// One span name and what the report calls it.
struct Row<'a> {
    stats: &'a SpanStats,
    /// For the name column: the name, with the end of its target where another span name is
    /// the same, fitted to [`NAME_WIDTH`].
    label: String,
    /// For prose (errors, leaks): the name, with its whole target where another is the same.
    title: String,
}

impl Deref for Row<'_> {
    type Target = SpanStats;

    fn deref(&self) -> &SpanStats {
        self.stats
    }
}

impl<'a> View<'a> {
    fn new(snap: &'a Snapshot, top: usize) -> Self {
        let stats = snap.by_self_time();
        // The targets of each span name: more than one, and the name is ambiguous alone.
        let mut targets: HashMap<&str, Vec<&str>> = HashMap::new();
        for s in &stats {
            targets.entry(&s.name).or_default().push(&s.target);
        }
        let rows: Vec<Row<'a>> = stats
            .into_iter()
            .map(|s| {
                let twins = &targets[s.name.as_str()];
                // Names (and targets) as the report writes them: control characters escaped.
                let name = escape_controls(&s.name);
                if twins.len() == 1 {
                    Row {
                        stats: s,
                        label: truncate(&name, NAME_WIDTH),
                        title: name.into_owned(),
                    }
                } else {
                    let target = escape_controls(&s.target);
                    let twins: Vec<_> = twins.iter().map(|t| escape_controls(t)).collect();
                    let twins: Vec<&str> = twins.iter().map(|t| t.as_ref()).collect();
                    Row {
                        stats: s,
                        label: twin_label(&name, &target, &twins),
                        title: format!("{name} ({target})"),
                    }
                }
            })
            .collect();
        Self {
            snap,
            rows,
            top,
            totals: snap.totals(),
        }
    }

    fn shown(&self) -> &[Row<'a>] {
        &self.rows[..self.rows.len().min(self.top)]
    }

    /// The rows shown that `keep` selects for a section, and how many rows it would have
    /// selected beyond the top ones.
    fn select(&self, keep: impl Fn(&SpanStats) -> bool) -> (Vec<&Row<'a>>, usize) {
        let shown = self.shown();
        let rows = shown.iter().filter(|s| keep(s)).collect();
        let hidden = self.rows[shown.len()..].iter().filter(|s| keep(s)).count();
        (rows, hidden)
    }

    fn write(&self, f: &mut String) -> fmt::Result {
        if self.rows.is_empty() {
            self.nothing_recorded(f)?;
            // Events outside spans may still have carried metrics.
            self.metrics(f)?;
            return self.notes(f);
        }
        self.spans(f)?;
        self.instances(f)?;
        self.throughput(f)?;
        self.gpu_time(f)?;
        self.errors(f)?;
        self.metrics(f)?;
        if let Some(info) = &self.snap.resources {
            self.resources(f, info)?;
        }
        self.notes(f)
    }

    /// Why a profile without spans may have none: the filters in the way.
    fn nothing_recorded(&self, f: &mut String) -> fmt::Result {
        let run = &self.snap.run;
        // Spans were recorded, and the output filter left none of them.
        if let Some(whole) = self.snap.selection.as_ref().filter(|s| s.span_names > 0) {
            writeln!(
                f,
                "spanprof: no span name shown (run {}, preset {})",
                format_duration(run.duration_ns),
                run.preset
            )?;
            writeln!(
                f,
                "- the output filter {} matches none of the {} span name{} recorded",
                truncate(&format!("{:?}", whole.filter), 44),
                whole.span_names,
                if whole.span_names == 1 { "" } else { "s" },
            )?;
            return writeln!(
                f,
                "  (SPANPROF_OUTPUT_FILTER, Builder::with_output_filter or spanprof report --filter)"
            );
        }
        write!(
            f,
            "spanprof: no span was recorded (run {}, preset {})",
            format_duration(run.duration_ns),
            run.preset
        )?;
        if run.preset == "off" {
            return writeln!(f, ": the preset off (SPANPROF=off) records nothing");
        }
        writeln!(f, "; likely causes:")?;
        let or = if let Some(filter) = &run.filter {
            let quoted = truncate(&format!("{filter:?}"), REPORT_WIDTH - 34);
            writeln!(f, "- SPANPROF_FILTER {quoted} matched no span")?;
            writeln!(
                f,
                "  of those the subscriber enabled (check its directives' targets and levels)"
            )?;
            "or "
        } else {
            ""
        };
        writeln!(
            f,
            "- {or}no span was enabled by the subscriber's filter: EnvFilter::from_default_env() \
             with"
        )?;
        writeln!(
            f,
            "  RUST_LOG unset passes only ERROR, and #[instrument] spans are INFO: set RUST_LOG, \
             or fall"
        )?;
        writeln!(
            f,
            "  back to EnvFilter::new(\"info\") when it is unset (as spanprof's quick start does)"
        )
    }

    /// The header and one row per span name shown.
    fn spans(&self, f: &mut String) -> fmt::Result {
        // A selection of span names: the header counts the whole profile's, then says which.
        let t = &self.totals;
        writeln!(
            f,
            "spanprof: {} span name{}, {} inside spans, run {} (preset {})",
            t.span_names,
            if t.span_names == 1 { "" } else { "s" },
            format_duration(t.self_ns),
            format_duration(self.snap.run.duration_ns),
            self.snap.run.preset
        )?;
        if let Some(whole) = &self.snap.selection {
            writeln!(
                f,
                "output filter {}: {} of them, {:.1}% of the time inside spans",
                truncate(&format!("{:?}", whole.filter), 50),
                self.rows.len(),
                t.self_share_pct(t.shown_self_ns)
            )?;
        }
        if let Some(o) = &self.snap.overhead {
            own_cost(f, o)?;
        }
        writeln!(
            f,
            "calls = completed entries (enter→exit); per-call times; self % = share of time in spans"
        )?;
        writeln!(
            f,
            "{:<nw$} {:>7} {:>8} {:>8} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8}",
            "name",
            "calls",
            "total",
            "self",
            "self%",
            "mean",
            "p50",
            "p90",
            "p99",
            "max",
            nw = NAME_WIDTH
        )?;
        for s in self.shown() {
            let [calls, total, self_, pct, mean, p50, p90, p99, max] =
                SPAN_COLUMNS.map(|figure| self.cell(figure, s));
            writeln!(
                f,
                "{:<nw$} {calls:>7} {total:>8} {self_:>8} {pct:>6} {mean:>8} {p50:>8} {p90:>8} \
                 {p99:>8} {max:>8}",
                s.label,
                nw = NAME_WIDTH
            )?;
        }
        hidden_rows(f, self.rows.len() - self.shown().len(), "")
    }

    /// Figure `figure` of span name `s` as the report prints it ([`shown`]).
    fn cell(&self, figure: &Figure, s: &SpanStats) -> String {
        shown(figure, s, &self.totals)
    }

    /// Sums of the `items`, `bytes` and `flops` fields, and their rates over busy time.
    fn throughput(&self, f: &mut String) -> fmt::Result {
        let (rows, hidden) =
            self.select(|s| s.items.is_some() || s.bytes.is_some() || s.flops.is_some());
        if rows.is_empty() && hidden == 0 {
            return Ok(());
        }
        writeln!(f)?;
        writeln!(f, "throughput (field sum ÷ busy time)")?;
        if !rows.is_empty() {
            writeln!(
                f,
                "{:<nw$} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
                "name",
                "items",
                "items/s",
                "bytes",
                "bytes/s",
                "FLOP",
                "FLOP/s",
                nw = NAME_WIDTH
            )?;
        }
        for s in rows {
            let [items, items_s, bytes, bytes_s, flops, flops_s] = [
                &fig::ITEMS,
                &fig::ITEMS_RATE,
                &fig::BYTES,
                &fig::BYTES_RATE,
                &fig::FLOPS,
                &fig::FLOPS_RATE,
            ]
            .map(|figure| self.cell(figure, s));
            writeln!(
                f,
                "{:<nw$} {items:>10} {items_s:>10} {bytes:>10} {bytes_s:>10} {flops:>10} \
                 {flops_s:>10}",
                s.label,
                nw = NAME_WIDTH
            )?;
        }
        hidden_rows(f, hidden, "with throughput")
    }

    /// GPU time per span from CUDA events (only where some name was timed): per name, then the
    /// streams' totals.
    fn gpu_time(&self, f: &mut String) -> fmt::Result {
        let (rows, hidden) = self.select(|s| s.gpu_time.is_some());
        if rows.is_empty() && hidden == 0 {
            return Ok(());
        }
        writeln!(f)?;
        writeln!(
            f,
            "GPU time (CUDA events on the span's stream, enter to exit)"
        )?;
        let columns = [
            &fig::GPU_CALLS,
            &fig::GPU_TOTAL,
            &fig::GPU_MEAN,
            &fig::GPU_P50,
            &fig::GPU_P99,
            &fig::GPU_MAX,
            &fig::GPU_BUSY,
            &fig::GPU_UNTIMED,
        ];
        if !rows.is_empty() {
            write!(f, "{:<nw$}", "name", nw = NAME_WIDTH)?;
            for c in columns {
                write!(f, " {:>8}", c.label.trim_start_matches("gpu "))?;
            }
            writeln!(f)?;
        }
        for s in rows {
            write!(f, "{:<nw$}", s.label, nw = NAME_WIDTH)?;
            for c in columns {
                write!(f, " {:>8}", self.cell(c, s))?;
            }
            writeln!(f)?;
        }
        hidden_rows(f, hidden, "with GPU time")?;
        let abandoned: u64 = self
            .rows
            .iter()
            .filter_map(|s| s.gpu_time.as_ref())
            .map(|g| g.abandoned)
            .sum();
        if abandoned > 0 {
            writeln!(
                f,
                "{abandoned} timed entries abandoned (still queued on the GPU at the end, or \
                 unreadable)"
            )?;
        }
        let streams: Vec<String> = self
            .snap
            .gpu_streams
            .iter()
            .map(|s| {
                format!(
                    "{} {} ({} calls)",
                    s.stream,
                    crate::output::format_duration(s.total_ns),
                    s.calls
                )
            })
            .collect();
        if !streams.is_empty() {
            wrap(f, "streams: ", &streams)?;
        }
        Ok(())
    }

    /// Error-level events of every span name (not only the rows shown), wrapped to the
    /// report's width.
    fn errors(&self, f: &mut String) -> fmt::Result {
        let items: Vec<String> = self
            .rows
            .iter()
            .filter(|s| s.errors > 0)
            .map(|s| error_count(s))
            .collect();
        if items.is_empty() {
            return Ok(());
        }
        writeln!(f)?;
        wrap(f, "errors: ", &items)
    }

    /// Metrics from events (only when there are some), by name, then span name: counters'
    /// sums, histograms' mean, median, 99th percentile and extremes, gauges' last value and
    /// extremes, each in the metric's unit; then the values refused, per metric.
    fn metrics(&self, f: &mut String) -> fmt::Result {
        if self.snap.metrics.is_empty() {
            return Ok(());
        }
        let metrics = super::metrics_in_order(self.snap);
        let shown = metrics.len().min(self.top);
        writeln!(f)?;
        writeln!(f, "metrics (from events)")?;
        writeln!(
            f,
            "value = sum of a counter, mean of a histogram, last of a gauge; span - = outside spans"
        )?;
        let row = |f: &mut String, cells: [&str; 9]| {
            writeln!(
                f,
                "{:<nw$} {:<9} {:<sw$} {:>7} {:>8} {:>8} {:>8} {:>8} {:>8}",
                cells[0],
                cells[1],
                cells[2],
                cells[3],
                cells[4],
                cells[5],
                cells[6],
                cells[7],
                cells[8],
                nw = METRIC_NAME_WIDTH,
                sw = METRIC_SPAN_WIDTH
            )
        };
        row(
            f,
            [
                "name", "kind", "span", "records", "value", "p50", "p99", "min", "max",
            ],
        )?;
        for m in &metrics[..shown] {
            let unit = m.unit.as_deref();
            let v = |x: f64| format_metric(x, unit);
            let [value, p50, p99, min, max] = match &m.value {
                MetricValue::Sum(s) => [v(s.total()), dash(), dash(), dash(), dash()],
                MetricValue::Histogram(h) if h.count() > 0 => {
                    let (min, max) = h.min_max();
                    [
                        v(h.mean()),
                        v(h.quantile(0.5)),
                        v(h.quantile(0.99)),
                        v(min),
                        v(max),
                    ]
                }
                MetricValue::Gauge(g) if m.records > 0 => {
                    [v(g.last), dash(), dash(), v(g.min), v(g.max)]
                }
                _ => std::array::from_fn(|_| dash()),
            };
            let kind = match m.kind {
                MetricKind::Counter => "counter",
                MetricKind::MonotonicCounter => "monotonic",
                MetricKind::Histogram => "histogram",
                _ => "gauge",
            };
            row(
                f,
                [
                    &truncate(&m.name, METRIC_NAME_WIDTH),
                    kind,
                    &truncate(m.span.as_deref().unwrap_or("-"), METRIC_SPAN_WIDTH),
                    &format_count(m.records),
                    &value,
                    &p50,
                    &p99,
                    &min,
                    &max,
                ],
            )?;
        }
        let hidden = metrics.len() - shown;
        if hidden > 0 {
            writeln!(
                f,
                "… {hidden} more metrics (raise SPANPROF_TOP to show them)"
            )?;
        }
        let rejected: Vec<String> = metrics
            .iter()
            .filter(|m| m.rejected > 0)
            .map(|m| match &m.span {
                Some(span) => format!("{} in {span} {}", m.name, format_count(m.rejected)),
                None => format!("{} {}", m.name, format_count(m.rejected)),
            })
            .collect();
        if rejected.is_empty() {
            return Ok(());
        }
        wrap(
            f,
            "values rejected (wrong sign, not finite, not a number): ",
            &rejected,
        )
    }

    /// Spans whose instances are not one entry each (async tasks entered at every poll,
    /// long-lived spans, spans still open): their latency per instance first, as percentiles
    /// of wall and busy time, then their instance counts.
    fn instances(&self, f: &mut String) -> fmt::Result {
        let (rows, hidden) = self.select(|s| s.open > 0 || multi_entry(s));
        if rows.is_empty() && hidden == 0 {
            return Ok(());
        }
        writeln!(f)?;
        writeln!(
            f,
            "span instances (entered more than once: async tasks at every poll, long-lived spans)"
        )?;
        let closed: Vec<_> = rows.iter().filter(|s| s.instances > 0).collect();
        if !closed.is_empty() {
            writeln!(
                f,
                "latency per instance: wall = creation to close, busy = sum of its entries"
            )?;
            writeln!(
                f,
                "{:<nw$} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
                "name",
                "wall p50",
                "wall p90",
                "wall p99",
                "wall max",
                "busy p50",
                "busy p90",
                "busy p99",
                "busy max",
                nw = NAME_WIDTH
            )?;
            for s in closed {
                let cells = [
                    &fig::WALL_P50,
                    &fig::WALL_P90,
                    &fig::WALL_P99,
                    &fig::WALL_MAX,
                    &fig::INSTANCE_BUSY_P50,
                    &fig::INSTANCE_BUSY_P90,
                    &fig::INSTANCE_BUSY_P99,
                    &fig::INSTANCE_BUSY_MAX,
                ]
                .map(|figure| format!(" {:>8}", self.cell(figure, s)));
                writeln!(f, "{:<nw$}{}", s.label, cells.concat(), nw = NAME_WIDTH)?;
            }
        }
        if !rows.is_empty() {
            writeln!(
                f,
                "instances = closed, open = still open, calls/ins = entries per instance,"
            )?;
            writeln!(
                f,
                "busy/wall = share of its life an instance ran, running = time in entries in \
                 progress"
            )?;
            writeln!(
                f,
                "{:<nw$} {:>9} {:>6} {:>9} {:>9} {:>9}",
                "name",
                "instances",
                "open",
                "calls/ins",
                "busy/wall",
                "running",
                nw = NAME_WIDTH
            )?;
        }
        for s in rows {
            let [instances, open, per, busy_share, running] = [
                &fig::INSTANCES,
                &fig::OPEN,
                &fig::CALLS_PER_INSTANCE,
                &fig::BUSY_WALL,
                &fig::IN_PROGRESS,
            ]
            .map(|figure| self.cell(figure, s));
            writeln!(
                f,
                "{:<nw$} {instances:>9} {open:>6} {per:>9} {busy_share:>9} {running:>9}",
                s.label,
                nw = NAME_WIDTH
            )?;
        }
        hidden_rows(f, hidden, "with instances")
    }

    /// The resource sections (presets `detailed` and `full`).
    fn resources(&self, f: &mut String, info: &ResourceInfo) -> fmt::Result {
        writeln!(f)?;
        sampler_status(f, info)?;
        let with = |keep: fn(&SpanResources) -> bool| {
            let (rows, hidden) = self.select(|s| s.resources.as_ref().is_some_and(keep));
            let rows: Vec<_> = rows
                .into_iter()
                .filter_map(|s| Some((s, s.resources.as_ref()?)))
                .collect();
            (rows, hidden)
        };
        let (rows, hidden) = with(|r| r.cpu.is_some() || r.heap.is_some() || r.memory.is_some());
        memory_and_cpu(f, &rows, hidden, self.snap.overhead.as_ref(), &self.totals)?;
        let (rows, hidden) = with(|r| !r.gpus.is_empty() || r.energy_j.is_some());
        gpu_and_energy(f, &rows, hidden, info.grid_g_per_kwh.is_some())?;
        // Suspicions of every span name, shown or not.
        let found = leaks(self.snap);
        for s in &self.rows {
            if let Some(leak) = found
                .iter()
                .find(|l| l.name == s.name && l.target == s.target)
            {
                let line = format!("possible leak: {} {}", s.title, leak_evidence(leak));
                if line.chars().count() <= REPORT_WIDTH {
                    writeln!(f, "{line}")?;
                } else {
                    writeln!(
                        f,
                        "possible leak: {}",
                        truncate(&s.title, REPORT_WIDTH - 15)
                    )?;
                    writeln!(f, "  {}", leak_evidence(leak))?;
                }
            }
        }
        Ok(())
    }

    /// Span names whose instrumentation costs more than [`COSTLY_PCT`] of their own duration.
    fn costly(&self, f: &mut String) -> fmt::Result {
        let Some(o) = &self.snap.overhead else {
            return Ok(());
        };
        let mut costly: Vec<(f64, &Row<'a>)> = self
            .rows
            .iter()
            .filter_map(|r| Some((costly_share(r, o)?, r)))
            .collect();
        if costly.is_empty() {
            return Ok(());
        }
        costly.sort_by(|a, b| b.0.total_cmp(&a.0));
        let more = costly.len().saturating_sub(COSTLY_SHOWN);
        let mut items: Vec<String> = costly
            .iter()
            .take(COSTLY_SHOWN)
            .map(|(pct, r)| {
                format!(
                    "{} {:.0}% (mean {})",
                    r.label,
                    pct,
                    format_duration(r.entry_busy.mean_ns.round() as u64)
                )
            })
            .collect();
        if more > 0 {
            items.push(format!("… {more} more"));
        }
        wrap(
            f,
            &format!("note: spanprof costs over {COSTLY_PCT:.0}% of these spans' own time: "),
            &items,
        )
    }

    /// Clamped samples and spans not profiled.
    fn notes(&self, f: &mut String) -> fmt::Result {
        let clamped = self
            .snap
            .spans
            .iter()
            .map(clamped_spans)
            .fold(0u64, u64::saturating_add);
        if clamped > 0 {
            let highest = format_duration(self.snap.histograms.highest);
            writeln!(
                f,
                "note: {clamped} spans over {highest}: percentiles count them as {highest} \
                 (totals, max exact)",
            )?;
        }
        self.costly(f)?;
        let steps: Vec<String> = self
            .snap
            .backoff
            .iter()
            .filter(|s| s.sampled.is_empty())
            .map(|s| {
                format!(
                    "at {} {} {} ({})",
                    format_duration(s.at_ns),
                    s.resources.join(", "),
                    if s.on { "back on" } else { "off" },
                    backoff_cost(s)
                )
            })
            .collect();
        if !steps.is_empty() {
            wrap(
                f,
                "note: spanprof backed off (per-span readings, every span name): ",
                &steps,
            )?;
        }
        let sampling: Vec<String> = self
            .snap
            .backoff
            .iter()
            .filter(|s| !s.sampled.is_empty())
            .map(sampling_step)
            .collect();
        if !sampling.is_empty() {
            wrap(f, "note: back-off sampling: ", &sampling)?;
        }
        let sampled = sampled_names(&self.snap.spans);
        if !sampled.is_empty() {
            writeln!(f, "{SAMPLED_NOTE}:")?;
            wrap(f, "  ", &sampled)?;
        }
        let d = &self.snap.dropped;
        if d.backoff_steps > 0 {
            writeln!(
                f,
                "note: {} more back-off steps taken, not kept (64 kept)",
                d.backoff_steps
            )?;
        }
        if d.spans_table_full > 0 || d.spans_too_many_names > 0 {
            writeln!(
                f,
                "note: not profiled: {} spans (open-span table full), {} spans (too many names)",
                d.spans_table_full, d.spans_too_many_names
            )?;
        }
        if d.trace_windows_skipped > 0 {
            writeln!(
                f,
                "note: {} Chrome trace windows skipped: earlier windows were still being written",
                d.trace_windows_skipped
            )?;
        }
        if d.metric_values > 0 {
            writeln!(
                f,
                "note: {} metric values not recorded: too many metrics or event callsites with \
                 metric fields",
                d.metric_values
            )?;
        }
        Ok(())
    }
}

/// Which samplers ran, the peaks, and what was not available.
fn sampler_status(f: &mut String, info: &ResourceInfo) -> fmt::Result {
    write!(
        f,
        "resources: sampled every {} ms ({})",
        info.interval_ms,
        info.samplers.join(", ")
    )?;
    if let Some(peak) = info.peak_rss_bytes {
        write!(f, "; peak RSS {}", format_bytes(peak as f64))?;
    }
    if let Some(peak) = info.peak_heap_bytes {
        write!(f, "; peak heap {}", format_bytes(peak as f64))?;
    }
    writeln!(f)?;
    let wants = |s: &str| info.samplers.iter().any(|x| x == s);
    if wants("heap") && !info.heap_allocator {
        writeln!(
            f,
            "heap: not measured (install spanprof::CountingAlloc as #[global_allocator])"
        )?;
    }
    if wants("gpu") {
        match &info.gpu_unavailable {
            Some(reason) => writeln!(f, "GPU: not available ({reason})")?,
            None => {
                for (i, d) in info.gpu_devices.iter().enumerate() {
                    writeln!(f, "GPU {i}: {}", d.name)?;
                }
            }
        }
    }
    if wants("energy") {
        if let Some(reason) = &info.cpu_energy_unavailable {
            writeln!(f, "CPU energy: not available ({reason})")?;
        }
    }
    Ok(())
}

/// Memory and CPU: RSS growth (mean) and peaks per instance, heap and CPU per entry.
fn memory_and_cpu(
    f: &mut String,
    rows: &[(&Row<'_>, &SpanResources)],
    hidden: usize,
    overhead: Option<&Overhead>,
    totals: &Totals,
) -> fmt::Result {
    if rows.is_empty() {
        return hidden_rows(f, hidden, "with memory and CPU figures");
    }
    writeln!(
        f,
        "memory and CPU (rss Δ/ins and peaks per instance; cpu%, heap columns per entry)"
    )?;
    writeln!(
        f,
        "rss Δ/ins = RSS at close − RSS at creation, mean per instance: a long-lived span shows"
    )?;
    writeln!(
        f,
        "the process's growth over its life, not what one call used"
    )?;
    writeln!(
        f,
        "{:<nw$} {:>5} {:>9} {:>9} {:>9} {:>9} {:>7} {:>9} {:>9}",
        "name",
        "cpu%",
        "rss Δ/ins",
        "peak rss",
        "peak heap",
        "alloc",
        "allocs",
        "kept",
        "self kept",
        nw = NAME_WIDTH
    )?;
    for (s, r) in rows {
        // CPU with its own mark: `~` where its entries were sampled.
        let cpu = r.cpu.as_ref().map_or_else(dash, cpu_pct);
        let [rss, peak_rss, peak_heap, alloc, allocs, kept, self_kept] = [
            &fig::RSS_DELTA,
            &fig::PEAK_RSS,
            &fig::PEAK_HEAP,
            &fig::ALLOC_PER_ENTRY,
            &fig::ALLOCS_PER_ENTRY,
            &fig::KEPT_PER_ENTRY,
            &fig::SELF_KEPT_PER_ENTRY,
        ]
        .map(|figure| shown(figure, s, totals));
        writeln!(
            f,
            "{:<nw$} {cpu:>5} {rss:>9} {peak_rss:>9} {peak_heap:>9} {alloc:>9} {allocs:>7} \
             {kept:>9} {self_kept:>9}",
            s.label,
            nw = NAME_WIDTH
        )?;
    }
    if rows
        .iter()
        .any(|(_, r)| r.cpu.as_ref().is_some_and(|c| c.sampled()))
    {
        writeln!(f, "{}", sampled_note(overhead))?;
    }
    hidden_rows(f, hidden, "with memory and CPU figures")
}

/// The report header's line on spanprof's own cost.
fn own_cost(f: &mut String, o: &Overhead) -> fmt::Result {
    let line = format!("spanprof's own cost: {}", own_cost_text(o));
    match line.split_once(" (est. ") {
        // Under 100 characters a line: the parts on a line of their own where it is longer.
        Some((share, parts)) if line.chars().count() > 100 => {
            writeln!(f, "{share}\n  (est. {parts}")?;
        }
        _ => writeln!(f, "{line}")?,
    }
    if let Some(note) = unsure_note(o) {
        writeln!(f, "{note}")?;
    }
    if let Some(note) = cpu_clock_note(o) {
        writeln!(f, "{note}")?;
    }
    Ok(())
}

/// A note when the thread CPU clock was `CLOCK_THREAD_CPUTIME_ID` (no perf events): its reads
/// draw the scheduler's switches on a shared CPU, so short names' entries are read a gap apart.
pub(crate) fn cpu_clock_note(o: &Overhead) -> Option<String> {
    (o.cpu_clock.as_deref() == Some("CLOCK_THREAD_CPUTIME_ID")).then(|| {
        let gap = match o.cpu_sample_gap_ns {
            0 => String::new(),
            gap => format!(", read {} of a thread's time apart", format_duration(gap)),
        };
        format!(
            "note: CPU clock CLOCK_THREAD_CPUTIME_ID (no perf events): its reads can switch a \
             thread\n  out on a shared CPU: short names' CPU time is sampled{gap}"
        )
    })
}

/// spanprof's own cost in words: its share of the process's CPU time (of the run where that is
/// not readable) and what it is made of.
/// Where the cost per span is unsure ([`Overhead::span_ns_sure`]) it says so (the figure is
/// then the calibrated one: [`unsure_note`]).
pub(crate) fn own_cost_text(o: &Overhead) -> String {
    let of = if o.process_cpu_ns.is_some() {
        "process CPU time"
    } else {
        "the run"
    };
    let unsure = if o.span_ns_sure().is_some() {
        ""
    } else {
        ", unsure"
    };
    format!(
        "~{:.2}% of {of}{unsure} (est. {}: {:.0} ns/span + {} readings)",
        o.percent,
        format_duration(o.estimated_ns),
        o.span_ns(),
        format_duration(o.readings_ns),
    )
}

/// Why the cost per span is unsure, where it is: the callbacks timed against those needed.
pub(crate) fn unsure_note(o: &Overhead) -> Option<String> {
    if o.span_ns_sure().is_some() {
        return None;
    }
    let timed = if o.measured_samples == 0 && o.measured_span_ns.is_some() {
        "callbacks timed not counted (an older profile)".to_string()
    } else {
        format!(
            "{} of {} callbacks timed",
            format_count(o.measured_samples),
            Overhead::SURE_SAMPLES
        )
    };
    Some(format!(
        "note: spanprof's cost per span is unsure ({timed}): the figure calibrated at\n  \
         start-up, and no note on the span names it costs most"
    ))
}

/// spanprof's estimated cost in a span name, as a share of the name's busy time (%), where it
/// is over [`COSTLY_PCT`]: the names the report says spanprof distorts.
///
/// Only from a sure estimate ([`Overhead::span_ns_sure`]), and only for names entered, whose
/// mean entry lasts [`COSTLY_MIN_MEAN_NS`] or more: a share of nothing (a span never entered)
/// or of a few clock ticks says nothing.
pub(crate) fn costly_share(s: &SpanStats, o: &Overhead) -> Option<f64> {
    o.span_ns_sure()?;
    if s.calls == 0 || s.entry_busy.count == 0 || s.entry_busy.mean_ns < COSTLY_MIN_MEAN_NS {
        return None;
    }
    let busy = s.scaled_total_ns(&s.entry_busy);
    if busy == 0 {
        return None;
    }
    let pct = 100.0 * s.overhead_ns? as f64 / busy as f64;
    (pct > COSTLY_PCT).then_some(pct)
}

/// The shortest mean entry whose share spanprof's cost is told of, ns: about a read of the
/// cheap clock; a busy time shorter than that is mostly the clock's own.
pub(crate) const COSTLY_MIN_MEAN_NS: f64 = 10.0;

/// A span name's CPU utilisation, `~` before it where the figure is a sample of its entries;
/// "not read (N entries sampled out)" where no entry got a CPU read.
pub(crate) fn cpu_pct(c: &CpuUse) -> String {
    if !c.any_read() {
        return format!("not read ({} entries sampled out)", c.skipped_entries);
    }
    format!(
        "{}{:.0}%",
        if c.sampled() { "~" } else { "" },
        c.utilization_pct
    )
}

/// Which entries of a short span name get their CPU time read: "1 entry in 32", and where reads
/// keep a gap, "at most, 128 ms apart on a thread".
pub(crate) fn sample_rule(o: &Overhead) -> String {
    match o.cpu_sample_gap_ns {
        0 => format!("1 entry in {}", o.cpu_sample_every),
        gap => format!(
            "1 entry in {} at most, {} apart on a thread",
            o.cpu_sample_every,
            format_duration(gap)
        ),
    }
}

/// What the `~` of sampled CPU figures means (from the profile's [`Overhead::cpu_sample_every`]
/// and [`Overhead::cpu_sample_gap_ns`], where known).
pub(crate) fn sampled_note(overhead: Option<&Overhead>) -> String {
    let which = overhead.map_or_else(|| "some entries".to_string(), sample_rule);
    format!(
        "~ sampled: short names' CPU time read for {which}\n  (cpu%: CPU time per entry read, over \
         the busy time of the mean entry)"
    )
}

/// What `≈` means in every report.
pub(crate) const SAMPLED_NOTE: &str = "≈ sampled by the back-off: calls exact, per-call times \
     from the spans recorded, totals with the running mean of each span left out";

/// The names the back-off sampled: each with its largest N, from when, and how many spans
/// were left out.
pub(crate) fn sampled_names<'a>(spans: impl IntoIterator<Item = &'a SpanStats>) -> Vec<String> {
    spans
        .into_iter()
        .filter_map(|s| {
            let x = s.sampled.as_ref()?;
            Some(format!(
                "{} 1/{} from {} ({} left out)",
                s.name,
                x.every,
                format_duration(x.since_ns),
                format_count(x.skipped)
            ))
        })
        .collect()
}

/// [`SAMPLED_NOTE`] and the names sampled, in one line; `None` when no name was.
pub(crate) fn sampled_names_note<'a>(
    spans: impl IntoIterator<Item = &'a SpanStats>,
) -> Option<String> {
    let names = sampled_names(spans);
    (!names.is_empty()).then(|| format!("{SAMPLED_NOTE}: {}", names.join(", ")))
}

/// A second-stage back-off step in words: which names, at which N, and the cost.
pub(crate) fn sampling_step(s: &BackoffStep) -> String {
    let names: Vec<String> = s
        .sampled
        .iter()
        .map(|n| {
            if n.every > 1 {
                format!("{} 1/{}", n.name, n.every)
            } else {
                format!("{} whole", n.name)
            }
        })
        .collect();
    format!(
        "at {} {} ({})",
        format_duration(s.at_ns),
        names.join(", "),
        backoff_cost(s)
    )
}

/// The cost a back-off step acted on: measured for a step down, predicted for a step back on.
pub(crate) fn backoff_cost(s: &BackoffStep) -> String {
    let what = if s.on { "predicted " } else { "cost " };
    // Two decimals under 1% (a limit set that low is met by small costs).
    if s.overhead_pct < 1.0 {
        format!("{what}{:.2}%", s.overhead_pct)
    } else {
        format!("{what}{:.1}%", s.overhead_pct)
    }
}

/// GPU per device and energy per span name, over instances.
fn gpu_and_energy(
    f: &mut String,
    rows: &[(&Row<'_>, &SpanResources)],
    hidden: usize,
    co2: bool,
) -> fmt::Result {
    if rows.is_empty() {
        return hidden_rows(f, hidden, "with GPU and energy figures");
    }
    writeln!(
        f,
        "GPU and energy (mem Δ/ins and peak per instance, like rss Δ/ins; energy in total)"
    )?;
    let row = |cells: [&str; 8]| {
        let line = format!(
            "{:<nw$} {:>4} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10}",
            cells[0],
            cells[1],
            cells[2],
            cells[3],
            cells[4],
            cells[5],
            cells[6],
            cells[7],
            nw = NAME_WIDTH
        );
        line.trim_end().to_string()
    };
    let co2_head = if co2 { "CO2e" } else { "" };
    writeln!(
        f,
        "{}",
        row([
            "name",
            "gpu",
            "util%",
            "mem Δ/ins",
            "peak mem",
            "gpu J",
            "total J",
            co2_head
        ])
    )?;
    let joules = |j: Option<f64>| j.map_or_else(dash, |j| format!("{j:.3}"));
    for (s, r) in rows {
        let total = joules(r.energy_j);
        let co2e = r.co2e_g.map_or_else(String::new, |g| format!("{g:.4} g"));
        let name = s.label.clone();
        if r.gpus.is_empty() {
            writeln!(
                f,
                "{}",
                row([&name, "-", "-", "-", "-", "-", &total, &co2e])
            )?;
        }
        for (i, g) in r.gpus.iter().enumerate() {
            let first = i == 0;
            writeln!(
                f,
                "{}",
                row([
                    if first { &name } else { "" },
                    &g.device.to_string(),
                    &g.mean_utilization_pct
                        .map_or_else(dash, |u| format!("{u:.0}%")),
                    &format_bytes(g.memory_delta_bytes as f64 / g.instances.max(1) as f64),
                    &format_bytes(g.peak_memory_bytes as f64),
                    &joules(g.energy_j),
                    if first { &total } else { "" },
                    if first { &co2e } else { "" },
                ])
            )?;
        }
    }
    hidden_rows(f, hidden, "with GPU and energy figures")
}

/// One line of evidence for a leak suspicion.
fn leak_evidence(leak: &Leak) -> String {
    let (verb, what) = match leak.source {
        LeakSource::Heap => ("kept", " of heap"),
        _ => ("RSS grew", ""),
    };
    let elsewhere = if leak.freed_elsewhere_bytes > 0 {
        format!(
            "; {} freed elsewhere",
            format_bytes(leak.freed_elsewhere_bytes as f64)
        )
    } else {
        String::new()
    };
    format!(
        "{verb} {}{what} over {} calls ({}/call; {:.0}% of calls{elsewhere})",
        format_bytes(leak.retained_bytes as f64),
        leak.calls,
        format_bytes(leak.per_call_bytes),
        leak.share_of_calls * 100.0
    )
}

/// The label of span name `name` in `target` where the same name is also recorded in the
/// targets `twins` (this one among them): `name (target)` where it fits [`NAME_WIDTH`], else
/// with as few of the target's last `::` segments as tell it apart from the others
/// (`step (…::train)`), and if that is still too long, the name keeps at least 8 characters
/// and the target is cut at its end.
fn twin_label(name: &str, target: &str, twins: &[&str]) -> String {
    let whole = format!("{name} ({target})");
    if whole.chars().count() <= NAME_WIDTH {
        return whole;
    }
    let segments: Vec<&str> = target.split("::").collect();
    let suffix = |t: &str, n: usize| -> String {
        let s: Vec<&str> = t.split("::").collect();
        s[s.len().saturating_sub(n)..].join("::")
    };
    let n = (1..segments.len())
        .find(|&n| {
            let mine = suffix(target, n);
            twins
                .iter()
                .filter(|&&t| t != target)
                .all(|t| suffix(t, n) != mine)
        })
        .unwrap_or(segments.len());
    let tag = if n < segments.len() {
        format!("…::{}", suffix(target, n))
    } else {
        target.to_string()
    };
    let short = format!("{name} ({tag})");
    if short.chars().count() <= NAME_WIDTH {
        return short;
    }
    let room = NAME_WIDTH - 3; // " (" and ")"
    let name = truncate(name, room.saturating_sub(tag.chars().count()).max(8));
    let tag = truncate(&tag, room - name.chars().count());
    format!("{name} ({tag})")
}

/// `text` for a text cell or a line of the report: its control characters (and the Unicode
/// line and paragraph separators) escaped as Rust writes them (a newline as the two characters
/// `\n`, a tab as `\t`, others as `\u{1b}`), so that a name cannot split a row or a line, then
/// cut to `width` characters (of the escaped text), the last one `…` where it was cut. Every
/// name the text reports show goes through it.
pub(super) fn truncate(text: &str, width: usize) -> String {
    let text = escape_controls(text);
    if text.chars().count() <= width {
        text.into_owned()
    } else {
        let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

/// `part` as a percentage of `whole` (0 when `whole` is 0).
pub(super) fn share(part: u128, whole: u128) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

/// Whether a span name's instances are entered more than once (async tasks at every poll,
/// long-lived spans): its calls are entries, not instances.
pub(super) fn multi_entry(s: &SpanStats) -> bool {
    s.calls != s.instances
}

/// The errors of one span name: per call for spans entered once per instance, per instance for
/// the others (`handle_request 4 of 200 instances`), or as events where no instance with
/// errors was closed (still open, or a profile from before instances were counted).
fn error_count(s: &Row<'_>) -> String {
    if !multi_entry(s) {
        format!("{} {} of {} calls", s.title, s.errors, s.calls)
    } else if s.errored_instances > 0 {
        format!(
            "{} {} of {} instances",
            s.title, s.errored_instances, s.instances
        )
    } else {
        format!(
            "{} {} error events ({} instances, {} open)",
            s.title, s.errors, s.instances, s.open
        )
    }
}

/// The line saying how many span names a section leaves out (`what` qualifies them: `with
/// throughput`), if any.
fn hidden_rows(f: &mut String, hidden: usize, what: &str) -> fmt::Result {
    if hidden == 0 {
        return Ok(());
    }
    let what = if what.is_empty() {
        String::new()
    } else {
        format!(" {what}")
    };
    writeln!(
        f,
        "… {hidden} more span names{what} (raise SPANPROF_TOP to show them)"
    )
}

/// `items` after `head`, separated by `; `, wrapped at the report's width with continuation
/// lines indented by two spaces; an item too long for a line is cut.
fn wrap(f: &mut String, head: &str, items: &[String]) -> fmt::Result {
    const INDENT: &str = "  ";
    let mut line = head.to_string();
    let mut first = true;
    for (i, item) in items.iter().enumerate() {
        let sep = if i + 1 < items.len() { ";" } else { "" };
        let item = truncate(
            item,
            REPORT_WIDTH - head.len().max(INDENT.len()) - sep.len(),
        );
        let piece = format!("{item}{sep}");
        let gap = if first { "" } else { " " };
        if !first && line.chars().count() + 1 + piece.chars().count() > REPORT_WIDTH {
            writeln!(f, "{line}")?;
            line = format!("{INDENT}{piece}");
        } else {
            line.push_str(gap);
            line.push_str(&piece);
        }
        first = false;
    }
    writeln!(f, "{line}")
}

fn dash() -> String {
    "-".to_string()
}

#[cfg(test)]
mod tests {
    use super::{escape_controls, truncate};

    /// Control characters are escaped before a cell is cut, and the cut counts the escaped
    /// text: a cell is never wider than asked, and never splits a line.
    #[test]
    fn cells_escape_control_characters_and_count_the_escapes() {
        assert_eq!(escape_controls("plain name"), "plain name");
        assert_eq!(
            escape_controls("a\nb\tc\r\u{1b}\u{7f}"),
            r"a\nb\tc\r\u{1b}\u{7f}"
        );
        assert_eq!(escape_controls("x\u{2028}y"), r"x\u{2028}y");
        assert_eq!(escape_controls("ünï 名前"), "ünï 名前");
        assert_eq!(truncate("a\nb", 4), r"a\nb");
        assert_eq!(truncate("a\nbc", 4), r"a\n…");
        assert_eq!(truncate("ab\ncd", 3), "ab…");
        for text in ["a\nb\tc", "\n\n\n\n\n\n", "tab\there and there"] {
            for width in 1..12 {
                let cell = truncate(text, width);
                assert!(cell.chars().count() <= width, "{text:?} {width}: {cell:?}");
                assert!(!cell.chars().any(char::is_control), "{text:?}: {cell:?}");
            }
        }
    }
}

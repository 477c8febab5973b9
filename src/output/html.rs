//! The HTML report: one self-contained page for a person (inline CSS, JavaScript and SVG; no
//! network when viewed).
//!
//! The page is a list of [`Section`]s rendered in Rust: run metadata, spanprof's own cost, the
//! call tree (expandable `<details>` rows, and inferno's flame graph in an `<iframe>`), the
//! metrics from events and the full table are plain HTML, so they read without JavaScript. The
//! charts (self time, latency percentiles per call and per instance, GPU time beside busy time
//! per call, the resource timeline) are drawn as inline SVG by `html/report.js`
//! from one JSON blob embedded in the page, whose figures are computed here from the snapshot
//! (percentile curves from the HDR histograms). The script adds sorting and filtering to the
//! table.
//!
//! Span names and targets are user data: in HTML they are escaped, in the JSON blob every `<`,
//! `>` and `&` is written as a `\u` escape (so no `</script>` can end the blob), and the script
//! only ever sets them as text.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{self, Write};

use serde::Serialize;

use super::table::{
    backoff_cost, costly_share, cpu_pct, multi_entry, own_cost_text, sample_rule,
    sampled_names_note, sampled_note, sampling_step, share, COSTLY_PCT,
};
use super::tree::{node_cell, widest_first};
use super::units::{format_bytes, format_count, format_duration, format_metric, format_value};
use super::{shown, Format};
use crate::profile::figures::{self as fig, clamped_spans, Figure};
use crate::profile::{
    CallTree, Metric, MetricKind, MetricValue, Overhead, ResourceInfo, Sample, Snapshot, SpanStats,
    Stat, Totals,
};

/// Name of the HTML report in an output directory.
pub const HTML_FILE: &str = "report.html";

const STYLE: &str = include_str!("html/report.css");
const SCRIPT: &str = include_str!("html/report.js");

/// The HTML report of a [`Snapshot`]: metadata, spanprof's own cost and back-off steps, a bar
/// chart of self time, latency percentile curves (several span names on one chart), latency
/// per instance of spans entered more than once, the call tree and its flame graph, the
/// resource timeline when samples exist, metrics from events, and the full table, sortable and
/// filterable. One file, nothing fetched when it is opened.
///
/// The builder writes it into the output directory
/// ([`Builder::with_output_dir`](crate::Builder::with_output_dir)); it renders a saved profile
/// as well:
///
/// ```
/// use spanprof::output::{Format, Html};
/// # let snapshot = spanprof::profile::Snapshot::from_json(
/// #     include_str!("../../tests/data/profile-v1-basic.json"), "doc")?;
/// let mut page = Vec::new();
/// Html.render(&snapshot, &mut page)?;
/// let page = String::from_utf8(page)?;
/// assert!(page.starts_with("<!DOCTYPE html>"));
/// assert!(page.contains("<table"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Html;

impl Format for Html {
    fn name(&self) -> &'static str {
        "html"
    }

    fn file_name(&self) -> &'static str {
        HTML_FILE
    }

    fn action(&self) -> &'static str {
        "writing HTML report"
    }

    fn render(&self, snapshot: &Snapshot, out: &mut dyn Write) -> io::Result<()> {
        page(snapshot, out)
    }
}

/// One section of the page: a heading and its HTML. The page is the list of them, in order.
struct Section<'a> {
    /// The element id (charts are drawn into elements inside it by the script).
    id: &'static str,
    title: &'static str,
    /// HTML, already escaped.
    body: String,
    /// A call tree whose rows follow the body ([`tree_rows`]), written straight to the output:
    /// a row per call path, each holding its whole path, they are most of a deep tree's page.
    rows: Option<&'a CallTree>,
}

/// The whole page, written to `out`.
fn page(snap: &Snapshot, out: &mut dyn Write) -> io::Result<()> {
    let spans = snap.by_self_time();
    let totals = snap.totals();
    let mut html = String::with_capacity(64 * 1024 + 2048 * spans.len());
    html.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    html.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    let program = program_name(snap);
    let _ = writeln!(html, "<title>spanprof: {}</title>", escape(&program));
    let _ = writeln!(html, "<style>\n{STYLE}</style>\n</head>\n<body>");
    let _ = writeln!(
        html,
        "<header><h1>spanprof report: <span class=\"program\">{}</span></h1>\n<p class=\"summary\">{}</p>\n\
         <p class=\"nojs\">The charts and the table's sorting need JavaScript; every figure is in \
         the table below.</p></header>",
        escape(&program),
        escape(&summary(snap, &totals, spans.len()))
    );
    html.push_str("<main>\n");
    for section in sections(snap, &spans, &totals) {
        let _ = write!(
            html,
            "<section id=\"{}\">\n<h2>{}</h2>\n{}",
            section.id, section.title, section.body
        );
        if let Some(tree) = section.rows {
            out.write_all(html.as_bytes())?;
            html.clear();
            tree_rows(tree, totals.self_ns, out)?;
        }
        html.push_str("</section>\n");
    }
    html.push_str("</main>\n");
    let _ = writeln!(
        html,
        "<script type=\"application/json\" id=\"spanprof-data\">{}</script>",
        data_json(snap, &spans, &totals)
    );
    let _ = writeln!(html, "<script>\n{SCRIPT}</script>\n</body>\n</html>");
    out.write_all(html.as_bytes())
}

/// The sections of the page, in order. A chart section holds an element the script draws into
/// (`chart-…`), found by id.
fn sections<'a>(snap: &'a Snapshot, spans: &[&SpanStats], totals: &Totals) -> Vec<Section<'a>> {
    let mut sections = vec![Section {
        id: "run",
        title: "Run",
        body: run_section(snap),
        rows: None,
    }];
    if snap.overhead.is_some() || !snap.backoff.is_empty() {
        sections.push(Section {
            id: "overhead",
            title: "spanprof's own cost",
            body: overhead_section(snap, spans),
            rows: None,
        });
    }
    let metrics = (!snap.metrics.is_empty()).then(|| Section {
        id: "metrics",
        title: "Metrics from events",
        body: metrics_section(snap),
        rows: None,
    });
    if spans.is_empty() {
        sections.push(Section {
            id: "spans",
            title: "Span names",
            body: format!(
                "<p>No span was recorded. The console report says why:</p>\n<pre>{}</pre>\n",
                escape(&super::Table::new().to_string(snap))
            ),
            rows: None,
        });
        sections.extend(metrics);
        return sections;
    }
    sections.push(Section {
        id: "self-time",
        title: "Self time by span name",
        body: "<p class=\"hint\">Time inside each span name minus time in its child spans, summed \
               over all calls; the share is of all self time.</p>\n\
               <div class=\"chart\" id=\"chart-self\"></div>\n"
            .to_string(),
        rows: None,
    });
    sections.push(Section {
        id: "latency",
        title: "Latency per call",
        body: "<p class=\"hint\">Busy time of each call (enter to exit) at each percentile, from \
               the HDR histograms (values within 1%). Pick span names to compare.</p>\n\
               <div class=\"chart\" id=\"chart-latency\"></div>\n"
            .to_string(),
        rows: None,
    });
    if spans.iter().any(|s| multi_entry(s) && s.instances > 0) {
        sections.push(Section {
            id: "instances",
            title: "Latency per instance",
            body: "<p class=\"hint\">Span names entered more than once per instance (async tasks \
                   at every poll, long-lived spans): wall = creation to close, busy = sum of \
                   its calls. Marks at p50, p90, p99; the line ends at the maximum.</p>\n\
                   <div class=\"chart\" id=\"chart-instances\"></div>\n"
                .to_string(),
            rows: None,
        });
    }
    if spans
        .iter()
        .any(|s| fig::GPU_MEAN.value(s, totals).is_some())
    {
        sections.push(Section {
            id: "gpu",
            title: "GPU time per call",
            body: "<p class=\"hint\">Span names timed on the GPU with CUDA events: GPU time per \
                   timed entry (on its stream, enter to exit) beside busy time per entry (the \
                   CPU side). GPU time well over busy time: GPU-bound, the span waits on work \
                   queued before it; well under: launch- or CPU-bound.</p>\n\
                   <div class=\"chart\" id=\"chart-gpu\"></div>\n"
                .to_string(),
            rows: None,
        });
    }
    if let Some(tree) = &snap.tree {
        sections.push(Section {
            id: "tree",
            title: "Call tree",
            body: tree_section(snap, tree),
            rows: (!tree.nodes.is_empty()).then_some(tree),
        });
    }
    if let Some(info) = snap.resources.as_ref().filter(|r| !r.timeline.is_empty()) {
        sections.push(Section {
            id: "resources",
            title: "Resources over time",
            body: format!(
                "<p class=\"hint\">The sampler's readings, every {} ms (older samples thinned \
                 out on long runs).</p>\n<div class=\"chart-grid\" id=\"chart-resources\"></div>\n",
                info.interval_ms
            ),
            rows: None,
        });
    }
    sections.extend(metrics);
    sections.push(Section {
        id: "spans",
        title: "All span names",
        body: table(spans, totals, snap.overhead.as_ref()),
        rows: None,
    });
    sections
}

/// The program's name: the file name of the command line's first word.
fn program_name(snap: &Snapshot) -> String {
    snap.run
        .command_line
        .first()
        .map(|p| p.rsplit('/').next().unwrap_or(p).to_string())
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "profile".to_string())
}

/// The headline, as the console report's first line: span names and the self time of all of
/// them (the whole profile's, for a selection of `shown` of them).
fn summary(snap: &Snapshot, totals: &Totals, shown: usize) -> String {
    let names = totals.span_names;
    let mut text = format!(
        "{} span name{}, {} inside spans, run {} (preset {})",
        names,
        if names == 1 { "" } else { "s" },
        format_duration(totals.self_ns),
        format_duration(snap.run.duration_ns),
        snap.run.preset
    );
    if let Some(whole) = &snap.selection {
        let _ = write!(text, "; output filter {:?}: {shown} of them", whole.filter);
    }
    text
}

/// Metadata: what ran, where, how it was profiled, what was left out, the samplers.
fn run_section(snap: &Snapshot) -> String {
    let run = &snap.run;
    let mut items: Vec<(&str, String)> = vec![
        ("host", run.host.clone()),
        ("pid", run.pid.to_string()),
        ("command line", run.command_line.join(" ")),
        ("started", run.start_time.clone()),
        ("duration", format_duration(run.duration_ns)),
        ("preset", run.preset.clone()),
        (
            "span filter",
            run.filter.clone().unwrap_or_else(|| "none".to_string()),
        ),
        (
            "spanprof",
            format!("{} (profile schema {})", run.crate_version, snap.version),
        ),
    ];
    let d = &snap.dropped;
    items.push((
        "not profiled",
        format!(
            "{} spans (open-span table full), {} spans (too many names), {} Chrome trace \
             windows skipped",
            d.spans_table_full, d.spans_too_many_names, d.trace_windows_skipped
        ),
    ));
    let clamped = snap
        .spans
        .iter()
        .map(clamped_spans)
        .fold(0u64, u64::saturating_add);
    if clamped > 0 {
        items.push((
            "clamped",
            format!(
                "{clamped} spans over {}: percentiles count them as that (totals, max exact)",
                format_duration(snap.histograms.highest)
            ),
        ));
    }
    if let Some(info) = &snap.resources {
        resource_items(info, run.duration_ns, &mut items);
    }
    meta_list(&items)
}

/// Items of metadata as a description list.
fn meta_list(items: &[(&str, String)]) -> String {
    let mut html = String::from("<dl class=\"meta\">\n");
    for (key, value) in items {
        let _ = writeln!(html, "<dt>{}</dt><dd>{}</dd>", escape(key), escape(value));
    }
    html.push_str("</dl>\n");
    html
}

/// spanprof's own cost: the estimate and its parts, the back-off steps, and the span names it
/// costs more than [`COSTLY_PCT`] of their busy time (as the console report names them).
fn overhead_section(snap: &Snapshot, spans: &[&SpanStats]) -> String {
    let mut html = String::new();
    if let Some(o) = &snap.overhead {
        let mut items: Vec<(&str, String)> = vec![
            ("estimate", own_cost_text(o)),
            (
                "per span",
                match o.span_ns_sure() {
                    Some(measured) => format!(
                        "{measured:.0} ns, measured as the program ran (the callbacks of 1 span \
                         in 64 timed whole, {}; each span name charged the trimmed mean of its \
                         own, a thread's first span of a name left out); {:.0} ns calibrated at \
                         start-up",
                        format_count(o.measured_samples),
                        o.span_cost_ns
                    ),
                    None => format!(
                        "{:.0} ns: opening, entering, exiting and closing one span at the basic \
                         preset, calibrated at start-up; unsure: {} of the {} callbacks timed \
                         that a measured cost needs",
                        o.span_cost_ns,
                        format_count(o.measured_samples),
                        Overhead::SURE_SAMPLES
                    ),
                },
            ),
            (
                "readings",
                format!(
                    "{}: spanprof's time reading resources at enters and exits (CPU clock, heap \
                     counters), kept out of every span's busy and self time",
                    format_duration(o.readings_ns)
                ),
            ),
        ];
        let cpu_read = spans
            .iter()
            .any(|s| s.resources.as_ref().is_some_and(|r| r.cpu.is_some()));
        if cpu_read && o.cpu_read_ns > 0.0 {
            items.push((
                "CPU clock",
                format!(
                    "{:.0} ns per read: read at every entry of span names whose mean entry is \
                     {} or more, at {} of the others{} (their CPU figures are marked ~)",
                    o.cpu_read_ns,
                    format_duration(o.cpu_every_entry_from_ns),
                    sample_rule(o),
                    if o.cpu_sample_gap_ns == 0 {
                        ""
                    } else {
                        " (this clock's reads switch threads out)"
                    }
                ),
            ));
        }
        if let Some(ns) = o.process_cpu_ns {
            items.push((
                "process CPU",
                format!("{} (every thread, at the snapshot)", format_duration(ns)),
            ));
        }
        html.push_str(&meta_list(&items));
    }
    if !snap.backoff.is_empty() {
        html.push_str(
            "<h3>Back-off</h3>\n<p class=\"hint\">Once a second spanprof compares its estimated \
             cost with the process's CPU time: over its limit, it switches per-span readings off \
             for every span name, then samples the hottest short span names 1 in N (calls \
             exact, totals marked ≈ scaled from the spans recorded), and steps back when the \
             cost predicted is under half of it.</p>\n",
        );
        let rows = snap
            .backoff
            .iter()
            .map(|s| {
                let (what, which) = if s.sampled.is_empty() {
                    let what = if s.on { "back on" } else { "off" };
                    (what, s.resources.join(", "))
                } else {
                    let what = if s.on { "sampled less" } else { "sampled" };
                    (what, sampling_step(s))
                };
                vec![
                    duration(s.at_ns),
                    text(what),
                    text(&which),
                    number(s.overhead_pct, backoff_cost(s)),
                ]
            })
            .collect();
        html.push_str(&figures_table(
            "backoff",
            &["at", "readings", "resources", "spanprof's cost"],
            rows,
        ));
    }
    if let Some(o) = snap
        .overhead
        .as_ref()
        .filter(|_| spans.iter().any(|s| s.overhead_ns.is_some()))
    {
        let mut costly: Vec<(f64, &SpanStats)> = spans
            .iter()
            .filter_map(|s| Some((costly_share(s, o)?, *s)))
            .collect();
        costly.sort_by(|a, b| b.0.total_cmp(&a.0));
        let _ = writeln!(
            html,
            "<h3>Span names spanprof costs over {COSTLY_PCT:.0}% of their own time</h3>\n\
             <p class=\"hint\">spanprof's estimated cost in each span name (its cost per span \
             times the name's spans, plus its readings) against the name's busy time: short \
             spans, whose times carry more of spanprof.</p>"
        );
        if o.span_ns_sure().is_none() {
            html.push_str(
                "<p>Not told: spanprof's cost per span is unsure (too few of its callbacks \
                 timed), and the calibrated figure is no measure of these spans.</p>\n",
            );
        } else if costly.is_empty() {
            html.push_str("<p>None.</p>\n");
        } else {
            let rows = costly
                .iter()
                .map(|(pct, s)| {
                    vec![
                        text(&s.name),
                        text(&s.target),
                        duration(s.overhead_ns.unwrap_or(0)),
                        number(*pct, format!("{pct:.0}%")),
                        number(s.calls as f64, format_count(s.calls)),
                        number(
                            s.entry_busy.mean_ns,
                            format_duration(s.entry_busy.mean_ns.round() as u64),
                        ),
                    ]
                })
                .collect();
            html.push_str(&figures_table(
                "costly",
                &[
                    "name",
                    "target",
                    "spanprof est.",
                    "% of busy",
                    "calls",
                    "mean",
                ],
                rows,
            ));
        }
    }
    html
}

/// A small table of figures (no sorting): text cells left-aligned, numbers right-aligned with
/// their value in `data-v`.
fn figures_table(id: &str, heads: &[&str], rows: Vec<Vec<Cell>>) -> String {
    let mut html =
        format!("<div class=\"table-wrap\"><table class=\"figures\" id=\"{id}\">\n<thead><tr>");
    for (i, head) in heads.iter().enumerate() {
        // Headings of text columns align with their text, to the left.
        let text = rows
            .first()
            .and_then(|r| r.get(i))
            .is_some_and(|c| c.sort.is_none());
        let class = if text { " class=\"text\"" } else { "" };
        let _ = write!(html, "<th{class}>{}</th>", escape(head));
    }
    html.push_str("</tr></thead>\n<tbody>\n");
    for row in rows {
        html.push_str("<tr>");
        for cell in &row {
            td(&mut html, cell, " class=\"text\"");
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</tbody>\n</table></div>\n");
    html
}

/// The call tree: the flame graph (feature `flamegraph`); the tree as nested, expandable rows
/// follows ([`tree_rows`], written by [`page`]).
fn tree_section(snap: &Snapshot, tree: &CallTree) -> String {
    let mut html = String::from(
        "<p class=\"hint\">Statistics per call path: each span is counted under its name and \
         its parents' names (recursion collapsed). A path's share is the self time of the path \
         and every path under it, of all self time: the width of its frame in the flame \
         graph.</p>\n",
    );
    if tree.nodes.is_empty() {
        html.push_str("<p>The call tree is empty: no span closed.</p>\n");
        return html;
    }
    html.push_str(&flame_graph(snap, tree));
    html
}

/// The flame graph of the call tree, inferno's interactive SVG in an `<iframe>` of its own:
/// its script, styles and element ids stay in their own document (inlined, they would meet
/// the page's), and it zooms and searches as the `flamegraph.svg` file does. The frame is
/// sandboxed to scripts and the search prompt: it cannot reach the page or navigate it.
#[cfg(feature = "flamegraph")]
fn flame_graph(snap: &Snapshot, tree: &CallTree) -> String {
    use base64::Engine as _;
    if tree.self_ns() == 0 {
        return "<p>No self time recorded: no flame graph.</p>\n".to_string();
    }
    let mut svg = Vec::new();
    if let Err(e) = super::Flamegraph::new().render(snap, &mut svg) {
        return format!(
            "<p>The flame graph could not be drawn: {}</p>\n",
            escape(&e.to_string())
        );
    }
    let height = svg_height(&svg).unwrap_or(600);
    // inferno's script keeps the zoom and search in the document's URL; a data: document has
    // none to change (replaceState throws, midway through a search): in this copy it is a no-op.
    if let Some(root_end) = svg.windows(4).position(|w| w == b"<svg").and_then(|at| {
        svg[at..]
            .iter()
            .position(|&b| b == b'>')
            .map(|end| at + end + 1)
    }) {
        svg.splice(root_end..root_end, FLAME_GRAPH_URL_STATE.bytes());
    }
    format!(
        "<h3>Flame graph</h3>\n<p class=\"hint\">Click a frame to zoom into it, Search (top \
         right, or Ctrl-F inside the graph) to highlight span names; hover for figures.</p>\n\
         <iframe class=\"flamegraph\" id=\"flamegraph\" title=\"flame graph of the call tree\" \
         sandbox=\"allow-scripts allow-modals\" style=\"height: {height}px\" src=\"data:image/svg+xml;base64,{}\"></iframe>\n",
        base64::engine::general_purpose::STANDARD.encode(&svg)
    )
}

/// What the embedded flame graph gets before inferno's script: no URL state (see
/// [`flame_graph`]).
#[cfg(feature = "flamegraph")]
const FLAME_GRAPH_URL_STATE: &str =
    "<script type=\"text/ecmascript\">history.replaceState = function () {};</script>";

/// Without the `flamegraph` feature, the rows of the tree stand alone.
#[cfg(not(feature = "flamegraph"))]
fn flame_graph(_: &Snapshot, _: &CallTree) -> String {
    "<p class=\"hint\">No flame graph: spanprof was built without its <code>flamegraph</code> \
     feature. The rows below hold every figure.</p>\n"
        .to_string()
}

/// The `height` of an SVG document's root element, in pixels.
#[cfg(feature = "flamegraph")]
fn svg_height(svg: &[u8]) -> Option<u32> {
    let svg = std::str::from_utf8(svg).ok()?;
    let root = &svg[svg.find("<svg")?..];
    let root = &root[..root.find('>')?];
    let at = root.find(" height=\"")? + " height=\"".len();
    let end = root[at..].find('"')? + at;
    root[at..end].parse().ok()
}

/// Paths of the tree holding at least this share of all self time (%) start open.
const OPEN_PCT: f64 = 5.0;

/// The tree as nested `<details>` (expandable without JavaScript): a row per call path, its
/// children below it, widest first; the roots and the paths with [`OPEN_PCT`] or more of all
/// self time under them open.
///
/// `all`: the self time of every span name ([`Totals::self_ns`], the whole profile's where the
/// tree holds the paths to the names an output filter selected), what shares are of, as in the
/// table.
fn tree_rows(tree: &CallTree, all: u64, out: &mut dyn Write) -> io::Result<()> {
    let total = tree.total_ns();
    let (children, roots) = tree.children();
    // Written in pieces of about this many bytes: the rows are never whole in memory here.
    const PIECE: usize = 64 * 1024;
    let mut html = String::with_capacity(PIECE + 4096);
    html.push_str(
        "<div class=\"tree\" id=\"call-tree\">\n<div class=\"row head\"><span class=\"path\">\
         path</span><span title=\"self time of the path and the paths under it, of all self \
         time\">% under</span><span title=\"completed entries\">calls</span><span \
         title=\"self time of all calls\">self</span><span title=\"busy time of all \
         calls\">busy</span><span title=\"99th percentile of busy time per instance\">p99 \
         busy</span></div>\n",
    );
    enum Step {
        Node(usize, usize),
        Close,
    }
    let mut stack: Vec<Step> = widest_first(&roots, &total)
        .into_iter()
        .rev()
        .map(|i| Step::Node(i, 0))
        .collect();
    while let Some(step) = stack.pop() {
        if html.len() >= PIECE {
            out.write_all(html.as_bytes())?;
            html.clear();
        }
        let (i, depth) = match step {
            Step::Close => {
                html.push_str("</details>\n");
                continue;
            }
            Step::Node(i, depth) => (i, depth),
        };
        let pct = share(total[i].into(), all.into());
        let cells = tree_cells(tree, i, depth, pct, total[i]);
        if children[i].is_empty() {
            let _ = writeln!(
                html,
                "<div class=\"row leaf\" data-node=\"{i}\">{cells}</div>"
            );
            continue;
        }
        let open = if depth == 0 || pct >= OPEN_PCT {
            " open"
        } else {
            ""
        };
        let _ = writeln!(
            html,
            "<details{open}><summary class=\"row\" data-node=\"{i}\">{cells}</summary>"
        );
        stack.push(Step::Close);
        for c in widest_first(&children[i], &total).into_iter().rev() {
            stack.push(Step::Node(c, depth + 1));
        }
    }
    html.push_str("</div>\n");
    out.write_all(html.as_bytes())
}

/// The cells of node `i`'s row: its name (the whole path and target as its tooltip), its share,
/// calls, self, busy and p99 busy time.
fn tree_cells(tree: &CallTree, i: usize, depth: usize, pct: f64, under_ns: u64) -> String {
    let node = &tree.nodes[i];
    let path = tree.path(i).join(" → ");
    let tip = if node.other {
        format!(
            "{path}: spans past the tree's bounds ({} paths, {} deep) under this path",
            tree.max_nodes, tree.max_depth
        )
    } else {
        format!("{path} ({})", node.target)
    };
    let name = escape(&node.name);
    let class = if node.other { "path other" } else { "path" };
    let mut cells = format!(
        "<span class=\"{class}\" style=\"--d:{depth}\" title=\"{}\">{name}</span>\
         <span class=\"pct\" style=\"--p:{pct:.1}%\" data-v=\"{under_ns}\">{pct:.1}%</span>",
        escape(&tip)
    );
    // A node's times hold an estimate where the back-off left spans of its path out.
    for (v, shown) in [
        (node.calls, format_count(node.calls)),
        (node.self_ns(), node_cell(node, node.self_ns())),
        (node.busy_ns(), node_cell(node, node.busy_ns())),
        (node.busy.p99_ns, format_duration(node.busy.p99_ns)),
    ] {
        let _ = write!(cells, "<span data-v=\"{v}\">{shown}</span>");
    }
    cells
}

/// Metrics from events in the console report's order, a table per kind of value: counters'
/// sums, histograms' distributions, gauges' last values and extremes, each in its unit.
fn metrics_section(snap: &Snapshot) -> String {
    let metrics = super::metrics_in_order(snap);
    let rejected = metrics.iter().any(|m| m.rejected > 0);
    let mut html = String::from(
        "<p class=\"hint\">Events' <code>counter.</code>, <code>monotonic_counter.</code>, \
         <code>histogram.</code> and <code>gauge.</code> fields, per span name they occurred in \
         (- for events outside every profiled span); units from the metric's name.</p>\n",
    );
    let key = |m: &Metric| {
        vec![
            text(&m.name),
            text(m.span.as_deref().unwrap_or("-")),
            text(m.span_target.as_deref().unwrap_or("")),
            text(m.unit.as_deref().unwrap_or("-")),
            number(m.records as f64, format_count(m.records)),
        ]
    };
    let value = |m: &Metric, v: f64| number(v, format_metric(v, m.unit.as_deref()));
    let with_rejected = |mut heads: Vec<&'static str>| {
        if rejected {
            heads.push("rejected");
        }
        heads
    };
    let finish = |m: &Metric, mut row: Vec<Cell>| {
        if rejected {
            row.push(number(m.rejected as f64, format_count(m.rejected)));
        }
        row
    };
    let mut counters = Vec::new();
    let mut histograms = Vec::new();
    let mut gauges = Vec::new();
    for m in metrics {
        match &m.value {
            MetricValue::Sum(sum) => {
                let mut row = key(m);
                row.insert(
                    1,
                    text(if m.kind == MetricKind::MonotonicCounter {
                        "monotonic"
                    } else {
                        "up-down"
                    }),
                );
                row.push(value(m, sum.total()));
                counters.push(finish(m, row));
            }
            MetricValue::Histogram(h) => {
                let mut row = key(m);
                let (min, max) = h.min_max();
                let figures = if h.count() == 0 {
                    vec![
                        missing(),
                        missing(),
                        missing(),
                        missing(),
                        missing(),
                        missing(),
                    ]
                } else {
                    vec![
                        value(m, h.mean()),
                        value(m, h.quantile(0.5)),
                        value(m, h.quantile(0.9)),
                        value(m, h.quantile(0.99)),
                        value(m, min),
                        value(m, max),
                    ]
                };
                row.extend(figures);
                histograms.push(finish(m, row));
            }
            MetricValue::Gauge(g) => {
                let mut row = key(m);
                if m.records > 0 {
                    row.extend([value(m, g.last), value(m, g.min), value(m, g.max)]);
                } else {
                    row.extend([missing(), missing(), missing()]);
                }
                gauges.push(finish(m, row));
            }
        }
    }
    let common = ["metric", "span", "target", "unit", "records"];
    let heads = |extra: &[&'static str], kind: bool| {
        let mut heads: Vec<&'static str> = common.to_vec();
        if kind {
            heads.insert(1, "kind");
        }
        heads.extend_from_slice(extra);
        with_rejected(heads)
    };
    for (id, title, extra, kind, rows) in [
        ("metrics-counters", "Counters", &["sum"][..], true, counters),
        (
            "metrics-histograms",
            "Histograms",
            &["mean", "p50", "p90", "p99", "min", "max"][..],
            false,
            histograms,
        ),
        (
            "metrics-gauges",
            "Gauges",
            &["last", "min", "max"][..],
            false,
            gauges,
        ),
    ] {
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(html, "<h3>{title}</h3>");
        html.push_str(&figures_table(id, &heads(extra, kind), rows));
    }
    html
}

/// The samplers' part of the metadata.
fn resource_items(info: &ResourceInfo, run_ns: u64, items: &mut Vec<(&str, String)>) {
    items.push((
        "samplers",
        format!(
            "{} every {} ms ({} samples kept)",
            info.samplers.join(", "),
            info.interval_ms,
            info.timeline.len(),
        ),
    ));
    // spanprof's own cost, as far as the profile holds it.
    items.push((
        "sampler CPU",
        format!(
            "{} ({:.3}% of the run's wall time): the sampler thread's CPU time",
            format_duration(info.sampler_cpu_ns),
            share(info.sampler_cpu_ns.into(), run_ns.into())
        ),
    ));
    if let Some(peak) = info.peak_rss_bytes {
        items.push(("peak RSS", format_bytes(peak as f64)));
    }
    if let Some(peak) = info.peak_heap_bytes {
        items.push(("peak heap", format_bytes(peak as f64)));
    }
    let wants = |s: &str| info.samplers.iter().any(|x| x == s);
    if wants("heap") && !info.heap_allocator {
        items.push((
            "heap",
            "not measured (install spanprof::CountingAlloc as #[global_allocator])".to_string(),
        ));
    }
    for (i, d) in info.gpu_devices.iter().enumerate() {
        let memory = d
            .memory_total_bytes
            .map_or_else(String::new, |m| format!(", {}", format_bytes(m as f64)));
        items.push(("GPU", format!("{i}: {}{memory}", d.name)));
    }
    if let Some(reason) = &info.gpu_unavailable {
        items.push(("GPU", format!("not available ({reason})")));
    }
    if let Some(reason) = &info.cpu_energy_unavailable {
        items.push(("CPU energy", format!("not available ({reason})")));
    }
}

/// One column of the table: its heading, its tooltip and whether it holds numbers.
struct Column {
    head: &'static str,
    title: &'static str,
    numeric: bool,
}

/// A cell: the text shown and the value it sorts by (numbers; text cells sort by their text).
struct Cell {
    text: String,
    sort: Option<f64>,
}

fn text(s: &str) -> Cell {
    Cell {
        text: s.to_string(),
        sort: None,
    }
}

fn duration(ns: u64) -> Cell {
    Cell {
        text: format_duration(ns),
        sort: Some(ns as f64),
    }
}

fn number(value: f64, shown: String) -> Cell {
    Cell {
        text: shown,
        sort: Some(value),
    }
}

fn missing() -> Cell {
    Cell {
        text: "-".to_string(),
        sort: Some(f64::NEG_INFINITY),
    }
}

/// The figures of the table, after the name and target: every span name has them.
const TABLE_FIGURES: [&Figure; 13] = [
    &fig::CALLS,
    &fig::BUSY,
    &fig::SELF,
    &fig::SELF_SHARE,
    &fig::MEAN,
    &fig::P50,
    &fig::P90,
    &fig::P99,
    &fig::P999,
    &fig::MAX,
    &fig::INSTANCES,
    &fig::OPEN,
    &fig::ERRORS,
];

/// The figures of the table shown where any span name has them: throughput rates, CPU, memory,
/// heap, energy and GPU time (CUDA events).
const OPTIONAL_FIGURES: [&Figure; 12] = [
    &fig::ITEMS_RATE,
    &fig::BYTES_RATE,
    &fig::FLOPS_RATE,
    &fig::CPU_PCT,
    &fig::RSS_DELTA,
    &fig::PEAK_RSS,
    &fig::ALLOC_PER_ENTRY,
    &fig::KEPT_PER_ENTRY,
    &fig::ENERGY,
    &fig::GPU_TOTAL,
    &fig::GPU_MEAN,
    &fig::GPU_BUSY,
];

/// A figure's cell: its value as the text reports show it, sorting by the value; `-` (sorting
/// last) where the span name has none. CPU keeps its own mark (`~` where sampled).
fn figure_cell(figure: &Figure, s: &SpanStats, totals: &Totals) -> Cell {
    match figure.value(s, totals) {
        None => missing(),
        Some(v) if figure.key == fig::CPU_PCT.key => {
            let c = s.resources.as_ref().and_then(|r| r.cpu.as_ref());
            number(
                v.as_f64(),
                c.map_or_else(|| format_value(figure.kind, v), cpu_pct),
            )
        }
        Some(v) => number(v.as_f64(), shown(figure, s, totals)),
    }
}

/// The full table, rendered server-side (it reads without JavaScript): every figure of the
/// console report per span name ([`TABLE_FIGURES`]), and those of [`OPTIONAL_FIGURES`] that
/// any span name has; headings are the figures' labels, tooltips their help.
fn table(spans: &[&SpanStats], totals: &Totals, overhead: Option<&Overhead>) -> String {
    let mut figures: Vec<&Figure> = TABLE_FIGURES.to_vec();
    figures.extend(
        OPTIONAL_FIGURES
            .iter()
            .copied()
            .filter(|f| spans.iter().any(|s| f.value(s, totals).is_some())),
    );
    let col = |head, title, numeric| Column {
        head,
        title,
        numeric,
    };
    let mut columns = vec![
        col("name", "span name", false),
        col("target", "span target (module path unless set)", false),
    ];
    columns.extend(figures.iter().map(|f| col(f.label, f.help, true)));

    let mut html = String::from(
        "<div class=\"table-tools\"><label>Filter <input type=\"search\" id=\"span-filter\" \
         placeholder=\"span name or target\"></label> <span id=\"span-count\"></span></div>\n\
         <div class=\"table-wrap\"><table id=\"span-table\">\n<thead><tr>",
    );
    for c in &columns {
        let _ = write!(
            html,
            "<th title=\"{}\" data-type=\"{}\">{}</th>",
            escape(c.title),
            if c.numeric { "num" } else { "text" },
            escape(c.head)
        );
    }
    html.push_str("</tr></thead>\n<tbody>\n");
    for s in spans {
        let mut cells = vec![text(&s.name), text(&s.target)];
        cells.extend(figures.iter().map(|f| figure_cell(f, s, totals)));
        html.push_str("<tr>");
        for (cell, column) in cells.iter().zip(&columns) {
            let class = if column.head == "name" {
                " class=\"name\""
            } else {
                ""
            };
            td(&mut html, cell, class);
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</tbody>\n</table></div>\n");
    let sampled = spans.iter().any(|s| {
        s.resources
            .as_ref()
            .and_then(|r| r.cpu.as_ref())
            .is_some_and(|c| c.sampled())
    });
    if sampled {
        let _ = writeln!(
            html,
            "<p class=\"hint\" id=\"cpu-sampled\">{}</p>",
            escape(&sampled_note(overhead))
        );
    }
    if let Some(note) = sampled_names_note(spans.iter().copied()) {
        let _ = writeln!(
            html,
            "<p class=\"hint\" id=\"spans-sampled\">{}</p>",
            escape(&note)
        );
    }
    html
}

/// One cell: a number with its sort value (`-1e308` for a missing figure, so it sorts last),
/// or text with `text_class` (` class="…"`, or nothing).
fn td(html: &mut String, cell: &Cell, text_class: &str) {
    let text = escape(&cell.text);
    let _ = match cell.sort {
        Some(v) if v.is_finite() => write!(html, "<td data-v=\"{v}\">{text}</td>"),
        Some(_) => write!(html, "<td data-v=\"-1e308\">{text}</td>"),
        None => write!(html, "<td{text_class}>{text}</td>"),
    };
}

/// `s` with the characters HTML gives a meaning escaped, for text and attribute values.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// What the script draws, as JSON safe inside a `<script>` element: `<`, `>` and `&` (and the
/// line separators JavaScript once treated as line ends) as `\u` escapes.
fn data_json(snap: &Snapshot, spans: &[&SpanStats], totals: &Totals) -> String {
    let mut names: HashMap<&str, usize> = HashMap::new();
    for s in spans {
        *names.entry(s.name.as_str()).or_default() += 1;
    }
    let data = Data {
        spans: spans
            .iter()
            .map(|s| chart_span(s, totals, names[s.name.as_str()] > 1))
            .collect(),
        timeline: snap
            .resources
            .as_ref()
            .filter(|r| !r.timeline.is_empty())
            .map(timeline),
    };
    // Serialising plain numbers and strings cannot fail.
    let json = serde_json::to_string(&data).unwrap_or_else(|_| "{}".to_string());
    let mut out = String::with_capacity(json.len() + 64);
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

/// The data the script reads (`spanprof-data`).
#[derive(Serialize)]
struct Data {
    /// Every span name, the most self time first.
    spans: Vec<ChartSpan>,
    /// The resource timeline, when samples exist.
    timeline: Option<Timeline>,
}

#[derive(Serialize)]
struct ChartSpan {
    name: String,
    target: String,
    /// The name, with its target where another span name is the same.
    label: String,
    calls: u64,
    /// [`fig::SELF`]: scaled to every call where the back-off sampled the name.
    self_ns: u64,
    /// [`fig::BUSY`], likewise.
    busy_ns: u64,
    /// [`fig::SELF_SHARE`]: share of all self time, %.
    self_pct: f64,
    /// Whether `self_ns` and `busy_ns` are estimates (the back-off sampled the name).
    estimate: bool,
    /// `self_ns` and `self_pct` as the table shows them (`≈2.54 ms`, `≈32.2%`).
    self_shown: String,
    self_pct_shown: String,
    /// Busy time per call at percentiles: (nines, ns), nines = -log10(1 - percentile/100).
    curve: Vec<(f64, u64)>,
    /// Latency per instance, for span names entered more than once per instance.
    instance: Option<Instance>,
    /// GPU time, for span names with entries timed on the GPU.
    gpu: Option<GpuChart>,
}

/// The GPU time of one span name beside its busy time, as the table shows them.
#[derive(Serialize)]
struct GpuChart {
    /// [`fig::GPU_CALLS`].
    calls: u64,
    /// [`fig::GPU_TOTAL`], ns.
    total_ns: u64,
    /// [`fig::GPU_MEAN`]: per timed entry, ns.
    mean_ns: f64,
    /// [`fig::MEAN`]: busy time per entry, ns.
    busy_mean_ns: f64,
    /// [`fig::GPU_BUSY`], %.
    busy_pct: f64,
    total_shown: String,
    mean_shown: String,
    busy_mean_shown: String,
    busy_pct_shown: String,
}

impl GpuChart {
    /// `None` where no entry of `s` was timed on the GPU.
    fn of(s: &SpanStats, totals: &Totals) -> Option<Self> {
        let value = |f: &Figure| f.value(s, totals).map(|v| v.as_f64());
        let int = |f: &Figure| match f.value(s, totals)? {
            fig::Value::Int(n) => Some(n),
            _ => None,
        };
        Some(Self {
            calls: int(&fig::GPU_CALLS)?,
            total_ns: int(&fig::GPU_TOTAL)?,
            mean_ns: value(&fig::GPU_MEAN)?,
            busy_mean_ns: value(&fig::MEAN)?,
            busy_pct: value(&fig::GPU_BUSY)?,
            total_shown: shown(&fig::GPU_TOTAL, s, totals),
            mean_shown: shown(&fig::GPU_MEAN, s, totals),
            busy_mean_shown: shown(&fig::MEAN, s, totals),
            busy_pct_shown: shown(&fig::GPU_BUSY, s, totals),
        })
    }
}

#[derive(Serialize)]
struct Instance {
    instances: u64,
    /// p50, p90, p99, max of the wall time of instances, ns.
    wall: [u64; 4],
    /// The same for busy time.
    busy: [u64; 4],
}

/// The chart data of one span name; `twins`: another span name is the same (in another target).
fn chart_span(s: &SpanStats, totals: &Totals, twins: bool) -> ChartSpan {
    let quartet = |st: &Stat| [st.p50_ns, st.p90_ns, st.p99_ns, st.max_ns];
    ChartSpan {
        name: s.name.clone(),
        target: s.target.clone(),
        label: if twins {
            format!("{} ({})", s.name, s.target)
        } else {
            s.name.clone()
        },
        calls: s.calls,
        self_ns: s.self_ns(),
        busy_ns: s.busy_ns(),
        self_pct: fig::SELF_SHARE.value(s, totals).map_or(0.0, |v| v.as_f64()),
        estimate: s.is_estimate(),
        self_shown: shown(&fig::SELF, s, totals),
        self_pct_shown: shown(&fig::SELF_SHARE, s, totals),
        curve: percentile_curve(&s.entry_busy),
        instance: (multi_entry(s) && s.instances > 0).then(|| Instance {
            instances: s.instances,
            wall: quartet(&s.wall),
            busy: quartet(&s.busy),
        }),
        gpu: GpuChart::of(s, totals),
    }
}

/// Steps of the percentile curve on the nines scale (0 = p0, 1 = p90, 2 = p99, ...).
const NINES_STEP: f64 = 0.05;
/// The curve's end: p99.99.
const NINES_MAX: f64 = 4.0;

/// The value at each percentile of `stat`'s histogram, from p0 in steps of [`NINES_STEP`] nines
/// (p50, p90, p99, p99.9 exactly among them) up to the percentile its sample count resolves
/// (p99.99 at most), where the curve ends at the exact maximum. Values are clamped to the exact
/// minimum and maximum, as the table's percentiles are.
pub(crate) fn percentile_curve(stat: &Stat) -> Vec<(f64, u64)> {
    if stat.count == 0 {
        return Vec::new();
    }
    let histogram = stat.histogram.to_histogram();
    let max_ns = stat.max_ns.max(stat.min_ns);
    let mut nines: Vec<f64> = (0..=(NINES_MAX / NINES_STEP).round() as u32)
        .map(|k| f64::from(k) * NINES_STEP)
        .collect();
    nines.push(2f64.log10()); // p50
    nines.sort_by(f64::total_cmp);
    // The highest percentile the samples resolve: above 1 - 1/count, only the maximum is left.
    let top = (stat.count as f64).log10().min(NINES_MAX);
    let mut curve = Vec::with_capacity(nines.len());
    for x in nines {
        if x >= top {
            curve.push((round3(top), max_ns));
            break;
        }
        // The exact quantiles of the table for whole nines (1 - 10^-2 is not 0.99 in floats).
        let q = match (x * 20.0).round() as u32 {
            _ if (x - 2f64.log10()).abs() < 1e-12 => 0.5,
            20 => 0.9,
            40 => 0.99,
            60 => 0.999,
            _ => 1.0 - 10f64.powf(-x),
        };
        let v = histogram.value_at_quantile(q).clamp(stat.min_ns, max_ns);
        curve.push((round3(x), v));
    }
    curve
}

/// `x` to 3 decimals (the JSON stays short).
fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[derive(Serialize)]
struct Timeline {
    /// Seconds since profiling started, one per sample.
    t_s: Vec<f64>,
    charts: Vec<Chart>,
}

/// One timeline chart: series sharing a unit.
#[derive(Serialize)]
struct Chart {
    title: &'static str,
    /// `bytes`, `%`, `W` or `J`: how the script formats the axis.
    unit: &'static str,
    /// The axis label, with its unit.
    axis: &'static str,
    series: Vec<Series>,
}

#[derive(Serialize)]
struct Series {
    name: String,
    /// One value per sample, `null` where it was not read.
    values: Vec<Option<f64>>,
}

fn timeline(info: &ResourceInfo) -> Timeline {
    let samples = &info.timeline;
    let series = |name: String, get: &dyn Fn(&Sample) -> Option<f64>| {
        let values: Vec<Option<f64>> = samples.iter().map(get).collect();
        values
            .iter()
            .any(Option::is_some)
            .then_some(Series { name, values })
    };
    let devices = samples.iter().map(|s| s.gpus.len()).max().unwrap_or(0);
    let per_gpu = |what: &str, get: fn(&crate::profile::GpuSample) -> Option<f64>| {
        (0..devices)
            .filter_map(|i| {
                series(format!("GPU {i} {what}"), &|s: &Sample| {
                    s.gpus.get(i).and_then(get)
                })
            })
            .collect::<Vec<_>>()
    };
    let mut charts = Vec::new();
    let mut push = |title, unit, axis, series: Vec<Option<Series>>| {
        let series: Vec<Series> = series.into_iter().flatten().collect();
        if !series.is_empty() {
            charts.push(Chart {
                title,
                unit,
                axis,
                series,
            });
        }
    };
    push(
        "Memory",
        "bytes",
        "memory (bytes)",
        vec![
            series("RSS".into(), &|s| s.rss_bytes.map(|v| v as f64)),
            series("heap".into(), &|s| s.heap_bytes.map(|v| v as f64)),
        ],
    );
    push(
        "Process CPU",
        "%",
        "CPU (% of one core)",
        vec![series("process CPU".into(), &|s| {
            s.process_cpu_pct.map(f64::from)
        })],
    );
    push(
        "GPU utilisation",
        "%",
        "utilisation (%)",
        per_gpu("util", |g| g.utilization_pct.map(f64::from))
            .into_iter()
            .map(Some)
            .collect(),
    );
    push(
        "GPU memory",
        "bytes",
        "device memory (bytes)",
        per_gpu("memory", |g| g.memory_used_bytes.map(|v| v as f64))
            .into_iter()
            .map(Some)
            .collect(),
    );
    push(
        "GPU power",
        "W",
        "power (W)",
        per_gpu("power", |g| g.power_mw.map(|mw| f64::from(mw) / 1e3))
            .into_iter()
            .map(Some)
            .collect(),
    );
    let mut energy = vec![series("CPU package".into(), &|s| {
        s.cpu_energy_uj.map(|uj| uj as f64 / 1e6)
    })];
    energy.extend(
        per_gpu("energy", |g| g.energy_mj.map(|mj| mj as f64 / 1e3))
            .into_iter()
            .map(Some),
    );
    push("Energy since start", "J", "energy (J)", energy);
    Timeline {
        t_s: samples.iter().map(|s| s.t_ns as f64 / 1e9).collect(),
        charts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_in_html_and_json() {
        assert_eq!(
            escape("</script><img src=x onerror=alert(1)> a,\"b\" 'c' &"),
            "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt; a,&quot;b&quot; &#39;c&#39; &amp;"
        );
    }

    #[test]
    fn the_curve_holds_the_tables_percentiles_and_ends_at_the_maximum() {
        let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 1 << 40, 2).unwrap();
        for v in 1..=10_000u64 {
            h.record(v * 100).unwrap();
        }
        let stat = Stat::new(h, 0, 100, 1_000_000, 0);
        let curve = percentile_curve(&stat);
        let at = |x: f64| curve.iter().find(|(n, _)| (n - x).abs() < 1e-3).unwrap().1;
        assert_eq!(at(2f64.log10()), stat.p50_ns);
        assert_eq!(at(1.0), stat.p90_ns);
        assert_eq!(at(2.0), stat.p99_ns);
        assert_eq!(at(3.0), stat.p999_ns);
        assert_eq!(curve.last(), Some(&(4.0, 1_000_000)));
        assert_eq!(curve.first(), Some(&(0.0, 100)));
        assert!(curve
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1));

        // 8 samples resolve up to p87.5 (0.9 nines): the curve ends there, at the maximum.
        let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 1 << 40, 2).unwrap();
        for v in 1..=8u64 {
            h.record(v * 1000).unwrap();
        }
        let curve = percentile_curve(&Stat::new(h, 0, 1000, 8000, 0));
        let (x, v) = *curve.last().unwrap();
        assert!((x - 8f64.log10()).abs() < 1e-3 && v == 8000, "{curve:?}");
        // p0 to p87.4 in steps of 0.05 nines (19), p50, and the end.
        assert_eq!(curve.len(), 21, "{curve:?}");
    }
}

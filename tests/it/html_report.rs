//! The HTML report (`report.html`): its table and embedded data checked against the profile it
//! renders, markup in span names kept as text, the file written beside the profile by a live
//! run, and the page as headless Chromium shows it after its scripts ran (charts, legends, axis
//! titles, the sorted and filtered table), with screenshots.
//!
//! The Chromium tests need Debian's `chromium` (`/usr/bin/chromium`, or `SPANPROF_CHROMIUM`);
//! without it they print `SKIPPED: ...` to stderr and pass. Screenshots and pages are left in
//! `target/html-report/` to look at.

use crate::support;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use spanprof::output::{Format, Html, Table, HTML_FILE, PROFILE_FILE};
use spanprof::profile::{GpuSample, MetricValue, SpanStats};
use spanprof::{ProfileLayer, Snapshot};

const INJECTION: &str = "</script><img src=x onerror=alert(1)>";
const QUOTES: &str = "a,\"b\"";

fn golden() -> Snapshot {
    Snapshot::from_json(
        include_str!("../data/golden-profile.json"),
        "golden-profile.json",
    )
    .unwrap()
}

fn detailed() -> Snapshot {
    Snapshot::from_json(
        include_str!("../data/profile-v2-detailed.json"),
        "profile-v2-detailed.json",
    )
    .unwrap()
}

fn render(snap: &Snapshot) -> String {
    let mut page = Vec::new();
    Html.render(snap, &mut page).unwrap();
    String::from_utf8(page).unwrap()
}

/// The detailed profile with CPU package energy and one GPU in its timeline (as the `full`
/// preset records them on a machine with RAPL and NVML).
fn with_gpu() -> Snapshot {
    let mut snap = detailed();
    let info = snap.resources.as_mut().unwrap();
    for (i, sample) in info.timeline.iter_mut().enumerate() {
        let i = i as u64;
        sample.cpu_energy_uj = Some(1_500_000 * i);
        sample.gpus = vec![GpuSample {
            utilization_pct: Some(40 + 10 * i as u32),
            memory_used_bytes: Some((1 + i) << 30),
            power_mw: Some(250_000 + 1_000 * i as u32),
            energy_mj: Some(25_000 * i),
            ..GpuSample::default()
        }];
    }
    snap
}

/// A profile of 100 span names: the detailed profile's 12 spans, cycled under new names, with
/// self times spread out (so the bars differ) and its resource timeline with a GPU.
fn hundred_names() -> Snapshot {
    let mut snap = with_gpu();
    let base = snap.spans.clone();
    snap.spans = (0..100)
        .map(|i| {
            let mut s: SpanStats = base[i % base.len()].clone();
            s.name = format!("{}_{i:02}", s.name);
            s.entry_self.total_ns = s.entry_self.total_ns / 100 * (100 - i as u64) + i as u64;
            s
        })
        .collect();
    snap
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

/// One table cell: its text (unescaped) and its sort value.
#[derive(Debug)]
struct Cell {
    text: String,
    value: Option<f64>,
}

/// The rows of the span table (`<tbody>` of `#span-table`), in document order, with whether
/// each is hidden by the filter.
fn table_rows(html: &str) -> Vec<(bool, Vec<Cell>)> {
    let start = html.find("id=\"span-table\"").expect("the span table");
    let body = &html[start..];
    let body = &body[body.find("<tbody>").unwrap() + 7..body.find("</tbody>").unwrap()];
    body.split("<tr")
        .skip(1)
        .map(|row| {
            let hidden = row.starts_with(" class=\"hidden\"");
            let cells = row
                .split("<td")
                .skip(1)
                .map(|cell| {
                    let open_end = cell.find('>').unwrap();
                    let value = attr(&cell[..open_end], "data-v").map(|v| v.parse().unwrap());
                    let text = &cell[open_end + 1..cell.find("</td>").unwrap()];
                    Cell {
                        text: unescape(text),
                        value,
                    }
                })
                .collect();
            (hidden, cells)
        })
        .collect()
}

/// The table's column headings.
fn headings(html: &str) -> Vec<String> {
    let start = html.find("id=\"span-table\"").unwrap();
    let head = &html[start..];
    let head = &head[..head.find("</thead>").unwrap()];
    head.split("<th ")
        .skip(1)
        .map(|th| unescape(&th[th.find('>').unwrap() + 1..th.find("</th>").unwrap()]))
        .collect()
}

/// The value of attribute `name` in a start tag's text.
fn attr(tag: &str, name: &str) -> Option<String> {
    let key = format!(" {name}=\"");
    let at = tag.find(&key)? + key.len();
    let end = tag[at..].find('"')? + at;
    Some(unescape(&tag[at..end]))
}

/// The start tags `<tag ...>` in `html` whose text contains `marker`.
fn tags<'a>(html: &'a str, tag: &str, marker: &str) -> Vec<&'a str> {
    let open = format!("<{tag} ");
    html.match_indices(&open)
        .map(|(i, _)| &html[i..i + html[i..].find('>').unwrap() + 1])
        .filter(|t| t.contains(marker))
        .collect()
}

/// The `data-name` of each `<path>` of class `class`, in document order.
fn path_names(html: &str, class: &str) -> Vec<String> {
    tags(html, "path", &format!("class=\"{class}\""))
        .iter()
        .map(|t| attr(t, "data-name").unwrap())
        .collect()
}

/// The JSON blob the scripts read.
fn data(html: &str) -> Value {
    let start = html.find("id=\"spanprof-data\">").unwrap() + "id=\"spanprof-data\">".len();
    let end = start + html[start..].find("</script>").unwrap();
    serde_json::from_str(&html[start..end]).unwrap()
}

/// The console report's cells for span `label`: calls, total, self, self %, mean, p50, p90,
/// p99, max (fixed columns after the 22-character name).
fn console_row(report: &str, label: &str) -> Vec<String> {
    // The report cuts names to 22 characters, the last one `…`.
    let label: String = if label.chars().count() > 22 {
        label.chars().take(21).chain(['…']).collect()
    } else {
        label.to_string()
    };
    let line = report
        .lines()
        .find(|l| l.chars().take(22).collect::<String>().trim_end() == label)
        .unwrap_or_else(|| panic!("no row {label} in\n{report}"));
    let chars: Vec<char> = line.chars().collect();
    let mut cells = Vec::new();
    let mut at = 23;
    for width in [7, 8, 8, 6, 8, 8, 8, 8, 8] {
        cells.push(
            chars[at..at + width]
                .iter()
                .collect::<String>()
                .trim()
                .to_string(),
        );
        at += width + 1;
    }
    cells
}

fn column(heads: &[String], name: &str) -> usize {
    heads
        .iter()
        .position(|h| h == name)
        .unwrap_or_else(|| panic!("no column {name} in {heads:?}"))
}

#[test]
fn table_rows_show_the_console_reports_figures() {
    for snap in [golden(), detailed()] {
        let html = render(&snap);
        let report = Table::new().to_string(&snap);
        let heads = headings(&html);
        let rows = table_rows(&html);
        assert_eq!(rows.len(), snap.spans.len());
        for (_, cells) in &rows {
            let name = &cells[0].text;
            let s = snap.span(name).unwrap();
            assert_eq!(cells[1].text, s.target);
            let console = console_row(&report, name);
            for (i, head) in [
                "calls", "total", "self", "self %", "mean", "p50", "p90", "p99", "max",
            ]
            .iter()
            .enumerate()
            {
                assert_eq!(
                    cells[column(&heads, head)].text,
                    console[i],
                    "{name}: {head}"
                );
            }
            // Sort values are the profile's exact figures.
            let value = |head: &str| cells[column(&heads, head)].value.unwrap();
            assert_eq!(value("calls"), s.calls as f64, "{name}");
            assert_eq!(value("p99"), s.entry_busy.p99_ns as f64, "{name}");
            assert_eq!(value("p99.9"), s.entry_busy.p999_ns as f64, "{name}");
            assert_eq!(value("self"), s.entry_self.total_ns as f64, "{name}");
            assert_eq!(value("instances"), s.instances as f64, "{name}");
            assert_eq!(value("errors"), s.errors as f64, "{name}");
        }
        // Rows in the report's order: the most self time first.
        let self_col = column(&heads, "self");
        let selfs: Vec<f64> = rows.iter().map(|r| r.1[self_col].value.unwrap()).collect();
        assert!(selfs.windows(2).all(|w| w[0] >= w[1]), "{selfs:?}");
    }
}

#[test]
fn resource_columns_and_metadata_come_from_the_profile() {
    let snap = detailed();
    let html = render(&snap);
    let heads = headings(&html);
    let rows = table_rows(&html);
    let info = snap.resources.as_ref().unwrap();
    for (_, cells) in &rows {
        let s = snap.span(&cells[0].text).unwrap();
        let r = s.resources.as_ref().unwrap();
        let value = |head: &str| cells[column(&heads, head)].value.unwrap();
        if let Some(cpu) = &r.cpu {
            assert_eq!(value("cpu %"), cpu.utilization_pct);
        }
        if let Some(m) = &r.memory {
            assert_eq!(value("peak rss"), m.peak_rss_bytes as f64);
        }
        if let Some(h) = r.heap.as_ref().filter(|h| h.entries > 0) {
            assert_eq!(value("alloc"), h.allocated_bytes as f64 / h.entries as f64);
        }
    }
    // Throughput: the sum of a field over busy time, `-` where a span has no such field.
    let items = column(&heads, "items/s");
    let flops = column(&heads, "FLOP/s");
    for (_, cells) in &rows {
        let s = snap.span(&cells[0].text).unwrap();
        match s.rate(s.items) {
            Some(rate) => assert_eq!(cells[items].value, Some(rate)),
            None => assert_eq!(cells[items].text, "-"),
        }
        assert_eq!(cells[flops].text == "-", s.flops.is_none());
    }
    // Without such fields, no throughput column.
    let mut plain = golden();
    for s in &mut plain.spans {
        (s.items, s.bytes, s.flops) = (None, None, None);
    }
    let heads = headings(&render(&plain));
    assert!(!heads.iter().any(|h| h.ends_with("/s")), "{heads:?}");
    // Metadata: host, pid, command line, preset, samplers, in the page without scripts.
    let run = &snap.run;
    for needle in [
        format!("<dt>host</dt><dd>{}</dd>", run.host),
        format!("<dt>pid</dt><dd>{}</dd>", run.pid),
        format!("<dt>preset</dt><dd>{}</dd>", run.preset),
        format!(
            "<dt>command line</dt><dd>{}</dd>",
            run.command_line.join(" ")
        ),
        format!("<dt>started</dt><dd>{}</dd>", run.start_time),
        "<dt>not profiled</dt><dd>0 spans (open-span table full), 0 spans (too many names)".into(),
        format!(
            "<dt>samplers</dt><dd>memory, heap, cpu every {} ms ({} samples kept",
            info.interval_ms,
            info.timeline.len()
        ),
        format!(
            "<dt>sampler CPU</dt><dd>264 µs ({:.3}% of the run",
            100.0 * info.sampler_cpu_ns as f64 / run.duration_ns as f64
        ),
    ] {
        assert!(html.contains(&needle), "missing {needle}");
    }
}

#[test]
fn embedded_data_equals_the_profiles_figures() {
    for snap in [golden(), detailed()] {
        let html = render(&snap);
        let data = data(&html);
        let spans = data["spans"].as_array().unwrap();
        assert_eq!(spans.len(), snap.spans.len());
        for d in spans {
            let s = snap
                .span_in(d["name"].as_str().unwrap(), d["target"].as_str().unwrap())
                .unwrap();
            assert_eq!(d["calls"], s.calls);
            assert_eq!(d["self_ns"], s.entry_self.total_ns);
            assert_eq!(d["busy_ns"], s.entry_busy.total_ns);
            let curve: Vec<(f64, u64)> = serde_json::from_value(d["curve"].clone()).unwrap();
            if s.entry_busy.count == 0 {
                assert!(curve.is_empty());
                continue;
            }
            let at = |x: f64| curve.iter().find(|p| (p.0 - x).abs() < 1e-3).map(|p| p.1);
            assert_eq!(at(0.0), Some(s.entry_busy.min_ns), "{}", s.name);
            assert_eq!(curve.last().unwrap().1, s.entry_busy.max_ns, "{}", s.name);
            let n = s.entry_busy.count as f64;
            // Percentiles the samples resolve are on the curve, as the table shows them.
            for (x, p) in [
                (2f64.log10(), s.entry_busy.p50_ns),
                (1.0, s.entry_busy.p90_ns),
                (2.0, s.entry_busy.p99_ns),
            ] {
                if n.log10() > x {
                    assert_eq!(at(x), Some(p), "{} at {x} nines", s.name);
                }
            }
            let multi = s.calls != s.instances && s.instances > 0;
            assert_eq!(d["instance"].is_object(), multi, "{}", s.name);
            if multi {
                assert_eq!(
                    d["instance"]["wall"],
                    serde_json::json!([s.wall.p50_ns, s.wall.p90_ns, s.wall.p99_ns, s.wall.max_ns])
                );
                assert_eq!(d["instance"]["busy"][3], s.busy.max_ns);
            }
        }
    }
    // The timeline: one time per sample, RSS and heap as sampled.
    let snap = detailed();
    let data = data(&render(&snap));
    let samples = &snap.resources.as_ref().unwrap().timeline;
    let t = data["timeline"]["t_s"].as_array().unwrap();
    assert_eq!(t.len(), samples.len());
    assert_eq!(t[1].as_f64().unwrap(), samples[1].t_ns as f64 / 1e9);
    let charts = data["timeline"]["charts"].as_array().unwrap();
    let titles: Vec<&str> = charts
        .iter()
        .map(|c| c["title"].as_str().unwrap())
        .collect();
    assert_eq!(titles, ["Memory", "Process CPU"]);
    let rss = &charts[0]["series"][0];
    assert_eq!(rss["name"], "RSS");
    for (v, s) in rss["values"].as_array().unwrap().iter().zip(samples) {
        assert_eq!(v.as_f64(), s.rss_bytes.map(|b| b as f64));
    }
    assert_eq!(charts[1]["series"][0]["values"][0], Value::Null);
    // GPU and energy: utilisation in %, memory in bytes, power in W, energy in J.
    let snap = with_gpu();
    let data = data_of(&snap);
    let samples = &snap.resources.as_ref().unwrap().timeline;
    let charts = data["timeline"]["charts"].as_array().unwrap();
    let chart = |title: &str| {
        charts
            .iter()
            .find(|c| c["title"] == title)
            .unwrap_or_else(|| panic!("no chart {title}"))
    };
    let values = |title: &str, series: usize| -> Vec<f64> {
        chart(title)["series"][series]["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect()
    };
    let gpu = |f: fn(&GpuSample) -> f64| samples.iter().map(|s| f(&s.gpus[0])).collect::<Vec<_>>();
    assert_eq!(chart("GPU power")["axis"], "power (W)");
    assert_eq!(
        values("GPU utilisation", 0),
        gpu(|g| g.utilization_pct.unwrap() as f64)
    );
    assert_eq!(
        values("GPU memory", 0),
        gpu(|g| g.memory_used_bytes.unwrap() as f64)
    );
    assert_eq!(
        values("GPU power", 0),
        gpu(|g| g.power_mw.unwrap() as f64 / 1e3)
    );
    assert_eq!(
        chart("Energy since start")["series"][0]["name"],
        "CPU package"
    );
    assert_eq!(
        values("Energy since start", 0),
        samples
            .iter()
            .map(|s| s.cpu_energy_uj.unwrap() as f64 / 1e6)
            .collect::<Vec<_>>()
    );
    assert_eq!(
        chart("Energy since start")["series"][1]["name"],
        "GPU 0 energy"
    );
    assert_eq!(
        values("Energy since start", 1),
        gpu(|g| g.energy_mj.unwrap() as f64 / 1e3)
    );
    // A profile without resources has no timeline.
    assert_eq!(data_of(&golden())["timeline"], Value::Null);
}

fn data_of(snap: &Snapshot) -> Value {
    data(&render(snap))
}

#[test]
fn span_names_are_text_not_markup() {
    let mut snap = golden();
    snap.spans[0].name = INJECTION.to_string();
    snap.spans[1].name = QUOTES.to_string();
    snap.spans[2].target = "t</script>&\u{2028}".to_string();
    let html = render(&snap);
    assert!(
        !html.contains("<img"),
        "markup from a span name reached the page"
    );
    // Two </script>: the end of the data and the end of the script; nothing else closes them.
    assert_eq!(html.matches("</script").count(), 2);
    assert!(
        html.contains("<td class=\"name\">&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;</td>")
    );
    assert!(html.contains("<td class=\"name\">a,&quot;b&quot;</td>"));
    // The data carries the names exactly.
    let data = data(&html);
    let names: Vec<&str> = data["spans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&INJECTION) && names.contains(&QUOTES),
        "{names:?}"
    );
    assert!(data["spans"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["target"] == "t</script>&\u{2028}"));
    let rows = table_rows(&html);
    assert!(rows.iter().any(|r| r.1[0].text == INJECTION));
    assert!(rows.iter().any(|r| r.1[0].text == QUOTES));
}

#[test]
fn a_profile_without_spans_says_why() {
    let mut snap = golden();
    snap.spans.clear();
    let html = render(&snap);
    assert!(html.contains("No span was recorded"));
    assert!(html.contains("no span was recorded (run"));
    assert!(!html.contains("id=\"span-table\""));
    assert_eq!(data(&html)["spans"], serde_json::json!([]));
}

#[test]
fn a_live_run_writes_the_report_beside_the_profile() {
    let dir = support::temp_dir("html-live");
    let (dispatch, guard) = support::install(ProfileLayer::builder().with_output_dir(&dir));
    let handle = guard.handle();
    tracing::dispatcher::with_default(&dispatch, || {
        for _ in 0..5 {
            tracing::info_span!("outer").in_scope(|| {
                tracing::info_span!("inner").in_scope(|| std::hint::black_box(0));
            });
        }
        // A long-lived span entered three times per instance.
        for _ in 0..2 {
            let task = tracing::info_span!("task");
            for _ in 0..3 {
                task.in_scope(|| std::hint::black_box(0));
            }
        }
    });
    drop(dispatch);
    let outputs = guard.finish().unwrap();
    let path = dir.join(HTML_FILE);
    assert_eq!(outputs.file("html"), Some(path.as_path()));
    let html = std::fs::read_to_string(&path).unwrap();
    let snap = handle.snapshot();
    let heads = headings(&html);
    let rows = table_rows(&html);
    let calls = |name: &str| {
        rows.iter()
            .find(|r| r.1[0].text == name)
            .map(|r| r.1[column(&heads, "calls")].value.unwrap())
    };
    assert_eq!(calls("outer"), Some(5.0));
    assert_eq!(calls("inner"), Some(5.0));
    assert_eq!(calls("task"), Some(6.0));
    for name in ["outer", "inner", "task"] {
        let p99 = rows
            .iter()
            .find(|r| r.1[0].text == name)
            .map(|r| r.1[column(&heads, "p99")].value.unwrap());
        assert_eq!(
            p99,
            Some(support::span(&snap, name).entry_busy.p99_ns as f64)
        );
    }
    assert!(html.contains("<section id=\"instances\">"));
    let task = data(&html)["spans"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "task")
        .cloned()
        .unwrap();
    assert_eq!(task["instance"]["instances"], 2);
    // The saved profile renders the same page, byte for byte.
    let saved = Snapshot::read_json(dir.join(PROFILE_FILE)).unwrap();
    assert_eq!(render(&saved), html);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn hundred_names_render() {
    let snap = hundred_names();
    let start = Instant::now();
    let rounds = 20;
    let mut html = String::new();
    for _ in 0..rounds {
        html = render(&snap);
    }
    let each = start.elapsed() / rounds;
    eprintln!(
        "rendering a 100-name profile ({} samples in its timeline): {each:?} per page, {} KiB",
        snap.resources.as_ref().unwrap().timeline.len(),
        html.len() / 1024
    );
    assert_eq!(table_rows(&html).len(), 100);
    assert_eq!(data(&html)["spans"].as_array().unwrap().len(), 100);
}

// ---------------------------------------------------------------------------------------------
// spanprof's own cost, the call tree, metrics from events.

/// The golden profile (it has a call tree) with spanprof's own cost as a live run records it:
/// the estimate, a cost per span name (over 5% of the busy time of the short ones) and two
/// back-off steps.
fn with_overhead() -> Snapshot {
    let mut v: Value = serde_json::from_str(include_str!("../data/golden-profile.json")).unwrap();
    let mut estimated = 0u64;
    for s in v["spans"].as_array_mut().unwrap() {
        let calls = s["calls"].as_u64().unwrap();
        let ns = calls * 40 + 1_000;
        s["overhead_ns"] = ns.into();
        estimated += ns;
    }
    v["overhead"] = serde_json::json!({
        "span_cost_ns": 40.0,
        "measured_span_ns": 40.0,
        "measured_samples": 1_000,
        "cpu_read_ns": 31.0,
        "cpu_every_entry_from_ns": 6200,
        "cpu_sample_every": 32,
        "readings_ns": 1_000 * v["spans"].as_array().unwrap().len() as u64,
        "estimated_ns": estimated,
        "process_cpu_ns": 4_000_000_000u64,
        "percent": 100.0 * estimated as f64 / 4e9,
    });
    v["backoff"] = serde_json::json!([
        {"at_ns": 1_500_000_000u64, "on": false, "resources": ["cpu", "heap"], "overhead_pct": 3.25},
        {"at_ns": 4_000_000_000u64, "on": true, "resources": ["cpu", "heap"], "overhead_pct": 0.75},
    ]);
    Snapshot::from_json(&v.to_string(), "golden-with-overhead.json").unwrap()
}

/// The rows of the small table `id` (`<table class="figures" id=...>`), as cells.
fn figures(html: &str, id: &str) -> Vec<Vec<Cell>> {
    let start = html
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no table {id}"));
    let body = &html[start..];
    let body = &body[body.find("<tbody>").unwrap() + 7..body.find("</tbody>").unwrap()];
    body.split("<tr>")
        .skip(1)
        .map(|row| {
            row.split("<td")
                .skip(1)
                .map(|cell| {
                    let open_end = cell.find('>').unwrap();
                    Cell {
                        text: unescape(&cell[open_end + 1..cell.find("</td>").unwrap()]),
                        value: attr(&cell[..open_end], "data-v").map(|v| v.parse().unwrap()),
                    }
                })
                .collect()
        })
        .collect()
}

/// The `<dd>` of `<dt>key</dt>` in the section `id`.
fn meta(html: &str, id: &str, key: &str) -> String {
    let section = &html[html.find(&format!("<section id=\"{id}\">")).unwrap()..];
    let at = section.find(&format!("<dt>{key}</dt><dd>")).unwrap() + key.len() + 13;
    unescape(&section[at..at + section[at..].find("</dd>").unwrap()])
}

#[test]
fn own_cost_back_off_and_costly_names_come_from_the_profile() {
    let snap = with_overhead();
    let o = snap.overhead.as_ref().unwrap();
    let html = render(&snap);
    let report = Table::new().to_string(&snap);
    // The estimate in the console report's words.
    let estimate = meta(&html, "overhead", "estimate");
    assert!(
        estimate.starts_with(&format!("~{:.2}% of process CPU time (", o.percent)),
        "{estimate}"
    );
    assert!(
        report.contains(&format!("spanprof's own cost: {estimate}")),
        "{report}"
    );
    assert!(meta(&html, "overhead", "per span").starts_with("40 ns, measured as the program ran"));
    assert!(meta(&html, "overhead", "process CPU").starts_with("4.00 s"));
    // The golden profile has no CPU figures: no word on the CPU clock.
    assert!(!html.contains("<dt>CPU clock</dt>"));
    // Back-off steps: when, which way, what, at what cost.
    let steps = figures(&html, "backoff");
    assert_eq!(steps.len(), snap.backoff.len());
    for (row, step) in steps.iter().zip(&snap.backoff) {
        assert_eq!(row[0].value, Some(step.at_ns as f64));
        assert_eq!(row[1].text, if step.on { "back on" } else { "off" });
        assert_eq!(row[2].text, "cpu, heap");
        assert_eq!(row[3].value, Some(step.overhead_pct));
    }
    assert_eq!(steps[0][3].text, "cost 3.2%");
    assert_eq!(steps[1][3].text, "predicted 0.75%");
    // The names spanprof costs over 5% of their busy time, the most first, as the console's
    // note lists them.
    // Only names entered (`serve` never was: a share of no busy time says nothing).
    assert!(snap.spans.iter().any(|s| s.name == "serve" && s.calls == 0));
    let mut expected: Vec<(f64, &SpanStats)> = snap
        .spans
        .iter()
        .filter(|s| s.calls > 0)
        .map(|s| {
            (
                100.0 * s.overhead_ns.unwrap() as f64 / s.entry_busy.total_ns.max(1) as f64,
                s,
            )
        })
        .filter(|(pct, _)| *pct > 5.0)
        .collect();
    expected.sort_by(|a, b| b.0.total_cmp(&a.0));
    assert!(
        !expected.is_empty() && expected.len() < snap.spans.len(),
        "the fixture has costly and cheap names"
    );
    let costly = figures(&html, "costly");
    assert_eq!(costly.len(), expected.len());
    let note = report
        .split("note: spanprof costs over 5% of these spans' own time:")
        .nth(1)
        .unwrap_or_else(|| panic!("no note in {report}"));
    for (row, (pct, s)) in costly.iter().zip(&expected) {
        assert_eq!(row[0].text, s.name);
        assert_eq!(row[2].value, Some(s.overhead_ns.unwrap() as f64));
        assert_eq!(row[3].value, Some(*pct));
        assert!(
            note.contains(&format!("{} {}", s.name, row[3].text)),
            "{} {} not in the console's note: {note}",
            s.name,
            row[3].text
        );
    }
    // Unsure (too few callbacks timed): the calibrated cost said to be, no costly names.
    let mut unsure = snap.clone();
    let o = unsure.overhead.as_mut().unwrap();
    (o.measured_span_ns, o.measured_samples) = (None, 12);
    let html = render(&unsure);
    let per_span = meta(&html, "overhead", "per span");
    assert!(per_span.starts_with("40 ns: "), "{per_span}");
    assert!(
        per_span.contains("unsure: 12 of the 64 callbacks timed"),
        "{per_span}"
    );
    assert!(!html.contains("id=\"costly\""));
    assert!(html.contains("<p>Not told: spanprof's cost per span is unsure"));
    let report = Table::new().to_string(&unsure);
    assert!(!report.contains("note: spanprof costs over"), "{report}");
    // The section comes right after the run's metadata; without an estimate, none.
    assert!(
        html.find("<section id=\"run\">").unwrap()
            < html.find("<section id=\"overhead\">").unwrap()
    );
    assert!(!render(&golden()).contains("<section id=\"overhead\">"));
}

#[test]
fn sampled_cpu_figures_are_marked_as_in_the_console() {
    let mut snap = detailed();
    let sampled = snap
        .spans
        .iter_mut()
        .find(|s| s.resources.as_ref().is_some_and(|r| r.cpu.is_some()))
        .unwrap();
    let name = sampled.name.clone();
    let cpu = sampled.resources.as_mut().unwrap().cpu.as_mut().unwrap();
    cpu.skipped_entries = 31 * cpu.entries;
    let utilization = cpu.utilization_pct;
    let html = render(&snap);
    let heads = headings(&html);
    let col = column(&heads, "cpu %");
    for (_, cells) in table_rows(&html) {
        let s = snap.span(&cells[0].text).unwrap();
        let Some(c) = s.resources.as_ref().and_then(|r| r.cpu.as_ref()) else {
            assert_eq!(cells[col].text, "-");
            continue;
        };
        assert_eq!(cells[col].value, Some(c.utilization_pct));
        if s.name == name {
            assert_eq!(cells[col].text, format!("~{utilization:.0}%"));
        } else {
            assert!(!cells[col].text.starts_with('~'), "{}", cells[col].text);
        }
    }
    let report = Table::new().to_string(&snap);
    let note = report
        .lines()
        .skip_while(|l| !l.starts_with("~ sampled:"))
        .take(2)
        .collect::<Vec<_>>()
        .join("\n")
        .replace('\'', "&#39;");
    assert!(html.contains(&format!("<p class=\"hint\" id=\"cpu-sampled\">{note}</p>")));
    assert!(!render(&detailed()).contains("id=\"cpu-sampled\""));
}

/// The call tree's rows in document order: (node, parent row's node, cells' values, text of
/// its share), the parent being the `<details>` the row is in.
fn tree_rows(html: &str) -> Vec<(usize, Option<usize>, Vec<f64>, String)> {
    let start = html.find("id=\"call-tree\"").expect("the tree");
    let body = &html[start..];
    let mut open: Vec<usize> = Vec::new();
    let mut rows = Vec::new();
    let mut at = 0;
    let mut pending_details = false;
    loop {
        let next = ["<details", "</details>", "data-node=\""]
            .iter()
            .filter_map(|m| body[at..].find(m).map(|i| (i + at, *m)))
            .min();
        let Some((i, m)) = next else { break };
        if body[at..i].contains("</section>") {
            break;
        }
        at = i + m.len();
        match m {
            "<details" => pending_details = true,
            "</details>" => {
                open.pop();
            }
            _ => {
                let end = body[at..].find('"').unwrap() + at;
                let node: usize = body[at..end].parse().unwrap();
                let row_end = at
                    + body[at..]
                        .find("</summary>")
                        .map_or(usize::MAX, |e| e)
                        .min(body[at..].find("</div>").unwrap());
                let row = &body[at..row_end];
                let values = row
                    .match_indices("data-v=\"")
                    .map(|(j, _)| {
                        let v = &row[j + 8..];
                        v[..v.find('"').unwrap()].parse().unwrap()
                    })
                    .collect();
                let pct = row
                    .split("class=\"pct\"")
                    .nth(1)
                    .map(|p| p[p.find('>').unwrap() + 1..p.find("</span>").unwrap()].to_string())
                    .unwrap();
                rows.push((node, open.last().copied(), values, pct));
                if pending_details {
                    open.push(node);
                    pending_details = false;
                }
            }
        }
    }
    rows
}

#[test]
fn the_call_tree_rows_hold_each_paths_figures() {
    let snap = golden();
    let tree = snap.tree.as_ref().unwrap();
    let html = render(&snap);
    let rows = tree_rows(&html);
    assert_eq!(rows.len(), tree.nodes.len());
    let total = tree.total_ns();
    // Shares of the self time of every span name, as the table's self %.
    let all = snap.totals().self_ns;
    for (i, parent, values, pct) in &rows {
        let node = &tree.nodes[*i];
        // Nested under its parent's row.
        assert_eq!(parent.map(|p| p as u32), node.parent, "node {i}");
        assert_eq!(
            values,
            &[
                total[*i] as f64,
                node.calls as f64,
                node.self_ns() as f64,
                node.busy_ns() as f64,
                node.busy.p99_ns as f64
            ],
            "node {i}"
        );
        assert_eq!(
            pct,
            &format!("{:.1}%", 100.0 * total[*i] as f64 / all as f64)
        );
    }
    // The console's tree view lists the paths in the same order (widest first).
    let names: Vec<&str> = rows.iter().map(|r| tree.nodes[r.0].name.as_str()).collect();
    let view = spanprof::output::TreeView::new().to_string(&snap);
    let console: Vec<&str> = view.lines().skip(2).map(|l| l[..44].trim()).collect();
    assert_eq!(names, console);
    // Every path's self time is there once.
    let rows_self: f64 = rows.iter().map(|r| r.2[2]).sum();
    assert_eq!(rows_self, tree.self_ns() as f64);
    // Without a tree, no section.
    let mut flat = golden();
    flat.tree = None;
    assert!(!render(&flat).contains("<section id=\"tree\">"));
}

/// The SVG in the flame graph's `<iframe>`, and the frame's height.
#[cfg(feature = "flamegraph")]
fn embedded_svg(html: &str) -> (String, u32) {
    use base64::Engine as _;
    let iframe = tags(html, "iframe", "class=\"flamegraph\"");
    assert_eq!(iframe.len(), 1, "one flame graph");
    let src = attr(iframe[0], "src").unwrap();
    let b64 = src.strip_prefix("data:image/svg+xml;base64,").unwrap();
    let svg = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    let style = attr(iframe[0], "style").unwrap();
    let height = style
        .strip_prefix("height: ")
        .and_then(|h| h.strip_suffix("px"))
        .unwrap()
        .parse()
        .unwrap();
    (String::from_utf8(svg).unwrap(), height)
}

/// The flame graph's frames: (span name, ns) from each `<g>`'s title.
#[cfg(feature = "flamegraph")]
fn svg_frames(svg: &str) -> Vec<(String, u64)> {
    svg.split("<g><title>")
        .skip(1)
        .map(|g| {
            let title = unescape(&g[..g.find("</title>").unwrap()]);
            let (name, figures) = title.rsplit_once(" (").unwrap();
            let ns = figures.split(' ').next().unwrap().replace(',', "");
            (name.to_string(), ns.parse().unwrap())
        })
        .collect()
}

#[cfg(feature = "flamegraph")]
#[test]
fn the_flame_graph_is_inferno_svg_with_a_frame_per_path() {
    let snap = golden();
    let tree = snap.tree.as_ref().unwrap();
    let html = render(&snap);
    let (svg, height) = embedded_svg(&html);
    // The flamegraph.svg output, byte for byte but for the script that keeps inferno's zoom
    // and search out of a data: document's URL, at its own height.
    let mut file = Vec::new();
    spanprof::output::Flamegraph::new()
        .render(&snap, &mut file)
        .unwrap();
    let no_url = "<script type=\"text/ecmascript\">history.replaceState = function () {};</script>";
    assert_eq!(svg.matches(no_url).count(), 1);
    assert_eq!(svg.replacen(no_url, "", 1).as_bytes(), file.as_slice());
    let root = &svg[svg.find("<svg").unwrap()..];
    assert_eq!(
        attr(&root[..root.find('>').unwrap()], "height"),
        Some(height.to_string())
    );
    // One frame per path with self time under it, as wide as that time; and the root.
    let mut frames = svg_frames(&svg);
    let all = frames.iter().find(|f| f.0 == "all").unwrap().1;
    assert_eq!(all, tree.self_ns());
    frames.retain(|f| f.0 != "all");
    let total = tree.total_ns();
    let mut expected: Vec<(String, u64)> = tree
        .nodes
        .iter()
        .zip(&total)
        .filter(|(_, &t)| t > 0)
        .map(|(n, &t)| (n.name.clone(), t))
        .collect();
    frames.sort();
    expected.sort();
    assert_eq!(frames, expected);
    // The page's own script and ids are untouched by inferno's: one <script> in the page.
    assert_eq!(html.matches("<script>").count(), 1);
    assert_eq!(
        attr(tags(&html, "iframe", "")[0], "sandbox").as_deref(),
        Some("allow-scripts allow-modals")
    );

    // Markup in a path's name stays text, in the rows and in the graph.
    let mut marked = golden();
    let tree = marked.tree.as_mut().unwrap();
    let leaf = (0..tree.nodes.len())
        .rev()
        .find(|&i| tree.nodes[i].self_time.total_ns > 0)
        .unwrap();
    tree.nodes[leaf].name = INJECTION.to_string();
    let html = render(&marked);
    assert!(!html.contains("<img"));
    let (svg, _) = embedded_svg(&html);
    assert!(!svg.contains("<img"));
    assert!(svg_frames(&svg).iter().any(|f| f.0 == INJECTION));
    assert!(html.contains(&format!(
        ">{}</span>",
        INJECTION.replace('<', "&lt;").replace('>', "&gt;")
    )));
}

#[cfg(not(feature = "flamegraph"))]
#[test]
fn without_the_flamegraph_feature_the_tree_stands_alone() {
    let html = render(&golden());
    assert!(html.contains("built without its <code>flamegraph</code> feature"));
    assert!(tags(&html, "iframe", "").is_empty());
    assert_eq!(tree_rows(&html).len(), golden().tree.unwrap().nodes.len());
}

/// A live run with every kind of metric, inside spans and outside, and a rejected value.
fn with_metrics() -> Snapshot {
    let (dispatch, guard) = support::install(ProfileLayer::builder());
    tracing::dispatcher::with_default(&dispatch, || {
        tracing::info!(monotonic_counter.requests = 2u64);
        for step in 0..50u64 {
            tracing::info_span!("train_step").in_scope(|| {
                tracing::info!(histogram.loss = 2.0 / (1 + step) as f64);
                tracing::info!(histogram.step_seconds = 0.01 + step as f64 * 1e-4);
                tracing::info!(monotonic_counter.samples = 32u64);
                tracing::info!(counter.queue = if step % 2 == 0 { 3i64 } else { -1 });
                tracing::info!(gauge.learning_rate = 0.1 / (1 + step / 10) as f64);
            });
        }
        tracing::info_span!("<i>eval</i>").in_scope(|| {
            tracing::info!(gauge.accuracy_ratio = 0.93);
            tracing::info!(histogram.loss = -1.0);
        });
    });
    support::finish_snapshot(guard)
}

#[test]
fn metrics_from_events_are_shown_per_span_name() {
    let snap = with_metrics();
    let html = render(&snap);
    assert!(!html.contains("<i>eval"), "a span name became markup");
    let find = |name: &str, span: Option<&str>| {
        snap.metrics
            .iter()
            .find(|m| m.name == name && m.span.as_deref() == span)
            .unwrap_or_else(|| panic!("no metric {name} in {span:?}"))
    };
    // Counters: kind, records, the sum.
    let counters = figures(&html, "metrics-counters");
    // Counters have a kind column before the span's: metric, kind, span, target, unit,
    // records, sum; the others metric, span, target, unit, records, then their figures.
    let row = |rows: &[Vec<Cell>], col: usize, name: &str, span: &str| -> usize {
        rows.iter()
            .position(|r| r[0].text == name && r[col].text == span)
            .unwrap_or_else(|| panic!("no row {name} {span}"))
    };
    let samples = &counters[row(&counters, 2, "samples", "train_step")];
    assert_eq!(samples[1].text, "monotonic");
    assert_eq!(samples[5].value, Some(50.0));
    assert_eq!(samples[6].value, Some(1600.0));
    let queue = &counters[row(&counters, 2, "queue", "train_step")];
    assert_eq!(queue[1].text, "up-down");
    assert_eq!(queue[6].value, Some(25.0 * 3.0 - 25.0));
    let outside = &counters[row(&counters, 2, "requests", "-")];
    assert_eq!(outside[6].value, Some(2.0));
    // Histograms: the distribution in the metric's unit, as the profile gives it.
    let histograms = figures(&html, "metrics-histograms");
    for (name, span) in [("loss", "train_step"), ("step_seconds", "train_step")] {
        let m = find(name, Some(span));
        let MetricValue::Histogram(h) = &m.value else {
            panic!("{name} is a histogram")
        };
        let r = &histograms[row(&histograms, 1, name, span)];
        let (min, max) = h.min_max();
        let values: Vec<f64> = r[5..11].iter().map(|c| c.value.unwrap()).collect();
        assert_eq!(
            values,
            [
                h.mean(),
                h.quantile(0.5),
                h.quantile(0.9),
                h.quantile(0.99),
                min,
                max
            ],
            "{name}"
        );
        assert_eq!(r[4].value, Some(50.0));
    }
    let step = &histograms[row(&histograms, 1, "step_seconds", "train_step")];
    assert_eq!(step[3].text, "seconds");
    assert_eq!(step[9].text, "10.0 ms", "min in its unit");
    // The rejected negative loss in the eval span: counted, in a column of its own.
    let eval_loss = &histograms[row(&histograms, 1, "loss", "<i>eval</i>")];
    assert_eq!(eval_loss.last().unwrap().value, Some(1.0));
    assert_eq!(eval_loss[4].value, Some(0.0));
    // Gauges: last, min, max.
    let gauges = figures(&html, "metrics-gauges");
    let lr = &gauges[row(&gauges, 1, "learning_rate", "train_step")];
    let values: Vec<f64> = lr[5..8].iter().map(|c| c.value.unwrap()).collect();
    assert_eq!(values, [0.02, 0.02, 0.1]);
    let accuracy = &gauges[row(&gauges, 1, "accuracy_ratio", "<i>eval</i>")];
    assert_eq!(accuracy[5].text, "93%");
    // A profile without metrics has no section.
    assert!(!render(&golden()).contains("<section id=\"metrics\">"));
}

// ---------------------------------------------------------------------------------------------
// Headless Chromium.

/// Chromium, or `None` after a `SKIPPED` line on stderr naming `test`.
fn chromium(test: &str) -> Option<PathBuf> {
    let path = std::env::var_os("SPANPROF_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    if path.is_file() {
        return Some(path);
    }
    // Straight to stderr: the test harness captures `eprintln!` of passing tests.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: {test}: no chromium at {} (apt-get install chromium, or set SPANPROF_CHROMIUM)",
        path.display()
    );
    None
}

fn out_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/html-report");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs headless Chromium on `page` with `args` (no network: loopback-only flags, a fresh
/// profile directory), returns its standard output. Killed after two minutes.
fn run_chromium(chromium: &Path, url: &str, args: &[&str]) -> String {
    let profile = support::temp_dir("chromium-profile");
    let mut child = support::headless_chromium(chromium, &profile)
        .args(["--disable-dev-shm-usage", "--hide-scrollbars"])
        .args(args)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut out).unwrap();
        out
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium ran for more than two minutes on {url}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = std::fs::remove_dir_all(&profile);
    reader.join().unwrap()
}

/// The page's DOM after its scripts ran.
fn dom(chromium: &Path, page: &Path, fragment: &str) -> String {
    let url = format!("file://{}{fragment}", page.display());
    let dom = run_chromium(
        chromium,
        &url,
        &["--virtual-time-budget=5000", "--dump-dom"],
    );
    assert!(dom.contains("</html>"), "no DOM from chromium: {dom}");
    dom
}

fn screenshot(chromium: &Path, page: &Path, png: &Path, size: &str) {
    let _ = std::fs::remove_file(png);
    run_chromium(
        chromium,
        &format!("file://{}", page.display()),
        &[
            "--virtual-time-budget=5000",
            &format!("--window-size={size}"),
            &format!("--screenshot={}", png.display()),
        ],
    );
    let bytes = std::fs::read(png).unwrap();
    assert_eq!(&bytes[1..4], b"PNG", "{} is not a PNG", png.display());
    eprintln!("screenshot: {}", png.display());
}

fn write_page(name: &str, snap: &Snapshot) -> PathBuf {
    let path = out_dir().join(name);
    std::fs::write(&path, render(snap)).unwrap();
    path
}

#[test]
fn chromium_draws_the_charts() {
    let Some(chromium) = chromium("chromium_draws_the_charts") else {
        return;
    };
    let snap = detailed();
    let page = write_page("detailed.html", &snap);
    let dom = dom(&chromium, &page, "");
    assert!(
        dom.contains("<html lang=\"en\" class=\"js\">"),
        "the script did not run"
    );
    let order: Vec<&SpanStats> = {
        let mut v: Vec<&SpanStats> = snap.spans.iter().collect();
        v.sort_by_key(|s| std::cmp::Reverse(s.entry_self.total_ns));
        v
    };
    // One bar per span name (12, under the top 20), its self time as in the profile.
    let bars = tags(&dom, "rect", "class=\"bar\"");
    assert_eq!(bars.len(), snap.spans.len());
    for (bar, s) in bars.iter().zip(&order) {
        assert_eq!(attr(bar, "data-name").unwrap(), s.name);
        assert_eq!(
            attr(bar, "data-self-ns").unwrap(),
            s.entry_self.total_ns.to_string()
        );
    }
    assert!(dom.contains(">self time, total over all calls</text>"));
    // The top 5 by self time as percentile curves, each with a legend entry.
    let curves = path_names(&dom, "curve");
    let top5: Vec<String> = order.iter().take(5).map(|s| s.name.clone()).collect();
    assert_eq!(curves, top5);
    for s in order.iter().take(5) {
        let p99 = s.entry_busy.p99_ns;
        assert!(
            dom.contains(&format!("{} ({} call", s.name, s.calls)),
            "no legend entry for {}",
            s.name
        );
        if s.entry_busy.count >= 101 {
            let shown = Table::new().to_string(&snap);
            let cell = console_row(&shown, &s.name)[7].clone();
            assert!(dom.contains(&format!("p99 {cell}")), "{} p99 {p99}", s.name);
        }
    }
    for title in [
        "percentile (%), nines scale",
        "busy time per call (log scale)",
        "time since start (s)",
        "memory (bytes)",
        "CPU (% of one core)",
    ] {
        assert!(
            dom.contains(&format!(">{title}</text>")),
            "no axis title {title}"
        );
    }
    // Percentile ticks, log-time ticks with units, byte ticks with units.
    for tick in [
        ">99</text>",
        ">99.5</text>",
        " µs</text>",
        " ms</text>",
        " MiB</text>",
        "%</text>",
    ] {
        assert!(dom.contains(tick), "no tick {tick}");
    }
    // The timeline: RSS and heap on the memory chart, process CPU.
    let series = path_names(&dom, "series");
    assert_eq!(series, ["RSS", "heap", "process CPU"]);
    // The chooser lists every span name, the top 5 checked.
    assert_eq!(tags(&dom, "input", "type=\"checkbox\"").len(), 12);
    assert!(dom.contains("12 of 12 span names"));
    screenshot(
        &chromium,
        &page,
        &out_dir().join("detailed.png"),
        "1400,2400",
    );
}

#[test]
fn chromium_sorts_and_filters_the_table_and_draws_instances() {
    let Some(chromium) = chromium("chromium_sorts_and_filters_the_table_and_draws_instances")
    else {
        return;
    };
    let mut snap = golden();
    snap.spans[3].name = INJECTION.to_string();
    snap.spans[4].name = QUOTES.to_string();
    let page = write_page("golden.html", &snap);
    // Sorted by calls, ascending, filtered on "a": the rows the filter keeps, fewest calls first.
    let dom = dom(&chromium, &page, "#sort=calls&order=asc&filter=a");
    assert!(
        !dom.contains("<img"),
        "markup from a span name became an element"
    );
    let heads = headings(&dom);
    let calls = column(&heads, "calls");
    let rows = table_rows(&dom);
    let shown: Vec<(String, f64)> = rows
        .iter()
        .filter(|r| !r.0)
        .map(|r| (r.1[0].text.clone(), r.1[calls].value.unwrap()))
        .collect();
    let mut expected: Vec<(String, f64)> = snap
        .spans
        .iter()
        .filter(|s| {
            format!("{} {}", s.name, s.target)
                .to_lowercase()
                .contains('a')
        })
        .map(|s| (s.name.clone(), s.calls as f64))
        .collect();
    expected.sort_by(|a, b| a.1.total_cmp(&b.1));
    let values = |v: &[(String, f64)]| v.iter().map(|x| x.1).collect::<Vec<_>>();
    assert_eq!(values(&shown), values(&expected), "{shown:?}");
    let mut names: Vec<_> = shown.iter().map(|x| x.0.clone()).collect();
    let mut want: Vec<_> = expected.iter().map(|x| x.0.clone()).collect();
    names.sort();
    want.sort();
    assert_eq!(names, want);
    assert!(names.contains(&INJECTION.to_string()) && names.contains(&QUOTES.to_string()));
    assert!(dom.contains(&format!(
        "{} of {} span names",
        expected.len(),
        snap.spans.len()
    )));
    assert!(dom.contains("class=\"sorted-asc\""));
    // Latency per instance: wall and busy ranges for the names entered more than once.
    let multi: Vec<&SpanStats> = snap
        .spans
        .iter()
        .filter(|s| s.calls != s.instances && s.instances > 0)
        .collect();
    assert!(!multi.is_empty());
    for s in &multi {
        let ranges: Vec<_> = tags(&dom, "g", "class=\"range")
            .into_iter()
            .filter(|t| attr(t, "data-name").as_deref() == Some(s.name.as_str()))
            .collect();
        assert_eq!(ranges.len(), 2, "wall and busy for {}", s.name);
    }
    assert!(dom.contains(">time per instance (log scale)</text>"));
    assert!(dom.contains("wall: creation to close"));

    // Without its script (as with JavaScript off; --dump-dom itself needs JavaScript): the
    // metadata and every row of the table, in the report's order, and a line saying the charts
    // need scripts; no chart.
    let html = render(&snap);
    let script = html.rfind("<script>").unwrap();
    let end = html.rfind("</script>").unwrap() + "</script>".len();
    let page = out_dir().join("golden-no-script.html");
    std::fs::write(&page, format!("{}{}", &html[..script], &html[end..])).unwrap();
    let dom = self::dom(&chromium, &page, "");
    assert!(!dom.contains("class=\"js\""), "scripts ran");
    assert!(dom.contains("<dt>host</dt><dd>golden-host</dd>"));
    assert!(dom.contains("The charts and the table's sorting need JavaScript"));
    let rows = table_rows(&dom);
    assert_eq!(rows.len(), snap.spans.len());
    assert!(rows.iter().all(|r| !r.0));
    assert_eq!(rows[0].1[0].text, "backward");
    assert!(tags(&dom, "svg", "").is_empty());
}

#[test]
fn chromium_shows_a_hundred_names() {
    let Some(chromium) = chromium("chromium_shows_a_hundred_names") else {
        return;
    };
    let snap = hundred_names();
    let page = write_page("hundred.html", &snap);
    let dom = dom(&chromium, &page, "");
    // The top 20 as bars, the rest behind a button; 5 curves; every row in the table.
    assert_eq!(tags(&dom, "rect", "class=\"bar\"").len(), 20);
    assert!(dom.contains(">Show all 100 span names</button>"));
    assert_eq!(tags(&dom, "path", "class=\"curve\"").len(), 5);
    assert_eq!(table_rows(&dom).len(), 100);
    assert!(dom.contains("100 of 100 span names"));
    // The GPU and energy charts, their axes in W and J.
    for title in [
        "power (W)",
        "energy (J)",
        "utilisation (%)",
        "device memory (bytes)",
    ] {
        assert!(
            dom.contains(&format!(">{title}</text>")),
            "no axis title {title}"
        );
    }
    assert!(dom.contains(" W</text>") && dom.contains(" J</text>") && dom.contains(" GiB</text>"));
    let series = path_names(&dom, "series");
    assert_eq!(
        series,
        [
            "RSS",
            "heap",
            "process CPU",
            "GPU 0 util",
            "GPU 0 memory",
            "GPU 0 power",
            "CPU package",
            "GPU 0 energy"
        ]
    );
    screenshot(
        &chromium,
        &page,
        &out_dir().join("hundred.png"),
        "1400,2400",
    );
}

#[test]
fn chromium_shows_the_own_cost_the_tree_and_the_metrics() {
    let Some(chromium) = chromium("chromium_shows_the_own_cost_the_tree_and_the_metrics") else {
        return;
    };
    let mut snap = with_overhead();
    snap.metrics = with_metrics().metrics;
    let page = write_page("sections.html", &snap);
    let dom = dom(&chromium, &page, "");
    assert!(
        dom.contains("<html lang=\"en\" class=\"js\">"),
        "the script did not run"
    );
    // Every section, in order, and the charts and table drawn around them.
    let at = |id: &str| {
        dom.find(&format!("<section id=\"{id}\">"))
            .unwrap_or_else(|| panic!("no section {id}"))
    };
    let order = [
        "run",
        "overhead",
        "self-time",
        "latency",
        "instances",
        "tree",
        "metrics",
        "spans",
    ];
    assert!(order.windows(2).all(|w| at(w[0]) < at(w[1])), "{order:?}");
    assert_eq!(
        tags(&dom, "rect", "class=\"bar\"").len(),
        snap.spans
            .iter()
            .filter(|s| s.calls > 0 || s.entry_self.total_ns > 0)
            .count()
    );
    assert!(dom.contains(&format!("{0} of {0} span names", snap.spans.len())));
    // The tree: a <details> per path with children, a row per path, with its figures.
    let tree = snap.tree.as_ref().unwrap();
    let (children, _) = tree.children();
    assert_eq!(
        dom.matches("<details").count(),
        children.iter().filter(|c| !c.is_empty()).count()
    );
    assert_eq!(tree_rows(&dom).len(), tree.nodes.len());
    // The figures tables as rendered.
    assert_eq!(figures(&dom, "backoff").len(), 2);
    assert!(!figures(&dom, "costly").is_empty());
    assert!(figures(&dom, "metrics-histograms")
        .iter()
        .any(|r| r[0].text == "loss" && r[1].text == "<i>eval</i>"));
    #[cfg(feature = "flamegraph")]
    {
        // The flame graph's own script runs in its document: fluid drawing removes the SVG's
        // fixed width and draws every frame.
        let (svg, _) = embedded_svg(&dom);
        let file = out_dir().join("flamegraph.svg");
        std::fs::write(&file, &svg).unwrap();
        let drawn = run_chromium(
            &chromium,
            &format!("file://{}", file.display()),
            &["--virtual-time-budget=5000", "--dump-dom"],
        );
        let root = &drawn[drawn.find("<svg").unwrap()..];
        let root = &root[..root.find('>').unwrap()];
        assert!(
            root.contains("height=") && !root.contains("width="),
            "{root}"
        );
        assert_eq!(svg_frames(&drawn).len(), svg_frames(&svg).len());
    }
    screenshot(
        &chromium,
        &page,
        &out_dir().join("sections.png"),
        "1400,3600",
    );
}

/// The golden GPU profile (recorded against the fake CUDA driver): `forward`, `backward` and
/// `grad` timed on the GPU, `step` and `load_batch` not.
fn gpu_profile() -> Snapshot {
    Snapshot::from_json(include_str!("../data/gpu-profile.json"), "gpu-profile.json").unwrap()
}

/// The GPU chart: a section only where some name was timed on the GPU, after the latency
/// charts and before the tree; per timed name, the most GPU time first, a bar of GPU time per
/// timed entry and one of busy time per entry, with the table's figures.
#[test]
fn chromium_draws_the_gpu_chart() {
    assert!(!render(&golden()).contains("<section id=\"gpu\">"));
    let snap = gpu_profile();
    let html = render(&snap);
    let (latency, gpu, tree) = (
        html.find("<section id=\"latency\">").unwrap(),
        html.find("<section id=\"gpu\">").unwrap(),
        html.find("<section id=\"tree\">").unwrap(),
    );
    assert!(latency < gpu && gpu < tree);
    let Some(chromium) = chromium("chromium_draws_the_gpu_chart") else {
        return;
    };
    let page = write_page("gpu.html", &snap);
    let dom = dom(&chromium, &page, "");
    let bars = |kind: &str| -> Vec<(String, f64)> {
        tags(&dom, "rect", &format!("class=\"gpu-bar {kind}\""))
            .iter()
            .map(|t| {
                (
                    attr(t, "data-name").unwrap(),
                    attr(t, "data-ns").unwrap().parse().unwrap(),
                )
            })
            .collect()
    };
    let expected = |ns: &dyn Fn(&SpanStats) -> f64| -> Vec<(String, f64)> {
        ["forward", "backward", "grad"]
            .iter()
            .map(|n| (n.to_string(), ns(snap.span(n).unwrap())))
            .collect()
    };
    assert_eq!(
        bars("gpu"),
        expected(&|s| s.gpu_time.as_ref().unwrap().time.mean_ns)
    );
    assert_eq!(bars("busy"), expected(&|s| s.entry_busy.mean_ns));
    // forward: 13.0 ms on the GPU per entry over 4.00 ms busy, as the console shows it.
    let report = Table::new().to_string(&snap);
    assert!(
        report
            .lines()
            .any(|l| l.starts_with("forward ") && l.contains("13.0 ms") && l.contains("325.0%")),
        "{report}"
    );
    assert!(dom.contains(">13.0 ms  325.0% of busy</text>"), "{dom}");
    assert!(dom.contains(">4.00 ms</text>"));
    assert!(dom.contains(">time per call</text>"));
    screenshot(&chromium, &page, &out_dir().join("gpu.png"), "1400,1800");
}

//! The HTML report (`report.html`): its table and embedded data checked against the profile it
//! renders, markup in span names kept as text, the file written beside the profile by a live
//! run, and the page as headless Chromium shows it after its scripts ran (charts, legends, axis
//! titles, the sorted and filtered table), with screenshots.
//!
//! The Chromium tests need Debian's `chromium` (`/usr/bin/chromium`, or `SPANPROF_CHROMIUM`);
//! without it they print `SKIPPED: ...` to stderr and pass. Screenshots and pages are left in
//! `target/html-report/` to look at.

mod support;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use spanprof::output::{Format, Html, Table, HTML_FILE, PROFILE_FILE};
use spanprof::profile::{GpuSample, SpanStats};
use spanprof::{ProfileLayer, Snapshot};

const INJECTION: &str = "</script><img src=x onerror=alert(1)>";
const QUOTES: &str = "a,\"b\"";

fn golden() -> Snapshot {
    Snapshot::from_json(
        include_str!("data/golden-profile.json"),
        "golden-profile.json",
    )
    .unwrap()
}

fn detailed() -> Snapshot {
    Snapshot::from_json(
        include_str!("data/profile-v2-detailed.json"),
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
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
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

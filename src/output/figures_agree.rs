//! Every output shows each span name's calls, self time and self share as the others do, and
//! names the same hottest span name: checked on a real profile with two leaf names sampled by
//! the back-off (so their totals are scaled estimates, and the scaled hottest name is not the
//! recorded one), whole and through an output filter.
//!
//! The expected figures are computed here from the profile by the rule of the model
//! ([`SpanStats::scaled_total_ns`] for a sampled name's totals, shares of the whole profile's
//! self time), then read back from each output as printed: the console table, Markdown, the
//! HTML page (its table cells and its embedded chart data), CSV, the Prometheus text, the OTLP
//! request, the window summary event, and the call trees.
//!
//! On a profile with GPU time per span (recorded against the fake CUDA driver), every output
//! that shows GPU time (the console report, HTML table and chart data, CSV, Prometheus, OTLP,
//! the JSON profile, the call tree) shows each timed name's GPU calls, total, mean and GPU ÷
//! busy as the others do, and no GPU figure for a name not timed.

use std::collections::HashMap;

use super::units::format_duration;
use super::{Format, Html, Markdown, Selection, Table};
use crate::profile::{Snapshot, SpanStats};

/// The golden profile with `matmul` and `validate_batch` (leaves under `train_step`) sampled:
/// 32 and 56 of their spans left out, counted in their calls (and their tree nodes). Scaled,
/// `matmul` (63.5 µs × 40 = 2.54 ms) passes `backward` (2.30 ms): the hottest name by self time
/// is `matmul`, where the spans recorded alone make it `backward`.
fn sampled_golden() -> Snapshot {
    let mut json: serde_json::Value =
        serde_json::from_str(include_str!("../../tests/data/golden-profile.json")).unwrap();
    for (name, skipped) in [("matmul", 32u64), ("validate_batch", 56)] {
        let spans = json["spans"].as_array_mut().unwrap();
        let span = spans.iter_mut().find(|s| s["name"] == name).unwrap();
        let calls = span["calls"].as_u64().unwrap();
        span["calls"] = (calls + skipped).into();
        span["created"] = (span["created"].as_u64().unwrap() + skipped).into();
        span["instances"] = (span["instances"].as_u64().unwrap() + skipped).into();
        // `Sampled` is non-exhaustive: made through the profile's JSON, as a run writes it.
        let busy_mean = span["entry_busy"]["mean_ns"].as_f64().unwrap();
        let skipped_ns = (busy_mean * skipped as f64).round() as u64;
        span["sampled"] = serde_json::json!({
            "every": 8, "since_ns": 1_000_000, "skipped": skipped, "skipped_ns": skipped_ns
        });
        let nodes = json["tree"]["nodes"].as_array_mut().unwrap();
        let node = nodes.iter_mut().find(|n| n["name"] == name).unwrap();
        node["calls"] = (node["calls"].as_u64().unwrap() + skipped).into();
        node["skipped"] = skipped.into();
        node["skipped_ns"] = skipped_ns.into();
    }
    let snap = Snapshot::from_json(&json.to_string(), "sampled golden profile").unwrap();
    let matmul = snap.span("matmul").unwrap();
    let backward = snap.span("backward").unwrap();
    assert!(matmul.entry_self.total_ns < backward.entry_self.total_ns);
    assert!(
        matmul.scaled_total_ns(&matmul.entry_self) > backward.scaled_total_ns(&backward.entry_self)
    );
    snap
}

/// What every output must show for one span name.
#[derive(Debug, Clone)]
struct Expected {
    calls: u64,
    self_ns: u64,
    /// Of the whole profile's self time, %.
    share: f64,
    sampled: bool,
}

impl Expected {
    /// The self time as the text outputs print it: `≈` before an estimate.
    fn self_text(&self) -> String {
        format!("{}{}", self.mark(), format_duration(self.self_ns))
    }

    /// The self share as the text outputs print it (one decimal).
    fn share_text(&self) -> String {
        format!("{}{:.1}%", self.mark(), self.share)
    }

    fn mark(&self) -> &'static str {
        if self.sampled {
            "≈"
        } else {
            ""
        }
    }
}

/// The figures every output must show for the span names of `snap`, computed here by the
/// model's rule; `whole`: the profile the shares are of (the one an output filter was applied
/// to, or `snap` itself). The hottest name last.
fn expected(snap: &Snapshot, whole: &Snapshot) -> (HashMap<String, Expected>, u64, String) {
    let scaled = |s: &SpanStats| s.scaled_total_ns(&s.entry_self);
    let all: u64 = whole.spans.iter().map(scaled).sum();
    let figures = snap
        .spans
        .iter()
        .map(|s| {
            let e = Expected {
                calls: s.calls,
                self_ns: scaled(s),
                share: 100.0 * scaled(s) as f64 / all as f64,
                sampled: s.sampled.as_ref().is_some_and(|x| x.skipped > 0),
            };
            (s.name.clone(), e)
        })
        .collect();
    let hottest = snap.spans.iter().max_by_key(|s| scaled(s)).unwrap();
    (figures, all, hottest.name.clone())
}

/// What went wrong, output by output: every disagreement is listed before the test fails.
#[derive(Default)]
struct Findings(Vec<String>);

impl Findings {
    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.0.push(what());
        }
    }

    fn hottest(&mut self, output: &str, got: Option<&str>, want: &str) {
        self.check(got == Some(want), || {
            format!("{output}: hottest {got:?}, expected {want:?}")
        });
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1e-9)
}

fn render(format: &dyn Format, snap: &Snapshot) -> String {
    let mut out = Vec::new();
    format.render(snap, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

/// The console table: each row's calls, self and self % cells; its first row; the headline's
/// time inside spans.
fn table(snap: &Snapshot, want: &HashMap<String, Expected>, all: u64, hot: &str, f: &mut Findings) {
    let text = Table::new().with_tree(None).to_string(snap);
    let lines: Vec<&str> = text.lines().collect();
    let head = lines.iter().position(|l| l.starts_with("name ")).unwrap();
    f.hottest("table", lines[head + 1].split_whitespace().next(), hot);
    let inside = format!(" {} inside spans", format_duration(all));
    f.check(lines[0].contains(&inside), || {
        format!("table headline {:?}, expected {inside:?}", lines[0])
    });
    for (name, e) in want {
        let Some(row) = lines[head + 1..]
            .iter()
            .find(|l| l.starts_with(&format!("{name} ")))
        else {
            continue; // past the name column's width
        };
        let cells = format!(
            " {:>7} {:>8} {:>6} ",
            super::units::format_count(e.calls),
            e.self_text(),
            e.share_text()
        );
        // calls, total, self, self %: the total sits between calls and self.
        let calls = format!(" {:>7} ", super::units::format_count(e.calls));
        let tail = format!(" {:>8} {:>6} ", e.self_text(), e.share_text());
        f.check(row.contains(&calls) && row.contains(&tail), || {
            format!("table row {row:?}: expected calls, self, self % {cells:?}")
        });
    }
}

/// Markdown: each row's calls, self and self % cells, and its first row.
fn markdown(snap: &Snapshot, want: &HashMap<String, Expected>, hot: &str, f: &mut Findings) {
    let text = Markdown::new().to_string(snap);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| l.split(" | ").collect())
        .collect();
    f.hottest(
        "markdown",
        rows.first().map(|r| r[0].trim_matches(['|', ' ', '`'])),
        hot,
    );
    for (name, e) in want {
        let row = rows.iter().find(|r| r[0] == format!("| `{name}`")).unwrap();
        let got = (row[2], row[4], row[5]);
        let shown = (
            super::units::format_count(e.calls),
            e.self_text(),
            e.share_text(),
        );
        f.check(
            (got.0, got.1, got.2) == (&shown.0[..], &shown.1[..], &shown.2[..]),
            || format!("markdown {name}: {got:?}, expected {shown:?}"),
        );
    }
}

/// `(text, data-v)` of each `<td>` of each row of the HTML table `id`.
fn html_rows(html: &str, id: &str) -> Vec<Vec<(String, Option<f64>)>> {
    let start = html.find(&format!("<table id=\"{id}\">")).unwrap();
    let body = &html[start..];
    let body = &body[body.find("<tbody>").unwrap()..body.find("</tbody>").unwrap()];
    body.split("<tr>")
        .skip(1)
        .map(|row| {
            row.split("<td")
                .skip(1)
                .map(|cell| {
                    let (attrs, rest) = cell.split_once('>').unwrap();
                    let text = rest.split("</td>").next().unwrap();
                    let value = attrs
                        .split("data-v=\"")
                        .nth(1)
                        .map(|v| v.split('"').next().unwrap().parse().unwrap());
                    (text.replace("&amp;", "&"), value)
                })
                .collect()
        })
        .collect()
}

/// The HTML page: the table's cells (text and sort value), the chart data's figures, the
/// headline, and the first of each.
fn html(snap: &Snapshot, want: &HashMap<String, Expected>, all: u64, hot: &str, f: &mut Findings) {
    let page = render(&Html, snap);
    let rows = html_rows(&page, "span-table");
    f.hottest("HTML table", rows.first().map(|r| r[0].0.as_str()), hot);
    for (name, e) in want {
        let row = rows.iter().find(|r| &r[0].0 == name).unwrap();
        let (calls, self_, pct) = (&row[2], &row[4], &row[5]);
        f.check(calls.1 == Some(e.calls as f64), || {
            format!("HTML table {name}: calls {calls:?}, expected {}", e.calls)
        });
        f.check(
            self_.1 == Some(e.self_ns as f64) && self_.0 == e.self_text(),
            || {
                format!(
                    "HTML table {name}: self {self_:?}, expected {} ({})",
                    e.self_ns,
                    e.self_text()
                )
            },
        );
        f.check(
            pct.1.is_some_and(|v| close(v, e.share)) && pct.0 == e.share_text(),
            || format!("HTML table {name}: self % {pct:?}, expected {:.3}", e.share),
        );
    }
    let headline = page
        .split("<p class=\"summary\">")
        .nth(1)
        .unwrap()
        .split("</p>")
        .next()
        .unwrap();
    let inside = format!(" {} inside spans", format_duration(all));
    f.check(headline.contains(&inside), || {
        format!("HTML headline {headline:?}, expected {inside:?}")
    });

    let data = chart_data(&page);
    let spans = data["spans"].as_array().unwrap();
    f.hottest("HTML chart data", spans[0]["name"].as_str(), hot);
    for (name, e) in want {
        let d = spans.iter().find(|d| d["name"] == name.as_str()).unwrap();
        let got = (
            d["calls"].as_u64(),
            d["self_ns"].as_u64(),
            d["self_pct"].as_f64(),
        );
        f.check(
            got.0 == Some(e.calls)
                && got.1 == Some(e.self_ns)
                && got.2.is_some_and(|p| close(p, e.share)),
            || {
                format!(
                    "HTML chart data {name}: (calls, self_ns, self_pct) {got:?}, expected ({}, {}, {:.3})",
                    e.calls, e.self_ns, e.share
                )
            },
        );
    }
}

/// The data the HTML page's charts are drawn from.
fn chart_data(page: &str) -> serde_json::Value {
    let start = page.find("id=\"spanprof-data\">").unwrap() + "id=\"spanprof-data\">".len();
    let end = start + page[start..].find("</script>").unwrap();
    serde_json::from_str(&page[start..end]).unwrap()
}

/// CSV: each row's `calls`, `self_ns` and `self_pct`, and its first row.
#[cfg(feature = "csv")]
fn csv(snap: &Snapshot, want: &HashMap<String, Expected>, hot: &str, f: &mut Findings) {
    let text = super::Csv::new().to_string(snap).unwrap();
    let mut reader = ::csv::Reader::from_reader(text.as_bytes());
    let head = reader.headers().unwrap().clone();
    let col = |h: &str| head.iter().position(|c| c == h).unwrap();
    let rows: Vec<::csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    f.hottest("CSV", rows.first().map(|r| &r[col("name")]), hot);
    for (name, e) in want {
        let row = rows.iter().find(|r| &r[col("name")] == name).unwrap();
        let got = (
            &row[col("calls")],
            &row[col("self_ns")],
            &row[col("self_pct")],
        );
        f.check(
            got.0 == e.calls.to_string()
                && got.1 == e.self_ns.to_string()
                && got.2.parse().is_ok_and(|p: f64| close(p, e.share)),
            || {
                format!(
                    "CSV {name}: {got:?}, expected ({}, {}, {:.3})",
                    e.calls, e.self_ns, e.share
                )
            },
        );
    }
}

/// The Prometheus text: each name's calls counter, self time counter (seconds) and self share
/// (0 to 1); the hottest by that self time.
#[cfg(feature = "prometheus")]
fn prometheus(snap: &Snapshot, want: &HashMap<String, Expected>, hot: &str, f: &mut Findings) {
    let text = super::Prometheus::new().to_string(snap);
    let value = |family: &str, name: &str| prometheus_value(&text, family, name);
    let mut hottest: Option<(&str, f64)> = None;
    for (name, e) in want {
        let got = (
            value("spanprof_span_calls_total", name),
            value("spanprof_span_self_time_seconds_total", name),
            value("spanprof_span_self_share_ratio", name),
        );
        f.check(
            got.0 == Some(e.calls as f64)
                && got.1.is_some_and(|s| close(s, e.self_ns as f64 / 1e9))
                && got.2.is_some_and(|r| close(r, e.share / 100.0)),
            || {
                format!(
                    "Prometheus {name}: (calls, self s, self ratio) {got:?}, expected ({}, {}, {})",
                    e.calls,
                    e.self_ns as f64 / 1e9,
                    e.share / 100.0
                )
            },
        );
        if let Some(s) = got.1 {
            if hottest.map_or(true, |(_, h)| s > h) {
                hottest = Some((name, s));
            }
        }
    }
    f.hottest("Prometheus", hottest.map(|(n, _)| n), hot);
}

/// The OTLP request: each name's `spanprof.span.calls`, `spanprof.span.self_time` (seconds)
/// and `spanprof.span.self_share` (0 to 1); the hottest by that self time.
#[cfg(feature = "otlp")]
fn otlp(snap: &Snapshot, want: &HashMap<String, Expected>, hot: &str, f: &mut Findings) {
    let metrics = otlp_metrics(snap);
    let value = |metric: &str, name: &str| otlp_value(&metrics, metric, name);
    let mut hottest: Option<(&str, f64)> = None;
    for (name, e) in want {
        let got = (
            value("spanprof.span.calls", name),
            value("spanprof.span.self_time", name),
            value("spanprof.span.self_share", name),
        );
        f.check(
            got.0 == Some(e.calls as f64)
                && got.1.is_some_and(|s| close(s, e.self_ns as f64 / 1e9))
                && got.2.is_some_and(|r| close(r, e.share / 100.0)),
            || {
                format!(
                    "OTLP {name}: (calls, self s, self ratio) {got:?}, expected ({}, {}, {})",
                    e.calls,
                    e.self_ns as f64 / 1e9,
                    e.share / 100.0
                )
            },
        );
        if let Some(s) = got.1 {
            if hottest.map_or(true, |(_, h)| s > h) {
                hottest = Some((name, s));
            }
        }
    }
    f.hottest("OTLP", hottest.map(|(n, _)| n), hot);
}

/// The value of the sample of `family` for span name `name` in the Prometheus text.
#[cfg(feature = "prometheus")]
fn prometheus_value(text: &str, family: &str, name: &str) -> Option<f64> {
    let prefix = format!("{family}{{span=\"{name}\",");
    text.lines()
        .find(|l| l.starts_with(&prefix))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// The metrics of the OTLP request of `snap`, decoded.
#[cfg(feature = "otlp")]
fn otlp_metrics(snap: &Snapshot) -> Vec<opentelemetry_proto::tonic::metrics::v1::Metric> {
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use prost::Message;
    let options = crate::otlp::OtlpOptions::new("http://127.0.0.1:4318/v1/metrics");
    let request = ExportMetricsServiceRequest::decode(options.encode(snap).as_slice()).unwrap();
    request.resource_metrics[0].scope_metrics[0].metrics.clone()
}

/// The value of the data point of the sum or gauge `metric` for span name `name`; for a
/// histogram, its count and sum.
#[cfg(feature = "otlp")]
fn otlp_value(
    metrics: &[opentelemetry_proto::tonic::metrics::v1::Metric],
    metric: &str,
    name: &str,
) -> Option<f64> {
    Some(otlp_point(metrics, metric, name)?.0)
}

/// `(value, sum)` of the data point of `metric` for span name `name`: a sum's or gauge's value
/// (and `None`), or a histogram's count and sum.
#[cfg(feature = "otlp")]
fn otlp_point(
    metrics: &[opentelemetry_proto::tonic::metrics::v1::Metric],
    metric: &str,
    name: &str,
) -> Option<(f64, Option<f64>)> {
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    use opentelemetry_proto::tonic::common::v1::KeyValue;
    use opentelemetry_proto::tonic::metrics::v1::{metric::Data, number_data_point::Value};
    let named = |attributes: &[KeyValue]| {
        attributes.iter().any(|kv| {
            kv.key == "span.name"
                && kv.value.as_ref().and_then(|v| v.value.as_ref())
                    == Some(&Any::StringValue(name.to_string()))
        })
    };
    let number = |points: &[opentelemetry_proto::tonic::metrics::v1::NumberDataPoint]| {
        let point = points.iter().find(|p| named(&p.attributes))?;
        match point.value? {
            Value::AsInt(i) => Some((i as f64, None)),
            Value::AsDouble(d) => Some((d, None)),
        }
    };
    match metrics.iter().find(|m| m.name == metric)?.data.as_ref()? {
        Data::Sum(s) => number(&s.data_points),
        Data::Gauge(g) => number(&g.data_points),
        Data::Histogram(h) => {
            let point = h.data_points.iter().find(|p| named(&p.attributes))?;
            Some((point.count as f64, point.sum))
        }
        _ => None,
    }
}

/// The fields of the events `emit` logs, as text.
fn events(emit: impl FnOnce()) -> Vec<HashMap<String, String>> {
    use std::sync::{Arc, Mutex};
    use tracing::field::{Field, Visit};
    use tracing_subscriber::layer::{Context, SubscriberExt};
    use tracing_subscriber::Layer;

    struct Fields(HashMap<String, String>);
    impl Visit for Fields {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            self.0
                .insert(field.name().to_string(), format!("{value:?}"));
        }
        fn record_str(&mut self, field: &Field, value: &str) {
            self.0.insert(field.name().to_string(), value.to_string());
        }
    }
    struct Capture(Arc<Mutex<Vec<HashMap<String, String>>>>);
    impl<S: tracing::Subscriber> Layer<S> for Capture {
        fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
            let mut fields = Fields(HashMap::new());
            event.record(&mut fields);
            self.0.lock().unwrap().push(fields.0);
        }
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let subscriber = tracing_subscriber::registry().with(Capture(seen.clone()));
    tracing::subscriber::with_default(subscriber, emit);
    let seen = seen.lock().unwrap().clone();
    seen
}

/// The window summary's top names: calls, self ns and share, the hottest first.
fn summaries(snap: &Snapshot, want: &HashMap<String, Expected>, hot: &str, f: &mut Findings) {
    let window = events(|| crate::export::summary_event(snap, 1, true, None));
    let w = &window[0];
    f.hottest(
        "window summary",
        w.get("top1_name").map(String::as_str),
        hot,
    );
    for i in 1..=crate::export::SUMMARY_TOP {
        let Some(name) = w.get(&format!("top{i}_name")) else {
            continue;
        };
        let e = &want[name];
        let got = (
            w.get(&format!("top{i}_calls")),
            w.get(&format!("top{i}_self_ns")),
            w.get(&format!("top{i}_self_pct")),
        );
        f.check(
            got.0 == Some(&e.calls.to_string())
                && got.1 == Some(&e.self_ns.to_string())
                // To the precision it is logged with (0.1, as the message shows it), or whole.
                && got.2.and_then(|p| p.parse().ok()).is_some_and(|p: f64| {
                    close(p, e.share) || close(p, (e.share * 10.0).round() / 10.0)
                }),
            || {
                format!(
                    "window summary top{i} {name}: (calls, self_ns, self_pct) {got:?}, expected ({}, {}, {:.3})",
                    e.calls, e.self_ns, e.share
                )
            },
        );
    }
}

/// The call trees (console, HTML, folded): the widest leaf path by self time is the hottest
/// name's, and each sampled name's node shows its scaled self time.
fn trees(snap: &Snapshot, want: &HashMap<String, Expected>, hot: &str, f: &mut Findings) {
    let folded = super::Folded.to_string(snap);
    let mut per_name: HashMap<&str, u64> = HashMap::new();
    for line in folded.lines() {
        let (stack, ns) = line.rsplit_once(' ').unwrap();
        let leaf = stack.rsplit(';').next().unwrap();
        *per_name.entry(leaf).or_default() += ns.parse::<u64>().unwrap();
    }
    let widest = per_name.iter().max_by_key(|(_, &ns)| ns).map(|(n, _)| *n);
    f.hottest("folded stacks", widest, hot);
    let tree_text = super::TreeView::new().to_string(snap);
    for (name, e) in want.iter().filter(|(_, e)| e.sampled) {
        f.check(per_name.get(name.as_str()) == Some(&e.self_ns), || {
            format!(
                "folded stacks {name}: {:?} ns, expected {}",
                per_name.get(name.as_str()),
                e.self_ns
            )
        });
        // A name at several paths has a row per path: its total is checked in the folded
        // stacks above.
        let paths = snap
            .tree
            .as_ref()
            .map_or(0, |t| t.nodes.iter().filter(|n| n.name == *name).count());
        if paths != 1 {
            continue;
        }
        let row = tree_text
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{name} ")))
            .unwrap_or("");
        f.check(row.contains(&format!(" {:>9} ", e.self_text())), || {
            format!("tree view {name}: {row:?}, expected self {}", e.self_text())
        });
    }
}

fn check_all(snap: &Snapshot, whole: &Snapshot, summary: bool) -> Vec<String> {
    let (want, all, hot) = expected(snap, whole);
    let mut f = Findings::default();
    table(snap, &want, all, &hot, &mut f);
    markdown(snap, &want, &hot, &mut f);
    html(snap, &want, all, &hot, &mut f);
    #[cfg(feature = "csv")]
    csv(snap, &want, &hot, &mut f);
    #[cfg(feature = "prometheus")]
    prometheus(snap, &want, &hot, &mut f);
    #[cfg(feature = "otlp")]
    otlp(snap, &want, &hot, &mut f);
    if summary {
        summaries(snap, &want, &hot, &mut f);
        trees(snap, &want, &hot, &mut f);
    }
    f.0
}

/// Fails listing every disagreement found.
fn agree(findings: Vec<String>) {
    assert!(
        findings.is_empty(),
        "{} disagreements:\n{}",
        findings.len(),
        findings.join("\n")
    );
}

#[test]
fn every_output_shows_the_same_calls_self_time_share_and_hottest_name() {
    let snap = sampled_golden();
    agree(check_all(&snap, &snap, true));
}

#[test]
fn an_output_filter_keeps_the_same_figures_in_every_output() {
    let whole = sampled_golden();
    let selected = Selection::new()
        .with_name("matmul")
        .with_name("backward")
        .with_name("validate_batch")
        .apply(&whole);
    assert_eq!(selected.spans.len(), 3);
    agree(check_all(&selected, &whole, false));
}

/// A real run: the training example with `RUST_LOG=debug` and the back-off forced
/// (`SPANPROF_MAX_OVERHEAD=0.001`, 3 epochs), which sampled `loss` and `validate_batch` 1 in
/// 1024; the model's `linear` spans are under both passes that enter them.
#[test]
fn a_real_sampled_run_shows_the_same_figures_in_every_output() {
    let snap = Snapshot::from_json(
        include_str!("../../tests/data/training-debug-sampled.json"),
        "training-debug-sampled.json",
    )
    .unwrap();
    let sampled: Vec<_> = snap.spans.iter().filter(|s| s.is_estimate()).collect();
    assert!(sampled.len() >= 2, "the back-off sampled names");
    agree(check_all(&snap, &snap, true));
}

// ---------------------------------------------------------------------------------------------
// GPU time per span (CUDA events).

/// The golden GPU profile (`tests/data/gpu-profile.json`, recorded against the fake CUDA
/// driver by `tests/it/cuda_fake.rs`): `forward` (GPU-bound), `backward` and `grad`
/// (launch-bound) timed on the GPU; `step` and `load_batch` not chosen.
fn gpu_golden() -> Snapshot {
    Snapshot::from_json(
        include_str!("../../tests/data/gpu-profile.json"),
        "gpu-profile.json",
    )
    .unwrap()
}

/// What every output that shows GPU time must show for one span name timed on the GPU.
#[derive(Debug, Clone, Copy)]
struct Gpu {
    calls: u64,
    total_ns: u64,
    /// Per timed entry.
    mean_ns: f64,
    /// Mean GPU time per timed entry over mean busy time per entry, %.
    busy_pct: f64,
}

impl Gpu {
    fn total_text(&self) -> String {
        format_duration(self.total_ns)
    }

    fn mean_text(&self) -> String {
        super::units::format_duration_f64(self.mean_ns)
    }

    fn busy_text(&self) -> String {
        format!("{:.1}%", self.busy_pct)
    }
}

/// Each span name's GPU figures, computed here from its GPU histogram's count and exact total
/// and its busy time (`None`: no entry timed on the GPU, so no GPU figure in any output).
fn gpu_expected(snap: &Snapshot) -> HashMap<String, Option<Gpu>> {
    snap.spans
        .iter()
        .map(|s| {
            let gpu = s.gpu_time.as_ref().filter(|g| g.time.count > 0).map(|g| {
                let mean_ns = g.time.total_ns as f64 / g.time.count as f64;
                let busy_mean = s.entry_busy.total_ns as f64 / s.entry_busy.count as f64;
                Gpu {
                    calls: g.time.count,
                    total_ns: g.time.total_ns,
                    mean_ns,
                    busy_pct: 100.0 * mean_ns / busy_mean,
                }
            });
            (s.name.clone(), gpu)
        })
        .collect()
}

/// The console report's GPU time section: each timed name's calls, total, mean and GPU ÷ busy
/// cells, no row for the others, and each stream's total.
fn gpu_table(snap: &Snapshot, want: &HashMap<String, Option<Gpu>>, f: &mut Findings) {
    let text = Table::new().with_tree(None).to_string(snap);
    let Some(section) = text.split("\nGPU time (CUDA events").nth(1) else {
        f.check(false, || "table: no GPU time section".to_string());
        return;
    };
    let section: Vec<&str> = section.lines().take_while(|l| !l.is_empty()).collect();
    for (name, g) in want {
        let row = section.iter().find(|l| l.starts_with(&format!("{name} ")));
        match (g, row) {
            (None, None) => {}
            (None, Some(row)) => f.check(false, || format!("table GPU row for {name}: {row:?}")),
            (Some(_), None) => f.check(false, || format!("table: no GPU row for {name}")),
            (Some(g), Some(row)) => {
                let cells = format!(
                    " {:>8} {:>8} {:>8} ",
                    super::units::format_count(g.calls),
                    g.total_text(),
                    g.mean_text()
                );
                let busy = format!(" {:>8} ", g.busy_text());
                f.check(row.contains(&cells) && row.contains(&busy), || {
                    format!("table GPU row {row:?}: expected calls, total, mean {cells:?} and gpu/busy {busy:?}")
                });
            }
        }
    }
    let streams = section.join(" ");
    for s in &snap.gpu_streams {
        let item = format!(
            "{} {} ({} calls)",
            s.stream,
            format_duration(s.total_ns),
            s.calls
        );
        f.check(streams.contains(&item), || {
            format!("table streams {streams:?}: expected {item:?}")
        });
    }
}

/// The `<th>` headings of the HTML table `id`.
fn html_heads(html: &str, id: &str) -> Vec<String> {
    let start = html.find(&format!("<table id=\"{id}\">")).unwrap();
    let head = &html[start..];
    let head = &head[..head.find("</thead>").unwrap()];
    head.split("<th ")
        .skip(1)
        .map(|th| {
            let text = th.split_once('>').unwrap().1;
            text.split("</th>").next().unwrap().to_string()
        })
        .collect()
}

/// The HTML page: the table's `gpu`, `gpu mean` and `gpu/busy` cells (text and sort value),
/// `-` for names not timed; the GPU chart's data, none for them.
fn gpu_html(snap: &Snapshot, want: &HashMap<String, Option<Gpu>>, f: &mut Findings) {
    let page = render(&Html, snap);
    let heads = html_heads(&page, "span-table");
    let rows = html_rows(&page, "span-table");
    let col = |label: &str| heads.iter().position(|h| h == label);
    let (Some(total), Some(mean), Some(busy)) = (col("gpu"), col("gpu mean"), col("gpu/busy"))
    else {
        f.check(false, || {
            format!("HTML table: GPU columns missing from {heads:?}")
        });
        return;
    };
    for (name, g) in want {
        let row = rows.iter().find(|r| &r[0].0 == name).unwrap();
        let got = (&row[total], &row[mean], &row[busy]);
        let ok = match g {
            None => [got.0, got.1, got.2].iter().all(|c| c.0 == "-"),
            Some(g) => {
                got.0 .1 == Some(g.total_ns as f64)
                    && got.0 .0 == g.total_text()
                    && got.1 .1.is_some_and(|v| close(v, g.mean_ns))
                    && got.1 .0 == g.mean_text()
                    && got.2 .1.is_some_and(|v| close(v, g.busy_pct))
                    && got.2 .0 == g.busy_text()
            }
        };
        f.check(ok, || {
            format!("HTML table {name}: (gpu, gpu mean, gpu/busy) {got:?}, expected {g:?}")
        });
    }
    let data = chart_data(&page);
    for d in data["spans"].as_array().unwrap() {
        let name = d["name"].as_str().unwrap();
        let (got, g) = (&d["gpu"], want[name]);
        let ok = match g {
            None => got.is_null(),
            Some(g) => {
                got["calls"].as_u64() == Some(g.calls)
                    && got["total_ns"].as_u64() == Some(g.total_ns)
                    && got["mean_ns"].as_f64().is_some_and(|v| close(v, g.mean_ns))
                    && got["busy_pct"]
                        .as_f64()
                        .is_some_and(|v| close(v, g.busy_pct))
                    && got["total_shown"] == g.total_text().as_str()
                    && got["mean_shown"] == g.mean_text().as_str()
                    && got["busy_pct_shown"] == g.busy_text().as_str()
            }
        };
        f.check(ok, || {
            format!("HTML chart data {name}: gpu {got}, expected {g:?}")
        });
    }
}

/// CSV: each row's `gpu_calls`, `gpu_total_ns`, `gpu_mean_ns` and `gpu_busy_pct`, empty for
/// names not timed.
#[cfg(feature = "csv")]
fn gpu_csv(snap: &Snapshot, want: &HashMap<String, Option<Gpu>>, f: &mut Findings) {
    let text = super::Csv::new().to_string(snap).unwrap();
    let mut reader = ::csv::Reader::from_reader(text.as_bytes());
    let head = reader.headers().unwrap().clone();
    let col = |h: &str| head.iter().position(|c| c == h).unwrap();
    let rows: Vec<::csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    for (name, g) in want {
        let row = rows.iter().find(|r| &r[col("name")] == name).unwrap();
        let got = ["gpu_calls", "gpu_total_ns", "gpu_mean_ns", "gpu_busy_pct"]
            .map(|c| row[col(c)].to_string());
        let ok = match g {
            None => got.iter().all(String::is_empty),
            Some(g) => {
                let num = |i: usize| got[i].parse::<f64>().ok();
                got[0] == g.calls.to_string()
                    && got[1] == g.total_ns.to_string()
                    && num(2).is_some_and(|v| close(v, g.mean_ns))
                    && num(3).is_some_and(|v| close(v, g.busy_pct))
            }
        };
        f.check(ok, || {
            format!("CSV {name}: (gpu_calls, gpu_total_ns, gpu_mean_ns, gpu_busy_pct) {got:?}, expected {g:?}")
        });
    }
}

/// The Prometheus text: each timed name's GPU calls and time counters, GPU ÷ busy ratio, and
/// the GPU histogram's count and sum (its mean); no sample for the others; each stream's total.
#[cfg(feature = "prometheus")]
fn gpu_prometheus(snap: &Snapshot, want: &HashMap<String, Option<Gpu>>, f: &mut Findings) {
    let text = super::Prometheus::new().to_string(snap);
    for (name, g) in want {
        let got = [
            "spanprof_span_gpu_calls_total",
            "spanprof_span_gpu_time_seconds_total",
            "spanprof_span_gpu_busy_ratio",
            "spanprof_span_gpu_seconds_count",
            "spanprof_span_gpu_seconds_sum",
        ]
        .map(|family| prometheus_value(&text, family, name));
        let ok = match g {
            None => got.iter().all(Option::is_none),
            Some(g) => {
                let seconds = g.total_ns as f64 / 1e9;
                got[0] == Some(g.calls as f64)
                    && got[1].is_some_and(|s| close(s, seconds))
                    && got[2].is_some_and(|r| close(r, g.busy_pct / 100.0))
                    && got[3] == Some(g.calls as f64)
                    && got[4].is_some_and(|s| close(s, seconds))
                    && got[3]
                        .zip(got[4])
                        .is_some_and(|(n, s)| close(s / n * 1e9, g.mean_ns))
            }
        };
        f.check(ok, || {
            format!("Prometheus {name}: (calls, time s, busy ratio, histogram count, sum) {got:?}, expected {g:?}")
        });
    }
    for s in &snap.gpu_streams {
        let prefix = format!(
            "spanprof_gpu_stream_seconds_total{{stream=\"{}\"}} ",
            s.stream
        );
        let got: Option<f64> = text
            .lines()
            .find_map(|l| l.strip_prefix(&prefix)?.parse().ok());
        f.check(
            got.is_some_and(|v| close(v, s.total_ns as f64 / 1e9)),
            || {
                format!(
                    "Prometheus stream {}: {got:?}, expected {} ns",
                    s.stream, s.total_ns
                )
            },
        );
    }
}

/// The OTLP request: each timed name's `spanprof.span.gpu_calls`, `.gpu_time` (seconds),
/// `.gpu_busy` (0 to 1) and the `spanprof.span.gpu` histogram's count and sum (its mean); no
/// data point for the others.
#[cfg(feature = "otlp")]
fn gpu_otlp(snap: &Snapshot, want: &HashMap<String, Option<Gpu>>, f: &mut Findings) {
    let metrics = otlp_metrics(snap);
    for (name, g) in want {
        let got = [
            "spanprof.span.gpu_calls",
            "spanprof.span.gpu_time",
            "spanprof.span.gpu_busy",
        ]
        .map(|metric| otlp_value(&metrics, metric, name));
        let histogram = otlp_point(&metrics, "spanprof.span.gpu", name);
        let ok = match g {
            None => got.iter().all(Option::is_none) && histogram.is_none(),
            Some(g) => {
                let seconds = g.total_ns as f64 / 1e9;
                got[0] == Some(g.calls as f64)
                    && got[1].is_some_and(|s| close(s, seconds))
                    && got[2].is_some_and(|r| close(r, g.busy_pct / 100.0))
                    && histogram.is_some_and(|(n, sum)| {
                        n == g.calls as f64
                            && sum
                                .is_some_and(|s| close(s, seconds) && close(s / n * 1e9, g.mean_ns))
                    })
            }
        };
        f.check(ok, || {
            format!("OTLP {name}: (gpu calls, gpu time s, gpu busy ratio) {got:?}, histogram (count, sum) {histogram:?}, expected {g:?}")
        });
    }
}

/// The JSON profile read back, and the call tree: each name's GPU calls and total summed over
/// its paths, and the tree view's `gpu` cell of a name at one path.
fn gpu_json_and_tree(snap: &Snapshot, want: &HashMap<String, Option<Gpu>>, f: &mut Findings) {
    let back = Snapshot::from_json(&render(&super::Json, snap), "written").unwrap();
    let tree = back.tree.as_ref().unwrap();
    let tree_text = super::TreeView::new().to_string(&back);
    for (name, g) in want {
        let s = back.span(name).unwrap();
        let json = s
            .gpu_time
            .as_ref()
            .map(|t| (t.time.count, t.time.total_ns, t.time.mean_ns));
        f.check(
            match g {
                None => json.map_or(true, |j| j.0 == 0),
                Some(g) => json
                    .is_some_and(|j| j.0 == g.calls && j.1 == g.total_ns && close(j.2, g.mean_ns)),
            },
            || format!("JSON {name}: (calls, total, mean) {json:?}, expected {g:?}"),
        );
        let nodes: Vec<_> = tree.nodes.iter().filter(|n| n.name == *name).collect();
        let summed = nodes
            .iter()
            .fold((0, 0), |(c, t), n| (c + n.gpu_calls, t + n.gpu_ns));
        let expected = g.map_or((0, 0), |g| (g.calls, g.total_ns));
        f.check(summed == expected, || {
            format!(
                "tree {name}: (gpu calls, gpu ns) over its paths {summed:?}, expected {expected:?}"
            )
        });
        if let (Some(g), [_]) = (g, &nodes[..]) {
            let row = tree_text
                .lines()
                .find(|l| l.trim_start().starts_with(&format!("{name} ")))
                .unwrap_or("");
            let cell = format!(" {:>9}", g.total_text());
            f.check(row.ends_with(&cell), || {
                format!("tree view {name}: {row:?}, expected gpu {cell:?}")
            });
        }
    }
}

fn check_gpu(snap: &Snapshot) -> Vec<String> {
    let want = gpu_expected(snap);
    let mut f = Findings::default();
    gpu_table(snap, &want, &mut f);
    gpu_html(snap, &want, &mut f);
    #[cfg(feature = "csv")]
    gpu_csv(snap, &want, &mut f);
    #[cfg(feature = "prometheus")]
    gpu_prometheus(snap, &want, &mut f);
    #[cfg(feature = "otlp")]
    gpu_otlp(snap, &want, &mut f);
    gpu_json_and_tree(snap, &want, &mut f);
    f.0
}

#[test]
fn every_output_that_shows_gpu_time_shows_the_same_gpu_figures() {
    let snap = gpu_golden();
    let want = gpu_expected(&snap);
    let timed = want.values().filter(|g| g.is_some()).count();
    assert_eq!((timed, want.len()), (3, 5), "{want:?}");
    agree(check_gpu(&snap));
    // The outputs of time per span agree on it too.
    agree(check_all(&snap, &snap, true));
}

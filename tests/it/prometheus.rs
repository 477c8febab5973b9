//! The Prometheus exposition: every value against the profile it came from (bucket counts at
//! every `le`, sums, counters, throughput, resource gauges), label escaping, the file in the
//! output directory, and `promtool check metrics`.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use spanprof::output::{Format, Prometheus, METRICS_FILE};
use spanprof::profile::buckets::export_bounds_ns;
use spanprof::profile::{SpanStats, Stat};
use spanprof::{ProfileLayer, Snapshot};

/// A span name with every character the text format escapes in label values.
const TRICKY: &str = "tricky \"name\" \\ with\nnewline";

/// One sample line: metric name, labels, value.
#[derive(Debug, Clone, PartialEq)]
struct Line {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Parses the sample lines of an exposition (comments skipped), unescaping label values.
fn parse(text: &str) -> Vec<Line> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|line| {
            let (name, rest) = match line.find('{') {
                Some(i) => (&line[..i], &line[i + 1..]),
                None => {
                    let (name, value) = line.split_once(' ').unwrap();
                    return Line {
                        name: name.to_string(),
                        labels: BTreeMap::new(),
                        value: value.parse().unwrap(),
                    };
                }
            };
            let mut labels = BTreeMap::new();
            let mut chars = rest.chars();
            loop {
                let key: String = chars.by_ref().take_while(|&c| c != '=').collect();
                assert_eq!(chars.next(), Some('"'), "{line}");
                let mut value = String::new();
                loop {
                    match chars.next().unwrap() {
                        '\\' => match chars.next().unwrap() {
                            'n' => value.push('\n'),
                            c => value.push(c),
                        },
                        '"' => break,
                        c => value.push(c),
                    }
                }
                labels.insert(key, value);
                match chars.next().unwrap() {
                    ',' => continue,
                    '}' => break,
                    c => panic!("unexpected {c:?} in {line}"),
                }
            }
            let value: String = chars.collect();
            Line {
                name: name.to_string(),
                labels,
                value: value.trim().parse().unwrap(),
            }
        })
        .collect()
}

/// The lines of metric `name` for span `s`.
fn of<'a>(lines: &'a [Line], name: &str, s: &SpanStats) -> Vec<&'a Line> {
    lines
        .iter()
        .filter(|l| {
            l.name == name
                && l.labels.get("span") == Some(&s.name)
                && l.labels.get("target") == Some(&s.target)
        })
        .collect()
}

/// The one value of metric `name` for span `s`.
fn value(lines: &[Line], name: &str, s: &SpanStats) -> f64 {
    let found = of(lines, name, s);
    assert_eq!(found.len(), 1, "{name} for {:?}: {found:?}", s.name);
    found[0].value
}

/// A run on a mock clock: entries spread over the bucket bounds, throughput fields, an error,
/// a span entered twice per instance, and a name that needs escaping.
fn profile() -> Snapshot {
    let (dispatch, guard, clock) = support::mock();
    tracing::dispatcher::with_default(&dispatch, || {
        for ns in [
            500,
            1_000,
            1_003,
            1_004,
            2_600,
            999_000,
            7_000_000,
            3_000_000_000,
            200_000_000_000,
        ] {
            tracing::info_span!("step").in_scope(|| {
                clock.advance(Duration::from_nanos(ns / 2));
                tracing::info_span!("load", items = 32u64, bytes = 4096u64).in_scope(|| {
                    clock.advance(Duration::from_nanos(ns - ns / 2));
                });
            });
        }
        tracing::info_span!("fails").in_scope(|| tracing::error!("bad batch"));
        let task = tracing::info_span!("task");
        for _ in 0..2 {
            task.in_scope(|| clock.advance(Duration::from_micros(40)));
            clock.advance(Duration::from_micros(100));
        }
        drop(task);
        tracing::info_span!(TRICKY).in_scope(|| clock.advance(Duration::from_micros(3)));
    });
    guard.snapshot()
}

fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// Checks a histogram family of span `s` against `stat`: a bucket at every export bound with
/// the histogram's count at or below it, `+Inf` = count, `_sum` = total, `_count` = count.
fn check_histogram(lines: &[Line], family: &str, s: &SpanStats, stat: &Stat) {
    let buckets = of(lines, &format!("{family}_bucket"), s);
    let bounds = export_bounds_ns();
    assert_eq!(buckets.len(), bounds.len() + 1, "{family} {:?}", s.name);
    let mut previous = 0.0;
    for (bucket, &le) in buckets.iter().zip(bounds) {
        assert_eq!(
            bucket.labels["le"].parse::<f64>().unwrap(),
            seconds(le),
            "{family} {:?}: le {}",
            s.name,
            bucket.labels["le"]
        );
        assert_eq!(
            bucket.value,
            stat.histogram.count_at_or_below(le) as f64,
            "{family} {:?} le {le} ns",
            s.name
        );
        assert!(bucket.value >= previous, "cumulative counts are monotonic");
        previous = bucket.value;
    }
    let inf = buckets.last().unwrap();
    assert_eq!(inf.labels["le"], "+Inf");
    assert_eq!(inf.value, stat.count as f64);
    assert_eq!(
        value(lines, &format!("{family}_sum"), s),
        seconds(stat.total_ns)
    );
    assert_eq!(
        value(lines, &format!("{family}_count"), s),
        stat.count as f64
    );
}

#[test]
fn histograms_counters_and_throughput_are_the_profiles() {
    let snap = profile();
    let text = Prometheus::new().to_string(&snap);
    let lines = parse(&text);
    let step = support::span(&snap, "step");
    // The bounds split the entries: the test would see a wrong bucket.
    let counts = step
        .entry_busy
        .histogram
        .cumulative_counts(export_bounds_ns());
    assert_eq!(step.entry_busy.count, 9);
    assert_eq!(
        (counts[0], counts[1], counts[9], counts[24]),
        (3, 4, 6, 8),
        "{counts:?}"
    );
    for s in &snap.spans {
        check_histogram(&lines, "spanprof_span_busy_seconds", s, &s.entry_busy);
        check_histogram(&lines, "spanprof_span_self_seconds", s, &s.entry_self);
        assert_eq!(
            value(&lines, "spanprof_span_calls_total", s),
            s.calls as f64
        );
        assert_eq!(
            value(&lines, "spanprof_span_instances_total", s),
            s.instances as f64
        );
        assert_eq!(
            value(&lines, "spanprof_span_errors_total", s),
            s.errors as f64
        );
        // Instance wall time only where instances are not one entry each.
        let wall = of(&lines, "spanprof_span_instance_wall_seconds_count", s);
        assert_eq!(
            wall.len(),
            usize::from(s.calls != s.instances),
            "{:?}",
            s.name
        );
    }
    assert_eq!(value(&lines, "spanprof_span_calls_total", step), 9.0);
    assert_eq!(
        value(&lines, "spanprof_span_self_seconds_sum", step),
        seconds(step.entry_self.total_ns)
    );
    let task = support::span(&snap, "task");
    assert_eq!((task.calls, task.instances), (2, 1));
    check_histogram(
        &lines,
        "spanprof_span_instance_wall_seconds",
        task,
        &task.wall,
    );
    assert_eq!(task.wall.total_ns, 280_000);
    let fails = support::span(&snap, "fails");
    assert_eq!(value(&lines, "spanprof_span_errors_total", fails), 1.0);
    let load = support::span(&snap, "load");
    assert_eq!(value(&lines, "spanprof_span_items_total", load), 9.0 * 32.0);
    assert_eq!(
        value(&lines, "spanprof_span_bytes_total", load),
        9.0 * 4096.0
    );
    assert_eq!(
        value(&lines, "spanprof_span_items_per_second", load),
        load.rate(load.items).unwrap()
    );
    assert!(of(&lines, "spanprof_span_items_total", step).is_empty());
    assert_eq!(
        lines
            .iter()
            .find(|l| l.name == "spanprof_run_duration_seconds")
            .unwrap()
            .value,
        seconds(snap.run.duration_ns)
    );
}

#[test]
fn label_values_are_escaped_and_read_back() {
    let snap = profile();
    let text = Prometheus::new().to_string(&snap);
    assert!(
        text.contains(r#"span="tricky \"name\" \\ with\nnewline""#),
        "{text}"
    );
    let lines = parse(&text);
    let tricky = support::span(&snap, TRICKY);
    assert_eq!(value(&lines, "spanprof_span_calls_total", tricky), 1.0);
    check_histogram(
        &lines,
        "spanprof_span_busy_seconds",
        tricky,
        &tricky.entry_busy,
    );
}

#[test]
fn resource_gauges_are_the_latest_readings() {
    let snap = Snapshot::from_json(
        include_str!("../data/profile-v2-detailed.json"),
        "profile-v2-detailed.json",
    )
    .unwrap();
    let lines = parse(&Prometheus::new().to_string(&snap));
    let info = snap.resources.as_ref().unwrap();
    let last = info.timeline.last().unwrap();
    let gauge = |name: &str| {
        let found: Vec<_> = lines.iter().filter(|l| l.name == name).collect();
        assert_eq!(found.len(), 1, "{name}");
        found[0].value
    };
    assert_eq!(
        gauge("spanprof_process_resident_memory_bytes"),
        last.rss_bytes.unwrap() as f64
    );
    assert_eq!(
        gauge("spanprof_process_heap_bytes"),
        last.heap_bytes.unwrap() as f64
    );
    assert_eq!(
        gauge("spanprof_process_cpu_cores"),
        f64::from(last.process_cpu_pct.unwrap()) / 100.0
    );
    assert_eq!(
        gauge("spanprof_process_resident_memory_max_bytes"),
        info.peak_rss_bytes.unwrap() as f64
    );
    assert_eq!(
        gauge("spanprof_run_start_time_seconds"),
        seconds(snap.run.start_unix_ns)
    );
    for s in &snap.spans {
        let cpu = s.resources.as_ref().unwrap().cpu.as_ref().unwrap();
        assert_eq!(
            value(&lines, "spanprof_span_cpu_seconds_total", s),
            seconds(cpu.cpu_ns)
        );
    }
    // No GPU and no energy in this profile: no such series, rather than zeros.
    assert!(!lines.iter().any(|l| l.name.starts_with("spanprof_gpu_")));
    assert!(!lines.iter().any(|l| l.name.contains("energy")));
}

/// `promtool check metrics` on `text`: `None` when promtool is absent (the caller skips).
fn promtool(text: &str) -> Option<(bool, String)> {
    use std::io::Write;
    let mut child = match std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            eprintln!("SKIPPED: promtool not found ({e}); install Debian's `prometheus` package");
            return None;
        }
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some((out.status.success(), said))
}

#[test]
fn promtool_accepts_the_exposition_without_a_complaint() {
    let detailed = Snapshot::from_json(
        include_str!("../data/profile-v2-detailed.json"),
        "profile-v2-detailed.json",
    )
    .unwrap();
    for (what, snap) in [
        ("mock-clock run", profile()),
        ("detailed profile", detailed),
    ] {
        let text = Prometheus::new().to_string(&snap);
        let Some((ok, said)) = promtool(&text) else {
            return;
        };
        assert!(
            ok && said.is_empty(),
            "promtool on the {what}: {said}\n{text}"
        );
    }
}

#[test]
fn the_output_directory_gets_metrics_prom_from_the_final_profile() {
    let dir = support::temp_dir("metrics-prom");
    let (dispatch, guard) = support::install(ProfileLayer::builder().with_output_dir(&dir));
    tracing::dispatcher::with_default(&dispatch, || {
        for _ in 0..4 {
            tracing::info_span!("work").in_scope(|| {});
        }
    });
    let outputs = guard.finish().unwrap();
    assert_eq!(
        outputs.file("prometheus"),
        Some(dir.join(METRICS_FILE).as_path())
    );
    let written = std::fs::read_to_string(dir.join(METRICS_FILE)).unwrap();
    // The same bytes as the exposition of the profile written beside it.
    let profile = Snapshot::read_json(outputs.profile().unwrap()).unwrap();
    let mut rendered = Vec::new();
    Prometheus::new().render(&profile, &mut rendered).unwrap();
    assert_eq!(written, String::from_utf8(rendered).unwrap());
    let lines = parse(&written);
    let work = support::span(&profile, "work");
    assert_eq!(value(&lines, "spanprof_span_calls_total", work), 4.0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn gpu_readings_are_gauges_per_device() {
    use spanprof::gpu::GpuSample;
    let reading = GpuSample {
        utilization_pct: Some(60),
        memory_used_bytes: Some(8 << 30),
        power_mw: Some(150_000),
        temperature_c: Some(55),
        sm_clock_mhz: Some(1_410),
        ..GpuSample::default()
    };
    let snap = support::gpu_kernel_profile(reading);
    let text = Prometheus::new().to_string(&snap);
    let lines = parse(&text);
    let gpu = |name: &str| {
        let found: Vec<_> = lines
            .iter()
            .filter(|l| l.name == name && l.labels.get("gpu").map(String::as_str) == Some("0"))
            .collect();
        assert_eq!(found.len(), 1, "{name}\n{text}");
        found[0].value
    };
    let last = snap.resources.as_ref().unwrap().timeline.last().unwrap();
    let g = &last.gpus[0];
    assert_eq!(gpu("spanprof_gpu_utilization_ratio"), 0.6);
    assert_eq!(gpu("spanprof_gpu_memory_used_bytes"), (8u64 << 30) as f64);
    assert_eq!(gpu("spanprof_gpu_power_watts"), 150.0);
    assert_eq!(gpu("spanprof_gpu_temperature_celsius"), 55.0);
    assert_eq!(gpu("spanprof_gpu_sm_clock_hertz"), 1.41e9);
    let energy = g.energy_mj.expect("integrated from power");
    assert!(energy > 0);
    assert_eq!(gpu("spanprof_gpu_energy_joules_total"), energy as f64 / 1e3);
    let kernel = support::span(&snap, "kernel");
    let joules = kernel.resources.as_ref().unwrap().energy_j.unwrap();
    assert_eq!(
        value(&lines, "spanprof_span_energy_joules_total", kernel),
        joules
    );
    if let Some((ok, said)) = promtool(&text) {
        assert!(ok && said.is_empty(), "promtool: {said}\n{text}");
    }
}

/// The family names of the event metrics, by field (`histogram.x`), read from the `# HELP`
/// lines (each names its field), with each family's type.
fn event_families(text: &str) -> BTreeMap<String, (String, String)> {
    let types: BTreeMap<&str, &str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .collect();
    text.lines()
        .filter_map(|l| l.strip_prefix("# HELP spanprof_metric_"))
        .filter(|l| !l.contains("the smallest") && !l.contains("the largest"))
        .map(|l| {
            let (name, help) = l.split_once(' ').unwrap();
            let field = help.split('`').nth(1).unwrap().to_string();
            let name = format!("spanprof_metric_{name}");
            let kind = types[name.as_str()].to_string();
            (field, (name, kind))
        })
        .collect()
}

/// Events with metric fields of every kind, units, names that need sanitizing and two that
/// sanitize alike, on a mock clock.
fn metrics_profile() -> Snapshot {
    let (dispatch, guard, _clock) = support::mock();
    tracing::dispatcher::with_default(&dispatch, || {
        tracing::info_span!("step").in_scope(|| {
            for (i, bytes) in [100u64, 1_000, 5_000, 70_000].into_iter().enumerate() {
                tracing::info!(
                    monotonic_counter.requests_total = 3u64,
                    counter.queue = if i % 2 == 0 { 5i64 } else { -2i64 },
                    histogram.batch_bytes = bytes,
                    histogram.step_milliseconds = [0.5, 2.0, 120.0, 7.25][i],
                    gauge.hit_percent = [50.0, 20.0, 90.0, 60.0][i],
                    gauge.queueLength = i as u64,
                );
            }
            tracing::info!(gauge.hit.rate = 0.5, gauge.hit_rate = 0.75);
        });
        tracing::info_span!(TRICKY).in_scope(|| tracing::info!(histogram.batch_bytes = 7u64));
        // Outside every span: no span label.
        tracing::info!(monotonic_counter.requests_total = 2u64);
    });
    guard.snapshot()
}

fn event_metric<'a>(
    snap: &'a Snapshot,
    name: &str,
    span: Option<&str>,
) -> &'a spanprof::profile::Metric {
    snap.metrics
        .iter()
        .find(|m| m.name == name && m.span.as_deref() == span)
        .unwrap_or_else(|| panic!("no metric {name} in {span:?}: {:?}", snap.metrics))
}

/// The one sample of `name` labelled with `span` (none: no `span` label).
fn metric_value(lines: &[Line], name: &str, span: Option<&str>) -> f64 {
    let found: Vec<_> = lines
        .iter()
        .filter(|l| l.name == name && l.labels.get("span").map(String::as_str) == span)
        .collect();
    assert_eq!(found.len(), 1, "{name} {span:?}: {found:?}");
    found[0].value
}

#[test]
fn event_metrics_are_families_named_by_convention() {
    use spanprof::profile::MetricValue;
    let snap = metrics_profile();
    let text = Prometheus::new().to_string(&snap);
    let lines = parse(&text);
    let families = event_families(&text);
    let family = |field: &str| families[field].0.clone();
    let kind = |field: &str| families[field].1.clone();
    // Names: `_total` once for counters, units in base units, snake case, odd characters
    // replaced, and two names sanitized alike kept apart.
    assert_eq!(
        family("monotonic_counter.requests_total"),
        "spanprof_metric_requests_total"
    );
    assert_eq!(kind("monotonic_counter.requests_total"), "counter");
    assert_eq!(family("counter.queue"), "spanprof_metric_queue");
    assert_eq!(kind("counter.queue"), "gauge");
    assert_eq!(
        family("histogram.batch_bytes"),
        "spanprof_metric_batch_bytes"
    );
    assert_eq!(kind("histogram.batch_bytes"), "histogram");
    assert_eq!(
        family("histogram.step_milliseconds"),
        "spanprof_metric_step_seconds"
    );
    assert_eq!(family("gauge.hit_percent"), "spanprof_metric_hit_ratio");
    assert_eq!(family("gauge.queueLength"), "spanprof_metric_queue_length");
    assert_eq!(family("gauge.hit.rate"), "spanprof_metric_hit_rate");
    assert_eq!(family("gauge.hit_rate"), "spanprof_metric_hit_rate_2");

    // Counters: the sums, in the span and outside every span; gauges: last, min, max, percent
    // as a ratio.
    for (name, span, want) in [
        ("spanprof_metric_requests_total", Some("step"), 12.0),
        ("spanprof_metric_requests_total", None, 2.0),
        ("spanprof_metric_queue", Some("step"), 6.0),
        ("spanprof_metric_hit_ratio", Some("step"), 0.6),
        ("spanprof_metric_hit_min_ratio", Some("step"), 0.2),
        ("spanprof_metric_hit_max_ratio", Some("step"), 0.9),
        ("spanprof_metric_queue_length", Some("step"), 3.0),
        ("spanprof_metric_hit_rate", Some("step"), 0.5),
        ("spanprof_metric_hit_rate_2", Some("step"), 0.75),
    ] {
        assert_eq!(metric_value(&lines, name, span), want, "{name} {span:?}");
    }

    // Histograms: `_count`, `_sum` and every bucket against the profile's buckets.
    for (field, name, factor, span) in [
        ("batch_bytes", "spanprof_metric_batch_bytes", 1.0, "step"),
        ("batch_bytes", "spanprof_metric_batch_bytes", 1.0, TRICKY),
        (
            "step_milliseconds",
            "spanprof_metric_step_seconds",
            1e-3,
            "step",
        ),
    ] {
        let m = event_metric(&snap, field, Some(span));
        let MetricValue::Histogram(h) = &m.value else {
            panic!("{m:?}")
        };
        let (stat, scale) = match (&h.integers, &h.floats) {
            (Some(s), None) => (s, 1.0),
            (None, Some(s)) => (s, 1e9),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            metric_value(&lines, &format!("{name}_count"), Some(span)),
            h.count() as f64
        );
        let sum = metric_value(&lines, &format!("{name}_sum"), Some(span));
        assert!(
            (sum - h.mean() * h.count() as f64 * factor).abs() <= 1e-12 * sum.abs(),
            "{sum}"
        );
        let buckets: Vec<_> = lines
            .iter()
            .filter(|l| l.name == format!("{name}_bucket") && l.labels["span"] == span)
            .collect();
        assert!(buckets.len() >= 4, "{name} {span:?}: {buckets:?}");
        let mut previous = 0.0;
        for b in &buckets {
            let count = match b.labels["le"].as_str() {
                "+Inf" => stat.count,
                le => {
                    // The bound is the top of an HDR bucket in the values' scale: the count
                    // at it is the histogram's.
                    let le = le.parse::<f64>().unwrap() / factor * scale;
                    let top = le.round() as u64;
                    assert!((le - top as f64).abs() < 1e-3 * le.max(1.0), "{le}");
                    assert_eq!(spanprof::profile::buckets::bucket_top(top), top);
                    stat.histogram.count_at_or_below(top)
                }
            };
            assert_eq!(b.value, count as f64, "{name} {span:?} {b:?}");
            assert!(b.value >= previous);
            previous = b.value;
        }
        assert_eq!(buckets.last().unwrap().labels["le"], "+Inf");
    }
    // The bounds split the values: a wrong bucket would show.
    let steps: Vec<f64> = lines
        .iter()
        .filter(|l| l.name == "spanprof_metric_step_seconds_bucket")
        .map(|l| l.value)
        .collect();
    assert!(
        steps.contains(&1.0) && steps.contains(&2.0) && steps.contains(&3.0),
        "{steps:?}"
    );

    // Label values escaped, and promtool silent about the whole exposition.
    assert!(text.contains(r#"span="tricky \"name\" \\ with\nnewline""#));
    if let Some((ok, said)) = promtool(&text) {
        assert!(ok && said.is_empty(), "promtool: {said}\n{text}");
    }
}

#[test]
fn overhead_and_backoff_are_gauges_and_counters() {
    let snap = support::run_with(ProfileLayer::builder(), || {
        for _ in 0..50 {
            tracing::info_span!("work").in_scope(|| {});
        }
    });
    let overhead = snap.overhead.clone().expect("a real clock is calibrated");
    // Back-off steps, as a profile read back holds them.
    let mut json: serde_json::Value = serde_json::from_str(&snap.to_json()).unwrap();
    json["backoff"] = serde_json::json!([
        {"at_ns": 1000, "on": false, "resources": ["cpu", "heap"], "overhead_pct": 7.5},
        {"at_ns": 9000, "on": true, "resources": ["heap"], "overhead_pct": 0.5},
    ]);
    let snap = Snapshot::from_json(&json.to_string(), "backoff.json").unwrap();
    let text = Prometheus::new().to_string(&snap);
    let lines = parse(&text);
    let global = |name: &str, labels: &[(&str, &str)]| {
        let found: Vec<_> = lines
            .iter()
            .filter(|l| {
                l.name == name
                    && l.labels.len() == labels.len()
                    && labels
                        .iter()
                        .all(|(k, v)| l.labels.get(*k).map(String::as_str) == Some(v))
            })
            .collect();
        assert_eq!(found.len(), 1, "{name} {labels:?}\n{text}");
        found[0].value
    };
    assert_eq!(
        global("spanprof_overhead_ratio", &[]),
        overhead.percent / 100.0
    );
    assert_eq!(
        global("spanprof_overhead_estimated_seconds_total", &[]),
        seconds(overhead.estimated_ns)
    );
    assert_eq!(
        global("spanprof_overhead_readings_seconds_total", &[]),
        seconds(overhead.readings_ns)
    );
    assert_eq!(
        global("spanprof_overhead_span_cost_seconds", &[]),
        overhead.span_cost_ns / 1e9
    );
    if let Some(cpu) = overhead.process_cpu_ns {
        assert_eq!(
            global("spanprof_process_cpu_seconds_total", &[]),
            seconds(cpu)
        );
    }
    let work = support::span(&snap, "work");
    assert_eq!(
        value(&lines, "spanprof_span_overhead_seconds_total", work),
        seconds(work.overhead_ns.unwrap())
    );
    assert!(work.overhead_ns.unwrap() > 0);
    assert_eq!(
        global("spanprof_backoff_steps_total", &[("direction", "off")]),
        1.0
    );
    assert_eq!(
        global("spanprof_backoff_steps_total", &[("direction", "on")]),
        1.0
    );
    assert_eq!(
        global("spanprof_backoff_reading_off", &[("resource", "cpu")]),
        1.0
    );
    assert_eq!(
        global("spanprof_backoff_reading_off", &[("resource", "heap")]),
        0.0
    );
    if let Some((ok, said)) = promtool(&text) {
        assert!(ok && said.is_empty(), "promtool: {said}\n{text}");
    }
    // Without the estimate (a mock clock) or steps: no such series, rather than zeros.
    let plain = Prometheus::new().to_string(&profile());
    assert!(!plain.contains("spanprof_overhead_"), "{plain}");
    assert!(!plain.contains("spanprof_backoff_"), "{plain}");
}

/// Polls `done` until it holds; panics after a generous bound (a wait, not a timing).
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "waited 60 s for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn metrics_prom_is_rewritten_at_each_window_of_the_cadence() {
    let dir = support::temp_dir("metrics-prom-periodic");
    let (dispatch, guard) = support::install(
        ProfileLayer::builder()
            .with_output_dir(&dir)
            .with_every(spanprof::Every::Steps(3))
            .with_step_span("train_step")
            // The output filter holds for the file at every window, not only at the end.
            .with_output_filter("train_*".parse().unwrap()),
    );
    let file = dir.join(METRICS_FILE);
    let calls = |file: &std::path::Path| {
        let text = std::fs::read_to_string(file).ok()?;
        parse(&text)
            .into_iter()
            .find(|l| {
                l.name == "spanprof_span_calls_total"
                    && l.labels.get("span").map(String::as_str) == Some("train_step")
            })
            .map(|l| l.value)
    };
    assert_eq!(calls(&file), None, "nothing before the first window");
    tracing::dispatcher::with_default(&dispatch, || {
        for window in 1..=3u32 {
            for _ in 0..3 {
                tracing::info_span!("train_step").in_scope(|| {});
                tracing::info_span!("left_out").in_scope(|| {});
            }
            // Each window's file holds the steps so far (the window is taken after the
            // third close, so exactly 3 × window).
            wait_until("metrics.prom of the window", || {
                calls(&file) == Some(f64::from(3 * window))
            });
            let text = std::fs::read_to_string(&file).unwrap();
            assert!(!text.contains(r#"span="left_out""#), "{text}");
        }
    });
    let outputs = guard.finish().unwrap();
    assert_eq!(calls(&file), Some(9.0));
    assert!(!std::fs::read_to_string(&file)
        .unwrap()
        .contains(r#"span="left_out""#));
    assert_eq!(outputs.file("prometheus"), Some(file.as_path()));
    let _ = std::fs::remove_dir_all(&dir);
}

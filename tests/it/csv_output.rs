//! `report.csv`: every cell against the profile it came from, read back with the `csv` crate's
//! reader; names with commas, quotes and newlines round-trip; units in the headers.

use crate::support;

use std::collections::HashMap;
use std::time::Duration;

use spanprof::output::{Csv, CsvMetrics, Format, CSV_FILE, METRICS_CSV_FILE};
use spanprof::profile::SpanStats;
use spanprof::{ProfileLayer, Snapshot};

/// Names the CSV must quote.
const COMMAS: &str = "load, parse";
const QUOTES: &str = "say \"hi\"";
const NEWLINE: &str = "two\nlines, \"both\"";

/// The rows of a CSV report, each as header → cell.
fn rows(text: &str) -> (Vec<String>, Vec<HashMap<String, String>>) {
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let headers: Vec<String> = reader
        .headers()
        .unwrap()
        .iter()
        .map(str::to_string)
        .collect();
    let rows = reader
        .records()
        .map(|r| {
            let r = r.unwrap();
            assert_eq!(r.len(), headers.len());
            headers
                .iter()
                .cloned()
                .zip(r.iter().map(str::to_string))
                .collect()
        })
        .collect();
    (headers, rows)
}

fn num(row: &HashMap<String, String>, column: &str) -> f64 {
    row[column]
        .parse()
        .unwrap_or_else(|e| panic!("{column} = {:?}: {e}", row[column]))
}

fn profile() -> Snapshot {
    let (dispatch, guard, clock) = support::mock();
    tracing::dispatcher::with_default(&dispatch, || {
        for (i, name_us) in [3u64, 5, 8].into_iter().enumerate() {
            tracing::info_span!("step").in_scope(|| {
                clock.advance(Duration::from_micros(name_us));
                tracing::info_span!(COMMAS, items = 10u64 * (i as u64 + 1)).in_scope(|| {
                    clock.advance(Duration::from_micros(20));
                });
            });
        }
        tracing::info_span!(QUOTES).in_scope(|| {
            clock.advance(Duration::from_micros(50));
            tracing::error!("oops");
        });
        tracing::info_span!(NEWLINE).in_scope(|| clock.advance(Duration::from_micros(7)));
        let task = tracing::info_span!("task");
        for _ in 0..3 {
            task.in_scope(|| clock.advance(Duration::from_micros(4)));
            clock.advance(Duration::from_micros(10));
        }
    });
    guard.snapshot()
}

/// The columns every row shares with the snapshot's figures.
fn check_row(row: &HashMap<String, String>, s: &SpanStats) {
    let ints: [(&str, u64); 17] = [
        ("calls", s.calls),
        ("instances", s.instances),
        ("open", s.open),
        ("errors", s.errors),
        ("errored_instances", s.errored_instances),
        ("total_ns", s.entry_busy.total_ns),
        ("self_ns", s.entry_self.total_ns),
        ("min_ns", s.entry_busy.min_ns),
        ("p50_ns", s.entry_busy.p50_ns),
        ("p90_ns", s.entry_busy.p90_ns),
        ("p99_ns", s.entry_busy.p99_ns),
        ("p999_ns", s.entry_busy.p999_ns),
        ("max_ns", s.entry_busy.max_ns),
        ("self_p50_ns", s.entry_self.p50_ns),
        ("wall_total_ns", s.wall.total_ns),
        ("wall_p99_ns", s.wall.p99_ns),
        ("in_progress_ns", s.in_progress_ns),
    ];
    for (column, want) in ints {
        assert_eq!(row[column], want.to_string(), "{column} of {:?}", s.name);
    }
    assert_eq!(num(row, "mean_ns"), s.entry_busy.mean_ns, "{:?}", s.name);
    assert_eq!(num(row, "stddev_ns"), s.entry_busy.stddev_ns);
    match s.items {
        Some(items) => {
            assert_eq!(row["items"], items.to_string());
            assert_eq!(num(row, "items_per_s"), s.rate(s.items).unwrap());
        }
        None => assert_eq!((&*row["items"], &*row["items_per_s"]), ("", "")),
    }
}

#[test]
fn every_cell_is_the_profiles_and_names_round_trip() {
    let snap = profile();
    let text = Csv::new().to_string(&snap).unwrap();
    let (headers, rows) = rows(&text);
    assert_eq!(rows.len(), snap.spans.len());
    // Every name read back exactly, with its target.
    for s in &snap.spans {
        let row = rows
            .iter()
            .find(|r| r["name"] == s.name && r["target"] == s.target)
            .unwrap_or_else(|| panic!("no row for {:?}", s.name));
        check_row(row, s);
    }
    for tricky in [COMMAS, QUOTES, NEWLINE] {
        assert!(rows.iter().any(|r| r["name"] == tricky), "{tricky:?}");
    }
    // The report's order: self time, highest first.
    let self_ns: Vec<f64> = rows.iter().map(|r| num(r, "self_ns")).collect();
    assert!(self_ns.windows(2).all(|w| w[0] >= w[1]), "{self_ns:?}");
    assert_eq!(rows[0]["name"], COMMAS);
    assert_eq!(rows[0]["self_ns"], "60000");
    let shares: f64 = rows.iter().map(|r| num(r, "self_pct")).sum();
    assert!((shares - 100.0).abs() < 1e-9, "{shares}");
    let task = rows.iter().find(|r| r["name"] == "task").unwrap();
    assert_eq!(task["calls_per_instance"], "3");
    assert_eq!((&*task["instances"], &*task["open"]), ("1", "0"));
    let quotes = rows.iter().find(|r| r["name"] == QUOTES).unwrap();
    assert_eq!(quotes["errors"], "1");
    // Units in the headers: every column but names and counts says its unit.
    let unitless = [
        "name",
        "target",
        "calls",
        "instances",
        "open",
        "calls_per_instance",
        "errors",
        "errored_instances",
        "items",
        "bytes",
        "flops",
        "allocs_per_entry",
        "cpu_skipped_entries",
        "sample_every",
        "sampled_out",
        "clamped",
    ];
    for h in &headers {
        assert!(
            unitless.contains(&h.as_str())
                || ["_ns", "_pct", "_per_s", "_bytes", "_j", "_g"]
                    .iter()
                    .any(|unit| h.ends_with(unit)),
            "{h} has no unit"
        );
    }
    // No resources sampled (basic preset): their cells are empty, not 0; no overhead estimate
    // on a mock clock: empty too.
    assert!(rows.iter().all(|r| r["cpu_ns"].is_empty()));
    assert!(rows.iter().all(|r| r["cpu_skipped_entries"].is_empty()));
    assert!(rows
        .iter()
        .all(|r| r["overhead_ns"].is_empty() && r["overhead_pct"].is_empty()));
}

#[test]
fn resource_columns_are_the_profiles() {
    let snap = Snapshot::from_json(
        include_str!("../data/profile-v2-detailed.json"),
        "profile-v2-detailed.json",
    )
    .unwrap();
    let (_, rows) = rows(&Csv::new().to_string(&snap).unwrap());
    for s in &snap.spans {
        let row = rows.iter().find(|r| r["name"] == s.name).unwrap();
        check_row(row, s);
        let r = s.resources.as_ref().unwrap();
        let cpu = r.cpu.as_ref().unwrap();
        assert_eq!(row["cpu_ns"], cpu.cpu_ns.to_string());
        assert_eq!(num(row, "cpu_pct"), cpu.utilization_pct);
        let memory = r.memory.as_ref().unwrap();
        assert_eq!(row["peak_rss_bytes"], memory.peak_rss_bytes.to_string());
        let heap = r.heap.as_ref().unwrap();
        assert_eq!(
            num(row, "alloc_per_entry_bytes"),
            heap.allocated_bytes as f64 / heap.entries as f64
        );
    }
}

#[test]
fn the_output_directory_gets_report_csv_from_the_final_profile() {
    let dir = support::temp_dir("report-csv");
    let (dispatch, guard) = support::install(ProfileLayer::builder().with_output_dir(&dir));
    tracing::dispatcher::with_default(&dispatch, || {
        for _ in 0..5 {
            tracing::info_span!("work").in_scope(|| {});
        }
    });
    let outputs = guard.finish().unwrap();
    assert_eq!(outputs.file("csv"), Some(dir.join(CSV_FILE).as_path()));
    let written = std::fs::read_to_string(dir.join(CSV_FILE)).unwrap();
    let profile = Snapshot::read_json(outputs.profile().unwrap()).unwrap();
    let mut rendered = Vec::new();
    Csv::new().render(&profile, &mut rendered).unwrap();
    assert_eq!(written, String::from_utf8(rendered).unwrap());
    let (_, rows) = rows(&written);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["calls"], "5");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn gpu_columns_per_device_are_the_profiles() {
    use spanprof::gpu::GpuSample;
    let reading = GpuSample {
        utilization_pct: Some(60),
        memory_used_bytes: Some(8 << 30),
        power_mw: Some(150_000),
        ..GpuSample::default()
    };
    let snap = support::gpu_kernel_profile(reading);
    let (headers, rows) = rows(&Csv::new().to_string(&snap).unwrap());
    assert!(headers.iter().any(|h| h == "gpu0_energy_j"));
    assert!(
        !headers.iter().any(|h| h.starts_with("gpu1_")),
        "one device"
    );
    let kernel = support::span(&snap, "kernel");
    let row = rows.iter().find(|r| r["name"] == "kernel").unwrap();
    let r = kernel.resources.as_ref().unwrap();
    let g = &r.gpus[0];
    assert_eq!(num(row, "gpu0_util_pct"), 60.0);
    assert_eq!(row["gpu0_peak_mem_bytes"], (8u64 << 30).to_string());
    assert_eq!(num(row, "gpu0_energy_j"), g.energy_j.unwrap());
    assert_eq!(num(row, "energy_j"), r.energy_j.unwrap());
    assert_eq!(row["co2e_g"], "", "no grid intensity given");
}

#[test]
fn overhead_and_sampled_cpu_columns_are_the_profiles() {
    let snap = support::run_with(ProfileLayer::builder(), || {
        for _ in 0..40 {
            tracing::info_span!("outer").in_scope(|| tracing::info_span!("inner").in_scope(|| {}));
        }
    });
    assert!(snap.overhead.is_some(), "a real clock is calibrated");
    let (_, overhead_rows) = rows(&Csv::new().to_string(&snap).unwrap());
    for s in &snap.spans {
        let row = overhead_rows.iter().find(|r| r["name"] == s.name).unwrap();
        let overhead = s.overhead_ns.expect("estimated per span name");
        assert!(overhead > 0);
        assert_eq!(row["overhead_ns"], overhead.to_string());
        assert_eq!(
            num(row, "overhead_pct"),
            100.0 * overhead as f64 / s.entry_busy.total_ns as f64
        );
    }
    // Sampled CPU figures: the entries not read, per span name.
    let mut json: serde_json::Value =
        serde_json::from_str(include_str!("../data/profile-v2-detailed.json")).unwrap();
    let spans = json["spans"].as_array_mut().unwrap();
    spans[0]["resources"]["cpu"]["skipped_entries"] = serde_json::json!(17);
    let sampled = spans[0]["name"].as_str().unwrap().to_string();
    let snap = Snapshot::from_json(&json.to_string(), "sampled.json").unwrap();
    let (_, sampled_rows) = rows(&Csv::new().to_string(&snap).unwrap());
    for s in &snap.spans {
        let row = sampled_rows.iter().find(|r| r["name"] == s.name).unwrap();
        let skipped = s
            .resources
            .as_ref()
            .unwrap()
            .cpu
            .as_ref()
            .unwrap()
            .skipped_entries;
        assert_eq!(skipped, if s.name == sampled { 17 } else { 0 });
        assert_eq!(row["cpu_skipped_entries"], skipped.to_string());
    }
}

/// Events with metric fields of every kind, in spans with names the CSV must quote and outside
/// every span.
fn metrics_profile() -> Snapshot {
    let (dispatch, guard, _clock) = support::mock();
    tracing::dispatcher::with_default(&dispatch, || {
        tracing::info_span!(COMMAS).in_scope(|| {
            for (i, v) in [0.5f64, 2.0, 120.0, 7.25].into_iter().enumerate() {
                tracing::info!(
                    histogram.step_seconds = v,
                    histogram.batch_bytes = 1_000u64 * (i as u64 + 1),
                    counter.queue = if i % 2 == 0 { 5i64 } else { -2i64 },
                    gauge.loss = 1.0 / (i as f64 + 1.0),
                );
            }
            tracing::info!(histogram.batch_bytes = -3i64);
        });
        tracing::info_span!(NEWLINE).in_scope(|| tracing::info!(monotonic_counter.requests = 4u64));
        tracing::info!(monotonic_counter.requests = 2u64);
    });
    guard.snapshot()
}

#[test]
fn metrics_csv_rows_are_the_profiles_metrics() {
    use spanprof::profile::MetricValue;
    let snap = metrics_profile();
    assert_eq!(snap.metrics.len(), 6, "{:?}", snap.metrics);
    let (headers, rows) = rows(&CsvMetrics::new().to_string(&snap).unwrap());
    assert_eq!(headers[..5], ["metric", "kind", "unit", "span", "target"]);
    assert_eq!(rows.len(), snap.metrics.len());
    let close = |row: &HashMap<String, String>, column: &str, want: f64| {
        let got = num(row, column);
        assert!(
            (got - want).abs() <= 1e-12 * want.abs(),
            "{column}: {got} ≠ {want}"
        );
    };
    for m in &snap.metrics {
        let span = m.span.clone().unwrap_or_default();
        let row = rows
            .iter()
            .find(|r| r["metric"] == m.name && r["span"] == span)
            .unwrap_or_else(|| panic!("no row for {} in {span:?}", m.name));
        assert_eq!(row["kind"], m.kind.as_str());
        assert_eq!(row["unit"], m.unit.clone().unwrap_or_default());
        assert_eq!(row["target"], m.span_target.clone().unwrap_or_default());
        assert_eq!(row["records"], m.records.to_string());
        assert_eq!(row["rejected"], m.rejected.to_string());
        match &m.value {
            MetricValue::Sum(sum) => {
                close(row, "sum", sum.total());
                assert_eq!((&*row["last"], &*row["count"]), ("", ""));
            }
            MetricValue::Gauge(g) => {
                close(row, "last", g.last);
                close(row, "min", g.min);
                close(row, "max", g.max);
                assert_eq!(row["sum"], "");
            }
            MetricValue::Histogram(h) => {
                assert_eq!(row["count"], h.count().to_string());
                let (min, max) = h.min_max();
                close(row, "min", min);
                close(row, "max", max);
                close(row, "mean", h.mean());
                close(row, "sum", h.mean() * h.count() as f64);
                close(row, "p50", h.quantile(0.5));
                close(row, "p99", h.quantile(0.99));
                assert_eq!(row["last"], "");
            }
            _ => unreachable!(),
        }
    }
    // The figures themselves, not only as the snapshot has them.
    let row = |metric: &str, span: &str| {
        rows.iter()
            .find(|r| r["metric"] == metric && r["span"] == span)
            .unwrap()
    };
    let steps = row("step_seconds", COMMAS);
    assert_eq!(
        (&*steps["unit"], &*steps["count"], &*steps["sum"]),
        ("seconds", "4", "129.75")
    );
    assert_eq!((&*steps["min"], &*steps["max"]), ("0.5", "120"));
    let batches = row("batch_bytes", COMMAS);
    assert_eq!((&*batches["sum"], &*batches["rejected"]), ("10000", "1"));
    assert_eq!(row("queue", COMMAS)["sum"], "6");
    assert_eq!(row("loss", COMMAS)["last"], "0.25");
    assert_eq!(row("requests", NEWLINE)["sum"], "4");
    assert_eq!(row("requests", "")["sum"], "2");
    assert_eq!(row("requests", "")["target"], "");
}

#[test]
fn the_output_directory_gets_metrics_csv_from_the_final_profile() {
    let dir = support::temp_dir("metrics-csv");
    let (dispatch, guard) = support::install(ProfileLayer::builder().with_output_dir(&dir));
    tracing::dispatcher::with_default(&dispatch, || {
        tracing::info_span!("work").in_scope(|| tracing::info!(histogram.size_bytes = 64u64));
    });
    let outputs = guard.finish().unwrap();
    let path = dir.join(METRICS_CSV_FILE);
    assert_eq!(outputs.file("csv-metrics"), Some(path.as_path()));
    let written = std::fs::read_to_string(&path).unwrap();
    let profile = Snapshot::read_json(outputs.profile().unwrap()).unwrap();
    assert_eq!(written, CsvMetrics::new().to_string(&profile).unwrap());
    let (_, rows) = rows(&written);
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (&*rows[0]["metric"], &*rows[0]["span"], &*rows[0]["sum"]),
        ("size_bytes", "work", "64")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

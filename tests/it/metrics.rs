//! Metrics from events: `counter.`, `monotonic_counter.`, `histogram.` and `gauge.` fields of
//! events, recorded per span name, exact across threads, in the snapshot, its JSON and the
//! report.

use crate::support;

use std::time::Duration;

use spanprof::output::Table;
use spanprof::profile::metrics::{GaugeValue, HistogramValue, SumValue, FLOAT_SCALE};
use spanprof::profile::{Metric, MetricKind, MetricValue};
use spanprof::{Preset, ProfileLayer, Snapshot};
use support::{install, mock, run_with};

/// The one metric of that name, kind and span name; panics listing what the snapshot has.
fn metric<'a>(snap: &'a Snapshot, name: &str, kind: MetricKind, span: Option<&str>) -> &'a Metric {
    snap.metrics
        .iter()
        .find(|m| m.name == name && m.kind == kind && m.span.as_deref() == span)
        .unwrap_or_else(|| {
            panic!(
                "no {kind:?} {name} in {span:?}: {:?}",
                snap.metrics
                    .iter()
                    .map(|m| (&m.name, m.kind, &m.span))
                    .collect::<Vec<_>>()
            )
        })
}

fn sum(m: &Metric) -> SumValue {
    match &m.value {
        MetricValue::Sum(s) => *s,
        other => panic!("{} is not a sum: {other:?}", m.name),
    }
}

fn hist(m: &Metric) -> &HistogramValue {
    match &m.value {
        MetricValue::Histogram(h) => h,
        other => panic!("{} is not a histogram: {other:?}", m.name),
    }
}

fn gauge(m: &Metric) -> GaugeValue {
    match &m.value {
        MetricValue::Gauge(g) => *g,
        other => panic!("{} is not a gauge: {other:?}", m.name),
    }
}

const THREADS: u64 = 4;
const EVENTS: u64 = 5_000;

#[test]
fn values_are_exact_across_threads() {
    let (dispatch, guard) = install(ProfileLayer::builder());
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let dispatch = dispatch.clone();
            scope.spawn(move || {
                tracing::dispatcher::with_default(&dispatch, || {
                    let span = tracing::info_span!("step");
                    let _e = span.enter();
                    for i in 0..EVENTS {
                        let up = if i % 2 == 0 { 3i64 } else { -1 };
                        tracing::info!(
                            monotonic_counter.samples = 2u64,
                            counter.queue = up,
                            histogram.batch_bytes = 1_000 + t * EVENTS + i,
                            histogram.loss = 0.5 + (i % 4) as f64 * 0.25,
                            "step done"
                        );
                    }
                });
            });
        }
    });
    let snap = guard.snapshot();

    let samples = metric(&snap, "samples", MetricKind::MonotonicCounter, Some("step"));
    assert_eq!((samples.records, samples.rejected), (THREADS * EVENTS, 0));
    assert_eq!(sum(samples).integer, (2 * THREADS * EVENTS) as i64);
    assert_eq!(sum(samples).float, 0.0);

    let queue = metric(&snap, "queue", MetricKind::Counter, Some("step"));
    assert_eq!(queue.records, THREADS * EVENTS);
    // Per thread: EVENTS / 2 times +3 and EVENTS / 2 times -1.
    assert_eq!(sum(queue).integer, (THREADS * EVENTS) as i64);

    let bytes = metric(&snap, "batch_bytes", MetricKind::Histogram, Some("step"));
    assert_eq!(bytes.unit.as_deref(), Some("bytes"));
    let h = hist(bytes);
    assert!(h.floats.is_none());
    let ints = h.integers.as_ref().expect("integer values");
    let n = THREADS * EVENTS;
    assert_eq!(ints.count, n);
    assert_eq!((ints.min_ns, ints.max_ns), (1_000, 1_000 + n - 1));
    // 1000 + 0 + ... + 1000 + n - 1, exactly.
    assert_eq!(ints.total_ns, n * 1_000 + n * (n - 1) / 2);
    assert_eq!(ints.histogram.len(), n);
    let median = h.quantile(0.5);
    assert!(
        (median - (1_000.0 + n as f64 / 2.0)).abs() <= 1_000.0 + n as f64 / 128.0,
        "{median}"
    );

    let loss = metric(&snap, "loss", MetricKind::Histogram, Some("step"));
    assert_eq!(loss.unit, None);
    let floats = hist(loss).floats.as_ref().expect("float values");
    assert_eq!(floats.count, n);
    // 0.5, 0.75, 1.0, 1.25 in turn: exact in nano-units.
    assert_eq!((floats.min_ns, floats.max_ns), (500_000_000, 1_250_000_000));
    assert_eq!(floats.total_ns, n / 4 * 3_500_000_000);
    assert_eq!(hist(loss).mean(), 0.875);
    assert_eq!(hist(loss).min_max(), (0.5, 1.25));
    for (value, quarter) in [(0.5, 0.25), (0.75, 0.5), (1.0, 0.75), (1.25, 1.0)] {
        let q = hist(loss).quantile(quarter);
        assert!((q - value).abs() <= value / 128.0, "q{quarter}: {q}");
    }
    assert_eq!(snap.dropped.metric_values, 0);
}

#[test]
fn metrics_belong_to_the_span_they_occur_in() {
    let snap = run_with(ProfileLayer::builder(), || {
        tracing::info!(monotonic_counter.hits = 1u64);
        let outer = tracing::info_span!("outer");
        outer.in_scope(|| {
            tracing::info!(monotonic_counter.hits = 10u64);
            tracing::info_span!("inner").in_scope(|| {
                tracing::info!(monotonic_counter.hits = 100u64);
                // Explicit parents win over the current span.
                tracing::info!(parent: &outer, monotonic_counter.hits = 1_000u64);
                tracing::info!(parent: None, monotonic_counter.hits = 10_000u64);
            });
            tracing::info!(monotonic_counter.hits = 100_000u64);
        });
    });
    let hits = |span| sum(metric(&snap, "hits", MetricKind::MonotonicCounter, span)).integer;
    assert_eq!(hits(None), 10_001);
    assert_eq!(hits(Some("outer")), 101_010);
    assert_eq!(hits(Some("inner")), 100);
    let inner = metric(&snap, "hits", MetricKind::MonotonicCounter, Some("inner"));
    assert_eq!(inner.span_target.as_deref(), Some(module_path!()));
    assert_eq!(snap.metrics.len(), 3);
}

#[test]
fn gauges_keep_the_last_value_by_time_and_their_extremes() {
    let (dispatch, guard, clock) = mock();
    let set = |value: f64| {
        let dispatch = dispatch.clone();
        // One thread per value, one after the other: the last by time wins.
        std::thread::spawn(move || {
            tracing::dispatcher::with_default(&dispatch, || {
                tracing::info!(gauge.learning_rate = value);
            })
        })
        .join()
        .unwrap();
    };
    set(0.1);
    clock.advance(Duration::from_millis(1));
    set(0.4);
    clock.advance(Duration::from_millis(1));
    set(-0.2);
    clock.advance(Duration::from_millis(1));
    tracing::dispatcher::with_default(&dispatch, || {
        tracing::info!(gauge.learning_rate = 3i64);
        tracing::info!(gauge.learning_rate = 0.25);
    });
    let snap = guard.snapshot();
    let lr = metric(&snap, "learning_rate", MetricKind::Gauge, None);
    let g = gauge(lr);
    assert_eq!((g.last, g.min, g.max), (0.25, -0.2, 3.0));
    assert_eq!(lr.records, 5);
    assert_eq!(g.last_unix_ns, snap.run.start_unix_ns + 3_000_000);
}

#[test]
fn values_a_metric_cannot_take_are_counted_as_rejected() {
    let snap = run_with(ProfileLayer::builder(), || {
        tracing::info!(monotonic_counter.done = -3i64);
        tracing::info!(monotonic_counter.done = -0.5);
        tracing::info!(monotonic_counter.done = 4i64);
        tracing::info!(monotonic_counter.done = 0.5);
        tracing::info!(histogram.size = -1i64);
        tracing::info!(histogram.size = f64::NAN);
        tracing::info!(histogram.size = 7u64);
        tracing::info!(gauge.level = f64::INFINITY);
        tracing::info!(gauge.level = "high");
        tracing::info!(counter.depth = -2i64);
        tracing::info!(counter.depth = true);
        // Not metrics: other prefixes, an empty name, plain fields.
        tracing::info!(
            summary.x = 1u64,
            counter = 2u64,
            "histogram." = 3u64,
            items = 4u64
        );
    });
    let done = metric(&snap, "done", MetricKind::MonotonicCounter, None);
    assert_eq!((done.records, done.rejected), (2, 2));
    assert_eq!((sum(done).integer, sum(done).float), (4, 0.5));
    assert_eq!(sum(done).total(), 4.5);
    let size = metric(&snap, "size", MetricKind::Histogram, None);
    assert_eq!((size.records, size.rejected), (1, 2));
    assert_eq!(hist(size).count(), 1);
    let level = metric(&snap, "level", MetricKind::Gauge, None);
    assert_eq!((level.records, level.rejected), (0, 2));
    let g = gauge(level);
    assert_eq!((g.last, g.min, g.max), (0.0, 0.0, 0.0));
    let depth = metric(&snap, "depth", MetricKind::Counter, None);
    assert_eq!((depth.records, depth.rejected), (1, 1));
    assert_eq!(sum(depth).integer, -2);
    assert_eq!(snap.metrics.len(), 4, "{:?}", snap.metrics);
    let report = Table::new().to_string(&snap);
    let rejected = report
        .lines()
        .find(|l| l.starts_with("values rejected"))
        .unwrap_or_else(|| panic!("no rejected line:\n{report}"));
    assert!(
        rejected.ends_with("depth 1; done 2; level 2; size 2"),
        "{rejected}"
    );
    // The JSON profile holds what JSON can: rejected NaN and infinities are not in it.
    assert_eq!(
        Snapshot::from_json(&snap.to_json(), "metrics").unwrap(),
        snap
    );
}

#[test]
fn events_in_spans_the_filter_excludes_count_for_the_profiled_span_around() {
    let builder = ProfileLayer::builder()
        .with_filter(format!("{}=trace", module_path!()))
        .unwrap();
    let snap = run_with(builder, || {
        tracing::info_span!(target: "elsewhere", "hidden").in_scope(|| {
            tracing::info!(monotonic_counter.n = 1u64);
        });
        tracing::info_span!("kept").in_scope(|| {
            let hidden = tracing::info_span!(target: "elsewhere", "hidden");
            hidden.in_scope(|| {
                tracing::info!(monotonic_counter.n = 10u64);
            });
            // An explicit parent that is not profiled: no span.
            tracing::info!(parent: &hidden, monotonic_counter.n = 100u64);
        });
    });
    assert!(snap.span("hidden").is_none());
    let n = |span| sum(metric(&snap, "n", MetricKind::MonotonicCounter, span)).integer;
    assert_eq!((n(None), n(Some("kept"))), (101, 10));
}

#[test]
fn the_off_preset_records_no_metric() {
    let snap = run_with(ProfileLayer::builder().with_preset(Preset::Off), || {
        tracing::info_span!("step").in_scope(|| {
            tracing::info!(monotonic_counter.samples = 1u64, histogram.loss = 0.5);
        });
    });
    assert!(snap.metrics.is_empty());
    assert!(!snap.to_json().contains("\"metrics\""));
}

#[test]
fn a_known_metric_is_recorded_without_allocating() {
    let snap = run_with(ProfileLayer::builder(), || {
        tracing::info_span!("step").in_scope(|| {
            let emit = |i: u64| {
                tracing::info!(
                    monotonic_counter.samples = i,
                    histogram.latency_seconds = i as f64 * 1e-3,
                    gauge.depth = i,
                    plain = i
                )
            };
            // Warm: the callsite decided, this thread's cells made, the histogram allocated.
            emit(1);
            let before = spanprof::alloc::HeapCounters::thread().unwrap();
            for i in 0..1_000 {
                emit(i);
            }
            let after = spanprof::alloc::HeapCounters::thread().unwrap();
            assert_eq!(after.allocs, before.allocs, "allocations while recording");
        });
    });
    let samples = metric(&snap, "samples", MetricKind::MonotonicCounter, Some("step"));
    assert_eq!(sum(samples).integer, 1 + 999 * 1_000 / 2);
    let latency = metric(
        &snap,
        "latency_seconds",
        MetricKind::Histogram,
        Some("step"),
    );
    assert_eq!(latency.unit.as_deref(), Some("seconds"));
    let floats = hist(latency).floats.as_ref().unwrap();
    assert_eq!(floats.count, 1_001);
    assert_eq!(floats.max_ns as f64, 0.999 * FLOAT_SCALE);
}

#[test]
fn the_report_and_the_json_profile_carry_the_metrics() {
    let snap = run_with(ProfileLayer::builder(), || {
        for epoch in 0..3u64 {
            tracing::info_span!("epoch").in_scope(|| {
                for step in 0..4u64 {
                    tracing::info_span!("train_step").in_scope(|| {
                        tracing::info!(
                            histogram.loss = 2.0 / (1 + epoch * 4 + step) as f64,
                            monotonic_counter.samples = 32u64,
                        );
                    });
                }
                tracing::info!(gauge.learning_rate = 0.1 / (1 + epoch) as f64);
            });
        }
    });
    let json = snap.to_json();
    assert!(json.contains("\"metrics\""), "{json}");
    let back = Snapshot::from_json(&json, "metrics").unwrap();
    assert_eq!(back, snap);
    assert_eq!(back.metrics.len(), 3);

    let report = Table::new().to_string(&snap);
    let section = report
        .split("\nmetrics")
        .nth(1)
        .unwrap_or_else(|| panic!("no metrics section:\n{report}"));
    let line = |name: &str| {
        section
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no {name} line in:\n{section}"))
            .to_string()
    };
    let cells =
        |name: &str| -> Vec<String> { line(name).split_whitespace().map(str::to_string).collect() };
    // name kind span records value p50 p99 min max
    assert_eq!(
        cells("samples"),
        [
            "samples",
            "monotonic",
            "train_step",
            "12",
            "384",
            "-",
            "-",
            "-",
            "-"
        ],
        "sum 12 × 32"
    );
    // Values 2/1 .. 2/12: mean 0.517, min 0.167, max 2; p50 the 6th smallest, 2/7 (0.286),
    // to the histogram's precision.
    let loss = cells("loss");
    assert_eq!(
        loss[..5],
        ["loss", "histogram", "train_step", "12", "0.517"]
    );
    assert_eq!(loss[7..], ["0.167", "2"]);
    let p50: f64 = loss[5].parse().unwrap();
    assert!((p50 - 2.0 / 7.0).abs() <= 0.29 / 128.0, "{loss:?}");
    let lr = cells("learning_rate");
    assert_eq!(
        lr,
        [
            "learning_rate",
            "gauge",
            "epoch",
            "3",
            "0.0333",
            "-",
            "-",
            "0.0333",
            "0.100"
        ],
        "last 0.1 / 3"
    );
    for l in report.lines() {
        assert!(l.chars().count() <= 100, "{l:?}");
    }
    // Without metrics, no section.
    let plain = run_with(ProfileLayer::builder(), || {
        tracing::info_span!("work").in_scope(|| {});
    });
    assert!(!Table::new().to_string(&plain).contains("\nmetrics"));
}

/// Half the work of [`metrics_of_two_profiles_merge_exactly`]: `part` 0, 1 or both (2).
fn merge_work(part: u64) {
    tracing::info_span!("step").in_scope(|| {
        for i in 0..500u64 {
            if part == 2 || i % 2 == part {
                tracing::info!(
                    monotonic_counter.samples = i,
                    counter.delta = 0.5 - (i % 3) as f64,
                    histogram.size_bytes = i * 37,
                    histogram.loss = 1.0 / (1 + i) as f64,
                );
            }
        }
    });
}

#[test]
fn metrics_of_two_profiles_merge_exactly() {
    // A gauge set in an earlier profile, then the two halves of the work.
    let early = run_with(ProfileLayer::builder(), || {
        tracing::info!(gauge.level = 9u64);
    });
    let a = run_with(ProfileLayer::builder(), || merge_work(0));
    let b = run_with(ProfileLayer::builder(), || {
        merge_work(1);
        tracing::info!(gauge.level = 7u64);
        tracing::info!(gauge.level = -1i64);
        tracing::info!(gauge.level = 4u64);
    });
    let whole = run_with(ProfileLayer::builder(), || merge_work(2));
    let mut merged = early.metrics.clone();
    spanprof::profile::metrics::merge(&mut merged, &a.metrics);
    spanprof::profile::metrics::merge(&mut merged, &b.metrics);
    for name in ["samples", "delta", "size_bytes", "loss"] {
        let m = merged.iter().find(|m| m.name == name).unwrap();
        let w = whole.metrics.iter().find(|m| m.name == name).unwrap();
        assert_eq!(m, w, "{name}");
    }
    // Gauges: the later profile's last value; the extremes of both.
    let level = merged.iter().find(|m| m.name == "level").unwrap();
    let g = gauge(level);
    assert_eq!((g.last, g.min, g.max, level.records), (4.0, -1.0, 9.0, 4));
    assert_eq!(merged.len(), 5);
}

#[test]
fn profiles_of_version_3_read_with_no_metrics() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/profile-v4-golden.json"
    );
    let v4 = std::fs::read_to_string(path).unwrap();
    assert!(v4.contains("\"version\": 4,"));
    let v3 = v4.replacen("\"version\": 4,", "\"version\": 3,", 1);
    let snap = Snapshot::from_json(&v3, "v3").unwrap();
    assert!(snap.metrics.is_empty());
    assert_eq!(snap.dropped.metric_values, 0);
    assert_eq!(snap, Snapshot::from_json(&v4, "v4").unwrap());
}

#[test]
fn a_metric_histogram_that_disagrees_with_its_figures_is_refused() {
    let snap = run_with(ProfileLayer::builder(), || {
        tracing::info!(histogram.size = 5u64);
        tracing::info!(histogram.size = 9u64);
    });
    let json = snap.to_json();
    assert!(json.contains("\"count\": 2,"), "{json}");
    let bad = json.replacen("\"count\": 2,", "\"count\": 3,", 1);
    let err = Snapshot::from_json(&bad, "edited.json")
        .unwrap_err()
        .to_string();
    assert!(err.contains("edited.json"), "{err}");
    assert!(
        err.contains("metrics[0].value.histogram.integers.count"),
        "{err}"
    );
}

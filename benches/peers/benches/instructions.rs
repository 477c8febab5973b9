//! # `instructions` — the workload `scripts/instructions.sh` counts instructions of
//!
//! ```text
//! scripts/instructions.sh     # instructions per span of each case, under valgrind's callgrind
//! ```
//!
//! Runs `SPANS` flat spans (create, enter, exit, close; empty body) under the case named by
//! `CASE`: `floor` (`registry().with(Identity)`), `basic` (spanprof at its default preset),
//! `excluded` (spanprof with a span filter that excludes the span), `off` (`SPANPROF=off`),
//! `detailed` (spanprof with memory, heap and CPU per span), or `nested` (three nested spans
//! per iteration under spanprof `basic`; `nested_floor` the same under the floor); `notree` and
//! `nested_notree` are `basic` and `nested` with the call tree off; `sampled` is `basic` with
//! the back-off's second stage forced (a limit of 0.01%): spans run outside the counted loop
//! until `bench_span` is sampled (1 in 1024), then the loop counts what a span costs with
//! its name sampled. The `event*`
//! cases emit one `info` event per iteration instead, inside one span entered around the loop:
//! `event_floor` (a plain event under the floor), `event_plain` (the same under spanprof
//! `basic`), `event_metric` (an event with one `histogram.` metric field under spanprof
//! `basic`). The `scoped*` and `filtered*` cases put a span filter with a span directive,
//! `[outer]=info` (the spans inside an `outer` span), on spanprof: `scoped*` as
//! `Builder::with_filter` gives it, `filtered*` as tracing-subscriber's per-layer filter
//! (`layer.with_filter(EnvFilter)`, a `Filtered` layer) around a layer built without one;
//! `*_in` runs the loop inside one `outer` span (every span recorded), `*_out` outside it (none
//! recorded). `traced_chrome` and `traced_perfetto` are `basic` with a whole-run trace by each
//! backend (every span traced; only the traced thread's instructions are counted, not the
//! writer thread's), `perfetto_alone` is tracing-perfetto-file alone in a registry (thread
//! tracks, into a sink). Instruction counts do not move with the machine's load: the script counts only
//! inside `measured_spans`, at two span counts, and divides the difference, so first-use costs
//! cancel out too.
//!
//! With the `cuda` feature, the `gpu_*` cases are `basic` with GPU time per span on, against
//! the CUDA driver at `CUDA_LIB` (the fake one, `tests/fake_cuda/fake_cuda.c`, which
//! `scripts/instructions.sh` builds): `gpu_none` (a GPU span filter that chooses no span),
//! `gpu_other` (one span name chosen, entered before the loop: the loop's spans are not),
//! `gpu_timed` (the loop's span chosen: each entry records two events on the fake driver,
//! whose `cuEventRecord` takes a mutex; the driver's own cost is not spanprof's; a pool of
//! `SPANS` pairs, each pair's events made and read back by a warm-up before the loop, and the
//! bench fails if an entry of the loop was left untimed).
//!
//! Without `--bench` (as `cargo test --benches` runs it) it runs one small case and returns.

mod common;

use common::spanprof;
use tracing::Dispatch;
use tracing_subscriber::prelude::*;

/// The span filter of the `scoped*` and `filtered*` cases: the spans inside `outer`.
const SPAN_DIRECTIVE: &str = "[outer]=info";

/// spanprof as `builder` configures it (no filter of its own), behind tracing-subscriber's
/// per-layer filter: `layer.with_filter(EnvFilter)`.
fn spanprof_filtered(builder: spanprof::Builder) -> (Dispatch, spanprof::ProfileGuard) {
    let (layer, guard) = builder
        .with_env(false)
        .with_report(spanprof::ReportTarget::Off)
        .build()
        .expect("spanprof builds");
    let filter = tracing_subscriber::EnvFilter::builder()
        .parse(SPAN_DIRECTIVE)
        .expect("valid");
    (
        Dispatch::new(tracing_subscriber::registry().with(layer.with_filter(filter))),
        guard,
    )
}

fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    let case = if quick {
        "basic".to_string()
    } else {
        std::env::var("CASE").unwrap_or_else(|_| "basic".to_string())
    };
    let spans: u64 = if quick {
        100
    } else {
        std::env::var("SPANS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(100_000)
    };
    // The back-off off: a loop of empty spans is over any limit, and its second stage would
    // sample them (the `sampled` case measures that).
    let builder = || spanprof::ProfileLayer::builder().with_max_overhead(None);
    let trace_dir = std::env::temp_dir().join(format!("spanprof-instr-{}", std::process::id()));
    let (dispatch, guard) = match case.as_str() {
        "floor" | "nested_floor" | "event_floor" => (common::floor(), None),
        "basic" | "nested" | "event_plain" | "event_metric" => {
            let (d, g) = spanprof(builder());
            (d, Some(g))
        }
        "notree" | "nested_notree" => {
            let (d, g) = spanprof(builder().with_tree(false));
            (d, Some(g))
        }
        "scoped_in" | "scoped_out" => {
            let (d, g) = spanprof(builder().with_filter(SPAN_DIRECTIVE).expect("valid"));
            (d, Some(g))
        }
        "filtered_in" | "filtered_out" => {
            let (d, g) = spanprof_filtered(builder());
            (d, Some(g))
        }
        "excluded" => {
            let (d, g) = spanprof(builder().with_filter("nothing=trace").expect("valid"));
            (d, Some(g))
        }
        "off" => {
            let (d, g) = spanprof(builder().with_preset(spanprof::Preset::Off));
            (d, Some(g))
        }
        "sampled" => {
            // The back-off's second stage forced: a limit of 0.01%.
            let (d, g) = spanprof(builder().with_max_overhead(Some(0.01)));
            (d, Some(g))
        }
        "detailed" => {
            let (d, g) = spanprof(
                builder()
                    .with_resources(spanprof::Resources::DETAILED)
                    .with_max_overhead(None)
                    .with_sample_interval(std::time::Duration::from_secs(3600)),
            );
            (d, Some(g))
        }
        #[cfg(feature = "cuda")]
        "gpu_none" | "gpu_other" | "gpu_timed" => {
            let lib = std::env::var_os("CUDA_LIB").expect("CUDA_LIB: the fake libcuda.so.1");
            let chosen = match case.as_str() {
                "gpu_none" => "[nothing]",
                "gpu_other" => "[other]",
                _ => "[bench_span]",
            };
            // `gpu_timed`: a pair per span of the loop, so that every entry is timed whether
            // or not spanprof's thread has read the pairs yet (under valgrind it lags far
            // behind: with the default pool most entries found none free, and were counted
            // untimed instead).
            let (d, g) = spanprof(
                builder()
                    .with_cuda_library(lib)
                    .with_gpu_spans(chosen)
                    .expect("valid")
                    .with_gpu_pool(spans as usize),
            );
            // The chosen name's callsite decided before the loop (the switch set).
            tracing::dispatcher::with_default(&d, || {
                tracing::info_span!("other").in_scope(|| ());
            });
            (d, Some(g))
        }
        // Every span traced, the whole run one window, by each backend (files in a temporary
        // directory, removed at the end); and tracing-perfetto-file alone into a sink.
        "traced_chrome" | "traced_perfetto" => {
            let backend = match case.as_str() {
                "traced_chrome" => spanprof::chrome::TraceBackend::Chrome,
                _ => spanprof::chrome::TraceBackend::Perfetto,
            };
            let (d, g) = common::spanprof_traced(builder(), backend, &trace_dir, None);
            (d, Some(g))
        }
        "perfetto_alone" => {
            use tracing_subscriber::prelude::*;
            let (layer, flush) = tracing_perfetto_file::PerfettoLayer::builder(std::io::sink())
                .span_mode(tracing_perfetto_file::SpanMode::ThreadTracks)
                .with_source_locations()
                .build();
            std::mem::forget(flush);
            (
                tracing::Dispatch::new(tracing_subscriber::registry().with(layer)),
                None,
            )
        }
        other => panic!("unknown CASE {other:?}"),
    };
    let nested = case.starts_with("nested");
    let shape = match case.as_str() {
        _ if nested => Shape::Nested,
        "event_floor" | "event_plain" => Shape::Event,
        "event_metric" => Shape::MetricEvent,
        _ => Shape::Flat,
    };
    // `sampled`: spans until the back-off samples `bench_span` (outside the counted loop).
    let mut warm_up = 0;
    if let (Some(guard), "sampled") = (&guard, case.as_str()) {
        let sampled = || {
            guard
                .snapshot()
                .span("bench_span")
                .is_some_and(|s| s.sampled.is_some())
        };
        tracing::dispatcher::with_default(&dispatch, || {
            while !sampled() {
                for _ in 0..10_000 {
                    tracing::info_span!("bench_span").in_scope(|| std::hint::black_box(()));
                }
                warm_up += 10_000;
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        });
    }
    // `gpu_timed`: every pair's events made before the loop (by one entry each, outside the
    // counted loop), and read back by spanprof's thread, so the loop records events only.
    if let (Some(guard), "gpu_timed") = (&guard, case.as_str()) {
        let timed = || {
            guard
                .snapshot()
                .span("bench_span")
                .and_then(|s| Some(s.gpu_time.as_ref()?.time.count))
                .unwrap_or(0)
        };
        tracing::dispatcher::with_default(&dispatch, || {
            for _ in 0..spans {
                tracing::info_span!("bench_span").in_scope(|| std::hint::black_box(()));
            }
        });
        warm_up = spans;
        let start = std::time::Instant::now();
        while timed() < spans && start.elapsed() < std::time::Duration::from_secs(600) {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(timed(), spans, "the warm-up's entries read back");
    }
    // Spans of `bench_span` left out by sampling so far: the loop must leave out all but 1 in
    // 1024 (the back-off may step N back meanwhile: the count would then mix two costs).
    let left_out = |guard: &spanprof::ProfileGuard| {
        guard
            .snapshot()
            .span("bench_span")
            .and_then(|s| s.sampled.as_ref().map(|s| s.skipped))
            .unwrap_or(0)
    };
    let left_out_before = match (&guard, case.as_str()) {
        (Some(guard), "sampled") => left_out(guard),
        _ => 0,
    };
    tracing::dispatcher::with_default(&dispatch, || {
        if matches!(shape, Shape::Event | Shape::MetricEvent) {
            tracing::info_span!("events").in_scope(|| measured_spans(spans, shape));
        } else if case.ends_with("_in") {
            tracing::info_span!("outer").in_scope(|| measured_spans(spans, shape));
        } else {
            measured_spans(spans, shape);
        }
    });
    if let Some(guard) = guard {
        let calls: u64 = guard.snapshot().spans.iter().map(|s| s.calls).sum();
        let expected = match case.as_str() {
            "excluded" | "off" | "scoped_out" | "filtered_out" => 0,
            // The loop's spans and `outer`.
            "scoped_in" | "filtered_in" => spans + 1,
            _ if nested => 3 * spans,
            "event_plain" | "event_metric" => 1,
            // The span entered before the loop (and the warm-up's).
            "gpu_none" | "gpu_other" | "gpu_timed" => spans + 1 + warm_up,
            // Sampled: every span still counted.
            "sampled" => spans + warm_up,
            _ => spans,
        };
        assert_eq!(calls, expected, "{case}: spans recorded");
        if case.starts_with("traced") {
            let traces = guard.finish().expect("trace written").traces;
            assert_eq!(traces.len(), 1, "{case}: the whole run's trace");
            let _ = std::fs::remove_dir_all(&trace_dir);
            return;
        }
        if case == "gpu_timed" {
            let untimed = guard
                .snapshot()
                .span("bench_span")
                .and_then(|s| Some(s.gpu_time.as_ref()?.untimed));
            assert_eq!(untimed, Some(0), "every entry of the loop timed on the GPU");
        }
        if case == "sampled" {
            let skipped = left_out(&guard) - left_out_before;
            assert!(
                skipped + spans / 512 >= spans,
                "the back-off stepped N back during the loop ({skipped} of {spans} spans left \
                 out): run again"
            );
        }
    }
}

/// What one iteration of the measured loop does.
#[derive(Clone, Copy)]
enum Shape {
    /// One span.
    Flat,
    /// Three nested spans.
    Nested,
    /// One event with a plain field.
    Event,
    /// One event with a `histogram.` metric field.
    MetricEvent,
}

/// The spans counted: `scripts/instructions.sh` collects instructions only inside this function
/// (callgrind's `--toggle-collect`), so set-up, clock calibration and the snapshot stay out.
#[inline(never)]
fn measured_spans(spans: u64, shape: Shape) {
    for i in 0..spans {
        match shape {
            Shape::Nested => tracing::info_span!("a").in_scope(|| {
                tracing::info_span!("b")
                    .in_scope(|| tracing::info_span!("c").in_scope(|| std::hint::black_box(())))
            }),
            Shape::Flat => {
                tracing::info_span!("bench_span").in_scope(|| std::hint::black_box(()));
            }
            Shape::Event => tracing::info!(value = i % 1000, "tick"),
            Shape::MetricEvent => tracing::info!(histogram.value = i % 1000, "tick"),
        }
    }
}

//! # `chrome` — what does chrome tracing cost per span, inside and outside its windows?
//!
//! ```text
//! cargo bench -p spanprof-peers --bench chrome  # every case (about half a minute)
//! cargo test  -p spanprof-peers --bench chrome  # smoke: each case once, checks run
//! ```
//!
//! Every case measures **ns per span**: create + enter + exit + close of a span with an empty
//! body (`info_span!("bench_span")`, `enter()`, drop guard, drop span), on one thread, all cases
//! in the same criterion run. In every case the spans are children of an entered
//! `bench_step` span (a parent costs the registry and spanprof something of their own, so the
//! baselines have one too).
//!
//! | case                    | what runs                                                                 |
//! |-------------------------|---------------------------------------------------------------------------|
//! | `registry_identity`     | `registry().with(Identity::new())`: the floor any registry layer pays      |
//! | `spanprof_basic`        | registry + spanprof (`Preset::Basic`), no chrome tracing                  |
//! | `spanprof_identity`     | registry + spanprof + `Identity`: what any second layer costs in tracing-subscriber (the floor for the next case) |
//! | `chrome_outside_window` | registry + spanprof + its chrome layer (`with_chrome`, schedule wait 1, active 1); the spans run inside step 0, a wait step: the gate's cost |
//! | `chrome_active_step`    | the same with every step active: the spans run inside a traced step, forwarded to tracing-chrome, which writes a real trace file on its writer thread |
//!
//! `chrome_active_step` opens one window per criterion sample: the step span is created
//! before the timer starts and closed after it stops; then (untimed) the bench waits until the
//! window's file is complete (tracing-chrome's writer thread has written every event and
//! spanprof has completed the file) and deletes it. tracing-chrome serialises on its writer
//! thread while the spans run; on this 2-core machine that thread runs beside the measured one.
//!
//! Before each case is measured, a pre-flight of 1000 spans checks that it really records:
//! spanprof's snapshot counts the spans; outside windows no trace file is written; in an active
//! step the trace file holds 1000 `bench_span` B/E pairs. A failed check panics.
//!
//! Measurement: 1 s warm-up, 2 s measurement, 50 samples per case (override with criterion's
//! CLI flags).

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion};
use spanprof::chrome::{ChromeOptions, Schedule};
use spanprof::{ProfileGuard, ProfileLayer, ReportTarget};
use tracing::{info_span, Dispatch};
use tracing_subscriber::layer::Identity;
use tracing_subscriber::prelude::*;

const PREFLIGHT: u64 = 1000;
const STEP: &str = "bench_step";

#[inline(always)]
fn one_span() {
    let span = info_span!("bench_span");
    let entered = span.enter();
    black_box(&entered);
    drop(entered);
    drop(span);
}

fn run_spans(n: u64) {
    for _ in 0..n {
        one_span();
    }
}

fn temp_dir(case: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spanprof-bench-{case}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn profiler(chrome: Option<ChromeOptions>) -> (Dispatch, ProfileGuard) {
    // The back-off off: a loop of empty spans is over any limit, and its second stage would
    // sample them.
    let mut builder = ProfileLayer::builder()
        .with_env(false)
        .with_report(ReportTarget::Off)
        .with_max_overhead(None);
    if let Some(options) = chrome {
        builder = builder.with_chrome(options);
    }
    let (layer, guard) = builder.build().expect("spanprof builds");
    let subscriber = tracing_subscriber::registry().with(layer);
    let subscriber = subscriber.with(guard.chrome_layer());
    (Dispatch::new(subscriber), guard)
}

fn calls(guard: &ProfileGuard) -> u64 {
    guard.snapshot().span("bench_span").map_or(0, |s| s.calls)
}

/// Waits until the session has completed `n` trace files.
fn wait_for_traces(guard: &ProfileGuard, n: usize) -> Vec<PathBuf> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let traces = guard.handle().chrome_traces();
        if traces.len() >= n {
            return traces;
        }
        assert!(Instant::now() < deadline, "trace file {n} not completed");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// `bench_span` B/E pairs in a trace file.
fn span_pairs(path: &Path) -> (usize, usize) {
    let text = std::fs::read_to_string(path).expect("trace file");
    let events: Vec<serde_json::Value> = serde_json::from_str(&text).expect("valid JSON");
    let count = |ph: &str| {
        events
            .iter()
            .filter(|e| e["ph"] == ph && e["name"] == "bench_span")
            .count()
    };
    (count("B"), count("E"))
}

/// Benches `one_span` inside an entered `bench_step` span (as in every case: a parent span
/// costs the registry and spanprof something of its own).
fn bench_flat(g: &mut BenchmarkGroup<'_, WallTime>, name: &str, dispatch: &Dispatch) {
    tracing::dispatcher::with_default(dispatch, || {
        let _step = info_span!("bench_step").entered();
        g.bench_function(name, |b| b.iter(one_span));
    });
}

fn spanprof_basic(g: &mut BenchmarkGroup<'_, WallTime>) {
    let (dispatch, guard) = profiler(None);
    tracing::dispatcher::with_default(&dispatch, || run_spans(PREFLIGHT));
    assert_eq!(calls(&guard), PREFLIGHT, "spanprof_basic: pre-flight");
    bench_flat(g, "spanprof_basic", &dispatch);
}

fn spanprof_identity(g: &mut BenchmarkGroup<'_, WallTime>) {
    let (layer, guard) = ProfileLayer::builder()
        .with_env(false)
        .with_report(ReportTarget::Off)
        .with_max_overhead(None)
        .build()
        .expect("spanprof builds");
    let dispatch = Dispatch::new(
        tracing_subscriber::registry()
            .with(layer)
            .with(Identity::new()),
    );
    tracing::dispatcher::with_default(&dispatch, || run_spans(PREFLIGHT));
    assert_eq!(calls(&guard), PREFLIGHT, "spanprof_identity: pre-flight");
    bench_flat(g, "spanprof_identity", &dispatch);
}

fn chrome_outside_window(g: &mut BenchmarkGroup<'_, WallTime>) {
    let dir = temp_dir("outside");
    let schedule = Schedule::new(1, 0, 1).expect("schedule");
    let (dispatch, guard) = profiler(Some(ChromeOptions::dir(&dir).with_steps(STEP, schedule)));
    tracing::dispatcher::with_default(&dispatch, || {
        // Step 0 is a wait step: everything inside it is outside the trace windows.
        let step = info_span!("bench_step").entered();
        run_spans(PREFLIGHT);
        assert_eq!(
            calls(&guard),
            PREFLIGHT,
            "chrome_outside_window: pre-flight"
        );
        g.bench_function("chrome_outside_window", |b| b.iter(one_span));
        drop(step);
    });
    let traces = guard.finish().expect("outputs").traces;
    assert!(traces.is_empty(), "chrome_outside_window traced {traces:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn chrome_active_step(g: &mut BenchmarkGroup<'_, WallTime>) {
    let dir = temp_dir("active");
    let (dispatch, guard) = profiler(Some(
        ChromeOptions::dir(&dir).with_steps(STEP, Schedule::every_step()),
    ));
    let mut windows = 0;
    tracing::dispatcher::with_default(&dispatch, || {
        // Pre-flight: one traced step of PREFLIGHT spans.
        info_span!("bench_step").in_scope(|| run_spans(PREFLIGHT)); // closes: window done
        windows += 1;
        let trace = wait_for_traces(&guard, windows).pop().expect("a trace");
        let pairs = span_pairs(&trace);
        assert_eq!(
            pairs,
            (PREFLIGHT as usize, PREFLIGHT as usize),
            "chrome_active_step: pre-flight trace"
        );
        std::fs::remove_file(&trace).expect("remove trace");

        g.bench_function("chrome_active_step", |b| {
            b.iter_custom(|iters| {
                let step = info_span!("bench_step").entered(); // opens the window
                let start = Instant::now();
                run_spans(iters);
                let elapsed = start.elapsed();
                drop(step); // closes it
                windows += 1;
                if let Some(trace) = wait_for_traces(&guard, windows).pop() {
                    let _ = std::fs::remove_file(trace);
                }
                elapsed
            })
        });
    });
    drop(guard);
    let _ = std::fs::remove_dir_all(&dir);
}

fn flat(c: &mut Criterion) {
    let mut g = c.benchmark_group("chrome/flat");
    bench_flat(
        &mut g,
        "registry_identity",
        &Dispatch::new(tracing_subscriber::registry().with(Identity::new())),
    );
    spanprof_basic(&mut g);
    spanprof_identity(&mut g);
    chrome_outside_window(&mut g);
    chrome_active_step(&mut g);
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .sample_size(50)
}

criterion_group! {
    name = benches;
    config = config();
    targets = flat
}
criterion_main!(benches);

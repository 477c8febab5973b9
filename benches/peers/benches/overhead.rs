//! # `overhead` — what does one span cost under spanprof, and under its peers?
//!
//! Run everything (a few minutes on 2 cores):
//!
//! ```text
//! cargo bench -p spanprof-peers --bench overhead
//! cargo bench -p spanprof-peers --bench overhead -- overhead/flat   # one group
//! cargo bench -p spanprof-peers --bench overhead -- spanprof_basic  # one case
//! cargo test  -p spanprof-peers --bench overhead                    # smoke: each case once, checks run
//! ```
//!
//! Every case measures **ns per span**: create + enter + exit + close of a span
//! with an empty body (`info_span!("bench_span")`, `enter()`, drop guard, drop
//! span), or the nearest equivalent for profilers that are not tracing layers.
//!
//! ## `overhead/flat` — one span per iteration, one thread
//!
//! | case                    | what runs                                                                 |
//! |-------------------------|---------------------------------------------------------------------------|
//! | `no_subscriber`         | no subscriber at all (tracing's `NoSubscriber`): the cost of the macro     |
//! | `registry_identity`     | `registry().with(Identity::new())`: the floor any registry layer pays      |
//! | `naive_instant_layer`   | registry + a 15-line layer: `Instant` in extensions at enter, elapsed into an `AtomicU64` at exit |
//! | `spanprof_basic`        | registry + spanprof, `Preset::Basic` (the call tree on, its default)       |
//! | `spanprof_basic_no_tree` | `spanprof_basic` with `with_tree(false)`                                  |
//! | `spanprof_detailed`     | `Preset::Detailed`: + RSS marks, heap counters, thread CPU clock (a system call) at enter/exit |
//! | `spanprof_full`         | `Preset::Full`: + GPU (a scripted one-device source) and energy marks       |
//! | `spanprof_filter_matches` | registry + spanprof with a filter set (`overhead=trace`) that selects the span |
//! | `spanprof_filtered_out` | registry + spanprof whose filter (`nothing_matches=trace`) excludes the span |
//! | `spanprof_off`          | registry + spanprof, `Preset::Off`                                         |
//! | `spanprof_span_disabled_globally` | registry + `LevelFilter::WARN` + spanprof: an `info` span no layer wants |
//! | `tracing_timing`        | registry + tracing-timing 0.7 layer, `span_close_events()`, events grouped `ByName` |
//! | `tracing_chrome`        | registry + tracing-chrome 0.7 writing JSON to a byte-counting sink; timed on the instrumented thread, its writer thread serialises concurrently and is drained (untimed) after each sample so its unbounded queue cannot grow by GBs |
//! | `puffin_scope`          | puffin 0.20 `profile_scope!`, scopes on, `new_frame()` every 1024 scopes (cost included) |
//! | `hotpath_block`         | hotpath 0.30 `measure_block!` under a live `HotpathGuard`; timed on the instrumented thread; between samples an untimed, paced sleep lets hotpath's worker (capped at 65,536 measurements per 50 ms tick) keep its backlog under ~1 M, which otherwise grows by GBs |
//!
//! ## `overhead/nested` — three nested spans per iteration
//!
//! `registry_identity`, `spanprof_basic` and `spanprof_basic_no_tree`. The reported time is already
//! divided by 3: it is **ns per span**, directly comparable with `flat`.
//!
//! ## `overhead/two_threads` — two threads hammering one subscriber
//!
//! `registry_identity` and `spanprof_basic`. Both threads share one `Dispatch`,
//! start together at a barrier and each do the same number of spans; the
//! reported time is the slower thread's time divided by its span count, i.e.
//! **ns per span per thread** (contention shows up as a rise over `flat`).
//!
//! ## Notes
//!
//! * Each case builds its own subscriber and installs it with
//!   `tracing::dispatcher::with_default`; nothing is installed globally, so all
//!   cases live in one process. `no_subscriber` runs first, before any dispatcher
//!   has existed, so the callsite cache is in its pristine state.
//! * Plain `registry()` with no layer retains closed spans (tokio-rs/tracing#900),
//!   so the floor is `registry().with(Identity::new())`.
//! * Before each case is measured, a pre-flight of 1000 spans checks that the
//!   tool really records (spanprof's snapshot, tracing-timing's histograms,
//!   the chrome sink's byte count, puffin frames' scope count, the naive
//!   layer's counter); hotpath, which only reports when its guard drops, is
//!   checked afterwards by parsing the JSON report it writes to a temp file.
//!   A check fails the bench run with a panic.
//! * hotpath starts an HTTP metrics server on 127.0.0.1:6770 when its guard is
//!   built. This bench sets `HOTPATH_METRICS_SERVER_OFF=1` in `main` before
//!   anything else runs, so no socket is opened. hotpath is built with
//!   `default-features = false` (no thread-monitoring sampler), and without its
//!   `hotpath-cloud`/`-mcp`/`-prometheus`/`-cpu` features: nothing leaves the
//!   process. puffin never opens sockets (that is `puffin_http`, not used).
//! * Measurement: 1 s warm-up, 2 s measurement, 50 samples per case (override
//!   with criterion's CLI flags, e.g. `-- --measurement-time 5`).

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// Counting allocator installed for every case, so `spanprof_detailed` measures heap figures as
/// users with it installed get them (it adds 1–2 ns per allocation; spans do not allocate).
#[global_allocator]
static ALLOC: spanprof::CountingAlloc = spanprof::CountingAlloc::system();

use criterion::measurement::WallTime;
use criterion::{criterion_group, BenchmarkGroup, Criterion};
use tracing::{info_span, Dispatch};
use tracing_core::{span, Subscriber};
use tracing_subscriber::layer::{Context, Identity};
use tracing_subscriber::prelude::*;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// Spans the pre-flight check runs through a subscriber before measuring.
const PREFLIGHT: u64 = 1000;
/// puffin: scopes per frame before `new_frame()` is called.
const PUFFIN_FRAME_EVERY: u64 = 1024;

// ---------------------------------------------------------------------------
// The measured bodies
// ---------------------------------------------------------------------------

/// One span: create, enter, exit, close. Empty body.
#[inline(always)]
fn one_span() {
    let span = info_span!("bench_span");
    let entered = span.enter();
    black_box(&entered);
    drop(entered);
    drop(span);
}

/// Three nested spans (outer, mid, inner), each created, entered, exited,
/// closed, innermost first.
#[inline(always)]
fn nested3() {
    let outer = info_span!("bench_outer");
    let _o = outer.enter();
    let mid = info_span!("bench_mid");
    let _m = mid.enter();
    let inner = info_span!("bench_span");
    let _i = inner.enter();
    black_box(&_i);
}

fn run_spans(n: u64) {
    for _ in 0..n {
        one_span();
    }
}

// ---------------------------------------------------------------------------
// Harness helpers
// ---------------------------------------------------------------------------

/// Benches `one_span` with `dispatch` installed as the thread's default.
/// Returns whether criterion actually ran the routine (it does not when the
/// case is filtered out on the command line), so post-checks can be skipped.
fn bench_flat(g: &mut BenchmarkGroup<'_, WallTime>, name: &str, dispatch: &Dispatch) -> bool {
    let ran = AtomicBool::new(false);
    tracing::dispatcher::with_default(dispatch, || {
        g.bench_function(name, |b| {
            ran.store(true, Ordering::Relaxed);
            b.iter(one_span)
        });
    });
    ran.into_inner()
}

fn bench_nested(g: &mut BenchmarkGroup<'_, WallTime>, name: &str, dispatch: &Dispatch) -> bool {
    let ran = AtomicBool::new(false);
    tracing::dispatcher::with_default(dispatch, || {
        g.bench_function(name, |b| {
            ran.store(true, Ordering::Relaxed);
            // Reported time = time per span (3 spans per iteration).
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    nested3();
                }
                start.elapsed() / 3
            })
        });
    });
    ran.into_inner()
}

fn bench_two_threads(
    g: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    dispatch: &Dispatch,
) -> bool {
    let ran = AtomicBool::new(false);
    g.bench_function(name, |b| {
        ran.store(true, Ordering::Relaxed);
        b.iter_custom(|iters| {
            let barrier = Barrier::new(2);
            std::thread::scope(|s| {
                let worker = || {
                    tracing::dispatcher::with_default(dispatch, || {
                        barrier.wait();
                        let start = Instant::now();
                        run_spans(iters);
                        start.elapsed()
                    })
                };
                let a = s.spawn(worker);
                let b = s.spawn(worker);
                // Both threads did `iters` spans; the slower one bounds the
                // wall time, so this is time per span per thread.
                a.join().unwrap().max(b.join().unwrap())
            })
        })
    });
    ran.into_inner()
}

fn registry_identity() -> Dispatch {
    Dispatch::new(tracing_subscriber::registry().with(Identity::new()))
}

// ---------------------------------------------------------------------------
// A naive timing layer: what "just put an Instant in the extensions" costs
// ---------------------------------------------------------------------------

#[derive(Default)]
struct NaiveInstantLayer {
    total_ns: Arc<AtomicU64>,
    exits: Arc<AtomicU64>,
}

struct EnteredAt(Instant);

impl<S> Layer<S> for NaiveInstantLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_enter(&self, id: &span::Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().replace(EnteredAt(Instant::now()));
        }
    }

    fn on_exit(&self, id: &span::Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            if let Some(EnteredAt(t)) = span.extensions().get::<EnteredAt>() {
                self.total_ns
                    .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
                self.exits.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// tracing-chrome: a sink that counts what the writer thread produced
// ---------------------------------------------------------------------------

/// Like `std::io::sink()`, but counts bytes (to check that tracing-chrome's
/// writer thread really serialised something) and flushes (to know when the
/// writer has caught up with everything sent before a `FlushGuard::flush()`).
#[derive(Clone, Default)]
struct CountingSink {
    bytes: Arc<AtomicU64>,
    flushes: Arc<AtomicU64>,
}

impl std::io::Write for CountingSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.flushes.fetch_add(1, Ordering::Release);
        Ok(())
    }
}

impl CountingSink {
    /// Asks the writer thread to flush and waits until it has: every message
    /// queued before this call has then been serialised.
    fn drain(&self, guard: &tracing_chrome::FlushGuard) {
        let before = self.flushes.load(Ordering::Acquire);
        guard.flush();
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.flushes.load(Ordering::Acquire) == before {
            assert!(
                Instant::now() < deadline,
                "tracing_chrome: writer thread did not flush"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

// ===========================================================================
// spanprof cases
//
// Written against spanprof's builder API: `ProfileLayer::builder()`
// `.with_env(false)` (ignore SPANPROF* env vars) `.with_report(ReportTarget::Off)`
// `.with_preset(..)` `.with_filter(..)?` `.build()? -> (ProfileLayer, ProfileGuard)`,
// and `ProfileGuard::snapshot().spans[i].{name, calls}` for the checks.
// ===========================================================================

fn spanprof_layer(
    preset: spanprof::Preset,
    filter: Option<&str>,
) -> (Dispatch, spanprof::ProfileGuard) {
    spanprof_layer_tree(preset, filter, true)
}

/// [`spanprof_layer`], with the call tree on or off.
fn spanprof_layer_tree(
    preset: spanprof::Preset,
    filter: Option<&str>,
    tree: bool,
) -> (Dispatch, spanprof::ProfileGuard) {
    let mut builder = spanprof::ProfileLayer::builder()
        .with_env(false)
        .with_report(spanprof::ReportTarget::Off)
        .with_preset(preset)
        .with_tree(tree)
        // A loop of empty spans is over any limit: the back-off's second stage would sample
        // them. The cost of a recorded span is what is measured.
        .with_max_overhead(None);
    if let Some(f) = filter {
        builder = builder.with_filter(f).expect("valid spanprof filter");
    }
    let (layer, guard) = builder.build().expect("spanprof layer builds");
    (
        Dispatch::new(tracing_subscriber::registry().with(layer)),
        guard,
    )
}

/// Calls recorded for `name` in the guard's snapshot (0 when absent).
fn spanprof_calls(guard: &spanprof::ProfileGuard, name: &str) -> u64 {
    guard
        .snapshot()
        .spans
        .iter()
        .filter(|s| s.name == name)
        .map(|s| s.calls)
        .sum()
}

/// A SPANPROF_FILTER that selects the bench spans (set, and matching).
const MATCHING_FILTER: &str = "overhead=trace";

fn spanprof_basic() -> (Dispatch, spanprof::ProfileGuard) {
    spanprof_recording("spanprof_basic", None)
}

fn spanprof_recording(case: &str, filter: Option<&str>) -> (Dispatch, spanprof::ProfileGuard) {
    let (dispatch, guard) = spanprof_layer(spanprof::Preset::Basic, filter);
    let before = spanprof_calls(&guard, "bench_span");
    tracing::dispatcher::with_default(&dispatch, || run_spans(PREFLIGHT));
    let after = spanprof_calls(&guard, "bench_span");
    assert!(
        after >= before + PREFLIGHT,
        "{case}: expected >= {PREFLIGHT} bench_span calls after pre-flight, got {after}"
    );
    eprintln!("check: {case} recorded {after} bench_span calls in pre-flight");
    (dispatch, guard)
}

fn assert_spanprof_records_nothing(case: &str, when: &str, guard: &spanprof::ProfileGuard) {
    let calls = spanprof_calls(guard, "bench_span");
    assert_eq!(
        calls, 0,
        "{case}: bench_span must not be recorded ({when}), got {calls} calls"
    );
    eprintln!("check: {case} recorded no bench_span ({when})");
}

fn spanprof_not_recording(
    case: &str,
    preset: spanprof::Preset,
    filter: Option<&str>,
) -> (Dispatch, spanprof::ProfileGuard) {
    let (dispatch, guard) = spanprof_layer(preset, filter);
    tracing::dispatcher::with_default(&dispatch, || run_spans(PREFLIGHT));
    assert_spanprof_records_nothing(case, "pre-flight", &guard);
    (dispatch, guard)
}

/// spanprof at a preset with resource samplers: `detailed` (RSS, heap, thread CPU clock) and
/// `full` (plus GPU from a scripted one-device source, and energy).
fn spanprof_with_resources(preset: spanprof::Preset) -> (Dispatch, spanprof::ProfileGuard) {
    let device = spanprof::gpu::GpuDevice {
        index: 0,
        name: "scripted".to_string(),
        uuid: None,
        memory_total_bytes: Some(1 << 34),
        power_limit_mw: None,
    };
    let sample = spanprof::gpu::GpuSample {
        utilization_pct: Some(50),
        memory_used_bytes: Some(1 << 30),
        power_mw: Some(100_000),
        ..spanprof::gpu::GpuSample::default()
    };
    let (layer, guard) = spanprof::ProfileLayer::builder()
        .with_env(false)
        .with_report(spanprof::ReportTarget::Off)
        .with_preset(preset)
        // The cost of the readings is what is measured: no back-off.
        .with_max_overhead(None)
        .with_gpu_source(
            spanprof::gpu::ScriptedSource::new(vec![device]).with_samples(0, vec![sample]),
        )
        .build()
        .expect("spanprof layer builds");
    let dispatch = Dispatch::new(tracing_subscriber::registry().with(layer));
    tracing::dispatcher::with_default(&dispatch, || run_spans(PREFLIGHT));
    let calls = spanprof_calls(&guard, "bench_span");
    assert!(
        calls >= PREFLIGHT,
        "{preset:?}: {calls} calls after pre-flight"
    );
    eprintln!("check: spanprof {preset:?} recorded {calls} bench_span calls in pre-flight");
    (dispatch, guard)
}

fn flat_spanprof(g: &mut BenchmarkGroup<'_, WallTime>) {
    for (case, preset) in [
        ("spanprof_detailed", spanprof::Preset::Detailed),
        ("spanprof_full", spanprof::Preset::Full),
    ] {
        let (dispatch, guard) = spanprof_with_resources(preset);
        bench_flat(g, case, &dispatch);
        let snap = guard.snapshot();
        let span = snap.span("bench_span").expect("recorded");
        let res = span.resources.as_ref().expect("resources recorded");
        assert!(res.cpu.is_some(), "{case}: CPU figures");
        if preset == spanprof::Preset::Full {
            assert!(!res.gpus.is_empty(), "{case}: GPU figures");
        }
    }
    {
        let (dispatch, guard) = spanprof_basic();
        if bench_flat(g, "spanprof_basic", &dispatch) {
            assert!(spanprof_calls(&guard, "bench_span") > PREFLIGHT);
        }
    }
    {
        let (dispatch, guard) = spanprof_layer_tree(spanprof::Preset::Basic, None, false);
        if bench_flat(g, "spanprof_basic_no_tree", &dispatch) {
            assert!(spanprof_calls(&guard, "bench_span") > 0);
            assert!(guard.snapshot().tree.is_none());
        }
    }
    {
        let case = "spanprof_filter_matches";
        let (dispatch, guard) = spanprof_recording(case, Some(MATCHING_FILTER));
        if bench_flat(g, case, &dispatch) {
            assert!(spanprof_calls(&guard, "bench_span") > PREFLIGHT);
        }
    }
    {
        let case = "spanprof_filtered_out";
        let (dispatch, guard) =
            spanprof_not_recording(case, spanprof::Preset::Basic, Some("nothing_matches=trace"));
        bench_flat(g, case, &dispatch);
        assert_spanprof_records_nothing(case, "after bench", &guard);
    }
    {
        let case = "spanprof_off";
        let (dispatch, guard) = spanprof_not_recording(case, spanprof::Preset::Off, None);
        bench_flat(g, case, &dispatch);
        assert_spanprof_records_nothing(case, "after bench", &guard);
    }
}

fn nested_spanprof(g: &mut BenchmarkGroup<'_, WallTime>) {
    for (case, filter) in [
        ("spanprof_basic", None),
        ("spanprof_filter_matches", Some(MATCHING_FILTER)),
    ] {
        let (dispatch, guard) = spanprof_recording(case, filter);
        if bench_nested(g, case, &dispatch) {
            for name in ["bench_outer", "bench_mid", "bench_span"] {
                assert!(
                    spanprof_calls(&guard, name) > 0,
                    "nested {case}: {name} not recorded"
                );
            }
        }
    }
}

fn nested_spanprof_no_tree(g: &mut BenchmarkGroup<'_, WallTime>) {
    let (dispatch, guard) = spanprof_layer_tree(spanprof::Preset::Basic, None, false);
    if bench_nested(g, "spanprof_basic_no_tree", &dispatch) {
        assert!(spanprof_calls(&guard, "bench_span") > 0);
    }
}

fn two_threads_spanprof(g: &mut BenchmarkGroup<'_, WallTime>) {
    let (dispatch, guard) = spanprof_basic();
    if bench_two_threads(g, "spanprof_basic", &dispatch) {
        assert!(spanprof_calls(&guard, "bench_span") > PREFLIGHT);
    }
}

// ===========================================================================
// Peers
// ===========================================================================

fn flat_tracing_timing(g: &mut BenchmarkGroup<'_, WallTime>) {
    use tracing_timing::{group, Builder, Histogram};
    // Comparable mode: a span's close is recorded as an event, grouped by the
    // span's name (ByName avoids formatting a message String per close).
    let layer = Builder::default()
        .events(group::ByName)
        .span_close_events()
        .layer(|| Histogram::new_with_max(60_000_000_000, 2).unwrap());
    let downcaster = layer.downcaster();
    let dispatch = Dispatch::new(tracing_subscriber::registry().with(layer));
    let samples = |dispatch: &Dispatch| -> u64 {
        let layer = downcaster
            .downcast(dispatch)
            .expect("downcast to TimingLayer");
        layer.force_synchronize();
        layer.with_histograms(|hs| {
            hs.get("bench_span")
                .map(|evs| evs.values().map(|h| h.len()).sum())
                .unwrap_or(0)
        })
    };
    tracing::dispatcher::with_default(&dispatch, || run_spans(PREFLIGHT));
    let n = samples(&dispatch);
    // tracing-timing drops a sample when the delta would be <= 0, so allow a few.
    assert!(
        n >= PREFLIGHT / 2,
        "tracing_timing: only {n} samples after pre-flight"
    );
    eprintln!("check: tracing_timing histogram bench_span has {n} samples after pre-flight");
    if bench_flat(g, "tracing_timing", &dispatch) {
        assert!(
            samples(&dispatch) > n,
            "tracing_timing: nothing recorded while benchmarking"
        );
    }
}

fn flat_tracing_chrome(g: &mut BenchmarkGroup<'_, WallTime>) {
    let sink = CountingSink::default();
    let (layer, flush_guard) = tracing_chrome::ChromeLayerBuilder::new()
        .writer(sink.clone())
        .build();
    let dispatch = Dispatch::new(tracing_subscriber::registry().with(layer));
    tracing::dispatcher::with_default(&dispatch, || run_spans(PREFLIGHT));
    // The writer thread serialises asynchronously; wait for it.
    sink.drain(&flush_guard);
    let pre = sink.bytes.load(Ordering::Relaxed);
    // ~70 bytes of JSON per begin or end record; demand at least 50 per span.
    assert!(
        pre >= PREFLIGHT * 50,
        "tracing_chrome: writer produced only {pre} bytes"
    );
    eprintln!("check: tracing_chrome writer produced {pre} bytes of JSON in pre-flight");
    // Timed: the producer side (what the instrumented thread pays). The JSON
    // serialisation runs on tracing-chrome's writer thread, concurrently. After
    // each sample the bench waits, untimed, for the writer to drain its
    // unbounded queue, so memory stays bounded (otherwise it grows by GBs).
    tracing::dispatcher::with_default(&dispatch, || {
        g.bench_function("tracing_chrome", |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                run_spans(iters);
                let elapsed = start.elapsed();
                sink.drain(&flush_guard);
                elapsed
            })
        });
    });
    drop(dispatch);
    // Joins the writer thread (drains whatever is still queued).
    drop(flush_guard);
}

fn flat_puffin(g: &mut BenchmarkGroup<'_, WallTime>) {
    let scopes = Arc::new(AtomicU64::new(0));
    let sink_id = {
        let scopes = scopes.clone();
        puffin::GlobalProfiler::lock().add_sink(Box::new(move |frame| {
            scopes.fetch_add(frame.meta().num_scopes as u64, Ordering::Relaxed);
        }))
    };
    puffin::set_scopes_on(true);
    let puffin_scopes = |n: u64| {
        for i in 0..n {
            {
                puffin::profile_scope!("bench_span");
                black_box(());
            }
            if i % PUFFIN_FRAME_EVERY == PUFFIN_FRAME_EVERY - 1 {
                puffin::GlobalProfiler::lock().new_frame();
            }
        }
    };
    puffin_scopes(PREFLIGHT);
    puffin::GlobalProfiler::lock().new_frame();
    let pre = scopes.load(Ordering::Relaxed);
    assert!(
        pre >= PREFLIGHT,
        "puffin: frames carried only {pre} scopes after pre-flight"
    );
    eprintln!("check: puffin frames carried {pre} scopes after pre-flight");

    g.bench_function("puffin_scope", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            puffin_scopes(iters);
            let elapsed = start.elapsed();
            puffin::GlobalProfiler::lock().new_frame(); // flush the tail, untimed
            elapsed
        })
    });
    puffin::set_scopes_on(false);
    puffin::GlobalProfiler::lock().remove_sink(sink_id);
}

fn flat_hotpath(g: &mut BenchmarkGroup<'_, WallTime>) {
    let report = std::env::temp_dir().join(format!(
        "spanprof-overhead-hotpath-{}.json",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&report);
    let guard = hotpath::HotpathGuardBuilder::new("overhead_bench")
        .format(hotpath::Format::Json)
        .output_path(&report)
        .functions_limit(0)
        .build();
    let blocks = |n: u64| {
        for _ in 0..n {
            hotpath::measure_block!("bench_span", black_box(()));
        }
    };
    blocks(PREFLIGHT);
    // Timed: the instrumented thread (guard + push onto hotpath's per-thread
    // queue). hotpath's worker drains those queues at most 1024 chunks x 64 =
    // 65,536 measurements per tick (HOTPATH_DRAIN_INTERVAL_MS, default 50 ms),
    // ~1.3 M/s, while this loop produces several times that: left alone the
    // backlog grows by GBs and the producer keeps paying for fresh chunks.
    // The pacer sleeps (untimed) between samples whenever the modelled backlog
    // passes 1 M measurements, so the timed loop runs on recycled chunks,
    // hotpath's designed steady state. Criterion sees the sleeps as wall time
    // and plans fewer iterations; the case still takes ~10 s.
    let mut pacer = DrainPacer::new(Duration::from_millis(hotpath_drain_interval_ms()));
    pacer.produced(PREFLIGHT);
    g.bench_function("hotpath_block", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            blocks(iters);
            let elapsed = start.elapsed();
            pacer.produced(iters);
            elapsed
        })
    });
    // hotpath writes its report only when the guard drops.
    drop(guard);
    let json = std::fs::read_to_string(&report)
        .unwrap_or_else(|e| panic!("hotpath: no report at {}: {e}", report.display()));
    let _ = std::fs::remove_file(&report);
    let calls = hotpath_calls(&json, "bench_span");
    assert!(
        calls >= PREFLIGHT,
        "hotpath: report shows {calls} calls of bench_span (want >= {PREFLIGHT}):\n{json}"
    );
    eprintln!("check: hotpath report shows {calls} calls of bench_span");
}

/// Leaky-bucket model of hotpath's drain: the worker takes at most
/// `PER_TICK` measurements per tick. `produced` sleeps when the modelled
/// backlog exceeds `BUDGET`, until it is back to half of that.
struct DrainPacer {
    tick: Duration,
    backlog: f64,
    last: Instant,
}

impl DrainPacer {
    /// hotpath-drain's MAX_CHUNKS_PER_SWEEP x CHUNK_SIZE, derated to 75%.
    const PER_TICK: f64 = 1024.0 * 64.0 * 0.75;
    const BUDGET: f64 = 1_000_000.0;

    fn new(tick: Duration) -> Self {
        Self {
            tick,
            backlog: 0.0,
            last: Instant::now(),
        }
    }

    fn produced(&mut self, n: u64) {
        let now = Instant::now();
        let ticks = (now - self.last).as_secs_f64() / self.tick.as_secs_f64();
        self.last = now;
        self.backlog = (self.backlog - ticks * Self::PER_TICK).max(0.0) + n as f64;
        if self.backlog > Self::BUDGET {
            let ticks = (self.backlog - Self::BUDGET / 2.0) / Self::PER_TICK;
            std::thread::sleep(self.tick.mul_f64(ticks));
        }
    }
}

/// hotpath's worker tick, read the way hotpath reads it.
fn hotpath_drain_interval_ms() -> u64 {
    std::env::var("HOTPATH_DRAIN_INTERVAL_MS")
        .or_else(|_| std::env::var("HOTPATH_DRAIN_INTERVAL"))
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50)
}

/// Finds the call count of the function entry labelled `label` anywhere in
/// hotpath's JSON report.
fn hotpath_calls(json: &str, label: &str) -> u64 {
    fn walk(v: &serde_json::Value, label: &str) -> Option<u64> {
        match v {
            serde_json::Value::Object(m) => {
                let named = ["name", "function_name", "label"]
                    .iter()
                    .any(|k| m.get(*k).and_then(|n| n.as_str()) == Some(label));
                if named {
                    for k in ["calls", "count", "call_count"] {
                        if let Some(n) = m.get(k).and_then(|n| n.as_u64()) {
                            return Some(n);
                        }
                    }
                }
                m.values().find_map(|v| walk(v, label))
            }
            serde_json::Value::Array(a) => a.iter().find_map(|v| walk(v, label)),
            _ => None,
        }
    }
    let v: serde_json::Value = serde_json::from_str(json).expect("hotpath report is JSON");
    walk(&v, label).unwrap_or(0)
}

// ===========================================================================
// Groups
// ===========================================================================

fn flat(c: &mut Criterion) {
    let mut g = c.benchmark_group("overhead/flat");

    // 1. No subscriber: first, before any Dispatch has ever existed.
    g.bench_function("no_subscriber", |b| b.iter(one_span));

    // 2. The floor.
    bench_flat(&mut g, "registry_identity", &registry_identity());

    // 3. Naive Instant-in-extensions layer.
    {
        let layer = NaiveInstantLayer::default();
        let (total, exits) = (layer.total_ns.clone(), layer.exits.clone());
        let dispatch = Dispatch::new(tracing_subscriber::registry().with(layer));
        tracing::dispatcher::with_default(&dispatch, || run_spans(PREFLIGHT));
        assert_eq!(
            exits.load(Ordering::Relaxed),
            PREFLIGHT,
            "naive layer: pre-flight exits"
        );
        eprintln!("check: naive_instant_layer saw {PREFLIGHT} exits in pre-flight");
        bench_flat(&mut g, "naive_instant_layer", &dispatch);
        black_box(total.load(Ordering::Relaxed));
    }

    // 4 + 5. spanprof: basic, with a matching filter, filtered out, off.
    flat_spanprof(&mut g);

    // A span no layer wants (a global filter disables it) beside spanprof: should cost what
    // it costs with no subscriber.
    {
        let (layer, guard) = spanprof::ProfileLayer::builder()
            .with_env(false)
            .with_report(spanprof::ReportTarget::Off)
            .build()
            .expect("spanprof layer builds");
        let dispatch = Dispatch::new(
            tracing_subscriber::registry()
                .with(tracing_subscriber::filter::LevelFilter::WARN)
                .with(layer),
        );
        bench_flat(&mut g, "spanprof_span_disabled_globally", &dispatch);
        assert_spanprof_records_nothing("spanprof_span_disabled_globally", "after bench", &guard);
    }

    // 6-8. Peers.
    flat_tracing_timing(&mut g);
    flat_tracing_chrome(&mut g);
    flat_puffin(&mut g);
    flat_hotpath(&mut g);

    g.finish();
}

fn nested(c: &mut Criterion) {
    let mut g = c.benchmark_group("overhead/nested");
    bench_nested(&mut g, "registry_identity", &registry_identity());
    nested_spanprof(&mut g);
    nested_spanprof_no_tree(&mut g);
    g.finish();
}

fn two_threads(c: &mut Criterion) {
    let mut g = c.benchmark_group("overhead/two_threads");
    bench_two_threads(&mut g, "registry_identity", &registry_identity());
    two_threads_spanprof(&mut g);
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
    targets = flat, nested, two_threads
}

// Not `criterion_main!`: hotpath's metrics server (an HTTP listener on
// 127.0.0.1:6770) must be switched off before any thread exists.
fn main() {
    std::env::set_var("HOTPATH_METRICS_SERVER_OFF", "1");
    benches();
    Criterion::default().configure_from_args().final_summary();
}

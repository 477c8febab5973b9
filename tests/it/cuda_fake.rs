//! GPU time per span (feature `cuda`) against a fake `libcuda.so.1`
//! (tests/fake_cuda/fake_cuda.c), built here with the system C compiler: no GPU or driver
//! needed. The fake's script sets each event's time, so every figure is checked exactly,
//! through the real loading, recording and resolving code.
//!
//! Each test compiles its own copy of the fake into its own directory, with a `fake_cuda.conf`
//! there (read once, at `cuInit`): copies loaded from different paths share nothing, so the
//! tests run in parallel.

use crate::support;

use std::io::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use spanprof::clock::Clock;
use spanprof::profile::{figures, GpuStream, Snapshot};
use spanprof::{Builder, ProfileLayer};
use tracing::Dispatch;
use tracing_subscriber::prelude::*;

const MS: u64 = 1_000_000;

/// Builds the fake with this configuration, or returns from the test (skipped, said loudly)
/// without a C compiler.
macro_rules! fake {
    ($test:expr, $conf:expr) => {
        match support::CLibrary::build(
            "cuda_fake",
            $test,
            "fake_cuda/fake_cuda.c",
            "libcuda.so.1",
            &[],
        ) {
            Some(fake) => {
                fake.write("fake_cuda.conf", $conf);
                fake
            }
            None => return,
        }
    };
}

fn builder(fake: &support::CLibrary, spans: &str) -> Builder {
    ProfileLayer::builder()
        .with_cuda_library(&fake.lib)
        .with_gpu_spans(spans)
        .unwrap()
}

/// `name` entered once: the mock clock moves `cpu_ms` inside it.
fn entry(clock: &spanprof::clock::MockClock, name: &'static str, cpu_ms: u64) {
    let _s = match name {
        "forward" => tracing::info_span!("forward").entered(),
        "backward" => tracing::info_span!("backward").entered(),
        "grad" => tracing::info_span!("grad").entered(),
        _ => unreachable!(),
    };
    clock.advance(Duration::from_millis(cpu_ms));
}

fn gpu_of<'a>(snap: &'a Snapshot, name: &str) -> &'a spanprof::profile::GpuTime {
    support::span(snap, name)
        .gpu_time
        .as_ref()
        .unwrap_or_else(|| panic!("{name} has no GPU time"))
}

/// Three `forward` entries on stream 0x1000 under a `step` not chosen (GPU 10, 20, 30 ms;
/// CPU 4 ms each), then `backward` with `grad` inside on the default stream (GPU 6 and 2 ms):
/// per name, per stream, per call path, the ratio, through every output.
#[test]
fn gpu_times_per_name_stream_and_path_are_the_scripted_ones() {
    // One advance per cuEventRecord: forward ×3 (start, end), then backward's start, grad's
    // start, grad's end, backward's end.
    let fake = fake!(
        "exact",
        "ADVANCE_US=0,10000,0,20000,0,30000,0,1000,2000,3000\n"
    );
    let (clock, mock) = Clock::mock();
    let (dispatch, guard) =
        support::install(builder(&fake, "[forward],[backward],[grad]").with_clock(clock));
    tracing::dispatcher::with_default(&dispatch, || {
        {
            let _step = tracing::info_span!("step").entered();
            let _on = spanprof::cuda::set_stream(0x1000);
            for _ in 0..3 {
                entry(&mock, "forward", 4);
            }
        }
        let _b = tracing::info_span!("backward").entered();
        mock.advance(Duration::from_millis(1));
        entry(&mock, "grad", 1);
    });
    let snap = guard.snapshot();

    let forward = gpu_of(&snap, "forward");
    assert_eq!(forward.time.count, 3);
    assert_eq!(forward.time.total_ns, 60 * MS);
    assert_eq!(
        (forward.time.min_ns, forward.time.max_ns),
        (10 * MS, 30 * MS)
    );
    assert_eq!(forward.time.mean_ns, 20.0 * MS as f64);
    assert_eq!((forward.untimed, forward.abandoned), (0, 0));
    assert_eq!(gpu_of(&snap, "backward").time.total_ns, 6 * MS);
    assert_eq!(gpu_of(&snap, "grad").time.total_ns, 2 * MS);
    assert!(
        support::span(&snap, "step").gpu_time.is_none(),
        "not chosen"
    );

    // Through the catalogue: GPU 20 ms per entry over 4 ms busy per entry.
    let totals = snap.totals();
    let s = support::span(&snap, "forward");
    let value = |f: &figures::Figure| f.value(s, &totals).map(|v| v.as_f64());
    assert_eq!(value(&figures::GPU_CALLS), Some(3.0));
    assert_eq!(value(&figures::GPU_TOTAL), Some(60.0 * MS as f64));
    assert_eq!(value(&figures::GPU_MEAN), Some(20.0 * MS as f64));
    assert_eq!(value(&figures::GPU_MAX), Some(30.0 * MS as f64));
    assert_eq!(value(&figures::GPU_BUSY), Some(500.0));
    assert_eq!(value(&figures::GPU_UNTIMED), Some(0.0));
    let p50 = value(&figures::GPU_P50).unwrap();
    assert!(
        (p50 - 20.0 * MS as f64).abs() <= 20.0 * MS as f64 / 128.0,
        "{p50}"
    );
    // backward: 6 ms on the GPU over 2 ms busy.
    let b = support::span(&snap, "backward");
    assert_eq!(figures::GPU_BUSY.value(b, &totals).unwrap().as_f64(), 300.0);

    assert_eq!(
        snap.gpu_streams,
        serde_json::from_value::<Vec<GpuStream>>(serde_json::json!([
            {"stream": "default", "calls": 2, "total_ns": 8 * MS},
            {"stream": "0x1000", "calls": 3, "total_ns": 60 * MS},
        ]))
        .unwrap()
    );

    let tree = snap.tree.as_ref().expect("the tree is on");
    let node = |name: &str| tree.nodes.iter().find(|n| n.name == name).unwrap();
    assert_eq!(
        (node("forward").gpu_calls, node("forward").gpu_ns),
        (3, 60 * MS)
    );
    assert_eq!(
        tree.nodes[node("forward").parent.unwrap() as usize].name,
        "step"
    );
    assert_eq!((node("grad").gpu_calls, node("grad").gpu_ns), (1, 2 * MS));
    assert_eq!((node("step").gpu_calls, node("step").gpu_ns), (0, 0));

    // The JSON profile keeps it all, and reads back the same.
    let back = Snapshot::from_json(&snap.to_json(), "written").unwrap();
    assert_eq!(back, snap);
    // CSV and Prometheus show the same figures.
    #[cfg(feature = "csv")]
    {
        let csv = render(&spanprof::output::Csv, &snap);
        let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
        let row: Vec<&str> = csv
            .lines()
            .find(|l| l.starts_with("forward,"))
            .unwrap()
            .split(',')
            .collect();
        let cell = |key: &str| row[header.iter().position(|h| *h == key).unwrap()];
        assert_eq!(cell("gpu_total_ns"), "60000000");
        assert_eq!(cell("gpu_busy_pct"), "500");
        assert_eq!(cell("gpu_calls"), "3");
    }
    #[cfg(feature = "prometheus")]
    {
        let text = render(&spanprof::output::Prometheus, &snap);
        assert!(
            text.contains("spanprof_span_gpu_time_seconds_total{span=\"forward\""),
            "{text}"
        );
        assert!(
            text.contains("spanprof_gpu_stream_seconds_total{stream=\"0x1000\"} 0.06"),
            "{text}"
        );
    }
    // The console report and the call tree.
    let report = spanprof::output::Table::new().to_string(&snap);
    assert!(report.contains("GPU time (CUDA events"), "{report}");
    let line = report
        .lines()
        .find(|l| l.starts_with("forward ") && l.contains("500.0"))
        .unwrap_or_else(|| panic!("{report}"));
    assert!(
        line.contains("60.0 ms") && line.contains("20.0 ms"),
        "{line}"
    );
    assert!(
        report.contains("streams: default 8.00 ms (2 calls)"),
        "{report}"
    );
    let tree = spanprof::output::TreeView::new().to_string(&snap);
    let line = tree
        .lines()
        .find(|l| l.trim_start().starts_with("forward"))
        .unwrap();
    assert!(line.ends_with("60.0 ms"), "{tree}");
    // compare: the GPU time as a measure.
    let slower = {
        let mut s = snap.clone();
        let g = s.spans.iter_mut().find(|s| s.name == "forward").unwrap();
        g.gpu_time.as_mut().unwrap().time.mean_ns *= 2.0;
        s
    };
    let mut options = spanprof::analysis::CompareOptions::default();
    options.metric = spanprof::analysis::Measure::Gpu;
    let c = spanprof::analysis::compare(std::slice::from_ref(&snap), &[slower], &options);
    let forward = c.timings.iter().find(|t| t.name == "forward").unwrap();
    assert_eq!(forward.ratio, 2.0);
    guard.finish().unwrap();
}

fn render(format: &dyn spanprof::output::Format, snap: &Snapshot) -> String {
    let mut out = Vec::new();
    format.render(snap, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

/// A capture of the events at `spanprof::perf`, for a scoped subscriber.
#[derive(Clone, Default)]
struct Warnings(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Warnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if event.metadata().target() == spanprof::PERF_TARGET {
            let mut text = String::new();
            event.record(
                &mut |field: &tracing::field::Field, value: &dyn std::fmt::Debug| {
                    text.push_str(&format!("{}={:?} ", field.name(), value));
                },
            );
            self.0.lock().unwrap().push(text);
        }
    }
}

/// No driver where the library is looked for: one warning naming it, and the profile of
/// every span as usual, without GPU time.
#[test]
fn without_a_driver_one_warning_and_the_profile_as_usual() {
    let warnings = Warnings::default();
    let missing = support::temp_dir("no-cuda").join("libcuda.so.1");
    let builder = ProfileLayer::builder()
        .with_cuda_library(&missing)
        .with_gpu_spans("[forward]")
        .unwrap();
    let (dispatch, guard) = tracing::subscriber::with_default(
        tracing_subscriber::registry().with(warnings.clone()),
        || support::install(builder),
    );
    let seen = warnings.0.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(
        seen[0].contains("CUDA driver library not loaded") && seen[0].contains("libcuda.so.1"),
        "{seen:?}"
    );
    tracing::dispatcher::with_default(&dispatch, || {
        for _ in 0..3 {
            let _s = tracing::info_span!("forward").entered();
        }
    });
    let snap = support::finish_snapshot(guard);
    let forward = support::span(&snap, "forward");
    assert_eq!(forward.calls, 3);
    assert!(forward.gpu_time.is_none());
    assert!(snap.gpu_streams.is_empty());
}

/// A driver without a device (`cuInit` fails): the same.
#[test]
fn without_a_device_one_warning() {
    let fake = fake!("no-device", "INIT_ERROR=100\n");
    let warnings = Warnings::default();
    let (dispatch, guard) = tracing::subscriber::with_default(
        tracing_subscriber::registry().with(warnings.clone()),
        || support::install(builder(&fake, "[forward]")),
    );
    let seen = warnings.0.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(
        seen[0].contains("no CUDA-capable device is detected"),
        "{seen:?}"
    );
    tracing::dispatcher::with_default(&dispatch, || {
        let _s = tracing::info_span!("forward").entered();
    });
    let snap = support::finish_snapshot(guard);
    assert_eq!(support::span(&snap, "forward").calls, 1);
    assert!(support::span(&snap, "forward").gpu_time.is_none());
}

/// GPU work that never completes, with 2 event pairs per thread: 2 entries timed (in
/// flight), 3 counted untimed; the end of the run waits its bound, then counts the 2 as
/// abandoned.
#[test]
fn an_exhausted_pool_counts_untimed_entries_and_the_end_abandons_the_rest() {
    let fake = fake!("pool", "NEVER_COMPLETE=1\n");
    let (dispatch, guard) = support::install(
        builder(&fake, "[forward]")
            .with_gpu_pool(2)
            .with_gpu_wait(Duration::from_millis(20)),
    );
    tracing::dispatcher::with_default(&dispatch, || {
        for _ in 0..5 {
            let _s = tracing::info_span!("forward").entered();
        }
    });
    let live = guard.snapshot();
    let g = gpu_of(&live, "forward");
    assert_eq!((g.time.count, g.untimed, g.abandoned), (0, 3, 0));
    let start = Instant::now();
    let snap = support::finish_snapshot(guard);
    // A bound, not a measurement: the wait ends.
    assert!(start.elapsed() < Duration::from_secs(30));
    let g = gpu_of(&snap, "forward");
    assert_eq!((g.time.count, g.untimed, g.abandoned), (0, 3, 2));
    assert_eq!(support::span(&snap, "forward").calls, 5);
    let totals = snap.totals();
    let s = support::span(&snap, "forward");
    assert_eq!(
        figures::GPU_ABANDONED.value(s, &totals).unwrap().as_f64(),
        2.0
    );
    assert!(
        figures::GPU_BUSY.value(s, &totals).is_none(),
        "no entry timed"
    );
}

/// No current CUDA context on the thread: every entry counted untimed, nothing else changes.
#[test]
fn without_a_context_entries_are_untimed() {
    let fake = fake!("no-context", "NO_CONTEXT=1\n");
    let (dispatch, guard) = support::install(builder(&fake, "[forward]"));
    tracing::dispatcher::with_default(&dispatch, || {
        for _ in 0..4 {
            let _s = tracing::info_span!("forward").entered();
            let _t = tracing::info_span!("other").entered();
        }
    });
    let snap = support::finish_snapshot(guard);
    let g = gpu_of(&snap, "forward");
    assert_eq!((g.time.count, g.untimed, g.abandoned), (0, 4, 0));
    assert_eq!(support::span(&snap, "other").calls, 4);
    assert!(support::span(&snap, "other").gpu_time.is_none());
}

/// Entries on several threads, each with its own pool, resolved by spanprof's thread while
/// they run: every one timed, none lost.
#[test]
fn threads_time_their_entries_on_pools_of_their_own() {
    let fake = fake!("threads", "ADVANCE_US=0,50\n");
    let (dispatch, guard) = support::install(builder(&fake, "[forward]").with_gpu_pool(4));
    let dispatch = Arc::new(dispatch);
    let threads: Vec<_> = (0..3)
        .map(|_| {
            let dispatch: Dispatch = (*dispatch).clone();
            std::thread::spawn(move || {
                tracing::dispatcher::with_default(&dispatch, || {
                    for _ in 0..200 {
                        let _s = tracing::info_span!("forward").entered();
                    }
                })
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let snap = support::finish_snapshot(guard);
    let g = gpu_of(&snap, "forward");
    // Records from the three threads interleave in the fake's one clock: each pair's time is
    // what the others' records added between its two; the count is exact.
    assert_eq!(g.time.count + g.untimed, 600);
    assert_eq!(g.abandoned, 0);
    assert!(g.time.count > 0);
}

/// The golden GPU profile: the figures of [`gpu_golden_run`], kept for the tests of outputs
/// that need a profile with GPU time but no driver (`spanprof::output`'s agreement of figures
/// across outputs, the HTML report, `compare --metric gpu`).
const GPU_PROFILE: &str = "gpu-profile.json";

/// GPU time of `forward` (stream 0x1000) and of `grad` in each of four steps, µs, cycled.
const FORWARD_US: [u64; 4] = [10_000, 12_000, 14_000, 16_000];
const GRAD_US: [u64; 4] = [300, 400, 500, 600];

/// 40 steps on a mock clock: `load_batch` (2 ms, not chosen), `forward` on stream 0x1000 (4 ms
/// CPU, 10–16 ms GPU: GPU-bound), `backward` on the default stream (2 ms CPU, GPU 1.5 ms plus
/// its `grad`'s) with `grad` inside (1 ms CPU, 0.3–0.6 ms GPU: launch-bound); `step` and
/// `load_batch` are not chosen. The final snapshot, run metadata normalised as the golden
/// files' are.
fn gpu_golden_run(fake: &support::CLibrary) -> Snapshot {
    let (clock, mock) = Clock::mock();
    let (dispatch, guard) =
        support::install(builder(fake, "[forward],[backward],[grad]").with_clock(clock));
    let us = |n: u64| mock.advance(Duration::from_micros(n));
    tracing::dispatcher::with_default(&dispatch, || {
        for _ in 0..40 {
            let _step = tracing::info_span!("step").entered();
            tracing::info_span!("load_batch").in_scope(|| us(2_000));
            {
                let _on = spanprof::cuda::set_stream(0x1000);
                tracing::info_span!("forward").in_scope(|| us(4_000));
            }
            tracing::info_span!("backward").in_scope(|| {
                us(500);
                tracing::info_span!("grad").in_scope(|| us(1_000));
                us(500);
            });
        }
    });
    let mut snap = support::finish_snapshot(guard);
    crate::golden::normalise(&mut snap);
    snap
}

#[test]
fn the_golden_gpu_profile_is_what_the_fake_driver_records() {
    // Six records per step: forward's start and end, backward's start, grad's start and end,
    // backward's end.
    let advances: Vec<String> = (0..4)
        .flat_map(|k| [0, FORWARD_US[k], 0, 1_000, GRAD_US[k], 500])
        .map(|us| us.to_string())
        .collect();
    let fake = fake!("golden", &format!("ADVANCE_US={}\n", advances.join(",")));
    let snap = gpu_golden_run(&fake);
    // The script's figures, exactly.
    let forward = gpu_of(&snap, "forward");
    assert_eq!(forward.time.count, 40);
    assert_eq!(forward.time.total_ns, 10 * 13_000 * 4 * 1_000);
    let grad = gpu_of(&snap, "grad");
    assert_eq!(grad.time.total_ns, 10 * 1_800 * 1_000);
    let backward = gpu_of(&snap, "backward");
    assert_eq!(
        backward.time.total_ns,
        40 * 1_500 * 1_000 + grad.time.total_ns
    );
    assert!(support::span(&snap, "load_batch").gpu_time.is_none());
    assert!(support::span(&snap, "step").gpu_time.is_none());
    let path = crate::golden::data_dir().join(GPU_PROFILE);
    if crate::golden::blessing() {
        std::fs::write(&path, snap.to_json()).unwrap();
        let _ = writeln!(
            std::io::stderr(),
            "SPANPROF_BLESS=1: wrote {}",
            path.display()
        );
        return;
    }
    let golden = Snapshot::from_json(&std::fs::read_to_string(&path).unwrap(), GPU_PROFILE)
        .unwrap_or_else(|e| {
            panic!("{e}\n(refresh it with: SPANPROF_BLESS=1 cargo test --all-features --test it cuda_fake::)")
        });
    // Everything this run recorded; the spanprof version it was written by aside.
    assert_eq!(snap.spans, golden.spans);
    assert_eq!(snap.tree, golden.tree);
    assert_eq!(snap.gpu_streams, golden.gpu_streams);
    assert_eq!(snap.run.duration_ns, golden.run.duration_ns);
}

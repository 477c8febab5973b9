//! Resource figures on spans, end to end: heap (with the counting allocator installed in this
//! test binary), leak suspicion, thread CPU time, GPU through a scripted source, energy, the
//! timeline in the profile, and resource counters in Chrome traces.
//!
//! A test binary of its own (not a module of `tests/it/`): its tests judge process-wide memory
//! (the heap's growth for leak suspicion, RSS), one at a time.

mod support;

use std::sync::Mutex;
use std::time::Duration;

use spanprof::analysis::{leaks, LeakSource};
use spanprof::gpu::{GpuSample, ScriptedSource};
use spanprof::output::Table;
use spanprof::{Preset, ProfileGuard, ProfileLayer, Resources, Snapshot};
use support::{finish_snapshot, install};
use tracing::Dispatch;

#[global_allocator]
static ALLOC: spanprof::CountingAlloc = spanprof::CountingAlloc::system();

/// The tests here judge process-wide memory (leak suspicion, RSS): one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn detailed() -> (Dispatch, ProfileGuard) {
    install(
        ProfileLayer::builder()
            .with_preset(Preset::Detailed)
            .with_sample_interval(Duration::from_millis(10)),
    )
}

static KEPT: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

#[test]
fn heap_per_call_and_leak_suspicion() {
    let _serial = serial();
    // One sample, at the start: the process's growth is judged from there, whatever the
    // machine's scheduling does to a sampler (steadiness itself is unit-tested).
    let (dispatch, guard) = install(
        ProfileLayer::builder()
            .with_preset(Preset::Detailed)
            .with_sample_interval(Duration::from_secs(3600)),
    );
    tracing::dispatcher::with_default(&dispatch, || {
        for _ in 0..40 {
            // Allocates and frees 1 MiB per call: much heap, nothing kept.
            tracing::info_span!("scratch").in_scope(|| {
                let v = std::hint::black_box(vec![1u8; 1 << 20]);
                drop(v);
            });
            // Keeps 16 KiB per call, inside a parent that keeps nothing of its own.
            tracing::info_span!("parent").in_scope(|| {
                tracing::info_span!("leaky").in_scope(|| {
                    KEPT.lock().unwrap().push(vec![7u8; 16 * 1024]);
                });
            });
        }
    });
    let snap = finish_snapshot(guard);
    let res = |name: &str| {
        snap.span(name)
            .and_then(|s| s.resources.clone())
            .unwrap_or_else(|| panic!("{name} has no resources"))
    };

    let scratch = res("scratch");
    let heap = scratch.heap.as_ref().unwrap();
    assert_eq!(heap.entries, 40);
    assert!(heap.allocated_bytes >= 40 << 20, "{heap:?}");
    assert!(heap.net_retained_bytes.abs() < 40 * 1024, "{heap:?}");
    let found = leaks(&snap);
    let leak_of = |name: &str| found.iter().find(|l| l.name == name);
    assert_eq!(leak_of("scratch"), None);

    let leaky = res("leaky");
    let leak = leak_of("leaky").unwrap_or_else(|| {
        let heap: Vec<_> = snap
            .resources
            .as_ref()
            .map(|r| {
                r.timeline
                    .iter()
                    .map(|s| (s.t_ns / 1_000_000, s.heap_bytes))
                    .collect()
            })
            .unwrap_or_default();
        panic!(
            "leaky is not flagged: {:?}\ntimeline (ms, heap): {heap:?}",
            leaky.heap
        )
    });
    assert!(leak.retained_bytes >= 40 * 16 * 1024, "{leak:?}");
    assert!(leak.share_of_calls >= 0.75);
    assert_eq!((leak.source, leak.calls), (LeakSource::Heap, 40));

    // The parent retains its child's memory, but none of its own: not flagged.
    let parent = res("parent");
    assert!(parent.heap.as_ref().unwrap().net_retained_bytes >= 40 * 16 * 1024);
    // (spanprof's own first-use allocations for a new span name, tens of KiB once, land in the
    // enclosing entry: one of the forty.)
    let own = parent.heap.as_ref().unwrap();
    assert!(
        own.self_retained_bytes < 64 * 1024 && own.retaining_entries <= 2,
        "{own:?}"
    );
    assert_eq!(leak_of("parent"), None);

    let report = Table::new().to_string(&snap);
    assert!(report.contains("possible leak: leaky"), "{report}");
    assert!(report.contains("memory and CPU"), "{report}");
    for line in report.lines() {
        assert!(line.chars().count() <= 100, "too wide: {line:?}");
    }
}

#[test]
fn cpu_utilisation_separates_work_from_waiting() {
    let _serial = serial();
    let (dispatch, guard) = detailed();
    tracing::dispatcher::with_default(&dispatch, || {
        for _ in 0..3 {
            tracing::info_span!("spin").in_scope(|| {
                // 30 ms of CPU time, however long the machine makes it take.
                let start = spanprof::__private::cpu::thread_cpu_ns();
                while spanprof::__private::cpu::thread_cpu_ns() - start < 30_000_000 {
                    std::hint::spin_loop();
                }
            });
            tracing::info_span!("sleep").in_scope(|| std::thread::sleep(Duration::from_millis(30)));
        }
    });
    let snap = finish_snapshot(guard);
    let cpu = |name: &str| {
        snap.span(name)
            .unwrap()
            .resources
            .as_ref()
            .unwrap()
            .cpu
            .clone()
            .unwrap()
    };
    let (spin, sleep) = (cpu("spin"), cpu("sleep"));
    assert_eq!((spin.entries, sleep.entries), (3, 3));
    // Generous bounds: the machine may be shared (a spinning thread can be descheduled); the
    // difference is what matters.
    assert!(spin.cpu_ns >= 3 * 30_000_000, "{spin:?}");
    assert!(sleep.utilization_pct < 20.0, "{sleep:?}");
    assert!(
        spin.utilization_pct > 3.0 * sleep.utilization_pct.max(5.0),
        "{spin:?} vs {sleep:?}"
    );
}

#[test]
fn rss_and_timeline_in_the_profile() {
    let _serial = serial();
    let (dispatch, guard) = detailed();
    let mut kept = Vec::new();
    tracing::dispatcher::with_default(&dispatch, || {
        tracing::info_span!("grow").in_scope(|| {
            // Touch 64 MiB so RSS really grows, across several samples.
            let mut v = vec![0u8; 64 << 20];
            for page in v.chunks_mut(4096) {
                page[0] = 1;
            }
            // Long enough for a few samples even on a loaded machine.
            std::thread::sleep(Duration::from_millis(150));
            kept.push(v);
        });
    });
    let snap = finish_snapshot(guard);
    let mem = snap
        .span("grow")
        .unwrap()
        .resources
        .as_ref()
        .unwrap()
        .memory
        .clone()
        .unwrap();
    assert_eq!(mem.instances, 1);
    assert!(mem.rss_delta_bytes >= 32 << 20, "{mem:?}");
    assert!(mem.peak_rss_bytes >= 64 << 20, "{mem:?}");
    let info = snap.resources.as_ref().unwrap();
    assert!(info.timeline.len() >= 3, "{} samples", info.timeline.len());
    assert!(info.timeline.windows(2).all(|w| w[0].t_ns <= w[1].t_ns));
    assert!(info.heap_allocator);
    assert_eq!(info.samplers, ["memory", "heap", "cpu"]);
    // Resources survive the JSON round trip.
    let back = Snapshot::from_json(&snap.to_json(), "test").unwrap();
    assert_eq!(back.resources, snap.resources, "resource info");
    assert_eq!(
        back.spans[0].resources, snap.spans[0].resources,
        "span resources"
    );
    assert_eq!(back, snap);
    drop(kept);
}

fn scripted_gpu() -> ScriptedSource {
    // Constant utilisation and power, no energy counter: energy is integrated from power.
    let sample = GpuSample {
        utilization_pct: Some(60),
        memory_used_bytes: Some(8 << 30),
        power_mw: Some(150_000),
        ..GpuSample::default()
    };
    support::scripted_gpu(sample)
}

#[test]
fn gpu_figures_from_a_scripted_source() {
    let _serial = serial();
    let (dispatch, guard) = install(
        ProfileLayer::builder()
            .with_resources(Resources::GPU)
            .with_sample_interval(Duration::from_millis(10))
            .with_gpu_source(scripted_gpu())
            .with_grid_intensity(400.0),
    );
    tracing::dispatcher::with_default(&dispatch, || {
        tracing::info_span!("kernel").in_scope(|| std::thread::sleep(Duration::from_millis(300)));
    });
    let snap = finish_snapshot(guard);
    // The span's own wall time (a loaded machine may stretch the time around it).
    let wall = snap.span("kernel").unwrap().wall.total_ns as f64 / 1e9;
    assert!(wall >= 0.3, "{wall} s");
    let info = snap.resources.as_ref().unwrap();
    assert_eq!(info.gpu_devices.len(), 1);
    assert_eq!(info.gpu_devices[0].name, "Scripted A100");
    let r = snap.span("kernel").unwrap().resources.clone().unwrap();
    let g = &r.gpus[0];
    assert_eq!(g.mean_utilization_pct, Some(60.0));
    assert_eq!((g.memory_delta_bytes, g.peak_memory_bytes), (0, 8 << 30));
    // 150 W over the span's wall time.
    let joules = g.energy_j.unwrap();
    let expected = 150.0 * wall;
    assert!(
        (joules - expected).abs() <= 0.15 * expected,
        "{joules} J vs {expected} J"
    );
    assert!(r.co2e_g.unwrap() > 0.0);
    let report = Table::new().to_string(&snap);
    assert!(
        report.contains("GPU 0: Scripted A100") && report.contains("GPU and energy"),
        "{report}"
    );
}

#[test]
fn no_gpu_is_reported_and_everything_else_works() {
    let _serial = serial();
    let (dispatch, guard) = install(
        ProfileLayer::builder()
            .with_resources(Resources::GPU | Resources::MEMORY)
            .with_gpu_source(ScriptedSource::unavailable("NVML library not found (test)"))
            .with_sample_interval(Duration::from_millis(10)),
    );
    tracing::dispatcher::with_default(&dispatch, || {
        tracing::info_span!("work").in_scope(|| std::thread::sleep(Duration::from_millis(30)));
    });
    let snap = finish_snapshot(guard);
    let info = snap.resources.as_ref().unwrap();
    assert!(info.gpu_devices.is_empty());
    assert_eq!(
        info.gpu_unavailable.as_deref(),
        Some("NVML library not found (test)")
    );
    let r = snap.span("work").unwrap().resources.clone().unwrap();
    assert!(r.gpus.is_empty());
    assert!(r.memory.is_some());
    assert_eq!(snap.span("work").unwrap().calls, 1);
    let report = Table::new().to_string(&snap);
    assert!(
        report.contains("GPU: not available (NVML library not found (test))"),
        "{report}"
    );
}

#[test]
fn basic_preset_has_no_resources() {
    let _serial = serial();
    let (dispatch, guard) = install(ProfileLayer::builder());
    tracing::dispatcher::with_default(&dispatch, || tracing::info_span!("x").in_scope(|| {}));
    let snap = finish_snapshot(guard);
    assert!(snap.resources.is_none());
    assert!(snap.span("x").unwrap().resources.is_none());
    assert!(!snap.to_json().contains("\"resources\":"));
}

#[cfg(feature = "chrome")]
#[test]
fn chrome_traces_carry_resource_counters() {
    use spanprof::chrome::{ChromeOptions, Schedule};
    let _serial = serial();
    let dir = support::temp_dir("res-chrome");
    let (dispatch, guard) = support::install_chrome(
        ProfileLayer::builder()
            .with_preset(Preset::Detailed)
            .with_sample_interval(Duration::from_millis(5))
            .with_chrome(
                ChromeOptions::dir(&dir).with_steps("step", Schedule::new(0, 0, 2).unwrap()),
            ),
    );
    tracing::dispatcher::with_default(&dispatch, || {
        for _ in 0..2 {
            tracing::info_span!("step").in_scope(|| std::thread::sleep(Duration::from_millis(40)));
        }
    });
    let outputs = guard.finish().unwrap();
    assert_eq!(outputs.traces.len(), 1, "{:?}", outputs.traces);
    let trace: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&outputs.traces[0]).unwrap()).unwrap();
    let events = trace.as_array().unwrap();
    let counters: Vec<_> = events.iter().filter(|e| e["ph"] == "C").collect();
    assert!(counters.len() >= 5, "{} counter events", counters.len());
    let rss: Vec<f64> = counters
        .iter()
        .filter(|e| e["name"] == "memory")
        .filter_map(|e| e["args"]["rss_mib"].as_f64())
        .collect();
    assert!(
        !rss.is_empty() && rss.iter().all(|&m| m > 1.0 && m < 1e6),
        "{rss:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// spanprof's own memory (its per-thread and per-name state, made on first use inside a user's
/// span; the readings it keeps per open span) shows in no span's heap figures.
#[test]
fn spanprofs_own_allocations_are_in_no_span() {
    let _serial = serial();
    let (dispatch, guard) = support::install(
        ProfileLayer::builder()
            .with_preset(Preset::Detailed)
            .with_sample_interval(Duration::from_secs(3600)),
    );
    // A fresh thread: spanprof's state for it, and for each name on it, is made inside `parent`.
    std::thread::spawn(move || {
        tracing::dispatcher::with_default(&dispatch, || {
            // The registry's own per-thread storage, warmed with spans of other names.
            for _ in 0..64 {
                tracing::info_span!("warm")
                    .in_scope(|| tracing::info_span!("warm_inner").in_scope(|| {}));
            }
            for _ in 0..40 {
                tracing::info_span!("parent").in_scope(|| {
                    tracing::info_span!("child").in_scope(|| {});
                });
            }
        })
    })
    .join()
    .unwrap();
    let snap = support::finish_snapshot(guard);
    for name in ["parent", "child"] {
        let heap = support::span(&snap, name)
            .resources
            .as_ref()
            .and_then(|r| r.heap.clone())
            .unwrap_or_else(|| panic!("{name} has heap figures"));
        assert_eq!(heap.entries, 40, "{name}");
        assert_eq!(
            (
                heap.allocated_bytes,
                heap.allocations,
                heap.self_retained_bytes
            ),
            (0, 0, 0),
            "{name}: {heap:?}"
        );
    }
}

//! spanprof's own cost, end to end: the estimate in the profile and the report, the names it
//! costs most in, and the CPU clock read for 1 entry in N of short names (marked as sampled).

use crate::support;

use std::time::Duration;

use spanprof::output::Table;
use spanprof::{Preset, ProfileLayer, Snapshot};
use support::{finish_snapshot, install, span};

/// Enough for a sure measured cost: about 60 spans timed whole, 240 callbacks (64 needed).
const SHORT: u64 = 4000;
const LONG: u64 = 5;

fn detailed_run() -> Snapshot {
    let (dispatch, guard) = install(ProfileLayer::builder().with_preset(Preset::Detailed));
    tracing::dispatcher::with_default(&dispatch, || {
        for _ in 0..SHORT {
            tracing::info_span!("tiny").in_scope(|| {});
        }
        for _ in 0..LONG {
            tracing::info_span!("nap").in_scope(|| std::thread::sleep(Duration::from_millis(20)));
        }
    });
    finish_snapshot(guard)
}

#[test]
fn short_names_get_their_cpu_time_sampled_long_ones_every_entry() {
    if !spanprof::__private::cpu::SUPPORTED {
        eprintln!("SKIPPED: no thread CPU clock on this platform");
        return;
    }
    let snap = detailed_run();
    let overhead = snap.overhead.as_ref().expect("a real clock is calibrated");
    let every = overhead.cpu_sample_every;
    assert_eq!(every, 32);
    // Test threads run beside each other: a 20 ms sleep is long for any CPU clock cost below
    // 12 µs per read (100× two reads under the first entry's share of the mean).
    assert!(overhead.cpu_every_entry_from_ns < 2_500_000, "{overhead:?}");
    let cpu = |name: &str| {
        span(&snap, name)
            .resources
            .as_ref()
            .and_then(|r| r.cpu.clone())
            .unwrap()
    };
    let tiny = cpu("tiny");
    assert_eq!(span(&snap, "tiny").calls, SHORT);
    // 1 in 32, or more while a preempted entry lifts the name's running mean (a loaded machine).
    assert!(tiny.entries >= SHORT.div_ceil(every), "{tiny:?}");
    assert!(tiny.entries <= SHORT / 4, "{tiny:?}");
    assert_eq!(tiny.entries + tiny.skipped_entries, SHORT);
    assert!(tiny.sampled());
    let nap = cpu("nap");
    assert_eq!((nap.entries, nap.skipped_entries), (LONG, 0));
    assert!(!nap.sampled());
}

#[test]
fn the_estimate_is_in_the_profile_and_the_report() {
    let snap = detailed_run();
    let overhead = snap.overhead.clone().expect("a real clock is calibrated");
    assert!(overhead.span_cost_ns > 0.0, "{overhead:?}");
    // The run's estimate is the sum of its names'.
    let per_name: u64 = snap.spans.iter().map(|s| s.overhead_ns.unwrap()).sum();
    assert_eq!(per_name, overhead.estimated_ns);
    // 16 020 callbacks: 1 span in 64 timed whole, the cost of the names' callbacks measured
    // from them (sure: 64 of them at least).
    let per_span = overhead
        .span_ns_sure()
        .expect("enough callbacks were timed");
    assert!(per_span > 0.0 && per_span < 1e6, "{overhead:?}");
    assert!(
        overhead.measured_samples >= spanprof::profile::Overhead::SURE_SAMPLES,
        "{overhead:?}"
    );
    // The names' spans (or entries) times the measured cost per span (each name's own where
    // it has enough callbacks timed; this is their mean), plus the readings.
    let units: u64 = snap.spans.iter().map(|s| s.created.max(s.calls)).sum();
    let recorded = overhead.estimated_ns - overhead.readings_ns;
    assert!(
        (recorded as f64 - units as f64 * per_span).abs() <= snap.spans.len() as f64,
        "{overhead:?}"
    );
    // Readings are wall time, preemption inside them included: on a loaded machine (or in a
    // debug build) they can exceed the process's CPU time. Only the sign is certain.
    assert!(
        overhead.percent > 0.0 && overhead.percent.is_finite(),
        "{overhead:?}"
    );
    assert!(overhead.readings_ns > 0, "{overhead:?}");
    // The CPU clock read per span is named (the perf event where this machine allows it).
    if spanprof::__private::cpu::SUPPORTED {
        let clock = overhead.cpu_clock.as_deref();
        assert!(
            matches!(clock, Some("perf task-clock" | "CLOCK_THREAD_CPUTIME_ID")),
            "{clock:?}"
        );
    }

    // (Without the call tree, which ends the report with lines of span names too.)
    let report = Table::new().with_tree(None).to_string(&snap);
    let header = report
        .lines()
        .find(|l| l.starts_with("spanprof's own cost: ~"))
        .unwrap_or_else(|| panic!("no cost line in\n{report}"));
    assert!(
        header.contains(&format!("{:.2}%", overhead.percent)),
        "{header}"
    );
    // Only the fallback clock gets a note (its reads can switch a thread out: short names'
    // entries are read a gap apart), with the gap.
    for (clock, noted) in [
        ("CLOCK_THREAD_CPUTIME_ID", true),
        ("perf task-clock", false),
    ] {
        let mut with = snap.clone();
        let o = with.overhead.as_mut().unwrap();
        o.cpu_clock = Some(clock.to_string());
        o.cpu_sample_gap_ns = if noted { 128_000_000 } else { 0 };
        let report = Table::new().with_tree(None).to_string(&with);
        let note = report
            .lines()
            .skip_while(|l| {
                !l.starts_with("note: CPU clock CLOCK_THREAD_CPUTIME_ID (no perf events)")
            })
            .take(2)
            .collect::<Vec<_>>();
        assert_eq!(!note.is_empty(), noted, "{clock}: {report}");
        assert!(note.iter().all(|l| l.chars().count() <= 100), "{note:?}");
        assert!(
            note.is_empty() || note[1].contains("128 ms of a thread's time apart"),
            "{note:?}"
        );
        // The note on sampled figures says the gap too, and no line is wider than 100.
        if noted && spanprof::__private::cpu::SUPPORTED {
            assert!(
                report.contains("1 entry in 32 at most, 128 ms apart on a thread"),
                "{report}"
            );
        }
        assert!(report.lines().all(|l| l.chars().count() <= 100), "{report}");
    }
    // Empty spans are mostly spanprof: named, the 100 ms of naps not.
    let note = report
        .lines()
        .skip_while(|l| !l.starts_with("note: spanprof costs over 5% of these spans' own time:"))
        .take(3)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(note.contains("tiny "), "{report}");
    assert!(!note.contains("nap "), "{report}");
    if spanprof::__private::cpu::SUPPORTED {
        assert!(
            report.contains("~ sampled: short names' CPU time read for 1 entry in 32\n"),
            "{report}"
        );
        let row = report.lines().rfind(|l| l.starts_with("tiny ")).unwrap();
        assert!(row.contains('~'), "{row}");
    }

    // The profile keeps all of it; a profile of schema 3 reads without it.
    let back = Snapshot::from_json(&snap.to_json(), "overhead.json").unwrap();
    assert_eq!(back, snap);
    // Written before the CPU clock was named: reads as not named.
    let mut unnamed: serde_json::Value = serde_json::from_str(&snap.to_json()).unwrap();
    if let Some(o) = unnamed.get_mut("overhead").and_then(|o| o.as_object_mut()) {
        o.remove("cpu_clock");
        o.remove("measured_span_ns");
    }
    let unnamed = Snapshot::from_json(&unnamed.to_string(), "unnamed.json").unwrap();
    let unnamed = unnamed.overhead.unwrap();
    assert_eq!((unnamed.cpu_clock, unnamed.measured_span_ns), (None, None));
    // Written before the callbacks timed were counted: its measured cost is not sure.
    let mut uncounted: serde_json::Value = serde_json::from_str(&snap.to_json()).unwrap();
    if let Some(o) = uncounted
        .get_mut("overhead")
        .and_then(|o| o.as_object_mut())
    {
        o.remove("measured_samples");
    }
    let uncounted = Snapshot::from_json(&uncounted.to_string(), "uncounted.json").unwrap();
    let uncounted = uncounted.overhead.unwrap();
    assert_eq!(uncounted.measured_span_ns, overhead.measured_span_ns);
    assert_eq!(
        (uncounted.measured_samples, uncounted.span_ns_sure()),
        (0, None)
    );
    let mut v3: serde_json::Value = serde_json::from_str(&snap.to_json()).unwrap();
    v3["version"] = 3.into();
    v3.as_object_mut().unwrap().remove("overhead");
    for s in v3["spans"].as_array_mut().unwrap() {
        s.as_object_mut().unwrap().remove("overhead_ns");
        if let Some(cpu) = s.pointer_mut("/resources/cpu") {
            cpu.as_object_mut().unwrap().remove("skipped_entries");
        }
    }
    let old = Snapshot::from_json(&v3.to_string(), "v3.json").unwrap();
    assert_eq!(old.overhead, None);
    assert_eq!(old.span("tiny").unwrap().overhead_ns, None);
    let old_cpu = old
        .span("tiny")
        .unwrap()
        .resources
        .as_ref()
        .and_then(|r| r.cpu.as_ref());
    assert!(old_cpu.is_none_or(|c| !c.sampled()));
}

#[test]
fn the_back_off_threshold_is_checked_and_can_be_off() {
    let (_, guard) = install(ProfileLayer::builder().with_max_overhead(None));
    drop(guard);
    for bad in [0.0, -1.0, 100.5, f64::NAN] {
        let err = support::quiet(ProfileLayer::builder().with_max_overhead(Some(bad)))
            .build()
            .unwrap_err()
            .to_string();
        assert!(err.contains("with_max_overhead"), "{err}");
        assert!(err.contains("a percentage over 0, up to 100"), "{err}");
    }
}

/// `detailed` with a limit no real program can stay under (a hundredth of a percent); `None`
/// (skipped, said) where the process's CPU time cannot be read.
fn over_the_limit() -> Option<(tracing::Dispatch, spanprof::ProfileGuard)> {
    if spanprof::__private::cpu::process_cpu_ns().is_none() {
        eprintln!("SKIPPED: no process CPU time on this platform");
        return None;
    }
    Some(install(
        ProfileLayer::builder()
            .with_preset(Preset::Detailed)
            .with_max_overhead(Some(0.01)),
    ))
}

/// Over the limit: the readings go at the first tick, and the report and profile say so.
#[test]
fn over_the_limit_the_readings_are_stepped_down_and_reported() {
    let Some((dispatch, guard)) = over_the_limit() else {
        return;
    };
    let handle = guard.handle();
    tracing::dispatcher::with_default(&dispatch, || {
        // Until the back-off steps down (its first tick is after 1 s, the second decides), or
        // 30 s on a machine too loaded for it: counts, not timing, decide the test.
        let start = std::time::Instant::now();
        while !handle.resources().is_empty() && start.elapsed() < Duration::from_secs(30) {
            for _ in 0..1000 {
                tracing::info_span!("busy").in_scope(|| {});
            }
        }
    });
    let snap = finish_snapshot(guard);
    let step = snap.backoff.first().expect("a step down");
    assert!(!step.on);
    assert!(step.resources.iter().any(|r| r == "cpu"), "{step:?}");
    assert!(step.overhead_pct > 0.01, "{step:?}");
    let report = Table::new().to_string(&snap);
    assert!(
        report.contains("note: spanprof backed off (per-span readings, every span name):"),
        "{report}"
    );
}

/// The same limit at `detailed`: the readings go first, then the short leaf span `busy` is
/// sampled 1 in N, with its calls still exact, and every output says so.
#[test]
fn still_over_the_limit_the_hottest_short_spans_are_sampled_and_counted() {
    let Some((dispatch, guard)) = over_the_limit() else {
        return;
    };
    let handle = guard.handle();
    let sampled = || {
        handle
            .snapshot()
            .span("busy")
            .is_some_and(|s| s.sampled.is_some())
    };
    let mut spans = 0u64;
    tracing::dispatcher::with_default(&dispatch, || {
        // Until `busy` is sampled (two steps: the third tick at the earliest), or 60 s on a
        // machine too loaded for it: counts, not timing, decide the test.
        let start = std::time::Instant::now();
        while !sampled() && start.elapsed() < Duration::from_secs(60) {
            for _ in 0..1000 {
                tracing::info_span!("busy").in_scope(|| {});
            }
            spans += 1000;
        }
        // Some more, sampled.
        for _ in 0..10_000 {
            tracing::info_span!("busy").in_scope(|| {});
        }
        spans += 10_000;
    });
    let snap = finish_snapshot(guard);
    let busy = snap.span("busy").unwrap();
    let x = busy.sampled.as_ref().expect("busy sampled");
    assert!(x.every >= 2 && x.every.is_power_of_two(), "{x:?}");
    // Every span counted; the histograms hold the recorded ones.
    assert_eq!(
        (busy.calls, busy.created, busy.instances),
        (spans, spans, spans)
    );
    assert!(
        x.skipped >= 10_000 - 10_000 / u64::from(x.every) - 1,
        "{x:?}"
    );
    assert_eq!(busy.entry_busy.count + x.skipped, spans);
    // The readings went first, then the sampling step naming `busy`.
    let first = &snap.backoff[0];
    assert!(
        !first.resources.is_empty() && first.sampled.is_empty(),
        "{first:?}"
    );
    let step = snap
        .backoff
        .iter()
        .find(|s| !s.sampled.is_empty())
        .expect("a sampling step");
    assert!(
        !step.on && step.sampled.iter().any(|n| n.name == "busy"),
        "{step:?}"
    );
    assert!(step.at_ns >= first.at_ns);
    let report = Table::new().to_string(&snap);
    assert!(report.contains("note: back-off sampling: at "), "{report}");
    assert!(report.contains(&format!("busy 1/{}", x.every)), "{report}");
}

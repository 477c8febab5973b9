//! A leaked guard (`mem::forget`) keeps none of spanprof's threads running once the layer and
//! every handle are dropped: the sampler, the back-off and the export cadence all end. A test
//! binary of its own, its tests one at a time: they count the threads of its process.
#![cfg(target_os = "linux")]

mod support;

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use spanprof::{Every, ProfileLayer};

/// Runs this binary's tests one at a time.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The names of this process's threads whose name starts with `spanprof-` (`comm` keeps 15
/// characters: `spanprof-sample`, `spanprof-backof`), sorted.
fn spanprof_threads() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|name| name.trim_end().to_string())
        .filter(|name| name.starts_with("spanprof-"))
        .collect();
    names.sort();
    names
}

#[test]
fn a_leaked_guard_leaves_no_spanprof_thread_once_the_layer_and_handles_are_gone() {
    let _one = one_at_a_time();
    assert_eq!(spanprof_threads(), Vec::<String>::new());
    let (dispatch, guard) = support::install(
        ProfileLayer::builder()
            .with_preset(spanprof::Preset::Detailed)
            .with_sample_interval(Duration::from_millis(5))
            .with_max_overhead(Some(5.0))
            // A long period: the export thread must end without waiting for its next window.
            .with_every(Every::Period(Duration::from_secs(3600))),
    );
    // A thread names itself once it runs: wait for that (a bound, not a timing).
    let all = ["spanprof-backof", "spanprof-export", "spanprof-sample"];
    wait_until("the three threads named", || spanprof_threads() == all);
    let handle = guard.handle();
    std::mem::forget(guard);
    tracing::dispatcher::with_default(&dispatch, || {
        let _s = tracing::info_span!("work").entered();
    });
    drop(dispatch);
    // A handle still reads the profile: the threads run on, and the sampler samples.
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(spanprof_threads().len(), 3);
    assert!(!handle.snapshot().resources.unwrap().timeline.is_empty());
    assert_eq!(handle.snapshot().span("work").unwrap().calls, 1);
    drop(handle);
    wait_until(
        "no spanprof thread left after the layer and every handle of a leaked guard were dropped",
        || spanprof_threads().is_empty(),
    );
}

/// The export thread ends with the layer (nothing more can be recorded) while the guard is
/// kept; the last window still comes when the profile ends, from a fresh thread that ends too.
#[test]
fn the_last_window_comes_after_the_export_thread_ended() {
    let _one = one_at_a_time();
    let (_capture, captured) = support::events::capture();
    let (dispatch, guard) = support::install(
        ProfileLayer::builder()
            .with_every(Every::Period(Duration::from_secs(3600)))
            .with_step_span("train_step"),
    );
    wait_until("the export thread named", || {
        spanprof_threads().contains(&"spanprof-export".to_string())
    });
    tracing::dispatcher::with_default(&dispatch, || {
        for _ in 0..3 {
            tracing::info_span!("train_step").in_scope(|| {});
        }
    });
    drop(dispatch);
    wait_until("every thread's end with the layer", || {
        spanprof_threads().is_empty()
    });
    guard.finish().unwrap();
    let windows = support::events::with_field(&captured, "window");
    assert_eq!(windows.len(), 1, "{windows:?}");
    assert_eq!(windows[0]["last"], "true", "{windows:?}");
    assert_eq!(windows[0]["steps"], "3", "{windows:?}");
    wait_until("the last window's thread's end", || {
        spanprof_threads().is_empty()
    });
}

/// Waits up to 10 s for `done`; fails naming `what` and the threads still there.
fn wait_until(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(
            Instant::now() < deadline,
            "{what}: not within 10 s; spanprof threads: {:?}",
            spanprof_threads()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

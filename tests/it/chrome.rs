//! Chrome traces through tracing-chrome: the files a run writes parse, nest, hold only the active
//! steps, agree with spanprof's histograms, and survive a panic and Ctrl-C.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;
use spanprof::chrome::{ChromeOptions, Schedule};
use spanprof::{Error, Preset, ProfileGuard, ProfileLayer};
use tracing::Dispatch;

/// spanprof allows one chrome session per process at a time: the tests of this binary that
/// build one (its threads run tests in parallel) take turns.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn temp_dir(name: &str) -> PathBuf {
    support::temp_dir(&format!("chrome-{name}"))
}

fn setup(options: ChromeOptions) -> (Dispatch, ProfileGuard) {
    support::install_chrome(ProfileLayer::builder().with_chrome(options))
}

fn spin(d: Duration) {
    let start = Instant::now();
    while start.elapsed() < d {
        std::hint::spin_loop();
    }
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A trace file, parsed and checked: a JSON array whose `B`/`E` events pair up per thread,
/// properly nested (each `E` closes the innermost open span, children lie inside parents).
struct Trace {
    events: Vec<Value>,
    /// Completed spans: (name, tid, begin ts, end ts, args of the B event).
    spans: Vec<(String, String, f64, f64, Value)>,
}

impl Trace {
    fn read(path: &Path) -> Self {
        let text = std::fs::read_to_string(path).unwrap();
        let events: Vec<Value> = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{} is not valid JSON: {e}", path.display()));
        let mut stacks: BTreeMap<String, Vec<(String, f64, Value)>> = BTreeMap::new();
        let mut spans = Vec::new();
        for e in &events {
            let ph = e["ph"].as_str().expect("every event has a ph");
            if ph != "B" && ph != "E" {
                continue;
            }
            let tid = e["tid"].to_string();
            let ts = e["ts"].as_f64().expect("B/E events have a numeric ts");
            let name = e["name"].as_str().unwrap().to_string();
            let stack = stacks.entry(tid.clone()).or_default();
            if ph == "B" {
                if let Some((parent, parent_ts, _)) = stack.last() {
                    assert!(ts >= *parent_ts, "{name} begins before its parent {parent}");
                }
                stack.push((name, ts, e["args"].clone()));
            } else {
                let (open, begin, args) = stack
                    .pop()
                    .unwrap_or_else(|| panic!("E of {name} on tid {tid} without a B"));
                assert_eq!(open, name, "E of {name} closes {open} on tid {tid}");
                assert!(ts >= begin, "{name} ends before it begins");
                spans.push((name, tid, begin, ts, args));
            }
        }
        for (tid, stack) in stacks {
            assert!(stack.is_empty(), "B without E on tid {tid}: {stack:?}");
        }
        Trace { events, spans }
    }

    fn named(&self, name: &str) -> Vec<&(String, String, f64, f64, Value)> {
        self.spans.iter().filter(|s| s.0 == name).collect()
    }

    /// Steps traced, from the step spans' `step` field.
    fn steps(&self, step_span: &str) -> Vec<u64> {
        self.named(step_span)
            .iter()
            .map(|s| s.4["step"].as_str().unwrap().parse().unwrap())
            .collect()
    }

    fn total_ns(&self, name: &str) -> f64 {
        self.named(name).iter().map(|s| (s.3 - s.2) * 1000.0).sum()
    }
}

fn step_work(step: u64) {
    let _s = tracing::info_span!("train_step", step).entered();
    {
        let _f = tracing::info_span!("forward").entered();
        spin(Duration::from_micros(30));
        let _l = tracing::info_span!("leaf").entered();
        spin(Duration::from_micros(10));
    }
    let _b = tracing::info_span!("backward").entered();
    spin(Duration::from_micros(20));
}

#[test]
fn only_active_steps_are_traced_each_window_in_its_file() {
    let _serial = serial();
    let dir = temp_dir("windows");
    // skip 1; then wait 1, warm-up 1, active 2; twice: steps 3-4 and 7-8.
    let schedule = Schedule::new(1, 1, 2)
        .unwrap()
        .with_repeat(2)
        .with_skip_first(1);
    let (dispatch, guard) = setup(
        ChromeOptions::dir(&dir)
            .with_steps("train_step", schedule)
            .with_args(true),
    );
    tracing::dispatcher::with_default(&dispatch, || {
        for step in 0..12 {
            step_work(step);
        }
    });
    let outputs = guard.finish().unwrap();
    let expected = [
        "train_step_steps_3-4.json".to_string(),
        "train_step_steps_7-8.json".to_string(),
    ];
    assert_eq!(files_in(&dir), expected);
    assert_eq!(
        outputs.traces,
        expected.iter().map(|f| dir.join(f)).collect::<Vec<_>>()
    );
    for (file, steps) in expected.iter().zip([[3, 4], [7, 8]]) {
        let trace = Trace::read(&dir.join(file));
        assert_eq!(trace.steps("train_step"), steps);
        for name in ["forward", "leaf", "backward"] {
            assert_eq!(trace.named(name).len(), 2, "{name} in {file}");
        }
        // Children inside their step.
        for child in trace.spans.iter().filter(|s| s.0 != "train_step") {
            assert!(
                trace
                    .named("train_step")
                    .iter()
                    .any(|p| p.1 == child.1 && p.2 <= child.2 && child.3 <= p.3),
                "{child:?} outside every step"
            );
        }
        let label = trace
            .events
            .iter()
            .find(|e| e["name"] == "process_labels")
            .unwrap();
        assert_eq!(
            label["args"]["labels"],
            format!("train_step steps {}-{}", steps[0], steps[1])
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Spans of `tracked` and `tracked_leaf` in the active steps: (name, calls and total ns by
/// spanprof's histograms, spans and total ns in the trace files).
fn agreement_run(attempt: u32) -> Vec<(&'static str, u64, u64, u64, f64)> {
    let dir = temp_dir(&format!("agree{attempt}"));
    let schedule = Schedule::new(2, 1, 3).unwrap().with_repeat(2);
    let (dispatch, guard) = setup(ChromeOptions::dir(&dir).with_steps("train_step", schedule));
    // What spanprof recorded during the active steps: the difference of snapshots taken around
    // each step (totals and counts are exact sums). `tracked` runs in every step, so its first
    // recording (which allocates) is not in a traced step.
    let busy = |name: &str| {
        let snapshot = guard.snapshot();
        let stats = snapshot.span(name);
        stats.map_or((0, 0), |s| (s.calls, s.entry_busy.total_ns))
    };
    let names = ["tracked", "tracked_leaf"];
    let mut in_active = [(0u64, 0u64); 2];
    tracing::dispatcher::with_default(&dispatch, || {
        for step in 0..14u64 {
            let before = names.map(busy);
            {
                let _s = tracing::info_span!("train_step", step).entered();
                for i in 0..5 {
                    let _e = tracing::info_span!("tracked", i).entered();
                    spin(Duration::from_micros(15 + 5 * i));
                    let _leaf = tracing::info_span!("tracked_leaf").entered();
                    spin(Duration::from_micros(5));
                }
            }
            if schedule.action(step).is_active() {
                let after = names.map(busy);
                for k in 0..2 {
                    in_active[k].0 += after[k].0 - before[k].0;
                    in_active[k].1 += after[k].1 - before[k].1;
                }
            }
        }
    });
    let outputs = guard.finish().unwrap();
    assert_eq!(outputs.traces.len(), 2);
    let traces: Vec<Trace> = outputs.traces.iter().map(|p| Trace::read(p)).collect();
    let _ = std::fs::remove_dir_all(&dir);
    names
        .into_iter()
        .zip(in_active)
        .map(|(name, (calls, hist_ns))| {
            let in_trace: usize = traces.iter().map(|t| t.named(name).len()).sum();
            let trace_ns: f64 = traces.iter().map(|t| t.total_ns(name)).sum();
            (name, calls, hist_ns, in_trace as u64, trace_ns)
        })
        .collect()
}

#[test]
fn trace_durations_agree_with_histogram_totals() {
    let _serial = serial();
    // The two layers read their clocks a few instructions apart at each enter and exit: the
    // totals may differ by 2 µs per span. A preemption between the two reads adds its length
    // to one side; on a loaded machine that happens now and then, so a run may be retried.
    let mut failures = Vec::new();
    for attempt in 0..3 {
        let mut ok = true;
        for (name, calls, hist_ns, trace_spans, trace_ns) in agreement_run(attempt) {
            assert_eq!(calls, 30, "{name}: 6 active steps × 5");
            assert_eq!(trace_spans, calls, "{name}");
            let allowed = 2_000.0 * calls as f64;
            let diff = (trace_ns - hist_ns as f64).abs();
            if diff > allowed {
                ok = false;
                failures.push(format!(
                    "{name}: trace {trace_ns:.0} ns vs histogram {hist_ns} ns ({calls} spans)"
                ));
            }
        }
        if ok {
            return;
        }
    }
    panic!("the trace and the histograms disagree: {failures:#?}");
}

#[test]
fn spans_entered_before_the_window_leave_no_unmatched_events() {
    let _serial = serial();
    let dir = temp_dir("before");
    let (dispatch, guard) = setup(
        ChromeOptions::dir(&dir)
            .with_steps("train_step", Schedule::new(1, 0, 1).unwrap().with_repeat(1)),
    );
    tracing::dispatcher::with_default(&dispatch, || {
        // A model layer's span, created once and entered on every forward pass.
        let linear = tracing::info_span!("linear");
        let epoch = tracing::info_span!("epoch").entered();
        let outer_linear = linear.enter(); // entered before the window, exited inside it
        for step in 0..3u64 {
            let _s = tracing::info_span!("train_step", step).entered();
            if step == 1 {
                drop(linear.enter()); // re-entered inside the window
            }
        }
        drop(outer_linear);
        drop(epoch);
    });
    let outputs = guard.finish().unwrap();
    assert_eq!(outputs.traces, vec![dir.join("train_step_steps_1-1.json")]);
    let trace = Trace::read(&outputs.traces[0]);
    assert!(trace.named("epoch").is_empty());
    assert_eq!(trace.named("linear").len(), 1);
    assert_eq!(trace.named("train_step").len(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn spans_still_entered_on_other_threads_are_closed_at_the_window_end() {
    let _serial = serial();
    let dir = temp_dir("threads");
    let (dispatch, guard) = setup(
        ChromeOptions::dir(&dir)
            .with_steps("train_step", Schedule::new(0, 0, 1).unwrap().with_repeat(1))
            .with_thread_names(true),
    );
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let worker = {
        let dispatch = dispatch.clone();
        std::thread::Builder::new()
            .name("loader".into())
            .spawn(move || {
                tracing::dispatcher::with_default(&dispatch, || {
                    started_rx.recv().unwrap();
                    let _load = tracing::info_span!("prefetch").entered();
                    stop_rx.recv().unwrap(); // entered until after the window closed
                })
            })
            .unwrap()
    };
    tracing::dispatcher::with_default(&dispatch, || {
        let _s = tracing::info_span!("train_step", step = 0).entered();
        started_tx.send(()).unwrap();
        spin(Duration::from_millis(20));
    });
    stop_tx.send(()).unwrap();
    worker.join().unwrap();
    let outputs = guard.finish().unwrap();
    let trace = Trace::read(&outputs.traces[0]);
    let prefetch = trace.named("prefetch");
    assert_eq!(prefetch.len(), 1);
    let step = trace.named("train_step")[0];
    assert_ne!(prefetch[0].1, step.1, "on its own thread");
    assert!(trace
        .events
        .iter()
        .any(|e| e["ph"] == "E" && e["name"] == "prefetch" && e["args"]["unfinished"] == true));
    let thread_names: Vec<&str> = trace
        .events
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .filter_map(|e| e["args"]["name"].as_str())
        .collect();
    assert!(thread_names.contains(&"loader"), "{thread_names:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn whole_run_without_steps_file_and_dir() {
    let _serial = serial();
    let dir = temp_dir("whole");
    let file = dir.join("nested/run.json");
    let (dispatch, guard) = setup(
        ChromeOptions::file(&file)
            .with_locations(false)
            .with_thread_names(false),
    );
    tracing::dispatcher::with_default(&dispatch, || {
        for step in 0..3 {
            step_work(step);
        }
        tracing::info!("an instant event");
    });
    assert_eq!(guard.finish().unwrap().traces, vec![file.clone()]);
    let trace = Trace::read(&file);
    assert_eq!(trace.named("train_step").len(), 3);
    assert!(trace.events.iter().any(|e| e["ph"] == "i"));
    assert!(trace.events.iter().all(|e| e.get(".file").is_none()));
    assert!(trace.events.iter().all(|e| e["name"] != "thread_name"));

    let (dispatch, guard) = setup(ChromeOptions::dir(&dir));
    tracing::dispatcher::with_default(&dispatch, || step_work(0));
    drop(guard); // dropping finishes too
    let trace = Trace::read(&dir.join(spanprof::chrome::WHOLE_RUN_FILE));
    assert_eq!(trace.named("leaf").len(), 1);
    assert!(trace.events.iter().any(|e| e.get(".file").is_some()));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn guard_dropped_while_a_panic_unwinds_leaves_valid_traces() {
    let _serial = serial();
    let dir = temp_dir("panic");
    let d = dir.clone();
    let result = std::panic::catch_unwind(move || {
        let (dispatch, _guard) =
            setup(ChromeOptions::dir(&d).with_steps("train_step", Schedule::every_step()));
        tracing::dispatcher::with_default(&dispatch, || {
            for step in 0..3u64 {
                let _s = tracing::info_span!("train_step", step).entered();
                let _f = tracing::info_span!("forward").entered();
                if step == 2 {
                    panic!("boom in step 2");
                }
            }
        });
    });
    assert!(result.is_err());
    assert_eq!(
        files_in(&dir),
        [
            "train_step_steps_0-0.json",
            "train_step_steps_1-1.json",
            "train_step_steps_2-2.json"
        ]
    );
    for f in files_in(&dir) {
        let trace = Trace::read(&dir.join(&f));
        assert_eq!(trace.named("forward").len(), 1, "{f}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn configuration_errors_and_absent_layers() {
    let _serial = serial();
    let e = ProfileLayer::builder()
        .with_env(false)
        .with_chrome(ChromeOptions::file("x.json").with_steps("s", Schedule::every_step()))
        .build()
        .unwrap_err();
    assert!(matches!(e, Error::InvalidChromeOptions { .. }), "{e:?}");
    let e = ProfileLayer::builder()
        .with_env(false)
        .with_chrome(ChromeOptions::dir("d").with_steps("", Schedule::every_step()))
        .build()
        .unwrap_err();
    assert!(matches!(e, Error::InvalidChromeOptions { .. }), "{e:?}");
    assert!(matches!(
        Schedule::new(1, 1, 0),
        Err(Error::InvalidChromeOptions { .. })
    ));

    // A file where the directory should be.
    let blocker = temp_dir("blocker");
    std::fs::write(&blocker, b"").unwrap();
    let e = ProfileLayer::builder()
        .with_env(false)
        .with_chrome(ChromeOptions::dir(blocker.join("traces")))
        .build()
        .unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e:?}");
    let _ = std::fs::remove_file(&blocker);

    // No chrome configured, or the off preset: no layer, nothing written.
    let (_, guard) = support::install(ProfileLayer::builder());
    assert!(guard
        .chrome_layer::<tracing_subscriber::Registry>()
        .is_none());
    let off_dir = temp_dir("off");
    let (_, guard) = support::install(
        ProfileLayer::builder()
            .with_preset(Preset::Off)
            .with_chrome(ChromeOptions::dir(&off_dir)),
    );
    assert!(guard
        .chrome_layer::<tracing_subscriber::Registry>()
        .is_none());
    assert!(guard.finish().unwrap().traces.is_empty());
    assert!(!off_dir.exists());
}

/// The Ctrl-C child: runs only when the parent test below starts this binary with
/// `SPANPROF_CTRLC_CHILD` set. It traces steps 0-999 in one window, sends itself SIGINT in step
/// 3, and is ended by spanprof's handler (exit status 130).
#[cfg(all(unix, feature = "signals"))]
#[test]
fn ctrlc_child() {
    let Some(dir) = std::env::var_os("SPANPROF_CTRLC_CHILD") else {
        return;
    };
    let out = std::env::var_os("SPANPROF_CTRLC_OUT").expect("output dir");
    let (dispatch, guard) = support::install_chrome(
        ProfileLayer::builder()
            .with_output_dir(PathBuf::from(out))
            .with_chrome(ChromeOptions::dir(PathBuf::from(dir)).with_steps(
                "train_step",
                Schedule::new(0, 0, 1000).unwrap().with_repeat(1),
            )),
    );
    guard.handle().install_ctrlc_handler().unwrap();
    let start = Instant::now();
    tracing::dispatcher::with_default(&dispatch, || {
        for step in 0u64.. {
            let _s = tracing::info_span!("train_step", step).entered();
            for _ in 0..10 {
                let _w = tracing::info_span!("work").entered();
                spin(Duration::from_micros(50));
            }
            if step == 3 {
                let pid = std::process::id().to_string();
                let status = std::process::Command::new("kill")
                    .args(["-INT", &pid])
                    .status();
                assert!(status.is_ok_and(|s| s.success()), "kill -INT {pid}");
            }
            if start.elapsed() > Duration::from_secs(20) {
                break;
            }
        }
    });
    eprintln!("the Ctrl-C handler did not end the process");
    std::process::exit(3);
}

#[cfg(all(unix, feature = "signals"))]
#[test]
fn ctrl_c_finishes_the_open_window_and_exits_130() {
    let dir = temp_dir("ctrlc");
    let out = temp_dir("ctrlc-out");
    let output = support::child_test(module_path!(), "ctrlc_child")
        .env("SPANPROF_CTRLC_CHILD", &dir)
        .env("SPANPROF_CTRLC_OUT", &out)
        .output()
        .unwrap();
    support::assert_ran_one_test(&output);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(130), "child stderr:\n{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert_eq!(files_in(&dir), ["train_step_steps_0-999.json"]);
    // Valid JSON, every B with its E: the step interrupted is closed as unfinished.
    let trace = Trace::read(&dir.join("train_step_steps_0-999.json"));
    assert!(trace.named("train_step").len() >= 4);
    assert!(trace.named("work").len() >= 40);
    // The handler also wrote the profile, as the guard would have.
    let profile = spanprof::Snapshot::read_json(out.join(spanprof::output::PROFILE_FILE)).unwrap();
    assert!(profile.span("work").unwrap().calls >= 40);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn an_empty_trace_file_path_is_refused_at_build() {
    let _serial = serial();
    let e = ProfileLayer::builder()
        .with_env(false)
        .with_chrome(ChromeOptions::file(""))
        .build()
        .unwrap_err();
    assert!(matches!(e, Error::InvalidChromeOptions { .. }), "{e:?}");
    assert!(e.to_string().contains("empty"), "{e}");
}

#[test]
fn a_second_session_is_refused_while_the_first_is_alive() {
    let _serial = serial();
    let dir = temp_dir("two");
    let (dispatch, first) = setup(ChromeOptions::dir(dir.join("a")));
    // tracing-chrome keeps per-thread state: a second session would get wrong files.
    let e = ProfileLayer::builder()
        .with_env(false)
        .with_chrome(ChromeOptions::dir(dir.join("b")))
        .build()
        .unwrap_err();
    assert!(matches!(e, Error::InvalidChromeOptions { .. }), "{e:?}");
    assert!(
        e.to_string().contains("another chrome trace session"),
        "{e}"
    );
    tracing::dispatcher::with_default(&dispatch, || step_work(0));
    let traces = first.finish().unwrap().traces;
    assert_eq!(Trace::read(&traces[0]).named("leaf").len(), 1);
    // Finished: a new session may start, and a dropped one frees the place too.
    let (dispatch, second) = setup(ChromeOptions::dir(dir.join("c")));
    drop(second);
    drop(dispatch);
    let (dispatch, third) = setup(ChromeOptions::dir(dir.join("d")));
    tracing::dispatcher::with_default(&dispatch, || step_work(0));
    let traces = third.finish().unwrap().traces;
    assert_eq!(Trace::read(&traces[0]).named("leaf").len(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn short_windows_get_counter_tracks_at_their_start_and_end() {
    let _serial = serial();
    let dir = temp_dir("short-windows");
    // 1 ms windows, one sample a second: no sample is taken inside any window.
    let (dispatch, guard) = support::install_chrome(
        ProfileLayer::builder()
            .with_preset(Preset::Detailed)
            .with_sample_interval(Duration::from_secs(1))
            .with_chrome(
                ChromeOptions::dir(&dir)
                    .with_steps("train_step", Schedule::new(0, 0, 1).unwrap().with_repeat(3)),
            ),
    );
    tracing::dispatcher::with_default(&dispatch, || {
        for step in 0..3u64 {
            let _s = tracing::info_span!("train_step", step).entered();
            spin(Duration::from_millis(1));
        }
    });
    let outputs = guard.finish().unwrap();
    assert_eq!(outputs.traces.len(), 3);
    for path in &outputs.traces {
        let trace = Trace::read(path);
        let step = trace.named("train_step")[0];
        let memory: Vec<f64> = trace
            .events
            .iter()
            .filter(|e| e["ph"] == "C" && e["name"] == "memory")
            .map(|e| e["ts"].as_f64().unwrap())
            .collect();
        assert_eq!(memory.len(), 2, "{}: {memory:?}", path.display());
        assert!(
            memory[0] <= step.2 && memory[1] >= step.3,
            "{memory:?} around {step:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn windows_that_cannot_be_written_are_each_reported_and_leave_no_partial_file() {
    let _serial = serial();
    let dir = temp_dir("unwritable");
    std::fs::create_dir_all(&dir).unwrap();
    // Directories where the files of windows 1 and 2 go: their rename into place fails.
    for blocked in ["train_step_steps_1-1.json", "train_step_steps_2-2.json"] {
        std::fs::create_dir_all(dir.join(blocked).join("inside")).unwrap();
    }
    let (dispatch, guard) =
        setup(ChromeOptions::dir(&dir).with_steps("train_step", Schedule::every_step()));
    tracing::dispatcher::with_default(&dispatch, || {
        for step in 0..4 {
            step_work(step);
        }
    });
    let err = guard.finish().unwrap_err();
    let msg = err.to_string();
    for blocked in ["train_step_steps_1-1.json", "train_step_steps_2-2.json"] {
        assert!(msg.contains(blocked), "{msg}");
    }
    // The other windows are complete, the blocking directories untouched, no temporary left.
    assert_eq!(
        files_in(&dir),
        [
            "train_step_steps_0-0.json",
            "train_step_steps_1-1.json",
            "train_step_steps_2-2.json",
            "train_step_steps_3-3.json"
        ]
    );
    for ok in ["train_step_steps_0-0.json", "train_step_steps_3-3.json"] {
        assert_eq!(Trace::read(&dir.join(ok)).named("leaf").len(), 1);
    }
    assert!(dir.join("train_step_steps_1-1.json/inside").is_dir());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Skipped windows are counted in the profile and said in the report.
#[test]
fn skipped_windows_are_in_the_profile_and_the_report() {
    let mut snapshot =
        spanprof::Snapshot::from_json(include_str!("../data/profile-v1-basic.json"), "test data")
            .unwrap();
    assert_eq!(
        snapshot.dropped.trace_windows_skipped, 0,
        "older profiles read 0"
    );
    snapshot.dropped.trace_windows_skipped = 7;
    let back = spanprof::Snapshot::from_json(&snapshot.to_json(), "round trip").unwrap();
    assert_eq!(back.dropped.trace_windows_skipped, 7);
    let report = spanprof::output::Table::new().to_string(&back);
    assert!(
        report.contains("note: 7 Chrome trace windows skipped"),
        "{report}"
    );
}

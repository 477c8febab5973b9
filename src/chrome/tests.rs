//! Counter tracks end to end, with a fake counter source (the real sampler is wired in at
//! merge): the builder, the guard, the registry, tracing-chrome's file, the rewrite.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;
use tracing_subscriber::prelude::*;

use super::counters::{Counter, CounterSource};
use super::session::{Session, MAX_PENDING_WINDOWS};
use super::{ChromeOptions, Schedule, TraceBackend};
use crate::{Error, ProfileGuard, ProfileLayer, ReportTarget};

/// One chrome session per process: the tests that build one run one at a time.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // A session of a test that failed may still be finishing in the background.
    let start = Instant::now();
    while Session::any_alive() && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(5));
    }
    guard
}

/// Samples pushed by the test at known moments; answers with those inside the interval. While
/// it is closed (`hold`), requests wait until it is opened (`release`).
#[derive(Default)]
struct FakeSource {
    samples: Mutex<Vec<Counter>>,
    asked: Mutex<Vec<(Instant, Instant)>>,
    held: Mutex<bool>,
    opened: Condvar,
}

impl FakeSource {
    fn sample(&self, step: u64) {
        self.samples.lock().unwrap().push(Counter {
            at: Instant::now(),
            name: "memory".into(),
            values: vec![
                ("rss_mb".into(), 800.0 + step as f64),
                ("heap_mb".into(), 100.0 + step as f64),
            ],
        });
    }
}

impl FakeSource {
    fn hold(&self) {
        *self.held.lock().unwrap() = true;
    }

    fn release(&self) {
        *self.held.lock().unwrap() = false;
        self.opened.notify_all();
    }
}

impl CounterSource for FakeSource {
    fn counters_between(&self, from: Instant, to: Instant) -> Vec<Counter> {
        let mut held = self.held.lock().unwrap();
        while *held {
            held = self.opened.wait(held).unwrap();
        }
        drop(held);
        self.asked.lock().unwrap().push((from, to));
        self.samples
            .lock()
            .unwrap()
            .iter()
            .filter(|c| from <= c.at && c.at <= to)
            .cloned()
            .collect()
    }

    fn latest(&self, at: Instant) -> Vec<Counter> {
        let samples = self.samples.lock().unwrap();
        let latest = samples.iter().rev().find(|c| c.at <= at);
        latest
            .map(|c| Counter { at, ..c.clone() })
            .into_iter()
            .collect()
    }
}

/// A builder tracing every step span (`step`) with `backend` into `dir`, its session (given
/// `source`), and a dispatcher with spanprof's layer, the chrome layer, and `extra`.
fn every_step_run<L>(
    dir: &Path,
    backend: TraceBackend,
    source: Option<Arc<FakeSource>>,
    extra: L,
) -> (tracing::Dispatch, ProfileGuard, Arc<Session>)
where
    L: tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync + 'static,
{
    let options = ChromeOptions::dir(dir)
        .with_backend(backend)
        .with_steps("step", Schedule::every_step());
    let (layer, guard) = ProfileLayer::builder()
        .with_env(false)
        .with_report(ReportTarget::Off)
        .with_chrome(options)
        .build()
        .unwrap();
    let session = guard.handle().chrome_session().unwrap();
    if let Some(source) = source {
        session.set_counter_source(source);
    }
    let dispatch = tracing::Dispatch::new(
        tracing_subscriber::registry()
            .with(extra)
            .with(layer)
            .with(guard.chrome_layer().unwrap()),
    );
    (dispatch, guard, session)
}

/// Counts the warnings at `spanprof::perf`.
#[derive(Clone, Default)]
struct PerfWarnings(Arc<AtomicUsize>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for PerfWarnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let meta = event.metadata();
        if meta.target() == crate::PERF_TARGET && *meta.level() == tracing::Level::WARN {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// The names in `dir`, sorted.
fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spanprof-unit-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn read(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn spin(d: Duration) {
    let start = Instant::now();
    while start.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// (begin ts, end ts) of every completed span of `name`, from well-formed B/E pairs.
fn intervals(events: &[Value], name: &str) -> Vec<(f64, f64)> {
    let mut stacks: BTreeMap<String, Vec<(String, f64)>> = BTreeMap::new();
    let mut out = Vec::new();
    for e in events {
        let stack = stacks.entry(e["tid"].to_string()).or_default();
        let ts = e["ts"].as_f64().unwrap_or(0.0);
        match e["ph"].as_str() {
            Some("B") => stack.push((e["name"].as_str().unwrap().to_string(), ts)),
            Some("E") => {
                let (n, begin) = stack.pop().expect("E without B");
                assert_eq!(n, e["name"].as_str().unwrap(), "E closes another span");
                if n == name {
                    out.push((begin, ts));
                }
            }
            _ => {}
        }
    }
    assert!(stacks.values().all(|s| s.is_empty()), "B without E");
    out
}

/// The backends this build has: the tests below run the same body for each.
fn backends() -> Vec<TraceBackend> {
    vec![
        TraceBackend::Chrome,
        #[cfg(feature = "perfetto")]
        TraceBackend::Perfetto,
    ]
}

/// `<stem>.<the backend's extension>`.
fn file_of(stem: &str, backend: TraceBackend) -> String {
    format!("{stem}.{}", backend.extension())
}

/// How many entries of the span `name` a trace file of either backend holds, each begun and
/// ended on one thread (a begin without its end, or an end closing another span, fails).
fn slices(path: &Path, name: &str) -> usize {
    match path.extension().and_then(|e| e.to_str()) {
        #[cfg(feature = "perfetto")]
        Some("pftrace") => perfetto_slices(path, name),
        _ => intervals(&read(path), name).len(),
    }
}

/// Perfetto's `Trace`, `TracePacket`, `TrackEvent` and interned event names: what
/// [`perfetto_slices`] reads (field numbers from `perfetto_trace.proto`).
#[cfg(feature = "perfetto")]
mod pb {
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Trace {
        #[prost(message, repeated, tag = "1")]
        pub(super) packet: Vec<Packet>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Packet {
        #[prost(uint32, optional, tag = "10")]
        pub(super) sequence: Option<u32>,
        #[prost(message, optional, tag = "11")]
        pub(super) event: Option<Event>,
        #[prost(message, optional, tag = "12")]
        pub(super) interned: Option<Interned>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Event {
        #[prost(int32, optional, tag = "9")]
        pub(super) r#type: Option<i32>,
        #[prost(uint64, optional, tag = "10")]
        pub(super) name_iid: Option<u64>,
        #[prost(uint64, optional, tag = "11")]
        pub(super) track_uuid: Option<u64>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Interned {
        #[prost(message, repeated, tag = "2")]
        pub(super) event_names: Vec<Name>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Name {
        #[prost(uint64, optional, tag = "1")]
        pub(super) iid: Option<u64>,
        #[prost(string, optional, tag = "2")]
        pub(super) name: Option<String>,
    }
}

/// [`slices`] of a Perfetto file: slices on the thread tracks (events without a track of their
/// own), names interned per packet sequence.
#[cfg(feature = "perfetto")]
fn perfetto_slices(path: &Path, name: &str) -> usize {
    use prost::Message;
    let bytes = std::fs::read(path).unwrap();
    let trace =
        pb::Trace::decode(bytes.as_slice()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut names: BTreeMap<(u32, u64), String> = BTreeMap::new();
    let mut stacks: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    let mut out = 0;
    for packet in trace.packet {
        let seq = packet.sequence.unwrap_or(0);
        for n in packet.interned.iter().flat_map(|i| &i.event_names) {
            names.insert((seq, n.iid.unwrap()), n.name.clone().unwrap());
        }
        let Some(event) = packet.event.filter(|e| e.track_uuid.is_none()) else {
            continue;
        };
        let stack = stacks.entry(seq).or_default();
        match event.r#type {
            Some(1) => {
                let iid = event.name_iid.expect("a slice begin without a name");
                stack.push(names[&(seq, iid)].clone());
            }
            Some(2) => {
                let begun = stack.pop().expect("a slice end without its begin");
                out += usize::from(begun == name);
            }
            _ => {}
        }
    }
    assert!(
        stacks.values().all(|s| s.is_empty()),
        "a slice begin without its end"
    );
    out
}

#[test]
fn counter_samples_become_counter_tracks_on_the_trace_time_base() {
    let _serial = serial();
    let dir = temp_dir("counters");
    let source = Arc::new(FakeSource::default());
    let (layer, guard) = ProfileLayer::builder()
        .with_env(false)
        .with_report(ReportTarget::Off)
        .with_chrome(
            ChromeOptions::dir(&dir)
                .with_steps("step", Schedule::new(1, 0, 2).unwrap().with_repeat(2)),
        )
        .build()
        .unwrap();
    let session = guard.handle().chrome_session().unwrap();
    session.set_counter_source(source.clone());
    let dispatch = tracing::Dispatch::new(
        tracing_subscriber::registry()
            .with(layer)
            .with(guard.chrome_layer()),
    );
    tracing::dispatcher::with_default(&dispatch, || {
        for step in 0..8u64 {
            let _s = tracing::info_span!("step", step).entered();
            let _w = tracing::info_span!("sampled").entered();
            spin(Duration::from_micros(300));
            source.sample(step); // in the middle of `sampled`
            spin(Duration::from_micros(300));
        }
    });
    let outputs = guard.finish().unwrap();
    // wait 1, active 2: steps 1-2 and 4-5.
    let expected = [
        dir.join("step_steps_1-2.json"),
        dir.join("step_steps_4-5.json"),
    ];
    assert_eq!(outputs.traces, expected);
    assert_eq!(
        source.asked.lock().unwrap().len(),
        2,
        "one request per window"
    );
    for (file, steps) in expected.iter().zip([[1u64, 2], [4, 5]]) {
        let events = read(file);
        let counters: Vec<&Value> = events.iter().filter(|e| e["ph"] == "C").collect();
        // The latest readings at the window's start (the previous step's sample), the two
        // samples taken in it, the latest readings at its end (its last step's sample).
        assert_eq!(counters.len(), 4, "{}", file.display());
        let steps_in = intervals(&events, "step");
        let (first_b, last_e) = (steps_in[0].0, steps_in[1].1);
        let (start, end) = (counters[0], counters[3]);
        assert_eq!(
            start["args"]["rss_mb"].as_f64(),
            Some(800.0 + steps[0] as f64 - 1.0)
        );
        assert_eq!(
            end["args"]["rss_mb"].as_f64(),
            Some(800.0 + steps[1] as f64)
        );
        assert!(start["ts"].as_f64().unwrap() <= first_b);
        assert!(end["ts"].as_f64().unwrap() >= last_e);
        let sampled = intervals(&events, "sampled");
        assert_eq!(sampled.len(), 2);
        for ((c, step), (begin, end)) in counters[1..3].iter().zip(steps).zip(&sampled) {
            assert_eq!(c["name"], "memory");
            assert_eq!(c["args"]["rss_mb"].as_f64(), Some(800.0 + step as f64));
            assert_eq!(c["args"]["heap_mb"].as_f64(), Some(100.0 + step as f64));
            // Same time base as tracing-chrome's ts: the sample lies inside its span (300 µs
            // from either end, so any skew of the base above that would show).
            let ts = c["ts"].as_f64().unwrap();
            assert!(
                *begin + 250.0 < ts && ts < *end - 250.0,
                "counter at {ts} µs outside `sampled` [{begin}, {end}]"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn finish_is_idempotent_and_stops_tracing() {
    let _serial = serial();
    let dir = temp_dir("finish");
    let (layer, guard) = ProfileLayer::builder()
        .with_env(false)
        .with_report(ReportTarget::Off)
        .with_chrome(ChromeOptions::dir(&dir).with_steps("step", Schedule::every_step()))
        .build()
        .unwrap();
    let handle = guard.handle();
    let dispatch = tracing::Dispatch::new(
        tracing_subscriber::registry()
            .with(layer)
            .with(guard.chrome_layer()),
    );
    assert!(guard
        .chrome_layer::<tracing_subscriber::Registry>()
        .is_none());
    tracing::dispatcher::with_default(&dispatch, || {
        drop(tracing::info_span!("step").entered());
        let first = handle.finish_chrome().unwrap();
        assert_eq!(first, vec![dir.join("step_steps_0-0.json")]);
        // Finished: further steps open no window.
        drop(tracing::info_span!("step").entered());
        assert_eq!(handle.finish_chrome().unwrap(), first);
        assert_eq!(handle.chrome_traces(), first);
    });
    let outputs = guard.finish().unwrap();
    assert_eq!(outputs.traces.len(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `n` steps, each with one child span.
fn steps(dispatch: &tracing::Dispatch, range: std::ops::Range<u64>) {
    tracing::dispatcher::with_default(dispatch, || {
        for step in range {
            let _s = tracing::info_span!("step", step).entered();
            let _w = tracing::info_span!("work").entered();
        }
    });
}

#[test]
fn a_full_disk_fails_each_window_it_cannot_write_and_leaves_old_files_and_no_partial_file() {
    for backend in backends() {
        full_disk_with(backend);
    }
}

fn full_disk_with(backend: TraceBackend) {
    let _serial = serial();
    let dir = temp_dir(&format!("full-disk-{backend}"));
    let name = |s: &str| file_of(&format!("step_steps_{s}"), backend);
    let (dispatch, guard, session) = every_step_run(&dir, backend, None, PerfWarnings::default());
    let disk = session.set_disk_space(1 << 30);
    steps(&dispatch, 0..1);
    // Window 0 is written; then the disk fills up.
    let start = Instant::now();
    while session.written().is_empty() && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(session.written(), vec![dir.join(name("0-0"))]);
    disk.store(100, Ordering::SeqCst);
    // A file of an earlier run at window 1's path.
    std::fs::write(dir.join(name("1-1")), b"old").unwrap();
    steps(&dispatch, 1..3);
    let err = guard.finish().unwrap_err();
    let Error::Outputs(errors) = &err else {
        panic!("{backend}: one error per failed window expected: {err}");
    };
    assert_eq!(errors.len(), 2, "{backend}: {err}");
    for (e, file) in errors.iter().zip([name("1-1"), name("2-2")]) {
        let msg = e.to_string();
        assert!(
            msg.contains(&file) && msg.contains("no space left"),
            "{msg}"
        );
    }
    // Window 0 complete, window 1's old file untouched, nothing of window 2, no temporary.
    assert_eq!(names_in(&dir), [name("0-0"), name("1-1")]);
    assert_eq!(slices(&dir.join(name("0-0")), "work"), 1, "{backend}");
    assert_eq!(std::fs::read(dir.join(name("1-1"))).unwrap(), b"old");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn windows_past_the_bound_are_skipped_counted_and_warned_once() {
    for backend in backends() {
        bound_with(backend);
    }
}

fn bound_with(backend: TraceBackend) {
    let _serial = serial();
    let dir = temp_dir(&format!("bound-{backend}"));
    let source = Arc::new(FakeSource::default());
    let warnings = PerfWarnings::default();
    let (dispatch, guard, session) =
        every_step_run(&dir, backend, Some(source.clone()), warnings.clone());
    // The writer thread is stuck completing window 0: the windows after it wait in memory.
    source.hold();
    steps(&dispatch, 0..20);
    source.release();
    let skipped = 20 - MAX_PENDING_WINDOWS as u64;
    assert_eq!(session.skipped_windows(), skipped, "{backend}");
    let start = Instant::now();
    while warnings.0.load(Ordering::SeqCst) == 0 && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(2));
    }
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        warnings.0.load(Ordering::SeqCst),
        1,
        "{backend}: one warning"
    );
    let outputs = guard.finish().unwrap();
    assert_eq!(outputs.traces.len(), MAX_PENDING_WINDOWS, "{backend}");
    assert_eq!(session.skipped_windows(), skipped);
    for (i, path) in outputs.traces.iter().enumerate() {
        assert_eq!(
            *path,
            dir.join(file_of(&format!("step_steps_{i}-{i}"), backend))
        );
        assert_eq!(slices(path, "work"), 1, "{}", path.display());
    }
    assert_eq!(names_in(&dir).len(), MAX_PENDING_WINDOWS);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn finish_times_out_naming_the_windows_not_completed() {
    for backend in backends() {
        timeout_with(backend);
    }
}

fn timeout_with(backend: TraceBackend) {
    let _serial = serial();
    let dir = temp_dir(&format!("timeout-{backend}"));
    let name = |s: &str| file_of(&format!("step_steps_{s}"), backend);
    let source = Arc::new(FakeSource::default());
    let (dispatch, guard, session) =
        every_step_run(&dir, backend, Some(source.clone()), PerfWarnings::default());
    session.set_finish_limit(Duration::from_millis(300));
    source.hold();
    steps(&dispatch, 0..2);
    let start = Instant::now();
    let err = session.finish().unwrap_err();
    let waited = start.elapsed();
    assert!(waited < Duration::from_secs(5), "{backend}: {waited:?}");
    let msg = err.to_string();
    assert!(msg.contains("2 trace window(s) not completed"), "{msg}");
    assert!(
        msg.contains(&name("0-0")) && msg.contains(&name("1-1")),
        "{msg}"
    );
    // The files are completed in the background once the writer can go on (and a chrome
    // session gives its claim back).
    source.release();
    let start = Instant::now();
    while (Session::any_alive() || session.written().len() < 2)
        && start.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(!Session::any_alive());
    assert_eq!(
        session.written(),
        [dir.join(name("0-0")), dir.join(name("1-1"))]
    );
    for file in session.written() {
        assert_eq!(slices(&file, "work"), 1, "{}", file.display());
    }
    drop(guard);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_thread_quiet_since_it_traced_a_window_does_not_hold_its_file() {
    for backend in backends() {
        quiet_thread_with(backend);
    }
}

fn quiet_thread_with(backend: TraceBackend) {
    let _serial = serial();
    let dir = temp_dir(&format!("quiet-{backend}"));
    let name = |s: &str| dir.join(file_of(&format!("step_steps_{s}"), backend));
    let (dispatch, guard, session) = every_step_run(&dir, backend, None, PerfWarnings::default());
    session.set_finish_limit(Duration::from_secs(5));
    let (traced, traced_rx) = std::sync::mpsc::channel::<()>();
    let (go_on, go_on_rx) = std::sync::mpsc::channel::<()>();
    // Another thread traces a span in window 0, then stays alive and quiet past the end.
    let quiet = tracing::dispatcher::with_default(&dispatch, || {
        let step = tracing::info_span!("step").entered();
        let d = dispatch.clone();
        let quiet = std::thread::spawn(move || {
            tracing::dispatcher::with_default(&d, || {
                tracing::info_span!("work").in_scope(|| spin(Duration::from_micros(50)));
            });
            traced.send(()).unwrap();
            let _ = go_on_rx.recv_timeout(Duration::from_secs(20));
        });
        traced_rx.recv().unwrap();
        drop(step);
        quiet
    });
    steps(&dispatch, 1..3);
    let start = Instant::now();
    let written = session.finish().unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "{backend}: {:?}",
        start.elapsed()
    );
    assert_eq!(written, [name("0-0"), name("1-1"), name("2-2")]);
    assert_eq!(
        slices(&name("0-0"), "work"),
        1,
        "{backend}: the other thread's span"
    );
    assert_eq!(slices(&name("2-2"), "work"), 1, "{backend}");
    go_on.send(()).unwrap();
    quiet.join().unwrap();
    drop(guard);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `SPANPROF_TRACE` turns traces on without `with_chrome`, under the output directory; a value
/// outside its rule leaves the builder's (none) and warns.
#[test]
fn spanprof_trace_turns_traces_on_and_an_invalid_value_falls_back() {
    let _serial = serial();
    let dir = temp_dir("env-trace");
    let build = |value: &str| {
        crate::ProfileLayer::builder()
            .with_report(ReportTarget::Off)
            .build_from(crate::env::test_env(&[
                ("SPANPROF_TRACE", value),
                ("SPANPROF_OUT", dir.to_str().unwrap()),
            ]))
            .unwrap()
    };
    let (layer, guard) = build("whole");
    let dispatch = tracing::Dispatch::new(
        tracing_subscriber::registry()
            .with(layer)
            .with(guard.chrome_layer()),
    );
    steps(&dispatch, 0..2);
    let outputs = guard.finish().unwrap();
    assert_eq!(
        outputs.traces,
        [dir.join(super::env::DEFAULT_TRACE_DIR).join("trace.json")]
    );
    assert_eq!(intervals(&read(&outputs.traces[0]), "work").len(), 2);
    let (_layer, guard) = build("json");
    assert!(
        guard.handle().chrome_session().is_none(),
        "no traces: the builder's"
    );
    drop(guard);
    let _ = std::fs::remove_dir_all(&dir);
}

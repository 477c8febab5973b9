//! Golden files: the console report and the JSON profile of a scripted run on a mock clock,
//! compared byte for byte with `tests/data/golden-report.txt` and `tests/data/golden-profile.json`.
//!
//! The run is single-threaded and its clock moves only when the script moves it, so everything
//! in the profile is deterministic except the run's metadata (host, pid, command line, start
//! time), which is replaced by fixed values before rendering. `duration_ns` is not replaced: it
//! comes from the mock clock, and a test checks it is the script's total.
//!
//! When the report or the profile changes on purpose (a new column, a new field, a new schema
//! version, a spanprof version bump: `run.crate_version` is in the profile), refresh the files:
//!
//! ```sh
//! SPANPROF_BLESS=1 cargo test --test it golden::
//! ```
//!
//! With `SPANPROF_BLESS=1` the tests write the files instead of comparing (and say so on
//! stderr); review the diff with `git diff tests/data/` before committing it. See
//! `tests/data/README.md`.

use crate::support;

use std::cell::Cell;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use spanprof::clock::MockClock;
use spanprof::output::Table;
use spanprof::profile::SCHEMA_VERSION;
use spanprof::{Preset, ProfileLayer, ReportTarget, Snapshot};
use support::span;
use tracing::Dispatch;
use tracing_subscriber::prelude::*;

/// The script's spans keep the target they had when this file was a test binary of its own
/// (`golden`, its module path then; now `it::golden`): the golden files carry it, and so does
/// `profile-v3-golden.json`, which stands for an earlier version's output and is never refreshed.
macro_rules! info_span {
    ($($arg:tt)+) => {
        tracing::info_span!(target: "golden", $($arg)+)
    };
}

const REPORT_FILE: &str = "golden-report.txt";
const PROFILE_FILE: &str = "golden-profile.json";

pub(crate) fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("data")
}

pub(crate) fn blessing() -> bool {
    std::env::var_os("SPANPROF_BLESS").is_some_and(|v| v == "1")
}

/// The mock clock and how far the script has moved it.
struct Ticker {
    clock: MockClock,
    elapsed_ns: Cell<u64>,
}

impl Ticker {
    fn tick(&self, us: u64) {
        self.clock.advance(Duration::from_micros(us));
        self.elapsed_ns.set(self.elapsed_ns.get() + us * 1_000);
    }
}

/// A span name longer than the report's 22-character name column.
const LONG_NAME: &str = "load_checkpoint_from_object_storage";

/// Recursion through a function: a new instance of `descend` nested in the last, per level.
fn descend(t: &Ticker, depth: u64) {
    let _s = info_span!("descend", depth).entered();
    t.tick(7);
    if depth > 0 {
        descend(t, depth - 1);
    }
    t.tick(2);
}

/// The scripted workload. Returns the span it leaves open for the snapshot.
fn script(t: &Ticker) -> tracing::Span {
    // Created first, entered twice below, still open when the snapshot is taken.
    let connection = info_span!("connection");
    t.tick(10);

    // Async-style: one instance entered at three polls, idle between them.
    let request = info_span!("request", items = 3u64);
    for poll in 0..3 {
        request.in_scope(|| t.tick(20 + 10 * poll));
        t.tick(100);
    }
    drop(request);

    // Nested spans with throughput fields, and an error-level event in every third step.
    info_span!("train").in_scope(|| {
        for step in 0..8u64 {
            let s = info_span!(
                "train_step",
                step,
                items = 32u64,
                bytes = tracing::field::Empty,
                flops = 2.5e6
            );
            s.record("bytes", 4096u64 * (step + 1));
            s.in_scope(|| {
                t.tick(5);
                info_span!("forward").in_scope(|| {
                    t.tick(100 + 10 * step);
                    info_span!("matmul", flops = 1_000_000u64).in_scope(|| t.tick(60 + step));
                });
                info_span!("backward").in_scope(|| t.tick(200 + 25 * step));
                info_span!("validate_batch").in_scope(|| {
                    t.tick(3);
                    if step % 3 == 0 {
                        tracing::error!(step, "batch rejected");
                    }
                });
                t.tick(1);
            });
        }
    });

    // Recursion: through a function (nested instances), and on one instance (re-entered while
    // entered: counted once, for the outermost entry).
    descend(t, 4);
    let walk = info_span!("walk");
    walk.in_scope(|| {
        t.tick(4);
        walk.in_scope(|| {
            t.tick(6);
            walk.in_scope(|| t.tick(1));
        });
        t.tick(2);
    });
    drop(walk);

    info_span!(LONG_NAME).in_scope(|| t.tick(1_500));

    connection.in_scope(|| t.tick(40));
    t.tick(30);
    connection.in_scope(|| t.tick(45));
    t.tick(10);
    connection
}

/// The fixed run metadata of the golden files (what differs between runs).
pub(crate) fn normalise(snap: &mut Snapshot) {
    snap.run.host = "golden-host".to_string();
    snap.run.pid = 4242;
    snap.run.command_line = vec!["golden".to_string()];
    snap.run.start_time = "2024-01-01T00:00:00.000000Z".to_string();
    snap.run.start_unix_ns = 1_704_067_200_000_000_000;
}

/// Runs the script on a mock clock: the normalised snapshot, taken while `connection` is open
/// and `serve` is entered, and how far the script moved the clock.
fn record() -> (Snapshot, u64) {
    let (dispatch, guard, clock) = support::mock();
    let t = Ticker {
        clock,
        elapsed_ns: Cell::new(0),
    };
    let mut snap = tracing::dispatcher::with_default(&dispatch, || {
        let connection = script(&t);
        // Entered at the snapshot: open, no completed entry, time in progress.
        let _serve = info_span!("serve").entered();
        t.tick(250);
        let snap = guard.snapshot();
        drop(connection);
        snap
    });
    normalise(&mut snap);
    (snap, t.elapsed_ns.get())
}

struct Golden {
    snapshot: Snapshot,
    elapsed_ns: u64,
    report: String,
    json: String,
}

/// The golden run, once per process. With `SPANPROF_BLESS=1` it also writes the files,
/// before any test reads them.
fn golden() -> &'static Golden {
    static GOLDEN: OnceLock<Golden> = OnceLock::new();
    GOLDEN.get_or_init(|| {
        let (snapshot, elapsed_ns) = record();
        let golden = Golden {
            report: Table::new().to_string(&snapshot),
            json: snapshot.to_json(),
            snapshot,
            elapsed_ns,
        };
        if blessing() {
            for (file, text) in [(REPORT_FILE, &golden.report), (PROFILE_FILE, &golden.json)] {
                let path = data_dir().join(file);
                std::fs::write(&path, text)
                    .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
                // Straight to stderr: the harness captures `eprintln!` of passing tests.
                let _ = writeln!(
                    std::io::stderr(),
                    "SPANPROF_BLESS=1: wrote {}",
                    path.display()
                );
            }
        }
        golden
    })
}

fn read_data(file: &str) -> String {
    let path = data_dir().join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "reading {}: {e}\n(create it with: SPANPROF_BLESS=1 cargo test --test it golden::)",
            path.display()
        )
    })
}

/// Compares `actual` with a golden file exactly; on a difference, names the first line that
/// differs. Nothing to compare while blessing (the file was just written).
fn assert_golden(file: &str, actual: &str) {
    if blessing() {
        return;
    }
    let expected = read_data(file);
    if expected == actual {
        return;
    }
    let (mut e_lines, mut a_lines) = (expected.split('\n'), actual.split('\n'));
    let mut line = 1;
    let (golden, got) = loop {
        match (e_lines.next(), a_lines.next()) {
            (Some(e), Some(a)) if e == a => line += 1,
            (e, a) => break (e, a),
        }
    };
    panic!(
        "{file} differs from this run, first at line {line}:\n  \
         golden: {golden:?}\n  \
         actual: {got:?}\n\
         ({} lines golden, {} lines now; None = past the end)\n\
         If the change is intended, refresh the golden files with\n  \
         SPANPROF_BLESS=1 cargo test --test it golden::\n\
         and review `git diff tests/data/`.",
        expected.lines().count(),
        actual.lines().count(),
    );
}

#[test]
fn report_matches_the_golden_file() {
    assert_golden(REPORT_FILE, &golden().report);
}

#[test]
fn profile_matches_the_golden_file() {
    assert_golden(PROFILE_FILE, &golden().json);
}

#[test]
fn the_script_covers_what_the_golden_files_are_for() {
    let g = golden();
    let snap = &g.snapshot;
    // The duration is the mock clock's: the script's total, no normalising needed.
    assert_eq!(snap.run.duration_ns, g.elapsed_ns);
    // Deterministic: a second run gives the same profile.
    assert_eq!(record().0, *snap);

    let request = span(snap, "request");
    assert_eq!((request.calls, request.instances), (3, 1));
    let walk = span(snap, "walk");
    assert_eq!((walk.calls, walk.entry_busy.total_ns), (1, 13_000));
    assert_eq!(span(snap, "descend").calls, 5);
    let step = span(snap, "train_step");
    assert_eq!(
        (step.items, step.bytes, step.flops),
        (Some(8 * 32), Some(4096 * 36), Some(8 * 2_500_000))
    );
    assert_eq!(span(snap, "validate_batch").errors, 3);
    let connection = span(snap, "connection");
    assert_eq!((connection.open, connection.calls), (1, 2));
    let serve = span(snap, "serve");
    assert_eq!((serve.open, serve.in_progress_ns), (1, 250_000));
    assert!(LONG_NAME.len() > 22);
    assert_eq!(span(snap, LONG_NAME).calls, 1);
    for section in [
        "throughput",
        "errors: validate_batch 3 of 8 calls",
        "span instances",
    ] {
        assert!(g.report.contains(section), "{section}:\n{}", g.report);
    }
}

#[test]
fn the_saved_profile_renders_the_live_report() {
    let g = golden();
    // The golden profile, read back, renders the golden report.
    let saved = Snapshot::from_json(&read_data(PROFILE_FILE), PROFILE_FILE).unwrap();
    let from_saved = Table::new().to_string(&saved);
    assert_golden(REPORT_FILE, &from_saved);
    // ... and the live report byte for byte.
    assert!(
        from_saved == g.report,
        "the report from {PROFILE_FILE} differs from the live one:\n{from_saved}\n---\n{}",
        g.report
    );
    // The live snapshot survives its own JSON exactly.
    let back = Snapshot::from_json(&g.json, "golden run").unwrap();
    assert_eq!(back, g.snapshot);
}

#[test]
fn the_golden_tree_holds_every_entry_once() {
    let tree = golden()
        .snapshot
        .tree
        .as_ref()
        .expect("the tree is on by default");
    // Per span name, the tree's calls and self times add up to the name's entries exactly
    // (`connection`, still open, included), its instances to the name's closed instances.
    for span in &golden().snapshot.spans {
        let nodes = || {
            tree.nodes
                .iter()
                .filter(|n| n.name == span.name && n.target == span.target)
        };
        let in_tree: u64 = nodes().map(|n| n.self_ns()).sum();
        assert_eq!(in_tree, span.entry_self.total_ns, "{}", span.name);
        let calls: u64 = nodes().map(|n| n.calls).sum();
        assert_eq!(calls, span.calls, "{}", span.name);
        let instances: u64 = tree
            .nodes
            .iter()
            .filter(|n| n.name == span.name)
            .map(|n| n.instances)
            .sum();
        assert_eq!(instances, span.instances, "{}", span.name);
    }
    let path_of = |name: &str| {
        let i = tree.nodes.iter().position(|n| n.name == name).unwrap();
        tree.path(i).join(";")
    };
    assert_eq!(path_of("matmul"), "train;train_step;forward;matmul");
    assert_eq!(path_of("validate_batch"), "train;train_step;validate_batch");
    // Recursion collapses: five nested `descend`s are one node.
    let descend: Vec<_> = tree.nodes.iter().filter(|n| n.name == "descend").collect();
    assert_eq!(descend.len(), 1);
    assert_eq!(descend[0].instances, 5);
    // matmul: 8 steps of 60 + step µs.
    let matmul = tree.nodes.iter().find(|n| n.name == "matmul").unwrap();
    assert_eq!(
        matmul.self_time.total_ns,
        (0..8).map(|s| (60 + s) * 1_000).sum::<u64>()
    );
    assert_eq!(matmul.calls, 8);
}

#[test]
fn profiles_of_earlier_versions_are_read() {
    let v1 = Snapshot::from_json(&read_data("profile-v1-basic.json"), "v1").unwrap();
    assert_eq!(v1.version, SCHEMA_VERSION);
    assert!(v1.resources.is_none());
    assert!(!v1.spans.is_empty());
    let report = Table::new().to_string(&v1);
    assert!(report.starts_with("spanprof: "), "{report}");
    assert!(!report.contains("resources: sampled every"), "{report}");

    let v2 = Snapshot::from_json(&read_data("profile-v2-detailed.json"), "v2").unwrap();
    assert_eq!(v2.version, SCHEMA_VERSION);
    assert!(v2.resources.is_some());
    let report = Table::new().to_string(&v2);
    assert!(
        report.contains("resources: sampled every 100 ms"),
        "{report}"
    );
    // Version 3 (the golden run before the call tree): no tree, the same per-name statistics
    // as the golden run records now.
    let v3 = Snapshot::from_json(&read_data("profile-v3-golden.json"), "v3").unwrap();
    assert_eq!(v3.version, SCHEMA_VERSION);
    assert!(v3.tree.is_none());
    assert_eq!(v3.spans, golden().snapshot.spans);
    let report = Table::new().to_string(&v3);
    assert!(!report.contains("Call tree"), "{report}");
    // Version 4 (the golden run before GPU time per span): the same profile as the golden
    // run's now, without GPU time (none was recorded).
    let v4 = Snapshot::from_json(&read_data("profile-v4-golden.json"), "v4").unwrap();
    assert_eq!(v4.version, SCHEMA_VERSION);
    assert_eq!(v4.spans, golden().snapshot.spans);
    assert_eq!(v4.tree, golden().snapshot.tree);
    assert!(v4.gpu_streams.is_empty());
    // Read into the current model: written again, they read back the same.
    for snap in [v1, v2, v3, v4] {
        assert_eq!(
            Snapshot::from_json(&snap.to_json(), "rewritten").unwrap(),
            snap
        );
    }
}

/// A real run (real clock, samplers, heap counting: `CountingAlloc` is this binary's allocator,
/// `tests/it/main.rs`) at `detailed`.
fn real_workload() {
    let kept = info_span!("cache").in_scope(|| vec![7u8; 256 * 1024]);
    let pool = info_span!("pool");
    for i in 0..6u64 {
        info_span!("step", items = 16u64, bytes = 1024u64 * (i + 1)).in_scope(|| {
            info_span!("compute").in_scope(|| {
                std::hint::black_box((0..20_000u64).map(|x| x * i).sum::<u64>());
            });
            pool.in_scope(|| std::hint::black_box(vec![0u8; 64 * 1024]).len());
            info_span!("wait").in_scope(|| std::thread::sleep(Duration::from_millis(5)));
            if i == 4 {
                tracing::error!("step 4 failed");
            }
        });
    }
    drop(kept);
    drop(pool);
}

#[test]
fn real_detailed_run_renders_the_same_from_its_profile() {
    let dir = support::temp_dir("golden-real");
    let (layer, guard) = ProfileLayer::builder()
        .with_env(false)
        .with_preset(Preset::Detailed)
        .with_sample_interval(Duration::from_millis(10))
        .with_top(25)
        .with_output_dir(&dir)
        .with_report(ReportTarget::File(dir.join("report.txt")))
        .build()
        .unwrap();
    let dispatch = Dispatch::new(tracing_subscriber::registry().with(layer));
    tracing::dispatcher::with_default(&dispatch, || {
        real_workload();
        // A live snapshot, taken while a span is open and entered.
        let _open = info_span!("open_at_snapshot").entered();
        let live = guard.snapshot();
        let back = Snapshot::from_json(&live.to_json(), "live snapshot").unwrap();
        assert_eq!(back, live);
        let live_report = Table::new().to_string(&live);
        assert!(
            live_report.contains("resources: sampled every 10 ms")
                && live_report.contains("open_at_snapshot"),
            "{live_report}"
        );
        assert!(
            Table::new().to_string(&back) == live_report,
            "the report rendered from the JSON differs from the live one:\n{}\n---\n{live_report}",
            Table::new().to_string(&back)
        );
    });

    // The files the guard writes: the report of the final snapshot (top 25, as configured),
    // and the profile it came from.
    let outputs = guard.finish().unwrap();
    let written = std::fs::read_to_string(outputs.report().unwrap()).unwrap();
    let profile = Snapshot::read_json(outputs.profile().unwrap()).unwrap();
    let rendered = Table::new().with_top(25).to_string(&profile);
    assert!(
        rendered == written,
        "report.txt differs from the report of profile.json:\n{written}\n---\n{rendered}"
    );
    assert!(written.contains("memory and CPU"), "{written}");
    let _ = std::fs::remove_dir_all(&dir);
}

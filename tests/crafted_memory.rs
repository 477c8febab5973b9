//! The `spanprof` command's memory on crafted profiles: reading, `compare`, `merge`, `top` and
//! every `report` format of a profile with a deep call tree (60 000 nodes in chains 256 deep,
//! the deepest the reader accepts) and of one with many span names, each stays within
//! [`MEMORY_MULTIPLE`] × its inputs' size of heap at its peak (but the steps of [`NOT_HELD`],
//! measured and printed).
//!
//! A call path is a chain of nodes: whatever keys a node by its whole path (a `Vec` of names)
//! takes memory in nodes × depth, where the profile takes it in nodes. (`compare` of a 43 MB
//! profile with itself took 3 GiB so.)
//!
//! The profiles are made here from a real one (`tests/data/golden-profile.json`): its nodes'
//! and span names' histograms copied onto generated names. Each step runs as the command runs
//! it (`src/bin/spanprof/main.rs`): the files read with `Snapshot::read_json`, the report
//! rendered into memory before it is printed, the merge written to a file.
//!
//! A test binary of its own (not a module of `tests/it/`): its global allocator keeps the peak
//! of the heap in use, which the tests of a larger binary, running beside these, would move.
//! `SPANPROF_CRAFTED_NODES` sets the number of nodes (default: 60 000 in a release build, 2 048
//! in a debug one, whose unoptimised histogram code takes a minute over the larger profiles;
//! the memory per node is the same). `--nocapture` prints each step's peak.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Instant;

use serde_json::{json, Value};
use spanprof::analysis::{self, CompareOptions};
use spanprof::output::{format_named, Selection, FORMAT_NAMES};
use spanprof::Snapshot;

/// Heap at the peak, at most, per byte of input (the files a command reads, together).
const MEMORY_MULTIPLE: usize = 10;

/// Steps measured and printed but not held to [`MEMORY_MULTIPLE`], and why (none: the
/// Prometheus exposition, 4.4 × a profile of many span names, is written one family at a time).
const NOT_HELD: &[(&str, &str)] = &[];

/// The deepest call path the reader accepts.
const DEPTH: usize = 256;

/// A global allocator that counts the bytes in use and their peak.
struct PeakAlloc;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(bytes: usize) {
    let live = LIVE.fetch_add(bytes, Relaxed) + bytes;
    PEAK.fetch_max(live, Relaxed);
}

// SAFETY: every call is System's; the counters only watch.
unsafe impl GlobalAlloc for PeakAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        System.dealloc(p, layout);
        LIVE.fetch_sub(layout.size(), Relaxed);
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let q = System.realloc(p, layout, new_size);
        if !q.is_null() {
            if new_size >= layout.size() {
                grew(new_size - layout.size());
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Relaxed);
            }
        }
        q
    }
}

#[global_allocator]
static ALLOC: PeakAlloc = PeakAlloc;

/// The size of the last report rendered, bytes.
static OUTPUT: AtomicUsize = AtomicUsize::new(0);

/// One measurement at a time: the peak is the process's.
static MEASURING: Mutex<()> = Mutex::new(());

/// The most heap `step` held at once beyond what was in use when it began, bytes, and its
/// time. What it returns is dropped inside the measurement.
fn peak_of(step: impl FnOnce()) -> (usize, f64) {
    let base = LIVE.load(Relaxed);
    PEAK.store(base, Relaxed);
    let t0 = Instant::now();
    step();
    let seconds = t0.elapsed().as_secs_f64();
    (PEAK.load(Relaxed).saturating_sub(base), seconds)
}

fn nodes() -> usize {
    std::env::var("SPANPROF_CRAFTED_NODES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(if cfg!(debug_assertions) {
            2_048
        } else {
            60_000
        })
}

/// The crafted profiles.
#[derive(Clone, Copy, Debug)]
enum Shape {
    /// Chains [`DEPTH`] deep, a name per depth under a root of its own: few span names.
    Deep,
    /// The same chains, every node a span name of its own, each with its entry in `spans`.
    ManyNames,
}

/// A valid profile of `nodes` call-tree nodes of `shape`, compact JSON: the golden profile's
/// run, a span's figures and a node's histograms, copied.
fn crafted(shape: Shape, nodes: usize) -> String {
    let golden: Value =
        serde_json::from_str(include_str!("data/golden-profile.json")).expect("golden profile");
    let node = golden["tree"]["nodes"]
        .as_array()
        .and_then(|n| n.iter().find(|n| n["instances"].as_u64() > Some(0)))
        .expect("a node with instances")
        .clone();
    let span = golden["spans"][0].clone();
    let name = |i: usize| match shape {
        Shape::Deep if i % DEPTH == 0 => format!("root_{}", i / DEPTH),
        Shape::Deep => format!("layer_{}", i % DEPTH),
        Shape::ManyNames => format!("span_name_{i}"),
    };
    let mut tree_nodes = Vec::with_capacity(nodes);
    let mut names = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for i in 0..nodes {
        let name = name(i);
        let parent = (i % DEPTH != 0).then(|| i - 1);
        tree_nodes.push(json!({
            "name": name,
            "target": "crafted",
            "parent": parent,
            "calls": node["calls"],
            "instances": node["instances"],
            "busy": node["busy"],
            "self": node["self"],
            "wall_ns": node["wall_ns"],
        }));
        if seen.insert(name.clone()) {
            names.push(name);
        }
    }
    let spans: Vec<Value> = names
        .into_iter()
        .map(|name| {
            let mut s = span.clone();
            s["name"] = name.into();
            s["target"] = "crafted".into();
            s
        })
        .collect();
    let mut profile = golden;
    profile["spans"] = spans.into();
    profile["tree"]["nodes"] = tree_nodes.into();
    let text = serde_json::to_string(&profile).expect("serialises");
    Snapshot::from_json(&text, "crafted").expect("a crafted profile the reader accepts");
    text
}

/// The profile of `shape` as a file in a directory of this test's.
fn write(shape: Shape, nodes: usize) -> (PathBuf, usize) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("crafted_memory");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{shape:?}-{nodes}.json"));
    let text = crafted(shape, nodes);
    std::fs::write(&path, &text).unwrap();
    (path, text.len())
}

fn read(path: &Path) -> Snapshot {
    Snapshot::read_json(path).expect("reads")
}

/// Every command on the profile of `shape`: each step's peak within the multiple of its
/// inputs' size.
fn commands_stay_within_the_multiple(shape: Shape) {
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let (path, size) = write(shape, nodes());
    let out = path.with_extension("merged.json");
    let mut over = Vec::new();
    let mut check = |what: &str, inputs: usize, (peak, seconds): (usize, f64)| {
        let what = match OUTPUT.swap(0, Relaxed) {
            0 => what.to_string(),
            bytes => format!("{what} ({bytes} bytes out)"),
        };
        let multiple = peak as f64 / inputs as f64;
        eprintln!(
            "{shape:?} ({} nodes, {size} bytes): {what}: peak {:.1} MiB, {multiple:.2} × the \
             inputs, {seconds:.2} s",
            nodes(),
            peak as f64 / (1 << 20) as f64,
        );
        if let Some((_, why)) = NOT_HELD.iter().find(|(step, _)| what.starts_with(step)) {
            eprintln!("  (not held to {MEMORY_MULTIPLE} ×: {why})");
        } else if peak > MEMORY_MULTIPLE * inputs {
            over.push(format!("{what}: {peak} bytes, {multiple:.1} × {inputs}"));
        }
    };
    check("read", size, peak_of(|| drop(read(&path))));
    check(
        "compare",
        2 * size,
        peak_of(|| {
            let (base, new) = ([read(&path)], [read(&path)]);
            let c = analysis::compare(&base, &new, &CompareOptions::default());
            assert!(!c.regressed());
            assert_eq!(
                c.paths.len(),
                nodes(),
                "every path judged once (p50), on both sides"
            );
        }),
    );
    check(
        "merge",
        2 * size,
        peak_of(|| {
            let runs = [read(&path), read(&path)];
            let all = Snapshot::merge(&runs, &["a.json", "b.json"]).expect("two profiles");
            assert_eq!(all.tree.as_ref().unwrap().nodes.len(), nodes());
            all.write_json(&out).unwrap();
        }),
    );
    check("top", size, peak_of(|| drop(analysis::top(&read(&path)))));
    for &name in FORMAT_NAMES {
        check(
            &format!("report --format {name}"),
            size,
            peak_of(|| {
                let snapshot = read(&path);
                let format = format_named(name, spanprof::Builder::DEFAULT_TOP).unwrap();
                let mut bytes = Vec::new();
                format
                    .render(&Selection::new().apply(&snapshot), &mut bytes)
                    .unwrap();
                assert!(!bytes.is_empty(), "{name}");
                OUTPUT.store(bytes.len(), Relaxed);
            }),
        );
    }
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_file(&path);
    assert!(
        over.is_empty(),
        "over {MEMORY_MULTIPLE} × the inputs' size: {over:#?}"
    );
}

#[test]
fn a_deep_call_tree_stays_within_a_multiple_of_its_size() {
    commands_stay_within_the_multiple(Shape::Deep);
}

#[test]
fn many_span_names_stay_within_a_multiple_of_their_size() {
    commands_stay_within_the_multiple(Shape::ManyNames);
}

/// The crafted profiles are what they say: paths [`DEPTH`] deep, names as planned.
#[test]
fn the_crafted_profiles_are_deep() {
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    for shape in [Shape::Deep, Shape::ManyNames] {
        let p = Snapshot::from_json(&crafted(shape, 2 * DEPTH), "crafted").unwrap();
        let tree = p.tree.as_ref().unwrap();
        assert_eq!(tree.nodes.len(), 2 * DEPTH);
        assert_eq!(tree.path(DEPTH - 1).len(), DEPTH);
        assert_eq!(tree.path(DEPTH).len(), 1);
        let names = match shape {
            Shape::Deep => DEPTH + 1,
            Shape::ManyNames => 2 * DEPTH,
        };
        assert_eq!(p.spans.len(), names, "{shape:?}");
    }
}

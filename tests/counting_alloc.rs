//! `CountingAlloc` installed as the global allocator of this test binary: exact per-thread
//! counts, and the batched process-wide figure.
//!
//! A test binary of its own (not a module of `tests/it/`): it judges the process-wide heap
//! figure, which the tests of a larger binary, running beside it, would move.

use std::hint::black_box;

use spanprof::alloc::HeapCounters;
use spanprof::CountingAlloc;

mod support;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::system();

fn now() -> HeapCounters {
    HeapCounters::thread().expect("CountingAlloc is this binary's global allocator")
}

/// Held by the tests that judge the process-wide figure, and by those that move it by more than
/// their slack (tens of MiB made and freed): one at a time.
fn process_figure() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn counters(allocated: u64, freed: u64, allocs: u64) -> HeapCounters {
    HeapCounters {
        allocated,
        freed,
        allocs,
    }
}

#[test]
fn installed() {
    let _warm = black_box(Box::new(1u8));
    assert!(HeapCounters::installed());
    assert!(HeapCounters::process_net_bytes().is_some());
}

#[test]
fn exact_per_thread_deltas() {
    // On a fresh thread, so nothing else runs on it between the readings.
    std::thread::spawn(|| {
        let t0 = now();
        let v: Vec<u8> = Vec::with_capacity(1000);
        let v = black_box(v);
        let t1 = now();
        assert_eq!(t1.since(t0), counters(1000, 0, 1));

        // realloc: free of the old size + allocation of the new one.
        let mut v = v;
        v.reserve_exact(3000);
        let v = black_box(v);
        let t2 = now();
        assert_eq!(t2.since(t1), counters(3000, 1000, 1));

        drop(v);
        let t3 = now();
        assert_eq!(t3.since(t2), counters(0, 3000, 0));

        // alloc_zeroed, and several sizes.
        let zeroed = black_box(vec![0u64; 512]); // 4096 bytes, calloc
        let boxes: Vec<Box<[u8; 24]>> = (0..10).map(|_| Box::new([7u8; 24])).collect();
        let boxes = black_box(boxes);
        let t4 = now();
        // 4096 + 10 × 24, plus the Vec of 10 boxes (80 bytes; collect from an exact-size
        // iterator allocates once).
        assert_eq!(t4.since(t3), counters(4096 + 240 + 80, 0, 12));
        drop(boxes);
        drop(zeroed);
        let t5 = now();
        assert_eq!(t5.since(t4), counters(0, 4096 + 240 + 80, 0));
        assert_eq!(t5.since(t0).net_bytes(), 0);
        // Reading the counters never allocates.
        let a = now();
        let b = now();
        assert_eq!(b, a);
    })
    .join()
    .unwrap();
}

#[test]
fn threads_count_separately_and_frees_count_where_they_happen() {
    let block = black_box(vec![1u8; 10_000]);
    let here0 = now();
    let (sent_back, other) = std::thread::spawn(move || {
        let t0 = now();
        drop(block); // allocated on the test thread, freed here
        let own = black_box(vec![2u8; 5_000]);
        (own, now().since(t0))
    })
    .join()
    .unwrap();
    assert_eq!(other, counters(5_000, 10_000, 1));
    // Nothing of that is on this thread's counters (the spawn itself allocates here, so check
    // only the sizes that thread handled).
    let here = now().since(here0);
    assert!(here.freed < 10_000, "{here:?}");
    drop(sent_back);
}

#[test]
fn process_view_follows_within_its_granularity() {
    let _one = process_figure();
    // Other tests allocate concurrently: hold a large block on a thread of ours and compare the
    // process figure with it, within the batching slack of the threads alive (generously 64).
    let slack = 64 * HeapCounters::PROCESS_GRANULARITY_BYTES as i64 + (4 << 20);
    let size = 32 << 20;
    let before = HeapCounters::process_net_bytes().unwrap();
    let block = std::thread::spawn(move || {
        let _ = HeapCounters::thread(); // registers the exit flush of this thread
        black_box(vec![3u8; size])
    })
    .join()
    .unwrap();
    let during = HeapCounters::process_net_bytes().unwrap();
    assert!(
        (during - before - size as i64).abs() < slack,
        "before {before}, during {during}"
    );
    drop(block);
    let after = HeapCounters::process_net_bytes().unwrap();
    assert!(
        (after - before).abs() < slack,
        "before {before}, after {after}"
    );
}

/// One span of each of 64 names (a function per callsite), lasting as long as the argument
/// makes it.
macro_rules! spans_of {
    ($($name:literal)*) => {
        [$((|body: &dyn Fn()| tracing::info_span!($name).in_scope(body)) as fn(&dyn Fn())),*]
    };
}

/// What one snapshot allocates (bytes, on the thread taking it) of a profile of `names` span
/// names each recorded on `threads` threads, at `basic` (the call tree on). On a mock clock,
/// each name's spans last from 1 ns to past the histograms' highest value (an hour): every
/// histogram spans its whole range, the most a snapshot can take.
fn snapshot_bytes(names: usize, threads: usize) -> u64 {
    let all: [fn(&dyn Fn()); 64] = spans_of!("n0" "n1" "n2" "n3" "n4" "n5" "n6" "n7" "n8" "n9" "n10" "n11" "n12" "n13" "n14" "n15" "n16" "n17" "n18" "n19" "n20" "n21" "n22" "n23" "n24" "n25" "n26" "n27" "n28" "n29" "n30" "n31" "n32" "n33" "n34" "n35" "n36" "n37" "n38" "n39" "n40" "n41" "n42" "n43" "n44" "n45" "n46" "n47" "n48" "n49" "n50" "n51" "n52" "n53" "n54" "n55" "n56" "n57" "n58" "n59" "n60" "n61" "n62" "n63");
    let (clock, mock) = spanprof::clock::Clock::mock();
    let (dispatch, guard) = support::install(
        spanprof::ProfileLayer::builder()
            .with_preset(spanprof::Preset::Basic)
            .with_clock(clock),
    );
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let (dispatch, mock) = (dispatch.clone(), mock.clone());
            scope.spawn(move || {
                tracing::dispatcher::with_default(&dispatch, || {
                    for span in &all[..names] {
                        for ns in [1, 1_000, 1_000_000, 1_000_000_000, 4_000_000_000_000] {
                            span(&|| mock.advance(std::time::Duration::from_nanos(ns)));
                        }
                    }
                });
            });
        }
    });
    let before = now();
    let snap = black_box(guard.snapshot());
    let bytes = now().since(before).allocated;
    assert_eq!(snap.spans.len(), names);
    assert!(snap.spans.iter().all(|s| s.calls == 5 * threads as u64));
    assert!(
        snap.spans.iter().all(|s| s.busy.clamped > 0),
        "the whole range"
    );
    bytes
}

/// The README's bound on a snapshot: 1 MiB, plus 1 MiB per span name (its eight histograms and
/// the five of its figures, up to 72 KiB each over the whole range, and its call-tree node),
/// plus 2 KiB per name and thread (threads' records are merged per name, not kept).
/// Measured with every histogram its spans use over its whole range: 608 KB per name (4.9 MB
/// for 8 names, 38.9 MB for 64), and 4 KB more for 32 names on 8 threads than on 1.
const SNAPSHOT_FIXED: u64 = 1 << 20;
const SNAPSHOT_PER_NAME: u64 = 1 << 20;
const SNAPSHOT_PER_NAME_THREAD: u64 = 2 << 10;

#[test]
fn a_snapshot_allocates_within_its_stated_bound() {
    let _one = process_figure();
    let mut measured = Vec::new();
    for (names, threads) in [(8, 1), (32, 1), (32, 8), (64, 4)] {
        let bytes = snapshot_bytes(names, threads);
        eprintln!("{names} names x {threads} threads: {bytes} bytes");
        let bound = SNAPSHOT_FIXED
            + names as u64 * (SNAPSHOT_PER_NAME + threads as u64 * SNAPSHOT_PER_NAME_THREAD);
        assert!(bytes <= bound, "{names} x {threads}: {bytes} > {bound}");
        measured.push(bytes);
    }
    // Eight times the threads: not eight times the memory (each name's histograms are one).
    assert!(measured[2] < measured[1] * 5 / 4, "{measured:?}");
    // Four times the names: about four times the memory past the fixed part.
    assert!(measured[1] > 3 * measured[0], "{measured:?}");
}

/// spanprof's own memory is not a span's: a span that allocates nothing, the first one
/// entered on a fresh thread with the heap readings on, shows no allocation (the readings'
/// own buffer, made at that first enter, was counted: 256 bytes, 1 allocation, kept).
#[test]
fn a_span_that_allocates_nothing_shows_no_allocation() {
    use spanprof::{ProfileLayer, Resources};
    let (dispatch, guard) =
        support::install(ProfileLayer::builder().with_resources(Resources::HEAP));
    std::thread::spawn(move || {
        tracing::dispatcher::with_default(&dispatch, || {
            for _ in 0..3 {
                tracing::info_span!("nothing").in_scope(|| black_box(0u64));
            }
        });
    })
    .join()
    .unwrap();
    let snap = guard.snapshot();
    let heap = support::span(&snap, "nothing")
        .resources
        .as_ref()
        .and_then(|r| r.heap.clone())
        .expect("heap figures");
    assert_eq!(heap.entries, 3);
    assert_eq!(
        (
            heap.allocated_bytes,
            heap.allocations,
            heap.self_retained_bytes
        ),
        (0, 0, 0),
        "{heap:?}"
    );
}

/// spanprof's own memory is left out of the heap figures both ways: what it allocates for a
/// profile (histograms, per-thread shards, names) is not counted, and neither is its freeing
/// when the profile is dropped, so the process figure ends where it started.
#[test]
fn a_profile_dropped_leaves_the_process_heap_where_it_was() {
    let _one = process_figure();
    // Other tests allocate concurrently: the same slack as `process_view_follows_…`.
    let slack = 64 * HeapCounters::PROCESS_GRANULARITY_BYTES as i64 + (4 << 20);
    let before = HeapCounters::process_net_bytes().unwrap();
    // 64 names on 4 threads, every histogram over its whole range: tens of MiB of spanprof's
    // own, made and freed.
    let snapshot = snapshot_bytes(64, 4);
    let after = HeapCounters::process_net_bytes().unwrap();
    assert!(snapshot > 16 << 20, "{snapshot}");
    assert!(
        (after - before).abs() < slack,
        "before {before}, after {after}: {} MiB",
        (after - before) >> 20
    );
}

/// spanprof's own threads (here each profile's worker, which makes its snapshots) hand the
/// process figure their last unflushed change when they exit: profiles made and dropped one
/// after another leave it where it was.
#[test]
fn profiles_made_and_dropped_leave_the_process_heap_where_it_was() {
    let _one = process_figure();
    let slack = 64 * HeapCounters::PROCESS_GRANULARITY_BYTES as i64 + (4 << 20);
    let before = HeapCounters::process_net_bytes().unwrap();
    for _ in 0..200 {
        let (dispatch, guard) = support::install(spanprof::ProfileLayer::builder());
        tracing::dispatcher::with_default(&dispatch, || {
            for i in 0..100u64 {
                // A call tree, and a metric field (its registry and cells).
                tracing::info_span!("step").in_scope(|| {
                    tracing::info_span!("inner").in_scope(|| black_box(0u64));
                    tracing::info!(histogram.loss = i as f64, "step done");
                });
            }
        });
        let snapshot = support::finish_snapshot(guard);
        assert_eq!(support::span(&snapshot, "step").calls, 100);
        assert_eq!(support::span(&snapshot, "inner").calls, 100);
    }
    let after = HeapCounters::process_net_bytes().unwrap();
    assert!(
        (after - before).abs() < slack,
        "before {before}, after {after}: {} KiB",
        (after - before) >> 10
    );
}

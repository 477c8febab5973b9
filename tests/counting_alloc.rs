//! `CountingAlloc` installed as the global allocator of this test binary: exact per-thread
//! counts, and the batched process-wide figure.

use std::hint::black_box;

use spanprof::alloc::HeapCounters;
use spanprof::CountingAlloc;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::system();

fn now() -> HeapCounters {
    HeapCounters::thread().expect("CountingAlloc is this binary's global allocator")
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

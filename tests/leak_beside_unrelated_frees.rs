//! Leak suspicion, live: a span keeping 64 KiB on every one of its 20 calls is flagged even
//! though, in the same run, another span frees more than that, all of it buffers its callee
//! returns (which are not flagged either).
//!
//! One test in its own binary (the counting allocator installed): it judges process-wide heap.

mod support;

use std::sync::Mutex;
use std::time::Duration;

use spanprof::analysis::{leaks, top, Finding};
use spanprof::{Preset, ProfileLayer};

#[global_allocator]
static ALLOC: spanprof::CountingAlloc = spanprof::CountingAlloc::system();

static KEPT: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

#[tracing::instrument]
fn fetch(i: usize) -> Vec<u8> {
    // A 128 KiB page, returned to the caller.
    std::hint::black_box(vec![i as u8; 128 * 1024])
}

#[tracing::instrument]
fn serve(i: usize) -> usize {
    let page = fetch(i);
    page.len() // dropped here: the caller frees what fetch allocated
}

#[tracing::instrument]
fn stash(i: usize) {
    KEPT.lock().unwrap().push(vec![i as u8; 64 * 1024]);
}

#[test]
fn a_leak_is_flagged_beside_larger_frees_of_a_returned_buffer() {
    // One sample, at the start: the process's growth is judged from there.
    let (dispatch, guard) = support::install(
        ProfileLayer::builder()
            .with_preset(Preset::Detailed)
            .with_sample_interval(Duration::from_secs(3600)),
    );
    tracing::dispatcher::with_default(&dispatch, || {
        for i in 0..40 {
            std::hint::black_box(serve(i));
            if i % 2 == 0 {
                stash(i);
            }
        }
    });
    let snap = support::finish_snapshot(guard);
    let heap = |name: &str| {
        support::span(&snap, name)
            .resources
            .as_ref()
            .and_then(|r| r.heap.clone())
            .unwrap()
    };
    // What the audit saw: serve frees more (40 × 128 KiB) than stash keeps (20 × 64 KiB).
    assert!(
        heap("fetch").self_retained_bytes >= 40 * 128 * 1024,
        "{:?}",
        heap("fetch")
    );
    assert!(
        heap("serve").self_retained_bytes <= -40 * 128 * 1024 + 64 * 1024,
        "{:?}",
        heap("serve")
    );
    let stash = heap("stash");
    assert!(stash.self_retained_bytes >= 20 * 64 * 1024, "{stash:?}");
    assert_eq!(
        (stash.entries, stash.retaining_entries),
        (20, 20),
        "{stash:?}"
    );
    assert!(snap.tree.is_some(), "the call tree is recorded at detailed");

    let found = leaks(&snap);
    let names: Vec<&str> = found.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["stash"], "{found:?}");
    assert_eq!(found[0].calls, 20);
    assert!(found[0].per_call_bytes >= 64.0 * 1024.0, "{:?}", found[0]);
    // `top` names it too.
    assert!(
        top(&snap)
            .iter()
            .any(|f| matches!(f, Finding::Leak(l) if l.name == "stash")),
        "{:?}",
        top(&snap)
    );
}

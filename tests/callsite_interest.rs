//! spanprof's sampler thread leaves the program's callsite interest alone: a callsite its
//! subscriber enables always stays enabled with no per-span `enabled` call, and the dispatcher
//! stays on its global fast path.
//!
//! A thread that sets a scoped default subscriber registers a new dispatcher: every callsite's
//! interest is then recomputed over both, and one that the global subscriber enables `always`
//! and the scoped one `never` becomes `sometimes`, so that each of its spans asks the
//! subscriber's `enabled` again. (Its own test binary: it sets the global default.)

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};
use tracing_core::Interest;

static ENABLED_CALLS: AtomicU64 = AtomicU64::new(0);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Enables everything, `always`, and counts the `enabled` calls it gets.
struct Counting;

impl Subscriber for Counting {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        Interest::always()
    }
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        ENABLED_CALLS.fetch_add(1, Relaxed);
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(NEXT_ID.fetch_add(1, Relaxed))
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, _: &Event<'_>) {}
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

fn spans(n: usize) {
    for i in 0..n {
        tracing::info_span!("work", i).in_scope(|| {
            tracing::info!("inside");
        });
    }
}

#[test]
fn the_sampler_thread_changes_no_callsites_interest() {
    tracing::subscriber::set_global_default(Counting).expect("the only global default");
    // A callsite registered before the sampler starts, and one after.
    spans(1);
    let (_layer, guard) = spanprof::ProfileLayer::builder()
        .with_resources(spanprof::Resources::DETAILED)
        .with_sample_interval(Duration::from_millis(5))
        .build()
        .expect("builds");
    // The sampler thread runs (its first readings are in the timeline).
    let start = Instant::now();
    let sampled = || {
        guard
            .snapshot()
            .resources
            .is_some_and(|r| !r.timeline.is_empty())
    };
    while !sampled() {
        assert!(start.elapsed() < Duration::from_secs(20), "no sample taken");
        std::thread::sleep(Duration::from_millis(5));
    }
    let before = ENABLED_CALLS.load(Relaxed);
    spans(1000);
    tracing::info_span!("later").in_scope(|| tracing::info!("a new callsite"));
    assert_eq!(
        ENABLED_CALLS.load(Relaxed) - before,
        0,
        "callsites the subscriber enables always were asked again per span"
    );
}

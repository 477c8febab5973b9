//! Right numbers in the corners: spans shared across threads, spans closed at thread exit,
//! snapshots taken while threads record, errors per instance.

use crate::support;

use std::cell::RefCell;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use spanprof::ProfileLayer;

const US: u64 = 1_000;

fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}

/// Thread B enters span S and stays inside; thread A enters and exits S; B re-enters S while
/// still inside. The entered state is per thread: 2 entries (B's re-entry is not one), and a
/// snapshot while B is inside counts B's time so far.
#[test]
fn a_span_shared_by_two_threads_counts_each_threads_entries() {
    let (dispatch, guard, clock) = support::mock();
    let span = tracing::dispatcher::with_default(&dispatch, || tracing::info_span!("shared"));
    // 1: all three threads; 2: B and the main thread, after A finished.
    let barrier = Arc::new(Barrier::new(3));
    let second = Arc::new(Barrier::new(2));
    let b = {
        let (dispatch, span, barrier, second, clock) = (
            dispatch.clone(),
            span.clone(),
            barrier.clone(),
            second.clone(),
            clock.clone(),
        );
        std::thread::spawn(move || {
            tracing::dispatcher::with_default(&dispatch, || {
                let outer = span.enter(); // t = 0
                barrier.wait(); // 1: B is inside
                second.wait(); // 2: A entered and exited; the main thread took a snapshot
                let inner = span.enter(); // a re-entry on B
                clock.advance(us(1));
                drop(inner);
                clock.advance(us(1));
                drop(outer);
            })
        })
    };
    let a = {
        let (dispatch, span, barrier, clock) = (
            dispatch.clone(),
            span.clone(),
            barrier.clone(),
            clock.clone(),
        );
        std::thread::spawn(move || {
            tracing::dispatcher::with_default(&dispatch, || {
                barrier.wait(); // 1
                clock.advance(us(10));
                let entered = span.enter(); // t = 10 µs
                clock.advance(us(5));
                drop(entered); // t = 15 µs: A's entry is 5 µs
            })
        })
    };
    barrier.wait(); // 1
    a.join().unwrap();
    let during = guard.snapshot();
    let s = support::span(&during, "shared");
    assert_eq!(s.calls, 1, "A's entry");
    assert_eq!(s.in_progress_ns, 15 * US, "B has been inside since t = 0");
    second.wait(); // 2
    b.join().unwrap();
    drop(span);
    let after = guard.snapshot();
    let s = support::span(&after, "shared");
    assert_eq!(
        s.calls, 2,
        "A's entry and B's outer entry; B's re-entry is not one"
    );
    assert_eq!(s.entry_busy.total_ns, 5 * US + 17 * US);
    assert_eq!((s.instances, s.open, s.in_progress_ns), (1, 0, 0));
    assert_eq!(s.busy.total_ns, 22 * US);
}

thread_local! {
    static HELD: RefCell<Option<tracing::Span>> = const { RefCell::new(None) };
}

/// A span kept in a thread-local and closed by its destructor when the thread exits, after
/// spanprof's own thread-local state is gone: it is still recorded.
#[test]
fn spans_closed_at_thread_exit_are_recorded() {
    let (dispatch, guard) = support::install(ProfileLayer::builder());
    let threads: Vec<_> = (0..20)
        .map(|_| {
            let dispatch = dispatch.clone();
            std::thread::spawn(move || {
                // Registered first, destroyed last: after spanprof's thread-local state.
                HELD.with(|_| {});
                tracing::dispatcher::with_default(&dispatch, || {
                    let span = tracing::info_span!("held");
                    span.in_scope(|| {});
                    HELD.with(|h| *h.borrow_mut() = Some(span));
                });
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let snap = guard.snapshot();
    let s = support::span(&snap, "held");
    assert_eq!((s.calls, s.created, s.instances, s.open), (20, 20, 20, 0));
    assert_eq!(s.wall.count, 20);
}

/// Exits a span (dropping its guard) after advancing the mock clock: from a thread-local's
/// destructor, at its thread's exit.
struct ExitAtThreadExit(
    Option<(
        tracing::span::EnteredSpan,
        spanprof::clock::MockClock,
        Duration,
    )>,
);

impl Drop for ExitAtThreadExit {
    fn drop(&mut self) {
        if let Some((entered, clock, then)) = self.0.take() {
            clock.advance(then);
            drop(entered);
        }
    }
}

thread_local! {
    static ENTERED: RefCell<ExitAtThreadExit> = const { RefCell::new(ExitAtThreadExit(None)) };
}

/// A span entered in a thread-local whose destructor runs after spanprof's own thread-local
/// state is gone: the entry's time up to its exit there is recorded (30 µs before the thread
/// exits, 20 µs in the destructor), and nothing stays in progress.
#[test]
fn a_span_entered_when_its_thread_exits_keeps_its_entry() {
    let (dispatch, guard, clock) = support::mock();
    std::thread::spawn(move || {
        // Registered first, destroyed last: after spanprof's thread-local state.
        ENTERED.with(|_| {});
        tracing::dispatcher::with_default(&dispatch, || {
            let entered = tracing::info_span!("inside_at_exit").entered();
            clock.advance(us(30));
            ENTERED.with(|e| e.borrow_mut().0 = Some((entered, clock.clone(), us(20))));
        });
    })
    .join()
    .unwrap();
    let snap = guard.snapshot();
    let s = support::span(&snap, "inside_at_exit");
    assert_eq!((s.calls, s.instances, s.open), (1, 1, 0));
    assert_eq!(s.entry_busy.total_ns, 50 * US);
    assert_eq!(s.entry_self.total_ns, 50 * US);
    assert_eq!(s.in_progress_ns, 0);
}

/// A thread exits inside a span whose guard it leaked: the entry is in progress while the span
/// is open, and no longer once it is closed (its time does not keep growing).
#[test]
fn an_entry_left_by_an_exited_thread_ends_with_its_span() {
    let (dispatch, guard, clock) = support::mock();
    let span = tracing::dispatcher::with_default(&dispatch, || tracing::info_span!("left"));
    {
        let (dispatch, span, clock) = (dispatch.clone(), span.clone(), clock.clone());
        std::thread::spawn(move || {
            tracing::dispatcher::with_default(&dispatch, || {
                std::mem::forget(span.enter());
                clock.advance(us(10));
            });
        })
        .join()
        .unwrap();
    }
    let open = guard.snapshot();
    assert_eq!(support::span(&open, "left").in_progress_ns, 10 * US);
    drop(span);
    clock.advance(us(500));
    let closed = guard.snapshot();
    let s = support::span(&closed, "left");
    assert_eq!((s.instances, s.open, s.in_progress_ns), (1, 0, 0));
}

/// A thread inside a span of one profiler uses 8 others (more than the states a thread
/// caches): the span's entry is kept, whole.
#[test]
fn a_span_entered_while_a_thread_uses_many_profilers_keeps_its_entry() {
    let (dispatch, guard, clock) = support::mock();
    let others: Vec<_> = (0..9)
        .map(|_| support::install(ProfileLayer::builder()))
        .collect();
    tracing::dispatcher::with_default(&dispatch, || {
        let outer = tracing::info_span!("outer").entered();
        for (other, _) in &others {
            tracing::dispatcher::with_default(other, || {
                tracing::info_span!("elsewhere").in_scope(|| {});
            });
        }
        tracing::info_span!("child").in_scope(|| clock.advance(us(30)));
        clock.advance(us(40));
        drop(outer);
    });
    let snap = guard.snapshot();
    let outer = support::span(&snap, "outer");
    assert_eq!(outer.calls, 1);
    assert_eq!(outer.entry_busy.total_ns, 70 * US);
    assert_eq!(outer.entry_self.total_ns, 40 * US);
    for (_, other) in &others {
        assert_eq!(support::span(&other.snapshot(), "elsewhere").calls, 1);
    }
}

/// Snapshots taken while threads create and close spans count each span once: never more than
/// exist, never fewer than a snapshot before, and exactly all of them at the end.
#[test]
fn snapshots_during_recording_count_each_span_once() {
    const THREADS: u64 = 3;
    const SPANS: u64 = 40_000;
    let (dispatch, guard) = support::install(ProfileLayer::builder());
    let handle = guard.handle();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let snapshots = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut last = (0, 0, 0);
            let mut taken = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let snap = handle.snapshot();
                if let Some(s) = snap.span("work") {
                    assert!(s.created <= THREADS * SPANS, "created {}", s.created);
                    assert_eq!(s.created, s.instances + s.open);
                    let now = (s.created, s.instances, s.calls);
                    assert!(
                        now.0 >= last.0 && now.1 >= last.1 && now.2 >= last.2,
                        "went down: {last:?} -> {now:?}"
                    );
                    last = now;
                }
                taken += 1;
            }
            taken
        })
    };
    let workers: Vec<_> = (0..THREADS)
        .map(|_| {
            let dispatch = dispatch.clone();
            std::thread::spawn(move || {
                tracing::dispatcher::with_default(&dispatch, || {
                    for _ in 0..SPANS {
                        tracing::info_span!("work").in_scope(|| {});
                    }
                })
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let taken = snapshots.join().unwrap();
    assert!(taken > 0);
    let s = guard.snapshot();
    let s = support::span(&s, "work");
    let all = THREADS * SPANS;
    assert_eq!(
        (s.created, s.instances, s.open, s.calls),
        (all, all, 0, all)
    );
}

/// Errors are counted per event and per instance: an async-style span entered three times
/// with errors in two of its entries is one errored instance.
#[test]
fn errors_are_counted_per_instance_too() {
    let (dispatch, guard) = support::install(ProfileLayer::builder());
    tracing::dispatcher::with_default(&dispatch, || {
        let failing = tracing::info_span!("request");
        for poll in 0..3 {
            failing.in_scope(|| {
                if poll > 0 {
                    tracing::error!("failed");
                }
            });
        }
        let fine = tracing::info_span!("request");
        for _ in 0..3 {
            fine.in_scope(|| {});
        }
        drop((failing, fine));
    });
    let snap = guard.snapshot();
    let s = support::span(&snap, "request");
    assert_eq!((s.calls, s.instances), (6, 2));
    assert_eq!((s.errors, s.errored_instances), (2, 1));
}

/// A burst of spans open at once spills past the span table's first segment; every one is
/// counted, and once they closed the table serves new spans as before.
#[test]
fn a_burst_of_open_spans_is_counted_and_leaves_nothing_behind() {
    let (dispatch, guard) = support::install(ProfileLayer::builder());
    let burst = |dispatch: tracing::Dispatch| {
        tracing::dispatcher::with_default(&dispatch, || {
            let open: Vec<_> = (0..12_000)
                .map(|_| {
                    let span = tracing::info_span!(parent: None, "burst");
                    span.in_scope(|| {});
                    span
                })
                .collect();
            drop(open);
        })
    };
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let dispatch = dispatch.clone();
            std::thread::spawn(move || burst(dispatch))
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    tracing::dispatcher::with_default(&dispatch, || {
        for _ in 0..100 {
            tracing::info_span!("after").in_scope(|| {});
        }
    });
    let snap = guard.snapshot();
    let b = support::span(&snap, "burst");
    assert_eq!(
        (b.created, b.instances, b.open, b.calls),
        (24_000, 24_000, 0, 24_000)
    );
    assert_eq!(snap.dropped.spans_table_full, 0);
    let a = support::span(&snap, "after");
    assert_eq!((a.created, a.instances, a.open), (100, 100, 0));
}

/// Entries in progress are published 64 frames deep per thread (`LIVE_FRAMES`): a snapshot
/// taken 70 spans deep counts the time of the outermost 64 as in progress, and the deeper ones
/// once they complete.
#[test]
fn entries_in_progress_past_the_published_depth_are_counted_when_they_complete() {
    let (dispatch, guard, clock) = support::mock();
    tracing::dispatcher::with_default(&dispatch, || {
        fn descend(depth: u64, clock: &spanprof::clock::MockClock, at_bottom: &mut dyn FnMut()) {
            if depth == 0 {
                return at_bottom();
            }
            clock.advance(us(1));
            let _entered = tracing::info_span!("deep").entered();
            descend(depth - 1, clock, at_bottom);
        }
        let mut during = None;
        descend(70, &clock, &mut || {
            clock.advance(us(100));
            during = Some(guard.snapshot());
        });
        // Entered at 1, 2, … 70 µs; the snapshot at 170 µs sees the outermost 64.
        let s = support::span(during.as_ref().unwrap(), "deep");
        let outermost: u64 = (1..=64).map(|t| 170 - t).sum();
        assert_eq!(s.in_progress_ns, outermost * US);
        assert_eq!((s.open, s.calls), (70, 0));
    });
    let after = guard.snapshot();
    let s = support::span(&after, "deep");
    assert_eq!((s.calls, s.instances, s.in_progress_ns), (70, 70, 0));
    // Every entry complete: the innermost lasted 100 µs, each outer one 1 µs more than the
    // one inside it.
    assert_eq!(
        s.entry_busy.total_ns,
        (0..70).map(|k| 100 + k).sum::<u64>() * US
    );
}

/// The creating thread owns a span's sums: its one entry waits in the span (a snapshot counts
/// it as pending) and, when another thread also had an entry, goes to the entry histograms at
/// close, beside the other thread's entry recorded at its exit. Each entry is counted once, in
/// a snapshot while the span is open and after it closed.
#[test]
fn the_creating_threads_one_entry_beside_another_threads_is_counted_once() {
    let (dispatch, guard, clock) = support::mock();
    let span = tracing::dispatcher::with_default(&dispatch, || {
        let span = tracing::info_span!("handed_over");
        span.in_scope(|| clock.advance(us(3))); // the owner's entry: 3 µs
        span
    });
    let (d2, c2) = (dispatch.clone(), clock.clone());
    let span = std::thread::spawn(move || {
        tracing::dispatcher::with_default(&d2, || span.in_scope(|| c2.advance(us(7))));
        span
    })
    .join()
    .unwrap();
    let open = guard.snapshot();
    let s = support::span(&open, "handed_over");
    assert_eq!(s.calls, 2);
    assert_eq!(
        (s.entry_busy.count, s.entry_busy.total_ns),
        (2, 10 * US),
        "the owner's pending entry and the other thread's recorded one, each once"
    );
    assert_eq!((s.entry_busy.min_ns, s.entry_busy.max_ns), (3 * US, 7 * US));
    assert_eq!(s.instances, 0);
    // Closed on a third thread.
    let d3 = dispatch.clone();
    std::thread::spawn(move || tracing::dispatcher::with_default(&d3, || drop(span)))
        .join()
        .unwrap();
    let closed = guard.snapshot();
    let s = support::span(&closed, "handed_over");
    assert_eq!((s.calls, s.instances, s.open), (2, 1, 0));
    assert_eq!((s.entry_busy.count, s.entry_busy.total_ns), (2, 10 * US));
    assert_eq!((s.entry_busy.min_ns, s.entry_busy.max_ns), (3 * US, 7 * US));
    assert_eq!((s.busy.count, s.busy.total_ns), (1, 10 * US));
    assert_eq!((s.self_time.count, s.self_time.total_ns), (1, 10 * US));
}

/// A span entered only by a thread that did not create it: that entry is recorded at its exit
/// (not left pending in the span), and the close records the instance once.
#[test]
fn a_span_entered_only_on_another_thread_counts_its_entry_once() {
    let (dispatch, guard, clock) = support::mock();
    let span = tracing::dispatcher::with_default(&dispatch, || tracing::info_span!("elsewhere"));
    let (d2, c2) = (dispatch.clone(), clock.clone());
    let span = std::thread::spawn(move || {
        tracing::dispatcher::with_default(&d2, || span.in_scope(|| c2.advance(us(4))));
        span
    })
    .join()
    .unwrap();
    let open = guard.snapshot();
    let s = support::span(&open, "elsewhere");
    assert_eq!(s.calls, 1);
    assert_eq!((s.entry_busy.count, s.entry_busy.total_ns), (1, 4 * US));
    tracing::dispatcher::with_default(&dispatch, || drop(span));
    let closed = guard.snapshot();
    let s = support::span(&closed, "elsewhere");
    assert_eq!((s.calls, s.instances), (1, 1));
    assert_eq!((s.entry_busy.count, s.entry_busy.total_ns), (1, 4 * US));
    assert_eq!((s.busy.count, s.busy.total_ns), (1, 4 * US));
    assert_eq!(s.wall.total_ns, 4 * US);
}

//! Exact timing arithmetic with an injected clock: nested, re-entered, recursive, async-style,
//! cross-thread and panicking spans.

use crate::support;

use std::time::Duration;

use spanprof::ProfileLayer;
use support::{install, mock, span};

fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}

const US: u64 = 1_000;

#[test]
fn nested_spans_busy_self_wall() {
    let (dispatch, guard, clock) = mock();
    tracing::dispatcher::with_default(&dispatch, || {
        let outer = tracing::info_span!("outer");
        clock.advance(us(3)); // created, not entered: wall only
        let e_outer = outer.enter();
        clock.advance(us(10));
        {
            let inner = tracing::info_span!("inner");
            let _e = inner.enter();
            clock.advance(us(20));
            {
                let leaf = tracing::info_span!("leaf");
                let _e = leaf.enter();
                clock.advance(us(7));
            }
            clock.advance(us(1));
        }
        clock.advance(us(5));
        drop(e_outer);
        clock.advance(us(2));
        drop(outer);
    });
    let snap = guard.snapshot();
    let outer = span(&snap, "outer");
    assert_eq!((outer.calls, outer.instances, outer.open), (1, 1, 0));
    assert_eq!(outer.entry_busy.total_ns, 43 * US);
    assert_eq!(outer.entry_self.total_ns, 15 * US);
    assert_eq!(outer.busy.total_ns, 43 * US);
    assert_eq!(outer.self_time.total_ns, 15 * US);
    assert_eq!(outer.wall.total_ns, 48 * US);
    let inner = span(&snap, "inner");
    assert_eq!(inner.entry_busy.total_ns, 28 * US);
    assert_eq!(inner.entry_self.total_ns, 21 * US);
    assert_eq!(inner.wall.total_ns, 28 * US);
    let leaf = span(&snap, "leaf");
    assert_eq!(
        (leaf.entry_busy.total_ns, leaf.entry_self.total_ns),
        (7 * US, 7 * US)
    );
    // Percentiles come from the histogram: within its precision of the exact value.
    assert_eq!(outer.entry_busy.min_ns, 43 * US);
    assert!(outer.entry_busy.p50_ns.abs_diff(43 * US) <= 43 * US / 128);
}

#[test]
fn long_lived_span_entered_many_times() {
    // A module span created once at model build and entered on every forward pass.
    let (dispatch, guard, clock) = mock();
    let linear = tracing::dispatcher::with_default(&dispatch, || tracing::info_span!("linear"));
    for pass in 1..=100u64 {
        tracing::dispatcher::with_default(&dispatch, || {
            let step = tracing::info_span!("forward");
            let _s = step.enter();
            clock.advance(us(1));
            let _e = linear.enter();
            clock.advance(us(pass));
        });
        clock.advance(us(50));
    }
    // Snapshot while the module span is still open: every entry is visible.
    let snap = guard.snapshot();
    let l = span(&snap, "linear");
    assert_eq!((l.calls, l.instances, l.open, l.created), (100, 0, 1, 1));
    assert_eq!(l.entry_busy.total_ns, (1..=100).sum::<u64>() * US);
    assert_eq!(l.entry_busy.min_ns, US);
    assert_eq!(l.entry_busy.max_ns, 100 * US);
    let f = span(&snap, "forward");
    assert_eq!(
        f.entry_self.total_ns,
        100 * US,
        "children's time is not forward's self time"
    );
    drop(linear);
    let snap = guard.snapshot();
    let l = span(&snap, "linear");
    assert_eq!((l.instances, l.open), (1, 0));
    assert_eq!(l.busy.total_ns, (1..=100).sum::<u64>() * US);
}

#[test]
fn recursive_reentry_counts_outermost_entry_once() {
    let (dispatch, guard, clock) = mock();
    tracing::dispatcher::with_default(&dispatch, || {
        let s = tracing::info_span!("walk");
        s.in_scope(|| {
            clock.advance(us(4));
            s.in_scope(|| {
                clock.advance(us(6));
                s.in_scope(|| clock.advance(us(1)));
            });
            clock.advance(us(2));
        });
    });
    let snap = guard.snapshot();
    let w = span(&snap, "walk");
    assert_eq!(w.calls, 1);
    assert_eq!(w.entry_busy.total_ns, 13 * US);
    assert_eq!(w.entry_self.total_ns, 13 * US);
    assert_eq!(w.busy.total_ns, 13 * US);
}

#[test]
fn async_style_polls_busy_vs_wall() {
    // An instrumented future: entered at each poll, idle in between.
    let (dispatch, guard, clock) = mock();
    tracing::dispatcher::with_default(&dispatch, || {
        let task = tracing::info_span!("request");
        for poll in 0..5 {
            let _e = task.enter();
            clock.advance(us(2 + poll));
            drop(_e);
            clock.advance(us(100));
        }
    });
    let snap = guard.snapshot();
    let r = span(&snap, "request");
    assert_eq!((r.calls, r.instances), (5, 1));
    assert_eq!(r.busy.total_ns, (2 + 3 + 4 + 5 + 6) * US);
    assert_eq!(r.wall.total_ns, (20 + 500) * US);
    assert_eq!(r.entry_busy.min_ns, 2 * US);
    assert_eq!(r.entry_busy.max_ns, 6 * US);
}

#[test]
fn spans_moving_between_threads() {
    let (dispatch, guard, clock) = mock();
    let span = tracing::dispatcher::with_default(&dispatch, || tracing::info_span!("moved"));
    let clock2 = clock.clone();
    let d2 = dispatch.clone();
    let span = std::thread::spawn(move || {
        tracing::dispatcher::with_default(&d2, || {
            let _e = span.enter();
            clock2.advance(us(30));
        });
        span
    })
    .join()
    .unwrap();
    clock.advance(us(5));
    let d3 = dispatch.clone();
    let clock3 = clock.clone();
    std::thread::spawn(move || {
        tracing::dispatcher::with_default(&d3, || {
            span.in_scope(|| clock3.advance(us(12)));
            drop(span); // closed on a third thread
        })
    })
    .join()
    .unwrap();
    let snap = guard.snapshot();
    let m = support::span(&snap, "moved");
    assert_eq!((m.calls, m.instances, m.open), (2, 1, 0));
    assert_eq!(m.busy.total_ns, 42 * US);
    assert_eq!(m.wall.total_ns, 47 * US);
}

#[test]
fn panic_unwinding_exits_and_closes_spans() {
    let (dispatch, guard, clock) = mock();
    tracing::dispatcher::with_default(&dispatch, || {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let outer = tracing::info_span!("doomed");
            let _e = outer.enter();
            clock.advance(us(9));
            let inner = tracing::info_span!("doomed_inner");
            let _i = inner.enter();
            clock.advance(us(1));
            panic!("boom");
        }));
        assert!(result.is_err());
        // The thread's span stack is clean: a new span is a root.
        tracing::info_span!("after").in_scope(|| clock.advance(us(3)));
    });
    let snap = guard.snapshot();
    let d = span(&snap, "doomed");
    assert_eq!((d.calls, d.instances, d.open), (1, 1, 0));
    assert_eq!(d.entry_busy.total_ns, 10 * US);
    assert_eq!(d.entry_self.total_ns, 9 * US);
    assert_eq!(span(&snap, "doomed_inner").instances, 1);
    assert_eq!(span(&snap, "after").entry_self.total_ns, 3 * US);
}

#[test]
fn many_threads_exact_counts_after_threads_exit() {
    let (dispatch, guard, _clock) = mock();
    const THREADS: u64 = 8;
    const SPANS: u64 = 5_000;
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let d = dispatch.clone();
            std::thread::spawn(move || {
                tracing::dispatcher::with_default(&d, || {
                    for i in 0..SPANS {
                        let s = tracing::info_span!("work", items = 2u64);
                        let _e = s.enter();
                        if i % 2 == 0 {
                            tracing::info_span!("child").in_scope(|| {});
                        }
                        if t == 0 && i % 1000 == 0 {
                            tracing::error!("bad batch");
                        }
                    }
                })
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap(); // every thread has exited before the snapshot
    }
    let snap = guard.snapshot();
    let w = span(&snap, "work");
    assert_eq!(
        (w.calls, w.instances, w.created, w.open),
        (THREADS * SPANS, THREADS * SPANS, THREADS * SPANS, 0)
    );
    assert_eq!(w.items, Some(2 * THREADS * SPANS));
    assert_eq!(w.errors, SPANS / 1000);
    assert_eq!(w.entry_busy.histogram.len(), THREADS * SPANS);
    assert_eq!(span(&snap, "child").calls, THREADS * SPANS / 2);
}

#[test]
fn histograms_survive_more_samples_than_a_counter_holds() {
    // 70 000 samples in one bucket on one thread: more than a u16 counter, so shards drain.
    let (dispatch, guard, clock) = mock();
    tracing::dispatcher::with_default(&dispatch, || {
        for _ in 0..70_000 {
            tracing::info_span!("tight").in_scope(|| clock.advance(Duration::from_nanos(100)));
        }
    });
    let snap = guard.snapshot();
    let t = span(&snap, "tight");
    assert_eq!(t.calls, 70_000);
    assert_eq!(t.entry_busy.histogram.count_at(100), 70_000);
    assert_eq!(t.wall.histogram.count_at(100), 70_000);
    assert_eq!(t.entry_busy.total_ns, 7_000_000);
}

#[test]
fn durations_beyond_range_are_clamped_and_counted() {
    let (dispatch, guard, clock) = mock();
    tracing::dispatcher::with_default(&dispatch, || {
        tracing::info_span!("epoch").in_scope(|| clock.advance(Duration::from_secs(2 * 3600)));
    });
    let snap = guard.snapshot();
    let e = span(&snap, "epoch");
    assert_eq!(e.entry_busy.clamped, 1);
    assert_eq!(
        e.entry_busy.max_ns,
        2 * 3600 * 1_000_000_000,
        "exact max is kept"
    );
    assert_eq!(e.entry_busy.count, 1);
    assert!(e.entry_busy.p99_ns <= e.entry_busy.max_ns);
}

#[test]
fn one_span_entered_concurrently_on_many_threads() {
    // The rayon pattern: workers enter one shared span at the same time. Nothing is lost:
    // the instance's busy time is the sum of every thread's entries. Real clock: the entries
    // must have non-zero durations for the sums to mean something.
    let (dispatch, guard) = install(ProfileLayer::builder());
    let shared = tracing::dispatcher::with_default(&dispatch, || tracing::info_span!("parallel"));
    let barrier = std::sync::Barrier::new(4);
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                tracing::dispatcher::with_default(&dispatch, || {
                    for _ in 0..500 {
                        let _e = shared.enter();
                        barrier.wait();
                        std::hint::black_box((0..200).sum::<u64>());
                    }
                })
            });
        }
    });
    // The creating thread never entered it: every entry went through the shared sums.
    assert_eq!(guard.snapshot().span("parallel").unwrap().calls, 2000);
    drop(shared);
    let snap = guard.snapshot();
    let p = snap.span("parallel").unwrap();
    assert_eq!((p.instances, p.calls), (1, 2000));
    assert!(p.entry_busy.total_ns > 0);
    assert_eq!(
        p.busy.total_ns, p.entry_busy.total_ns,
        "instance busy = sum of all entries"
    );
    assert_eq!(p.self_time.total_ns, p.entry_self.total_ns);
}

#[test]
fn open_span_has_empty_instance_stats() {
    let (dispatch, guard, clock) = mock();
    let span = tracing::dispatcher::with_default(&dispatch, || tracing::info_span!("open"));
    span.in_scope(|| clock.advance(us(5)));
    let snap = guard.snapshot();
    let o = support::span(&snap, "open");
    assert_eq!((o.instances, o.open, o.calls), (0, 1, 1));
    assert_eq!(
        (o.wall.count, o.wall.min_ns, o.wall.max_ns, o.wall.p99_ns),
        (0, 0, 0, 0)
    );
    assert_eq!(o.entry_busy.min_ns, 5 * US);
    drop(span);
}

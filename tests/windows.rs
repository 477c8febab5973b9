//! Live and windowed profiles: interval snapshots that add up to the whole run exactly, and the
//! export cadence's summary events and periodic outputs, counted (never timed).
//!
//! A test binary of its own (not a module of `tests/it/`): its tests set the global default
//! subscriber (`support::events::capture`) and count the summary events that spanprof's export
//! threads log through it, which other tests' profiles would add to.

mod support;

use std::collections::HashMap;
use std::io::{self, Write};
use std::time::Duration;

use spanprof::output::{Destination, Format};
use spanprof::profile::{Snapshot, Stat};
use spanprof::{Every, ProfileLayer};

use support::events::{capture as summaries, wait_until, with_field, Fields};

fn number(fields: &Fields, name: &str) -> u64 {
    fields
        .get(name)
        .unwrap_or_else(|| panic!("no field {name} in {fields:?}"))
        .parse()
        .unwrap_or_else(|_| panic!("{name} is not a number in {fields:?}"))
}

/// One training step: three `work` spans, one `io` span.
fn step() {
    tracing::info_span!("train_step").in_scope(|| {
        for _ in 0..3 {
            tracing::info_span!("work").in_scope(|| std::hint::black_box((0..200u64).sum::<u64>()));
        }
        tracing::info_span!("io").in_scope(|| {});
    });
}

/// Runs 4 rounds of 500 steps on 3 threads, taking an interval after each round while they
/// wait (and, `racing`, 20 more while they record); returns the intervals (the last one after
/// the end) and the final snapshot.
fn live_run(racing: bool) -> (Vec<Snapshot>, Snapshot) {
    let (dispatch, guard) = support::install(ProfileLayer::builder());
    let handle = guard.handle();
    let rounds = 4;
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(4));
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let (dispatch, barrier) = (dispatch.clone(), barrier.clone());
            std::thread::spawn(move || {
                tracing::dispatcher::with_default(&dispatch, || {
                    for _ in 0..rounds {
                        for _ in 0..500 {
                            step();
                        }
                        barrier.wait(); // the round is recorded
                        barrier.wait(); // its interval is taken
                    }
                })
            })
        })
        .collect();
    let mut intervals = Vec::new();
    for _ in 0..rounds {
        if racing {
            for _ in 0..20 {
                intervals.push(handle.interval_snapshot());
            }
        }
        barrier.wait();
        intervals.push(handle.interval_snapshot());
        barrier.wait();
    }
    for w in workers {
        w.join().unwrap();
    }
    let total = support::finish_snapshot(guard);
    intervals.push(handle.interval_snapshot());
    (intervals, total)
}

#[test]
fn interval_snapshots_of_a_live_run_add_up_to_the_total_exactly() {
    let (intervals, total) = live_run(false);
    assert_eq!(intervals.len(), 5);
    for name in ["train_step", "work", "io"] {
        let full = total.span(name).unwrap();
        let per_round = if name == "work" { 4_500 } else { 1_500 };
        assert_eq!(full.calls, 4 * per_round);
        let parts: Vec<_> = intervals.iter().filter_map(|i| i.span(name)).collect();
        for (i, part) in parts.iter().enumerate() {
            let want = if i < 4 { per_round } else { 0 };
            assert_eq!((part.calls, part.instances), (want, want), "{name} {i}");
            assert_eq!(part.entry_busy.count, want, "{name} {i}");
        }
        for (what, whole, part) in [
            (
                "entry_busy",
                &full.entry_busy,
                (|s: &spanprof::profile::SpanStats| s.entry_busy.clone()) as fn(&_) -> Stat,
            ),
            ("entry_self", &full.entry_self, |s| s.entry_self.clone()),
            ("wall", &full.wall, |s| s.wall.clone()),
        ] {
            let stats: Vec<Stat> = parts.iter().map(|s| part(s)).collect();
            let merged = Stat::merged(stats.iter());
            assert_eq!(merged.count, whole.count, "{name} {what}");
            assert_eq!(merged.total_ns, whole.total_ns, "{name} {what}");
            assert_eq!(merged.histogram, whole.histogram, "{name} {what}");
            assert_eq!(merged.max_ns, whole.max_ns, "{name} {what}");
        }
    }
    // Intervals do not reset the cumulative totals, and follow one another in time.
    let run: u64 = intervals.iter().map(|i| i.run.duration_ns).sum();
    let last = &intervals[intervals.len() - 1].run;
    assert_eq!(
        run,
        last.start_unix_ns + last.duration_ns - total.run.start_unix_ns
    );
    for pair in intervals.windows(2) {
        assert_eq!(
            pair[1].run.start_unix_ns,
            pair[0].run.start_unix_ns + pair[0].run.duration_ns
        );
    }
}

#[test]
fn intervals_taken_while_spans_close_still_count_every_call_once() {
    // Calls and instances come from counters that never go down: exact whatever the timing.
    // (Histograms are exact between snapshots taken while no span closes: a snapshot that
    // races a close may count that span's entry twice, see `ProfileHandle::interval_snapshot`.)
    let (intervals, total) = live_run(true);
    for name in ["train_step", "work", "io"] {
        let full = total.span(name).unwrap();
        let parts: Vec<_> = intervals.iter().filter_map(|i| i.span(name)).collect();
        assert_eq!(parts.iter().map(|s| s.calls).sum::<u64>(), full.calls);
        assert_eq!(
            parts.iter().map(|s| s.instances).sum::<u64>(),
            full.instances
        );
        assert_eq!(full.instances, if name == "work" { 18_000 } else { 6_000 });
    }
}

#[test]
fn every_n_steps_one_summary_with_that_window_s_top_names() {
    let (_one, captured) = summaries();
    let (dispatch, guard) = support::install(
        ProfileLayer::builder()
            .with_every(Every::Steps(5))
            .with_step_span("train_step"),
    );
    tracing::dispatcher::with_default(&dispatch, || {
        for window in 1..=4 {
            for _ in 0..5 {
                step();
            }
            // The export thread logs the window after the 5th step: wait for it (a bound, not
            // a timing), so that every window holds exactly 5 steps.
            wait_until("the window's summary", || {
                with_field(&captured, "window").len() == window
            });
        }
    });
    guard.finish().unwrap();
    let events = with_field(&captured, "window");
    assert_eq!(
        events.len(),
        4,
        "nothing ran after the last window: {events:?}"
    );
    for (i, e) in events.iter().enumerate() {
        assert_eq!(number(e, "window"), i as u64 + 1);
        assert_eq!(number(e, "steps"), 5, "{e:?}");
        assert_eq!(number(e, "span_names"), 3, "{e:?}");
        // The top names are the window's, by self time, with the window's call counts.
        let mut calls = HashMap::new();
        for k in 1..=3 {
            calls.insert(
                e[&format!("top{k}_name")].clone(),
                number(e, &format!("top{k}_calls")),
            );
        }
        assert_eq!(calls["work"], 15, "{e:?}");
        assert_eq!(calls["io"], 5);
        assert_eq!(calls["train_step"], 5);
        assert!(!e.contains_key("top4_name"), "only 3 names ran: {e:?}");
        let self1 = number(e, "top1_self_ns");
        assert!(self1 >= number(e, "top2_self_ns"), "{e:?}");
        assert!(number(e, "top1_p99_ns") > 0);
        assert!(
            e["message"].contains("5 steps") && e["message"].contains("work"),
            "{e:?}"
        );
    }
}

#[test]
fn the_windows_steps_add_up_to_every_step_even_when_windows_merge() {
    let (_one, captured) = summaries();
    let (dispatch, guard) = support::install(
        ProfileLayer::builder()
            .with_every(Every::Steps(3))
            .with_step_span("train_step"),
    );
    // No waiting: windows that arrive faster than they are logged merge.
    tracing::dispatcher::with_default(&dispatch, || {
        for _ in 0..50 {
            step();
        }
    });
    guard.finish().unwrap();
    let events = with_field(&captured, "window");
    let steps: u64 = events.iter().map(|e| number(e, "steps")).sum();
    assert_eq!(steps, 50, "{events:?}");
    assert!(!events.is_empty() && events.len() <= 17, "{}", events.len());
}

/// A periodic format: the calls of `train_step`.
#[derive(Debug)]
struct StepCalls {
    periodic: bool,
}

impl Format for StepCalls {
    fn name(&self) -> &'static str {
        "step-calls"
    }
    fn file_name(&self) -> &'static str {
        "steps.txt"
    }
    fn render(&self, snapshot: &Snapshot, out: &mut dyn Write) -> io::Result<()> {
        write!(
            out,
            "{}",
            snapshot.span("train_step").map_or(0, |s| s.calls)
        )
    }
    fn periodic(&self) -> bool {
        self.periodic
    }
}

#[test]
fn periodic_outputs_are_rewritten_at_each_window_and_others_only_at_the_end() {
    let (_one, _captured) = summaries();
    let dir = support::temp_dir("periodic");
    let (periodic, at_end) = (dir.join("periodic.txt"), dir.join("at-end.txt"));
    let (dispatch, guard) = support::install(
        ProfileLayer::builder()
            .with_every(Every::Steps(10))
            .with_step_span("train_step")
            .with_output(
                StepCalls { periodic: true },
                Destination::File(periodic.clone()),
            )
            .with_output(
                StepCalls { periodic: false },
                Destination::File(at_end.clone()),
            ),
    );
    let read = |p: &std::path::Path| std::fs::read_to_string(p).ok();
    tracing::dispatcher::with_default(&dispatch, || {
        for _ in 0..10 {
            step();
        }
        wait_until("the periodic file", || {
            read(&periodic).as_deref() == Some("10")
        });
        for _ in 0..10 {
            step();
        }
        wait_until("the periodic file re-written", || {
            read(&periodic).as_deref() == Some("20")
        });
        for _ in 0..3 {
            step();
        }
    });
    assert_eq!(
        read(&at_end),
        None,
        "not periodic: written when the profile ends"
    );
    guard.finish().unwrap();
    assert_eq!(read(&periodic).as_deref(), Some("23"));
    assert_eq!(read(&at_end).as_deref(), Some("23"));
}

#[test]
fn a_period_cadence_logs_windows_of_time() {
    let (_one, captured) = summaries();
    let (dispatch, guard) = support::install(
        ProfileLayer::builder()
            .with_every(Every::Period(Duration::from_millis(20)))
            .with_step_span("train_step"),
    );
    tracing::dispatcher::with_default(&dispatch, || {
        let mut n = 0;
        while with_field(&captured, "window").len() < 3 {
            step();
            n += 1;
            assert!(n < 10_000_000, "no window logged");
        }
    });
    let total = support::finish_snapshot(guard);
    let events = with_field(&captured, "window");
    let steps: u64 = events.iter().map(|e| number(e, "steps")).sum();
    assert_eq!(steps, total.span("train_step").unwrap().calls, "{events:?}");
}

#[test]
fn steps_need_a_step_span() {
    let e = support::quiet(ProfileLayer::builder().with_every(Every::Steps(3)))
        .build()
        .unwrap_err();
    assert!(
        matches!(
            e,
            spanprof::Error::InvalidSetting {
                method: "with_every",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("with_step_span"), "{e}");
    let e =
        support::quiet(ProfileLayer::builder().with_every(Every::Period(Duration::from_millis(1))))
            .build()
            .unwrap_err();
    assert!(e.to_string().contains("10 ms"), "{e}");
}

/// Two `step` spans of two targets, each with a `work` child: their paths are two in each
/// interval (the earlier tree's nodes matched by the whole path, targets included), and the
/// intervals add up to the run. They were matched by names and the leaf's target only: one
/// path's figures went out of the other's interval.
#[test]
fn intervals_tell_call_paths_apart_by_their_ancestors_targets() {
    let (dispatch, guard, clock) = support::mock();
    let handle = guard.handle();
    let round = |a: u64, b: u64| {
        tracing::dispatcher::with_default(&dispatch, || {
            for (n, in_a) in [(a, true), (b, false)] {
                for _ in 0..n {
                    let step = if in_a {
                        tracing::info_span!(target: "app::a", "step")
                    } else {
                        tracing::info_span!(target: "app::b", "step")
                    };
                    step.in_scope(|| {
                        tracing::info_span!("work")
                            .in_scope(|| clock.advance(Duration::from_nanos(100)));
                    });
                }
            }
        });
        handle.interval_snapshot()
    };
    let intervals = [round(3, 1), round(5, 2), round(0, 4)];
    // The calls of `work` under the `step` of `target`, in a snapshot.
    let work_under = |snap: &spanprof::Snapshot, target: &str| {
        let tree = snap.tree.as_ref().unwrap();
        tree.nodes
            .iter()
            .filter(|n| n.name == "work")
            .find(|n| {
                n.parent
                    .is_some_and(|p| tree.nodes[p as usize].target == target)
            })
            .map_or((0, 0), |n| (n.calls, n.self_time.total_ns))
    };
    let expected = [(3, 1), (5, 2), (0, 4)];
    for (i, (snap, (a, b))) in intervals.iter().zip(expected).enumerate() {
        assert_eq!(
            work_under(snap, "app::a"),
            (a, a * 100),
            "interval {i}, app::a"
        );
        assert_eq!(
            work_under(snap, "app::b"),
            (b, b * 100),
            "interval {i}, app::b"
        );
    }
}

//! The back-off's second stage in the recorder: span names recorded 1 span in N.
//!
//! The back-off thread (`crate::backoff`) sets a name's N in [`Sampling`]; each span created
//! reads it with one relaxed load. A name sampled 1 in N has N − 1 spans in N left out at
//! creation ([`Recorder::sample_out`]): one per-thread countdown and a compare, no slot in
//! the span table, no histogram, no call-tree node; its enter, exit and close then cost one
//! table probe that misses, like a span the filter left out. The span is counted
//! ([`EntryCost::sampled_out`](super::overhead::EntryCost)), so `calls`, `created` and
//! `instances` stay exact (one entry per span left out: sampling is kept to names entered once
//! per span), and the name is marked sampled, with N, in the profile.
//!
//! **The parent's self time.** A span left out is in no frame, so its time would count as its
//! parent's self time. At its creation the name's running mean busy time on this thread (the
//! one [`EntryCost`](super::overhead::EntryCost) keeps, weight 1/8 per entry) is added to the
//! enclosing frame's child time instead: the parent's self time is then unbiased where the
//! name's entries are steady, and its error is, per span left out, the entry's deviation from
//! the running mean. For entries of spread σ, sampled 1 in N, the parent's self time over *k*
//! spans left out is off by about σ·√(N·*k*) (the mean's own error, σ/√15 for a weight of 1/8,
//! is shared by the N − 1 spans between two recorded ones and dominates their own σ·√*k*),
//! against *k* × the mean without it: in the test, 70 µs against 798 µs for 266 spans of
//! 1–5 µs left out at N = 8. It assumes the span is entered inside the
//! frame that created it (synchronous spans); the back-off samples only names whose spans are
//! short, entered once and leaves (self time ≥ 95% of busy): a child of a span left out is
//! counted in its grandparent's child time twice, at most 5% of the name's time. An error or
//! a metric event inside a span left out counts for the span around it.

use std::sync::atomic::{
    AtomicBool, AtomicU32, AtomicU64,
    Ordering::{Relaxed, SeqCst},
};

use super::names::{Kind, INSTANCE_BUSY, INSTANCE_SELF, MAX_SPAN_NAMES};
use super::shards::{bump, Local};
use super::Recorder;

/// Per span name: the N the back-off set, and what the profile says about it.
#[derive(Debug)]
pub(crate) struct Sampling {
    /// N per name (0 or 1: every span recorded). Written by the back-off thread, read with a
    /// relaxed load at every span's creation.
    every: Box<[AtomicU32]>,
    /// The largest N set per name so far (0: never sampled).
    most: Box<[AtomicU32]>,
    /// When a name was first sampled, ns since the profile started.
    since: Box<[AtomicU64]>,
    /// Cleared by a layer whose span filter follows spans (span or field directives): a span
    /// left out would still go to the filter, under its lock, costing more than recording it.
    allowed: AtomicBool,
    /// Set once any name is sampled: events then look for a span left out (`Recorder::left_out_name`).
    any: AtomicBool,
}

impl Sampling {
    pub(crate) fn new() -> Self {
        let u32s = || (0..MAX_SPAN_NAMES).map(|_| AtomicU32::new(0)).collect();
        Self {
            every: u32s(),
            most: u32s(),
            since: (0..MAX_SPAN_NAMES).map(|_| AtomicU64::new(0)).collect(),
            allowed: AtomicBool::new(true),
            any: AtomicBool::new(false),
        }
    }

    /// N for `name` now (0 or 1: every span).
    #[inline(always)]
    pub(crate) fn every(&self, name: u32) -> u32 {
        self.every.get(name as usize).map_or(0, |e| e.load(Relaxed))
    }

    /// (largest N, since when) for a name ever sampled.
    pub(crate) fn of(&self, name: u32) -> Option<(u32, u64)> {
        let i = name as usize;
        let most = self.most.get(i)?.load(Relaxed);
        (most > 1).then(|| (most, self.since[i].load(Relaxed)))
    }
}

/// What the back-off reads of one span name (cumulative, every thread).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct NameLoad {
    /// The name's index.
    pub(crate) name: u32,
    /// Entries recorded (spans left out not included).
    pub(crate) entries: u64,
    /// Spans left out by sampling.
    pub(crate) skipped: u64,
    /// Instances recorded and closed.
    pub(crate) closed: u64,
    /// Sum of the closed instances' busy and self time, ns.
    pub(crate) busy_ns: u64,
    pub(crate) self_ns: u64,
}

impl Recorder {
    /// Whether this span of a sampled name is left out (N − 1 in N, counted per thread). Its
    /// name's mean busy time goes to the enclosing frame's child time (see the module docs).
    #[inline(never)]
    pub(super) fn sample_out(
        &self,
        name: u32,
        every: u32,
        attrs: &tracing_core::span::Attributes<'_>,
    ) -> bool {
        self.local(|local| {
            let stats = local.stats(name);
            if !stats.cost.sample_out(every) {
                return false;
            }
            let mean = stats.cost.mean_ns();
            // The estimate the parent's child time gets is the name's estimate for the span:
            // the profile's totals and the parents' self times add up.
            bump(&stats.sampled_out_ns, mean);
            if let Some(frame) = local.stack.last_mut() {
                frame.child_ns += mean;
            }
            local.last_sampled_out = name;
            self.tree_sampled_out(local, name, attrs, mean);
            true
        })
        .unwrap_or(false)
    }

    /// An entry in `node` exited whose child time, estimates for spans left out included, is
    /// `over` ns past its busy time: its self time is 0, not negative, so the estimates
    /// overshot by `over`. Taken back from the name last left out on this thread (in its
    /// totals and its node under `node`), so the names' self times still add up to the roots'
    /// busy time.
    #[cold]
    #[inline(never)]
    pub(super) fn overshot(&self, local: &mut Local, node: u16, over: u64) {
        let name = local.last_sampled_out;
        if name == u32::MAX {
            return;
        }
        let stats = local.stats(name);
        let back = over.min(stats.sampled_out_ns.load(Relaxed));
        stats.sampled_out_ns.fetch_sub(back, Relaxed);
        self.tree_overshot(local, node, name, back);
    }

    /// Never sample: the layer's span filter follows spans (see [`Sampling`]).
    pub(crate) fn forbid_sampling(&self) {
        self.sampling.allowed.store(false, Relaxed);
    }

    /// Whether span names may be sampled.
    pub(crate) fn sampling_allowed(&self) -> bool {
        self.sampling.allowed.load(Relaxed)
    }

    /// Records 1 span in `every` of `name` from now on (1: every span). Called by the back-off.
    /// Never for the step span's name (`Builder::with_step_span`): its closes count the export
    /// cadence's steps, and a span left out has no close.
    pub(crate) fn set_sampling(&self, name: u32, every: u32) {
        if self.is_step_name(name) {
            return;
        }
        let i = name as usize;
        let Some(slot) = self.sampling.every.get(i) else {
            return;
        };
        if every > 1 && self.sampling.most[i].load(Relaxed) <= 1 {
            self.sampling.since[i].store(self.elapsed_ns(), Relaxed);
        }
        self.sampling.most[i].fetch_max(every, Relaxed);
        slot.store(every, Relaxed);
        if every > 1 {
            self.sampling.any.store(true, Relaxed);
            // Its callsites' spans leave the common path (which does not look at N) for good.
            // A callsite decided meanwhile marks itself (`Recorder::decide`): with a fence on
            // both sides, one of the two sees the other's write.
            std::sync::atomic::fence(SeqCst);
            self.names.mark_sampled(name);
        }
    }

    /// Whether any name was ever sampled.
    #[inline(always)]
    pub(crate) fn any_sampled(&self) -> bool {
        self.sampling.any.load(Relaxed)
    }

    /// Whether `name` was ever sampled (its callsites' decisions are marked so).
    pub(crate) fn ever_sampled(&self, name: u32) -> bool {
        self.sampling
            .most
            .get(name as usize)
            .is_some_and(|m| m.load(Relaxed) > 1)
    }

    /// Whether `name` is the step span's name (every target).
    fn is_step_name(&self, name: u32) -> bool {
        self.steps.as_ref().is_some_and(|steps| {
            self.names
                .get(name)
                .is_some_and(|n| *n.name == *steps.name())
        })
    }

    /// (name, target) of a name index.
    pub(crate) fn name_of(&self, name: u32) -> Option<(String, String)> {
        self.names
            .get(name)
            .map(|info| (info.name.to_string(), info.target.to_string()))
    }

    /// Every recorded name's load so far (reads every thread's counters; no snapshot).
    pub(crate) fn name_loads(&self) -> Vec<NameLoad> {
        let mut loads: Vec<NameLoad> = Vec::new();
        for shard in self.shards.all() {
            for (index, stats) in shard.names().into_iter().enumerate() {
                let Some(stats) = stats else { continue };
                if loads.len() <= index {
                    loads.resize_with(index + 1, NameLoad::default);
                }
                let sum = |kinds: [Kind; 3]| -> u64 {
                    kinds.iter().map(|&k| stats.hist(k).exact().sum).sum()
                };
                let load = &mut loads[index];
                load.name = index as u32;
                load.entries += stats.entries.load(Relaxed);
                load.skipped += stats.cost.sampled_out();
                load.closed += stats.closed.load(Relaxed);
                load.busy_ns += sum(INSTANCE_BUSY);
                load.self_ns += sum(INSTANCE_SELF);
            }
        }
        // The step span is no candidate for sampling (`set_sampling`).
        loads.retain(|l| l.entries + l.skipped > 0 && !self.is_step_name(l.name));
        loads
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::clock::Clock;
    use crate::record::overhead::Costs;
    use crate::record::Recorder;
    use crate::switches::Resources;

    /// A recorder on a mock clock, and a dispatch of a layer into it.
    fn mocked() -> (Arc<Recorder>, crate::clock::MockClock, tracing::Dispatch) {
        let (clock, mock) = Clock::mock();
        let rec = Arc::new(Recorder::standalone(
            clock,
            Resources::NONE,
            Costs::default(),
        ));
        let layer = crate::layer::ProfileLayer::new(rec.clone(), None, true);
        let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
        (rec, mock, dispatch)
    }

    /// Runs `parents` parent spans on a mock clock, each of 1 µs of its own then `children`
    /// `child` spans of `child_us(i)` µs, with `child` sampled 1 in `every` from the start.
    fn run(every: u32, parents: u64, children: u64, child_us: impl Fn(u64) -> u64) -> Snapshot {
        let (rec, mock, dispatch) = mocked();
        let us = |n| mock.advance(Duration::from_micros(n));
        tracing::dispatcher::with_default(&dispatch, || {
            let mut i = 0;
            for p in 0..parents {
                if p == 1 {
                    // The first parent runs unsampled: the child's mean is learnt there.
                    let child = rec.names.all().iter().position(|n| n.name == "child");
                    rec.set_sampling(child.unwrap() as u32, every);
                }
                tracing::info_span!("parent").in_scope(|| {
                    us(1);
                    for _ in 0..children {
                        tracing::info_span!("child").in_scope(|| us(child_us(i)));
                        i += 1;
                    }
                });
            }
        });
        rec.snapshot()
    }

    use crate::profile::Snapshot;
    use tracing_subscriber::prelude::*;

    #[test]
    fn the_back_off_reads_every_names_instances_with_the_tree_on() {
        // The tree is on (the default): a long name and a step with children must show their
        // busy time to the back-off, or they look like short leaves and get sampled.
        let (rec, mock, dispatch) = mocked();
        tracing::dispatcher::with_default(&dispatch, || {
            for _ in 0..4 {
                tracing::info_span!("step").in_scope(|| {
                    mock.advance(Duration::from_micros(10));
                    tracing::info_span!("long").in_scope(|| {
                        mock.advance(Duration::from_micros(358));
                    });
                });
            }
        });
        let loads = rec.name_loads();
        let of = |name: &str| {
            let i = rec
                .names
                .all()
                .iter()
                .position(|n| *n.name == *name)
                .unwrap() as u32;
            *loads.iter().find(|l| l.name == i).unwrap()
        };
        let long = of("long");
        assert_eq!(
            (long.closed, long.busy_ns, long.self_ns),
            (4, 4 * 358_000, 4 * 358_000)
        );
        let step = of("step");
        assert_eq!((step.busy_ns, step.self_ns), (4 * 368_000, 4 * 10_000));
    }

    #[test]
    fn sampled_estimates_add_up_to_the_roots_busy_time_in_the_table_and_the_tree() {
        // Children of 1 to 5 µs in a scrambled order, sampled 1 in 8 after the first parent.
        let dur = |i: u64| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 59) % 5 + 1;
        let snap = run(8, 20, 16, dur);
        let parent = snap.span("parent").unwrap();
        let child = snap.span("child").unwrap();
        assert!(child.sampled.as_ref().unwrap().skipped > 0);
        // The names' self times add up to the root's busy time: the estimate a child left
        // out adds to its name is what its parent's child time got.
        let names_self: u64 = snap
            .spans
            .iter()
            .map(|s| s.scaled_total_ns(&s.self_time))
            .sum();
        assert_eq!(names_self, parent.busy.total_ns);
        // The tree counts every call, and its estimates are the table's.
        let tree = snap.tree.as_ref().unwrap();
        let node = tree.nodes.iter().find(|n| n.name == "child").unwrap();
        assert_eq!(node.calls, child.calls);
        assert_eq!(node.skipped, child.sampled.as_ref().unwrap().skipped);
        assert_eq!(node.self_ns(), child.scaled_total_ns(&child.entry_self));
        assert_eq!(tree.self_ns(), names_self);
    }

    #[test]
    fn a_sampled_name_records_one_span_in_n_and_counts_every_one() {
        // 1 parent unsampled (8 children), then 9 with 1 child in 4 of 8 recorded.
        let snap = run(4, 10, 8, |_| 2);
        let child = snap.span("child").unwrap();
        let sampled = child.sampled.as_ref().expect("marked sampled");
        assert_eq!(sampled.every, 4);
        assert_eq!(sampled.skipped, 9 * 6);
        // Counts are exact; the histograms hold the recorded spans: 8 + 9 × 2.
        assert_eq!((child.calls, child.created, child.instances), (80, 80, 80));
        assert_eq!(child.busy.count, 8 + 9 * 2);
        assert_eq!(child.busy.total_ns, 26 * 2_000);
        // The total with every span left out at the running mean (steady here: mean × calls).
        assert_eq!(child.scaled_total_ns(&child.busy), 80 * 2_000);
        // The parent's self time is its own 1 µs each: the children left out are not in it.
        let parent = snap.span("parent").unwrap();
        assert_eq!(parent.busy.total_ns, 10 * 17_000);
        assert_eq!(parent.self_time.total_ns, 10 * 1_000);
        assert!(parent.sampled.is_none());
    }

    #[test]
    fn a_parents_self_time_stays_within_the_stated_bound_of_the_unsampled_run() {
        // Children of 1 to 5 µs in a scrambled order: mean 3 µs, spread σ = √2 µs.
        let dur = |i: u64| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 59) % 5 + 1;
        let whole = run(1, 20, 16, dur);
        let sampled = run(8, 20, 16, dur);
        let self_of = |s: &Snapshot| s.span("parent").unwrap().self_time.total_ns as f64;
        let skipped = sampled
            .span("child")
            .unwrap()
            .sampled
            .as_ref()
            .unwrap()
            .skipped;
        assert_eq!(skipped, 19 * 14);
        assert_eq!(self_of(&whole), 20_000.0);
        // Without the mean, the parent would keep every child left out: 266 × ~3 µs, 798 µs.
        // With it, the error is the stated bound's order, σ·√(N·k) (k spans left out, 1 in
        // N recorded): asserted within twice that, 2 × √2 µs × √(8 × 266) = 130 µs (70.5 µs
        // here).
        let error = (self_of(&sampled) - self_of(&whole)).abs();
        let bound = 2.0 * 2f64.sqrt() * 1_000.0 * (8.0 * skipped as f64).sqrt();
        assert!(error <= bound, "error {error} ns over the bound {bound} ns");
    }

    #[test]
    fn a_callsite_decided_after_its_name_was_sampled_is_sampled_too() {
        // Two callsites of one name: the first decided, the name sampled 1 in 4, then the
        // second decided. Each must ask whether its spans are left out: the first through the
        // mark `set_sampling` puts on its cached decision, the second through the one it
        // takes when decided.
        let (rec, _mock, dispatch) = mocked();
        tracing::dispatcher::with_default(&dispatch, || {
            tracing::info_span!("child").in_scope(|| {});
            let child = rec.names.all().iter().position(|n| n.name == "child");
            rec.set_sampling(child.unwrap() as u32, 4);
            for _ in 0..8 {
                tracing::info_span!("child").in_scope(|| {});
            }
            for _ in 0..8 {
                tracing::info_span!("child").in_scope(|| {});
            }
        });
        let snap = rec.snapshot();
        let child = snap.span("child").unwrap();
        assert_eq!(child.calls, 17);
        // 1 before sampling, then 2 of each callsite's 8.
        assert_eq!(child.busy.count, 1 + 2 + 2);
        assert_eq!(child.sampled.as_ref().map(|s| s.skipped), Some(12));
    }

    /// Error and metric events inside spans the back-off left out are kept under their span's
    /// name, as inside recorded ones: errors were lost, metrics went to "no span".
    #[test]
    fn events_in_spans_left_out_count_for_their_name() {
        let (rec, _mock, dispatch) = mocked();
        let run = |n: u64| {
            tracing::dispatcher::with_default(&dispatch, || {
                for _ in 0..n {
                    tracing::info_span!("outer").in_scope(|| {
                        tracing::info_span!("work").in_scope(|| {
                            tracing::info!(monotonic_counter.samples = 1u64);
                            tracing::error!("failed");
                        });
                    });
                }
            });
        };
        run(8);
        let work = rec
            .names
            .all()
            .iter()
            .position(|n| n.name == "work")
            .unwrap() as u32;
        rec.set_sampling(work, 4);
        run(56);
        let snap = rec.snapshot();
        let w = snap.span("work").unwrap();
        assert_eq!(w.sampled.as_ref().expect("marked sampled").skipped, 42);
        assert_eq!(w.errors, 64);
        assert_eq!(snap.span("outer").unwrap().errors, 0);
        let samples: Vec<_> = snap
            .metrics
            .iter()
            .filter(|m| m.name == "samples")
            .collect();
        assert_eq!(samples.len(), 1, "{samples:?}");
        assert_eq!(samples[0].span.as_deref(), Some("work"));
        assert_eq!(samples[0].records, 64);
    }

    /// The step span of the export cadence counts the steps at its closes: the back-off never
    /// samples it (a span left out has no close, and the cadence slowed down 1024 times).
    #[test]
    fn the_step_span_is_never_sampled() {
        let (clock, mock) = Clock::mock();
        let steps = Arc::new(crate::export::StepSignal::new("step".to_string(), 10));
        let rec = Arc::new(
            Recorder::standalone(clock, Resources::NONE, Costs::default())
                .with_steps(Some(steps.clone())),
        );
        let layer = crate::layer::ProfileLayer::new(rec.clone(), None, true);
        let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
        let run = |n: u64| {
            tracing::dispatcher::with_default(&dispatch, || {
                for _ in 0..n {
                    tracing::info_span!("step").in_scope(|| mock.advance(Duration::from_nanos(10)));
                    tracing::info_span!("leaf").in_scope(|| mock.advance(Duration::from_nanos(10)));
                }
            });
        };
        run(16);
        let index =
            |name: &str| rec.names.all().iter().position(|n| n.name == name).unwrap() as u32;
        let (step, leaf) = (index("step"), index("leaf"));
        let loads = rec.name_loads();
        assert!(loads.iter().all(|l| l.name != step), "{loads:?}");
        assert!(loads.iter().any(|l| l.name == leaf), "{loads:?}");
        rec.set_sampling(step, 8);
        rec.set_sampling(leaf, 8);
        assert!(!rec.ever_sampled(step));
        assert!(rec.ever_sampled(leaf));
        run(16);
        let snap = rec.snapshot();
        assert_eq!(snap.span("step").unwrap().instances, 32);
        assert_eq!(steps.count(), 32, "every step counted");
    }

    #[test]
    fn a_filter_that_follows_spans_forbids_sampling() {
        let rec = || {
            Arc::new(Recorder::standalone(
                Clock::new(),
                Resources::NONE,
                Costs::default(),
            ))
        };
        let plain = rec();
        let _layer = crate::layer::ProfileLayer::new(plain.clone(), None, true);
        assert!(plain.sampling_allowed());
        let scoped = rec();
        let filter = crate::layer::LayerFilter::parse("[work]=trace");
        let _layer = crate::layer::ProfileLayer::new(scoped.clone(), Some(filter), true);
        assert!(!scoped.sampling_allowed());
    }
}

//! Comparing runs: per span name, a baseline's and a new run's figures, their ratio, and
//! whether the change is a regression beyond the threshold and beyond the noise between runs.
//!
//! # The rules
//!
//! **Timing** (the chosen [`Measure`], per span name, matched by name and target):
//! - each run gives one value: by default ([`Measure::Typical`]) the baseline's p50 moved by
//!   the run's *typical change*, the median over the quantiles p10, p15, …, p90 of the per-call
//!   busy time of the run's value ÷ the baseline's at that quantile. It reads the whole
//!   distribution held in the histograms, so it stays put where the p50 jumps between clusters
//!   of calls;
//! - **the run-wide shift** ([`RunWide`]): each run's *factor* is the median, over the span
//!   names judged, of its value ÷ the baseline's median value. A busier or slower machine moves
//!   every name by about one factor, and so does a change that slows everything. Each name is
//!   judged *beside* it: each run's values are divided by the run's factor, and the change is
//!   `new / base − 1` of those medians ([`TimingChange::relative_ratio`]). The shift itself is
//!   reported on its own line with its own rule: a regression only with two or more runs per
//!   side, beyond twice the threshold ([`RunWide::THRESHOLD_FACTOR`]) and at least 60 %
//!   ([`RunWide::MIN_THRESHOLD_PCT`]: a shared machine's speed moves by nearly that), and every
//!   run of one
//!   side beyond every run of the other; with
//!   one run on a side it is not judged ([`Evidence::OneRunPerSide`]). With fewer than
//!   [`RunWide::MIN_NAMES`] names judged it is not estimated;
//! - a side's value is the median of its runs' values and its *spread* the largest minus the
//!   smallest of them (each divided by its run's factor);
//! - a change beyond `+threshold` is a regression, below `−threshold` an improvement,
//!   otherwise unchanged;
//! - with **two or more runs on each side**, a change beyond the threshold counts only if the
//!   runs of the two sides do not overlap: every new run (divided by its factor) beyond every
//!   baseline run, the way of the change. Otherwise it is [`Verdict::WithinNoise`]: the runs'
//!   own spread, rather than a fixed noise figure, says what the noise is;
//! - **the neighbour** ([`Neighbour`], call trees on every run): a change the other steps
//!   leave undecided (within the threshold, within the noise, below the minimum shift, or for
//!   one run per side a plain change within the threshold) is judged again beside the span name nearest to it in time per call
//!   (on a log scale) that no call tree puts above or below it: each run's values divided by
//!   that name's value in the run ÷ its baseline median. It is a regression (or an
//!   improvement), [`Evidence::BesideNeighbour`], when beside the neighbour it is beyond the
//!   threshold and the minimum shift with every new run beyond every baseline run, *and*
//!   beside the run-wide shift it moved the same way by more than the neighbour itself did
//!   (else the neighbour is what changed). A machine's speed moves long arithmetic spans more
//!   than short ones, so the run-wide shift can hide part of a long span's change; a neighbour
//!   of like length moves with it. With one run per side, the plain change need not show it:
//!   the neighbour moves with the machine as the name does;
//! - with **one run on a side**, there is no spread to compare with: the threshold decides, the
//!   plain change of the two runs must be beyond it the same way too
//!   ([`Evidence::PlainChangeWithin`] otherwise), and the comparison is marked low-confidence
//!   ([`Comparison::low_confidence`]). The run-wide shift of one run is a guess: a busier
//!   machine stretches long spans more than short ones, so beside one run that got faster a
//!   short span that kept its time would stand out;
//! - a change must also move the value by at least `min_shift_ns` (1 µs by default): spans of
//!   a few microseconds move by more than any threshold with the caches and the neighbours of
//!   a shared machine;
//! - a span name with fewer than `min_calls` calls in a run of either side is
//!   [`Verdict::TooFewCalls`] (its percentiles are a few samples);
//! - on GPU time ([`Measure::Gpu`]) only the runs that timed some of a name's entries on the
//!   GPU count, and its timed entries are its calls: a name not timed on the GPU on a side is
//!   not judged on GPU time, and takes no part in that metric's run-wide shift.
//!
//! Each verdict says which step decided it ([`TimingChange::decided_by`], an [`Evidence`]).
//!
//! **Counts** (calls and instances per span name, and allocations and bytes allocated where the
//! counting allocator ran on both sides) do not depend on the machine's speed: they are
//! compared exactly, with no noise rule. Any increase beyond `count_threshold_pct` (default 0:
//! any increase) is a regression when every new run is above every baseline run.
//!
//! **Thresholds**, most specific first: a name's [`Rule`] threshold (the first rule whose glob
//! matches), else the [`CompareOptions::thresholds`] entry for the metric (a policy file's
//! `[thresholds]` table), else the default [`CompareOptions::threshold_pct`] (`threshold`). A
//! `[thresholds]` entry for the default metric thus sets its threshold, and every other entry
//! adds a metric judged for every span name ([`CompareOptions::for_name`]).
//!
//! **Budgets** are absolute limits on the new runs' median (`train_step p99 < 40 ms`);
//! exceeding one is a regression whatever the baseline.
//!
//! Span names found on one side only are listed, and are not regressions.
//!
//! **Call paths** (where both sides recorded the call tree, [`Snapshot::tree`]): each path
//! (`root;…;leaf`, matched by the names and targets along it) is judged on timing by the same
//! rule and the same metrics and thresholds as its leaf's span name ([`CompareOptions::for_name`]),
//! on the statistics of the path's node: busy and self time per entry at that path, its calls
//! standing for the calls of `min_calls`. A
//! regression on a path is a regression ([`Comparison::regressed`]) like one on a name. Paths
//! found on one side only are listed, and are not regressions.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::str::FromStr;

use crate::profile::glob::glob_match;
use crate::profile::{CallTree, PathIds, Snapshot, SpanStats, Stat, TreeNode};

/// The timing figure compared, per span name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Measure {
    /// The typical change of a call's busy time: the median, over the quantiles p10, p15, …,
    /// p90 of the per-call busy time, of the ratio new / base at that quantile (a shift
    /// function read at its middle). Shown as the baseline's p50 and that p50 moved by the
    /// typical change. Steadier than [`Measure::P50`] where the calls form several clusters
    /// (batches of two sizes, a cache hit and a miss): there the median jumps between them from
    /// run to run. As a [`Budget`], the p50.
    #[default]
    Typical,
    /// Median busy time per call (entry).
    P50,
    /// 90th percentile of busy time per call.
    P90,
    /// 99th percentile of busy time per call.
    P99,
    /// Mean busy time per call.
    Mean,
    /// Mean self time per call (busy time minus child spans).
    SelfTime,
    /// Total busy time of the span name over the run.
    Total,
    /// Mean GPU time per entry timed with CUDA events (`SpanStats::gpu_time`). Only the runs
    /// that timed some entry of a span name (or path) on the GPU are compared on it, and their
    /// timed entries stand for the calls of `min_calls`: a name not timed on a side is not
    /// judged on GPU time (not a change from or to 0 ns).
    Gpu,
}

impl Measure {
    /// Every metric, in the order `--help` lists them.
    pub const ALL: [Measure; 8] = [
        Measure::Typical,
        Measure::P50,
        Measure::P90,
        Measure::P99,
        Measure::Mean,
        Measure::SelfTime,
        Measure::Total,
        Measure::Gpu,
    ];

    /// The name on the command line and in policy files: `typical`, `p50`, `p90`, `p99`,
    /// `mean`, `self`, `total`, `gpu`.
    pub fn name(self) -> &'static str {
        match self {
            Measure::Typical => "typical",
            Measure::P50 => "p50",
            Measure::P90 => "p90",
            Measure::P99 => "p99",
            Measure::Mean => "mean",
            Measure::SelfTime => "self",
            Measure::Total => "total",
            Measure::Gpu => "gpu",
        }
    }

    /// Whether a run of span name `span` has this metric: [`Measure::Gpu`] only where some
    /// entry was timed on the GPU, every other metric always.
    pub fn applies(self, span: &SpanStats) -> bool {
        self != Measure::Gpu || span.gpu_time.as_ref().is_some_and(|g| g.time.count > 0)
    }

    /// The calls of a run of span name `span` that this metric is measured over, the ones
    /// `min_calls` counts: the entries timed on the GPU for [`Measure::Gpu`], else every call.
    pub fn calls(self, span: &SpanStats) -> u64 {
        match self {
            Measure::Gpu => span.gpu_time.as_ref().map_or(0, |g| g.time.count),
            _ => span.calls,
        }
    }

    /// [`Measure::applies`] for one call path's node.
    fn applies_to_node(self, node: &TreeNode) -> bool {
        self != Measure::Gpu || node.gpu_calls > 0
    }

    /// [`Measure::calls`] for one call path's node.
    fn node_calls(self, node: &TreeNode) -> u64 {
        match self {
            Measure::Gpu => node.gpu_calls,
            _ => node.calls,
        }
    }

    /// This metric of one span name, ns ([`Measure::Total`] scaled to every call where the
    /// back-off sampled the name: [`SpanStats::scaled_total_ns`]; [`Measure::Typical`], a
    /// change between runs, is the p50 of one run; [`Measure::Gpu`] 0 where no entry was timed
    /// on the GPU: see [`Measure::applies`]).
    pub fn of(self, span: &SpanStats) -> f64 {
        match self {
            Measure::Total => span.scaled_total_ns(&span.entry_busy) as f64,
            Measure::Gpu => span.gpu_time.as_ref().map_or(0.0, |g| g.time.mean_ns),
            _ => self.pick(&span.entry_busy, &span.entry_self),
        }
    }

    /// This metric of one call path: its node's busy time per entry ([`Measure::P50`]
    /// to [`Measure::Mean`], [`Measure::Total`]) or self time per entry ([`Measure::SelfTime`]),
    /// ns.
    pub fn of_node(self, node: &TreeNode) -> f64 {
        match self {
            Measure::Gpu if node.gpu_calls > 0 => node.gpu_ns as f64 / node.gpu_calls as f64,
            Measure::Gpu => 0.0,
            _ => self.pick(&node.busy, &node.self_time),
        }
    }

    /// This metric from a busy-time and a self-time statistic.
    fn pick(self, busy: &Stat, self_time: &Stat) -> f64 {
        match self {
            Measure::Typical | Measure::P50 => busy.p50_ns as f64,
            Measure::P90 => busy.p90_ns as f64,
            Measure::P99 => busy.p99_ns as f64,
            Measure::Mean => busy.mean_ns,
            Measure::SelfTime => self_time.mean_ns,
            Measure::Total => busy.total_ns as f64,
            Measure::Gpu => 0.0,
        }
    }
}

impl fmt::Display for Measure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Measure {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Measure::ALL
            .into_iter()
            .find(|m| m.name() == s.trim())
            .ok_or_else(|| {
                format!(
                    "unknown metric {s:?}: expected typical, p50, p90, p99, mean, self, total \
                     or gpu"
                )
            })
    }
}

/// A deterministic count, compared exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Count {
    /// Completed entries.
    Calls,
    /// Closed instances.
    Instances,
    /// Heap allocations (counting allocator).
    Allocations,
    /// Bytes allocated (counting allocator).
    AllocatedBytes,
}

impl Count {
    /// The name in reports: `calls`, `instances`, `allocations`, `alloc bytes`.
    pub fn name(self) -> &'static str {
        match self {
            Count::Calls => "calls",
            Count::Instances => "instances",
            Count::Allocations => "allocations",
            Count::AllocatedBytes => "alloc bytes",
        }
    }

    fn of(self, span: &SpanStats) -> Option<u64> {
        let heap = || span.resources.as_ref().and_then(|r| r.heap.as_ref());
        match self {
            Count::Calls => Some(span.calls),
            Count::Instances => Some(span.instances),
            Count::Allocations => heap().map(|h| h.allocations),
            Count::AllocatedBytes => heap().map(|h| h.allocated_bytes),
        }
    }
}

/// A threshold (and metric) for the span names a glob matches, overriding the defaults.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Rule {
    /// Glob of span names (`*`, `?`).
    pub name: String,
    /// The metric for these names, if not the default.
    pub metric: Option<Measure>,
    /// The threshold for these names, %, if not the default.
    pub threshold_pct: Option<f64>,
}

impl Rule {
    /// A rule for the names `glob` matches.
    pub fn new(glob: impl Into<String>) -> Self {
        Self {
            name: glob.into(),
            metric: None,
            threshold_pct: None,
        }
    }

    /// With this metric.
    pub fn with_metric(self, metric: Measure) -> Self {
        Self {
            metric: Some(metric),
            ..self
        }
    }

    /// With this threshold, %.
    pub fn with_threshold(self, pct: f64) -> Self {
        Self {
            threshold_pct: Some(pct),
            ..self
        }
    }
}

/// An absolute limit: the new runs' median of `metric` must stay below `max_ns` for the span
/// names `name` matches.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Budget {
    /// Glob of span names.
    pub name: String,
    /// The metric limited.
    pub metric: Measure,
    /// The limit, ns.
    pub max_ns: f64,
}

impl Budget {
    /// `metric` of the names `glob` matches must stay below `max_ns`.
    pub fn new(glob: impl Into<String>, metric: Measure, max_ns: f64) -> Self {
        Self {
            name: glob.into(),
            metric,
            max_ns,
        }
    }
}

/// How to compare: the default metric and threshold, per-name rules, budgets.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CompareOptions {
    /// The timing metric (default [`Measure::Typical`]).
    pub metric: Measure,
    /// A timing change beyond this, %, is a regression or an improvement (default 15); a
    /// [`thresholds`](CompareOptions::thresholds) entry for the same metric, or a rule's
    /// threshold, is more specific and wins ([`CompareOptions::for_name`]).
    pub threshold_pct: f64,
    /// Span names with fewer calls than this in a run are not judged on timing (default 30).
    pub min_calls: u64,
    /// A timing change smaller than this, ns, is no change (default 1 µs).
    pub min_shift_ns: f64,
    /// A count increase beyond this, %, is a regression (default 0: any increase).
    pub count_threshold_pct: f64,
    /// More metrics every span name is judged on, each with its threshold, % (e.g. p99 at 25 %
    /// beside the default p50 at 15 %). An entry for the metric a name is judged on first
    /// (the default metric, or its rule's) sets that metric's threshold instead of
    /// `threshold_pct`, unless the rule sets one: p50 at 5 % here, not at 80 %, and judged
    /// once (`threshold = "80%"`, `[thresholds] p50 = "5%"` in a policy file). The first entry
    /// of a metric listed twice counts.
    pub thresholds: Vec<(Measure, f64)>,
    /// Per-name overrides of the metric and threshold; the first rule whose glob matches
    /// applies.
    pub rules: Vec<Rule>,
    /// Absolute limits.
    pub budgets: Vec<Budget>,
}

impl Default for CompareOptions {
    fn default() -> Self {
        Self {
            metric: Measure::Typical,
            threshold_pct: Self::DEFAULT_THRESHOLD_PCT,
            min_calls: Self::DEFAULT_MIN_CALLS,
            min_shift_ns: Self::DEFAULT_MIN_SHIFT_NS,
            count_threshold_pct: 0.0,
            thresholds: Vec::new(),
            rules: Vec::new(),
            budgets: Vec::new(),
        }
    }
}

impl CompareOptions {
    /// The default timing threshold, %.
    pub const DEFAULT_THRESHOLD_PCT: f64 = 15.0;
    /// The default minimum number of calls per run.
    pub const DEFAULT_MIN_CALLS: u64 = 30;
    /// The default smallest timing change that counts, ns (1 µs).
    pub const DEFAULT_MIN_SHIFT_NS: f64 = 1_000.0;

    /// The metrics and thresholds span name `name` is judged on: its rule's (or the default)
    /// metric, then every other metric of [`CompareOptions::thresholds`], each once.
    ///
    /// The first metric's threshold is the most specific one given: the rule's threshold, else
    /// the [`thresholds`](CompareOptions::thresholds) entry for that metric, else
    /// [`threshold_pct`](CompareOptions::threshold_pct) ([`CompareOptions::threshold_for`]).
    /// So `threshold = "80%"` with `[thresholds] p50 = "5%"` judges p50 at 5 %, and a rule's
    /// threshold for its names wins over both.
    pub fn for_name(&self, name: &str) -> Vec<(Measure, f64)> {
        let rule = self.rules.iter().find(|r| glob_match(&r.name, name));
        let metric = rule.and_then(|r| r.metric).unwrap_or(self.metric);
        let primary = (
            metric,
            rule.and_then(|r| r.threshold_pct)
                .unwrap_or_else(|| self.threshold_for(metric)),
        );
        let mut all = vec![primary];
        for &(m, pct) in &self.thresholds {
            if all.iter().all(|&(seen, _)| seen != m) {
                all.push((m, pct));
            }
        }
        all
    }

    /// The threshold of `metric` where no rule sets one, %: its first
    /// [`thresholds`](CompareOptions::thresholds) entry, else
    /// [`threshold_pct`](CompareOptions::threshold_pct). For [`CompareOptions::metric`], the
    /// threshold of every span name no rule matches.
    pub fn threshold_for(&self, metric: Measure) -> f64 {
        self.thresholds
            .iter()
            .find(|(m, _)| *m == metric)
            .map_or(self.threshold_pct, |&(_, pct)| pct)
    }
}

/// What a change amounts to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Verdict {
    /// Slower (or more) beyond the threshold and the noise: fails a CI check.
    Regression,
    /// Beyond the threshold, but the runs of the two sides overlap (or, for the run-wide
    /// shift, one run on a side: not judged).
    WithinNoise,
    /// Faster (or fewer) beyond the threshold and the noise.
    Improvement,
    /// Within the threshold.
    Unchanged,
    /// Too few calls in a run to judge the timing.
    TooFewCalls,
}

impl Verdict {
    /// The word in reports.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Regression => "regression",
            Verdict::WithinNoise => "within noise",
            Verdict::Improvement => "improvement",
            Verdict::Unchanged => "unchanged",
            Verdict::TooFewCalls => "too few calls",
        }
    }
}

/// Which step of the rule decided a verdict (see the module's docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Evidence {
    /// A run of a side had fewer than `min_calls` calls.
    TooFewCalls,
    /// The change, relative to the run-wide shift, is within the threshold.
    WithinThreshold,
    /// One run on a side: beyond the threshold beside the run-wide shift, but the plain change
    /// is not beyond it the same way: the shift of the rest of the run alone made the change
    /// (a short span that kept its time while a busier machine stretched the long ones).
    PlainChangeWithin,
    /// Beyond the threshold, but it moves the value by less than `min_shift_ns`.
    BelowMinShift,
    /// Beyond the threshold, but the runs of the two sides overlap (each run divided by its
    /// run-wide factor): some new run is not beyond every baseline run.
    WithinSpread,
    /// Beyond the threshold, and every new run beyond every baseline run (two or more runs per
    /// side).
    BeyondThresholdAndSpread,
    /// Beyond the threshold, and the plain change too, with one run on a side (low confidence).
    BeyondThreshold,
    /// Not decided beside the run-wide shift, but beyond the threshold beside the name's
    /// [`Neighbour`] (each run divided by the neighbour's change in that run), every new run
    /// beyond every baseline run, and moved the same way beside the run-wide shift by more than
    /// the neighbour itself did ([`TimingChange::neighbour`]).
    BesideNeighbour,
    /// The run-wide shift with one run on a side: not judged, as one run per side cannot tell
    /// a busier machine from a change that slows everything.
    OneRunPerSide,
    /// The run-wide shift, with fewer than [`RunWide::MIN_NAMES`] span names judged: not
    /// estimated, and the names are judged on their own changes.
    TooFewNames,
}

impl Evidence {
    /// The name in JSON output: `too_few_calls`, `within_threshold`, `plain_change_within`,
    /// `below_min_shift`,
    /// `within_noise`, `beyond_threshold_and_noise`, `beyond_threshold`, `beside_neighbour`,
    /// `one_run_per_side`, `too_few_names`.
    pub fn name(self) -> &'static str {
        match self {
            Evidence::TooFewCalls => "too_few_calls",
            Evidence::WithinThreshold => "within_threshold",
            Evidence::PlainChangeWithin => "plain_change_within",
            Evidence::BelowMinShift => "below_min_shift",
            Evidence::WithinSpread => "within_noise",
            Evidence::BeyondThresholdAndSpread => "beyond_threshold_and_noise",
            Evidence::BeyondThreshold => "beyond_threshold",
            Evidence::BesideNeighbour => "beside_neighbour",
            Evidence::OneRunPerSide => "one_run_per_side",
            Evidence::TooFewNames => "too_few_names",
        }
    }
}

/// One side's values of a figure over its runs.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Side {
    /// The value of each run that has the span name (or call path), in the order given.
    pub values: Vec<f64>,
    /// The index of the run each value comes from (among this side's runs).
    pub runs: Vec<usize>,
    /// Their median.
    pub median: f64,
    /// Largest minus smallest.
    pub spread: f64,
    /// The fewest calls in one of these runs.
    pub min_calls: u64,
    /// The largest N where the automatic back-off sampled the span name in one of these runs
    /// ([`SpanStats::sampled`]): its figures come from 1 span in N, its total is scaled.
    pub sampled_every: Option<u32>,
}

impl Side {
    fn new(values: Vec<f64>, runs: Vec<usize>, min_calls: u64) -> Self {
        let median = median(&values);
        let (lo, hi) = min_max(&values);
        Self {
            spread: if values.is_empty() { 0.0 } else { hi - lo },
            values,
            runs,
            median,
            min_calls,
            sampled_every: None,
        }
    }

    /// These values with each run's divided by its run-wide factor (`factors[run]`, ln).
    fn relative(&self, factors: &[f64]) -> Self {
        let values = self
            .values
            .iter()
            .zip(&self.runs)
            .map(|(v, &run)| v * (-factors.get(run).copied().unwrap_or(0.0)).exp())
            .collect();
        Self {
            sampled_every: self.sampled_every,
            ..Self::new(values, self.runs.clone(), self.min_calls)
        }
    }
}

/// The timing change of one span name (or call path).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TimingChange {
    /// Span name.
    pub name: String,
    /// Span target.
    pub target: String,
    /// The metric compared.
    pub metric: Measure,
    /// The threshold applied, %.
    pub threshold_pct: f64,
    /// The baseline runs, ns.
    pub base: Side,
    /// The new runs, ns.
    pub new: Side,
    /// `new / base` of the medians (1.0 when both are 0; infinite when only base is 0).
    pub ratio: f64,
    /// The baseline runs, each divided by its run-wide factor ([`RunWide`]), ns.
    pub base_relative: Side,
    /// The new runs, each divided by its run-wide factor, ns.
    pub new_relative: Side,
    /// `new / base` of the relative medians: the change beside the rest of the run, which the
    /// verdict judges (the same as [`TimingChange::ratio`] when no run-wide shift was
    /// estimated).
    pub relative_ratio: f64,
    /// What it amounts to.
    pub verdict: Verdict,
    /// Which step of the rule decided it.
    pub decided_by: Evidence,
    /// The span name it was judged beside, where that decided ([`Evidence::BesideNeighbour`]).
    pub neighbour: Option<Neighbour>,
}

/// The span name another name (or call path) is judged beside when the run-wide shift leaves
/// it undecided: of the names judged, the one nearest in time per call (on a log scale) that
/// is neither above nor below it in any run's call tree.
///
/// A machine's speed does not move every span name alike: on a shared machine, between
/// identical runs, a forward pass (matrix products) slowed by up to ×2.2, the backward pass by
/// ×1.7 and short spans by ×1.25–1.7, so beside the run-wide shift a long span's change carries
/// the machine's. A neighbour of like length and kind moves with it. A name's change beside its
/// neighbour counts only when the name also moved that way beside the run-wide shift, by more
/// than the neighbour did: otherwise the neighbour is what changed.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Neighbour {
    /// Its span name.
    pub name: String,
    /// Its span target.
    pub target: String,
    /// The baseline runs, each divided by the neighbour's value in that run ÷ its baseline
    /// median, ns.
    pub base_relative: Side,
    /// The new runs, so divided, ns.
    pub new_relative: Side,
    /// `new / base` of those medians: the change beside the neighbour.
    pub ratio: f64,
    /// The neighbour's own change beside the run-wide shift.
    pub own_ratio: f64,
}

impl Neighbour {
    /// The change beside the neighbour in %, `(ratio − 1) × 100`.
    pub fn change_pct(&self) -> f64 {
        (self.ratio - 1.0) * 100.0
    }
}

impl TimingChange {
    /// The change in %, `(ratio − 1) × 100`: positive is slower.
    pub fn change_pct(&self) -> f64 {
        (self.ratio - 1.0) * 100.0
    }

    /// The change beside the rest of the run in %, `(relative_ratio − 1) × 100`.
    pub fn relative_change_pct(&self) -> f64 {
        (self.relative_ratio - 1.0) * 100.0
    }
}

/// How every span name moved together between the sides: the run-wide shift.
///
/// Each run's *factor* is the median, over the span names judged on timing, of that run's
/// value ÷ the baseline's median value (per metric). The shift is the new runs' median factor ÷
/// the baseline runs'. A busier or slower machine moves every name by about the same factor;
/// so does a change that slows everything (a debug build, a slower allocator). The names are
/// judged beside it: each run's values are divided by its factor.
///
/// Its own rule: beyond [`RunWide::THRESHOLD_FACTOR`] × the default metric's threshold, and
/// at least [`RunWide::MIN_THRESHOLD_PCT`] (slower by that, or as fast as 1 ÷ (1 + that)), with
/// two or more runs per side, and every run of one side beyond every run of the other (their
/// factors do not overlap), it is a regression (or an improvement); with one run on a side it is
/// reported and not judged ([`Evidence::OneRunPerSide`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RunWide {
    /// The default metric, whose factors these are.
    pub metric: Measure,
    /// New ÷ base of the median factors (1.0 when not estimated).
    pub ratio: f64,
    /// Each baseline run's factor (1.0 each when not estimated).
    pub base_factors: Vec<f64>,
    /// Each new run's factor.
    pub new_factors: Vec<f64>,
    /// The span names the factors are medians of.
    pub names: usize,
    /// The threshold applied, %.
    pub threshold_pct: f64,
    /// What it amounts to.
    pub verdict: Verdict,
    /// Which step of its rule decided.
    pub decided_by: Evidence,
}

impl RunWide {
    /// The fewest span names judged on timing for a run-wide shift to be estimated: with fewer,
    /// one changed name would move the median.
    pub const MIN_NAMES: usize = 3;

    /// The run-wide shift's threshold, in multiples of the default metric's: a machine kept
    /// busy by other processes moved every span name of 3 runs against 3 others by up to 26 %
    /// (`scripts/compare_pairs.sh`, 2 cores), well past a threshold that one name beside the
    /// rest stays within.
    pub const THRESHOLD_FACTOR: f64 = 2.0;

    /// The least run-wide threshold, %, whatever the default metric's: the speed of a shared
    /// virtual machine comes in phases of seconds to minutes, and identical sets of 3 runs
    /// moved together by up to 49 % (once by 40 % with every run of one side beyond every run of
    /// the other) over about 120 comparisons on an idle 2-core machine
    /// (`scripts/compare_pairs.sh`). A change that slows everything by less cannot be told from
    /// such a machine; a debug build (3× and more) still can.
    pub const MIN_THRESHOLD_PCT: f64 = 60.0;

    /// The change in %, `(ratio − 1) × 100`.
    pub fn change_pct(&self) -> f64 {
        (self.ratio - 1.0) * 100.0
    }
}

/// The change of one deterministic count of one span name.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CountChange {
    /// Span name.
    pub name: String,
    /// Span target.
    pub target: String,
    /// What is counted.
    pub count: Count,
    /// The baseline runs' median.
    pub base: f64,
    /// The new runs' median.
    pub new: f64,
    /// [`Verdict::Regression`], [`Verdict::Improvement`] or [`Verdict::Unchanged`].
    pub verdict: Verdict,
}

/// A budget checked against one span name.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct BudgetCheck {
    /// Span name.
    pub name: String,
    /// Span target.
    pub target: String,
    /// The metric limited.
    pub metric: Measure,
    /// The limit, ns.
    pub max_ns: f64,
    /// The new runs' median, ns.
    pub value_ns: f64,
    /// Whether the value is within the limit.
    pub within: bool,
}

/// The comparison of baseline runs with new runs.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Comparison {
    /// Baseline runs.
    pub base_runs: usize,
    /// New runs.
    pub new_runs: usize,
    /// One run on a side: verdicts rest on the threshold alone, not on the spread between runs.
    pub low_confidence: bool,
    /// How every span name moved together, with its own verdict: a busier machine, or a change
    /// that slows everything.
    pub run_wide: RunWide,
    /// Timing, per span name found on both sides: regressions first, then by change.
    pub timings: Vec<TimingChange>,
    /// Counts that differ, per span name found on both sides.
    pub counts: Vec<CountChange>,
    /// Every budget, per span name it matches in the new runs.
    pub budgets: Vec<BudgetCheck>,
    /// (name, target) of span names found only in the baseline runs.
    pub only_in_base: Vec<(String, String)>,
    /// (name, target) of span names found only in the new runs.
    pub only_in_new: Vec<(String, String)>,
    /// Timing per call path found on both sides' trees (empty unless every run has a tree),
    /// ordered as [`Comparison::timings`]: [`TimingChange::name`] is the path, `root;…;leaf`,
    /// and [`TimingChange::target`] the leaf's target.
    pub paths: Vec<TimingChange>,
    /// Call paths found only in the baseline runs' trees.
    pub paths_only_in_base: Vec<String>,
    /// Call paths found only in the new runs' trees.
    pub paths_only_in_new: Vec<String>,
}

impl Comparison {
    /// Whether anything regressed: a timing (of a span name or a call path), the run-wide
    /// shift or a count, or a budget exceeded (the CLI's exit status 1).
    pub fn regressed(&self) -> bool {
        self.run_wide.verdict == Verdict::Regression
            || self
                .timings
                .iter()
                .chain(&self.paths)
                .any(|t| t.verdict == Verdict::Regression)
            || self.counts.iter().any(|c| c.verdict == Verdict::Regression)
            || self.budgets.iter().any(|b| !b.within)
    }
}

type Key = (String, String);

/// Every span name's stats in each run of a side, with the run's index.
fn by_name(runs: &[Snapshot]) -> BTreeMap<Key, Vec<(usize, &SpanStats)>> {
    let mut map: BTreeMap<Key, Vec<(usize, &SpanStats)>> = BTreeMap::new();
    for (run, snapshot) in runs.iter().enumerate() {
        for s in &snapshot.spans {
            map.entry((s.name.clone(), s.target.clone()))
                .or_default()
                .push((run, s));
        }
    }
    map
}

/// Every call path's node in each run of each side (with the run's index), by path id: `None`
/// unless every run has a tree. Paths are matched by [`PathIds`] (parent path, name, target,
/// other node), so the memory is in nodes, not nodes × depth.
#[allow(clippy::type_complexity)]
fn by_path<'a>(
    base: &'a [Snapshot],
    new: &'a [Snapshot],
) -> Option<(PathIds<'a>, [Vec<Vec<(usize, &'a TreeNode)>>; 2])> {
    let trees = |runs: &'a [Snapshot]| -> Option<Vec<&'a CallTree>> {
        runs.iter().map(|run| run.tree.as_ref()).collect()
    };
    let sides = [trees(base)?, trees(new)?];
    let mut ids = PathIds::new();
    let mut nodes: [Vec<Vec<(usize, &TreeNode)>>; 2] = Default::default();
    for (side, trees) in sides.iter().enumerate() {
        for (run, tree) in trees.iter().enumerate() {
            let at = ids.add(tree);
            nodes[side].resize_with(ids.len(), Vec::new);
            for (node, id) in tree.nodes.iter().zip(at) {
                nodes[side][id].push((run, node));
            }
        }
    }
    for side in &mut nodes {
        side.resize_with(ids.len(), Vec::new);
    }
    Some((ids, nodes))
}

/// The quantiles [`Measure::Typical`] reads: p10, p15, …, p90.
const TYPICAL_QUANTILES: [f64; 17] = [
    0.10, 0.15, 0.20, 0.25, 0.30, 0.35, 0.40, 0.45, 0.50, 0.55, 0.60, 0.65, 0.70, 0.75, 0.80, 0.85,
    0.90,
];
/// p50's place in [`TYPICAL_QUANTILES`].
const TYPICAL_P50: usize = 8;

/// Each run's value of `metric` on both sides, from one statistic per run: `value` reads the
/// plain metrics, `busy` the busy-time distribution [`Measure::Typical`] reads.
///
/// For [`Measure::Typical`], the reference is the baseline's median, per quantile, of its
/// runs' values (on a log scale); a run's value is the reference p50 moved by the median,
/// over the quantiles, of the run's ratio to the reference.
fn side_values<T>(
    sides: [&[(usize, &T)]; 2],
    metric: Measure,
    value: impl Fn(&T) -> f64,
    busy: impl Fn(&T) -> &Stat,
) -> [Vec<f64>; 2] {
    if metric != Measure::Typical {
        return sides.map(|runs| runs.iter().map(|(_, t)| value(t)).collect());
    }
    let logs = |runs: &[(usize, &T)]| -> Vec<Vec<f64>> {
        runs.iter()
            .map(|(_, t)| {
                busy(t)
                    .histogram
                    .quantiles(&TYPICAL_QUANTILES)
                    .into_iter()
                    .map(|v| (v.max(1) as f64).ln())
                    .collect()
            })
            .collect()
    };
    let [base, new] = sides.map(logs);
    if base.iter().all(Vec::is_empty) {
        return sides.map(|runs| runs.iter().map(|(_, t)| value(t)).collect());
    }
    let reference: Vec<f64> = (0..TYPICAL_QUANTILES.len())
        .map(|q| {
            let at: Vec<f64> = base.iter().filter_map(|run| run.get(q).copied()).collect();
            median(&at)
        })
        .collect();
    let of = |run: &Vec<f64>| -> f64 {
        if run.is_empty() {
            return 0.0;
        }
        let shifts: Vec<f64> = run.iter().zip(&reference).map(|(v, r)| v - r).collect();
        (reference[TYPICAL_P50] + median(&shifts)).exp().round()
    };
    [base.iter().map(of).collect(), new.iter().map(of).collect()]
}

/// The timing sides of one metric: each run's value, its index, the fewest calls.
fn sides_of<T>(
    sides: [&[(usize, &T)]; 2],
    metric: Measure,
    value: impl Fn(&T) -> f64,
    busy: impl Fn(&T) -> &Stat,
    calls: impl Fn(&T) -> u64,
    sampled_every: impl Fn(&T) -> Option<u32>,
) -> [Side; 2] {
    let values = side_values(sides, metric, value, busy);
    [0, 1].map(|i| {
        let runs = sides[i];
        Side {
            sampled_every: runs.iter().filter_map(|(_, t)| sampled_every(t)).max(),
            ..Side::new(
                values[i].clone(),
                runs.iter().map(|(run, _)| *run).collect(),
                runs.iter().map(|(_, t)| calls(t)).min().unwrap_or(0),
            )
        }
    })
}

/// The runs of each side that have a metric (`has`), or `None` where a side has none: the
/// name (or path) is then not judged on that metric.
#[allow(clippy::type_complexity)]
fn measured<'a, T>(
    sides: [&[(usize, &'a T)]; 2],
    has: impl Fn(&T) -> bool,
) -> Option<[Vec<(usize, &'a T)>; 2]> {
    let [base, new] = sides.map(|runs| {
        runs.iter()
            .filter(|(_, t)| has(t))
            .copied()
            .collect::<Vec<_>>()
    });
    (!base.is_empty() && !new.is_empty()).then_some([base, new])
}

/// A name's (or path's) sides of one metric, before the run-wide shift is known.
struct Pending {
    key: Key,
    /// The span name whose neighbour the name (or path) is judged beside: the name itself, or
    /// a path's leaf.
    leaf: Key,
    metric: Measure,
    threshold_pct: f64,
    sides: [Side; 2],
}

/// The run-wide factors of one metric: ln of each run's factor, per side.
#[derive(Default)]
struct Factors {
    base: Vec<f64>,
    new: Vec<f64>,
    names: usize,
}

/// Each run's factor for `metric` (ln): the median, over the names judged (enough calls, a
/// baseline above 0), of the run's value ÷ the baseline's median. All 0 with fewer than
/// [`RunWide::MIN_NAMES`] names.
fn factors(pending: &[Pending], metric: Measure, runs: [usize; 2], min_calls: u64) -> Factors {
    let judged: Vec<&Pending> = pending
        .iter()
        .filter(|p| {
            p.metric == metric
                && p.sides.iter().all(|s| s.min_calls >= min_calls)
                && p.sides[0].median > 0.0
        })
        .collect();
    if judged.len() < RunWide::MIN_NAMES {
        return Factors {
            base: vec![0.0; runs[0]],
            new: vec![0.0; runs[1]],
            names: judged.len(),
        };
    }
    let [base, new] = [0, 1].map(|side| {
        let mut per_run: Vec<Vec<f64>> = vec![Vec::new(); runs[side]];
        for p in &judged {
            let reference = p.sides[0].median;
            let s = &p.sides[side];
            for (&v, &run) in s.values.iter().zip(&s.runs) {
                if v > 0.0 {
                    per_run[run].push((v / reference).ln());
                }
            }
        }
        per_run
            .iter()
            .map(|logs| median(logs))
            .collect::<Vec<f64>>()
    });
    Factors {
        base,
        new,
        names: judged.len(),
    }
}

/// The run-wide shift of the default metric, judged by its rule ([`RunWide`]).
fn run_wide(f: &Factors, metric: Measure, several: bool, options: &CompareOptions) -> RunWide {
    let threshold_pct =
        (RunWide::THRESHOLD_FACTOR * options.threshold_for(metric)).max(RunWide::MIN_THRESHOLD_PCT);
    let shift = median(&f.new) - median(&f.base);
    let ratio = shift.exp();
    let (verdict, decided_by) = if f.names < RunWide::MIN_NAMES {
        (Verdict::Unchanged, Evidence::TooFewNames)
    } else if shift.abs() <= (1.0 + threshold_pct / 100.0).ln() {
        // Either way alike: 60 % slower, or 1 ÷ 1.6 as fast.
        (Verdict::Unchanged, Evidence::WithinThreshold)
    } else if !several {
        (Verdict::WithinNoise, Evidence::OneRunPerSide)
    } else if !separated(&f.base, &f.new, ratio > 1.0) {
        (Verdict::WithinNoise, Evidence::WithinSpread)
    } else if ratio > 1.0 {
        (Verdict::Regression, Evidence::BeyondThresholdAndSpread)
    } else {
        (Verdict::Improvement, Evidence::BeyondThresholdAndSpread)
    };
    RunWide {
        metric,
        ratio,
        base_factors: f.base.iter().map(|x| x.exp()).collect(),
        new_factors: f.new.iter().map(|x| x.exp()).collect(),
        names: f.names,
        threshold_pct,
        verdict,
        decided_by,
    }
}

/// Which span names are above or below one another in the runs' call trees.
struct Relations<'a> {
    trees: Vec<&'a CallTree>,
    /// Every node of each span name: (tree, node).
    at: HashMap<(&'a str, &'a str), Vec<(usize, usize)>>,
}

impl<'a> Relations<'a> {
    /// `None` unless every run has a call tree.
    fn new(base: &'a [Snapshot], new: &'a [Snapshot]) -> Option<Self> {
        let trees: Vec<&CallTree> = base
            .iter()
            .chain(new)
            .map(|run| run.tree.as_ref())
            .collect::<Option<_>>()?;
        let mut at: HashMap<(&str, &str), Vec<(usize, usize)>> = HashMap::new();
        for (t, tree) in trees.iter().enumerate() {
            for (n, node) in tree.nodes.iter().enumerate().filter(|(_, n)| !n.other) {
                at.entry((&node.name, &node.target))
                    .or_default()
                    .push((t, n));
            }
        }
        Some(Self { trees, at })
    }

    /// Whether some node of `below` has a node of `above` among its ancestors.
    fn under(&self, below: &Key, above: &Key) -> bool {
        let Some(nodes) = self.at.get(&(below.0.as_str(), below.1.as_str())) else {
            return false;
        };
        nodes.iter().any(|&(t, n)| {
            let nodes = &self.trees[t].nodes;
            let mut i = n;
            // Parents come before children; a crafted file that says otherwise ends the walk.
            while let Some(p) = nodes[i].parent.map(|p| p as usize).filter(|&p| p < i) {
                let node = &nodes[p];
                if !node.other && node.name == above.0 && node.target == above.1 {
                    return true;
                }
                i = p;
            }
            false
        })
    }

    fn related(&self, a: &Key, b: &Key) -> bool {
        self.under(a, b) || self.under(b, a)
    }
}

/// A span name others may be judged beside ([`Neighbour`]), on one metric.
struct Candidate {
    key: Key,
    metric: Measure,
    /// The baseline's median.
    median: f64,
    /// Each run's value ÷ the baseline's median (ln), by run, per side.
    logs: [Vec<f64>; 2],
    /// Its own change beside the run-wide shift.
    own_ratio: f64,
}

/// The neighbours of the span names judged, found once per name and metric.
struct Neighbours<'a> {
    candidates: Vec<Candidate>,
    relations: Option<Relations<'a>>,
    found: BTreeMap<(Key, &'static str), Option<usize>>,
}

impl<'a> Neighbours<'a> {
    /// The nearest candidates tried before a name is left without a neighbour: each is one walk
    /// up the call trees from its nodes and the name's.
    const TRIES: usize = 4;

    /// The candidates: the span names judged (enough calls) with a value in every run and a
    /// baseline above 0; a candidate's own change is its row's change beside the run.
    fn new<'t>(
        names: impl Iterator<Item = &'t TimingChange>,
        runs: [usize; 2],
        relations: Option<Relations<'a>>,
    ) -> Self {
        let candidates = names
            .filter(|t| {
                t.verdict != Verdict::TooFewCalls
                    && t.base.median > 0.0
                    && [&t.base, &t.new]
                        .into_iter()
                        .zip(runs)
                        .all(|(s, n)| s.values.len() == n && s.values.iter().all(|&v| v > 0.0))
            })
            .map(|t| {
                let logs = [&t.base, &t.new].map(|s| {
                    let mut by_run = vec![0.0; s.values.len()];
                    for (&v, &run) in s.values.iter().zip(&s.runs) {
                        if let Some(slot) = by_run.get_mut(run) {
                            *slot = (v / t.base.median).ln();
                        }
                    }
                    by_run
                });
                Candidate {
                    key: (t.name.clone(), t.target.clone()),
                    metric: t.metric,
                    median: t.base.median,
                    logs,
                    own_ratio: t.relative_ratio,
                }
            })
            .collect();
        Self {
            candidates,
            relations,
            found: BTreeMap::new(),
        }
    }

    /// The neighbour of span name `leaf` on `metric`: the candidate nearest to its baseline
    /// median (on a log scale), not `leaf` and not above or below it in a call tree. None
    /// without call trees (which names contain which is then unknown).
    fn of(&mut self, leaf: &Key, metric: Measure) -> Option<&Candidate> {
        let found = match self.found.get(&(leaf.clone(), metric.name())) {
            Some(found) => *found,
            None => {
                let found = self.nearest(leaf, metric);
                self.found.insert((leaf.clone(), metric.name()), found);
                found
            }
        };
        found.map(|i| &self.candidates[i])
    }

    fn nearest(&self, leaf: &Key, metric: Measure) -> Option<usize> {
        let relations = self.relations.as_ref()?;
        let own = self
            .candidates
            .iter()
            .find(|c| c.metric == metric && c.key == *leaf)?
            .median;
        let mut near: Vec<(f64, usize)> = self
            .candidates
            .iter()
            .enumerate()
            .filter(|(_, c)| c.metric == metric && c.key != *leaf)
            .map(|(i, c)| ((c.median / own).ln().abs(), i))
            .collect();
        near.sort_by(|a, b| {
            a.0.total_cmp(&b.0)
                .then_with(|| self.candidates[a.1].key.cmp(&self.candidates[b.1].key))
        });
        near.into_iter()
            .take(Self::TRIES)
            .map(|(_, i)| i)
            .find(|&i| !relations.related(leaf, &self.candidates[i].key))
    }
}

/// The neighbour's step of the timing rule ([`Evidence::BesideNeighbour`]), for a change the
/// run-wide shift left undecided.
fn beside_neighbour(t: &mut TimingChange, c: &Candidate, min_shift_ns: f64) {
    let base_relative = t.base.relative(&c.logs[0]);
    let new_relative = t.new.relative(&c.logs[1]);
    let r = ratio(base_relative.median, new_relative.median);
    let up = r > 1.0;
    let beyond = (r - 1.0).abs() * 100.0 > t.threshold_pct;
    let shift = (new_relative.median - base_relative.median).abs();
    // Beside the rest of the run, the name moved the same way, and more than the neighbour.
    let its_own = t.relative_ratio != 1.0
        && (t.relative_ratio > 1.0) == up
        && t.relative_ratio.ln().abs() > c.own_ratio.ln().abs();
    if !(beyond
        && shift >= min_shift_ns
        && its_own
        && separated(&base_relative.values, &new_relative.values, up))
    {
        return;
    }
    t.verdict = if up {
        Verdict::Regression
    } else {
        Verdict::Improvement
    };
    t.decided_by = Evidence::BesideNeighbour;
    t.neighbour = Some(Neighbour {
        name: c.key.0.clone(),
        target: c.key.1.clone(),
        base_relative,
        new_relative,
        ratio: r,
        own_ratio: c.own_ratio,
    });
}

/// The sides of every call path on both sides, and the paths of each side only (in the order
/// of the paths as lists of (name, target, other node): [`PathIds::sorted`]).
fn compare_paths(
    base: &[Snapshot],
    new: &[Snapshot],
    options: &CompareOptions,
) -> (Vec<Pending>, Vec<String>, Vec<String>) {
    let Some((ids, [b, n])) = by_path(base, new) else {
        return Default::default();
    };
    let mut paths = Vec::new();
    let (mut only_base, mut only_new) = (Vec::new(), Vec::new());
    for id in ids.sorted() {
        let (base_nodes, new_nodes) = (&b[id], &n[id]);
        match (base_nodes.is_empty(), new_nodes.is_empty()) {
            (false, true) => only_base.push(ids.text(id, ";")),
            (true, false) => only_new.push(ids.text(id, ";")),
            (true, true) => {}
            (false, false) => {
                let leaf = ids.node(id);
                let shown = (ids.text(id, ";"), leaf.target.clone());
                for (metric, threshold_pct) in options.for_name(&leaf.name) {
                    let Some(sides) =
                        measured([base_nodes, new_nodes], |node| metric.applies_to_node(node))
                    else {
                        continue;
                    };
                    paths.push(Pending {
                        key: shown.clone(),
                        leaf: (leaf.name.clone(), leaf.target.clone()),
                        metric,
                        threshold_pct,
                        sides: sides_of(
                            [&sides[0], &sides[1]],
                            metric,
                            |node| metric.of_node(node),
                            |node| &node.busy,
                            |node| metric.node_calls(node),
                            |_| None,
                        ),
                    });
                }
            }
        }
    }
    (paths, only_base, only_new)
}

/// Regressions first, then the largest change first, then by name.
fn sort_timings(timings: &mut [TimingChange]) {
    timings.sort_by(|a, b| {
        a.verdict
            .cmp(&b.verdict)
            .then(b.relative_ratio.total_cmp(&a.relative_ratio))
            .then(a.name.cmp(&b.name))
    });
}

/// Compares baseline runs with new runs (see the module's rules).
///
/// ```
/// use spanprof::analysis::{compare, CompareOptions, Verdict};
/// # let base = spanprof::profile::Snapshot::from_json(
/// #     include_str!("../../tests/data/profile-v1-basic.json"), "doc")?;
/// let same = compare(&[base.clone()], &[base.clone()], &CompareOptions::default());
/// assert!(!same.regressed());
/// assert!(same.low_confidence);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn compare(base: &[Snapshot], new: &[Snapshot], options: &CompareOptions) -> Comparison {
    let (b, n) = (by_name(base), by_name(new));
    let several = base.len() >= 2 && new.len() >= 2;
    let mut pending = Vec::new();
    let mut counts = Vec::new();
    for (key, base_stats) in &b {
        let Some(new_stats) = n.get(key) else {
            continue;
        };
        for (metric, threshold_pct) in options.for_name(&key.0) {
            let Some(sides) = measured([base_stats, new_stats], |s| metric.applies(s)) else {
                continue;
            };
            pending.push(Pending {
                key: key.clone(),
                leaf: key.clone(),
                metric,
                threshold_pct,
                sides: sides_of(
                    [&sides[0], &sides[1]],
                    metric,
                    |s| metric.of(s),
                    |s| &s.entry_busy,
                    |s| metric.calls(s),
                    |s| Some(s.sampled.as_ref()?.every),
                ),
            });
        }
        for count in [
            Count::Calls,
            Count::Instances,
            Count::Allocations,
            Count::AllocatedBytes,
        ] {
            counts.extend(judge_count(key, count, base_stats, new_stats, options));
        }
    }
    counts.sort_by(|a, b| a.verdict.cmp(&b.verdict).then(a.name.cmp(&b.name)));
    // The run-wide factors of each metric judged, from the span names.
    let runs = [base.len(), new.len()];
    let mut metrics: Vec<Measure> = pending.iter().map(|p| p.metric).collect();
    metrics.sort_by_key(|m| m.name());
    metrics.dedup();
    let all_factors: Vec<(Measure, Factors)> = metrics
        .into_iter()
        .map(|m| (m, factors(&pending, m, runs, options.min_calls)))
        .collect();
    let of_metric = |m: Measure| all_factors.iter().find(|(x, _)| *x == m).map(|(_, f)| f);
    // Each name (or path) with the span name whose neighbour it is judged beside.
    let judge_all = |pending: Vec<Pending>| -> Vec<(Key, TimingChange)> {
        pending
            .into_iter()
            .map(|p| (p.leaf.clone(), judge_timing(p, of_metric, several, options)))
            .collect()
    };
    let run_wide = run_wide(
        of_metric(options.metric).unwrap_or(&Factors::default()),
        options.metric,
        several,
        options,
    );
    let (path_pending, paths_only_in_base, paths_only_in_new) = compare_paths(base, new, options);
    let (mut timings, mut paths) = (judge_all(pending), judge_all(path_pending));
    let mut neighbours = Neighbours::new(
        timings.iter().map(|(_, t)| t),
        runs,
        Relations::new(base, new),
    );
    for (leaf, t) in timings.iter_mut().chain(&mut paths) {
        if matches!(t.verdict, Verdict::Unchanged | Verdict::WithinNoise) {
            if let Some(c) = neighbours.of(leaf, t.metric) {
                beside_neighbour(t, c, options.min_shift_ns);
            }
        }
    }
    let sorted = |rows: Vec<(Key, TimingChange)>| {
        let mut out: Vec<TimingChange> = rows.into_iter().map(|(_, t)| t).collect();
        sort_timings(&mut out);
        out
    };
    let mut budgets = Vec::new();
    for budget in &options.budgets {
        for (key, stats) in n.iter().filter(|(k, _)| glob_match(&budget.name, &k.0)) {
            let values: Vec<f64> = stats
                .iter()
                .filter(|(_, s)| budget.metric.applies(s))
                .map(|(_, s)| budget.metric.of(s))
                .collect();
            if values.is_empty() {
                continue;
            }
            let value = median(&values);
            budgets.push(BudgetCheck {
                name: key.0.clone(),
                target: key.1.clone(),
                metric: budget.metric,
                max_ns: budget.max_ns,
                value_ns: value,
                within: value < budget.max_ns,
            });
        }
    }
    let only = |a: &BTreeMap<Key, Vec<(usize, &SpanStats)>>,
                b: &BTreeMap<Key, Vec<(usize, &SpanStats)>>| {
        a.keys().filter(|k| !b.contains_key(*k)).cloned().collect()
    };
    Comparison {
        base_runs: base.len(),
        new_runs: new.len(),
        low_confidence: !several,
        run_wide,
        timings: sorted(timings),
        counts,
        budgets,
        only_in_base: only(&b, &n),
        only_in_new: only(&n, &b),
        paths: sorted(paths),
        paths_only_in_base,
        paths_only_in_new,
    }
}

/// The timing rule (see the module's docs) for one span name (or path) and metric, beside the
/// run-wide shift of its metric.
fn judge_timing<'f>(
    p: Pending,
    factors: impl Fn(Measure) -> Option<&'f Factors>,
    several: bool,
    options: &CompareOptions,
) -> TimingChange {
    let [bs, ns] = p.sides;
    let (base_relative, new_relative) = match factors(p.metric) {
        Some(f) => (bs.relative(&f.base), ns.relative(&f.new)),
        None => (bs.clone(), ns.clone()),
    };
    let relative_ratio = ratio(base_relative.median, new_relative.median);
    let plain_ratio = ratio(bs.median, ns.median);
    let shift = (new_relative.median - base_relative.median).abs();
    let beyond = |r: f64| (r - 1.0).abs() * 100.0 > p.threshold_pct;
    // With one run per side, the plain change must show it too, the same way: there the
    // run-wide shift takes false changes out, it never makes one.
    let plain_agrees = beyond(plain_ratio) && (plain_ratio > 1.0) == (relative_ratio > 1.0);
    let (verdict, decided_by) =
        if bs.min_calls < options.min_calls || ns.min_calls < options.min_calls {
            (Verdict::TooFewCalls, Evidence::TooFewCalls)
        } else if !beyond(relative_ratio) {
            (Verdict::Unchanged, Evidence::WithinThreshold)
        } else if !several && !plain_agrees {
            (Verdict::Unchanged, Evidence::PlainChangeWithin)
        } else if shift < options.min_shift_ns {
            (Verdict::Unchanged, Evidence::BelowMinShift)
        } else if several
            && !separated(
                &base_relative.values,
                &new_relative.values,
                relative_ratio > 1.0,
            )
        {
            (Verdict::WithinNoise, Evidence::WithinSpread)
        } else {
            let evidence = if several {
                Evidence::BeyondThresholdAndSpread
            } else {
                Evidence::BeyondThreshold
            };
            let verdict = if relative_ratio > 1.0 {
                Verdict::Regression
            } else {
                Verdict::Improvement
            };
            (verdict, evidence)
        };
    TimingChange {
        name: p.key.0,
        target: p.key.1,
        metric: p.metric,
        threshold_pct: p.threshold_pct,
        ratio: plain_ratio,
        base: bs,
        new: ns,
        base_relative,
        new_relative,
        relative_ratio,
        verdict,
        decided_by,
        neighbour: None,
    }
}

/// The exact rule for one count of one span name: `None` when it did not change (or was not
/// counted on both sides).
fn judge_count(
    key: &Key,
    count: Count,
    base_stats: &[(usize, &SpanStats)],
    new_stats: &[(usize, &SpanStats)],
    options: &CompareOptions,
) -> Option<CountChange> {
    let values = |stats: &[(usize, &SpanStats)]| -> Option<Vec<f64>> {
        stats
            .iter()
            .map(|(_, s)| count.of(s).map(|v| v as f64))
            .collect()
    };
    let (bv, nv) = (values(base_stats)?, values(new_stats)?);
    let (bmin, bmax) = min_max(&bv);
    let (nmin, nmax) = min_max(&nv);
    if bmin == bmax && nmin == nmax && bmin == nmin {
        return None;
    }
    let limit = 1.0 + options.count_threshold_pct / 100.0;
    let verdict = if nmin > bmax * limit {
        Verdict::Regression
    } else if nmax * limit < bmin {
        Verdict::Improvement
    } else {
        Verdict::Unchanged
    };
    Some(CountChange {
        name: key.0.clone(),
        target: key.1.clone(),
        count,
        base: median(&bv),
        new: median(&nv),
        verdict,
    })
}

/// Whether every new value is beyond every baseline value the way of the change (above them
/// when `up`, below otherwise): the runs of the two sides do not overlap.
fn separated(base: &[f64], new: &[f64], up: bool) -> bool {
    let ((base_lo, base_hi), (new_lo, new_hi)) = (min_max(base), min_max(new));
    if up {
        new_lo > base_hi
    } else {
        new_hi < base_lo
    }
}

fn ratio(base: f64, new: f64) -> f64 {
    if base == new {
        1.0
    } else if base == 0.0 {
        f64::INFINITY
    } else {
        new / base
    }
}

/// The median (0 when empty).
fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => sorted[n / 2],
        _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

fn min_max(values: &[f64]) -> (f64, f64) {
    values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Snapshot {
        Snapshot::from_json(
            include_str!("../../tests/data/profile-v1-basic.json"),
            "test data",
        )
        .unwrap()
    }

    /// The options with the p50 as the metric, as these tests were written for.
    fn p50_options() -> CompareOptions {
        CompareOptions {
            metric: Measure::P50,
            ..CompareOptions::default()
        }
    }

    /// `stat`'s p50 and histogram (every sample) scaled by `factor`.
    fn scale_stat(stat: &mut Stat, factor: f64) {
        stat.p50_ns = (stat.p50_ns as f64 * factor) as u64;
        let mut h = crate::profile::buckets::new_histogram();
        for (value, count) in stat.histogram.iter() {
            crate::profile::buckets::record_n(&mut h, (value as f64 * factor) as u64, count);
        }
        stat.histogram = crate::profile::Buckets::from_histogram(&h);
    }

    /// `snapshot` with the p50 and the histogram of span `name` scaled by `factor`.
    fn scaled(snapshot: &Snapshot, name: &str, factor: f64) -> Snapshot {
        let mut s = snapshot.clone();
        for span in s.spans.iter_mut().filter(|sp| sp.name == name) {
            scale_stat(&mut span.entry_busy, factor);
        }
        s
    }

    /// `snapshot` with every span name scaled by `factor` (a slower machine), and `name` by
    /// `factor × extra` besides.
    fn machine(snapshot: &Snapshot, factor: f64, name: &str, extra: f64) -> Snapshot {
        let mut s = snapshot.clone();
        for span in &mut s.spans {
            let f = if span.name == name {
                factor * extra
            } else {
                factor
            };
            scale_stat(&mut span.entry_busy, f);
        }
        s
    }

    fn busiest(s: &Snapshot) -> String {
        s.spans
            .iter()
            .filter(|sp| sp.calls >= CompareOptions::DEFAULT_MIN_CALLS)
            .max_by_key(|sp| sp.entry_busy.p50_ns)
            .expect("a span with enough calls")
            .name
            .clone()
    }

    fn verdict_of(c: &Comparison, name: &str) -> Verdict {
        c.timings.iter().find(|t| t.name == name).unwrap().verdict
    }

    #[test]
    fn one_run_per_side_uses_the_threshold_and_says_low_confidence() {
        let b = base();
        let name = busiest(&b);
        let opts = p50_options();
        let slow = compare(std::slice::from_ref(&b), &[scaled(&b, &name, 1.2)], &opts);
        assert!(slow.low_confidence);
        assert_eq!(verdict_of(&slow, &name), Verdict::Regression);
        assert!(slow.regressed());
        let t = slow.timings.iter().find(|t| t.name == name).unwrap();
        assert!((t.change_pct() - 20.0).abs() < 0.5, "{}", t.change_pct());
        let noise = compare(std::slice::from_ref(&b), &[scaled(&b, &name, 1.05)], &opts);
        assert_eq!(verdict_of(&noise, &name), Verdict::Unchanged);
        assert!(!noise.regressed());
        let fast = compare(std::slice::from_ref(&b), &[scaled(&b, &name, 0.5)], &opts);
        assert_eq!(verdict_of(&fast, &name), Verdict::Improvement);
        assert!(!fast.regressed());
    }

    /// A busier machine moves every name by one factor; a change moves one name beside it.
    /// The run-wide shift is taken out of each name's change, and with one run per side it is
    /// reported, not judged.
    #[test]
    fn a_run_wide_shift_is_taken_out_and_one_name_beside_it_is_judged() {
        let b = base();
        let name = busiest(&b);
        for metric in [Measure::Typical, Measure::P50] {
            let opts = CompareOptions {
                metric,
                ..CompareOptions::default()
            };
            // Every name 70 % slower, `name` 20 % slower still.
            let c = compare(
                std::slice::from_ref(&b),
                &[machine(&b, 1.7, &name, 1.2)],
                &opts,
            );
            assert!((c.run_wide.ratio - 1.7).abs() < 0.02, "{:?}", c.run_wide);
            assert_eq!(c.run_wide.names, 7);
            assert_eq!(
                (c.run_wide.verdict, c.run_wide.decided_by),
                (Verdict::WithinNoise, Evidence::OneRunPerSide)
            );
            let t = c
                .timings
                .iter()
                .find(|t| t.name == name && t.metric == metric)
                .unwrap();
            assert!(
                (t.relative_change_pct() - 20.0).abs() < 1.5,
                "{metric}: {t:?}"
            );
            assert!((t.change_pct() - 104.0).abs() < 2.0, "{metric}: {t:?}");
            assert_eq!(
                (t.verdict, t.decided_by),
                (Verdict::Regression, Evidence::BeyondThreshold)
            );
            // Every other name moved with the machine alone: unchanged beside it.
            for other in c.timings.iter().filter(|t| t.name != name) {
                assert!(
                    matches!(other.verdict, Verdict::Unchanged | Verdict::TooFewCalls),
                    "{other:?}"
                );
            }
            let regressed: Vec<&str> = c
                .timings
                .iter()
                .filter(|t| t.verdict == Verdict::Regression)
                .map(|t| t.name.as_str())
                .collect();
            assert_eq!(regressed, [name.as_str()]);
            // The machine alone: nothing regressed, the shift reported.
            let c = compare(
                std::slice::from_ref(&b),
                &[machine(&b, 1.7, &name, 1.0)],
                &opts,
            );
            assert!(!c.regressed(), "{:?}", c.timings);
            assert_eq!(c.run_wide.decided_by, Evidence::OneRunPerSide);
        }
    }

    /// The new runs ran on a machine twice as fast, and `name` got 20 % slower: its plain change
    /// is −40 %. With several runs per side, beside the run and beyond every baseline run, it
    /// is a regression; one run per side needs the plain change to show it too.
    #[test]
    fn a_slowdown_hidden_by_a_faster_machine_is_caught_with_several_runs() {
        let b = base();
        let name = busiest(&b);
        let opts = CompareOptions::default();
        let jitter = |f: f64| [0.98, 1.0, 1.02].map(|j| f * j);
        let base_runs = jitter(1.0).map(|f| machine(&b, f, "", 1.0));
        let new_runs = jitter(0.5).map(|f| machine(&b, f, &name, 1.2));
        let c = compare(&base_runs, &new_runs, &opts);
        let t = c.timings.iter().find(|t| t.name == name).unwrap();
        assert!((t.change_pct() + 40.0).abs() < 2.0, "{t:?}");
        assert!((t.relative_change_pct() - 20.0).abs() < 2.0, "{t:?}");
        assert_eq!(
            (t.verdict, t.decided_by),
            (Verdict::Regression, Evidence::BeyondThresholdAndSpread)
        );
        assert_eq!(c.run_wide.verdict, Verdict::Improvement, "{:?}", c.run_wide);
        let c = compare(&base_runs[..1], &new_runs[..1], &opts);
        let t = c.timings.iter().find(|t| t.name == name).unwrap();
        assert_eq!(
            (t.verdict, t.decided_by),
            (Verdict::Unchanged, Evidence::PlainChangeWithin)
        );
    }

    /// One run per side, a machine busier during the baseline stretched the long spans and not
    /// the short ones: beside the run the short ones look slower, but their plain change does
    /// not show it.
    #[test]
    fn a_change_beside_the_run_that_the_plain_change_does_not_show_is_no_regression() {
        let b = base();
        let mut busy = b.clone();
        for span in &mut busy.spans {
            // The long spans 40 % slower in the baseline; the short ones (under 10 µs) not.
            if span.entry_busy.p50_ns > 10_000 {
                scale_stat(&mut span.entry_busy, 1.4);
            }
        }
        let c = compare(
            &[busy],
            std::slice::from_ref(&b),
            &CompareOptions::default(),
        );
        assert!(!c.regressed(), "{:#?}", c.timings);
        let short: Vec<&TimingChange> = c
            .timings
            .iter()
            .filter(|t| t.decided_by == Evidence::PlainChangeWithin)
            .collect();
        assert!(!short.is_empty(), "{:#?}", c.timings);
        for t in short {
            assert!(
                t.relative_change_pct() > 15.0 && t.change_pct().abs() < 1.0,
                "{t:?}"
            );
            assert_eq!(t.verdict, Verdict::Unchanged);
        }
    }

    /// With several runs per side, a run-wide shift is judged by its own rule: every run of
    /// one side beyond every run of the other.
    #[test]
    fn a_run_wide_shift_with_several_runs_is_judged_by_its_own_rule() {
        let b = base();
        let name = busiest(&b);
        let side = |factors: &[f64]| -> Vec<Snapshot> {
            factors
                .iter()
                .map(|&f| machine(&b, f, &name, 1.0))
                .collect()
        };
        let opts = CompareOptions::default();
        let base_runs = side(&[0.99, 1.0, 1.01]);
        let c = compare(&base_runs, &side(&[1.69, 1.7, 1.71]), &opts);
        assert_eq!(
            (c.run_wide.verdict, c.run_wide.decided_by),
            (Verdict::Regression, Evidence::BeyondThresholdAndSpread)
        );
        assert_eq!(c.run_wide.threshold_pct, RunWide::MIN_THRESHOLD_PCT);
        assert!(c.regressed());
        assert_eq!(c.run_wide.new_factors.len(), 3);
        assert!(c.timings.iter().all(|t| t.verdict != Verdict::Regression));
        // A new side whose runs overlap the baseline's: within noise.
        let c = compare(&base_runs, &side(&[0.95, 1.7, 1.75]), &opts);
        assert_eq!(
            (c.run_wide.verdict, c.run_wide.decided_by),
            (Verdict::WithinNoise, Evidence::WithinSpread)
        );
        assert!(!c.regressed(), "{:?}", c.run_wide);
        // A shift within the threshold: 40 % with the runs apart, as identical code moved on a
        // shared machine.
        let c = compare(&base_runs, &side(&[1.39, 1.4, 1.41]), &opts);
        assert_eq!(c.run_wide.decided_by, Evidence::WithinThreshold);
        assert!(!c.regressed());
        // A per-name threshold past half the least one sets it at twice that.
        let wide = CompareOptions {
            threshold_pct: 40.0,
            ..CompareOptions::default()
        };
        let c = compare(&base_runs, &side(&[1.69, 1.7, 1.71]), &wide);
        assert_eq!(c.run_wide.threshold_pct, 80.0);
        assert_eq!(c.run_wide.decided_by, Evidence::WithinThreshold);
    }

    /// Fewer than `RunWide::MIN_NAMES` names judged: no run-wide shift is estimated, and each
    /// name is judged on its own change.
    #[test]
    fn too_few_names_for_a_run_wide_shift_judge_each_name_alone() {
        let mut b = base();
        let name = busiest(&b);
        let keep = ["forward", "backward", "train"];
        b.spans.retain(|s| keep.contains(&s.name.as_str()));
        let c = compare(
            std::slice::from_ref(&b),
            &[machine(&b, 1.3, &name, 1.0)],
            &CompareOptions::default(),
        );
        assert_eq!(
            (c.run_wide.names, c.run_wide.decided_by, c.run_wide.ratio),
            (2, Evidence::TooFewNames, 1.0)
        );
        assert!(c.regressed());
        let t = c.timings.iter().find(|t| t.name == "backward").unwrap();
        assert_eq!(t.relative_ratio, t.ratio);
        assert_eq!(t.verdict, Verdict::Regression);
    }

    /// Calls in two clusters (e.g. batches of two sizes): the p50 jumps from one to the other
    /// when their shares trade places, while the typical change stays 0.
    #[test]
    fn the_typical_change_stays_where_the_p50_jumps_between_clusters() {
        let b = base();
        let name = busiest(&b);
        let clusters = |short: u64, long: u64| {
            let mut h = crate::profile::buckets::new_histogram();
            crate::profile::buckets::record_n(&mut h, 100_000, short);
            crate::profile::buckets::record_n(&mut h, 200_000, long);
            let p50 = h.value_at_quantile(0.5);
            let mut s = b.clone();
            let span = s.spans.iter_mut().find(|sp| sp.name == name).unwrap();
            span.entry_busy.histogram = crate::profile::Buckets::from_histogram(&h);
            span.entry_busy.p50_ns = p50;
            s
        };
        let (before, after) = (clusters(490, 510), clusters(510, 490));
        let judged = |metric| {
            let opts = CompareOptions {
                metric,
                ..CompareOptions::default()
            };
            let c = compare(
                std::slice::from_ref(&before),
                std::slice::from_ref(&after),
                &opts,
            );
            let t = c.timings.iter().find(|t| t.name == name).unwrap().clone();
            (t.ratio, t.verdict)
        };
        let (p50_ratio, p50_verdict) = judged(Measure::P50);
        assert!(p50_ratio < 0.6, "{p50_ratio}");
        assert_eq!(p50_verdict, Verdict::Improvement);
        assert_eq!(judged(Measure::Typical), (1.0, Verdict::Unchanged));
    }

    #[test]
    fn several_runs_need_every_new_run_beyond_every_baseline_run() {
        let b = base();
        let name = busiest(&b);
        let opts = p50_options();
        let new = [
            scaled(&b, &name, 1.18),
            scaled(&b, &name, 1.2),
            scaled(&b, &name, 1.22),
        ];
        // A baseline run as slow as a new one: a 20 % shift of the medians is within the noise.
        let noisy = [scaled(&b, &name, 0.85), b.clone(), scaled(&b, &name, 1.19)];
        let c = compare(&noisy, &new, &opts);
        assert!(!c.low_confidence);
        assert_eq!(verdict_of(&c, &name), Verdict::WithinNoise);
        let t = c.timings.iter().find(|t| t.name == name).unwrap();
        assert_eq!(t.decided_by, Evidence::WithinSpread);
        assert!(!c.regressed());
        // Runs spread wider than the shift, yet every new one slower than every baseline one:
        // a regression.
        let wide = [scaled(&b, &name, 0.75), b.clone(), scaled(&b, &name, 1.02)];
        let c = compare(&wide, &new, &opts);
        assert_eq!(verdict_of(&c, &name), Verdict::Regression);
        let t = c.timings.iter().find(|t| t.name == name).unwrap();
        assert!(t.base.spread > t.new.median - t.base.median, "{t:?}");
        assert_eq!(t.decided_by, Evidence::BeyondThresholdAndSpread);
        // Tight base runs: a regression, with their spread reported.
        let tight = [scaled(&b, &name, 0.99), b.clone(), scaled(&b, &name, 1.01)];
        let c = compare(&tight, &new, &opts);
        assert_eq!(verdict_of(&c, &name), Verdict::Regression);
        let t = c.timings.iter().find(|t| t.name == name).unwrap();
        assert_eq!(t.base.values.len(), 3);
        assert!((t.base.spread / t.base.median - 0.02).abs() < 0.001);
    }

    #[test]
    fn counts_are_exact_and_names_on_one_side_are_listed() {
        let b = base();
        let name = busiest(&b);
        let mut more = b.clone();
        let span = more.spans.iter_mut().find(|s| s.name == name).unwrap();
        span.calls += 1;
        more.spans.retain(|s| s.name == name);
        let c = compare(std::slice::from_ref(&b), &[more], &p50_options());
        let calls = c
            .counts
            .iter()
            .find(|x| x.name == name && x.count == Count::Calls)
            .unwrap();
        assert_eq!(calls.verdict, Verdict::Regression);
        assert_eq!(calls.new - calls.base, 1.0);
        assert!(c.regressed());
        assert_eq!(c.only_in_base.len(), b.spans.len() - 1);
        assert!(c.only_in_new.is_empty());
    }

    #[test]
    fn rules_and_budgets() {
        let b = base();
        let name = busiest(&b);
        let p50 = b.span(&name).unwrap().entry_busy.p50_ns as f64;
        let mut opts = p50_options();
        opts.rules
            .push(Rule::new(name.clone()).with_threshold(30.0));
        let c = compare(std::slice::from_ref(&b), &[scaled(&b, &name, 1.2)], &opts);
        assert_eq!(verdict_of(&c, &name), Verdict::Unchanged);
        opts.budgets
            .push(Budget::new(name.clone(), Measure::P50, p50 * 1.1));
        let c = compare(std::slice::from_ref(&b), &[scaled(&b, &name, 1.2)], &opts);
        assert_eq!(c.budgets.len(), 1);
        assert!(!c.budgets[0].within);
        assert!((c.budgets[0].value_ns - p50 * 1.2).abs() <= 1.0);
        assert!(c.regressed());
        assert_eq!("self".parse::<Measure>(), Ok(Measure::SelfTime));
        assert!("p75".parse::<Measure>().unwrap_err().contains("p75"));
    }

    #[test]
    fn each_metric_of_the_thresholds_is_judged_too() {
        let b = base();
        let name = busiest(&b);
        let mut slow_tail = b.clone();
        for span in slow_tail.spans.iter_mut().filter(|sp| sp.name == name) {
            span.entry_busy.p99_ns *= 2;
        }
        let mut opts = p50_options();
        let c = compare(
            std::slice::from_ref(&b),
            std::slice::from_ref(&slow_tail),
            &opts,
        );
        assert!(!c.regressed(), "p50 alone does not see the tail");
        opts.thresholds.push((Measure::P99, 50.0));
        let c = compare(
            std::slice::from_ref(&b),
            std::slice::from_ref(&slow_tail),
            &opts,
        );
        let rows: Vec<(Measure, Verdict)> = c
            .timings
            .iter()
            .filter(|t| t.name == name)
            .map(|t| (t.metric, t.verdict))
            .collect();
        assert_eq!(
            rows,
            [
                (Measure::P99, Verdict::Regression),
                (Measure::P50, Verdict::Unchanged)
            ]
        );
    }

    /// A `[thresholds]` entry for the metric judged first sets its threshold (it was dropped:
    /// `threshold = "80%"` with `p50 = "5%"` let a +50 % p50 pass); a rule's threshold is more
    /// specific still; each metric is judged once.
    #[test]
    fn a_thresholds_entry_for_the_primary_metric_sets_its_threshold() {
        let b = base();
        let name = busiest(&b);
        let slow = scaled(&b, &name, 1.5);
        let mut opts = CompareOptions {
            threshold_pct: 80.0,
            ..p50_options()
        };
        opts.thresholds.push((Measure::P50, 5.0));
        opts.thresholds.push((Measure::P99, 25.0));
        opts.thresholds.push((Measure::P50, 90.0));
        assert_eq!(
            opts.for_name(&name),
            [(Measure::P50, 5.0), (Measure::P99, 25.0)]
        );
        let c = compare(std::slice::from_ref(&b), std::slice::from_ref(&slow), &opts);
        let p50: Vec<&TimingChange> = c
            .timings
            .iter()
            .filter(|t| t.name == name && t.metric == Measure::P50)
            .collect();
        assert_eq!(p50.len(), 1, "judged once");
        assert_eq!(p50[0].threshold_pct, 5.0);
        assert_eq!(p50[0].verdict, Verdict::Regression);
        assert!(c.regressed());
        // A rule's threshold for the name wins over the entry; its metric takes the entry's.
        opts.rules
            .push(Rule::new(name.clone()).with_threshold(60.0));
        opts.rules.push(Rule::new("*").with_metric(Measure::P99));
        assert_eq!(
            opts.for_name(&name),
            [(Measure::P50, 60.0), (Measure::P99, 25.0)]
        );
        assert_eq!(opts.for_name("other")[0], (Measure::P99, 25.0));
        let c = compare(std::slice::from_ref(&b), std::slice::from_ref(&slow), &opts);
        assert!(!c.regressed(), "{:?}", c.timings);
    }

    #[test]
    fn a_sampled_names_total_is_scaled_and_said_to_be_sampled() {
        let b = base();
        let name = busiest(&b);
        // The new run recorded a quarter of the name's entries (sampled 1 in 4), as fast.
        let mut new = b.clone();
        for span in new.spans.iter_mut().filter(|sp| sp.name == name) {
            let e = &mut span.entry_busy;
            let recorded = e.count / 4;
            span.sampled = Some(crate::profile::Sampled {
                every: 4,
                since_ns: 0,
                skipped: e.count - recorded,
                skipped_ns: 0,
            });
            e.count = recorded;
            e.total_ns = (e.mean_ns * recorded as f64) as u64;
        }
        let mut opts = p50_options();
        opts.thresholds.push((Measure::Total, 5.0));
        let c = compare(std::slice::from_ref(&b), std::slice::from_ref(&new), &opts);
        let t = c
            .timings
            .iter()
            .find(|t| t.name == name && t.metric == Measure::Total)
            .unwrap();
        // Recorded alone, the total fell by 75%: scaled to every call, it did not move.
        assert!((t.ratio - 1.0).abs() < 0.01, "{}", t.ratio);
        assert_eq!(t.verdict, Verdict::Unchanged);
        assert_eq!((t.base.sampled_every, t.new.sampled_every), (None, Some(4)));
    }

    fn with_tree() -> Snapshot {
        Snapshot::from_json(
            include_str!("../../tests/data/golden-profile.json"),
            "test data",
        )
        .unwrap()
    }

    #[test]
    fn call_paths_are_judged_by_the_rule_of_their_leaf_name() {
        let b = with_tree();
        let mut slow = b.clone();
        let tree = slow.tree.as_mut().unwrap();
        let forward = tree.nodes.iter().position(|n| n.name == "forward").unwrap();
        let p50 = tree.nodes[forward].busy.p50_ns;
        tree.nodes[forward].busy.p50_ns = p50 * 2;
        // The validate_batch leaf is gone from the new run's tree.
        let validate = tree
            .nodes
            .iter()
            .position(|n| n.name == "validate_batch")
            .unwrap();
        tree.nodes.remove(validate);
        for node in tree.nodes.iter_mut().skip(validate) {
            node.parent = node
                .parent
                .map(|p| if p as usize > validate { p - 1 } else { p });
        }
        let mut opts = CompareOptions {
            min_calls: 1,
            ..p50_options()
        };
        let c = compare(std::slice::from_ref(&b), std::slice::from_ref(&slow), &opts);
        let path = c
            .paths
            .iter()
            .find(|t| t.name == "train;train_step;forward")
            .unwrap();
        assert_eq!(path.verdict, Verdict::Regression);
        assert_eq!(path.base.median, p50 as f64);
        assert_eq!(path.new.median, 2.0 * p50 as f64);
        assert_eq!(c.paths[0].name, "train;train_step;forward");
        assert!(c.paths[1..]
            .iter()
            .all(|t| t.verdict != Verdict::Regression));
        // The names did not change: the path alone is the regression.
        assert!(c.timings.iter().all(|t| t.verdict != Verdict::Regression));
        assert!(c.regressed());
        assert_eq!(c.paths_only_in_base, ["train;train_step;validate_batch"]);
        assert!(c.paths_only_in_new.is_empty());
        // A rule of the leaf's name applies to its path.
        opts.rules.push(Rule::new("forward").with_threshold(150.0));
        let c = compare(std::slice::from_ref(&b), std::slice::from_ref(&slow), &opts);
        assert!(!c.regressed());
        // A side without a tree: no paths compared.
        let mut bare = slow.clone();
        bare.tree = None;
        let c = compare(std::slice::from_ref(&b), &[bare], &opts);
        assert!(c.paths.is_empty() && c.paths_only_in_base.is_empty());
    }

    /// Paths are listed in the order of their (name, target, other node) lists from the root,
    /// element by element: a path before the paths under it, siblings by name, then target,
    /// then other node (the order of a sorted map keyed by the whole paths).
    #[test]
    fn paths_are_listed_in_the_order_of_their_names_from_the_root() {
        let base = with_tree();
        let mut tree = base.tree.clone().unwrap();
        let n = tree.nodes.len();
        // Beside each node, under the same parent: the same name in another target, a name it
        // begins with, a name that begins with it, and an other node of the same name.
        for i in 0..n {
            let node = tree.nodes[i].clone();
            for (name, target, other) in [
                (node.name.clone(), format!("{}x", node.target), false),
                (
                    node.name.chars().take(1).collect(),
                    node.target.clone(),
                    false,
                ),
                (format!("{} ", node.name), node.target.clone(), false),
                (node.name.clone(), node.target.clone(), true),
            ] {
                tree.nodes.push(TreeNode {
                    name,
                    target,
                    other,
                    ..node.clone()
                });
            }
        }
        let mut base = base;
        base.tree = Some(tree.clone());
        let mut empty = base.clone();
        empty.tree.as_mut().unwrap().nodes.clear();
        // The paths as lists, sorted.
        let mut keys: Vec<Vec<(String, String, bool)>> = Vec::new();
        for i in 0..tree.nodes.len() {
            let mut key = Vec::new();
            let mut at = Some(i);
            while let Some(j) = at {
                let node = &tree.nodes[j];
                key.push((node.name.clone(), node.target.clone(), node.other));
                at = node.parent.map(|p| p as usize).filter(|&p| p < j);
            }
            key.reverse();
            keys.push(key);
        }
        keys.sort();
        keys.dedup();
        let text = |key: &Vec<(String, String, bool)>| {
            key.iter()
                .map(|(name, _, _)| name.as_str())
                .collect::<Vec<_>>()
                .join(";")
        };
        let want: Vec<String> = keys.iter().map(text).collect();
        let options = p50_options();
        let c = compare(
            std::slice::from_ref(&base),
            std::slice::from_ref(&empty),
            &options,
        );
        assert_eq!(c.paths_only_in_base, want);
        let c = compare(
            std::slice::from_ref(&empty),
            std::slice::from_ref(&base),
            &options,
        );
        assert_eq!(c.paths_only_in_new, want);
        // On both sides: every path judged once, ties (the same text) in that order.
        let c = compare(
            std::slice::from_ref(&base),
            std::slice::from_ref(&base),
            &options,
        );
        assert_eq!(c.paths.len(), keys.len());
        let mut sorted = want.clone();
        sorted.sort();
        let got: Vec<&str> = c.paths.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(got, sorted, "unchanged, ratio 1: by text");
        for (t, key) in c.paths.iter().zip({
            let mut k: Vec<_> = keys.iter().collect();
            k.sort_by_key(|k| text(k));
            k
        }) {
            assert_eq!(t.target, key.last().unwrap().1, "{}", t.name);
        }
    }

    /// The training example's profile, with its call tree.
    fn training() -> Snapshot {
        Snapshot::from_json(include_str!("../../tests/data/cli-base.json"), "test data").unwrap()
    }

    /// `snapshot` on a machine running at `speed` that moves long spans (over 100 µs per call)
    /// as `speed²` and short ones as `speed`, with span name `slow` `extra` times slower
    /// besides: span names and call-tree nodes alike.
    fn phase(snapshot: &Snapshot, speed: f64, slow: &str, extra: f64) -> Snapshot {
        let factor = |name: &str, p50_ns: u64| {
            let machine = if p50_ns > 100_000 {
                speed * speed
            } else {
                speed
            };
            machine * if name == slow { extra } else { 1.0 }
        };
        let mut s = snapshot.clone();
        for span in &mut s.spans {
            let f = factor(&span.name, span.entry_busy.p50_ns);
            scale_stat(&mut span.entry_busy, f);
        }
        for node in &mut s.tree.as_mut().unwrap().nodes {
            let f = factor(&node.name, node.busy.p50_ns);
            scale_stat(&mut node.busy, f);
        }
        s
    }

    fn timing<'c>(c: &'c Comparison, name: &str) -> &'c TimingChange {
        c.timings.iter().find(|t| t.name == name).unwrap()
    }

    /// A machine 5 % faster for short spans and 10 % for long ones hides most of a 20 %
    /// slowdown of `forward` beside the run-wide shift; beside `backward`, the long span off its
    /// call path, the whole of it shows. `backward`, which moved with the machine, is no
    /// improvement.
    #[test]
    fn a_slowdown_the_machine_hides_beside_the_run_is_caught_beside_its_neighbour() {
        let b = training();
        let opts = CompareOptions::default();
        let jitter = [0.98, 1.0, 1.02];
        let base_runs = jitter.map(|j| phase(&b, j, "", 1.0));
        let new_runs = jitter.map(|j| phase(&b, 0.95 * j, "forward", 1.2));
        let c = compare(&base_runs, &new_runs, &opts);
        let t = timing(&c, "forward");
        assert!((t.relative_change_pct() - 14.0).abs() < 1.5, "{t:?}");
        assert_eq!(
            (t.verdict, t.decided_by),
            (Verdict::Regression, Evidence::BesideNeighbour),
            "{t:?}"
        );
        let n = t.neighbour.as_ref().unwrap();
        assert_eq!(n.name, "backward");
        assert!((n.change_pct() - 20.0).abs() < 1.0, "{n:?}");
        assert!((n.own_ratio - 0.95).abs() < 0.01, "{n:?}");
        assert!(c.regressed());
        let path = c
            .paths
            .iter()
            .find(|t| t.name == "train;epoch;train_step;forward")
            .unwrap();
        assert_eq!(path.decided_by, Evidence::BesideNeighbour, "{path:?}");
        for name in ["backward", "train_step", "load_batch", "loss"] {
            let t = timing(&c, name);
            assert_eq!(t.verdict, Verdict::Unchanged, "{t:?}");
            assert!(t.neighbour.is_none(), "{t:?}");
        }
        // Identical code on the same two machines: nothing.
        let same = jitter.map(|j| phase(&b, 0.95 * j, "", 1.0));
        let c = compare(&base_runs, &same, &opts);
        assert!(!c.regressed(), "{:#?}", c.timings);
        assert!(c
            .timings
            .iter()
            .chain(&c.paths)
            .all(|t| t.decided_by != Evidence::BesideNeighbour));
        // One run per side: the same, though the plain change (+8 %) does not show it.
        let c = compare(&base_runs[..1], &new_runs[..1], &opts);
        let t = timing(&c, "forward");
        assert_eq!(
            (t.verdict, t.decided_by),
            (Verdict::Regression, Evidence::BesideNeighbour),
            "{t:?}"
        );
        assert!(c.low_confidence);
        // Without call trees, which names contain which is unknown: no neighbour step.
        let flat = |runs: &[Snapshot]| -> Vec<Snapshot> {
            runs.iter()
                .map(|r| Snapshot {
                    tree: None,
                    ..r.clone()
                })
                .collect()
        };
        let c = compare(&flat(&base_runs), &flat(&new_runs), &opts);
        assert_eq!(timing(&c, "forward").verdict, Verdict::Unchanged);
    }

    /// Two neighbours slower together (a slower matrix product in both passes) stay a
    /// regression beside the run-wide shift: the neighbour only adds a step for what the run-wide
    /// shift leaves undecided.
    #[test]
    fn neighbours_slower_together_are_still_regressions_beside_the_run() {
        let b = training();
        let jitter = [0.98, 1.0, 1.02];
        let base_runs = jitter.map(|j| phase(&b, j, "", 1.0));
        let new_runs = jitter.map(|j| {
            let s = phase(&b, j, "forward", 1.3);
            phase(&s, 1.0, "backward", 1.3)
        });
        let c = compare(&base_runs, &new_runs, &CompareOptions::default());
        for name in ["forward", "backward"] {
            let t = timing(&c, name);
            assert_eq!(
                (t.verdict, t.decided_by),
                (Verdict::Regression, Evidence::BeyondThresholdAndSpread),
                "{t:?}"
            );
        }
    }

    /// The neighbour is the nearest name in time per call that no call tree puts above or
    /// below it: `train_step` runs every other name with enough calls, so it has none.
    #[test]
    fn a_neighbour_is_the_nearest_name_off_the_call_path() {
        let b = training();
        let runs = [b.clone(), b.clone()];
        let judged = compare(&runs, &runs, &CompareOptions::default()).timings;
        let key = |name: &str| (name.to_string(), "training_loop::workload".to_string());
        let mut n = Neighbours::new(judged.iter(), [2, 2], Relations::new(&runs, &runs));
        let of = |n: &mut Neighbours<'_>, name: &str| {
            n.of(&key(name), Measure::Typical).map(|c| c.key.0.clone())
        };
        assert_eq!(of(&mut n, "forward").as_deref(), Some("backward"));
        assert_eq!(of(&mut n, "backward").as_deref(), Some("forward"));
        assert_eq!(of(&mut n, "train_step"), None);
        assert_eq!(of(&mut n, "load_batch").as_deref(), Some("optimizer_step"));
        assert_eq!(of(&mut n, "validate_batch").as_deref(), Some("loss"));
        // `evaluate` has 1 call a run: judged by no one, and no one's neighbour.
        assert_eq!(of(&mut n, "evaluate"), None);
        let mut flat = Neighbours::new(judged.iter(), [2, 2], None);
        assert_eq!(of(&mut flat, "forward"), None);
    }
}

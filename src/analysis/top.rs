//! Bottlenecks: what in a profile deserves attention first, each finding with the figures
//! that justify it.
//!
//! Every kind of finding has a minimum effect size (the constants below): below it, a figure
//! is noise or too small to act on, and nothing is said.

use crate::profile::{Snapshot, SpanStats, TreeNode};

use super::{leaks, Leak};

/// A span name with at least this share of all self time dominates (a [`Finding::SelfTime`]).
pub const DOMINANT_SELF_SHARE_PCT: f64 = 10.0;
/// The hottest call path is named ([`Finding::HotPath`]) when its node holds at least this
/// share of the call tree's self time: below it, no one path stands out.
pub const HOT_PATH_MIN_SHARE_PCT: f64 = 10.0;
/// A span name whose p99 is at least this many times its p50 has a heavy tail.
pub const HEAVY_TAIL_RATIO: f64 = 10.0;
/// Fewest calls before a tail is judged (a p99 of fewer calls is a handful of samples).
pub const HEAVY_TAIL_MIN_CALLS: u64 = 100;
/// A heavy tail is named when its span name's busy time is at least this share of all the
/// time inside spans (all self time): the tail of a name that hardly runs costs nothing.
pub const HEAVY_TAIL_MIN_SHARE_PCT: f64 = 1.0;
/// Instrumentation costing at least this share of a span's own time is worth a look: per call
/// (busy time) for a span entered once per instance, per instance (wall time) for one entered
/// more often.
pub const INSTRUMENTATION_MIN_SHARE_PCT: f64 = 5.0;
/// An instrumentation finding also needs spanprof's estimated cost in the name's spans to be
/// at least this share of all the time inside spans (all self time): a short span that runs
/// seldom costs nothing worth a change of the code.
pub const INSTRUMENTATION_MIN_RUN_SHARE_PCT: f64 = 1.0;
/// Fewest entries before a span name's allocations per call are judged (a span entered once,
/// around the whole run, allocates everything its children do).
pub const ALLOCATIONS_MIN_CALLS: u64 = 30;
/// A span name's allocations are named when its calls make at least this many allocations
/// each, or allocate at least [`ALLOCATIONS_MIN_BYTES_PER_CALL`] each (child spans included).
pub const ALLOCATIONS_MIN_PER_CALL: f64 = 1.0;
/// See [`ALLOCATIONS_MIN_PER_CALL`]: bytes allocated per call (1 KiB).
pub const ALLOCATIONS_MIN_BYTES_PER_CALL: f64 = 1024.0;
/// A span name's allocations are named only when they are at least this share of the run's
/// allocations (by count or by bytes; see [`Finding::Allocations`] for what the run's are).
pub const ALLOCATIONS_MIN_SHARE_PCT: f64 = 1.0;
/// A GPU below this utilisation while a span runs is idle.
pub const GPU_IDLE_PCT: f64 = 20.0;
/// An idle GPU is named when its span name's instances take at least this share of the run's
/// wall time.
pub const GPU_IDLE_MIN_WALL_SHARE_PCT: f64 = 10.0;
/// A span name timed on the GPU (CUDA events) is GPU-bound when its mean GPU time per entry is
/// at least this many times its mean busy (CPU-side) time: its stream is still working
/// through what the span queued long after the CPU moved on, and faster launches would not
/// shorten it.
pub const GPU_BOUND_RATIO: f64 = 1.5;
/// Fewest timed entries before a span name is judged GPU-bound.
pub const GPU_BOUND_MIN_CALLS: u64 = 10;
/// At most this many findings of each kind.
pub const FINDINGS_PER_KIND: usize = 5;

/// What [`top`] found, with the figures behind it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Finding {
    /// A span name holding a large share of the time inside spans (self time), at least
    /// [`DOMINANT_SELF_SHARE_PCT`].
    SelfTime {
        /// Span name.
        name: String,
        /// Span target.
        target: String,
        /// Its self time, ns.
        self_ns: u64,
        /// Share of all self time, %.
        share_pct: f64,
    },
    /// The call path holding the most self time (from the call tree, where recorded), at least
    /// [`HOT_PATH_MIN_SHARE_PCT`] of it. Only a node the tree places on a path of known names
    /// (no `[other]` node on it) and with closed instances is named.
    HotPath {
        /// The path's names, root first, joined by `;`.
        path: String,
        /// The leaf's target.
        target: String,
        /// Closed instances on this path.
        instances: u64,
        /// Its self time, ns ([`TreeNode::self_ns`]: with the estimate for spans the back-off
        /// left out).
        self_ns: u64,
        /// `self_ns` as a share of the tree's self time, %.
        share_pct: f64,
    },
    /// A span name whose slow calls are far slower than its typical one: p99 at least
    /// [`HEAVY_TAIL_RATIO`] × p50, over at least [`HEAVY_TAIL_MIN_CALLS`] calls, the name
    /// holding at least [`HEAVY_TAIL_MIN_SHARE_PCT`] of the time inside spans.
    HeavyTail {
        /// Span name.
        name: String,
        /// Span target.
        target: String,
        /// Calls.
        calls: u64,
        /// Median busy time per call, ns.
        p50_ns: u64,
        /// 99th percentile, ns.
        p99_ns: u64,
        /// p99 / p50.
        ratio: f64,
    },
    /// A span name so short that its instrumentation is a large share of its time.
    ///
    /// Every figure is per span: a span entered once per instance (`entries_per_span` 1) is
    /// judged on its busy time per call; one entered more often (an async span, entered at
    /// every poll, or a long-lived span entered at every use) on its instance's wall time,
    /// with the cost of all its entries: an instance lasting 11 ms polled three times is no
    /// span too short, however short each poll. `cost_share_pct` is
    /// `100 × cost_per_span_ns / mean_ns`.
    ///
    /// The cost is the profile's own estimate of a span's cost, measured as the program ran
    /// (per span, or per entry of one entered several times), where it is sure
    /// ([`Overhead::span_ns_sure`](crate::profile::Overhead::span_ns_sure)), × the entries
    /// per span. A profile without a sure one (too few callbacks timed, or one written before
    /// spanprof measured its cost) raises no instrumentation finding.
    Instrumentation {
        /// Span name.
        name: String,
        /// Span target.
        target: String,
        /// Calls (entries).
        calls: u64,
        /// Spans (instances created).
        spans: u64,
        /// Entries per span recorded (1 for a span entered once).
        entries_per_span: f64,
        /// The time judged per span, ns: mean busy time per call where `entries_per_span` is
        /// 1, else mean wall time per closed instance.
        mean_ns: f64,
        /// spanprof's estimated cost per span (all its entries), ns.
        cost_per_span_ns: f64,
        /// `cost_per_span_ns` over `mean_ns`, %.
        cost_share_pct: f64,
        /// N where the automatic back-off sampled the name (1 span in N recorded): spanprof
        /// has already cut its cost there; the figures are those of the spans recorded.
        sampled_every: Option<u32>,
    },
    /// A span name allocating much per call (counting allocator; child spans included), over
    /// at least [`ALLOCATIONS_MIN_CALLS`] entries: at least [`ALLOCATIONS_MIN_PER_CALL`]
    /// allocations or [`ALLOCATIONS_MIN_BYTES_PER_CALL`] bytes per call, and at least
    /// [`ALLOCATIONS_MIN_SHARE_PCT`] of the run's allocations or bytes.
    ///
    /// The run's allocations: those of the span names the call tree has at its roots (every
    /// span name's where the profile has no tree, or spans past its bounds at its roots, which
    /// counts nested allocations more than once: the shares are then lower bounds).
    Allocations {
        /// Span name.
        name: String,
        /// Span target.
        target: String,
        /// Entries measured.
        entries: u64,
        /// Allocations per entry.
        per_call: f64,
        /// Bytes allocated per entry.
        bytes_per_call: f64,
        /// The name's allocations as a share of the run's, %.
        share_pct: f64,
        /// The name's bytes allocated as a share of the run's, %.
        bytes_share_pct: f64,
    },
    /// A leak suspicion ([`leaks`](super::leaks)).
    Leak(Leak),
    /// A GPU mostly idle while a span name ran: below [`GPU_IDLE_PCT`], the name's instances
    /// taking at least [`GPU_IDLE_MIN_WALL_SHARE_PCT`] of the run.
    GpuIdle {
        /// Span name.
        name: String,
        /// Span target.
        target: String,
        /// Device position in the profile's device list.
        device: u32,
        /// Utilisation over the span's instances, %.
        utilization_pct: f64,
        /// The span's share of the run's wall time (its instances' wall time over the run), %.
        wall_share_pct: f64,
    },
    /// A span name whose GPU time (CUDA events on its stream) per entry is at least
    /// [`GPU_BOUND_RATIO`] times its busy time per entry, over at least
    /// [`GPU_BOUND_MIN_CALLS`] timed entries: "forward: 12 ms CPU, 41 ms GPU — GPU-bound".
    GpuBound {
        /// Span name.
        name: String,
        /// Span target.
        target: String,
        /// Entries timed on the GPU.
        calls: u64,
        /// Mean busy (CPU-side) time per entry, ns.
        cpu_mean_ns: f64,
        /// Mean GPU time per timed entry, ns.
        gpu_mean_ns: f64,
        /// `gpu_mean_ns / cpu_mean_ns`.
        ratio: f64,
    },
    /// A kind had more findings than [`FINDINGS_PER_KIND`]: how many more, after its last.
    More {
        /// The kind: `self time`, `heavy tail`, `instrumentation`, `allocations`, `GPU idle`,
        /// `GPU-bound`.
        kind: &'static str,
        /// Findings of that kind left out.
        left_out: usize,
    },
}

/// Adds the first [`FINDINGS_PER_KIND`] of `all` (the largest first), and a [`Finding::More`]
/// where there were more.
fn most(
    findings: &mut Vec<Finding>,
    kind: &'static str,
    all: impl ExactSizeIterator<Item = Finding>,
) {
    let left_out = all.len().saturating_sub(FINDINGS_PER_KIND);
    findings.extend(all.take(FINDINGS_PER_KIND));
    if left_out > 0 {
        findings.push(Finding::More { kind, left_out });
    }
}

/// The bottlenecks of `snapshot`, by kind (self time, the hottest call path, tails,
/// instrumentation, allocations, leaks, idle GPUs), the largest first within a kind, at most
/// [`FINDINGS_PER_KIND`] each, then a [`Finding::More`] saying how many more there were. Each
/// kind has its minimum effect size (see the constants of this module): below it, nothing is
/// said.
///
/// ```
/// use spanprof::analysis::{top, Finding};
/// # let snapshot = spanprof::profile::Snapshot::from_json(
/// #     include_str!("../../tests/data/profile-v1-basic.json"), "doc")?;
/// for finding in top(&snapshot) {
///     if let Finding::SelfTime { name, share_pct, .. } = finding {
///         println!("{name}: {share_pct:.0} % of the time inside spans");
///     }
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn top(snapshot: &Snapshot) -> Vec<Finding> {
    let spans = &snapshot.spans;
    let key = |s: &SpanStats| (s.name.clone(), s.target.clone());
    let mut findings = Vec::new();

    // The profile's one rule for totals (those of names the back-off sampled scaled to every
    // call) and its one total self time, as every output.
    let self_ns = SpanStats::self_ns;
    let all_self = u128::from(snapshot.totals().self_ns);
    let mut dominant: Vec<&SpanStats> = spans
        .iter()
        .filter(|s| all_self > 0 && share(self_ns(s), all_self) >= DOMINANT_SELF_SHARE_PCT)
        .collect();
    dominant.sort_by_key(|s| std::cmp::Reverse(self_ns(s)));
    most(
        &mut findings,
        "self time",
        dominant.iter().map(|s| {
            let (name, target) = key(s);
            Finding::SelfTime {
                name,
                target,
                self_ns: self_ns(s),
                share_pct: share(self_ns(s), all_self),
            }
        }),
    );

    findings.extend(hot_path(snapshot));

    let mut tails: Vec<(f64, &SpanStats)> = spans
        .iter()
        .filter(|s| s.calls >= HEAVY_TAIL_MIN_CALLS && s.entry_busy.p50_ns > 0)
        .filter(|s| all_self > 0 && share(s.busy_ns(), all_self) >= HEAVY_TAIL_MIN_SHARE_PCT)
        .map(|s| (s.entry_busy.p99_ns as f64 / s.entry_busy.p50_ns as f64, s))
        .filter(|(r, _)| *r >= HEAVY_TAIL_RATIO)
        .collect();
    tails.sort_by(|a, b| b.0.total_cmp(&a.0));
    most(
        &mut findings,
        "heavy tail",
        tails.iter().map(|(ratio, s)| {
            let (name, target) = key(s);
            Finding::HeavyTail {
                name,
                target,
                calls: s.calls,
                p50_ns: s.entry_busy.p50_ns,
                p99_ns: s.entry_busy.p99_ns,
                ratio: *ratio,
            }
        }),
    );

    let mut cheap: Vec<Finding> = match span_cost_ns(snapshot) {
        Some(per_entry) => spans
            .iter()
            .filter_map(|s| instrumentation(s, per_entry, all_self))
            .collect(),
        None => Vec::new(),
    };
    let pct = |f: &Finding| match f {
        Finding::Instrumentation { cost_share_pct, .. } => *cost_share_pct,
        _ => 0.0,
    };
    cheap.sort_by(|a, b| pct(b).total_cmp(&pct(a)));
    most(&mut findings, "instrumentation", cheap.into_iter());

    let (run_allocations, run_bytes) = run_allocations(snapshot);
    let mut allocating: Vec<Finding> = spans
        .iter()
        .filter_map(|s| {
            let heap = s.resources.as_ref()?.heap.as_ref()?;
            if heap.entries < ALLOCATIONS_MIN_CALLS {
                return None;
            }
            let n = heap.entries as f64;
            let (per_call, bytes_per_call) =
                (heap.allocations as f64 / n, heap.allocated_bytes as f64 / n);
            let share_pct = share(heap.allocations, run_allocations.max(1));
            let bytes_share_pct = share(heap.allocated_bytes, run_bytes.max(1));
            let (name, target) = key(s);
            ((per_call >= ALLOCATIONS_MIN_PER_CALL
                || bytes_per_call >= ALLOCATIONS_MIN_BYTES_PER_CALL)
                && (share_pct >= ALLOCATIONS_MIN_SHARE_PCT
                    || bytes_share_pct >= ALLOCATIONS_MIN_SHARE_PCT))
                .then_some(Finding::Allocations {
                    name,
                    target,
                    entries: heap.entries,
                    per_call,
                    bytes_per_call,
                    share_pct,
                    bytes_share_pct,
                })
        })
        .collect();
    let per_call = |f: &Finding| match f {
        Finding::Allocations { per_call, .. } => *per_call,
        _ => 0.0,
    };
    allocating.sort_by(|a, b| per_call(b).total_cmp(&per_call(a)));
    most(&mut findings, "allocations", allocating.into_iter());

    findings.extend(leaks(snapshot).into_iter().map(Finding::Leak));

    let run_ns = snapshot.run.duration_ns.max(1) as f64;
    let mut idle: Vec<Finding> = Vec::new();
    for s in spans {
        let wall_share_pct = 100.0 * s.wall.total_ns as f64 / run_ns;
        let Some(r) = &s.resources else { continue };
        for gpu in &r.gpus {
            match gpu.mean_utilization_pct {
                Some(u) if u < GPU_IDLE_PCT && wall_share_pct >= GPU_IDLE_MIN_WALL_SHARE_PCT => {
                    let (name, target) = key(s);
                    idle.push(Finding::GpuIdle {
                        name,
                        target,
                        device: gpu.device,
                        utilization_pct: u,
                        wall_share_pct,
                    });
                }
                _ => {}
            }
        }
    }
    idle.sort_by(|a, b| match (a, b) {
        (
            Finding::GpuIdle {
                wall_share_pct: x, ..
            },
            Finding::GpuIdle {
                wall_share_pct: y, ..
            },
        ) => y.total_cmp(x),
        _ => std::cmp::Ordering::Equal,
    });
    most(&mut findings, "GPU idle", idle.into_iter());
    most(&mut findings, "GPU-bound", gpu_bound(spans).into_iter());
    findings
}

/// The [`Finding::GpuBound`] span names, the largest ratio first.
fn gpu_bound(spans: &[SpanStats]) -> Vec<Finding> {
    let mut bound: Vec<(f64, Finding)> = spans
        .iter()
        .filter_map(|s| {
            let t = &s.gpu_time.as_ref()?.time;
            if t.count < GPU_BOUND_MIN_CALLS || s.entry_busy.mean_ns <= 0.0 {
                return None;
            }
            let ratio = t.mean_ns / s.entry_busy.mean_ns;
            (ratio >= GPU_BOUND_RATIO).then(|| {
                (
                    ratio,
                    Finding::GpuBound {
                        name: s.name.clone(),
                        target: s.target.clone(),
                        calls: t.count,
                        cpu_mean_ns: s.entry_busy.mean_ns,
                        gpu_mean_ns: t.mean_ns,
                        ratio,
                    },
                )
            })
        })
        .collect();
    bound.sort_by(|a, b| b.0.total_cmp(&a.0));
    bound.into_iter().map(|(_, f)| f).collect()
}

/// spanprof's cost of one span (or one entry of a span entered several times), ns, where the
/// profile's estimate of it is sure: [`Overhead::span_ns_sure`](crate::profile::Overhead::span_ns_sure),
/// the cost measured as the program ran from enough timed callbacks. The cost calibrated at
/// start-up (a loop on an idle core, not the program's spans) and a constant are no estimate of
/// this run's spans: without a sure one, `None`, and no instrumentation finding.
fn span_cost_ns(snapshot: &Snapshot) -> Option<f64> {
    snapshot.overhead.as_ref()?.span_ns_sure()
}

/// The instrumentation finding of one span name, if its cost is a large enough share of its
/// time, and of the time inside spans (`all_self`, ns); `per_entry`: spanprof's cost of one
/// span or entry, ns.
fn instrumentation(s: &SpanStats, per_entry: f64, all_self: u128) -> Option<Finding> {
    // The spans recorded and their entries: a span the back-off left out was entered once
    // and costs a skip, not a span.
    let skipped = s.sampled.as_ref().map_or(0, |x| x.skipped);
    let spans = s.created.max(s.instances);
    let recorded = spans.checked_sub(skipped).filter(|&n| n > 0)?;
    let entries = s.calls.saturating_sub(skipped);
    if entries == 0 {
        return None;
    }
    let entries_per_span = (entries as f64 / recorded as f64).max(1.0);
    let mean_ns = if entries_per_span > 1.0 {
        // Entered more than once per instance: judged on the instance, over its wall time.
        (s.wall.count > 0).then_some(s.wall.mean_ns)?
    } else {
        s.entry_busy.mean_ns
    };
    if mean_ns.is_nan() || mean_ns <= 0.0 {
        return None;
    }
    let cost_per_span_ns = per_entry * entries_per_span;
    let cost_share_pct = 100.0 * cost_per_span_ns / mean_ns;
    let total_cost = cost_per_span_ns * recorded as f64;
    let worth =
        all_self > 0 && 100.0 * total_cost / all_self as f64 >= INSTRUMENTATION_MIN_RUN_SHARE_PCT;
    (cost_share_pct >= INSTRUMENTATION_MIN_SHARE_PCT && worth).then(|| Finding::Instrumentation {
        name: s.name.clone(),
        target: s.target.clone(),
        calls: s.calls,
        spans,
        entries_per_span,
        mean_ns,
        cost_per_span_ns,
        cost_share_pct,
        sampled_every: s.sampled.as_ref().map(|x| x.every),
    })
}

/// The run's allocations and bytes allocated (see [`Finding::Allocations`]).
fn run_allocations(snapshot: &Snapshot) -> (u128, u128) {
    let heap = |s: &SpanStats| {
        s.resources
            .as_ref()
            .and_then(|r| r.heap.as_ref())
            .map_or((0, 0), |h| {
                (u128::from(h.allocations), u128::from(h.allocated_bytes))
            })
    };
    let sum = |spans: &mut dyn Iterator<Item = &SpanStats>| {
        spans
            .map(heap)
            .fold((0, 0), |(a, b), (x, y)| (a + x, b + y))
    };
    let roots: Option<Vec<(&str, &str)>> = snapshot.tree.as_ref().and_then(|tree| {
        let roots: Vec<&TreeNode> = tree.nodes.iter().filter(|n| n.parent.is_none()).collect();
        (!roots.is_empty() && roots.iter().all(|n| !n.other)).then(|| {
            roots
                .iter()
                .map(|n| (n.name.as_str(), n.target.as_str()))
                .collect()
        })
    });
    match roots {
        Some(roots) => sum(&mut snapshot
            .spans
            .iter()
            .filter(|s| roots.contains(&(s.name.as_str(), s.target.as_str())))),
        None => sum(&mut snapshot.spans.iter()),
    }
}

/// The call path with the most self time, where the profile has a call tree and one path
/// holds at least [`HOT_PATH_MIN_SHARE_PCT`] of it.
///
/// Only a node whose figures support the claim is named: a node of a span name (not an
/// `[other]` node, the spans past the tree's bounds under a parent, many paths together), on a
/// path of such nodes from a root (a node below an `[other]` node, or under a parent index
/// that is not before its own, is on no path the tree knows), with entries recorded there.
fn hot_path(snapshot: &Snapshot) -> Option<Finding> {
    let tree = snapshot.tree.as_ref()?;
    let all = u128::from(tree.self_ns());
    // Whether each node is on a path of known names from a root (parents come first).
    let mut placed = vec![false; tree.nodes.len()];
    for (i, node) in tree.nodes.iter().enumerate() {
        placed[i] = !node.other
            && match node.parent.map(|p| p as usize) {
                None => true,
                Some(p) => p < i && placed[p],
            };
    }
    let (index, node) = tree
        .nodes
        .iter()
        .enumerate()
        .filter(|&(i, n)| placed[i] && n.calls > 0 && n.self_time.count > 0)
        .filter(|(_, n)| n.self_ns() > 0)
        .max_by_key(|(_, n)| n.self_ns())?;
    let share_pct = share(node.self_ns(), all.max(1));
    (share_pct >= HOT_PATH_MIN_SHARE_PCT).then(|| Finding::HotPath {
        path: tree.path(index).join(";"),
        target: node.target.clone(),
        instances: node.instances,
        self_ns: node.self_ns(),
        share_pct,
    })
}

fn share(part: u64, all: u128) -> f64 {
    100.0 * part as f64 / all as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{GpuUse, SpanResources, TreeNode};

    fn detailed() -> Snapshot {
        crate::profile::detailed_test_profile()
    }

    /// Eight names of 12.5 % each: five self-time findings, then one saying three more.
    #[test]
    fn findings_past_the_bound_are_counted() {
        let mut s = Snapshot::from_json(
            include_str!("../../tests/data/golden-profile.json"),
            "golden-profile.json",
        )
        .unwrap();
        let template = s.spans[0].clone();
        s.spans = (0..8)
            .map(|i| {
                let mut span = template.clone();
                span.name = format!("w{i}");
                span.entry_self.total_ns = 1_000_000;
                span.sampled = None;
                span
            })
            .collect();
        let found = top(&s);
        let self_time = found
            .iter()
            .filter(|f| matches!(f, Finding::SelfTime { .. }))
            .count();
        assert_eq!(self_time, FINDINGS_PER_KIND);
        assert!(
            found.contains(&Finding::More {
                kind: "self time",
                left_out: 3
            }),
            "{found:?}"
        );
    }

    /// An `[other]` node holding the most self time (a tree past its bounds) is many paths,
    /// not the hot one: the hottest real path is named.
    #[test]
    fn the_hot_path_is_never_an_overflow_node() {
        let mut s = Snapshot::from_json(
            include_str!("../../tests/data/golden-profile.json"),
            "golden-profile.json",
        )
        .unwrap();
        let tree = s.tree.as_mut().unwrap();
        let hottest = (0..tree.nodes.len())
            .max_by_key(|&i| tree.nodes[i].self_time.total_ns)
            .unwrap();
        let mut other = tree.nodes[hottest].clone();
        other.name = "[other]".to_string();
        other.other = true;
        other.self_time.total_ns += 1; // the most, the real hottest keeping its share
        tree.nodes.push(other);
        let expected = tree.path(hottest).join(";");
        let found = hot_path(&s).unwrap();
        let Finding::HotPath { path, .. } = found else {
            panic!("{found:?}")
        };
        assert_eq!(path, expected);
    }

    #[test]
    fn self_time_findings_add_up_and_name_the_largest() {
        let s = detailed();
        let all: u128 = s
            .spans
            .iter()
            .map(|x| u128::from(x.entry_self.total_ns))
            .sum();
        let biggest = s
            .spans
            .iter()
            .max_by_key(|x| x.entry_self.total_ns)
            .unwrap();
        let found = top(&s);
        let Some(Finding::SelfTime {
            name, share_pct, ..
        }) = found.first()
        else {
            panic!("no self-time finding first: {found:?}");
        };
        assert_eq!(name, &biggest.name);
        let want = 100.0 * biggest.entry_self.total_ns as f64 / all as f64;
        assert!((share_pct - want).abs() < 1e-9);
    }

    /// A span name of `calls` entries over `spans` instances, each entry `entry_ns` of busy
    /// (and self) time, each instance `wall_ns` of wall time; no resources, no estimate.
    fn timed(name: &str, calls: u64, spans: u64, entry_ns: u64, wall_ns: u64) -> SpanStats {
        let mut s = detailed().spans[0].clone();
        s.name = name.to_string();
        (s.calls, s.created, s.instances, s.open) = (calls, spans, spans, 0);
        for (stat, count, total) in [
            (&mut s.entry_busy, calls, calls * entry_ns),
            (&mut s.entry_self, calls, calls * entry_ns),
            (&mut s.busy, spans, calls * entry_ns),
            (&mut s.self_time, spans, calls * entry_ns),
            (&mut s.wall, spans, spans * wall_ns),
        ] {
            stat.count = count;
            stat.total_ns = total;
            stat.mean_ns = total as f64 / count as f64;
        }
        (s.resources, s.overhead_ns, s.sampled) = (None, None, None);
        s
    }

    /// A profile of `spans` alone, no tree, spanprof's cost of a span `measured` (ns, measured
    /// as the program ran; `None`: fewer callbacks timed than the estimate needs), the
    /// per-name figures as the recorder makes them from it.
    fn profile_of(mut spans: Vec<SpanStats>, measured: Option<f64>) -> Snapshot {
        let mut s = detailed();
        let span_cost_ns = 40.0;
        for span in &mut spans {
            let units = span.created.max(span.calls) as f64;
            span.overhead_ns = Some((units * measured.unwrap_or(span_cost_ns)) as u64);
        }
        s.spans = spans;
        s.tree = None;
        s.resources = None;
        // Through serde: the fields a profile must have, and the measured cost sure (from
        // enough timed callbacks) where given.
        s.overhead = Some(
            serde_json::from_value(serde_json::json!({
                "span_cost_ns": span_cost_ns,
                "measured_span_ns": measured,
                "measured_samples": 1000,
                "cpu_read_ns": 0.0,
                "cpu_every_entry_from_ns": 0,
                "cpu_sample_every": 1,
                "readings_ns": 0,
                "estimated_ns": 0,
                "percent": 1.0,
            }))
            .unwrap(),
        );
        s
    }

    fn instrumentation_of<'a>(found: &'a [Finding], of: &str) -> Option<&'a Finding> {
        found
            .iter()
            .find(|f| matches!(f, Finding::Instrumentation { name, .. } if name == of))
    }

    /// The audit's async fn: polled 3 times per instance, 6.17 µs per poll, an instance
    /// lasting 11 ms; spanprof's cost 3.16 µs per entry, 9.47 µs per instance. Judged per
    /// entry it was "51 % of it: instrument its caller instead"; an instance of 11 ms is no
    /// span too short to keep.
    #[test]
    fn an_async_span_is_judged_per_instance() {
        let fetch = timed("fetch", 1800, 600, 6_170, 11_000_000);
        let found = top(&profile_of(vec![fetch], Some(9_470.0 / 3.0)));
        assert_eq!(instrumentation_of(&found, "fetch"), None, "{found:?}");
    }

    /// Every figure of an instrumentation finding is per span, and its share is computed from
    /// them: an instance of 2 entries lasting 400 ns, 50 ns of cost per entry, is 100 ns of
    /// 400 ns, 25 %.
    #[test]
    fn an_instrumentation_finding_states_figures_that_agree() {
        let poll = timed("poll", 2000, 1000, 100, 400);
        let found = top(&profile_of(vec![poll], Some(50.0)));
        let Some(Finding::Instrumentation {
            mean_ns,
            cost_per_span_ns,
            cost_share_pct,
            ..
        }) = instrumentation_of(&found, "poll")
        else {
            panic!("{found:?}")
        };
        assert_eq!((*mean_ns, *cost_per_span_ns), (400.0, 100.0));
        assert!(
            (cost_share_pct - 100.0 * cost_per_span_ns / mean_ns).abs() < 1e-9,
            "{cost_share_pct} % of {mean_ns} ns is not {cost_per_span_ns} ns"
        );
    }

    /// Without spanprof's cost measured as the program ran (too few callbacks timed, or no
    /// estimate at all), the cost is unsure: no instrumentation finding.
    #[test]
    fn an_unsure_cost_raises_no_instrumentation_finding() {
        let short = || timed("short", 1000, 1000, 200, 250);
        let found = top(&profile_of(vec![short()], None));
        assert_eq!(instrumentation_of(&found, "short"), None, "{found:?}");
        let mut bare = profile_of(vec![short()], None);
        bare.overhead = None;
        bare.spans[0].overhead_ns = None;
        let found = top(&bare);
        assert_eq!(instrumentation_of(&found, "short"), None, "{found:?}");
        // Measured, but from too few timed callbacks.
        let mut few = profile_of(vec![short()], Some(40.0));
        let o = few.overhead.as_mut().unwrap();
        o.measured_samples = crate::profile::Overhead::SURE_SAMPLES - 1;
        let found = top(&few);
        assert_eq!(instrumentation_of(&found, "short"), None, "{found:?}");
        // Measured from enough: 40 ns of 200 ns.
        let found = top(&profile_of(vec![short()], Some(40.0)));
        assert!(instrumentation_of(&found, "short").is_some(), "{found:?}");
    }

    /// The audit's "validate makes 0.0 allocations (10 B) per call": noise, no finding.
    #[test]
    fn allocations_too_few_to_matter_are_no_finding() {
        let mut validate = timed("validate", 200, 200, 1_000, 1_000);
        let r = validate
            .resources
            .get_or_insert_with(SpanResources::default);
        r.heap = Some(crate::profile::HeapUse {
            entries: 200,
            allocated_bytes: 2_000,
            allocations: 10,
            freed_bytes: 2_000,
            net_retained_bytes: 0,
            self_retained_bytes: 0,
            retaining_entries: 0,
        });
        let found = top(&profile_of(vec![validate], None));
        assert!(
            !found
                .iter()
                .any(|f| matches!(f, Finding::Allocations { .. })),
            "{found:?}"
        );
    }

    /// `span` with a GPU at `utilization_pct` over its instances.
    fn on_gpu(mut span: SpanStats, utilization_pct: f64) -> SpanStats {
        let r = span.resources.get_or_insert_with(SpanResources::default);
        r.gpus = vec![GpuUse {
            device: 0,
            instances: span.instances,
            memory_delta_bytes: 0,
            peak_memory_bytes: 0,
            mean_utilization_pct: Some(utilization_pct),
            energy_j: None,
        }];
        span
    }

    /// `span` with `calls` entries timed on the GPU, `gpu_ns` each.
    fn gpu_timed(mut span: SpanStats, calls: u64, gpu_ns: u64) -> SpanStats {
        let mut time = span.entry_busy.clone();
        (time.count, time.total_ns) = (calls, calls * gpu_ns);
        time.mean_ns = gpu_ns as f64;
        span.gpu_time = serde_json::from_value(serde_json::json!({
            "time": serde_json::to_value(&time).unwrap()
        }))
        .unwrap();
        span
    }

    /// GPU-bound: a mean GPU time per entry at least 1.5× the busy time per entry, over enough
    /// timed entries; the largest ratio first.
    #[test]
    fn a_span_whose_gpu_time_exceeds_its_busy_time_is_gpu_bound() {
        let ms = 1_000_000;
        let snap = profile_of(
            vec![
                gpu_timed(timed("forward", 100, 100, 12 * ms, 12 * ms), 100, 41 * ms),
                gpu_timed(timed("backward", 100, 100, 10 * ms, 10 * ms), 100, 20 * ms),
                // Launch-bound, and too few timed entries.
                gpu_timed(timed("loss", 100, 100, 10 * ms, 10 * ms), 100, 14 * ms),
                gpu_timed(timed("eval", 100, 100, ms, ms), 9, 90 * ms),
            ],
            None,
        );
        let bound: Vec<Finding> = top(&snap)
            .into_iter()
            .filter(|f| matches!(f, Finding::GpuBound { .. }))
            .collect();
        let names: Vec<&str> = bound
            .iter()
            .map(|f| match f {
                Finding::GpuBound { name, .. } => name.as_str(),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(names, ["forward", "backward"]);
        assert!(matches!(
            &bound[0],
            Finding::GpuBound { calls: 100, cpu_mean_ns, gpu_mean_ns, ratio, .. }
                if *cpu_mean_ns == 12e6 && *gpu_mean_ns == 41e6 && *ratio == 41.0 / 12.0
        ));
    }

    /// `span` with `allocations` and `bytes` allocated over its entries.
    fn allocating(mut span: SpanStats, allocations: u64, bytes: u64) -> SpanStats {
        let r = span.resources.get_or_insert_with(SpanResources::default);
        r.heap = Some(crate::profile::HeapUse {
            entries: span.calls,
            allocated_bytes: bytes,
            allocations,
            freed_bytes: bytes,
            net_retained_bytes: 0,
            self_retained_bytes: 0,
            retaining_entries: 0,
        });
        span
    }

    fn named(found: &[Finding], kind: fn(&Finding) -> Option<&str>) -> Vec<&str> {
        found.iter().filter_map(kind).collect()
    }

    #[test]
    fn tails_and_idle_gpus() {
        let mut span = on_gpu(timed("step", 1000, 1000, 2_000, 2_000), 3.0);
        (span.entry_busy.p50_ns, span.entry_busy.p99_ns) = (1_000, 50_000);
        let mut s = profile_of(vec![span], None);
        s.run.duration_ns = 4_000_000;
        let found = top(&s);
        assert!(found.iter().any(|f| matches!(
            f,
            Finding::HeavyTail { ratio, calls: 1000, .. } if *ratio == 50.0
        )));
        assert!(found.iter().any(|f| matches!(
            f,
            Finding::GpuIdle { utilization_pct, wall_share_pct, .. }
                if *utilization_pct == 3.0 && (*wall_share_pct - 50.0).abs() < 1e-9
        )));
    }

    /// Each kind's minimum effect size, from both sides: a name just above it is named, one
    /// just below is not.
    #[test]
    fn self_time_starts_at_its_share() {
        let s = profile_of(
            vec![
                timed("big", 1, 1, 8_001, 8_001),
                timed("above", 1, 1, 1_001, 1_001),
                timed("below", 1, 1, 998, 998),
            ],
            None,
        );
        let found = top(&s);
        let shown = named(&found, |f| match f {
            Finding::SelfTime { name, .. } => Some(name),
            _ => None,
        });
        assert_eq!(shown, ["big", "above"], "{found:?}");
        assert_eq!(DOMINANT_SELF_SHARE_PCT, 10.0);
    }

    #[test]
    fn the_hot_path_starts_at_its_share() {
        // Eleven roots: the hottest with 1001 ns of 10001 (10.01 %), then 999 of 9999.
        let golden = Snapshot::from_json(
            include_str!("../../tests/data/golden-profile.json"),
            "golden-profile.json",
        )
        .unwrap();
        let like = golden.tree.as_ref().unwrap().nodes[1].clone();
        for (hottest, found) in [(1_001, true), (999, false)] {
            let mut s = golden.clone();
            let tree = s.tree.as_mut().unwrap();
            tree.nodes = (0..11)
                .map(|i| {
                    let mut node = like.clone();
                    node.name = format!("root{i}");
                    node.parent = None;
                    node.self_time.total_ns = if i == 0 { hottest } else { 900 };
                    node
                })
                .collect();
            assert_eq!(hot_path(&s).is_some(), found, "{:?}", hot_path(&s));
        }
        assert_eq!(HOT_PATH_MIN_SHARE_PCT, 10.0);
    }

    #[test]
    fn a_heavy_tail_starts_at_its_ratio_and_share() {
        let tail = |entry_ns: u64, p99_ns: u64| {
            let mut span = timed("tail", 100, 100, entry_ns, entry_ns);
            (span.entry_busy.p50_ns, span.entry_busy.p99_ns) = (10, p99_ns);
            span
        };
        let shown = |spans: Vec<SpanStats>| {
            let found = top(&profile_of(spans, None));
            found
                .iter()
                .any(|f| matches!(f, Finding::HeavyTail { name, .. } if name == "tail"))
        };
        // Busy time 1.01 % of the time inside spans, then 0.99 %; p99 10× p50, then 9.9×.
        assert!(shown(vec![tail(101, 100), timed("big", 1, 1, 989_900, 0)]));
        assert!(!shown(vec![tail(99, 100), timed("big", 1, 1, 990_100, 0)]));
        assert!(!shown(vec![tail(101, 99), timed("big", 1, 1, 989_900, 0)]));
        assert_eq!((HEAVY_TAIL_MIN_SHARE_PCT, HEAVY_TAIL_RATIO), (1.0, 10.0));
    }

    #[test]
    fn instrumentation_starts_at_its_shares() {
        let shown = |measured: f64, big_ns: u64| {
            let spans = vec![
                timed("short", 1000, 1000, 1_000, 1_000),
                timed("big", 1, 1, big_ns, big_ns),
            ];
            instrumentation_of(&top(&profile_of(spans, Some(measured))), "short").is_some()
        };
        // 50.1 ns of a 1 µs call, 5.01 %; then 4.99 %.
        assert!(shown(50.1, 0));
        assert!(!shown(49.9, 0));
        // 100 µs of cost in all, 1.001 % of the time inside spans; then 0.999 %.
        assert!(shown(100.0, 8_990_000));
        assert!(!shown(100.0, 9_010_000));
        assert_eq!(
            (
                INSTRUMENTATION_MIN_SHARE_PCT,
                INSTRUMENTATION_MIN_RUN_SHARE_PCT
            ),
            (5.0, 1.0)
        );
    }

    #[test]
    fn allocations_start_at_their_size_and_share() {
        let shown = |spans: Vec<SpanStats>| {
            let found = top(&profile_of(spans, None));
            named(&found, |f| match f {
                Finding::Allocations { name, .. } => Some(name),
                _ => None,
            })
            .into_iter()
            .map(str::to_string)
            .collect::<Vec<_>>()
        };
        let calls = |name| timed(name, 100, 100, 1_000, 1_000);
        // One allocation per call, or 1 KiB: named; 0.99 allocations of 1023 B: not.
        let found = shown(vec![
            allocating(calls("one_each"), 100, 100),
            allocating(calls("kib_each"), 50, 100 * 1024),
            allocating(calls("under"), 99, 100 * 1023),
        ]);
        assert_eq!(found, ["one_each", "kib_each"]);
        // 1 % of the run's allocations (or bytes): named; 0.99 %: not.
        let found = shown(vec![
            allocating(calls("crowd"), 9_900, 990 * 1024),
            allocating(calls("share"), 100, 100),
        ]);
        assert_eq!(found, ["crowd", "share"]);
        let found = shown(vec![
            allocating(calls("crowd"), 10_000, 10 * 1024 * 1024),
            allocating(calls("share"), 100, 100),
        ]);
        assert_eq!(found, ["crowd"]);
        assert_eq!(
            (
                ALLOCATIONS_MIN_PER_CALL,
                ALLOCATIONS_MIN_BYTES_PER_CALL,
                ALLOCATIONS_MIN_SHARE_PCT
            ),
            (1.0, 1024.0, 1.0)
        );
    }

    #[test]
    fn an_idle_gpu_starts_at_its_utilisation_and_share() {
        let shown = |utilization_pct: f64, wall_ns: u64| {
            let mut s = profile_of(
                vec![on_gpu(timed("step", 1, 1, 1, wall_ns), utilization_pct)],
                None,
            );
            s.run.duration_ns = 100_000;
            top(&s).iter().any(|f| matches!(f, Finding::GpuIdle { .. }))
        };
        assert!(shown(19.9, 10_010));
        assert!(!shown(20.0, 10_010));
        assert!(!shown(19.9, 9_990));
        assert_eq!((GPU_IDLE_PCT, GPU_IDLE_MIN_WALL_SHARE_PCT), (20.0, 10.0));
    }

    /// A name the back-off sampled 1 in 4: judged on the spans recorded (their busy time and
    /// their cost), and the finding says so.
    #[test]
    fn instrumentation_of_a_sampled_name_is_of_the_spans_recorded() {
        let mut span = timed("short", 4000, 4000, 200, 250);
        let e = &mut span.entry_busy;
        (e.count, e.total_ns, e.mean_ns) = (1000, 1000 * 200, 200.0);
        span.sampled = Some(
            serde_json::from_value(serde_json::json!({"every": 4, "since_ns": 0, "skipped": 3000}))
                .unwrap(),
        );
        let found = top(&profile_of(vec![span], Some(40.0)));
        let Some(Finding::Instrumentation {
            mean_ns,
            cost_per_span_ns,
            cost_share_pct,
            entries_per_span,
            sampled_every,
            ..
        }) = instrumentation_of(&found, "short")
        else {
            panic!("{found:?}")
        };
        assert_eq!(
            (*mean_ns, *cost_per_span_ns, *entries_per_span),
            (200.0, 40.0, 1.0)
        );
        assert!((cost_share_pct - 20.0).abs() < 1e-9, "{cost_share_pct}");
        assert_eq!(*sampled_every, Some(4));
    }

    /// A node below an `[other]` node is on no path the tree knows, and a node with no entry
    /// recorded at it has no figures of its own: neither is the hot path.
    #[test]
    fn the_hot_path_is_a_node_its_figures_support() {
        let mut s = Snapshot::from_json(
            include_str!("../../tests/data/golden-profile.json"),
            "golden-profile.json",
        )
        .unwrap();
        let tree = s.tree.as_mut().unwrap();
        let hottest = (0..tree.nodes.len())
            .max_by_key(|&i| tree.nodes[i].self_time.total_ns)
            .unwrap();
        let expected = tree.path(hottest).join(";");
        let mut other = tree.nodes[hottest].clone();
        other.name = TreeNode::OTHER.to_string();
        other.target = String::new();
        other.other = true;
        other.self_time.total_ns = 0;
        tree.nodes.push(other);
        let mut below = tree.nodes[hottest].clone();
        below.name = "below_other".to_string();
        below.parent = Some(tree.nodes.len() as u32 - 1);
        below.self_time.total_ns += 1;
        tree.nodes.push(below);
        let mut unentered = tree.nodes[hottest].clone();
        unentered.name = "never_entered".to_string();
        unentered.calls = 0;
        unentered.instances = 0;
        unentered.self_time.count = 0;
        unentered.self_time.total_ns += 2;
        tree.nodes.push(unentered);
        let found = hot_path(&s);
        let Some(Finding::HotPath { path, .. }) = &found else {
            panic!("{found:?}")
        };
        assert_eq!(path, &expected);
    }

    /// A path the back-off sampled holds its recorded self time plus the estimate for the
    /// spans it left out: chosen, and its share stated, by that same figure.
    #[test]
    fn the_hot_path_counts_the_spans_the_back_off_left_out() {
        let mut s = Snapshot::from_json(
            include_str!("../../tests/data/golden-profile.json"),
            "golden-profile.json",
        )
        .unwrap();
        let tree = s.tree.as_mut().unwrap();
        let by_self = |tree: &crate::profile::CallTree| {
            let mut order: Vec<usize> = (0..tree.nodes.len()).collect();
            order.sort_by_key(|&i| std::cmp::Reverse(tree.nodes[i].self_time.total_ns));
            order
        };
        let (hottest, second) = (by_self(tree)[0], by_self(tree)[1]);
        // The second's left-out spans: as much busy time as it recorded, twice over.
        let node = &mut tree.nodes[second];
        node.skipped = 2 * node.instances;
        node.skipped_ns = 2 * node.busy.total_ns;
        assert!(node.self_ns() > tree.nodes[hottest].self_ns());
        let expected = (tree.path(second).join(";"), tree.nodes[second].self_ns());
        let share_of = 100.0 * expected.1 as f64 / tree.self_ns() as f64;
        let Some(Finding::HotPath {
            path,
            self_ns,
            share_pct,
            ..
        }) = hot_path(&s)
        else {
            panic!("{:?}", hot_path(&s))
        };
        assert_eq!((path, self_ns), expected);
        assert!(
            (share_pct - share_of).abs() < 1e-9,
            "{share_pct} {share_of}"
        );
    }

    #[test]
    fn the_hottest_path_by_self_time_is_found_in_the_tree() {
        let s = Snapshot::from_json(
            include_str!("../../tests/data/golden-profile.json"),
            "test data",
        )
        .unwrap();
        let tree = s.tree.as_ref().unwrap();
        let (i, hottest) = tree
            .nodes
            .iter()
            .enumerate()
            .max_by_key(|(_, n)| n.self_time.total_ns)
            .unwrap();
        let found = top(&s);
        let Some(Finding::HotPath {
            path,
            self_ns,
            share_pct,
            instances,
            ..
        }) = found.iter().find(|f| matches!(f, Finding::HotPath { .. }))
        else {
            panic!("no hot path: {found:?}");
        };
        assert_eq!(path, &tree.path(i).join(";"));
        assert_eq!(*self_ns, hottest.self_time.total_ns);
        assert_eq!(*instances, hottest.instances);
        let want = 100.0 * hottest.self_time.total_ns as f64 / tree.self_ns() as f64;
        assert!((share_pct - want).abs() < 1e-9);
        let mut bare = s.clone();
        bare.tree = None;
        assert!(!top(&bare)
            .iter()
            .any(|f| matches!(f, Finding::HotPath { .. })));
    }
}

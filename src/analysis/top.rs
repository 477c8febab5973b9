//! Bottlenecks: what in a profile deserves attention first, each finding with the figures
//! that justify it.

use crate::profile::{Snapshot, SpanStats};

use super::{leaks, Leak};

/// A span name with at least this share of all self time dominates.
pub const DOMINANT_SELF_SHARE_PCT: f64 = 10.0;
/// A span name whose p99 is at least this many times its p50 has a heavy tail.
pub const HEAVY_TAIL_RATIO: f64 = 10.0;
/// Fewest calls before a tail is judged (a p99 of fewer calls is a handful of samples).
pub const HEAVY_TAIL_MIN_CALLS: u64 = 100;
/// What one span costs to instrument, ns: creation, entry, exit and close through the
/// `tracing` registry and spanprof's `basic` preset (the README's overhead table: 125 ns
/// measured on a 2-core VM). An estimate: it moves with the machine. Used only for profiles
/// without spanprof's own estimate ([`CostSource`]).
pub const SPAN_COST_NS: f64 = 125.0;
/// Instrumentation costing at least this share of a span's own busy time is worth a look.
pub const INSTRUMENTATION_MIN_SHARE_PCT: f64 = 5.0;
/// Fewest entries before a span name's allocations per call are judged (a span entered once,
/// around the whole run, allocates everything its children do).
pub const ALLOCATIONS_MIN_CALLS: u64 = 30;
/// A GPU below this utilisation while a span runs is idle.
pub const GPU_IDLE_PCT: f64 = 20.0;
/// At most this many findings of each kind.
pub const FINDINGS_PER_KIND: usize = 5;

/// Where the instrumentation cost of a [`Finding::Instrumentation`] comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CostSource {
    /// The span name's own estimate, [`SpanStats::overhead_ns`]: spans × the cost of a span
    /// calibrated at start-up, plus the measured time of its readings.
    Measured,
    /// The profile's calibrated cost of one span ([`Overhead::span_cost_ns`](crate::profile::Overhead::span_cost_ns))
    /// × the span name's instances (a profile with [`Snapshot::overhead`] but no per-name figure).
    Calibrated,
    /// [`SPAN_COST_NS`] × the span name's instances: a profile written before spanprof
    /// estimated its own cost.
    Assumed,
}

impl CostSource {
    /// The words in reports: `measured`, `calibrated`, `assumed`.
    pub fn name(self) -> &'static str {
        match self {
            CostSource::Measured => "measured",
            CostSource::Calibrated => "calibrated",
            CostSource::Assumed => "assumed",
        }
    }
}

/// What [`top`] found, with the figures behind it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Finding {
    /// A span name holding a large share of the time inside spans (self time).
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
    /// The call path holding the most self time (from the call tree, where recorded).
    HotPath {
        /// The path's names, root first, joined by `;`.
        path: String,
        /// The leaf's target.
        target: String,
        /// Closed instances on this path.
        instances: u64,
        /// Its self time, ns.
        self_ns: u64,
        /// Share of the tree's self time, %.
        share_pct: f64,
    },
    /// A span name whose slow calls are far slower than its typical one.
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
    Instrumentation {
        /// Span name.
        name: String,
        /// Span target.
        target: String,
        /// Calls.
        calls: u64,
        /// Mean busy time per call, ns.
        mean_ns: f64,
        /// spanprof's estimated cost per instance, ns.
        cost_per_span_ns: f64,
        /// Where that estimate comes from.
        cost_source: CostSource,
        /// Estimated instrumentation cost over busy time, %.
        cost_share_pct: f64,
        /// N where the automatic back-off sampled the name (1 span in N recorded; its busy
        /// time scaled to every call): spanprof has already cut its cost there.
        sampled_every: Option<u32>,
    },
    /// A span name allocating much per call (counting allocator; child spans included), over
    /// at least [`ALLOCATIONS_MIN_CALLS`] entries.
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
    },
    /// A leak suspicion ([`leaks`](super::leaks)).
    Leak(Leak),
    /// A GPU mostly idle while a span name ran.
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
    /// A kind had more findings than [`FINDINGS_PER_KIND`]: how many more, after its last.
    More {
        /// The kind: `self time`, `heavy tail`, `instrumentation`, `allocations`, `GPU idle`.
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
/// [`FINDINGS_PER_KIND`] each, then a [`Finding::More`] saying how many more there were.
///
/// ```
/// use spanprof::analysis::{top, Finding};
/// # let snapshot = spanprof::profile::Snapshot::from_json(
/// #     include_str!("../../tests/data/profile-v1-basic.json"), "doc")?;
/// for finding in top(&snapshot) {
///     if let Finding::SelfTime { name, share_pct, .. } = finding {
///         println!("{name}: {share_pct:.0} % of the time in spans");
///     }
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn top(snapshot: &Snapshot) -> Vec<Finding> {
    let spans = &snapshot.spans;
    let key = |s: &SpanStats| (s.name.clone(), s.target.clone());
    let mut findings = Vec::new();

    // Totals of names the back-off sampled are scaled to every call (mean × calls).
    let self_ns = |s: &SpanStats| s.scaled_total_ns(&s.entry_self);
    let all_self: u128 = spans.iter().map(|s| u128::from(self_ns(s))).sum();
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

    let mut cheap: Vec<(f64, f64, CostSource, &SpanStats)> = spans
        .iter()
        .filter(|s| s.calls > 0 && s.entry_busy.total_ns > 0)
        .map(|s| {
            let spans = s.created.max(s.instances);
            let (cost, source) = instrumentation_cost(snapshot, s);
            let per_span = if spans == 0 { 0.0 } else { cost / spans as f64 };
            (
                100.0 * cost / s.scaled_total_ns(&s.entry_busy) as f64,
                per_span,
                source,
                s,
            )
        })
        .filter(|(pct, ..)| *pct >= INSTRUMENTATION_MIN_SHARE_PCT)
        .collect();
    cheap.sort_by(|a, b| b.0.total_cmp(&a.0));
    most(
        &mut findings,
        "instrumentation",
        cheap.iter().map(|&(pct, per_span, source, s)| {
            let (name, target) = key(s);
            Finding::Instrumentation {
                name,
                target,
                calls: s.calls,
                mean_ns: s.entry_busy.mean_ns,
                cost_per_span_ns: per_span,
                cost_source: source,
                cost_share_pct: pct,
                sampled_every: s.sampled.as_ref().map(|x| x.every),
            }
        }),
    );

    let mut allocating: Vec<(f64, f64, u64, &SpanStats)> = spans
        .iter()
        .filter_map(|s| {
            let heap = s.resources.as_ref()?.heap.as_ref()?;
            (heap.entries >= ALLOCATIONS_MIN_CALLS && heap.allocations > 0).then(|| {
                let n = heap.entries as f64;
                (
                    heap.allocations as f64 / n,
                    heap.allocated_bytes as f64 / n,
                    heap.entries,
                    s,
                )
            })
        })
        .collect();
    allocating.sort_by(|a, b| b.0.total_cmp(&a.0));
    most(
        &mut findings,
        "allocations",
        allocating
            .iter()
            .map(|&(per_call, bytes_per_call, entries, s)| {
                let (name, target) = key(s);
                Finding::Allocations {
                    name,
                    target,
                    entries,
                    per_call,
                    bytes_per_call,
                }
            }),
    );

    findings.extend(leaks(snapshot).into_iter().map(Finding::Leak));

    let run_ns = snapshot.run.duration_ns.max(1) as f64;
    let mut idle: Vec<Finding> = Vec::new();
    for s in spans {
        let wall_share_pct = 100.0 * s.wall.total_ns as f64 / run_ns;
        let Some(r) = &s.resources else { continue };
        for gpu in &r.gpus {
            match gpu.mean_utilization_pct {
                Some(u) if u < GPU_IDLE_PCT && wall_share_pct >= DOMINANT_SELF_SHARE_PCT => {
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
    findings
}

/// spanprof's estimated cost in the spans of one name, ns, and where the estimate comes from.
fn instrumentation_cost(snapshot: &Snapshot, s: &SpanStats) -> (f64, CostSource) {
    let spans = s.created.max(s.instances) as f64;
    match (s.overhead_ns, &snapshot.overhead) {
        (Some(ns), _) => (ns as f64, CostSource::Measured),
        (None, Some(o)) => (spans * o.span_cost_ns, CostSource::Calibrated),
        (None, None) => (spans * SPAN_COST_NS, CostSource::Assumed),
    }
}

/// The call path with the most self time, where the profile has a call tree. An `[other]`
/// node (the spans past the tree's bounds under a parent, many paths together) is no path.
fn hot_path(snapshot: &Snapshot) -> Option<Finding> {
    let tree = snapshot.tree.as_ref()?;
    let all = u128::from(tree.self_ns());
    let (index, node) = tree
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| n.self_time.total_ns > 0 && !n.other)
        .max_by_key(|(_, n)| n.self_time.total_ns)?;
    Some(Finding::HotPath {
        path: tree.path(index).join(";"),
        target: node.target.clone(),
        instances: node.instances,
        self_ns: node.self_time.total_ns,
        share_pct: share(node.self_time.total_ns, all),
    })
}

fn share(part: u64, all: u128) -> f64 {
    100.0 * part as f64 / all as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{GpuUse, SpanResources};

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
        other.self_time.total_ns *= 10;
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

    /// The detailed test profile cut to one span name of 1000 calls of 200 ns each.
    fn one_short_span() -> Snapshot {
        let mut s = detailed();
        s.spans.truncate(1);
        let span = &mut s.spans[0];
        span.calls = 1000;
        span.created = 1000;
        span.instances = 1000;
        span.entry_busy.total_ns = 1000 * 200;
        s
    }

    #[test]
    fn tails_instrumentation_allocations_and_idle_gpus() {
        let mut s = one_short_span();
        let span = &mut s.spans[0];
        span.entry_busy.p50_ns = 100;
        span.entry_busy.p99_ns = 5_000;
        span.wall.total_ns = s.run.duration_ns / 2;
        let r = span.resources.get_or_insert_with(SpanResources::default);
        r.gpus = vec![GpuUse {
            device: 0,
            instances: 1000,
            memory_delta_bytes: 0,
            peak_memory_bytes: 0,
            mean_utilization_pct: Some(3.0),
            energy_j: None,
        }];
        let found = top(&s);
        let tail = found
            .iter()
            .find_map(|f| match f {
                Finding::HeavyTail { ratio, .. } => Some(*ratio),
                _ => None,
            })
            .unwrap();
        assert_eq!(tail, 50.0);
        let cost = found
            .iter()
            .find_map(|f| match f {
                Finding::Instrumentation { cost_share_pct, .. } => Some(*cost_share_pct),
                _ => None,
            })
            .unwrap();
        assert!((cost - 100.0 * SPAN_COST_NS / 200.0).abs() < 1e-9);
        assert!(found.iter().any(|f| matches!(
            f,
            Finding::Instrumentation { cost_source: CostSource::Assumed, cost_per_span_ns, .. }
                if *cost_per_span_ns == SPAN_COST_NS
        )));
        assert!(found.iter().any(|f| matches!(
            f,
            Finding::GpuIdle { utilization_pct, wall_share_pct, .. }
                if *utilization_pct == 3.0 && (*wall_share_pct - 50.0).abs() < 0.01
        )));
        if let Some(heap) = s.spans[0].resources.as_ref().and_then(|r| r.heap.as_ref()) {
            if heap.allocations > 0 && heap.entries >= ALLOCATIONS_MIN_CALLS {
                let per = heap.allocations as f64 / heap.entries as f64;
                assert!(found.iter().any(
                    |f| matches!(f, Finding::Allocations { per_call, .. } if *per_call == per)
                ));
            }
        }
    }

    fn instrumentation(found: &[Finding]) -> (f64, f64, CostSource) {
        found
            .iter()
            .find_map(|f| match f {
                Finding::Instrumentation {
                    cost_share_pct,
                    cost_per_span_ns,
                    cost_source,
                    ..
                } => Some((*cost_share_pct, *cost_per_span_ns, *cost_source)),
                _ => None,
            })
            .expect("an instrumentation finding")
    }

    #[test]
    fn instrumentation_uses_the_profiles_own_estimate() {
        let mut s = one_short_span();
        // The profile's calibrated cost of a span: 40 ns, 20 % of a 200 ns span.
        s.overhead = Some(crate::profile::Overhead {
            span_cost_ns: 40.0,
            measured_span_ns: None,
            measured_samples: 0,
            cpu_read_ns: 0.0,
            cpu_every_entry_from_ns: 0,
            cpu_sample_every: 1,
            cpu_sample_gap_ns: 0,
            readings_ns: 0,
            estimated_ns: 40_000,
            process_cpu_ns: None,
            cpu_clock: None,
            percent: 1.0,
        });
        let (pct, per_span, source) = instrumentation(&top(&s));
        assert_eq!(source, CostSource::Calibrated);
        assert_eq!(per_span, 40.0);
        assert!((pct - 20.0).abs() < 1e-9, "{pct}");
        // The span name's own figure wins: 60 µs over 200 µs of busy time.
        s.spans[0].overhead_ns = Some(60_000);
        let (pct, per_span, source) = instrumentation(&top(&s));
        assert_eq!(source, CostSource::Measured);
        assert_eq!(per_span, 60.0);
        assert!((pct - 30.0).abs() < 1e-9, "{pct}");
        // Sampled 1 in 4 by the back-off (3 spans left out for each recorded): the cost is
        // against the busy time scaled to every call, 800 µs, and the finding says so.
        let e = &mut s.spans[0].entry_busy;
        e.mean_ns = e.total_ns as f64 / e.count as f64;
        let recorded = e.count;
        s.spans[0].sampled = Some(crate::profile::Sampled {
            every: 4,
            since_ns: 0,
            skipped: 3 * recorded,
        });
        let found = top(&s);
        let (pct, ..) = instrumentation(&found);
        assert!((pct - 7.5).abs() < 1e-6, "{pct}");
        assert!(found.iter().any(|f| matches!(
            f,
            Finding::Instrumentation {
                sampled_every: Some(4),
                ..
            }
        )));
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

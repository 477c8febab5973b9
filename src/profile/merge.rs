//! Merging profiles of several processes, ranks or runs into one ([`Snapshot::merge`]): exact,
//! from the full histograms, never by averaging percentiles.
//!
//! Each part merges by the rules stated beside its type ([`combine`](super::combine)); here
//! are the profile's list of parts and the rules that need more than one field: the run's
//! span of time, spanprof's cost, the call tree's paths.

use super::combine::{rule, Combine};
use super::{
    CallTree, Overhead, PathIds, RunInfo, Snapshot, Source, TreeNode, SCHEMA, SCHEMA_VERSION,
};

impl Snapshot {
    /// One profile of everything `profiles` recorded: the profile the same work would have
    /// given in one process (same counts, same histograms, so the same percentiles).
    ///
    /// - **Span names** (name + target) are matched across inputs: counters, sums and
    ///   throughput fields added, histograms added bucket by bucket ([`Stat::merged`]),
    ///   resources per span added (peaks: the largest; CPU utilisation from the added times).
    ///   A name the back-off sampled in any input is sampled in the merge
    ///   ([`SpanStats::sampled`]): the largest N, the earliest start, the skipped spans added.
    ///   Its histograms add the recorded spans of every input, so with different N (or an
    ///   input not sampled) they weigh each input by the spans it recorded, not by its calls:
    ///   [`SpanStats::scaled_total_ns`] is then the merged mean × every call.
    /// - **Sources**: every input's run metadata (host, pid, start time, command line), drops
    ///   and resource timeline are kept in [`Snapshot::sources`], in the order given (an input
    ///   that is itself a merge contributes its own sources). `origins` names the inputs (file
    ///   paths), one per profile, or is empty.
    /// - **Run**: from the earliest start to the latest end; the hosts, joined with `,` where
    ///   they differ; the pid and command line of the first input.
    /// - **Dropped** counts are added; the **resource** summary keeps the largest peaks, adds
    ///   the sampler's CPU time and leaves the timelines to the sources; **spanprof's cost**
    ///   adds its times and recomputes its share from them (of the process CPU time where
    ///   every input has it), the calibrated costs the largest.
    /// - Each figure follows the rule stated beside its type, which [`Snapshot::since`]
    ///   follows too (see `src/profile/combine.rs`).
    /// - **Sums saturate**, as the recorder's do: integers at their type's bounds
    ///   (`u64::MAX`), floats (energy, CO2e, a counter's float part) at `±f64::MAX`, so a
    ///   merged profile holds only finite numbers and always reads back.
    ///
    /// Returns `None` for no profiles.
    ///
    /// ```
    /// # let rank = spanprof::profile::Snapshot::from_json(
    /// #     include_str!("../../tests/data/profile-v1-basic.json"), "doc")?;
    /// use spanprof::profile::Snapshot;
    /// let all = Snapshot::merge(&[rank.clone(), rank.clone()], &["rank0.json", "rank1.json"])
    ///     .expect("two profiles");
    /// assert_eq!(all.spans[0].calls, 2 * rank.spans[0].calls);
    /// assert_eq!(all.spans[0].busy.p99_ns, rank.spans[0].busy.p99_ns);
    /// assert_eq!(all.sources.len(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// [`Stat::merged`]: super::Stat::merged
    /// [`SpanStats::sampled`]: super::SpanStats::sampled
    /// [`SpanStats::scaled_total_ns`]: super::SpanStats::scaled_total_ns
    pub fn merge(profiles: &[Snapshot], origins: &[&str]) -> Option<Snapshot> {
        let first = profiles.first()?;
        Some(Snapshot {
            schema: SCHEMA.to_string(),
            version: SCHEMA_VERSION,
            run: rule::nested(profiles.iter().map(|p| &p.run)),
            histograms: first.histograms.clone(),
            spans: rule::keyed(profiles.iter().map(|p| &p.spans), |s| {
                (s.name.as_str(), s.target.as_str())
            }),
            dropped: rule::nested(profiles.iter().map(|p| &p.dropped)),
            resources: rule::opt(profiles.iter().map(|p| &p.resources)),
            tree: rule::opt(profiles.iter().map(|p| &p.tree)),
            overhead: rule::opt(profiles.iter().map(|p| &p.overhead)),
            backoff: profiles
                .iter()
                .flat_map(|p| p.backoff.iter().cloned())
                .collect(),
            metrics: rule::keyed(profiles.iter().map(|p| &p.metrics), |m| m.key()),
            sources: merge_sources(profiles, origins),
            // A sum of whole profiles: a selection of it is made after.
            selection: None,
            gpu_streams: rule::keyed(profiles.iter().map(|p| &p.gpu_streams), |s| {
                s.stream.as_str()
            }),
        })
    }
}

/// Every input's sources: its own, if it is a merge, or itself.
fn merge_sources(profiles: &[Snapshot], origins: &[&str]) -> Vec<Source> {
    let mut sources = Vec::new();
    for (i, p) in profiles.iter().enumerate() {
        if p.sources.is_empty() {
            sources.push(Source {
                origin: origins.get(i).map(|o| o.to_string()),
                run: p.run.clone(),
                dropped: p.dropped.clone(),
                resources: p.resources.clone(),
            });
        } else {
            sources.extend(p.sources.iter().cloned());
        }
    }
    sources
}

// ---- The run: from the earliest start to the latest end, on every host ----

/// The run that started first (the first of those that started together).
fn earliest<'a>(runs: &[&'a RunInfo]) -> &'a RunInfo {
    // UNWRAP: a merge has parts.
    runs.iter().min_by_key(|r| r.start_unix_ns).expect("a run")
}

pub(super) fn earliest_start_time(runs: &[&RunInfo]) -> String {
    earliest(runs).start_time.clone()
}

pub(super) fn earliest_start(runs: &[&RunInfo]) -> u64 {
    earliest(runs).start_unix_ns
}

/// From the earliest start to the latest end.
pub(super) fn duration(runs: &[&RunInfo]) -> u64 {
    let end = runs
        .iter()
        .map(|r| r.start_unix_ns.saturating_add(r.duration_ns))
        .max()
        .unwrap_or(0);
    end.saturating_sub(earliest(runs).start_unix_ns)
}

/// Every host, joined with `,`, each once.
pub(super) fn hosts(runs: &[&RunInfo]) -> String {
    let mut hosts: Vec<&str> = Vec::new();
    for host in runs.iter().flat_map(|r| r.host.split(',')) {
        if !hosts.contains(&host) {
            hosts.push(host);
        }
    }
    hosts.join(",")
}

// ---- spanprof's cost ----

/// The inputs whose measured cost is sure; all of them where none is.
fn sure<'a>(parts: &[&'a Overhead]) -> Vec<&'a Overhead> {
    let sure: Vec<&Overhead> = parts
        .iter()
        .copied()
        .filter(|o| o.span_ns_sure().is_some())
        .collect();
    if sure.is_empty() {
        parts.to_vec()
    } else {
        sure
    }
}

/// The largest sure measured cost (none where no input's is sure).
pub(super) fn sure_span_ns(parts: &[&Overhead]) -> Option<f64> {
    parts
        .iter()
        .filter(|o| o.span_ns_sure().is_some())
        .filter_map(|o| o.measured_span_ns)
        .reduce(f64::max)
}

/// The samples of the inputs whose measured cost is sure (of all of them where none is).
pub(super) fn sure_samples(parts: &[&Overhead]) -> u64 {
    rule::sum(sure(parts).iter().map(|o| &o.measured_samples))
}

/// The process CPU time of every input, added; none unless every input has it.
pub(super) fn process_cpu_ns(parts: &[&Overhead]) -> Option<u64> {
    parts
        .iter()
        .map(|o| o.process_cpu_ns)
        .try_fold(0u64, |all, ns| ns.map(|ns| all.saturating_add(ns)))
}

/// What an input's share was of where its process CPU time is not known (its wall time):
/// its estimate over its share.
pub(super) fn base_of_share(o: &Overhead) -> u64 {
    if o.percent > 0.0 {
        (o.estimated_ns as f64 * 100.0 / o.percent) as u64
    } else {
        0
    }
}

/// The estimate's share of the process CPU time of every input (without every input's,
/// of each input's own base, from its share).
pub(super) fn overhead_percent(parts: &[&Overhead]) -> f64 {
    let base = process_cpu_ns(parts).unwrap_or_else(|| {
        parts
            .iter()
            .map(|o| base_of_share(o))
            .fold(0, u64::saturating_add)
    });
    rule::percent(rule::sum(parts.iter().map(|o| &o.estimated_ns)), base)
}

/// The CPU clocks read, each once, sorted, joined with ` / `.
pub(super) fn cpu_clocks(parts: &[&Overhead]) -> Option<String> {
    let mut clocks: Vec<&str> = parts
        .iter()
        .filter_map(|o| o.cpu_clock.as_deref())
        .collect();
    clocks.sort_unstable();
    clocks.dedup();
    (!clocks.is_empty()).then(|| clocks.join(" / "))
}

// ---- The call tree ----

/// The trees' nodes matched path by path from the root (name, target, other node:
/// [`PathIds`]): each path's nodes merged by their rules, in the order of the paths' first
/// appearance, parents before children.
pub(super) fn paths(trees: &[&CallTree]) -> Vec<TreeNode> {
    let mut ids = PathIds::new();
    // Each merged path's node in every tree that has it.
    let mut paths: Vec<Vec<&TreeNode>> = Vec::new();
    for tree in trees {
        let at = ids.add(tree);
        paths.resize_with(ids.len(), Vec::new);
        for (node, id) in tree.nodes.iter().zip(at) {
            paths[id].push(node);
        }
    }
    paths
        .into_iter()
        .enumerate()
        .map(|(id, nodes)| TreeNode {
            parent: ids.parent(id).map(|p| p as u32),
            ..TreeNode::merged(&nodes)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{CpuUse, Stat};

    fn detailed() -> Snapshot {
        crate::profile::detailed_test_profile()
    }

    /// CPU figures of a sample (entries whose CPU time was not read) stay a sample, with the
    /// entries left out of both profiles.
    #[test]
    fn sampled_cpu_figures_stay_sampled() {
        let cpu = |entries, skipped| CpuUse {
            entries,
            cpu_ns: entries * 100,
            busy_ns: entries * 200,
            utilization_pct: 50.0,
            skipped_entries: skipped,
        };
        let mut a = cpu(10, 30);
        a.add(&cpu(5, 0));
        assert_eq!((a.entries, a.skipped_entries), (15, 30));
        assert!(a.sampled());
        a.add(&cpu(1, 12));
        assert_eq!((a.entries, a.skipped_entries), (16, 42));
        assert_eq!(a.utilization_pct, 50.0);
    }

    #[test]
    fn merging_adds_counts_and_histograms_and_keeps_every_source() {
        let a = detailed();
        let mut b = detailed();
        b.run.host = "other".to_string();
        b.run.pid = 4242;
        b.run.start_unix_ns = a.run.start_unix_ns + 5_000_000_000;
        b.spans.truncate(1);
        let all = Snapshot::merge(&[a.clone(), b.clone()], &["a.json", "b.json"]).unwrap();
        assert_eq!(all.spans.len(), a.spans.len());
        let (sa, sb) = (&a.spans[0], &b.spans[0]);
        let s = all.span_in(&sa.name, &sa.target).unwrap();
        assert_eq!(s.calls, sa.calls + sb.calls);
        assert_eq!(s.busy, Stat::merged([&sa.busy, &sb.busy]));
        let (ha, hb) = (
            sa.resources.as_ref().unwrap().heap.as_ref().unwrap(),
            sb.resources.as_ref().unwrap().heap.as_ref().unwrap(),
        );
        let h = s.resources.as_ref().unwrap().heap.as_ref().unwrap();
        assert_eq!(h.allocations, ha.allocations + hb.allocations);
        // A name only in `a` is kept as it was.
        assert_eq!(all.spans[1], a.spans[1]);
        assert_eq!(all.run.host, format!("{},other", a.run.host));
        assert_eq!(all.run.start_unix_ns, a.run.start_unix_ns);
        assert_eq!(
            all.run.duration_ns,
            a.run.duration_ns.max(5_000_000_000 + b.run.duration_ns)
        );
        let pids: Vec<u32> = all.sources.iter().map(|s| s.run.pid).collect();
        assert_eq!(pids, [a.run.pid, 4242]);
        assert_eq!(all.sources[1].origin.as_deref(), Some("b.json"));
        assert_eq!(
            all.sources[0].resources.as_ref().unwrap().timeline,
            a.resources.as_ref().unwrap().timeline
        );
        assert!(all.resources.as_ref().unwrap().timeline.is_empty());
        // A merge of merges keeps the original sources, and reads back from JSON.
        let again = Snapshot::merge(&[all.clone(), a.clone()], &[]).unwrap();
        assert_eq!(again.sources.len(), 3);
        assert_eq!(
            Snapshot::from_json(&again.to_json(), "merged").unwrap(),
            again
        );
        assert!(Snapshot::merge(&[], &[]).is_none());
    }

    #[test]
    fn profiles_of_one_run_have_no_sources_and_version_3_reads() {
        let v4 = include_str!("../../tests/data/profile-v4-golden.json");
        assert!(v4.contains("\"version\": 4") && !v4.contains("\"sources\""));
        let v3 =
            Snapshot::from_json(&v4.replace("\"version\": 4", "\"version\": 3"), "v3").unwrap();
        assert!(v3.sources.is_empty());
        assert_eq!(v3.version, SCHEMA_VERSION);
        assert_eq!(v3, Snapshot::from_json(v4, "v4").unwrap());
    }

    /// The call tree's histograms merge as the span names' do ([`Stat::merged`]): a bucket
    /// past `i64::MAX` (the encoding's limit) saturates. (The tree had a merge of its own
    /// that did not: the merged profile could not be written.)
    #[test]
    fn call_tree_histograms_merge_as_span_histograms_do() {
        let mut p =
            Snapshot::from_json(include_str!("../../tests/data/golden-profile.json"), "test")
                .unwrap();
        let mut h =
            hdrhistogram::Histogram::<u64>::new_with_bounds(1, crate::profile::HIGHEST_NS, 2)
                .unwrap();
        h.record_n(1_000, 1 << 62).unwrap();
        let node = &mut p.tree.as_mut().unwrap().nodes[0];
        node.busy = Stat::new(h, u64::MAX, 1_000, 1_000, 0);
        let busy = node.busy.clone();
        let merged = Snapshot::merge(&[p.clone(), p.clone(), p], &[]).unwrap();
        let merged_busy = &merged.tree.as_ref().unwrap().nodes[0].busy;
        assert_eq!(merged_busy, &Stat::merged([&busy, &busy, &busy]));
        assert_eq!(merged_busy.count, i64::MAX as u64);
        let back = Snapshot::from_json(&merged.to_json(), "merged").unwrap();
        assert_eq!(back, merged);
    }
}

//! The profile of an interval: what a running profile recorded between two snapshots
//! ([`Snapshot::since`]), computed exactly from the cumulative figures (histogram differences),
//! so cumulative totals never need resetting.
//!
//! Each part's interval follows from the rules stated beside its type
//! ([`combine`](super::combine)), the rules its merge follows too; here are the profile's list
//! of parts, its time series cut at the earlier snapshot, and the interval rules that need
//! more than one field: the run's span of time, spanprof's share, the call tree's paths.

use std::collections::HashMap;
use std::time::{Duration, UNIX_EPOCH};

use super::combine::{rule, Combine};
use super::{merge, CallTree, Overhead, RunInfo, Snapshot, TreeNode};

impl Snapshot {
    /// The profile of the interval from `earlier` (an earlier snapshot of the same run) to
    /// this snapshot: what was recorded in between, exactly.
    ///
    /// - Every span name of this snapshot is in the interval, in the same order: its histograms
    ///   are the differences of the two histograms bucket by bucket ([`Stat::since`]), so
    ///   counts, totals, clamped samples and percentiles are those of the samples recorded in
    ///   the interval (minima and maxima to the histogram's precision, see [`Stat::since`]).
    ///   Names not in `earlier` are new in the interval and kept whole; names with nothing in
    ///   the interval are kept with zero counts.
    /// - Every figure follows the rule its merge follows ([`Snapshot::merge`]): counters and
    ///   totals (`calls`, `created`, `instances`, `errors`, `errored_instances`, throughput
    ///   sums, [`Dropped`](super::Dropped), per-span resource sums, the sampler's CPU time,
    ///   spanprof's estimated cost and its readings) are subtracted, and ratios recomputed from
    ///   the differences (CPU utilisation, spanprof's share of the process's CPU time).
    ///   `open` and `in_progress_ns` are states, not counters: they are this snapshot's.
    ///   Highest values seen (peak RSS, heap, GPU memory) cannot be split: they are this
    ///   snapshot's, over the run. A GPU's mean utilisation is that of the instances measured
    ///   in the interval, by the weights a merge gives them (its instances; absent where none
    ///   was measured).
    /// - [`RunInfo`] describes the interval as a run of its own: it starts at `earlier`
    ///   (`start_time`, `start_unix_ns`) and lasts the time between the two snapshots
    ///   (`duration_ns`). The resource timeline keeps the samples taken in the interval, their
    ///   times counted from its start; the back-off's steps, those taken in it.
    ///
    /// A snapshot that is not earlier (or of another run) gives zero rather than negative
    /// counts. Summing the intervals of consecutive snapshots gives the last snapshot's counts
    /// and histograms exactly ([`Stat::merged`]).
    ///
    /// ```
    /// # let snapshot = spanprof::profile::Snapshot::from_json(
    /// #     include_str!("../../tests/data/profile-v1-basic.json"), "doc")?;
    /// let nothing_new = snapshot.since(&snapshot);
    /// assert!(nothing_new.spans.iter().all(|s| s.calls == 0 && s.entry_busy.count == 0));
    /// assert_eq!(nothing_new.run.duration_ns, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// [`Stat::since`]: super::Stat::since
    /// [`Stat::merged`]: super::Stat::merged
    pub fn since(&self, earlier: &Snapshot) -> Snapshot {
        let from_ns = from_ns(&self.run, &earlier.run);
        let mut resources = rule::opt_since(&self.resources, &earlier.resources);
        if let Some(r) = &mut resources {
            r.timeline.retain(|s| s.t_ns > from_ns);
            for s in &mut r.timeline {
                s.t_ns -= from_ns;
            }
        }
        Snapshot {
            schema: self.schema.clone(),
            version: self.version,
            run: self.run.since(&earlier.run),
            histograms: self.histograms.clone(),
            spans: rule::keyed_since(&self.spans, &earlier.spans, |s| {
                (s.name.as_str(), s.target.as_str())
            }),
            dropped: self.dropped.since(&earlier.dropped),
            resources,
            tree: rule::opt_since(&self.tree, &earlier.tree),
            overhead: rule::opt_since(&self.overhead, &earlier.overhead),
            backoff: self
                .backoff
                .iter()
                .filter(|step| step.at_ns >= from_ns)
                .cloned()
                .collect(),
            metrics: rule::keyed_since(&self.metrics, &earlier.metrics, |m| m.key()),
            sources: self.sources.clone(),
            // The whole profile's figures are not an interval's: snapshots are whole profiles.
            selection: None,
            gpu_streams: rule::keyed_since(&self.gpu_streams, &earlier.gpu_streams, |s| {
                s.stream.as_str()
            }),
        }
    }
}

// ---- The run: from the earlier snapshot to the later one ----

/// Where the interval starts, ns since the run's start: at the earlier snapshot (at the later
/// one where the earlier is not earlier).
fn from_ns(later: &RunInfo, earlier: &RunInfo) -> u64 {
    earlier.duration_ns.min(later.duration_ns)
}

pub(super) fn start_unix_ns(later: &RunInfo, earlier: &RunInfo) -> u64 {
    later.start_unix_ns.saturating_add(from_ns(later, earlier))
}

pub(super) fn start_time(later: &RunInfo, earlier: &RunInfo) -> String {
    let start = UNIX_EPOCH + Duration::from_nanos(start_unix_ns(later, earlier));
    humantime::format_rfc3339_micros(start).to_string()
}

pub(super) fn duration(later: &RunInfo, earlier: &RunInfo) -> u64 {
    later.duration_ns - from_ns(later, earlier)
}

// ---- spanprof's cost ----

/// The process CPU time in the interval, where both snapshots have it.
pub(super) fn process_cpu_ns(later: &Overhead, earlier: &Overhead) -> Option<u64> {
    Some(
        later
            .process_cpu_ns?
            .saturating_sub(earlier.process_cpu_ns?),
    )
}

/// The interval's estimate as a share of the process CPU time in it (without it, of the
/// difference of the two snapshots' bases, from their shares): the merge's rule.
pub(super) fn overhead_percent(later: &Overhead, earlier: &Overhead) -> f64 {
    let base = process_cpu_ns(later, earlier).unwrap_or_else(|| {
        merge::base_of_share(later).saturating_sub(merge::base_of_share(earlier))
    });
    rule::percent(
        later.estimated_ns.saturating_sub(earlier.estimated_ns),
        base,
    )
}

// ---- The call tree ----

/// Each path's node since the same path's in `earlier` (matched node by node from the root:
/// name, target, other node, as [`merge::paths`] matches them), whole where `earlier` has
/// none; in the later tree's order.
pub(super) fn paths(later: &CallTree, earlier: &CallTree) -> Vec<TreeNode> {
    fn key(n: &TreeNode, parent: Option<usize>) -> (Option<usize>, &str, &str, bool) {
        (parent, n.name.as_str(), n.target.as_str(), n.other)
    }
    let index: HashMap<_, usize> = earlier
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (key(n, n.parent.map(|p| p as usize)), i))
        .collect();
    // Each node's node in `earlier` (parents come before their children).
    let mut at: Vec<Option<usize>> = Vec::with_capacity(later.nodes.len());
    for node in &later.nodes {
        let found = match node.parent.map(|p| p as usize) {
            None => index.get(&key(node, None)).copied(),
            Some(p) => at
                .get(p)
                .copied()
                .flatten()
                .and_then(|e| index.get(&key(node, Some(e))).copied()),
        };
        at.push(found);
    }
    later
        .nodes
        .iter()
        .zip(at)
        .map(|(node, e)| match e {
            Some(e) => node.since(&earlier.nodes[e]),
            None => node.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::profile::combine::Combine;
    use crate::profile::{GpuUse, Snapshot, Stat};

    fn v2() -> Snapshot {
        Snapshot::from_json(
            include_str!("../../tests/data/profile-v2-detailed.json"),
            "test",
        )
        .unwrap()
    }

    #[test]
    fn an_interval_of_nothing_is_empty_and_of_everything_is_whole() {
        let s = v2();
        let none = s.since(&s);
        assert_eq!(none.spans.len(), s.spans.len());
        for (n, full) in none.spans.iter().zip(&s.spans) {
            assert_eq!((n.calls, n.instances, n.errors), (0, 0, 0), "{}", n.name);
            assert_eq!(n.entry_busy.count, 0);
            assert!(n.wall.histogram.is_empty());
            assert_eq!(n.open, full.open, "a state, not a counter");
            if let Some(cpu) = n.resources.as_ref().and_then(|r| r.cpu.as_ref()) {
                assert_eq!((cpu.entries, cpu.cpu_ns), (0, 0));
            }
        }
        assert_eq!(none.run.duration_ns, 0);
        assert_eq!(
            none.run.start_unix_ns,
            s.run.start_unix_ns + s.run.duration_ns
        );
        assert!(none.resources.unwrap().timeline.is_empty());
    }

    #[test]
    fn two_intervals_add_up_to_the_whole() {
        let s = v2();
        // An "earlier" snapshot: the same run with half of one name's samples.
        let mut earlier = s.clone();
        earlier.run.duration_ns = s.run.duration_ns / 2;
        let name = s
            .spans
            .iter()
            .max_by_key(|x| x.entry_busy.count)
            .unwrap()
            .name
            .clone();
        let i = s.spans.iter().position(|x| x.name == name).unwrap();
        let half_count = s.spans[i].calls / 2;
        // Keep the first half of the buckets' samples as the earlier histogram.
        let mut kept = Vec::new();
        let mut left = s.spans[i].entry_busy.count / 2;
        for (v, n) in s.spans[i].entry_busy.histogram.iter() {
            let take = n.min(left);
            if take > 0 {
                kept.push((v, take));
            }
            left -= take;
        }
        let earlier_busy = {
            let mut h =
                hdrhistogram::Histogram::<u64>::new_with_bounds(1, crate::profile::HIGHEST_NS, 2)
                    .unwrap();
            for &(v, n) in &kept {
                h.record_n(v, n).unwrap();
            }
            let total: u64 = kept.iter().map(|&(v, n)| v * n).sum();
            let min = kept.first().map_or(0, |&(v, _)| v);
            let max = kept.last().map_or(0, |&(v, _)| v);
            Stat::new(h, total, min, max, 0)
        };
        earlier.spans[i].entry_busy = earlier_busy.clone();
        earlier.spans[i].calls = half_count;
        // A name new in the interval.
        let new_name = earlier.spans.remove((i + 1) % s.spans.len());
        let interval = s.since(&earlier);
        let got = interval.span_in(&name, &s.spans[i].target).unwrap();
        assert_eq!(got.calls, s.spans[i].calls - half_count);
        let whole = Stat::merged([&earlier_busy, &got.entry_busy]);
        assert_eq!(whole.histogram, s.spans[i].entry_busy.histogram);
        assert_eq!(whole.count, s.spans[i].entry_busy.count);
        assert_eq!(whole.total_ns, s.spans[i].entry_busy.total_ns);
        let new = interval.span_in(&new_name.name, &new_name.target).unwrap();
        assert_eq!(new, &new_name, "a name new in the interval is kept whole");
        assert_eq!(
            interval.run.duration_ns,
            s.run.duration_ns - earlier.run.duration_ns
        );
        let res = interval.resources.unwrap();
        assert!(res
            .timeline
            .iter()
            .all(|x| x.t_ns <= interval.run.duration_ns));
        let in_window = s
            .resources
            .unwrap()
            .timeline
            .iter()
            .filter(|x| x.t_ns > earlier.run.duration_ns)
            .count();
        assert_eq!(res.timeline.len(), in_window);
    }

    /// spanprof's cost in an interval is the interval's, as each span name's `overhead_ns` in
    /// it is. (It was the run's so far, while a merge added it up as a total.)
    #[test]
    fn spanprofs_cost_in_an_interval_is_the_interval_s() {
        let later = Snapshot::from_json(include_str!("../../tests/data/cli-detailed.json"), "test")
            .unwrap();
        let mut earlier = later.clone();
        let o = earlier.overhead.as_mut().unwrap();
        o.estimated_ns /= 4;
        o.readings_ns /= 4;
        o.process_cpu_ns = o.process_cpu_ns.map(|ns| ns / 2);
        o.percent = 100.0 * o.estimated_ns as f64 / o.process_cpu_ns.unwrap() as f64;
        let (l, e) = (later.overhead.clone().unwrap(), o.clone());

        let interval = later.since(&earlier);
        let i = interval.overhead.clone().unwrap();
        assert_eq!(i.estimated_ns, l.estimated_ns - e.estimated_ns);
        assert_eq!(i.readings_ns, l.readings_ns - e.readings_ns);
        let cpu_ns = l.process_cpu_ns.unwrap() - e.process_cpu_ns.unwrap();
        assert_eq!(i.process_cpu_ns, Some(cpu_ns));
        assert_eq!(i.percent, 100.0 * i.estimated_ns as f64 / cpu_ns as f64);
        assert_eq!(i.span_cost_ns, l.span_cost_ns, "a calibration: the later's");
        // The earlier snapshot and the interval merged: the later snapshot's figures.
        let whole = Snapshot::merge(&[earlier.clone(), interval], &[]).unwrap();
        let w = whole.overhead.unwrap();
        assert_eq!(
            (w.estimated_ns, w.readings_ns, w.process_cpu_ns),
            (l.estimated_ns, l.readings_ns, l.process_cpu_ns)
        );
        assert!(
            (w.percent - l.percent).abs() < 1e-9,
            "{} {}",
            w.percent,
            l.percent
        );

        // Without the process CPU time: a share of the difference of the two bases.
        let mut later = later;
        later.overhead.as_mut().unwrap().process_cpu_ns = None;
        earlier.overhead.as_mut().unwrap().process_cpu_ns = None;
        let i = later.since(&earlier).overhead.unwrap();
        assert_eq!(i.process_cpu_ns, None);
        let base = |o: &crate::profile::Overhead| o.estimated_ns as f64 * 100.0 / o.percent;
        let want = 100.0 * i.estimated_ns as f64 / (base(&l) as u64 - base(&e) as u64) as f64;
        assert_eq!(i.percent, want);
        assert_eq!(later.since(&later).overhead.unwrap().percent, 0.0);
    }

    /// A GPU's mean utilisation in an interval is that of the instances measured in it, by the
    /// weights a merge gives them, so that the earlier snapshot merged with the interval gives
    /// the later one. (It was the run's, while the merge weighted it by instances.)
    #[test]
    fn a_gpus_utilisation_in_an_interval_is_that_of_its_instances() {
        let gpu = |instances, pct| GpuUse {
            device: 0,
            instances,
            memory_delta_bytes: 0,
            peak_memory_bytes: 0,
            mean_utilization_pct: pct,
            energy_j: None,
        };
        let (earlier, later) = (gpu(1, Some(80.0)), gpu(4, Some(50.0)));
        let interval = later.since(&earlier);
        assert_eq!(interval.mean_utilization_pct, Some(40.0));
        assert_eq!(GpuUse::merged(&[&earlier, &interval]), later);
        assert_eq!(
            later.since(&later).mean_utilization_pct,
            None,
            "none measured"
        );
        assert_eq!(
            later.since(&gpu(0, None)).mean_utilization_pct,
            Some(50.0),
            "all measured in the interval"
        );
        assert_eq!(
            later.since(&gpu(3, Some(100.0))).mean_utilization_pct,
            Some(0.0),
            "in 0..=100 where the weights are off"
        );
    }
}

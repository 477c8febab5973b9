//! The profile of an interval: what a running profile recorded between two snapshots
//! ([`Snapshot::since`]), computed exactly from the cumulative figures (histogram differences),
//! so cumulative totals never need resetting.

use std::collections::HashMap;
use std::time::{Duration, UNIX_EPOCH};

use super::metrics::{Metric, MetricValue};
use super::{
    CallTree, CpuUse, Dropped, GpuUse, HeapUse, MemoryUse, ResourceInfo, RunInfo, Snapshot,
    SpanResources, SpanStats, Stat, TreeNode,
};

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
    /// - Counters (`calls`, `created`, `instances`, `errors`, `errored_instances`, throughput
    ///   sums, [`Dropped`], per-span resource sums and the sampler's CPU time) are subtracted.
    ///   `open` and `in_progress_ns` are states, not counters: they are this snapshot's.
    ///   Highest values seen (peak RSS, heap, GPU memory) cannot be split: they are this
    ///   snapshot's, over the run.
    /// - [`RunInfo`] describes the interval as a run of its own: it starts at `earlier`
    ///   (`start_time`, `start_unix_ns`) and lasts the time between the two snapshots
    ///   (`duration_ns`). The resource timeline keeps the samples taken in the interval, their
    ///   times counted from its start.
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
        let spans = self
            .spans
            .iter()
            .map(|s| match earlier.span_in(&s.name, &s.target) {
                Some(e) => s.since(e),
                None => s.clone(),
            })
            .collect();
        let from_ns = earlier.run.duration_ns.min(self.run.duration_ns);
        Snapshot {
            schema: self.schema.clone(),
            version: self.version,
            run: self.run.since(from_ns),
            histograms: self.histograms.clone(),
            spans,
            dropped: self.dropped.since(&earlier.dropped),
            resources: self
                .resources
                .as_ref()
                .map(|r| r.since(earlier.resources.as_ref(), from_ns)),
            tree: self.tree.as_ref().map(|t| t.since(earlier.tree.as_ref())),
            // The estimate is the run's so far: its rates do not split by interval.
            overhead: self.overhead.clone(),
            backoff: self
                .backoff
                .iter()
                .filter(|step| step.at_ns >= from_ns)
                .cloned()
                .collect(),
            metrics: self
                .metrics
                .iter()
                .map(|m| match earlier.metrics.iter().find(|e| e.same_key(m)) {
                    Some(e) => m.since(e),
                    None => m.clone(),
                })
                .collect(),
            sources: self.sources.clone(),
            // The whole profile's figures are not an interval's: snapshots are whole profiles.
            selection: None,
        }
    }
}

impl RunInfo {
    /// The run from `from_ns` (time since its start) to this snapshot.
    fn since(&self, from_ns: u64) -> RunInfo {
        let start_unix_ns = self.start_unix_ns.saturating_add(from_ns);
        let start = UNIX_EPOCH + Duration::from_nanos(start_unix_ns);
        RunInfo {
            start_time: humantime::format_rfc3339_micros(start).to_string(),
            start_unix_ns,
            duration_ns: self.duration_ns - from_ns,
            ..self.clone()
        }
    }
}

impl Dropped {
    fn since(&self, earlier: &Dropped) -> Dropped {
        Dropped {
            spans_table_full: self
                .spans_table_full
                .saturating_sub(earlier.spans_table_full),
            spans_too_many_names: self
                .spans_too_many_names
                .saturating_sub(earlier.spans_too_many_names),
            trace_windows_skipped: self
                .trace_windows_skipped
                .saturating_sub(earlier.trace_windows_skipped),
            metric_values: self.metric_values.saturating_sub(earlier.metric_values),
            backoff_steps: self.backoff_steps.saturating_sub(earlier.backoff_steps),
        }
    }
}

/// `a - b` for optional sums: `b` absent counts 0; `a` absent stays absent.
fn opt_sub(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    a.map(|a| a.saturating_sub(b.unwrap_or(0)))
}

fn opt_sub_f(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    a.map(|a| super::add_finite(a, -b.unwrap_or(0.0)).max(0.0))
}

impl SpanStats {
    /// This name's statistics since `earlier` (the same name in an earlier snapshot).
    fn since(&self, earlier: &SpanStats) -> SpanStats {
        SpanStats {
            name: self.name.clone(),
            target: self.target.clone(),
            calls: self.calls.saturating_sub(earlier.calls),
            created: self.created.saturating_sub(earlier.created),
            instances: self.instances.saturating_sub(earlier.instances),
            open: self.open,
            in_progress_ns: self.in_progress_ns,
            entry_busy: self.entry_busy.since(&earlier.entry_busy),
            entry_self: self.entry_self.since(&earlier.entry_self),
            busy: self.busy.since(&earlier.busy),
            self_time: self.self_time.since(&earlier.self_time),
            wall: self.wall.since(&earlier.wall),
            items: opt_sub(self.items, earlier.items),
            bytes: opt_sub(self.bytes, earlier.bytes),
            flops: opt_sub(self.flops, earlier.flops),
            errors: self.errors.saturating_sub(earlier.errors),
            overhead_ns: opt_sub(self.overhead_ns, earlier.overhead_ns),
            // The interval's skipped spans; N and its start as of the later snapshot.
            sampled: self.sampled.as_ref().map(|s| crate::profile::Sampled {
                skipped: s
                    .skipped
                    .saturating_sub(earlier.sampled.as_ref().map_or(0, |e| e.skipped)),
                skipped_ns: s
                    .skipped_ns
                    .saturating_sub(earlier.sampled.as_ref().map_or(0, |e| e.skipped_ns)),
                ..s.clone()
            }),
            errored_instances: self
                .errored_instances
                .saturating_sub(earlier.errored_instances),
            resources: self.resources.as_ref().map(|r| match &earlier.resources {
                Some(e) => r.since(e),
                None => r.clone(),
            }),
        }
    }
}

impl SpanResources {
    fn since(&self, earlier: &SpanResources) -> SpanResources {
        SpanResources {
            cpu: self.cpu.as_ref().map(|c| match &earlier.cpu {
                Some(e) => c.since(e),
                None => c.clone(),
            }),
            heap: self.heap.as_ref().map(|h| match &earlier.heap {
                Some(e) => h.since(e),
                None => h.clone(),
            }),
            memory: self.memory.as_ref().map(|m| match &earlier.memory {
                Some(e) => m.since(e),
                None => m.clone(),
            }),
            cpu_energy_j: opt_sub_f(self.cpu_energy_j, earlier.cpu_energy_j),
            gpus: self
                .gpus
                .iter()
                .map(
                    |g| match earlier.gpus.iter().find(|e| e.device == g.device) {
                        Some(e) => g.since(e),
                        None => g.clone(),
                    },
                )
                .collect(),
            energy_j: opt_sub_f(self.energy_j, earlier.energy_j),
            co2e_g: opt_sub_f(self.co2e_g, earlier.co2e_g),
        }
    }
}

impl CpuUse {
    fn since(&self, earlier: &CpuUse) -> CpuUse {
        let cpu_ns = self.cpu_ns.saturating_sub(earlier.cpu_ns);
        let busy_ns = self.busy_ns.saturating_sub(earlier.busy_ns);
        CpuUse {
            entries: self.entries.saturating_sub(earlier.entries),
            skipped_entries: self.skipped_entries.saturating_sub(earlier.skipped_entries),
            cpu_ns,
            busy_ns,
            utilization_pct: if busy_ns == 0 {
                0.0
            } else {
                100.0 * cpu_ns as f64 / busy_ns as f64
            },
        }
    }
}

impl HeapUse {
    fn since(&self, earlier: &HeapUse) -> HeapUse {
        HeapUse {
            entries: self.entries.saturating_sub(earlier.entries),
            allocated_bytes: self.allocated_bytes.saturating_sub(earlier.allocated_bytes),
            allocations: self.allocations.saturating_sub(earlier.allocations),
            freed_bytes: self.freed_bytes.saturating_sub(earlier.freed_bytes),
            net_retained_bytes: self
                .net_retained_bytes
                .saturating_sub(earlier.net_retained_bytes),
            self_retained_bytes: self
                .self_retained_bytes
                .saturating_sub(earlier.self_retained_bytes),
            retaining_entries: self
                .retaining_entries
                .saturating_sub(earlier.retaining_entries),
        }
    }
}

impl MemoryUse {
    fn since(&self, earlier: &MemoryUse) -> MemoryUse {
        MemoryUse {
            instances: self.instances.saturating_sub(earlier.instances),
            rss_delta_bytes: self.rss_delta_bytes.saturating_sub(earlier.rss_delta_bytes),
            growing_instances: self
                .growing_instances
                .saturating_sub(earlier.growing_instances),
            ..self.clone()
        }
    }
}

impl GpuUse {
    fn since(&self, earlier: &GpuUse) -> GpuUse {
        let instances = self.instances.saturating_sub(earlier.instances);
        GpuUse {
            device: self.device,
            instances,
            memory_delta_bytes: self
                .memory_delta_bytes
                .saturating_sub(earlier.memory_delta_bytes),
            peak_memory_bytes: self.peak_memory_bytes,
            // A mean weighted by wall time whose weights are not kept: the run's.
            mean_utilization_pct: self.mean_utilization_pct,
            energy_j: opt_sub_f(self.energy_j, earlier.energy_j),
        }
    }
}

impl ResourceInfo {
    /// The samplers' figures from `from_ns` (time since the run's start) on.
    fn since(&self, earlier: Option<&ResourceInfo>, from_ns: u64) -> ResourceInfo {
        let timeline = self
            .timeline
            .iter()
            .filter(|s| s.t_ns > from_ns)
            .map(|s| {
                let mut s = s.clone();
                s.t_ns -= from_ns;
                s
            })
            .collect();
        ResourceInfo {
            sampler_cpu_ns: self
                .sampler_cpu_ns
                .saturating_sub(earlier.map_or(0, |e| e.sampler_cpu_ns)),
            timeline,
            ..self.clone()
        }
    }
}

impl CallTree {
    /// This tree since `earlier` (an earlier tree of the same run): each path's counters and
    /// histograms minus those of the same path in `earlier`. A path is its nodes' names and
    /// targets from the root (two `step` spans of two targets have two `step;work` paths), as
    /// [`CallTree::merge`] matches them.
    fn since(&self, earlier: Option<&CallTree>) -> CallTree {
        let Some(earlier) = earlier else {
            return self.clone();
        };
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
        let mut at: Vec<Option<usize>> = Vec::with_capacity(self.nodes.len());
        for node in &self.nodes {
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
        let mut tree = self.clone();
        for (node, e) in tree.nodes.iter_mut().zip(at) {
            if let Some(e) = e.map(|e| &earlier.nodes[e]) {
                node.calls = node.calls.saturating_sub(e.calls);
                node.instances = node.instances.saturating_sub(e.instances);
                node.wall_ns = node.wall_ns.saturating_sub(e.wall_ns);
                node.skipped = node.skipped.saturating_sub(e.skipped);
                node.detached_ns = node.detached_ns.saturating_sub(e.detached_ns);
                node.skipped_ns = node.skipped_ns.saturating_sub(e.skipped_ns);
                node.busy = node.busy.since(&e.busy);
                node.self_time = node.self_time.since(&e.self_time);
            }
        }
        tree
    }
}

impl Metric {
    /// This metric since `earlier` (the same metric in an earlier snapshot): counters and
    /// histograms subtracted; a gauge is a state: this snapshot's.
    fn since(&self, earlier: &Metric) -> Metric {
        let value = match (&self.value, &earlier.value) {
            (MetricValue::Sum(a), MetricValue::Sum(b)) => {
                let mut sum = *a;
                sum.integer = a.integer.saturating_sub(b.integer);
                sum.float = super::add_finite(a.float, -b.float);
                MetricValue::Sum(sum)
            }
            (MetricValue::Histogram(a), MetricValue::Histogram(b)) => {
                let part = |now: &Option<Stat>, then: &Option<Stat>| match (now, then) {
                    (Some(n), Some(t)) => Some(n.since(t)),
                    (now, _) => now.clone(),
                };
                let mut h = a.clone();
                h.integers = part(&a.integers, &b.integers);
                h.floats = part(&a.floats, &b.floats);
                MetricValue::Histogram(h)
            }
            (value, _) => value.clone(),
        };
        let mut metric = self.clone();
        metric.records = self.records.saturating_sub(earlier.records);
        metric.rejected = self.rejected.saturating_sub(earlier.rejected);
        metric.value = value;
        metric
    }
}

#[cfg(test)]
mod tests {
    use crate::profile::{Snapshot, Stat};

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
}

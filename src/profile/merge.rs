//! Merging profiles of several processes, ranks or runs into one ([`Snapshot::merge`]): exact,
//! from the full histograms, never by averaging percentiles.
//!
//! The merge is a list of per-part merges, one function per part of the model: the run's
//! metadata and sources, what was dropped, the resource summary, and the span names (their
//! counters, histograms and resources).

use std::collections::HashMap;

use super::{
    add_finite, finite, CallTree, CpuUse, Dropped, GpuUse, HeapUse, MemoryUse, Overhead,
    ResourceInfo, RunInfo, Sampled, Snapshot, Source, SpanResources, SpanStats, Stat, SCHEMA,
    SCHEMA_VERSION,
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
    ///   the sampler's CPU time and leaves the timelines to the sources.
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
    pub fn merge(profiles: &[Snapshot], origins: &[&str]) -> Option<Snapshot> {
        let first = profiles.first()?;
        Some(Snapshot {
            schema: SCHEMA.to_string(),
            version: SCHEMA_VERSION,
            run: merge_run(profiles),
            histograms: first.histograms.clone(),
            spans: merge_spans(profiles),
            dropped: merge_dropped(profiles.iter().map(|p| &p.dropped)),
            resources: merge_resource_info(profiles),
            tree: merge_trees(profiles),
            overhead: merge_overhead(profiles),
            backoff: profiles
                .iter()
                .flat_map(|p| p.backoff.iter().cloned())
                .collect(),
            metrics: profiles.iter().fold(Vec::new(), |mut all, p| {
                super::metrics::merge(&mut all, &p.metrics);
                all
            }),
            sources: merge_sources(profiles, origins),
            // A sum of whole profiles: a selection of it is made after.
            selection: None,
        })
    }
}

/// The call trees added path by path ([`CallTree::merge`]); none if no input has one.
fn merge_trees(profiles: &[Snapshot]) -> Option<CallTree> {
    let mut trees = profiles.iter().filter_map(|p| p.tree.as_ref());
    let mut all = trees.next()?.clone();
    for tree in trees {
        all.merge(tree);
    }
    Some(all)
}

/// spanprof's cost in every input: times added, the share recomputed from the sums (of the
/// process CPU time where every input has it), the calibrated costs the largest of the inputs'.
fn merge_overhead(profiles: &[Snapshot]) -> Option<Overhead> {
    let parts: Vec<&Overhead> = profiles
        .iter()
        .filter_map(|p| p.overhead.as_ref())
        .collect();
    let first = *parts.first()?;
    let sum = |f: fn(&Overhead) -> u64| parts.iter().map(|o| f(o)).fold(0u64, u64::saturating_add);
    let estimated_ns = sum(|o| o.estimated_ns);
    let process_cpu_ns = parts
        .iter()
        .map(|o| o.process_cpu_ns)
        .try_fold(0u64, |all, ns| ns.map(|ns| all.saturating_add(ns)));
    // Without every input's process CPU time: each input's own base, from its share.
    let base = process_cpu_ns.unwrap_or_else(|| {
        parts
            .iter()
            .filter(|o| o.percent > 0.0)
            .map(|o| (o.estimated_ns as f64 * 100.0 / o.percent) as u64)
            .fold(0u64, u64::saturating_add)
    });
    let mut merged = first.clone();
    merged.span_cost_ns = parts.iter().map(|o| o.span_cost_ns).fold(0.0, f64::max);
    merged.cpu_read_ns = parts.iter().map(|o| o.cpu_read_ns).fold(0.0, f64::max);
    // The largest sure measured cost, with the samples of the inputs that were sure (of all
    // of them where none was).
    let sure: Vec<&Overhead> = parts
        .iter()
        .copied()
        .filter(|o| o.span_ns_sure().is_some())
        .collect();
    merged.measured_span_ns = sure
        .iter()
        .filter_map(|o| o.measured_span_ns)
        .reduce(f64::max);
    merged.measured_samples = if sure.is_empty() {
        &parts[..]
    } else {
        &sure[..]
    }
    .iter()
    .map(|o| o.measured_samples)
    .fold(0u64, u64::saturating_add);
    merged.readings_ns = sum(|o| o.readings_ns);
    merged.estimated_ns = estimated_ns;
    merged.process_cpu_ns = process_cpu_ns;
    let mut clocks: Vec<&str> = parts
        .iter()
        .filter_map(|o| o.cpu_clock.as_deref())
        .collect();
    clocks.sort_unstable();
    clocks.dedup();
    merged.cpu_clock = (!clocks.is_empty()).then(|| clocks.join(" / "));
    merged.percent = if base == 0 {
        0.0
    } else {
        100.0 * estimated_ns as f64 / base as f64
    };
    Some(merged)
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

/// The run of the whole: earliest start to latest end, every host.
fn merge_run(profiles: &[Snapshot]) -> RunInfo {
    let earliest = profiles
        .iter()
        .min_by_key(|p| p.run.start_unix_ns)
        .map(|p| &p.run)
        .unwrap_or(&profiles[0].run);
    let end = profiles
        .iter()
        .map(|p| p.run.start_unix_ns.saturating_add(p.run.duration_ns))
        .max()
        .unwrap_or(0);
    let mut hosts: Vec<&str> = Vec::new();
    for p in profiles {
        for host in p.run.host.split(',') {
            if !hosts.contains(&host) {
                hosts.push(host);
            }
        }
    }
    let first = &profiles[0].run;
    RunInfo {
        start_time: earliest.start_time.clone(),
        start_unix_ns: earliest.start_unix_ns,
        duration_ns: end.saturating_sub(earliest.start_unix_ns),
        host: hosts.join(","),
        ..first.clone()
    }
}

fn merge_dropped<'a>(dropped: impl Iterator<Item = &'a Dropped>) -> Dropped {
    let mut sum = Dropped::default();
    for d in dropped {
        sum.spans_table_full = sum.spans_table_full.saturating_add(d.spans_table_full);
        sum.spans_too_many_names = sum
            .spans_too_many_names
            .saturating_add(d.spans_too_many_names);
        sum.trace_windows_skipped = sum
            .trace_windows_skipped
            .saturating_add(d.trace_windows_skipped);
        sum.metric_values = sum.metric_values.saturating_add(d.metric_values);
        sum.backoff_steps = sum.backoff_steps.saturating_add(d.backoff_steps);
    }
    sum
}

/// The resource summary: samplers of any input, largest peaks, sampler CPU added; no
/// timeline (each source keeps its own) and no end-of-run readings (processes end apart).
fn merge_resource_info(profiles: &[Snapshot]) -> Option<ResourceInfo> {
    let infos: Vec<&ResourceInfo> = profiles
        .iter()
        .filter_map(|p| p.resources.as_ref())
        .collect();
    let first = *infos.first()?;
    let mut samplers: Vec<String> = Vec::new();
    for name in infos.iter().flat_map(|i| &i.samplers) {
        if !samplers.contains(name) {
            samplers.push(name.clone());
        }
    }
    Some(ResourceInfo {
        interval_ms: first.interval_ms,
        samplers,
        heap_allocator: infos.iter().all(|i| i.heap_allocator),
        gpu_devices: first.gpu_devices.clone(),
        gpu_unavailable: first.gpu_unavailable.clone(),
        cpu_energy_unavailable: first.cpu_energy_unavailable.clone(),
        peak_rss_bytes: infos.iter().filter_map(|i| i.peak_rss_bytes).max(),
        peak_heap_bytes: infos.iter().filter_map(|i| i.peak_heap_bytes).max(),
        sampler_cpu_ns: infos
            .iter()
            .map(|i| i.sampler_cpu_ns)
            .fold(0u64, u64::saturating_add),
        grid_g_per_kwh: first.grid_g_per_kwh,
        timeline: Vec::new(),
        rss_bytes_at_end: None,
        heap_bytes_at_end: None,
    })
}

/// Span names matched by (name, target), in the order they first appear.
fn merge_spans(profiles: &[Snapshot]) -> Vec<SpanStats> {
    let mut order: Vec<(&str, &str)> = Vec::new();
    let mut groups: HashMap<(&str, &str), Vec<&SpanStats>> = HashMap::new();
    for span in profiles.iter().flat_map(|p| &p.spans) {
        let key = (span.name.as_str(), span.target.as_str());
        let group = groups.entry(key).or_default();
        if group.is_empty() {
            order.push(key);
        }
        group.push(span);
    }
    order.iter().map(|key| merge_span(&groups[key])).collect()
}

/// One span name's statistics from several profiles.
fn merge_span(parts: &[&SpanStats]) -> SpanStats {
    let sum = |f: fn(&SpanStats) -> u64| parts.iter().map(|s| f(s)).fold(0u64, u64::saturating_add);
    let opt = |f: fn(&SpanStats) -> Option<u64>| {
        parts
            .iter()
            .filter_map(|s| f(s))
            .reduce(u64::saturating_add)
    };
    let stat = |f: fn(&SpanStats) -> &Stat| Stat::merged(parts.iter().map(|s| f(s)));
    SpanStats {
        name: parts[0].name.clone(),
        target: parts[0].target.clone(),
        calls: sum(|s| s.calls),
        created: sum(|s| s.created),
        instances: sum(|s| s.instances),
        open: sum(|s| s.open),
        in_progress_ns: sum(|s| s.in_progress_ns),
        entry_busy: stat(|s| &s.entry_busy),
        entry_self: stat(|s| &s.entry_self),
        busy: stat(|s| &s.busy),
        self_time: stat(|s| &s.self_time),
        wall: stat(|s| &s.wall),
        items: opt(|s| s.items),
        bytes: opt(|s| s.bytes),
        flops: opt(|s| s.flops),
        errors: sum(|s| s.errors),
        errored_instances: sum(|s| s.errored_instances),
        overhead_ns: opt(|s| s.overhead_ns),
        sampled: parts.iter().fold(None, |acc, s| {
            Sampled::merged(acc.as_ref(), s.sampled.as_ref())
        }),
        resources: merge_span_resources(parts.iter().filter_map(|s| s.resources.as_ref())),
    }
}

/// Optional float sums (energy, CO2e) added, saturating at `f64::MAX` ([`add_finite`]).
fn add_f64(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(add_finite(a, b)),
        (a, b) => a.or(b),
    }
}

/// Resources of one span name: CPU, heap, memory, energy and GPUs, each added.
fn merge_span_resources<'a>(
    parts: impl Iterator<Item = &'a SpanResources>,
) -> Option<SpanResources> {
    let mut merged: Option<SpanResources> = None;
    for r in parts {
        let Some(m) = merged.as_mut() else {
            merged = Some(r.clone());
            continue;
        };
        m.cpu = merge_opt(m.cpu.take(), r.cpu.as_ref(), merge_cpu);
        m.heap = merge_opt(m.heap.take(), r.heap.as_ref(), merge_heap);
        m.memory = merge_opt(m.memory.take(), r.memory.as_ref(), merge_memory);
        m.cpu_energy_j = add_f64(m.cpu_energy_j, r.cpu_energy_j);
        for gpu in &r.gpus {
            match m.gpus.iter_mut().find(|g| g.device == gpu.device) {
                Some(g) => merge_gpu(g, gpu),
                None => m.gpus.push(gpu.clone()),
            }
        }
        m.energy_j = add_f64(m.energy_j, r.energy_j);
        m.co2e_g = add_f64(m.co2e_g, r.co2e_g);
    }
    merged
}

fn merge_opt<T: Clone>(a: Option<T>, b: Option<&T>, f: fn(&mut T, &T)) -> Option<T> {
    match (a, b) {
        (Some(mut a), Some(b)) => {
            f(&mut a, b);
            Some(a)
        }
        (a, b) => a.or_else(|| b.cloned()),
    }
}

fn merge_cpu(a: &mut CpuUse, b: &CpuUse) {
    a.entries = a.entries.saturating_add(b.entries);
    a.skipped_entries = a.skipped_entries.saturating_add(b.skipped_entries);
    a.cpu_ns = a.cpu_ns.saturating_add(b.cpu_ns);
    a.busy_ns = a.busy_ns.saturating_add(b.busy_ns);
    a.utilization_pct = if a.busy_ns == 0 {
        0.0
    } else {
        100.0 * a.cpu_ns as f64 / a.busy_ns as f64
    };
}

fn merge_heap(a: &mut HeapUse, b: &HeapUse) {
    a.entries = a.entries.saturating_add(b.entries);
    a.allocated_bytes = a.allocated_bytes.saturating_add(b.allocated_bytes);
    a.allocations = a.allocations.saturating_add(b.allocations);
    a.freed_bytes = a.freed_bytes.saturating_add(b.freed_bytes);
    a.net_retained_bytes = a.net_retained_bytes.saturating_add(b.net_retained_bytes);
    a.self_retained_bytes = a.self_retained_bytes.saturating_add(b.self_retained_bytes);
    a.retaining_entries = a.retaining_entries.saturating_add(b.retaining_entries);
}

fn merge_memory(a: &mut MemoryUse, b: &MemoryUse) {
    a.instances = a.instances.saturating_add(b.instances);
    a.rss_delta_bytes = a.rss_delta_bytes.saturating_add(b.rss_delta_bytes);
    a.growing_instances = a.growing_instances.saturating_add(b.growing_instances);
    a.peak_rss_bytes = a.peak_rss_bytes.max(b.peak_rss_bytes);
    a.peak_heap_bytes = a.peak_heap_bytes.max(b.peak_heap_bytes);
}

/// One device's figures: utilisation weighted by the instances measured on each side.
fn merge_gpu(a: &mut GpuUse, b: &GpuUse) {
    let instances = a.instances.saturating_add(b.instances);
    a.mean_utilization_pct = match (a.mean_utilization_pct, b.mean_utilization_pct) {
        (Some(x), Some(y)) if instances > 0 => Some(finite(
            (x * a.instances as f64 + y * b.instances as f64) / instances as f64,
        )),
        (x, y) => x.or(y),
    };
    a.instances = instances;
    a.memory_delta_bytes = a.memory_delta_bytes.saturating_add(b.memory_delta_bytes);
    a.peak_memory_bytes = a.peak_memory_bytes.max(b.peak_memory_bytes);
    a.energy_j = add_f64(a.energy_j, b.energy_j);
}

#[cfg(test)]
mod tests {
    use super::*;

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
        merge_cpu(&mut a, &cpu(5, 0));
        assert_eq!((a.entries, a.skipped_entries), (15, 30));
        assert!(a.sampled());
        merge_cpu(&mut a, &cpu(1, 12));
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
        let v4 = include_str!("../../tests/data/golden-profile.json");
        assert!(v4.contains("\"version\": 4") && !v4.contains("\"sources\""));
        let v3 =
            Snapshot::from_json(&v4.replace("\"version\": 4", "\"version\": 3"), "v3").unwrap();
        assert!(v3.sources.is_empty());
        assert_eq!(v3.version, SCHEMA_VERSION);
        assert_eq!(v3, Snapshot::from_json(v4, "v4").unwrap());
    }
}

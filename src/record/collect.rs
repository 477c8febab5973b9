//! The merge of every thread's shard into a [`Snapshot`]: the one place where recorded state
//! becomes the profile model.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::sync::Arc;
use std::time::UNIX_EPOCH;

use hdrhistogram::Histogram;

use super::hist::{new_histogram, record_n, Exact};
use super::metrics::NO_SPAN;
use super::names::{Kind, NameInfo, INSTANCE_BUSY, INSTANCE_SELF, KINDS};
use super::overhead::{estimate, NameWork, ProbeSums, CPU_SAMPLE_EVERY};
use super::resources::ResourceTotals;
use super::shards::{NameStats, Shard};
use super::spans::ENTRIES_ONE;
use super::Recorder;
use crate::profile::metrics::{GaugeValue, HistogramValue, SumValue};
use crate::profile::{
    CpuUse, Dropped, GpuStream, GpuTime, HistogramSpec, Metric, MetricKind, MetricValue, Overhead,
    ResourceInfo, RunInfo, Sampled, Snapshot, SpanResources, SpanStats, Stat, HIGHEST_NS,
    LOWEST_NS, SCHEMA, SCHEMA_VERSION, SIGNIFICANT_DIGITS,
};
use crate::samplers::{Readings, SourceStatus};

impl Recorder {
    /// Merges every shard into a snapshot.
    pub(crate) fn snapshot(&self) -> Snapshot {
        // States of exited threads whose spans are all closed hold no entry in progress.
        self.shards
            .sweep_parked(|id| self.table.with(id, |_| ()).is_some());
        let now = self.clock.raw();
        let all_shards = self.shards.all();
        let shards: Vec<_> = all_shards.iter().map(|s| s.names()).collect();
        let names = self.names.all();
        // The call tree's nodes, merged.
        let merged_nodes = self.tree.as_ref().map(|t| t.merged(&all_shards));
        let pending = self.pending_first_entries(names.len());
        let in_progress = self.in_progress(&all_shards, names.len(), now);
        // Everything that was on at some point: a resource stepped down keeps its figures.
        let recorded = self.available;
        let n_gpus = self.readings.gpus().len();
        let mut gpu = self.gpu_figures();

        let mut spans = Vec::with_capacity(names.len());
        // The name index of each span pushed, and spanprof's measured time in its readings.
        let mut indices = Vec::with_capacity(names.len());
        let mut readings = Vec::with_capacity(names.len());
        for (index, info) in names.iter().enumerate() {
            let spill = info.spill.lock().unwrap_or_else(|e| e.into_inner());
            let mut hists: [Histogram<u64>; KINDS] =
                std::array::from_fn(|k| spill[k].clone().unwrap_or_else(new_histogram));
            let mut exact = [Exact::default(); KINDS];
            let (mut items, mut bytes, mut flops) = (None::<u64>, None::<u64>, None::<u64>);
            let mut errors = 0;
            let (mut closed, mut entries, mut errored) = (0u64, 0u64, 0u64);
            let mut any = false;
            let mut res = ResourceTotals::default();
            let (mut skipped, mut own_ns, mut left_out) = (0u64, 0u64, 0u64);
            let mut left_out_ns = 0u64;
            for shard in &shards {
                let Some(Some(stats)) = shard.get(index) else {
                    continue;
                };
                any = true;
                for k in 0..KINDS {
                    stats.hists[k].add_to(&mut hists[k]);
                    exact[k].merge(&stats.hists[k].exact());
                }
                // Wrapping: a thread's sum goes below zero where a value recorded there
                // replaced a larger one given at the span's creation on another thread
                // (`Throughput`); the total over the shards is right.
                let add = |acc: &mut Option<u64>, v: u64| {
                    if v != 0 {
                        *acc = Some(acc.unwrap_or(0).wrapping_add(v));
                    }
                };
                add(&mut items, stats.items.load(Relaxed));
                add(&mut bytes, stats.bytes.load(Relaxed));
                add(&mut flops, stats.flops.load(Relaxed));
                errors += stats.errors.load(Relaxed);
                closed += stats.closed.load(Relaxed);
                entries += stats.entries.load(Relaxed);
                errored += stats.errored_instances.load(Relaxed);
                if let Some(r) = stats.res.get() {
                    res.add(r);
                }
                let (s, o) = stats.cost.totals();
                skipped += s;
                own_ns += o;
                left_out += stats.cost.sampled_out();
                left_out_ns = left_out_ns.saturating_add(stats.sampled_out_ns.load(Relaxed));
            }
            drop(spill);
            if !any {
                continue;
            }
            let h = Merged { hists, exact };
            // Entries: multi-entry spans' entries, single-entry instances, and the first entry
            // of open spans entered once. Instances: closed ones of either kind.
            let mut entry_busy = h.sum(&[Kind::EntryBusy, Kind::SingleBusy, Kind::SingleLeaf]);
            let mut entry_self = h.sum(&[Kind::EntrySelf, Kind::SingleSelf, Kind::SingleLeaf]);
            for &(busy, self_ns) in &pending[index] {
                entry_busy.record(busy);
                entry_self.record(self_ns);
            }
            let busy = h.sum(&INSTANCE_BUSY);
            let self_time = h.sum(&INSTANCE_SELF);
            let wall = h.sum(&[Kind::Wall]);
            indices.push(index);
            readings.push(own_ns);
            let mut resources = res.finish(recorded, n_gpus, self.settings.grid_g_per_kwh);
            let entry_busy = entry_busy.stat();
            if resources.is_none()
                && skipped > 0
                && recorded.contains(crate::switches::Resources::CPU)
            {
                resources = Some(SpanResources::default());
            }
            if let Some(r) = resources.as_mut() {
                match r.cpu.as_mut() {
                    Some(cpu) => {
                        cpu.skipped_entries = skipped;
                        if skipped > 0 {
                            cpu.estimate_busy(&entry_busy);
                        }
                    }
                    // No entry of the name got a CPU read (all sampled out): said, not
                    // silent.
                    None if skipped > 0 => r.cpu = Some(CpuUse::none_read(skipped)),
                    None => {}
                }
            }
            spans.push(SpanStats {
                name: info.name.to_string(),
                target: info.target.to_string(),
                calls: entries,
                created: closed,
                instances: closed,
                open: 0,
                in_progress_ns: in_progress[index],
                entry_busy,
                entry_self: entry_self.stat(),
                busy: busy.stat(),
                self_time: self_time.stat(),
                wall: wall.stat(),
                items,
                bytes,
                flops,
                errors,
                errored_instances: errored,
                resources,
                overhead_ns: None,
                sampled: self
                    .sampling
                    .of(index as u32)
                    .map(|(every, since_ns)| Sampled {
                        every,
                        since_ns,
                        skipped: left_out,
                        skipped_ns: left_out_ns,
                    }),
                gpu_time: gpu
                    .names
                    .remove(&(index as u32))
                    .map(|(time, untimed, abandoned)| GpuTime {
                        time,
                        untimed,
                        abandoned,
                    }),
            });
        }

        // Spans opened, read after every close count: each close counted above was preceded by
        // its span's open (the fence pairs with the one in `Recorder::close`), so `open` is
        // never negative, and each span is counted once, closed or open.
        std::sync::atomic::fence(Acquire);
        let opened = opened(&shards, names.len());
        for (span, &index) in spans.iter_mut().zip(&indices) {
            span.created = opened[index].max(span.instances);
            span.open = span.created - span.instances;
            // Spans left out by sampling: created and closed at once, one entry each.
            if let Some(s) = &span.sampled {
                span.created += s.skipped;
                span.instances += s.skipped;
                span.calls += s.skipped;
            }
        }
        let overhead = self.overhead(&mut spans, &indices, &shards, &readings);

        Snapshot {
            schema: SCHEMA.to_string(),
            version: SCHEMA_VERSION,
            run: self.run_info(now),
            histograms: HistogramSpec {
                unit: "ns".to_string(),
                significant_digits: SIGNIFICANT_DIGITS,
                lowest: LOWEST_NS,
                highest: HIGHEST_NS,
                encoding: "hdrhistogram-v2-deflate-base64".to_string(),
            },
            spans,
            dropped: Dropped {
                spans_table_full: self.dropped_table_full.load(Relaxed),
                spans_too_many_names: self.dropped_too_many_names.load(Relaxed),
                trace_windows_skipped: 0,
                metric_values: self.events.dropped.load(Relaxed),
                backoff_steps: 0,
            },
            resources: self.resource_info(),
            tree: self
                .tree
                .as_ref()
                .zip(merged_nodes.as_deref())
                .map(|(t, merged)| t.snapshot(merged, &names, &gpu.nodes)),
            overhead,
            backoff: Vec::new(),
            metrics: self.metrics(&all_shards, &names),
            sources: Vec::new(),
            selection: None,
            gpu_streams: gpu
                .streams
                .iter()
                .map(|&(stream, calls, total_ns)| GpuStream {
                    stream: GpuStream::name_of(stream),
                    calls,
                    total_ns,
                })
                .collect(),
        }
    }

    /// The GPU times recorded (none without the `cuda` feature or a CUDA driver).
    fn gpu_figures(&self) -> GpuFigures {
        #[cfg(feature = "cuda")]
        if let Some(timer) = &self.gpu {
            return timer.figures();
        }
        GpuFigures::default()
    }

    /// spanprof's own cost: each span's, and the run's (none without calibrated costs).
    /// `indices`: each span's name index in `shards` (every thread's stats, by name index).
    fn overhead(
        &self,
        spans: &mut [SpanStats],
        indices: &[usize],
        shards: &[Vec<Option<Arc<NameStats>>>],
        readings: &[u64],
    ) -> Option<Overhead> {
        let costs = self.costs;
        if costs.span_ns <= 0.0 {
            return None;
        }
        // Each name's recorded units of cost (a span, or an entry of one entered several
        // times), its callbacks (open, enter, exit, close) and its timed callbacks.
        let work: Vec<NameWork> = spans
            .iter()
            .zip(indices)
            .map(|(span, &index)| {
                let left_out = span.sampled.as_ref().map_or(0, |s| s.skipped);
                let mut probes = ProbeSums::default();
                for shard in shards {
                    if let Some(p) = shard.get(index).and_then(|s| s.as_ref()?.cost.probe_sums()) {
                        probes.merge(&p);
                    }
                }
                NameWork {
                    units: span.created.max(span.calls) - left_out,
                    callbacks: (span.created + 2 * span.calls + span.instances)
                        .saturating_sub(4 * left_out),
                    probes,
                }
            })
            .collect();
        // Measured as the program ran where enough callbacks were timed, else the calibrated
        // cost of a span (`overhead::estimate`).
        let est = estimate(&work, costs.span_ns);
        let mut estimated = 0u64;
        for ((span, &own), (w, &unit_ns)) in spans
            .iter_mut()
            .zip(readings)
            .zip(work.iter().zip(&est.unit_ns))
        {
            let left_out = span.sampled.as_ref().map_or(0, |s| s.skipped);
            let ns = (w.units as f64 * unit_ns + left_out as f64 * costs.skip_ns) as u64 + own;
            span.overhead_ns = Some(ns);
            estimated += ns;
        }
        let process_cpu_ns = crate::samplers::cpu::process_cpu_ns().map(|(u, s)| u + s);
        let base = process_cpu_ns
            .filter(|&ns| ns > 0)
            .unwrap_or_else(|| self.clock.delta_ns(self.start_raw, self.clock.raw()));
        Some(Overhead {
            span_cost_ns: costs.span_ns,
            measured_span_ns: est.measured,
            measured_samples: est.samples,
            cpu_read_ns: costs.cpu_read_ns,
            cpu_every_entry_from_ns: costs.long_ns,
            cpu_sample_every: CPU_SAMPLE_EVERY,
            cpu_sample_gap_ns: costs.read_gap_ns,
            readings_ns: readings.iter().sum(),
            estimated_ns: estimated,
            process_cpu_ns,
            cpu_clock: self
                .available
                .contains(crate::switches::Resources::CPU)
                .then(crate::samplers::cpu::thread_cpu_clock)
                .flatten()
                .map(str::to_string),
            percent: if base == 0 {
                0.0
            } else {
                100.0 * estimated as f64 / base as f64
            },
        })
    }

    /// Every thread's metric cells, added per (metric, span name).
    fn metrics(&self, shards: &[Arc<Shard>], names: &[Arc<NameInfo>]) -> Vec<Metric> {
        let infos = self.events.all();
        let mut totals: BTreeMap<(u32, u32), MetricTotals> = BTreeMap::new();
        for shard in shards {
            for (metric, span, cell) in shard.metrics() {
                let t = totals.entry((metric, span)).or_default();
                t.records += cell.records.load(Relaxed);
                t.rejected += cell.rejected.load(Relaxed);
                t.int_sum = t.int_sum.saturating_add(cell.int_sum.load(Relaxed) as i64);
                t.float_sum += f64::from_bits(cell.float_sum.load(Relaxed));
                let min = f64::from_bits(cell.min.load(Relaxed));
                let max = f64::from_bits(cell.max.load(Relaxed));
                t.min = t.min.min(min);
                t.max = t.max.max(max);
                if min <= max {
                    // This cell set the gauge: its last value competes by time.
                    let at = self
                        .clock
                        .delta_ns(self.start_raw, cell.last_at.load(Relaxed));
                    if t.last.map_or(true, |(_, t_at)| at >= t_at) {
                        t.last = Some((f64::from_bits(cell.last.load(Relaxed)), at));
                    }
                }
                for (slot, part) in t.hists.iter_mut().enumerate() {
                    if let Some((h, exact)) = cell.histogram(slot) {
                        let (acc, acc_exact) =
                            part.get_or_insert_with(|| (new_histogram(), Exact::default()));
                        // Histograms of one layout always add (both resize themselves).
                        let _ = acc.add(&h);
                        acc_exact.merge(&exact);
                    }
                }
            }
        }
        let start_unix_ns = self.run_start_unix_ns();
        totals
            .into_iter()
            .filter_map(|((metric, span), t)| {
                let info = infos.get(metric as usize)?;
                let span_info = (span != NO_SPAN)
                    .then(|| names.get(span as usize))
                    .flatten();
                let value = match info.kind {
                    MetricKind::Counter | MetricKind::MonotonicCounter => {
                        MetricValue::Sum(SumValue {
                            integer: t.int_sum,
                            float: finite(t.float_sum),
                        })
                    }
                    MetricKind::Histogram => {
                        let [integers, floats] = t.hists.map(|part| {
                            part.map(|(h, e)| {
                                Stat::new(h, e.sum, e.min_or_zero(), e.max, e.clamped)
                            })
                        });
                        MetricValue::Histogram(Box::new(HistogramValue { integers, floats }))
                    }
                    MetricKind::Gauge => {
                        let (last, at) = t.last.unwrap_or((0.0, 0));
                        let set = t.min <= t.max;
                        MetricValue::Gauge(GaugeValue {
                            last,
                            last_unix_ns: start_unix_ns.saturating_add(at),
                            min: if set { t.min } else { 0.0 },
                            max: if set { t.max } else { 0.0 },
                        })
                    }
                };
                Some(Metric {
                    name: info.name.to_string(),
                    kind: info.kind,
                    unit: info.unit.map(str::to_string),
                    span: span_info.map(|i| i.name.to_string()),
                    span_target: span_info.map(|i| i.target.to_string()),
                    records: t.records,
                    rejected: t.rejected,
                    value,
                })
            })
            .collect()
    }

    fn run_start_unix_ns(&self) -> u64 {
        self.start_wall
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
    }

    /// (busy, self) of the one entry its owner (creating thread) completed of each open span
    /// the owner entered exactly once so far, per name index: recorded nowhere until the span
    /// closes or the owner enters it again (other threads' entries are recorded at their exit).
    fn pending_first_entries(&self, names: usize) -> Vec<Vec<(u64, u64)>> {
        let mut pending = vec![Vec::new(); names];
        self.table.for_each_open(|slot| {
            let Some(p) = pending.get_mut(usize::from(slot.name.load(Relaxed))) else {
                return;
            };
            if slot.entries.load(Acquire) == ENTRIES_ONE {
                let (busy, self_ns) = (slot.busy.load(Relaxed), slot.self_ns.load(Relaxed));
                // The owner moved on to its second entry meanwhile: recorded by then.
                if slot.entries.load(Acquire) == ENTRIES_ONE {
                    p.push((busy, self_ns));
                }
            }
        });
        pending
    }

    /// Time inside entries in progress per name index, from every thread's published stack.
    fn in_progress(&self, shards: &[Arc<Shard>], names: usize, now: u64) -> Vec<u64> {
        let mut in_progress = vec![0u64; names];
        for shard in shards {
            shard.entries_in_progress(|name, start| {
                if let Some(t) = in_progress.get_mut(name as usize) {
                    *t = t.saturating_add(self.clock.delta_ns(start, now));
                }
            });
        }
        in_progress
    }

    fn run_info(&self, now: u64) -> RunInfo {
        RunInfo {
            start_time: humantime::format_rfc3339_micros(self.start_wall).to_string(),
            start_unix_ns: self.run_start_unix_ns(),
            duration_ns: self.clock.delta_ns(self.start_raw, now),
            host: host_name(),
            pid: std::process::id(),
            command_line: std::env::args().collect(),
            crate_version: env!("CARGO_PKG_VERSION").to_string(),
            preset: self.settings.preset.to_string(),
            filter: self.settings.filter.clone(),
        }
    }

    /// What the samplers found (absent when none ran), with the process's memory now: the end
    /// point against which an analysis judges growth.
    fn resource_info(&self) -> Option<ResourceInfo> {
        let sampled = self.settings.sampled;
        if sampled.is_empty() {
            return None;
        }
        fn unavailable<T>(status: SourceStatus<T>) -> Option<String> {
            match status {
                SourceStatus::Unavailable(reason) => Some(reason),
                _ => None,
            }
        }
        let r = &self.readings;
        Some(ResourceInfo {
            interval_ms: self.settings.interval_ms,
            samplers: sampled.names().into_iter().map(String::from).collect(),
            heap_allocator: crate::alloc::installed(),
            gpu_devices: match r.gpu_status() {
                SourceStatus::Available(devices) => devices,
                _ => Vec::new(),
            },
            gpu_unavailable: unavailable(r.gpu_status()),
            cpu_energy_unavailable: unavailable(r.cpu_energy_status()),
            peak_rss_bytes: Readings::get(&r.peak_rss_bytes),
            peak_heap_bytes: Readings::get_i64(&r.peak_heap_bytes),
            sampler_cpu_ns: r.sampler_cpu_ns.load(Relaxed),
            grid_g_per_kwh: self.settings.grid_g_per_kwh,
            timeline: self.timeline.snapshot(),
            rss_bytes_at_end: crate::samplers::memory::rss_bytes(),
            heap_bytes_at_end: crate::alloc::global_heap_bytes(),
        })
    }
}

/// One metric in one span name, added over every thread's cell.
struct MetricTotals {
    records: u64,
    rejected: u64,
    int_sum: i64,
    float_sum: f64,
    /// Gauges: the last value and its time (ns since the start), extremes.
    last: Option<(f64, u64)>,
    min: f64,
    max: f64,
    /// Histograms: integers, floats (nano-units).
    hists: [Option<(Histogram<u64>, Exact)>; 2],
}

impl Default for MetricTotals {
    fn default() -> Self {
        Self {
            records: 0,
            rejected: 0,
            int_sum: 0,
            float_sum: 0.0,
            last: None,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            hists: [None, None],
        }
    }
}

/// A float the JSON profile can hold: a sum that overflowed is kept at the largest finite value
/// of its sign.
fn finite(x: f64) -> f64 {
    if x.is_nan() {
        0.0
    } else {
        x.clamp(f64::MIN, f64::MAX)
    }
}

/// Spans opened per name index, over every shard.
fn opened(shards: &[Vec<Option<Arc<NameStats>>>], names: usize) -> Vec<u64> {
    let mut opened = vec![0u64; names];
    for shard in shards {
        for (index, stats) in shard.iter().enumerate() {
            if let (Some(stats), Some(o)) = (stats, opened.get_mut(index)) {
                *o = o.saturating_add(stats.opened.load(Relaxed));
            }
        }
    }
    opened
}

/// The merged histograms of one span name (or call-tree node), per kind.
#[derive(Debug)]
pub(super) struct Merged {
    pub(super) hists: [Histogram<u64>; KINDS],
    pub(super) exact: [Exact; KINDS],
}

impl Merged {
    /// The union of some kinds (each kind is used by at most one union per statistic).
    pub(super) fn sum(&self, kinds: &[Kind]) -> Partial {
        let mut out = Partial {
            histogram: new_histogram(),
            exact: Exact::default(),
        };
        for &k in kinds {
            // Histograms with identical bounds always add.
            let _ = out.histogram.add(&self.hists[k as usize]);
            out.exact.merge(&self.exact[k as usize]);
        }
        out
    }
}

/// What a snapshot reads of the GPU times (feature `cuda`: `gpu::GpuTimer::figures`).
#[derive(Default)]
pub(super) struct GpuFigures {
    /// Per span name index: (GPU time per timed entry, untimed entries, abandoned pairs).
    pub(super) names: std::collections::HashMap<u32, (Stat, u64, u64)>,
    /// Per call-tree node id: (timed entries, GPU time ns).
    pub(super) nodes: std::collections::HashMap<u32, (u64, u64)>,
    /// Per stream handle: (timed entries, GPU time ns), by handle.
    pub(super) streams: Vec<(usize, u64, u64)>,
}

/// A histogram and its exact figures, on the way to a [`Stat`].
#[derive(Clone)]
pub(super) struct Partial {
    histogram: Histogram<u64>,
    exact: Exact,
}

impl Partial {
    /// An empty one.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(super) fn new() -> Self {
        Partial {
            histogram: new_histogram(),
            exact: Exact::default(),
        }
    }

    pub(super) fn record(&mut self, value: u64) {
        let clamped = value.min(HIGHEST_NS);
        record_n(&mut self.histogram, clamped, 1);
        self.exact.merge(&Exact {
            sum: value,
            min: value,
            max: value,
            clamped: u64::from(value > HIGHEST_NS),
        });
    }

    pub(super) fn stat(self) -> Stat {
        Stat::new(
            self.histogram,
            self.exact.sum,
            self.exact.min_or_zero(),
            self.exact.max,
            self.exact.clamped,
        )
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .unwrap_or_else(|| "unknown".to_string())
}

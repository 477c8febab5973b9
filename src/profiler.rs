//! The state shared by the layer, the guard and handles, and the merge of shards into a
//! [`Snapshot`].

use std::sync::atomic::{
    AtomicBool, AtomicU64,
    Ordering::{Acquire, Relaxed},
};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use std::time::{SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use tracing_subscriber::EnvFilter;

use crate::chrome::{Counter, CounterSource};
use crate::clock::Clock;
use crate::config::Config;
use crate::hist::{new_histogram, Exact, HIGHEST_NS, LOWEST_NS, SIGNIFICANT_DIGITS};
use crate::names::{Kind, NameInfo, Names, KINDS};
use crate::resources::{Growth, Plan, ResourceTotals};
use crate::samplers::gpu::GpuSource;
use crate::samplers::nvml::NvmlSource;
use crate::samplers::thread::{Sampler, SamplerConfig};
use crate::samplers::timeline::{Readings, SourceStatus, Timeline};
use crate::snapshot::{
    Dropped, HistogramSpec, ResourceInfo, RunInfo, Snapshot, SpanStats, Stat, SCHEMA,
    SCHEMA_VERSION,
};
use crate::store::{NameStats, Shards};
use crate::table::{SpanTable, ENTRIES_ONE};
use crate::PERF_TARGET;

static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(1);

/// Shared state of one profiler.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) id: u64,
    /// Recording on: false for the `off` preset and after the guard finished.
    pub(crate) active: AtomicBool,
    pub(crate) clock: Clock,
    pub(crate) filter: Option<EnvFilter>,
    pub(crate) table: SpanTable,
    pub(crate) names: Names,
    pub(crate) shards: Arc<Shards>,
    pub(crate) config: Config,
    start_raw: u64,
    start_wall: SystemTime,
    pub(crate) dropped_table_full: AtomicU64,
    pub(crate) dropped_too_many_names: AtomicU64,
    /// What the layer records besides time.
    pub(crate) plan: Plan,
    /// Latest resource readings, published by the sampler thread.
    pub(crate) readings: Arc<Readings>,
    pub(crate) timeline: Arc<Timeline>,
    sampler: Mutex<Option<Sampler>>,
    /// What the first finish wrote (the guard's drop, `finish`, or the Ctrl-C handler).
    pub(crate) finished: Mutex<Option<crate::guard::Outputs>>,
}

impl Inner {
    pub(crate) fn new(
        config: Config,
        clock: Clock,
        filter: Option<EnvFilter>,
        gpu_source: Option<Box<dyn GpuSource>>,
    ) -> Self {
        let start_raw = clock.raw();
        let origin = Instant::now();
        let samplers = config.samplers;
        let plan = Plan {
            memory: samplers.memory,
            heap: samplers.heap && crate::alloc::installed(),
            cpu: samplers.cpu && crate::samplers::cpu::SUPPORTED,
            gpu: samplers.gpu,
            energy: samplers.energy,
        };
        let readings = Arc::new(Readings::new());
        let timeline = Arc::new(Timeline::default());
        let sampler = if samplers.any() {
            start_sampler(&config, gpu_source, origin, &readings, &timeline)
        } else {
            None
        };
        if let (Some(session), true) = (&config.chrome, sampler.is_some()) {
            session.set_counter_source(Arc::new(TimelineCounters {
                timeline: timeline.clone(),
                origin,
            }));
        }
        Self {
            id: NEXT_INSTANCE.fetch_add(1, Relaxed),
            active: AtomicBool::new(config.preset.records()),
            clock,
            filter,
            table: SpanTable::new(),
            names: Names::new(),
            shards: Arc::new(Shards::default()),
            config,
            start_raw,
            start_wall: SystemTime::now(),
            dropped_table_full: AtomicU64::new(0),
            dropped_too_many_names: AtomicU64::new(0),
            plan,
            readings,
            timeline,
            sampler: Mutex::new(sampler),
            finished: Mutex::new(None),
        }
    }

    /// Nanoseconds since the profiler started: the timeline's time base.
    #[inline]
    pub(crate) fn t_ns(&self, raw: u64) -> u64 {
        self.clock.delta_ns(self.start_raw, raw)
    }

    /// Stops the sampler thread (waiting up to a second); later snapshots keep its samples.
    pub(crate) fn stop_sampler(&self) {
        let sampler = self
            .sampler
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(sampler) = sampler {
            if !sampler.stop(Duration::from_secs(1)) {
                tracing::warn!(target: PERF_TARGET, "spanprof's sampler thread did not stop within 1 s; left to finish alone");
            }
        }
    }

    fn resource_info(&self, timeline: Vec<crate::samplers::Sample>) -> Option<ResourceInfo> {
        let samplers = self.config.samplers;
        if !samplers.any() {
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
            interval_ms: self.config.interval.as_millis() as u64,
            samplers: samplers.names().into_iter().map(String::from).collect(),
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
            grid_g_per_kwh: self.config.grid_g_per_kwh,
            timeline,
        })
    }

    /// Drains one histogram of a thread's shard into the name's spill (rare: once per 65 535
    /// samples of that histogram).
    #[cold]
    #[inline(never)]
    pub(crate) fn drain(&self, stats: &NameStats, name: u32, kind: Kind) {
        let Some(info) = self.names.get(name) else {
            return;
        };
        let mut spill = info.spill.lock().unwrap_or_else(|e| e.into_inner());
        stats
            .hist(kind)
            .drain_into(NameInfo::spill_mut(&mut spill, kind));
    }

    /// Merges every shard into a snapshot.
    pub(crate) fn snapshot(&self) -> Snapshot {
        let now = self.clock.raw();
        let shards: Vec<_> = self.shards.all().iter().map(|s| s.names()).collect();
        let names = self.names.all();

        // Open spans: how many, time inside entries in progress, and the single completed
        // entry of spans entered once so far (recorded nowhere until they close or re-enter).
        let mut open = vec![OpenSpans::default(); names.len()];
        for entry in self.table.open_entries() {
            let Some(o) = open.get_mut(usize::from(entry.name.load(Relaxed))) else {
                continue;
            };
            o.count += 1;
            let at = entry.entered_at.load(Relaxed);
            if at != 0 {
                o.in_progress += self.clock.delta_ns(at, now);
            }
            if entry.entries.load(Acquire) == ENTRIES_ONE {
                let busy = entry.busy.load(Relaxed) + entry.shared_busy.load(Relaxed);
                let self_ns = entry.self_ns.load(Relaxed) + entry.shared_self.load(Relaxed);
                o.first_entries.push((busy, self_ns));
            }
        }

        let timeline = if self.config.samplers.any() {
            self.timeline.snapshot()
        } else {
            Vec::new()
        };
        // Growth over the second half of the run: a leak keeps growing; memory allocated
        // once at start-up (data, models) does not.
        // (With fewer than four samples there is no second half to speak of: since the start.)
        let mid = if timeline.len() >= 4 {
            timeline.get(timeline.len() / 2)
        } else {
            timeline.first()
        };
        let growth = Growth {
            heap: crate::alloc::global_heap_bytes()
                .zip(mid.and_then(|s| s.heap_bytes))
                .map(|(now, then)| now - then),
            rss: crate::samplers::memory::rss_bytes()
                .zip(mid.and_then(|s| s.rss_bytes))
                .map(|(now, then)| now as i64 - then as i64),
        };
        let mut spans = Vec::with_capacity(names.len());
        for (index, info) in names.iter().enumerate() {
            let spill = info.spill.lock().unwrap_or_else(|e| e.into_inner());
            let mut hists: [Histogram<u64>; KINDS] =
                std::array::from_fn(|k| spill[k].clone().unwrap_or_else(new_histogram));
            let mut exact = [Exact::default(); KINDS];
            let (mut items, mut bytes, mut flops) = (None::<u64>, None::<u64>, None::<u64>);
            let mut errors = 0;
            let mut any = false;
            let mut res = ResourceTotals::default();
            for shard in &shards {
                let Some(Some(stats)) = shard.get(index) else {
                    continue;
                };
                any = true;
                for k in 0..KINDS {
                    stats.hists[k].add_to(&mut hists[k]);
                    exact[k].merge(&stats.hists[k].exact());
                }
                let add = |acc: &mut Option<u64>, v: u64| {
                    if v != 0 {
                        *acc = Some(acc.unwrap_or(0).saturating_add(v));
                    }
                };
                add(&mut items, stats.items.load(Relaxed));
                add(&mut bytes, stats.bytes.load(Relaxed));
                add(&mut flops, stats.flops.load(Relaxed));
                errors += stats.errors.load(Relaxed);
                if let Some(r) = stats.res.get() {
                    res.add(r);
                }
            }
            drop(spill);
            let open = &open[index];
            if !any && open.count == 0 {
                continue;
            }
            let h = Merged { hists, exact };
            // Entries: multi-entry spans' entries, single-entry instances, and the first entry
            // of open spans entered once. Instances: closed ones of either kind.
            let mut entry_busy = h.sum(&[Kind::EntryBusy, Kind::SingleBusy]);
            let mut entry_self = h.sum(&[Kind::EntrySelf, Kind::SingleSelf]);
            for &(busy, self_ns) in &open.first_entries {
                entry_busy.record(busy);
                entry_self.record(self_ns);
            }
            let busy = h.sum(&[Kind::Busy, Kind::SingleBusy]);
            let self_time = h.sum(&[Kind::SelfTime, Kind::SingleSelf]);
            let wall = h.sum(&[Kind::Wall]);
            let closed = wall.histogram.len();
            spans.push(SpanStats {
                name: info.name.to_string(),
                target: info.target.to_string(),
                calls: entry_busy.histogram.len(),
                created: closed + open.count,
                instances: closed,
                open: open.count,
                in_progress_ns: open.in_progress,
                entry_busy: entry_busy.stat(),
                entry_self: entry_self.stat(),
                busy: busy.stat(),
                self_time: self_time.stat(),
                wall: wall.stat(),
                items,
                bytes,
                flops,
                errors,
                resources: if self.plan == Plan::default() {
                    None
                } else {
                    res.finish(
                        self.plan,
                        self.readings.gpus().len(),
                        self.config.grid_g_per_kwh,
                        growth,
                    )
                },
            });
        }

        let start_unix_ns = self
            .start_wall
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        Snapshot {
            schema: SCHEMA.to_string(),
            version: SCHEMA_VERSION,
            run: RunInfo {
                start_time: humantime::format_rfc3339_micros(self.start_wall).to_string(),
                start_unix_ns,
                duration_ns: self.clock.delta_ns(self.start_raw, now),
                host: host_name(),
                pid: std::process::id(),
                command_line: std::env::args().collect(),
                crate_version: env!("CARGO_PKG_VERSION").to_string(),
                preset: self.config.preset.as_str().to_string(),
                filter: self.config.filter.clone(),
            },
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
            },
            resources: self.resource_info(timeline),
        }
    }
}

/// Open spans of one name, found by scanning the span table.
#[derive(Debug, Clone, Default)]
struct OpenSpans {
    count: u64,
    in_progress: u64,
    /// (busy, self) of the one completed entry of spans entered exactly once so far.
    first_entries: Vec<(u64, u64)>,
}

/// The merged histograms of one span name, per kind.
struct Merged {
    hists: [Histogram<u64>; KINDS],
    exact: [Exact; KINDS],
}

impl Merged {
    /// The union of some kinds (each kind is used by at most one union per statistic).
    fn sum(&self, kinds: &[Kind]) -> Partial {
        let mut out = Partial {
            histogram: new_histogram(),
            exact: Exact::default(),
        };
        for &k in kinds {
            // UNWRAP-free: histograms with identical bounds always add.
            let _ = out.histogram.add(&self.hists[k as usize]);
            out.exact.merge(&self.exact[k as usize]);
        }
        out
    }
}

/// A histogram and its exact figures, on the way to a [`Stat`].
struct Partial {
    histogram: Histogram<u64>,
    exact: Exact,
}

impl Partial {
    fn record(&mut self, value: u64) {
        let clamped = value.min(HIGHEST_NS);
        self.histogram.saturating_record(clamped);
        self.exact.merge(&Exact {
            sum: value,
            min: value,
            max: value,
            clamped: u64::from(value > HIGHEST_NS),
        });
    }

    fn stat(self) -> Stat {
        Stat::new(
            self.histogram,
            self.exact.sum,
            self.exact.min_or_zero(),
            self.exact.max,
            self.exact.clamped,
        )
    }
}

fn start_sampler(
    config: &Config,
    gpu_source: Option<Box<dyn GpuSource>>,
    origin: Instant,
    readings: &Arc<Readings>,
    timeline: &Arc<Timeline>,
) -> Option<Sampler> {
    let samplers = config.samplers;
    let gpu = if samplers.gpu {
        match gpu_source.map_or_else(
            || NvmlSource::new().map(|s| Box::new(s) as Box<dyn GpuSource>),
            Ok,
        ) {
            Ok(source) => Some(source),
            Err(reason) => {
                tracing::warn!(target: PERF_TARGET, %reason, "spanprof: GPU not available");
                readings.set_gpus(SourceStatus::Unavailable(reason));
                None
            }
        }
    } else {
        None
    };
    let sampler_config = SamplerConfig {
        interval: config.interval,
        memory: samplers.memory || samplers.heap,
        cpu: samplers.cpu,
        gpu: samplers.gpu,
        energy: samplers.energy,
    };
    match Sampler::start(
        sampler_config,
        gpu,
        origin,
        readings.clone(),
        timeline.clone(),
    ) {
        Ok(sampler) => {
            // Spans opened from now on find a first reading to start from (bounded wait: GPU
            // discovery runs first on the sampler thread).
            let deadline = Instant::now() + Duration::from_secs(1);
            while readings.seq.load(std::sync::atomic::Ordering::Acquire) == 0
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(1));
            }
            Some(sampler)
        }
        Err(e) => {
            tracing::warn!(target: PERF_TARGET, error = %e, "spanprof: could not start the sampler thread; resource figures are off");
            None
        }
    }
}

/// The timeline as chrome counter tracks.
struct TimelineCounters {
    timeline: Arc<Timeline>,
    origin: Instant,
}

impl CounterSource for TimelineCounters {
    fn counters_between(&self, from: Instant, to: Instant) -> Vec<Counter> {
        const MIB: f64 = 1024.0 * 1024.0;
        let mut out = Vec::new();
        for s in self.timeline.snapshot() {
            let at = self.origin + Duration::from_nanos(s.t_ns);
            if at < from || at > to {
                continue;
            }
            let mut memory = Vec::new();
            if let Some(rss) = s.rss_bytes {
                memory.push(("rss_mib".to_string(), rss as f64 / MIB));
            }
            if let Some(heap) = s.heap_bytes {
                memory.push(("heap_mib".to_string(), heap as f64 / MIB));
            }
            if !memory.is_empty() {
                out.push(Counter {
                    at,
                    name: "memory".to_string(),
                    values: memory,
                });
            }
            if let Some(pct) = s.process_cpu_pct {
                out.push(Counter {
                    at,
                    name: "cpu".to_string(),
                    values: vec![("process_pct".to_string(), f64::from(pct))],
                });
            }
            for (dev, g) in s.gpus.iter().enumerate() {
                let mut values = Vec::new();
                if let Some(u) = g.utilization_pct {
                    values.push(("util_pct".to_string(), f64::from(u)));
                }
                if let Some(m) = g.memory_used_bytes {
                    values.push(("mem_mib".to_string(), m as f64 / MIB));
                }
                if let Some(p) = g.power_mw {
                    values.push(("power_w".to_string(), f64::from(p) / 1e3));
                }
                if !values.is_empty() {
                    out.push(Counter {
                        at,
                        name: format!("gpu{dev}"),
                        values,
                    });
                }
            }
        }
        out
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

//! Resource figures per span: what the layer copies when a span opens and closes (per
//! instance: RSS, GPU memory and utilisation, energy) and when it is entered and exited (per
//! entry: thread CPU time, heap), the per-name sums, and the arithmetic between them.
//!
//! Instance marks copy what the sampler thread published (atomics, no system call); only the
//! window's peak and mean come from the timeline, and only for spans that lived across a
//! sample. Entry marks read the thread's CPU clock (`getrusage`, a system call) and the
//! counting allocator's thread counters.

use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

use super::shards::bump;
use crate::alloc::HeapCounters;
use crate::profile::{CpuUse, GpuUse, HeapUse, MemoryUse, SpanResources};
use crate::samplers::{Readings, Timeline};
use crate::switches::Resources;

/// GPU devices followed per span (the first ones of the sampler's device list).
pub(crate) const MAX_GPUS: usize = 8;

/// A GPU device's published figures at one end of a span instance.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct GpuMark {
    pub(crate) mem: Option<u64>,
    pub(crate) util: Option<u64>,
    /// Extrapolated to the mark's time from the last sample's energy and power, mJ.
    pub(crate) energy_mj: Option<f64>,
}

/// Published readings at one end of a span instance, as a value (the recorder keeps them in a
/// [`MarkCell`]; tests build these).
#[cfg(test)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct InstanceMark {
    /// What was read.
    pub(crate) resources: Resources,
    /// Time of the mark, ns since the profiler started (the timeline's time base).
    pub(crate) t_ns: u64,
    /// Samples published by then.
    pub(crate) seq: u64,
    pub(crate) rss: Option<u64>,
    /// Process net heap (counting allocator).
    pub(crate) heap: Option<i64>,
    /// Extrapolated to the mark's time, µJ.
    pub(crate) cpu_energy_uj: Option<f64>,
    pub(crate) gpus: [GpuMark; MAX_GPUS],
    pub(crate) n_gpus: usize,
}

/// An [`InstanceMark`] kept beside a span's slot, in atomics: written by the thread that opens
/// the span, read by the one that closes it, with no lock (the slot's key is stored with
/// release after the mark is written, and loaded with acquire before it is read, which orders
/// them; no two threads write one mark at once). Which optional figures are present is a bit
/// set.
#[derive(Debug, Default)]
pub(crate) struct MarkCell {
    resources: AtomicU32,
    present: AtomicU32,
    t_ns: AtomicU64,
    seq: AtomicU64,
    rss: AtomicU64,
    heap: AtomicI64,
    /// `f64` bits.
    cpu_energy_uj: AtomicU64,
    n_gpus: AtomicU32,
    gpus: [GpuCell; MAX_GPUS],
    /// The span's last `items`, `bytes` and `flops` values (0: none): what its name's sums
    /// hold for it, so that a value recorded again replaces it there (`Recorder::opened`).
    /// Written only for spans whose callsite has one of those fields.
    pub(crate) throughput: [AtomicU64; 3],
}

/// A [`GpuMark`] in atomics (see [`MarkCell`]).
#[derive(Debug, Default)]
struct GpuCell {
    mem: AtomicU64,
    util: AtomicU64,
    /// `f64` bits.
    energy_mj: AtomicU64,
}

const HAS_RSS: u32 = 1;
const HAS_HEAP: u32 = 2;
const HAS_ENERGY: u32 = 4;
/// Device `dev`'s three bits (memory, utilisation, energy) start at `GPU_BITS + 3 × dev`.
const GPU_BITS: u32 = 3;
const _: () = assert!(GPU_BITS as usize + 3 * MAX_GPUS <= 32);

/// Stores an optional figure (`bits` of it) and adds its presence bit to `present`.
#[inline(always)]
fn put(cell: &AtomicU64, value: Option<u64>, bit: u32, present: &mut u32) {
    if let Some(v) = value {
        cell.store(v, Relaxed);
        *present |= bit;
    }
}

/// An optional figure stored by [`put`].
#[inline(always)]
fn get(cell: &AtomicU64, bit: u32, present: u32) -> Option<u64> {
    (present & bit != 0).then(|| cell.load(Relaxed))
}

impl MarkCell {
    /// Marks a span opening at `t_ns` with the sampler's latest readings of `resources`.
    pub(crate) fn update(&self, readings: &Readings, t_ns: u64, resources: Resources) {
        let base = BaseMark::read(readings, t_ns, resources);
        let mut present = 0;
        put(&self.rss, base.rss, HAS_RSS, &mut present);
        if let Some(heap) = base.heap {
            self.heap.store(heap, Relaxed);
            present |= HAS_HEAP;
        }
        let energy = base.cpu_energy_uj.map(f64::to_bits);
        put(&self.cpu_energy_uj, energy, HAS_ENERGY, &mut present);
        let mut n_gpus = 0;
        if resources.contains(Resources::GPU) {
            n_gpus = gpus_of(readings);
            for (dev, cell) in self.gpus.iter().enumerate().take(n_gpus) {
                let mark = gpu_mark(readings, dev, base.sampled, t_ns);
                let bit = 1 << (GPU_BITS + 3 * dev as u32);
                put(&cell.mem, mark.mem, bit, &mut present);
                put(&cell.util, mark.util, bit << 1, &mut present);
                let energy = mark.energy_mj.map(f64::to_bits);
                put(&cell.energy_mj, energy, bit << 2, &mut present);
            }
        }
        self.resources
            .store(u32::from(resources.to_byte()), Relaxed);
        self.t_ns.store(t_ns, Relaxed);
        self.seq.store(base.seq, Relaxed);
        self.n_gpus.store(n_gpus as u32, Relaxed);
        self.present.store(present, Relaxed);
    }

    /// The mark as written by [`MarkCell::update`] but its devices' readings, and the bit set
    /// of the figures present (for [`MarkCell::gpu`]).
    #[inline]
    fn opened(&self) -> (Opened, u32) {
        let present = self.present.load(Relaxed);
        let opened = Opened {
            resources: Resources::from_byte(self.resources.load(Relaxed) as u8),
            t_ns: self.t_ns.load(Relaxed),
            seq: self.seq.load(Relaxed),
            rss: get(&self.rss, HAS_RSS, present),
            heap: (present & HAS_HEAP != 0).then(|| self.heap.load(Relaxed)),
            cpu_energy_uj: get(&self.cpu_energy_uj, HAS_ENERGY, present).map(f64::from_bits),
            n_gpus: (self.n_gpus.load(Relaxed) as usize).min(MAX_GPUS),
        };
        (opened, present)
    }

    /// Device `dev`'s readings as written by [`MarkCell::update`] (`present`: from
    /// [`MarkCell::opened`]).
    #[inline]
    fn gpu(&self, dev: usize, present: u32) -> GpuMark {
        let Some(cell) = self.gpus.get(dev) else {
            return GpuMark::default();
        };
        let bit = 1 << (GPU_BITS + 3 * dev as u32);
        GpuMark {
            mem: get(&cell.mem, bit, present),
            util: get(&cell.util, bit << 1, present),
            energy_mj: get(&cell.energy_mj, bit << 2, present).map(f64::from_bits),
        }
    }

    /// The whole mark as written by [`MarkCell::update`].
    #[cfg(test)]
    pub(crate) fn load(&self) -> InstanceMark {
        let (o, present) = self.opened();
        let mut mark = InstanceMark {
            resources: o.resources,
            t_ns: o.t_ns,
            seq: o.seq,
            rss: o.rss,
            heap: o.heap,
            cpu_energy_uj: o.cpu_energy_uj,
            n_gpus: o.n_gpus,
            ..InstanceMark::default()
        };
        for (dev, out) in mark.gpus.iter_mut().enumerate().take(o.n_gpus) {
            *out = self.gpu(dev, present);
        }
        mark
    }
}

/// What an open mark holds but its devices' readings.
#[derive(Debug, Clone, Copy)]
struct Opened {
    resources: Resources,
    t_ns: u64,
    seq: u64,
    rss: Option<u64>,
    heap: Option<i64>,
    cpu_energy_uj: Option<f64>,
    n_gpus: usize,
}

/// Energy at `t_ns`: the last sample's counter plus its power for the time since.
fn extrapolate(
    counter: Option<u64>,
    power: Option<u64>,
    sampled_ns: u64,
    t_ns: u64,
    per_mw_ns: f64,
) -> Option<f64> {
    let counter = counter? as f64;
    let since = t_ns.saturating_sub(sampled_ns) as f64;
    Some(counter + power.map_or(0.0, |p| p as f64 * since * per_mw_ns))
}

#[cfg(test)]
impl InstanceMark {
    /// Makes this mark the published readings of `resources` at `t_ns`, in place: the GPU
    /// devices' fields only with GPU readings on (`n_gpus` says how many hold a reading).
    /// ([`MarkCell::update`] is the recorder's; this one checks it.)
    #[cfg(test)]
    pub(crate) fn update(&mut self, readings: &Readings, t_ns: u64, resources: Resources) {
        let base = BaseMark::read(readings, t_ns, resources);
        self.resources = resources;
        self.t_ns = t_ns;
        self.seq = base.seq;
        self.rss = base.rss;
        self.heap = base.heap;
        self.cpu_energy_uj = base.cpu_energy_uj;
        self.n_gpus = 0;
        if resources.contains(Resources::GPU) {
            for (dev, out) in self.gpus.iter_mut().enumerate().take(gpus_of(readings)) {
                *out = gpu_mark(readings, dev, base.sampled, t_ns);
            }
            self.n_gpus = gpus_of(readings);
        }
    }
}

/// The readings of an instance mark but its GPU devices'.
#[derive(Debug, Clone, Copy)]
struct BaseMark {
    seq: u64,
    /// When the sample was taken, ns (the extrapolations' start).
    sampled: u64,
    rss: Option<u64>,
    heap: Option<i64>,
    cpu_energy_uj: Option<f64>,
}

impl BaseMark {
    #[inline]
    fn read(readings: &Readings, t_ns: u64, resources: Resources) -> Self {
        let seq = readings.seq.load(std::sync::atomic::Ordering::Acquire);
        let sampled = readings.t_ns.load(Relaxed);
        let (rss, heap) = if resources.contains(Resources::MEMORY) {
            (
                Readings::get(&readings.rss_bytes),
                Readings::get_i64(&readings.heap_bytes),
            )
        } else {
            (None, None)
        };
        let cpu_energy_uj = if resources.contains(Resources::ENERGY) {
            // mW × ns = 1e-12 J = 1e-6 µJ.
            extrapolate(
                Readings::get(&readings.cpu_energy_uj),
                Readings::get(&readings.cpu_power_mw),
                sampled,
                t_ns,
                1e-6,
            )
        } else {
            None
        };
        BaseMark {
            seq,
            sampled,
            rss,
            heap,
            cpu_energy_uj,
        }
    }
}

/// GPU devices followed per span now.
fn gpus_of(readings: &Readings) -> usize {
    readings.gpus().len().min(MAX_GPUS)
}

/// Device `dev`'s published figures at `t_ns` (energy extrapolated from the sample at
/// `sampled`).
fn gpu_mark(readings: &Readings, dev: usize, sampled: u64, t_ns: u64) -> GpuMark {
    let Some(g) = readings.gpus().get(dev) else {
        return GpuMark::default();
    };
    GpuMark {
        mem: Readings::get(&g.mem_used_bytes),
        util: Readings::get(&g.util_pct),
        // mW × ns = 1e-9 mJ.
        energy_mj: extrapolate(
            Readings::get(&g.energy_mj),
            Readings::get(&g.power_mw),
            sampled,
            t_ns,
            1e-9,
        ),
    }
}

/// What one GPU device did during a span instance.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct GpuFigures {
    pub(crate) mem_delta: Option<i64>,
    pub(crate) mem_peak: Option<u64>,
    pub(crate) util_mean: Option<f64>,
    pub(crate) energy_mj: Option<f64>,
}

/// What a span instance used, open → close.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct InstanceFigures {
    pub(crate) wall_ns: u64,
    pub(crate) rss_delta: Option<i64>,
    pub(crate) rss_peak: Option<u64>,
    pub(crate) heap_peak: Option<i64>,
    pub(crate) cpu_energy_uj: Option<f64>,
    pub(crate) gpus: [GpuFigures; MAX_GPUS],
    pub(crate) n_gpus: usize,
}

fn delta(open: Option<u64>, close: Option<u64>) -> Option<i64> {
    Some(close? as i64 - open? as i64)
}

fn max3(a: Option<u64>, b: Option<u64>, c: Option<u64>) -> Option<u64> {
    a.max(b).max(c)
}

/// The figures of one instance. Peaks and the mean utilisation come from the timeline when a
/// sample was taken while the span was open; otherwise from the two marks.
#[cfg(test)]
pub(crate) fn instance_figures(
    open: &InstanceMark,
    close: &InstanceMark,
    timeline: &Timeline,
) -> InstanceFigures {
    let base = BaseMark {
        seq: close.seq,
        sampled: 0,
        rss: close.rss,
        heap: close.heap,
        cpu_energy_uj: close.cpu_energy_uj,
    };
    let opened = Opened {
        resources: open.resources,
        t_ns: open.t_ns,
        seq: open.seq,
        rss: open.rss,
        heap: open.heap,
        cpu_energy_uj: open.cpu_energy_uj,
        n_gpus: open.n_gpus,
    };
    let mut out = InstanceFigures::default();
    figures_into(
        &opened,
        |dev| open.gpus[dev],
        &base,
        close.t_ns,
        close.n_gpus,
        |dev| close.gpus[dev],
        timeline,
        &mut out,
    );
    out
}

/// The figures of the instance whose open mark is `open`, closing now, at `t_ns`, written
/// into `out` (they are large: no copy through a return value): the close readings are read
/// here (no close mark is made). Of `out.gpus`, the first `out.n_gpus` are written.
#[inline]
pub(crate) fn instance_figures_into(
    open: &MarkCell,
    readings: &Readings,
    t_ns: u64,
    timeline: &Timeline,
    out: &mut InstanceFigures,
) {
    let (opened, present) = open.opened();
    if !opened.resources.contains(Resources::GPU)
        && !opened.resources.contains(Resources::ENERGY)
        && readings.seq.load(std::sync::atomic::Ordering::Acquire) == opened.seq
    {
        // No sample published since the open (most short spans): the close's readings are
        // the open's, and nothing is extrapolated over the time between.
        out.wall_ns = t_ns.saturating_sub(opened.t_ns);
        out.rss_delta = opened.rss.map(|_| 0);
        out.rss_peak = opened.rss;
        out.heap_peak = opened.heap;
        out.cpu_energy_uj = None;
        out.n_gpus = 0;
        return;
    }
    let base = BaseMark::read(readings, t_ns, opened.resources);
    let n_gpus = if opened.resources.contains(Resources::GPU) {
        gpus_of(readings)
    } else {
        0
    };
    figures_into(
        &opened,
        |dev| open.gpu(dev, present),
        &base,
        t_ns,
        n_gpus,
        |dev| gpu_mark(readings, dev, base.sampled, t_ns),
        timeline,
        out,
    );
}

#[allow(clippy::too_many_arguments)]
fn figures_into(
    open: &Opened,
    open_gpu: impl Fn(usize) -> GpuMark,
    close: &BaseMark,
    t1: u64,
    close_gpus: usize,
    close_gpu: impl Fn(usize) -> GpuMark,
    timeline: &Timeline,
    out: &mut InstanceFigures,
) {
    let sampled_inside = close.seq > open.seq;
    let t0 = open.t_ns;
    let n_gpus = close_gpus.min(open.n_gpus);
    // Field by field: the devices' array is large, and only its first `n_gpus` are written.
    out.wall_ns = t1.saturating_sub(t0);
    out.rss_delta = delta(open.rss, close.rss);
    out.rss_peak = max3(
        open.rss,
        close.rss,
        sampled_inside
            .then(|| timeline.max_rss_between(t0, t1))
            .flatten(),
    );
    out.heap_peak = open.heap.max(close.heap).max(
        sampled_inside
            .then(|| timeline.max_heap_between(t0, t1))
            .flatten(),
    );
    out.cpu_energy_uj = match (open.cpu_energy_uj, close.cpu_energy_uj) {
        (Some(a), Some(b)) => Some((b - a).max(0.0)),
        _ => None,
    };
    out.n_gpus = n_gpus;
    for dev in 0..n_gpus {
        let (a, b) = (&open_gpu(dev), &close_gpu(dev));
        out.gpus[dev] = GpuFigures {
            mem_delta: delta(a.mem, b.mem),
            mem_peak: max3(
                a.mem,
                b.mem,
                sampled_inside
                    .then(|| timeline.max_gpu_mem_between(dev, t0, t1))
                    .flatten(),
            ),
            util_mean: if sampled_inside {
                timeline.mean_gpu_util_between(dev, t0, t1)
            } else {
                b.util.map(|u| u as f64)
            },
            energy_mj: match (a.energy_mj, b.energy_mj) {
                (Some(x), Some(y)) => Some((y - x).max(0.0)),
                _ => None,
            },
        };
    }
}

/// Readings at an enter, kept on the thread's stack beside the frame.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct EntryMark {
    /// Thread CPU time, ns.
    pub(crate) cpu: Option<u64>,
    pub(crate) heap: Option<HeapCounters>,
    /// Net heap retained by child spans entered meanwhile (for self retention).
    pub(crate) child_net: i64,
    /// spanprof's own time in the bracket around the CPU clock's read (`Costs::split`), ns:
    /// the part of it after the read is on the CPU clock, not in the span's busy time.
    pub(crate) bracket_ns: u64,
}

impl EntryMark {
    /// The same readings as this mark, now (a span's exit, for its enter mark).
    #[inline]
    pub(crate) fn read_again(&self) -> Self {
        Self::read_some(self.cpu.is_some(), self.heap.is_some())
    }

    /// Reads the thread's CPU time (`cpu`, a system call) and heap counters (`heap`).
    #[inline]
    pub(crate) fn read_some(cpu: bool, heap: bool) -> Self {
        EntryMark {
            cpu: cpu.then(crate::samplers::cpu::thread_cpu_ns),
            heap: if heap { HeapCounters::thread() } else { None },
            child_net: 0,
            bracket_ns: 0,
        }
    }
}

/// What one entry used, enter → exit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct EntryFigures {
    pub(crate) cpu: Option<u64>,
    pub(crate) heap: Option<HeapCounters>,
    /// Net heap retained by this entry, children excluded.
    pub(crate) self_net: i64,
}

/// The figures of one entry, given its marks at enter and exit.
pub(crate) fn entry_figures(enter: &EntryMark, exit: &EntryMark) -> EntryFigures {
    let cpu = match (enter.cpu, exit.cpu) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a)),
        _ => None,
    };
    let heap = match (enter.heap, exit.heap) {
        (Some(a), Some(b)) => Some(b.since(a)),
        _ => None,
    };
    EntryFigures {
        cpu,
        heap,
        self_net: heap.map_or(0, |h| h.net_bytes() - enter.child_net),
    }
}

/// Per-device sums of one span name on one thread.
#[derive(Debug, Default)]
pub(crate) struct GpuStats {
    instances: AtomicU64,
    mem_delta: AtomicI64,
    mem_peak: AtomicU64,
    /// Σ mean utilisation % × wall µs, over instances with a utilisation.
    util_weighted: AtomicU64,
    util_wall_us: AtomicU64,
    energy_uj: AtomicU64,
    energy_instances: AtomicU64,
}

/// Resource sums of one span name on one thread (single writer, like the histograms).
#[derive(Debug, Default)]
pub(crate) struct ResourceStats {
    cpu_entries: AtomicU64,
    cpu_ns: AtomicU64,
    cpu_busy_ns: AtomicU64,
    heap_entries: AtomicU64,
    heap_allocated: AtomicU64,
    heap_allocs: AtomicU64,
    heap_freed: AtomicU64,
    heap_net: AtomicI64,
    heap_self_net: AtomicI64,
    heap_retaining: AtomicU64,
    rss_instances: AtomicU64,
    rss_delta: AtomicI64,
    rss_growing: AtomicU64,
    rss_peak: AtomicU64,
    heap_peak: AtomicI64,
    heap_peaks: AtomicU64,
    cpu_energy_instances: AtomicU64,
    cpu_energy_uj: AtomicU64,
    gpus: [GpuStats; MAX_GPUS],
}

fn bump_i64(counter: &AtomicI64, by: i64) {
    counter.store(counter.load(Relaxed).wrapping_add(by), Relaxed);
}

fn raise(counter: &AtomicU64, to: u64) {
    if to > counter.load(Relaxed) {
        counter.store(to, Relaxed);
    }
}

impl ResourceStats {
    pub(crate) fn add_entry(&self, f: &EntryFigures, busy_ns: u64) {
        if let Some(cpu) = f.cpu {
            bump(&self.cpu_entries, 1);
            bump(&self.cpu_ns, cpu);
            bump(&self.cpu_busy_ns, busy_ns);
        }
        if let Some(h) = f.heap {
            bump(&self.heap_entries, 1);
            bump(&self.heap_allocated, h.allocated);
            bump(&self.heap_allocs, h.allocs);
            bump(&self.heap_freed, h.freed);
            bump_i64(&self.heap_net, h.net_bytes());
            bump_i64(&self.heap_self_net, f.self_net);
            if f.self_net > 0 {
                bump(&self.heap_retaining, 1);
            }
        }
    }

    pub(crate) fn add_instance(&self, f: &InstanceFigures) {
        if let Some(d) = f.rss_delta {
            bump(&self.rss_instances, 1);
            bump_i64(&self.rss_delta, d);
            if d > 0 {
                bump(&self.rss_growing, 1);
            }
        }
        if let Some(p) = f.rss_peak {
            raise(&self.rss_peak, p);
        }
        if let Some(p) = f.heap_peak {
            bump(&self.heap_peaks, 1);
            if p > self.heap_peak.load(Relaxed) {
                self.heap_peak.store(p, Relaxed);
            }
        }
        if let Some(e) = f.cpu_energy_uj {
            bump(&self.cpu_energy_instances, 1);
            bump(&self.cpu_energy_uj, e.round() as u64);
        }
        for (stats, g) in self.gpus.iter().zip(&f.gpus[..f.n_gpus]) {
            bump(&stats.instances, 1);
            if let Some(d) = g.mem_delta {
                bump_i64(&stats.mem_delta, d);
            }
            if let Some(p) = g.mem_peak {
                raise(&stats.mem_peak, p);
            }
            if let Some(u) = g.util_mean {
                let wall_us = f.wall_ns / 1_000;
                bump(&stats.util_weighted, (u * wall_us as f64).round() as u64);
                bump(&stats.util_wall_us, wall_us);
            }
            if let Some(e) = g.energy_mj {
                bump(&stats.energy_instances, 1);
                bump(&stats.energy_uj, (e * 1_000.0).round() as u64);
            }
        }
    }
}

/// Sums over threads, for a snapshot.
#[derive(Debug, Default, Clone)]
pub(crate) struct ResourceTotals {
    cpu: [u64; 3],
    heap: [u64; 4],
    heap_net: i64,
    heap_self_net: i64,
    heap_retaining: u64,
    rss: [u64; 2],
    rss_delta: i64,
    rss_peak: u64,
    heap_peak: Option<i64>,
    cpu_energy: [u64; 2],
    gpus: Vec<([u64; 5], i64, u64)>,
}

impl ResourceTotals {
    pub(crate) fn add(&mut self, s: &ResourceStats) {
        let l = |a: &AtomicU64| a.load(Relaxed);
        for (acc, v) in
            self.cpu
                .iter_mut()
                .zip([l(&s.cpu_entries), l(&s.cpu_ns), l(&s.cpu_busy_ns)])
        {
            *acc += v;
        }
        for (acc, v) in self.heap.iter_mut().zip([
            l(&s.heap_entries),
            l(&s.heap_allocated),
            l(&s.heap_allocs),
            l(&s.heap_freed),
        ]) {
            *acc += v;
        }
        self.heap_net += s.heap_net.load(Relaxed);
        self.heap_self_net += s.heap_self_net.load(Relaxed);
        self.rss[0] += l(&s.rss_instances);
        self.rss[1] += l(&s.rss_growing);
        self.rss_delta += s.rss_delta.load(Relaxed);
        self.rss_peak = self.rss_peak.max(l(&s.rss_peak));
        if l(&s.heap_peaks) > 0 {
            self.heap_peak = self.heap_peak.max(Some(s.heap_peak.load(Relaxed)));
        }
        self.cpu_energy[0] += l(&s.cpu_energy_instances);
        self.cpu_energy[1] += l(&s.cpu_energy_uj);
        self.gpus.resize(MAX_GPUS, ([0; 5], 0, 0));
        for (acc, g) in self.gpus.iter_mut().zip(&s.gpus) {
            for (a, v) in acc.0.iter_mut().zip([
                l(&g.instances),
                l(&g.util_weighted),
                l(&g.util_wall_us),
                l(&g.energy_uj),
                l(&g.energy_instances),
            ]) {
                *a += v;
            }
            acc.1 += g.mem_delta.load(Relaxed);
            acc.2 = acc.2.max(l(&g.mem_peak));
        }
        self.heap_retaining += l(&s.heap_retaining);
    }

    /// The profile's form, for the resources recorded (`recorded`) and `n_gpus` devices.
    pub(crate) fn finish(
        &self,
        recorded: Resources,
        n_gpus: usize,
        grid_g_per_kwh: Option<f64>,
    ) -> Option<SpanResources> {
        let cpu = (recorded.contains(Resources::CPU) && self.cpu[0] > 0).then(|| CpuUse {
            entries: self.cpu[0],
            cpu_ns: self.cpu[1],
            busy_ns: self.cpu[2],
            utilization_pct: if self.cpu[2] == 0 {
                0.0
            } else {
                100.0 * self.cpu[1] as f64 / self.cpu[2] as f64
            },
            skipped_entries: 0,
        });
        let heap = (recorded.contains(Resources::HEAP) && self.heap[0] > 0).then(|| HeapUse {
            entries: self.heap[0],
            allocated_bytes: self.heap[1],
            allocations: self.heap[2],
            freed_bytes: self.heap[3],
            net_retained_bytes: self.heap_net,
            self_retained_bytes: self.heap_self_net,
            retaining_entries: self.heap_retaining,
        });
        let memory = (recorded.contains(Resources::MEMORY) && self.rss[0] > 0).then(|| MemoryUse {
            instances: self.rss[0],
            rss_delta_bytes: self.rss_delta,
            growing_instances: self.rss[1],
            peak_rss_bytes: self.rss_peak,
            peak_heap_bytes: self.heap_peak,
        });
        let cpu_energy_j = (recorded.contains(Resources::ENERGY) && self.cpu_energy[0] > 0)
            .then(|| self.cpu_energy[1] as f64 / 1e6);
        let gpus: Vec<GpuUse> = if recorded.contains(Resources::GPU) {
            self.gpus
                .iter()
                .take(n_gpus)
                .enumerate()
                .filter(|(_, g)| g.0[0] > 0)
                .map(|(dev, (c, mem_delta, peak))| GpuUse {
                    device: dev as u32,
                    instances: c[0],
                    memory_delta_bytes: *mem_delta,
                    peak_memory_bytes: *peak,
                    mean_utilization_pct: (c[2] > 0).then(|| c[1] as f64 / c[2] as f64),
                    energy_j: (c[4] > 0).then(|| c[3] as f64 / 1e6),
                })
                .collect()
        } else {
            Vec::new()
        };
        let gpu_j: f64 = gpus.iter().filter_map(|g| g.energy_j).sum();
        let any_energy = cpu_energy_j.is_some() || gpus.iter().any(|g| g.energy_j.is_some());
        let energy_j = any_energy.then(|| cpu_energy_j.unwrap_or(0.0) + gpu_j);
        let co2e_g = energy_j.zip(grid_g_per_kwh).map(|(j, g)| j / 3.6e6 * g);
        let r = SpanResources {
            cpu,
            heap,
            memory,
            cpu_energy_j,
            gpus,
            energy_j,
            co2e_g,
        };
        (r != SpanResources::default()).then_some(r)
    }
}

/// Resource sums attached to a name's stats, made on first use.
pub(crate) type ResourceSlot = OnceLock<Box<ResourceStats>>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{GpuSample, Sample};

    fn sample(seq: u64, t_ns: u64, rss: u64, gpu_mem: u64, util: u32) -> Sample {
        Sample {
            t_ns,
            seq,
            rss_bytes: Some(rss),
            heap_bytes: None,
            process_cpu_pct: None,
            cpu_energy_uj: None,
            gpus: vec![GpuSample {
                utilization_pct: Some(util),
                memory_used_bytes: Some(gpu_mem),
                ..GpuSample::default()
            }],
        }
    }

    fn mark(
        t_ns: u64,
        seq: u64,
        rss: u64,
        mem: u64,
        util: u64,
        energy_mj: f64,
        cpu_uj: f64,
    ) -> InstanceMark {
        let mut m = InstanceMark {
            t_ns,
            seq,
            rss: Some(rss),
            cpu_energy_uj: Some(cpu_uj),
            n_gpus: 1,
            ..InstanceMark::default()
        };
        m.gpus[0] = GpuMark {
            mem: Some(mem),
            util: Some(util),
            energy_mj: Some(energy_mj),
        };
        m
    }

    #[test]
    fn a_mark_cell_keeps_what_a_mark_holds() {
        use crate::profile::GpuDevice;
        use crate::samplers::SourceStatus;
        let readings = Readings::new();
        let device = |index| GpuDevice {
            index,
            name: "fake".into(),
            uuid: None,
            memory_total_bytes: None,
            power_limit_mw: None,
        };
        readings.set_gpus(SourceStatus::Available(vec![
            device(0),
            device(1),
            device(2),
        ]));
        readings.seq.store(4, Relaxed);
        readings.t_ns.store(1_000, Relaxed);
        readings.rss_bytes.store(1 << 30, Relaxed);
        // A negative net heap (freed more than it counted allocating) stays negative.
        readings.heap_bytes.store(-5, Relaxed);
        readings.cpu_energy_uj.store(9_000, Relaxed);
        readings.cpu_power_mw.store(20_000, Relaxed);
        // Device 0 everything, device 1 its utilisation only, device 2 nothing.
        readings.gpus()[0].publish(&crate::profile::GpuSample {
            utilization_pct: Some(70),
            memory_used_bytes: Some(3 << 30),
            power_mw: Some(250_000),
            energy_mj: Some(40_000),
            ..crate::profile::GpuSample::default()
        });
        readings.gpus()[1].publish(&crate::profile::GpuSample {
            utilization_pct: Some(5),
            ..crate::profile::GpuSample::default()
        });
        for resources in [Resources::ALL, Resources::MEMORY, Resources::NONE] {
            let mut expected = InstanceMark::default();
            expected.update(&readings, 3_000, resources);
            let cell = MarkCell::default();
            // Written over a mark with every figure present: nothing of it is left.
            cell.update(&readings, 1, Resources::ALL);
            cell.update(&readings, 3_000, resources);
            assert_eq!(cell.load(), expected, "{resources:?}");
        }
        let mut all = InstanceMark::default();
        all.update(&readings, 3_000, Resources::ALL);
        assert_eq!((all.n_gpus, all.heap, all.gpus[1].mem), (3, Some(-5), None));
        assert_eq!(all.gpus[1].util, Some(5));
    }

    #[test]
    fn a_close_with_no_sample_since_its_open_has_the_figures_of_the_whole_computation() {
        let timeline = Timeline::new(64, 16);
        let readings = Readings::new();
        readings.seq.store(7, Relaxed);
        readings.t_ns.store(1_000, Relaxed);
        readings.rss_bytes.store(1 << 30, Relaxed);
        readings.cpu_energy_uj.store(9_000, Relaxed);
        readings.cpu_power_mw.store(20_000, Relaxed);
        // i64::MIN: no counting allocator.
        for heap in [i64::MIN, -5, 1 << 20] {
            readings.heap_bytes.store(heap, Relaxed);
            for resources in [
                Resources::MEMORY,
                Resources::DETAILED,
                Resources::MEMORY | Resources::ENERGY,
                Resources::ALL,
                Resources::ENERGY,
            ] {
                let cell = MarkCell::default();
                cell.update(&readings, 3_000, resources);
                let mut open = InstanceMark::default();
                open.update(&readings, 3_000, resources);
                let mut close = InstanceMark::default();
                close.update(&readings, 8_000, resources);
                let mut fast = InstanceFigures::default();
                instance_figures_into(&cell, &readings, 8_000, &timeline, &mut fast);
                let whole = instance_figures(&open, &close, &timeline);
                assert_eq!(fast, whole, "{resources:?}, heap {heap}");
                assert_eq!(fast.wall_ns, 5_000);
                if resources.contains(Resources::MEMORY) {
                    assert_eq!((fast.rss_delta, fast.rss_peak), (Some(0), Some(1 << 30)));
                }
                if resources.contains(Resources::ENERGY) {
                    // 20 W over the 5 µs between: extrapolated, not the open's reading again.
                    assert_eq!(fast.cpu_energy_uj, Some(100.0), "{resources:?}");
                }
            }
        }
    }

    #[test]
    fn extrapolates_energy_from_the_last_sample() {
        // 150 W for 20 ms after a sample at 1.000 s with 5 000 mJ: 5 000 + 3 000 mJ.
        let e = extrapolate(
            Some(5_000),
            Some(150_000),
            1_000_000_000,
            1_020_000_000,
            1e-9,
        );
        assert!((e.unwrap() - 8_000.0).abs() < 1e-6);
        assert_eq!(extrapolate(None, Some(1), 0, 10, 1e-9), None);
        // Without a power reading the counter stands.
        assert_eq!(extrapolate(Some(7), None, 0, 10, 1e-9), Some(7.0));
    }

    #[test]
    fn instance_figures_with_samples_inside_the_window() {
        let timeline = Timeline::new(64, 16);
        for (i, (rss, mem, util)) in [(100, 10, 20), (180, 40, 60), (150, 30, 100)]
            .into_iter()
            .enumerate()
        {
            timeline.push(sample(i as u64, 1_000 + i as u64 * 1_000, rss, mem, util));
        }
        // Open at 1 500 (after sample 0), close at 3 500 (after sample 2): samples 1, 2 inside.
        let open = mark(1_500, 1, 100, 10, 20, 1_000.0, 10.0);
        let close = mark(3_500, 3, 120, 25, 100, 1_450.5, 70.0);
        let f = instance_figures(&open, &close, &timeline);
        assert_eq!(f.wall_ns, 2_000);
        assert_eq!(f.rss_delta, Some(20));
        assert_eq!(f.rss_peak, Some(180));
        assert_eq!(f.cpu_energy_uj, Some(60.0));
        let g = f.gpus[0];
        assert_eq!(g.mem_delta, Some(15));
        assert_eq!(g.mem_peak, Some(40));
        assert_eq!(g.util_mean, Some(80.0)); // mean of 60 and 100
        assert_eq!(g.energy_mj, Some(450.5));
    }

    #[test]
    fn instance_figures_between_samples_use_the_marks() {
        let timeline = Timeline::new(64, 16);
        timeline.push(sample(0, 0, 999, 999, 99));
        let open = mark(10, 1, 100, 50, 30, 0.0, 0.0);
        let close = mark(20, 1, 90, 70, 40, 2.0, 1.0);
        let f = instance_figures(&open, &close, &timeline);
        assert_eq!((f.rss_delta, f.rss_peak), (Some(-10), Some(100)));
        assert_eq!(
            (f.gpus[0].mem_delta, f.gpus[0].mem_peak),
            (Some(20), Some(70))
        );
        assert_eq!(
            f.gpus[0].util_mean,
            Some(40.0),
            "the latest published utilisation"
        );
    }

    #[test]
    fn entry_figures_and_self_retention() {
        let enter = EntryMark {
            cpu: Some(1_500),
            heap: Some(HeapCounters {
                allocated: 100,
                freed: 50,
                allocs: 3,
            }),
            child_net: 300,
            bracket_ns: 0,
        };
        let exit = EntryMark {
            cpu: Some(4_700),
            heap: Some(HeapCounters {
                allocated: 1_100,
                freed: 450,
                allocs: 8,
            }),
            child_net: 0,
            bracket_ns: 0,
        };
        let f = entry_figures(&enter, &exit);
        assert_eq!(f.cpu, Some(3_200));
        assert_eq!(
            f.heap,
            Some(HeapCounters {
                allocated: 1_000,
                freed: 400,
                allocs: 5
            })
        );
        assert_eq!(f.self_net, 600 - 300);
    }

    fn totals_after(entries: &[(i64, u64)]) -> ResourceTotals {
        let stats = ResourceStats::default();
        for &(self_net, allocated) in entries {
            stats.add_entry(
                &EntryFigures {
                    cpu: Some(800),
                    heap: Some(HeapCounters {
                        allocated,
                        freed: (allocated as i64 - self_net) as u64,
                        allocs: 2,
                    }),
                    self_net,
                },
                1_000,
            );
        }
        let mut t = ResourceTotals::default();
        t.add(&stats);
        t
    }

    #[test]
    fn heap_and_cpu_sums_over_entries() {
        let t = totals_after(&vec![(8 * 1024, 10_000); 40]);
        let r = t.finish(Resources::DETAILED, 0, None).unwrap();
        let cpu = r.cpu.unwrap();
        assert_eq!((cpu.entries, cpu.cpu_ns, cpu.busy_ns), (40, 32_000, 40_000));
        assert!((cpu.utilization_pct - 80.0).abs() < 1e-9);
        let heap = r.heap.unwrap();
        assert_eq!(
            (heap.entries, heap.allocated_bytes, heap.allocations),
            (40, 400_000, 80)
        );
        assert_eq!(heap.self_retained_bytes, 40 * 8 * 1024);
        assert_eq!(heap.retaining_entries, 40);
        // Switched off: not reported even though summed.
        assert_eq!(t.finish(Resources::MEMORY, 0, None), None);
    }

    #[test]
    fn gpu_sums_and_energy_per_instance() {
        let stats = ResourceStats::default();
        let mut f = InstanceFigures {
            wall_ns: 2_000_000,
            n_gpus: 1,
            ..InstanceFigures::default()
        };
        f.gpus[0] = GpuFigures {
            mem_delta: Some(1 << 20),
            mem_peak: Some(5 << 20),
            util_mean: Some(50.0),
            energy_mj: Some(300.0),
        };
        stats.add_instance(&f);
        f.wall_ns = 6_000_000;
        f.gpus[0].util_mean = Some(90.0);
        stats.add_instance(&f);
        let mut t = ResourceTotals::default();
        t.add(&stats);
        let r = t
            .finish(Resources::GPU | Resources::ENERGY, 1, Some(400.0))
            .unwrap();
        let g = &r.gpus[0];
        assert_eq!(
            (g.instances, g.memory_delta_bytes, g.peak_memory_bytes),
            (2, 2 << 20, 5 << 20)
        );
        // Time-weighted: (50 × 2 ms + 90 × 6 ms) / 8 ms = 80 %.
        assert_eq!(g.mean_utilization_pct, Some(80.0));
        assert_eq!(g.energy_j, Some(0.6));
        assert_eq!(r.energy_j, Some(0.6));
        // 0.6 J = 1/6e6 kWh at 400 g/kWh.
        assert!((r.co2e_g.unwrap() - 0.6 / 3.6e6 * 400.0).abs() < 1e-15);
    }
}

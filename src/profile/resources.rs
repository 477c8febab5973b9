//! What spans used besides time, and what the resource samplers recorded: plain data.

use serde::{Deserialize, Serialize};

use super::combine::{self, rule};

/// What spans of one name used besides time.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SpanResources {
    /// Thread CPU time during entries (`detailed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuUse>,
    /// Heap allocated and retained during entries, with [`CountingAlloc`](crate::CountingAlloc) installed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heap: Option<HeapUse>,
    /// Resident memory over instances (`detailed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryUse>,
    /// CPU package energy over instances, J (`full`, where RAPL is readable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_energy_j: Option<f64>,
    /// Per GPU device, over instances (`full`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<GpuUse>,
    /// CPU package plus GPU energy, J.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_j: Option<f64>,
    /// Grams of CO2-equivalent for `energy_j` at the configured grid intensity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub co2e_g: Option<f64>,
}

combine::rules! { SpanResources {
    cpu: opt,
    heap: opt,
    memory: opt,
    cpu_energy_j: sum,
    gpus: keyed(|g| g.device),
    energy_j: sum,
    co2e_g: sum,
} }

/// Thread CPU time of a span name's entries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CpuUse {
    /// Entries measured.
    pub entries: u64,
    /// Thread CPU time (user + system, `CLOCK_THREAD_CPUTIME_ID`), ns. Linux splits user and
    /// system time from scheduler ticks, too coarse per span: the split is not kept.
    pub cpu_ns: u64,
    /// Busy (wall) time of the same entries, ns; for a sample (`skipped_entries` > 0), the
    /// name's mean busy time over all its entries × `entries` (see `skipped_entries`).
    pub busy_ns: u64,
    /// CPU time ÷ busy time, %: low for spans that sleep or wait.
    pub utilization_pct: f64,
    /// Entries whose CPU time was not read (schema 4; 0 when every entry was measured):
    /// names with short entries get it read for 1 entry in
    /// [`Overhead::cpu_sample_every`](crate::profile::Overhead::cpu_sample_every) (or
    /// [`Overhead::cpu_sample_gap_ns`](crate::profile::Overhead::cpu_sample_gap_ns) apart).
    /// `cpu_ns` is then the sampled entries' CPU time and `busy_ns` their number times the
    /// mean busy time of all the name's entries, so the utilisation is the estimate for all of
    /// them (mean CPU time per sampled entry over mean busy time per entry; its error is the
    /// spread of the sampled entries' CPU time over √`entries`). Not the sampled entries' own
    /// busy time: where the CPU clock's reads switch threads out, an entry read is one whose
    /// enter's read took the switch, then ran on a fresh time slice, and read 100% on a shared
    /// CPU where its name ran at 50%.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped_entries: u64,
}

// The utilisation from the sums (a sample's stays the estimate for all entries).
combine::rules! { CpuUse {
    entries: sum,
    cpu_ns: sum,
    busy_ns: sum,
    utilization_pct: derived(|c: &Self| rule::percent(c.cpu_ns, c.busy_ns)),
    skipped_entries: sum,
} }

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl CpuUse {
    /// Whether some entries' CPU time was not read: the figures are a sample.
    pub fn sampled(&self) -> bool {
        self.skipped_entries > 0
    }

    /// Whether any entry's CPU time was read (`false`: every entry was sampled out, and the
    /// figures say nothing of the name's CPU use).
    pub fn any_read(&self) -> bool {
        self.entries > 0
    }

    /// A name none of whose `skipped` entries got a CPU read.
    pub(crate) fn none_read(skipped: u64) -> Self {
        Self {
            entries: 0,
            cpu_ns: 0,
            busy_ns: 0,
            utilization_pct: 0.0,
            skipped_entries: skipped,
        }
    }

    /// For a sample: `busy_ns` from the mean busy time of all the name's entries (`entry_busy`),
    /// and the utilisation from it (at most 100%: a sample's CPU time over its share of busy
    /// time).
    pub(crate) fn estimate_busy(&mut self, entry_busy: &crate::profile::Stat) {
        if entry_busy.count == 0 {
            return;
        }
        let mean = entry_busy.total_ns as f64 / entry_busy.count as f64;
        self.busy_ns = ((mean * self.entries as f64) as u64).max(self.cpu_ns);
        self.utilization_pct = if self.busy_ns == 0 {
            0.0
        } else {
            100.0 * self.cpu_ns as f64 / self.busy_ns as f64
        };
    }
}

/// Heap use of a span name's entries (counting allocator).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct HeapUse {
    /// Entries measured.
    pub entries: u64,
    /// Bytes allocated.
    pub allocated_bytes: u64,
    /// Allocations.
    pub allocations: u64,
    /// Bytes freed.
    pub freed_bytes: u64,
    /// Allocated minus freed, children included.
    pub net_retained_bytes: i64,
    /// Allocated minus freed, child spans excluded.
    pub self_retained_bytes: i64,
    /// Entries that ended with more heap (children excluded) than they started with.
    pub retaining_entries: u64,
}

combine::rules! { HeapUse {
    entries: sum,
    allocated_bytes: sum,
    allocations: sum,
    freed_bytes: sum,
    net_retained_bytes: sum,
    self_retained_bytes: sum,
    retaining_entries: sum,
} }

/// Resident memory over a span name's instances (sampled RSS).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct MemoryUse {
    /// Instances measured.
    pub instances: u64,
    /// Sum of RSS at close minus RSS at open, bytes.
    pub rss_delta_bytes: i64,
    /// Instances whose RSS grew.
    pub growing_instances: u64,
    /// Highest RSS seen while an instance was open, bytes.
    pub peak_rss_bytes: u64,
    /// Highest process heap (counting allocator) seen while an instance was open, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_heap_bytes: Option<i64>,
}

combine::rules! { MemoryUse {
    instances: sum,
    rss_delta_bytes: sum,
    growing_instances: sum,
    peak_rss_bytes: max,
    peak_heap_bytes: max,
} }

/// One GPU device over a span name's instances.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct GpuUse {
    /// Position in the profile's device list.
    pub device: u32,
    /// Instances measured.
    pub instances: u64,
    /// Sum of device memory at close minus at open, bytes.
    pub memory_delta_bytes: i64,
    /// Highest device memory seen while an instance was open, bytes.
    pub peak_memory_bytes: u64,
    /// Utilisation over the instances' windows, weighted by their wall time, %.
    pub mean_utilization_pct: Option<f64>,
    /// Energy over the instances' windows, J.
    pub energy_j: Option<f64>,
}

// The utilisation is weighted by the instances measured (the wall-time weights it was
// recorded with are not kept).
combine::rules! { GpuUse {
    device: first,
    instances: sum,
    memory_delta_bytes: sum,
    peak_memory_bytes: max,
    mean_utilization_pct: mean(instances),
    energy_j: sum,
} }

/// What the resource samplers found and recorded (`detailed` and `full` presets).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ResourceInfo {
    /// Sampling interval, ms.
    pub interval_ms: u64,
    /// Samplers that ran: `memory`, `heap`, `cpu`, `gpu`, `energy`.
    pub samplers: Vec<String>,
    /// Whether [`CountingAlloc`](crate::CountingAlloc) is the global allocator.
    pub heap_allocator: bool,
    /// GPU devices found (empty when none).
    pub gpu_devices: Vec<GpuDevice>,
    /// Why GPU figures are absent, when they are (`null` when sampled or not requested).
    pub gpu_unavailable: Option<String>,
    /// Why CPU package energy is absent, when it is.
    pub cpu_energy_unavailable: Option<String>,
    /// Highest RSS seen, bytes.
    pub peak_rss_bytes: Option<u64>,
    /// Highest net heap seen (counting allocator), bytes.
    pub peak_heap_bytes: Option<i64>,
    /// CPU time the sampler thread used, ns.
    pub sampler_cpu_ns: u64,
    /// Grid intensity for CO2e, g/kWh.
    pub grid_g_per_kwh: Option<f64>,
    /// The samples: 2048 over the whole run, their stride doubling, plus the last 512 (see the
    /// guide's `docs/resources-and-gpu.md`, "The sampler thread").
    pub timeline: Vec<Sample>,
    /// RSS when the snapshot was taken, bytes (schema v3; absent in older profiles).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_bytes_at_end: Option<u64>,
    /// Net heap (counting allocator) when the snapshot was taken, bytes (schema v3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heap_bytes_at_end: Option<i64>,
}

// The samplers of every run together: the timelines stay with each run's source (a merge has
// none; `Snapshot::since` keeps the interval's samples), readings at the end are one
// process's.
combine::rules! { ResourceInfo {
    interval_ms: first,
    samplers: union,
    heap_allocator: all,
    gpu_devices: first,
    gpu_unavailable: first,
    cpu_energy_unavailable: first,
    peak_rss_bytes: max,
    peak_heap_bytes: max,
    sampler_cpu_ns: sum,
    grid_g_per_kwh: first,
    timeline: custom(|_| Vec::new()),
    rss_bytes_at_end: end,
    heap_bytes_at_end: end,
} }

/// A GPU device found by a [`GpuSource`](crate::gpu::GpuSource).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuDevice {
    /// The backend's index of the device (NVML's index: the order of PCI bus IDs, which is not
    /// always CUDA's order). [`GpuSource::sample`](crate::gpu::GpuSource::sample) takes this
    /// index.
    pub index: u32,
    /// The product name, e.g. `"NVIDIA H100 80GB HBM3"` (`"unknown"` when the backend cannot
    /// tell).
    pub name: String,
    /// The globally unique identifier, e.g. `"GPU-3b5c…"`, where available.
    pub uuid: Option<String>,
    /// Installed device memory in bytes, where available.
    pub memory_total_bytes: Option<u64>,
    /// The power management limit in milliwatts, where available.
    pub power_limit_mw: Option<u32>,
}

/// One reading of one GPU device. `None` = this reading is not available (the call failed or
/// the backend lacks it); such fields are left out of the JSON.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuSample {
    /// Percent of the last sample period (1/6 s to 1 s, device dependent) during which one or
    /// more kernels ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilization_pct: Option<u32>,
    /// Device memory in use by all processes, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_used_bytes: Option<u64>,
    /// Power draw of the board in milliwatts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_mw: Option<u32>,
    /// Cumulative energy in millijoules. From a backend: the device's counter (it counts from
    /// driver load, so only differences are meaningful). In a profile's timeline: energy since
    /// the sampler started, from the counter or, for devices without one, the integral of power
    /// over time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_mj: Option<u64>,
    /// Core temperature in °C.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature_c: Option<u32>,
    /// Current streaming multiprocessor clock in MHz.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_clock_mhz: Option<u32>,
    /// This process's device memory in bytes, where the backend offers it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_memory_bytes: Option<u64>,
}

/// One reading of the process's resources in the timeline.
///
/// Figures that were not sampled (sampler switched off, reader unavailable) are `None` and left
/// out of the JSON.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// When it was taken, in nanoseconds since profiling started.
    pub t_ns: u64,
    /// Its position in the sampler's sequence (0 for the first sample). Gaps show where the
    /// timeline thinned out old samples.
    pub seq: u64,
    /// Resident set size, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
    /// Net heap bytes (allocated minus freed since start) by
    /// [`CountingAlloc`](crate::CountingAlloc), to within
    /// [`HeapCounters::PROCESS_GRANULARITY_BYTES`](crate::alloc::HeapCounters::PROCESS_GRANULARITY_BYTES)
    /// per thread; `None` unless it is the global allocator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heap_bytes: Option<i64>,
    /// Process CPU time (user + system, all threads) over the last interval, as a percentage of
    /// one core (so up to 100 × cores). `None` for the first sample.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_cpu_pct: Option<f32>,
    /// CPU package energy since the sampler started, in microjoules (RAPL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_energy_uj: Option<u64>,
    /// One reading per GPU device, in the order of the profile's device list.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<GpuSample>,
}

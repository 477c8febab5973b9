//! The plain-data model every output reads: a [`Snapshot`] of a profile, and its JSON form.
//!
//! The JSON profile is this model serialised with `serde_json`; its schema is documented in the
//! README ("JSON profile"). Histograms are stored whole, as HdrHistogram V2 + deflate, base64,
//! so profiles merge and compare exactly and any HdrHistogram implementation can read them.

use std::path::Path;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The `schema` field of every profile.
pub const SCHEMA: &str = "spanprof.profile";
/// The version of the profile schema this crate writes and reads.
pub const SCHEMA_VERSION: u32 = 2;

/// A profile: everything recorded up to one moment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// Schema version, [`SCHEMA_VERSION`] when written by this crate.
    pub version: u32,
    /// What ran, where and when.
    pub run: RunInfo,
    /// How the histograms are bounded and encoded.
    pub histograms: HistogramSpec,
    /// One entry per span name (name + target), in no particular order.
    pub spans: Vec<SpanStats>,
    /// What could not be recorded.
    pub dropped: Dropped,
    /// Resource samplers (absent at the `basic` preset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceInfo>,
}

/// Metadata of the profiled run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunInfo {
    /// When profiling started, RFC 3339 (UTC).
    pub start_time: String,
    /// When profiling started, nanoseconds since the Unix epoch.
    pub start_unix_ns: u64,
    /// Time from the start of profiling to this snapshot, ns.
    pub duration_ns: u64,
    /// Host name of the machine.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// The program's command line.
    pub command_line: Vec<String>,
    /// Version of spanprof that wrote the profile.
    pub crate_version: String,
    /// The preset in effect (`basic`, `detailed`, `full`).
    pub preset: String,
    /// The span filter in effect (`SPANPROF_FILTER` or the builder's), if any.
    pub filter: Option<String>,
}

/// Bounds and encoding of the histograms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistogramSpec {
    /// Unit of every recorded value: `ns`.
    pub unit: String,
    /// Significant decimal digits kept.
    pub significant_digits: u8,
    /// Lowest discernible value.
    pub lowest: u64,
    /// Highest trackable value; larger values are recorded as this and counted in `clamped`.
    pub highest: u64,
    /// `hdrhistogram-v2-deflate-base64`.
    pub encoding: String,
}

/// What spanprof had to leave out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dropped {
    /// Spans not profiled because the open-span table was full.
    pub spans_table_full: u64,
    /// Spans not profiled because [`MAX_SPAN_NAMES`](crate::MAX_SPAN_NAMES) names were in use.
    pub spans_too_many_names: u64,
}

/// Statistics of one span name.
///
/// Two kinds of sample: an **entry** is one enter→exit interval of a span (the code ran once;
/// an async span is entered at every poll, a long-lived span at every use); an **instance** is a
/// span from creation to close. For a span entered once (a plain `#[instrument]` function) the
/// two are the same.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpanStats {
    /// Span name.
    pub name: String,
    /// Span target (module path unless set).
    pub target: String,
    /// Completed entries (enter→exit intervals): how many times the code ran.
    pub calls: u64,
    /// Instances created.
    pub created: u64,
    /// Instances closed.
    pub instances: u64,
    /// Instances open when the snapshot was taken.
    pub open: u64,
    /// Time inside entries still in progress when the snapshot was taken, ns (not part of the
    /// histograms).
    pub in_progress_ns: u64,
    /// Busy time of each entry.
    pub entry_busy: Stat,
    /// Self time of each entry: busy time minus time in child spans entered during it on the
    /// same thread.
    pub entry_self: Stat,
    /// Busy time of each closed instance: the sum of its entries.
    pub busy: Stat,
    /// Self time of each closed instance: the sum of its entries' self time.
    #[serde(rename = "self")]
    pub self_time: Stat,
    /// Wall time of each closed instance, creation to close.
    pub wall: Stat,
    /// Sum of the `items` field of the spans, if any span had one.
    pub items: Option<u64>,
    /// Sum of the `bytes` field, if any.
    pub bytes: Option<u64>,
    /// Sum of the `flops` field, if any.
    pub flops: Option<u64>,
    /// `error`-level events inside spans of this name.
    pub errors: u64,
    /// Resources used by spans of this name (`detailed` and `full` presets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<SpanResources>,
}

/// What spans of one name used besides time.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SpanResources {
    /// Thread CPU time during entries (`detailed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuUse>,
    /// Heap allocated and retained during entries, with [`crate::CountingAlloc`] installed.
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
    /// Set when calls keep retaining memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leak: Option<LeakSuspicion>,
}

/// Thread CPU time of a span name's entries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuUse {
    /// Entries measured.
    pub entries: u64,
    /// Thread CPU time (user + system, `CLOCK_THREAD_CPUTIME_ID`), ns. Linux splits user and
    /// system time from scheduler ticks, too coarse per span: the split is not kept.
    pub cpu_ns: u64,
    /// Busy (wall) time of the same entries, ns.
    pub busy_ns: u64,
    /// CPU time ÷ busy time, %: low for spans that sleep or wait.
    pub utilization_pct: f64,
}

/// Heap use of a span name's entries (counting allocator).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

/// Resident memory over a span name's instances (sampled RSS).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

/// One GPU device over a span name's instances.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

/// Why a span name is suspected of leaking, with the figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeakSuspicion {
    /// `heap` (counting allocator, children excluded) or `rss`.
    pub source: String,
    /// Bytes kept in all.
    pub retained_bytes: i64,
    /// Bytes kept per call.
    pub per_call_bytes: f64,
    /// Share of calls that kept memory, 0..=1.
    pub share_of_calls: f64,
    /// One line for the report.
    pub evidence: String,
}

/// What the resource samplers found and recorded (`detailed` and `full` presets).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResourceInfo {
    /// Sampling interval, ms.
    pub interval_ms: u64,
    /// Samplers that ran: `memory`, `heap`, `cpu`, `gpu`, `energy`.
    pub samplers: Vec<String>,
    /// Whether [`crate::CountingAlloc`] is the global allocator.
    pub heap_allocator: bool,
    /// GPU devices found (empty when none).
    pub gpu_devices: Vec<crate::samplers::gpu::GpuDevice>,
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
    /// The samples (bounded: see the README).
    pub timeline: Vec<crate::samplers::Sample>,
}

impl SpanStats {
    /// Rate of a throughput sum over the busy time of this span's entries (per second).
    pub fn rate(&self, sum: Option<u64>) -> Option<f64> {
        let sum = sum?;
        (self.entry_busy.total_ns > 0).then(|| sum as f64 * 1e9 / self.entry_busy.total_ns as f64)
    }
}

/// Statistics of one histogram.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stat {
    /// Samples.
    pub count: u64,
    /// Exact sum of the samples, ns.
    pub total_ns: u64,
    /// Exact smallest sample, ns (0 when empty).
    pub min_ns: u64,
    /// Exact largest sample, ns (0 when empty).
    pub max_ns: u64,
    /// Exact mean, ns.
    pub mean_ns: f64,
    /// Standard deviation, from the histogram, ns.
    pub stddev_ns: f64,
    /// Median, ns (histogram precision).
    pub p50_ns: u64,
    /// 90th percentile, ns.
    pub p90_ns: u64,
    /// 99th percentile, ns.
    pub p99_ns: u64,
    /// 99.9th percentile, ns.
    pub p999_ns: u64,
    /// Samples above the histogram's highest value, recorded as that value.
    pub clamped: u64,
    /// The full histogram.
    #[serde(with = "hdr_base64")]
    pub histogram: Histogram<u64>,
}

impl Stat {
    /// Builds the statistics of a histogram and its exact figures.
    pub(crate) fn new(
        histogram: Histogram<u64>,
        total_ns: u64,
        min_ns: u64,
        max_ns: u64,
        clamped: u64,
    ) -> Self {
        let count = histogram.len();
        let clamp = |v: u64| v.clamp(min_ns, max_ns.max(min_ns));
        let q = |q: f64| {
            if count == 0 {
                0
            } else {
                clamp(histogram.value_at_quantile(q))
            }
        };
        Stat {
            count,
            total_ns,
            min_ns,
            max_ns,
            mean_ns: if count == 0 {
                0.0
            } else {
                total_ns as f64 / count as f64
            },
            stddev_ns: if count == 0 { 0.0 } else { histogram.stdev() },
            p50_ns: q(0.5),
            p90_ns: q(0.9),
            p99_ns: q(0.99),
            p999_ns: q(0.999),
            clamped,
            histogram,
        }
    }
}

impl Snapshot {
    /// Serialises the profile as pretty-printed JSON.
    pub fn to_json(&self) -> String {
        // UNWRAP: the model holds only strings, integers, finite floats and options.
        serde_json::to_string_pretty(self).expect("snapshot serialises")
    }

    /// Parses a profile. `origin` names the input in errors (a path, `stdin`, ...).
    pub fn from_json(json: &str, origin: &str) -> Result<Self> {
        let snapshot: Snapshot = serde_json::from_str(json).map_err(|e| Error::InvalidProfile {
            origin: origin.to_string(),
            message: e.to_string(),
        })?;
        if snapshot.schema != SCHEMA {
            return Err(Error::InvalidProfile {
                origin: origin.to_string(),
                message: format!("schema is {:?}, expected {SCHEMA:?}", snapshot.schema),
            });
        }
        if snapshot.version > SCHEMA_VERSION {
            return Err(Error::InvalidProfile {
                origin: origin.to_string(),
                message: format!(
                    "schema version {} is newer than this spanprof reads ({SCHEMA_VERSION})",
                    snapshot.version
                ),
            });
        }
        Ok(snapshot)
    }

    /// Writes the profile to a file (creating parent directories).
    pub fn write_json(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let io = |source| Error::Io {
            action: "writing profile",
            path: path.to_path_buf(),
            source,
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        std::fs::write(path, self.to_json()).map_err(io)
    }

    /// Reads a profile from a file.
    pub fn read_json(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let json = std::fs::read_to_string(path).map_err(|source| Error::Io {
            action: "reading profile",
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_json(&json, &path.display().to_string())
    }

    /// The statistics of a span name (first match on name; any target).
    pub fn span(&self, name: &str) -> Option<&SpanStats> {
        self.spans.iter().find(|s| s.name == name)
    }
}

/// HdrHistogram V2 + deflate, base64 (standard alphabet, padded).
mod hdr_base64 {
    use base64::Engine;
    use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
    use hdrhistogram::Histogram;
    use serde::de::Error as _;
    use serde::Deserialize;

    pub(super) fn serialize<S: serde::Serializer>(
        h: &Histogram<u64>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let mut bytes = Vec::new();
        V2DeflateSerializer::new()
            .serialize(h, &mut bytes)
            .map_err(|e| serde::ser::Error::custom(format!("encoding histogram: {e:?}")))?;
        serde::Serializer::serialize_str(
            s,
            &base64::engine::general_purpose::STANDARD.encode(bytes),
        )
    }

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Histogram<u64>, D::Error> {
        let text = String::deserialize(d)?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text.as_bytes())
            .map_err(|e| D::Error::custom(format!("histogram is not base64: {e}")))?;
        Deserializer::new()
            .deserialize(&mut bytes.as_slice())
            .map_err(|e| D::Error::custom(format!("histogram does not decode: {e:?}")))
    }
}

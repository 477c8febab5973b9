//! spanprof turns the `tracing` spans a program already has into a profiler.
//!
//! Add [`ProfileLayer`] to a `tracing_subscriber::registry()`, put `#[instrument]` on the
//! functions you care about, and get HDR histograms of busy, self and wall time per span name,
//! a console report and a JSON profile.
//!
//! ```
//! use tracing_subscriber::prelude::*;
//!
//! let (layer, guard) = spanprof::ProfileLayer::builder()
//!     .with_report(spanprof::ReportTarget::Off) // default: stderr when the guard drops
//!     .build()?;
//! let subscriber = tracing_subscriber::registry()
//!     .with(tracing_subscriber::EnvFilter::new("info")) // your log filter, untouched
//!     .with(layer);
//!
//! #[tracing::instrument]
//! fn step(i: u64) -> u64 {
//!     (0..1000).map(|x| x * i).sum()
//! }
//!
//! tracing::subscriber::with_default(subscriber, || {
//!     for i in 0..100 {
//!         step(i);
//!     }
//! });
//! let snapshot = guard.snapshot(); // any time; recording goes on
//! let step = snapshot.span("step").unwrap();
//! assert_eq!(step.calls, 100);
//! println!("{}", spanprof::Report::new(&snapshot));
//! drop(guard); // prints the report (if configured) and writes the outputs
//! # Ok::<(), spanprof::Error>(())
//! ```
//!
//! # What is measured
//!
//! Per span name (name + target), spanprof keeps five histograms: per **entry** (one
//! enter→exit interval) the busy and self time, and per **instance** (creation to close) the
//! busy time (sum of its entries), self time and wall time. Self time is busy time minus the
//! busy time of child spans entered on the same thread meanwhile. A span re-entered while it is
//! already entered on the same thread is counted once, for its outermost entry.
//!
//! Histograms keep 2 significant digits (values within 1/128) from 1 ns to one hour
//! ([`HIGHEST_NS`]); longer values are recorded as one hour and counted as clamped. Counts,
//! totals, minima and maxima are exact. Memory: at most 63 KiB per (span name × thread that
//! recorded it); 27 KiB for spans entered once per instance.
//!
//! # Resources per span
//!
//! At the `detailed` preset ([`Preset::Detailed`], or `SPANPROF=detailed`) spans also carry
//! RSS, heap (with [`CountingAlloc`] as the global allocator) and thread CPU time; at `full`,
//! NVML GPU memory, utilisation and energy ([`NvmlSource`], or any [`GpuSource`]) and CPU
//! package energy. A background thread samples them; the layer copies the published readings.
//! [`Samplers`] switches each one alone. Spans whose calls keep retaining memory are flagged.
//!
//! ```no_run
//! #[global_allocator]
//! static ALLOC: spanprof::CountingAlloc = spanprof::CountingAlloc::system();
//! ```
//!
//! # Chrome / Perfetto traces
//!
//! [`Builder::with_chrome`] also writes Chrome trace files of the steps a
//! [`chrome::Schedule`] selects (`torch.profiler.schedule` semantics), through tracing-chrome,
//! with resource counters as counter tracks; open them in <https://ui.perfetto.dev>. See
//! [`chrome`].
//!
//! # Targets
//!
//! [`PERF_TARGET`] (`spanprof::perf`) and [`PROFILING_TARGET`] (`spanprof::profiling`) are the
//! targets of spanprof's own messages, and targets you can put your own spans on to switch them
//! with a filter (the DEBUG_PERFORMANCE / DEBUG_PROFILING switches of other profilers):
//! `SPANPROF_FILTER=spanprof::perf=info` profiles only those.
#![deny(missing_docs)]
#![warn(missing_debug_implementations, rust_2018_idioms, unreachable_pub)]
// Unsafe code is denied everywhere but in the counting allocator (`GlobalAlloc` is an unsafe
// trait) and in the few libc calls of the samplers; each has a SAFETY comment.
#![deny(unsafe_code)]

#[allow(unsafe_code)]
mod alloc;
pub mod chrome;
mod clock;
mod config;
mod error;
mod guard;
mod hist;
mod layer;
mod names;
mod profiler;
mod report;
mod resources;
pub mod samplers;
mod snapshot;
mod store;
mod table;

pub use alloc::{CountingAlloc, HeapCounters};
pub use clock::{Clock, MockClock};
pub use config::{
    Builder, Preset, ReportTarget, Samplers, ENV_FILTER, ENV_GRID, ENV_INTERVAL_MS, ENV_OUT,
    ENV_PRESET, ENV_REPORT, ENV_SAMPLERS, ENV_TOP,
};
pub use error::{Error, Result};
pub use guard::{Outputs, ProfileGuard, ProfileHandle, PROFILE_FILE};
pub use hist::{HIGHEST_NS, LOWEST_NS, SIGNIFICANT_DIGITS};
pub use layer::ProfileLayer;
pub use names::MAX_SPAN_NAMES;
pub use report::{format_bytes, format_duration, format_si, Report};
pub use samplers::gpu::{GpuDevice, GpuSample, GpuSource, ScriptedSource};
pub use samplers::nvml::NvmlSource;
pub use snapshot::{
    CpuUse, Dropped, GpuUse, HeapUse, HistogramSpec, LeakSuspicion, MemoryUse, ResourceInfo,
    RunInfo, Snapshot, SpanResources, SpanStats, Stat, SCHEMA, SCHEMA_VERSION,
};

/// Target for lightweight performance spans and spanprof's summaries and warnings.
pub const PERF_TARGET: &str = "spanprof::perf";
/// Target for detailed profiling spans and spanprof's notes on where outputs went.
pub const PROFILING_TARGET: &str = "spanprof::profiling";

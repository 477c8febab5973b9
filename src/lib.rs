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
//! println!("{}", spanprof::output::Table::new().to_string(&snapshot));
//! drop(guard); // prints the report (if configured) and writes the outputs
//! # Ok::<(), spanprof::Error>(())
//! ```
//!
//! # The parts
//!
//! - [`ProfileLayer`], its [`Builder`] and [`Preset`]s: what is recorded. The
//!   `SPANPROF*` environment variables ([`builder`]) override the builder.
//! - [`ProfileGuard`] ends the session and writes the outputs; [`ProfileHandle`] reads a
//!   running profile from anywhere and switches [`Resources`] while it runs.
//! - [`profile`]: the model every output reads, a plain-data [`Snapshot`] that stands alone
//!   (JSON, versioned).
//! - [`analysis`]: findings computed from a snapshot (leak suspicion).
//! - [`output`]: the formats (console [`Table`](output::Table), [`Json`](output::Json), and the
//!   call tree's [`TreeView`](output::TreeView), [`Folded`](output::Folded), flamegraph and
//!   pprof) behind one interface, [`output::Format`].
//! - [`Every`] ([`Builder::with_every`]): a summary of each window logged as the program runs,
//!   periodic outputs and pushes; [`ProfileHandle::interval_snapshot`]: the statistics of an
//!   interval.
//! - [`gpu`]: GPU sources (NVML, scripted); [`chrome`]: Chrome / Perfetto traces;
//!   [`alloc`]: the counting allocator; [`clock`]: the time source, and a mock for tests.
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
//! ([`profile::HIGHEST_NS`]); longer values are recorded as one hour and counted as clamped.
//! Counts, totals, minima and maxima are exact. Memory: at most 72 KiB per (span name × thread
//! that recorded it), eight histograms of 9 KiB made on first use; 18 to 27 KiB for spans
//! entered once per instance.
//!
//! # Resources per span
//!
//! At the `detailed` preset ([`Preset::Detailed`], or `SPANPROF=detailed`) spans also carry
//! RSS, heap (with [`CountingAlloc`] as the global allocator) and thread CPU time; at `full`,
//! NVML GPU memory, utilisation and energy ([`gpu::NvmlSource`], or any [`gpu::GpuSource`])
//! and CPU package energy. A background thread samples them; the layer copies the published
//! readings. [`Resources`] switches each one alone, also while the program runs
//! ([`ProfileHandle::set_resources`]). Spans whose calls keep retaining memory are flagged
//! ([`analysis::leaks`]).
//!
//! # Metrics from events
//!
//! Event fields named `counter.<name>`, `monotonic_counter.<name>`, `histogram.<name>` or
//! `gauge.<name>` (the `tracing-opentelemetry` convention) are recorded per span name into
//! [`Snapshot::metrics`] ([`profile::metrics`]), and shown in the report:
//!
//! ```
//! use spanprof::profile::{MetricKind, MetricValue};
//! use tracing_subscriber::prelude::*;
//!
//! let (layer, guard) = spanprof::ProfileLayer::builder()
//!     .with_report(spanprof::ReportTarget::Off)
//!     .build()?;
//! tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
//!     tracing::info_span!("train_step").in_scope(|| {
//!         tracing::info!(monotonic_counter.samples = 64u64, histogram.loss = 0.42);
//!     });
//! });
//! let snapshot = guard.snapshot();
//! let samples = snapshot.metrics_named("samples").next().unwrap();
//! assert_eq!(samples.kind, MetricKind::MonotonicCounter);
//! assert_eq!(samples.span.as_deref(), Some("train_step"));
//! assert!(matches!(&samples.value, MetricValue::Sum(s) if s.integer == 64));
//! # Ok::<(), spanprof::Error>(())
//! ```
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
//!
//! # Feature flags
//!
//! - `chrome` (default): Chrome / Perfetto traces through `tracing-chrome` ([`chrome`],
//!   [`Builder::with_chrome`]).
//! - `nvml` (default): GPU readings through NVML (`nvml-wrapper`, which loads
//!   `libnvidia-ml.so.1` at run time: no build-time dependency on a driver).
//! - `signals` (default): [`ProfileHandle::install_signal_handler`]: SIGINT, SIGTERM and
//!   SIGHUP (Ctrl-C and closing the console on Windows, through the `ctrlc` crate, which only
//!   Windows builds use) write the outputs before the process exits. `ctrlc` is its former
//!   name, kept as an alias, deprecated.
//! - `csv` (default): `report.csv` and `metrics.csv` in the output directory (`output::Csv`,
//!   `output::CsvMetrics`, the `csv` crate).
//! - `prometheus` (default): `metrics.prom` in the output directory, the Prometheus text
//!   exposition (`output::Prometheus`, the `prometheus` crate's encoder).
//! - `flamegraph` (default): `flamegraph.svg` of the call tree (`output::Flamegraph`, inferno).
//! - `pprof` (default): `profile.pb.gz`, the call tree as a pprof profile (`output::Pprof`,
//!   prost).
//! - `http`: a Prometheus `/metrics` endpoint on a thread of its own (`tiny_http`), started by
//!   `Builder::with_metrics_addr` or `SPANPROF_METRICS_ADDR`.
//! - `otlp`: pushes the profile's metrics to an OpenTelemetry collector over OTLP/HTTP (the
//!   `otlp` module), configured by the standard `OTEL_*` variables or `Builder::with_otlp`.
//!   Needs Rust 1.85.
//! - `cli`: the `spanprof` command, which reports, compares, merges and analyses saved
//!   profiles.
//!
//! Without default features spanprof records span timing and resources (GPU figures need a
//! [`gpu::GpuSource`] of your own) and writes the report and the JSON profile.
//!
//! # Supported Rust versions
//!
//! The minimum supported Rust version is in `Cargo.toml` (`rust-version`).
//!
//! # Guide
//!
//! The repository's `docs/` directory is a guide with one page per topic: configuration and
//! filtering, outputs, the profile format, the `spanprof` command and CI, resources and GPU,
//! leaving it on (the back-off, `/metrics`, OTLP, signals), Chrome / Perfetto traces, and
//! overhead. Its Rust examples, and the README's, are compiled as doctests.
#![deny(missing_docs)]
#![warn(missing_debug_implementations, rust_2018_idioms, unreachable_pub)]
// Unsafe code is denied everywhere but in the counting allocator (`GlobalAlloc` is an unsafe
// trait) and in the few libc calls of the samplers; each has a SAFETY comment.
#![deny(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[allow(unsafe_code)]
pub mod alloc;
pub mod analysis;
mod atomic_file;
mod backoff;
pub mod builder;
#[cfg(feature = "chrome")]
pub mod chrome;
pub mod clock;
#[cfg(feature = "cuda")]
#[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
pub mod cuda;
mod env;
mod error;
mod export;
mod filter_hint;
pub mod gpu;
mod guard;
#[cfg(feature = "http")]
mod http;
mod layer;
#[cfg(feature = "otlp")]
#[cfg_attr(docsrs, doc(cfg(feature = "otlp")))]
pub mod otlp;
pub mod output;
pub mod profile;
mod record;
mod samplers;
mod session;
#[cfg(feature = "signals")]
mod signals;
mod switches;
mod worker;

pub use alloc::CountingAlloc;
pub use builder::{Builder, CpuClock, ReportTarget};
pub use error::{Error, Result};
pub use export::Every;
pub use guard::{ProfileGuard, ProfileHandle};
pub use layer::ProfileLayer;
pub use profile::Snapshot;
pub use switches::{Preset, Resources};

/// Target for lightweight performance spans and spanprof's summaries and warnings.
pub const PERF_TARGET: &str = "spanprof::perf";
/// Target for detailed profiling spans and spanprof's notes on where outputs went.
pub const PROFILING_TARGET: &str = "spanprof::profiling";

/// Exit status of the process after the signal handler finished the outputs: 128 + `SIGINT`,
/// what shells report for a program interrupted by Ctrl-C.
#[cfg(feature = "signals")]
pub const CTRLC_EXIT_CODE: i32 = 130;

// The Rust examples of the README and the guide (docs/), compiled and run as doctests: one
// item per page, each behind the features its examples use.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/README.md")]
pub struct GuideIndexDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/configuration-and-filtering.md")]
pub struct ConfigurationDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/outputs.md")]
pub struct OutputsDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/profile-format.md")]
pub struct ProfileFormatDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/cli-and-ci.md")]
pub struct CliDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/resources-and-gpu.md")]
pub struct ResourcesDoctests;
#[cfg(all(doctest, feature = "http", feature = "otlp", feature = "signals"))]
#[doc = include_str!("../docs/leave-it-on.md")]
pub struct LeaveItOnDoctests;
#[cfg(all(doctest, feature = "chrome", feature = "signals"))]
#[doc = include_str!("../docs/traces.md")]
pub struct TracesDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/overhead.md")]
pub struct OverheadDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/dev/notes.md")]
pub struct DevNotesDoctests;

/// Internals exposed for spanprof's own benches; not part of the API, may change at any time.
#[doc(hidden)]
pub mod __private {
    pub use crate::samplers::{cpu, energy, memory};
}

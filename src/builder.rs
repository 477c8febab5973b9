//! The [`Builder`], the environment variables that override it, and the limits of one
//! profiler.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing_subscriber::EnvFilter;

#[cfg(feature = "chrome")]
use crate::chrome::{ChromeOptions, Session as ChromeSession};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::export::{Every, ExportSettings, StepSignal};
use crate::gpu::GpuSource;
use crate::guard::{ProfileGuard, ProfileHandle};
use crate::layer::ProfileLayer;
use crate::output::{Destination, Format, Output, Selection, Table};
use crate::record::{Recorder, RunSettings};
use crate::samplers::{self, Readings, Timeline};
use crate::session::{ProfileSession, SessionOutputs};
use crate::switches::{Preset, Resources};

#[cfg(feature = "http")]
pub use crate::env::ENV_METRICS_ADDR;
pub use crate::env::{
    ENV_CPU_CLOCK, ENV_EVERY, ENV_FILTER, ENV_GRID, ENV_INTERVAL_MS, ENV_MAX_OVERHEAD, ENV_OUT,
    ENV_OUTPUT_FILTER, ENV_PRESET, ENV_REPORT, ENV_SAMPLERS, ENV_STEP, ENV_TOP,
};

pub use crate::record::metrics::{MAX_METRICS, MAX_METRIC_SITES};
pub use crate::record::names::MAX_SPAN_NAMES;
pub use crate::record::tree::{MAX_TREE_DEPTH, MAX_TREE_NODES};

/// What `SPANPROF_CPU_CLOCK` may be.
const CPU_CLOCK_EXPECTED: &str = "`perf` or `thread`";

/// A GPU source handed to the builder (taken by the first `build`).
#[derive(Clone, Default)]
struct GpuSourceSlot(Arc<std::sync::Mutex<Option<Box<dyn GpuSource>>>>);

impl std::fmt::Debug for GpuSourceSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GpuSourceSlot")
    }
}

/// Outputs handed to the builder (taken by the first `build`).
#[derive(Clone, Default)]
struct OutputSlot(Arc<std::sync::Mutex<Vec<Output>>>);

impl std::fmt::Debug for OutputSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OutputSlot")
    }
}

/// Where the console report goes when the guard is dropped.
///
/// `SPANPROF_REPORT` spells them `stderr`, `stdout` (or `-`) and `off`, case-insensitively;
/// any other value is a file path.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ReportTarget {
    /// Standard error (the default).
    #[default]
    Stderr,
    /// Standard output.
    Stdout,
    /// A file, replaced atomically. [`Builder::build`] checks that its directory can be
    /// created and written; if not, the report goes to standard error instead, with one
    /// warning at start (the report is never lost).
    File(PathBuf),
    /// No report.
    Off,
}

/// Builds a [`ProfileLayer`] and its [`ProfileGuard`].
///
/// Environment variables override the builder unless [`Builder::with_env`] turns them off:
///
/// | variable | values | builder |
/// |---|---|---|
/// | `SPANPROF` | `off`, `basic`, `detailed`, `full` | [`Builder::with_preset`] |
/// | `SPANPROF_FILTER` | `EnvFilter` directives, e.g. `my_app=trace,hyper=off` | [`Builder::with_filter`] |
/// | `SPANPROF_REPORT` | `stderr`, `stdout` (or `-`), `off`, or a file path | [`Builder::with_report`] |
/// | `SPANPROF_TOP` | a positive integer | [`Builder::with_top`] |
/// | `SPANPROF_OUT` | a directory | [`Builder::with_output_dir`] |
/// | `SPANPROF_SAMPLERS` | `memory,heap,cpu,gpu,energy`, `none`, `all` | [`Builder::with_resources`] |
/// | `SPANPROF_INTERVAL_MS` | milliseconds, 1 to 3600000 (1 ms to 1 h) | [`Builder::with_sample_interval`] |
/// | `SPANPROF_GRID_G_PER_KWH` | a non-negative number | [`Builder::with_grid_intensity`] |
/// | `SPANPROF_OUTPUT_FILTER` | name globs, `target=GLOB`, `top=N`, comma-separated | [`Builder::with_output_filter`] |
/// | `SPANPROF_MAX_OVERHEAD` | a percentage over 0, up to 100 (`5`, `2.5%`), or `off` | [`Builder::with_max_overhead`] |
/// | `SPANPROF_CPU_CLOCK` | `perf` (default) or `thread`: the thread CPU clock read per span | — |
/// | `SPANPROF_METRICS_ADDR` | `host:port` or a port (feature `http`) | `Builder::with_metrics_addr` |
/// | `SPANPROF_EVERY` | a duration (`30s`, `500ms`) or steps (`100 steps`), see [`Every`] | [`Builder::with_every`] |
/// | `SPANPROF_STEP` | a span name, e.g. `train_step` | [`Builder::with_step_span`] |
///
/// With the `otlp` feature, the OpenTelemetry variables (`OTEL_EXPORTER_OTLP_ENDPOINT`,
/// `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`, …) configure the OTLP metrics push: see
/// [`crate::otlp`].
///
/// One rule per option, whichever source gives the value: [`Builder::build`] checks the
/// builder's values with the same rule the variable's value is checked with, and an invalid
/// value is an error naming the option (the variable, or the builder method) and the value.
/// Environment values are trimmed of surrounding whitespace; keywords are case-insensitive; a
/// variable that is set must hold a value (an empty one is an error: unset it instead).
#[derive(Debug, Clone)]
#[must_use]
pub struct Builder {
    preset: Preset,
    filter: Option<String>,
    report: ReportTarget,
    top: usize,
    output_dir: Option<PathBuf>,
    read_env: bool,
    clock: Option<Clock>,
    #[cfg(feature = "chrome")]
    chrome: Option<ChromeOptions>,
    resources: Option<Resources>,
    interval: Duration,
    gpu_source: GpuSourceSlot,
    grid_g_per_kwh: Option<f64>,
    tree: bool,
    /// The back-off's threshold, %.
    max_overhead_pct: Option<f64>,
    /// The span names every output shows.
    selection: Selection,
    /// Outputs added with [`Builder::with_output`].
    outputs: OutputSlot,
    /// Where the `/metrics` endpoint listens, if it is served.
    #[cfg(feature = "http")]
    metrics_addr: Option<std::net::SocketAddr>,
    every: Option<Every>,
    step_span: Option<String>,
    #[cfg(feature = "otlp")]
    otlp: Option<crate::otlp::OtlpOptions>,
}

impl Default for Builder {
    fn default() -> Self {
        Self {
            preset: Preset::default(),
            filter: None,
            report: ReportTarget::default(),
            top: Self::DEFAULT_TOP,
            output_dir: None,
            read_env: true,
            clock: None,
            #[cfg(feature = "chrome")]
            chrome: None,
            resources: None,
            interval: Self::DEFAULT_SAMPLE_INTERVAL,
            gpu_source: GpuSourceSlot::default(),
            grid_g_per_kwh: None,
            tree: true,
            max_overhead_pct: Some(Self::DEFAULT_MAX_OVERHEAD_PCT),
            selection: Selection::new(),
            outputs: OutputSlot::default(),
            #[cfg(feature = "http")]
            metrics_addr: None,
            every: None,
            step_span: None,
            #[cfg(feature = "otlp")]
            otlp: None,
        }
    }
}

impl ProfileLayer {
    /// A builder with the defaults (see [`Builder`]).
    pub fn builder() -> Builder {
        Builder::default()
    }
}

impl Builder {
    /// Rows the report shows by default.
    pub const DEFAULT_TOP: usize = 25;
    /// Time between resource samples by default: 100 ms.
    ///
    /// The sampler thread costs about 0.08 % of one core at this interval (memory, CPU and
    /// energy, no GPU; 78 µs of its own CPU time per sample on a 2-vCPU VM).
    pub const DEFAULT_SAMPLE_INTERVAL: Duration = samplers::DEFAULT_INTERVAL;
    /// The shortest sample interval accepted: 1 ms (the sampler thread's own lower bound).
    pub const MIN_SAMPLE_INTERVAL: Duration = Duration::from_millis(1);
    /// The longest sample interval accepted: 1 h (the sampler thread's own upper bound).
    pub const MAX_SAMPLE_INTERVAL: Duration = Duration::from_secs(3600);

    /// The back-off's default threshold: spanprof's estimated cost as 5% of the process's CPU
    /// time.
    pub const DEFAULT_MAX_OVERHEAD_PCT: f64 = crate::backoff::DEFAULT_MAX_OVERHEAD_PCT;

    /// Sets the preset (default [`Preset::Basic`]). `SPANPROF` overrides it.
    ///
    /// At [`Preset::Off`] nothing is recorded and nothing is written: no report, no profile, no
    /// output of [`Builder::with_output`]; files of an earlier run are left as they are.
    pub fn with_preset(self, preset: Preset) -> Self {
        Self { preset, ..self }
    }

    /// Profiles only the spans these `EnvFilter` directives enable, e.g. `"my_app=trace"`:
    /// the spans `EnvFilter` enables as a per-layer filter (`layer.with_filter(filter)`).
    /// Other layers are not affected. `SPANPROF_FILTER` overrides it.
    ///
    /// Directives on targets and levels are decided once per callsite. A span directive,
    /// `[name]` or `[name{field=value}]`, profiles every span named `name` and the spans
    /// created while one whose fields match is entered on the same thread, up to the
    /// directive's level; `[{field=value}]` does the same for any span with that field. Those
    /// are decided per span, and the filter keeps track of the spans they name (see the
    /// README's "Filtering" for what that costs).
    ///
    /// # Errors
    /// [`Error::InvalidFilter`] if the directives do not parse, [`Error::InvalidSetting`] if
    /// they are empty.
    pub fn with_filter(self, directives: impl Into<String>) -> Result<Self> {
        let directives = rules::filter(directives.into(), Origin::Builder("with_filter"))?;
        Ok(Self {
            filter: Some(directives),
            ..self
        })
    }

    /// Where the report goes when the guard drops (default [`ReportTarget::Stderr`]).
    pub fn with_report(self, report: ReportTarget) -> Self {
        Self { report, ..self }
    }

    /// Rows shown in the report (default [`Builder::DEFAULT_TOP`]); at least 1, or
    /// [`Builder::build`] fails. `SPANPROF_TOP` overrides it.
    pub fn with_top(self, top: usize) -> Self {
        Self { top, ..self }
    }

    /// A directory the guard writes its file outputs into when it drops: the JSON profile
    /// ([`PROFILE_FILE`](crate::output::PROFILE_FILE)) and, with the call tree
    /// ([`Builder::with_tree`]), the folded stacks (`profile.folded`), the flamegraph
    /// (`flamegraph.svg`, feature `flamegraph`) and the pprof profile (`profile.pb.gz`, feature
    /// `pprof`); with the default features also `report.csv` (feature `csv`) and `metrics.prom`
    /// (feature `prometheus`), and the HTML report
    /// ([`HTML_FILE`](crate::output::HTML_FILE)). `SPANPROF_OUT` overrides it.
    ///
    /// [`Builder::build`] creates it and checks that a file can be written there (an empty path
    /// or a directory that cannot be written is an error then, not when the guard drops).
    pub fn with_output_dir(self, dir: impl Into<PathBuf>) -> Self {
        Self {
            output_dir: Some(dir.into()),
            ..self
        }
    }

    /// Whether the `SPANPROF*` environment variables (and, with the `otlp` feature, the
    /// `OTEL_*` ones) override the builder (default `true`).
    pub fn with_env(self, read_env: bool) -> Self {
        Self { read_env, ..self }
    }

    /// The clock to read (default [`Clock::new`]); tests pass a [`Clock::mock`].
    pub fn with_clock(self, clock: Clock) -> Self {
        Self {
            clock: Some(clock),
            ..self
        }
    }

    /// Also writes Chrome / Perfetto traces of the steps a schedule selects, through
    /// tracing-chrome; add [`ProfileGuard::chrome_layer`] to the registry. See [`crate::chrome`].
    #[cfg(feature = "chrome")]
    pub fn with_chrome(self, options: ChromeOptions) -> Self {
        Self {
            chrome: Some(options),
            ..self
        }
    }

    /// Which resources to record per span, instead of the preset's choice
    /// ([`Preset::resources`]). Ignored at the `off` preset. `SPANPROF_SAMPLERS` overrides it.
    pub fn with_resources(self, resources: Resources) -> Self {
        Self {
            resources: Some(resources),
            ..self
        }
    }

    /// Also renders `format` to `to` when the guard drops, after the report and the files of
    /// [`Builder::with_output_dir`].
    pub fn with_output(self, format: impl Format + 'static, to: Destination) -> Self {
        self.outputs
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Output {
                format: Box::new(format),
                to,
                fallback_to_stderr: false,
            });
        self
    }

    /// Time between resource samples (default [`Builder::DEFAULT_SAMPLE_INTERVAL`], 100 ms).
    /// From 1 ms to 1 h ([`Builder::MIN_SAMPLE_INTERVAL`] ..= [`Builder::MAX_SAMPLE_INTERVAL`]);
    /// outside that range [`Builder::build`] fails. The profile records it in whole
    /// milliseconds. `SPANPROF_INTERVAL_MS` overrides it.
    pub fn with_sample_interval(self, interval: Duration) -> Self {
        Self { interval, ..self }
    }

    /// The GPU backend (default: NVML through [`NvmlSource`](crate::gpu::NvmlSource) when the
    /// GPU sampler runs, with the `nvml` feature).
    pub fn with_gpu_source(self, source: impl GpuSource) -> Self {
        Self {
            gpu_source: GpuSourceSlot(Arc::new(std::sync::Mutex::new(Some(Box::new(source))))),
            ..self
        }
    }

    /// Grid carbon intensity in grams CO2e per kWh: energy figures get a CO2e column. A finite
    /// number, 0 or more, or [`Builder::build`] fails. `SPANPROF_GRID_G_PER_KWH` overrides it.
    pub fn with_grid_intensity(self, grams_per_kwh: f64) -> Self {
        Self {
            grid_g_per_kwh: Some(grams_per_kwh),
            ..self
        }
    }

    /// Records the call tree (default: on, at every preset that records): statistics per
    /// call path (see [`CallTree`](crate::profile::CallTree)), the console tree view, and the
    /// output directory's `profile.folded`, `flamegraph.svg` and `profile.pb.gz`. Off, the hot
    /// path does none of its work.
    pub fn with_tree(self, on: bool) -> Self {
        Self { tree: on, ..self }
    }

    /// The back-off's threshold (default [`Builder::DEFAULT_MAX_OVERHEAD_PCT`], `None`: off):
    /// when spanprof's estimated cost goes over this share of the process's CPU time, %, its
    /// per-span resource readings (CPU time, heap, memory, GPU and energy marks) are switched
    /// off until the span rate falls; still over it (or with no readings on), the hottest
    /// short leaf span names are sampled 1 in N (their calls still exact, marked sampled in
    /// every output: [`SpanStats::sampled`](crate::profile::SpanStats::sampled)). It says so
    /// once per stage at `spanprof::perf`, and the report and the profile list every step
    /// ([`Snapshot::backoff`](crate::profile::Snapshot::backoff)). Over 0 and up to 100, or
    /// [`Builder::build`] fails. `SPANPROF_MAX_OVERHEAD` overrides it (`off` turns it off).
    ///
    /// ```
    /// let builder = spanprof::ProfileLayer::builder()
    ///     .with_preset(spanprof::Preset::Detailed)
    ///     .with_max_overhead(Some(2.0));
    /// # let _ = builder;
    /// ```
    pub fn with_max_overhead(self, percent: Option<f64>) -> Self {
        Self {
            max_overhead_pct: percent,
            ..self
        }
    }

    /// Every period of time or every `N` steps, logs a summary of that window at
    /// [`PERF_TARGET`](crate::PERF_TARGET) (`spanprof::perf`): the top span names by self time
    /// in the window, with their calls, self time and p99, as structured fields (`window`,
    /// `steps`, `window_ms`, `top1_name`, `top1_calls`, `top1_self_ns`, `top1_p99_ns`, … up to
    /// `top5`) and a readable message; re-writes the outputs whose format is periodic
    /// ([`Format::periodic`]) and pushes OTLP metrics (feature `otlp`). One thread,
    /// `spanprof-export`, does all of it from snapshots; a last window is logged when the
    /// profile ends if anything was recorded since the previous one.
    ///
    /// A window ends when the thread takes its snapshot: just after the period, or just after
    /// the `N`-th step, so short steps may put a few more in a window (its `steps` field says
    /// how many); windows that come faster than they are logged merge. The windows' steps
    /// always add up to the run's.
    ///
    /// [`Every::Steps`] counts closes of the span named by [`Builder::with_step_span`], which
    /// it needs. Off by default, except with an OTLP endpoint configured: then every
    /// `OTEL_METRIC_EXPORT_INTERVAL` (default 60 s). `SPANPROF_EVERY` overrides it. Outside
    /// its rule ([`Every`]) [`Builder::build`] fails.
    pub fn with_every(self, every: Every) -> Self {
        Self {
            every: Some(every),
            ..self
        }
    }

    /// The address of the `/metrics` endpoint by default: 127.0.0.1:9464 (loopback only; the
    /// port of OpenTelemetry's Prometheus exporter).
    #[cfg(feature = "http")]
    pub const DEFAULT_METRICS_ADDR: std::net::SocketAddr = std::net::SocketAddr::V4(
        std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 9464),
    );

    /// Serves the Prometheus exposition of a fresh snapshot at `http://<addr>/metrics` while
    /// the profile runs, from a thread of its own, until the guard finishes (feature `http`).
    /// [`Builder::DEFAULT_METRICS_ADDR`] is loopback only; bind `0.0.0.0:<port>` for a
    /// Prometheus server on another machine, port 0 for any free port
    /// ([`ProfileHandle::metrics_addr`] tells which). `SPANPROF_METRICS_ADDR` overrides it (and
    /// starts the endpoint without this call). Not served at the `off` preset.
    ///
    /// [`Builder::build`] binds the address: one in use is an error then.
    ///
    /// ```
    /// # use spanprof::{ProfileLayer, ReportTarget};
    /// let (layer, guard) = ProfileLayer::builder()
    ///     .with_env(false)
    ///     .with_report(ReportTarget::Off)
    ///     .with_metrics_addr(([127, 0, 0, 1], 0))
    ///     .build()?;
    /// let addr = guard.metrics_addr().expect("served");
    /// assert!(addr.ip().is_loopback() && addr.port() != 0);
    /// # Ok::<(), spanprof::Error>(())
    /// ```
    #[cfg(feature = "http")]
    pub fn with_metrics_addr(self, addr: impl Into<std::net::SocketAddr>) -> Self {
        Self {
            metrics_addr: Some(addr.into()),
            ..self
        }
    }

    /// The step span of [`Every::Steps`]: spans of this name (any target) count one step each
    /// when they close, e.g. `"train_step"`. Its closes in each window are also reported
    /// (`steps`) with a period cadence. Not empty, or [`Builder::build`] fails. `SPANPROF_STEP`
    /// overrides it.
    pub fn with_step_span(self, name: impl Into<String>) -> Self {
        Self {
            step_span: Some(name.into()),
            ..self
        }
    }

    /// Pushes the profile's metrics to an OTLP/HTTP collector, periodically and at the end
    /// (see [`crate::otlp`]). The `OTEL_*` variables override these options, and configure
    /// the push without this call.
    #[cfg(feature = "otlp")]
    pub fn with_otlp(self, options: crate::otlp::OtlpOptions) -> Self {
        Self {
            otlp: Some(options),
            ..self
        }
    }

    /// Builds the layer and its guard.
    ///
    /// Chooses the span names every output shows (default: all): the report, the JSON
    /// profile and the outputs of [`Builder::with_output`] render the profile of the selected
    /// names only ([`Selection::apply`]). Globs must not be empty and `top` must be at least
    /// 1, or [`Builder::build`] fails. `SPANPROF_OUTPUT_FILTER` overrides it.
    ///
    /// ```
    /// use spanprof::output::Selection;
    /// let builder = spanprof::ProfileLayer::builder()
    ///     .with_output_filter(Selection::new().with_name("train_*").with_target("my_app*"));
    /// ```
    pub fn with_output_filter(self, selection: Selection) -> Self {
        Self { selection, ..self }
    }

    /// Reads the `SPANPROF*` variables (unless [`Builder::with_env`] is `false`), checks every
    /// value, creates the output directory and checks that it can be written, and checks the
    /// directory of a report file (if it cannot be written, the report goes to standard error,
    /// with one warning now).
    ///
    /// # Errors
    /// [`Error::InvalidEnv`] naming the variable, or [`Error::InvalidSetting`] naming the
    /// builder method, with the value that is wrong; [`Error::InvalidFilter`] if filter
    /// directives do not parse; [`Error::Io`] naming the output directory if it cannot be
    /// created or written; [`Error::Io`] naming the address if the `/metrics` endpoint cannot
    /// be bound. Nothing is installed in that case. With [`Builder::with_chrome`]:
    /// [`Error::InvalidChromeOptions`], or [`Error::Io`] if the trace directory cannot be created.
    pub fn build(self) -> Result<(ProfileLayer, ProfileGuard)> {
        let read_env = self.read_env;
        self.build_from(|var| {
            if read_env {
                std::env::var_os(var)
            } else {
                None
            }
        })
    }

    /// [`Builder::build`] with the environment read through `get`.
    pub(crate) fn build_from(
        self,
        get: impl Fn(&str) -> Option<std::ffi::OsString>,
    ) -> Result<(ProfileLayer, ProfileGuard)> {
        let b = self.apply_env(&get)?.checked()?;
        let filter = match &b.filter {
            Some(directives) => Some(parse_filter(directives, "the configuration")?),
            None => None,
        };
        let records = b.preset.records();
        // The off preset writes nothing: it creates no directory either.
        let report = if records {
            prepare_outputs(b.output_dir.as_deref(), b.report)?
        } else {
            ReportTarget::Off
        };
        #[cfg(feature = "http")]
        let metrics_listener = match b.metrics_addr {
            Some(addr) if records => Some(crate::http::bind(addr).map_err(|source| Error::Io {
                action: "binding the /metrics endpoint",
                path: PathBuf::from(addr.to_string()),
                source,
            })?),
            _ => None,
        };
        #[cfg(feature = "chrome")]
        let chrome = match b.chrome {
            Some(options) if records => Some(Arc::new(ChromeSession::new(options)?)),
            _ => None,
        };
        let resources = if records {
            b.resources.unwrap_or_else(|| b.preset.resources())
        } else {
            Resources::NONE
        };
        let gpu_source = b
            .gpu_source
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let clock = b.clock.unwrap_or_default();
        // Time 0 of the profile, for the recorder's clock and the sampler's timeline.
        let (start_raw, origin) = (clock.raw(), Instant::now());
        let readings = Arc::new(Readings::new());
        let timeline = Arc::new(Timeline::default());
        let mut sampler = if resources.is_empty() {
            None
        } else {
            samplers::start(
                b.interval, resources, gpu_source, origin, &readings, &timeline,
            )
        };
        #[cfg(feature = "chrome")]
        if let (Some(chrome), true) = (&chrome, sampler.is_some()) {
            chrome.set_counter_source(Arc::new(crate::chrome::TimelineCounters::new(
                timeline.clone(),
                origin,
            )));
        }
        let settings = RunSettings {
            preset: b.preset.as_str(),
            filter: b.filter,
            sampled: resources,
            // Within 1 ms ..= 1 h (checked): the interval the sampler uses.
            interval_ms: b.interval.as_millis() as u64,
            grid_g_per_kwh: b.grid_g_per_kwh,
            tree: b.tree,
        };
        #[cfg(feature = "otlp")]
        let (otlp, otlp_interval) = match records {
            true => crate::otlp::resolve(b.otlp.clone(), &get)?,
            false => (None, None),
        };
        #[cfg(not(feature = "otlp"))]
        let otlp_interval: Option<Duration> = None;
        // The cadence: the one asked for, else the OTLP push's.
        let every = b.every.or(otlp_interval.map(Every::Period));
        let steps = match (every, &b.step_span) {
            (Some(Every::Steps(n)), Some(name)) if records => {
                Some(Arc::new(StepSignal::new(name.clone(), n)))
            }
            _ => None,
        };
        let recorder = Arc::new(
            Recorder::new(
                clock, start_raw, records, resources, readings, timeline, settings,
            )
            .with_steps(steps.clone()),
        );
        let table = Table::new().with_top(b.top);
        let mut outputs = Vec::new();
        // The off preset writes nothing: no empty report, and the files of an earlier run
        // (profile.json) are left as they are.
        if records {
            let report_to = match report {
                ReportTarget::Off => None,
                ReportTarget::Stderr => Some(Destination::Stderr),
                ReportTarget::Stdout => Some(Destination::Stdout),
                ReportTarget::File(path) => Some(Destination::File(path)),
            };
            if let Some(to) = report_to {
                // A report file that cannot be written at the end goes to stderr: never lost.
                let fallback_to_stderr = matches!(to, Destination::File(_));
                outputs.push(Output {
                    format: Box::new(table),
                    to,
                    fallback_to_stderr,
                });
            }
            if let Some(dir) = b.output_dir {
                for format in crate::output::directory_formats(b.tree) {
                    outputs.push(Output {
                        format,
                        to: Destination::Dir(dir.clone()),
                        fallback_to_stderr: false,
                    });
                }
            }
            outputs.append(&mut b.outputs.0.lock().unwrap_or_else(|e| e.into_inner()));
        }
        // The layer and every handle keep the sampler running; the guard itself does not, so
        // a leaked guard's sampler stops once they are gone.
        let sampler_use = sampler
            .as_mut()
            .and_then(crate::samplers::Sampler::take_use);
        let backoff = match b.max_overhead_pct {
            Some(pct) if records => crate::backoff::Backoff::start(recorder.clone(), pct),
            _ => None,
        };
        let session = Arc::new(ProfileSession::new(
            recorder.clone(),
            backoff,
            sampler,
            #[cfg(feature = "chrome")]
            chrome,
            SessionOutputs {
                outputs,
                table,
                selection: b.selection.clone(),
            },
            records,
        ));
        if let (Some(every), true) = (every, records) {
            ProfileSession::start_exporter(
                &session,
                ExportSettings {
                    every,
                    step_span: b.step_span.clone(),
                    steps,
                    #[cfg(feature = "otlp")]
                    otlp,
                    #[cfg(feature = "otlp")]
                    selection: b.selection.clone(),
                },
            );
        }
        let handle = ProfileHandle::new(session);
        #[cfg(feature = "http")]
        if let Some(listener) = metrics_listener {
            handle.serve_metrics(listener);
        }
        Ok((
            ProfileLayer::new(recorder, filter, records).with_sampler_use(sampler_use.clone()),
            ProfileGuard::new(handle).with_sampler_use(sampler_use.as_ref()),
        ))
    }

    /// Checks every value with the rule of its option (the values the environment set were
    /// checked when read, by the same rules).
    fn checked(mut self) -> Result<Self> {
        self.top = rules::top(self.top, Origin::Builder("with_top"))?;
        self.interval = rules::interval(self.interval, Origin::Builder("with_sample_interval"))?;
        if let Some(g) = self.grid_g_per_kwh {
            self.grid_g_per_kwh = Some(rules::grid(g, Origin::Builder("with_grid_intensity"))?);
        }
        if let Some(p) = self.max_overhead_pct {
            self.max_overhead_pct = Some(rules::max_overhead(
                p,
                Origin::Builder("with_max_overhead"),
            )?);
        }
        if let Some(dir) = self.output_dir {
            self.output_dir = Some(rules::output_dir(dir, Origin::Builder("with_output_dir"))?);
        }
        self.report = rules::report(self.report, Origin::Builder("with_report"))?;
        if let Some(filter) = self.filter {
            self.filter = Some(rules::filter(filter, Origin::Builder("with_filter"))?);
        }
        if let Some(name) = self.step_span {
            self.step_span = Some(rules::step_span(name, Origin::Builder("with_step_span"))?);
        }
        if let Some(every) = self.every {
            let every = rules::every(
                every,
                self.step_span.is_some(),
                Origin::Builder("with_every"),
            )?;
            self.every = Some(every);
        }
        self.selection =
            rules::output_filter(self.selection, Origin::Builder("with_output_filter"))?;
        Ok(self)
    }

    /// Applies environment overrides read through `get`, each checked by its option's rule.
    pub(crate) fn apply_env(
        mut self,
        get: impl Fn(&str) -> Option<std::ffi::OsString>,
    ) -> Result<Self> {
        // Every value is trimmed; a variable that is set must hold something.
        let read = |var: &'static str, expected: &'static str| -> Result<Option<String>> {
            match get(var) {
                None => Ok(None),
                Some(v) => match v.into_string() {
                    Ok(v) if !v.trim().is_empty() => Ok(Some(v.trim().to_string())),
                    Ok(v) => Err(Error::InvalidEnv {
                        var,
                        value: v,
                        expected,
                    }),
                    Err(v) => Err(Error::InvalidEnv {
                        var,
                        value: v.to_string_lossy().into_owned(),
                        expected,
                    }),
                },
            }
        };
        if let Some(v) = read(ENV_PRESET, Preset::ACCEPTED)? {
            self.preset = v.parse()?;
        }
        if let Some(v) = read(ENV_FILTER, rules::FILTER)? {
            self.filter = Some(rules::filter(v.clone(), Origin::Env(ENV_FILTER, &v))?);
        }
        if let Some(v) = read(ENV_REPORT, rules::REPORT)? {
            self.report = rules::report(rules::parse_report(&v), Origin::Env(ENV_REPORT, &v))?;
        }
        if let Some(v) = read(ENV_TOP, rules::TOP)? {
            let n = rules::number(&v, ENV_TOP, rules::TOP)?;
            self.top = rules::top(n, Origin::Env(ENV_TOP, &v))?;
        }
        if let Some(v) = read(ENV_SAMPLERS, Resources::ACCEPTED)? {
            self.resources = Some(v.parse()?);
        }
        if let Some(v) = read(ENV_INTERVAL_MS, rules::INTERVAL)? {
            let ms: u64 = rules::number(&v, ENV_INTERVAL_MS, rules::INTERVAL)?;
            self.interval =
                rules::interval(Duration::from_millis(ms), Origin::Env(ENV_INTERVAL_MS, &v))?;
        }
        if let Some(v) = read(ENV_GRID, rules::GRID)? {
            let g = rules::number(&v, ENV_GRID, rules::GRID)?;
            self.grid_g_per_kwh = Some(rules::grid(g, Origin::Env(ENV_GRID, &v))?);
        }
        if let Some(v) = read(ENV_MAX_OVERHEAD, rules::MAX_OVERHEAD)? {
            self.max_overhead_pct = if v.eq_ignore_ascii_case("off") {
                None
            } else {
                let pct = rules::number(
                    v.trim_end_matches('%').trim_end(),
                    ENV_MAX_OVERHEAD,
                    rules::MAX_OVERHEAD,
                )
                .map_err(|_| Error::InvalidEnv {
                    var: ENV_MAX_OVERHEAD,
                    value: v.clone(),
                    expected: rules::MAX_OVERHEAD,
                })?;
                Some(rules::max_overhead(pct, Origin::Env(ENV_MAX_OVERHEAD, &v))?)
            };
        }
        // Read where the clock is opened (`samplers::cpu`); checked here.
        if let Some(v) = read(ENV_CPU_CLOCK, CPU_CLOCK_EXPECTED)? {
            if !matches!(v.trim(), "perf" | "thread") {
                return Err(Error::InvalidEnv {
                    var: ENV_CPU_CLOCK,
                    value: v.clone(),
                    expected: CPU_CLOCK_EXPECTED,
                });
            }
        }
        #[cfg(feature = "http")]
        if let Some(v) = read(ENV_METRICS_ADDR, rules::METRICS_ADDR)? {
            self.metrics_addr = Some(rules::metrics_addr(&v)?);
        }
        if let Some(v) = read(ENV_OUTPUT_FILTER, crate::output::SELECTION_EXPECTED)? {
            let from = Origin::Env(ENV_OUTPUT_FILTER, &v);
            let selection = v
                .parse()
                .map_err(|_| from.invalid(&v, crate::output::SELECTION_EXPECTED))?;
            self.selection = rules::output_filter(selection, from)?;
        }
        if let Some(v) = read(ENV_OUT, rules::OUT)? {
            self.output_dir = Some(rules::output_dir(
                PathBuf::from(&v),
                Origin::Env(ENV_OUT, &v),
            )?);
        }
        if let Some(v) = read(ENV_STEP, rules::STEP)? {
            self.step_span = Some(rules::step_span(v.clone(), Origin::Env(ENV_STEP, &v))?);
        }
        if let Some(v) = read(ENV_EVERY, Every::ACCEPTED)? {
            let every: Every = v.parse()?;
            let every = rules::every(every, self.step_span.is_some(), Origin::Env(ENV_EVERY, &v))?;
            self.every = Some(every);
        }
        Ok(self)
    }
}

/// Where a value came from, for the error that rejects it.
#[derive(Debug, Clone, Copy)]
enum Origin<'a> {
    /// An environment variable, and its text (the message shows it).
    Env(&'static str, &'a str),
    /// A builder method.
    Builder(&'static str),
}

impl Origin<'_> {
    fn invalid(self, value: &dyn std::fmt::Debug, expected: &'static str) -> Error {
        match self {
            Origin::Env(var, text) => Error::InvalidEnv {
                var,
                value: text.to_string(),
                expected,
            },
            Origin::Builder(method) => Error::InvalidSetting {
                method,
                value: format!("{value:?}"),
                expected,
            },
        }
    }
}

/// The rule of each option: one function, used for the builder's value and the environment's.
mod rules {
    use super::*;

    pub(super) const FILTER: &str = "EnvFilter directives (not empty)";
    pub(super) const REPORT: &str = "stderr, stdout (or -), off (case-insensitive), or a file path";
    pub(super) const TOP: &str = "a positive integer";
    pub(super) const INTERVAL: &str =
        "from 1 ms to 1 h (SPANPROF_INTERVAL_MS: whole milliseconds, 1 to 3600000)";
    pub(super) const GRID: &str = "a finite number, 0 or more (grams CO2e per kWh)";
    pub(super) const OUT: &str = "a directory path (not empty)";
    pub(super) const MAX_OVERHEAD: &str = "a percentage over 0, up to 100 (5, 2.5%), or off";
    #[cfg(feature = "http")]
    pub(super) const METRICS_ADDR: &str =
        "an IP address and port (127.0.0.1:9464, 0.0.0.0:9464, [::1]:0) or a port alone (on \
         127.0.0.1; 0 = any free port)";

    /// `SPANPROF_METRICS_ADDR`: a socket address, or a port on 127.0.0.1.
    #[cfg(feature = "http")]
    pub(super) fn metrics_addr(text: &str) -> Result<std::net::SocketAddr> {
        text.parse()
            .or_else(|_| {
                text.parse::<u16>()
                    .map(|port| (std::net::Ipv4Addr::LOCALHOST, port).into())
            })
            .map_err(|_| Error::InvalidEnv {
                var: ENV_METRICS_ADDR,
                value: text.to_string(),
                expected: METRICS_ADDR,
            })
    }
    pub(super) const STEP: &str = "a span name (not empty)";

    /// A number in an environment variable.
    pub(super) fn number<T: std::str::FromStr>(
        text: &str,
        var: &'static str,
        expected: &'static str,
    ) -> Result<T> {
        text.parse().map_err(|_| Error::InvalidEnv {
            var,
            value: text.to_string(),
            expected,
        })
    }

    pub(super) fn top(n: usize, from: Origin<'_>) -> Result<usize> {
        if n >= 1 {
            Ok(n)
        } else {
            Err(from.invalid(&n, TOP))
        }
    }

    pub(super) fn interval(d: Duration, from: Origin<'_>) -> Result<Duration> {
        if (Builder::MIN_SAMPLE_INTERVAL..=Builder::MAX_SAMPLE_INTERVAL).contains(&d) {
            Ok(d)
        } else {
            Err(from.invalid(&d, INTERVAL))
        }
    }

    pub(super) fn step_span(name: String, from: Origin<'_>) -> Result<String> {
        if name.trim().is_empty() {
            Err(from.invalid(&name, STEP))
        } else {
            Ok(name)
        }
    }

    /// A cadence within its rule; steps need a step span.
    pub(super) fn every(every: Every, has_step_span: bool, from: Origin<'_>) -> Result<Every> {
        let steps_without_span = matches!(every, Every::Steps(_)) && !has_step_span;
        if every.is_valid() && !steps_without_span {
            Ok(every)
        } else {
            Err(from.invalid(&every, Every::ACCEPTED))
        }
    }

    pub(super) fn grid(g: f64, from: Origin<'_>) -> Result<f64> {
        if g.is_finite() && g >= 0.0 {
            Ok(g)
        } else {
            Err(from.invalid(&g, GRID))
        }
    }

    pub(super) fn max_overhead(pct: f64, from: Origin<'_>) -> Result<f64> {
        if pct.is_finite() && pct > 0.0 && pct <= 100.0 {
            Ok(pct)
        } else {
            Err(from.invalid(&pct, MAX_OVERHEAD))
        }
    }

    fn blank(path: &std::path::Path) -> bool {
        path.as_os_str().to_string_lossy().trim().is_empty()
    }

    pub(super) fn output_dir(dir: PathBuf, from: Origin<'_>) -> Result<PathBuf> {
        if blank(&dir) {
            Err(from.invalid(&dir, OUT))
        } else {
            Ok(dir)
        }
    }

    /// `SPANPROF_REPORT`'s keywords, case-insensitive; anything else is a path.
    pub(super) fn parse_report(text: &str) -> ReportTarget {
        match text.to_ascii_lowercase().as_str() {
            "stderr" => ReportTarget::Stderr,
            "stdout" | "-" => ReportTarget::Stdout,
            "off" => ReportTarget::Off,
            _ => ReportTarget::File(PathBuf::from(text)),
        }
    }

    pub(super) fn report(report: ReportTarget, from: Origin<'_>) -> Result<ReportTarget> {
        match &report {
            ReportTarget::File(path) if blank(path) => Err(from.invalid(path, REPORT)),
            _ => Ok(report),
        }
    }

    pub(super) fn output_filter(selection: Selection, from: Origin<'_>) -> Result<Selection> {
        match selection.check() {
            Ok(()) => Ok(selection),
            Err(expected) => Err(from.invalid(&selection, expected)),
        }
    }

    pub(super) fn filter(directives: String, from: Origin<'_>) -> Result<String> {
        if directives.trim().is_empty() {
            return Err(from.invalid(&directives, FILTER));
        }
        let origin = match from {
            Origin::Env(var, _) => var,
            Origin::Builder(_) => "Builder::with_filter",
        };
        parse_filter(&directives, origin)?;
        Ok(directives)
    }
}

/// Creates the output directory and checks that a file can be written there (an error naming
/// it if not); checks the directory of a report file, and sends the report to standard error
/// instead (with one warning) if that one cannot be written. Returns where the report goes.
fn prepare_outputs(
    output_dir: Option<&std::path::Path>,
    report: ReportTarget,
) -> Result<ReportTarget> {
    if let Some(dir) = output_dir {
        crate::atomic_file::probe_dir(dir).map_err(|source| Error::Io {
            action: "preparing output directory",
            path: dir.to_path_buf(),
            source,
        })?;
    }
    let ReportTarget::File(path) = report else {
        return Ok(report);
    };
    let dir = match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(dir) => dir.to_path_buf(),
        None => PathBuf::from("."),
    };
    match crate::atomic_file::probe_dir(&dir) {
        Ok(()) => Ok(ReportTarget::File(path)),
        Err(e) => {
            let why = format!(
                "spanprof cannot write the report to {}: {e}; it goes to stderr instead",
                path.display()
            );
            // At build time no subscriber may be installed yet: stderr always shows it.
            tracing::warn!(target: crate::PERF_TARGET, path = %path.display(), error = %e, "{why}");
            eprintln!("spanprof: {why}");
            Ok(ReportTarget::Stderr)
        }
    }
}

fn parse_filter(directives: &str, origin: &'static str) -> Result<EnvFilter> {
    EnvFilter::builder()
        .parse(directives)
        .map_err(|source| Error::InvalidFilter {
            origin,
            value: directives.to_string(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    use crate::env::test_env as env;

    fn err(pairs: &[(&str, &str)]) -> Error {
        Builder::default().apply_env(env(pairs)).unwrap_err()
    }

    #[test]
    fn presets_parse_case_insensitively() {
        for (v, p) in [
            ("off", Preset::Off),
            ("BASIC", Preset::Basic),
            (" Detailed ", Preset::Detailed),
            ("full", Preset::Full),
        ] {
            let b = Builder::default()
                .apply_env(env(&[("SPANPROF", v)]))
                .unwrap();
            assert_eq!(b.preset, p);
        }
    }

    #[test]
    fn bad_preset_names_variable_value_and_choices() {
        let e = err(&[("SPANPROF", "verbose")]);
        let msg = e.to_string();
        assert!(matches!(
            e,
            Error::InvalidEnv {
                var: "SPANPROF",
                ..
            }
        ));
        assert!(
            msg.contains("SPANPROF")
                && msg.contains("\"verbose\"")
                && msg.contains("off, basic, detailed, full"),
            "{msg}"
        );
    }

    #[test]
    fn bad_filter_names_variable_and_value() {
        let e = err(&[("SPANPROF_FILTER", "my_app=notalevel")]);
        let msg = e.to_string();
        assert!(
            matches!(
                e,
                Error::InvalidFilter {
                    origin: "SPANPROF_FILTER",
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(msg.contains("my_app=notalevel"), "{msg}");
        assert!(std::error::Error::source(&e).is_some());
    }

    #[test]
    fn bad_top_report_and_out() {
        for v in ["0", "-3", "many", ""] {
            assert!(
                matches!(
                    err(&[("SPANPROF_TOP", v)]),
                    Error::InvalidEnv {
                        var: "SPANPROF_TOP",
                        ..
                    }
                ),
                "{v}"
            );
        }
        assert!(matches!(
            err(&[("SPANPROF_REPORT", " ")]),
            Error::InvalidEnv {
                var: "SPANPROF_REPORT",
                ..
            }
        ));
        assert!(matches!(
            err(&[("SPANPROF_OUT", "")]),
            Error::InvalidEnv {
                var: "SPANPROF_OUT",
                ..
            }
        ));
    }

    #[test]
    fn the_cpu_clock_is_perf_or_thread() {
        for v in ["tsc", "", "Thread"] {
            let e = err(&[("SPANPROF_CPU_CLOCK", v)]);
            assert!(
                matches!(
                    e,
                    Error::InvalidEnv {
                        var: "SPANPROF_CPU_CLOCK",
                        expected: "`perf` or `thread`",
                        ..
                    }
                ),
                "{v}: {e:?}"
            );
        }
    }

    #[cfg(unix)]
    #[test]
    fn non_utf8_value_is_an_error() {
        use std::os::unix::ffi::OsStringExt;
        let e = Builder::default()
            .apply_env(|v| (v == "SPANPROF").then(|| OsString::from_vec(vec![0x66, 0xff])))
            .unwrap_err();
        assert!(matches!(
            e,
            Error::InvalidEnv {
                var: "SPANPROF",
                ..
            }
        ));
    }

    #[test]
    fn env_overrides_builder() {
        let b = Builder::default()
            .with_preset(Preset::Off)
            .with_top(3)
            .apply_env(env(&[
                ("SPANPROF", "basic"),
                ("SPANPROF_TOP", "7"),
                ("SPANPROF_REPORT", "off"),
                ("SPANPROF_OUT", "out/dir"),
                ("SPANPROF_FILTER", "my_app=trace"),
            ]))
            .unwrap();
        assert_eq!(b.preset, Preset::Basic);
        assert_eq!(b.top, 7);
        assert_eq!(b.report, ReportTarget::Off);
        assert_eq!(b.output_dir, Some(PathBuf::from("out/dir")));
        assert_eq!(b.filter.as_deref(), Some("my_app=trace"));
        let file = Builder::default()
            .apply_env(env(&[("SPANPROF_REPORT", "r.txt")]))
            .unwrap();
        assert_eq!(file.report, ReportTarget::File("r.txt".into()));
    }

    #[test]
    fn samplers_interval_and_grid_from_env() {
        let b = Builder::default()
            .apply_env(env(&[
                ("SPANPROF_SAMPLERS", "cpu, Memory"),
                ("SPANPROF_INTERVAL_MS", "250"),
                ("SPANPROF_GRID_G_PER_KWH", "380.5"),
            ]))
            .unwrap();
        assert_eq!(b.resources, Some(Resources::CPU | Resources::MEMORY));
        assert_eq!(b.interval, Duration::from_millis(250));
        assert_eq!(b.grid_g_per_kwh, Some(380.5));
        for (var, v) in [
            ("SPANPROF_SAMPLERS", "cpu,disk"),
            ("SPANPROF_INTERVAL_MS", "0"),
            ("SPANPROF_INTERVAL_MS", "fast"),
            ("SPANPROF_GRID_G_PER_KWH", "-1"),
            ("SPANPROF_GRID_G_PER_KWH", "NaN"),
        ] {
            let e = err(&[(var, v)]);
            assert!(
                matches!(&e, Error::InvalidEnv { var: got, .. } if *got == var),
                "{var}={v}: {e:?}"
            );
            assert!(e.to_string().contains(v), "{e}");
        }
    }

    #[cfg(feature = "http")]
    #[test]
    fn metrics_addr_from_env() {
        for (v, want) in [
            ("9464", "127.0.0.1:9464"),
            (" 0 ", "127.0.0.1:0"),
            ("0.0.0.0:9100", "0.0.0.0:9100"),
            ("[::1]:0", "[::1]:0"),
        ] {
            let b = Builder::default()
                .apply_env(env(&[("SPANPROF_METRICS_ADDR", v)]))
                .unwrap();
            assert_eq!(b.metrics_addr, Some(want.parse().unwrap()), "{v:?}");
        }
        for v in [
            "localhost:9464",
            "65536",
            "127.0.0.1",
            "",
            "http://127.0.0.1:9464",
        ] {
            let e = err(&[("SPANPROF_METRICS_ADDR", v)]);
            assert!(
                matches!(
                    e,
                    Error::InvalidEnv {
                        var: "SPANPROF_METRICS_ADDR",
                        ..
                    }
                ),
                "{v:?}: {e:?}"
            );
            assert!(e.to_string().contains("a port alone"), "{e}");
        }
        assert_eq!(Builder::DEFAULT_METRICS_ADDR.to_string(), "127.0.0.1:9464");
        assert_eq!(
            Builder::default().metrics_addr,
            None,
            "served only when asked"
        );
    }

    #[test]
    fn builder_filter_is_validated() {
        let e = Builder::default().with_filter("=[").unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidFilter {
                    origin: "Builder::with_filter",
                    ..
                }
            ),
            "{e:?}"
        );
    }

    #[test]
    fn report_keywords_are_case_insensitive_and_anything_else_is_a_path() {
        for (v, want) in [
            ("stdout", ReportTarget::Stdout),
            ("STDOUT", ReportTarget::Stdout),
            (" - ", ReportTarget::Stdout),
            ("StdErr", ReportTarget::Stderr),
            ("Off", ReportTarget::Off),
            ("OFF ", ReportTarget::Off),
            ("stdout.txt", ReportTarget::File("stdout.txt".into())),
            ("./off", ReportTarget::File("./off".into())),
        ] {
            let b = Builder::default()
                .apply_env(env(&[("SPANPROF_REPORT", v)]))
                .unwrap();
            assert_eq!(b.report, want, "SPANPROF_REPORT={v:?}");
        }
    }

    /// Each option's rule, applied to the builder's value and to the variable's: both valid or
    /// both errors, the error naming where the value came from.
    #[test]
    fn builder_and_environment_follow_one_rule() {
        let builder_err = |b: Builder| b.checked().unwrap_err();
        let cases: [(Builder, &str, &str, &str); 10] = [
            (
                Builder::default().with_output_filter(Selection::new().with_top(0)),
                "with_output_filter",
                "SPANPROF_OUTPUT_FILTER",
                "top=0",
            ),
            (
                Builder::default().with_output_filter(Selection::new().with_name("")),
                "with_output_filter",
                "SPANPROF_OUTPUT_FILTER",
                "a,,b",
            ),
            (
                Builder::default().with_top(0),
                "with_top",
                "SPANPROF_TOP",
                "0",
            ),
            (
                Builder::default().with_output_dir(""),
                "with_output_dir",
                "SPANPROF_OUT",
                "",
            ),
            (
                Builder::default().with_output_dir("  "),
                "with_output_dir",
                "SPANPROF_OUT",
                "  ",
            ),
            (
                Builder::default().with_grid_intensity(f64::NAN),
                "with_grid_intensity",
                "SPANPROF_GRID_G_PER_KWH",
                "NaN",
            ),
            (
                Builder::default().with_grid_intensity(-1.0),
                "with_grid_intensity",
                "SPANPROF_GRID_G_PER_KWH",
                "-1",
            ),
            (
                Builder::default().with_sample_interval(Duration::ZERO),
                "with_sample_interval",
                "SPANPROF_INTERVAL_MS",
                "0",
            ),
            (
                Builder::default().with_sample_interval(Duration::from_secs(3601)),
                "with_sample_interval",
                "SPANPROF_INTERVAL_MS",
                "3601000",
            ),
            (
                Builder::default().with_report(ReportTarget::File("".into())),
                "with_report",
                "SPANPROF_REPORT",
                "",
            ),
        ];
        for (builder, method, var, text) in cases {
            let e = builder_err(builder);
            assert!(
                matches!(&e, Error::InvalidSetting { method: m, .. } if *m == method),
                "{method}: {e:?}"
            );
            assert!(e.to_string().contains(&format!("Builder::{method}")), "{e}");
            let e = err(&[(var, text)]);
            assert!(
                matches!(&e, Error::InvalidEnv { var: v, .. } if *v == var),
                "{var}={text:?}: {e:?}"
            );
        }
        assert!(matches!(
            Builder::default().with_filter(" "),
            Err(Error::InvalidSetting {
                method: "with_filter",
                ..
            })
        ));
        // An empty variable is an error for every option, never "unset" or "none".
        for var in [
            ENV_PRESET,
            ENV_FILTER,
            ENV_REPORT,
            ENV_TOP,
            ENV_OUT,
            ENV_SAMPLERS,
            ENV_INTERVAL_MS,
            ENV_GRID,
            ENV_OUTPUT_FILTER,
        ] {
            for v in ["", "  "] {
                let e = err(&[(var, v)]);
                assert!(
                    matches!(&e, Error::InvalidEnv { var: got, .. } if *got == var),
                    "{var}={v:?}: {e:?}"
                );
            }
        }
        // Every value is trimmed, paths included.
        let b = Builder::default()
            .apply_env(env(&[
                ("SPANPROF_OUT", " out/dir "),
                ("SPANPROF_REPORT", " r.txt\n"),
                ("SPANPROF_TOP", " 3 "),
                ("SPANPROF_OUTPUT_FILTER", " train_*, target=app ,top=4 "),
            ]))
            .unwrap();
        assert_eq!(
            b.selection,
            Selection::new()
                .with_name("train_*")
                .with_target("app")
                .with_top(4)
        );
        assert_eq!(b.output_dir, Some(PathBuf::from("out/dir")));
        assert_eq!(b.report, ReportTarget::File("r.txt".into()));
        assert_eq!(b.top, 3);
        // Valid builder values pass unchanged.
        let b = Builder::default()
            .with_top(1)
            .with_sample_interval(Builder::MAX_SAMPLE_INTERVAL)
            .with_grid_intensity(0.0)
            .checked()
            .unwrap();
        assert_eq!((b.top, b.interval), (1, Duration::from_secs(3600)));
        assert_eq!(b.grid_g_per_kwh, Some(0.0));
    }

    #[test]
    fn the_interval_reported_is_the_one_used() {
        let e = err(&[("SPANPROF_INTERVAL_MS", "18446744073709551615")]);
        assert!(
            e.to_string().contains("18446744073709551615") && e.to_string().contains("1 h"),
            "{e}"
        );
        let no_env = |_: &str| None;
        let e = Builder::default()
            .with_sample_interval(Duration::ZERO)
            .build_from(no_env)
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidSetting {
                    method: "with_sample_interval",
                    ..
                }
            ),
            "{e:?}"
        );
        for (ms, builder) in [
            (
                1,
                Builder::default().with_sample_interval(Duration::from_millis(1)),
            ),
            (3_600_000, Builder::default()),
        ] {
            let env_ms = ms.to_string();
            let (_layer, guard) = builder
                .with_report(ReportTarget::Off)
                .with_resources(Resources::MEMORY)
                .build_from(env(&[("SPANPROF_INTERVAL_MS", env_ms.as_str())]))
                .unwrap();
            let info = guard.snapshot().resources.expect("memory is sampled");
            assert_eq!(info.interval_ms, ms);
        }
    }

    #[test]
    fn cadence_and_step_span_from_env_follow_their_rule() {
        let b = Builder::default()
            .apply_env(env(&[
                ("SPANPROF_EVERY", " 100 Steps "),
                ("SPANPROF_STEP", "train_step"),
            ]))
            .unwrap();
        assert_eq!(b.every, Some(Every::Steps(100)));
        assert_eq!(b.step_span.as_deref(), Some("train_step"));
        let b = Builder::default()
            .apply_env(env(&[("SPANPROF_EVERY", "30s")]))
            .unwrap();
        assert_eq!(b.every, Some(Every::Period(Duration::from_secs(30))));
        // Steps from the environment, the step span from the builder: one rule for both.
        let b = Builder::default()
            .with_step_span("step")
            .apply_env(env(&[("SPANPROF_EVERY", "5 steps")]))
            .unwrap()
            .checked()
            .unwrap();
        assert_eq!(b.every, Some(Every::Steps(5)));
        for (pairs, var) in [
            (&[("SPANPROF_EVERY", "5 steps")][..], "SPANPROF_EVERY"),
            (
                &[("SPANPROF_EVERY", "0 steps"), ("SPANPROF_STEP", "s")][..],
                "SPANPROF_EVERY",
            ),
            (&[("SPANPROF_EVERY", "1ms")][..], "SPANPROF_EVERY"),
            (&[("SPANPROF_EVERY", "")][..], "SPANPROF_EVERY"),
            (&[("SPANPROF_STEP", " ")][..], "SPANPROF_STEP"),
        ] {
            let e = err(pairs);
            assert!(
                matches!(&e, Error::InvalidEnv { var: got, .. } if *got == var),
                "{pairs:?}: {e:?}"
            );
        }
        assert!(err(&[("SPANPROF_EVERY", "5 steps")])
            .to_string()
            .contains("SPANPROF_STEP"));
        let e = Builder::default().with_step_span("").checked().unwrap_err();
        assert!(matches!(
            e,
            Error::InvalidSetting {
                method: "with_step_span",
                ..
            }
        ));
    }

    #[test]
    fn long_values_are_cut_in_messages() {
        let long = "x".repeat(5000);
        let e = err(&[("SPANPROF", long.as_str())]);
        let msg = e.to_string();
        assert!(msg.len() < 400, "{} bytes: {msg}", msg.len());
        assert!(msg.contains(&format!("\"{}…\"", "x".repeat(100))), "{msg}");
        let e = Builder::default()
            .with_filter(format!("{long}=notalevel"))
            .unwrap_err();
        assert!(e.to_string().contains('…'), "{e}");
    }
}

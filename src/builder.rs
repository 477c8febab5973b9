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
use crate::filter_hint::SeenCallsites;
use crate::gpu::GpuSource;
use crate::guard::{ProfileGuard, ProfileHandle};
use crate::layer::{LayerFilter, ProfileLayer};
use crate::output::{Destination, Format, Output, Selection, Table};
use crate::record::{Recorder, RunSettings};
use crate::samplers::{self, Readings, Timeline};
use crate::session::{EndNotes, ProfileSession, SessionOutputs};
use crate::switches::{Preset, Resources};

#[cfg(feature = "cuda")]
pub use crate::env::ENV_GPU_SPANS;
#[cfg(feature = "http")]
pub use crate::env::ENV_METRICS_ADDR;
#[cfg(feature = "chrome")]
pub use crate::env::ENV_TRACE;
pub use crate::env::{
    ENV_CPU_CLOCK, ENV_EVERY, ENV_FILTER, ENV_GRID, ENV_INTERVAL_MS, ENV_MAX_OVERHEAD, ENV_OUT,
    ENV_OUTPUT_FILTER, ENV_PRESET, ENV_REPORT, ENV_SAMPLERS, ENV_STEP, ENV_STRICT, ENV_TOP,
};

pub use crate::record::metrics::{MAX_METRICS, MAX_METRIC_SITES};
pub use crate::record::names::MAX_SPAN_NAMES;
pub use crate::record::tree::{MAX_TREE_DEPTH, MAX_TREE_NODES};

/// The GPU backend handed to the builder, for `Debug`.
#[derive(Default)]
struct GpuSourceBox(Option<Box<dyn GpuSource>>);

impl std::fmt::Debug for GpuSourceBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(source) => write!(f, "Some({})", source.backend()),
            None => f.write_str("None"),
        }
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

impl std::fmt::Display for ReportTarget {
    /// `SPANPROF_REPORT`'s spelling: `stderr`, `stdout`, `off`, or the path.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReportTarget::Stderr => f.write_str("stderr"),
            ReportTarget::Stdout => f.write_str("stdout"),
            ReportTarget::File(path) => write!(f, "{}", path.display()),
            ReportTarget::Off => f.write_str("off"),
        }
    }
}

/// The thread CPU clock spanprof reads per span at `detailed` and up (the CPU time of a span):
/// [`Builder::with_cpu_clock`], `SPANPROF_CPU_CLOCK` (`perf` or `thread`, case-insensitive).
///
/// The clock is the process's: the first profile built with [`CpuClock::Thread`] before any
/// thread opened its perf event makes every thread read `CLOCK_THREAD_CPUTIME_ID`; once perf
/// events are in use, the choice stays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CpuClock {
    /// A per-thread perf event counting the thread's task clock (the default), or
    /// `CLOCK_THREAD_CPUTIME_ID` where perf events are not allowed: its reads leave the
    /// scheduler alone.
    #[default]
    Perf,
    /// Always `CLOCK_THREAD_CPUTIME_ID`, whose reads bring the scheduler's accounting up to
    /// date (a thread whose time slice is used up is switched out there). See the guide's
    /// `docs/resources-and-gpu.md`, "Thread CPU time" (its "No distortion" paragraph).
    Thread,
}

impl CpuClock {
    /// What `SPANPROF_CPU_CLOCK` accepts.
    const ACCEPTED: &'static str = "`perf` or `thread`";

    /// `SPANPROF_CPU_CLOCK`'s spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            CpuClock::Perf => "perf",
            CpuClock::Thread => "thread",
        }
    }
}

impl std::str::FromStr for CpuClock {
    type Err = Error;

    /// `perf` or `thread`, case-insensitive, surrounding whitespace ignored.
    fn from_str(text: &str) -> Result<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "perf" => Ok(CpuClock::Perf),
            "thread" => Ok(CpuClock::Thread),
            _ => Err(Error::InvalidEnv {
                var: ENV_CPU_CLOCK,
                value: text.to_string(),
                expected: Self::ACCEPTED,
            }),
        }
    }
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
/// | `SPANPROF_CPU_CLOCK` | `perf` (default) or `thread`: the thread CPU clock read per span | [`Builder::with_cpu_clock`] |
/// | `SPANPROF_METRICS_ADDR` | `host:port` or a port (feature `http`) | `Builder::with_metrics_addr` |
/// | `SPANPROF_TRACE` | `off`, or a backend (`chrome`, `perfetto`) and the windows (`whole`, or `step=NAME,wait=N,warmup=N,active=N,repeat=N,skip_first=N`), comma-separated (feature `chrome`) | [`Builder::with_chrome`] |
/// | `SPANPROF_EVERY` | a duration (`30s`, `500ms`) or steps (`100 steps`), see [`Every`] | [`Builder::with_every`] |
/// | `SPANPROF_STEP` | a span name, e.g. `train_step` | [`Builder::with_step_span`] |
/// | `SPANPROF_GPU_SPANS` | `EnvFilter` directives, e.g. `[forward],[backward]` (feature `cuda`) | `Builder::with_gpu_spans` |
/// | `SPANPROF_STRICT` | `1`, `true`, `yes`, `on` or `0`, `false`, `no`, `off` | [`Builder::with_strict_env`] |
///
/// With the `otlp` feature, the OpenTelemetry variables (`OTEL_EXPORTER_OTLP_ENDPOINT`,
/// `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`, …) configure the OTLP metrics push: see
/// `spanprof::otlp`.
///
/// One rule per option, whichever source gives the value: [`Builder::build`] checks the
/// builder's values with the same rule the variable's value is checked with. Environment values
/// are trimmed of surrounding whitespace; keywords are case-insensitive; a variable that is set
/// must hold a value (an empty one is invalid: unset it instead).
///
/// A builder value outside its rule is an error naming the method and the value. A variable
/// outside its rule never stops the program (as `EnvFilter::from_env_lossy`): [`Builder::build`]
/// writes one line on stderr naming the variable, the value, what it accepts and the value used
/// instead (the builder's, which is the default unless the code set it), and goes on with that
/// value. The same goes for an `SPANPROF_OUT` directory that cannot be created or written (no
/// output directory, or the builder's) and an `SPANPROF_METRICS_ADDR` that cannot be bound.
/// In strict mode ([`Builder::with_strict_env`], `SPANPROF_STRICT=1`) each of those is an
/// error instead, naming the variable.
///
/// A variable set in the environment that spanprof would ignore although it was likely meant
/// for it gets one line on stderr too, in strict mode as well: a name one or two edits from one
/// of the variables above (`SPANPROF_MAX_OVERHAED`: "did you mean `SPANPROF_MAX_OVERHEAD`?"),
/// or one of them whose feature this build lacks.
///
/// The builder is not `Clone`: it owns the outputs of [`Builder::with_output`] and the GPU
/// source of [`Builder::with_gpu_source`], which its one build hands to the profile.
///
/// ```compile_fail
/// let builder = spanprof::ProfileLayer::builder();
/// let copy = builder.clone();
/// ```
#[derive(Debug)]
#[must_use]
pub struct Builder {
    preset: Preset,
    filter: Option<String>,
    report: ReportTarget,
    top: usize,
    output_dir: Option<PathBuf>,
    read_env: bool,
    /// Whether a variable outside its rule is an error (else a warning and the builder's value).
    strict_env: bool,
    clock: Option<Clock>,
    #[cfg(feature = "chrome")]
    chrome: Option<ChromeOptions>,
    resources: Option<Resources>,
    interval: Duration,
    gpu_source: GpuSourceBox,
    grid_g_per_kwh: Option<f64>,
    tree: bool,
    /// The back-off's threshold, %.
    max_overhead_pct: Option<f64>,
    /// The span names every output shows.
    selection: Selection,
    /// Outputs added with [`Builder::with_output`].
    outputs: Vec<Output>,
    /// Where the `/metrics` endpoint listens, if it is served.
    #[cfg(feature = "http")]
    metrics_addr: Option<std::net::SocketAddr>,
    every: Option<Every>,
    step_span: Option<String>,
    cpu_clock: CpuClock,
    #[cfg(feature = "otlp")]
    otlp: Option<crate::otlp::OtlpOptions>,
    /// GPU time per span (feature `cuda`).
    #[cfg(feature = "cuda")]
    cuda: CudaSettings,
    /// What the environment changed, for the values checked only by `build` (the output
    /// directory, the `/metrics` address) and for the report of the filter in force.
    from_env: FromEnv,
    /// The variables outside their rule, each replaced by the builder's value.
    warnings: Vec<EnvWarning>,
}

/// The settings of GPU time per span (feature `cuda`).
#[cfg(feature = "cuda")]
#[derive(Debug)]
struct CudaSettings {
    /// The GPU span filter's directives: none, no span is timed.
    spans: Option<String>,
    library: std::ffi::OsString,
    pool: usize,
    wait: Duration,
}

#[cfg(feature = "cuda")]
impl Default for CudaSettings {
    fn default() -> Self {
        Self {
            spans: None,
            library: crate::samplers::cuda::DEFAULT_LIBRARY.into(),
            pool: Builder::DEFAULT_GPU_POOL,
            wait: Builder::DEFAULT_GPU_WAIT,
        }
    }
}

/// The values the environment set that `build` checks later, each with the variable's text and
/// the builder's value it replaced.
#[derive(Debug, Default)]
struct FromEnv {
    out: Option<(String, Option<PathBuf>)>,
    #[cfg(feature = "http")]
    metrics_addr: Option<(String, Option<std::net::SocketAddr>)>,
    /// `SPANPROF_TRACE`, applied over the builder's trace options once the output directory
    /// is known.
    #[cfg(feature = "chrome")]
    trace: Option<crate::chrome::TraceSetting>,
    /// Whether the span filter came from `SPANPROF_FILTER`.
    filter: bool,
}

/// A variable outside its rule, and the value used instead.
#[derive(Debug)]
struct EnvWarning {
    /// The variable (tests read it).
    #[cfg_attr(not(test), allow(dead_code))]
    var: &'static str,
    /// What is wrong, naming the variable and its value.
    problem: String,
    /// The value used instead, as the user would write it, and where it comes from.
    used: String,
}

impl std::fmt::Display for EnvWarning {
    /// One line: `spanprof: <the problem>; using <the value> (the default)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "spanprof: {}; using {}", self.problem, self.used)
    }
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
            strict_env: false,
            clock: None,
            #[cfg(feature = "chrome")]
            chrome: None,
            resources: None,
            interval: Self::DEFAULT_SAMPLE_INTERVAL,
            gpu_source: GpuSourceBox::default(),
            grid_g_per_kwh: None,
            tree: true,
            max_overhead_pct: Some(Self::DEFAULT_MAX_OVERHEAD_PCT),
            selection: Selection::new(),
            outputs: Vec::new(),
            #[cfg(feature = "http")]
            metrics_addr: None,
            every: None,
            step_span: None,
            cpu_clock: CpuClock::default(),
            #[cfg(feature = "otlp")]
            otlp: None,
            #[cfg(feature = "cuda")]
            cuda: CudaSettings::default(),
            from_env: FromEnv::default(),
            warnings: Vec::new(),
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
    /// Event pairs per thread for GPU timing by default (feature `cuda`).
    #[cfg(feature = "cuda")]
    pub const DEFAULT_GPU_POOL: usize = crate::record::gpu::DEFAULT_POOL;
    /// How long the end of the run waits by default for GPU work still queued: 1 s (feature
    /// `cuda`).
    #[cfg(feature = "cuda")]
    pub const DEFAULT_GPU_WAIT: Duration = crate::record::gpu::DEFAULT_WAIT;

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
    /// directive's level; `[{field=value}]` does the same for any span with that field (a
    /// field name alone, `[{field}]`, is checked on events only: it enables every span up to
    /// its level). With any directive that has such a span part (`[...]` before the level),
    /// spans are decided per span, and the filter keeps track of the spans the directives name
    /// (see the guide's `docs/configuration-and-filtering.md`, "Filtering", for what that
    /// costs).
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
    /// `OTEL_*` ones) override the builder (default `true`). `false` turns every one of them
    /// off, `SPANPROF_STRICT` included.
    pub fn with_env(self, read_env: bool) -> Self {
        Self { read_env, ..self }
    }

    /// Whether a `SPANPROF*` variable outside its rule fails [`Builder::build`] (default
    /// `false`: one line on stderr names the variable, its value, what it accepts and the value
    /// used instead, and the program goes on with the builder's value; see [`Builder`]).
    /// `SPANPROF_STRICT` overrides it (`1`, `true`, `yes`, `on`; `0`, `false`, `no`, `off`).
    ///
    /// Values given to the builder's methods are checked either way: outside their rule they
    /// are an error.
    pub fn with_strict_env(self, strict: bool) -> Self {
        Self {
            strict_env: strict,
            ..self
        }
    }

    /// The thread CPU clock read per span at `detailed` and up (default [`CpuClock::Perf`]).
    /// `SPANPROF_CPU_CLOCK` overrides it. The clock is the process's: see [`CpuClock`].
    pub fn with_cpu_clock(self, clock: CpuClock) -> Self {
        Self {
            cpu_clock: clock,
            ..self
        }
    }

    /// The clock to read (default [`Clock::new`]); tests pass a [`Clock::mock`].
    pub fn with_clock(self, clock: Clock) -> Self {
        Self {
            clock: Some(clock),
            ..self
        }
    }

    /// Also writes Chrome / Perfetto traces of the steps a schedule selects, or of the whole
    /// run, through tracing-chrome or (feature `perfetto`) tracing-perfetto-file; add
    /// [`ProfileGuard::chrome_layer`] to the registry. See [`crate::chrome`]. `SPANPROF_TRACE`
    /// overrides the backend and the windows, and turns traces on without this call (into
    /// `spanprof-traces/` under the output directory, or in the working directory).
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
    pub fn with_output(mut self, format: impl Format + 'static, to: Destination) -> Self {
        self.outputs.push(Output {
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
            gpu_source: GpuSourceBox(Some(Box::new(source))),
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

    /// Times these spans on the GPU with CUDA events (feature `cuda`): `EnvFilter` directives,
    /// e.g. `"[forward],[backward]"` or `"my_model=debug"`, decided once per callsite from its
    /// target, level and name (a span directive `[name]` chooses every span of that name; field
    /// values are not looked at). `SPANPROF_GPU_SPANS` overrides it. No span is timed without
    /// it.
    ///
    /// Each entry of a chosen span records a CUDA event on the thread's stream
    /// ([`crate::cuda::set_stream`], else the legacy default stream) at its enter and its exit;
    /// spanprof's own thread reads the time between them once the GPU reached the second
    /// ([`GpuTime`](crate::profile::GpuTime) says what the time is). Without a CUDA driver
    /// (or with no GPU), one warning is logged and nothing else changes.
    ///
    /// # Errors
    /// [`Error::InvalidFilter`] if the directives do not parse, [`Error::InvalidSetting`] if
    /// they are empty.
    #[cfg(feature = "cuda")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
    pub fn with_gpu_spans(mut self, directives: impl Into<String>) -> Result<Self> {
        let directives = rules::gpu_spans(directives.into(), Origin::Builder("with_gpu_spans"))?;
        self.cuda.spans = Some(directives);
        Ok(self)
    }

    /// The CUDA driver library to load (default `libcuda.so.1`, `nvcuda.dll` on Windows): a
    /// path, or a name for the library search path (feature `cuda`).
    #[cfg(feature = "cuda")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
    pub fn with_cuda_library(mut self, library: impl Into<std::ffi::OsString>) -> Self {
        self.cuda.library = library.into();
        self
    }

    /// Event pairs per thread for GPU timing (default [`Builder::DEFAULT_GPU_POOL`], at least
    /// 1; feature `cuda`): entries of chosen spans begun while this many of the thread's are
    /// still queued on the GPU are not timed, and counted
    /// ([`GpuTime::untimed`](crate::profile::GpuTime::untimed)).
    #[cfg(feature = "cuda")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
    pub fn with_gpu_pool(mut self, pairs: usize) -> Self {
        self.cuda.pool = pairs.max(1);
        self
    }

    /// How long the end of the run waits for entries still queued on the GPU (default
    /// [`Builder::DEFAULT_GPU_WAIT`]; feature `cuda`); those left are counted
    /// ([`GpuTime::abandoned`](crate::profile::GpuTime::abandoned)).
    #[cfg(feature = "cuda")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
    pub fn with_gpu_wait(mut self, wait: Duration) -> Self {
        self.cuda.wait = wait;
        self
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
    /// A variable outside its rule (or an `SPANPROF_OUT` that cannot be written, an
    /// `SPANPROF_METRICS_ADDR` that cannot be bound) is one line on stderr, and the builder's
    /// value is used instead, unless strict mode ([`Builder::with_strict_env`],
    /// `SPANPROF_STRICT`) makes it an error.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] naming the builder method, with the value that is wrong;
    /// [`Error::InvalidFilter`] if the builder's filter directives do not parse; [`Error::Io`]
    /// naming the output directory if it cannot be created or written; [`Error::Io`] naming the
    /// address if the `/metrics` endpoint cannot be bound. In strict mode,
    /// [`Error::InvalidEnv`] naming the variable, or the errors above for values the
    /// environment gave. Nothing is installed in that case. With [`Builder::with_chrome`]:
    /// [`Error::InvalidChromeOptions`], or [`Error::Io`] if the trace directory cannot be created.
    pub fn build(self) -> Result<(ProfileLayer, ProfileGuard)> {
        let read_env = self.read_env;
        if read_env {
            // A variable likely meant for spanprof that it would ignore: one line each.
            use std::io::Write;
            let names = std::env::vars_os().map(|(name, _)| name);
            for line in crate::env::ignored_variables(names) {
                let _ = writeln!(std::io::stderr().lock(), "{line}");
            }
        }
        self.build_from(|var| {
            // `RUST_LOG` is no setting: read for the line of a run that recorded nothing.
            if read_env || var == RUST_LOG {
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
        let mut b = self.apply_env(&get)?.checked()?;
        let filter = match &b.filter {
            Some(directives) => Some(LayerFilter::new(
                parse_filter(directives, "the configuration")?,
                directives,
            )),
            None => None,
        };
        let records = b.preset.records();
        // The off preset writes nothing: it creates no directory either.
        let report = if records {
            b.prepare_output_dir()?;
            prepare_report(b.report.clone())
        } else {
            ReportTarget::Off
        };
        #[cfg(feature = "http")]
        let metrics_listener = match records {
            true => b.bind_metrics()?,
            false => None,
        };
        // Every variable outside its rule, once, before anything runs: no subscriber may exist
        // yet, so stderr (a closed one loses them).
        for warning in &b.warnings {
            use std::io::Write;
            let _ = writeln!(std::io::stderr().lock(), "{warning}");
        }
        if records && b.cpu_clock == CpuClock::Thread {
            samplers::cpu::use_thread_clock();
        }
        // The callsites registered, for the span filter's hint at the end.
        let seen = match (&b.filter, records) {
            (Some(_), true) => Some(Arc::new(SeenCallsites::default())),
            _ => None,
        };
        let notes = EndNotes {
            to_stdout: report == ReportTarget::Stdout,
            rust_log: get(RUST_LOG).map(|v| v.to_string_lossy().into_owned()),
            filter: b.filter.clone().map(|directives| {
                let origin = if b.from_env.filter {
                    ENV_FILTER
                } else {
                    "Builder::with_filter"
                };
                (origin, directives)
            }),
            output_dir: b.output_dir.clone(),
            seen: seen.clone(),
        };
        #[cfg(feature = "chrome")]
        let chrome_options = match b.from_env.trace.take() {
            Some(setting) => setting.apply(b.chrome.take(), b.output_dir.as_deref()),
            None => b.chrome.take(),
        };
        #[cfg(feature = "chrome")]
        let chrome = match chrome_options {
            Some(options) if records => Some(Arc::new(ChromeSession::new(options)?)),
            _ => None,
        };
        let resources = if records {
            b.resources.unwrap_or_else(|| b.preset.resources())
        } else {
            Resources::NONE
        };
        let gpu_source = b.gpu_source.0.take();
        let clock = b.clock.unwrap_or_default();
        // Time 0 of the profile, for the recorder's clock and the sampler's timeline.
        let (start_raw, origin) = (clock.raw(), Instant::now());
        let readings = Arc::new(Readings::new());
        let timeline = Arc::new(Timeline::default());
        // Held by the layer and every handle, not the guard: spanprof's threads end once they
        // are all dropped, so a leaked guard keeps none running.
        let uses = crate::worker::Use::new();
        let sampler = if resources.is_empty() {
            None
        } else {
            samplers::start(
                b.interval,
                resources,
                gpu_source,
                origin,
                &readings,
                &timeline,
                &uses.downgrade(),
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
        #[cfg(feature = "cuda")]
        let (gpu_timer, gpu_filter) = match (&b.cuda.spans, records) {
            (Some(directives), true) => match start_cuda(&b.cuda) {
                Some(timer) => (
                    Some(timer),
                    Some(parse_filter(directives, "the configuration")?),
                ),
                None => (None, None),
            },
            _ => (None, None),
        };
        let recorder = Recorder::new(
            clock, start_raw, records, resources, readings, timeline, settings,
        )
        .with_steps(steps.clone());
        #[cfg(feature = "cuda")]
        let recorder = recorder.with_gpu(gpu_timer);
        let recorder = Arc::new(recorder);
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
            outputs.append(&mut b.outputs);
        }

        let backoff = match b.max_overhead_pct {
            Some(pct) if records => {
                crate::backoff::Backoff::start(&recorder, pct, &uses.downgrade())
            }
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
                notes,
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
                &uses.downgrade(),
            );
        }
        #[cfg(feature = "cuda")]
        if let Some(timer) = recorder.gpu() {
            session.set_gpu_resolver(crate::record::gpu::GpuTimer::start_thread(
                timer,
                &uses.downgrade(),
            ));
        }
        let handle = ProfileHandle::new(session);
        #[cfg(feature = "http")]
        if let Some(listener) = metrics_listener {
            handle.serve_metrics(listener);
        }
        let guard = ProfileGuard::new(handle).with_use(&uses);
        let layer = ProfileLayer::new(recorder, filter, records);
        #[cfg(feature = "cuda")]
        let layer = layer.with_gpu_filter(gpu_filter);
        Ok((layer.with_use(uses).with_seen_callsites(seen), guard))
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
        #[cfg(feature = "cuda")]
        if let Some(spans) = self.cuda.spans.take() {
            self.cuda.spans = Some(rules::gpu_spans(spans, Origin::Builder("with_gpu_spans"))?);
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
    /// A value outside its rule leaves the builder's value and is noted in `warnings` (in
    /// strict mode: the error).
    pub(crate) fn apply_env(
        mut self,
        get: impl Fn(&str) -> Option<std::ffi::OsString>,
    ) -> Result<Self> {
        let get: &dyn Fn(&str) -> Option<std::ffi::OsString> = &get;
        // Strict mode first: it decides what the others' errors are.
        self.env_var(get, ENV_STRICT, rules::STRICT, |b, v| {
            b.strict_env = rules::strict(&v)?;
            Ok(())
        })?;
        self.env_var(get, ENV_PRESET, Preset::ACCEPTED, |b, v| {
            b.preset = v.parse()?;
            Ok(())
        })?;
        self.env_var(get, ENV_FILTER, rules::FILTER, |b, v| {
            b.filter = Some(rules::filter(v.clone(), Origin::Env(ENV_FILTER, &v))?);
            b.from_env.filter = true;
            Ok(())
        })?;
        #[cfg(feature = "cuda")]
        self.env_var(get, ENV_GPU_SPANS, rules::FILTER, |b, v| {
            b.cuda.spans = Some(rules::gpu_spans(v.clone(), Origin::Env(ENV_GPU_SPANS, &v))?);
            Ok(())
        })?;
        self.env_var(get, ENV_REPORT, rules::REPORT, |b, v| {
            b.report = rules::report(rules::parse_report(&v), Origin::Env(ENV_REPORT, &v))?;
            Ok(())
        })?;
        self.env_var(get, ENV_TOP, rules::TOP, |b, v| {
            let n = rules::number(&v, ENV_TOP, rules::TOP)?;
            b.top = rules::top(n, Origin::Env(ENV_TOP, &v))?;
            Ok(())
        })?;
        self.env_var(get, ENV_SAMPLERS, Resources::ACCEPTED, |b, v| {
            b.resources = Some(v.parse()?);
            Ok(())
        })?;
        self.env_var(get, ENV_INTERVAL_MS, rules::INTERVAL, |b, v| {
            let ms: u64 = rules::number(&v, ENV_INTERVAL_MS, rules::INTERVAL)?;
            b.interval =
                rules::interval(Duration::from_millis(ms), Origin::Env(ENV_INTERVAL_MS, &v))?;
            Ok(())
        })?;
        self.env_var(get, ENV_GRID, rules::GRID, |b, v| {
            let g = rules::number(&v, ENV_GRID, rules::GRID)?;
            b.grid_g_per_kwh = Some(rules::grid(g, Origin::Env(ENV_GRID, &v))?);
            Ok(())
        })?;
        self.env_var(get, ENV_MAX_OVERHEAD, rules::MAX_OVERHEAD, |b, v| {
            b.max_overhead_pct = if v.eq_ignore_ascii_case("off") {
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
            Ok(())
        })?;
        self.env_var(get, ENV_CPU_CLOCK, CpuClock::ACCEPTED, |b, v| {
            b.cpu_clock = v.parse()?;
            Ok(())
        })?;
        #[cfg(feature = "http")]
        self.env_var(get, ENV_METRICS_ADDR, rules::METRICS_ADDR, |b, v| {
            let addr = rules::metrics_addr(&v)?;
            let builder_value = b.metrics_addr.replace(addr);
            b.from_env.metrics_addr = Some((v, builder_value));
            Ok(())
        })?;
        self.env_var(
            get,
            ENV_OUTPUT_FILTER,
            crate::output::SELECTION_EXPECTED,
            |b, v| {
                let from = Origin::Env(ENV_OUTPUT_FILTER, &v);
                let selection = v
                    .parse()
                    .map_err(|_| from.invalid(&v, crate::output::SELECTION_EXPECTED))?;
                b.selection = rules::output_filter(selection, from)?;
                Ok(())
            },
        )?;
        self.env_var(get, ENV_OUT, rules::OUT, |b, v| {
            let dir = rules::output_dir(PathBuf::from(&v), Origin::Env(ENV_OUT, &v))?;
            let builder_value = b.output_dir.replace(dir);
            b.from_env.out = Some((v, builder_value));
            Ok(())
        })?;
        #[cfg(feature = "chrome")]
        self.env_var(get, ENV_TRACE, crate::chrome::TRACE_ACCEPTED, |b, v| {
            b.from_env.trace = Some(v.parse()?);
            Ok(())
        })?;
        self.env_var(get, ENV_STEP, rules::STEP, |b, v| {
            b.step_span = Some(rules::step_span(v.clone(), Origin::Env(ENV_STEP, &v))?);
            Ok(())
        })?;
        self.env_var(get, ENV_EVERY, Every::ACCEPTED, |b, v| {
            let every: Every = v.parse()?;
            let every = rules::every(every, b.step_span.is_some(), Origin::Env(ENV_EVERY, &v))?;
            b.every = Some(every);
            Ok(())
        })?;
        Ok(self)
    }

    /// Reads `var` and, if it is set, applies its value with `apply` (which changes nothing
    /// when it fails). A value outside the rule is the error in strict mode; otherwise it is
    /// noted in `warnings` with the value kept instead.
    fn env_var(
        &mut self,
        get: &dyn Fn(&str) -> Option<std::ffi::OsString>,
        var: &'static str,
        expected: &'static str,
        apply: impl FnOnce(&mut Self, String) -> Result<()>,
    ) -> Result<()> {
        let applied = match read_var(get, var, expected) {
            Ok(None) => return Ok(()),
            Ok(Some(value)) => apply(self, value),
            Err(e) => Err(e),
        };
        match applied {
            Ok(()) => Ok(()),
            Err(e) if self.strict_env => Err(e),
            Err(e) => {
                let used = self.in_use(var);
                self.warnings.push(EnvWarning {
                    var,
                    problem: e.to_string(),
                    used,
                });
                Ok(())
            }
        }
    }

    /// The value of `var`'s option now, as the user would write it, and whether it is the
    /// default or the builder's: what a variable outside its rule is replaced by.
    fn in_use(&self, var: &str) -> String {
        let d = Builder::default();
        let quoted = |text: &str| format!("{:?}", crate::error::truncate(text));
        let (value, default) = match var {
            ENV_STRICT => (
                (if self.strict_env {
                    "strict"
                } else {
                    "not strict"
                })
                .to_string(),
                self.strict_env == d.strict_env,
            ),
            ENV_PRESET => (self.preset.as_str().to_string(), self.preset == d.preset),
            ENV_FILTER => match &self.filter {
                Some(f) => (format!("the filter {}", quoted(f)), false),
                None => ("no filter".to_string(), true),
            },
            #[cfg(feature = "cuda")]
            ENV_GPU_SPANS => match &self.cuda.spans {
                Some(f) => (format!("the GPU span filter {}", quoted(f)), false),
                None => ("no span timed on the GPU".to_string(), true),
            },
            ENV_REPORT => (self.report.to_string(), self.report == d.report),
            ENV_TOP => (self.top.to_string(), self.top == d.top),
            ENV_OUT => match &self.output_dir {
                Some(dir) => (dir.display().to_string(), false),
                None => ("no output directory".to_string(), true),
            },
            ENV_SAMPLERS => match self.resources {
                Some(r) => (r.to_string(), false),
                None => (
                    format!(
                        "the {} preset's samplers ({})",
                        self.preset.as_str(),
                        self.preset.resources()
                    ),
                    true,
                ),
            },
            ENV_INTERVAL_MS => (
                format!("{} ms", self.interval.as_millis()),
                self.interval == d.interval,
            ),
            ENV_GRID => match self.grid_g_per_kwh {
                Some(g) => (format!("{g} g CO2e/kWh"), false),
                None => ("no grid intensity (no CO2e figures)".to_string(), true),
            },
            ENV_OUTPUT_FILTER => match self.selection == d.selection {
                true => ("every span name".to_string(), true),
                false => (quoted(&self.selection.to_string()), false),
            },
            ENV_MAX_OVERHEAD => (
                self.max_overhead_pct
                    .map_or_else(|| "off".to_string(), |p| format!("{p}%")),
                self.max_overhead_pct == d.max_overhead_pct,
            ),
            ENV_CPU_CLOCK => (
                self.cpu_clock.as_str().to_string(),
                self.cpu_clock == d.cpu_clock,
            ),
            #[cfg(feature = "http")]
            ENV_METRICS_ADDR => match self.metrics_addr {
                Some(addr) => (addr.to_string(), false),
                None => ("no /metrics endpoint".to_string(), true),
            },
            ENV_EVERY => match self.every {
                Some(every) => (every.to_string(), false),
                None => ("no export cadence".to_string(), true),
            },
            #[cfg(feature = "chrome")]
            ENV_TRACE => (
                crate::chrome::describe_options(self.chrome.as_ref()),
                self.chrome.is_none(),
            ),
            ENV_STEP => match &self.step_span {
                Some(name) => (quoted(name), false),
                None => ("no step span".to_string(), true),
            },
            _ => return "the builder's value".to_string(),
        };
        let whose = if default {
            "the default"
        } else {
            "the builder's"
        };
        format!("{value} ({whose})")
    }

    /// Creates the output directory and checks that a file can be written there. One that
    /// `SPANPROF_OUT` gave and that cannot be written is replaced by the builder's (with a
    /// warning) unless in strict mode.
    fn prepare_output_dir(&mut self) -> Result<()> {
        let Some(dir) = &self.output_dir else {
            return Ok(());
        };
        let Err(source) = crate::atomic_file::probe_dir(dir) else {
            return Ok(());
        };
        let e = Error::Io {
            action: "preparing output directory",
            path: dir.clone(),
            source,
        };
        match self.from_env.out.take() {
            Some((text, builder_value)) if !self.strict_env => {
                self.output_dir = builder_value;
                let used = self.in_use(ENV_OUT);
                self.warnings.push(EnvWarning {
                    var: ENV_OUT,
                    problem: format!("{ENV_OUT}={:?}: {e}", crate::error::truncate(&text)),
                    used,
                });
                // The builder's own directory: an error if it cannot be written.
                self.prepare_output_dir()
            }
            _ => Err(e),
        }
    }

    /// Binds the `/metrics` endpoint's address, if it is served. One that
    /// `SPANPROF_METRICS_ADDR` gave and that cannot be bound is replaced by the builder's (with
    /// a warning) unless in strict mode.
    #[cfg(feature = "http")]
    fn bind_metrics(&mut self) -> Result<Option<crate::http::Listener>> {
        let Some(addr) = self.metrics_addr else {
            return Ok(None);
        };
        let source = match crate::http::bind(addr) {
            Ok(listener) => return Ok(Some(listener)),
            Err(source) => source,
        };
        let e = Error::Io {
            action: "binding the /metrics endpoint",
            path: PathBuf::from(addr.to_string()),
            source,
        };
        match self.from_env.metrics_addr.take() {
            Some((text, builder_value)) if !self.strict_env => {
                self.metrics_addr = builder_value;
                let used = self.in_use(ENV_METRICS_ADDR);
                self.warnings.push(EnvWarning {
                    var: ENV_METRICS_ADDR,
                    problem: format!(
                        "{ENV_METRICS_ADDR}={:?}: {e}",
                        crate::error::truncate(&text)
                    ),
                    used,
                });
                self.bind_metrics()
            }
            _ => Err(e),
        }
    }
}

/// The name of the variable most subscribers' filter reads (`EnvFilter`).
const RUST_LOG: &str = "RUST_LOG";

/// `var`'s value through `get`, trimmed; `None` if unset. A variable that is set must hold
/// something (an empty value is an error, as one that is not UTF-8).
fn read_var(
    get: &dyn Fn(&str) -> Option<std::ffi::OsString>,
    var: &'static str,
    expected: &'static str,
) -> Result<Option<String>> {
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
    pub(super) const STRICT: &str = "1, true, yes, on (strict) or 0, false, no, off";

    /// `SPANPROF_STRICT`: a yes or a no, case-insensitive.
    pub(super) fn strict(text: &str) -> Result<bool> {
        match text.to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(true),
            "0" | "false" | "no" | "off" => Ok(false),
            _ => Err(Error::InvalidEnv {
                var: ENV_STRICT,
                value: text.to_string(),
                expected: STRICT,
            }),
        }
    }

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
        directives_of(directives, from, "Builder::with_filter")
    }

    /// The GPU span filter's rule: the span filter's.
    #[cfg(feature = "cuda")]
    pub(super) fn gpu_spans(directives: String, from: Origin<'_>) -> Result<String> {
        directives_of(directives, from, "Builder::with_gpu_spans")
    }

    /// `EnvFilter` directives, not empty; `method` names the builder's in errors.
    fn directives_of(directives: String, from: Origin<'_>, method: &'static str) -> Result<String> {
        if directives.trim().is_empty() {
            return Err(from.invalid(&directives, FILTER));
        }
        let origin = match from {
            Origin::Env(var, _) => var,
            Origin::Builder(_) => method,
        };
        parse_filter(&directives, origin)?;
        Ok(directives)
    }
}

/// Checks the directory of a report file, and sends the report to standard error instead (with
/// one warning) if that one cannot be written. Returns where the report goes.
fn prepare_report(report: ReportTarget) -> ReportTarget {
    let ReportTarget::File(path) = report else {
        return report;
    };
    let dir = match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(dir) => dir.to_path_buf(),
        None => PathBuf::from("."),
    };
    match crate::atomic_file::probe_dir(&dir) {
        Ok(()) => ReportTarget::File(path),
        Err(e) => {
            let why = format!(
                "spanprof cannot write the report to {}: {e}; it goes to stderr instead",
                path.display()
            );
            // At build time no subscriber may be installed yet: stderr always shows it.
            tracing::warn!(target: crate::PERF_TARGET, path = %path.display(), error = %e, "{why}");
            eprintln!("spanprof: {why}");
            ReportTarget::Stderr
        }
    }
}

/// Loads the CUDA driver for GPU time per span; without one, one warning, and `None`.
#[cfg(feature = "cuda")]
fn start_cuda(settings: &CudaSettings) -> Option<Arc<crate::record::gpu::GpuTimer>> {
    match crate::samplers::cuda::Driver::load(&settings.library) {
        Ok(driver) => Some(Arc::new(crate::record::gpu::GpuTimer::new(
            driver,
            settings.pool,
            settings.wait,
        ))),
        Err(reason) => {
            tracing::warn!(
                target: crate::PERF_TARGET,
                %reason,
                "spanprof: GPU time per span off (no CUDA driver)"
            );
            None
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

    /// The error of the first variable outside its rule, in strict mode.
    fn err(pairs: &[(&str, &str)]) -> Error {
        Builder::default()
            .with_strict_env(true)
            .apply_env(env(pairs))
            .unwrap_err()
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
        for (v, want) in [
            ("perf", CpuClock::Perf),
            (" Thread ", CpuClock::Thread),
            ("THREAD", CpuClock::Thread),
        ] {
            let b = Builder::default()
                .apply_env(env(&[("SPANPROF_CPU_CLOCK", v)]))
                .unwrap();
            assert_eq!(b.cpu_clock, want, "{v:?}");
            assert!(b.warnings.is_empty());
        }
        for v in ["tsc", "", "threads"] {
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
            .with_strict_env(true)
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

    /// `SPANPROF_GPU_SPANS`: the GPU span filter, by the span filter's rule; a bad value is
    /// one warning naming the variable, the builder's value kept (strict: the error).
    #[cfg(feature = "cuda")]
    #[test]
    fn gpu_spans_from_env() {
        let b = Builder::default()
            .with_gpu_spans("[step]")
            .unwrap()
            .apply_env(env(&[("SPANPROF_GPU_SPANS", "[forward],[backward]")]))
            .unwrap();
        assert_eq!(b.cuda.spans.as_deref(), Some("[forward],[backward]"));
        for v in ["", "my_app=notalevel"] {
            let lossy = Builder::default()
                .with_gpu_spans("[step]")
                .unwrap()
                .apply_env(env(&[("SPANPROF_GPU_SPANS", v)]))
                .unwrap();
            assert_eq!(lossy.cuda.spans.as_deref(), Some("[step]"), "{v:?}");
            assert_eq!(lossy.warnings.len(), 1);
            let line = lossy.warnings[0].to_string();
            assert!(line.contains("SPANPROF_GPU_SPANS"), "{line}");
            assert!(line.contains("the GPU span filter \"[step]\""), "{line}");
            let e = err(&[("SPANPROF_GPU_SPANS", v)]);
            assert!(e.to_string().contains("SPANPROF_GPU_SPANS"), "{e}");
        }
        assert!(Builder::default().with_gpu_spans("  ").is_err());
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

    /// Every variable outside its rule: one warning naming it, its value and the value used
    /// instead, which is the builder's (the default where the code set none); no error.
    #[test]
    fn a_variable_outside_its_rule_falls_back_to_the_builders_value() {
        let code = || {
            Builder::default()
                .with_preset(Preset::Detailed)
                .with_report(ReportTarget::Stdout)
                .with_top(7)
                .with_sample_interval(Duration::from_millis(250))
                .with_cpu_clock(CpuClock::Thread)
        };
        type Check = fn(&Builder) -> bool;
        let cases: Vec<(&str, &str, Check, &str)> = vec![
            (
                "SPANPROF_STRICT",
                "maybe",
                |b| !b.strict_env,
                "not strict (the default)",
            ),
            (
                "SPANPROF",
                "verbose",
                |b| b.preset == Preset::Detailed,
                "detailed (the builder's)",
            ),
            (
                "SPANPROF_FILTER",
                "my_app=notalevel",
                |b| b.filter.is_none(),
                "no filter (the default)",
            ),
            (
                "SPANPROF_REPORT",
                " ",
                |b| b.report == ReportTarget::Stdout,
                "stdout (the builder's)",
            ),
            ("SPANPROF_TOP", "many", |b| b.top == 7, "7 (the builder's)"),
            (
                "SPANPROF_OUT",
                "",
                |b| b.output_dir.is_none(),
                "no output directory (the default)",
            ),
            (
                "SPANPROF_SAMPLERS",
                "cpu,disk",
                |b| b.resources.is_none(),
                "the detailed preset's samplers",
            ),
            (
                "SPANPROF_INTERVAL_MS",
                "0",
                |b| b.interval == Duration::from_millis(250),
                "250 ms (the builder's)",
            ),
            (
                "SPANPROF_GRID_G_PER_KWH",
                "-1",
                |b| b.grid_g_per_kwh.is_none(),
                "no grid intensity",
            ),
            (
                "SPANPROF_OUTPUT_FILTER",
                "top=0",
                |b| b.selection == Selection::new(),
                "every span name (the default)",
            ),
            (
                "SPANPROF_MAX_OVERHEAD",
                "200",
                |b| b.max_overhead_pct == Some(5.0),
                "5% (the default)",
            ),
            (
                "SPANPROF_CPU_CLOCK",
                "tsc",
                |b| b.cpu_clock == CpuClock::Thread,
                "thread (the builder's)",
            ),
            #[cfg(feature = "http")]
            (
                "SPANPROF_METRICS_ADDR",
                "localhost:9464",
                |b| b.metrics_addr.is_none(),
                "no /metrics endpoint (the default)",
            ),
            (
                "SPANPROF_EVERY",
                "5 steps",
                |b| b.every.is_none(),
                "no export cadence (the default)",
            ),
            (
                "SPANPROF_STEP",
                " ",
                |b| b.step_span.is_none(),
                "no step span (the default)",
            ),
        ];
        for (var, value, check, used) in cases {
            let b = code().apply_env(env(&[(var, value)])).unwrap();
            assert!(check(&b), "{var}={value:?}: {b:?}");
            assert_eq!(b.warnings.len(), 1, "{var}={value:?}: {:?}", b.warnings);
            let warning = &b.warnings[0];
            assert_eq!(warning.var, var);
            let line = warning.to_string();
            assert!(
                line.starts_with("spanprof: ")
                    && line.contains(var)
                    && line.contains(&format!("{:?}", value))
                    && line.contains(&format!("; using {used}")),
                "{var}={value:?}: {line}"
            );
            assert!(!line.contains('\n'), "one line: {line}");
            // The same value in strict mode: the error naming the variable.
            let e = code()
                .with_strict_env(true)
                .apply_env(env(&[(var, value)]))
                .unwrap_err();
            assert!(e.to_string().contains(var), "{var}: {e}");
        }
        // The other variables still apply.
        let b = Builder::default()
            .apply_env(env(&[("SPANPROF", "verbose"), ("SPANPROF_TOP", "3")]))
            .unwrap();
        assert_eq!((b.preset, b.top), (Preset::Basic, 3));
        assert_eq!(
            b.warnings[0].to_string(),
            "spanprof: invalid value \"verbose\" for environment variable SPANPROF: expected one \
             of off, basic, detailed, full (case-insensitive); using basic (the default)"
        );
    }

    #[test]
    fn strict_mode_from_the_builder_or_the_environment() {
        let verbose = [("SPANPROF", "verbose")];
        for (builder, pairs, strict) in [
            (Builder::default(), &[][..], false),
            (Builder::default().with_strict_env(true), &[][..], true),
            (Builder::default(), &[("SPANPROF_STRICT", "1")][..], true),
            (
                Builder::default(),
                &[("SPANPROF_STRICT", " Yes ")][..],
                true,
            ),
            (Builder::default(), &[("SPANPROF_STRICT", "on")][..], true),
            // The variable overrides the builder, as every variable does.
            (
                Builder::default().with_strict_env(true),
                &[("SPANPROF_STRICT", "false")][..],
                false,
            ),
            // An invalid SPANPROF_STRICT is itself an error in strict mode only.
            (Builder::default(), &[("SPANPROF_STRICT", "2")][..], false),
        ] {
            let pairs: Vec<_> = pairs.iter().chain(&verbose).copied().collect();
            let result = builder.apply_env(env(&pairs));
            match (result, strict) {
                (Err(e), true) => assert!(
                    matches!(
                        e,
                        Error::InvalidEnv {
                            var: "SPANPROF",
                            ..
                        }
                    ),
                    "{pairs:?}: {e:?}"
                ),
                (Ok(b), false) => assert!(!b.warnings.is_empty(), "{pairs:?}"),
                (result, _) => panic!("{pairs:?}: {result:?}"),
            }
        }
        assert!(Builder::default()
            .with_strict_env(true)
            .apply_env(env(&[("SPANPROF_STRICT", "2")]))
            .is_err());
    }

    /// `SPANPROF=verbose` builds and profiles with the default preset; strict, it fails the
    /// build naming the variable; a builder value outside its rule stays an error.
    #[test]
    fn a_bad_variable_never_fails_the_build_unless_strict() {
        let (_layer, guard) = Builder::default()
            .with_report(ReportTarget::Off)
            .build_from(env(&[("SPANPROF", "verbose")]))
            .unwrap();
        assert_eq!(guard.snapshot().run.preset, "basic");
        let e = Builder::default()
            .with_report(ReportTarget::Off)
            .build_from(env(&[("SPANPROF", "verbose"), ("SPANPROF_STRICT", "1")]))
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidEnv {
                    var: "SPANPROF",
                    ..
                }
            ),
            "{e:?}"
        );
        let e = Builder::default()
            .with_top(0)
            .build_from(env(&[("SPANPROF", "verbose")]))
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidSetting {
                    method: "with_top",
                    ..
                }
            ),
            "{e:?}"
        );
    }

    /// An `SPANPROF_OUT` that cannot be created: the builder's directory (or none) instead,
    /// with a warning; an error in strict mode, and for the builder's own directory.
    #[cfg(target_os = "linux")]
    #[test]
    fn an_output_directory_from_the_environment_that_cannot_be_written_falls_back() {
        let bad = [("SPANPROF_OUT", "/proc/nonexistent/spanprof")];
        let b = Builder::default().apply_env(env(&bad)).unwrap();
        let mut b = b.checked().unwrap();
        b.prepare_output_dir().unwrap();
        assert_eq!(b.output_dir, None);
        assert_eq!(b.warnings.len(), 1);
        let line = b.warnings[0].to_string();
        assert!(
            line.starts_with(
                "spanprof: SPANPROF_OUT=\"/proc/nonexistent/spanprof\": preparing \
                              output directory /proc/nonexistent/spanprof: "
            ) && line.ends_with("; using no output directory (the default)"),
            "{line}"
        );
        let dir = std::env::temp_dir().join(format!("spanprof-out-{}", std::process::id()));
        let mut b = Builder::default()
            .with_output_dir(&dir)
            .apply_env(env(&bad))
            .unwrap();
        b.prepare_output_dir().unwrap();
        assert_eq!(b.output_dir.as_deref(), Some(dir.as_path()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut b = Builder::default()
            .with_strict_env(true)
            .apply_env(env(&bad))
            .unwrap();
        assert!(matches!(b.prepare_output_dir(), Err(Error::Io { .. })));
        let mut b = Builder::default()
            .with_output_dir("/proc/nonexistent/code")
            .apply_env(env(&[]))
            .unwrap();
        assert!(matches!(b.prepare_output_dir(), Err(Error::Io { .. })));
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

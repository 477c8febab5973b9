//! The builder, presets and environment configuration.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tracing_subscriber::EnvFilter;

use crate::chrome::{ChromeOptions, Session as ChromeSession};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::guard::{ProfileGuard, ProfileHandle};
use crate::layer::ProfileLayer;
use crate::profiler::Inner;
use crate::samplers::gpu::GpuSource;

/// Environment variable: the master switch and preset (`off`, `basic`, `detailed`, `full`).
pub const ENV_PRESET: &str = "SPANPROF";
/// Environment variable: which spans are profiled, in `EnvFilter` directive syntax.
pub const ENV_FILTER: &str = "SPANPROF_FILTER";
/// Environment variable: where the report goes on drop (`stderr`, `off`, or a file path).
pub const ENV_REPORT: &str = "SPANPROF_REPORT";
/// Environment variable: how many rows the report shows.
pub const ENV_TOP: &str = "SPANPROF_TOP";
/// Environment variable: the output directory (`profile.json` is written there on drop).
pub const ENV_OUT: &str = "SPANPROF_OUT";

/// How much spanprof records.
///
/// Only timing exists so far: `detailed` and `full` record what `basic` records (resource
/// samplers attach to them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Preset {
    /// Record nothing: every callback returns at once.
    Off,
    /// Span timing: busy, self and wall time histograms, throughput and errors.
    #[default]
    Basic,
    /// `basic`, plus resource samples where available.
    Detailed,
    /// `detailed`, plus GPU and energy where available.
    Full,
}

impl Preset {
    const ACCEPTED: &'static str = "one of off, basic, detailed, full (case-insensitive)";

    /// The preset's name as `SPANPROF` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Preset::Off => "off",
            Preset::Basic => "basic",
            Preset::Detailed => "detailed",
            Preset::Full => "full",
        }
    }

    pub(crate) fn records(self) -> bool {
        self != Preset::Off
    }
}

impl std::str::FromStr for Preset {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "off" => Ok(Preset::Off),
            "basic" => Ok(Preset::Basic),
            "detailed" => Ok(Preset::Detailed),
            "full" => Ok(Preset::Full),
            _ => Err(Error::InvalidEnv {
                var: ENV_PRESET,
                value: s.to_string(),
                expected: Self::ACCEPTED,
            }),
        }
    }
}

/// Environment variable: which resource samplers run (`memory,heap,cpu,gpu,energy`, `none`),
/// overriding the preset's choice.
pub const ENV_SAMPLERS: &str = "SPANPROF_SAMPLERS";
/// Environment variable: the sampling interval in milliseconds.
pub const ENV_INTERVAL_MS: &str = "SPANPROF_INTERVAL_MS";
/// Environment variable: grid carbon intensity, grams CO2e per kWh (enables CO2e figures).
pub const ENV_GRID: &str = "SPANPROF_GRID_G_PER_KWH";

/// Which resources spanprof records per span. The preset chooses ([`Samplers::for_preset`]);
/// [`Builder::with_samplers`] or `SPANPROF_SAMPLERS` switch each alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Samplers {
    /// RSS and peak RSS per span instance (sampled), and in the timeline.
    pub memory: bool,
    /// Bytes and allocations per entry, with [`crate::CountingAlloc`] as global allocator.
    pub heap: bool,
    /// Thread CPU time per entry (a system call at enter and exit), process CPU % in the
    /// timeline.
    pub cpu: bool,
    /// GPU memory, utilisation and energy per span instance (NVML).
    pub gpu: bool,
    /// CPU package energy per span instance (RAPL, where readable).
    pub energy: bool,
}

impl Samplers {
    /// No samplers.
    pub const NONE: Samplers = Samplers {
        memory: false,
        heap: false,
        cpu: false,
        gpu: false,
        energy: false,
    };
    /// Every sampler.
    pub const ALL: Samplers = Samplers {
        memory: true,
        heap: true,
        cpu: true,
        gpu: true,
        energy: true,
    };

    /// `basic`: none; `detailed`: memory, heap, CPU; `full`: all.
    pub fn for_preset(preset: Preset) -> Self {
        match preset {
            Preset::Off | Preset::Basic => Self::NONE,
            Preset::Detailed => Samplers {
                memory: true,
                heap: true,
                cpu: true,
                ..Self::NONE
            },
            Preset::Full => Self::ALL,
        }
    }

    /// Whether any sampler runs.
    pub fn any(self) -> bool {
        self != Self::NONE
    }

    /// The names of the samplers that run, as `SPANPROF_SAMPLERS` spells them.
    pub fn names(self) -> Vec<&'static str> {
        [
            (self.memory, "memory"),
            (self.heap, "heap"),
            (self.cpu, "cpu"),
            (self.gpu, "gpu"),
            (self.energy, "energy"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect()
    }

    const ACCEPTED: &'static str =
        "a comma-separated list of memory, heap, cpu, gpu, energy (or none, or all)";

    fn parse(value: &str) -> Result<Self> {
        let mut out = Samplers::NONE;
        for word in value.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match word.to_ascii_lowercase().as_str() {
                "memory" => out.memory = true,
                "heap" => out.heap = true,
                "cpu" => out.cpu = true,
                "gpu" => out.gpu = true,
                "energy" => out.energy = true,
                "none" => {}
                "all" => out = Samplers::ALL,
                _ => {
                    return Err(Error::InvalidEnv {
                        var: ENV_SAMPLERS,
                        value: value.to_string(),
                        expected: Self::ACCEPTED,
                    })
                }
            }
        }
        Ok(out)
    }
}

/// A GPU source handed to the builder (taken by the first `build`).
#[derive(Clone, Default)]
struct GpuSourceSlot(Arc<std::sync::Mutex<Option<Box<dyn GpuSource>>>>);

impl std::fmt::Debug for GpuSourceSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GpuSourceSlot")
    }
}

/// Where the console report goes when the guard is dropped.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ReportTarget {
    /// Standard error (the default).
    #[default]
    Stderr,
    /// A file, overwritten.
    File(PathBuf),
    /// No report.
    Off,
}

/// Resolved configuration.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) preset: Preset,
    pub(crate) filter: Option<String>,
    pub(crate) report: ReportTarget,
    pub(crate) top: usize,
    pub(crate) output_dir: Option<PathBuf>,
    /// Chrome tracing (src/chrome.rs): the session's state, if configured and recording.
    pub(crate) chrome: Option<Arc<ChromeSession>>,
    /// Resource samplers in effect.
    pub(crate) samplers: Samplers,
    pub(crate) interval: Duration,
    pub(crate) grid_g_per_kwh: Option<f64>,
}

/// Builds a [`ProfileLayer`] and its [`ProfileGuard`].
///
/// Environment variables override the builder unless [`Builder::with_env`] turns them off:
///
/// | variable | values | builder |
/// |---|---|---|
/// | `SPANPROF` | `off`, `basic`, `detailed`, `full` | [`Builder::with_preset`] |
/// | `SPANPROF_FILTER` | `EnvFilter` directives, e.g. `my_app=trace,hyper=off` | [`Builder::with_filter`] |
/// | `SPANPROF_REPORT` | `stderr`, `off`, or a file path | [`Builder::with_report`] |
/// | `SPANPROF_TOP` | a positive integer | [`Builder::with_top`] |
/// | `SPANPROF_OUT` | a directory | [`Builder::with_output_dir`] |
/// | `SPANPROF_SAMPLERS` | `memory,heap,cpu,gpu,energy`, `none`, `all` | [`Builder::with_samplers`] |
/// | `SPANPROF_INTERVAL_MS` | a positive integer | [`Builder::with_sample_interval`] |
/// | `SPANPROF_GRID_G_PER_KWH` | a non-negative number | [`Builder::with_grid_intensity`] |
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
    chrome: Option<ChromeOptions>,
    samplers: Option<Samplers>,
    interval: Duration,
    gpu_source: GpuSourceSlot,
    grid_g_per_kwh: Option<f64>,
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
            chrome: None,
            samplers: None,
            interval: crate::samplers::DEFAULT_INTERVAL,
            gpu_source: GpuSourceSlot::default(),
            grid_g_per_kwh: None,
        }
    }
}

impl Builder {
    /// Rows the report shows by default.
    pub const DEFAULT_TOP: usize = 25;

    /// Sets the preset (default [`Preset::Basic`]). `SPANPROF` overrides it.
    pub fn with_preset(self, preset: Preset) -> Self {
        Self { preset, ..self }
    }

    /// Profiles only the spans these `EnvFilter` directives enable, e.g. `"my_app=trace"`.
    /// Other layers are not affected. `SPANPROF_FILTER` overrides it.
    ///
    /// Directives on targets and levels are decided once per callsite. Directives with span
    /// field values are checked when each span is created.
    ///
    /// # Errors
    /// [`Error::InvalidFilter`] if the directives do not parse.
    pub fn with_filter(self, directives: impl Into<String>) -> Result<Self> {
        let directives = directives.into();
        parse_filter(&directives, "the builder")?;
        Ok(Self {
            filter: Some(directives),
            ..self
        })
    }

    /// Where the report goes when the guard drops (default [`ReportTarget::Stderr`]).
    pub fn with_report(self, report: ReportTarget) -> Self {
        Self { report, ..self }
    }

    /// Rows shown in the report (default [`Builder::DEFAULT_TOP`]).
    pub fn with_top(self, top: usize) -> Self {
        Self {
            top: top.max(1),
            ..self
        }
    }

    /// A directory the guard writes `profile.json` into when it drops.
    pub fn with_output_dir(self, dir: impl Into<PathBuf>) -> Self {
        Self {
            output_dir: Some(dir.into()),
            ..self
        }
    }

    /// Whether the `SPANPROF*` environment variables override the builder (default `true`).
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
    pub fn with_chrome(self, options: ChromeOptions) -> Self {
        Self {
            chrome: Some(options),
            ..self
        }
    }

    /// Which resources to record, instead of the preset's choice ([`Samplers::for_preset`]).
    /// Ignored at the `off` preset. `SPANPROF_SAMPLERS` overrides it.
    pub fn with_samplers(self, samplers: Samplers) -> Self {
        Self {
            samplers: Some(samplers),
            ..self
        }
    }

    /// Time between resource samples (default [`crate::samplers::DEFAULT_INTERVAL`], 100 ms;
    /// clamped to 1 ms ..= 1 h). `SPANPROF_INTERVAL_MS` overrides it.
    pub fn with_sample_interval(self, interval: Duration) -> Self {
        Self { interval, ..self }
    }

    /// The GPU backend (default: [`crate::NvmlSource::new`] when the GPU sampler runs).
    pub fn with_gpu_source(self, source: impl GpuSource) -> Self {
        Self {
            gpu_source: GpuSourceSlot(Arc::new(std::sync::Mutex::new(Some(Box::new(source))))),
            ..self
        }
    }

    /// Grid carbon intensity in grams CO2e per kWh: energy figures get a CO2e column.
    /// `SPANPROF_GRID_G_PER_KWH` overrides it.
    pub fn with_grid_intensity(self, grams_per_kwh: f64) -> Self {
        Self {
            grid_g_per_kwh: (grams_per_kwh.is_finite() && grams_per_kwh >= 0.0)
                .then_some(grams_per_kwh),
            ..self
        }
    }

    /// Builds the layer and its guard.
    ///
    /// # Errors
    /// [`Error::InvalidEnv`] or [`Error::InvalidFilter`] naming the variable and value that is
    /// wrong. Nothing is installed in that case. With [`Builder::with_chrome`]:
    /// [`Error::InvalidChromeOptions`], or [`Error::Io`] if the trace directory cannot be created.
    pub fn build(self) -> Result<(ProfileLayer, ProfileGuard)> {
        let builder = if self.read_env {
            self.apply_env(|var| std::env::var_os(var))?
        } else {
            self
        };
        let filter = match &builder.filter {
            Some(directives) => Some(parse_filter(directives, "the configuration")?),
            None => None,
        };
        let chrome = match builder.chrome {
            Some(options) if builder.preset.records() => {
                Some(Arc::new(ChromeSession::new(options)?))
            }
            _ => None,
        };
        let samplers = if builder.preset.records() {
            builder
                .samplers
                .unwrap_or_else(|| Samplers::for_preset(builder.preset))
        } else {
            Samplers::NONE
        };
        let gpu_source = builder
            .gpu_source
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let config = Config {
            preset: builder.preset,
            filter: builder.filter,
            report: builder.report,
            top: builder.top,
            output_dir: builder.output_dir,
            chrome,
            samplers,
            interval: builder.interval,
            grid_g_per_kwh: builder.grid_g_per_kwh,
        };
        let clock = builder.clock.unwrap_or_default();
        let inner = Arc::new(Inner::new(config, clock, filter, gpu_source));
        Ok((
            ProfileLayer {
                recording: inner.config.preset.records(),
                plan: inner.plan,
                inner: inner.clone(),
            },
            ProfileGuard::new(ProfileHandle { inner }),
        ))
    }

    /// Applies environment overrides read through `get`.
    pub(crate) fn apply_env(
        mut self,
        get: impl Fn(&str) -> Option<std::ffi::OsString>,
    ) -> Result<Self> {
        let read = |var: &'static str, expected: &'static str| -> Result<Option<String>> {
            match get(var) {
                None => Ok(None),
                Some(v) => v.into_string().map(Some).map_err(|v| Error::InvalidEnv {
                    var,
                    value: v.to_string_lossy().into_owned(),
                    expected,
                }),
            }
        };
        if let Some(v) = read(ENV_PRESET, Preset::ACCEPTED)? {
            self.preset = v.parse()?;
        }
        if let Some(v) = read(ENV_FILTER, "EnvFilter directives in UTF-8")? {
            if !v.trim().is_empty() {
                parse_filter(&v, ENV_FILTER)?;
                self.filter = Some(v);
            }
        }
        const REPORT: &str = "stderr, off, or a file path";
        if let Some(v) = read(ENV_REPORT, REPORT)? {
            self.report = match v.trim() {
                "stderr" => ReportTarget::Stderr,
                "off" => ReportTarget::Off,
                "" => {
                    return Err(Error::InvalidEnv {
                        var: ENV_REPORT,
                        value: v,
                        expected: REPORT,
                    })
                }
                path => ReportTarget::File(PathBuf::from(path)),
            };
        }
        const TOP: &str = "a positive integer";
        if let Some(v) = read(ENV_TOP, TOP)? {
            self.top = match v.trim().parse::<usize>() {
                Ok(n) if n > 0 => n,
                _ => {
                    return Err(Error::InvalidEnv {
                        var: ENV_TOP,
                        value: v,
                        expected: TOP,
                    })
                }
            };
        }
        if let Some(v) = read(ENV_SAMPLERS, Samplers::ACCEPTED)? {
            self.samplers = Some(Samplers::parse(&v)?);
        }
        const INTERVAL: &str = "a positive integer (milliseconds)";
        if let Some(v) = read(ENV_INTERVAL_MS, INTERVAL)? {
            self.interval = match v.trim().parse::<u64>() {
                Ok(ms) if ms > 0 => Duration::from_millis(ms),
                _ => {
                    return Err(Error::InvalidEnv {
                        var: ENV_INTERVAL_MS,
                        value: v,
                        expected: INTERVAL,
                    })
                }
            };
        }
        const GRID: &str = "a non-negative number (grams CO2e per kWh)";
        if let Some(v) = read(ENV_GRID, GRID)? {
            self.grid_g_per_kwh = match v.trim().parse::<f64>() {
                Ok(g) if g.is_finite() && g >= 0.0 => Some(g),
                _ => {
                    return Err(Error::InvalidEnv {
                        var: ENV_GRID,
                        value: v,
                        expected: GRID,
                    })
                }
            };
        }
        const OUT: &str = "a directory path";
        if let Some(v) = read(ENV_OUT, OUT)? {
            if v.trim().is_empty() {
                return Err(Error::InvalidEnv {
                    var: ENV_OUT,
                    value: v,
                    expected: OUT,
                });
            }
            self.output_dir = Some(PathBuf::from(v));
        }
        Ok(self)
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

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |var| {
            pairs
                .iter()
                .find(|(k, _)| k == var)
                .map(|(_, v)| OsString::from(v))
        }
    }

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
        assert_eq!(
            b.samplers,
            Some(Samplers {
                cpu: true,
                memory: true,
                ..Samplers::NONE
            })
        );
        assert_eq!(b.interval, Duration::from_millis(250));
        assert_eq!(b.grid_g_per_kwh, Some(380.5));
        assert_eq!(Samplers::parse("none").unwrap(), Samplers::NONE);
        assert_eq!(Samplers::parse("all").unwrap(), Samplers::ALL);
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

    #[test]
    fn presets_choose_samplers() {
        assert_eq!(Samplers::for_preset(Preset::Basic), Samplers::NONE);
        let d = Samplers::for_preset(Preset::Detailed);
        assert!(d.memory && d.heap && d.cpu && !d.gpu && !d.energy);
        assert_eq!(Samplers::for_preset(Preset::Full), Samplers::ALL);
        assert_eq!(
            Samplers::ALL.names(),
            ["memory", "heap", "cpu", "gpu", "energy"]
        );
    }

    #[test]
    fn builder_filter_is_validated() {
        let e = Builder::default().with_filter("=[").unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidFilter {
                    origin: "the builder",
                    ..
                }
            ),
            "{e:?}"
        );
    }
}

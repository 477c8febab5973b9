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
use crate::gpu::GpuSource;
use crate::guard::{ProfileGuard, ProfileHandle};
use crate::layer::ProfileLayer;
use crate::output::{Destination, Format, Json, Output, Table};
use crate::record::{Recorder, RunSettings};
use crate::samplers::{self, Readings, Timeline};
use crate::session::ProfileSession;
use crate::switches::{Preset, Resources};

pub use crate::env::{
    ENV_FILTER, ENV_GRID, ENV_INTERVAL_MS, ENV_OUT, ENV_PRESET, ENV_REPORT, ENV_SAMPLERS, ENV_TOP,
};

pub use crate::record::names::MAX_SPAN_NAMES;

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
/// | `SPANPROF_SAMPLERS` | `memory,heap,cpu,gpu,energy`, `none`, `all` | [`Builder::with_resources`] |
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
    #[cfg(feature = "chrome")]
    chrome: Option<ChromeOptions>,
    resources: Option<Resources>,
    interval: Duration,
    gpu_source: GpuSourceSlot,
    grid_g_per_kwh: Option<f64>,
    /// Outputs added with [`Builder::with_output`].
    outputs: OutputSlot,
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
            outputs: OutputSlot::default(),
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

    /// A directory the guard writes its file outputs into when it drops: the JSON profile
    /// ([`PROFILE_FILE`](crate::output::PROFILE_FILE)).
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
            });
        self
    }

    /// Time between resource samples (default [`Builder::DEFAULT_SAMPLE_INTERVAL`], 100 ms;
    /// clamped to 1 ms ..= 1 h). `SPANPROF_INTERVAL_MS` overrides it.
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
        let b = if self.read_env {
            self.apply_env(|var| std::env::var_os(var))?
        } else {
            self
        };
        let filter = match &b.filter {
            Some(directives) => Some(parse_filter(directives, "the configuration")?),
            None => None,
        };
        let records = b.preset.records();
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
        let sampler = if resources.is_empty() {
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
            interval_ms: b.interval.as_millis() as u64,
            grid_g_per_kwh: b.grid_g_per_kwh,
        };
        let recorder = Arc::new(Recorder::new(
            clock, start_raw, records, resources, readings, timeline, settings,
        ));
        let table = Table::new().with_top(b.top);
        let mut outputs = Vec::new();
        // The off preset writes nothing: no empty report, and the files of an earlier run
        // (profile.json) are left as they are.
        if records {
            match b.report {
                ReportTarget::Off => {}
                ReportTarget::Stderr => outputs.push(Output {
                    format: Box::new(table),
                    to: Destination::Stderr,
                }),
                ReportTarget::File(path) => outputs.push(Output {
                    format: Box::new(table),
                    to: Destination::File(path),
                }),
            }
            if let Some(dir) = b.output_dir {
                outputs.push(Output {
                    format: Box::new(Json),
                    to: Destination::Dir(dir),
                });
            }
            outputs.append(&mut b.outputs.0.lock().unwrap_or_else(|e| e.into_inner()));
        }
        let session = ProfileSession::new(
            recorder.clone(),
            sampler,
            #[cfg(feature = "chrome")]
            chrome,
            outputs,
            table,
            records,
        );
        Ok((
            ProfileLayer::new(recorder, filter, records),
            ProfileGuard::new(ProfileHandle::new(session)),
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
        if let Some(v) = read(ENV_SAMPLERS, Resources::ACCEPTED)? {
            self.resources = Some(v.parse()?);
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

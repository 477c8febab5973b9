//! `SPANPROF_TRACE`: the trace backend and windows from the environment.
//!
//! The value is a comma-separated list: `off` alone, or any of a backend (`chrome`,
//! `perfetto`), the windows (`whole`, or `step=NAME` with `wait=N`, `warmup=N`, `active=N`,
//! `repeat=N`, `skip_first=N`). What it does not name is kept from the builder's
//! [`ChromeOptions`], or is the default (chrome, the whole run) when the builder set none.

use std::path::{Path, PathBuf};

use super::{ChromeOptions, Output, Schedule, TraceBackend};
use crate::env::ENV_TRACE;
use crate::error::{Error, Result};

/// What `SPANPROF_TRACE` accepts, for its error and warning.
#[cfg(feature = "perfetto")]
pub(crate) const TRACE_ACCEPTED: &str = "`off`, or a comma-separated list of a backend \
    (`chrome`, `perfetto`) and the windows (`whole`, or `step=NAME` with `wait=N`, `warmup=N`, \
    `active=N`, `repeat=N`, `skip_first=N`), e.g. `perfetto,step=train_step,wait=5,active=3`";
/// What `SPANPROF_TRACE` accepts, for its error and warning.
#[cfg(not(feature = "perfetto"))]
pub(crate) const TRACE_ACCEPTED: &str = "`off`, or a comma-separated list of a backend \
    (`chrome`; `perfetto` needs spanprof's feature `perfetto`) and the windows (`whole`, or \
    `step=NAME` with `wait=N`, `warmup=N`, `active=N`, `repeat=N`, `skip_first=N`), e.g. \
    `chrome,step=train_step,wait=5,active=3`";

/// The directory traces go into when neither the builder nor the variable names one: under the
/// output directory if there is one, else in the working directory.
pub(crate) const DEFAULT_TRACE_DIR: &str = "spanprof-traces";

/// The windows `SPANPROF_TRACE` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Windows {
    /// The whole run, one file.
    Whole,
    /// The steps of a schedule, a step being one span of this name.
    Steps(String, Schedule),
}

/// `SPANPROF_TRACE`, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TraceSetting {
    /// No traces, whatever the builder says.
    Off,
    /// Traces; what is `None` is the builder's (or the default).
    On {
        backend: Option<TraceBackend>,
        windows: Option<Windows>,
    },
}

impl std::str::FromStr for TraceSetting {
    type Err = Error;

    /// Keywords and keys are case-insensitive; the step span's name is kept as written.
    fn from_str(text: &str) -> Result<Self> {
        let invalid = || Error::InvalidEnv {
            var: ENV_TRACE,
            value: text.to_string(),
            expected: TRACE_ACCEPTED,
        };
        let items: Vec<&str> = text.split(',').map(str::trim).collect();
        if items.len() == 1 && items[0].eq_ignore_ascii_case("off") {
            return Ok(TraceSetting::Off);
        }
        let mut backend = None;
        let mut whole = false;
        let mut step: Option<String> = None;
        // wait, warmup, active, repeat, skip_first
        let mut numbers: [Option<u64>; 5] = [None; 5];
        for item in items {
            let (key, value) = match item.split_once('=') {
                Some((k, v)) => (k.trim().to_ascii_lowercase(), Some(v.trim())),
                None => (item.to_ascii_lowercase(), None),
            };
            match (key.as_str(), value) {
                ("chrome", None) if backend.is_none() => backend = Some(TraceBackend::Chrome),
                #[cfg(feature = "perfetto")]
                ("perfetto", None) if backend.is_none() => backend = Some(TraceBackend::Perfetto),
                ("whole", None) if !whole => whole = true,
                ("step", Some(name)) if step.is_none() && !name.is_empty() => {
                    step = Some(name.to_string())
                }
                (key, Some(n)) => {
                    let slot = ["wait", "warmup", "active", "repeat", "skip_first"]
                        .iter()
                        .position(|k| *k == key)
                        .ok_or_else(invalid)?;
                    if numbers[slot].is_some() {
                        return Err(invalid());
                    }
                    numbers[slot] = Some(n.parse().map_err(|_| invalid())?);
                }
                _ => return Err(invalid()),
            }
        }
        let windows = match (whole, step) {
            (true, None) if numbers.iter().all(Option::is_none) => Some(Windows::Whole),
            (false, Some(step)) => {
                let [wait, warmup, active, repeat, skip_first] = numbers;
                let schedule =
                    Schedule::new(wait.unwrap_or(0), warmup.unwrap_or(0), active.unwrap_or(1))
                        .map_err(|_| invalid())?
                        .with_repeat(repeat.unwrap_or(0))
                        .with_skip_first(skip_first.unwrap_or(0));
                Some(Windows::Steps(step, schedule))
            }
            (false, None) if numbers.iter().all(Option::is_none) => None,
            // `whole` with a step, or schedule numbers without a step.
            _ => return Err(invalid()),
        };
        if backend.is_none() && windows.is_none() {
            return Err(invalid());
        }
        Ok(TraceSetting::On { backend, windows })
    }
}

impl TraceSetting {
    /// The trace options in force: the builder's `options` changed by the setting. Traces go
    /// where the builder's options write; without those, into [`DEFAULT_TRACE_DIR`] under
    /// `output_dir` (or the working directory).
    pub(crate) fn apply(
        &self,
        options: Option<ChromeOptions>,
        output_dir: Option<&Path>,
    ) -> Option<ChromeOptions> {
        let TraceSetting::On { backend, windows } = self else {
            return None;
        };
        let mut options = options.unwrap_or_else(|| {
            ChromeOptions::dir(output_dir.map_or_else(
                || PathBuf::from(DEFAULT_TRACE_DIR),
                |dir| dir.join(DEFAULT_TRACE_DIR),
            ))
        });
        if let Some(backend) = backend {
            options.backend = *backend;
        }
        match windows {
            None => {}
            Some(Windows::Whole) => options.steps = None,
            Some(Windows::Steps(step, schedule)) => {
                // A schedule writes one file per window: into the builder's file's directory.
                if let Output::File(file) = &options.output {
                    let dir = file
                        .parent()
                        .filter(|p| !p.as_os_str().is_empty())
                        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
                    options.output = Output::Dir(dir);
                }
                options.steps = Some((step.clone(), *schedule));
            }
        }
        Some(options)
    }
}

/// The builder's trace options as a user would describe them: what an invalid `SPANPROF_TRACE`
/// is replaced by.
pub(crate) fn describe(options: Option<&ChromeOptions>) -> String {
    let Some(o) = options else {
        return "no traces".to_string();
    };
    let windows = match &o.steps {
        Some((step, s)) => format!(
            "step={step},wait={},warmup={},active={},repeat={},skip_first={}",
            s.wait(),
            s.warmup(),
            s.active(),
            s.repeat(),
            s.skip_first()
        ),
        None => "whole".to_string(),
    };
    format!("{},{windows}", o.backend)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on(backend: Option<TraceBackend>, windows: Option<Windows>) -> TraceSetting {
        TraceSetting::On { backend, windows }
    }

    #[test]
    fn accepted_values() {
        let parse = |t: &str| t.parse::<TraceSetting>().unwrap();
        assert_eq!(parse(" OFF "), TraceSetting::Off);
        assert_eq!(parse("chrome"), on(Some(TraceBackend::Chrome), None));
        assert_eq!(parse("whole"), on(None, Some(Windows::Whole)));
        assert_eq!(
            parse("Chrome, Whole"),
            on(Some(TraceBackend::Chrome), Some(Windows::Whole))
        );
        let schedule = Schedule::new(5, 1, 3)
            .unwrap()
            .with_repeat(2)
            .with_skip_first(10);
        assert_eq!(
            parse("step=Train_Step,wait=5,warmup=1,active=3,repeat=2,skip_first=10"),
            on(None, Some(Windows::Steps("Train_Step".into(), schedule)))
        );
        assert_eq!(
            parse("step=train_step"),
            on(
                None,
                Some(Windows::Steps("train_step".into(), Schedule::every_step()))
            )
        );
        #[cfg(feature = "perfetto")]
        assert_eq!(parse("perfetto"), on(Some(TraceBackend::Perfetto), None));
    }

    #[test]
    fn rejected_values_name_the_variable() {
        for bad in [
            "",
            "json",
            "off,chrome",
            "chrome,chrome",
            "whole,step=s",
            "wait=5",
            "step=",
            "step=s,active=0",
            "step=s,wait=-1",
            "step=s,wait=1,wait=2",
            "step=s,every=2",
            "chrome,,whole",
            #[cfg(not(feature = "perfetto"))]
            "perfetto",
        ] {
            let e = bad.parse::<TraceSetting>().unwrap_err();
            assert!(
                matches!(e, Error::InvalidEnv { var: ENV_TRACE, .. }),
                "{bad:?}: {e}"
            );
        }
    }

    #[test]
    fn applies_over_the_builder_options() {
        let whole: TraceSetting = "whole".parse().unwrap();
        let steps: TraceSetting = "step=s,active=2".parse().unwrap();
        // Nothing from the builder: the default directory, under the output directory if any.
        let o = whole.apply(None, Some(Path::new("out"))).unwrap();
        assert_eq!(
            o.output,
            Output::Dir(Path::new("out").join(DEFAULT_TRACE_DIR))
        );
        assert_eq!((o.backend, o.steps), (TraceBackend::Chrome, None));
        let o = whole.apply(None, None).unwrap();
        assert_eq!(o.output, Output::Dir(PathBuf::from(DEFAULT_TRACE_DIR)));
        // The builder's directory and flags are kept; its steps replaced.
        let builder = ChromeOptions::dir("t")
            .with_steps("x", Schedule::every_step())
            .with_args(true);
        let o = steps.apply(Some(builder.clone()), None).unwrap();
        assert_eq!(o.output, Output::Dir(PathBuf::from("t")));
        assert!(o.include_args);
        assert_eq!(o.steps.as_ref().unwrap().0, "s");
        assert_eq!(
            whole.apply(Some(builder.clone()), None).unwrap().steps,
            None
        );
        // A builder's file becomes its directory under a schedule.
        let o = steps
            .apply(Some(ChromeOptions::file("a/b.json")), None)
            .unwrap();
        assert_eq!(o.output, Output::Dir(PathBuf::from("a")));
        assert_eq!(TraceSetting::Off.apply(Some(builder), None), None);
        assert_eq!(
            describe(Some(&ChromeOptions::dir("t"))),
            "chrome,whole".to_string()
        );
    }
}

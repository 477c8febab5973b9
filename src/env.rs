//! The environment variables that override the [`Builder`](crate::Builder), re-exported from
//! [`crate::builder`].

/// Environment variable: the master switch and preset (`off`, `basic`, `detailed`, `full`).
pub const ENV_PRESET: &str = "SPANPROF";

/// Environment variable: whether a `SPANPROF*` variable with a value spanprof does not accept
/// fails [`Builder::build`](crate::Builder::build) (`1`, `true`, `yes`, `on`) or is warned
/// about once on stderr and replaced by the builder's value (`0`, `false`, `no`, `off`: the
/// default). See [`Builder::with_strict_env`](crate::Builder::with_strict_env).
pub const ENV_STRICT: &str = "SPANPROF_STRICT";

/// Environment variable: which spans are profiled, in `EnvFilter` directive syntax.
pub const ENV_FILTER: &str = "SPANPROF_FILTER";

/// Environment variable: where the report goes on drop (`stderr`, `stdout` or `-`, `off`,
/// case-insensitive; anything else is a file path).
pub const ENV_REPORT: &str = "SPANPROF_REPORT";

/// Environment variable: how many rows the report shows.
pub const ENV_TOP: &str = "SPANPROF_TOP";

/// Environment variable: the output directory (every file output is written there on drop).
pub const ENV_OUT: &str = "SPANPROF_OUT";

/// Environment variable: which resource samplers run (`memory,heap,cpu,gpu,energy`, `none`),
/// overriding the preset's choice.
pub const ENV_SAMPLERS: &str = "SPANPROF_SAMPLERS";

/// Environment variable: the sampling interval in whole milliseconds, 1 to 3600000.
pub const ENV_INTERVAL_MS: &str = "SPANPROF_INTERVAL_MS";

/// Environment variable: the address of the Prometheus `/metrics` endpoint (feature `http`): a
/// socket address (`127.0.0.1:9464`, `0.0.0.0:9464`, `[::1]:0`) or a port alone, bound on
/// 127.0.0.1 (`9464`; `0` for any free port).
#[cfg(feature = "http")]
pub const ENV_METRICS_ADDR: &str = "SPANPROF_METRICS_ADDR";

/// Environment variable: grid carbon intensity, grams CO2e per kWh (enables CO2e figures).
pub const ENV_GRID: &str = "SPANPROF_GRID_G_PER_KWH";

/// Environment variable: the back-off's threshold, spanprof's estimated cost as a share of the
/// process's CPU time, % (`5`, `2.5%`), or `off`.
pub const ENV_MAX_OVERHEAD: &str = "SPANPROF_MAX_OVERHEAD";
/// Environment variable: the thread CPU clock read per span at `detailed` and up: `perf` (the
/// default: a per-thread perf event, `CLOCK_THREAD_CPUTIME_ID` where perf events are not
/// allowed) or `thread` (always `CLOCK_THREAD_CPUTIME_ID`); see
/// [`Builder::with_cpu_clock`](crate::Builder::with_cpu_clock) and the guide's
/// `docs/resources-and-gpu.md`, "Thread CPU time" (its "No distortion" paragraph).
pub const ENV_CPU_CLOCK: &str = "SPANPROF_CPU_CLOCK";

/// Environment variable: the export cadence, a duration (`30s`) or a number of steps
/// (`100 steps`); see [`Every`](crate::Every).
pub const ENV_EVERY: &str = "SPANPROF_EVERY";

/// Environment variable: the name of the step span whose closes `SPANPROF_EVERY=N steps`
/// counts, e.g. `train_step`.
pub const ENV_STEP: &str = "SPANPROF_STEP";

/// Environment variable: Chrome / Perfetto traces (feature `chrome`): `off`, or a
/// comma-separated list of a backend (`chrome`, `perfetto`) and the windows (`whole`, or
/// `step=NAME` with `wait=N`, `warmup=N`, `active=N`, `repeat=N`, `skip_first=N`); see
/// [`Builder::with_chrome`](crate::Builder::with_chrome) and [`crate::chrome`].
#[cfg(feature = "chrome")]
pub const ENV_TRACE: &str = "SPANPROF_TRACE";

/// Environment variable: which span names every output shows (comma-separated name globs,
/// `target=GLOB`, `top=N`; see [`Selection`](crate::output::Selection)).
pub const ENV_OUTPUT_FILTER: &str = "SPANPROF_OUTPUT_FILTER";

/// Environment variable: which spans are timed on the GPU with CUDA events (feature `cuda`), in
/// `EnvFilter` directive syntax, decided per callsite; see
/// [`Builder::with_gpu_spans`](crate::Builder::with_gpu_spans).
#[cfg(feature = "cuda")]
pub const ENV_GPU_SPANS: &str = "SPANPROF_GPU_SPANS";

/// Every variable spanprof reads, with the feature of spanprof it needs and whether this build
/// has it (`None`: read in every build).
const VARIABLES: [(&str, Option<(&str, bool)>); 17] = [
    (ENV_PRESET, None),
    (ENV_STRICT, None),
    (ENV_FILTER, None),
    (ENV_REPORT, None),
    (ENV_TOP, None),
    (ENV_OUT, None),
    (ENV_SAMPLERS, None),
    (ENV_INTERVAL_MS, None),
    // Named here in every build: its constant exists with its feature only.
    (
        "SPANPROF_METRICS_ADDR",
        Some(("http", cfg!(feature = "http"))),
    ),
    (ENV_GRID, None),
    (ENV_MAX_OVERHEAD, None),
    (ENV_CPU_CLOCK, None),
    (ENV_EVERY, None),
    (ENV_STEP, None),
    ("SPANPROF_TRACE", Some(("chrome", cfg!(feature = "chrome")))),
    (ENV_OUTPUT_FILTER, None),
    ("SPANPROF_GPU_SPANS", Some(("cuda", cfg!(feature = "cuda")))),
];

/// One warning line for each variable set in `names` that spanprof would ignore although it
/// was likely meant for it: one of spanprof's variables that this build does not read (its
/// feature is off), or a name one or two edits (a letter added, dropped, changed, or two
/// swapped; case aside) from one of them, such as `SPANPROF_MAX_OVERHAED`. Other names are
/// left alone: a program may have `SPANPROF_*` variables of its own.
pub(crate) fn ignored_variables(
    names: impl IntoIterator<Item = std::ffi::OsString>,
) -> Vec<String> {
    let mut lines = Vec::new();
    for name in names {
        let Some(name) = name.to_str() else {
            continue;
        };
        if let Some((_, feature)) = VARIABLES.iter().find(|(known, _)| *known == name) {
            if let Some((feature, false)) = feature {
                lines.push(format!(
                    "spanprof: {name} is set, but this build of spanprof does not read it \
                     (its feature `{feature}` is off)"
                ));
            }
            continue;
        }
        let upper = name.to_ascii_uppercase();
        let nearest = VARIABLES
            .iter()
            .map(|(known, _)| (strsim::osa_distance(&upper, known), *known))
            .filter(|&(distance, _)| distance <= 2)
            .min();
        if let Some((_, known)) = nearest {
            lines.push(format!(
                "spanprof: ignoring the environment variable {name}: spanprof reads no such \
                 variable; did you mean {known}?"
            ));
        }
    }
    lines.sort();
    lines
}

/// An environment of `(variable, value)` pairs, for tests of the rules that read it.
#[cfg(test)]
pub(crate) fn test_env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<std::ffi::OsString> {
    let pairs: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |var| {
        pairs
            .iter()
            .find(|(k, _)| k == var)
            .map(|(_, v)| std::ffi::OsString::from(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(names: &[&str]) -> Vec<String> {
        ignored_variables(names.iter().map(std::ffi::OsString::from))
    }

    #[test]
    fn a_name_one_or_two_edits_from_a_variable_is_named_with_it() {
        for (typed, meant) in [
            ("SPANPROF_MAX_OVERHAED", "SPANPROF_MAX_OVERHEAD"),
            ("SPANPROF_FILTR", "SPANPROF_FILTER"),
            ("SPANPORF_FILTER", "SPANPROF_FILTER"),
            ("spanprof_out", "SPANPROF_OUT"),
            ("SPANPROF_INTERVALMS", "SPANPROF_INTERVAL_MS"),
            ("SPANPRO", "SPANPROF"),
        ] {
            let got = lines(&[typed]);
            assert_eq!(got.len(), 1, "{typed}: {got:?}");
            assert!(
                got[0].contains(&format!("variable {typed}:"))
                    && got[0].ends_with(&format!("did you mean {meant}?")),
                "{typed}: {}",
                got[0]
            );
        }
    }

    #[test]
    fn spanprofs_own_names_and_names_far_from_them_are_left_alone() {
        let always: Vec<&str> = VARIABLES
            .iter()
            .filter(|(_, feature)| feature.is_none())
            .map(|(name, _)| *name)
            .collect();
        assert!(lines(&always).is_empty(), "{:?}", lines(&always));
        // A program's own variables (these are the test suite's), and others.
        let others = [
            "SPANPROF_BLESS",
            "SPANPROF_SIGNALS_OUT",
            "SPANPROF_CTRLC_CHILD",
            "SPANPROF_DROP_DIR",
            "SPANPROF_SEQUENCE",
            "SPANPROF_FUZZ_SEED",
            "SPANPROF_CHROMIUM",
            "SPANPROF_CRAFTED_NODES",
            "SPANPROF_SAMPLER_CPU_SECS",
            "RUST_LOG",
            "PATH",
        ];
        assert!(lines(&others).is_empty(), "{:?}", lines(&others));
        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStringExt;
            let not_utf8 = std::ffi::OsString::from_vec(b"SPANPROF_\xff".to_vec());
            assert!(ignored_variables([not_utf8]).is_empty());
        }
    }

    #[test]
    fn the_names_of_features_are_their_constants() {
        let named = |var: &str| VARIABLES.iter().any(|(name, _)| *name == var);
        #[cfg(feature = "http")]
        assert!(named(ENV_METRICS_ADDR));
        #[cfg(feature = "chrome")]
        assert!(named(ENV_TRACE));
        #[cfg(feature = "cuda")]
        assert!(named(ENV_GPU_SPANS));
        assert!(named(ENV_PRESET));
    }

    #[test]
    fn a_variable_of_a_feature_this_build_lacks_is_said_to_be_ignored() {
        for (name, feature) in VARIABLES {
            let Some((feature, built)) = feature else {
                continue;
            };
            let got = lines(&[name]);
            if built {
                assert!(got.is_empty(), "{name}: {got:?}");
            } else {
                assert_eq!(got.len(), 1, "{name}: {got:?}");
                assert!(
                    got[0].contains(name) && got[0].contains(&format!("feature `{feature}`")),
                    "{}",
                    got[0]
                );
            }
        }
    }
}

//! Environment variables outside their rule, seen from a process of their own: the program
//! runs with the builder's values and stderr says once which variable was replaced by what;
//! strict mode (`SPANPROF_STRICT`, `Builder::with_strict_env`) makes it an error. And the CPU
//! clock follows the builder's one rule (`with_cpu_clock`, `SPANPROF_CPU_CLOCK`, `with_env`).
//!
//! Each case runs this binary's `child` test in a child process with the variables set: the
//! tests never change their own process's environment.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Output;

use spanprof::{CpuClock, Preset, ProfileLayer, ReportTarget, Resources, Snapshot};
use tracing_subscriber::prelude::*;

/// The variable that makes the `child` test do something, and says what.
const CHILD: &str = "SPANPROF_LOSSY_CHILD";
/// The child's output directory.
const OUT: &str = "SPANPROF_LOSSY_OUT";

#[tracing::instrument]
fn parse(n: u64) -> u64 {
    n * 7
}

/// What a child run printed.
struct Run {
    status: std::process::ExitStatus,
    stdout: String,
    stderr: String,
}

/// Runs the `child` test in a process of its own, in `mode`, with `vars` (and none of this
/// process's `SPANPROF*` or `RUST_LOG`).
fn run_child(mode: &str, out: &Path, vars: &[(&str, &str)]) -> Run {
    let mut command = support::child_test(module_path!(), "child");
    command.env(CHILD, mode).env(OUT, out);
    for (var, _) in std::env::vars_os() {
        let name = var.to_string_lossy();
        if (name.starts_with("SPANPROF") && name != CHILD && name != OUT) || name == "RUST_LOG" {
            command.env_remove(&var);
        }
    }
    command.envs(vars.iter().copied());
    let output = command.output().unwrap();
    support::assert_ran_one_test(&output);
    let Output {
        status,
        stdout,
        stderr,
    } = output;
    Run {
        status,
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

/// A fresh directory for one case.
fn dir(case: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spanprof-lossy-{}-{case}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The child's side: builds the profile as `mode` says, with the environment the parent gave,
/// runs a few spans and finishes. A build error is printed on stdout (`BUILD ERROR: ...`).
#[test]
fn child() {
    let Ok(mode) = std::env::var(CHILD) else {
        return;
    };
    let out = PathBuf::from(std::env::var_os(OUT).expect("output dir"));
    let builder = ProfileLayer::builder()
        .with_report(ReportTarget::Off)
        .with_output_dir(&out);
    let builder = match mode.as_str() {
        "default" => builder,
        "strict-builder" => builder.with_strict_env(true),
        // The CPU clock: detailed, CPU time read per span.
        "cpu" => builder
            .with_preset(Preset::Detailed)
            .with_resources(Resources::CPU),
        "cpu-no-env" => builder
            .with_preset(Preset::Detailed)
            .with_resources(Resources::CPU)
            .with_env(false),
        "cpu-thread" => builder
            .with_preset(Preset::Detailed)
            .with_resources(Resources::CPU)
            .with_cpu_clock(CpuClock::Thread)
            .with_env(false),
        other => panic!("unknown mode {other}"),
    };
    let (layer, guard) = match builder.build() {
        Ok(parts) => parts,
        Err(e) => {
            println!("BUILD ERROR: {e}");
            return;
        }
    };
    let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
    tracing::dispatcher::with_default(&dispatch, || {
        for i in 0..10 {
            parse(i);
        }
    });
    let snapshot = guard.snapshot();
    let clock = snapshot.overhead.as_ref().and_then(|o| o.cpu_clock.clone());
    println!("CPU CLOCK: {clock:?}");
    guard.finish().unwrap();
}

/// The lines spanprof wrote on stderr about the environment.
fn warnings(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("spanprof: ") && l.contains("; using "))
        .collect()
}

#[test]
fn a_bad_preset_is_warned_about_once_and_the_default_preset_profiles() {
    let out = dir("verbose");
    let run = run_child("default", &out, &[("SPANPROF", "verbose")]);
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    assert!(!run.stdout.contains("BUILD ERROR"), "{}", run.stdout);
    assert_eq!(
        warnings(&run.stderr),
        [
            "spanprof: invalid value \"verbose\" for environment variable SPANPROF: expected one \
          of off, basic, detailed, full (case-insensitive); using basic (the default)"
        ],
        "{}",
        run.stderr
    );
    let profile = Snapshot::read_json(out.join("profile.json")).unwrap();
    assert_eq!(profile.run.preset, "basic");
    assert_eq!(profile.span("parse").unwrap().calls, 10);
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn strict_mode_makes_a_bad_variable_an_error_naming_it() {
    for (mode, vars) in [
        (
            "default",
            &[("SPANPROF", "verbose"), ("SPANPROF_STRICT", "1")][..],
        ),
        ("strict-builder", &[("SPANPROF", "verbose")][..]),
    ] {
        let out = dir("strict");
        let run = run_child(mode, &out, vars);
        assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
        assert!(
            run.stdout.contains(
                "BUILD ERROR: invalid value \"verbose\" for environment variable SPANPROF"
            ),
            "{mode}: {}",
            run.stdout
        );
        assert!(warnings(&run.stderr).is_empty(), "{}", run.stderr);
        assert!(!out.join("profile.json").exists());
        let _ = std::fs::remove_dir_all(&out);
    }
}

/// Every variable outside its rule at once: one line each, and a profile with the builder's
/// values (the defaults, and the builder's output directory).
#[test]
fn every_variable_outside_its_rule_falls_back() {
    let bad: &[(&str, &str)] = &[
        ("SPANPROF_STRICT", "maybe"),
        ("SPANPROF", "verbose"),
        ("SPANPROF_FILTER", "my_app=notalevel"),
        ("SPANPROF_REPORT", " "),
        ("SPANPROF_TOP", "0"),
        ("SPANPROF_OUT", "/proc/nonexistent/spanprof"),
        ("SPANPROF_SAMPLERS", "cpu,disk"),
        ("SPANPROF_INTERVAL_MS", "fast"),
        ("SPANPROF_GRID_G_PER_KWH", "NaN"),
        ("SPANPROF_OUTPUT_FILTER", "top=0"),
        ("SPANPROF_MAX_OVERHEAD", "0"),
        ("SPANPROF_CPU_CLOCK", "tsc"),
        #[cfg(feature = "http")]
        ("SPANPROF_METRICS_ADDR", "localhost:9464"),
        ("SPANPROF_EVERY", "5 steps"),
        ("SPANPROF_STEP", " "),
    ];
    let out = dir("all");
    let run = run_child("default", &out, bad);
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    assert!(!run.stdout.contains("BUILD ERROR"), "{}", run.stdout);
    let lines = warnings(&run.stderr);
    assert_eq!(lines.len(), bad.len(), "{}", run.stderr);
    for (var, value) in bad {
        let names = |l: &&&str| {
            l.contains(&format!("variable {var}:"))
                || l.contains(&format!("(from {var})"))
                || l.starts_with(&format!("spanprof: {var}="))
        };
        let line = lines.iter().find(names);
        let line = line.unwrap_or_else(|| panic!("no line names {var}: {}", run.stderr));
        assert!(line.contains(&format!("{value:?}")), "{var}: {line}");
    }
    // The builder's output directory, the default preset and no filter.
    let profile = Snapshot::read_json(out.join("profile.json")).unwrap();
    assert_eq!(profile.run.preset, "basic");
    assert_eq!(profile.run.filter, None);
    assert_eq!(profile.span("parse").unwrap().calls, 10);
    let _ = std::fs::remove_dir_all(&out);
}

/// The CPU clock the child's spans read.
fn cpu_clock(mode: &str, vars: &[(&str, &str)]) -> String {
    let out = dir(mode);
    let run = run_child(mode, &out, vars);
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    let _ = std::fs::remove_dir_all(&out);
    run.stdout
        .lines()
        .find_map(|l| l.split_once("CPU CLOCK: ").map(|(_, clock)| clock))
        .unwrap_or_else(|| panic!("no clock: {}", run.stdout))
        .to_string()
}

#[cfg(target_os = "linux")]
#[test]
fn the_cpu_clock_follows_the_builder_and_the_environment_unless_it_is_off() {
    const THREAD: &str = "Some(\"CLOCK_THREAD_CPUTIME_ID\")";
    assert_eq!(cpu_clock("cpu-thread", &[]), THREAD);
    assert_eq!(
        cpu_clock("cpu", &[("SPANPROF_CPU_CLOCK", "thread")]),
        THREAD
    );
    let default = cpu_clock("cpu", &[]);
    if default == THREAD {
        eprintln!("SKIPPED (part): perf events are not allowed here: every clock is the thread's");
        return;
    }
    assert_eq!(default, "Some(\"perf task-clock\")");
    // `with_env(false)` turns every variable off, this one too.
    assert_eq!(
        cpu_clock("cpu-no-env", &[("SPANPROF_CPU_CLOCK", "thread")]),
        default
    );
}

/// A misspelt variable is named with the one meant, once, and the program goes on: in strict
/// mode too, and not at all with `with_env(false)`, which reads no variable.
#[test]
fn a_misspelt_variable_is_named_with_the_one_meant() {
    let misspelt: &[(&str, &str)] = &[("SPANPROF_MAX_OVERHAED", "1"), ("SPANPROF_FILTR", "x")];
    let line = |typed: &str, meant: &str| {
        format!(
            "spanprof: ignoring the environment variable {typed}: spanprof reads no such \
             variable; did you mean {meant}?"
        )
    };
    for strict in [&[][..], &[("SPANPROF_STRICT", "1")][..]] {
        let out = dir("misspelt");
        let run = run_child("default", &out, &[misspelt, strict].concat());
        assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
        assert!(!run.stdout.contains("BUILD ERROR"), "{}", run.stdout);
        let named: Vec<&str> = run
            .stderr
            .lines()
            .filter(|l| l.contains("did you mean"))
            .collect();
        assert_eq!(
            named,
            [
                line("SPANPROF_FILTR", "SPANPROF_FILTER"),
                line("SPANPROF_MAX_OVERHAED", "SPANPROF_MAX_OVERHEAD"),
            ],
            "{}",
            run.stderr
        );
        let profile = Snapshot::read_json(out.join("profile.json")).unwrap();
        assert_eq!(profile.run.filter, None);
        assert_eq!(profile.span("parse").unwrap().calls, 10);
        let _ = std::fs::remove_dir_all(&out);
    }
    let out = dir("misspelt-no-env");
    let run = run_child("cpu-no-env", &out, misspelt);
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    assert!(!run.stderr.contains("did you mean"), "{}", run.stderr);
    let _ = std::fs::remove_dir_all(&out);
}

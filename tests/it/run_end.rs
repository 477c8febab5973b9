//! What the end of a run says, seen from a process of its own: the files written (the HTML
//! report first) as the report's last lines, or alone on stderr with the report off; a run
//! that recorded nothing writes nothing, leaves an earlier output directory as it was and says
//! which filters were in force; a span filter directive that names a span where a target is
//! read gets a hint.
//!
//! Each case runs this binary's `child` test in a child process with the variables set: the
//! tests never change their own process's environment.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use spanprof::ProfileLayer;
use tracing_subscriber::prelude::*;
use tracing_subscriber::EnvFilter;

/// The variable that makes the `child` test do something, and says what.
const CHILD: &str = "SPANPROF_RUN_END_CHILD";
/// The child's output directory.
const OUT: &str = "SPANPROF_RUN_END_OUT";

#[tracing::instrument]
fn decode(n: u64) -> u64 {
    checksum(n) * 3
}

#[tracing::instrument]
fn checksum(n: u64) -> u64 {
    n * 7
}

/// Runs the `child` test in a process of its own, in `mode`, with `vars` (and none of this
/// process's `SPANPROF*` or `RUST_LOG`). Returns its stderr.
fn run_child(mode: &str, out: &Path, vars: &[(&str, &str)]) -> String {
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
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "{mode}: {}\n{}\n{stderr}",
        output.status,
        String::from_utf8_lossy(&output.stdout)
    );
    stderr
}

/// A fresh directory for one case.
fn dir(case: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spanprof-end-{}-{case}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The child's side: spanprof with an output directory (the report on stderr unless
/// `SPANPROF_REPORT` says otherwise) beside a filter and the `fmt` layer as the quick start
/// has them, `decode` and `checksum` spans, and the guard dropped at the end.
#[test]
fn child() {
    let Ok(mode) = std::env::var(CHILD) else {
        return;
    };
    let out = PathBuf::from(std::env::var_os(OUT).expect("output dir"));
    let (layer, _guard) = ProfileLayer::builder()
        .with_output_dir(&out)
        .build()
        .unwrap();
    let filter = match mode.as_str() {
        // What most programs do: RUST_LOG, ERROR only when it is unset.
        "from-default-env" => EnvFilter::from_default_env(),
        _ => EnvFilter::new("info"),
    };
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false);
    let subscriber = tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .with(layer);
    tracing::subscriber::with_default(subscriber, || {
        for i in 0..10 {
            decode(i);
        }
    });
}

/// Every file in `dir` with its bytes.
fn contents(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

/// The files an output directory gets, with every feature, after `report.html`.
#[cfg(all(
    feature = "csv",
    feature = "prometheus",
    feature = "flamegraph",
    feature = "pprof"
))]
const REST: &str = "profile.json, report.csv, metrics.csv, metrics.prom, profile.folded, \
                    flamegraph.svg, profile.pb.gz";

#[cfg(all(
    feature = "csv",
    feature = "prometheus",
    feature = "flamegraph",
    feature = "pprof"
))]
#[test]
fn the_report_ends_naming_every_file_written_html_first() {
    let out = dir("report");
    let stderr = run_child("quick-start", &out, &[]);
    let lines: Vec<&str> = stderr.lines().collect();
    let header = lines
        .iter()
        .position(|l| l.starts_with("spanprof: 2 span names"))
        .unwrap_or_else(|| panic!("no report: {stderr}"));
    // The last lines: the files, after the report.
    let n = lines.len();
    assert!(n >= 2 && header < n - 2, "{stderr}");
    assert_eq!(
        lines[n - 2..],
        [
            format!("spanprof: wrote {}", out.join("report.html").display()),
            format!("  and in {}: {REST}", out.display()),
        ],
        "{stderr}"
    );
    // Not the header again as an event (`spanprof summary`), nor the profile alone.
    assert!(!stderr.contains("spanprof summary"), "{stderr}");
    assert!(!stderr.contains("hottest_self_pct"), "{stderr}");
    assert!(!stderr.contains("wrote the JSON profile"), "{stderr}");
    // The report off: the same lines, alone.
    let quiet = dir("report-off");
    let stderr = run_child("quick-start", &quiet, &[("SPANPROF_REPORT", "off")]);
    assert_eq!(
        stderr,
        format!(
            "spanprof: wrote {}\n  and in {}: {REST}\n",
            quiet.join("report.html").display(),
            quiet.display()
        )
    );
    for dir in [out, quiet] {
        assert_eq!(contents(&dir).len(), 8, "{dir:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// `RUST_LOG=warn` enables no span: nothing is written, the earlier files stay byte for byte,
/// and one line says which filter was in force.
#[test]
fn a_run_that_recorded_nothing_leaves_the_output_directory_and_names_the_filter() {
    for (rust_log, filters) in [
        (Some("warn"), "filter RUST_LOG=\"warn\""),
        // Unset: `EnvFilter::from_default_env()` passes only ERROR.
        (None, "no filter: RUST_LOG unset"),
    ] {
        let out = dir("nothing");
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(out.join("profile.json"), b"{\"earlier\": true}\n").unwrap();
        std::fs::write(out.join("report.html"), b"<p>earlier run</p>\n").unwrap();
        let before = contents(&out);
        let vars: Vec<(&str, &str)> = rust_log.iter().map(|v| ("RUST_LOG", *v)).collect();
        let stderr = run_child("from-default-env", &out, &vars);
        assert_eq!(contents(&out), before, "{stderr}");
        let line = format!("): nothing written, {} left as it was\n", out.display());
        assert!(
            stderr.starts_with("spanprof: no span was recorded (run ")
                && stderr.contains(&format!(", {filters}): "))
                && stderr.ends_with(&line)
                && stderr.lines().count() == 1,
            "{stderr}"
        );
        let _ = std::fs::remove_dir_all(&out);
    }
}

/// `SPANPROF_FILTER=decode,checksum` names spans where `EnvFilter` reads targets: nothing is
/// recorded, and each directive gets the hint.
#[test]
fn a_filter_directive_naming_a_span_gets_a_hint() {
    let out = dir("hint");
    let stderr = run_child(
        "quick-start",
        &out,
        &[("SPANPROF_FILTER", "decode,checksum=debug")],
    );
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 3, "{stderr}");
    assert!(
        lines[0].starts_with("spanprof: no span was recorded (run ")
            && lines[0].ends_with(&format!(
                ", filters RUST_LOG unset and SPANPROF_FILTER=\"decode,checksum=debug\"): \
                 nothing written, {} left as it was",
                out.display()
            )),
        "{stderr}"
    );
    assert_eq!(
        lines[1..],
        [
            "spanprof: SPANPROF_FILTER: `decode` matches no target; did you mean `[decode]` \
             (a span name)?",
            "spanprof: SPANPROF_FILTER: `checksum` matches no target; did you mean \
             `[checksum]=debug` (a span name)?",
        ],
        "{stderr}"
    );
    // A directive that matches the spans' target (this module's path) gets none; the other one
    // still does.
    let target_and_span = format!("{},decode", module_path!());
    let stderr = run_child(
        "quick-start",
        &out,
        &[
            ("SPANPROF_FILTER", &target_and_span),
            ("SPANPROF_REPORT", "off"),
        ],
    );
    let hints: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("did you mean"))
        .collect();
    assert_eq!(
        hints,
        [
            "spanprof: SPANPROF_FILTER: `decode` matches no target; did you mean `[decode]` (a \
          span name)?"
        ],
        "{stderr}"
    );
    assert!(stderr.starts_with("spanprof: wrote "), "{stderr}");
    // The span directive the hint suggests profiles the spans: no hint then.
    let stderr = run_child(
        "quick-start",
        &out,
        &[("SPANPROF_FILTER", "[decode]"), ("SPANPROF_REPORT", "off")],
    );
    assert!(!stderr.contains("did you mean"), "{stderr}");
    assert!(stderr.starts_with("spanprof: wrote "), "{stderr}");
    let _ = std::fs::remove_dir_all(&out);
}

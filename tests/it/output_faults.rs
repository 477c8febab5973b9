//! Outputs under faults: a render that fails or panics midway, several failing outputs, and
//! directories that cannot be written, found when the profiler is built.

use crate::support;

use std::io::{self, Write};
use std::sync::{Arc, Mutex};

use spanprof::output::{Destination, Format, Json, PROFILE_FILE};
use spanprof::profile::Snapshot;
use spanprof::{Error, ProfileLayer, ReportTarget};
use tracing_subscriber::prelude::*;

/// How a [`Halfway`] render ends after writing half its bytes.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// Returns the error a full disk gives.
    DiskFull,
    /// Panics.
    Panic,
}

/// A format that writes half of a long text, then fails.
#[derive(Debug)]
struct Halfway(Fault);

impl Format for Halfway {
    fn name(&self) -> &'static str {
        "halfway"
    }
    fn file_name(&self) -> &'static str {
        "halfway.txt"
    }
    fn render(&self, _: &Snapshot, out: &mut dyn Write) -> io::Result<()> {
        // More than a BufWriter holds: part of it reaches the file before the fault.
        out.write_all(&vec![b'n'; 64 * 1024])?;
        out.flush()?;
        match self.0 {
            // `ErrorKind::StorageFull` is newer than the crate's minimum Rust version.
            Fault::DiskFull => Err(io::Error::other("No space left on device (simulated)")),
            Fault::Panic => panic!("the halfway format breaks down"),
        }
    }
}

fn names_in(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// A render that fails (or panics) midway leaves the previous file as it was and no temporary
/// beside it; the outputs after it are still written.
///
/// The fault is simulated: a real full filesystem needs a small tmpfs, and mounting one needs
/// root. The format writes 64 KiB (more than the writer buffers, so part of it is in the
/// temporary file) and then returns the error `write` returns on a full disk, or panics.
#[test]
fn a_render_failing_midway_keeps_the_previous_file_and_leaves_no_temporary() {
    for fault in [Fault::DiskFull, Fault::Panic] {
        let dir = support::temp_dir("halfway");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("halfway.txt"), "previous run\n").unwrap();
        std::fs::write(dir.join("named.txt"), "previous run\n").unwrap();
        let (dispatch, guard) = support::install(
            ProfileLayer::builder()
                .with_output(Halfway(fault), Destination::Dir(dir.clone()))
                .with_output(Halfway(fault), Destination::File(dir.join("named.txt")))
                .with_output(Json, Destination::Dir(dir.clone())),
        );
        tracing::dispatcher::with_default(&dispatch, || tracing::info_span!("x").in_scope(|| {}));
        let err = guard.finish().unwrap_err();
        let Error::Outputs(errors) = &err else {
            panic!("{fault:?}: expected both failures, got {err:?}");
        };
        assert_eq!(errors.len(), 2, "{fault:?}: {errors:?}");
        assert!(
            err.to_string()
                .contains(&dir.join("halfway.txt").display().to_string()),
            "{err}"
        );
        for file in ["halfway.txt", "named.txt"] {
            assert_eq!(
                std::fs::read_to_string(dir.join(file)).unwrap(),
                "previous run\n",
                "{fault:?}: {file}"
            );
        }
        assert_eq!(
            names_in(&dir),
            ["halfway.txt", "named.txt", PROFILE_FILE],
            "{fault:?}: a temporary was left"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// A render to standard error that fails midway prints nothing and is reported.
#[test]
fn a_render_to_stderr_failing_midway_is_reported() {
    let (dispatch, guard) = support::install(
        ProfileLayer::builder().with_output(Halfway(Fault::DiskFull), Destination::Stderr),
    );
    // A span: a run that recorded nothing writes no output.
    tracing::dispatcher::with_default(&dispatch, || tracing::info_span!("x").in_scope(|| {}));
    let err = guard.finish().unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err:?}");
    assert!(err.to_string().contains("<stderr>"), "{err}");
}

/// The events spanprof emits at its performance target, at `WARN`.
#[derive(Clone, Default)]
struct Warnings(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Warnings {
    fn on_event(&self, e: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Text(String);
        impl tracing::field::Visit for Text {
            fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                self.0.push_str(&format!("{}={v:?} ", f.name()));
            }
        }
        let m = e.metadata();
        if m.target() == spanprof::PERF_TARGET && *m.level() == tracing::Level::WARN {
            let mut text = Text(String::new());
            e.record(&mut text);
            self.0.lock().unwrap().push(text.0);
        }
    }
}

/// `finish` returns every failed output and logs one warning line per failed output.
#[test]
fn finish_logs_one_warning_per_failed_output() {
    let dir = support::temp_dir("warn-each");
    let seen = Warnings::default();
    let (dispatch, guard) = support::install_beside(
        ProfileLayer::builder()
            .with_output(Halfway(Fault::DiskFull), Destination::Dir(dir.clone()))
            .with_output(Json, Destination::Dir(dir.clone()))
            .with_output(
                Halfway(Fault::DiskFull),
                Destination::File(dir.join("b.txt")),
            ),
        seen.clone(),
    );
    let result = tracing::dispatcher::with_default(&dispatch, || {
        tracing::info_span!("x").in_scope(|| {});
        guard.finish()
    });
    let Err(Error::Outputs(errors)) = result else {
        panic!("expected two failed outputs, got {result:?}");
    };
    assert_eq!(errors.len(), 2);
    let lines = seen.0.lock().unwrap().clone();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].contains("halfway.txt"), "{lines:?}");
    assert!(lines[1].contains("b.txt"), "{lines:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// An output directory that cannot be created is an error from `build()` naming it, not a
/// surprise when the program ends.
#[cfg(target_os = "linux")]
#[test]
fn an_output_directory_that_cannot_be_created_fails_the_build() {
    // Through SPANPROF_OUT: in a child process of this test alone, with the variable set (this
    // process's environment is left as it is: other tests read it).
    const CHILD: &str = "SPANPROF_OUTPUT_FAULTS_ENV_CHILD";
    let in_child = std::env::var_os(CHILD).is_some();
    if !in_child {
        let out = support::child_test(
            module_path!(),
            "an_output_directory_that_cannot_be_created_fails_the_build",
        )
        .env(CHILD, "1")
        .env("SPANPROF_OUT", "/proc/nonexistent/y")
        .output()
        .unwrap();
        support::assert_ran_one_test(&out);
        assert!(
            out.status.success(),
            "the SPANPROF_OUT case failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for (dir, env) in [
        ("/proc/nonexistent/x", false),
        ("/proc/nonexistent/y", true),
    ] {
        if env != in_child {
            continue;
        }
        let builder = ProfileLayer::builder().with_report(ReportTarget::Off);
        let result = if env {
            // Strict: otherwise a variable's directory that cannot be written is replaced by
            // the builder's, with a warning (tests/it/config_lossy.rs).
            assert_eq!(std::env::var("SPANPROF_OUT").as_deref(), Ok(dir));
            builder.with_strict_env(true).build()
        } else {
            builder.with_env(false).with_output_dir(dir).build()
        };
        let Err(err) = result else {
            panic!("{dir}: build() succeeded");
        };
        assert!(matches!(err, Error::Io { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(
            msg.starts_with(&format!("preparing output directory {dir}: ")),
            "{msg}"
        );
    }
}

/// Makes `dir` read-only; `false` (after saying so on stderr) when permission bits do not stop
/// this process from writing there (running as root).
#[cfg(unix)]
fn read_only(dir: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    let probe = dir.join("probe");
    if std::fs::write(&probe, b"x").is_ok() {
        let _ = std::fs::remove_file(&probe);
        eprintln!(
            "SKIPPED: {} is writable despite mode 0o555 (running as root?): \
             the read-only directory case is not tested here",
            dir.display()
        );
        return false;
    }
    true
}

#[cfg(unix)]
fn writable(dir: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755));
}

#[cfg(unix)]
#[test]
fn a_read_only_output_directory_fails_the_build() {
    let dir = support::temp_dir("read-only-out");
    if read_only(&dir) {
        let err = ProfileLayer::builder()
            .with_env(false)
            .with_report(ReportTarget::Off)
            .with_output_dir(&dir)
            .build()
            .unwrap_err();
        assert!(matches!(err, Error::Io { .. }), "{err:?}");
        assert!(
            err.to_string().contains(&dir.display().to_string()),
            "{err}"
        );
    }
    writable(&dir);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A report file whose directory cannot be written: the report goes to stderr, with one
/// warning when the profiler is built.
#[test]
fn a_report_file_that_cannot_be_written_falls_back_to_stderr() {
    let mut cases = Vec::new();
    #[cfg(target_os = "linux")]
    cases.push((
        std::path::PathBuf::from("/proc/nonexistent/report.txt"),
        None,
    ));
    #[cfg(unix)]
    {
        let dir = support::temp_dir("read-only-report");
        if read_only(&dir) {
            cases.push((dir.join("report.txt"), Some(dir)));
        } else {
            writable(&dir);
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    for (path, cleanup) in cases {
        let seen = Warnings::default();
        let subscriber = tracing_subscriber::registry().with(seen.clone());
        let (layer, guard) = tracing::subscriber::with_default(subscriber, || {
            ProfileLayer::builder()
                .with_env(false)
                .with_report(ReportTarget::File(path.clone()))
                .build()
                .unwrap()
        });
        let lines = seen.0.lock().unwrap().clone();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].contains(&path.display().to_string()) && lines[0].contains("stderr"),
            "{lines:?}"
        );
        let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
        tracing::dispatcher::with_default(&dispatch, || tracing::info_span!("x").in_scope(|| {}));
        // The report went to stderr: nothing failed, no report file.
        let outputs = guard.finish().unwrap();
        assert_eq!(outputs.report(), None);
        assert!(!path.exists());
        if let Some(dir) = cleanup {
            writable(&dir);
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

/// A report file that cannot be written when the profile ends (its directory replaced by a
/// file after `build()`) is an error, and the report goes to stderr instead: never lost.
#[test]
fn a_report_file_failing_at_the_end_goes_to_stderr() {
    let dir = support::temp_dir("report-late");
    let report_dir = dir.join("reports");
    std::fs::create_dir_all(&report_dir).unwrap();
    let seen = Warnings::default();
    let (layer, guard) = ProfileLayer::builder()
        .with_env(false)
        .with_report(ReportTarget::File(report_dir.join("report.txt")))
        .build()
        .unwrap();
    let dispatch = tracing::Dispatch::new(
        tracing_subscriber::registry()
            .with(seen.clone())
            .with(layer),
    );
    // Writable at build; not at the end (even for root: a file is no directory).
    std::fs::remove_dir_all(&report_dir).unwrap();
    std::fs::write(&report_dir, b"in the way").unwrap();
    let result = tracing::dispatcher::with_default(&dispatch, || {
        tracing::info_span!("x").in_scope(|| {});
        guard.finish()
    });
    let err = result.unwrap_err().to_string();
    assert!(err.contains("report.txt"), "{err}");
    let lines = seen.0.lock().unwrap().clone();
    assert!(
        lines.iter().any(|l| l.contains("to stderr instead")),
        "{lines:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// What the child of [`a_dropped_guard_tells_each_failure_once_on_stderr`] runs: a guard with a
/// report file that cannot be written at the end and two outputs that fail, dropped with the
/// profiling layer alone (`SPANPROF_DROP_CHILD=none`, the quick start's subscriber) or beside
/// a fmt layer writing to stderr (`fmt`). Does nothing in a normal test run.
#[test]
fn drop_child() {
    let Ok(mode) = std::env::var("SPANPROF_DROP_CHILD") else {
        return;
    };
    let dir = std::path::PathBuf::from(std::env::var("SPANPROF_DROP_DIR").unwrap());
    let report_dir = dir.join("reports");
    std::fs::create_dir_all(&report_dir).unwrap();
    let (layer, guard) = ProfileLayer::builder()
        .with_env(false)
        .with_report(ReportTarget::File(report_dir.join("report.txt")))
        .with_output(Halfway(Fault::DiskFull), Destination::Dir(dir.clone()))
        .with_output(
            Halfway(Fault::DiskFull),
            Destination::File(dir.join("b.txt")),
        )
        .build()
        .unwrap();
    // The report's directory: writable at build, not at the end.
    std::fs::remove_dir_all(&report_dir).unwrap();
    std::fs::write(&report_dir, b"in the way").unwrap();
    let subscriber = tracing_subscriber::registry().with(layer);
    match mode.as_str() {
        "fmt" => {
            let fmt = tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(false);
            tracing::subscriber::set_global_default(subscriber.with(fmt)).unwrap();
            tracing::info_span!("x").in_scope(|| {});
        }
        _ => tracing::subscriber::with_default(subscriber, || {
            tracing::info_span!("x").in_scope(|| {});
        }),
    }
    drop(guard);
}

/// Dropping the guard (the quick start's way to end a run) tells each failed output once, on
/// stderr, whatever the subscriber: a drop returns nothing, and the profiling layer alone shows
/// no warning. No warning besides (`finish` logs them instead, and returns them).
#[test]
fn a_dropped_guard_tells_each_failure_once_on_stderr() {
    for mode in ["none", "fmt"] {
        let dir = support::temp_dir(&format!("drop-child-{mode}"));
        std::fs::create_dir_all(&dir).unwrap();
        let out = support::child_test(module_path!(), "drop_child")
            .env("SPANPROF_DROP_CHILD", mode)
            .env("SPANPROF_DROP_DIR", &dir)
            .output()
            .unwrap();
        support::assert_ran_one_test(&out);
        assert!(out.status.success(), "{out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let told: Vec<&str> = stderr
            .lines()
            .filter(|l| {
                ["report.txt", "halfway.txt", "b.txt"]
                    .iter()
                    .any(|f| l.contains(f))
            })
            .collect();
        assert_eq!(told.len(), 3, "{mode}: {stderr}");
        for (line, file) in told.iter().zip(["report.txt", "halfway.txt", "b.txt"]) {
            assert!(
                line.starts_with("spanprof: could not write an output: ") && line.contains(file),
                "{mode}: {file}: {line}"
            );
        }
        assert!(
            told[0].ends_with("; it wrote its table to stderr instead"),
            "{told:#?}"
        );
        assert!(!stderr.contains("WARN"), "{mode}: {stderr}");
        // The report itself, on stderr in its file's place.
        assert!(stderr.contains("span name"), "{mode}: {stderr}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

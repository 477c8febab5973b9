//! The output interface: custom formats, every failing output reported, and resources switched
//! while the program runs.

mod support;

use std::io::{self, Write};

use spanprof::output::{Destination, Format, Json, Table, PROFILE_FILE};
use spanprof::profile::Snapshot;
use spanprof::{Error, ProfileLayer, ReportTarget, Resources};
use tracing_subscriber::prelude::*;

/// A format of our own: one line per span name with its call count.
#[derive(Debug)]
struct Calls;

impl Format for Calls {
    fn name(&self) -> &'static str {
        "calls"
    }
    fn file_name(&self) -> &'static str {
        "calls.txt"
    }
    fn render(&self, snapshot: &Snapshot, out: &mut dyn Write) -> io::Result<()> {
        let mut spans: Vec<_> = snapshot.spans.iter().collect();
        spans.sort_by(|a, b| a.name.cmp(&b.name));
        for s in spans {
            writeln!(out, "{} {}", s.name, s.calls)?;
        }
        Ok(())
    }
}

#[test]
fn a_custom_format_is_written_beside_the_profile() {
    let dir = support::temp_dir("custom-format");
    let (dispatch, guard) = support::install(
        ProfileLayer::builder()
            .with_output_dir(&dir)
            .with_output(Calls, Destination::Dir(dir.clone())),
    );
    tracing::dispatcher::with_default(&dispatch, || {
        for _ in 0..3 {
            tracing::info_span!("a").in_scope(|| tracing::info_span!("b").in_scope(|| {}));
        }
    });
    let outputs = guard.finish().unwrap();
    assert_eq!(outputs.profile(), Some(dir.join(PROFILE_FILE).as_path()));
    assert_eq!(outputs.file("calls"), Some(dir.join("calls.txt").as_path()));
    assert_eq!(
        std::fs::read_to_string(dir.join("calls.txt")).unwrap(),
        "a 3\nb 3\n"
    );
    // Files are replaced atomically: no temporary is left beside them.
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    // The output directory gets every file format the features build, the call tree's among
    // them (on by default).
    let mut expected = vec!["calls.txt", "profile.folded", "profile.json", "report.html"];
    if cfg!(feature = "flamegraph") {
        expected.push("flamegraph.svg");
    }
    if cfg!(feature = "pprof") {
        expected.push("profile.pb.gz");
    }
    if cfg!(feature = "prometheus") {
        expected.push("metrics.prom");
    }
    if cfg!(feature = "csv") {
        expected.push("report.csv");
        expected.push("metrics.csv");
    }
    expected.sort();
    assert_eq!(names, expected);
}

#[cfg(target_os = "linux")]
#[test]
fn every_failing_output_is_reported_and_the_others_written() {
    let dir = support::temp_dir("failing-outputs");
    // /proc takes no new files: the report and the profile fail, the custom output works.
    // (Outputs added with `with_output` are not checked by build(); the report file and the
    // output directory are, see tests/output_faults.rs.)
    let (layer, guard) = ProfileLayer::builder()
        .with_env(false)
        .with_report(ReportTarget::Off)
        .with_output(
            Table::new(),
            Destination::File("/proc/spanprof-test/report.txt".into()),
        )
        .with_output(Json, Destination::Dir("/proc/spanprof-test".into()))
        .with_output(Calls, Destination::File(dir.join("calls.txt")))
        .build()
        .unwrap();
    let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
    tracing::dispatcher::with_default(&dispatch, || tracing::info_span!("x").in_scope(|| {}));
    let err = guard.finish().unwrap_err();
    let Error::Outputs(errors) = &err else {
        panic!("expected every error, got {err:?}");
    };
    assert_eq!(errors.len(), 2, "{errors:?}");
    let text = err.to_string();
    assert!(text.starts_with("2 outputs failed: "), "{text}");
    assert!(
        text.contains("writing report /proc/spanprof-test/report.txt"),
        "{text}"
    );
    assert!(
        text.contains("writing profile /proc/spanprof-test/profile.json"),
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("calls.txt")).unwrap(),
        "x 1\n"
    );
}

#[test]
fn resources_step_down_while_the_program_runs() {
    // Thread CPU time is available on every supported platform; heap needs the counting
    // allocator, which this test binary does not install.
    let (dispatch, guard) =
        support::install(ProfileLayer::builder().with_resources(Resources::CPU | Resources::HEAP));
    let handle = guard.handle();
    let expected = if cfg!(any(target_os = "linux", target_os = "android")) {
        Resources::CPU
    } else {
        Resources::NONE
    };
    assert_eq!(handle.resources(), expected, "heap is not available here");
    tracing::dispatcher::with_default(&dispatch, || {
        for _ in 0..10 {
            tracing::info_span!("before").in_scope(|| {});
        }
        // A span entered while the switch changes keeps the readings it started with.
        let across = tracing::info_span!("across").entered();
        assert_eq!(handle.set_resources(Resources::NONE), Resources::NONE);
        drop(across);
        for _ in 0..10 {
            tracing::info_span!("after").in_scope(|| {});
        }
        // Only what the profile was built with can come back.
        assert_eq!(handle.set_resources(Resources::ALL), expected);
        tracing::info_span!("again").in_scope(|| {});
    });
    let snap = support::finish_snapshot(guard);
    let cpu_entries = |name: &str| {
        support::span(&snap, name)
            .resources
            .as_ref()
            .and_then(|r| r.cpu.as_ref())
            .map(|c| (c.entries, c.skipped_entries))
    };
    if expected == Resources::CPU {
        // Short entries: the CPU clock is read for the first of every 32 (all of them where the
        // clock is not calibrated).
        let before = cpu_entries("before").unwrap();
        assert_eq!(before.0 + before.1, 10);
        assert!(before == (1, 9) || before == (10, 0), "{before:?}");
        assert_eq!(cpu_entries("across"), Some((1, 0)));
        assert_eq!(cpu_entries("after"), None);
        assert_eq!(cpu_entries("again"), Some((1, 0)));
    }
    assert_eq!(support::span(&snap, "after").calls, 10);
}

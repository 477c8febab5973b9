//! Filtering, presets, throughput and error fields, the JSON profile and the guard's outputs.

use crate::support;

use spanprof::clock::Clock;
use spanprof::{Error, Preset, ProfileLayer, ReportTarget, Snapshot};
use support::{install, install_beside, run_with, temp_dir};
use tracing::Dispatch;
use tracing_subscriber::prelude::*;

fn workload() {
    tracing::info_span!(target: "app::model", "forward").in_scope(|| {
        tracing::debug_span!(target: "app::model", "matmul").in_scope(|| {});
        tracing::trace_span!(target: "app::model", "kernel").in_scope(|| {});
    });
    tracing::info_span!(target: "dep::io", "read").in_scope(|| {});
}

fn names(s: &Snapshot) -> Vec<&str> {
    let mut n: Vec<&str> = s.spans.iter().map(|s| s.name.as_str()).collect();
    n.sort();
    n
}

#[test]
fn filter_directives_select_targets_and_levels() {
    let all = run_with(ProfileLayer::builder(), workload);
    assert_eq!(names(&all), ["forward", "kernel", "matmul", "read"]);

    let app = run_with(
        ProfileLayer::builder().with_filter("app=trace").unwrap(),
        workload,
    );
    assert_eq!(names(&app), ["forward", "kernel", "matmul"]);

    let app_debug = run_with(
        ProfileLayer::builder().with_filter("app=debug").unwrap(),
        workload,
    );
    assert_eq!(names(&app_debug), ["forward", "matmul"]);

    let info = run_with(
        ProfileLayer::builder().with_filter("info").unwrap(),
        workload,
    );
    assert_eq!(names(&info), ["forward", "read"]);

    let off = run_with(
        ProfileLayer::builder().with_filter("off").unwrap(),
        workload,
    );
    assert!(off.spans.is_empty());

    let dep_off = run_with(
        ProfileLayer::builder()
            .with_filter("trace,dep=off")
            .unwrap(),
        workload,
    );
    assert_eq!(names(&dep_off), ["forward", "kernel", "matmul"]);
}

#[test]
fn span_name_directive_profiles_that_span() {
    let snap = run_with(
        ProfileLayer::builder()
            .with_filter("[forward]=trace")
            .unwrap(),
        workload,
    );
    assert!(names(&snap).contains(&"forward"), "{:?}", names(&snap));
    assert!(!names(&snap).contains(&"read"), "{:?}", names(&snap));
}

#[test]
fn spanprof_filter_does_not_change_what_other_layers_see() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    struct Count(Arc<AtomicUsize>);
    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Count {
        fn on_new_span(
            &self,
            _: &tracing::span::Attributes<'_>,
            _: &tracing::span::Id,
            _: tracing_subscriber::layer::Context<'_, S>,
        ) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
    let seen = Arc::new(AtomicUsize::new(0));
    let (dispatch, guard) = install_beside(
        ProfileLayer::builder()
            .with_filter("nothing=trace")
            .unwrap(),
        Count(seen.clone()),
    );
    tracing::dispatcher::with_default(&dispatch, workload);
    assert_eq!(seen.load(Ordering::Relaxed), 4);
    assert!(guard.snapshot().spans.is_empty());
}

#[test]
fn off_preset_records_nothing() {
    let snap = run_with(ProfileLayer::builder().with_preset(Preset::Off), workload);
    assert!(snap.spans.is_empty());
    assert_eq!(snap.run.preset, "off");
}

#[test]
fn throughput_fields_and_errors() {
    #[tracing::instrument(err)]
    fn validate(i: u32) -> Result<(), String> {
        if i % 4 == 0 {
            Err(format!("batch {i} rejected"))
        } else {
            Ok(())
        }
    }
    let snap = run_with(ProfileLayer::builder(), || {
        for i in 0..12u32 {
            let step = tracing::info_span!(
                "step",
                items = 32u64,
                bytes = tracing::field::Empty,
                flops = 1.5e3
            );
            step.record("bytes", 4096u64);
            step.in_scope(|| {
                let _ = validate(i);
            });
        }
        tracing::info_span!("plain").in_scope(|| {});
    });
    let step = snap.span("step").unwrap();
    assert_eq!(step.items, Some(12 * 32));
    assert_eq!(step.bytes, Some(12 * 4096));
    assert_eq!(step.flops, Some(12 * 1500));
    assert!(step.rate(step.items).unwrap() > 0.0);
    assert_eq!(step.errors, 0);
    assert_eq!(snap.span("validate").unwrap().errors, 3);
    let plain = snap.span("plain").unwrap();
    assert_eq!((plain.items, plain.bytes, plain.flops), (None, None, None));
}

/// `Span::record` replaces a field's value: the sums hold each span's last value, whether the
/// value was given at creation, recorded as progress, corrected, or recorded on another thread
/// than the one that created the span.
#[test]
fn throughput_sums_hold_each_spans_last_value() {
    let snap = run_with(ProfileLayer::builder(), || {
        for _ in 0..10 {
            let progress = tracing::info_span!("progress", items = tracing::field::Empty);
            for n in 1..=5u64 {
                progress.record("items", n);
            }
            let corrected = tracing::info_span!("corrected", items = 100u64, bytes = 7u64);
            corrected.record("items", 5u64);
            let elsewhere = tracing::info_span!("elsewhere", items = 100u64, flops = 2.0);
            std::thread::scope(|s| {
                s.spawn(|| {
                    elsewhere.record("items", 5u64);
                    elsewhere.record("flops", 3.0);
                });
            });
            tracing::info_span!("given", items = 5u64).in_scope(|| {});
        }
    });
    for name in ["progress", "corrected", "elsewhere", "given"] {
        assert_eq!(snap.span(name).unwrap().items, Some(50), "{name}");
    }
    assert_eq!(snap.span("corrected").unwrap().bytes, Some(70));
    assert_eq!(snap.span("elsewhere").unwrap().flops, Some(30));
}

#[test]
fn json_profile_round_trips_exactly_and_hdr_payloads_decode() {
    use base64::Engine;
    let (clock, mock) = Clock::mock();
    let snap = run_with(ProfileLayer::builder().with_clock(clock), || {
        for i in 0..500u64 {
            tracing::info_span!("step", items = i).in_scope(|| {
                mock.advance(std::time::Duration::from_nanos(1000 + i * 37));
                tracing::info_span!("inner")
                    .in_scope(|| mock.advance(std::time::Duration::from_nanos(i)));
            });
        }
    });
    let json = snap.to_json();
    let back = Snapshot::from_json(&json, "test").unwrap();
    assert_eq!(back, snap);

    // The histograms are HdrHistogram V2 + deflate payloads any HdrHistogram library reads.
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    let step = value["spans"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "step")
        .unwrap();
    let b64 = step["entry_busy"]["histogram"].as_str().unwrap();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    assert_eq!(
        &bytes[..4],
        &[0x1c, 0x84, 0x93, 0x14],
        "V2 compressed cookie"
    );
    let h: hdrhistogram::Histogram<u64> = hdrhistogram::serialization::Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .unwrap();
    assert_eq!(h.len(), 500);
    assert_eq!(step["calls"], 500);
    assert_eq!(
        spanprof::profile::Buckets::from_histogram(&h),
        snap.span("step").unwrap().entry_busy.histogram
    );
    assert_eq!(value["schema"], "spanprof.profile");
    assert_eq!(value["version"], spanprof::profile::SCHEMA_VERSION);
    assert!(value["run"]["pid"].as_u64().unwrap() > 0);
}

#[test]
fn corrupt_profiles_are_clear_errors() {
    let err = Snapshot::from_json("{not json", "broken.json").unwrap_err();
    assert!(matches!(err, Error::InvalidProfile { .. }));
    assert!(err.to_string().contains("broken.json"), "{err}");

    let snap = run_with(ProfileLayer::builder(), workload);
    let wrong_schema = snap.to_json().replace("spanprof.profile", "other");
    let err = Snapshot::from_json(&wrong_schema, "x.json").unwrap_err();
    assert!(err.to_string().contains("schema"), "{err}");

    let bad_hist = {
        let mut v: serde_json::Value = serde_json::from_str(&snap.to_json()).unwrap();
        v["spans"][0]["wall"]["histogram"] = "AAAA".into();
        v.to_string()
    };
    let err = Snapshot::from_json(&bad_hist, "h.json").unwrap_err();
    assert!(err.to_string().contains("histogram"), "{err}");

    let err = Snapshot::read_json("/nonexistent/dir/profile.json").unwrap_err();
    assert!(matches!(err, Error::Io { .. }));
    assert!(
        err.to_string().contains("/nonexistent/dir/profile.json"),
        "{err}"
    );
}

#[test]
fn guard_writes_report_and_profile() {
    let dir = temp_dir("test");
    let (layer, guard) = ProfileLayer::builder()
        .with_env(false)
        .with_output_dir(dir.join("out"))
        .with_report(ReportTarget::File(dir.join("report.txt")))
        .build()
        .unwrap();
    let dispatch = Dispatch::new(tracing_subscriber::registry().with(layer));
    tracing::dispatcher::with_default(&dispatch, workload);
    let outputs = guard.finish().unwrap();
    let profile = outputs.profile().unwrap().to_path_buf();
    assert_eq!(profile, dir.join("out").join("profile.json"));
    let back = Snapshot::read_json(&profile).unwrap();
    assert_eq!(back.spans.len(), 4);
    let report = std::fs::read_to_string(dir.join("report.txt")).unwrap();
    assert!(
        report.contains("forward") && report.contains("self%"),
        "{report}"
    );
    for line in report.lines() {
        assert!(line.chars().count() <= 100, "line too wide: {line:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn unwritable_output_is_reported_not_fatal() {
    let blocker = temp_dir("blocker");
    let (dispatch, guard) = install(ProfileLayer::builder().with_output_dir(blocker.join("sub")));
    // build() checked the directory; it becomes unwritable while the program runs.
    std::fs::remove_dir_all(&blocker).unwrap();
    std::fs::write(&blocker, b"a file, not a directory").unwrap();
    tracing::dispatcher::with_default(&dispatch, workload);
    let err = guard.finish().unwrap_err();
    // Every file of the directory failed, each an I/O error naming its path under the blocker:
    // the profile, the HTML report, the CSV and Prometheus files, and the call tree's files.
    let Error::Outputs(errors) = &err else {
        panic!("expected one error per output: {err:?}");
    };
    let mut files = vec!["profile.json", "report.html"];
    if cfg!(feature = "csv") {
        files.push("report.csv");
        files.push("metrics.csv");
    }
    if cfg!(feature = "prometheus") {
        files.push("metrics.prom");
    }
    files.push("profile.folded");
    if cfg!(feature = "flamegraph") {
        files.push("flamegraph.svg");
    }
    if cfg!(feature = "pprof") {
        files.push("profile.pb.gz");
    }
    assert_eq!(errors.len(), files.len(), "{err}");
    for (e, file) in errors.iter().zip(&files) {
        assert!(matches!(e, Error::Io { .. }), "{e:?}");
        let path = blocker.join("sub").join(file);
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
    }
    let _ = std::fs::remove_file(&blocker);
}

#[test]
fn own_messages_go_to_the_documented_targets() {
    use std::sync::{Arc, Mutex};
    #[derive(Clone, Default)]
    struct Targets(Arc<Mutex<Vec<String>>>);
    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Targets {
        fn on_event(&self, e: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
            self.0
                .lock()
                .unwrap()
                .push(e.metadata().target().to_string());
        }
    }
    let dir = temp_dir("targets");
    let seen = Targets::default();
    let (dispatch, guard) =
        install_beside(ProfileLayer::builder().with_output_dir(&dir), seen.clone());
    tracing::dispatcher::with_default(&dispatch, || {
        workload();
        guard.finish().unwrap();
    });
    let targets = seen.0.lock().unwrap().clone();
    // A run with nothing to warn about logs nothing at PERF_TARGET: its end is the report and
    // the lines naming the files written, and where they went at PROFILING_TARGET.
    assert!(
        targets.iter().any(|t| t == spanprof::PROFILING_TARGET),
        "{targets:?}"
    );
    assert!(
        targets.iter().all(|t| t.starts_with("spanprof::")),
        "{targets:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

//! Configuration rules seen from outside: the builder's values are checked by `build()` with
//! the rules its environment variables follow (the variables' side is tested in
//! `src/builder.rs`, with a fake environment), and errors print well from `main`.

use std::time::Duration;

use spanprof::output::{Destination, Table};
use spanprof::{Error, ProfileLayer, ReportTarget};

fn build_err(builder: spanprof::Builder) -> Error {
    match builder
        .with_env(false)
        .with_report(ReportTarget::Off)
        .build()
    {
        Ok(_) => panic!("build() accepted an invalid value"),
        Err(e) => e,
    }
}

#[test]
fn builder_values_outside_their_rule_fail_the_build_naming_the_method() {
    for (builder, method) in [
        (ProfileLayer::builder().with_top(0), "with_top"),
        (
            ProfileLayer::builder().with_output_dir(""),
            "with_output_dir",
        ),
        (
            ProfileLayer::builder().with_grid_intensity(f64::NAN),
            "with_grid_intensity",
        ),
        (
            ProfileLayer::builder().with_grid_intensity(f64::INFINITY),
            "with_grid_intensity",
        ),
        (
            ProfileLayer::builder().with_sample_interval(Duration::ZERO),
            "with_sample_interval",
        ),
        (
            ProfileLayer::builder().with_sample_interval(Duration::from_micros(999)),
            "with_sample_interval",
        ),
        (
            ProfileLayer::builder().with_sample_interval(Duration::MAX),
            "with_sample_interval",
        ),
    ] {
        let e = build_err(builder);
        assert!(
            matches!(&e, Error::InvalidSetting { method: m, .. } if *m == method),
            "{method}: {e:?}"
        );
        let msg = e.to_string();
        assert!(msg.contains(&format!("Builder::{method}")), "{msg}");
    }
    let e = ProfileLayer::builder().with_filter("").unwrap_err();
    assert!(matches!(e, Error::InvalidSetting { .. }), "{e:?}");
}

#[test]
fn the_limits_of_each_rule_are_accepted() {
    for builder in [
        ProfileLayer::builder().with_top(1),
        ProfileLayer::builder().with_grid_intensity(0.0),
        ProfileLayer::builder().with_sample_interval(Duration::from_millis(1)),
        ProfileLayer::builder().with_sample_interval(Duration::from_secs(3600)),
        ProfileLayer::builder().with_report(ReportTarget::Stdout),
    ] {
        let (_layer, guard) = builder.with_env(false).build().unwrap();
        guard.finish().unwrap();
    }
}

#[test]
fn the_report_can_go_to_stdout() {
    let (_layer, guard) = ProfileLayer::builder()
        .with_env(false)
        .with_report(ReportTarget::Off)
        .with_output(Table::new(), Destination::Stdout)
        .build()
        .unwrap();
    let outputs = guard.finish().unwrap();
    assert!(outputs.files.is_empty(), "{outputs:?}");
}

/// `fn main() -> Result<(), spanprof::Error>` prints `Error: {err:?}`: the same message as
/// `Display`, then the causes the message does not already give.
#[test]
fn debug_prints_the_message_not_the_structure() {
    let e = build_err(ProfileLayer::builder().with_top(0));
    assert_eq!(format!("{e:?}"), e.to_string());
    assert!(!format!("{e:?}").contains("InvalidSetting"));

    // The I/O error is part of the message already: not repeated.
    let e = spanprof::Snapshot::read_json("/nonexistent/spanprof/profile.json").unwrap_err();
    assert_eq!(format!("{e:?}"), e.to_string());

    let e = ProfileLayer::builder()
        .with_filter("app=notalevel")
        .unwrap_err();
    let debug = format!("{e:?}");
    assert!(debug.starts_with(&e.to_string()), "{debug}");
    assert!(!debug.contains("InvalidFilter"), "{debug}");
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        assert!(debug.contains(&cause.to_string()), "{debug}");
        source = cause.source();
    }
}

#[test]
fn long_values_are_cut_to_100_characters_in_messages() {
    let long = "d".repeat(1000);
    let e = build_err(ProfileLayer::builder().with_output_dir(" ".repeat(1000)));
    assert!(e.to_string().chars().count() < 250, "{e}");
    let e = ProfileLayer::builder()
        .with_filter(format!("{long}=notalevel"))
        .unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains(&format!("{}…", "d".repeat(100))), "{msg}");
    assert!(!msg.contains(&"d".repeat(101)), "{msg}");
}

//! The quick start's filter with `RUST_LOG` unset or empty, live: `#[instrument]` spans are
//! recorded through its INFO default directive, and a subscriber whose filter enables no span
//! gets a report that says so instead of an empty table.
//!
//! One test in its own binary: it removes `RUST_LOG` from the process's environment.

mod support;

use spanprof::output::Table;
use spanprof::ProfileLayer;
use tracing::Dispatch;
use tracing_subscriber::{filter::LevelFilter, prelude::*, EnvFilter};

#[tracing::instrument]
fn parse(n: u64) -> u64 {
    n * 7
}

/// Runs `parse` under the registry, `filter` and spanprof, and returns the report.
fn report_with(filter: EnvFilter) -> (spanprof::Snapshot, String) {
    let (layer, guard) = support::quiet(ProfileLayer::builder()).build().unwrap();
    let dispatch = Dispatch::new(tracing_subscriber::registry().with(filter).with(layer));
    tracing::dispatcher::with_default(&dispatch, || {
        for i in 0..10 {
            parse(i);
        }
    });
    let snap = guard.snapshot();
    let report = Table::new().to_string(&snap);
    (snap, report)
}

#[test]
fn with_rust_log_unset_the_quick_start_records_and_a_bare_env_filter_says_why_not() {
    // The quick start (examples/basic.rs, the README's) builds its filter so:
    let quick_start = "EnvFilter::builder()
                .with_default_directive(LevelFilter::INFO.into())
                .from_env_lossy()";
    assert!(
        include_str!("../examples/basic.rs").contains(quick_start),
        "examples/basic.rs no longer builds its filter with {quick_start}: update this test"
    );
    let quick_start = || {
        EnvFilter::builder()
            .with_default_directive(LevelFilter::INFO.into())
            .from_env_lossy()
    };
    for rust_log in [None, Some("")] {
        match rust_log {
            None => std::env::remove_var("RUST_LOG"),
            Some(v) => std::env::set_var("RUST_LOG", v),
        }
        let (snap, report) = report_with(quick_start());
        assert_eq!(
            support::span(&snap, "parse").calls,
            10,
            "{rust_log:?}: {report}"
        );
    }
    std::env::remove_var("RUST_LOG");

    // `from_default_env()` with RUST_LOG unset passes only ERROR: no span, and the report
    // says why.
    let (snap, report) = report_with(EnvFilter::from_default_env());
    assert!(snap.spans.is_empty(), "{report}");
    assert!(
        report.starts_with("spanprof: no span was recorded"),
        "{report}"
    );
    assert!(
        report.contains("no span was enabled by the subscriber's filter"),
        "{report}"
    );
}

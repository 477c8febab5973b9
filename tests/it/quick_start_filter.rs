//! The quick start's filter with `RUST_LOG` unset or empty, live: `#[instrument]` spans are
//! recorded through its INFO default directive, and a subscriber whose filter enables no span
//! gets a report that says so instead of an empty table.
//!
//! The cases run in child processes of the test (`RUST_LOG` unset, then empty): this process's
//! environment, which other tests read, is left as it is.

use crate::support;

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

/// Set in the child processes of the test below.
const CHILD: &str = "SPANPROF_QUICK_START_CHILD";

#[test]
fn with_rust_log_unset_the_quick_start_records_and_a_bare_env_filter_says_why_not() {
    // The quick start (examples/basic.rs, the README's) builds its filter so:
    let quick_start = "EnvFilter::builder()
                .with_default_directive(LevelFilter::INFO.into())
                .from_env_lossy()";
    assert!(
        include_str!("../../examples/basic.rs").contains(quick_start),
        "examples/basic.rs no longer builds its filter with {quick_start}: update this test"
    );
    if std::env::var_os(CHILD).is_none() {
        // The parent: the same test in a child with `RUST_LOG` unset, and one with it empty.
        for rust_log in [None, Some("")] {
            let mut command = support::child_test(
                module_path!(),
                "with_rust_log_unset_the_quick_start_records_and_a_bare_env_filter_says_why_not",
            );
            command.env(CHILD, "1");
            match rust_log {
                None => command.env_remove("RUST_LOG"),
                Some(v) => command.env("RUST_LOG", v),
            };
            let out = command.output().unwrap();
            support::assert_ran_one_test(&out);
            assert!(
                out.status.success(),
                "RUST_LOG {rust_log:?}:\n{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        return;
    }
    let rust_log = std::env::var_os("RUST_LOG");
    let quick_start = || {
        EnvFilter::builder()
            .with_default_directive(LevelFilter::INFO.into())
            .from_env_lossy()
    };
    let (snap, report) = report_with(quick_start());
    assert_eq!(
        support::span(&snap, "parse").calls,
        10,
        "{rust_log:?}: {report}"
    );
    if rust_log.is_some() {
        return;
    }

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

//! The console report on hand-built profiles: corners a scripted run does not reach (sums past
//! `u64::MAX`, clamped samples, empty runs, hidden rows, names in two targets, async spans).

use spanprof::output::Table;
use spanprof::profile::SpanStats;
use spanprof::Snapshot;

/// The golden run's profile (preset `basic`, mock clock), to edit.
fn golden() -> Snapshot {
    Snapshot::from_json(
        include_str!("data/golden-profile.json"),
        "golden-profile.json",
    )
    .unwrap()
}

fn span_mut<'a>(snap: &'a mut Snapshot, name: &str) -> &'a mut SpanStats {
    snap.spans.iter_mut().find(|s| s.name == name).unwrap()
}

/// Every line of `report` fits a 100-column terminal.
fn assert_fits(report: &str) {
    for line in report.lines() {
        assert!(
            line.chars().count() <= 100,
            "{} columns: {line:?}\n{report}",
            line.chars().count()
        );
    }
}

#[test]
fn clamped_note_counts_spans_not_histograms() {
    let mut snap = golden();
    // Three single-entry spans over an hour: each is one entry and one instance, and every one
    // of the five histograms clamped it.
    let s = span_mut(&mut snap, "train");
    for stat in [
        &mut s.entry_busy,
        &mut s.entry_self,
        &mut s.busy,
        &mut s.self_time,
        &mut s.wall,
    ] {
        stat.clamped = 3;
    }
    let report = Table::new().to_string(&snap);
    assert!(
        report.contains(
            "note: 3 spans over 60.0 min: percentiles count them as 60.0 min (totals, max exact)"
        ),
        "{report}"
    );
    // An entry of a span still open, clamped: counted once as well.
    let s = span_mut(&mut snap, "connection");
    s.entry_busy.clamped = 1;
    s.entry_self.clamped = 1;
    let report = Table::new().to_string(&snap);
    assert_fits(&report);
    assert!(report.contains("note: 4 spans over 60.0 min"), "{report}");
}

#[test]
fn sums_past_u64_max_saturate_instead_of_wrapping() {
    let mut snap = golden();
    for name in ["backward", "forward"] {
        let s = span_mut(&mut snap, name);
        s.entry_self.total_ns = u64::MAX / 2 + 1;
        s.entry_busy.total_ns = u64::MAX / 2 + 1;
    }
    let report = Table::new().to_string(&snap);
    let first = report.lines().next().unwrap();
    // Not "0 ns inside spans": the sum saturates at u64::MAX ns.
    assert!(first.contains("213504 d inside spans"), "{report}");
    // Shares are computed on the exact (u128) sum: each of the two is half.
    assert_fits(&report);
    let backward = report.lines().find(|l| l.starts_with("backward")).unwrap();
    assert!(backward.contains(" 50.0% "), "{report}");
}

/// The golden profile with no span recorded, and the span filter `filter`.
fn empty(filter: Option<&str>) -> Snapshot {
    let mut snap = golden();
    snap.spans.clear();
    snap.run.filter = filter.map(str::to_string);
    snap
}

#[test]
fn an_empty_run_says_why_with_a_span_filter() {
    let report = Table::new().to_string(&empty(Some("my_app=trace,hyper=off")));
    assert_fits(&report);
    assert!(report.contains("no span was recorded"), "{report}");
    assert!(
        report.contains(r#"SPANPROF_FILTER "my_app=trace,hyper=off" matched no span"#),
        "{report}"
    );
    assert!(!report.contains("0 span names"), "{report}");
}

#[test]
fn an_empty_run_says_why_without_a_span_filter() {
    let report = Table::new().to_string(&empty(None));
    assert_fits(&report);
    assert!(report.contains("no span was recorded"), "{report}");
    assert!(
        report.contains("no span was enabled by the subscriber's filter"),
        "{report}"
    );
    assert!(report.contains("RUST_LOG"), "{report}");
    assert!(!report.contains("SPANPROF_FILTER \""), "{report}");
}

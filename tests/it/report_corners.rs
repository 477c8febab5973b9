//! The console report on hand-built profiles: corners a scripted run does not reach (sums past
//! `u64::MAX`, clamped samples, empty runs, hidden rows, names in two targets, async spans).

use spanprof::output::Table;
use spanprof::profile::SpanStats;
use spanprof::Snapshot;

/// The golden run's profile (preset `basic`, mock clock), to edit.
fn golden() -> Snapshot {
    Snapshot::from_json(
        include_str!("../data/golden-profile.json"),
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

/// `name` recorded under a second target, `target`, with the figures of `like`.
fn add_twin(snap: &mut Snapshot, like: &str, name: &str, target: &str) {
    let mut twin = snap.spans.iter().find(|s| s.name == like).unwrap().clone();
    twin.name = name.to_string();
    twin.target = target.to_string();
    snap.spans.push(twin);
}

/// The row of the main table that starts with `label` followed by spaces.
fn row<'a>(report: &'a str, label: &str) -> Option<&'a str> {
    report
        .lines()
        .find(|l| l.starts_with(label) && l[label.len()..].starts_with("  "))
}

#[test]
fn names_in_two_targets_show_their_targets() {
    let mut snap = golden();
    for s in &mut snap.spans {
        if s.name == "forward" {
            s.target = "app::train::model".to_string();
        }
        if s.name == LONG {
            s.target = "app::io".to_string();
        }
    }
    add_twin(&mut snap, "forward", "forward", "app::eval::model");
    add_twin(&mut snap, LONG, LONG, "app::net");
    let report = Table::new().to_string(&snap);
    assert_fits(&report);
    // The shortest end of the target that tells them apart, fitted to the name column.
    assert!(row(&report, "forward (…::train::m…)").is_some(), "{report}");
    assert!(row(&report, "forward (…::eval::mo…)").is_some(), "{report}");
    assert!(row(&report, "load_checkpoi… (…::io)").is_some(), "{report}");
    assert!(row(&report, "load_checkpo… (…::net)").is_some(), "{report}");
    // Where a target fits whole, it is shown whole.
    let mut snap2 = golden();
    add_twin(&mut snap2, "matmul", "matmul", "a::b");
    let report2 = Table::new().to_string(&snap2);
    assert!(row(&report2, "matmul (a::b)").is_some(), "{report2}");
    assert!(row(&report2, "matmul (golden)").is_some(), "{report2}");
    // Names in one target only are shown as before.
    assert!(row(&report, "backward").is_some(), "{report}");
    assert!(!report.contains("backward ("), "{report}");

    // Snapshot::span returns the first match; span_in picks the target.
    assert_eq!(snap.span("forward").unwrap().target, "app::train::model");
    let eval = snap.span_in("forward", "app::eval::model").unwrap();
    assert_eq!(
        (eval.name.as_str(), eval.target.as_str()),
        ("forward", "app::eval::model")
    );
    assert!(snap.span_in("forward", "app").is_none());
}

/// The golden script's span name longer than the name column.
const LONG: &str = "load_checkpoint_from_object_storage";

#[test]
fn errors_of_every_name_are_reported_and_hidden_rows_counted() {
    let mut snap = golden();
    // A span name far down the table with errors, and one with a long name.
    span_mut(&mut snap, "walk").errors = 1;
    span_mut(&mut snap, LONG).errors = 2;
    let report = Table::new().with_top(3).to_string(&snap);
    assert_fits(&report);
    // validate_batch and walk are not among the 3 rows shown; their errors are reported.
    assert!(row(&report, "validate_batch").is_none(), "{report}");
    let errors: String = report
        .lines()
        .skip_while(|l| !l.starts_with("errors:"))
        .take_while(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("\n");
    for error in [
        "validate_batch 3 of 8 calls",
        "walk 1 of 1 calls",
        "load_checkpoint_from_object_storage 2 of 1 calls",
    ] {
        assert!(errors.contains(error), "{error}:\n{report}");
    }
    // Sections that show only the top rows say how many they leave out: the three span names
    // with throughput fields (matmul, request, train_step) are beyond the top 3.
    assert!(
        report.contains("throughput") && report.contains("3 more span names with throughput"),
        "{report}"
    );
    assert!(report.contains("… 9 more span names"), "{report}");
}

/// The cells of a table line after the 22-character name column: 8 characters each, one
/// space before each.
fn cells(line: &str) -> Vec<String> {
    let chars: Vec<char> = line.chars().skip(22).collect();
    chars
        .chunks(9)
        .map(|c| c.iter().collect::<String>().trim().to_string())
        .collect()
}

/// Sets the percentiles and maximum of `stat` (what the report reads), in µs.
fn set_latency(stat: &mut spanprof::profile::Stat, [p50, p90, p99, max]: [u64; 4]) {
    stat.p50_ns = p50 * 1_000;
    stat.p90_ns = p90 * 1_000;
    stat.p99_ns = p99 * 1_000;
    stat.max_ns = max * 1_000;
}

#[test]
fn async_spans_lead_with_latency_and_errors_per_instance() {
    let mut snap = golden();
    // An async handler: 200 requests, each polled three times; 4 of them had errors (6 events).
    add_twin(&mut snap, "request", "handle_request", "server");
    let s = span_mut(&mut snap, "handle_request");
    (s.calls, s.created, s.instances, s.open) = (600, 200, 200, 0);
    s.wall.count = 200;
    s.busy.count = 200;
    set_latency(&mut s.wall, [1_200, 4_500, 9_800, 12_000]);
    set_latency(&mut s.busy, [110, 230, 470, 610]);
    (s.errors, s.errored_instances) = (6, 4);
    let report = Table::new().to_string(&snap);
    assert_fits(&report);

    let lines: Vec<&str> = report.lines().collect();
    let section = lines
        .iter()
        .position(|l| l.starts_with("span instances"))
        .unwrap_or_else(|| panic!("no span instances section:\n{report}"));
    // It follows the main table, before throughput.
    let throughput = lines
        .iter()
        .position(|l| l.starts_with("throughput"))
        .unwrap();
    assert!(section < throughput, "{report}");
    // Latency per instance leads: wall and busy p50/p90/p99/max.
    let header = lines[section..]
        .iter()
        .find(|l| l.starts_with("name"))
        .unwrap();
    assert_eq!(
        cells(header),
        [
            "wall p50", "wall p90", "wall p99", "wall max", "busy p50", "busy p90", "busy p99",
            "busy max"
        ],
        "{report}"
    );
    let handler = lines[section..]
        .iter()
        .find(|l| l.starts_with("handle_request "))
        .unwrap();
    assert_eq!(
        cells(handler),
        ["1.20 ms", "4.50 ms", "9.80 ms", "12.0 ms", "110 µs", "230 µs", "470 µs", "610 µs"],
        "{report}"
    );
    // The single-entry spans are not in it.
    assert!(
        !lines[section..].iter().any(|l| l.starts_with("backward ")),
        "{report}"
    );

    // Errors per instance for the async span, per call for the others.
    let errors = lines.iter().find(|l| l.starts_with("errors:")).unwrap();
    assert!(
        errors.contains("handle_request 4 of 200 instances"),
        "{report}"
    );
    assert!(errors.contains("validate_batch 3 of 8 calls"), "{report}");
}

#[test]
fn errored_instances_read_as_zero_from_older_profiles_and_round_trip() {
    let v1 = Snapshot::from_json(include_str!("../data/profile-v1-basic.json"), "v1").unwrap();
    assert!(v1.spans.iter().all(|s| s.errored_instances == 0));
    let mut snap = golden();
    span_mut(&mut snap, "request").errored_instances = 1;
    let back = Snapshot::from_json(&snap.to_json(), "round trip").unwrap();
    assert_eq!(back.span("request").unwrap().errored_instances, 1);
    assert_eq!(back, snap);
}

#[test]
fn rss_growth_is_labelled_per_instance() {
    let snap = Snapshot::from_json(
        include_str!("../data/profile-v2-detailed.json"),
        "profile-v2-detailed.json",
    )
    .unwrap();
    let report = Table::new().to_string(&snap);
    assert_fits(&report);
    let lines: Vec<&str> = report.lines().collect();
    let section = lines
        .iter()
        .position(|l| l.starts_with("memory and CPU"))
        .unwrap_or_else(|| panic!("no memory section:\n{report}"));
    // The heading does not call RSS growth per call: it is per instance (creation to close).
    assert!(!lines[section].contains("per call;"), "{report}");
    let header = lines[section..]
        .iter()
        .find(|l| l.starts_with("name"))
        .unwrap();
    assert!(header.contains("rss Δ/ins"), "{header}\n{report}");
    assert!(
        lines[section..section + 3]
            .iter()
            .any(|l| l.contains("rss Δ/ins") && l.contains("instance")),
        "no line explains rss Δ/ins:\n{report}"
    );
    // train (one instance, RSS +7.09 MiB over its life) shows that growth per instance.
    let train = lines[section..]
        .iter()
        .find(|l| l.starts_with("train "))
        .unwrap();
    assert!(train.contains("7.09 MiB"), "{train}");
}

#[test]
fn gpu_memory_growth_is_labelled_per_instance() {
    // generate_dataset (the first span) with one GPU device: 2 instances grew 3 MiB in all.
    let json = include_str!("../data/profile-v2-detailed.json").replacen(
        "\"resources\": {",
        r#""resources": {
        "gpus": [{ "device": 0, "instances": 2, "memory_delta_bytes": 3145728,
                   "peak_memory_bytes": 8589934592, "mean_utilization_pct": 40.0,
                   "energy_j": 12.5 }],
        "energy_j": 12.5,"#,
        1,
    );
    let snap = Snapshot::from_json(&json, "edited profile-v2-detailed.json").unwrap();
    assert_eq!(snap.spans[0].resources.as_ref().unwrap().gpus.len(), 1);
    let report = Table::new().to_string(&snap);
    assert_fits(&report);
    let lines: Vec<&str> = report.lines().collect();
    let section = lines
        .iter()
        .position(|l| l.starts_with("GPU and energy"))
        .unwrap_or_else(|| panic!("no GPU section:\n{report}"));
    assert!(!lines[section].contains("per call"), "{report}");
    assert!(lines[section + 1].contains("mem Δ/ins"), "{report}");
    // 3 MiB over 2 instances.
    assert!(lines[section + 2].contains("1.50 MiB"), "{report}");
}

//! The output interface: custom formats, every failing output reported, and resources switched
//! while the program runs.

use crate::support;

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
    // output directory are, see tests/it/output_faults.rs.)
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
    // allocator, which this test binary installs (tests/it/main.rs): without it, the profile
    // would be built without heap.
    let (dispatch, guard) =
        support::install(ProfileLayer::builder().with_resources(Resources::CPU | Resources::HEAP));
    let handle = guard.handle();
    let cpu = if cfg!(any(target_os = "linux", target_os = "android")) {
        Resources::CPU
    } else {
        Resources::NONE
    };
    assert!(spanprof::alloc::HeapCounters::installed());
    let expected = cpu | Resources::HEAP;
    assert_eq!(handle.resources(), expected, "what is available here");
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
    if cpu == Resources::CPU {
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

/// The `<title>` texts of an SVG flamegraph: each frame's name, then ` (` and its figures.
#[cfg(feature = "flamegraph")]
fn svg_titles(svg: &str) -> Vec<String> {
    svg.split("<title>")
        .skip(1)
        .filter_map(|t| t.split_once("</title>").map(|(t, _)| t.to_string()))
        .collect()
}

/// Span names ending in a space and a number (`layer 3`, `layer 12`) are distinct frames: the
/// number is not read as a second count (a differential line merging both into `layer`), in
/// the folded stacks and in the flamegraph drawn from them, whether the name ends a line or is
/// a parent; the counts still add up to the tree's self time.
#[test]
fn span_names_ending_in_numbers_are_distinct_frames() {
    let (dispatch, guard, clock) = support::mock();
    let ms = std::time::Duration::from_millis;
    tracing::dispatcher::with_default(&dispatch, || {
        let _model = tracing::info_span!("model").entered();
        clock.advance(ms(1));
        tracing::info_span!("layer 3").in_scope(|| {
            clock.advance(ms(3));
            tracing::info_span!("attn 1").in_scope(|| clock.advance(ms(2)));
        });
        tracing::info_span!("layer 12").in_scope(|| clock.advance(ms(12)));
        tracing::info_span!("block 7 ").in_scope(|| clock.advance(ms(7)));
    });
    let snapshot = guard.snapshot();
    let tree = snapshot
        .tree
        .as_ref()
        .expect("the default preset records the tree");
    let text = spanprof::output::Folded.to_string(&snapshot);
    let lines: Vec<(&str, u64)> = text
        .lines()
        .map(|l| {
            let (stack, count) = l.rsplit_once(' ').unwrap();
            (stack, count.parse().unwrap())
        })
        .collect();
    // One count per line: what precedes it does not end in a space and a number.
    for (stack, _) in &lines {
        let last = stack.rsplit_once(' ').map_or("", |(_, t)| t);
        assert!(
            last.is_empty() || !last.chars().all(|c| c.is_ascii_digit()),
            "a differential line: {text:?}"
        );
    }
    let stacks: Vec<&str> = lines.iter().map(|(s, _)| *s).collect();
    for want in [
        "model",
        "model;layer\u{a0}3",
        "model;layer\u{a0}3;attn\u{a0}1",
        "model;layer\u{a0}12",
        "model;block\u{a0}7",
    ] {
        assert!(stacks.contains(&want), "{want:?} not in {text:?}");
    }
    assert_eq!(lines.len(), 5, "{text:?}");
    assert_eq!(
        lines.iter().map(|(_, n)| n).sum::<u64>(),
        tree.self_ns(),
        "{text:?}"
    );
    #[cfg(feature = "flamegraph")]
    {
        let mut svg = Vec::new();
        spanprof::output::Flamegraph::new()
            .render(&snapshot, &mut svg)
            .unwrap();
        let titles = svg_titles(&String::from_utf8(svg).unwrap());
        let frames: Vec<&str> = titles
            .iter()
            .filter_map(|t| t.split_once(" (").map(|(name, _)| name))
            .collect();
        for name in [
            "model",
            "layer\u{a0}3",
            "layer\u{a0}12",
            "attn\u{a0}1",
            "block\u{a0}7",
        ] {
            let n = frames.iter().filter(|f| **f == name).count();
            assert_eq!(n, 1, "{name:?} is {n} frames: {titles:?}");
        }
        assert!(!frames.contains(&"layer"), "{titles:?}");
        // No frame carries a differential's second percentage.
        assert!(!titles.iter().any(|t| t.contains("%;")), "{titles:?}");
    }
}

/// A span name or a metric name with control characters (a newline, a tab) is one row in each
/// table of the console report (spans, throughput, metrics, call tree): the characters are
/// escaped as `\n` and `\t`, and the columns stay aligned (widths count the escaped text).
#[test]
fn control_characters_in_names_do_not_split_report_rows() {
    let (dispatch, guard, clock) = support::mock();
    tracing::dispatcher::with_default(&dispatch, || {
        tracing::info_span!("a\nb\tc", items = 3u64).in_scope(|| {
            clock.advance(std::time::Duration::from_millis(5));
            tracing::info!("counter.m\nx" = 2u64);
            tracing::info_span!("in\r\nner\u{1b}").in_scope(|| {
                clock.advance(std::time::Duration::from_millis(1));
            });
        });
    });
    let text = Table::new().to_string(&guard.snapshot());
    assert!(
        !text.chars().any(|c| c.is_control() && c != '\n'),
        "control characters printed raw:\n{text}"
    );
    let rows = |name: &str| -> Vec<&str> { text.lines().filter(|l| l.contains(name)).collect() };
    // The span table, the throughput table, the metrics table (span column) and the call tree.
    let span = rows(r"a\nb\tc");
    assert_eq!(span.len(), 4, "{span:#?}\n{text}");
    // The span table, the call tree.
    let inner = rows(r"in\r\nner\u{1b}");
    assert_eq!(inner.len(), 2, "{inner:#?}\n{text}");
    // The metrics table (name column).
    let metric = rows(r"m\nx");
    assert_eq!(metric.len(), 1, "{metric:#?}\n{text}");
    // Widths count the escaped text: the span table's rows line up with its header.
    let header = text.lines().find(|l| l.starts_with("name ")).unwrap();
    for row in [span[0], inner[0]] {
        assert_eq!(
            row.chars().count(),
            header.chars().count(),
            "{row:?} against {header:?}"
        );
    }
    // Nothing in the report starts with what followed a line break in a name.
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("b\t") || l.starts_with("ner")),
        "{text}"
    );
}

/// An output filter (`SPANPROF_OUTPUT_FILTER`, `with_output_filter`) selects what every output
/// shows, not only the span rows: the call tree keeps the paths to the selected names (their
/// ancestors without self time), so the folded stacks, the JSON tree and the report's call tree
/// show only the selected names' self time; metrics keep those recorded in selected span names
/// and those outside every span.
#[test]
fn the_output_filter_selects_the_call_tree_and_the_metrics_too() {
    let dir = support::temp_dir("output-filter-tree");
    let report = dir.join("report.txt");
    let (clock, mock) = spanprof::clock::Clock::mock();
    let (layer, guard) = ProfileLayer::builder()
        .with_env(false)
        .with_clock(clock)
        .with_output_dir(&dir)
        .with_report(ReportTarget::File(report.clone()))
        .with_output_filter("sort".parse().unwrap())
        .build()
        .unwrap();
    let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
    let ms = std::time::Duration::from_millis;
    tracing::dispatcher::with_default(&dispatch, || {
        tracing::info!(counter.runs = 1u64);
        for _ in 0..2 {
            tracing::info_span!("step").in_scope(|| {
                mock.advance(ms(1));
                tracing::info_span!("sort").in_scope(|| {
                    mock.advance(ms(3));
                    tracing::info!(counter.sorted = 10u64);
                });
                tracing::info_span!("hash").in_scope(|| {
                    mock.advance(ms(2));
                    tracing::info!(counter.hashed = 10u64);
                });
            });
        }
    });
    drop(dispatch);
    guard.finish().unwrap();
    let folded = std::fs::read_to_string(dir.join("profile.folded")).unwrap();
    assert_eq!(folded, "step;sort 6000000\n");
    let saved = Snapshot::read_json(dir.join(PROFILE_FILE)).unwrap();
    let names: Vec<&str> = saved.spans.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["sort"]);
    let tree = saved.tree.as_ref().unwrap();
    let nodes: Vec<(String, u64)> = (0..tree.nodes.len())
        .map(|i| (tree.path(i).join(";"), tree.nodes[i].self_time.total_ns))
        .collect();
    assert_eq!(
        nodes,
        [
            ("step".to_string(), 0),
            ("step;sort".to_string(), 6_000_000)
        ]
    );
    // The ancestor keeps its calls and busy time: the path's context.
    assert_eq!(tree.nodes[0].calls, 2);
    assert_eq!(tree.nodes[0].busy.total_ns, 12_000_000);
    let mut metrics: Vec<&str> = saved.metrics.iter().map(|m| m.name.as_str()).collect();
    metrics.sort_unstable();
    assert_eq!(metrics, ["runs", "sorted"]);
    let text = std::fs::read_to_string(&report).unwrap();
    let tree_view = &text[text.find("Call tree").expect("the report's call tree")..];
    assert!(tree_view.contains("sort"), "{text}");
    assert!(!text.contains("hash"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A run of `step` (1 ms of self time, twice) calling `sort` (3 ms) and `hash` (2 ms), written
/// to `dir` (report file, profile, CSV, HTML, Markdown) with the output filter `filter`.
fn filtered_run(dir: &std::path::Path, filter: &str) {
    let (clock, mock) = spanprof::clock::Clock::mock();
    let (layer, guard) = ProfileLayer::builder()
        .with_env(false)
        .with_clock(clock)
        .with_output_dir(dir)
        .with_report(ReportTarget::File(dir.join("report.txt")))
        .with_output_filter(filter.parse().unwrap())
        .with_output(
            spanprof::output::Markdown::new(),
            Destination::Dir(dir.into()),
        )
        .build()
        .unwrap();
    let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
    let ms = std::time::Duration::from_millis;
    tracing::dispatcher::with_default(&dispatch, || {
        for _ in 0..2 {
            tracing::info_span!("step").in_scope(|| {
                mock.advance(ms(1));
                tracing::info_span!("sort").in_scope(|| mock.advance(ms(3)));
                tracing::info_span!("hash").in_scope(|| mock.advance(ms(2)));
            });
        }
    });
    drop(dispatch);
    guard.finish().unwrap();
}

/// With an output filter, self % stays the share of all the time inside profiled spans (the
/// README's definition), selected or not, and every output that shows it agrees: the table,
/// its call tree, CSV `self_pct`, HTML and Markdown; the saved profile carries the whole
/// profile's figures, so a report of it says the same.
#[test]
fn self_pct_of_a_selection_stays_a_share_of_all_self_time() {
    let dir = support::temp_dir("output-filter-self-pct");
    filtered_run(&dir, "sort");
    // sort: 6 ms of the 12 ms inside spans.
    let report = std::fs::read_to_string(dir.join("report.txt")).unwrap();
    let row = |text: &str, start: &str| -> String {
        text.lines()
            .find(|l| l.trim_start().starts_with(start))
            .unwrap_or_else(|| panic!("no {start:?} row in\n{text}"))
            .to_string()
    };
    assert!(row(&report, "sort ").contains(" 50.0% "), "{report}");
    let tree = &report[report.find("Call tree").unwrap()..];
    assert!(row(tree, "sort ").contains(" 50.0% "), "{report}");
    assert!(
        report.starts_with("spanprof: 3 span names, 12.0 ms inside spans"),
        "{report}"
    );
    assert!(
        report.contains("output filter \"sort\": 1 of them, 50.0% of the time inside spans"),
        "{report}"
    );
    #[cfg(feature = "csv")]
    {
        let csv = std::fs::read_to_string(dir.join("report.csv")).unwrap();
        let head: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
        let col = head.iter().position(|h| *h == "self_pct").unwrap();
        let sort = csv.lines().find(|l| l.starts_with("sort,")).unwrap();
        assert_eq!(sort.split(',').nth(col), Some("50"), "{csv}");
    }
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(row(&md, "| `sort` |").contains("| 50.0% |"), "{md}");
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains(">50.0%<"), "the HTML table's self %");
    assert!(!html.contains(">100.0%<"), "the HTML table's self %");
    // The saved profile knows the whole: a report of it is the live one.
    let saved = Snapshot::read_json(dir.join(PROFILE_FILE)).unwrap();
    assert_eq!(
        Table::new().to_string(
            &"sort"
                .parse::<spanprof::output::Selection>()
                .unwrap()
                .apply(&saved)
        ),
        report
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// An output filter that matches no span name says so, naming the filter, rather than
/// diagnosing a run that recorded no span (RUST_LOG, the subscriber's filter).
#[test]
fn an_output_filter_matching_nothing_is_named_in_the_report() {
    let dir = support::temp_dir("output-filter-none");
    filtered_run(&dir, "nomatch*");
    let report = std::fs::read_to_string(dir.join("report.txt")).unwrap();
    assert!(
        report.contains("the output filter \"nomatch*\" matches none of the 3 span names recorded"),
        "{report}"
    );
    assert!(!report.contains("no span was recorded"), "{report}");
    assert!(!report.contains("RUST_LOG"), "{report}");
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        md.contains("Output filter `nomatch*`: 0 of them shown."),
        "{md}"
    );
    assert!(!md.contains("No span was recorded"), "{md}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Self times near `u64::MAX` (a crafted or merged profile): every format renders or returns
/// an error; none panics. The flame graph, which inferno counts in a `usize`, is an error.
#[test]
fn self_times_past_what_a_sum_holds_never_panic_an_output() {
    let mut snapshot = Snapshot::from_json(
        include_str!("../data/golden-profile.json"),
        "golden-profile.json",
    )
    .unwrap();
    let tree = snapshot.tree.as_mut().unwrap();
    for node in tree.nodes.iter_mut().take(3) {
        node.self_time.total_ns = 1 << 63;
        node.busy.total_ns = u64::MAX;
    }
    for span in snapshot.spans.iter_mut().take(2) {
        span.entry_self.total_ns = 1 << 63;
    }
    for name in spanprof::output::FORMAT_NAMES {
        let format = spanprof::output::format_named(name, 25).unwrap();
        let mut out = Vec::new();
        let rendered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            format.render(&snapshot, &mut out)
        }));
        let rendered = rendered.unwrap_or_else(|_| panic!("{name} panicked"));
        if *name == "flamegraph" {
            let e = rendered.unwrap_err();
            assert!(
                e.to_string().contains("more than a flame graph can count"),
                "{e}"
            );
        } else {
            rendered.unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
}

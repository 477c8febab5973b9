//! The `spanprof` command, run as the built binary: golden outputs of every command on small
//! profiles of the training example (`tests/data/cli-*.json`), `report` against the live
//! outputs, `merge` against one profile of the same work, and bad input.
//!
//! The golden files are `tests/data/cli/*`. After an intended change of the output, refresh
//! them and review the diff:
//!
//! ```text
//! SPANPROF_BLESS=1 cargo test --features cli --test it cli::
//! ```
//!
//! The input profiles were made by the training example (`--epochs 1`; `--slowdown 20` for
//! the slow one; `SPANPROF=detailed` for the detailed one), host and command line anonymised:
//! see `tests/data/README.md`.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use spanprof::output::{Destination, Markdown, Selection};
use spanprof::profile::{MetricValue, Stat};
use spanprof::{ReportTarget, Snapshot};
use tracing_subscriber::prelude::*;

const BIN: &str = env!("CARGO_BIN_EXE_spanprof");

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn bless() -> bool {
    std::env::var_os("SPANPROF_BLESS").is_some_and(|v| v == "1")
}

/// What one run of the binary gave: exit status, stdout, stderr.
struct Ran {
    status: i32,
    stdout: String,
    stderr: String,
}

fn run_bin(args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .current_dir(data(""))
        .output()
        .expect("the spanprof binary runs")
}

fn spanprof(args: &[&str]) -> Ran {
    let out = run_bin(args);
    Ran {
        status: out.status.code().expect("exited"),
        stdout: String::from_utf8(out.stdout).expect("UTF-8 stdout"),
        stderr: String::from_utf8(out.stderr).expect("UTF-8 stderr"),
    }
}

/// Compares `actual` with the golden file `tests/data/cli/NAME` (writes it when blessing).
fn golden(name: &str, actual: &str) {
    let path = data("cli").join(name);
    if bless() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        eprintln!("SPANPROF_BLESS=1: wrote {}", path.display());
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "reading {}: {e}\n(create it with: SPANPROF_BLESS=1 cargo test --features cli --test it cli::)",
            path.display()
        )
    });
    assert_eq!(
        actual,
        expected,
        "{name} differs from {}; if the change is intended: SPANPROF_BLESS=1 cargo test --features cli --test it cli::",
        path.display()
    );
}

fn read(name: &str) -> Snapshot {
    Snapshot::read_json(data(name)).unwrap()
}

#[test]
fn report_renders_every_format_of_a_saved_profile() {
    let base = read("cli-base.json");
    let table = spanprof(&["report", "cli-base.json"]);
    assert_eq!(table.status, 0, "{}", table.stderr);
    // The table of the library, byte for byte.
    assert_eq!(
        table.stdout,
        spanprof::output::Table::new()
            .with_top(spanprof::Builder::DEFAULT_TOP)
            .to_string(&base)
    );
    golden("report-table.txt", &table.stdout);

    let md = spanprof(&[
        "report",
        "cli-base.json",
        "--format",
        "markdown",
        "--top",
        "4",
    ]);
    assert_eq!(md.status, 0, "{}", md.stderr);
    let rows: Vec<&str> = md.stdout.lines().filter(|l| l.starts_with("| `")).collect();
    assert_eq!(rows.len(), 4);
    let forward = base.span("forward").unwrap();
    let row = rows.iter().find(|r| r.starts_with("| `forward`")).unwrap();
    assert!(row.contains(&format!("| {} |", forward.calls)), "{row}");
    golden("report-markdown.md", &md.stdout);

    let json = spanprof(&[
        "report",
        "cli-base.json",
        "--format",
        "json",
        "--filter",
        "forward,train_*",
    ]);
    assert_eq!(json.status, 0, "{}", json.stderr);
    let selected = Snapshot::from_json(&json.stdout, "stdout").unwrap();
    let mut names: Vec<&str> = selected.spans.iter().map(|s| s.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["forward", "train_step"]);
    assert_eq!(selected.span("forward").unwrap(), forward);

    let top2 = spanprof(&[
        "report",
        "cli-base.json",
        "--format",
        "json",
        "--filter",
        "top=2",
    ]);
    let two = Snapshot::from_json(&top2.stdout, "stdout").unwrap();
    let most = base
        .spans
        .iter()
        .max_by_key(|s| s.entry_self.total_ns)
        .unwrap();
    assert_eq!(two.spans.len(), 2);
    assert!(two.spans.iter().any(|s| s.name == most.name));
}

/// Every format `report` knows, byte for byte what the library renders from the same
/// profile: binary ones (pprof is gzip) included, not passed through a text conversion.
#[test]
fn report_writes_every_format_byte_for_byte() {
    let base = read("cli-base.json");
    for name in spanprof::output::FORMAT_NAMES {
        let out = run_bin(&["report", "cli-base.json", "--format", name]);
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut expected = Vec::new();
        spanprof::output::format_named(name, spanprof::Builder::DEFAULT_TOP)
            .unwrap()
            .render(&base, &mut expected)
            .unwrap();
        assert!(!expected.is_empty(), "{name}");
        assert!(
            out.stdout == expected,
            "{name}: the output differs from the library's"
        );
    }
    #[cfg(feature = "pprof")]
    {
        let out = run_bin(&["report", "cli-base.json", "--format", "pprof"]);
        assert_eq!(&out.stdout[..2], [0x1f, 0x8b], "a gzip stream");
    }
}

/// A live run writing its report, JSON profile and Markdown report; `spanprof report` on the
/// JSON gives the same bytes (with the same top and the same selection).
#[test]
fn report_on_a_saved_profile_equals_the_live_output() {
    let dir = support::temp_dir("cli-live");
    std::fs::create_dir_all(&dir).unwrap();
    let report = dir.join("report.txt");
    let selection: Selection = "step,inner*".parse().unwrap();
    let builder = spanprof::ProfileLayer::builder()
        .with_env(false)
        .with_output_dir(&dir)
        .with_report(ReportTarget::File(report.clone()))
        .with_top(2)
        .with_output_filter(selection)
        .with_output(Markdown::new().with_top(2), Destination::Dir(dir.clone()));
    // Built here, not by `support::install`: that one turns the report off.
    let (mock, clock) = spanprof::clock::Clock::mock();
    let (layer, guard) = builder.with_clock(mock).build().unwrap();
    let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
    tracing::dispatcher::with_default(&dispatch, || {
        for i in 0..50u64 {
            step(i, &clock, || {
                for _ in 0..3 {
                    let _inner = tracing::info_span!("inner_a").entered();
                    clock.advance(Duration::from_nanos(200 + i));
                }
                let _other = tracing::info_span!("other").entered();
                clock.advance(Duration::from_nanos(500));
            });
        }
    });
    drop(dispatch);
    guard.finish().unwrap();
    let profile = dir.join("profile.json");
    let saved = Snapshot::read_json(&profile).unwrap();
    assert!(
        saved.span("other").is_none(),
        "the selection applies to the JSON"
    );
    assert_eq!(saved.span("inner_a").unwrap().calls, 150);
    let p = profile.to_str().unwrap();
    let table = spanprof(&["report", p, "--top", "2", "--filter", "step,inner*"]);
    assert_eq!(table.status, 0, "{}", table.stderr);
    assert_eq!(table.stdout, std::fs::read_to_string(&report).unwrap());
    let md = spanprof(&["report", p, "--top", "2", "--format", "markdown"]);
    assert_eq!(
        md.stdout,
        std::fs::read_to_string(dir.join("report.md")).unwrap()
    );
    assert!(md.stdout.contains("| `inner_a` |"), "{}", md.stdout);
    let json = spanprof(&["report", p, "--format", "json"]);
    assert_eq!(json.stdout, std::fs::read_to_string(&profile).unwrap());
}

#[test]
fn compare_flags_the_slowdown_and_names_forward() {
    let slow = spanprof(&["compare", "cli-base.json", "--", "cli-slow.json"]);
    assert_eq!(slow.status, 1, "{}{}", slow.stdout, slow.stderr);
    let result = slow
        .stdout
        .lines()
        .find(|l| l.starts_with("result:"))
        .unwrap();
    assert!(
        result.contains("REGRESSION in forward (typical +"),
        "{result}"
    );
    // With `--metric p50`, the change printed is the one of the two profiles' p50, and the
    // result line gives the change beside the run-wide shift, as the row's next column.
    let p50 = spanprof(&[
        "compare",
        "--metric",
        "p50",
        "cli-base.json",
        "cli-slow.json",
    ]);
    assert_eq!(p50.status, 1, "{}{}", p50.stdout, p50.stderr);
    let p50_result = p50
        .stdout
        .lines()
        .find(|l| l.starts_with("result:"))
        .unwrap();
    let (b, s) = (read("cli-base.json"), read("cli-slow.json"));
    let (bp, sp) = (
        b.span("forward").unwrap().entry_busy.p50_ns as f64,
        s.span("forward").unwrap().entry_busy.p50_ns as f64,
    );
    let change = format!("{:+.1} %", (sp / bp - 1.0) * 100.0);
    // The row's change and its change beside the run, e.g. `+18.4 %     +19.0 %`.
    let changes = |row: &str| -> (String, String) {
        let cells: Vec<&str> = row.split("  ").filter(|c| !c.is_empty()).collect();
        (cells[4].trim().to_string(), cells[5].trim().to_string())
    };
    let row = p50
        .stdout
        .lines()
        .find(|l| l.starts_with("forward "))
        .unwrap();
    let (raw, beside) = changes(row);
    assert_eq!(raw, change, "{row}");
    assert!(row.ends_with("regression"), "{row}");
    assert!(
        p50_result.contains(&format!("forward (p50 {beside})")),
        "{p50_result}"
    );
    assert!(p50.stdout.contains("low confidence"));
    // The call path to forward, judged on its node's busy time per instance, regresses too.
    let node_p50 = |s: &Snapshot| {
        let tree = s.tree.as_ref().unwrap();
        let i = (0..tree.nodes.len())
            .find(|&i| tree.path(i) == ["train", "epoch", "train_step", "forward"])
            .unwrap();
        tree.nodes[i].busy.p50_ns as f64
    };
    let path_change = format!("{:+.1} %", (node_p50(&s) / node_p50(&b) - 1.0) * 100.0);
    let path_row = p50
        .stdout
        .lines()
        .find(|l| l.starts_with("train;epoch;train_step;forward "))
        .unwrap();
    let (raw, beside) = changes(path_row);
    assert_eq!(raw, path_change, "{path_row}");
    assert!(path_row.ends_with("regression"), "{path_row}");
    assert!(
        p50_result.contains(&format!("train;epoch;train_step;forward (p50 {beside})")),
        "{p50_result}"
    );
    // Only forward's name and path regress.
    let regressions = slow
        .stdout
        .lines()
        .filter(|l| l.ends_with("  regression"))
        .count();
    assert_eq!(regressions, 2, "{}", slow.stdout);
    golden("compare-slow.txt", &slow.stdout);

    // Options go before `--`: everything after it is a new run.
    let md = spanprof(&[
        "compare",
        "--format",
        "markdown",
        "cli-base.json",
        "--",
        "cli-slow.json",
    ]);
    assert_eq!(md.status, 1);
    assert!(md.stdout.contains("**result: REGRESSION in `forward`"));
    golden("compare-slow.md", &md.stdout);

    let same = spanprof(&["compare", "cli-base.json", "--", "cli-base.json"]);
    assert_eq!(same.status, 0, "{}", same.stdout);
    assert!(same.stdout.contains("result: no regression"));
    assert!(same.stdout.contains("timing per call path"));
    assert!(!same.stdout.contains("paths only in"));
    assert!(!same.stdout.contains("counts that changed"));

    // Two runs per side: the slow runs against the base runs, the spread between runs counts.
    let several = spanprof(&[
        "compare",
        "cli-base.json",
        "cli-base2.json",
        "--",
        "cli-slow.json",
        "cli-slow2.json",
    ]);
    assert!(!several.stdout.contains("low confidence"));
    golden("compare-several.txt", &several.stdout);
}

#[test]
fn the_guides_policy_file_is_read_as_written() {
    // The example of docs/cli-and-ci.md, "A policy file", as a user copies it.
    let guide = include_str!("../../docs/cli-and-ci.md");
    let section = &guide[guide.find("### A policy file").unwrap()..];
    let start = section.find("```toml\n").unwrap() + "```toml\n".len();
    let example = &section[start..start + section[start..].find("```").unwrap()];
    let dir = support::temp_dir("cli-guide-policy");
    std::fs::create_dir_all(&dir).unwrap();
    let policy = dir.join("policy.toml");
    std::fs::write(&policy, example).unwrap();
    let out = spanprof(&[
        "compare",
        "--policy",
        policy.to_str().unwrap(),
        "--format",
        "json",
        "cli-base.json",
        "--",
        "cli-base.json",
    ]);
    assert!(out.stderr.is_empty(), "{}", out.stderr);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(json["options"]["metric"], "typical");
    assert_eq!(json["options"]["threshold_pct"], 15.0);
    assert_eq!(json["options"]["min_shift_ns"], 1000.0);
    // Its budget: train_step's p99 against 40 ms, whatever the run holds.
    let budget = &json["budgets"][0];
    assert_eq!(budget["name"], "train_step");
    assert_eq!(budget["max_ns"], 40e6);
    let p99 = read("cli-base.json")
        .span("train_step")
        .unwrap()
        .entry_busy
        .p99_ns as f64;
    assert_eq!(budget["within"], p99 < 40e6);
    // Its `[thresholds]` entry: p99 judged for every name beside the default metric.
    let metrics: Vec<&str> = json["timings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"] == "forward")
        .map(|t| t["metric"].as_str().unwrap())
        .collect();
    assert_eq!(metrics, ["typical", "p99"]);
}

#[test]
fn compare_policy_thresholds_and_budgets() {
    let dir = support::temp_dir("cli-policy");
    std::fs::create_dir_all(&dir).unwrap();
    let policy = dir.join("policy.toml");
    let forward = read("cli-base.json")
        .span("forward")
        .unwrap()
        .entry_busy
        .p99_ns;
    // A budget below forward's p99 fails even two identical runs; a lenient rule for forward
    // lets the slowdown pass (train_step is under the default threshold).
    std::fs::write(
        &policy,
        format!(
            "threshold = \"50%\"\n[[rule]]\nname = \"forw*\"\nthreshold = 60\n\
             [[budget]]\nname = \"forward\"\nmetric = \"p99\"\nmax = \"{}ns\"\n",
            forward - 1
        ),
    )
    .unwrap();
    let p = policy.to_str().unwrap();
    let same = spanprof(&[
        "compare",
        "--policy",
        p,
        "cli-base.json",
        "--",
        "cli-base.json",
    ]);
    assert_eq!(same.status, 1, "{}{}", same.stdout, same.stderr);
    assert!(same.stdout.contains("over budget"), "{}", same.stdout);
    std::fs::write(&policy, "[[rule]]\nname = \"forw*\"\nthreshold = \"60%\"\n").unwrap();
    let lenient = spanprof(&[
        "compare",
        "--policy",
        p,
        "cli-base.json",
        "--",
        "cli-slow.json",
    ]);
    assert_eq!(lenient.status, 0, "{}", lenient.stdout);
    // The command line overrides the policy's default threshold, not its rules.
    let strict = spanprof(&[
        "compare",
        "--policy",
        p,
        "--metric",
        "self",
        "--threshold",
        "1%",
        "cli-base.json",
        "--",
        "cli-slow.json",
    ]);
    assert!(strict
        .stdout
        .contains("metric self, threshold 1 % and 1.00 µs"));
    // More metrics per name: forward's p99 judged beside its p50, with the figures of the files.
    std::fs::write(&policy, "[thresholds]\np99 = \"1%\"\n").unwrap();
    let tails = spanprof(&[
        "compare",
        "--policy",
        p,
        "cli-base.json",
        "--",
        "cli-slow.json",
    ]);
    let (b99, s99) = (
        read("cli-base.json")
            .span("forward")
            .unwrap()
            .entry_busy
            .p99_ns,
        read("cli-slow.json")
            .span("forward")
            .unwrap()
            .entry_busy
            .p99_ns,
    );
    let row = tails
        .stdout
        .lines()
        .find(|l| l.starts_with("forward ") && l.contains(" p99 "))
        .unwrap_or_else(|| panic!("{}", tails.stdout));
    assert!(
        row.contains(&format!(
            "{:+.1} %",
            (s99 as f64 / b99 as f64 - 1.0) * 100.0
        )),
        "{row}"
    );
    std::fs::write(&policy, "threshold = \"fast\"\n").unwrap();
    let bad = spanprof(&[
        "compare",
        "--policy",
        p,
        "cli-base.json",
        "--",
        "cli-base.json",
    ]);
    assert_eq!(bad.status, 2);
    assert_eq!(bad.stderr.lines().count(), 1, "{}", bad.stderr);
    assert!(bad.stderr.contains("policy.toml") && bad.stderr.contains("\"fast\""));
}

#[test]
fn top_names_the_bottlenecks_with_their_figures() {
    let detailed = read("cli-detailed.json");
    let ran = spanprof(&["top", "cli-detailed.json"]);
    assert_eq!(ran.status, 0, "{}", ran.stderr);
    let most = detailed
        .spans
        .iter()
        .max_by_key(|s| s.entry_self.total_ns)
        .unwrap();
    let all: u64 = detailed.spans.iter().map(|s| s.entry_self.total_ns).sum();
    let first = ran.stdout.lines().nth(1).unwrap();
    assert_eq!(
        first,
        format!(
            "- self time: {} holds {:.1} % of the time inside spans ({} self)",
            most.name,
            100.0 * most.entry_self.total_ns as f64 / all as f64,
            spanprof::output::format_duration(most.entry_self.total_ns)
        )
    );
    assert!(ran.stdout.contains("allocations: "), "{}", ran.stdout);
    // The hottest call path by self time, with its share of the tree's self time.
    let tree = detailed.tree.as_ref().unwrap();
    let (i, hot) = tree
        .nodes
        .iter()
        .enumerate()
        .max_by_key(|(_, n)| n.self_time.total_ns)
        .unwrap();
    let hot_line = format!(
        "- hot path: {} holds {:.1} % of the self time in the call tree ({} self over {} instances)",
        tree.path(i).join(";"),
        100.0 * hot.self_time.total_ns as f64 / tree.self_ns() as f64,
        spanprof::output::format_duration(hot.self_time.total_ns),
        spanprof::output::format_count(hot.instances)
    );
    assert!(
        ran.stdout.lines().any(|l| l == hot_line),
        "{hot_line}\n{}",
        ran.stdout
    );
    // The profile has no cost of a span measured as the program ran (its recorder predates
    // it): spanprof's estimate is unsure, and no instrumentation finding is raised.
    let overhead = detailed.overhead.as_ref().unwrap();
    assert_eq!(overhead.span_ns_sure(), None);
    assert!(!ran.stdout.contains("instrumentation:"), "{}", ran.stdout);
    golden("top.txt", &ran.stdout);
    let md = spanprof(&["top", "cli-detailed.json", "--format", "markdown"]);
    golden("top.md", &md.stdout);
}

/// Step `i` of the mock-clock workloads: a span `step` of 1000 + 37·i ns of its own that
/// emits the metrics `histogram.size_bytes` (100 + i), `histogram.loss` (i / 4, a float) and
/// `monotonic_counter.items` (1 + i mod 3), then runs `inside` in it.
fn step(i: u64, clock: &spanprof::clock::MockClock, inside: impl FnOnce()) {
    let _step = tracing::info_span!("step").entered();
    clock.advance(Duration::from_nanos(1_000 + 37 * i));
    tracing::info!(
        histogram.size_bytes = 100 + i,
        histogram.loss = i as f64 / 4.0,
        monotonic_counter.items = 1 + i % 3,
    );
    inside();
}

/// A deterministic workload on a mock clock: [`step`]s with two `inner` children of
/// 100 + i ns each.
fn work(items: std::ops::Range<u64>, dir: &Path) -> Snapshot {
    let builder = spanprof::ProfileLayer::builder()
        .with_env(false)
        .with_report(ReportTarget::Off)
        .with_output_dir(dir);
    let (dispatch, guard, clock) = support::mock_with(builder);
    tracing::dispatcher::with_default(&dispatch, || {
        for i in items {
            step(i, &clock, || {
                for _ in 0..2 {
                    let _inner = tracing::info_span!("inner").entered();
                    clock.advance(Duration::from_nanos(100 + i));
                }
            });
        }
    });
    drop(dispatch);
    guard.finish().unwrap();
    Snapshot::read_json(dir.join("profile.json")).unwrap()
}

#[test]
fn merging_per_process_profiles_equals_one_profile_of_the_same_work() {
    let root = support::temp_dir("cli-merge");
    let whole = work(0..300, &root.join("whole"));
    let parts: Vec<PathBuf> = [0..70, 70..200, 200..300]
        .into_iter()
        .enumerate()
        .map(|(i, range)| {
            let dir = root.join(format!("rank{i}"));
            work(range, &dir);
            dir.join("profile.json")
        })
        .collect();
    let out = root.join("all.json");
    let mut args = vec!["merge"];
    args.extend(parts.iter().map(|p| p.to_str().unwrap()));
    args.extend(["-o", out.to_str().unwrap()]);
    let ran = spanprof(&args);
    assert_eq!(ran.status, 0, "{}", ran.stderr);
    let merged = Snapshot::read_json(&out).unwrap();
    assert_eq!(merged.spans.len(), whole.spans.len());
    for w in &whole.spans {
        let m = merged.span_in(&w.name, &w.target).unwrap();
        assert_eq!(
            (m.calls, m.created, m.instances, m.open),
            (w.calls, w.created, w.instances, w.open),
            "{}",
            w.name
        );
        for (what, ms, ws) in [
            ("entry_busy", &m.entry_busy, &w.entry_busy),
            ("entry_self", &m.entry_self, &w.entry_self),
            ("busy", &m.busy, &w.busy),
            ("self", &m.self_time, &w.self_time),
            ("wall", &m.wall, &w.wall),
        ] {
            // Histograms, counts, sums, extremes and percentiles: all identical.
            assert_eq!(ms, ws, "{} {what}", w.name);
        }
    }
    assert_eq!(merged.span("step").unwrap().calls, 300);
    assert_eq!(merged.span("inner").unwrap().entry_busy.max_ns, 100 + 299);
    // The call tree: the same paths, each node's counts and histograms identical.
    let (mt, wt) = (merged.tree.as_ref().unwrap(), whole.tree.as_ref().unwrap());
    assert_eq!(mt.nodes.len(), wt.nodes.len());
    assert_eq!(wt.nodes.len(), 2, "step and step;inner");
    for (i, w) in wt.nodes.iter().enumerate() {
        let path = wt.path(i);
        let j = (0..mt.nodes.len())
            .find(|&j| mt.path(j) == path)
            .unwrap_or_else(|| panic!("{path:?} not in the merged tree"));
        let m = &mt.nodes[j];
        assert_eq!(
            (m.calls, m.instances, m.wall_ns),
            (w.calls, w.instances, w.wall_ns),
            "{path:?}"
        );
        assert_eq!(m.busy, w.busy, "{path:?} busy");
        assert_eq!(m.self_time, w.self_time, "{path:?} self");
    }
    let inner = (0..wt.nodes.len())
        .find(|&i| wt.path(i) == ["step", "inner"])
        .unwrap();
    assert_eq!(wt.nodes[inner].calls, 600);
    assert_eq!(
        wt.nodes[inner].busy.total_ns,
        2 * (0..300).map(|i| 100 + i).sum::<u64>()
    );
    // The metrics of the events: every figure identical, and the sums those of the work.
    assert_eq!(whole.metrics.len(), 3, "{:?}", whole.metrics);
    assert_eq!(merged.metrics, whole.metrics);
    let metric = |name: &str| merged.metrics.iter().find(|m| m.name == name).unwrap();
    let MetricValue::Sum(items) = &metric("items").value else {
        panic!("items is a counter: {:?}", metric("items"));
    };
    assert_eq!(items.integer, (0..300).map(|i| 1 + i % 3).sum::<i64>());
    assert_eq!(metric("size_bytes").records, 300);
    assert_eq!(metric("size_bytes").span.as_deref(), Some("step"));
    let MetricValue::Histogram(loss) = &metric("loss").value else {
        panic!("loss is a histogram: {:?}", metric("loss"));
    };
    let floats = loss.floats.as_ref().expect("float values");
    assert_eq!(floats.count, 300);
    assert_eq!(floats.max_ns, 299 * 250_000_000);
    let origins: Vec<Option<&str>> = merged.sources.iter().map(|s| s.origin.as_deref()).collect();
    let want: Vec<Option<&str>> = parts.iter().map(|p| p.to_str()).collect();
    assert_eq!(origins, want);
    // The percentiles of the merge are not averages of the parts'.
    let ranks: Vec<Snapshot> = parts
        .iter()
        .map(|p| Snapshot::read_json(p).unwrap())
        .collect();
    let p99s: Vec<u64> = ranks
        .iter()
        .map(|r| r.span("step").unwrap().entry_busy.p99_ns)
        .collect();
    assert_eq!(
        merged.span("step").unwrap().entry_busy,
        Stat::merged(ranks.iter().map(|r| &r.span("step").unwrap().entry_busy))
    );
    assert_ne!(
        merged.span("step").unwrap().entry_busy.p99_ns,
        p99s.iter().sum::<u64>() / 3
    );
}

#[test]
fn merge_of_two_example_runs_reports_their_sum() {
    let dir = support::temp_dir("cli-merge-example");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("both.json");
    let o = out.to_str().unwrap();
    let ran = spanprof(&["merge", "cli-base.json", "cli-base2.json", "-o", o]);
    assert_eq!(ran.status, 0, "{}", ran.stderr);
    assert_eq!(
        ran.stderr,
        format!("spanprof: merged 2 profiles (12 span names) into {o}\n")
    );
    let (a, b, both) = (
        read("cli-base.json"),
        read("cli-base2.json"),
        Snapshot::read_json(&out).unwrap(),
    );
    for s in &both.spans {
        let (x, y) = (a.span(&s.name).unwrap(), b.span(&s.name).unwrap());
        assert_eq!(s.calls, x.calls + y.calls, "{}", s.name);
        assert_eq!(
            s.entry_busy.total_ns,
            x.entry_busy.total_ns + y.entry_busy.total_ns
        );
        assert_eq!(
            s.entry_busy.max_ns,
            x.entry_busy.max_ns.max(y.entry_busy.max_ns)
        );
    }
    let sources: Vec<(&str, u32)> = both
        .sources
        .iter()
        .map(|s| (s.origin.as_deref().unwrap(), s.run.pid))
        .collect();
    assert_eq!(
        sources,
        [("cli-base.json", a.run.pid), ("cli-base2.json", b.run.pid)]
    );
    let report = spanprof(&["report", o]);
    golden("merge-report.txt", &report.stdout);
}

/// Writes `contents` to a file named `name` in a fresh directory; returns its path.
fn bad_file(name: &str, contents: &[u8]) -> PathBuf {
    let dir = support::temp_dir("cli-bad");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

#[test]
fn bad_input_exits_2_with_one_line_naming_the_file_and_the_problem() {
    let good = std::fs::read_to_string(data("cli-base.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
    v["version"] = 99.into();
    let newer = bad_file("newer.json", v.to_string().as_bytes());
    let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
    v["spans"][0]["busy"]["histogram"] = "AAAA!!not-base64".into();
    let corrupt = bad_file("corrupt.json", v.to_string().as_bytes());
    let empty = bad_file("empty.json", b"");
    let text = bad_file("notes.txt", b"hello, not JSON\n");
    let missing = support::temp_dir("cli-missing").join("missing.json");
    let cases: [(&Path, &str); 5] = [
        (
            &newer,
            "schema version 99 is not one this spanprof reads (1 to 5)",
        ),
        (&corrupt, "spans[0].busy.histogram"),
        (&empty, "not a JSON object"),
        (&text, "not a JSON object"),
        (&missing, "No such file"),
    ];
    for (path, problem) in cases {
        let p = path.to_str().unwrap();
        for args in [
            vec!["report", p],
            vec!["top", p],
            vec!["compare", "cli-base.json", "--", p],
            vec![
                "merge",
                "cli-base.json",
                p,
                "-o",
                "/nonexistent/never-written.json",
            ],
        ] {
            let ran = spanprof(&args);
            assert_eq!(ran.status, 2, "{args:?}: {}", ran.stderr);
            assert!(ran.stdout.is_empty(), "{args:?}: {}", ran.stdout);
            assert_eq!(ran.stderr.lines().count(), 1, "{args:?}: {}", ran.stderr);
            assert!(
                ran.stderr.starts_with("spanprof: ")
                    && ran.stderr.contains(p)
                    && ran.stderr.contains(problem),
                "{args:?}: {}",
                ran.stderr
            );
        }
    }
    let filter = spanprof(&["report", "cli-base.json", "--filter", "top=0"]);
    assert_eq!(filter.status, 2);
    assert!(
        filter.stderr.contains("--filter \"top=0\""),
        "{}",
        filter.stderr
    );
    let unwritable = spanprof(&["merge", "cli-base.json", "-o", "/proc/spanprof/all.json"]);
    assert_eq!(unwritable.status, 2);
    assert!(unwritable.stderr.contains("/proc/spanprof/all.json"));
}

/// `merge -o` through a symbolic link writes the link's target and keeps the link; `-o` on a
/// fifo writes into the fifo (its reader gets the profile) instead of replacing it with a file.
#[cfg(unix)]
#[test]
fn merge_output_follows_a_symlink_and_writes_a_fifo_in_place() {
    use std::os::unix::fs::FileTypeExt;
    let dir = support::temp_dir("cli-merge-links");
    std::fs::create_dir_all(dir.join("real")).unwrap();
    let real = dir.join("real").join("all.json");
    std::fs::write(&real, "old").unwrap();
    let link = dir.join("link.json");
    std::os::unix::fs::symlink("real/all.json", &link).unwrap();
    let ran = spanprof(&["merge", "cli-base.json", "-o", link.to_str().unwrap()]);
    assert_eq!(ran.status, 0, "{}", ran.stderr);
    let kind = std::fs::symlink_metadata(&link).unwrap().file_type();
    assert!(kind.is_symlink(), "the link was replaced: {kind:?}");
    let merged = Snapshot::read_json(&real).expect("the link's target holds the profile");
    assert_eq!(merged.spans.len(), read("cli-base.json").spans.len());
    for (d, n) in [(&dir, 2), (&dir.join("real"), 1)] {
        assert_eq!(
            std::fs::read_dir(d).unwrap().count(),
            n,
            "no temporary left"
        );
    }

    let fifo = dir.join("profile.fifo");
    let made = Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        eprintln!("skipped the fifo: mkfifo failed");
        std::fs::remove_dir_all(&dir).unwrap();
        return;
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let reading = fifo.clone();
    // Never joined: were the fifo replaced, this reader would wait for a writer forever.
    std::thread::spawn(move || {
        let _ = tx.send(std::fs::read_to_string(reading));
    });
    let ran = spanprof(&["merge", "cli-base.json", "-o", fifo.to_str().unwrap()]);
    assert_eq!(ran.status, 0, "{}", ran.stderr);
    let kind = std::fs::symlink_metadata(&fifo).unwrap().file_type();
    assert!(kind.is_fifo(), "the fifo was replaced: {kind:?}");
    let text = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the fifo's reader finished")
        .unwrap();
    let through = Snapshot::from_json(&text, "fifo").unwrap();
    assert_eq!(through.spans.len(), merged.spans.len());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A policy's `[thresholds]` entry for the default metric sets its threshold (it was
/// dropped): `threshold = "80%"` with `p50 = "5%"` flags forward's +50 % p50, judged once.
#[test]
fn compare_policy_thresholds_entry_for_the_default_metric_counts() {
    let dir = support::temp_dir("cli-policy-primary");
    std::fs::create_dir_all(&dir).unwrap();
    let policy = dir.join("policy.toml");
    std::fs::write(
        &policy,
        "threshold = \"80%\"\nmetric = \"p50\"\n[thresholds]\np50 = \"5%\"\n",
    )
    .unwrap();
    let ran = spanprof(&[
        "compare",
        "--policy",
        policy.to_str().unwrap(),
        "cli-base.json",
        "--",
        "cli-slow.json",
    ]);
    assert_eq!(ran.status, 1, "{}{}", ran.stdout, ran.stderr);
    assert!(
        ran.stdout.starts_with(
            "spanprof compare: 1 baseline run vs 1 new run; metric p50, threshold 5 % and"
        ),
        "{}",
        ran.stdout
    );
    let result = ran
        .stdout
        .lines()
        .find(|l| l.starts_with("result:"))
        .unwrap();
    assert!(result.contains("REGRESSION in forward (p50 "), "{result}");
    let rows: Vec<&str> = ran
        .stdout
        .lines()
        .filter(|l| l.starts_with("forward ") && l.contains(" p50 "))
        .collect();
    assert_eq!(rows.len(), 1, "p50 judged once: {}", ran.stdout);
    assert!(rows[0].ends_with("regression"), "{}", rows[0]);
    // `--threshold` on the command line replaces the file's entry for the figure compared.
    let ran = spanprof(&[
        "compare",
        "--policy",
        policy.to_str().unwrap(),
        "--threshold",
        "80%",
        "cli-base.json",
        "--",
        "cli-slow.json",
    ]);
    assert_eq!(ran.status, 0, "{}{}", ran.stdout, ran.stderr);
    assert!(
        ran.stdout.contains("metric p50, threshold 80 %"),
        "{}",
        ran.stdout
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A span name with a newline, a carriage return, a tab, a `|` and a backtick: `compare`
/// prints it escaped (`\n`, `\r`, `\t`), each table row on one line, in text and Markdown.
#[test]
fn compare_prints_control_characters_of_names_escaped() {
    const WEIRD: &str = "for\nw\r\ta|r`d";
    let dir = support::temp_dir("cli-weird-names");
    std::fs::create_dir_all(&dir).unwrap();
    let rename = |name: &str| {
        let mut s = read(name);
        for span in s.spans.iter_mut().filter(|s| s.name == "forward") {
            span.name = WEIRD.to_string();
        }
        for node in s.tree.as_mut().unwrap().nodes.iter_mut() {
            if node.name == "forward" {
                node.name = WEIRD.to_string();
            }
        }
        let path = dir.join(name);
        s.write_json(&path).unwrap();
        (s, path)
    };
    let (base, base_path) = rename("cli-base.json");
    let (slow, slow_path) = rename("cli-slow.json");
    let c = spanprof::analysis::compare(
        &[base],
        &[slow],
        &spanprof::analysis::CompareOptions::default(),
    );
    assert!(c.timings.iter().any(|t| t.name == WEIRD));
    let (b, s) = (base_path.to_str().unwrap(), slow_path.to_str().unwrap());

    // The lines of the table under `heading`, up to the blank line after it.
    fn table<'a>(out: &'a str, heading: &str) -> Vec<&'a str> {
        out.lines()
            .skip_while(|l| !l.contains(heading))
            .skip(1)
            .skip_while(|l| l.is_empty())
            .take_while(|l| !l.is_empty())
            .collect()
    }
    let text = spanprof(&["compare", b, "--", s]);
    assert_eq!(text.status, 1, "{}{}", text.stdout, text.stderr);
    assert!(!text.stdout.contains(['\r', '\t']), "{:?}", text.stdout);
    let shown = "for\\nw\\r\\ta|r`d";
    let result = text
        .stdout
        .lines()
        .find(|l| l.starts_with("result:"))
        .unwrap();
    assert!(
        result.contains(&format!("REGRESSION in {shown} (typical "))
            && result.contains(&format!("train;epoch;train_step;{shown} (typical ")),
        "{result}"
    );
    for (heading, rows) in [
        ("timing per span name", &c.timings),
        ("timing per call path", &c.paths),
    ] {
        let lines = table(&text.stdout, heading);
        // The header, then one line per row.
        assert_eq!(lines.len(), 1 + rows.len(), "{heading}: {lines:#?}");
        assert!(lines[0].starts_with("name ") || lines[0].starts_with("path "));
        for line in &lines[1..] {
            assert!(
                [
                    "regression",
                    "unchanged",
                    "improvement",
                    "within noise",
                    "too few calls"
                ]
                .iter()
                .any(|v| line.ends_with(v)),
                "{heading}: {line:?}"
            );
        }
        assert!(
            lines
                .iter()
                .any(|l| l.contains(shown) && l.ends_with("regression")),
            "{heading}: {lines:#?}"
        );
    }

    let md = spanprof(&["compare", "--format", "markdown", b, "--", s]);
    assert_eq!(md.status, 1, "{}{}", md.stdout, md.stderr);
    assert!(!md.stdout.contains(['\r', '\t']), "{:?}", md.stdout);
    let result = md
        .stdout
        .lines()
        .find(|l| l.starts_with("**result:"))
        .unwrap();
    assert!(result.ends_with("**"), "{result}");
    assert!(
        result.contains("`for\\nw\\r\\ta|r'd` (typical "),
        "{result}"
    );
    // Cells split at `|` not escaped as `\|`.
    let cells = |line: &str| line.replace("\\|", "").matches('|').count() - 1;
    for (heading, rows) in [
        ("timing per span name", &c.timings),
        ("timing per call path", &c.paths),
    ] {
        let lines = table(&md.stdout, heading);
        assert_eq!(lines.len(), 2 + rows.len(), "{heading}: {lines:#?}");
        for line in &lines {
            assert!(line.starts_with('|') && line.ends_with('|'), "{line:?}");
            assert_eq!(cells(line), 9, "{heading}: {line:?}");
        }
        assert!(
            lines
                .iter()
                .any(|l| l.contains("for\\nw\\r\\ta\\|r'd` |") && l.ends_with("| regression |")),
            "{heading}: {lines:#?}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The result line of a text comparison, without `result: `.
fn result_line(stdout: &str) -> &str {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("result: "))
        .unwrap_or_else(|| panic!("no result line in\n{stdout}"))
}

/// `compare A B` is one run per side, as `compare A -- B`; three profiles without `--` are a
/// usage error that says to use `--`.
#[test]
fn compare_takes_one_profile_per_side_without_the_separator() {
    for (base, new, status) in [
        ("cli-base.json", "cli-slow.json", 1),
        ("cli-base.json", "cli-base.json", 0),
        ("cli-slow.json", "cli-base.json", 0),
    ] {
        let plain = spanprof(&["compare", base, new]);
        let dashed = spanprof(&["compare", base, "--", new]);
        assert_eq!(plain.status, status, "{}{}", plain.stdout, plain.stderr);
        assert_eq!(plain.status, dashed.status);
        assert_eq!(plain.stdout, dashed.stdout);
        assert!(plain.stdout.contains("1 baseline run vs 1 new run"));
        // Options may come after the profiles too.
        let md = spanprof(&["compare", base, new, "--format", "markdown"]);
        assert_eq!(md.status, status);
        assert_eq!(
            md.stdout,
            spanprof(&["compare", "--format", "markdown", base, "--", new]).stdout
        );
    }
    for args in [
        &[
            "compare",
            "cli-base.json",
            "cli-base2.json",
            "cli-slow.json",
        ][..],
        &["compare", "cli-base.json"][..],
        // `--` with no new run after it.
        &["compare", "cli-base.json", "--"][..],
    ] {
        let ran = spanprof(args);
        assert_eq!(ran.status, 2, "{args:?}: {}", ran.stdout);
        assert!(ran.stdout.is_empty(), "{}", ran.stdout);
        assert!(
            ran.stderr.contains("exactly two profiles")
                && ran.stderr.contains("at least one on each side of `--`"),
            "{}",
            ran.stderr
        );
    }
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
}

/// The published schema `docs/schema/<name>`, compiled.
fn schema(name: &str) -> jsonschema::Validator {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("docs/schema")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    jsonschema::validator_for(&json(&text))
        .unwrap_or_else(|e| panic!("{}: not a valid schema: {e}", path.display()))
}

/// Panics with every place where `value` breaks schema `name`.
fn assert_valid(name: &str, value: &serde_json::Value) {
    let errors: Vec<String> = schema(name)
        .iter_errors(value)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{name}:\n{}", errors.join("\n"));
}

/// The schemas reject what they should: a verdict, a decision or a field they do not know.
#[test]
fn the_json_schemas_reject_a_verdict_they_do_not_know() {
    let ran = spanprof(&[
        "compare",
        "--format",
        "json",
        "cli-base.json",
        "cli-slow.json",
    ]);
    let good = json(&ran.stdout);
    assert_valid("compare.schema.json", &good);
    let compare = schema("compare.schema.json");
    for (pointer, bad) in [
        ("/timings/0/verdict", serde_json::json!("bogus")),
        (
            "/timings/0/evidence/decided_by",
            serde_json::json!("a hunch"),
        ),
        ("/run_wide/verdict", serde_json::json!("too_few_calls")),
        ("/exit_status", serde_json::json!(3)),
        ("/version", serde_json::json!(1)),
    ] {
        let mut doc = good.clone();
        *doc.pointer_mut(pointer).unwrap() = bad;
        assert!(!compare.is_valid(&doc), "{pointer} accepted");
    }
    let mut doc = good.clone();
    doc["timings"][0]
        .as_object_mut()
        .unwrap()
        .remove("relative_change_pct");
    assert!(
        !compare.is_valid(&doc),
        "a timing without its change beside the run"
    );
    let ran = spanprof(&["top", "--format", "json", "cli-detailed.json"]);
    let mut doc = json(&ran.stdout);
    assert_valid("top.schema.json", &doc);
    let first = doc["findings"][0]["kind"].as_str().unwrap().to_string();
    assert_eq!(first, "self_time");
    doc["findings"][0]["figures"]
        .as_object_mut()
        .unwrap()
        .remove("share_pct");
    assert!(
        !schema("top.schema.json").is_valid(&doc),
        "a self_time without its share"
    );
}

/// `snapshot` on a machine at `speed` that moves long spans (over 100 µs per call) as `speed²`
/// and short ones as `speed`, with `forward` `extra` times slower besides (span names and
/// call-tree nodes alike).
fn on_machine(snapshot: &Snapshot, speed: f64, extra: f64) -> Snapshot {
    let scale = |stat: &mut Stat, name: &str| {
        let machine = if stat.p50_ns > 100_000 {
            speed * speed
        } else {
            speed
        };
        let f = machine * if name == "forward" { extra } else { 1.0 };
        let mut h = hdrhistogram::Histogram::<u64>::new(2).unwrap();
        for (value, count) in stat.histogram.iter() {
            h.record_n((value as f64 * f) as u64, count).unwrap();
        }
        stat.histogram = spanprof::profile::Buckets::from_histogram(&h);
        for ns in [
            &mut stat.total_ns,
            &mut stat.min_ns,
            &mut stat.max_ns,
            &mut stat.p50_ns,
            &mut stat.p90_ns,
            &mut stat.p99_ns,
            &mut stat.p999_ns,
        ] {
            *ns = (*ns as f64 * f) as u64;
        }
        stat.mean_ns = stat.total_ns as f64 / stat.count.max(1) as f64;
        stat.stddev_ns *= f;
    };
    let mut s = snapshot.clone();
    for span in &mut s.spans {
        scale(&mut span.entry_busy, &span.name.clone());
    }
    for node in &mut s.tree.as_mut().unwrap().nodes {
        scale(&mut node.busy, &node.name.clone());
    }
    s
}

/// A machine 5 % faster for short spans and 10 % for long ones hides most of a 20 % slowdown
/// of `forward` beside the run-wide shift: `compare` judges it beside `backward` and says so in
/// the result line, the table, the Markdown and the JSON (valid against its schema).
#[test]
fn compare_says_when_a_name_was_judged_beside_its_neighbour() {
    let dir = support::temp_dir("cli-neighbour");
    let base = Snapshot::from_json(
        &std::fs::read_to_string(data("cli-base.json")).unwrap(),
        "cli-base.json",
    )
    .unwrap();
    let mut args: Vec<String> = vec!["compare".into()];
    for (side, speed, extra) in [("base", 1.0, 1.0), ("new", 0.95, 1.2)] {
        if side == "new" {
            args.push("--".into());
        }
        for (i, jitter) in [0.98, 1.0, 1.02].into_iter().enumerate() {
            let path = dir.join(format!("{side}{i}.json"));
            on_machine(&base, speed * jitter, extra)
                .write_json(&path)
                .unwrap();
            args.push(path.to_str().unwrap().to_string());
        }
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let text = spanprof(&args);
    assert_eq!(text.status, 1, "{}{}", text.stdout, text.stderr);
    // The change in % written between `before` and `after`, in `text`.
    let pct = |text: &str, before: &str, after: &str| -> f64 {
        let from = text
            .find(before)
            .unwrap_or_else(|| panic!("{before} in {text}"))
            + before.len();
        let to = from
            + text[from..]
                .find(after)
                .unwrap_or_else(|| panic!("{after} in {text}"));
        text[from..to].parse().unwrap()
    };
    let result = result_line(&text.stdout);
    let near_20 = |x: f64| assert!((x - 20.0).abs() < 0.5, "{x} in {}", text.stdout);
    near_20(pct(result, "forward (typical +", " % beside backward)"));
    let row = text
        .stdout
        .lines()
        .find(|l| l.starts_with("forward "))
        .unwrap();
    near_20(pct(row, "regression (+", " % beside backward)"));
    assert!(text
        .stdout
        .contains("\"beside X\" = judged beside span name X"));
    let md = spanprof(&[&args[..1], &["--format", "markdown"], &args[1..]].concat());
    near_20(pct(&md.stdout, "regression (+", " % beside `backward`)"));
    let ran = spanprof(&[&args[..1], &["--format", "json"], &args[1..]].concat());
    assert_eq!(ran.status, 1);
    let j = json(&ran.stdout);
    assert_valid("compare.schema.json", &j);
    let forward = j["timings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "forward")
        .unwrap();
    let e = &forward["evidence"];
    assert_eq!(e["decided_by"], "beside_neighbour");
    assert_eq!(e["neighbour"]["name"], "backward");
    assert!((e["neighbour"]["change_pct"].as_f64().unwrap() - 20.0).abs() < 1.0);
    assert!((e["neighbour"]["own_change_pct"].as_f64().unwrap() + 5.0).abs() < 1.0);
    assert_eq!(
        e["neighbour"]["new_relative_ns"].as_array().unwrap().len(),
        3
    );
    // Only where the neighbour decided.
    let others = j["timings"]
        .as_array()
        .unwrap()
        .iter()
        .chain(j["paths"].as_array().unwrap());
    for t in others.filter(|t| t["evidence"]["decided_by"] != "beside_neighbour") {
        assert!(t["evidence"].get("neighbour").is_none(), "{t}");
    }
}

/// `compare --format json`: every name and path judged with its evidence, and the verdicts
/// and exit status of the text output on the same inputs.
#[test]
fn compare_json_has_the_documented_fields_and_agrees_with_the_text() {
    let cases: [&[&str]; 4] = [
        &["cli-base.json", "cli-slow.json"],
        &["cli-base.json", "cli-base.json"],
        &["cli-slow.json", "cli-base.json"],
        &[
            "cli-base.json",
            "cli-base2.json",
            "--",
            "cli-slow.json",
            "cli-slow2.json",
        ],
    ];
    for profiles in cases {
        let text = spanprof(&[&["compare"][..], profiles].concat());
        let ran = spanprof(&[&["compare", "--format", "json"][..], profiles].concat());
        assert_eq!(ran.status, text.status, "{profiles:?}: {}", ran.stderr);
        let j = json(&ran.stdout);
        assert_valid("compare.schema.json", &j);
        assert_eq!(j["version"], 2);
        assert_eq!(j["command"], "compare");
        assert_eq!(j["exit_status"], ran.status);
        assert_eq!(j["regressed"], ran.status == 1);
        assert_eq!(j["result"], result_line(&text.stdout));
        let several = profiles.contains(&"--");
        assert_eq!(j["low_confidence"], !several);
        assert_eq!(j["base_runs"], if several { 2 } else { 1 });
        for key in ["metric", "threshold_pct", "min_calls", "min_shift_ns"] {
            assert!(!j["options"][key].is_null(), "options.{key}");
        }
        assert!(j["run_wide"]["ratio"].is_f64());
        for key in [
            "counts",
            "budgets",
            "only_in_base",
            "only_in_new",
            "paths_only_in_base",
            "paths_only_in_new",
        ] {
            assert!(j[key].is_array(), "{key}");
        }
        let mut regressions = 0;
        for (list, section) in [
            ("timings", "timing per span name"),
            ("paths", "timing per call path"),
        ] {
            let rows = j[list].as_array().unwrap();
            assert!(!rows.is_empty(), "{list}");
            // The text table of this section, row by row (name first, verdict last).
            let table: Vec<&str> = text
                .stdout
                .split_once(section)
                .unwrap()
                .1
                .lines()
                .skip(2)
                .take_while(|l| !l.is_empty())
                .collect();
            assert_eq!(table.len(), rows.len(), "{list}");
            for (row, line) in rows.iter().zip(&table) {
                for key in [
                    "name",
                    "target",
                    "metric",
                    "base_ns",
                    "new_ns",
                    "change_pct",
                    "threshold_pct",
                    "verdict",
                ] {
                    assert!(row.get(key).is_some(), "{list}: {key} in {row}");
                }
                let e = &row["evidence"];
                for key in [
                    "decided_by",
                    "shift_ns",
                    "min_shift_ns",
                    "min_calls",
                    "base_min_calls",
                    "new_min_calls",
                    "base_spread_ns",
                    "new_spread_ns",
                    "base_values_ns",
                    "new_values_ns",
                ] {
                    assert!(e.get(key).is_some(), "{list}: evidence.{key} in {row}");
                }
                let name = row["name"].as_str().unwrap();
                let verdict = row["verdict"].as_str().unwrap();
                assert!(line.starts_with(&format!("{name} ")), "{line} / {name}");
                assert!(
                    line.contains(&format!("  {}", verdict.replace('_', " "))),
                    "{line} / {verdict}"
                );
                let decided = e["decided_by"].as_str().unwrap();
                let expected: &[&str] = match verdict {
                    "regression" | "improvement" => {
                        if several {
                            &["beyond_threshold_and_noise"]
                        } else {
                            &["beyond_threshold"]
                        }
                    }
                    "unchanged" => &["within_threshold", "below_min_shift"],
                    "within_noise" => &["within_noise"],
                    "too_few_calls" => &["too_few_calls"],
                    other => panic!("verdict {other}"),
                };
                assert!(expected.contains(&decided), "{verdict}: {decided}");
                if verdict == "regression" {
                    regressions += 1;
                    assert!(
                        j["result"].as_str().unwrap().contains(name),
                        "{name} not in {}",
                        j["result"]
                    );
                }
                assert_eq!(e["base_spread_ns"].is_null(), !several);
            }
        }
        assert_eq!(regressions > 0, ran.status == 1, "{profiles:?}");
    }
}

/// `top --format json`: the findings of the text output, each with its figures and where in
/// the call tree; `report --format json` is the profile.
#[test]
fn top_and_report_json_have_the_documented_fields() {
    let detailed = read("cli-detailed.json");
    let text = spanprof(&["top", "cli-detailed.json"]);
    let ran = spanprof(&["top", "--format", "json", "cli-detailed.json"]);
    assert_eq!(ran.status, 0, "{}", ran.stderr);
    let j = json(&ran.stdout);
    assert_eq!(j["version"], 1);
    assert_eq!(j["command"], "top");
    assert_valid("top.schema.json", &j);
    assert_eq!(j["span_names"], detailed.spans.len());
    assert_eq!(j["run_duration_ns"], detailed.run.duration_ns);
    let findings = j["findings"].as_array().unwrap();
    let lines: Vec<&str> = text
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("- "))
        .collect();
    assert_eq!(findings.len(), lines.len());
    let tree = detailed.tree.as_ref().unwrap();
    for (f, line) in findings.iter().zip(&lines) {
        for key in ["kind", "name", "target", "paths", "figures", "text"] {
            assert!(f.get(key).is_some(), "{key} in {f}");
        }
        assert_eq!(f["text"], *line);
        let paths = f["paths"].as_array().unwrap();
        match f["kind"].as_str().unwrap() {
            "hot_path" => {
                let (i, _) = tree
                    .nodes
                    .iter()
                    .enumerate()
                    .max_by_key(|(_, n)| n.self_time.total_ns)
                    .unwrap();
                assert_eq!(paths.len(), 1);
                assert_eq!(paths[0], tree.path(i).join(";"));
                assert!(f["figures"]["share_pct"].is_f64());
            }
            "self_time" => {
                let name = f["name"].as_str().unwrap();
                let span = detailed.span(name).unwrap();
                assert_eq!(f["figures"]["self_ns"], span.entry_self.total_ns);
                assert!(!paths.is_empty());
                for p in paths {
                    assert!(p.as_str().unwrap().ends_with(name), "{p}");
                }
            }
            _ => {}
        }
    }
    let report = spanprof(&["report", "--format", "json", "cli-detailed.json"]);
    assert_eq!(report.status, 0);
    let back = Snapshot::from_json(&report.stdout, "report --format json").unwrap();
    assert_eq!(back.spans.len(), detailed.spans.len());
}

/// Every `spanprof …` line of the ```sh blocks of docs/agents.md runs on test profiles (the
/// file names there replaced by test data), with an exit status the line's comment allows;
/// `compare --format json` says the exit status it returned.
#[test]
fn every_command_of_the_agent_guide_runs() {
    let doc = include_str!("../../docs/agents.md");
    let files = [
        ("prof/base/profile.json", "cli-base.json"),
        ("prof/base2/profile.json", "cli-base2.json"),
        ("prof/new/profile.json", "cli-slow.json"),
        ("prof/new2/profile.json", "cli-slow2.json"),
    ];
    let mut ran_lines = 0;
    let mut in_sh = false;
    for line in doc.lines() {
        if line.starts_with("```") {
            in_sh = line == "```sh";
            continue;
        }
        if !in_sh || !line.starts_with("spanprof ") {
            continue;
        }
        let (command, comment) = line.split_once('#').unwrap_or((line, ""));
        let allowed: Vec<i32> = comment
            .trim()
            .strip_prefix("exit status ")
            .unwrap_or_else(|| panic!("{line}: say its exit status (# exit status 0 or 1)"))
            .split(" or ")
            .map(|s| s.trim().parse().unwrap())
            .collect();
        let args: Vec<&str> = command
            .split_whitespace()
            .skip(1)
            .map(|w| files.iter().find(|(doc, _)| *doc == w).map_or(w, |f| f.1))
            .collect();
        for a in &args {
            assert!(
                !a.ends_with(".json") || data(a).exists(),
                "{line}: no test profile for {a}"
            );
        }
        let ran = spanprof(&args);
        assert!(
            allowed.contains(&ran.status),
            "{line}: exit status {} ({})",
            ran.status,
            ran.stderr
        );
        assert!(!ran.stdout.is_empty(), "{line}");
        if args.contains(&"json") {
            let j = json(&ran.stdout);
            if args[0] == "compare" {
                assert_eq!(j["exit_status"], ran.status, "{line}");
            }
        }
        ran_lines += 1;
    }
    assert!(
        ran_lines >= 7,
        "{ran_lines} spanprof commands in docs/agents.md"
    );
}

/// The golden GPU profile (`forward`, `backward`, `grad` timed on the GPU; `step` and
/// `load_batch` not) with the GPU time of the names in `slower` × `factor` (per name and per
/// call path), the names in `untimed` without GPU time, and `load_batch` given GPU time when
/// `chosen_later`; written into `dir` as `file`.
fn gpu_variant(
    dir: &Path,
    file: &str,
    slower: &[&str],
    factor: f64,
    untimed: &[&str],
    chosen_later: bool,
) -> PathBuf {
    let mut s = read("gpu-profile.json");
    let forward_gpu = s.span("forward").unwrap().gpu_time.clone();
    for span in &mut s.spans {
        let name = span.name.as_str();
        if untimed.contains(&name) {
            span.gpu_time = None;
        } else if chosen_later && name == "load_batch" {
            span.gpu_time = forward_gpu.clone();
        } else if let Some(g) = span.gpu_time.as_mut().filter(|_| slower.contains(&name)) {
            g.time.total_ns = (g.time.total_ns as f64 * factor).round() as u64;
            g.time.mean_ns *= factor;
        }
    }
    for node in &mut s.tree.as_mut().unwrap().nodes {
        let name = node.name.as_str();
        if untimed.contains(&name) {
            (node.gpu_calls, node.gpu_ns) = (0, 0);
        } else if slower.contains(&name) {
            node.gpu_ns = (node.gpu_ns as f64 * factor).round() as u64;
        }
    }
    let path = dir.join(file);
    s.write_json(&path).unwrap();
    path
}

/// `compare --metric gpu`: one name's GPU time 30 % longer is a regression of that name (and
/// its path), whatever the names without GPU time; those are not judged on it (no 0 ns change,
/// and `load_batch`, timed only in the new run, no regression from 0 ns). With three names
/// timed the run-wide shift is estimated (and a slowdown of all three is that shift, not a
/// regression of each); with two it is not, and each name is judged on its own change.
#[test]
fn compare_metric_gpu_flags_a_gpu_regression_of_one_name() {
    use spanprof::analysis::{Evidence, Verdict};
    let dir = support::temp_dir("cli-gpu-compare");
    std::fs::create_dir_all(&dir).unwrap();
    let base = gpu_variant(&dir, "base.json", &[], 1.0, &[], false);
    let slow = gpu_variant(&dir, "slow.json", &["forward"], 1.3, &[], true);
    let (b, s) = (base.to_str().unwrap(), slow.to_str().unwrap());
    let text = spanprof(&["compare", "--metric", "gpu", b, "--", s]);
    assert_eq!(text.status, 1, "{}{}", text.stdout, text.stderr);
    assert_eq!(
        result_line(&text.stdout),
        "REGRESSION in forward (gpu +30.0 %), step;forward (gpu +30.0 %)",
        "{}",
        text.stdout
    );
    let ran = spanprof(&["compare", "--metric", "gpu", "--format", "json", b, "--", s]);
    let j = json(&ran.stdout);
    assert_valid("compare.schema.json", &j);
    let timings = j["timings"].as_array().unwrap();
    let judged: Vec<(&str, &str)> = timings
        .iter()
        .map(|t| (t["name"].as_str().unwrap(), t["verdict"].as_str().unwrap()))
        .collect();
    // Only the names timed on the GPU on both sides; load_batch (new side only) and step
    // (neither) are not judged on GPU time.
    assert_eq!(
        judged,
        [
            ("forward", "regression"),
            ("backward", "unchanged"),
            ("grad", "unchanged")
        ],
        "{}",
        ran.stdout
    );
    let forward = &timings[0];
    assert_eq!(forward["metric"], "gpu");
    assert_eq!(forward["base_ns"], 13_000_000.0);
    assert_eq!(forward["new_ns"], 16_900_000.0);
    assert_eq!(j["run_wide"]["names"], 3);
    assert_eq!(j["run_wide"]["ratio"], 1.0, "the median name did not move");
    let paths: Vec<&str> = j["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        ["step;forward", "step;backward", "step;backward;grad"]
    );

    let mut options = spanprof::analysis::CompareOptions::default();
    options.metric = spanprof::analysis::Measure::Gpu;
    let compare = |base: &Path, new: &Path| {
        spanprof::analysis::compare(
            &[Snapshot::read_json(base).unwrap()],
            &[Snapshot::read_json(new).unwrap()],
            &options,
        )
    };
    // Each name's verdict, by name.
    let verdicts = |c: &spanprof::analysis::Comparison| -> Vec<(String, Verdict)> {
        let mut v: Vec<_> = c
            .timings
            .iter()
            .map(|t| (t.name.clone(), t.verdict))
            .collect();
        v.sort();
        v
    };
    // Every timed name 70 % slower: the run-wide shift (beyond its threshold, 60 %), not
    // judged with one run a side; no name regressed beside it.
    let all = ["forward", "backward", "grad"];
    let everything = gpu_variant(&dir, "all.json", &all, 1.7, &[], false);
    let c = compare(&base, &everything);
    assert!((c.run_wide.ratio - 1.7).abs() < 1e-9, "{:?}", c.run_wide);
    assert_eq!(c.run_wide.decided_by, Evidence::OneRunPerSide);
    assert!(c.timings.iter().all(|t| t.verdict == Verdict::Unchanged));
    assert!(c.timings.iter().all(|t| (t.ratio - 1.7).abs() < 1e-9));
    // Two names timed (grad not, on either side): fewer than `RunWide::MIN_NAMES`, no shift
    // estimated; each name judged on its own change.
    let two_base = gpu_variant(&dir, "two-base.json", &[], 1.0, &["grad"], false);
    let two_all = gpu_variant(&dir, "two-all.json", &all, 1.3, &["grad"], false);
    let c = compare(&two_base, &two_all);
    assert_eq!(
        (c.run_wide.names, c.run_wide.ratio, c.run_wide.decided_by),
        (2, 1.0, Evidence::TooFewNames)
    );
    assert_eq!(
        verdicts(&c),
        [
            ("backward".to_string(), Verdict::Regression),
            ("forward".to_string(), Verdict::Regression)
        ]
    );
    // One name timed: the same; the names not timed are not in the GPU comparison at all.
    let one_base = gpu_variant(
        &dir,
        "one-base.json",
        &[],
        1.0,
        &["grad", "backward"],
        false,
    );
    let one_same = gpu_variant(
        &dir,
        "one-same.json",
        &[],
        1.0,
        &["grad", "backward"],
        false,
    );
    let c = compare(&one_base, &one_same);
    assert_eq!(c.run_wide.decided_by, Evidence::TooFewNames);
    assert_eq!(verdicts(&c), [("forward".to_string(), Verdict::Unchanged)]);
    assert!(!c.regressed());
    std::fs::remove_dir_all(&dir).unwrap();
}

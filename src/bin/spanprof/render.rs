//! Findings in words: a comparison and the bottlenecks, as plain text or Markdown.

use std::fmt::Write as _;

use spanprof::analysis::{
    CompareOptions, Comparison, Evidence, Finding, RunWide, Side, TimingChange, Verdict,
};
use spanprof::output::{format_bytes, format_count, format_duration};
use spanprof::profile::Snapshot;

use crate::TextFormat;

fn dur(ns: f64) -> String {
    format_duration(ns.max(0.0).round() as u64)
}

/// A side's spread, or `—` for one run (no spread to measure).
fn spread(side: &Side) -> String {
    if side.values.len() < 2 {
        "—".to_string()
    } else {
        dur(side.spread)
    }
}

fn change(ratio: f64) -> String {
    if ratio.is_finite() {
        format!("{:+.1} %", (ratio - 1.0) * 100.0)
    } else {
        "new".to_string()
    }
}

/// A table as aligned text or as Markdown.
struct Table {
    header: Vec<&'static str>,
    /// Columns aligned right (numbers).
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    fn new(header: &[(&'static str, bool)]) -> Self {
        Self {
            header: header.iter().map(|h| h.0).collect(),
            right: header.iter().map(|h| h.1).collect(),
            rows: Vec::new(),
        }
    }

    fn write(&self, f: &mut String, format: TextFormat) {
        match format {
            TextFormat::Markdown => {
                let _ = writeln!(f, "| {} |", self.header.join(" | "));
                let aligns: Vec<&str> = self
                    .right
                    .iter()
                    .map(|&r| if r { "--:" } else { "---" })
                    .collect();
                let _ = writeln!(f, "|{}|", aligns.join("|"));
                for row in &self.rows {
                    let cells: Vec<String> = row.iter().map(|c| c.replace('|', "\\|")).collect();
                    let _ = writeln!(f, "| {} |", cells.join(" | "));
                }
            }
            TextFormat::Text => {
                let widths: Vec<usize> = (0..self.header.len())
                    .map(|i| {
                        self.rows
                            .iter()
                            .map(|r| r[i].chars().count())
                            .chain([self.header[i].chars().count()])
                            .max()
                            .unwrap_or(0)
                    })
                    .collect();
                let line = |cells: Vec<&str>| {
                    let parts: Vec<String> = cells
                        .iter()
                        .enumerate()
                        .map(|(i, c)| {
                            let pad = widths[i].saturating_sub(c.chars().count());
                            if self.right[i] {
                                format!("{}{c}", " ".repeat(pad))
                            } else {
                                format!("{c}{}", " ".repeat(pad))
                            }
                        })
                        .collect();
                    parts.join("  ").trim_end().to_string()
                };
                let _ = writeln!(f, "{}", line(self.header.clone()));
                for row in &self.rows {
                    let _ = writeln!(f, "{}", line(row.iter().map(String::as_str).collect()));
                }
            }
        }
    }
}

fn heading(f: &mut String, format: TextFormat, text: &str) {
    match format {
        TextFormat::Markdown => {
            let _ = writeln!(f, "\n#### {text}\n");
        }
        TextFormat::Text => {
            let _ = writeln!(f, "\n{text}:");
        }
    }
}

/// A span name, call path or host as printed: its control characters (and the Unicode line
/// and paragraph separators) as visible escapes (`\n`, `\r`, `\t`, `\u{1b}`), so a name
/// stays on its line and in its table row; Markdown puts it in a code span, its backticks as
/// `'` (a table escapes its `|`).
fn code(format: TextFormat, name: &str) -> String {
    let name = visible(name);
    match format {
        TextFormat::Markdown => format!("`{}`", name.replace('`', "'")),
        TextFormat::Text => name,
    }
}

/// `text` with each control character (and U+2028, U+2029) as its escape, as the library's
/// reports print names.
fn visible(text: &str) -> String {
    spanprof::output::escape_controls(text).into_owned()
}

fn plural(n: usize, word: &str) -> String {
    format!("{n} {word}{}", if n == 1 { "" } else { "s" })
}

/// The comparison: a summary line, timings, counts that changed, budgets, names on one side.
pub(crate) fn comparison(c: &Comparison, options: &CompareOptions, format: TextFormat) -> String {
    let mut f = String::new();
    let title = format!(
        "spanprof compare: {} vs {}; metric {}, threshold {} % and {}, at least {} calls per run",
        plural(c.base_runs, "baseline run"),
        plural(c.new_runs, "new run"),
        options.metric,
        options.threshold_for(options.metric),
        dur(options.min_shift_ns),
        options.min_calls
    );
    match format {
        TextFormat::Markdown => {
            let _ = writeln!(f, "### {title}\n");
        }
        TextFormat::Text => {
            let _ = writeln!(f, "{title}");
        }
    }
    if c.low_confidence {
        let _ = writeln!(
            f,
            "low confidence: one run on a side, so no spread between runs to judge a change against \
             (give 2 or more runs per side)"
        );
    }
    let _ = writeln!(f, "{}", run_wide_line(&c.run_wide));
    let regressions = regressions(c, format);
    let verdict = if regressions.is_empty() {
        "result: no regression".to_string()
    } else {
        format!("result: REGRESSION in {}", regressions.join(", "))
    };
    let _ = match format {
        TextFormat::Markdown => writeln!(f, "\n**{verdict}**"),
        TextFormat::Text => writeln!(f, "{verdict}"),
    };

    let neighbours = if c
        .timings
        .iter()
        .chain(&c.paths)
        .any(|t| t.neighbour.is_some())
    {
        "; \"beside X\" = judged beside span name X, the nearest in time off its call path"
    } else {
        ""
    };
    heading(
        &mut f,
        format,
        &format!(
            "timing per span name (median of runs; beside run = the change with the run-wide \
             shift taken out, which is judged; spread = max - min of the runs so divided\
             {neighbours})"
        ),
    );
    timing_table(&mut f, format, "name", &c.timings);
    if !c.paths.is_empty() {
        heading(
            &mut f,
            format,
            "timing per call path (root;...;leaf; busy and self time per entry)",
        );
        timing_table(&mut f, format, "path", &c.paths);
    }

    if !c.counts.is_empty() {
        heading(&mut f, format, "counts that changed (exact, no noise rule)");
        let mut t = Table::new(&[
            ("name", false),
            ("count", false),
            ("base", true),
            ("new", true),
            ("change", true),
            ("verdict", false),
        ]);
        for x in &c.counts {
            t.rows.push(vec![
                code(format, &x.name),
                x.count.name().to_string(),
                format!("{}", x.base),
                format!("{}", x.new),
                change(if x.base == 0.0 {
                    f64::INFINITY
                } else {
                    x.new / x.base
                }),
                x.verdict.name().to_string(),
            ]);
        }
        t.write(&mut f, format);
    }
    if !c.budgets.is_empty() {
        heading(&mut f, format, "budgets (median of the new runs)");
        let mut t = Table::new(&[
            ("name", false),
            ("metric", false),
            ("value", true),
            ("budget", true),
            ("", false),
        ]);
        for b in &c.budgets {
            t.rows.push(vec![
                code(format, &b.name),
                b.metric.to_string(),
                dur(b.value_ns),
                dur(b.max_ns),
                if b.within { "ok" } else { "OVER" }.to_string(),
            ]);
        }
        t.write(&mut f, format);
    }
    for (what, names) in [
        ("only in the baseline", &c.only_in_base),
        ("only in the new runs", &c.only_in_new),
    ] {
        if !names.is_empty() {
            let list: Vec<String> = names.iter().map(|(n, _)| code(format, n)).collect();
            let _ = writeln!(f, "\n{what}: {}", list.join(", "));
        }
    }
    for (what, paths) in [
        ("paths only in the baseline", &c.paths_only_in_base),
        ("paths only in the new runs", &c.paths_only_in_new),
    ] {
        if !paths.is_empty() {
            let list: Vec<String> = paths.iter().map(|p| code(format, p)).collect();
            let _ = writeln!(f, "\n{what}: {}", list.join(", "));
        }
    }
    f
}

/// The run-wide shift in words: how far every span name moved together, and its verdict.
pub(crate) fn run_wide_line(r: &RunWide) -> String {
    let factors = |fs: &[f64]| {
        let (lo, hi) = fs
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
                (lo.min(x), hi.max(x))
            });
        if fs.len() == 1 || lo == hi {
            format!("×{lo:.2}")
        } else {
            format!("×{lo:.2}–{hi:.2}")
        }
    };
    let judged = match r.decided_by {
        Evidence::TooFewNames => {
            return format!(
                "run-wide shift: not estimated ({} of the {} span names needed have enough calls); \
                 each name is judged on its own change",
                r.names,
                RunWide::MIN_NAMES
            )
        }
        Evidence::WithinThreshold => format!("within the threshold ({} %)", r.threshold_pct),
        Evidence::OneRunPerSide => "NOT JUDGED: one run per side cannot tell a busier machine \
             from a change that slows everything (give 2 or more runs per side)"
            .to_string(),
        Evidence::WithinSpread => "within noise: the runs of the two sides overlap".to_string(),
        _ => format!(
            "{}: every run of one side beyond every run of the other",
            r.verdict.name().to_uppercase()
        ),
    };
    format!(
        "run-wide shift: {} (the median of {} span names; runs: base {}, new {}): {judged}; \
         each name is judged beside it",
        change(r.ratio),
        r.names,
        factors(&r.base_factors),
        factors(&r.new_factors),
    )
}

/// One regression in the result line: what regressed (a span name or a call path, and its
/// target) and how.
struct Regressed<'a> {
    /// A call path (`root;…;leaf`) rather than a span name.
    path: bool,
    text: &'a str,
    target: &'a str,
    how: String,
}

/// The regressions of `c` for the result line, each span name or call path once with every
/// way it regressed (`forward (p50 +18.4 %, calls 256 → 300)`).
///
/// A root span name is also the call path of its name alone: where the name regressed, its
/// path's regression (the same words) is left out; the path's row stays in its table. A name
/// (or path) that regressed in two targets is told apart by its target (`step in a::b`).
pub(crate) fn regressions(c: &Comparison, format: TextFormat) -> Vec<String> {
    let timing = |t: &TimingChange| match &t.neighbour {
        Some(n) => format!(
            "{} {} beside {}",
            t.metric,
            change(n.ratio),
            code(format, &n.name)
        ),
        None => format!("{} {}", t.metric, change(t.relative_ratio)),
    };
    let mut all: Vec<Regressed> = Vec::new();
    if c.run_wide.verdict == Verdict::Regression {
        all.push(Regressed {
            path: false,
            text: "(run-wide)",
            target: "",
            how: format!("every span name {}", change(c.run_wide.ratio)),
        });
    }
    for (path, rows) in [(false, &c.timings), (true, &c.paths)] {
        for t in rows.iter().filter(|t| t.verdict == Verdict::Regression) {
            all.push(Regressed {
                path,
                text: &t.name,
                target: &t.target,
                how: timing(t),
            });
        }
    }
    for x in c.counts.iter().filter(|x| x.verdict == Verdict::Regression) {
        all.push(Regressed {
            path: false,
            text: &x.name,
            target: &x.target,
            how: format!("{} {} → {}", x.count.name(), x.base, x.new),
        });
    }
    for b in c.budgets.iter().filter(|b| !b.within) {
        all.push(Regressed {
            path: false,
            text: &b.name,
            target: &b.target,
            how: format!(
                "{} {} over budget {}",
                b.metric,
                dur(b.value_ns),
                dur(b.max_ns)
            ),
        });
    }
    // A path that is a regressed name's own root path says nothing more.
    let named = |text: &str, target: &str| {
        all.iter()
            .any(|r| !r.path && r.text == text && r.target == target)
    };
    let shown: Vec<&Regressed> = all
        .iter()
        .filter(|r| !(r.path && named(r.text, r.target)))
        .collect();
    let mut lines: Vec<(String, Vec<String>)> = Vec::new();
    for r in &shown {
        let twins = shown
            .iter()
            .any(|o| o.text == r.text && o.target != r.target);
        let label = if twins {
            format!("{} in {}", code(format, r.text), code(format, r.target))
        } else {
            code(format, r.text)
        };
        match lines.iter_mut().find(|(l, _)| *l == label) {
            Some((_, hows)) => {
                if !hows.contains(&r.how) {
                    hows.push(r.how.clone());
                }
            }
            None => lines.push((label, vec![r.how.clone()])),
        }
    }
    lines
        .into_iter()
        .map(|(label, hows)| format!("{label} ({})", hows.join(", ")))
        .collect()
}

/// One row per timing change: `first` names the first column (a span name or a call path).
fn timing_table(f: &mut String, format: TextFormat, first: &'static str, rows: &[TimingChange]) {
    let mut t = Table::new(&[
        (first, false),
        ("metric", false),
        ("base", true),
        ("new", true),
        ("change", true),
        ("beside run", true),
        ("base spread", true),
        ("new spread", true),
        ("verdict", false),
    ]);
    for x in rows {
        t.rows.push(vec![
            code(format, &x.name),
            x.metric.to_string(),
            dur(x.base.median),
            dur(x.new.median),
            change(x.ratio),
            change(x.relative_ratio),
            spread(&x.base_relative),
            spread(&x.new_relative),
            verdict_cell(x, format),
        ]);
    }
    t.write(f, format);
}

/// A timing's verdict, with the neighbour that decided it and the back-off's sampling:
/// `regression (+21.3 % beside backward)`.
fn verdict_cell(x: &TimingChange, format: TextFormat) -> String {
    let mut notes = Vec::new();
    if let Some(n) = &x.neighbour {
        notes.push(format!(
            "{} beside {}",
            change(n.ratio),
            code(format, &n.name)
        ));
    }
    if let Some(n) = x.base.sampled_every.max(x.new.sampled_every) {
        notes.push(format!("sampled 1/{n}"));
    }
    if notes.is_empty() {
        x.verdict.name().to_string()
    } else {
        format!("{} ({})", x.verdict.name(), notes.join(", "))
    }
}

/// The bottlenecks, one line each with its figures.
pub(crate) fn findings(snapshot: &Snapshot, findings: &[Finding], format: TextFormat) -> String {
    let mut f = String::new();
    let title = format!(
        "spanprof top: {} span names, run {} on {}",
        snapshot.spans.len(),
        format_duration(snapshot.run.duration_ns),
        visible(&snapshot.run.host)
    );
    let (bullet, title_line) = match format {
        TextFormat::Markdown => ("- ", format!("### {title}\n")),
        TextFormat::Text => ("- ", title),
    };
    let _ = writeln!(f, "{title_line}");
    if findings.is_empty() {
        let _ = writeln!(f, "nothing stands out");
        return f;
    }
    for finding in findings {
        if let Some(line) = finding_line(finding, format) {
            let _ = writeln!(f, "{bullet}{line}");
        }
    }
    f
}

/// One finding in words (`None` for a kind this version does not print).
pub(crate) fn finding_line(finding: &Finding, format: TextFormat) -> Option<String> {
    let line = match finding {
        Finding::SelfTime {
            name,
            self_ns,
            share_pct,
            ..
        } => format!(
            "self time: {} holds {share_pct:.1} % of the time inside spans ({} self)",
            code(format, name),
            format_duration(*self_ns)
        ),
        Finding::HotPath {
            path,
            instances,
            self_ns,
            share_pct,
            ..
        } => format!(
            "hot path: {} holds {share_pct:.1} % of the self time in the call tree ({} self over {} instances)",
            code(format, path),
            format_duration(*self_ns),
            format_count(*instances)
        ),
        Finding::HeavyTail {
            name,
            calls,
            p50_ns,
            p99_ns,
            ratio,
            ..
        } => format!(
            "heavy tail: {} p99 {} is {ratio:.0}× its p50 {} ({} calls)",
            code(format, name),
            format_duration(*p99_ns),
            format_duration(*p50_ns),
            format_count(*calls)
        ),
        Finding::Instrumentation {
            name,
            calls,
            spans,
            entries_per_span,
            mean_ns,
            cost_per_span_ns,
            cost_share_pct,
            sampled_every,
            ..
        } => {
            let sampled = sampled_every.map_or_else(String::new, |n| {
                format!(" (sampled 1/{n} by the back-off: the figures of the spans recorded)")
            });
            if *entries_per_span > 1.0 {
                format!(
                    "instrumentation: {} lasts {} per instance (wall time, {entries_per_span:.1} entries each); its span costs about {} per instance (measured in this run), {cost_share_pct:.0} % of it ({} instances): instrument its caller instead{sampled}",
                    code(format, name),
                    dur(*mean_ns),
                    dur(*cost_per_span_ns),
                    format_count(*spans)
                )
            } else {
                format!(
                    "instrumentation: {} lasts {} per call; a span costs about {} (measured in this run), {cost_share_pct:.0} % of it ({} calls): instrument its caller instead{sampled}",
                    code(format, name),
                    dur(*mean_ns),
                    dur(*cost_per_span_ns),
                    format_count(*calls)
                )
            }
        }
        Finding::Allocations {
            name,
            entries,
            per_call,
            bytes_per_call,
            share_pct,
            bytes_share_pct,
            ..
        } => format!(
            "allocations: {} makes {per_call:.1} allocations ({}) per call, child spans included ({} calls; {share_pct:.1} % of the run's allocations, {bytes_share_pct:.1} % of the bytes it allocated)",
            code(format, name),
            format_bytes(*bytes_per_call),
            format_count(*entries)
        ),
        Finding::Leak(leak) => format!(
            "leak suspect: {} kept {} over {} calls ({} per call, {:.0} % of calls kept memory); the process grew {} over the second half",
            code(format, &leak.name),
            format_bytes(leak.retained_bytes as f64),
            format_count(leak.calls),
            format_bytes(leak.per_call_bytes),
            leak.share_of_calls * 100.0,
            format_bytes(leak.process_growth_bytes as f64)
        ),
        Finding::GpuIdle {
            name,
            device,
            utilization_pct,
            wall_share_pct,
            ..
        } => format!(
            "GPU idle: GPU {device} at {utilization_pct:.0} % while {} ran ({wall_share_pct:.0} % of the run)",
            code(format, name)
        ),
        Finding::GpuBound {
            name,
            calls,
            cpu_mean_ns,
            gpu_mean_ns,
            ..
        } => format!(
            "GPU-bound: {}: {} CPU, {} GPU per call — GPU-bound ({} calls timed)",
            code(format, name),
            dur(*cpu_mean_ns),
            dur(*gpu_mean_ns),
            format_count(*calls)
        ),
        Finding::More { kind, left_out } => format!(
            "… and {} more",
            plural(*left_out, &format!("{kind} finding"))
        ),
        _ => return None,
    };
    Some(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(json: &str) -> Snapshot {
        Snapshot::from_json(json, "test data").unwrap()
    }

    /// The result line of `text`.
    fn result(text: &str) -> &str {
        text.lines()
            .find(|l| l.starts_with("result:") || l.starts_with("**result:"))
            .unwrap_or_else(|| panic!("{text}"))
    }

    /// A root span name (here `generate_dataset`, slower in the new run) is its own call path,
    /// `generate_dataset`: the name's regression and its path's were both listed, the same
    /// words twice.
    #[test]
    fn a_regressed_name_is_printed_once() {
        let (base, new) = (
            profile(include_str!("../../../tests/data/cli-slow.json")),
            profile(include_str!("../../../tests/data/cli-base.json")),
        );
        let mut options = CompareOptions::default();
        options.min_calls = 1;
        let c = spanprof::analysis::compare(&[base], &[new], &options);
        assert!(c
            .paths
            .iter()
            .any(|p| p.name == "generate_dataset" && p.verdict == Verdict::Regression));
        for format in [TextFormat::Text, TextFormat::Markdown] {
            let text = comparison(&c, &options, format);
            let line = result(&text);
            assert_eq!(line.matches("generate_dataset").count(), 1, "{line}");
        }
    }

    /// A name judged on two metrics that both regressed, and whose calls grew: once, with
    /// each way it regressed; a path below it stays listed on its own.
    #[test]
    fn every_way_a_name_regressed_is_said_once() {
        let (base, mut new) = (
            profile(include_str!("../../../tests/data/cli-base.json")),
            profile(include_str!("../../../tests/data/cli-slow.json")),
        );
        let forward = new.spans.iter_mut().find(|s| s.name == "forward").unwrap();
        forward.calls += 10;
        let mut options = CompareOptions::default();
        options.metric = spanprof::analysis::Measure::P50;
        options.thresholds = vec![(spanprof::analysis::Measure::P99, 1.0)];
        let c = spanprof::analysis::compare(&[base], &[new], &options);
        let text = comparison(&c, &options, TextFormat::Text);
        let line = result(&text);
        assert_eq!(line.matches("forward").count(), 2, "{line}");
        // "forward (" also ends "…;train_step;forward (": the name's own is the first.
        let at = line.find("forward (").unwrap_or_else(|| panic!("{line}"));
        let forward = &line[at..line[at..].find(')').unwrap() + at + 1];
        assert!(
            forward.contains("p50 +")
                && forward.contains("p99 +")
                && forward.contains("calls 267 → 277"),
            "{forward}"
        );
        assert!(line.contains("train;epoch;train_step;forward (p"), "{line}");
    }

    /// One name in two targets, both regressed: told apart by their targets.
    #[test]
    fn a_name_regressed_in_two_targets_names_each_target() {
        let twin = |mut s: Snapshot| {
            let mut copy = s.span("generate_dataset").unwrap().clone();
            copy.target = "other::module".to_string();
            s.spans.push(copy);
            s
        };
        let (base, new) = (
            twin(profile(include_str!("../../../tests/data/cli-slow.json"))),
            twin(profile(include_str!("../../../tests/data/cli-base.json"))),
        );
        let mut options = CompareOptions::default();
        options.min_calls = 1;
        options.metric = spanprof::analysis::Measure::P50;
        let c = spanprof::analysis::compare(&[base], &[new], &options);
        let text = comparison(&c, &options, TextFormat::Markdown);
        let line = result(&text);
        assert_eq!(line.matches("`generate_dataset`").count(), 2, "{line}");
        assert!(
            line.contains("`generate_dataset` in `other::module` (p50 +")
                && line.contains("`generate_dataset` in `training_loop::workload` (p50 +"),
            "{line}"
        );
    }

    /// An instrumentation finding in words: the share it states is the cost it prints over
    /// the time it prints, per call or (a span entered more than once) per instance.
    #[test]
    fn an_instrumentation_finding_says_figures_that_agree() {
        let snapshot = profile(include_str!("../../../tests/data/cli-base.json"));
        let per_call = Finding::Instrumentation {
            name: "validate".to_string(),
            target: "app".to_string(),
            calls: 2000,
            spans: 2000,
            entries_per_span: 1.0,
            mean_ns: 200.0,
            cost_per_span_ns: 40.0,
            cost_share_pct: 20.0,
            sampled_every: None,
        };
        let per_instance = Finding::Instrumentation {
            name: "poll".to_string(),
            target: "app".to_string(),
            calls: 2000,
            spans: 1000,
            entries_per_span: 2.0,
            mean_ns: 400.0,
            cost_per_span_ns: 100.0,
            cost_share_pct: 25.0,
            sampled_every: Some(4),
        };
        let text = findings(&snapshot, &[per_call, per_instance], TextFormat::Text);
        assert!(
            text.contains(
                "- instrumentation: validate lasts 200 ns per call; a span costs about 40 ns \
                 (measured in this run), 20 % of it (2000 calls): instrument its caller instead\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "- instrumentation: poll lasts 400 ns per instance (wall time, 2.0 entries each); \
                 its span costs about 100 ns per instance (measured in this run), 25 % of it \
                 (1000 instances): instrument its caller instead (sampled 1/4"
            ),
            "{text}"
        );
    }
}

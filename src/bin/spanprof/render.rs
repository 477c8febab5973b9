//! Findings in words: a comparison and the bottlenecks, as plain text or Markdown.

use std::fmt::Write as _;

use spanprof::analysis::{
    CompareOptions, Comparison, CostSource, Finding, Side, TimingChange, Verdict,
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
            "low confidence: one run on a side, so the threshold alone decides (give 2 or more runs \
             per side to compare the change with the spread between runs)"
        );
    }
    if (c.overall_ratio - 1.0).abs() * 100.0 > options.threshold_for(options.metric) / 2.0 {
        let _ = writeln!(
            f,
            "note: every span name moved by a median {}: the machine may have been busier or \
             idler during one side's runs",
            change(c.overall_ratio)
        );
    }
    let regressions: Vec<String> = c
        .timings
        .iter()
        .chain(&c.paths)
        .filter(|t| t.verdict == Verdict::Regression)
        .map(|t| {
            format!(
                "{} ({} {})",
                code(format, &t.name),
                t.metric,
                change(t.ratio)
            )
        })
        .chain(
            c.counts
                .iter()
                .filter(|x| x.verdict == Verdict::Regression)
                .map(|x| {
                    format!(
                        "{} ({} {} → {})",
                        code(format, &x.name),
                        x.count.name(),
                        x.base,
                        x.new
                    )
                }),
        )
        .chain(c.budgets.iter().filter(|b| !b.within).map(|b| {
            format!(
                "{} ({} {} over budget {})",
                code(format, &b.name),
                b.metric,
                dur(b.value_ns),
                dur(b.max_ns)
            )
        }))
        .collect();
    let verdict = if regressions.is_empty() {
        "result: no regression".to_string()
    } else {
        format!("result: REGRESSION in {}", regressions.join(", "))
    };
    let _ = match format {
        TextFormat::Markdown => writeln!(f, "\n**{verdict}**"),
        TextFormat::Text => writeln!(f, "{verdict}"),
    };

    heading(
        &mut f,
        format,
        "timing per span name (median of runs; spread = max - min)",
    );
    timing_table(&mut f, format, "name", &c.timings);
    if !c.paths.is_empty() {
        heading(
            &mut f,
            format,
            "timing per call path (root;...;leaf; busy and self time per instance)",
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

/// One row per timing change: `first` names the first column (a span name or a call path).
fn timing_table(f: &mut String, format: TextFormat, first: &'static str, rows: &[TimingChange]) {
    let mut t = Table::new(&[
        (first, false),
        ("metric", false),
        ("base", true),
        ("new", true),
        ("change", true),
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
            spread(&x.base),
            spread(&x.new),
            match x.base.sampled_every.max(x.new.sampled_every) {
                Some(n) => format!("{} (sampled 1/{n})", x.verdict.name()),
                None => x.verdict.name().to_string(),
            },
        ]);
    }
    t.write(f, format);
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
                mean_ns,
                cost_per_span_ns,
                cost_source,
                cost_share_pct,
                sampled_every,
                ..
            } => format!(
                "instrumentation: {} lasts {} per call; a span costs about {} ({}), {cost_share_pct:.0} % of it ({} calls): instrument its caller instead{}",
                code(format, name),
                dur(*mean_ns),
                dur(*cost_per_span_ns),
                match cost_source {
                    CostSource::Measured => "this profile's estimate for the name",
                    CostSource::Calibrated => "calibrated at the run's start",
                    _ => "assumed: the profile has no estimate of its own",
                },
                format_count(*calls),
                sampled_every.map_or_else(String::new, |n| format!(
                    " (sampled 1/{n} by the back-off: times from the spans recorded, totals scaled)"
                ))
            ),
            Finding::Allocations {
                name,
                entries,
                per_call,
                bytes_per_call,
                ..
            } => format!(
                "allocations: {} makes {per_call:.1} allocations ({}) per call, child spans included ({} calls)",
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
            Finding::More { kind, left_out } => format!(
                "… and {} more",
                plural(*left_out, &format!("{kind} finding"))
            ),
            _ => continue,
        };
        let _ = writeln!(f, "{bullet}{line}");
    }
    f
}

//! The report as Markdown: a heading and one table row per span name, sorted by self time,
//! for a pull-request comment or a wiki page.

use std::fmt::Write as _;
use std::io::{self, Write};

use super::table::{sampled_names_note, scaled_total};
use super::units::{format_count, format_duration};
use super::Format;
use crate::profile::{Snapshot, SpanStats};

/// Name of the Markdown report in an output directory.
pub const MARKDOWN_FILE: &str = "report.md";

/// The report as a Markdown table: one row per span name (name, target, calls, total busy and
/// self time, self %, and the per-call mean, p50, p90, p99 and max of busy time), sorted by
/// self time.
///
/// ```
/// use spanprof::output::{Format, Markdown};
/// # let snapshot = spanprof::profile::Snapshot::from_json(
/// #     include_str!("../../tests/data/profile-v1-basic.json"), "doc")?;
/// let text = Markdown::new().with_top(10).to_string(&snapshot);
/// assert!(text.contains("| span | target | calls |"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Markdown {
    top: usize,
}

impl Default for Markdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Markdown {
    /// A table of every span name.
    pub fn new() -> Self {
        Self { top: usize::MAX }
    }

    /// Shows only the `n` span names with the most self time (at least one).
    pub fn with_top(self, n: usize) -> Self {
        Self { top: n.max(1) }
    }

    /// The report as Markdown text.
    pub fn to_string(&self, snapshot: &Snapshot) -> String {
        let mut spans: Vec<&SpanStats> = snapshot.spans.iter().collect();
        spans.sort_by(|a, b| super::by_self_time(a, b));
        // Of every span name, also where this is a selection of them.
        let all_self = super::all_self_ns(snapshot);
        let run = &snapshot.run;
        let mut f = String::new();
        // Writing to a String cannot fail.
        // A selection of span names: the whole profile's count, then which were selected.
        let names = snapshot
            .selection
            .as_ref()
            .map_or(spans.len() as u64, |whole| whole.span_names);
        let _ = writeln!(
            f,
            "### spanprof: {} span name{}, run {} on {} (preset {})\n",
            names,
            if names == 1 { "" } else { "s" },
            format_duration(run.duration_ns),
            escape(&run.host),
            run.preset
        );
        if let Some(whole) = &snapshot.selection {
            let _ = writeln!(
                f,
                "Output filter `{}`: {} of them shown.\n",
                escape(&whole.filter),
                spans.len()
            );
        }
        if spans.is_empty() {
            if snapshot.selection.is_none() || names == 0 {
                let _ = writeln!(f, "No span was recorded.");
            }
            return f;
        }
        let _ = writeln!(
            f,
            "| span | target | calls | total | self | self % | mean | p50 | p90 | p99 | max |"
        );
        let _ = writeln!(f, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
        for s in spans.iter().take(self.top) {
            let e = &s.entry_busy;
            let share = if all_self == 0 {
                0.0
            } else {
                100.0 * s.scaled_total_ns(&s.entry_self) as f64 / all_self as f64
            };
            let _ = writeln!(
                f,
                "| `{}` | `{}` | {} | {} | {} | {:.1} % | {} | {} | {} | {} | {} |",
                escape(&s.name),
                escape(&s.target),
                format_count(s.calls),
                scaled_total(s, e),
                scaled_total(s, &s.entry_self),
                share,
                format_duration(e.mean_ns.round() as u64),
                format_duration(e.p50_ns),
                format_duration(e.p90_ns),
                format_duration(e.p99_ns),
                format_duration(e.max_ns),
            );
        }
        if let Some(note) = sampled_names_note(&snapshot.spans) {
            let _ = writeln!(f, "\n{}", escape(&note));
        }
        if spans.len() > self.top {
            let _ = writeln!(
                f,
                "\n{} more span name{} not shown.",
                spans.len() - self.top,
                if spans.len() - self.top == 1 { "" } else { "s" }
            );
        }
        f
    }
}

/// Text safe inside a Markdown table cell or code span.
pub(crate) fn escape(text: &str) -> String {
    text.replace('|', "\\|")
        .replace('`', "'")
        .replace('\n', " ")
}

impl Format for Markdown {
    fn name(&self) -> &'static str {
        "markdown"
    }

    fn file_name(&self) -> &'static str {
        MARKDOWN_FILE
    }

    fn action(&self) -> &'static str {
        "writing report"
    }

    fn render(&self, snapshot: &Snapshot, out: &mut dyn Write) -> io::Result<()> {
        out.write_all(self.to_string(snapshot).as_bytes())
    }
}

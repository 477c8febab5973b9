//! The report as Markdown: a heading and one table row per span name, sorted by self time,
//! for a pull-request comment or a wiki page.

use std::fmt::Write as _;
use std::io::{self, Write};

use super::table::sampled_names_note;
use super::units::format_duration;
use super::{shown, Format};
use crate::profile::figures::Figure;
use crate::profile::Snapshot;

/// Name of the Markdown report in an output directory.
pub const MARKDOWN_FILE: &str = "report.md";

/// The report as a Markdown table: one row per span name (name, target, then figures of the
/// catalogue, [`crate::profile::figures`]: calls, total busy and self time, self %, and the
/// per-call mean, p50, p90, p99 and max of busy time), sorted by self time.
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
    /// The figures of the table, after the name and target.
    const COLUMNS: [&'static Figure; 9] = super::table::SPAN_COLUMNS;

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
        let spans = snapshot.by_self_time();
        // Shares of every span name, also where this is a selection of them.
        let totals = snapshot.totals();
        let run = &snapshot.run;
        let mut f = String::new();
        // Writing to a String cannot fail.
        // A selection of span names: the whole profile's count, then which were selected.
        let names = totals.span_names;
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
        let _ = write!(f, "| span | target |");
        for figure in Self::COLUMNS {
            let _ = write!(f, " {} |", figure.label);
        }
        let _ = writeln!(f, "\n|---|---|{}", "--:|".repeat(Self::COLUMNS.len()));
        for s in spans.iter().take(self.top) {
            let _ = write!(f, "| `{}` | `{}` |", escape(&s.name), escape(&s.target));
            for figure in Self::COLUMNS {
                let _ = write!(f, " {} |", shown(figure, s, &totals));
            }
            f.push('\n');
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

//! The SVG flamegraph of the call tree, rendered by the `inferno` crate (feature
//! `flamegraph`) from the folded stacks: a frame's width is the self time of its call path and
//! of the paths under it.

use std::io::{self, Write};

use super::folded::for_each_line;
use super::Format;
use crate::profile::Snapshot;

/// Name of the flamegraph in an output directory.
pub const FLAMEGRAPH_FILE: &str = "flamegraph.svg";

/// The call tree as an interactive SVG flamegraph (open it in a browser: click to zoom,
/// Ctrl-F to search). Widths are self time, so a frame is as wide as the time spent in it and
/// under it. A profile without a tree (or without self time) gives an SVG that says so.
///
/// ```
/// use spanprof::output::{Flamegraph, Format};
/// # let snapshot = spanprof::profile::Snapshot::from_json(
/// #     include_str!("../../tests/data/golden-profile.json"), "doc")?;
/// let mut svg = Vec::new();
/// Flamegraph::new().render(&snapshot, &mut svg)?;
/// assert!(String::from_utf8(svg)?.contains("<svg"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct Flamegraph {
    title: Option<String>,
}

impl Flamegraph {
    /// A flamegraph titled `spanprof: <command line>`.
    pub fn new() -> Self {
        Self::default()
    }

    /// A flamegraph with this title.
    pub fn with_title(self, title: impl Into<String>) -> Self {
        Self {
            title: Some(title.into()),
        }
    }
}

impl Format for Flamegraph {
    fn name(&self) -> &'static str {
        "flamegraph"
    }

    fn file_name(&self) -> &'static str {
        FLAMEGRAPH_FILE
    }

    fn action(&self) -> &'static str {
        "writing flamegraph"
    }

    fn render(&self, snapshot: &Snapshot, out: &mut dyn Write) -> io::Result<()> {
        // inferno adds the counts up in a `usize`: a total past it (only a crafted profile's
        // self times reach 584 years) is an error, not a panic in the middle of the drawing.
        let mut sum = Some(0usize);
        let mut lines: Vec<String> = Vec::new();
        if let Some(tree) = &snapshot.tree {
            for_each_line(tree, |stack, ns| {
                sum = sum.and_then(|sum| sum.checked_add(usize::try_from(ns).ok()?));
                lines.push(format!("{stack} {ns}"));
                Ok::<(), std::convert::Infallible>(())
            })
            .unwrap_or_else(|e| match e {});
        }
        if sum.is_none() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the call tree's self times add up to more than a flame graph can count",
            ));
        }
        if lines.is_empty() {
            // inferno refuses empty input: an SVG that says why there is no graph.
            return write!(
                out,
                concat!(
                    r#"<?xml version="1.0" standalone="no"?>"#,
                    "\n",
                    r#"<svg version="1.1" width="600" height="60" xmlns="http://www.w3.org/2000/svg">"#,
                    r#"<text x="10" y="35" font-family="Verdana" font-size="14">"#,
                    "spanprof: no call tree or no self time recorded</text></svg>\n"
                )
            );
        }
        let mut options = inferno::flamegraph::Options::default();
        options.title = self.title.clone().unwrap_or_else(|| {
            let command = snapshot.run.command_line.join(" ");
            if command.is_empty() {
                "spanprof".to_string()
            } else {
                format!("spanprof: {command}")
            }
        });
        options.count_name = "ns".to_string();
        options.name_type = "Span:".to_string();
        // Colours from the names: the same span, the same colour, in every run.
        options.deterministic = true;
        inferno::flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), out)
    }
}

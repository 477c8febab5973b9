//! Folded stacks: the call tree as `root;child;leaf <self ns>` lines, the input of
//! `flamegraph.pl`, inferno and speedscope.

use std::io::{self, Write};

use super::Format;
use crate::profile::{CallTree, Snapshot};

/// Name of the folded stacks in an output directory.
pub const FOLDED_FILE: &str = "profile.folded";

/// The call tree as folded stacks: one line per call path with self time, its span names
/// from the root joined by `;`, a space and its self time in nanoseconds. The lines add up to
/// the profile's self time. A profile without a tree gives an empty file.
///
/// ```
/// use spanprof::output::Folded;
/// # let snapshot = spanprof::profile::Snapshot::from_json(
/// #     include_str!("../../tests/data/golden-profile.json"), "doc")?;
/// let text = Folded.to_string(&snapshot);
/// let sum: u64 = text.lines().map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap()).sum();
/// assert_eq!(sum, snapshot.tree.as_ref().unwrap().self_ns());
/// # Ok::<(), spanprof::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Folded;

impl Folded {
    /// The folded stacks as text.
    pub fn to_string(&self, snapshot: &Snapshot) -> String {
        snapshot
            .tree
            .as_ref()
            .map(|tree| {
                folded_lines(tree)
                    .into_iter()
                    .map(|(stack, ns)| format!("{stack} {ns}\n"))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Each call path with self time: its frames joined by `;`, and its self time in ns.
pub(crate) fn folded_lines(tree: &CallTree) -> Vec<(String, u64)> {
    tree.nodes
        .iter()
        .enumerate()
        .filter(|(_, node)| node.self_time.total_ns > 0)
        .map(|(i, node)| {
            let frames: Vec<String> = tree.path(i).into_iter().map(frame).collect();
            (frames.join(";"), node.self_time.total_ns)
        })
        .collect()
}

/// A span name as a frame: `;` separates frames and a line ends at a newline, so both are
/// replaced; an empty name becomes `?`.
fn frame(name: &str) -> String {
    if name.is_empty() {
        return "?".to_string();
    }
    name.chars()
        .map(|c| match c {
            ';' => ':',
            '\n' | '\r' => ' ',
            c => c,
        })
        .collect()
}

impl Format for Folded {
    fn name(&self) -> &'static str {
        "folded"
    }

    fn file_name(&self) -> &'static str {
        FOLDED_FILE
    }

    fn action(&self) -> &'static str {
        "writing folded stacks"
    }

    fn render(&self, snapshot: &Snapshot, out: &mut dyn Write) -> io::Result<()> {
        out.write_all(self.to_string(snapshot).as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::frame;

    #[test]
    fn frames_cannot_break_the_format() {
        assert_eq!(frame("a;b\nc"), "a:b c");
        assert_eq!(frame(""), "?");
    }
}

//! Folded stacks: the call tree as `root;child;leaf <self ns>` lines, the input of
//! `flamegraph.pl`, inferno and speedscope.

use std::fmt::Write as _;
use std::io::{self, Write};

use super::Format;
use crate::profile::{CallTree, Snapshot};

/// Name of the folded stacks in an output directory.
pub const FOLDED_FILE: &str = "profile.folded";

/// The call tree as folded stacks: one line per call path with self time, its span names
/// from the root joined by `;`, a space and its self time in nanoseconds. The lines add up to
/// the profile's self time. A profile without a tree gives an empty file.
///
/// No span name can make a line ambiguous: the count is the text after a line's last ASCII
/// space, and each name is written as the same frame wherever it stands. In a frame, `;`
/// becomes `:`, line breaks become spaces, whitespace around the name is dropped (readers trim
/// lines), and the whitespace before a trailing number becomes a no-break space (U+00A0):
/// `layer 3` is written `layer\u{a0}3`, which reads as one frame and renders as `layer 3`,
/// where `model;layer 3 6004112` would read as a differential line (counts 3 and 6004112) of a
/// frame `layer`. An empty name is written `?`.
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
        let mut text = String::new();
        if let Some(tree) = &snapshot.tree {
            for_each_line(tree, |stack, ns| {
                // Writing to a String cannot fail.
                let _ = writeln!(text, "{stack} {ns}");
                Ok::<(), std::convert::Infallible>(())
            })
            .unwrap_or_else(|e| match e {});
        }
        text
    }
}

/// Calls `line` with each call path with self time, in node order: its frames joined by `;`,
/// and its self time in ns. One line at a time: the lines' text (nodes × depth) is never held
/// together here; each name's frame is made once.
pub(crate) fn for_each_line<E>(
    tree: &CallTree,
    mut line: impl FnMut(&str, u64) -> Result<(), E>,
) -> Result<(), E> {
    let frames: Vec<String> = tree.nodes.iter().map(|node| frame(&node.name)).collect();
    let mut path = Vec::new();
    let mut stack = String::new();
    for (i, node) in tree.nodes.iter().enumerate() {
        let ns = node.self_ns();
        if ns == 0 {
            continue;
        }
        // The path as `CallTree::path` walks it: parents come first.
        path.clear();
        let mut at = Some(i);
        while let Some(j) = at {
            path.push(j);
            at = tree.nodes[j].parent.map(|p| p as usize).filter(|&p| p < j);
        }
        stack.clear();
        for (k, &j) in path.iter().rev().enumerate() {
            if k > 0 {
                stack.push(';');
            }
            stack.push_str(&frames[j]);
        }
        line(&stack, ns)?;
    }
    Ok(())
}

/// A span name as a frame, the same text wherever the name stands on a path:
///
/// - `;` separates frames, so it becomes `:`; a line ends at a newline, so `\n` and `\r`
///   become spaces;
/// - whitespace around the name is dropped: inferno and `flamegraph.pl` trim each line, so a
///   first or last frame would lose it anyway (and `layer ` as a leaf would not be `layer ` as
///   a parent);
/// - the whitespace before a trailing number becomes U+00A0 (no-break space): the readers take
///   the text after a line's last ASCII space as its count, and a line whose stack then still
///   ends in a space and a number as a differential line (two counts), so `layer 3` as a leaf
///   would read as frame `layer` with counts 3 and the self time. inferno splits a count off
///   at ASCII `' '` only (and `flamegraph.pl` at `\s`, which is ASCII whitespace for these
///   bytes); a no-break space renders as a space and is no separator to either;
/// - an empty name (or one of whitespace only) becomes `?`.
fn frame(name: &str) -> String {
    let mut chars: Vec<char> = name
        .chars()
        .map(|c| match c {
            ';' => ':',
            '\n' | '\r' => ' ',
            c => c,
        })
        .collect();
    while chars.last().is_some_and(|c| c.is_whitespace()) {
        chars.pop();
    }
    let lead = chars.iter().take_while(|c| c.is_whitespace()).count();
    chars.drain(..lead);
    if chars.is_empty() {
        return "?".to_string();
    }
    // The trailing run of digits, dots and whitespace: a number and what separates it.
    let tail = chars
        .iter()
        .rposition(|&c| !(c.is_ascii_digit() || c == '.' || c.is_whitespace()))
        .map_or(0, |i| i + 1);
    for c in &mut chars[tail..] {
        if c.is_whitespace() {
            *c = '\u{a0}';
        }
    }
    chars.into_iter().collect()
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
        let Some(tree) = &snapshot.tree else {
            return Ok(());
        };
        // Line by line through a buffer: the text is never whole in memory here.
        let mut out = io::BufWriter::new(out);
        for_each_line(tree, |stack, ns| writeln!(out, "{stack} {ns}"))?;
        out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::frame;

    #[test]
    fn frames_cannot_break_the_format() {
        assert_eq!(frame("a;b\nc"), "a:b c");
        assert_eq!(frame(""), "?");
        assert_eq!(frame(" \n "), "?");
    }

    /// Whether `text` reads as a sample count to inferno (0.12, `merge::rfind_samples`):
    /// digits, or digits, a dot and digits.
    fn is_count(text: &str) -> bool {
        let (int, frac) = text.split_once('.').unwrap_or((text, ""));
        !int.is_empty()
            && int.chars().all(|c| c.is_ascii_digit())
            && frac.chars().all(|c| c.is_ascii_digit())
    }

    /// A name ending in a number is one frame, whether it ends a line or not: the line has
    /// exactly one count (inferno reads the text after the last ASCII space as the count, then
    /// again after the trimmed stack's last space as a differential's first count), and the
    /// frame is the same text as a parent.
    #[test]
    fn numbers_at_the_end_of_names_are_no_counts() {
        for name in [
            "layer 3",
            "layer 12",
            "x 1.5",
            "v 1 2",
            "trailing space 123 ",
            "tab\t7",
            "line\n8",
            "wide\u{3000}9",
            " 4",
            "3",
            "step 2 of 3",
        ] {
            let f = frame(name);
            for line in [
                format!("model;{f} 5"),
                format!("{f} 5"),
                format!("a b;{f} 5"),
            ] {
                // inferno trims each line, then splits the count off at the last ASCII space.
                let (stack, count) = line.trim().rsplit_once(' ').unwrap();
                assert_eq!(count, "5", "{name:?}: {line:?}");
                let stack = stack.trim_end();
                assert!(
                    stack.rsplit_once(' ').map_or(true, |(_, t)| !is_count(t)),
                    "{name:?} reads as a differential line: {line:?}"
                );
                // The frame as the line's last is the frame as a parent.
                assert!(
                    stack.ends_with(&f),
                    "{name:?}: {stack:?} lost part of {f:?}"
                );
            }
            assert!(!f.contains(';') && !f.contains('\n'), "{name:?}: {f:?}");
        }
        assert_eq!(frame("layer 3"), "layer\u{a0}3");
        assert_eq!(frame("layer 12"), "layer\u{a0}12");
        assert_eq!(frame("step 2 of 3"), "step 2 of\u{a0}3");
        assert_eq!(frame("layer3"), "layer3");
    }
}

//! The console tree view: the call tree indented, one line per call path, with its share of
//! all self time, calls, self, busy and p99 busy time. Children are sorted by the self time
//! under them (their flamegraph width); depth- and top-limited, the paths left out counted.
//!
//! A node's times are [`TreeNode::self_ns`] and [`TreeNode::busy_ns`] (the spans the back-off
//! left out estimated in, marked `≈`), and its share is of the self time of every span name,
//! [`Totals::self_ns`](crate::profile::Totals::self_ns), as in the table.

use std::fmt::{self, Write as _};
use std::io::{self, Write};

use super::table::truncate;
use super::units::{format_count, format_duration};
use super::Format;
use crate::profile::{CallTree, Snapshot, TreeNode};

/// Name of the tree view in an output directory.
pub const TREE_FILE: &str = "tree.txt";

const PATH_WIDTH: usize = 44;

/// The call tree of a [`Snapshot`] as indented text (nothing for a profile without a tree).
/// [`Table`](super::Table) shows it after the flat table.
///
/// ```
/// use spanprof::output::TreeView;
/// # let snapshot = spanprof::profile::Snapshot::from_json(
/// #     include_str!("../../tests/data/golden-profile.json"), "doc")?;
/// let text = TreeView::new().with_depth(3).with_top(5).to_string(&snapshot);
/// assert!(text.starts_with("Call tree"));
/// # Ok::<(), spanprof::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeView {
    depth: usize,
    top: usize,
}

impl Default for TreeView {
    fn default() -> Self {
        Self::new()
    }
}

impl TreeView {
    /// Paths up to 6 spans deep, the 8 largest children of each node.
    pub fn new() -> Self {
        Self { depth: 6, top: 8 }
    }

    /// Shows paths up to `depth` spans deep (at least 1).
    pub fn with_depth(self, depth: usize) -> Self {
        Self {
            depth: depth.max(1),
            ..self
        }
    }

    /// Shows the `n` children with the most self time under them, per node (at least 1).
    pub fn with_top(self, n: usize) -> Self {
        Self {
            top: n.max(1),
            ..self
        }
    }

    /// The view as text (empty for a profile without a tree or with an empty one).
    pub fn to_string(&self, snapshot: &Snapshot) -> String {
        let mut out = String::new();
        if let Some(tree) = snapshot.tree.as_ref().filter(|t| !t.nodes.is_empty()) {
            // Writing to a String cannot fail.
            let totals = snapshot.totals();
            let _ = self.write(tree, totals.self_ns, snapshot.selection.is_some(), &mut out);
        }
        out
    }

    /// The view of `tree`, its percentages shares of `all` ns (the self time of every span
    /// name: of the whole profile where `selected`, the tree of the paths to the names an output
    /// filter selected).
    fn write(&self, tree: &CallTree, all: u64, selected: bool, f: &mut String) -> fmt::Result {
        let total = tree.total_ns();
        let (children, roots) = tree.children();
        writeln!(
            f,
            "Call tree ({} paths{}; % of all self time {}, under each path)",
            tree.nodes.len(),
            if selected {
                " to the selected names"
            } else {
                ""
            },
            format_duration(all)
        )?;
        // GPU time per path (CUDA events), where some path has it.
        let gpu = tree.nodes.iter().any(|n| n.gpu_calls > 0);
        writeln!(
            f,
            "{:<PATH_WIDTH$} {:>6} {:>9} {:>9} {:>9} {:>9}{}",
            "path",
            "%",
            "calls",
            "self",
            "busy",
            "p99 busy",
            if gpu {
                format!(" {:>9}", "gpu")
            } else {
                String::new()
            }
        )?;
        // Lines to write, last first: a node, or how many siblings were left out.
        enum Line {
            Node(usize),
            More(usize, u64),
        }
        let mut stack: Vec<(Line, usize)> = Vec::new();
        let push_level = |stack: &mut Vec<(Line, usize)>, list: &[usize], depth: usize| {
            let list = widest_first(list, &total);
            let shown = list.len().min(self.top);
            if list.len() > shown {
                let rest = list[shown..]
                    .iter()
                    .map(|&i| total[i])
                    .fold(0, u64::saturating_add);
                stack.push((Line::More(list.len() - shown, rest), depth));
            }
            for &i in list[..shown].iter().rev() {
                stack.push((Line::Node(i), depth));
            }
        };
        let pct = |ns: u64| {
            if all == 0 {
                0.0
            } else {
                ns as f64 * 100.0 / all as f64
            }
        };
        push_level(&mut stack, &roots, 0);
        while let Some((line, depth)) = stack.pop() {
            let indent = "  ".repeat(depth);
            let i = match line {
                Line::Node(i) => i,
                Line::More(n, ns) => {
                    let label = truncate(&format!("{indent}… {n} more"), PATH_WIDTH);
                    writeln!(f, "{label:<PATH_WIDTH$} {:>5.1}%", pct(ns))?;
                    continue;
                }
            };
            let node = &tree.nodes[i];
            let label = truncate(&format!("{indent}{}", node.name), PATH_WIDTH);
            let gpu_cell = match (gpu, node.gpu_calls) {
                (false, _) => String::new(),
                (true, 0) => format!(" {:>9}", "-"),
                (true, _) => format!(" {:>9}", format_duration(node.gpu_ns)),
            };
            writeln!(
                f,
                "{label:<PATH_WIDTH$} {:>5.1}% {:>9} {:>9} {:>9} {:>9}{gpu_cell}",
                pct(total[i]),
                format_count(node.calls),
                node_cell(node, node.self_ns()),
                node_cell(node, node.busy_ns()),
                format_duration(node.busy.p99_ns),
            )?;
            if depth + 1 < self.depth {
                push_level(&mut stack, &children[i], depth + 1);
            } else if !children[i].is_empty() {
                let label = truncate(
                    &format!("{indent}  … {} paths deeper", children[i].len()),
                    PATH_WIDTH,
                );
                writeln!(f, "{label}")?;
            }
        }
        Ok(())
    }
}

/// A time of `node` (its [`TreeNode::self_ns`] or [`TreeNode::busy_ns`]) as the tree views show
/// it: `≈` before an estimate ([`TreeNode::is_estimate`]).
pub(crate) fn node_cell(node: &TreeNode, ns: u64) -> String {
    let mark = if node.is_estimate() { "≈" } else { "" };
    format!("{mark}{}", format_duration(ns))
}

/// The nodes `list` in the tree view's order: the most self time under them (`total`, from
/// [`CallTree::total_ns`]) first, then node order.
pub(crate) fn widest_first(list: &[usize], total: &[u64]) -> Vec<usize> {
    let mut list = list.to_vec();
    list.sort_by(|&a, &b| total[b].cmp(&total[a]).then(a.cmp(&b)));
    list
}

impl Format for TreeView {
    fn name(&self) -> &'static str {
        "tree"
    }

    fn file_name(&self) -> &'static str {
        TREE_FILE
    }

    fn action(&self) -> &'static str {
        "writing call tree"
    }

    fn render(&self, snapshot: &Snapshot, out: &mut dyn Write) -> io::Result<()> {
        out.write_all(self.to_string(snapshot).as_bytes())
    }
}

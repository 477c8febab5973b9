//! The call tree: statistics per call path (a span name under the chain of its parents'
//! names), a second view beside the per-name statistics.
//!
//! Each span is counted in exactly one node, so the nodes' self times add up to the per-name
//! self totals exactly. Recursion collapses (a name already on the path does not deepen it) and
//! the tree is bounded (see [`CallTree::max_nodes`]): spans past the bounds are counted in an
//! *other* node of their parent.

use serde::{Deserialize, Serialize};

use super::combine::{self, Combine};
use super::Stat;

/// The call tree of a profile (schema version 4; absent when it was not recorded).
///
/// ```
/// # let snapshot = spanprof::profile::Snapshot::from_json(
/// #     include_str!("../../tests/data/golden-profile.json"), "doc")?;
/// let tree = snapshot.tree.as_ref().expect("recorded with the tree");
/// for (i, node) in tree.nodes.iter().enumerate() {
///     println!("{} {} ns", tree.path(i).join(";"), node.self_time.total_ns);
/// }
/// # Ok::<(), spanprof::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CallTree {
    /// Most nodes of span names the recorder made; beyond, spans went to other nodes.
    pub max_nodes: u32,
    /// Deepest path the recorder made; deeper spans went to other nodes.
    pub max_depth: u32,
    /// Every node, parents before children.
    pub nodes: Vec<TreeNode>,
}

/// One call path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TreeNode {
    /// Span name ([`TreeNode::OTHER`] for an other node).
    pub name: String,
    /// Span target (empty for an other node).
    pub target: String,
    /// An other node: spans past the tree's bounds under this node's parent, and their
    /// descendants.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub other: bool,
    /// Index of the parent node in [`CallTree::nodes`]; `None` for a root (a span with no
    /// recorded parent).
    pub parent: Option<u32>,
    /// Completed entries (enter→exit intervals) at this path, spans the back-off left out
    /// included.
    pub calls: u64,
    /// Instances closed whose last entry was at this path (or, never entered, that opened
    /// there).
    pub instances: u64,
    /// Busy time of each entry recorded at this path. A span's path follows its entries: a
    /// span entered while another is entered on its thread is under that span for that entry,
    /// so a node's busy time is its self time plus its children's busy time.
    pub busy: Stat,
    /// Self time of each entry recorded at this path.
    #[serde(rename = "self")]
    pub self_time: Stat,
    /// Total wall time of the instances counted in `instances` (creation to close), ns.
    pub wall_ns: u64,
    /// Busy time of the entries at this path made with nothing entered below them on their
    /// thread (a spawned task polled on its own: it keeps the path it was created in), ns.
    /// Those entries ran outside their parent's entries: they are in this node's busy time
    /// and not in the parent's (absent when none). For every node, busy = self + the
    /// children's busy − the children's `detached_ns`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub detached_ns: u64,
    /// Spans at this path the back-off left out ([`SpanStats::sampled`](super::SpanStats)):
    /// counted in [`TreeNode::calls`], in no histogram (absent when none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped: u64,
    /// The estimated busy time of the spans left out, ns: what their parents' child time got
    /// for them (absent when none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped_ns: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

// Call paths are matched node by node from the root (name, target, other node): the tree's
// `nodes` rule, which also sets each merged node's `parent`.
combine::rules! { CallTree {
    max_nodes: max,
    max_depth: max,
    nodes: custom(super::merge::paths, super::interval::paths),
} }

combine::rules! { TreeNode {
    name: first,
    target: first,
    other: first,
    parent: first,
    calls: sum,
    instances: sum,
    busy: hist,
    self_time: hist,
    wall_ns: sum,
    detached_ns: sum,
    skipped: sum,
    skipped_ns: sum,
} }

impl TreeNode {
    /// The name of an other node.
    pub const OTHER: &'static str = "[other]";

    /// Busy time at this path, ns: the entries recorded, plus the estimate for the spans the
    /// back-off left out ([`TreeNode::skipped_ns`]). The figure every output shows.
    pub fn busy_ns(&self) -> u64 {
        self.busy.total_ns.saturating_add(self.skipped_ns)
    }

    /// Self time at this path, ns: the entries recorded, plus the spans the back-off left out
    /// at the recorded entries' ratio of self to busy time. The figure every output shows.
    pub fn self_ns(&self) -> u64 {
        self.self_time.total_ns.saturating_add(scale(
            self.skipped_ns,
            self.self_time.total_ns,
            self.busy.total_ns,
        ))
    }

    /// Whether this node's times hold an estimate for spans the back-off left out.
    pub fn is_estimate(&self) -> bool {
        self.skipped > 0
    }
}

/// `n × part / whole` (`n` when `whole` is 0), without overflow.
pub(crate) fn scale(n: u64, part: u64, whole: u64) -> u64 {
    if whole == 0 {
        return n;
    }
    (u128::from(n) * u128::from(part.min(whole)) / u128::from(whole)) as u64
}

impl CallTree {
    pub(crate) fn new(nodes: Vec<TreeNode>, max_nodes: u32, max_depth: u32) -> Self {
        Self {
            max_nodes,
            max_depth,
            nodes,
        }
    }

    /// The names on the path of node `index`, root first.
    pub fn path(&self, index: usize) -> Vec<&str> {
        let mut path = Vec::new();
        let mut at = Some(index);
        while let Some(i) = at {
            let Some(node) = self.nodes.get(i) else { break };
            path.push(node.name.as_str());
            // Parents come first: a parent index not below its child's is malformed.
            at = node.parent.map(|p| p as usize).filter(|&p| p < i);
        }
        path.reverse();
        path
    }

    /// The children of each node (indices, in node order), and the roots last.
    pub fn children(&self) -> (Vec<Vec<usize>>, Vec<usize>) {
        let mut children = vec![Vec::new(); self.nodes.len()];
        let mut roots = Vec::new();
        for (i, node) in self.nodes.iter().enumerate() {
            match node.parent.map(|p| p as usize).filter(|&p| p < i) {
                Some(p) => children[p].push(i),
                None => roots.push(i),
            }
        }
        (children, roots)
    }

    /// Self time of each node and its descendants, ns (the width of its frame in a
    /// flamegraph).
    pub fn total_ns(&self) -> Vec<u64> {
        let mut total: Vec<u64> = self.nodes.iter().map(TreeNode::self_ns).collect();
        for i in (0..self.nodes.len()).rev() {
            if let Some(p) = self.nodes[i].parent.map(|p| p as usize).filter(|&p| p < i) {
                total[p] = total[p].saturating_add(total[i]);
            }
        }
        total
    }

    /// Self time of every node, ns: the per-name self totals' sum.
    pub fn self_ns(&self) -> u64 {
        self.nodes
            .iter()
            .map(TreeNode::self_ns)
            .fold(0, u64::saturating_add)
    }

    /// Adds another tree's nodes to this one's, path by path: counts and totals add,
    /// histograms merge bucket by bucket (exactly); paths only in `other` are appended.
    ///
    /// ```
    /// # let snapshot = spanprof::profile::Snapshot::from_json(
    /// #     include_str!("../../tests/data/golden-profile.json"), "doc")?;
    /// let mut tree = snapshot.tree.clone().unwrap();
    /// tree.merge(snapshot.tree.as_ref().unwrap());
    /// assert_eq!(tree.self_ns(), 2 * snapshot.tree.as_ref().unwrap().self_ns());
    /// # Ok::<(), spanprof::Error>(())
    /// ```
    pub fn merge(&mut self, other: &CallTree) {
        self.add(other);
    }
}

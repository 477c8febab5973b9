//! The call tree: statistics per call path (a span name under the chain of its parents'
//! names), a second view beside the per-name statistics.
//!
//! Each span is counted in exactly one node, so the nodes' self times add up to the per-name
//! self totals exactly. Recursion collapses (a name already on the path does not deepen it) and
//! the tree is bounded (see [`CallTree::max_nodes`]): spans past the bounds are counted in an
//! *other* node of their parent.

use std::collections::HashMap;

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
    /// Entries at this path timed on the GPU with CUDA events (schema 5; absent when none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gpu_calls: u64,
    /// Their GPU time, ns ([`GpuTime`](super::GpuTime) says what it is; absent when none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gpu_ns: u64,
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
    gpu_calls: sum,
    gpu_ns: sum,
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

/// Call paths as dense ids, the same path the same id in every tree added: a path is known by
/// its parent path's id, its span name, its target and whether it is an other node, so the
/// paths of n nodes take memory in n however deep they are (a path keyed by the list of its
/// names takes n × depth: 3 GiB for a 43 MB profile of paths 256 deep). Merges and comparisons
/// match paths by it; a path's text is made only for the paths shown ([`PathIds::text`]).
#[derive(Debug, Default)]
pub(crate) struct PathIds<'a> {
    index: HashMap<(Option<usize>, &'a str, &'a str, bool), usize>,
    /// Each path: its parent's id, and the first node added at it (its name, target and other
    /// node).
    paths: Vec<(Option<usize>, &'a TreeNode)>,
}

impl<'a> PathIds<'a> {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The path id of each node of `tree`, in node order; a path not seen before gets the next
    /// id. A node whose parent index is not before its own is a root, as in [`CallTree::path`].
    pub(crate) fn add(&mut self, tree: &'a CallTree) -> Vec<usize> {
        let mut ids: Vec<usize> = Vec::with_capacity(tree.nodes.len());
        for (i, node) in tree.nodes.iter().enumerate() {
            let parent = node
                .parent
                .map(|p| p as usize)
                .filter(|&p| p < i)
                .map(|p| ids[p]);
            let key = (parent, node.name.as_str(), node.target.as_str(), node.other);
            let paths = &mut self.paths;
            let id = *self.index.entry(key).or_insert_with(|| {
                paths.push((parent, node));
                paths.len() - 1
            });
            ids.push(id);
        }
        ids
    }

    /// How many paths were seen.
    pub(crate) fn len(&self) -> usize {
        self.paths.len()
    }

    /// The parent path of path `id` (none for a root).
    pub(crate) fn parent(&self, id: usize) -> Option<usize> {
        self.paths[id].0
    }

    /// The first node added at path `id`: its name, target and other node are the path's.
    pub(crate) fn node(&self, id: usize) -> &'a TreeNode {
        self.paths[id].1
    }

    /// The span names on path `id`, root first, joined by `separator`.
    pub(crate) fn text(&self, id: usize, separator: &str) -> String {
        let mut names = Vec::new();
        let mut at = Some(id);
        while let Some(i) = at {
            names.push(self.paths[i].1.name.as_str());
            at = self.paths[i].0;
        }
        names.reverse();
        names.join(separator)
    }

    /// Every path id, in the order of the paths as lists of (name, target, other node) from the
    /// root, compared element by element (a path before the paths under it): a sorted map's
    /// order of paths keyed by those lists.
    pub(crate) fn sorted(&self) -> Vec<usize> {
        let mut children = vec![Vec::new(); self.paths.len()];
        let mut roots = Vec::new();
        for (id, &(parent, _)) in self.paths.iter().enumerate() {
            match parent {
                Some(p) => children[p].push(id),
                None => roots.push(id),
            }
        }
        let key = |&id: &usize| {
            let n = self.paths[id].1;
            (n.name.as_str(), n.target.as_str(), n.other)
        };
        let mut order = Vec::with_capacity(self.paths.len());
        // Depth first, the smallest key first: each level sorted, pushed last first.
        roots.sort_by(|a, b| key(b).cmp(&key(a)));
        let mut stack = roots;
        while let Some(id) = stack.pop() {
            order.push(id);
            let mut below = std::mem::take(&mut children[id]);
            below.sort_by(|a, b| key(b).cmp(&key(a)));
            stack.extend(below);
        }
        order
    }
}

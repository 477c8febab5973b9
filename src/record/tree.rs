//! The call tree on the hot path: each span's call path (its name under the chain of its
//! parents' names) as a node index, and per-thread statistics per node.
//!
//! The path follows each **entry**: a span entered while another span is entered on the same
//! thread is, for that entry, under that span's node (a model's layer created once and entered
//! in every forward pass sits under `forward`, and under `evaluate;forward` when evaluation
//! runs it); a span entered with nothing entered on its thread (a spawned task being polled)
//! keeps the node it was given when it opened: under its explicit parent
//! (`Attributes::parent`) or, for a contextual span, the span its thread was in. So every
//! node's busy time is its self time plus its children's busy time, entry by entry. The node of (parent node, name) is found
//! in a lock-free open-addressing table (64 KiB, made when the tree is on); the first span of a
//! new (parent, name) pair makes its node under the tree's lock (once per pair, like the first
//! span of a callsite). The table caches up to 4096 pairs: past that (more distinct pairs than
//! a program with bounded paths makes), a new pair is found under the lock at each span.
//!
//! Paths stay finite and bounded:
//! - **Recursion collapses**: a name already on the parent's path maps to that ancestor's node.
//! - **Bounds**: at most [`MAX_TREE_NODES`] nodes of span names and depth [`MAX_TREE_DEPTH`];
//!   a span beyond them is counted in the **other** node of its parent (one per parent, made
//!   when first needed, so at most `2 × MAX_TREE_NODES + 1` nodes in all); an other node's
//!   descendants are counted in it. Nothing is lost.
//!
//! Per node and per thread that records it ([`NodeStats`]): calls (entries), single-writer
//! HDR histograms of the entries' busy and self time with their exact sums (the same
//! [`AtomicHist`] as the per-name statistics; one record for an entry with no child time, two
//! otherwise: [`NODE_KINDS`]), the instances closed and their wall time (in the node of the
//! instance's last entry), and the spans the back-off left out at this path with their
//! estimated busy time. About 300 bytes per node and thread, plus about 9 KiB per histogram
//! once it holds a sample.

use std::collections::HashMap;
use std::sync::atomic::{
    AtomicU16, AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};
use std::sync::{Arc, Mutex};

use tracing_core::span::Attributes;

use hdrhistogram::Histogram;

use super::collect::Merged;
use super::hist::{new_histogram, AtomicHist, Exact};
use super::names::{Kind, NameInfo, INSTANCE_BUSY, INSTANCE_SELF, KINDS};
use super::shards::{bump, Local, LocalList, OpenView, Shard, Unused};
use super::{Closed, Recorder, Slot};
use crate::profile::{CallTree, TreeNode};

/// Most nodes of span names in the call tree; beyond, spans are counted in their parent's
/// other node.
pub const MAX_TREE_NODES: usize = 1024;
/// Deepest call path (in spans); deeper spans are counted in their parent's other node.
pub const MAX_TREE_DEPTH: usize = 32;

/// The node of spans with no recorded parent's node (the tree's root; not reported).
pub(crate) const ROOT: u16 = 0;
/// The name of an other node.
const OTHER: u32 = u16::MAX as u32;

/// Lookup table length: (parent, name) pairs cached, at most half full.
const TABLE_LEN: usize = 8 * MAX_TREE_NODES;
const TABLE_BITS: u32 = TABLE_LEN.trailing_zeros();
const MAX_ENTRIES: usize = TABLE_LEN / 2;
const _: () = assert!(TABLE_LEN.is_power_of_two());
const _: () = assert!(2 * MAX_TREE_NODES + 1 < u16::MAX as usize);
const _: () = assert!(super::names::MAX_SPAN_NAMES < u16::MAX as usize);

/// A node's histograms of entries, as the per-name kinds they are merged like: an entry with
/// child time is one record of its busy time (`Busy`) and one of its self time (`SelfTime`);
/// an entry without (a leaf) one record of both (`SingleLeaf`, counted in the busy and the
/// self time).
pub(crate) const NODE_KINDS: [Kind; NODE_HISTS] = [Kind::Busy, Kind::SelfTime, Kind::SingleLeaf];
const NODE_HISTS: usize = 3;
const NODE_BUSY: usize = 0;
const NODE_SELF: usize = 1;
const NODE_LEAF: usize = 2;

#[derive(Debug, Clone, Copy)]
struct NodeInfo {
    parent: u16,
    /// Name index, [`OTHER`] for an other node.
    name: u32,
    depth: u16,
    /// The node's other child, 0 until made.
    other: u16,
}

#[derive(Debug)]
struct State {
    nodes: Vec<NodeInfo>,
    /// Every (parent, name) pair decided, with its node: the lock-free table's source of truth
    /// (two threads may miss the table for the same new pair at once; past the table's
    /// capacity, pairs are found here, under the lock).
    pairs: HashMap<(u16, u32), u16>,
    /// Nodes of span names (not other nodes), the root excluded.
    named: usize,
    entries: usize,
}

/// The call tree of one recorder.
pub(crate) struct Tree {
    /// (parent, name) → node, packed as `1 << 63 | parent << 32 | name << 16 | node`; 0 is an
    /// empty entry. Entries are only ever added.
    table: Box<[AtomicU64]>,
    /// Each node's parent, set before the node is published (in the table, with `Release`):
    /// an entry whose node's parent is the node of the span entered below it keeps its node
    /// without a table lookup (`Recorder::entry_node`).
    parents: Box<[AtomicU16]>,
    state: Mutex<State>,
    /// Histogram counts drained from the threads' node histograms (rare), per node.
    spill: Mutex<Vec<[Option<Histogram<u64>>; NODE_HISTS]>>,
}

impl std::fmt::Debug for Tree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tree").finish_non_exhaustive()
    }
}

#[inline(always)]
fn key(parent: u16, name: u32) -> u64 {
    1 << 47 | u64::from(parent) << 16 | u64::from(name & 0xFFFF)
}

#[inline(always)]
fn home(key: u64) -> usize {
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - TABLE_BITS)) as usize
}

impl Tree {
    pub(crate) fn new() -> Self {
        crate::alloc::untracked(|| Self {
            table: (0..TABLE_LEN).map(|_| AtomicU64::new(0)).collect(),
            parents: (0..2 * MAX_TREE_NODES + 2)
                .map(|_| AtomicU16::new(ROOT))
                .collect(),
            state: Mutex::new(State {
                nodes: vec![NodeInfo {
                    parent: ROOT,
                    name: OTHER,
                    depth: 0,
                    other: 0,
                }],
                pairs: HashMap::new(),
                named: 0,
                entries: 0,
            }),
            spill: Mutex::new(Vec::new()),
        })
    }

    /// The node of a span named `name` (index) whose parent is in node `parent`.
    #[inline(always)]
    pub(crate) fn child(&self, parent: u16, name: u32) -> u16 {
        let key = key(parent, name);
        let mut i = home(key);
        for _ in 0..TABLE_LEN {
            let entry = self.table[i].load(Acquire);
            if entry == 0 {
                break;
            }
            if entry >> 16 == key {
                return entry as u16;
            }
            i = (i + 1) & (TABLE_LEN - 1);
        }
        self.insert(parent, name)
    }

    /// Finds or makes the node of a new (parent, name) pair, and caches it.
    #[cold]
    #[inline(never)]
    fn insert(&self, parent: u16, name: u32) -> u16 {
        crate::alloc::untracked(|| {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(&node) = state.pairs.get(&(parent, name)) {
                // Decided by another thread since this one missed the table, or past its
                // capacity.
                return node;
            }
            let node = state.node_of(parent, name);
            if let Some(p) = self.parents.get(usize::from(node)) {
                p.store(state.nodes[usize::from(node)].parent, Release);
            }
            state.pairs.insert((parent, name), node);
            if state.entries < MAX_ENTRIES {
                let key = key(parent, name);
                let mut i = home(key);
                loop {
                    let entry = self.table[i].load(Relaxed);
                    if entry == 0 {
                        self.table[i].store(key << 16 | u64::from(node), Release);
                        state.entries += 1;
                        break;
                    }
                    if entry >> 16 == key {
                        break;
                    }
                    i = (i + 1) & (TABLE_LEN - 1);
                }
            }
            node
        })
    }

    /// Adds a thread's full node histogram to the node's spill (rare).
    #[cold]
    #[inline(never)]
    pub(crate) fn drain(&self, node: u16, stats: &NodeStats, which: usize) {
        crate::alloc::untracked(|| {
            let mut spill = self.spill.lock().unwrap_or_else(|e| e.into_inner());
            let index = usize::from(node);
            if spill.len() <= index {
                spill.resize_with(index + 1, Default::default);
            }
            stats.hists[which].drain_into(spill[index][which].get_or_insert_with(new_histogram));
        });
    }

    /// The parent of `node` (the root for the root, or for a node not yet visible here).
    #[inline(always)]
    fn parent_of(&self, node: u16) -> u16 {
        self.parents
            .get(usize::from(node))
            .map_or(ROOT, |p| p.load(Relaxed))
    }

    /// Records an entry of `node` that completed: a call, and its busy and self time
    /// (`detached`: entered with nothing entered below it on its thread).
    #[inline(always)]
    fn entry(&self, node: u16, stats: &NodeStats, busy: u64, self_ns: u64, detached: bool) {
        bump(&stats.calls, 1);
        if detached && self.parent_of(node) != ROOT {
            bump(&stats.detached_ns, busy);
        }
        if busy == self_ns {
            self.record(node, stats, NODE_LEAF, busy);
        } else {
            self.record(node, stats, NODE_BUSY, busy);
            self.record(node, stats, NODE_SELF, self_ns);
        }
    }

    #[inline(always)]
    fn record(&self, node: u16, stats: &NodeStats, which: usize, value: u64) {
        if stats.hists[which].record(value) {
            self.drain(node, stats, which);
        }
    }

    /// Records a closed instance in the node of its last entry: its count and wall time.
    #[inline(always)]
    fn close(stats: &NodeStats, c: &Closed) {
        bump(&stats.instances, 1);
        bump(&stats.wall, c.wall);
    }

    /// Every node's figures merged over every shard (index 0: the root), for a snapshot.
    pub(super) fn merged(&self, shards: &[Arc<Shard>]) -> Vec<MergedNode> {
        let infos = self
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .nodes
            .clone();
        let per_shard: Vec<_> = shards.iter().map(|s| s.nodes.all()).collect();
        let spill = self.spill.lock().unwrap_or_else(|e| e.into_inner());
        let mut nodes = Vec::with_capacity(infos.len());
        for (index, info) in infos.iter().enumerate() {
            let mut hists: [Histogram<u64>; NODE_HISTS] = std::array::from_fn(|k| {
                spill
                    .get(index)
                    .and_then(|s| s[k].clone())
                    .unwrap_or_else(new_histogram)
            });
            let mut exact = [Exact::default(); NODE_HISTS];
            let (mut calls, mut instances, mut wall) = (0u64, 0u64, 0u64);
            let (mut skipped, mut skipped_ns, mut detached_ns) = (0u64, 0u64, 0u64);
            for shard in &per_shard {
                let Some(Some(stats)) = shard.get(index) else {
                    continue;
                };
                calls += stats.calls.load(Relaxed);
                instances += stats.instances.load(Relaxed);
                wall = wall.saturating_add(stats.wall.load(Relaxed));
                skipped += stats.skipped.load(Relaxed);
                detached_ns = detached_ns.saturating_add(stats.detached_ns.load(Relaxed));
                skipped_ns = skipped_ns.saturating_add(stats.skipped_ns.load(Relaxed));
                for k in 0..NODE_HISTS {
                    stats.hists[k].add_to(&mut hists[k]);
                    exact[k].merge(&stats.hists[k].exact());
                }
            }
            // Indexed by kind, as a name's: the kinds a node does not keep stay empty.
            let mut kinds = Merged {
                hists: std::array::from_fn(|_| new_histogram()),
                exact: [Exact::default(); KINDS],
            };
            for ((kind, h), e) in NODE_KINDS.iter().zip(hists).zip(exact) {
                kinds.hists[*kind as usize] = h;
                kinds.exact[*kind as usize] = e;
            }
            nodes.push(MergedNode {
                parent: info.parent,
                name: (index != usize::from(ROOT) && info.name != OTHER).then_some(info.name),
                calls,
                instances,
                wall,
                skipped,
                skipped_ns,
                detached_ns,
                kinds,
            });
        }
        nodes
    }

    /// The tree as the profile model, from [`Tree::merged`]: every node of a span name or an
    /// other node, parents before children.
    /// `gpu`: the GPU time per node id (entries, ns), where spans are timed on the GPU.
    pub(super) fn snapshot(
        &self,
        merged: &[MergedNode],
        names: &[Arc<NameInfo>],
        gpu: &std::collections::HashMap<u32, (u64, u64)>,
    ) -> CallTree {
        // A node nothing was recorded in, nor below it (the path a span opened in and left
        // for its entries' paths before any entry there), is not reported. Parents come before
        // children: one pass from the leaves marks the nodes kept.
        let mut used: Vec<bool> = merged
            .iter()
            .map(|n| n.calls > 0 || n.instances > 0 || n.skipped > 0)
            .collect();
        for i in (1..merged.len()).rev() {
            if used[i] {
                if let Some(p) = used.get_mut(usize::from(merged[i].parent)) {
                    *p = true;
                }
            }
        }
        // Each kept node's index in the profile's tree (the root, node 0, is not reported).
        let mut index = vec![None; merged.len()];
        let mut nodes = Vec::with_capacity(merged.len().saturating_sub(1));
        for (i, node) in merged.iter().enumerate().skip(1) {
            if !used[i] {
                continue;
            }
            index[i] = Some(nodes.len() as u32);
            // Busy time: every kind's busy; self time: every kind's self (a leaf's counts in
            // both), as for a name's entries.
            let busy = node.kinds.sum(&INSTANCE_BUSY);
            let self_time = node.kinds.sum(&INSTANCE_SELF);
            let (gpu_calls, gpu_ns) = gpu.get(&(i as u32)).copied().unwrap_or((0, 0));
            let (name, target) = match node.name.and_then(|n| names.get(n as usize)) {
                Some(n) => (n.name.to_string(), n.target.to_string()),
                None => (TreeNode::OTHER.to_string(), String::new()),
            };
            nodes.push(TreeNode {
                name,
                target,
                other: node.name.is_none(),
                parent: index.get(usize::from(node.parent)).copied().flatten(),
                calls: node.calls,
                instances: node.instances,
                busy: busy.stat(),
                self_time: self_time.stat(),
                wall_ns: node.wall,
                detached_ns: node.detached_ns,
                skipped: node.skipped,
                skipped_ns: node.skipped_ns,
                gpu_calls,
                gpu_ns,
            });
        }
        CallTree::new(nodes, MAX_TREE_NODES as u32, MAX_TREE_DEPTH as u32)
    }
}

/// One node's figures merged over every shard ([`Tree::merged`]).
#[derive(Debug)]
pub(super) struct MergedNode {
    parent: u16,
    /// The span name's index; `None` for the root and other nodes.
    pub(super) name: Option<u32>,
    calls: u64,
    instances: u64,
    wall: u64,
    skipped: u64,
    skipped_ns: u64,
    detached_ns: u64,
    /// The entries' histograms ([`NODE_KINDS`]), indexed by kind as a name's are.
    pub(super) kinds: Merged,
}

impl State {
    /// The node of (parent, name): an ancestor of that name (recursion), the parent's other
    /// node past the bounds (or when the parent is one), else a new node.
    fn node_of(&mut self, parent: u16, name: u32) -> u16 {
        let Some(&p) = self.nodes.get(usize::from(parent)) else {
            return ROOT;
        };
        if parent != ROOT && p.name == OTHER {
            return parent;
        }
        let mut at = parent;
        while at != ROOT {
            let info = self.nodes[usize::from(at)];
            if info.name == name {
                return at;
            }
            at = info.parent;
        }
        if usize::from(p.depth) >= MAX_TREE_DEPTH || self.named >= MAX_TREE_NODES {
            if p.other != 0 {
                return p.other;
            }
            let other = self.push(parent, OTHER, p.depth + 1);
            self.nodes[usize::from(parent)].other = other;
            return other;
        }
        self.named += 1;
        self.push(parent, name, p.depth + 1)
    }

    fn push(&mut self, parent: u16, name: u32, depth: u16) -> u16 {
        let node = self.nodes.len() as u16;
        self.nodes.push(NodeInfo {
            parent,
            name,
            depth,
            other: 0,
        });
        node
    }
}

/// What one thread recorded for one node. Written only by that thread.
#[derive(Debug)]
pub(crate) struct NodeStats {
    /// Entries completed.
    pub(crate) calls: AtomicU64,
    /// Instances closed (in the node of their last entry).
    instances: AtomicU64,
    /// Wall time of closed instances, ns.
    wall: AtomicU64,
    /// Busy time of the entries made with nothing entered below them on their thread, ns.
    detached_ns: AtomicU64,
    /// Spans the back-off left out at this path.
    skipped: AtomicU64,
    /// Their estimated busy time, ns (what their parents' child time got).
    skipped_ns: AtomicU64,
    /// The entries' busy and self time ([`NODE_KINDS`]).
    hists: [AtomicHist; NODE_HISTS],
}

impl NodeStats {
    const fn new() -> Self {
        Self {
            calls: AtomicU64::new(0),
            instances: AtomicU64::new(0),
            wall: AtomicU64::new(0),
            detached_ns: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            skipped_ns: AtomicU64::new(0),
            hists: [const { AtomicHist::new() }; NODE_HISTS],
        }
    }
}

/// Never recorded into in practice (see [`LocalList::get`]).
static UNUSED: NodeStats = NodeStats::new();

impl Unused for NodeStats {
    fn unused() -> &'static Self {
        &UNUSED
    }
}

/// A shard's node stats, by node: for snapshots.
#[derive(Debug, Default)]
pub(crate) struct ShardNodes(Mutex<Vec<Option<Arc<NodeStats>>>>);

impl ShardNodes {
    pub(crate) fn all(&self) -> Vec<Option<Arc<NodeStats>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The stats of `node` in this shard, made if new (locks the shard's list).
    fn get_or_make(&self, node: u16) -> Arc<NodeStats> {
        crate::alloc::untracked(|| {
            let mut list = self.0.lock().unwrap_or_else(|e| e.into_inner());
            let index = usize::from(node);
            if list.len() <= index {
                list.resize(index + 1, None);
            }
            list[index]
                .get_or_insert_with(|| Arc::new(NodeStats::new()))
                .clone()
        })
    }

    /// The stats of `node`, for the one writer that holds the shard alone (the orphan shard
    /// under its lock).
    pub(crate) fn orphan(&self, node: u16) -> Arc<NodeStats> {
        self.get_or_make(node)
    }
}

/// A thread's view of its shard's node stats: no lock, no atomic.
#[derive(Debug, Default)]
pub(crate) struct LocalNodes(LocalList<NodeStats>);

impl LocalNodes {
    /// The adopted shard's stats.
    pub(crate) fn of(shard: &ShardNodes) -> Self {
        Self(LocalList(shard.all()))
    }

    /// The stats of `node`, made on first use.
    #[inline(always)]
    pub(crate) fn get(&mut self, node: u16, shard: &ShardNodes) -> &NodeStats {
        self.0
            .get(usize::from(node), |i| shard.get_or_make(i as u16))
    }
}

/// The recorder's hooks: each does nothing when the tree is off.
impl Recorder {
    /// The node of a span named `name` opening with `attrs`: under its explicit parent's node,
    /// or (contextual) under the node of the span this thread is in.
    ///
    /// `view`: this thread's state (`None` while it is torn down: the root, for a contextual
    /// span), whose stats of `name` remember the last (parent, node) pair found
    /// (`NameStats::tree_memo`): a span under the same parent as the last one of its name on
    /// this thread takes its node from there.
    #[inline(always)]
    pub(super) fn tree_node(
        &self,
        name: u32,
        attrs: &Attributes<'_>,
        view: Option<&OpenView<'_>>,
    ) -> u16 {
        let Some(tree) = &*self.tree else {
            return ROOT;
        };
        let parent = match attrs.parent() {
            Some(id) => self
                .table
                .with(id.into_u64(), |slot| slot.node.load(Relaxed))
                .unwrap_or(ROOT),
            None if attrs.is_contextual() => view.map_or(ROOT, |v| v.top),
            None => ROOT,
        };
        let Some(view) = view else {
            return tree.child(parent, name);
        };
        let memo = &view.stats.tree_memo;
        let last = memo.load(Relaxed);
        if last >> 16 == u32::from(parent) {
            return last as u16;
        }
        let node = tree.child(parent, name);
        memo.store(u32::from(parent) << 16 | u32::from(node), Relaxed);
        node
    }

    /// The node of an entry of the span in `slot` (named `name`) on this thread: under the
    /// node of the span entered below it (the top of `local`'s stack), else the node the span
    /// has (its last entry's, or the one it opened in). A span entered under another parent
    /// than last time takes the node of that path, and keeps it for its instance and for its
    /// children with an explicit parent.
    #[inline(always)]
    pub(super) fn entry_node(&self, local: &Local, slot: &Slot, name: u32) -> u16 {
        let node = slot.node.load(Relaxed);
        let Some(tree) = &*self.tree else {
            return node;
        };
        match local.stack.last() {
            Some(top) if tree.parent_of(node) != top.node => {
                Self::entry_node_moved(tree, slot, top.node, name, node)
            }
            _ => node,
        }
    }

    /// [`Recorder::entry_node`] for an entry under another parent than the span's node (or in
    /// a recursion, whose node is an ancestor's): a table lookup.
    #[inline(never)]
    fn entry_node_moved(tree: &Tree, slot: &Slot, parent: u16, name: u32, node: u16) -> u16 {
        let moved = tree.child(parent, name);
        if moved != node {
            slot.node.store(moved, Relaxed);
        }
        moved
    }

    /// An entry of a span in `node` completed on this thread: its call, busy and self time
    /// (`detached`: it was the bottom of this thread's stack).
    #[inline(always)]
    pub(super) fn tree_entry(
        &self,
        local: &mut Local,
        node: u16,
        busy: u64,
        self_ns: u64,
        detached: bool,
    ) {
        if let Some(tree) = &*self.tree {
            tree.entry(node, local.node_stats(node), busy, self_ns, detached);
        }
    }

    /// A span of `name` the back-off left out (`attrs`: its attributes) with `mean_ns`, its
    /// estimated busy time: a call of its node, counted as left out with that estimate.
    pub(super) fn tree_sampled_out(
        &self,
        local: &mut Local,
        name: u32,
        attrs: &Attributes<'_>,
        mean_ns: u64,
    ) {
        if self.tree.is_none() {
            return;
        }
        let node = {
            let view = local.open_view(name);
            self.tree_node(name, attrs, Some(&view))
        };
        let stats = local.node_stats(node);
        bump(&stats.calls, 1);
        bump(&stats.skipped, 1);
        bump(&stats.skipped_ns, mean_ns);
    }

    /// [`Recorder::overshot`] in the tree: `back` ns taken from the estimate of `name`'s node
    /// under `parent`.
    pub(super) fn tree_overshot(&self, local: &mut Local, parent: u16, name: u32, back: u64) {
        let Some(tree) = &*self.tree else {
            return;
        };
        let stats = local.node_stats(tree.child(parent, name));
        let back = back.min(stats.skipped_ns.load(Relaxed));
        stats.skipped_ns.fetch_sub(back, Relaxed);
    }

    /// A span closed on this thread (`local`: its state; `None` while it is torn down: the
    /// orphan shard): its instance, counted in its node.
    #[inline(always)]
    pub(super) fn tree_close(&self, local: Option<&mut Local>, c: &Closed) {
        if self.tree.is_none() {
            return;
        }
        match local {
            Some(local) => Tree::close(local.node_stats(c.node), c),
            None => self
                .shards
                .with_orphan_node(c.node, |stats| Tree::close(stats, c)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_gets_one_node_and_recursion_collapses() {
        let tree = Tree::new();
        let a = tree.child(ROOT, 1);
        let b = tree.child(a, 2);
        assert_ne!(a, b);
        assert_eq!(tree.child(ROOT, 1), a);
        assert_eq!(tree.child(a, 2), b);
        // b under a, then a again: a's node, not a deeper one.
        assert_eq!(tree.child(b, 1), a);
        // Same name under another parent: another node.
        let c = tree.child(ROOT, 3);
        assert_ne!(tree.child(c, 2), b);
    }

    #[test]
    fn a_pair_two_threads_miss_at_once_gets_one_node() {
        let tree = Tree::new();
        let a = tree.child(ROOT, 1);
        // What the second of two threads that both missed the lock-free table does.
        let first = tree.insert(a, 2);
        let second = tree.insert(a, 2);
        assert_eq!(first, second);
        assert_eq!(tree.state.lock().unwrap().nodes.len(), 3, "root, a, a;b");
        // Many threads creating the same new paths at once: one node per path.
        let tree = std::sync::Arc::new(Tree::new());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let tree = tree.clone();
                std::thread::spawn(move || {
                    (0..200u32)
                        .map(|n| tree.child(tree.child(ROOT, n % 50), 1000 + n % 7))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let results: Vec<Vec<u16>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        assert!(
            results.windows(2).all(|w| w[0] == w[1]),
            "every thread got the same nodes"
        );
        let nodes = tree.state.lock().unwrap().nodes.len();
        // 50 parents, and 200 distinct (parent, child) pairs (50 and 7 are coprime).
        assert_eq!(nodes, 1 + 50 + 200, "no duplicate node");
    }

    #[test]
    fn past_the_node_bound_spans_go_to_their_parents_other_node() {
        let tree = Tree::new();
        let root_child = tree.child(ROOT, 0);
        for name in 1..MAX_TREE_NODES as u32 {
            tree.child(root_child, name);
        }
        assert_eq!(tree.state.lock().unwrap().named, MAX_TREE_NODES);
        let other = tree.child(root_child, 2000);
        let again = tree.child(root_child, 2001);
        assert_eq!(other, again, "one other node per parent");
        // Its descendants are counted in it.
        assert_eq!(tree.child(other, 7), other);
        let nodes = tree.state.lock().unwrap().nodes.clone();
        assert_eq!(nodes[usize::from(other)].name, OTHER);
        assert_eq!(nodes[usize::from(other)].parent, root_child);
        // Known paths keep their nodes.
        assert_eq!(tree.child(ROOT, 0), root_child);
    }

    #[test]
    fn past_the_depth_bound_spans_go_to_their_parents_other_node() {
        let tree = Tree::new();
        let mut node = ROOT;
        for name in 0..MAX_TREE_DEPTH as u32 {
            node = tree.child(node, name);
        }
        let deepest = node;
        let other = tree.child(deepest, 100);
        let nodes = tree.state.lock().unwrap().nodes.clone();
        assert_eq!(nodes[usize::from(deepest)].depth as usize, MAX_TREE_DEPTH);
        assert_eq!(nodes[usize::from(other)].name, OTHER);
        assert_eq!(tree.child(deepest, 101), other);
    }
}

//! Per-thread shards: where the hot path records, and what a snapshot merges.
//!
//! Each thread that records gets a [`Shard`] of its own (per profiler instance), reached through
//! a `thread_local!`. Only that thread writes it; snapshots read it through relaxed atomics. The
//! instance keeps every shard in a list, so a thread that exits loses nothing; a new thread
//! adopts a shard left by an exited one, so memory is bounded by the most threads alive at once.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{
    AtomicBool, AtomicU32, AtomicU64, AtomicUsize,
    Ordering::{Acquire, Relaxed, Release},
};
use std::sync::{Arc, Mutex, Weak};

use super::hist::AtomicHist;
use super::metrics::MetricCell;
use super::names::{Kind, KINDS};
use super::overhead::EntryCost;
use super::resources::{EntryMark, InstanceFigures, ResourceSlot, ResourceStats};
use super::spans::RegionClaim;
use super::tree::{LocalNodes, NodeStats, ShardNodes};

/// What one thread recorded for one span name. Aligned so that two threads' stats never share
/// a cache line.
#[derive(Debug)]
#[repr(align(128))]
pub(crate) struct NameStats {
    pub(crate) hists: [AtomicHist; KINDS],
    pub(crate) items: AtomicU64,
    pub(crate) bytes: AtomicU64,
    pub(crate) flops: AtomicU64,
    pub(crate) errors: AtomicU64,
    /// Spans opened (created and recorded) by this thread. With `closed` these are the exact
    /// counts of a snapshot, whatever the histograms hold at that instant.
    pub(crate) opened: AtomicU64,
    /// Spans closed on this thread.
    pub(crate) closed: AtomicU64,
    /// Entries (enter→exit) completed on this thread.
    pub(crate) entries: AtomicU64,
    /// Spans closed on this thread that had an error-level event inside.
    pub(crate) errored_instances: AtomicU64,
    /// Resource sums, made on first use (`detailed` and `full`).
    pub(crate) res: ResourceSlot,
    /// What spanprof spends in this name's entries, and whether their CPU time is read.
    pub(crate) cost: EntryCost,
    /// The call-tree node this thread last found for a span of this name, and its parent's:
    /// `parent << 16 | node` (`u32::MAX`: none; no node is a parent's `0xFFFF`). A pair's node
    /// never changes, so a loop's spans skip the tree's table (`tree::Tree::child`).
    pub(crate) tree_memo: AtomicU32,
    /// The estimated busy time of the spans of this name the back-off left out on this
    /// thread, ns: what their parents' child time got (`Recorder::sample_out`).
    pub(crate) sampled_out_ns: AtomicU64,
}

/// Never recorded into in practice (see [`LocalList::get`]).
static UNUSED: NameStats = NameStats::new();

impl Unused for NameStats {
    fn unused() -> &'static Self {
        &UNUSED
    }
}

/// Stats no thread records into: what a [`LocalList`] lookup would return if the entry it has
/// just made were missing (it never is).
pub(crate) trait Unused: 'static {
    fn unused() -> &'static Self;
}

/// A thread's view of one of its shard's lists of stats (by span name, by call-tree node): no
/// lock, no atomic. A lookup is a bounds test and a null test; an entry is made on first use,
/// out of line.
#[derive(Debug)]
pub(crate) struct LocalList<T>(pub(crate) Vec<Option<Arc<T>>>);

impl<T> Default for LocalList<T> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<T: Unused> LocalList<T> {
    /// The entry at `index`, made on first use by `make` (given `index`; called with the
    /// allocation counters off).
    #[inline(always)]
    pub(crate) fn get(&mut self, index: usize, make: impl FnOnce(usize) -> Arc<T>) -> &T {
        if !matches!(self.0.get(index), Some(Some(_))) {
            // Returned from here, so the found entry's pointer is tested once.
            return self.fill(index, make);
        }
        self.0
            .get(index)
            .and_then(Option::as_deref)
            .unwrap_or(T::unused())
    }

    #[cold]
    #[inline(never)]
    fn fill(&mut self, index: usize, make: impl FnOnce(usize) -> Arc<T>) -> &T {
        crate::alloc::untracked(|| {
            let made = make(index);
            if self.0.len() <= index {
                self.0.resize(index + 1, None);
            }
            self.0[index] = Some(made);
        });
        self.0[index].as_deref().unwrap_or(T::unused())
    }
}

impl NameStats {
    pub(crate) const fn new() -> Self {
        Self {
            hists: [const { AtomicHist::new() }; KINDS],
            items: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            flops: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            opened: AtomicU64::new(0),
            closed: AtomicU64::new(0),
            entries: AtomicU64::new(0),
            errored_instances: AtomicU64::new(0),
            res: ResourceSlot::new(),
            cost: EntryCost::new(),
            tree_memo: AtomicU32::new(u32::MAX),
            sampled_out_ns: AtomicU64::new(0),
        }
    }

    /// The resource sums.
    pub(crate) fn res(&self) -> &ResourceStats {
        self.res
            .get_or_init(|| crate::alloc::untracked(Box::default))
    }

    #[inline(always)]
    pub(crate) fn hist(&self, kind: Kind) -> &AtomicHist {
        &self.hists[kind as usize]
    }
}

/// Adds to a single-writer counter without a locked instruction.
#[inline(always)]
pub(crate) fn bump(counter: &AtomicU64, by: u64) {
    counter.store(counter.load(Relaxed).wrapping_add(by), Relaxed);
}

/// One thread's records: the stats of every span name it recorded. The owning thread reaches
/// them through its [`Local`] without a lock; the list here is for snapshots (and for a thread
/// that adopts the shard), and is locked only when a thread records a name for the first time.
#[derive(Debug, Default)]
pub(crate) struct Shard {
    names: Mutex<Vec<Option<Arc<NameStats>>>>,
    /// Set when the owning thread exited; the next new thread may adopt the shard.
    retired: AtomicBool,
    /// The owning thread's stack of entered spans as others can read it: for the time inside
    /// entries still in progress at a snapshot.
    live: LiveStack,
    /// The call tree's stats of the nodes this shard recorded.
    pub(crate) nodes: ShardNodes,
    /// The metric cells of this shard: (metric id, span name index, cell). Locked when a
    /// thread records a metric in a span name for the first time, and by snapshots.
    metrics: Mutex<Vec<(u32, u32, Arc<MetricCell>)>>,
    /// Callbacks of recorded spans this thread timed whole (`overhead::probe_due`): their
    /// count and their time, ns. Written by the owning thread only.
    pub(crate) probed: AtomicU64,
    pub(crate) probed_ns: AtomicU64,
}

impl Shard {
    /// The stats of every name this shard recorded, by name index.
    pub(crate) fn names(&self) -> Vec<Option<Arc<NameStats>>> {
        self.names.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Calls `f(name, start)` for each entry in progress on the owning thread (the outermost
    /// [`LIVE_FRAMES`]). A snapshot's view: a frame entered or exited meanwhile may be seen or
    /// not.
    pub(crate) fn entries_in_progress(&self, mut f: impl FnMut(u32, u64)) {
        let depth = (self.live.depth.load(Acquire) as usize).min(LIVE_FRAMES);
        for frame in &self.live.frames[..depth] {
            let name = frame.name.load(Acquire);
            f(name, frame.start.load(Relaxed));
        }
    }

    /// Every metric cell of this shard: (metric id, span name index, cell).
    pub(crate) fn metrics(&self) -> Vec<(u32, u32, Arc<MetricCell>)> {
        self.metrics
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The cell of a metric in a span name in this shard, made if new (a thread adopting a
    /// shard finds the cells of the thread before it).
    fn metric_cell(&self, metric: u32, span: u32) -> Arc<MetricCell> {
        let mut metrics = self.metrics.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, _, cell)) = metrics.iter().find(|(m, s, _)| *m == metric && *s == span) {
            return cell.clone();
        }
        let cell = Arc::new(MetricCell::new());
        metrics.push((metric, span, cell.clone()));
        cell
    }

    /// The stats of a name in this shard, made if new (locks the shard's list).
    fn stats(&self, name: u32) -> Arc<NameStats> {
        let mut names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        let index = name as usize;
        if names.len() <= index {
            names.resize(index + 1, None);
        }
        names[index]
            .get_or_insert_with(|| Arc::new(NameStats::new()))
            .clone()
    }
}

/// Entries in progress a thread publishes (deeper ones are not counted as in progress).
pub(crate) const LIVE_FRAMES: usize = 64;

/// A thread's entered spans, published for snapshots: written only by the owning thread.
#[derive(Debug)]
struct LiveStack {
    depth: AtomicU32,
    frames: [LiveFrame; LIVE_FRAMES],
}

impl Default for LiveStack {
    fn default() -> Self {
        Self {
            depth: AtomicU32::new(0),
            frames: std::array::from_fn(|_| LiveFrame::default()),
        }
    }
}

#[derive(Debug, Default)]
struct LiveFrame {
    name: AtomicU32,
    /// Raw clock reading of the enter.
    start: AtomicU64,
}

/// A span entered on this thread and not yet exited.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Frame {
    pub(crate) id: u64,
    pub(crate) name: u32,
    pub(crate) start: u64,
    pub(crate) child_ns: u64,
    /// spanprof's own time inside this entry (its children's resource readings), ns: not the
    /// span's (see `overhead`).
    pub(crate) own_ns: u64,
    /// Of `own_ns`, spanprof's own work (the readings' calibrated cost, waits in them left
    /// out: a thread switched out uses no CPU time), ns: what its CPU time leaves out.
    pub(crate) own_cpu_ns: u64,
    /// Its start in the thread's virtual time when entered with readings on (`overhead`); 0
    /// when timed by the raw clock.
    pub(crate) v_start: u64,
    pub(crate) reentries: u32,
    /// The span's call-tree node.
    pub(crate) node: u16,
    /// What its enter started besides time, in bits ([`MARK_READINGS`], [`MARK_GPU`]); 0
    /// for a plain entry (its exit tests this byte and nothing else).
    pub(crate) marked: u8,
}

/// [`Frame::marked`]: resource readings were taken at its enter: its [`EntryMark`] is on the
/// thread's mark stack.
pub(crate) const MARK_READINGS: u8 = 1;
/// [`Frame::marked`]: a GPU timing pair was started at its enter (feature `cuda`): its pair is
/// on the thread's GPU stack (`gpu::GpuLocal`).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) const MARK_GPU: u8 = 2;

/// The shard list of one profiler instance.
#[derive(Debug, Default)]
pub(crate) struct Shards {
    list: Mutex<Vec<Arc<Shard>>>,
    /// Where a thread records when its thread-local state is gone (a span closed by a
    /// thread-local's destructor at thread exit): one shard written under this lock.
    orphan: Mutex<Option<Arc<Shard>>>,
    /// States of threads whose thread-local state was torn down while inside spans (a span
    /// entered in a `thread_local!` dropped later in the thread's exit, or a leaked guard):
    /// kept so that those entries' exits still find their frames (`Recorder::exit_slot`),
    /// and dropped once their frames are exited or their spans closed (`Shards::sweep_parked`).
    parked: Mutex<Vec<Local>>,
    /// How many states are in `parked` (read without the lock).
    parked_len: AtomicUsize,
}

impl Shards {
    /// Keeps the state of a thread being torn down inside spans (see `parked`).
    #[cold]
    fn park(&self, local: Box<Local>) {
        let mut parked = self.parked.lock().unwrap_or_else(|e| e.into_inner());
        crate::alloc::untracked(|| parked.push(*local));
        self.parked_len.store(parked.len(), Relaxed);
    }

    /// Runs `f` with the parked state of this thread (its token), if there is one; drops the
    /// state once its stack is empty. `None` when there is none, or when called inside `f`
    /// (a callback made by it: this thread holds the lock already).
    #[cold]
    #[inline(never)]
    pub(crate) fn with_parked<R>(&self, f: impl FnOnce(&mut Local) -> R) -> Option<R> {
        if self.parked_len.load(Relaxed) == 0 || IN_PARKED.with(Cell::get) {
            return None;
        }
        let token = thread_token();
        // A snapshot's sweep holds the lock briefly: waited for, not given up on.
        let mut parked = self.parked.lock().unwrap_or_else(|e| e.into_inner());
        let pos = parked.iter().position(|l| l.token == token)?;
        IN_PARKED.with(|p| p.set(true));
        let r = f(&mut parked[pos]);
        IN_PARKED.with(|p| p.set(false));
        if parked[pos].stack.is_empty() {
            let done = parked.swap_remove(pos);
            self.parked_len.store(parked.len(), Relaxed);
            drop(parked);
            crate::alloc::untracked(|| drop(done));
        }
        Some(r)
    }

    /// Drops the parked states none of whose frames' spans is open any more (`open(id)`):
    /// those frames can never be exited, and their entries are no longer in progress.
    pub(crate) fn sweep_parked(&self, open: impl Fn(u64) -> bool) {
        if self.parked_len.load(Relaxed) == 0 {
            return;
        }
        let gone: Vec<Local> = {
            let mut parked = self.parked.lock().unwrap_or_else(|e| e.into_inner());
            let (gone, kept) = std::mem::take(&mut *parked)
                .into_iter()
                .partition(|l| l.stack.iter().all(|f| !open(f.id)));
            *parked = kept;
            self.parked_len.store(parked.len(), Relaxed);
            gone
        };
        crate::alloc::untracked(|| drop(gone));
    }

    /// Runs `f` with the orphan shard's stats of `name` (rare: threads being torn down).
    #[cold]
    pub(crate) fn with_orphan<R>(&self, name: u32, f: impl FnOnce(&NameStats) -> R) -> R {
        self.with_orphan_shard(|shard| {
            let stats = crate::alloc::untracked(|| shard.stats(name));
            f(&stats)
        })
    }

    /// Runs `f` with the orphan shard's cell of a metric in a span name.
    #[cold]
    pub(crate) fn with_orphan_metric<R>(
        &self,
        metric: u32,
        span: u32,
        f: impl FnOnce(&MetricCell) -> R,
    ) -> R {
        self.with_orphan_shard(|shard| {
            let cell = crate::alloc::untracked(|| shard.metric_cell(metric, span));
            f(&cell)
        })
    }

    /// Runs `f` with the orphan shard's stats of call-tree node `node`, under the same lock.
    #[cold]
    pub(crate) fn with_orphan_node(&self, node: u16, f: impl FnOnce(&NodeStats)) {
        self.with_orphan_shard(|shard| {
            let stats = crate::alloc::untracked(|| shard.nodes.orphan(node));
            f(&stats);
        });
    }

    fn with_orphan_shard<R>(&self, f: impl FnOnce(&Shard) -> R) -> R {
        let mut orphan = self.orphan.lock().unwrap_or_else(|e| e.into_inner());
        let shard = orphan.get_or_insert_with(|| {
            crate::alloc::untracked(|| {
                let shard = Arc::new(Shard::default());
                self.list
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(shard.clone());
                shard
            })
        });
        // The lock is held while `f` writes: one writer at a time, as for any shard.
        f(shard)
    }

    fn acquire(&self) -> Arc<Shard> {
        let mut list = self.list.lock().unwrap_or_else(|e| e.into_inner());
        for shard in list.iter() {
            if shard
                .retired
                .compare_exchange(true, false, Relaxed, Relaxed)
                .is_ok()
            {
                return shard.clone();
            }
        }
        let shard = Arc::new(Shard::default());
        list.push(shard.clone());
        shard
    }

    pub(crate) fn all(&self) -> Vec<Arc<Shard>> {
        self.list.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// One thread's state for one profiler instance.
#[derive(Debug)]
pub(crate) struct Local {
    instance: u64,
    shard: Arc<Shard>,
    /// This thread's view of `shard`'s stats, indexed by name: no lock, no atomic.
    stats: LocalList<NameStats>,
    /// This thread's view of `shard`'s call-tree node stats.
    nodes: LocalNodes,
    /// This thread's metric cells, indexed by metric id: (span name index, cell) of each span
    /// name the metric was recorded in.
    metrics: Vec<Vec<(u32, Arc<MetricCell>)>>,
    pub(crate) stack: Vec<Frame>,
    /// Resource readings at the enter of each marked frame, in stack order.
    pub(crate) marks: Vec<EntryMark>,
    /// This thread's token ([`thread_token`]).
    pub(crate) token: u32,
    /// Time this thread spent in brackets of readings (`overhead`), ns: a timed callback
    /// (`Recorder::timed`) leaves it out, since the estimate counts it apart.
    pub(crate) bracketed_ns: u64,
    /// Raw clock reading at this thread's last enter whose CPU time was read (0: none), where
    /// reads keep a gap (`overhead::SWITCHING_READ_GAP_NS`).
    pub(crate) last_cpu_read: u64,
    /// Short entries still to pass over once the gap is over before one is read
    /// (`Recorder::cpu_due_after_gap`).
    pub(crate) gap_skip: u32,
    /// The span table's region this thread inserts its spans in (`spans::Regions`), once
    /// claimed; released with this state.
    region: Option<RegionClaim>,
    /// Whether this thread tried to claim a region (once: a region another thread holds is not
    /// asked for again).
    region_tried: bool,
    /// Where a close computes an instance's resource figures (made on first use, once per
    /// thread; `None` while in use).
    pub(crate) scratch: Option<Box<InstanceFigures>>,
    /// The name of the last span the back-off left out on this thread (`u32::MAX`: none):
    /// where a parent's estimated child time overshoots its busy time, the excess is taken
    /// back from that name's estimate (`Recorder::overshot`).
    pub(crate) last_sampled_out: u32,
    /// This thread's GPU timing pairs, made at its first entry of a span timed on the GPU.
    #[cfg(feature = "cuda")]
    pub(crate) gpu: Option<Box<super::gpu::GpuLocal>>,
    _owner: Weak<Shards>,
}

/// What opening a span needs of its thread's state, borrowed at once: one lookup of the name's
/// stats serves the call tree's memo and the name's count.
pub(crate) struct OpenView<'a> {
    /// This thread's stats of the span's name.
    pub(crate) stats: &'a NameStats,
    /// The call-tree node of the span this thread is in (the root if none).
    pub(crate) top: u16,
    /// This thread's token: the owner of the spans it opens.
    pub(crate) token: u32,
    region: &'a mut Option<RegionClaim>,
    region_tried: &'a mut bool,
}

impl OpenView<'_> {
    /// This thread's region of the span table, claimed (`claim`, given this thread's token) for
    /// the first span it opens; a region another thread holds is not asked for again.
    #[inline(always)]
    pub(crate) fn region(
        &mut self,
        claim: impl FnOnce(u32) -> Option<RegionClaim>,
    ) -> Option<&RegionClaim> {
        if self.region.is_none() && !*self.region_tried {
            *self.region_tried = true;
            *self.region = claim(self.token);
        }
        self.region.as_ref()
    }
}

impl Local {
    /// The parts of this thread's state that opening a span of `name` uses (its stats made on
    /// first use).
    #[inline(always)]
    pub(crate) fn open_view(&mut self, name: u32) -> OpenView<'_> {
        let shard = &self.shard;
        OpenView {
            stats: self.stats.get(name as usize, |i| shard.stats(i as u32)),
            top: self.stack.last().map_or(super::tree::ROOT, |f| f.node),
            token: self.token,
            region: &mut self.region,
            region_tried: &mut self.region_tried,
        }
    }

    /// This thread's scratch figures, made on its first use.
    #[inline(always)]
    pub(crate) fn take_scratch(&mut self) -> Box<InstanceFigures> {
        match self.scratch.take() {
            Some(figures) => figures,
            None => crate::alloc::untracked(Box::default),
        }
    }

    /// A callback of a recorded span took `ns`, timed whole.
    #[cold]
    pub(crate) fn probed(&self, ns: u64) {
        bump(&self.shard.probed, 1);
        bump(&self.shard.probed_ns, ns);
    }

    /// Pushes a frame and publishes it.
    #[inline(always)]
    pub(crate) fn push(&mut self, frame: Frame) {
        let depth = self.stack.len();
        if let Some(live) = self.shard.live.frames.get(depth) {
            live.start.store(frame.start, Relaxed);
            live.name.store(frame.name, Release);
        }
        reserve_untracked(&mut self.stack);
        self.stack.push(frame);
        self.shard
            .live
            .depth
            .store(self.stack.len() as u32, Release);
    }

    /// Pushes the resource readings of a marked frame's enter. Its growth is spanprof's memory,
    /// not counted by `CountingAlloc` (the readings are taken: it would land in the span).
    #[inline(always)]
    pub(crate) fn push_mark(&mut self, mark: EntryMark) {
        reserve_untracked(&mut self.marks);
        self.marks.push(mark);
    }

    /// Removes the frame at `pos` (the top, mostly) and publishes the stack.
    #[inline(always)]
    pub(crate) fn remove(&mut self, pos: usize) -> Option<Frame> {
        let frame = if pos + 1 == self.stack.len() {
            self.stack.pop()
        } else if pos < self.stack.len() {
            Some(self.republish_without(pos))
        } else {
            None
        };
        self.shard
            .live
            .depth
            .store(self.stack.len() as u32, Release);
        frame
    }

    /// Removes a frame below the top (a span exited out of order) and republishes the frames
    /// above it.
    #[cold]
    #[inline(never)]
    fn republish_without(&mut self, pos: usize) -> Frame {
        let frame = self.stack.remove(pos);
        for (i, f) in self.stack.iter().enumerate().skip(pos) {
            if let Some(live) = self.shard.live.frames.get(i) {
                live.start.store(f.start, Relaxed);
                live.name.store(f.name, Release);
            }
        }
        frame
    }

    /// The stats of a span name, created on first use.
    #[inline(always)]
    pub(crate) fn stats(&mut self, name: u32) -> &NameStats {
        let shard = &self.shard;
        self.stats.get(name as usize, |i| shard.stats(i as u32))
    }

    /// The call-tree stats of a node, created on first use.
    #[inline(always)]
    pub(crate) fn node_stats(&mut self, node: u16) -> &NodeStats {
        self.nodes.get(node, &self.shard.nodes)
    }

    /// The cell of a metric in a span name, created on first use.
    #[inline(always)]
    pub(crate) fn metric(&mut self, metric: u32, span: u32) -> &MetricCell {
        let index = metric as usize;
        let found = self
            .metrics
            .get(index)
            .and_then(|cells| cells.iter().position(|(s, _)| *s == span));
        let pos = match found {
            Some(pos) => pos,
            None => crate::alloc::untracked(|| self.new_metric(index, span)),
        };
        &self.metrics[index][pos].1
    }

    /// Adds a metric's cell to this thread's view; returns its position among the metric's.
    #[cold]
    #[inline(never)]
    fn new_metric(&mut self, index: usize, span: u32) -> usize {
        let cell = self.shard.metric_cell(index as u32, span);
        if self.metrics.len() <= index {
            self.metrics.resize_with(index + 1, Vec::new);
        }
        self.metrics[index].push((span, cell));
        self.metrics[index].len() - 1
    }
}

/// Makes room for one more in `v`, doubling it, outside `CountingAlloc`'s counts: spanprof's
/// own memory, grown inside the program's spans.
#[inline(always)]
fn reserve_untracked<T>(v: &mut Vec<T>) {
    if v.len() == v.capacity() {
        crate::alloc::untracked(|| v.reserve(v.len().max(4)));
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        // Frames of a state that is gone are not in progress (a thread adopting the shard
        // publishes its own).
        self.shard.live.depth.store(0, Release);
        self.shard.retired.store(true, Relaxed);
        // The fast path must never reach a state that is gone.
        if std::ptr::eq(FAST_LOCAL.with(Cell::get), self) {
            FAST_INSTANCE.with(|i| i.set(NO_INSTANCE));
            FAST_LOCAL.with(|l| l.set(std::ptr::null_mut()));
        }
    }
}

/// A thread's states, one per profiler instance it recorded for (see `LOCALS`). At the
/// thread's exit, a state still inside spans is parked with its instance (`Shards::park`)
/// rather than dropped: a thread-local dropped after this one may still exit those spans.
#[allow(clippy::vec_box)] // See `LOCALS`.
struct Locals(Vec<Box<Local>>);

impl Drop for Locals {
    fn drop(&mut self) {
        // None of this thread's states is reachable through the fast path any more.
        FAST_INSTANCE.with(|i| i.set(NO_INSTANCE));
        FAST_LOCAL.with(|l| l.set(std::ptr::null_mut()));
        // spanprof's own memory, freed as it was made: uncounted.
        crate::alloc::untracked(|| {
            for local in self.0.drain(..) {
                if local.stack.is_empty() {
                    continue;
                }
                if let Some(shards) = local._owner.upgrade() {
                    shards.park(local);
                }
            }
        });
    }
}

/// Instances a thread keeps state for at once; the least recently used beyond this is dropped
/// (its shard stays with its instance).
const CACHED_INSTANCES: usize = 8;

/// No recorder has this instance (theirs are even, from 2): in `FAST_INSTANCE`, no state is
/// remembered.
const NO_INSTANCE: u64 = 0;

/// Set in `FAST_INSTANCE` while a callback uses the state (recorder instances are even).
const IN_USE: u64 = 1;

thread_local! {
    /// Owns this thread's states (dropped at thread exit). Boxed: `FAST_LOCAL` points to one,
    /// which must not move when the list is reordered or grows.
    static LOCALS: RefCell<Locals> = const { RefCell::new(Locals(Vec::new())) };
    /// The state this thread used last (`FAST_LOCAL`) and its instance, reached without the
    /// `LOCALS` cell. No destructor: one thread-pointer-relative access each, also while the
    /// thread's other thread-locals are torn down (both are cleared as the state is dropped).
    ///
    /// While a callback uses the state, `FAST_INSTANCE` has its [`IN_USE`] bit set (one
    /// instruction to set, one to clear): a callback that re-entered spanprof then matches no
    /// instance, and `new_local` tells it the state is in use. One test serves both checks.
    static FAST_INSTANCE: Cell<u64> = const { Cell::new(NO_INSTANCE) };
    static FAST_LOCAL: Cell<*mut Local> = const { Cell::new(std::ptr::null_mut()) };
    static TOKEN: Cell<u32> = const { Cell::new(0) };
    /// Set while this thread runs a callback with its parked state (`Shards::with_parked`).
    static IN_PARKED: Cell<bool> = const { Cell::new(false) };
}

/// This thread's token: non-zero and unique among live threads. Marks the spans a thread owns.
#[inline(always)]
pub(crate) fn thread_token() -> u32 {
    TOKEN
        .try_with(|t| {
            let token = t.get();
            if token != 0 {
                token
            } else {
                let token = next_token();
                t.set(token);
                token
            }
        })
        .unwrap_or(0)
}

static NEXT_TOKEN: AtomicU32 = AtomicU32::new(1);

/// Runs `f` with this thread's state for `instance`. Returns `None` (and does nothing) when the
/// thread is being torn down or its state is in use already (a callback re-entered spanprof),
/// never panics.
#[inline(always)]
pub(crate) fn with_local<R>(
    instance: u64,
    shards: &Arc<Shards>,
    f: impl FnOnce(&mut Local) -> R,
) -> Option<R> {
    // `FAST_INSTANCE` holds a live instance (even) only beside that instance's state, not in
    // use.
    let local = if FAST_INSTANCE.with(Cell::get) == instance {
        FAST_LOCAL.with(Cell::get)
    } else {
        // Out of line and not generic over `f`: `f` is called in one place, inlined, so its
        // captures stay in registers (a second call site in the cold path made the compiler
        // build the closure in memory on every callback).
        new_local(instance, shards)?
    };
    FAST_INSTANCE.with(|i| i.set(i.get() | IN_USE));
    // SAFETY: `local` points to a live `Local` in this thread's `LOCALS` (a `Box`: it does
    // not move; it is cleared from `FAST_LOCAL` when that `Local` is dropped). Nothing else
    // refers to it while `FAST_INSTANCE` has its `IN_USE` bit: every access to this thread's
    // states goes through this function, which then reaches `new_local`, which returns `None`.
    #[allow(unsafe_code)]
    let local = unsafe { &mut *local };
    let r = f(local);
    // Not given back if `f` panicked (the recorder does not): this thread then records nothing
    // more, rather than reach a state left half-written.
    FAST_INSTANCE.with(|i| i.set(i.get() & !IN_USE));
    Some(r)
}

/// This thread's state for an instance it did not use last: found or made, and remembered in
/// `FAST_LOCAL`. `None` while the thread is being torn down, or while its state is in use.
#[cold]
#[inline(never)]
fn new_local(instance: u64, shards: &Arc<Shards>) -> Option<*mut Local> {
    if FAST_INSTANCE.with(Cell::get) & IN_USE != 0 || instance & IN_USE != 0 {
        return None;
    }
    let local: *mut Local = LOCALS
        .try_with(|cell| {
            let mut locals = cell.try_borrow_mut().ok()?;
            let local = crate::alloc::untracked(|| slow_local(&mut locals.0, instance, shards));
            Some(local as *mut Local)
        })
        .ok()
        .flatten()?;
    FAST_LOCAL.with(|l| l.set(local));
    FAST_INSTANCE.with(|i| i.set(instance));
    Some(local)
}

fn next_token() -> u32 {
    loop {
        let token = NEXT_TOKEN.fetch_add(1, Relaxed);
        if token != 0 {
            return token;
        }
    }
}

#[cold]
#[inline(never)]
#[allow(clippy::vec_box)] // See `LOCALS`.
fn slow_local<'a>(
    locals: &'a mut Vec<Box<Local>>,
    instance: u64,
    shards: &Arc<Shards>,
) -> &'a mut Local {
    if let Some(pos) = locals.iter().position(|l| l.instance == instance) {
        locals.swap(0, pos);
    } else {
        // Drop state of instances that no longer exist.
        locals.retain(|l| l._owner.strong_count() > 0);
        // Then the least recently used state outside every span: one inside spans holds
        // their frames, which their exits need (as many are kept as are entered).
        if locals.len() >= CACHED_INSTANCES {
            if let Some(pos) = locals.iter().rposition(|l| l.stack.is_empty()) {
                locals.remove(pos);
            }
        }
        let shard = shards.acquire();
        let local = Local {
            instance,
            stats: LocalList(shard.names()),
            nodes: LocalNodes::of(&shard.nodes),
            metrics: Vec::new(),
            shard,
            stack: Vec::with_capacity(32),
            marks: Vec::with_capacity(32),
            token: thread_token(),
            bracketed_ns: 0,
            last_cpu_read: 0,
            gap_skip: 0,
            region: None,
            region_tried: false,
            scratch: None,
            last_sampled_out: u32::MAX,
            #[cfg(feature = "cuda")]
            gpu: None,
            _owner: Arc::downgrade(shards),
        };
        locals.insert(0, Box::new(local));
    }
    &mut locals[0]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tells states apart: `n` in the items counter of their stats of name 0.
    fn mark(local: &mut Local, n: u64) {
        local.stats(0).items.store(n, Relaxed);
    }

    fn marked(local: &mut Local) -> u64 {
        local.stats(0).items.load(Relaxed)
    }

    #[test]
    fn a_callback_inside_a_callback_gets_no_state_for_any_instance() {
        std::thread::spawn(|| {
            let (a, b) = (Arc::new(Shards::default()), Arc::new(Shards::default()));
            let (ia, ib) = (1000, 1002);
            let inner = with_local(ia, &a, |local| {
                mark(local, 7);
                // Re-entered: neither this instance's state (in use) nor another's.
                (
                    with_local(ia, &a, |_| ()).is_none(),
                    with_local(ib, &b, |_| ()).is_none(),
                )
            });
            assert_eq!(inner, Some((true, true)));
            // Given back: both instances have their own state again, the first one's kept.
            assert_eq!(with_local(ia, &a, marked), Some(7));
            assert_eq!(with_local(ib, &b, marked), Some(0));
            assert_eq!(with_local(ia, &a, marked), Some(7));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_thread_whose_callback_panicked_records_nothing_more() {
        std::thread::spawn(|| {
            let shards = Arc::new(Shards::default());
            let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                with_local(1000, &shards, |_| panic!("inside a callback"))
            }));
            assert!(panicked.is_err());
            // The state may be half-written: never handed out again on this thread.
            assert!(with_local(1000, &shards, |_| ()).is_none());
            assert!(with_local(1002, &shards, |_| ()).is_none());
        })
        .join()
        .unwrap();
    }
}

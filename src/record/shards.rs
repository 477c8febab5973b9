//! Per-thread shards: where the hot path records, and what a snapshot merges.
//!
//! Each thread that records gets a [`Shard`] of its own (per profiler instance), reached through
//! a `thread_local!`. Only that thread writes it; snapshots read it through relaxed atomics. The
//! instance keeps every shard in a list, so a thread that exits loses nothing; a new thread
//! adopts a shard left by an exited one, so memory is bounded by the most threads alive at once.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, Weak};

use super::hist::AtomicHist;
use super::names::{Kind, KINDS};
use super::resources::{EntryMark, ResourceSlot, ResourceStats};

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
    /// Resource sums, made on first use (`detailed` and `full`).
    pub(crate) res: ResourceSlot,
}

/// Never recorded into in practice (see [`Local::stats`]).
static UNUSED: NameStats = NameStats::new();

impl NameStats {
    pub(crate) const fn new() -> Self {
        Self {
            hists: [const { AtomicHist::new() }; KINDS],
            items: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            flops: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            res: ResourceSlot::new(),
        }
    }

    /// The resource sums.
    pub(crate) fn res(&self) -> &ResourceStats {
        self.res.get_or_init(Box::default)
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
}

impl Shard {
    /// The stats of every name this shard recorded, by name index.
    pub(crate) fn names(&self) -> Vec<Option<Arc<NameStats>>> {
        self.names.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// A span entered on this thread and not yet exited.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Frame {
    pub(crate) id: u64,
    pub(crate) name: u32,
    pub(crate) start: u64,
    pub(crate) child_ns: u64,
    pub(crate) reentries: u32,
    /// Resource readings were taken at its enter: its [`EntryMark`] is on the thread's mark
    /// stack.
    pub(crate) marked: bool,
}

/// The shard list of one profiler instance.
#[derive(Debug, Default)]
pub(crate) struct Shards {
    list: Mutex<Vec<Arc<Shard>>>,
}

impl Shards {
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
    stats: Vec<Option<Arc<NameStats>>>,
    pub(crate) stack: Vec<Frame>,
    /// Resource readings at the enter of each marked frame, in stack order.
    pub(crate) marks: Vec<EntryMark>,
    /// This thread's token ([`thread_token`]).
    pub(crate) token: u32,
    _owner: Weak<Shards>,
}

impl Local {
    /// The stats of a span name, created on first use.
    #[inline(always)]
    pub(crate) fn stats(&mut self, name: u32) -> &NameStats {
        let index = name as usize;
        if !matches!(self.stats.get(index), Some(Some(_))) {
            self.new_stats(index);
        }
        // `new_stats` filled the slot; the fallback is never used.
        self.stats
            .get(index)
            .and_then(Option::as_deref)
            .unwrap_or(&UNUSED)
    }

    #[cold]
    #[inline(never)]
    fn new_stats(&mut self, index: usize) {
        let stats = Arc::new(NameStats::new());
        let mut shared = self.shard.names.lock().unwrap_or_else(|e| e.into_inner());
        if shared.len() <= index {
            shared.resize(index + 1, None);
        }
        let stats = shared[index].get_or_insert(stats).clone();
        drop(shared);
        if self.stats.len() <= index {
            self.stats.resize(index + 1, None);
        }
        self.stats[index] = Some(stats);
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        self.shard.retired.store(true, Relaxed);
    }
}

/// Instances a thread keeps state for at once; the least recently used beyond this is dropped
/// (its shard stays with its instance).
const CACHED_INSTANCES: usize = 8;

thread_local! {
    static LOCALS: RefCell<Vec<Local>> = const { RefCell::new(Vec::new()) };
    static TOKEN: Cell<u32> = const { Cell::new(0) };
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
/// thread is being torn down or the state is already borrowed (a callback re-entered spanprof),
/// never panics.
#[inline(always)]
pub(crate) fn with_local<R>(
    instance: u64,
    shards: &Arc<Shards>,
    f: impl FnOnce(&mut Local) -> R,
) -> Option<R> {
    LOCALS
        .try_with(|cell| {
            let mut locals = cell.try_borrow_mut().ok()?;
            if let Some(first) = locals.first_mut() {
                if first.instance == instance {
                    return Some(f(first));
                }
            }
            Some(f(slow_local(&mut locals, instance, shards)))
        })
        .ok()
        .flatten()
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
fn slow_local<'a>(
    locals: &'a mut Vec<Local>,
    instance: u64,
    shards: &Arc<Shards>,
) -> &'a mut Local {
    if let Some(pos) = locals.iter().position(|l| l.instance == instance) {
        locals.swap(0, pos);
    } else {
        if locals.len() >= CACHED_INSTANCES {
            locals.pop();
        }
        // Drop state of instances that no longer exist.
        locals.retain(|l| l._owner.strong_count() > 0);
        let shard = shards.acquire();
        let local = Local {
            instance,
            stats: shard.names(),
            shard,
            stack: Vec::with_capacity(32),
            marks: Vec::new(),
            token: thread_token(),
            _owner: Arc::downgrade(shards),
        };
        locals.insert(0, local);
    }
    &mut locals[0]
}

//! Per-thread shards: where the hot path records, and what a snapshot merges.
//!
//! Each thread that records gets a [`Shard`] of its own (per profiler instance), reached through
//! a `thread_local!`. Only that thread writes it; snapshots read it through relaxed atomics. The
//! instance keeps every shard in a list, so a thread that exits loses nothing; a new thread
//! adopts a shard left by an exited one, so memory is bounded by the most threads alive at once.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use crate::hist::AtomicHist;
use crate::names::{Kind, KINDS, MAX_SPAN_NAMES};

const CHUNK: usize = 64;
const CHUNKS: usize = MAX_SPAN_NAMES / CHUNK;

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
}

impl NameStats {
    fn new() -> Self {
        Self {
            hists: std::array::from_fn(|_| AtomicHist::new()),
            items: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            flops: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        }
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

/// A chunk of [`CHUNK`] names' stats, each created on first use.
type Chunk = Box<[OnceLock<Box<NameStats>>]>;

/// One thread's records.
#[derive(Debug)]
pub(crate) struct Shard {
    chunks: [OnceLock<Chunk>; CHUNKS],
    /// Set when the owning thread exited; the next new thread may adopt the shard.
    retired: AtomicBool,
}

impl Shard {
    fn new() -> Self {
        Self {
            chunks: std::array::from_fn(|_| OnceLock::new()),
            retired: AtomicBool::new(false),
        }
    }

    /// The stats of a name, created on first use (by the owning thread).
    #[inline(always)]
    pub(crate) fn stats(&self, name: u32) -> &NameStats {
        let name = name as usize;
        let chunk = self.chunks[(name / CHUNK) % CHUNKS]
            .get_or_init(|| (0..CHUNK).map(|_| OnceLock::new()).collect());
        chunk[name % CHUNK].get_or_init(|| Box::new(NameStats::new()))
    }

    /// The stats of a name if this shard has any.
    pub(crate) fn existing(&self, name: u32) -> Option<&NameStats> {
        let name = name as usize;
        self.chunks
            .get(name / CHUNK)?
            .get()?
            .get(name % CHUNK)?
            .get()
            .map(|b| &**b)
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
        let shard = Arc::new(Shard::new());
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
    pub(crate) shard: Arc<Shard>,
    pub(crate) stack: Vec<Frame>,
    /// This thread's token ([`thread_token`]).
    pub(crate) token: u32,
    _owner: Weak<Shards>,
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
        let local = Local {
            instance,
            shard: shards.acquire(),
            stack: Vec::with_capacity(32),
            token: thread_token(),
            _owner: Arc::downgrade(shards),
        };
        locals.insert(0, local);
    }
    &mut locals[0]
}

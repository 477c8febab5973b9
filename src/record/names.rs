//! Span names (name + target) as dense indices, and the per-callsite decisions.
//!
//! A callsite is looked at once: whether spanprof records its spans, under which name index,
//! and whether it carries throughput fields. The decision is cached in an insert-only,
//! lock-free table keyed by the callsite's `'static` metadata address, so creating a span costs
//! one probe, never a lock or a hash of the name. Events' callsites have a cache of the same
//! kind ([`CallsiteCache`]) for their metric fields (`super::metrics`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use hdrhistogram::Histogram;
use tracing_core::Metadata;

use super::hist::new_histogram;

/// Most distinct span names one profile holds; spans of further names are counted as dropped.
pub const MAX_SPAN_NAMES: usize = 4096;
const _: () = assert!(MAX_SPAN_NAMES <= u16::MAX as usize);

const CALLSITE_SLOTS: usize = 8192;
/// Slots a callsite may be cached in, from its home slot on.
const CALLSITE_PROBES: usize = 32;
const EMPTY: usize = 0;
const RESERVED: usize = 1;

/// Which histogram of a span name.
///
/// Most spans are entered once (a plain `#[instrument]` function): their one entry *is* the
/// instance, so it is recorded once, at close, in the `Single*` pair, which a snapshot adds to
/// both the entry and the instance statistics. Spans entered more than once record each entry
/// at exit (`Entry*`) and their instance totals at close (`Busy`, `SelfTime`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Entries of instances entered more than once.
    EntryBusy = 0,
    EntrySelf = 1,
    /// Closed instances entered zero or several times.
    Busy = 2,
    SelfTime = 3,
    /// Closed instances entered exactly once (entry = instance).
    SingleBusy = 4,
    SingleSelf = 5,
    /// Every closed instance.
    Wall = 6,
    /// Closed instances entered exactly once whose self time is their busy time (no child
    /// time): one record stands for entry and instance, busy and self.
    SingleLeaf = 7,
}

pub(crate) const KINDS: usize = 8;

/// The kinds whose sum is an instance's busy time: its own, a single entry's, a leaf's.
pub(crate) const INSTANCE_BUSY: [Kind; 3] = [Kind::Busy, Kind::SingleBusy, Kind::SingleLeaf];
/// The kinds whose sum is an instance's self time (a leaf's self time is its busy time).
pub(crate) const INSTANCE_SELF: [Kind; 3] = [Kind::SelfTime, Kind::SingleSelf, Kind::SingleLeaf];

/// Throughput field flags.
pub(crate) const FIELD_ITEMS: u32 = 1;
pub(crate) const FIELD_BYTES: u32 = 2;
pub(crate) const FIELD_FLOPS: u32 = 4;

/// What to do with spans of one callsite, packed in a `u32`:
/// bits 0–1 mode, bits 2–4 throughput fields, bit 5 the step span, bit 6 the name has been
/// sampled, bits 8.. name index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Decision(u32);

impl Decision {
    pub(crate) const SKIP: Decision = Decision(0);
    /// Would be recorded, but every span name is in use: each span is counted as dropped.
    pub(crate) const DROP: Decision = Decision(3);
    const RECORD: u32 = 1;
    const DYNAMIC: u32 = 2;

    const STEP: u32 = 1 << 5;
    /// The name has been sampled (`Recorder::set_sampling`): its spans ask whether they are
    /// left out, out of line. Set for good: a name sampled once stays off the common path.
    const SAMPLED: u32 = 1 << 6;

    pub(crate) fn record(name: u32, fields: u32, dynamic: bool, step: bool) -> Self {
        let mode = if dynamic { Self::DYNAMIC } else { Self::RECORD };
        let step = if step { Self::STEP } else { 0 };
        Decision(mode | (fields << 2) | step | (name << 8))
    }
    /// [`super::spans::FLAG_STEP`] if the callsite's spans are step spans (the cadence's), else
    /// 0: a span flag without a branch.
    #[inline(always)]
    pub(crate) fn step_flag(self) -> u8 {
        const _: () = assert!(super::spans::FLAG_STEP == 4);
        ((self.0 & Self::STEP) >> 3) as u8
    }
    /// Not recorded: skipped for good, or dropped ([`Decision::is_drop`]).
    #[inline(always)]
    pub(crate) fn is_skip(self) -> bool {
        self.0 & 3 == 0 || self.0 & 3 == 3
    }
    #[inline(always)]
    pub(crate) fn is_drop(self) -> bool {
        self.0 & 3 == 3
    }
    /// Recorded, the span filter not asked per span, the name never sampled: the common
    /// case, one test.
    #[inline(always)]
    pub(crate) fn is_static_record(self) -> bool {
        self.0 & (3 | Self::SAMPLED) == Self::RECORD
    }
    /// This decision, its name marked as sampled.
    pub(crate) fn sampled(self) -> Self {
        Decision(self.0 | Self::SAMPLED)
    }
    #[inline(always)]
    pub(crate) fn is_dynamic(self) -> bool {
        self.0 & 3 == Self::DYNAMIC
    }
    #[inline(always)]
    pub(crate) fn fields(self) -> u32 {
        (self.0 >> 2) & 7
    }
    #[inline(always)]
    pub(crate) fn name(self) -> u32 {
        self.0 >> 8
    }
}

/// One span name.
#[derive(Debug)]
pub(crate) struct NameInfo {
    pub(crate) name: &'static str,
    pub(crate) target: &'static str,
    /// Buckets drained from thread shards (see `hist`), one per [`Kind`]. Readers that merge the
    /// shards of this name hold this lock, so a drain is never seen half done.
    pub(crate) spill: Mutex<[Option<Histogram<u64>>; KINDS]>,
}

impl NameInfo {
    pub(crate) fn spill_mut(
        spill: &mut [Option<Histogram<u64>>; KINDS],
        kind: Kind,
    ) -> &mut Histogram<u64> {
        spill[kind as usize].get_or_insert_with(|| crate::alloc::untracked(new_histogram))
    }
}

/// The name registry and the callsite cache.
pub(crate) struct Names {
    list: RwLock<Vec<Arc<NameInfo>>>,
    by_key: Mutex<HashMap<(&'static str, &'static str), u32>>,
    callsites: CallsiteCache,
}

/// An insert-only, lock-free map from a callsite's `'static` metadata to a `u32` decided once
/// for it: one probe (a multiply and a few loads) per lookup.
pub(crate) struct CallsiteCache {
    /// Arrays of the cache's size: a masked slot index needs no bounds check.
    keys: Box<[AtomicUsize; CALLSITE_SLOTS]>,
    values: Box<[AtomicU32; CALLSITE_SLOTS]>,
    /// Values of callsites whose probe window in the cache was full (more callsites than the
    /// cache holds): a read lock and a hash away, still far from deciding again.
    overflow: RwLock<HashMap<usize, u32>>,
    /// Set once a value went to `overflow`.
    overflowed: AtomicBool,
}

impl std::fmt::Debug for Names {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Names")
            .field("names", &self.len())
            .finish_non_exhaustive()
    }
}

fn slot_of(key: usize) -> usize {
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15_u64 as usize) >> 16) & (CALLSITE_SLOTS - 1)
}

impl CallsiteCache {
    pub(crate) fn new() -> Self {
        Self {
            keys: Box::new(std::array::from_fn(|_| AtomicUsize::new(EMPTY))),
            values: Box::new(std::array::from_fn(|_| AtomicU32::new(0))),
            overflow: RwLock::new(HashMap::new()),
            overflowed: AtomicBool::new(false),
        }
    }

    /// The cached value of a callsite, if it was decided.
    #[inline(always)]
    pub(crate) fn get(&self, meta: &'static Metadata<'static>) -> Option<u32> {
        let key = meta as *const Metadata<'static> as usize;
        let start = slot_of(key);
        // The home slot inline; the rest of the probe window out of line.
        match self.keys[start].load(Ordering::Acquire) {
            k if k == key => Some(self.values[start].load(Ordering::Relaxed)),
            EMPTY => None,
            _ => self.get_probing(key, start),
        }
    }

    #[inline(never)]
    fn get_probing(&self, key: usize, start: usize) -> Option<u32> {
        for probe in 1..CALLSITE_PROBES {
            let slot = (start + probe) & (CALLSITE_SLOTS - 1);
            match self.keys[slot].load(Ordering::Acquire) {
                k if k == key => return Some(self.values[slot].load(Ordering::Relaxed)),
                EMPTY => return None,
                _ => {}
            }
        }
        self.get_overflow(key)
    }

    #[cold]
    #[inline(never)]
    fn get_overflow(&self, key: usize) -> Option<u32> {
        if !self.overflowed.load(Ordering::Acquire) {
            return None;
        }
        self.overflow
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .copied()
    }

    /// Replaces every cached value `f` maps to a new one. A callsite being inserted meanwhile
    /// may keep its old value: see `Recorder::set_sampling` for how its caller covers that.
    fn update(&self, f: impl Fn(u32) -> Option<u32>) {
        for (key, value) in self.keys.iter().zip(self.values.iter()) {
            let k = key.load(Ordering::Acquire);
            if k != EMPTY && k != RESERVED {
                if let Some(new) = f(value.load(Ordering::Relaxed)) {
                    value.store(new, Ordering::Relaxed);
                }
            }
        }
        if self.overflowed.load(Ordering::Acquire) {
            let mut overflow = self.overflow.write().unwrap_or_else(|e| e.into_inner());
            for value in overflow.values_mut() {
                if let Some(new) = f(*value) {
                    *value = new;
                }
            }
        }
    }

    /// Caches a value for a callsite (first one wins). Past the cache's probe window, in the
    /// overflow map.
    pub(crate) fn insert(&self, meta: &'static Metadata<'static>, value: u32) {
        let key = meta as *const Metadata<'static> as usize;
        let start = slot_of(key);
        for probe in 0..CALLSITE_PROBES {
            let slot = (start + probe) & (CALLSITE_SLOTS - 1);
            let k = self.keys[slot].load(Ordering::Acquire);
            if k == key {
                return;
            }
            if k == EMPTY
                && self.keys[slot]
                    .compare_exchange(EMPTY, RESERVED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                self.values[slot].store(value, Ordering::Relaxed);
                self.keys[slot].store(key, Ordering::Release);
                return;
            }
        }
        crate::alloc::untracked(|| {
            self.overflow
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .entry(key)
                .or_insert(value);
        });
        self.overflowed.store(true, Ordering::Release);
    }
}

impl Names {
    pub(crate) fn new() -> Self {
        Self {
            list: RwLock::new(Vec::new()),
            by_key: Mutex::new(HashMap::new()),
            callsites: CallsiteCache::new(),
        }
    }

    /// The cached decision for a callsite, if it was decided.
    #[inline(always)]
    pub(crate) fn cached(&self, meta: &'static Metadata<'static>) -> Option<Decision> {
        self.callsites.get(meta).map(Decision)
    }

    /// Caches a decision for a callsite (first one wins).
    pub(crate) fn remember(&self, meta: &'static Metadata<'static>, decision: Decision) {
        self.callsites.insert(meta, decision.0);
    }

    /// Marks the cached decisions of every callsite recorded under `name` as sampled.
    pub(crate) fn mark_sampled(&self, name: u32) {
        self.callsites.update(|value| {
            let d = Decision(value);
            (!d.is_skip() && d.name() == name).then(|| d.sampled().0)
        });
    }

    /// The index of a span name, registering it if new; `None` past [`MAX_SPAN_NAMES`].
    pub(crate) fn intern(&self, name: &'static str, target: &'static str) -> Option<u32> {
        crate::alloc::untracked(|| self.register(name, target))
    }

    fn register(&self, name: &'static str, target: &'static str) -> Option<u32> {
        let mut by_key = self.by_key.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&index) = by_key.get(&(name, target)) {
            return Some(index);
        }
        let mut list = self.list.write().unwrap_or_else(|e| e.into_inner());
        if list.len() >= MAX_SPAN_NAMES {
            return None;
        }
        let index = list.len() as u32;
        list.push(Arc::new(NameInfo {
            name,
            target,
            spill: Mutex::new(Default::default()),
        }));
        by_key.insert((name, target), index);
        Some(index)
    }

    pub(crate) fn get(&self, index: u32) -> Option<Arc<NameInfo>> {
        self.list
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(index as usize)
            .cloned()
    }

    pub(crate) fn len(&self) -> usize {
        self.list.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub(crate) fn all(&self) -> Vec<Arc<NameInfo>> {
        self.list.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Throughput fields a callsite declares.
pub(crate) fn throughput_fields(meta: &Metadata<'_>) -> u32 {
    let fields = meta.fields();
    let mut flags = 0;
    if fields.field("items").is_some() {
        flags |= FIELD_ITEMS;
    }
    if fields.field("bytes").is_some() {
        flags |= FIELD_BYTES;
    }
    if fields.field("flops").is_some() {
        flags |= FIELD_FLOPS;
    }
    flags
}

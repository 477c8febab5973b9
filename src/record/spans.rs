//! Per-span timing state, reachable from a span `Id` from any thread without a lock.
//!
//! An open-addressing table of cache-line-sized slots keyed by the span id. A span is inserted
//! when it is created, looked up on enter/exit/close and turned into a tombstone when it closes.
//! The table grows in segments (each twice the size of the one before) that are never moved, so
//! a reference to a slot stays valid for the life of the table. Probing is bounded: a key is
//! in the first segment whose probe window had room for it when it was inserted, and a slot never
//! becomes empty again, so a lookup stops at the first empty slot it meets.

use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

const EMPTY: u64 = 0;
const TOMBSTONE: u64 = u64::MAX;
const RESERVED: u64 = u64::MAX - 1;

/// No entry (enter→exit interval) completed yet.
pub(crate) const ENTRIES_NONE: u16 = 0;
/// The first entry is being added to the sums by the thread that completed it.
pub(crate) const ENTRIES_WRITING: u16 = 1;
/// Exactly one entry completed; the sums hold it and it is not recorded anywhere yet.
pub(crate) const ENTRIES_ONE: u16 = 2;
/// Several entries completed; each is recorded in the entry histograms.
pub(crate) const ENTRIES_MANY: u16 = 3;

const FIRST_SEGMENT: usize = 4096;
/// Segments of the table, each twice the size of the one before.
pub(crate) const SEGMENTS: usize = 12;
const PROBES: usize = 16;

/// The state of one open span. 64 bytes, one cache line: spans used by different threads never
/// share a line.
///
/// The thread that completed the span's first entry (its *owner*) adds its entries to `busy`
/// and `self_ns` with plain loads and stores; other threads add theirs to `shared_busy` and
/// `shared_self` with atomic read-modify-writes. A span that never leaves its thread costs no locked
/// instruction, and concurrent entries from several threads lose nothing.
#[repr(align(64))]
#[derive(Debug)]
pub(crate) struct Slot {
    key: AtomicU64,
    /// Index of the span's name in the name registry.
    pub(crate) name: AtomicU16,
    /// How many entries completed: [`ENTRIES_NONE`], [`ENTRIES_WRITING`], [`ENTRIES_ONE`],
    /// [`ENTRIES_MANY`].
    pub(crate) entries: AtomicU16,
    /// Token of the owning thread (see `shards::thread_token`), 0 until the first entry.
    pub(crate) owner: AtomicU32,
    /// Clock reading (raw) when the span was created.
    pub(crate) created: AtomicU64,
    /// Sum of the owner's completed entries' busy time, ns.
    pub(crate) busy: AtomicU64,
    /// Sum of the owner's completed entries' self time, ns.
    pub(crate) self_ns: AtomicU64,
    /// Sum of other threads' completed entries' busy time, ns.
    pub(crate) shared_busy: AtomicU64,
    /// Sum of other threads' completed entries' self time, ns.
    pub(crate) shared_self: AtomicU64,
    /// [`FLAG_MARKED`], [`FLAG_ERRORED`], [`FLAG_STEP`].
    pub(crate) flags: AtomicU8,
    /// The span's node in the call tree (`tree::ROOT` when the tree is off).
    pub(crate) node: AtomicU16,
    /// The segment the slot is in and its index there (set once, when the segment is made).
    segment: u8,
    index: u32,
}

/// Resource readings were taken when the span opened (kept beside the table, see
/// `resources::MarkTable`).
pub(crate) const FLAG_MARKED: u8 = 1;
/// An error-level event happened inside the span.
pub(crate) const FLAG_ERRORED: u8 = 2;
/// The span is a step span of the export cadence: its close is counted (`crate::export`).
pub(crate) const FLAG_STEP: u8 = 4;

impl Slot {
    const fn new(segment: u8, index: u32) -> Self {
        Self {
            key: AtomicU64::new(EMPTY),
            name: AtomicU16::new(0),
            entries: AtomicU16::new(ENTRIES_NONE),
            owner: AtomicU32::new(0),
            created: AtomicU64::new(0),
            busy: AtomicU64::new(0),
            self_ns: AtomicU64::new(0),
            shared_busy: AtomicU64::new(0),
            shared_self: AtomicU64::new(0),
            flags: AtomicU8::new(0),
            node: AtomicU16::new(0),
            segment,
            index,
        }
    }

    /// The span id this slot holds, if it holds an open span.
    pub(crate) fn id(&self) -> Option<u64> {
        match self.key.load(Ordering::Acquire) {
            EMPTY | TOMBSTONE | RESERVED => None,
            id => Some(id),
        }
    }
}

/// The table. See the module docs. `M` is what is kept beside the slot of an open span that
/// asked for it (resource readings at its creation), in the memory of the slot's segment.
pub(crate) struct SpanTable<M> {
    /// Segment 0, always there.
    first: Segment<M>,
    /// Segments 1.., each twice the size of the one before, made when first needed and freed
    /// when their last open span closes.
    rest: [RwLock<Option<Arc<Segment<M>>>>; SEGMENTS - 1],
    /// Open spans in each of segments 1.. (segment 0 is not counted). Lookups and scans skip
    /// segments without open spans, and such a segment is freed: a burst of open spans that
    /// spilled into them costs nothing, in time or memory, once those spans closed.
    live: [AtomicU32; SEGMENTS - 1],
    /// Segments it may use: [`SEGMENTS`] (tests drive the bound with fewer).
    segments: usize,
}

/// One segment: its slots, and what is kept beside them (made when first needed).
pub(crate) struct Segment<M> {
    slots: Box<[Slot]>,
    marks: OnceLock<Box<[Mutex<M>]>>,
}

impl<M: Default> Segment<M> {
    fn new(k: usize) -> Self {
        crate::alloc::untracked(|| Self {
            slots: (0..segment_len(k))
                .map(|i| Slot::new(k as u8, i as u32))
                .collect(),
            marks: OnceLock::new(),
        })
    }

    fn mark(&self, index: usize) -> Option<&Mutex<M>> {
        let len = self.slots.len();
        self.marks
            .get_or_init(|| {
                crate::alloc::untracked(|| (0..len).map(|_| Mutex::default()).collect())
            })
            .get(index)
    }
}

/// A slot found in the table, with its segment, for the duration of one operation.
pub(crate) struct SlotIn<'a, M> {
    slot: &'a Slot,
    segment: &'a Segment<M>,
}

impl<M> Clone for SlotIn<'_, M> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<M> Copy for SlotIn<'_, M> {}

impl<M> std::ops::Deref for SlotIn<'_, M> {
    type Target = Slot;
    #[inline(always)]
    fn deref(&self) -> &Slot {
        self.slot
    }
}

impl<M: Default + Copy> SlotIn<'_, M> {
    /// Keeps `mark` beside the slot (until its span closes).
    #[cfg(test)]
    pub(crate) fn put_mark(&self, mark: M) {
        self.with_mark(|m| *m = mark);
    }

    /// Runs `f` on what is kept beside the slot, in place (no copy of it).
    #[inline]
    pub(crate) fn with_mark<R>(&self, f: impl FnOnce(&mut M) -> R) -> Option<R> {
        let cell = self.segment.mark(self.slot.index as usize)?;
        let mut mark = cell.lock().unwrap_or_else(|e| e.into_inner());
        Some(f(&mut mark))
    }

    /// What was kept beside the slot.
    #[cfg(test)]
    pub(crate) fn mark(&self) -> Option<M> {
        self.segment
            .mark(self.slot.index as usize)
            .map(|c| *c.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl<M> std::fmt::Debug for SpanTable<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let segments = 1 + self
            .rest
            .iter()
            .filter(|s| s.read().map(|s| s.is_some()).unwrap_or(false))
            .count();
        f.debug_struct("SpanTable")
            .field("segments", &segments)
            .finish()
    }
}

/// Where a key starts probing. `tracing_subscriber::Registry` ids are a slab address in the low
/// 38 bits, a shard (thread) index above it and a generation on top: using the address and the
/// shard but not the generation puts a reused slab slot back on its old tombstone and keeps the
/// spans of different threads apart. Any other id scheme is still correct, only probes more.
///
/// Later segments (used only when a probe window of the first is full) hash the whole id, so
/// keys that collide in the first segment spread out there.
#[inline(always)]
fn home(id: u64, segment: usize) -> usize {
    if segment == 0 {
        let address = id & ((1 << 38) - 1);
        let shard = (id >> 38) & 0x1FFF;
        address.wrapping_add(shard.wrapping_mul(61)) as usize
    } else {
        let mut x = id ^ (id >> 30);
        x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x ^= x >> 27;
        x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
        (x ^ (x >> 31)) as usize
    }
}

/// Slots in segment `k`.
pub(crate) const fn segment_len(k: usize) -> usize {
    FIRST_SEGMENT << k
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|e| e.into_inner())
}

impl<M: Default + Copy> SpanTable<M> {
    pub(crate) fn new() -> Self {
        Self {
            first: Segment::new(0),
            rest: Default::default(),
            live: Default::default(),
            segments: SEGMENTS,
        }
    }

    /// A table of its first `segments` segments only: its bound reached without a gigabyte.
    #[cfg(test)]
    pub(crate) fn with_segments(segments: usize) -> Self {
        Self {
            segments: segments.clamp(1, SEGMENTS),
            ..Self::new()
        }
    }

    /// Claims a slot for `id` and initialises it with `init` before publishing it. Returns
    /// `false` when every segment's probe window is full (the span is then not profiled).
    #[inline]
    pub(crate) fn insert(&self, id: u64, init: impl FnOnce(SlotIn<'_, M>)) -> bool {
        debug_assert!(id != EMPTY && id != TOMBSTONE && id != RESERVED);
        if let Some(index) = claim(&self.first.slots, id, 0) {
            let slot = &self.first.slots[index];
            init(SlotIn {
                slot,
                segment: &self.first,
            });
            slot.key.store(id, Ordering::Release);
            return true;
        }
        self.insert_spilled(id, init)
    }

    #[cold]
    #[inline(never)]
    fn insert_spilled(&self, id: u64, init: impl FnOnce(SlotIn<'_, M>)) -> bool {
        for k in 1..self.segments {
            // Claimed and counted while the segment is held (read lock): it is freed only
            // under the write lock, when it has no open span.
            let guard = self.spilled(k);
            let Some(segment) = guard.as_ref() else {
                continue;
            };
            let Some(index) = claim(&segment.slots, id, k) else {
                continue;
            };
            self.live[k - 1].fetch_add(1, Ordering::AcqRel);
            let slot = &segment.slots[index];
            init(SlotIn { slot, segment });
            slot.key.store(id, Ordering::Release);
            return true;
        }
        false
    }

    /// Segment `k` (1..) under its read lock, made if needed.
    fn spilled(&self, k: usize) -> std::sync::RwLockReadGuard<'_, Option<Arc<Segment<M>>>> {
        {
            let guard = read(&self.rest[k - 1]);
            if guard.is_some() {
                return guard;
            }
        }
        self.rest[k - 1]
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert_with(|| Arc::new(Segment::new(k)));
        read(&self.rest[k - 1])
    }

    /// Runs `f` with the slot of the open span `id`; `None` if `id` was never inserted (not
    /// profiled).
    #[inline(always)]
    pub(crate) fn with<R>(&self, id: u64, f: impl FnOnce(SlotIn<'_, M>) -> R) -> Option<R> {
        let index = home(id, 0) & (FIRST_SEGMENT - 1);
        let slot = &self.first.slots[index];
        match slot.key.load(Ordering::Acquire) {
            key if key == id => Some(f(SlotIn {
                slot,
                segment: &self.first,
            })),
            EMPTY => None,
            _ => self.with_probing(id, f),
        }
    }

    #[cold]
    #[inline(never)]
    fn with_probing<R>(&self, id: u64, f: impl FnOnce(SlotIn<'_, M>) -> R) -> Option<R> {
        match probe(&self.first.slots, id, 0) {
            Probe::Found(index) => {
                return Some(f(SlotIn {
                    slot: &self.first.slots[index],
                    segment: &self.first,
                }))
            }
            // The first segment is never freed, and a key goes to a later segment only when its
            // window there was full: an empty slot in it means the key is nowhere.
            Probe::Empty => return None,
            Probe::Full => {}
        }
        for k in 1..SEGMENTS {
            // A segment without open spans cannot hold `id`.
            if self.live[k - 1].load(Ordering::Acquire) == 0 {
                continue;
            }
            // Held for the operation: it cannot be freed under it.
            let Some(segment) = read(&self.rest[k - 1]).clone() else {
                continue;
            };
            // An empty slot here does not end the search: this segment may have been freed
            // and made again since a key went past it to a later one.
            if let Probe::Found(index) = probe(&segment.slots, id, k) {
                return Some(f(SlotIn {
                    slot: &segment.slots[index],
                    segment: &segment,
                }));
            }
        }
        None
    }

    /// Frees the slot of a closed span, and its segment if that was the segment's last open
    /// span (its memory goes when the caller's operation ends).
    #[inline]
    pub(crate) fn remove(&self, slot: SlotIn<'_, M>) {
        slot.key.store(TOMBSTONE, Ordering::Release);
        let k = usize::from(slot.slot.segment);
        if k > 0 && self.live[k - 1].fetch_sub(1, Ordering::AcqRel) == 1 {
            self.free_if_empty(k);
        }
    }

    #[cold]
    #[inline(never)]
    fn free_if_empty(&self, k: usize) {
        // Inserts hold the segment (read lock) while they claim and count: under the write lock
        // no insert is between the two, so a zero count means no open span in it.
        if let Ok(mut w) = self.rest[k - 1].try_write() {
            if self.live[k - 1].load(Ordering::Acquire) == 0 {
                *w = None;
            }
        }
    }

    /// Calls `f` with every slot that holds an open span (for snapshots). Segments without open
    /// spans are skipped.
    pub(crate) fn for_each_open(&self, mut f: impl FnMut(&Slot)) {
        let mut visit = |slots: &[Slot]| {
            for slot in slots.iter().filter(|s| s.id().is_some()) {
                f(slot);
            }
        };
        visit(&self.first.slots);
        for k in 1..SEGMENTS {
            if self.live[k - 1].load(Ordering::Acquire) == 0 {
                continue;
            }
            if let Some(segment) = read(&self.rest[k - 1]).clone() {
                visit(&segment.slots);
            }
        }
    }
}

/// What a probe window holds for a key.
enum Probe {
    Found(usize),
    /// Not found, and an empty slot met.
    Empty,
    /// Not found, and no empty slot.
    Full,
}

fn probe(slots: &[Slot], id: u64, k: usize) -> Probe {
    let start = home(id, k);
    let mask = slots.len() - 1;
    for p in 0..PROBES {
        let index = (start + p) & mask;
        match slots[index].key.load(Ordering::Acquire) {
            key if key == id => return Probe::Found(index),
            EMPTY => return Probe::Empty,
            _ => {}
        }
    }
    Probe::Full
}

/// Claims (reserves) an empty or freed slot of `id`'s window in `slots`.
#[inline]
fn claim(slots: &[Slot], id: u64, k: usize) -> Option<usize> {
    let start = home(id, k);
    let mask = slots.len() - 1;
    for p in 0..PROBES {
        let index = (start + p) & mask;
        let slot = &slots[index];
        let key = slot.key.load(Ordering::Relaxed);
        if (key == EMPTY || key == TOMBSTONE)
            && slot
                .key
                .compare_exchange(key, RESERVED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            return Some(index);
        }
    }
    None
}

const _: () = assert!(std::mem::size_of::<Slot>() == 64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_get_remove() {
        let t = SpanTable::<u64>::new();
        for id in 1..=10_000u64 {
            assert!(t.insert(id, |e| e.busy.store(id, Ordering::Relaxed)));
        }
        for id in 1..=10_000u64 {
            let busy = t.with(id, |e| e.busy.load(Ordering::Relaxed));
            assert_eq!(busy, Some(id));
        }
        assert!(t.with(10_001, |_| ()).is_none());
        for id in (1..=10_000u64).step_by(2) {
            t.with(id, |e| t.remove(e)).unwrap();
        }
        assert!(t.with(1, |_| ()).is_none());
        assert!(t.with(2, |_| ()).is_some());
        let mut open = 0;
        t.for_each_open(|_| open += 1);
        assert_eq!(open, 5_000);
    }

    #[test]
    fn colliding_keys_spill_into_later_segments() {
        let t = SpanTable::<u64>::new();
        // Same home slot for all: address 5 of shard 0 with different generations.
        let ids: Vec<u64> = (1..2000u64).map(|g| (g << 51) | 5).collect();
        for &id in &ids {
            assert!(t.insert(id, |_| {}), "room");
        }
        for &id in &ids {
            assert_eq!(t.with(id, |s| s.id()).flatten(), Some(id));
        }
        let spilled: u32 = t.live.iter().map(|l| l.load(Ordering::Relaxed)).sum();
        assert_eq!(
            spilled as usize,
            ids.len() - PROBES,
            "all but one window spilled"
        );
        // What is kept beside a spilled slot is the slot's own.
        t.with(ids[1000], |s| s.put_mark(77)).unwrap();
        assert_eq!(t.with(ids[1000], |s| s.mark()).flatten(), Some(77));
        // Once they close, later segments are freed, and skipped by lookups and scans.
        for &id in &ids {
            t.with(id, |s| t.remove(s)).unwrap();
        }
        assert!(t.live.iter().all(|l| l.load(Ordering::Relaxed) == 0));
        assert!(
            t.rest.iter().all(|r| r.read().unwrap().is_none()),
            "memory freed"
        );
        let mut open = 0;
        t.for_each_open(|_| open += 1);
        assert_eq!(open, 0);
        assert!(t.with(ids[100], |_| ()).is_none());
        // A reused id lands back in the first segment.
        assert!(t.insert(ids[100], |s| assert_eq!(s.slot.segment, 0)));
        t.with(ids[100], |s| t.remove(s)).unwrap();
        // Spilling again makes them anew, and every key is found.
        for &id in &ids {
            assert!(t.insert(id, |_| {}), "room");
        }
        for &id in &ids {
            assert_eq!(t.with(id, |s| s.id()).flatten(), Some(id));
        }
    }

    #[test]
    fn concurrent_inserts_are_unique() {
        let t = std::sync::Arc::new(SpanTable::<u64>::new());
        let threads: Vec<_> = (0..4u64)
            .map(|thread| {
                let t = t.clone();
                std::thread::spawn(move || {
                    for i in 1..=2000u64 {
                        let id = (thread << 38) | i;
                        assert!(t.insert(id, |e| e.busy.store(id, Ordering::Relaxed)));
                    }
                })
            })
            .collect();
        for th in threads {
            th.join().unwrap();
        }
        for thread in 0..4u64 {
            for i in 1..=2000u64 {
                let id = (thread << 38) | i;
                let busy = t.with(id, |e| e.busy.load(Ordering::Relaxed));
                assert_eq!(busy, Some(id));
            }
        }
    }
}

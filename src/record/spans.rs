//! Per-span timing state, reachable from a span `Id` from any thread without a lock.
//!
//! An open-addressing table of cache-line-sized slots keyed by the span id. A span is inserted
//! when it is created, looked up on enter/exit/close and turned into a tombstone when it closes.
//! The table grows in segments (each twice the size of the one before) that are never moved, so
//! a reference to a slot stays valid for the life of the table. Probing is bounded: a key is
//! in the first segment whose probe window had room for it when it was inserted, and a slot never
//! becomes empty again, so a lookup stops at the first empty slot it meets.

use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::OnceLock;

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
    /// [`FLAG_MARKED`], [`FLAG_ERRORED`].
    pub(crate) flags: AtomicU8,
    /// The segment the slot is in and its index there (set once, when the segment is made).
    segment: u8,
    index: u32,
}

/// Resource readings were taken when the span opened (kept beside the table, see
/// `resources::MarkTable`).
pub(crate) const FLAG_MARKED: u8 = 1;
/// An error-level event happened inside the span.
pub(crate) const FLAG_ERRORED: u8 = 2;

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
            segment,
            index,
        }
    }

    /// The slot's segment and index in it.
    pub(crate) fn position(&self) -> (usize, usize) {
        (usize::from(self.segment), self.index as usize)
    }

    /// The span id this slot holds, if it holds an open span.
    pub(crate) fn id(&self) -> Option<u64> {
        match self.key.load(Ordering::Acquire) {
            EMPTY | TOMBSTONE | RESERVED => None,
            id => Some(id),
        }
    }
}

/// The table. See the module docs.
pub(crate) struct SpanTable {
    /// Segment 0, always there.
    first: Box<[Slot]>,
    /// Segments 1.., each twice the size of the one before, made when first needed.
    rest: [OnceLock<Box<[Slot]>>; SEGMENTS - 1],
    /// Open spans in each of segments 1.. (segment 0 is not counted). Lookups and scans skip
    /// segments without open spans, so a burst of open spans that spilled into them costs
    /// nothing once those spans closed.
    live: [AtomicU32; SEGMENTS - 1],
}

impl std::fmt::Debug for SpanTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let segments = 1 + self.rest.iter().filter(|s| s.get().is_some()).count();
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

fn new_segment(k: usize) -> Box<[Slot]> {
    crate::alloc::untracked(|| {
        (0..segment_len(k))
            .map(|i| Slot::new(k as u8, i as u32))
            .collect()
    })
}

/// Slots in segment `k`.
pub(crate) const fn segment_len(k: usize) -> usize {
    FIRST_SEGMENT << k
}

impl SpanTable {
    pub(crate) fn new() -> Self {
        Self {
            first: new_segment(0),
            rest: Default::default(),
            live: Default::default(),
        }
    }

    #[inline(always)]
    fn segment(&self, k: usize) -> Option<&[Slot]> {
        if k == 0 {
            Some(&self.first)
        } else {
            self.rest[k - 1].get().map(|s| &**s)
        }
    }

    /// Claims a slot for `id` and initialises it with `init` before publishing it. Returns
    /// `None` when every segment's probe window is full (the span is then not profiled).
    #[inline]
    pub(crate) fn insert(&self, id: u64, init: impl FnOnce(&Slot)) -> Option<&Slot> {
        debug_assert!(id != EMPTY && id != TOMBSTONE && id != RESERVED);
        for k in 0..SEGMENTS {
            let segment = match self.segment(k) {
                Some(s) => s,
                None => self.rest[k - 1].get_or_init(|| new_segment(k)),
            };
            let start = home(id, k);
            let mask = segment.len() - 1;
            for probe in 0..PROBES {
                let index = (start + probe) & mask;
                let slot = &segment[index];
                let key = slot.key.load(Ordering::Relaxed);
                if (key == EMPTY || key == TOMBSTONE)
                    && slot
                        .key
                        .compare_exchange(key, RESERVED, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                {
                    if k > 0 {
                        self.live[k - 1].fetch_add(1, Ordering::Relaxed);
                    }
                    init(slot);
                    slot.key.store(id, Ordering::Release);
                    return Some(slot);
                }
            }
        }
        None
    }

    /// The slot of an open span, or `None` if `id` was never inserted (not profiled).
    #[inline(always)]
    pub(crate) fn get(&self, id: u64) -> Option<&Slot> {
        let index = home(id, 0) & (FIRST_SEGMENT - 1);
        let slot = &self.first[index];
        match slot.key.load(Ordering::Acquire) {
            key if key == id => Some(slot),
            EMPTY => None,
            _ => self.get_probing(id),
        }
    }

    #[cold]
    #[inline(never)]
    fn get_probing(&self, id: u64) -> Option<&Slot> {
        for k in 0..SEGMENTS {
            // A segment without open spans cannot hold `id`.
            if k > 0 && self.live[k - 1].load(Ordering::Acquire) == 0 {
                continue;
            }
            let segment = self.segment(k)?;
            let start = home(id, k);
            let mask = segment.len() - 1;
            for probe in 0..PROBES {
                let index = (start + probe) & mask;
                let slot = &segment[index];
                match slot.key.load(Ordering::Acquire) {
                    key if key == id => return Some(slot),
                    // Keys are in the first segment whose window had room when inserted: an
                    // empty slot ends the search in this segment and every later one.
                    EMPTY => return None,
                    _ => {}
                }
            }
        }
        None
    }

    /// Frees the slot of a closed span.
    #[inline]
    pub(crate) fn remove(&self, slot: &Slot) {
        slot.key.store(TOMBSTONE, Ordering::Release);
        if slot.segment > 0 {
            self.live[usize::from(slot.segment) - 1].fetch_sub(1, Ordering::Release);
        }
    }

    /// Every slot that holds an open span (for snapshots). Segments without open spans are
    /// skipped.
    pub(crate) fn open_slots(&self) -> impl Iterator<Item = &Slot> {
        (0..SEGMENTS)
            .filter(|&k| k == 0 || self.live[k - 1].load(Ordering::Acquire) > 0)
            .filter_map(|k| self.segment(k))
            .flat_map(|s| s.iter())
            .filter(|e| e.id().is_some())
    }
}

const _: () = assert!(std::mem::size_of::<Slot>() == 64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_get_remove() {
        let t = SpanTable::new();
        for id in 1..=10_000u64 {
            let e = t.insert(id, |e| e.busy.store(id, Ordering::Relaxed));
            assert!(e.is_some());
        }
        for id in 1..=10_000u64 {
            let e = t.get(id).expect("present");
            assert_eq!(e.busy.load(Ordering::Relaxed), id);
        }
        assert!(t.get(10_001).is_none());
        for id in (1..=10_000u64).step_by(2) {
            let e = t.get(id).unwrap();
            t.remove(e);
        }
        assert!(t.get(1).is_none());
        assert!(t.get(2).is_some());
        assert_eq!(t.open_slots().count(), 5_000);
    }

    #[test]
    fn colliding_keys_spill_into_later_segments() {
        let t = SpanTable::new();
        // Same home slot for all: address 5 of shard 0 with different generations.
        let ids: Vec<u64> = (1..2000u64).map(|g| (g << 51) | 5).collect();
        for &id in &ids {
            t.insert(id, |_| {}).expect("room");
        }
        for &id in &ids {
            assert_eq!(t.get(id).and_then(Slot::id), Some(id));
        }
        let spilled: u32 = t.live.iter().map(|l| l.load(Ordering::Relaxed)).sum();
        assert_eq!(
            spilled as usize,
            ids.len() - PROBES,
            "all but one window spilled"
        );
        // Once they close, later segments are skipped by lookups and scans.
        for &id in &ids {
            t.remove(t.get(id).unwrap());
        }
        assert!(t.live.iter().all(|l| l.load(Ordering::Relaxed) == 0));
        assert_eq!(t.open_slots().count(), 0);
        assert!(t.get(ids[100]).is_none());
        // A reused id lands back in the first segment.
        let slot = t.insert(ids[100], |_| {}).unwrap();
        assert_eq!(slot.segment, 0);
    }

    #[test]
    fn concurrent_inserts_are_unique() {
        let t = std::sync::Arc::new(SpanTable::new());
        let threads: Vec<_> = (0..4u64)
            .map(|thread| {
                let t = t.clone();
                std::thread::spawn(move || {
                    for i in 1..=2000u64 {
                        let id = (thread << 38) | i;
                        t.insert(id, |e| e.busy.store(id, Ordering::Relaxed))
                            .unwrap();
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
                assert_eq!(t.get(id).unwrap().busy.load(Ordering::Relaxed), id);
            }
        }
    }
}

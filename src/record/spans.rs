//! Per-span timing state, reachable from a span `Id` from any thread without a lock.
//!
//! An open-addressing table of cache-line-sized slots keyed by the span id. A span is inserted
//! when it is created, looked up on enter/exit/close and turned into a tombstone when it closes.
//! The table grows in segments (each twice the size of the one before) that are never moved, so
//! a reference to a slot stays valid for the life of the table. Probing is bounded: a key is
//! in the first segment whose probe window had room for it when it was inserted, and a slot never
//! becomes empty again, so a lookup stops at the first empty slot it meets.
//!
//! Beside the table, [`Regions`]: slots found from the id by arithmetic, with no probe and no
//! locked instruction. `tracing_subscriber::Registry` ids are sharded-slab keys (+1): an
//! address in the low 38 bits, the creating thread's shard index in the 13 bits above, a
//! generation on top. A thread that owns a shard's region (claimed once per thread, with one
//! compare-and-swap, released when its thread-local state drops) inserts the spans it creates
//! with plain stores at `region[shard][address]`: it is the only thread that inserts there, and
//! a live span's slot is the span's until it closes. Nothing here trusts the id layout: a span
//! whose shard is not the creating thread's region, whose address is past the region, or whose
//! slot is still held (any other id scheme) goes to the table instead, as every span did.

use once_cell::race::OnceBox;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

const EMPTY: u64 = 0;
const TOMBSTONE: u64 = u64::MAX;
const RESERVED: u64 = u64::MAX - 1;

/// The owner (the creating thread) completed no entry of the span yet.
pub(crate) const ENTRIES_NONE: u16 = 0;
/// The owner completed exactly one entry: in the owner's sums, recorded nowhere yet (at close,
/// as the span's single entry if no other thread completed one, else as an entry).
pub(crate) const ENTRIES_ONE: u16 = 1;
/// The owner completed several entries; each is recorded in the entry histograms.
pub(crate) const ENTRIES_MANY: u16 = 2;

const FIRST_SEGMENT: usize = 4096;
/// Segments of the table, each twice the size of the one before.
pub(crate) const SEGMENTS: usize = 12;
const PROBES: usize = 16;

/// The state of one open span. 64 bytes, one cache line: spans used by different threads never
/// share a line.
///
/// The thread that created the span (its *owner*) adds its entries to `busy` and `self_ns` and
/// counts them in `entries` with plain loads and stores; other threads add theirs to
/// `shared_busy` and `shared_self` with atomic read-modify-writes, record each in their entry
/// histograms at its exit and set [`FLAG_SHARED`]. A span that never leaves its thread costs no
/// locked instruction, and concurrent entries from several threads lose nothing.
#[repr(align(64))]
#[derive(Debug)]
pub(crate) struct Slot {
    key: AtomicU64,
    /// Index of the span's name in the name registry.
    pub(crate) name: AtomicU16,
    /// How many entries the owner completed: [`ENTRIES_NONE`], [`ENTRIES_ONE`],
    /// [`ENTRIES_MANY`]; written by the owner only.
    pub(crate) entries: AtomicU16,
    /// Token of the owning (creating) thread (see `shards::thread_token`); 0: none (a thread
    /// being torn down).
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
    /// [`FLAG_MARKED`], [`FLAG_ERRORED`], [`FLAG_STEP`], [`FLAG_SHARED`].
    pub(crate) flags: AtomicU8,
    /// The span's node in the call tree (`tree::ROOT` when the tree is off).
    pub(crate) node: AtomicU16,
    /// The segment the slot is in and its index there (set once, when the segment is made);
    /// [`IN_REGION`] for a slot of [`Regions`].
    segment: u8,
    index: u32,
}

/// Resource readings were taken when the span opened (kept beside its slot, see
/// [`SlotIn::with_mark`]).
pub(crate) const FLAG_MARKED: u8 = 1;
/// An error-level event happened inside the span.
pub(crate) const FLAG_ERRORED: u8 = 2;
/// The span is a step span of the export cadence: its close is counted (`crate::export`).
pub(crate) const FLAG_STEP: u8 = 4;
/// A thread other than the owner completed an entry of the span.
pub(crate) const FLAG_SHARED: u8 = 8;

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

/// The `segment` of a slot in [`Regions`].
const IN_REGION: u8 = u8::MAX;
/// Shard indices (threads) of the registry that get a region of slots.
pub(crate) const REGIONS: usize = 64;
/// Slots per region: span ids whose address is below this go there.
pub(crate) const REGION_LEN: usize = 256;
const ADDRESS_BITS: u32 = 38;

/// The shard index of a span id (`tracing_subscriber::Registry`'s layout), if it has a region.
#[inline(always)]
fn region_of(id: u64) -> Option<usize> {
    let shard = ((id >> ADDRESS_BITS) & 0x1FFF) as usize;
    (shard < REGIONS).then_some(shard)
}

/// The bits of an id that are zero when it has a region and a slot there: a shard index
/// below [`REGIONS`] and an address below [`REGION_LEN`] (one test for both).
const OUT_OF_REGIONS: u64 =
    ((0x1FFF & !(REGIONS as u64 - 1)) << ADDRESS_BITS) | ((1 << ADDRESS_BITS) - REGION_LEN as u64);
const _: () = assert!(REGIONS.is_power_of_two() && REGION_LEN.is_power_of_two());

/// Slots reached from a span id by arithmetic, one region per shard index (see the module
/// docs). A region's slots are made by its first owner (16 KiB), kept for the table's life, and
/// what is kept beside them when a span first asks for it.
struct Regions<M> {
    /// The token (`shards::thread_token`) of the thread that owns each region, 0 if none.
    owners: Arc<[AtomicU32; REGIONS]>,
    slots: [OnceBox<Region<M>>; REGIONS],
}

/// One region's slots, and what is kept beside them (first: a lookup's reference to it is the
/// region's address itself, and the slots' offset folds into their address computation).
#[repr(C)]
struct Region<M> {
    marks: Marks<M>,
    slots: [Slot; REGION_LEN],
}

impl<M> Regions<M> {
    fn new() -> Self {
        Self {
            owners: Arc::new([const { AtomicU32::new(0) }; REGIONS]),
            slots: [const { OnceBox::new() }; REGIONS],
        }
    }

    /// The slot of `id` in its region, if it has one made.
    #[inline(always)]
    fn slot(&self, id: u64) -> Option<SlotIn<'_, M>> {
        if id & OUT_OF_REGIONS != 0 {
            return None;
        }
        let region = (id >> ADDRESS_BITS) as usize & (REGIONS - 1);
        let region = self.slots[region].get()?;
        Some(SlotIn {
            slot: &region.slots[id as usize & (REGION_LEN - 1)],
            marks: &region.marks,
        })
    }
}

/// A thread's ownership of one region: only that thread inserts there. Released on drop.
pub(crate) struct RegionClaim {
    owners: Arc<[AtomicU32; REGIONS]>,
    region: usize,
}

impl std::fmt::Debug for RegionClaim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegionClaim")
            .field("region", &self.region)
            .finish()
    }
}

impl Drop for RegionClaim {
    fn drop(&mut self) {
        self.owners[self.region].store(0, Ordering::Release);
    }
}

/// The table. See the module docs. `M` is what is kept beside the slot of an open span that
/// asked for it (resource readings at its creation), in the memory of the slot's segment or
/// region.
pub(crate) struct SpanTable<M> {
    /// Slots found by arithmetic from the ids of the spans that their region's owner creates.
    regions: Regions<M>,
    /// Whether a span was ever inserted in the table (rather than a region): until then, a
    /// lookup that misses the regions ends there.
    used: AtomicBool,
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
    marks: Marks<M>,
}

impl<M> Segment<M> {
    fn new(k: usize) -> Self {
        crate::alloc::untracked(|| Self {
            slots: (0..segment_len(k))
                .map(|i| Slot::new(k as u8, i as u32))
                .collect(),
            marks: Marks::new(segment_len(k)),
        })
    }

    #[inline(always)]
    fn slot_in(&self, index: usize) -> SlotIn<'_, M> {
        SlotIn {
            slot: &self.slots[index],
            marks: &self.marks,
        }
    }
}

/// What is kept beside each of `len` slots of a segment or a region (made on first use):
/// shared, its type's own interior mutability (the recorder's is atomics) orders its writes
/// and reads.
struct Marks<M> {
    cells: OnceLock<Box<[M]>>,
    len: usize,
}

impl<M> Marks<M> {
    const fn new(len: usize) -> Self {
        Self {
            cells: OnceLock::new(),
            len,
        }
    }
}

impl<M: Default> Marks<M> {
    /// The mark of slot `index`.
    fn get(&self, index: usize) -> Option<&M> {
        let len = self.len;
        self.cells
            .get_or_init(|| crate::alloc::untracked(|| (0..len).map(|_| M::default()).collect()))
            .get(index)
    }
}

/// A slot found in the table or a region, with what is kept beside its slots, for the
/// duration of one operation.
pub(crate) struct SlotIn<'a, M> {
    slot: &'a Slot,
    marks: &'a Marks<M>,
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

impl<'a, M: Default> SlotIn<'a, M> {
    /// Runs `f` on what is kept beside the slot, in place (no copy of it); `None` only if it
    /// could not be made.
    #[inline]
    pub(crate) fn with_mark<R>(&self, f: impl FnOnce(&M) -> R) -> Option<R> {
        self.mark().map(f)
    }

    /// What is kept beside the slot, for as long as the slot is borrowed; `None` only if it
    /// could not be made.
    #[inline]
    pub(crate) fn mark(&self) -> Option<&'a M> {
        self.marks.get(self.slot.index as usize)
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

impl<M: Default> SpanTable<M> {
    pub(crate) fn new() -> Self {
        Self {
            regions: Regions::new(),
            used: AtomicBool::new(false),
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
        if !self.used.load(Ordering::Relaxed) {
            // Before the key is published (Release), so whoever finds the key sees this.
            self.used.store(true, Ordering::Relaxed);
        }
        if let Some(index) = claim(&self.first.slots, id, 0) {
            let slot = self.first.slot_in(index);
            init(slot);
            slot.key.store(id, Ordering::Release);
            return true;
        }
        self.insert_spilled(id, init)
    }

    /// Claims the region of `id`'s shard for the calling thread (`token`, non-zero), if no other
    /// thread holds it: that thread then inserts there with [`SpanTable::insert_owned`]. One
    /// compare-and-swap per thread; the claim is released when dropped.
    #[cold]
    #[inline(never)]
    pub(crate) fn claim_region(&self, id: u64, token: u32) -> Option<RegionClaim> {
        let region = region_of(id)?;
        if token == 0 {
            return None;
        }
        self.regions.owners[region]
            .compare_exchange(0, token, Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
        let claim = RegionClaim {
            owners: self.regions.owners.clone(),
            region,
        };
        if self.regions.slots[region].get().is_none() {
            // Made by the region's first owner (the only thread that sets them), on the heap
            // (16 KiB), outside the hot path.
            crate::alloc::untracked(|| {
                let _ = self.regions.slots[region].set(Box::new(Region {
                    marks: Marks::new(REGION_LEN),
                    slots: std::array::from_fn(|i| Slot::new(IN_REGION, i as u32)),
                }));
            });
        }
        Some(claim)
    }

    /// Inserts `id` in the region `claim` holds, with plain stores: returns `false` (and does
    /// not call `init`) when `id` is not of that region or its slot is held by a span still
    /// open; the span then goes to [`SpanTable::insert`].
    #[inline(always)]
    pub(crate) fn insert_owned(
        &self,
        claim: &RegionClaim,
        id: u64,
        init: impl FnOnce(SlotIn<'_, M>),
    ) -> bool {
        // A slot in a region (shard and address in range), and the region this thread's.
        let Some(slot) = self.regions.slot(id) else {
            return false;
        };
        if (id >> ADDRESS_BITS) as usize & (REGIONS - 1) != claim.region {
            return false;
        }
        // Only the region's owner makes a slot of it hold a span, so the slot cannot be taken
        // between this load and the store below; others only free slots.
        let key = slot.key.load(Ordering::Acquire);
        if key != EMPTY && key != TOMBSTONE {
            return false;
        }
        init(slot);
        slot.key.store(id, Ordering::Release);
        true
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
            let slot = segment.slot_in(index);
            init(slot);
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
        if let Some(slot) = self.in_region(id) {
            return Some(f(slot));
        }
        // Nothing ever inserted outside the regions: an id not in a region is nowhere.
        if !self.used.load(Ordering::Relaxed) {
            return None;
        }
        let index = home(id, 0) & (FIRST_SEGMENT - 1);
        let slot = self.first.slot_in(index);
        match slot.key.load(Ordering::Acquire) {
            key if key == id => Some(f(slot)),
            EMPTY => None,
            _ => self.with_probing(id, f),
        }
    }

    /// The slot of the open span `id` if it is in a region (the common case: what [`with`]
    /// tries first, with nothing to hold while the slot is used).
    ///
    /// [`with`]: SpanTable::with
    #[inline(always)]
    pub(crate) fn in_region(&self, id: u64) -> Option<SlotIn<'_, M>> {
        let slot = self.regions.slot(id)?;
        (slot.key.load(Ordering::Acquire) == id).then_some(slot)
    }

    #[cold]
    #[inline(never)]
    fn with_probing<R>(&self, id: u64, f: impl FnOnce(SlotIn<'_, M>) -> R) -> Option<R> {
        match probe(&self.first.slots, id, 0) {
            Probe::Found(index) => return Some(f(self.first.slot_in(index))),
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
                return Some(f(segment.slot_in(index)));
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
        if k > 0
            && k != usize::from(IN_REGION)
            && self.live[k - 1].fetch_sub(1, Ordering::AcqRel) == 1
        {
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
        for region in self.regions.slots.iter().filter_map(OnceBox::get) {
            visit(&region.slots);
        }
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

    /// A registry-style id: generation, shard, address.
    fn id(generation: u64, shard: u64, address: u64) -> u64 {
        generation << 51 | shard << ADDRESS_BITS | address
    }

    #[test]
    fn a_region_has_one_owner_at_a_time() {
        let t = SpanTable::<AtomicU64>::new();
        let first = t.claim_region(id(0, 3, 1), 1).expect("free");
        assert!(t.claim_region(id(0, 3, 2), 2).is_none(), "held by token 1");
        assert!(
            t.claim_region(id(0, 3, 2), 0).is_none(),
            "no token, no region"
        );
        assert!(
            t.claim_region(id(0, REGIONS as u64, 1), 2).is_none(),
            "past the regions"
        );
        let other = t.claim_region(id(0, 4, 1), 2).expect("another region");
        drop(first);
        let again = t.claim_region(id(0, 3, 2), 2).expect("released on drop");
        assert_eq!((again.region, other.region), (3, 4));
    }

    #[test]
    fn a_region_takes_only_its_owners_free_slots_and_the_table_the_rest() {
        let t = SpanTable::<AtomicU64>::new();
        let claim = t.claim_region(id(0, 5, 1), 1).unwrap();
        let init = |s: SlotIn<'_, AtomicU64>| s.busy.store(9, Ordering::Relaxed);
        assert!(t.insert_owned(&claim, id(0, 5, 1), init));
        // Another generation at the same address while the first is open: the slot is held.
        assert!(!t.insert_owned(&claim, id(1, 5, 1), init));
        // Another shard's id, an address past the region: not the region's.
        assert!(!t.insert_owned(&claim, id(0, 6, 1), init));
        assert!(!t.insert_owned(&claim, id(0, 5, REGION_LEN as u64), init));
        for rest in [id(1, 5, 1), id(0, 6, 1), id(0, 5, REGION_LEN as u64)] {
            assert!(t.insert(rest, init));
            assert!(t.in_region(rest).is_none());
            assert_eq!(t.with(rest, |s| s.busy.load(Ordering::Relaxed)), Some(9));
        }
        assert!(t.in_region(id(0, 5, 1)).is_some());
        assert_eq!(t.with(id(0, 5, 1), |s| s.id()).flatten(), Some(id(0, 5, 1)));
        // What is kept beside a region's slot is the slot's own (spans with readings at their
        // open go to regions too: no locked instruction, no probe).
        let mark = |id, v| t.with(id, |s| s.with_mark(|m| m.store(v, Ordering::Relaxed)));
        assert_eq!(mark(id(0, 5, 1), 41).flatten(), Some(()));
        assert_eq!(mark(id(1, 5, 1), 42).flatten(), Some(()));
        let kept = |id| {
            t.with(id, |s| s.with_mark(|m| m.load(Ordering::Relaxed)))
                .flatten()
        };
        assert_eq!((kept(id(0, 5, 1)), kept(id(1, 5, 1))), (Some(41), Some(42)));
        let mut open = 0;
        t.for_each_open(|_| open += 1);
        assert_eq!(open, 4, "region and table");
        // Closed: the slot is free again, for the next generation; the old id is gone.
        t.with(id(0, 5, 1), |s| t.remove(s)).unwrap();
        assert!(t.with(id(0, 5, 1), |_| ()).is_none());
        assert!(t.insert_owned(&claim, id(2, 5, 1), init));
        assert!(t.in_region(id(2, 5, 1)).is_some());
        assert!(t.with(id(0, 5, 1), |_| ()).is_none());
    }

    #[test]
    fn lookups_skip_the_table_until_it_is_used() {
        let t = SpanTable::<AtomicU64>::new();
        assert!(!t.used.load(Ordering::Relaxed));
        assert!(t.with(id(0, 1, 1), |_| ()).is_none());
        assert!(t.insert(id(0, 1, 1), |_| {}));
        assert!(t.used.load(Ordering::Relaxed));
        assert!(t.with(id(0, 1, 1), |_| ()).is_some());
    }

    #[test]
    fn insert_get_remove() {
        let t = SpanTable::<AtomicU64>::new();
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
        let t = SpanTable::<AtomicU64>::new();
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
        t.with(ids[1000], |s| {
            s.with_mark(|m| m.store(77, Ordering::Relaxed))
        })
        .flatten()
        .unwrap();
        let kept = t.with(ids[1000], |s| s.with_mark(|m| m.load(Ordering::Relaxed)));
        assert_eq!(kept.flatten(), Some(77));
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
        let t = std::sync::Arc::new(SpanTable::<AtomicU64>::new());
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

//! [`Announced`]: the spans a Perfetto window's layer knows, found from a span id without a lock
//! or an allocation.
//!
//! tracing-perfetto-file ignores the entries of a span it was not told of (`on_new_span`), and a
//! window's layer is told only of what happens while the window is open. A span created in the
//! window is announced at its creation; a span created before (the epoch around the steps, a
//! model layer's long-lived span) is announced at its first entry in the window, exactly once
//! whichever threads enter it. This table tells the two apart at each entry.
//!
//! One table per window (made with the window's layer, dropped with it): buckets of 8 span ids,
//! one cache line each, the bucket chosen by a hash of the id. A span created in the window takes
//! a free slot of its bucket with one compare-and-swap and gives it back when it closes; an entry
//! finds its span by reading the 8 slots. Spans created before the window go through
//! [`Announced::late`], a mutex taken once per such span and window (announcing it and claiming
//! its slot under the mutex is what makes it exactly once); so do the spans of a full bucket
//! (more than 8 open spans of the window in one bucket), kept in a set under that mutex.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Slots per bucket: 8 ids of 8 bytes, one cache line.
const BUCKET: usize = 8;
/// Buckets per window: 4096 slots, 32 KiB.
const BUCKETS: usize = 512;
const FREE: u64 = 0;
/// A slot claimed by a late announcement under way (never a span id the table holds: a span
/// with this id goes to the set).
const RESERVED: u64 = u64::MAX;

#[repr(align(64))]
struct Bucket([AtomicU64; BUCKET]);

/// The spans a window's layer knows (see the module docs).
pub(super) struct Announced {
    buckets: Box<[Bucket]>,
    /// Spans announced at their first entry are announced under this lock; spans whose bucket
    /// was full are kept in the set.
    late: Mutex<HashSet<u64>>,
    /// How many spans the set holds (a close looks there only if some).
    in_set: AtomicUsize,
}

impl Announced {
    pub(super) fn new() -> Self {
        Self {
            buckets: (0..BUCKETS)
                .map(|_| Bucket(std::array::from_fn(|_| AtomicU64::new(FREE))))
                .collect(),
            late: Mutex::new(HashSet::new()),
            in_set: AtomicUsize::new(0),
        }
    }

    #[inline(always)]
    fn bucket(&self, id: u64) -> &[AtomicU64; BUCKET] {
        // Fibonacci hashing: registry ids differ in their low bits (slab addresses) and in a
        // thread's shard bits; the top bits of the product mix both.
        let i = (id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 55) as usize % BUCKETS;
        &self.buckets[i].0
    }

    fn lock(&self) -> MutexGuard<'_, HashSet<u64>> {
        self.late.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the span is in its bucket (announced, in this window).
    #[inline(always)]
    fn in_bucket(&self, id: u64) -> bool {
        self.bucket(id)
            .iter()
            .any(|slot| slot.load(Ordering::Acquire) == id)
    }

    /// Claims a free slot of the span's bucket for `value`.
    #[inline(always)]
    fn claim(&self, id: u64, value: u64) -> Option<&AtomicU64> {
        self.bucket(id).iter().find(|slot| {
            slot.load(Ordering::Relaxed) == FREE
                && slot
                    .compare_exchange(FREE, value, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
        })
    }

    /// The span `id` was created in the window and announced to its layer.
    #[inline]
    pub(super) fn created(&self, id: u64) {
        if id == RESERVED || self.claim(id, id).is_none() {
            self.insert_in_set(self.lock(), id);
        }
    }

    #[cold]
    #[inline(never)]
    fn insert_in_set(&self, mut set: MutexGuard<'_, HashSet<u64>>, id: u64) {
        if set.insert(id) {
            self.in_set.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The span `id` is entered: whether the window's layer knows it, after `announce` told it
    /// if it did not (a span created before the window, at its first entry in the window).
    #[inline]
    pub(super) fn entered(&self, id: u64, announce: impl FnOnce()) -> bool {
        self.in_bucket(id) || self.entered_late(id, announce)
    }

    #[cold]
    #[inline(never)]
    fn entered_late(&self, id: u64, announce: impl FnOnce()) -> bool {
        let set = self.lock();
        // Announced by another thread while this one waited for the lock, or kept in the set.
        if self.in_bucket(id) || set.contains(&id) {
            return true;
        }
        // The slot is claimed before the layer is told, and shows the id only after: an entry
        // on another thread that finds the id finds a span the layer knows.
        let slot = (id != RESERVED).then(|| self.claim(id, RESERVED)).flatten();
        announce();
        match slot {
            Some(slot) => slot.store(id, Ordering::Release),
            None => self.insert_in_set(set, id),
        }
        true
    }

    /// The span `id` closed (its layer forgot it): its slot is free again.
    #[inline]
    pub(super) fn closed(&self, id: u64) {
        let freed = self.bucket(id).iter().any(|slot| {
            slot.load(Ordering::Relaxed) == id
                && slot
                    .compare_exchange(id, FREE, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
        });
        if !freed && self.in_set.load(Ordering::Relaxed) != 0 {
            self.remove_from_set(id);
        }
    }

    #[cold]
    #[inline(never)]
    fn remove_from_set(&self, id: u64) {
        if self.lock().remove(&id) {
            self.in_set.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::{Arc, Barrier};

    #[test]
    fn spans_created_in_the_window_are_known_and_forgotten_at_close() {
        let a = Announced::new();
        a.created(7);
        assert!(a.entered(7, || panic!("created in the window: not announced again")));
        a.closed(7);
        let mut told = 0;
        assert!(a.entered(7, || told += 1));
        assert_eq!(told, 1, "closed, then an entry of the same id: announced");
    }

    #[test]
    fn a_span_created_before_the_window_is_announced_once() {
        let a = Announced::new();
        let mut told = 0;
        for _ in 0..3 {
            assert!(a.entered(42, || told += 1));
        }
        assert_eq!(told, 1);
        assert!(a.in_bucket(42));
    }

    #[test]
    fn a_full_bucket_spills_into_the_set_and_loses_nothing() {
        let a = Announced::new();
        // 40 ids of one bucket: 8 in it, 32 in the set.
        let first = 1u64;
        let same: Vec<u64> = (first..)
            .filter(|&id| std::ptr::eq(a.bucket(id), a.bucket(first)))
            .take(40)
            .collect();
        for &id in &same[..20] {
            a.created(id);
        }
        let mut told = 0;
        for &id in &same[20..] {
            assert!(a.entered(id, || told += 1));
        }
        assert_eq!(told, 20, "each span before the window announced once");
        for &id in &same {
            assert!(a.entered(id, || panic!("{id} known")));
        }
        assert_eq!(a.in_set.load(Ordering::Relaxed), 32);
        for &id in &same {
            a.closed(id);
        }
        assert_eq!(a.in_set.load(Ordering::Relaxed), 0);
        assert!(a
            .bucket(first)
            .iter()
            .all(|s| s.load(Ordering::Relaxed) == FREE));
        // The reserved value is never taken for an id.
        a.created(RESERVED);
        assert!(a.entered(RESERVED, || panic!("known")));
        a.closed(RESERVED);
        assert_eq!(a.in_set.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn threads_entering_a_span_first_announce_it_once() {
        let a = Arc::new(Announced::new());
        let told = Arc::new(AtomicUsize::new(0));
        let start = Arc::new(Barrier::new(8));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (a, told, start) = (a.clone(), told.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    for id in 1..=200u64 {
                        assert!(a.entered(id, || {
                            told.fetch_add(1, Ordering::SeqCst);
                        }));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(told.load(Ordering::SeqCst), 200);
    }
}

//! A counting global allocator: bytes and allocations per thread, and a batched process-wide
//! net heap figure.
//!
//! Install it in your binary (not in a library) to get heap figures per span:
//!
//! ```
//! #[global_allocator]
//! static ALLOC: spanprof::CountingAlloc = spanprof::CountingAlloc::system();
//! # fn main() {
//! let before = spanprof::alloc::HeapCounters::thread().expect("installed above");
//! let v = vec![0u8; 1000];
//! let used = spanprof::alloc::HeapCounters::thread().expect("installed above").since(before);
//! assert_eq!((used.allocated, used.allocs), (1000, 1));
//! # drop(v);
//! # }
//! ```
//!
//! # What it costs
//!
//! Per allocation or free: three adds to thread-local cells (no lock, no shared atomic), one
//! relaxed load of a flag that is written once per process, and, once per
//! [`HeapCounters::PROCESS_GRANULARITY_BYTES`] of net change on a thread, one atomic add to a
//! process-wide counter. `cargo bench -p spanprof-peers --bench alloc` measures it against
//! `System`.
//!
//! # Platform note
//!
//! The counters live in a `thread_local!` with `const` initialisation and no destructor, which is
//! a plain native TLS slot on every tier-1 platform: reading it never allocates, so the
//! allocator cannot recurse into itself.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering::Relaxed};

/// A [`GlobalAlloc`] that forwards to `A` (the system allocator by default) and counts, per
/// thread, the bytes allocated and freed and the number of allocations.
///
/// `realloc` counts as a free of the old size and an allocation of the new one. Frees are counted
/// on the thread that frees, whichever thread allocated. Failed allocations are not counted.
///
/// Read the counters with [`HeapCounters::thread`] and [`HeapCounters::process_net_bytes`];
/// spanprof's layer reads them at span open and close at the `detailed` and `full` presets.
#[derive(Debug, Default, Clone, Copy)]
pub struct CountingAlloc<A = System> {
    inner: A,
}

impl CountingAlloc<System> {
    /// Counts allocations served by [`System`]: `static A: CountingAlloc = CountingAlloc::system();`
    pub const fn system() -> Self {
        Self { inner: System }
    }
}

impl<A> CountingAlloc<A> {
    /// Counts allocations served by `inner` (e.g. another crate's global allocator).
    pub const fn new(inner: A) -> Self {
        Self { inner }
    }

    /// The allocator that serves the allocations.
    pub fn inner(&self) -> &A {
        &self.inner
    }
}

/// One thread's allocation counters since the thread started (or differences of them, see
/// [`HeapCounters::since`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct HeapCounters {
    /// Bytes allocated (the requested sizes; `realloc` counts its new size).
    pub allocated: u64,
    /// Bytes freed (`realloc` counts its old size).
    pub freed: u64,
    /// Allocations (`alloc`, `alloc_zeroed` and `realloc` calls that succeeded).
    pub allocs: u64,
}

impl HeapCounters {
    /// How far [`HeapCounters::process_net_bytes`] may lag behind the true net heap, per
    /// thread: each thread adds its net change to the process-wide counter once it reaches this
    /// many bytes either way (64 KiB).
    ///
    /// So the process figure is within `threads × 64 KiB` of the truth, and the peak the sampler
    /// derives from it has that granularity too. A thread that exits takes its last unflushed
    /// change (less than 64 KiB) with it, unless spanprof's layer ran on that thread (it
    /// arranges a final flush at thread exit).
    pub const PROCESS_GRANULARITY_BYTES: u64 = 64 * 1024;

    /// This thread's counters, or `None` if [`CountingAlloc`] is not the global allocator (more
    /// precisely: if it has served no allocation yet). Never allocates.
    #[inline]
    pub fn thread() -> Option<Self> {
        thread_heap()
    }

    /// The process-wide net heap (bytes allocated minus bytes freed, by every thread) since
    /// the allocator served its first allocation, to within
    /// [`HeapCounters::PROCESS_GRANULARITY_BYTES`] per thread. `None` if [`CountingAlloc`] is
    /// not the global allocator. Never allocates.
    pub fn process_net_bytes() -> Option<i64> {
        global_heap_bytes()
    }

    /// Whether [`CountingAlloc`] is the global allocator (it has served an allocation).
    pub fn installed() -> bool {
        installed()
    }

    /// What happened between `earlier` and `self` (wrapping differences, field by field).
    #[must_use]
    pub fn since(self, earlier: Self) -> Self {
        Self {
            allocated: self.allocated.wrapping_sub(earlier.allocated),
            freed: self.freed.wrapping_sub(earlier.freed),
            allocs: self.allocs.wrapping_sub(earlier.allocs),
        }
    }

    /// Bytes allocated minus bytes freed (what this thread retained, if `self` is a
    /// difference).
    pub fn net_bytes(self) -> i64 {
        self.allocated.wrapping_sub(self.freed) as i64
    }
}

/// Set by the first allocation through any [`CountingAlloc`].
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// Process-wide net bytes: the sum of what every thread flushed.
static PROCESS_NET: AtomicI64 = AtomicI64::new(0);

/// One thread's counters. No destructor, `const` init: a plain TLS slot.
struct Counters {
    allocated: Cell<u64>,
    freed: Cell<u64>,
    allocs: Cell<u64>,
    /// Net bytes not yet added to [`PROCESS_NET`].
    unflushed: Cell<i64>,
    /// Nesting depth of [`untracked`] sections: spanprof's own allocations, not counted.
    paused: Cell<u32>,
}

thread_local! {
    static COUNTERS: Counters = const {
        Counters {
            allocated: Cell::new(0),
            freed: Cell::new(0),
            allocs: Cell::new(0),
            unflushed: Cell::new(0),
            paused: Cell::new(0),
        }
    };
    /// Flushes this thread's remainder into [`PROCESS_NET`] when the thread exits. Touched only
    /// outside the allocator (its destructor registration may allocate).
    static EXIT_FLUSH: ExitFlush = const { ExitFlush };
}

const FLUSH: i64 = HeapCounters::PROCESS_GRANULARITY_BYTES as i64;

struct ExitFlush;

impl Drop for ExitFlush {
    fn drop(&mut self) {
        let _ = COUNTERS.try_with(|c| {
            let pending = c.unflushed.replace(0);
            if pending != 0 {
                PROCESS_NET.fetch_add(pending, Relaxed);
            }
        });
    }
}

#[inline(always)]
fn mark_installed() {
    if !INSTALLED.load(Relaxed) {
        INSTALLED.store(true, Relaxed);
    }
}

#[inline(always)]
fn flush_if_due(c: &Counters, pending: i64) {
    if pending >= FLUSH || pending <= -FLUSH {
        flush(c, pending);
    } else {
        c.unflushed.set(pending);
    }
}

#[cold]
#[inline(never)]
fn flush(c: &Counters, pending: i64) {
    c.unflushed.set(0);
    PROCESS_NET.fetch_add(pending, Relaxed);
}

/// Runs `f` without counting its allocations and frees: spanprof's own memory (its per-thread
/// and per-name state, made on first use inside a user's span) must not show in any span's heap
/// figures, nor in the process's. Only for memory spanprof keeps, or frees within the section.
#[inline]
pub(crate) fn untracked<R>(f: impl FnOnce() -> R) -> R {
    let _ = COUNTERS.try_with(|c| c.paused.set(c.paused.get() + 1));
    let out = f();
    let _ = COUNTERS.try_with(|c| c.paused.set(c.paused.get().saturating_sub(1)));
    out
}

#[inline(always)]
fn count_alloc(size: usize) {
    // A thread being torn down may have lost its slot: losing those counts is fine.
    let _ = COUNTERS.try_with(|c| {
        if c.paused.get() > 0 {
            return;
        }
        c.allocated.set(c.allocated.get().wrapping_add(size as u64));
        c.allocs.set(c.allocs.get().wrapping_add(1));
        flush_if_due(c, c.unflushed.get().wrapping_add(size as i64));
    });
}

#[inline(always)]
fn count_free(size: usize) {
    let _ = COUNTERS.try_with(|c| {
        if c.paused.get() > 0 {
            return;
        }
        c.freed.set(c.freed.get().wrapping_add(size as u64));
        flush_if_due(c, c.unflushed.get().wrapping_sub(size as i64));
    });
}

#[inline(always)]
fn count_realloc(old: usize, new: usize) {
    let _ = COUNTERS.try_with(|c| {
        if c.paused.get() > 0 {
            return;
        }
        c.allocated.set(c.allocated.get().wrapping_add(new as u64));
        c.freed.set(c.freed.get().wrapping_add(old as u64));
        c.allocs.set(c.allocs.get().wrapping_add(1));
        let change = (new as i64).wrapping_sub(old as i64);
        flush_if_due(c, c.unflushed.get().wrapping_add(change));
    });
}

// SAFETY: every method forwards to `self.inner` with the caller's arguments unchanged and returns
// its result unchanged, so `A`'s guarantees carry over. The counting around it only touches
// thread-local `Cell`s (const-initialised, no destructor: never allocates, never unwinds) and
// atomics; it cannot panic (wrapping arithmetic, `try_with`).
unsafe impl<A: GlobalAlloc> GlobalAlloc for CountingAlloc<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract; we pass it on unchanged.
        let ptr = unsafe { self.inner.alloc(layout) };
        if !ptr.is_null() {
            mark_installed();
            count_alloc(layout.size());
        }
        ptr
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let ptr = unsafe { self.inner.alloc_zeroed(layout) };
        if !ptr.is_null() {
            mark_installed();
            count_alloc(layout.size());
        }
        ptr
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller guarantees `ptr` was allocated by this allocator (hence by
        // `inner`, which served every allocation) with `layout`.
        unsafe { self.inner.dealloc(ptr, layout) };
        count_free(layout.size());
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `ptr`/`layout` describe a live block of this allocator
        // (hence of `inner`) and that `new_size` is valid for `layout.align()`.
        let new = unsafe { self.inner.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            mark_installed();
            count_realloc(layout.size(), new_size);
        }
        new
    }
}

/// Whether a [`CountingAlloc`] has served an allocation (so it is the global allocator).
#[inline]
pub(crate) fn installed() -> bool {
    INSTALLED.load(Relaxed)
}

/// This thread's counters; `None` when [`CountingAlloc`] is not installed. Also arranges, once
/// per thread, for the thread's unflushed net change to reach the process figure at exit.
#[inline]
pub(crate) fn thread_heap() -> Option<HeapCounters> {
    if !installed() {
        return None;
    }
    // Registers the exit flush (outside the allocator, where registration may allocate).
    let _ = EXIT_FLUSH.try_with(|_| ());
    COUNTERS
        .try_with(|c| HeapCounters {
            allocated: c.allocated.get(),
            freed: c.freed.get(),
            allocs: c.allocs.get(),
        })
        .ok()
}

/// spanprof's own state, made in [`untracked`] sections, and freed in one too when it is
/// dropped: a free counted of memory whose allocation was not would move the process figure
/// down by its size (a profile dropped took hundreds of KiB off it).
pub(crate) struct Own<T>(std::mem::ManuallyDrop<T>);

impl<T> Own<T> {
    /// What `make` makes, its allocations not counted, to be dropped without counting its
    /// frees. What the value grows later must be made in [`untracked`] sections too.
    pub(crate) fn make(make: impl FnOnce() -> T) -> Self {
        Self(std::mem::ManuallyDrop::new(untracked(make)))
    }
}

impl<T> std::ops::Deref for Own<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> std::ops::DerefMut for Own<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

impl<T> Drop for Own<T> {
    fn drop(&mut self) {
        // SAFETY: dropped once, here; `self.0` is not used after.
        untracked(|| unsafe { std::mem::ManuallyDrop::drop(&mut self.0) });
    }
}

/// The process-wide net heap, batched (see [`HeapCounters::PROCESS_GRANULARITY_BYTES`]).
pub(crate) fn global_heap_bytes() -> Option<i64> {
    installed().then(|| PROCESS_NET.load(Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_and_net() {
        let a = HeapCounters {
            allocated: 10,
            freed: 4,
            allocs: 2,
        };
        let b = HeapCounters {
            allocated: 110,
            freed: 54,
            allocs: 7,
        };
        let d = b.since(a);
        assert_eq!(
            d,
            HeapCounters {
                allocated: 100,
                freed: 50,
                allocs: 5
            }
        );
        assert_eq!(d.net_bytes(), 50);
        assert_eq!(a.since(b).net_bytes(), -50);
    }

    #[test]
    fn untracked_sections_count_nothing() {
        std::thread::spawn(|| {
            count_alloc(100);
            untracked(|| {
                count_alloc(1000);
                untracked(|| count_free(50));
                count_realloc(10, 20);
            });
            count_free(30);
            let c = COUNTERS.with(|c| (c.allocated.get(), c.freed.get(), c.allocs.get()));
            assert_eq!(c, (100, 30, 1));
            assert_eq!(COUNTERS.with(|c| c.unflushed.get()), 70);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn flush_batches() {
        // The unit-test binary does not install the allocator: drive the counters directly, on
        // a thread of their own (without marking the allocator installed).
        std::thread::spawn(|| {
            count_alloc(1000);
            let unflushed = COUNTERS.with(|c| c.unflushed.get());
            assert_eq!(unflushed, 1000);
            count_alloc(FLUSH as usize);
            assert_eq!(COUNTERS.with(|c| c.unflushed.get()), 0);
            count_free(500);
            count_realloc(100, 50);
            assert_eq!(COUNTERS.with(|c| c.unflushed.get()), -550);
            let c = COUNTERS.with(|c| (c.allocated.get(), c.freed.get(), c.allocs.get()));
            assert_eq!(c, (1000 + FLUSH as u64 + 50, 600, 3));
        })
        .join()
        .unwrap();
    }
}

//! Single-writer atomic histograms with the exact bucket layout of `hdrhistogram`.
//!
//! The recording thread is the only writer of a [`AtomicHist`]; any thread may read it while it
//! records (a snapshot). Counters are `AtomicU16` to keep a (span name × thread) under 64 KiB;
//! before any counter could overflow, the writer drains its counts into a shared `u64`
//! [`Histogram`] (the *spill*), at most once per 65 535 samples.
//!
//! The layout (2 significant digits, 1 ns ..= [`HIGHEST_NS`]) is the one
//! `Histogram::new_with_bounds(1, HIGHEST_NS, 2)` uses, so a drained or snapshotted histogram is a
//! real [`Histogram`] that any HdrHistogram implementation can read.

use once_cell::race::OnceBox;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering::Relaxed};

use hdrhistogram::Histogram;

pub(crate) use crate::profile::buckets::{index_of, new_histogram, record_n, value_of, COUNTS_LEN};
use crate::profile::HIGHEST_NS;

/// Exact running figures kept beside the buckets (the buckets only know values to 2 digits;
/// the number of samples is the buckets' total).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Exact {
    pub(crate) sum: u64,
    /// `u64::MAX` while empty.
    pub(crate) min: u64,
    pub(crate) max: u64,
    pub(crate) clamped: u64,
}

impl Default for Exact {
    fn default() -> Self {
        Self {
            sum: 0,
            min: u64::MAX,
            max: 0,
            clamped: 0,
        }
    }
}

impl Exact {
    pub(crate) fn merge(&mut self, other: &Exact) {
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.sum = self.sum.saturating_add(other.sum);
        self.clamped += other.clamped;
    }

    /// The smallest sample, 0 when empty.
    pub(crate) fn min_or_zero(&self) -> u64 {
        if self.min == u64::MAX {
            0
        } else {
            self.min
        }
    }
}

/// A histogram one thread records into and any thread may read. Its counters are allocated on
/// the first record, so kinds a span name never uses cost no memory.
pub(crate) struct AtomicHist {
    /// Of a fixed length: the bound of an index is a constant (no length loaded per record).
    counts: OnceBox<[AtomicU16; COUNTS_LEN]>,
    sum: AtomicU64,
    min: AtomicU64,
    max: AtomicU64,
    clamped: AtomicU64,
}

impl std::fmt::Debug for AtomicHist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AtomicHist")
            .field("sum", &self.sum.load(Relaxed))
            .finish_non_exhaustive()
    }
}

impl AtomicHist {
    pub(crate) const fn new() -> Self {
        Self {
            counts: OnceBox::new(),
            sum: AtomicU64::new(0),
            min: AtomicU64::new(u64::MAX),
            max: AtomicU64::new(0),
            clamped: AtomicU64::new(0),
        }
    }

    /// Records one value. Only the owning thread may call this. Returns `true` when a counter
    /// is full and the buckets must be drained (with [`AtomicHist::drain_into`]) before the
    /// next record.
    #[inline(always)]
    pub(crate) fn record(&self, value_ns: u64) -> bool {
        let value = if value_ns > HIGHEST_NS {
            self.clamped.store(self.clamped.load(Relaxed) + 1, Relaxed);
            HIGHEST_NS
        } else {
            value_ns
        };
        let counts = self.counts.get_or_init(|| {
            crate::alloc::untracked(|| {
                // Made on the heap (no 9 KiB array on the recording thread's stack); a boxed
                // slice of COUNTS_LEN is the boxed array.
                let counts: Box<[AtomicU16]> = (0..COUNTS_LEN).map(|_| AtomicU16::new(0)).collect();
                counts
                    .try_into()
                    .unwrap_or_else(|_| unreachable!("COUNTS_LEN counters"))
            })
        });
        let bucket = &counts[index_of(value)];
        let n = bucket.load(Relaxed).wrapping_add(1);
        bucket.store(n, Relaxed);
        self.sum
            .store(self.sum.load(Relaxed).wrapping_add(value_ns), Relaxed);
        if value_ns < self.min.load(Relaxed) {
            self.min.store(value_ns, Relaxed);
        }
        if value_ns > self.max.load(Relaxed) {
            self.max.store(value_ns, Relaxed);
        }
        n == u16::MAX
    }

    /// The exact figures as of now.
    pub(crate) fn exact(&self) -> Exact {
        Exact {
            sum: self.sum.load(Relaxed),
            min: self.min.load(Relaxed),
            max: self.max.load(Relaxed),
            clamped: self.clamped.load(Relaxed),
        }
    }

    /// Adds the buckets to `into` (a histogram made by [`new_histogram`]).
    pub(crate) fn add_to(&self, into: &mut Histogram<u64>) {
        self.merge_into(into, false);
    }

    /// Moves the buckets into `into` and zeroes them. Only the owning thread may call this, and
    /// only while holding the lock that guards `into` (readers hold it too, so a reader never
    /// sees a sample in both places or in neither).
    pub(crate) fn drain_into(&self, into: &mut Histogram<u64>) {
        self.merge_into(into, true);
    }

    fn merge_into(&self, into: &mut Histogram<u64>, zero: bool) {
        let Some(counts) = self.counts.get() else {
            return;
        };
        for (index, bucket) in counts.iter().enumerate() {
            let n = bucket.load(Relaxed);
            if n != 0 {
                record_n(into, value_of(index), u64::from(n));
                if zero {
                    bucket.store(0, Relaxed);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{LOWEST_NS, SIGNIFICANT_DIGITS};

    #[test]
    fn layout_matches_hdrhistogram() {
        let h =
            Histogram::<u64>::new_with_bounds(LOWEST_NS, HIGHEST_NS, SIGNIFICANT_DIGITS).unwrap();
        assert_eq!(h.distinct_values(), COUNTS_LEN);
        // 9 KiB per histogram, at most eight per (span name × thread): under 72 KiB.
        const { assert!(crate::record::names::KINDS * COUNTS_LEN * 2 <= 72 * 1024) };
    }

    #[test]
    fn index_and_value_agree_with_hdrhistogram() {
        let h = new_histogram();
        let mut v = 0u64;
        while v <= HIGHEST_NS {
            let idx = index_of(v);
            assert!(idx < COUNTS_LEN, "value {v}");
            assert_eq!(value_of(idx), h.lowest_equivalent(v), "value {v}");
            v = v * 3 / 2 + 1;
        }
        assert_eq!(
            value_of(index_of(HIGHEST_NS)),
            h.lowest_equivalent(HIGHEST_NS)
        );
    }

    #[test]
    fn recorded_histogram_equals_hdrhistogram() {
        let a = AtomicHist::new();
        let mut reference = new_histogram();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = x % (1 << (x % 40));
            a.record(v);
            reference.record(v).unwrap();
        }
        let mut out = new_histogram();
        a.add_to(&mut out);
        assert_eq!(out, reference);
        assert_eq!(out.len(), 10_000);
    }

    #[test]
    fn out_of_range_values_are_clamped_and_counted() {
        let a = AtomicHist::new();
        a.record(HIGHEST_NS * 5);
        a.record(7);
        let e = a.exact();
        assert_eq!((e.clamped, e.max, e.min), (1, HIGHEST_NS * 5, 7));
        let mut out = new_histogram();
        a.add_to(&mut out);
        assert_eq!(out.len(), 2);
        assert!(out.equivalent(out.max(), HIGHEST_NS));
    }

    #[test]
    fn histograms_take_memory_for_the_range_recorded() {
        let a = AtomicHist::new();
        for v in [300, 700, 1_000] {
            a.record(v);
        }
        let mut small = new_histogram();
        a.add_to(&mut small);
        // Up to 1 µs: 4 half-buckets of 128 after the first 256 values.
        assert!(
            small.distinct_values() * 8 <= 8 * 1024,
            "{}",
            small.distinct_values()
        );
        assert_eq!(
            (small.len(), small.max()),
            (3, small.highest_equivalent(1_000))
        );
        // A second of range grows it, and it agrees with a full-range histogram.
        a.record(1_000_000_000);
        let mut grown = new_histogram();
        a.add_to(&mut grown);
        assert!(
            grown.distinct_values() * 8 <= 26 * 1024,
            "{}",
            grown.distinct_values()
        );
        let mut full = Histogram::<u64>::new_with_bounds(LOWEST_NS, HIGHEST_NS, 2).unwrap();
        a.add_to(&mut full);
        for q in [0.0, 0.25, 0.5, 0.75, 1.0] {
            assert_eq!(
                grown.value_at_quantile(q),
                full.value_at_quantile(q),
                "q {q}"
            );
        }
    }

    #[test]
    fn drain_before_overflow_keeps_every_sample() {
        let a = AtomicHist::new();
        let mut spill = new_histogram();
        for _ in 0..200_000u32 {
            if a.record(42) {
                a.drain_into(&mut spill);
            }
        }
        a.add_to(&mut spill);
        assert_eq!(spill.count_at(42), 200_000);
    }
}

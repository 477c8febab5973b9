//! The histograms of a profile: spanprof's bucket layout (hdrhistogram's, 2 significant digits
//! from 1 ns to [`HIGHEST_NS`]) and [`Buckets`], a histogram stored as its non-empty buckets.

use hdrhistogram::Histogram;

use super::{HIGHEST_NS, LOWEST_NS, SIGNIFICANT_DIGITS};

const SUB_BUCKET_HALF_MAGNITUDE: u32 = 7;
const SUB_BUCKET_HALF: usize = 1 << SUB_BUCKET_HALF_MAGNITUDE;
const SUB_BUCKET_MASK: u64 = (2 * SUB_BUCKET_HALF as u64) - 1;
const LEADING_ZERO_BASE: u32 = 64 - SUB_BUCKET_HALF_MAGNITUDE - 1;

const fn bucket_count() -> usize {
    let mut smallest_untrackable = 2 * SUB_BUCKET_HALF as u64;
    let mut buckets = 1;
    while smallest_untrackable <= HIGHEST_NS {
        smallest_untrackable <<= 1;
        buckets += 1;
    }
    buckets
}

/// Number of counters per histogram.
pub(crate) const COUNTS_LEN: usize = (bucket_count() + 1) * SUB_BUCKET_HALF;

/// The highest value the counters tell apart: the top of the bucket holding [`HIGHEST_NS`]
/// (2^42 - 1). hdrhistogram writes it as the highest trackable value of a histogram that
/// resized itself to hold [`HIGHEST_NS`].
pub(crate) const TOP_NS: u64 = ((2 * SUB_BUCKET_HALF as u64) << (bucket_count() - 1)) - 1;

/// The index of the bucket holding `value` (at most [`HIGHEST_NS`]).
#[inline(always)]
pub(crate) fn index_of(value: u64) -> usize {
    let bucket = LEADING_ZERO_BASE - (value | SUB_BUCKET_MASK).leading_zeros();
    let sub_bucket = (value >> bucket) as usize;
    ((bucket as usize + 1) << SUB_BUCKET_HALF_MAGNITUDE) + sub_bucket - SUB_BUCKET_HALF
}

/// The lowest value of bucket `index`.
pub(crate) fn value_of(index: usize) -> u64 {
    let mut bucket = (index >> SUB_BUCKET_HALF_MAGNITUDE) as i64 - 1;
    let mut sub_bucket = (index & (SUB_BUCKET_HALF - 1)) + SUB_BUCKET_HALF;
    if bucket < 0 {
        sub_bucket -= SUB_BUCKET_HALF;
        bucket = 0;
    }
    (sub_bucket as u64) << bucket
}

/// A histogram of nanosecond values stored as its non-empty buckets: memory in proportion to the
/// distinct values recorded (16 bytes per non-empty bucket; at most 4608 buckets, i.e. 72 KiB,
/// however many samples), not to the histogram's range.
///
/// The bucket layout is hdrhistogram's for `Histogram::new_with_bounds(1, HIGHEST_NS, 2)`:
/// [`Buckets::to_histogram`] gives the `hdrhistogram::Histogram` back, for any computation;
/// in the JSON profile it is written as a standard HdrHistogram V2 + deflate payload.
///
/// A histogram read from a profile is kept as its checked, compressed encoding and decoded
/// when its buckets are asked for: reading a profile takes memory in proportion to the file.
#[derive(Clone, Default)]
pub struct Buckets(Repr);

#[derive(Clone)]
enum Repr {
    /// (lowest value of the bucket, count), ascending by value; no zero count.
    Counts(Vec<(u64, u64)>),
    /// A compressed HdrHistogram V2, checked when read, with its number of samples.
    Encoded { bytes: Box<[u8]>, len: u64 },
}

impl Default for Repr {
    fn default() -> Self {
        Repr::Counts(Vec::new())
    }
}

impl PartialEq for Buckets {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.counts() == other.counts()
    }
}

impl Eq for Buckets {}

impl std::fmt::Debug for Buckets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buckets")
            .field("len", &self.len())
            .field("buckets", &self.counts().len())
            .finish()
    }
}

impl Buckets {
    /// The non-empty buckets of `histogram` (of any bounds with 2 significant digits or more;
    /// values are mapped to spanprof's buckets).
    pub fn from_histogram(histogram: &Histogram<u64>) -> Self {
        let mut counts: Vec<(u64, u64)> = Vec::new();
        for v in histogram.iter_recorded() {
            let value = value_of(index_of(v.value_iterated_to().min(HIGHEST_NS)));
            match counts.last_mut() {
                Some((last, n)) if *last == value => *n += v.count_at_value(),
                _ => counts.push((value, v.count_at_value())),
            }
        }
        counts.shrink_to_fit();
        Self(Repr::Counts(counts))
    }

    /// Buckets from (lowest value of a spanprof bucket, count) pairs, ascending by value, with
    /// no zero count (the histogram reader builds them so).
    pub(crate) fn from_sorted_counts(counts: Vec<(u64, u64)>) -> Self {
        debug_assert!(counts.windows(2).all(|w| w[0].0 < w[1].0));
        debug_assert!(counts
            .iter()
            .all(|&(v, n)| n > 0 && value_of(index_of(v)) == v));
        Self(Repr::Counts(counts))
    }

    /// A histogram kept as its compressed encoding, already checked (`len` samples).
    pub(crate) fn encoded(bytes: Vec<u8>, len: u64) -> Self {
        Self(Repr::Encoded {
            bytes: bytes.into_boxed_slice(),
            len,
        })
    }

    /// The compressed encoding it was read from, if it was read from a profile.
    pub(crate) fn encoding(&self) -> Option<&[u8]> {
        match &self.0 {
            Repr::Encoded { bytes, .. } => Some(bytes),
            Repr::Counts(_) => None,
        }
    }

    /// The non-empty buckets, decoded if need be.
    fn counts(&self) -> std::borrow::Cow<'_, [(u64, u64)]> {
        match &self.0 {
            Repr::Counts(counts) => std::borrow::Cow::Borrowed(counts),
            // The encoding was checked when read: decoding it again succeeds.
            Repr::Encoded { bytes, .. } => std::borrow::Cow::Owned(
                super::hdr::decode(bytes)
                    .map(|b| b.counts().into_owned())
                    .unwrap_or_default(),
            ),
        }
    }

    /// The histogram, as an auto-resizing `hdrhistogram::Histogram` sized to the values held.
    pub fn to_histogram(&self) -> Histogram<u64> {
        // UNWRAP: the bounds are constants that satisfy hdrhistogram's preconditions (tested).
        let mut h =
            Histogram::new_with_bounds(LOWEST_NS, 2, SIGNIFICANT_DIGITS).expect("valid bounds");
        h.auto(true);
        for &(value, count) in self.counts().iter() {
            if h.record_n(value, count).is_err() {
                h.saturating_record_n(value, count);
            }
        }
        h
    }

    /// Samples held.
    pub fn len(&self) -> u64 {
        match &self.0 {
            Repr::Counts(counts) => counts.iter().map(|&(_, n)| n).sum(),
            Repr::Encoded { len, .. } => *len,
        }
    }

    /// Whether no sample is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Samples in the bucket that holds `value`.
    pub fn count_at(&self, value: u64) -> u64 {
        let floor = value_of(index_of(value.min(HIGHEST_NS)));
        let counts = self.counts();
        counts
            .binary_search_by_key(&floor, |&(v, _)| v)
            .map_or(0, |i| counts[i].1)
    }

    /// The non-empty buckets: (lowest value of the bucket, samples), ascending.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.counts().into_owned().into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_a_histogram() {
        let mut h = Histogram::<u64>::new_with_bounds(LOWEST_NS, HIGHEST_NS, 2).unwrap();
        for v in [1, 5, 127, 128, 129, 1_000, 1_003, 1_000_000, HIGHEST_NS] {
            h.record_n(v, v % 7 + 1).unwrap();
        }
        let b = Buckets::from_histogram(&h);
        assert_eq!(b.len(), h.len());
        assert_eq!(b.count_at(1_001), h.count_at(1_001));
        assert_eq!(b.count_at(999), 0);
        let back = b.to_histogram();
        assert_eq!(Buckets::from_histogram(&back), b);
        for q in [0.0, 0.1, 0.5, 0.9, 0.99, 1.0] {
            assert_eq!(back.value_at_quantile(q), h.value_at_quantile(q), "q {q}");
        }
        // 16 bytes per non-empty bucket, whatever the range.
        assert_eq!(b.iter().count(), 8, "1 000 and 1 003 share a bucket");
        assert_eq!(TOP_NS, (1 << 42) - 1);
        assert_eq!(index_of(TOP_NS), COUNTS_LEN - 1);
    }
}

//! The histograms of a profile: spanprof's bucket layout (hdrhistogram's, 2 significant digits
//! from 1 ns to [`HIGHEST_NS`]) and [`Buckets`], a histogram stored as its non-empty buckets.

use hdrhistogram::Histogram;

use super::{HIGHEST_NS, LOWEST_NS, SIGNIFICANT_DIGITS};

const SUB_BUCKET_HALF_MAGNITUDE: u32 = 7;
const SUB_BUCKET_HALF: usize = 1 << SUB_BUCKET_HALF_MAGNITUDE;
const SUB_BUCKET_MASK: u64 = (2 * SUB_BUCKET_HALF as u64) - 1;

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
    // hdrhistogram's bucket, `64 - SUB_BUCKET_HALF_MAGNITUDE - 1 - leading_zeros`, written
    // from the top bit's position (one `bsr`, no count of leading zeros and back).
    let bucket = (value | SUB_BUCKET_MASK).ilog2() - SUB_BUCKET_HALF_MAGNITUDE;
    let sub_bucket = (value >> bucket) as usize;
    ((bucket as usize) << SUB_BUCKET_HALF_MAGNITUDE) + sub_bucket
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

/// The highest value of the bucket holding `value` (values above [`HIGHEST_NS`] are in its
/// bucket): the nearest bound at or above `value` at which [`Buckets::count_at_or_below`] is
/// exact. Exporters that need cumulative bucket counts (Prometheus `le`, OTLP explicit bounds)
/// use bounds of this form, so the counts they export are the histogram's, not estimates.
///
/// ```
/// use spanprof::profile::buckets::bucket_top;
/// assert_eq!(bucket_top(100), 100); // below 256 ns every value has its own bucket
/// assert_eq!(bucket_top(1_000_000), 1_003_519); // 1 ms falls in [999 424, 1 003 519]
/// assert_eq!(bucket_top(bucket_top(1_000_000)), 1_003_519);
/// ```
pub fn bucket_top(value: u64) -> u64 {
    let index = index_of(value.min(HIGHEST_NS));
    if index + 1 >= COUNTS_LEN {
        TOP_NS
    } else {
        value_of(index + 1) - 1
    }
}

/// The nominal bucket bounds of exported histograms, in nanoseconds: a 1-2.5-5 series from
/// 1 µs to 100 s. [`export_bounds_ns`] rounds each up to the top of its HDR bucket.
pub const EXPORT_BOUNDS_NOMINAL_NS: [u64; 25] = [
    1_000,
    2_500,
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
    25_000_000_000,
    50_000_000_000,
    100_000_000_000,
];

/// The upper bounds of the buckets every exporter of histograms uses (Prometheus `le`, OTLP
/// explicit bounds), in nanoseconds, ascending: each of [`EXPORT_BOUNDS_NOMINAL_NS`] (1 µs,
/// 2.5 µs, 5 µs, 10 µs, … 100 s) rounded up with [`bucket_top`], so that the cumulative count
/// at each bound ([`Buckets::count_at_or_below`], [`Buckets::cumulative_counts`]) is the
/// histogram's exact count, not an estimate. A bound is at most 1/128 above its nominal value
/// (2.5 µs becomes 2 511 ns).
///
/// ```
/// use spanprof::profile::buckets::{bucket_top, export_bounds_ns};
/// let bounds = export_bounds_ns();
/// assert_eq!(bounds.len(), 25);
/// assert_eq!(bounds[0], 1_003); // 1 µs falls in the bucket [1 000, 1 003]
/// assert_eq!(bounds[1], 2_511);
/// assert!(bounds.iter().all(|&b| bucket_top(b) == b));
/// ```
pub fn export_bounds_ns() -> &'static [u64] {
    static BOUNDS: std::sync::OnceLock<[u64; EXPORT_BOUNDS_NOMINAL_NS.len()]> =
        std::sync::OnceLock::new();
    BOUNDS.get_or_init(|| EXPORT_BOUNDS_NOMINAL_NS.map(bucket_top))
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
                Some((last, n)) if *last == value => *n = n.saturating_add(v.count_at_value()),
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
            // Saturating: two histograms' buckets added may hold more than u64::MAX samples.
            Repr::Counts(counts) => counts.iter().fold(0, |all, &(_, n)| all.saturating_add(n)),
            Repr::Encoded { len, .. } => *len,
        }
    }

    /// Whether no sample is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The value at each of `quantiles` (ascending, each in 0..=1), in one pass: the lowest
    /// value of the bucket holding the sample of rank ⌈q × samples⌉ (the first sample for
    /// q = 0). Empty when no sample is held.
    pub fn quantiles(&self, quantiles: &[f64]) -> Vec<u64> {
        let counts = self.counts();
        let total = counts
            .iter()
            .fold(0u64, |all, &(_, n)| all.saturating_add(n));
        if total == 0 {
            return Vec::new();
        }
        let mut out = Vec::with_capacity(quantiles.len());
        let (mut seen, mut at) = (0u64, 0usize);
        for &q in quantiles {
            let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
            while at < counts.len() && seen.saturating_add(counts[at].1) < rank {
                seen = seen.saturating_add(counts[at].1);
                at += 1;
            }
            out.push(counts[at.min(counts.len() - 1)].0);
        }
        out
    }

    /// Samples in the bucket that holds `value`.
    pub fn count_at(&self, value: u64) -> u64 {
        let floor = value_of(index_of(value.min(HIGHEST_NS)));
        let counts = self.counts();
        counts
            .binary_search_by_key(&floor, |&(v, _)| v)
            .map_or(0, |i| counts[i].1)
    }

    /// Samples at or below `le`: exact when `le` is a bucket top ([`bucket_top`]); otherwise the
    /// bucket holding `le` counts as below it.
    pub fn count_at_or_below(&self, le: u64) -> u64 {
        let floor = value_of(index_of(le.min(HIGHEST_NS)));
        self.counts()
            .iter()
            .take_while(|&&(v, _)| v <= floor)
            .fold(0, |all, &(_, n)| all.saturating_add(n))
    }

    /// The samples at or below each of `bounds` (ascending), in one pass: the cumulative
    /// counts of a histogram with those upper bounds, equal to
    /// [`count_at_or_below`](Buckets::count_at_or_below) of each bound (exact at bucket tops,
    /// such as [`export_bounds_ns`]).
    pub fn cumulative_counts(&self, bounds: &[u64]) -> Vec<u64> {
        let counts = self.counts();
        let mut buckets = counts.iter().peekable();
        let mut below = 0u64;
        bounds
            .iter()
            .map(|&le| {
                let floor = value_of(index_of(le.min(HIGHEST_NS)));
                while let Some(&&(v, n)) = buckets.peek() {
                    if v > floor {
                        break;
                    }
                    below = below.saturating_add(n);
                    buckets.next();
                }
                below
            })
            .collect()
    }

    /// Adds `other`'s samples to these: the histogram of both sets of samples, exactly, up to
    /// what a profile can hold: a bucket saturates at `i64::MAX` samples (the most HdrHistogram's
    /// encoding writes) and all of them together at `u64::MAX`, the highest buckets giving way
    /// (only sums of crafted profiles come near).
    pub fn add(&mut self, other: &Buckets) {
        let most = i64::MAX as u64;
        let mut merged = combine(&self.counts(), &other.counts(), |a, b| {
            a.saturating_add(b).min(most)
        });
        let mut total: u128 = merged.iter().map(|&(_, n)| u128::from(n)).sum();
        let mut excess = total.saturating_sub(u128::from(u64::MAX));
        for (_, n) in merged.iter_mut().rev() {
            if excess == 0 {
                break;
            }
            let cut = u64::try_from(excess.min(u128::from(*n))).unwrap_or(*n);
            *n -= cut;
            excess -= u128::from(cut);
            total -= u128::from(cut);
        }
        debug_assert!(total <= u128::from(u64::MAX));
        merged.retain(|&(_, n)| n > 0);
        *self = Self(Repr::Counts(merged));
    }

    /// The samples of `self` that are not in `earlier`, bucket by bucket (`earlier` being an
    /// earlier state of the same histogram): the histogram of an interval, exactly. A bucket
    /// holding fewer samples than `earlier`'s (not an earlier state) counts 0.
    pub fn since(&self, earlier: &Buckets) -> Buckets {
        let diff = combine(&self.counts(), &earlier.counts(), |a, b| {
            a.saturating_sub(b)
        });
        Self(Repr::Counts(diff))
    }

    /// The non-empty buckets: (lowest value of the bucket, samples), ascending.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.counts().into_owned().into_iter()
    }
}

/// Merges two ascending bucket lists with `op` on the counts of buckets present in either
/// (a missing bucket counts 0); buckets whose result is 0 are left out.
fn combine(a: &[(u64, u64)], b: &[(u64, u64)], op: impl Fn(u64, u64) -> u64) -> Vec<(u64, u64)> {
    let mut out = Vec::with_capacity(a.len().max(b.len()));
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        let (value, x, y) = match (a.get(i), b.get(j)) {
            (Some(&(va, na)), Some(&(vb, nb))) if va == vb => {
                i += 1;
                j += 1;
                (va, na, nb)
            }
            (Some(&(va, na)), Some(&(vb, _))) if va < vb => {
                i += 1;
                (va, na, 0)
            }
            (Some(&(va, na)), None) => {
                i += 1;
                (va, na, 0)
            }
            (_, Some(&(vb, nb))) => {
                j += 1;
                (vb, 0, nb)
            }
            (None, None) => unreachable!("the loop runs while one list has buckets left"),
        };
        let n = op(x, y);
        if n > 0 {
            out.push((value, n));
        }
    }
    out.shrink_to_fit();
    out
}

/// A new, empty `u64` histogram with spanprof's layout (this module), sized to
/// the values recorded into it:
/// it starts with one bucket and grows as larger values arrive (up to [`HIGHEST_NS`], the clamp),
/// so a span name's histograms in a snapshot or a read profile take memory for the range its
/// values span, not for an hour. 1 KiB per power of two of range: e.g. 8 KiB for spans up to
/// 1 µs, 18 KiB up to 1 ms, 26 KiB up to 1 s, against 36 KiB at full range.
pub(crate) fn new_histogram() -> Histogram<u64> {
    // UNWRAP: the bounds are constants that satisfy hdrhistogram's preconditions (tested).
    let mut h = Histogram::new_with_bounds(LOWEST_NS, 2, SIGNIFICANT_DIGITS).expect("valid bounds");
    h.auto(true);
    h
}

/// Records `n` samples of `value` (at most [`HIGHEST_NS`]) into `into`, growing it if it is one
/// of [`new_histogram`]'s; a histogram of fixed range clamps instead. Never fails.
pub(crate) fn record_n(into: &mut Histogram<u64>, value: u64, n: u64) {
    if into.record_n(value, n).is_err() {
        into.saturating_record_n(value, n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_the_buckets_holding_each_rank() {
        let mut h = new_histogram();
        for v in 1..=1000u64 {
            record_n(&mut h, v * 1000, 1);
        }
        let b = Buckets::from_histogram(&h);
        let qs = [0.0, 0.1, 0.5, 0.9, 1.0];
        let got = b.quantiles(&qs);
        for (q, v) in qs.iter().zip(&got) {
            // The lowest value of the bucket holding hdrhistogram's value at that quantile.
            let want = value_of(index_of(h.value_at_quantile(*q)));
            assert_eq!(*v, want, "q {q}");
        }
        assert_eq!(got[2], value_of(index_of(500_000)));
        assert!(Buckets::default().quantiles(&qs).is_empty());
    }

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

    fn hist(values: &[(u64, u64)]) -> Buckets {
        let mut h = Histogram::<u64>::new_with_bounds(LOWEST_NS, HIGHEST_NS, 2).unwrap();
        for &(v, n) in values {
            h.record_n(v, n).unwrap();
        }
        Buckets::from_histogram(&h)
    }

    #[test]
    fn cumulative_counts_at_bucket_tops_are_exact() {
        let b = hist(&[
            (5, 2),
            (999_424, 3),
            (1_003_519, 4),
            (1_003_520, 5),
            (HIGHEST_NS, 1),
        ]);
        assert_eq!(b.count_at_or_below(4), 0);
        assert_eq!(b.count_at_or_below(5), 2);
        assert_eq!(bucket_top(1_000_000), 1_003_519);
        assert_eq!(b.count_at_or_below(bucket_top(1_000_000)), 9);
        assert_eq!(b.count_at_or_below(bucket_top(1_003_520)), 14);
        assert_eq!(b.count_at_or_below(u64::MAX), 15);
        assert_eq!(bucket_top(u64::MAX), bucket_top(HIGHEST_NS));
        assert!(bucket_top(HIGHEST_NS) <= TOP_NS);
        for v in [1, 255, 256, 257, 1_000, 65_535, 1 << 30, HIGHEST_NS] {
            let top = bucket_top(v);
            assert!(top >= v && bucket_top(top) == top, "{v}");
            assert_eq!(index_of(top), index_of(v.min(HIGHEST_NS)), "{v}");
            if top < HIGHEST_NS {
                assert_ne!(index_of((top + 1).min(HIGHEST_NS)), index_of(top), "{v}");
            }
        }
    }

    #[test]
    fn export_bounds_are_bucket_tops_and_cumulative_counts_match() {
        let bounds = export_bounds_ns();
        assert!(bounds.windows(2).all(|w| w[0] < w[1]));
        for (&b, &nominal) in bounds.iter().zip(EXPORT_BOUNDS_NOMINAL_NS.iter()) {
            assert_eq!(bucket_top(b), b);
            assert!(
                b >= nominal && b - nominal <= nominal / 128,
                "{nominal} -> {b}"
            );
        }
        let b = hist(&[
            (999, 1),
            (1_000, 2),
            (1_001, 3),
            (2_511, 4),
            (2_512, 5),
            (7_000_000, 6),
            (HIGHEST_NS, 7),
        ]);
        let cumulative = b.cumulative_counts(bounds);
        let expected: Vec<u64> = bounds.iter().map(|&le| b.count_at_or_below(le)).collect();
        assert_eq!(cumulative, expected);
        assert_eq!(&cumulative[..3], &[6, 10, 15]);
        assert_eq!(*cumulative.last().unwrap(), 21, "the hour is above 100 s");
        assert!(Buckets::default()
            .cumulative_counts(bounds)
            .iter()
            .all(|&n| n == 0));
    }

    #[test]
    fn adding_and_subtracting_are_exact() {
        let a = hist(&[(5, 2), (1_000, 3)]);
        let b = hist(&[(1_001, 4), (70_000, 1)]);
        let mut sum = a.clone();
        sum.add(&b);
        assert_eq!(sum, hist(&[(5, 2), (1_000, 7), (70_000, 1)]));
        assert_eq!(sum.since(&a), b);
        assert_eq!(sum.since(&sum), Buckets::default());
        assert!(
            a.since(&sum).is_empty(),
            "not an earlier state: no negative counts"
        );
    }
}

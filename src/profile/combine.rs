//! How the parts of a profile combine, stated once per field: the statistics of several
//! profiles together ([`Snapshot::merge`]: processes, ranks, runs) and of an interval (a later
//! snapshot of a run since an earlier one, [`Snapshot::since`]) both follow from one rule per
//! field.
//!
//! Each part of the model lists its fields with their rules beside its type, with
//! [`rules!`], which implements [`Combine`] for it; a new field is one line there (the struct
//! literals the macro writes name every field: a field without a rule does not compile). The
//! rules:
//!
//! - `sum`: added in a merge, subtracted in an interval, saturating: integers at their bounds
//!   (an unsigned one never below 0), floats at `±f64::MAX` and never below 0. Counters,
//!   totals, energies.
//! - `signed_sum`: a float that may go down (an up-down counter's): added and subtracted
//!   ([`add_finite`]), below 0 too.
//! - `level`: a state of processes side by side (spans open now): added in a merge, the
//!   later's in an interval.
//! - `max`, `min`: the largest, the smallest; in an interval the later's (an extreme of the
//!   run cannot be split). Peaks, limits, starts.
//! - `latest(t)`: the value of the part with the latest `t` (the later part on a tie); in an
//!   interval the later's. A gauge's last value.
//! - `first`: the first part's; in an interval the later's. Keys and settings.
//! - `all`: true where every part's is; `union`: every distinct entry, in order. In an
//!   interval the later's.
//! - `end`: a reading at the snapshot: none in a merge (processes end apart), the later's in
//!   an interval.
//! - `hist`: a histogram's statistics, [`Stat::merged`] and [`Stat::since`].
//! - `nested`: a part that is [`Combine`] itself, by its own rules; `opt`: an optional one,
//!   merged from the parts that have it, in an interval whole where the earlier has none.
//! - `keyed(k)`: a list of parts matched by the key `k` (span names, metrics, GPUs), each
//!   combined, in order of first appearance; in an interval each later item since its match,
//!   whole where none.
//! - `mean(w)`: a mean weighted by the field `w` (a utilisation); in an interval the mean of
//!   what the interval added to `w`, by the same weights (none where it added nothing).
//! - `derived(f)`: `f` of the combined figures (a ratio of two sums); a merge of one part
//!   keeps its own value.
//! - `custom(m, s)`: `m(parts)` in a merge, `s(later, earlier)` in an interval (without `s`:
//!   the later's), for what needs several fields.
//!
//! [`Stat`], whose figures come from one histogram, combines by [`Stat::merged`] and
//! [`Stat::since`], computed from the full histograms, never by averaging percentiles.
//!
//! [`Snapshot::merge`]: super::Snapshot::merge
//! [`Snapshot::since`]: super::Snapshot::since
//! [`add_finite`]: super::add_finite

use std::collections::HashMap;
use std::hash::Hash;

use super::{Buckets, Stat};

/// A part of the model that combines: the merge of several profiles' parts and the interval
/// between two snapshots' parts. Implemented by [`rules!`] from one rule per field.
pub(crate) trait Combine: Clone {
    /// Every field's rule, by name, for the tests (`(field, rule)`).
    #[cfg(test)]
    const RULES: &'static [(&'static str, &'static str)] = &[];

    /// What `parts` recorded together (`parts` is not empty).
    fn merged(parts: &[&Self]) -> Self;

    /// What was recorded after `earlier`, the same part in an earlier snapshot of the run.
    /// An `earlier` that is not earlier gives zero rather than negative counts.
    fn since(&self, earlier: &Self) -> Self;

    /// Adds `other` to this part: [`Combine::merged`] of the two.
    fn add(&mut self, other: &Self) {
        *self = Self::merged(&[self, other]);
    }
}

/// Implements [`Combine`] for a struct from the rule of each of its fields (see the [module
/// docs](self) for the rules):
///
/// ```text
/// rules! { CpuUse {
///     entries: sum,
///     utilization_pct: derived(|c: &Self| rule::percent(c.cpu_ns, c.busy_ns)),
/// } }
/// ```
macro_rules! rules {
    ($ty:ident { $($field:ident: $rule:ident $(($($arg:tt)*))?),* $(,)? }) => {
        impl $crate::profile::combine::Combine for $ty {
            #[cfg(test)]
            const RULES: &'static [(&'static str, &'static str)] =
                &[$((stringify!($field), stringify!($rule))),*];

            fn merged(parts: &[&Self]) -> Self {
                #[allow(unused_mut)]
                let mut out = Self {
                    $($field: $crate::profile::combine::rules!(
                        @merged parts, $field, $rule $(($($arg)*))?
                    )),*
                };
                $($crate::profile::combine::rules!(
                    @merged_derived out, parts, $field, $rule $(($($arg)*))?
                );)*
                out
            }

            // A part all of whose figures are states (a gauge) does not read `earlier`.
            #[allow(unused_variables)]
            fn since(&self, earlier: &Self) -> Self {
                let later = self;
                #[allow(unused_mut)]
                let mut out = Self {
                    $($field: $crate::profile::combine::rules!(
                        @since later, earlier, $field, $rule $(($($arg)*))?
                    )),*
                };
                $($crate::profile::combine::rules!(@since_derived out, $field, $rule $(($($arg)*))?);)*
                out
            }
        }
    };

    // The merge of field `$f` of `$p`, the parts.
    (@merged $p:ident, $f:ident, sum) => {
        $crate::profile::combine::rule::sum($p.iter().map(|x| &x.$f))
    };
    (@merged $p:ident, $f:ident, signed_sum) => {
        $crate::profile::combine::rule::signed_sum($p.iter().map(|x| x.$f))
    };
    (@merged $p:ident, $f:ident, level) => {
        $crate::profile::combine::rule::sum($p.iter().map(|x| &x.$f))
    };
    (@merged $p:ident, $f:ident, max) => {
        $crate::profile::combine::rule::max($p.iter().map(|x| &x.$f))
    };
    (@merged $p:ident, $f:ident, min) => {
        $crate::profile::combine::rule::min($p.iter().map(|x| &x.$f))
    };
    (@merged $p:ident, $f:ident, latest($t:ident)) => {
        $crate::profile::combine::rule::latest($p.iter().map(|x| (x.$t, &x.$f)))
    };
    (@merged $p:ident, $f:ident, first) => {
        $p[0].$f.clone()
    };
    (@merged $p:ident, $f:ident, all) => {
        $p.iter().all(|x| x.$f)
    };
    (@merged $p:ident, $f:ident, union) => {
        $crate::profile::combine::rule::union($p.iter().map(|x| &x.$f))
    };
    (@merged $p:ident, $f:ident, end) => {
        None
    };
    (@merged $p:ident, $f:ident, hist) => {
        $crate::profile::combine::rule::nested($p.iter().map(|x| &x.$f))
    };
    (@merged $p:ident, $f:ident, nested) => {
        $crate::profile::combine::rule::nested($p.iter().map(|x| &x.$f))
    };
    (@merged $p:ident, $f:ident, opt) => {
        $crate::profile::combine::rule::opt($p.iter().map(|x| &x.$f))
    };
    (@merged $p:ident, $f:ident, keyed($key:expr)) => {
        $crate::profile::combine::rule::keyed($p.iter().map(|x| &x.$f), $key)
    };
    (@merged $p:ident, $f:ident, mean($w:ident)) => {
        $crate::profile::combine::rule::mean($p.iter().map(|x| (x.$f, x.$w)))
    };
    (@merged $p:ident, $f:ident, derived($d:expr)) => {
        // Computed below from the combined fields; one part keeps its own.
        $p[0].$f.clone()
    };
    (@merged $p:ident, $f:ident, custom($m:expr, $s:expr)) => {
        ($m)($p)
    };
    (@merged $p:ident, $f:ident, custom($m:expr)) => {
        ($m)($p)
    };

    (@merged_derived $o:ident, $p:ident, $f:ident, derived($d:expr)) => {
        if $p.len() > 1 {
            $o.$f = ($d)(&$o);
        }
    };
    (@merged_derived $($rest:tt)*) => {};

    // The interval of field `$f`: `$l` (the later) since `$e` (the earlier).
    (@since $l:ident, $e:ident, $f:ident, sum) => {
        $crate::profile::combine::Sum::minus(&$l.$f, &$e.$f)
    };
    (@since $l:ident, $e:ident, $f:ident, signed_sum) => {
        $crate::profile::add_finite($l.$f, -$e.$f)
    };
    (@since $l:ident, $e:ident, $f:ident, hist) => {
        $crate::profile::combine::Combine::since(&$l.$f, &$e.$f)
    };
    (@since $l:ident, $e:ident, $f:ident, nested) => {
        $crate::profile::combine::Combine::since(&$l.$f, &$e.$f)
    };
    (@since $l:ident, $e:ident, $f:ident, opt) => {
        $crate::profile::combine::rule::opt_since(&$l.$f, &$e.$f)
    };
    (@since $l:ident, $e:ident, $f:ident, keyed($key:expr)) => {
        $crate::profile::combine::rule::keyed_since(&$l.$f, &$e.$f, $key)
    };
    (@since $l:ident, $e:ident, $f:ident, mean($w:ident)) => {
        $crate::profile::combine::rule::mean_since(($l.$f, $l.$w), ($e.$f, $e.$w))
    };
    (@since $l:ident, $e:ident, $f:ident, custom($m:expr, $s:expr)) => {
        ($s)($l, $e)
    };
    // `level`, `max`, `min`, `latest`, `first`, `all`, `union`, `end`, `custom` without an
    // interval rule, and `derived` (recomputed below): the later's.
    (@since $l:ident, $e:ident, $f:ident, $($rule:tt)*) => {
        $l.$f.clone()
    };

    (@since_derived $o:ident, $f:ident, derived($d:expr)) => {
        $o.$f = ($d)(&$o);
    };
    (@since_derived $($rest:tt)*) => {};
}
pub(crate) use rules;

/// A sum's arithmetic (the `sum` rule): saturating, as the recorder's sums are.
pub(crate) trait Sum: Clone {
    /// Zero, what an absent earlier value counts.
    const ZERO: Self;
    /// `self + other`.
    fn plus(&self, other: &Self) -> Self;
    /// `self - earlier`.
    fn minus(&self, earlier: &Self) -> Self;
}

impl Sum for u64 {
    const ZERO: Self = 0;
    fn plus(&self, other: &Self) -> Self {
        self.saturating_add(*other)
    }
    fn minus(&self, earlier: &Self) -> Self {
        self.saturating_sub(*earlier)
    }
}

impl Sum for i64 {
    const ZERO: Self = 0;
    fn plus(&self, other: &Self) -> Self {
        self.saturating_add(*other)
    }
    fn minus(&self, earlier: &Self) -> Self {
        self.saturating_sub(*earlier)
    }
}

/// A total that does not go down (energy, CO2e): kept finite ([`add_finite`]), never below 0
/// in an interval.
///
/// [`add_finite`]: super::add_finite
impl Sum for f64 {
    const ZERO: Self = 0.0;
    fn plus(&self, other: &Self) -> Self {
        super::add_finite(*self, *other)
    }
    fn minus(&self, earlier: &Self) -> Self {
        super::add_finite(*self, -earlier).max(0.0)
    }
}

/// An optional sum: present where any part has it; in an interval, an absent earlier value
/// counts 0 and an absent later one stays absent.
impl<T: Sum> Sum for Option<T> {
    const ZERO: Self = None;
    fn plus(&self, other: &Self) -> Self {
        match (self, other) {
            (Some(a), Some(b)) => Some(a.plus(b)),
            (a, b) => a.as_ref().or(b.as_ref()).cloned(),
        }
    }
    fn minus(&self, earlier: &Self) -> Self {
        let zero = T::ZERO;
        let earlier = earlier.as_ref().unwrap_or(&zero);
        self.as_ref().map(|a| a.minus(earlier))
    }
}

/// The order of the `max` and `min` rules.
pub(crate) trait Extreme: Clone {
    /// The larger of the two.
    fn larger(&self, other: &Self) -> Self;
    /// The smaller of the two.
    fn smaller(&self, other: &Self) -> Self;
}

macro_rules! ordered {
    ($($ty:ty),*) => {$(
        impl Extreme for $ty {
            fn larger(&self, other: &Self) -> Self {
                Ord::max(self, other).clone()
            }
            fn smaller(&self, other: &Self) -> Self {
                Ord::min(self, other).clone()
            }
        }
    )*};
}
// An absent value is smaller than any: the largest of optional values is the largest present.
ordered!(u32, u64, i64, Option<u64>, Option<i64>);

impl Extreme for f64 {
    fn larger(&self, other: &Self) -> Self {
        self.max(*other)
    }
    fn smaller(&self, other: &Self) -> Self {
        self.min(*other)
    }
}

/// The rules' merges and intervals, called by [`rules!`] (and by the merge and interval of a
/// [`Snapshot`](super::Snapshot), for its lists and optional parts).
pub(crate) mod rule {
    use super::*;

    /// `sum` and `level`: the parts added.
    pub(crate) fn sum<'a, T: Sum + 'a>(mut parts: impl Iterator<Item = &'a T>) -> T {
        let first = parts.next().cloned().unwrap_or(T::ZERO);
        parts.fold(first, |all, x| all.plus(x))
    }

    /// `signed_sum`: floats added, kept finite.
    pub(crate) fn signed_sum(parts: impl Iterator<Item = f64>) -> f64 {
        parts.reduce(crate::profile::add_finite).unwrap_or(0.0)
    }

    /// `max`: the largest.
    pub(crate) fn max<'a, T: Extreme + 'a>(mut parts: impl Iterator<Item = &'a T>) -> T {
        // UNWRAP: a merge has parts.
        let first = parts.next().expect("a part").clone();
        parts.fold(first, |all, x| all.larger(x))
    }

    /// `min`: the smallest.
    pub(crate) fn min<'a, T: Extreme + 'a>(mut parts: impl Iterator<Item = &'a T>) -> T {
        // UNWRAP: a merge has parts.
        let first = parts.next().expect("a part").clone();
        parts.fold(first, |all, x| all.smaller(x))
    }

    /// `latest(t)`: the value set last, by `t`; of the later part on a tie.
    pub(crate) fn latest<'a, T: Clone + 'a>(mut parts: impl Iterator<Item = (u64, &'a T)>) -> T {
        // UNWRAP: a merge has parts.
        let first = parts.next().expect("a part");
        parts
            .fold(first, |at, x| if x.0 >= at.0 { x } else { at })
            .1
            .clone()
    }

    /// `union`: every distinct entry, in order of first appearance.
    pub(crate) fn union<'a, T: Clone + PartialEq + 'a>(
        parts: impl Iterator<Item = &'a Vec<T>>,
    ) -> Vec<T> {
        let mut all: Vec<T> = Vec::new();
        for x in parts.flatten() {
            if !all.contains(x) {
                all.push(x.clone());
            }
        }
        all
    }

    /// `nested` and `hist`: the parts' own rules.
    pub(crate) fn nested<'a, T: Combine + 'a>(parts: impl Iterator<Item = &'a T>) -> T {
        T::merged(&parts.collect::<Vec<_>>())
    }

    /// `opt`: the present parts merged; absent where none is.
    pub(crate) fn opt<'a, T: Combine + 'a>(
        parts: impl Iterator<Item = &'a Option<T>>,
    ) -> Option<T> {
        let present: Vec<&T> = parts.flatten().collect();
        (!present.is_empty()).then(|| T::merged(&present))
    }

    /// `opt` in an interval: the later since the earlier, whole where the earlier has none.
    pub(crate) fn opt_since<T: Combine>(later: &Option<T>, earlier: &Option<T>) -> Option<T> {
        let later = later.as_ref()?;
        Some(match earlier {
            Some(e) => later.since(e),
            None => later.clone(),
        })
    }

    /// `keyed(key)`: items of the same key merged, in order of first appearance.
    pub(crate) fn keyed<'a, T: Combine + 'a, K: Eq + Hash>(
        lists: impl Iterator<Item = &'a Vec<T>>,
        key: impl Fn(&'a T) -> K,
    ) -> Vec<T> {
        let mut index: HashMap<K, usize> = HashMap::new();
        let mut groups: Vec<Vec<&T>> = Vec::new();
        for item in lists.flatten() {
            let i = *index.entry(key(item)).or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            });
            groups[i].push(item);
        }
        groups.iter().map(|group| T::merged(group)).collect()
    }

    /// `keyed(key)` in an interval: each later item since the earlier item of its key, whole
    /// where there is none, in the later's order.
    pub(crate) fn keyed_since<'a, T: Combine, K: Eq + Hash>(
        later: &'a [T],
        earlier: &'a [T],
        key: impl Fn(&'a T) -> K,
    ) -> Vec<T> {
        let mut index: HashMap<K, &T> = HashMap::with_capacity(earlier.len());
        for e in earlier {
            index.entry(key(e)).or_insert(e);
        }
        later
            .iter()
            .map(|x| match index.get(&key(x)) {
                Some(e) => x.since(e),
                None => x.clone(),
            })
            .collect()
    }

    /// `mean(w)`: the parts' means weighted by their `w`; a part without a mean adds its
    /// weight and keeps the others' mean.
    pub(crate) fn mean(mut parts: impl Iterator<Item = (Option<f64>, u64)>) -> Option<f64> {
        let (mut mean, mut weight) = parts.next()?;
        for (x, w) in parts {
            let total = weight.saturating_add(w);
            mean = match (mean, x) {
                (Some(a), Some(b)) if total > 0 => Some(crate::profile::finite(
                    (a * weight as f64 + b * w as f64) / total as f64,
                )),
                (a, b) => a.or(b),
            };
            weight = total;
        }
        mean
    }

    /// `mean(w)` in an interval: the mean of what the interval added, by the weights the merge
    /// uses (so that the earlier snapshot merged with the interval gives the later one), in
    /// 0..=100 (a utilisation, %); none where the interval added no weight.
    pub(crate) fn mean_since(
        later: (Option<f64>, u64),
        earlier: (Option<f64>, u64),
    ) -> Option<f64> {
        let weight = later.1.saturating_sub(earlier.1);
        if weight == 0 {
            return None;
        }
        match (later.0, earlier.0) {
            (Some(l), Some(e)) => Some(
                crate::profile::finite((l * later.1 as f64 - e * earlier.1 as f64) / weight as f64)
                    .clamp(0.0, 100.0),
            ),
            (l, _) => l,
        }
    }

    /// `part` as a percentage of `whole` (0 where `whole` is 0): a `derived` utilisation.
    pub(crate) fn percent(part: u64, whole: u64) -> f64 {
        if whole == 0 {
            0.0
        } else {
            100.0 * part as f64 / whole as f64
        }
    }
}

/// Histograms: [`Stat::merged`] and [`Stat::since`].
impl Combine for Stat {
    fn merged(parts: &[&Self]) -> Self {
        Stat::merged(parts.iter().copied())
    }

    fn since(&self, earlier: &Self) -> Self {
        Stat::since(self, earlier)
    }
}

impl Stat {
    /// The statistics of every sample of `stats` together: counts, totals and clamped samples
    /// added, the exact smallest and largest, histograms added bucket by bucket and percentiles
    /// read from the sum. Equal to the statistics of one histogram that recorded every sample.
    ///
    /// ```
    /// # let snapshot = spanprof::profile::Snapshot::from_json(
    /// #     include_str!("../../tests/data/profile-v1-basic.json"), "doc")?;
    /// use spanprof::profile::Stat;
    /// let busy = &snapshot.spans[0].busy;
    /// let twice = Stat::merged([busy, busy]);
    /// assert_eq!(twice.count, 2 * busy.count);
    /// assert_eq!(twice.p99_ns, busy.p99_ns);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn merged<'a>(stats: impl IntoIterator<Item = &'a Stat>) -> Stat {
        let mut buckets = Buckets::default();
        let (mut total, mut clamped) = (0u64, 0u64);
        let (mut min, mut max) = (u64::MAX, 0u64);
        for s in stats {
            buckets.add(&s.histogram);
            total = total.saturating_add(s.total_ns);
            clamped = clamped.saturating_add(s.clamped);
            if s.count > 0 {
                min = min.min(s.min_ns);
                max = max.max(s.max_ns);
            }
        }
        if buckets.is_empty() {
            min = 0;
        }
        Stat::new(buckets.to_histogram(), total, min, max, clamped)
    }

    /// The statistics of the samples recorded after `earlier`, an earlier statistic of the
    /// same histogram (an interval of a running profile): count, total, clamped samples and
    /// histogram exact (differences), percentiles read from the interval's histogram. The
    /// smallest and largest sample of the interval are known only to the histogram's precision
    /// (within 1 part in 128), except the largest when it is larger than every earlier one.
    /// Totals are always the exact difference, so the intervals between consecutive snapshots
    /// add up to the last one ([`Stat::merged`]).
    pub fn since(&self, earlier: &Stat) -> Stat {
        let buckets = self.histogram.since(&earlier.histogram);
        let total = self.total_ns.saturating_sub(earlier.total_ns);
        let clamped = self.clamped.saturating_sub(earlier.clamped);
        let mut recorded = buckets.iter().map(|(value, _)| value);
        let Some(lowest) = recorded.next() else {
            // No sample in the interval. A snapshot taken while a sample is recorded may see its
            // total before its bucket (or the reverse): the total's difference is kept, so that
            // consecutive intervals always add up to the whole.
            return Stat::new(buckets.to_histogram(), total, 0, 0, clamped);
        };
        let highest = recorded.last().unwrap_or(lowest);
        let min = lowest.clamp(self.min_ns, self.max_ns);
        let max = if self.max_ns > earlier.max_ns {
            self.max_ns
        } else {
            super::buckets::bucket_top(highest).clamp(min, self.max_ns)
        };
        Stat::new(buckets.to_histogram(), total, min, max, clamped)
    }
}

#[cfg(test)]
mod tests {
    use hdrhistogram::Histogram;

    use super::*;
    use crate::profile::{HIGHEST_NS, LOWEST_NS};

    fn stat(values: &[u64]) -> Stat {
        let mut h = Histogram::<u64>::new_with_bounds(LOWEST_NS, HIGHEST_NS, 2).unwrap();
        for &v in values {
            h.record(v).unwrap();
        }
        let min = values.iter().copied().min().unwrap_or(0);
        let max = values.iter().copied().max().unwrap_or(0);
        Stat::new(h, values.iter().sum(), min, max, 0)
    }

    #[test]
    fn merging_equals_recording_everything_in_one_histogram() {
        let a = [10, 200, 3_000, 3_001, 45_000];
        let b = [7, 250, 1_000_000, 9];
        let all: Vec<u64> = a.iter().chain(&b).copied().collect();
        assert_eq!(Stat::merged([&stat(&a), &stat(&b)]), stat(&all));
        assert_eq!(Stat::merged([&stat(&a), &stat(&[])]), stat(&a));
        assert_eq!(Stat::merged([]), stat(&[]));
    }

    #[test]
    fn an_interval_has_exactly_the_samples_recorded_in_it() {
        let before = [10, 200, 3_000];
        let after = [10, 200, 3_000, 5_000, 120, 7];
        let interval = stat(&after).since(&stat(&before));
        let expected = stat(&[5_000, 120, 7]);
        assert_eq!(interval.count, 3);
        assert_eq!(interval.total_ns, expected.total_ns);
        assert_eq!(interval.histogram, expected.histogram);
        assert_eq!(
            (interval.p50_ns, interval.p99_ns),
            (expected.p50_ns, expected.p99_ns)
        );
        assert_eq!(
            interval.max_ns, 5_000,
            "larger than every earlier sample: exact"
        );
        assert_eq!(interval.min_ns, 7);
        let nothing = stat(&after).since(&stat(&after));
        assert_eq!((nothing.count, nothing.total_ns, nothing.max_ns), (0, 0, 0));
        // The largest of the interval below an earlier maximum: to the bucket's precision.
        let small = stat(&[100_000, 1_000]).since(&stat(&[100_000]));
        assert_eq!(small.count, 1);
        assert!((1_000..=1_007).contains(&small.max_ns), "{}", small.max_ns);
    }

    // ---- Every field of every part has its rule ----

    use std::cell::Cell;

    use serde::de::DeserializeOwned;
    use serde::Serialize;
    use serde_json::{json, Value};

    use crate::profile::metrics::{GaugeValue, HistogramValue, Metric, SumValue};
    use crate::profile::{
        CallTree, CpuUse, Dropped, GpuStream, GpuTime, GpuUse, HeapUse, MemoryUse, Overhead,
        ResourceInfo, RunInfo, Sampled, SpanResources, SpanStats, TreeNode,
    };

    /// The fields serde reads for `T`: the list its derived `Deserialize` passes to
    /// `deserialize_struct`.
    fn serde_fields<T: DeserializeOwned>() -> &'static [&'static str] {
        use serde::de::{Error as _, Visitor};
        struct Fields<'a>(&'a Cell<&'static [&'static str]>);
        impl<'de> serde::Deserializer<'de> for Fields<'_> {
            type Error = serde::de::value::Error;
            fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
                Err(Self::Error::custom("not a struct"))
            }
            fn deserialize_struct<V: Visitor<'de>>(
                self,
                _: &'static str,
                fields: &'static [&'static str],
                _: V,
            ) -> Result<V::Value, Self::Error> {
                self.0.set(fields);
                Err(Self::Error::custom("fields read"))
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
                byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
                identifier ignored_any
            }
        }
        let fields = Cell::new(&[][..]);
        let _ = T::deserialize(Fields(&fields));
        fields.get()
    }

    /// A field's name in the profile.
    fn serde_name(field: &str) -> &str {
        match field {
            "self_time" => "self",
            other => other,
        }
    }

    fn is_set(v: &Value) -> bool {
        match v {
            Value::Null | Value::Bool(false) => false,
            Value::Number(n) => n.as_f64() != Some(0.0),
            Value::String(s) => !s.is_empty(),
            Value::Array(a) => !a.is_empty(),
            Value::Object(o) => !o.is_empty(),
            Value::Bool(true) => true,
        }
    }

    fn number(v: &Value, what: &str) -> f64 {
        v.as_f64()
            .unwrap_or_else(|| panic!("{what}: a number, not {v}"))
    }

    /// Builds a `T` with every field set from `given` (the fields that are not numbers) and a
    /// distinct number for every other field serde reads, then checks that each field follows
    /// its rule in `T::merged(x, x)` and `x.since(x)`: sums double and come to 0, states and
    /// extremes stay, histograms double their count and come to none. Returns the sample, the
    /// merge and the interval (as JSON) for the type's own checks.
    fn check<T: Combine + Serialize + DeserializeOwned>(
        ty: &str,
        given: Value,
    ) -> (T, Value, Value) {
        let fields = serde_fields::<T>();
        assert!(!fields.is_empty(), "{ty}: a struct");
        let mut object = given.as_object().cloned().unwrap_or_default();
        for (i, field) in fields.iter().enumerate() {
            object
                .entry(field.to_string())
                .or_insert_with(|| json!(10 + i));
        }
        for (field, value) in &object {
            assert!(
                fields.contains(&field.as_str()),
                "{ty}.{field}: not a field"
            );
            assert!(is_set(value), "{ty}.{field}: set it (not 0 or empty)");
        }
        let x: T = serde_json::from_value(Value::Object(object))
            .unwrap_or_else(|e| panic!("{ty}: {e}: give the sample a value of that field's type"));

        // One rule per field serde reads, and a rule for each.
        let mut ruled: Vec<&str> = T::RULES.iter().map(|&(f, _)| serde_name(f)).collect();
        let mut read: Vec<&str> = fields.to_vec();
        ruled.sort_unstable();
        read.sort_unstable();
        assert_eq!(ruled, read, "{ty}: every field has one rule");

        let v = serde_json::to_value(&x).unwrap();
        let merged = T::merged(&[&x, &x]);
        let m = serde_json::to_value(&merged).unwrap();
        let s = serde_json::to_value(x.since(&x)).unwrap();
        let again = serde_json::to_value(merged.since(&x)).unwrap();
        for &(field, rule) in T::RULES {
            let f = serde_name(field);
            let what = format!("{ty}.{field} ({rule})");
            let (v, m, s) = (&v[f], &m[f], &s[f]);
            assert!(is_set(v), "{what}: written");
            match rule {
                "sum" | "signed_sum" | "level" => {
                    assert_eq!(number(m, &what), 2.0 * number(v, &what), "{what}: merged");
                    let interval = if rule == "level" {
                        number(v, &what)
                    } else {
                        0.0
                    };
                    // 0 may be left out of the JSON.
                    let s = if s.is_null() { 0.0 } else { number(s, &what) };
                    assert_eq!(s, interval, "{what}: interval");
                }
                "max" | "min" | "first" | "all" | "union" | "latest" => {
                    assert_eq!(m, v, "{what}: merged");
                    assert_eq!(s, v, "{what}: interval");
                }
                "end" => {
                    assert!(m.is_null(), "{what}: merged");
                    assert_eq!(s, v, "{what}: interval");
                }
                "mean" => {
                    assert_eq!(m, v, "{what}: merged");
                    assert!(s.is_null(), "{what}: nothing measured in the interval");
                }
                "derived" => {
                    // A ratio of the others: the same for x + x as for (x + x) since x.
                    assert!(is_set(m), "{what}: merged");
                    assert_eq!(m, &again[f], "{what}: recomputed");
                }
                "hist" => {
                    let count = |stat: &Value| number(&stat["count"], &what);
                    assert_eq!(count(m), 2.0 * count(v), "{what}: merged");
                    assert_eq!(count(s), 0.0, "{what}: interval");
                }
                "keyed" => {
                    let len = |list: &Value| list.as_array().map_or(0, Vec::len);
                    assert_eq!(len(m), len(v), "{what}: matched");
                    assert_eq!(len(s), len(v), "{what}: matched");
                }
                // Their own types' checks, or the type's below.
                "nested" | "opt" | "custom" => {}
                other => panic!("{what}: no check for the rule {other}"),
            }
        }
        (x, m, s)
    }

    fn stat_json() -> Value {
        serde_json::to_value(stat(&[10, 200, 3_000])).unwrap()
    }

    fn to_json(x: &impl Serialize) -> Value {
        serde_json::to_value(x).unwrap()
    }

    #[test]
    fn every_field_of_every_part_follows_its_rule() {
        check::<Dropped>("Dropped", json!({}));
        let (heap, ..) = check::<HeapUse>("HeapUse", json!({}));
        let (memory, ..) = check::<MemoryUse>("MemoryUse", json!({}));
        let (gpu, ..) = check::<GpuUse>("GpuUse", json!({}));
        let (sampled, ..) = check::<Sampled>("Sampled", json!({}));
        let (sum, ..) = check::<SumValue>("SumValue", json!({}));
        check::<GaugeValue>("GaugeValue", json!({}));
        check::<HistogramValue>(
            "HistogramValue",
            json!({"integers": stat_json(), "floats": stat_json()}),
        );

        let (cpu, m, s) = check::<CpuUse>("CpuUse", json!({}));
        let pct = |v: &Value| 100.0 * number(&v["cpu_ns"], "") / number(&v["busy_ns"], "");
        assert_eq!(m["utilization_pct"], json!(pct(&m)));
        assert_eq!(s["utilization_pct"], json!(0.0));

        // Parts made of parts: the samples above inside.
        let (resources, m, s) = check::<SpanResources>(
            "SpanResources",
            json!({"cpu": to_json(&cpu), "heap": to_json(&heap), "memory": to_json(&memory),
                   "gpus": [to_json(&gpu)]}),
        );
        assert_eq!(m["cpu"]["skipped_entries"], 2 * cpu.skipped_entries);
        assert_eq!(s["cpu"]["skipped_entries"], Value::Null, "0: left out");
        assert_eq!(
            m["heap"]["self_retained_bytes"],
            2 * heap.self_retained_bytes
        );
        assert_eq!(
            m["memory"]["peak_heap_bytes"],
            json!(memory.peak_heap_bytes)
        );
        assert_eq!(m["gpus"][0]["instances"], 2 * gpu.instances);
        assert_eq!(s["gpus"][0]["instances"], 0);

        let stat = stat_json();
        let (gpu_time, m, _) = check::<GpuTime>("GpuTime", json!({"time": stat}));
        assert_eq!(m["time"]["total_ns"], 2 * gpu_time.time.total_ns);
        check::<GpuStream>("GpuStream", json!({"stream": "0x1000"}));
        let (_, m, s) = check::<SpanStats>(
            "SpanStats",
            json!({
                "name": "step", "target": "app",
                "entry_busy": stat, "entry_self": stat, "busy": stat, "self": stat,
                "wall": stat, "resources": to_json(&resources), "sampled": to_json(&sampled),
                "gpu_time": to_json(&gpu_time),
            }),
        );
        assert_eq!(m["gpu_time"]["untimed"], 2 * gpu_time.untimed);
        assert_eq!(m["sampled"]["skipped"], 2 * sampled.skipped);
        assert_eq!(s["sampled"]["skipped"], 0);
        assert_eq!(m["resources"]["memory"]["instances"], 2 * memory.instances);

        let (node, ..) = check::<TreeNode>(
            "TreeNode",
            json!({"name": "step", "target": "app", "other": true, "busy": stat, "self": stat}),
        );
        let mut root = to_json(&node);
        root["parent"] = Value::Null;
        let (_, m, s) = check::<CallTree>("CallTree", json!({"nodes": [root]}));
        assert_eq!(m["nodes"].as_array().unwrap().len(), 1, "one path");
        assert_eq!(m["nodes"][0]["calls"], 2 * node.calls);
        assert_eq!(m["nodes"][0]["parent"], Value::Null);
        assert_eq!(s["nodes"][0]["calls"], 0);

        let (x, m, s) = check::<ResourceInfo>(
            "ResourceInfo",
            json!({
                "samplers": ["memory", "cpu"], "heap_allocator": true,
                "gpu_devices": [{"index": 0, "name": "gpu", "uuid": null,
                                 "memory_total_bytes": null, "power_limit_mw": null}],
                "gpu_unavailable": "none", "cpu_energy_unavailable": "none",
                "timeline": [{"t_ns": 1, "seq": 0}],
            }),
        );
        assert_eq!(
            m["timeline"],
            json!([]),
            "the merge's timelines are its sources'"
        );
        assert_eq!(s["timeline"], to_json(&x.timeline));

        let (x, m, s) = check::<Overhead>(
            "Overhead",
            json!({"measured_samples": 100, "cpu_clock": "perf task-clock"}),
        );
        let cpu_ns = x.process_cpu_ns.unwrap();
        assert_eq!(m["process_cpu_ns"], 2 * cpu_ns);
        assert_eq!(
            m["percent"],
            json!(100.0 * x.estimated_ns as f64 / cpu_ns as f64)
        );
        assert_eq!(m["measured_span_ns"], json!(x.measured_span_ns));
        assert_eq!(m["measured_samples"], 200, "sure: added");
        assert_eq!(m["cpu_clock"], "perf task-clock");
        assert_eq!(
            (&s["process_cpu_ns"], &s["percent"]),
            (&json!(0), &json!(0.0))
        );
        assert_eq!(s["measured_samples"], 100, "the later's");

        let (x, m, s) = check::<RunInfo>(
            "RunInfo",
            json!({"start_time": "2026-01-01T00:00:00Z", "host": "a,b",
                   "command_line": ["app"], "crate_version": "0.1.0", "preset": "basic",
                   "filter": "info"}),
        );
        assert_eq!(m, to_json(&x), "a run with itself is itself");
        assert_eq!(s["duration_ns"], 0);
        assert_eq!(s["start_unix_ns"], x.start_unix_ns + x.duration_ns);

        let (_, m, s) = check::<Metric>(
            "Metric",
            json!({"name": "loss", "kind": "counter", "unit": "bytes", "span": "step",
                   "span_target": "app", "value": {"sum": to_json(&sum)}}),
        );
        assert_eq!(m["value"]["sum"]["integer"], 2 * sum.integer);
        assert_eq!(s["value"]["sum"], json!({"integer": 0, "float": 0.0}));
    }
}

//! Histogram arithmetic on statistics: the statistics of several histograms together
//! ([`Stat::merged`]: processes, ranks, runs) and of an interval ([`Stat::since`]), computed from
//! the full histograms, never by averaging percentiles.

use super::{Buckets, Stat};

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
}

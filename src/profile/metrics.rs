//! Metrics from events: the model of what events with metric fields recorded.
//!
//! An event field named by the `tracing-opentelemetry` convention is a metric:
//!
//! | field | kind | values accepted | kept |
//! |---|---|---|---|
//! | `counter.<name>` | [`MetricKind::Counter`] (up-down) | any integer or float | sum |
//! | `monotonic_counter.<name>` | [`MetricKind::MonotonicCounter`] | integers and floats ≥ 0 | sum |
//! | `histogram.<name>` | [`MetricKind::Histogram`] | integers and floats ≥ 0 | HDR histogram |
//! | `gauge.<name>` | [`MetricKind::Gauge`] | any integer or float | last, min, max |
//!
//! A value of the wrong sign or type (a negative value of a monotonic counter or a histogram,
//! a NaN or an infinity, a string or a `bool`) is not lost silently: it is counted in
//! [`Metric::rejected`].
//!
//! Each metric is kept per span name: the span the event occurs in (its explicit parent, else
//! the innermost span entered on the thread that spanprof profiles: a span the filter excludes
//! counts for the profiled span around it), or none ([`Metric::span`] is `None`) for an event
//! outside every profiled span or whose explicit parent spanprof does not profile.
//!
//! # Units
//!
//! A metric's unit is the suffix of its name, as in Prometheus: `histogram.step_seconds`,
//! `gauge.queue_bytes`, `gauge.hit_ratio`. [`unit_of`] lists the suffixes recognised; a name
//! without one has no unit (a plain number). Ratios and percentages are gauges or histograms
//! with the unit `ratio` (0..1) or `percent` (0..100).
//!
//! # Histograms of values
//!
//! Metric histograms use the span histograms' layout (2 significant digits, 1 to
//! [`HIGHEST_NS`](super::HIGHEST_NS) = 3.6 × 10¹²), so they encode, merge and read back as the
//! span histograms do. Integer values are recorded as they are ([`HistogramValue::integers`],
//! scale 1). Float values are recorded in nano-units, `round(v × 10⁹)`
//! ([`HistogramValue::floats`], scale [`FLOAT_SCALE`]): 10⁻⁹ to 3600 keep 2 significant
//! digits, larger floats are clamped (counted in [`Stat::clamped`], their exact sum and maximum
//! kept). Record large quantities (bytes, items) as integers. Sums, minima and maxima are
//! exact in both.
//!
//! # Merging
//!
//! [`merge`] adds the metrics of two profiles exactly: counters' sums add, histograms add
//! bucket by bucket, gauges keep the later last value (by [`GaugeValue::last_unix_ns`]) and the
//! smaller minimum and larger maximum.

use serde::{Deserialize, Serialize};

use super::combine::{self, rule, Combine};
use super::Stat;

/// How a float value of a histogram metric is scaled before it is recorded: 10⁹ recorded
/// units per unit of the metric (nano-units).
pub const FLOAT_SCALE: f64 = 1e9;

/// The kind of a metric, from its field's prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum MetricKind {
    /// `counter.<name>`: an up-down counter; its values, of either sign, are summed.
    Counter,
    /// `monotonic_counter.<name>`: a counter that only goes up; negative values are rejected.
    MonotonicCounter,
    /// `histogram.<name>`: every value into a histogram; negative values are rejected.
    Histogram,
    /// `gauge.<name>`: the last value, and the smallest and largest seen.
    Gauge,
}

impl MetricKind {
    /// Every kind, in the order of their prefixes' documentation.
    pub const ALL: [MetricKind; 4] = [
        MetricKind::Counter,
        MetricKind::MonotonicCounter,
        MetricKind::Histogram,
        MetricKind::Gauge,
    ];

    /// The field prefix of this kind, dot included: `counter.`, `monotonic_counter.`, ...
    pub fn prefix(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter.",
            MetricKind::MonotonicCounter => "monotonic_counter.",
            MetricKind::Histogram => "histogram.",
            MetricKind::Gauge => "gauge.",
        }
    }

    /// The kind and metric name of an event field, if its name is a metric's.
    ///
    /// ```
    /// use spanprof::profile::metrics::MetricKind;
    ///
    /// assert_eq!(
    ///     MetricKind::of_field("histogram.loss"),
    ///     Some((MetricKind::Histogram, "loss"))
    /// );
    /// assert_eq!(MetricKind::of_field("histogram."), None);
    /// assert_eq!(MetricKind::of_field("summary.loss"), None);
    /// ```
    pub fn of_field(field: &str) -> Option<(MetricKind, &str)> {
        MetricKind::ALL.into_iter().find_map(|kind| {
            field
                .strip_prefix(kind.prefix())
                .filter(|name| !name.is_empty())
                .map(|name| (kind, name))
        })
    }

    /// Its name in the profile: `counter`, `monotonic_counter`, `histogram`, `gauge`.
    pub fn as_str(self) -> &'static str {
        let prefix = self.prefix();
        &prefix[..prefix.len() - 1]
    }
}

/// The unit of a metric name, from its suffix: `_seconds`, `_milliseconds`, `_microseconds`,
/// `_nanoseconds`, `_bytes`, `_ratio`, `_percent`; `None` without one.
///
/// ```
/// use spanprof::profile::metrics::unit_of;
///
/// assert_eq!(unit_of("step_seconds"), Some("seconds"));
/// assert_eq!(unit_of("hit_ratio"), Some("ratio"));
/// assert_eq!(unit_of("loss"), None);
/// ```
pub fn unit_of(name: &str) -> Option<&'static str> {
    const UNITS: [&str; 7] = [
        "seconds",
        "milliseconds",
        "microseconds",
        "nanoseconds",
        "bytes",
        "ratio",
        "percent",
    ];
    UNITS.into_iter().find(|unit| {
        name.strip_suffix(unit)
            .and_then(|rest| rest.strip_suffix('_'))
            .is_some_and(|rest| !rest.is_empty())
    })
}

/// One metric in one span name: what events recorded for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Metric {
    /// The metric's name: the field's name without its prefix (`loss` for `histogram.loss`).
    pub name: String,
    /// Its kind, from the prefix.
    pub kind: MetricKind,
    /// Its unit, from the name's suffix ([`unit_of`]), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// The span name the events occurred in; `None` for events outside every profiled span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span: Option<String>,
    /// That span name's target (with [`Metric::span`], the key of a
    /// [`SpanStats`](super::SpanStats)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span_target: Option<String>,
    /// Values recorded.
    pub records: u64,
    /// Values refused: of the wrong sign for the kind, not finite, or not a number.
    pub rejected: u64,
    /// What the values add up to, per kind.
    pub value: MetricValue,
}

// Metrics are matched by [`Metric::same_key`] in a merge and an interval.
combine::rules! { Metric {
    name: first,
    kind: first,
    unit: custom(|parts: &[&Self]| parts.iter().find_map(|m| m.unit.clone())),
    span: first,
    span_target: first,
    records: sum,
    rejected: sum,
    value: nested,
} }

/// The figures of a metric, per kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum MetricValue {
    /// A counter's sum (both counter kinds).
    Sum(SumValue),
    /// A histogram's values.
    Histogram(Box<HistogramValue>),
    /// A gauge's values.
    Gauge(GaugeValue),
}

/// Each kind by its own rules; a value of another kind (not in metrics of one key) is left out
/// of a merge, and makes an interval the later value.
impl Combine for MetricValue {
    fn merged(parts: &[&Self]) -> Self {
        let sums = || {
            parts.iter().filter_map(|p| match p {
                MetricValue::Sum(s) => Some(s),
                _ => None,
            })
        };
        let histograms = || {
            parts.iter().filter_map(|p| match p {
                MetricValue::Histogram(h) => Some(&**h),
                _ => None,
            })
        };
        let gauges = || {
            parts.iter().filter_map(|p| match p {
                MetricValue::Gauge(g) => Some(g),
                _ => None,
            })
        };
        match parts[0] {
            MetricValue::Sum(_) => MetricValue::Sum(rule::nested(sums())),
            MetricValue::Histogram(_) => {
                MetricValue::Histogram(Box::new(rule::nested(histograms())))
            }
            MetricValue::Gauge(_) => MetricValue::Gauge(rule::nested(gauges())),
        }
    }

    fn since(&self, earlier: &Self) -> Self {
        match (self, earlier) {
            (MetricValue::Sum(a), MetricValue::Sum(b)) => MetricValue::Sum(a.since(b)),
            (MetricValue::Histogram(a), MetricValue::Histogram(b)) => {
                MetricValue::Histogram(Box::new(a.since(b)))
            }
            (MetricValue::Gauge(a), MetricValue::Gauge(b)) => MetricValue::Gauge(a.since(b)),
            (value, _) => value.clone(),
        }
    }
}

/// The sum of a counter, exact for its integer values.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SumValue {
    /// Sum of the integer values (saturating at the bounds of `i64`).
    pub integer: i64,
    /// Sum of the float values (saturating at `±f64::MAX`: always finite).
    pub float: f64,
}

combine::rules! { SumValue {
    integer: sum,
    float: signed_sum,
} }

impl SumValue {
    /// The whole sum, integer and float parts together.
    pub fn total(&self) -> f64 {
        self.integer as f64 + self.float
    }
}

/// The values of a histogram metric: integers and floats apart, each exact in its own scale
/// (see the [module docs](self)).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct HistogramValue {
    /// Integer values, as recorded (scale 1). The `_ns` figures of the [`Stat`] are in the
    /// metric's unit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub integers: Option<Stat>,
    /// Float values in nano-units (`round(v × 10⁹)`, scale [`FLOAT_SCALE`]). The `_ns` figures
    /// of the [`Stat`] are in 10⁻⁹ of the metric's unit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floats: Option<Stat>,
}

combine::rules! { HistogramValue {
    integers: opt,
    floats: opt,
} }

impl HistogramValue {
    /// Values recorded, of both scales.
    pub fn count(&self) -> u64 {
        self.parts()
            .fold(0u64, |n, (s, _)| n.saturating_add(s.count))
    }

    /// The exact mean of every value, in the metric's unit.
    pub fn mean(&self) -> f64 {
        let count = self.count();
        if count == 0 {
            return 0.0;
        }
        let sum: f64 = self
            .parts()
            .map(|(s, scale)| s.total_ns as f64 / scale)
            .sum();
        sum / count as f64
    }

    /// The exact smallest and largest value, in the metric's unit ((0, 0) when empty).
    pub fn min_max(&self) -> (f64, f64) {
        let mut out: Option<(f64, f64)> = None;
        for (s, scale) in self.parts().filter(|(s, _)| s.count > 0) {
            let (lo, hi) = (s.min_ns as f64 / scale, s.max_ns as f64 / scale);
            out = Some(out.map_or((lo, hi), |(a, b)| (a.min(lo), b.max(hi))));
        }
        out.unwrap_or((0.0, 0.0))
    }

    /// The value at quantile `q` (0..=1), in the metric's unit, to the histograms' precision.
    /// Where a metric has values of both scales, their buckets are merged in the float scale.
    pub fn quantile(&self, q: f64) -> f64 {
        let mut buckets: Vec<(f64, u64)> = Vec::new();
        for (s, scale) in self.parts() {
            buckets.extend(s.histogram.iter().map(|(v, n)| (v as f64 / scale, n)));
        }
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        let total: u128 = buckets.iter().map(|&(_, n)| u128::from(n)).sum();
        if total == 0 {
            return 0.0;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u128).max(1);
        let mut seen = 0u128;
        let (lo, hi) = self.min_max();
        for (value, n) in buckets {
            seen += u128::from(n);
            if seen >= rank {
                return value.clamp(lo, hi);
            }
        }
        hi
    }

    /// The parts present, with their scale.
    fn parts(&self) -> impl Iterator<Item = (&Stat, f64)> {
        self.integers
            .iter()
            .map(|s| (s, 1.0))
            .chain(self.floats.iter().map(|s| (s, FLOAT_SCALE)))
    }
}

/// The values of a gauge.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct GaugeValue {
    /// The last value set.
    pub last: f64,
    /// When it was set, ns since the Unix epoch (the profile's start plus the clock's time
    /// since): what [`merge`] orders gauges of several threads or profiles by.
    pub last_unix_ns: u64,
    /// The smallest value set.
    pub min: f64,
    /// The largest value set.
    pub max: f64,
}

// A gauge is a state: an interval's is the later's.
combine::rules! { GaugeValue {
    last: latest(last_unix_ns),
    last_unix_ns: max,
    min: min,
    max: max,
} }

impl Metric {
    /// Whether `other` is the same metric in the same span name (what [`merge`] adds).
    pub fn same_key(&self, other: &Metric) -> bool {
        self.key() == other.key()
    }

    /// What [`Metric::same_key`] compares: name, kind, span name and target.
    pub(crate) fn key(&self) -> (&str, MetricKind, Option<&str>, Option<&str>) {
        (
            &self.name,
            self.kind,
            self.span.as_deref(),
            self.span_target.as_deref(),
        )
    }

    /// Adds `other` (the same metric in the same span name, [`Metric::same_key`]) to this one.
    /// Counters add; histograms add bucket by bucket with exact sums, minima and maxima;
    /// gauges keep the later last value (the other's on a tie) and the extremes of both.
    pub fn merge(&mut self, other: &Metric) {
        self.add(other);
    }
}

/// Adds the metrics of `from` into `into`: each metric of the same key ([`Metric::same_key`])
/// is merged ([`Metric::merge`]), the others are appended. The order of `into` is kept.
///
/// ```
/// use spanprof::profile::metrics::merge;
///
/// let mut a = Vec::new();
/// merge(&mut a, &[]);
/// assert!(a.is_empty());
/// ```
pub fn merge(into: &mut Vec<Metric>, from: &[Metric]) {
    for metric in from {
        match into.iter_mut().find(|m| m.same_key(metric)) {
            Some(existing) => existing.merge(metric),
            None => into.push(metric.clone()),
        }
    }
}

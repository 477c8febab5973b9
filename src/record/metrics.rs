//! Metrics from events: the per-callsite decision which fields of an event are metrics, and the
//! per-thread cells their values are recorded into.
//!
//! An event callsite is looked at once ([`EventSites::decide`]): its field names are parsed
//! (`counter.`, `monotonic_counter.`, `histogram.`, `gauge.`, see
//! [`crate::profile::metrics`]), each metric gets a dense id, and the callsite's field index →
//! metric id map is kept in a slot read without a lock. A callsite with no metric field is
//! cached as such: its events cost one cache probe more than before.
//!
//! An event with metric fields costs one visit of its fields; each metric value goes into the
//! recording thread's [`MetricCell`] of (metric, span name), found by a short linear search of
//! the thread's cells of that metric (one per span name it occurred in). No lock, no allocation
//! once a thread has recorded that metric in that span name.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock, RwLock};

use hdrhistogram::Histogram;
use tracing_core::field::{Field, Visit};
use tracing_core::Metadata;

use super::hist::{AtomicHist, Exact};
use super::names::CallsiteCache;
use super::shards::{bump, Local};
use crate::profile::metrics::{unit_of, MetricKind, FLOAT_SCALE};

/// Most distinct metrics (name and kind) one profile holds; values of further metrics are
/// counted in [`Dropped::metric_values`](crate::profile::Dropped::metric_values).
pub const MAX_METRICS: usize = 1 << 16;
/// Most event callsites with metric fields one profile tells apart; further ones are treated
/// as having none, and their metric values counted as dropped.
pub const MAX_METRIC_SITES: usize = 4096;

/// A span name index that is no span: metrics of events outside every profiled span.
pub(crate) const NO_SPAN: u32 = u32::MAX;

/// A field that is no metric, in a callsite's field map.
const NOT_METRIC: u32 = u32::MAX;
/// A metric field past [`MAX_METRICS`]: its values are counted as dropped.
const DROPPED_METRIC: u32 = u32::MAX - 1;

/// A callsite's cached value: 0 for "no metric field", else its site index + 1. A callsite
/// past [`MAX_METRIC_SITES`] gets [`DROPPED_SITE`] plus its number of metric fields.
const NO_METRIC_FIELDS: u32 = 0;
const DROPPED_SITE: u32 = 1 << 31;

/// One metric: its name (the field's, without the prefix), kind and unit.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MetricInfo {
    pub(crate) name: &'static str,
    pub(crate) kind: MetricKind,
    pub(crate) unit: Option<&'static str>,
}

/// The metrics known, and the event callsites' field maps.
pub(crate) struct EventSites {
    cache: CallsiteCache,
    /// Per site: the metric id of each field, by field index, with its kind in the top bits.
    sites: Box<[OnceLock<Box<[u32]>>]>,
    registry: Mutex<Registry>,
    metrics: RwLock<Vec<MetricInfo>>,
    /// Metric values not recorded: past [`MAX_METRICS`] or [`MAX_METRIC_SITES`].
    pub(crate) dropped: AtomicU64,
}

#[derive(Default)]
struct Registry {
    by_key: HashMap<(&'static str, MetricKind), u32>,
    sites: u32,
}

impl fmt::Debug for EventSites {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventSites").finish_non_exhaustive()
    }
}

/// A metric id and its kind, packed: kind in bits 30–31 (ids stay below 2^30).
fn pack(id: u32, kind: MetricKind) -> u32 {
    id | (kind_index(kind) << 30)
}

fn kind_index(kind: MetricKind) -> u32 {
    match kind {
        MetricKind::Counter => 0,
        MetricKind::MonotonicCounter => 1,
        MetricKind::Histogram => 2,
        MetricKind::Gauge => 3,
    }
}

fn unpack(packed: u32) -> (u32, MetricKind) {
    let kind = MetricKind::ALL[(packed >> 30) as usize];
    (packed & ((1 << 30) - 1), kind)
}

const _: () = assert!(MAX_METRICS < (1 << 30) - 2);

impl EventSites {
    pub(crate) fn new() -> Self {
        Self {
            cache: CallsiteCache::new(),
            sites: (0..MAX_METRIC_SITES).map(|_| OnceLock::new()).collect(),
            registry: Mutex::new(Registry::default()),
            metrics: RwLock::new(Vec::new()),
            dropped: AtomicU64::new(0),
        }
    }

    /// Whether an event callsite is known to have no metric field (the common case): one
    /// inlined cache probe.
    #[inline(always)]
    pub(crate) fn has_none(&self, meta: &'static Metadata<'static>) -> bool {
        self.cache.get(meta) == Some(NO_METRIC_FIELDS)
    }

    /// The field map of an event callsite: `None` when it has no metric field. Decides the
    /// callsite on its first event.
    pub(crate) fn fields_of(&self, meta: &'static Metadata<'static>) -> Option<&[u32]> {
        let site = match self.cache.get(meta) {
            Some(site) => site,
            None => self.decide(meta),
        };
        self.site(site)
    }

    #[inline(always)]
    fn site(&self, site: u32) -> Option<&[u32]> {
        if site == NO_METRIC_FIELDS {
            return None;
        }
        if site & DROPPED_SITE != 0 {
            self.dropped
                .fetch_add(u64::from(site & !DROPPED_SITE), Relaxed);
            return None;
        }
        self.sites.get(site as usize - 1)?.get().map(|b| &b[..])
    }

    /// Decides a callsite once: which of its fields are metrics.
    #[cold]
    #[inline(never)]
    fn decide(&self, meta: &'static Metadata<'static>) -> u32 {
        crate::alloc::untracked(|| {
            let mut registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
            // Decided by another thread meanwhile.
            if let Some(site) = self.cache.get(meta) {
                return site;
            }
            let site = self.register(&mut registry, meta);
            self.cache.insert(meta, site);
            site
        })
    }

    fn register(&self, registry: &mut Registry, meta: &'static Metadata<'static>) -> u32 {
        let fields: Vec<Option<(MetricKind, &'static str)>> = meta
            .fields()
            .iter()
            .map(|f| MetricKind::of_field(f.name()))
            .collect();
        let metric_fields = fields.iter().filter(|f| f.is_some()).count() as u32;
        if metric_fields == 0 {
            return NO_METRIC_FIELDS;
        }
        if registry.sites as usize >= MAX_METRIC_SITES {
            return DROPPED_SITE | metric_fields;
        }
        let map: Box<[u32]> = fields
            .into_iter()
            .map(|field| {
                let Some((kind, name)) = field else {
                    return NOT_METRIC;
                };
                if let Some(&id) = registry.by_key.get(&(name, kind)) {
                    return pack(id, kind);
                }
                let mut metrics = self.metrics.write().unwrap_or_else(|e| e.into_inner());
                if metrics.len() >= MAX_METRICS {
                    return DROPPED_METRIC;
                }
                let id = metrics.len() as u32;
                metrics.push(MetricInfo {
                    name,
                    kind,
                    unit: unit_of(name),
                });
                registry.by_key.insert((name, kind), id);
                pack(id, kind)
            })
            .collect();
        let index = registry.sites;
        registry.sites += 1;
        // A site index is handed out once, under the registry lock: the slot is empty.
        let _ = self.sites[index as usize].set(map);
        index + 1
    }

    /// Every metric, by id.
    pub(crate) fn all(&self) -> Vec<MetricInfo> {
        self.metrics
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// What one thread recorded for one metric in one span name. Only that thread writes it (or,
/// for threads being torn down, the holder of the orphan shard's lock); snapshots read it.
#[derive(Debug)]
pub(crate) struct MetricCell {
    pub(crate) records: AtomicU64,
    pub(crate) rejected: AtomicU64,
    /// Counters: sum of integer values (an `i64`, saturating).
    pub(crate) int_sum: AtomicU64,
    /// Counters: sum of float values (`f64` bits).
    pub(crate) float_sum: AtomicU64,
    /// Gauges: last value (`f64` bits) and its raw clock reading.
    pub(crate) last: AtomicU64,
    pub(crate) last_at: AtomicU64,
    /// Gauges: extremes (`f64` bits).
    pub(crate) min: AtomicU64,
    pub(crate) max: AtomicU64,
    /// Histograms: integer values, and float values in nano-units.
    pub(crate) ints: AtomicHist,
    pub(crate) floats: AtomicHist,
    /// Buckets drained from `ints` and `floats` before a counter could overflow; snapshots
    /// hold this lock while they read both.
    pub(crate) spill: Mutex<[Option<Histogram<u64>>; 2]>,
}

impl MetricCell {
    pub(crate) fn new() -> Self {
        Self {
            records: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            int_sum: AtomicU64::new(0),
            float_sum: AtomicU64::new(0f64.to_bits()),
            last: AtomicU64::new(0f64.to_bits()),
            last_at: AtomicU64::new(0),
            min: AtomicU64::new(f64::INFINITY.to_bits()),
            max: AtomicU64::new(f64::NEG_INFINITY.to_bits()),
            ints: AtomicHist::new(),
            floats: AtomicHist::new(),
            spill: Mutex::new([None, None]),
        }
    }

    /// Records one value of a metric of `kind`; `now` reads the clock (gauges only).
    fn record(&self, kind: MetricKind, value: Value, now: impl FnOnce() -> u64) {
        let accepted = match kind {
            MetricKind::Counter => self.add(value, true),
            MetricKind::MonotonicCounter => self.add(value, false),
            MetricKind::Histogram => self.observe(value),
            MetricKind::Gauge => self.set(value, now),
        };
        bump(
            if accepted {
                &self.records
            } else {
                &self.rejected
            },
            1,
        );
    }

    fn add(&self, value: Value, signed: bool) -> bool {
        let int = match value {
            Value::U(u) => i64::try_from(u).ok(),
            Value::I(i) if signed || i >= 0 => Some(i),
            Value::F(f) if f.is_finite() && (signed || f >= 0.0) => None,
            _ => return false,
        };
        match int {
            Some(i) => {
                let sum = self.int_sum.load(Relaxed) as i64;
                self.int_sum.store(sum.saturating_add(i) as u64, Relaxed);
            }
            None => {
                let f = value.as_f64();
                let sum = f64::from_bits(self.float_sum.load(Relaxed));
                self.float_sum.store((sum + f).to_bits(), Relaxed);
            }
        }
        true
    }

    fn observe(&self, value: Value) -> bool {
        let (hist, v, slot) = match value {
            Value::U(u) => (&self.ints, u, 0),
            Value::I(i) if i >= 0 => (&self.ints, i as u64, 0),
            // `as` saturates: floats beyond u64 nano-units are clamped like any large value.
            Value::F(f) if f.is_finite() && f >= 0.0 => {
                (&self.floats, (f * FLOAT_SCALE).round() as u64, 1)
            }
            _ => return false,
        };
        if hist.record(v) {
            self.drain(slot);
        }
        true
    }

    /// Drains a histogram into its spill (once per 65 535 values of one bucket).
    #[cold]
    #[inline(never)]
    fn drain(&self, slot: usize) {
        let mut spill = self.spill.lock().unwrap_or_else(|e| e.into_inner());
        let into =
            spill[slot].get_or_insert_with(|| crate::alloc::untracked(super::hist::new_histogram));
        [&self.ints, &self.floats][slot].drain_into(into);
    }

    fn set(&self, value: Value, now: impl FnOnce() -> u64) -> bool {
        let v = value.as_f64();
        if matches!(value, Value::Other) || !v.is_finite() {
            return false;
        }
        self.last.store(v.to_bits(), Relaxed);
        self.last_at.store(now(), Relaxed);
        if v < f64::from_bits(self.min.load(Relaxed)) {
            self.min.store(v.to_bits(), Relaxed);
        }
        if v > f64::from_bits(self.max.load(Relaxed)) {
            self.max.store(v.to_bits(), Relaxed);
        }
        true
    }

    /// A histogram's buckets (spilled and live) and exact figures: `slot` 0 integers, 1 floats.
    pub(crate) fn histogram(&self, slot: usize) -> Option<(Histogram<u64>, Exact)> {
        let spill = self.spill.lock().unwrap_or_else(|e| e.into_inner());
        let live = [&self.ints, &self.floats][slot];
        let exact = live.exact();
        if spill[slot].is_none() && exact.max == 0 && exact.min == u64::MAX {
            return None;
        }
        let mut h = spill[slot]
            .clone()
            .unwrap_or_else(super::hist::new_histogram);
        live.add_to(&mut h);
        Some((h, exact))
    }
}

/// A metric field's value.
#[derive(Debug, Clone, Copy)]
enum Value {
    U(u64),
    I(i64),
    F(f64),
    /// Not a number (a string, a `bool`, a `Debug` value).
    Other,
}

impl Value {
    fn as_f64(self) -> f64 {
        match self {
            Value::U(u) => u as f64,
            Value::I(i) => i as f64,
            Value::F(f) => f,
            Value::Other => f64::NAN,
        }
    }
}

/// Records the metric fields of one event into this thread's cells.
pub(crate) struct MetricVisitor<'a> {
    pub(crate) fields: &'a [u32],
    pub(crate) span: u32,
    /// This thread's state; `None` for a thread being torn down, which records into the
    /// orphan shard.
    pub(crate) local: Option<&'a mut Local>,
    pub(crate) orphan: &'a super::shards::Shards,
    pub(crate) dropped: &'a AtomicU64,
    pub(crate) now: &'a dyn Fn() -> u64,
}

impl MetricVisitor<'_> {
    #[inline]
    fn value(&mut self, field: &Field, value: Value) {
        let Some(&packed) = self.fields.get(field.index()) else {
            return;
        };
        match packed {
            NOT_METRIC => {}
            DROPPED_METRIC => {
                self.dropped.fetch_add(1, Relaxed);
            }
            _ => {
                let (id, kind) = unpack(packed);
                let now = self.now;
                match self.local.as_deref_mut() {
                    Some(local) => local.metric(id, self.span).record(kind, value, now),
                    None => self
                        .orphan
                        .with_orphan_metric(id, self.span, |cell| cell.record(kind, value, now)),
                }
            }
        }
    }
}

impl Visit for MetricVisitor<'_> {
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.value(field, Value::U(value));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.value(field, Value::I(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.value(field, Value::F(value));
    }
    fn record_u128(&mut self, field: &Field, value: u128) {
        match u64::try_from(value) {
            Ok(v) => self.value(field, Value::U(v)),
            Err(_) => self.value(field, Value::F(value as f64)),
        }
    }
    fn record_i128(&mut self, field: &Field, value: i128) {
        match i64::try_from(value) {
            Ok(v) => self.value(field, Value::I(v)),
            Err(_) => self.value(field, Value::F(value as f64)),
        }
    }
    fn record_bool(&mut self, field: &Field, _: bool) {
        self.value(field, Value::Other);
    }
    fn record_str(&mut self, field: &Field, _: &str) {
        self.value(field, Value::Other);
    }
    fn record_debug(&mut self, field: &Field, _: &dyn fmt::Debug) {
        self.value(field, Value::Other);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event_meta(fields: &'static [&'static str]) -> &'static Metadata<'static> {
        crate::record::test_callsite::leak(fields, tracing_core::metadata::Kind::EVENT)
    }

    #[test]
    fn a_callsite_is_decided_once_into_a_field_map() {
        let sites = EventSites::new();
        let plain = event_meta(&["message", "items"]);
        assert!(sites.fields_of(plain).is_none());
        assert!(sites.has_none(plain));

        let meta = event_meta(&["message", "histogram.loss", "gauge.lr", "summary.x"]);
        assert!(!sites.has_none(meta));
        let map = sites.fields_of(meta).unwrap().to_vec();
        assert_eq!(map.len(), 4);
        assert_eq!((map[0], map[3]), (NOT_METRIC, NOT_METRIC));
        assert_eq!(unpack(map[1]), (0, MetricKind::Histogram));
        assert_eq!(unpack(map[2]), (1, MetricKind::Gauge));
        // A second callsite with the same metric gets the same id; a new kind a new one.
        let other = event_meta(&["histogram.loss", "counter.loss"]);
        let map2 = sites.fields_of(other).unwrap().to_vec();
        assert_eq!(unpack(map2[0]), (0, MetricKind::Histogram));
        assert_eq!(unpack(map2[1]), (2, MetricKind::Counter));
        let all = sites.all();
        assert_eq!(all.len(), 3);
        assert_eq!((all[0].name, all[0].unit), ("loss", None));
        // Decided once: the same map again.
        assert_eq!(sites.fields_of(meta).unwrap(), &map[..]);
    }

    #[test]
    fn callsites_past_the_limit_count_their_metric_values_as_dropped() {
        let sites = EventSites::new();
        for _ in 0..MAX_METRIC_SITES {
            assert!(sites
                .fields_of(event_meta(&["gauge.depth_bytes"]))
                .is_some());
        }
        assert_eq!(sites.all().len(), 1);
        assert_eq!(sites.all()[0].unit, Some("bytes"));
        let late = event_meta(&["message", "counter.a", "histogram.b"]);
        for _ in 0..3 {
            assert!(sites.fields_of(late).is_none());
        }
        assert_eq!(
            sites.dropped.load(Relaxed),
            6,
            "two metric fields, three events"
        );
        // Callsites without metric fields are still told apart.
        assert!(sites.fields_of(event_meta(&["message"])).is_none());
        assert_eq!(sites.dropped.load(Relaxed), 6);
    }
}

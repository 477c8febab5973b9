//! Automatic back-off: when spanprof's estimated cost goes over a share of the program's CPU
//! time ([`Builder::with_max_overhead`](crate::Builder::with_max_overhead), 5% by default), it
//! steps down in two stages, and back up in the reverse order once the program's span rate
//! makes the detail affordable again.
//!
//! A thread of its own checks once a second ([`TICK`]): the cost over the last second is
//! spanprof's estimate ([`crate::profile::Overhead`]: calibrated cost per span × entries, plus
//! the measured time of the readings, plus the calibrated cost of each span left out by
//! sampling), compared with the process's CPU time over the same second.
//!
//! - **Stage 1, the readings.** Over the threshold with per-span resource readings on (thread
//!   CPU time, heap counters, the marks of memory, GPU and energy), they are switched off.
//! - **Stage 2, sampling.** Still over it with the readings off (or with none on, at `basic`),
//!   the hottest span names are sampled 1 in N (`record/sampling.rs`: a span left out costs a
//!   countdown at creation and a table probe per callback; its calls are still counted).
//!   - *Which names*: those whose spans are short (a mean instance under [`SHORT_FACTOR`] ×
//!     the calibrated cost of a span: spanprof costs them over 1%; longer ones are never
//!     sampled), leaves (self time ≥ [`LEAF_SHARE`] of busy: a span left out has no children
//!     to misplace) and entered once per span (≤ [`ENTRIES_PER_SPAN`] entries per instance: a
//!     span left out counts as one call). Among them the most entries over the last second
//!     first, since at this stage every span costs the same; of two as hot, the shorter.
//!   - *Which N*: per name, the smallest power of two (up to [`MAX_EVERY`]) that, with the
//!     names before it, brings the estimate under half the threshold: a name's cost falls by
//!     N_old / N_new. A later tick still over the threshold raises N further.
//! - **Back.** Sampling goes first: under half the threshold with every N halved (predicted:
//!   each name's spans recorded twice as often), every N is halved, down to 1 (every span);
//!   then the readings come back when the cost predicted with them (their cost per entry
//!   measured when they were stepped down) is under half the threshold. Half: no flapping.
//!
//! Not with a span filter that has span or field directives: a span left out would still go
//! to the filter, under its lock (the layer forbids sampling then).
//!
//! Span timing itself is never switched off. The first step of each stage is logged once at
//! `spanprof::perf`; every step is in the profile
//! ([`Snapshot::backoff`](crate::profile::Snapshot::backoff), the names and N of stage 2 in
//! [`BackoffStep::sampled`]) and the report, and every sampled name is marked in every output
//! ([`SpanStats::sampled`](crate::profile::SpanStats::sampled): N, since when, the spans left
//! out). Figures of a sampled name: calls, instances and created exact; histograms (per-call
//! times, percentiles), resources and the call tree from the spans recorded; totals scaled
//! (each span left out counted at the name's running mean, the figure its parent's child time
//! got: [`SpanStats::scaled_total_ns`](crate::profile::SpanStats::scaled_total_ns));
//! its parent's self time kept unbiased by adding the name's running mean for each span left
//! out (error stated in `record/sampling.rs`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::profile::BackoffStep;
use crate::record::overhead::OwnTotals;
use crate::record::sampling::NameLoad;
use crate::record::Recorder;
use crate::switches::Resources;
use crate::worker::{Job, WeakUse, Worker, STOP_WAIT};
use crate::PERF_TARGET;

/// The default threshold: spanprof's estimated cost as a share of the process's CPU time, %.
pub(crate) const DEFAULT_MAX_OVERHEAD_PCT: f64 = 5.0;

/// How often the back-off looks at the cost.
pub(crate) const TICK: Duration = Duration::from_secs(1);

/// The most steps kept in the profile (later ones are counted, not kept:
/// `dropped.backoff_steps`).
pub(crate) const MAX_STEPS: usize = 64;

/// The largest N a name is sampled at (1 span in 1024 recorded).
pub(crate) const MAX_EVERY: u32 = 1024;

/// Names whose mean instance lasts more than this many times the calibrated cost of a span
/// are never sampled: spanprof costs them under 1%.
const SHORT_FACTOR: f64 = 100.0;

/// Sampled names are leaves: their self time is at least this share of their busy time.
const LEAF_SHARE: f64 = 0.95;

/// Sampled names are entered once per span: at most this many entries per instance.
const ENTRIES_PER_SPAN: f64 = 1.05;

/// One reading of the controller's inputs.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Reading {
    /// ns since the profile started.
    pub(crate) t_ns: u64,
    /// spanprof's cost so far.
    pub(crate) own: OwnTotals,
    /// The process's CPU time so far, ns.
    pub(crate) cpu_ns: u64,
    /// Each span name's load so far (the second stage picks names from them).
    pub(crate) names: Vec<NameLoad>,
}

/// What the controller decided at a tick.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Decision {
    /// Switch these resources off (the readings cost `pct` % of the last interval).
    Down { off: Resources, pct: f64 },
    /// Switch these back on (predicted cost with them: `pct` %).
    Up { on: Resources, pct: f64 },
    /// Sample these names 1 in N, (name, N), N up (spanprof cost `pct` % without it).
    Sample { names: Vec<(u32, u32)>, pct: f64 },
    /// Sample these names less, (name, N), N down, 1: every span (predicted: `pct` %).
    Unsample { names: Vec<(u32, u32)>, pct: f64 },
}

/// The back-off's state: a pure function of its readings (tests feed it numbers).
#[derive(Debug)]
pub(crate) struct Controller {
    max_pct: f64,
    /// Calibrated cost of a span recorded, and of one left out by sampling, ns.
    span_ns: f64,
    skip_ns: f64,
    last: Option<Reading>,
    /// What is stepped down, and what its readings cost per entry when it was.
    down: Option<(Resources, f64)>,
    /// The names sampled now, with their N.
    sampled: BTreeMap<u32, u32>,
}

impl Controller {
    pub(crate) fn new(max_pct: f64, span_ns: f64, skip_ns: f64) -> Self {
        Self {
            max_pct,
            span_ns,
            skip_ns,
            last: None,
            down: None,
            sampled: BTreeMap::new(),
        }
    }

    /// One tick, with the resources switched on now.
    pub(crate) fn tick(&mut self, now: Reading, current: Resources) -> Option<Decision> {
        let last = self.last.replace(now.clone())?;
        let cpu = now.cpu_ns.saturating_sub(last.cpu_ns);
        if cpu == 0 {
            return None;
        }
        let entries = now.own.entries.saturating_sub(last.own.entries);
        // The work since the last tick at today's cost per unit: a cost per span learnt
        // meanwhile (the first sure measured one) reprices no span before it.
        let estimated = now
            .own
            .estimated_ns
            .saturating_sub(last.own.priced_as(&now.own));
        let readings = now.own.readings_ns.saturating_sub(last.own.readings_ns);
        let pct = |ns: f64| 100.0 * ns / cpu as f64;
        let over = pct(estimated as f64) > self.max_pct;
        if self.down.is_none() && !current.is_empty() {
            // Stage 1: the readings go first.
            if !over {
                return None;
            }
            let per_entry = readings as f64 / entries.max(1) as f64;
            self.down = Some((current, per_entry));
            return Some(Decision::Down {
                off: current,
                pct: pct(estimated as f64),
            });
        }
        let loads = deltas(&last.names, &now.names);
        if over {
            // Stage 2: the readings are off (or none was on), and still over the limit.
            let target = self.max_pct / 2.0 / 100.0 * cpu as f64;
            let names = self.sample_more(&loads, estimated as f64 - target);
            return (!names.is_empty()).then(|| Decision::Sample {
                names,
                pct: pct(estimated as f64),
            });
        }
        if !self.sampled.is_empty() {
            // Back, sampling first: each N halved records twice the spans it records now.
            let saved = self.span_ns - self.skip_ns;
            let more: f64 = loads
                .iter()
                .filter(|l| self.sampled.contains_key(&l.name))
                .map(|l| l.entries as f64 * saved)
                .sum();
            let predicted = pct(estimated as f64 + more);
            if predicted >= self.max_pct / 2.0 {
                return None;
            }
            let names: Vec<(u32, u32)> = self
                .sampled
                .iter()
                .map(|(&name, &every)| (name, every / 2))
                .collect();
            for &(name, every) in &names {
                if every > 1 {
                    self.sampled.insert(name, every);
                } else {
                    self.sampled.remove(&name);
                }
            }
            return Some(Decision::Unsample {
                names,
                pct: predicted,
            });
        }
        let (off, per_entry) = self.down?;
        let predicted = pct(estimated as f64 + entries as f64 * per_entry);
        (predicted < self.max_pct / 2.0).then(|| {
            self.down = None;
            Decision::Up {
                on: off,
                pct: predicted,
            }
        })
    }

    /// Raises N of the hottest short leaf names until `excess` ns a tick are saved (their
    /// cost, entries × the cost of a span, falls by N_old / N_new); returns (name, new N).
    fn sample_more(&mut self, loads: &[NameLoad], mut excess: f64) -> Vec<(u32, u32)> {
        let saved = self.span_ns - self.skip_ns;
        if saved <= 0.0 {
            // A span left out would cost as much as one recorded: nothing to gain.
            return Vec::new();
        }
        let mut candidates: Vec<&NameLoad> = loads
            .iter()
            .filter(|l| {
                let mean = l.busy_ns as f64 / l.closed.max(1) as f64;
                l.closed > 0
                    && mean <= SHORT_FACTOR * self.span_ns
                    && l.self_ns as f64 >= LEAF_SHARE * l.busy_ns as f64
                    && l.entries as f64 <= ENTRIES_PER_SPAN * l.closed as f64
                    && self.sampled.get(&l.name).copied().unwrap_or(1) < MAX_EVERY
            })
            .collect();
        // The hottest first; of two as hot, the shorter (spanprof's larger share of it).
        candidates.sort_by(|a, b| {
            b.entries.cmp(&a.entries).then(
                (a.busy_ns as f64 / a.closed as f64)
                    .total_cmp(&(b.busy_ns as f64 / b.closed as f64)),
            )
        });
        let mut names = Vec::new();
        for l in candidates {
            if excess <= 0.0 {
                break;
            }
            let old = self.sampled.get(&l.name).copied().unwrap_or(1);
            // What the name's recorded spans cost this tick; N_new leaves old/N_new of them.
            let cost = l.entries as f64 * saved;
            let mut every = old * 2;
            while every < MAX_EVERY && cost * (1.0 - f64::from(old) / f64::from(every)) < excess {
                every *= 2;
            }
            excess -= cost * (1.0 - f64::from(old) / f64::from(every));
            self.sampled.insert(l.name, every);
            names.push((l.name, every));
        }
        names
    }
}

/// Each name's load over the last tick (names new since then: all of theirs).
fn deltas(last: &[NameLoad], now: &[NameLoad]) -> Vec<NameLoad> {
    now.iter()
        .map(|n| {
            let l = last
                .iter()
                .find(|l| l.name == n.name)
                .copied()
                .unwrap_or_default();
            NameLoad {
                name: n.name,
                entries: n.entries.saturating_sub(l.entries),
                skipped: n.skipped.saturating_sub(l.skipped),
                closed: n.closed.saturating_sub(l.closed),
                busy_ns: n.busy_ns.saturating_sub(l.busy_ns),
                self_ns: n.self_ns.saturating_sub(l.self_ns),
            }
        })
        .collect()
}

/// The running back-off: its thread, and the steps it took.
#[derive(Debug)]
pub(crate) struct Backoff {
    worker: Worker<BackoffJob>,
    steps: Arc<Mutex<Steps>>,
}

impl Backoff {
    /// Starts the back-off thread for `recorder` (none where the process's CPU time cannot be
    /// read or the thread cannot be started). It holds the recorder weakly, and ends once no
    /// `uses` is left.
    pub(crate) fn start(recorder: &Arc<Recorder>, max_pct: f64, uses: &WeakUse) -> Option<Self> {
        crate::samplers::cpu::process_cpu_ns()?;
        let steps = Arc::new(Mutex::new(Steps::default()));
        let costs = recorder.costs();
        let job = BackoffJob {
            recorder: Arc::downgrade(recorder),
            controller: Controller::new(max_pct, costs.span_ns, costs.skip_ns),
            said: false,
            said_sampling: false,
            steps: steps.clone(),
        };
        let first = Instant::now() + TICK;
        let worker = Worker::start("spanprof-backoff", job, first, Some(uses)).ok()?;
        Some(Self { worker, steps })
    }

    /// The steps taken so far, and how many more were taken past [`MAX_STEPS`].
    pub(crate) fn steps(&self) -> (Vec<BackoffStep>, u64) {
        let steps = self.steps.lock().unwrap_or_else(|e| e.into_inner());
        (steps.kept.clone(), steps.past_bound)
    }

    /// Stops the thread (it wakes at once) and waits for it up to [`STOP_WAIT`]; returns
    /// whether it ended in time (if not, a tick under way may still take its step; no later
    /// one runs).
    pub(crate) fn stop(&mut self) -> bool {
        self.worker.stop(STOP_WAIT)
    }
}

/// The back-off thread's job: a tick every [`TICK`] from the end of the last one.
struct BackoffJob {
    recorder: Weak<Recorder>,
    controller: Controller,
    /// Whether the first step of each stage was logged.
    said: bool,
    said_sampling: bool,
    steps: Arc<Mutex<Steps>>,
}

impl Job for BackoffJob {
    fn run(&mut self, _: Instant) -> Option<Instant> {
        let recorder = self.recorder.upgrade()?;
        self.tick(&recorder);
        Some(Instant::now() + TICK)
    }
}

impl BackoffJob {
    fn tick(&mut self, recorder: &Recorder) {
        let max_pct = self.controller.max_pct;
        let reading = Reading {
            t_ns: recorder.elapsed_ns(),
            own: recorder.own_totals(),
            cpu_ns: crate::samplers::cpu::process_cpu_ns().map_or(0, |(u, s)| u + s),
            // No candidates for sampling where the layer forbids it.
            names: if recorder.sampling_allowed() {
                recorder.name_loads()
            } else {
                Vec::new()
            },
        };
        let t_ns = reading.t_ns;
        let Some(decision) = self.controller.tick(reading, recorder.resources()) else {
            return;
        };
        let step = match decision {
            Decision::Down { off, pct } => {
                recorder.set_resources(Resources::NONE);
                if !self.said {
                    self.said = true;
                    tracing::warn!(
                        target: PERF_TARGET,
                        overhead_pct = pct,
                        max_pct,
                        "spanprof costs more than its limit: per-span resource \
                         readings off until the span rate falls (in the report)"
                    );
                }
                BackoffStep::new(t_ns, false, off, pct)
            }
            Decision::Up { on, pct } => {
                recorder.set_resources(on);
                BackoffStep::new(t_ns, true, on, pct)
            }
            Decision::Sample { names, pct } => {
                let names = set_sampling(recorder, &names);
                if !self.said_sampling {
                    self.said_sampling = true;
                    let sampled: Vec<String> = names
                        .iter()
                        .map(|(name, _, every)| format!("{name} 1/{every}"))
                        .collect();
                    tracing::warn!(
                        target: PERF_TARGET,
                        overhead_pct = pct,
                        max_pct,
                        sampled = %sampled.join(", "),
                        span_cost_ns = self.controller.span_ns,
                        sampled_out_cost_ns = self.controller.skip_ns,
                        "spanprof still costs more than its limit: the hottest \
                         short spans sampled 1 in N until the span rate falls \
                         (counts exact, times scaled; in the report)"
                    );
                }
                BackoffStep::sampling(t_ns, false, names, pct)
            }
            Decision::Unsample { names, pct } => {
                BackoffStep::sampling(t_ns, true, set_sampling(recorder, &names), pct)
            }
        };
        self.steps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .add(step);
    }
}

/// Sets each (name, N) in the recorder; returns them as (name, target, N).
fn set_sampling(recorder: &Recorder, names: &[(u32, u32)]) -> Vec<(String, String, u32)> {
    names
        .iter()
        .filter_map(|&(name, every)| {
            recorder.set_sampling(name, every);
            let (name, target) = recorder.name_of(name)?;
            Some((name, target, every))
        })
        .collect()
}

/// The steps taken: the first [`MAX_STEPS`] kept, the rest counted.
#[derive(Debug, Default)]
struct Steps {
    kept: Vec<BackoffStep>,
    past_bound: u64,
}

impl Steps {
    fn add(&mut self, step: BackoffStep) {
        if self.kept.len() < MAX_STEPS {
            self.kept.push(step);
        } else {
            self.past_bound += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reading after `secs` seconds of a program using one full core, with `entries` entries
    /// per second, each costing `span_ns` plus `readings_ns` of readings.
    fn at(
        secs: u64,
        totals: &mut OwnTotals,
        entries: u64,
        span_ns: u64,
        readings_ns: u64,
    ) -> Reading {
        totals.entries += entries;
        totals.readings_ns += entries * readings_ns;
        totals.estimated_ns += entries * (span_ns + readings_ns);
        Reading {
            t_ns: secs * 1_000_000_000,
            own: *totals,
            cpu_ns: secs * 1_000_000_000,
            names: Vec::new(),
        }
    }

    #[test]
    fn steps_down_over_the_limit_and_back_up_when_the_rate_falls() {
        let mut c = Controller::new(5.0, 60.0, 5.0);
        let mut t = OwnTotals::default();
        let on = Resources::CPU | Resources::HEAP;
        assert_eq!(c.tick(at(0, &mut t, 0, 60, 1000), on), None);
        // 10 000 entries/s at 1.06 µs: 1.06% of the CPU, under 5%.
        assert_eq!(c.tick(at(1, &mut t, 10_000, 60, 1000), on), None);
        // 100 000 entries/s: 10.6%: the readings go.
        let d = c.tick(at(2, &mut t, 100_000, 60, 1000), on).unwrap();
        let Decision::Down { off, pct } = d else {
            panic!("{d:?}")
        };
        assert_eq!(off, on);
        assert!((pct - 10.6).abs() < 1e-9, "{pct}");
        // Still 100 000/s without readings (0.6%): with them it would be 10.6%: stays down.
        assert_eq!(c.tick(at(3, &mut t, 100_000, 60, 0), Resources::NONE), None);
        // 30 000/s: 3.18% predicted, over half the limit: stays down.
        assert_eq!(c.tick(at(4, &mut t, 30_000, 60, 0), Resources::NONE), None);
        // 20 000/s: 2.12% predicted: back up, with what was stepped down.
        let d = c
            .tick(at(5, &mut t, 20_000, 60, 0), Resources::NONE)
            .unwrap();
        let Decision::Up { on: back, pct } = d else {
            panic!("{d:?}")
        };
        assert_eq!(back, on);
        assert!((pct - 2.12).abs() < 1e-9, "{pct}");
    }

    #[test]
    fn past_64_steps_later_ones_are_counted_not_kept() {
        let mut steps = Steps::default();
        for i in 0..70u64 {
            steps.add(BackoffStep::new(i, i % 2 == 1, Resources::CPU, 6.0));
        }
        assert_eq!(steps.kept.len(), MAX_STEPS);
        assert_eq!(steps.kept[63].at_ns, 63, "the first 64 kept, in order");
        assert_eq!(steps.past_bound, 6);
        // The profile and the report carry the count.
        let mut snap = crate::profile::detailed_test_profile();
        snap.backoff = steps.kept;
        snap.dropped.backoff_steps = steps.past_bound;
        let report = crate::output::Table::new().to_string(&snap);
        assert!(
            report.contains("note: 6 more back-off steps taken, not kept (64 kept)"),
            "{report}"
        );
    }

    /// The cost per span the estimate goes by changes when it turns sure (the calibrated cost
    /// replaced by the measured one): a tick counts the work since the last at the new cost,
    /// and no step is taken for the spans before it, repriced.
    #[test]
    fn a_measured_cost_learnt_between_ticks_reprices_no_span_before_it() {
        let mut c = Controller::new(5.0, 60.0, 5.0);
        let reading = |secs: u64, own: OwnTotals| Reading {
            t_ns: secs * 1_000_000_000,
            own,
            cpu_ns: secs * 1_000_000_000,
            names: Vec::new(),
        };
        let spans = |units: u64, unit_ns: f64, sure: bool| OwnTotals {
            entries: units,
            units,
            unit_ns,
            sure,
            estimated_ns: (units as f64 * unit_ns) as u64,
            ..OwnTotals::default()
        };
        assert_eq!(
            c.tick(reading(0, OwnTotals::default()), Resources::CPU),
            None
        );
        // 500 000 spans at the calibrated 60 ns (unsure): 3% of the second.
        assert_eq!(
            c.tick(reading(1, spans(500_000, 60.0, false)), Resources::CPU),
            None
        );
        // Sure now, at 600 ns: the second's 10 000 spans cost 0.6%, not the 27.6% of the
        // difference of the two estimates.
        let now = spans(510_000, 600.0, true);
        assert_eq!(
            now.estimated_ns - spans(500_000, 60.0, false).estimated_ns,
            276_000_000
        );
        assert_eq!(c.tick(reading(2, now), Resources::CPU), None);
        // 100 000 more: 6%, over the limit.
        let d = c.tick(reading(3, spans(610_000, 600.0, true)), Resources::CPU);
        let Some(Decision::Down { off, pct }) = d else {
            panic!("{d:?}")
        };
        assert_eq!(off, Resources::CPU);
        assert!((pct - 6.0).abs() < 1e-9, "{pct}");
    }

    #[test]
    fn nothing_to_step_down_at_basic() {
        let mut c = Controller::new(5.0, 60.0, 5.0);
        let mut t = OwnTotals::default();
        c.tick(at(0, &mut t, 0, 60, 0), Resources::NONE);
        assert_eq!(
            c.tick(at(1, &mut t, 1_000_000, 60, 0), Resources::NONE),
            None
        );
    }

    /// Per-name loads: (name, entries/s, mean busy ns, self share, entries per span).
    struct Names {
        totals: OwnTotals,
        loads: Vec<NameLoad>,
    }

    impl Names {
        fn new(names: &[(u32, f64, f64)]) -> Self {
            Self {
                totals: OwnTotals::default(),
                loads: names
                    .iter()
                    .map(|&(name, _, _)| NameLoad {
                        name,
                        ..NameLoad::default()
                    })
                    .collect(),
            }
        }

        /// One second: each name (name, mean busy ns, self share) with its entries/s of
        /// `rates` recorded (the sampled ones: 1 in N of them) at 60 ns and 5 ns a span left
        /// out.
        fn second(
            &mut self,
            secs: u64,
            names: &[(u32, f64, f64)],
            rates: &[u64],
            every: &BTreeMap<u32, u32>,
        ) -> Reading {
            for (load, (&(_, mean, self_share), &rate)) in
                self.loads.iter_mut().zip(names.iter().zip(rates))
            {
                let n = u64::from(every.get(&load.name).copied().unwrap_or(1));
                let recorded = rate / n;
                load.entries += recorded;
                load.closed += recorded;
                load.skipped += rate - recorded;
                load.busy_ns += (recorded as f64 * mean) as u64;
                load.self_ns += (recorded as f64 * mean * self_share) as u64;
                self.totals.entries += recorded;
                self.totals.skipped += rate - recorded;
                self.totals.estimated_ns += recorded * 60 + (rate - recorded) * 5;
            }
            Reading {
                t_ns: secs * 1_000_000_000,
                own: self.totals,
                cpu_ns: secs * 1_000_000_000,
                names: self.loads.clone(),
            }
        }
    }

    #[test]
    fn samples_the_hottest_short_leaf_names_after_the_readings_and_steps_back() {
        // Name 0: 1 M/s of 200 ns leaves (6% of the CPU alone). 1: 200 k/s of 300 ns leaves.
        // 2: 500 k/s of 300 ns, not leaves (self 50%). 3: 400 k/s of 50 µs (long).
        let names = [
            (0, 200.0, 1.0),
            (1, 300.0, 1.0),
            (2, 300.0, 0.5),
            (3, 50_000.0, 1.0),
        ];
        let mut n = Names::new(&names);
        let mut c = Controller::new(5.0, 60.0, 5.0);
        let mut every = BTreeMap::new();
        let on = Resources::CPU;
        let rates = [1_000_000, 200_000, 500_000, 400_000];
        assert_eq!(c.tick(n.second(0, &names, &[0; 4], &every), on), None);
        // 2.1 M entries/s at 60 ns: 12.6%. With readings on, stage 1 first.
        let d = c.tick(n.second(1, &names, &rates, &every), on).unwrap();
        assert!(
            matches!(d, Decision::Down { off, .. } if off == on),
            "{d:?}"
        );
        // Still 12.6% with the readings off: stage 2. The excess over half the limit
        // (12.6% - 2.5% = 101 ms/s) is saved on name 0 alone (1 M/s × 55 ns saved each: at
        // N = 128, 54.6 ms; N = 1024 the most, 54.9 ms) then name 1 (11 ms at most): 0 and 1
        // go to the largest N. Names 2 (not a leaf) and 3 (long) are never sampled.
        let d = c
            .tick(n.second(2, &names, &rates, &every), Resources::NONE)
            .unwrap();
        let Decision::Sample {
            names: sampled,
            pct,
        } = d
        else {
            panic!("{d:?}")
        };
        assert!((pct - 12.6).abs() < 1e-9, "{pct}");
        assert_eq!(sampled, vec![(0, MAX_EVERY), (1, MAX_EVERY)]);
        every.extend(sampled);
        // Now: names 2 and 3 (54 ms) and the rest ~ 5.5%: over, but nothing left to sample.
        assert_eq!(
            c.tick(n.second(3, &names, &rates, &every), Resources::NONE),
            None
        );
        // The rate falls to a tenth: 0.9% now; halving N adds ~0.1%: back a step at a time.
        let low = rates.map(|r| r / 10);
        let d = c
            .tick(n.second(4, &names, &low, &every), Resources::NONE)
            .unwrap();
        let Decision::Unsample { names: back, pct } = d else {
            panic!("{d:?}")
        };
        assert_eq!(back, vec![(0, 512), (1, 512)]);
        assert!(pct < 2.5, "{pct}");
        every.extend(back);
        // Nine more halvings to 1 (every span), then stage 1 comes back on.
        for s in 5..14 {
            let d = c
                .tick(n.second(s, &names, &low, &every), Resources::NONE)
                .unwrap();
            let Decision::Unsample { names: back, .. } = d else {
                panic!("{d:?}")
            };
            every.extend(back.iter().copied());
            every.retain(|_, n| *n > 1);
        }
        assert!(every.is_empty(), "{every:?}");
        let d = c
            .tick(n.second(14, &names, &low, &every), Resources::NONE)
            .unwrap();
        assert!(
            matches!(d, Decision::Up { on: back, .. } if back == on),
            "{d:?}"
        );
    }

    #[test]
    fn stage_two_only_after_stage_one_and_n_just_enough() {
        // One name at 1 M/s of 100 ns: 6%, over 5%; readings on: stage 1 first, never stage 2.
        let names = [(7, 100.0, 1.0)];
        let mut n = Names::new(&names);
        let mut c = Controller::new(5.0, 60.0, 5.0);
        let every = BTreeMap::new();
        c.tick(n.second(0, &names, &[0], &every), Resources::HEAP);
        let d = c.tick(n.second(1, &names, &[1_000_000], &every), Resources::HEAP);
        assert!(matches!(d, Some(Decision::Down { .. })), "{d:?}");
        // At basic (nothing to switch off) stage 2 at once; the excess over 2.5% is 35 ms:
        // N = 4 saves 41 ms (N = 2: 27.5 ms, not enough).
        let mut c = Controller::new(5.0, 60.0, 5.0);
        c.tick(n.second(2, &names, &[0], &every), Resources::NONE);
        let d = c.tick(n.second(3, &names, &[1_000_000], &every), Resources::NONE);
        assert_eq!(
            d,
            Some(Decision::Sample {
                names: vec![(7, 4)],
                pct: 6.0
            })
        );
    }
}

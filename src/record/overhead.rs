//! spanprof's own cost: what it spends inside the program's spans, kept out of their figures
//! and reported as its overhead; and which entries get the expensive readings.
//!
//! - **Kept out of user spans.** The expensive per-entry work (the thread CPU clock, a system
//!   call, and the heap counters) is bracketed with the cheap clock, and that time is
//!   subtracted from the enclosing frames' busy time (as child time is from self time). Up to
//!   what the readings cost ([`Costs::split`]) it is spanprof's own cost. A longer bracket is a
//!   preemption: reading the thread CPU clock updates the scheduler's accounting, so a thread
//!   whose time slice is used up is switched out right there, where without the readings it
//!   would have been switched out a little later, at the next tick, inside whichever span ran
//!   then. Each such wait is put back once about where a tick would have placed it: at a point
//!   drawn over the next two ticks of the thread's time ([`TICK_NS`]). Spans entered with
//!   readings on are timed in that thread's virtual time ([`virtual_ns`]), so their intervals
//!   nest as real ones do. Asking for more detail moves no other figure, on a shared CPU too.
//! - **Read where it is cheap.** Per name and thread, a running mean of the entries' busy time
//!   says whether the CPU clock costs less than 0.1% of an entry ([`Costs::long_ns`]); shorter
//!   names get their CPU time read for 1 entry in [`CPU_SAMPLE_EVERY`] (the figure is then marked
//!   as sampled).
//! - **Read seldom where reads switch threads out.** A wait put back anywhere still leaves a
//!   trace: the thread resumes at the read, at the same point of the program's loop each time,
//!   and its next switch, at a tick, lands a fixed run of its time later, in the same spans
//!   again. With `CLOCK_THREAD_CPUTIME_ID` a thread's entries are therefore read at least
//!   [`SWITCHING_READ_GAP_NS`] of its time apart (short names' sampled ones), or when their name's
//!   mean entry is that long: most switches then happen at ticks, where they would without
//!   spanprof ([`Costs::switching_reads`]).
//! - **Known.** The cost of one span at `basic` and of one CPU clock read are calibrated once
//!   per process (a few milliseconds at most, [`Costs::calibrate`]); with the time measured in
//!   the brackets they give the estimated overhead of a snapshot.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

use tracing_core::callsite::{Callsite, Identifier};
use tracing_core::field::FieldSet;
use tracing_core::span::Attributes;
use tracing_core::{Interest, Level, Metadata};

use super::shards::bump;
use super::{Recorder, RunSettings};
use crate::clock::Clock;
use crate::samplers::{Readings, Timeline};
use crate::switches::Resources;

/// Entries of a short span name between two whose thread CPU time is read.
pub(crate) const CPU_SAMPLE_EVERY: u64 = 32;

/// The CPU clock is read on every entry of names whose mean entry lasts at least this many
/// times the cost of its two reads: it costs them under 0.1%, so that long names nested ten
/// deep still cost the thread under 1%. (At 100×, 1% per name, a server whose request spans
/// nest long names read the clock 56 000 times a second: 5.4% of its CPU time at `detailed`
/// against 2.4% at 1000×, `EXAMPLE=async` in `scripts/example-overhead.sh`.)
const LONG_FACTOR: f64 = 1000.0;

/// With a CPU clock whose reads switch threads out (`CLOCK_THREAD_CPUTIME_ID`): the least time
/// of a thread between two entries whose CPU time is read, unless their name's mean entry
/// lasts this long (then every entry is read), ns. 32 ticks at 250 Hz. With the 1-in-32
/// sampling alone (reads every 0.2 ms in `scripts/distortion.sh`), half of the reads took a
/// switch, and the training example's short names lost 8–12% of their self time on a shared
/// CPU wherever the waits were put back (a triangle over two ticks, a spread over 64 ms, the
/// kernel's next tick). With a 32 ms gap 8% of the time waited was in reads, and `linear` still
/// read 2.4–4.9% low; with this one about 1%, and 1.1–2.1% low, as the perf clock.
pub(crate) const SWITCHING_READ_GAP_NS: u64 = 32 * TICK_NS;

/// What a bracket of readings may take beyond its calibrated cost and still be spanprof's own
/// time (two clock reads, the heap counters, a cache miss or two), ns.
pub(crate) const READING_SLACK_NS: u64 = 250;

/// Weight of a new entry in a name's running mean: 1/8.
const MEAN_SHIFT: u32 = 3;

/// Calibrated costs of spanprof's work, ns.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct Costs {
    /// One span at `basic` (open, enter, exit, close) inside the recorder.
    pub(crate) span_ns: f64,
    /// One read of the thread CPU clock.
    pub(crate) cpu_read_ns: f64,
    /// Entries whose name's mean busy time is at least this get their CPU time read every time.
    pub(crate) long_ns: u64,
    /// One span left out by sampling (its creation's countdown, three table probes that miss).
    pub(crate) skip_ns: f64,
    /// One read of the cheap clock: what timing a callback adds to it (`Recorder::timed`).
    pub(crate) clock_ns: f64,
    /// The least time of a thread between two reads of the CPU clock for sampled entries, ns
    /// (0: none; [`SWITCHING_READ_GAP_NS`] where reads switch threads out).
    pub(crate) read_gap_ns: u64,
}

impl Costs {
    /// This process's costs, calibrated on first use (1500 spans into a recorder of its own,
    /// 1500 more with their name sampled, and 192 CPU clock reads, the fastest of three rounds
    /// of each: 7.4 ms in a debug build on the loaded 2-core development VM, well under the
    /// 50 ms allowed).
    pub(crate) fn calibrated() -> Costs {
        static COSTS: OnceLock<Costs> = OnceLock::new();
        *COSTS.get_or_init(Costs::calibrate)
    }

    fn calibrate() -> Costs {
        let clock = Clock::new();
        let cpu_read_ns = if crate::samplers::cpu::SUPPORTED {
            best_of(3, &clock, 64, || {
                std::hint::black_box(crate::samplers::cpu::thread_cpu_ns());
            })
        } else {
            0.0
        };
        let recorder = Recorder::standalone(clock.clone(), Resources::NONE, Costs::default());
        let decision = recorder.decide(&CALIBRATION_META, false);
        let values = CALIBRATION_META.fields().value_set(&[]);
        let attrs = Attributes::new(&CALIBRATION_META, &values);
        let mut id = 0u64;
        let mut spans = || {
            best_of(3, &clock, 500, || {
                id += 1;
                recorder.open(id, decision, &attrs);
                recorder.enter(id);
                recorder.exit(id);
                recorder.close(id);
            })
        };
        let span_ns = spans();
        // The same spans with their name sampled 1 in 2^20: all but the first left out.
        recorder.set_sampling(decision.name(), 1 << 20);
        let skip_ns = spans();
        let clock_ns = best_of(3, &clock, 256, || {
            std::hint::black_box(clock.raw());
        });
        let costs = Costs {
            skip_ns,
            clock_ns,
            ..Costs::from_reads(span_ns, cpu_read_ns)
        };
        if crate::samplers::cpu::reads_switch_threads_out() {
            costs.switching_reads()
        } else {
            costs
        }
    }

    /// These costs for a CPU clock whose reads switch threads out: sampled entries read
    /// [`SWITCHING_READ_GAP_NS`] of a thread's time apart at least, and every entry only of
    /// names whose mean entry lasts that long. Chosen once per process, by the clock the
    /// calibration read: where perf events are allowed, a thread past their limit
    /// (`samplers::cpu::MAX_PERF_THREADS`) reads `CLOCK_THREAD_CPUTIME_ID` as often as the
    /// others read the perf event.
    pub(crate) fn switching_reads(self) -> Costs {
        Costs {
            long_ns: self.long_ns.max(SWITCHING_READ_GAP_NS),
            read_gap_ns: SWITCHING_READ_GAP_NS,
            ..self
        }
    }

    /// Splits the time of one bracket of readings into spanprof's own (at most twice what the
    /// readings were calibrated at, plus [`READING_SLACK_NS`]) and a wait beyond it.
    #[inline(always)]
    pub(crate) fn split(&self, spent_ns: u64, cpu: bool) -> (u64, u64) {
        let cap = if cpu {
            (2.0 * self.cpu_read_ns) as u64 + READING_SLACK_NS
        } else {
            READING_SLACK_NS
        };
        let own = spent_ns.min(cap);
        (own, spent_ns - own)
    }

    /// The costs for these measured figures.
    pub(crate) fn from_reads(span_ns: f64, cpu_read_ns: f64) -> Costs {
        Costs {
            span_ns,
            cpu_read_ns,
            long_ns: (2.0 * cpu_read_ns * LONG_FACTOR) as u64,
            skip_ns: 0.0,
            clock_ns: 0.0,
            read_gap_ns: 0,
        }
    }
}

/// The fastest of `rounds` rounds of `n` calls of `f`, ns per call.
fn best_of(rounds: usize, clock: &Clock, n: u32, mut f: impl FnMut()) -> f64 {
    (0..rounds)
        .map(|_| {
            let start = clock.raw();
            for _ in 0..n {
                f();
            }
            clock.delta_ns(start, clock.raw()) as f64 / f64::from(n)
        })
        .fold(f64::INFINITY, f64::min)
}

struct CalibrationSite;

impl Callsite for CalibrationSite {
    fn set_interest(&self, _: Interest) {}
    fn metadata(&self) -> &Metadata<'_> {
        &CALIBRATION_META
    }
}

static CALIBRATION_SITE: CalibrationSite = CalibrationSite;
static CALIBRATION_META: Metadata<'static> = Metadata::new(
    "calibration",
    "spanprof",
    Level::TRACE,
    None,
    None,
    None,
    FieldSet::new(&[], Identifier(&CALIBRATION_SITE)),
    tracing_core::metadata::Kind::SPAN,
);

/// Spans whose callbacks are all timed whole, for the measured cost of a span: 1 in 64.
pub(crate) const PROBE_EVERY: u64 = 64;

/// A timed callback longer than this was preempted (another thread ran a scheduler slice,
/// a millisecond or more, inside it): left out of the mean. Shorter slow ones (a page fault, a
/// close that looks its span's window up in the timeline, a thread's or a name's first state)
/// are spanprof's cost and stay in it. (At 5 µs the estimate read half of `detailed`'s measured
/// cost on the async example, four workers on two cores; with no cap, twice it.)
pub(crate) const PROBE_MAX_NS: u64 = 50_000;

/// Warm callbacks timed whole (over every name) before the measured cost replaces the
/// calibrated cost of a span: fewer, and the estimate is *unsure* (the profile says so, the
/// reports print the calibrated figure marked unsure and no note on costly names, the back-off
/// goes by the calibrated figure). At 64, drawn from the callbacks timed on the async and
/// training examples (20 ns to 2 µs), two runs' trimmed means agree within 1.4× in 95% of
/// pairs and 1.65× in 99%, with 3% of the callbacks made 5–50 µs (a page fault, an
/// interrupt); their plain means within 5×. (That is the estimate's own error: the callbacks'
/// cost itself moves with the load of the machine, 1.6–2.2× between runs of one program on a
/// shared 2-core VM, and the estimate follows it.)
pub(crate) const MIN_PROBES: u64 = crate::profile::Overhead::SURE_SAMPLES;

/// Warm callbacks of a span name timed whole before the name is charged its own cost per
/// callback; below it, the cost per callback of every name's timed callbacks together.
pub(crate) const MIN_NAME_PROBES: u64 = 32;

/// A callback timed on a thread that has counted at most this many of its span's name
/// (spans opened, entries, closes), the callback's included, is *cold*: the thread's first
/// span of the name (its state made, its histograms' first records, cache misses of first
/// use). Cold callbacks are counted apart and left out of the estimate: a one-time cost per
/// thread and name, not a cost per span.
pub(crate) const COLD_CALLBACKS: u64 = 3;

/// The trimmed mean leaves out the fastest and the slowest 1/`TRIM` of the timed callbacks
/// each (10%).
const TRIM: u64 = 10;

/// Octave buckets of timed callbacks' times, with their sums: `[0, 1)`, `[1, 2)`, `[2, 4)`,
/// …, `[2^15, 2^16)` ([`PROBE_MAX_NS`] is under 2^16; anything longer lands in the last).
pub(crate) const PROBE_BUCKETS: usize = 17;

#[inline(always)]
fn probe_bucket(ns: u64) -> usize {
    ((64 - ns.leading_zeros()) as usize).min(PROBE_BUCKETS - 1)
}

/// One thread's timed callbacks of one span name (single writer: the thread): counts and
/// sums per octave, and the cold ones ([`COLD_CALLBACKS`]) apart.
#[derive(Debug, Default)]
pub(crate) struct Probes {
    count: [AtomicU64; PROBE_BUCKETS],
    sum_ns: [AtomicU64; PROBE_BUCKETS],
    cold: AtomicU64,
    cold_ns: AtomicU64,
}

impl Probes {
    #[inline(always)]
    fn record(&self, ns: u64, cold: bool) {
        if cold {
            bump(&self.cold, 1);
            bump(&self.cold_ns, ns);
        } else {
            let b = probe_bucket(ns);
            bump(&self.count[b], 1);
            bump(&self.sum_ns[b], ns);
        }
    }

    fn sums(&self) -> ProbeSums {
        ProbeSums {
            count: std::array::from_fn(|b| self.count[b].load(Relaxed)),
            sum_ns: std::array::from_fn(|b| self.sum_ns[b].load(Relaxed)),
            cold: self.cold.load(Relaxed),
            cold_ns: self.cold_ns.load(Relaxed),
        }
    }
}

/// Timed callbacks, added over threads (and names): plain numbers.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct ProbeSums {
    count: [u64; PROBE_BUCKETS],
    sum_ns: [u64; PROBE_BUCKETS],
    /// Cold callbacks ([`COLD_CALLBACKS`]), and their time, ns: left out of the estimate.
    pub(crate) cold: u64,
    pub(crate) cold_ns: u64,
}

impl ProbeSums {
    /// One timed callback of `ns` (tests).
    #[cfg(test)]
    pub(crate) fn add(&mut self, ns: u64, cold: bool) {
        if cold {
            self.cold += 1;
            self.cold_ns += ns;
        } else {
            let b = probe_bucket(ns);
            self.count[b] += 1;
            self.sum_ns[b] += ns;
        }
    }

    pub(crate) fn merge(&mut self, other: &ProbeSums) {
        for b in 0..PROBE_BUCKETS {
            self.count[b] += other.count[b];
            self.sum_ns[b] += other.sum_ns[b];
        }
        self.cold += other.cold;
        self.cold_ns += other.cold_ns;
    }

    /// The warm callbacks timed (the cold ones left out).
    pub(crate) fn warm(&self) -> u64 {
        self.count.iter().sum()
    }

    /// The mean of the warm callbacks with the fastest and the slowest tenth left out
    /// ([`TRIM`]), ns; none without any. Within an octave the order is not kept: a part of
    /// one counts at the octave's mean.
    pub(crate) fn trimmed_mean(&self) -> Option<f64> {
        let n = self.warm();
        if n == 0 {
            return None;
        }
        let cut = n / TRIM;
        let keep = n - 2 * cut;
        let (mut skip, mut left, mut sum) = (cut, keep, 0.0);
        for (&count, &sum_ns) in self.count.iter().zip(&self.sum_ns) {
            if count == 0 {
                continue;
            }
            let skipped = count.min(skip);
            skip -= skipped;
            let taken = (count - skipped).min(left);
            left -= taken;
            sum += taken as f64 * (sum_ns as f64 / count as f64);
            if left == 0 {
                break;
            }
        }
        Some(sum / keep as f64)
    }
}

/// One span name's part in the estimate: its recorded units of cost (spans, or entries of
/// spans entered several times), its callbacks (open, enters, exits, close) and its timed
/// callbacks.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct NameWork {
    pub(crate) units: u64,
    pub(crate) callbacks: u64,
    pub(crate) probes: ProbeSums,
}

/// What the estimate charges each name per recorded unit.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Estimate {
    /// Per name (as given), ns per unit.
    pub(crate) unit_ns: Vec<f64>,
    /// The measured cost per unit over every name, where sure ([`MIN_PROBES`]).
    pub(crate) measured: Option<f64>,
    /// Warm callbacks timed, every name's.
    pub(crate) samples: u64,
}

/// spanprof's cost per recorded unit of each name. Sure (at least [`MIN_PROBES`] warm
/// callbacks timed): a name's cost per callback is the trimmed mean of its own timed
/// callbacks ([`ProbeSums::trimmed_mean`]) where it has [`MIN_NAME_PROBES`] of them, else that
/// of every name's together, times its callbacks per unit. Callbacks cost what the program
/// around them leaves in the caches: the exit and close of a long span are cache-cold (the
/// training example's 0.3–1 µs), those of a short span in a loop are not (25–40 ns); per
/// name, neither is charged the other's. Unsure: the calibrated cost of a span per unit.
pub(crate) fn estimate(names: &[NameWork], calibrated_ns: f64) -> Estimate {
    let mut pooled = ProbeSums::default();
    for name in names {
        pooled.merge(&name.probes);
    }
    let samples = pooled.warm();
    let Some(pooled_ns) = pooled.trimmed_mean().filter(|_| samples >= MIN_PROBES) else {
        return Estimate {
            unit_ns: vec![calibrated_ns; names.len()],
            measured: None,
            samples,
        };
    };
    let (mut total_ns, mut units) = (0.0, 0u64);
    let unit_ns = names
        .iter()
        .map(|name| {
            if name.units == 0 {
                return 0.0;
            }
            let per_callback = if name.probes.warm() >= MIN_NAME_PROBES {
                name.probes.trimmed_mean().unwrap_or(pooled_ns)
            } else {
                pooled_ns
            };
            let ns = per_callback * name.callbacks as f64 / name.units as f64;
            total_ns += ns * name.units as f64;
            units += name.units;
            ns
        })
        .collect();
    Estimate {
        unit_ns,
        measured: (units > 0).then(|| total_ns / units as f64),
        samples,
    }
}

/// A thread's latest timed spans' names: (recorder, span id, name), and the next to replace.
type TimedNames = ([(u64, u64, u32); 4], usize);

thread_local! {
    /// This thread's [`TimedNames`]. A close, whose span is gone from the table once it ran,
    /// finds its name here (its span's earlier callbacks on this thread were timed too:
    /// [`probe_due`] is by id).
    static TIMED_NAMES: Cell<TimedNames> = const { Cell::new(([(0, 0, 0); 4], 0)) };
}

fn remember_name(recorder: u64, id: u64, name: u32) {
    let _ = TIMED_NAMES.try_with(|cell| {
        let (mut names, next) = cell.get();
        if let Some(known) = names.iter_mut().find(|n| n.0 == recorder && n.1 == id) {
            known.2 = name;
            cell.set((names, next));
        } else {
            names[next] = (recorder, id, name);
            cell.set((names, (next + 1) % names.len()));
        }
    });
}

fn recall_name(recorder: u64, id: u64) -> Option<u32> {
    TIMED_NAMES
        .try_with(|cell| {
            let (mut names, next) = cell.get();
            let known = names.iter_mut().find(|n| n.0 == recorder && n.1 == id)?;
            let name = known.2;
            *known = (0, 0, 0);
            cell.set((names, next));
            Some(name)
        })
        .ok()
        .flatten()
}

/// Whether the callbacks of span `id` are timed whole: 1 span in [`PROBE_EVERY`], chosen by a
/// multiplicative hash of the id (a registry id's generation changes each time its slab slot is
/// reused, so a loop of spans in one slot is sampled too). A few instructions, no thread-local.
#[inline(always)]
pub(crate) fn probe_due(id: u64) -> bool {
    const SHIFT: u32 = 64 - PROBE_EVERY.trailing_zeros();
    id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> SHIFT == 0
}

/// This thread's virtual time, and a wait measured in spanprof's readings not placed yet.
#[derive(Debug, Clone, Copy, Default)]
struct Waits {
    /// Raw clock reading at the end of the last bracket (0: none yet).
    last_end: u64,
    /// Virtual time at the last bracket, ns.
    v_last: u64,
    /// Waits measured in brackets and not placed yet, ns.
    pending_ns: u64,
    /// Real time after `last_end` past which the pending waits are placed, ns.
    due_ns: u64,
    /// The state of this thread's generator of those points (xorshift; 0: not seeded yet).
    rng: u64,
}

thread_local! {
    static WAITS: Cell<Waits> = const {
        Cell::new(Waits { last_end: 0, v_last: 0, pending_ns: 0, due_ns: 0, rng: 0 })
    };
}

/// One scheduler tick at `CONFIG_HZ=250` (Debian's and Ubuntu's kernels; 1–3.3 ms at 1000 or
/// 300), ns. Reading `CLOCK_THREAD_CPUTIME_ID` switches a thread whose slice is used up out at
/// once; without the read, a tick would have, a little later. A wait measured in a bracket is
/// put back at a point drawn over the thread's next two ticks of time: the sum of two uniform
/// draws over a tick (a triangle from 0 to 8 ms, most likely at 4 ms). One tick's uniform draw
/// put the waits too often on the spans just after the read: those reads are mostly the first
/// after the program's longest spans without readings, so they fall at one point of its loop,
/// and a window that is not a whole number of turns of the loop favours what follows that
/// point (`optimizer_step` +10% on average over six runs of `scripts/distortion.sh`); the
/// triangle's sides spread that out.
pub(crate) const TICK_NS: u64 = 4_000_000;

#[cfg(test)]
thread_local! {
    static TEST_TICK_NS: Cell<u64> = const { Cell::new(TICK_NS) };
}

/// Tests: this thread's waits are put back within `ns` of their bracket instead of two ticks
/// (0: right after it, in whichever spans run then).
#[cfg(test)]
pub(crate) fn place_waits_within(ns: u64) {
    TEST_TICK_NS.with(|w| w.set(ns / 2));
}

#[inline(always)]
fn tick_ns() -> u64 {
    #[cfg(test)]
    return TEST_TICK_NS.with(Cell::get);
    #[cfg(not(test))]
    TICK_NS
}

fn virtual_at(clock: &Clock, w: &Waits, raw: u64) -> u64 {
    if w.last_end == 0 {
        return clock.delta_ns(0, raw);
    }
    let ran = clock.delta_ns(w.last_end, raw);
    // The pending waits are placed at one point: past it, virtual time has jumped by them.
    let placed = if ran > w.due_ns { w.pending_ns } else { 0 };
    w.v_last + ran + placed
}

/// The thread's virtual time at raw reading `raw`, ns: real time less spanprof's brackets of
/// readings, with each wait measured in a bracket put back once, at a point drawn over the
/// next two ticks of the thread's time after it ([`TICK_NS`]), about where a tick would have
/// switched the thread out without the reading. Spans entered with readings on are timed in
/// it; their intervals nest as real ones do, and every wait is counted once.
#[inline(always)]
pub(crate) fn virtual_ns(clock: &Clock, raw: u64) -> u64 {
    WAITS
        .try_with(|w| virtual_at(clock, &w.get(), raw))
        .unwrap_or_else(|_| clock.delta_ns(0, raw))
}

/// A bracket of readings ran from `start` to `end` (raw readings) and waited `wait_ns` beyond
/// spanprof's own time: virtual time stands still in it, and the wait is placed after it (a
/// wait measured while another is pending joins it, at its point: none is lost).
#[inline(always)]
pub(crate) fn bracket(clock: &Clock, start: u64, end: u64, wait_ns: u64) {
    let _ = WAITS.try_with(|w| {
        let mut s = w.get();
        let v_start = virtual_at(clock, &s, start);
        if s.last_end != 0 {
            let ran = clock.delta_ns(s.last_end, start);
            if ran > s.due_ns {
                // Placed (in `v_start`).
                s.pending_ns = 0;
            } else {
                s.due_ns -= ran;
            }
        }
        if wait_ns > 0 {
            if s.pending_ns == 0 {
                let tick = tick_ns();
                s.due_ns = draw(&mut s.rng, end, tick) + draw(&mut s.rng, end, tick);
            }
            s.pending_ns += wait_ns;
        }
        s.v_last = v_start;
        s.last_end = end;
        w.set(s);
    });
}

/// A number drawn uniformly from `0..window` (xorshift64, seeded from the raw clock `seed` on a
/// thread's first draw; 0 when `window` is 0).
#[inline(always)]
fn draw(state: &mut u64, seed: u64, window: u64) -> u64 {
    let mut x = if *state == 0 {
        seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1
    } else {
        *state
    };
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    // The high bits, scaled: no modulo bias worth a branch.
    ((u128::from(x) * u128::from(window)) >> 64) as u64
}

/// Per name and thread (single writer): the running mean that decides whether the CPU clock is
/// read, and what spanprof spent inside this name's entries.
#[derive(Debug, Default)]
pub(crate) struct EntryCost {
    /// Running mean of the entries' busy time, ns.
    mean_ns: AtomicU64,
    /// Short entries left before the next one whose CPU time is read.
    countdown: AtomicU64,
    /// Entries whose CPU time was not read (CPU time switched on).
    skipped: AtomicU64,
    /// spanprof's measured time at this name's enters and exits (the expensive readings), ns.
    own_ns: AtomicU64,
    /// Spans left out before the next one recorded, while the name is sampled
    /// (`record/sampling.rs`).
    sample_left: AtomicU64,
    /// Spans of this name left out by sampling.
    sampled_out: AtomicU64,
    /// This name's callbacks timed whole on this thread, made at the first.
    probes: OnceLock<Box<Probes>>,
}

impl EntryCost {
    pub(crate) const fn new() -> Self {
        Self {
            mean_ns: AtomicU64::new(0),
            countdown: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            own_ns: AtomicU64::new(0),
            sample_left: AtomicU64::new(0),
            sampled_out: AtomicU64::new(0),
            probes: OnceLock::new(),
        }
    }

    /// A callback of this name took `ns`, timed whole; `cold`: see [`COLD_CALLBACKS`].
    #[cold]
    pub(crate) fn probe(&self, ns: u64, cold: bool) {
        self.probes
            .get_or_init(|| crate::alloc::untracked(Box::default))
            .record(ns, cold);
    }

    /// This name's timed callbacks on this thread, if any.
    pub(crate) fn probe_sums(&self) -> Option<ProbeSums> {
        self.probes.get().map(|p| p.sums())
    }

    /// Whether a span of this name, sampled 1 in `every`, is left out (counted): the first of
    /// every `every` is recorded.
    #[inline(always)]
    pub(crate) fn sample_out(&self, every: u32) -> bool {
        let left = self.sample_left.load(Relaxed);
        if left == 0 {
            self.sample_left.store(u64::from(every) - 1, Relaxed);
            false
        } else {
            // N may have been lowered since: never more left out than the new N says.
            self.sample_left
                .store((left - 1).min(u64::from(every) - 1), Relaxed);
            bump(&self.sampled_out, 1);
            true
        }
    }

    /// Spans of this name left out by sampling on this thread.
    pub(crate) fn sampled_out(&self) -> u64 {
        self.sampled_out.load(Relaxed)
    }

    /// The running mean of the entries' busy time, ns.
    #[inline(always)]
    pub(crate) fn mean_ns(&self) -> u64 {
        self.mean_ns.load(Relaxed)
    }

    /// Whether this entry's CPU time is read: always for long names, 1 in
    /// [`CPU_SAMPLE_EVERY`] for short ones (the first entry of a name included).
    #[inline(always)]
    pub(crate) fn read_cpu(&self, long_ns: u64) -> bool {
        if self.mean_ns.load(Relaxed) >= long_ns {
            return true;
        }
        let left = self.countdown.load(Relaxed);
        if left == 0 {
            self.countdown.store(CPU_SAMPLE_EVERY - 1, Relaxed);
            true
        } else {
            self.countdown.store(left - 1, Relaxed);
            bump(&self.skipped, 1);
            false
        }
    }

    /// An entry whose CPU time is not read, chosen elsewhere (a thread's gap between reads:
    /// [`SWITCHING_READ_GAP_NS`]).
    #[inline(always)]
    pub(crate) fn skip_cpu(&self) {
        bump(&self.skipped, 1);
    }

    /// An entry of this name completed after `busy_ns`.
    #[inline(always)]
    pub(crate) fn completed(&self, busy_ns: u64) {
        let mean = self.mean_ns.load(Relaxed);
        // A step of 1/2^MEAN_SHIFT of the difference, signed (no branch); the first entry
        // starts the mean (no warm-up from 0).
        let step = (busy_ns as i64).wrapping_sub(mean as i64) >> MEAN_SHIFT;
        let next = if mean == 0 {
            busy_ns
        } else {
            mean.wrapping_add(step as u64)
        };
        self.mean_ns.store(next, Relaxed);
    }

    /// spanprof spent `ns` reading resources at an enter or exit of this name.
    #[inline(always)]
    pub(crate) fn spent(&self, ns: u64) {
        bump(&self.own_ns, ns);
    }

    /// (entries whose CPU time was not read, spanprof's measured time), for a snapshot.
    pub(crate) fn totals(&self) -> (u64, u64) {
        (self.skipped.load(Relaxed), self.own_ns.load(Relaxed))
    }
}

/// What spanprof has spent so far, over every thread (for the back-off, once a second).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct OwnTotals {
    /// Entries completed.
    pub(crate) entries: u64,
    /// Spans left out by sampling.
    pub(crate) skipped: u64,
    /// spanprof's measured time in its readings, ns.
    pub(crate) readings_ns: u64,
    /// Estimated total: `units` × `unit_ns` + the spans left out at their calibrated cost +
    /// `readings_ns`.
    pub(crate) estimated_ns: u64,
    /// Recorded units of cost (spans, or entries of spans entered several times).
    pub(crate) units: u64,
    /// The cost of a unit now (the measured one where sure, else the calibrated cost of a
    /// span), ns.
    pub(crate) unit_ns: f64,
    /// Whether `unit_ns` is measured ([`estimate`]: enough callbacks timed).
    pub(crate) sure: bool,
}

impl OwnTotals {
    /// `estimated_ns` with its units at `now`'s cost per unit, ns: what `now` counts for the
    /// same work, so that `now.estimated_ns` less it is the cost of the work between them,
    /// whatever the estimate learnt meanwhile (the first sure figure, replacing the calibrated
    /// one, reprices every span before it).
    pub(crate) fn priced_as(&self, now: &OwnTotals) -> u64 {
        let repriced = self.estimated_ns as f64 + self.units as f64 * (now.unit_ns - self.unit_ns);
        repriced.max(0.0) as u64
    }
}

impl Recorder {
    /// Runs the callback `f` of span `id`, timed whole if the span is one of those whose
    /// callbacks are ([`probe_due`]).
    #[inline(always)]
    pub(crate) fn probed(&self, id: u64, f: impl FnOnce(&Self) -> bool) {
        if probe_due(id) {
            self.timed_span(id, f);
        } else {
            f(self);
        }
    }

    /// Runs the callback `f` of span `id` timed whole (its table lookup, cache misses and
    /// all); if it was a recorded span's (`f` returns `true`), counts its time for the span's
    /// name on this thread ([`estimate`]). The name is looked up once the callback was timed:
    /// in the table, or for a close, among this thread's latest timed spans (a close on a
    /// thread where the span had no other callback goes to no name).
    #[cold]
    #[inline(never)]
    pub(crate) fn timed_span(&self, id: u64, f: impl FnOnce(&Self) -> bool) {
        if let Some(ns) = self.time_whole(f) {
            self.probe_sample(id, ns);
        }
    }

    /// Runs `f` timed whole, counted for no name (tests).
    #[cfg(test)]
    pub(crate) fn timed(&self, f: impl FnOnce(&Self) -> bool) {
        let _ = self.time_whole(f);
    }

    /// Runs `f`, timed whole while probing: its time, if it was a recorded span's and under
    /// [`PROBE_MAX_NS`] (counted in this thread's shard too), ns.
    #[inline(always)]
    fn time_whole(&self, f: impl FnOnce(&Self) -> bool) -> Option<u64> {
        if !self.probing {
            f(self);
            return None;
        }
        let bracketed = self.local(|local| local.bracketed_ns).unwrap_or(0);
        let start = self.clock.raw();
        if !f(self) {
            return None;
        }
        // Less the second clock read's own time, and the readings' brackets (the estimate
        // adds their measured time apart): the callback's.
        let ns = self
            .clock
            .delta_ns(start, self.clock.raw())
            .saturating_sub(self.costs.clock_ns as u64);
        self.local(|local| {
            let ns = ns.saturating_sub(local.bracketed_ns.wrapping_sub(bracketed));
            // Longer: an outlier, not what a span costs (see PROBE_MAX_NS).
            (ns <= PROBE_MAX_NS).then(|| {
                local.probed(ns);
                ns
            })
        })
        .flatten()
    }

    /// A timed callback of span `id` took `ns`: counted for its name on this thread, cold
    /// while the thread has counted at most [`COLD_CALLBACKS`] of the name.
    pub(crate) fn probe_sample(&self, id: u64, ns: u64) {
        let name = match self
            .table
            .with(id, |slot| u32::from(slot.name.load(Relaxed)))
        {
            Some(name) => {
                remember_name(self.id, id, name);
                Some(name)
            }
            None => recall_name(self.id, id),
        };
        let Some(name) = name else {
            return;
        };
        self.local(|local| {
            let stats = local.stats(name);
            let seen = stats.opened.load(Relaxed)
                + stats.entries.load(Relaxed)
                + stats.closed.load(Relaxed);
            stats.cost.probe(ns, seen <= COLD_CALLBACKS);
        });
    }

    /// A recorder of its own, recording at once (no sampler, no outputs): for calibration and
    /// tests.
    pub(crate) fn standalone(clock: Clock, resources: Resources, costs: Costs) -> Self {
        let start = clock.raw();
        Self::build(
            clock,
            start,
            true,
            resources,
            Arc::new(Readings::new()),
            Arc::new(Timeline::default()),
            RunSettings {
                preset: "standalone",
                filter: None,
                sampled: Resources::NONE,
                interval_ms: 100,
                grid_g_per_kwh: None,
                // The default: the call tree on (calibration measures what a span costs).
                tree: true,
            },
            costs,
        )
    }

    /// What spanprof has spent so far (reads every thread's counters; no snapshot), priced as
    /// a snapshot prices it ([`estimate`]).
    pub(crate) fn own_totals(&self) -> OwnTotals {
        let mut t = OwnTotals::default();
        // Per name: (spans opened, entries), callbacks and timed callbacks.
        let mut counts: Vec<(u64, u64)> = Vec::new();
        let mut work: Vec<NameWork> = Vec::new();
        for shard in self.shards.all() {
            for (index, stats) in shard.names().into_iter().enumerate() {
                let Some(stats) = stats else {
                    continue;
                };
                if work.len() <= index {
                    work.resize(index + 1, NameWork::default());
                    counts.resize(index + 1, (0, 0));
                }
                let (opened, entries) = (stats.opened.load(Relaxed), stats.entries.load(Relaxed));
                t.entries += entries;
                counts[index].0 += opened;
                counts[index].1 += entries;
                work[index].callbacks += opened + 2 * entries + stats.closed.load(Relaxed);
                if let Some(probes) = stats.cost.probe_sums() {
                    work[index].probes.merge(&probes);
                }
                t.readings_ns += stats.cost.totals().1;
                t.skipped += stats.cost.sampled_out();
            }
        }
        for (w, &(opened, entries)) in work.iter_mut().zip(&counts) {
            w.units = opened.max(entries);
        }
        let est = estimate(&work, self.costs.span_ns);
        let recorded: f64 = work
            .iter()
            .zip(&est.unit_ns)
            .map(|(w, ns)| w.units as f64 * ns)
            .sum();
        t.units = work.iter().map(|w| w.units).sum();
        t.sure = est.measured.is_some();
        t.unit_ns = est.measured.unwrap_or(self.costs.span_ns);
        t.estimated_ns = (recorded + t.skipped as f64 * self.costs.skip_ns) as u64 + t.readings_ns;
        t
    }

    /// Nanoseconds since the profile started.
    pub(crate) fn elapsed_ns(&self) -> u64 {
        self.clock.delta_ns(self.start_raw, self.clock.raw())
    }

    /// spanprof's calibrated costs.
    pub(crate) fn costs(&self) -> Costs {
        self.costs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::MockClock;
    use crate::output::Table;
    use std::time::Duration;

    /// Past this much of the thread's time after a bracket, its wait has been put back.
    const PLACED_WITHIN_NS: u64 = 2 * TICK_NS;

    #[test]
    fn the_running_mean_starts_at_the_first_entry_and_moves_an_eighth_of_the_way() {
        let cost = EntryCost::new();
        cost.completed(800);
        assert_eq!(cost.mean_ns(), 800, "the first entry starts the mean");
        cost.completed(1_600);
        assert_eq!(cost.mean_ns(), 900, "up by 1/8 of 800");
        cost.completed(100);
        assert_eq!(cost.mean_ns(), 800, "down by 1/8 of 800");
        // Converges on a steady value from either side, and never wraps below zero.
        for _ in 0..200 {
            cost.completed(0);
        }
        assert!(cost.mean_ns() < 8, "{}", cost.mean_ns());
        for _ in 0..200 {
            cost.completed(5_000_000_000);
        }
        let mean = cost.mean_ns();
        assert!((4_999_999_000..=5_000_000_000).contains(&mean), "{mean}");
    }

    #[test]
    fn short_names_are_read_one_entry_in_n_and_long_ones_always() {
        let cost = EntryCost::new();
        let long = 10_000;
        let reads = (0..10 * CPU_SAMPLE_EVERY)
            .filter(|_| {
                let read = cost.read_cpu(long);
                cost.completed(100);
                read
            })
            .count() as u64;
        assert_eq!(reads, 10);
        assert_eq!(cost.totals().0, 10 * CPU_SAMPLE_EVERY - 10);
        // The mean follows the entries: once they are long, every one is read.
        for _ in 0..64 {
            cost.completed(50_000);
        }
        assert!((0..100).all(|_| cost.read_cpu(long)));
        // And back.
        for _ in 0..64 {
            cost.completed(100);
        }
        let reads = (0..CPU_SAMPLE_EVERY)
            .filter(|_| cost.read_cpu(long))
            .count();
        assert_eq!(reads, 1);
    }

    #[test]
    fn one_span_in_64_is_timed_whatever_the_ids() {
        let n = 64 * 10_000u64;
        // Sequential ids; one slab slot reused (its generation counting up, registry layout);
        // the slots of one thread's shard.
        let layouts: [&dyn Fn(u64) -> u64; 3] =
            [&|i| i + 1, &|i| (i << 51) | (3 << 38) | 5, &|i| {
                (7 << 38) | (i % 4096) | ((i / 4096) << 51)
            }];
        for (k, id) in layouts.iter().enumerate() {
            let timed = (0..n).filter(|&i| probe_due(id(i))).count() as u64;
            let expected = n / PROBE_EVERY;
            assert!(
                timed.abs_diff(expected) < expected / 5,
                "layout {k}: {timed} timed, {expected} expected"
            );
        }
    }

    /// Runs `f` on a thread of its own (fresh virtual time) with a mock clock, advanced 1 ms
    /// first (a raw reading of 0 means "no bracket yet").
    fn on_fresh_thread<T: Send>(f: impl FnOnce(&Clock, &dyn Fn(u64)) -> T + Send) -> T {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let (clock, mock) = Clock::mock();
                    let advance = |ns| mock.advance(std::time::Duration::from_nanos(ns));
                    advance(1_000_000);
                    f(&clock, &advance)
                })
                .join()
                .unwrap()
        })
    }

    /// A bracket of `own_ns` + `wait_ns` at the clock's current time.
    fn a_bracket(clock: &Clock, advance: &dyn Fn(u64), own_ns: u64, wait_ns: u64) {
        let start = clock.raw();
        advance(own_ns + wait_ns);
        bracket(clock, start, clock.raw(), wait_ns);
    }

    #[test]
    fn every_wait_measured_in_the_readings_is_put_back_once() {
        let (virtual_ns, real_ns, own_ns) = on_fresh_thread(|clock, advance| {
            a_bracket(clock, advance, 500, 0);
            let v0 = virtual_ns(clock, clock.raw());
            let (mut real, mut own) = (0, 0);
            let mut x = 12_345u64;
            for i in 0..5_000u64 {
                // Running times of 0–400 µs, and a wait of 0.5–4 ms at one bracket in 8.
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                let ran = (x >> 33) % 400_000;
                let wait = if i % 8 == 0 {
                    500_000 + (x >> 20) % 3_500_000
                } else {
                    0
                };
                advance(ran);
                a_bracket(clock, advance, 700, wait);
                real += ran + 700 + wait;
                own += 700;
            }
            // Past the window: the last wait is placed too.
            advance(PLACED_WITHIN_NS + 1);
            real += PLACED_WITHIN_NS + 1;
            (virtual_ns(clock, clock.raw()) - v0, real, own)
        });
        // Exactly: the thread's time less spanprof's own, no wait lost or counted twice (the
        // ratio of waits to running time that this replaces lost the first second's).
        assert_eq!(virtual_ns, real_ns - own_ns);
    }

    #[test]
    fn waits_land_about_where_a_tick_would_have_switched_the_thread_out() {
        // A span of 1 ms starting `offset` after a bracket that waited: how often it holds the
        // wait, in 4000 tries.
        let landed_in = |offset: u64| {
            on_fresh_thread(|clock, advance| {
                (0..4_000)
                    .filter(|_| {
                        a_bracket(clock, advance, 700, 2_000_000);
                        advance(offset);
                        let v_start = virtual_ns(clock, clock.raw());
                        advance(1_000_000);
                        let busy = virtual_ns(clock, clock.raw()) - v_start;
                        // The wait placed (no other bracket until then).
                        advance(PLACED_WITHIN_NS);
                        a_bracket(clock, advance, 700, 0);
                        assert!(busy == 1_000_000 || busy == 3_000_000, "{busy}");
                        busy > 1_000_000
                    })
                    .count()
            })
        };
        // Over the next two ticks, a triangle (0 to 8 ms, highest at 4 ms): its first ms holds
        // the wait 1/32 of the time, the ms around 4 ms 15/64, its last ms 1/32 again (each ±5
        // standard deviations), what comes after never.
        let first = landed_in(0);
        assert!((125 - 55..=125 + 55).contains(&first), "{first}");
        let middle = landed_in(TICK_NS - 500_000);
        assert!((938 - 134..=938 + 134).contains(&middle), "{middle}");
        let last = landed_in(PLACED_WITHIN_NS - 1_000_000);
        assert!((125 - 55..=125 + 55).contains(&last), "{last}");
        assert_eq!(landed_in(PLACED_WITHIN_NS), 0);
    }

    #[test]
    fn a_wait_measured_while_another_is_pending_joins_it() {
        let steps = on_fresh_thread(|clock, advance| {
            a_bracket(clock, advance, 700, 0);
            let (v0, t0) = (virtual_ns(clock, clock.raw()), clock.raw());
            // Two waits one after the other: one jump of both, within the window.
            a_bracket(clock, advance, 700, 1_000_000);
            a_bracket(clock, advance, 700, 3_000_000);
            let ran = |clock: &Clock| clock.delta_ns(t0, clock.raw()) - 2 * 700 - 4_000_000;
            let mut seen = std::collections::BTreeSet::new();
            for _ in 0..=PLACED_WITHIN_NS / 10_000 {
                advance(10_000);
                seen.insert(virtual_ns(clock, clock.raw()) - v0 - ran(clock));
            }
            seen
        });
        assert_eq!(steps.into_iter().collect::<Vec<_>>(), [0, 4_000_000]);
    }

    #[test]
    fn calibration_is_quick_and_plausible() {
        let start = std::time::Instant::now();
        let costs = Costs::calibrate();
        // Reported, not asserted (no timing assertions): `--nocapture` shows it.
        eprintln!("calibration took {:?}: {costs:?}", start.elapsed());
        assert!(
            costs.span_ns > 0.0 && costs.span_ns < 100_000.0,
            "{costs:?}"
        );
        if crate::samplers::cpu::SUPPORTED {
            assert!(costs.cpu_read_ns > 0.0, "{costs:?}");
            assert_eq!(costs.long_ns, (2000.0 * costs.cpu_read_ns) as u64);
        }
    }

    #[test]
    fn where_reads_switch_threads_out_long_means_a_gap_at_least() {
        let costs = Costs::from_reads(50.0, 1_000.0);
        assert_eq!(costs.read_gap_ns, 0);
        let switching = costs.switching_reads();
        assert_eq!(switching.read_gap_ns, SWITCHING_READ_GAP_NS);
        assert_eq!(switching.long_ns, SWITCHING_READ_GAP_NS);
        let slow_reads = Costs::from_reads(50.0, 100_000.0).switching_reads();
        assert_eq!(slow_reads.long_ns, 200_000_000);
    }

    #[test]
    fn the_cpu_clock_is_read_every_entry_only_where_it_costs_under_a_thousandth() {
        // Two reads of 1 µs: every entry of names whose entries last 2 ms or more.
        let costs = Costs::from_reads(50.0, 1_000.0);
        assert_eq!(costs.long_ns, 2_000_000);
        let reads = |mean_ns: u64| {
            let cost = EntryCost::new();
            cost.completed(mean_ns);
            (0..64).filter(|_| cost.read_cpu(costs.long_ns)).count()
        };
        assert_eq!(reads(2_000_000), 64);
        // 200 µs entries: two reads are 1% of them, 10% for a thread ten such names deep.
        assert_eq!(reads(200_000), 64 / CPU_SAMPLE_EVERY as usize);
        assert_eq!(reads(1_000), 64 / CPU_SAMPLE_EVERY as usize);
    }

    /// The factor within which the estimate of one program agrees with itself run after run
    /// (the guide's `docs/overhead.md`, "The estimate against reality": two draws of 64 timed
    /// callbacks agree within 1.4× in 95% of pairs; `MIN_PROBES` says why).
    const STABLE: f64 = 1.5;

    /// A recorder on a mock clock whose callbacks are timed whole as the layer's are (a mock
    /// clock is otherwise never probed): a callback takes what the test advances the clock
    /// inside it. A span calibrated at 100 ns.
    fn probing_recorder() -> (Recorder, MockClock) {
        let (clock, mock) = Clock::mock();
        let mut rec = Recorder::standalone(clock, Resources::NONE, Costs::from_reads(100.0, 0.0));
        rec.probing = true;
        (rec, mock)
    }

    /// A span name of its own.
    fn callsite(name: &'static str) -> &'static Metadata<'static> {
        Box::leak(Box::new(Metadata::new(
            name,
            "target",
            Level::INFO,
            None,
            None,
            None,
            FieldSet::new(&[], Identifier(&CALIBRATION_SITE)),
            tracing_core::metadata::Kind::SPAN,
        )))
    }

    /// Span ids whose callbacks are timed, from `from` on.
    fn timed_ids(from: u64, n: usize) -> Vec<u64> {
        (from..).filter(|&id| probe_due(id)).take(n).collect()
    }

    /// Span `id` of `meta`, as the layer drives it: opened (not timed), entered for `busy_ns`
    /// unless `busy_ns` is `None`, closed; the timed callbacks (enter, exit, close) take
    /// `cb_ns` each, outside the span's busy time.
    fn span(
        rec: &Recorder,
        mock: &MockClock,
        meta: &'static Metadata<'static>,
        id: u64,
        busy_ns: Option<u64>,
        cb_ns: [u64; 3],
    ) {
        let decision = rec.decide(meta, false);
        let values = meta.fields().value_set(&[]);
        assert!(rec.open(id, decision, &Attributes::new_root(meta, &values)));
        let advance = |ns| mock.advance(Duration::from_nanos(ns));
        if let Some(busy) = busy_ns {
            rec.probed(id, |r| {
                advance(cb_ns[0]);
                r.enter(id)
            });
            advance(busy);
            rec.probed(id, |r| {
                // The exit reads the clock first: its time after the span's.
                let recorded = r.exit(id);
                advance(cb_ns[1]);
                recorded
            });
        }
        rec.probed(id, |r| {
            advance(cb_ns[2]);
            r.close(id)
        });
    }

    #[test]
    fn a_cold_first_sample_100_times_the_rest_moves_the_estimate_less_than_the_stated_factor() {
        // 40 spans of 100 ns callbacks, the first span's 100× (a thread's first span of the
        // name: its state made); with a second thread of the same, and one callback 100× in
        // the middle of the first (a cache miss, a page fault).
        let (rec, mock) = probing_recorder();
        let meta = callsite("steady");
        for (i, id) in timed_ids(1, 40).into_iter().enumerate() {
            let cb = match i {
                0 => [10_000; 3],
                20 => [100, 10_000, 100],
                _ => [100; 3],
            };
            span(&rec, &mock, meta, id, Some(1_000), cb);
        }
        std::thread::scope(|scope| {
            scope.spawn(|| {
                for (i, id) in timed_ids(1 << 20, 10).into_iter().enumerate() {
                    let cb = if i == 0 { [10_000; 3] } else { [100; 3] };
                    span(&rec, &mock, meta, id, Some(1_000), cb);
                }
            });
        });
        let snap = rec.snapshot();
        let o = snap.overhead.as_ref().unwrap();
        // 100 ns a callback, 4 callbacks a span (the open counted, not timed here).
        let per_span = o.measured_span_ns.expect("150 callbacks timed: sure");
        let ratio = per_span / 400.0;
        assert!(
            (1.0 / STABLE..=STABLE).contains(&ratio),
            "{per_span} ns a span, 400 steady: {ratio:.2}×"
        );
        // The first span of each thread counted apart; the rest measured.
        assert_eq!(o.measured_samples, 150 - 2 * 3);
        assert_eq!(o.span_ns_sure(), Some(per_span));
        let steady = snap.span("steady").unwrap();
        assert_eq!(steady.overhead_ns, Some((50.0 * per_span) as u64));
    }

    #[test]
    fn below_the_minimum_sample_size_the_estimate_is_unsure_and_no_costly_note_is_raised() {
        // 12 spans timed whole: 36 callbacks, the first span's 3 cold. Empty spans (20 ns)
        // whose 100 ns callbacks would be 2000% of them.
        let (rec, mock) = probing_recorder();
        let meta = callsite("tiny");
        for id in timed_ids(1, 12) {
            span(&rec, &mock, meta, id, Some(20), [100; 3]);
        }
        let snap = rec.snapshot();
        let o = snap.overhead.clone().unwrap();
        assert_eq!(o.measured_span_ns, None, "{o:?}");
        assert_eq!((o.measured_samples, o.span_ns_sure()), (33, None));
        // The calibrated cost per span, said to be unsure.
        assert_eq!(o.span_ns(), 100.0);
        assert_eq!(snap.span("tiny").unwrap().overhead_ns, Some(12 * 100));
        let report = Table::new().with_tree(None).to_string(&snap);
        assert!(!report.contains("note: spanprof costs over"), "{report}");
        // (Its parts on a line of their own past 100 characters.)
        let cost = report
            .split_once("spanprof's own cost: ")
            .and_then(|(_, cost)| cost.split_once(" readings)"))
            .unwrap()
            .0
            .replace("\n  ", " ");
        assert!(cost.contains(", unsure (est. "), "{cost}");
        assert!(cost.contains(": 100 ns/span + "), "{cost}");
        assert!(
            report.contains(
                "note: spanprof's cost per span is unsure (33 of 64 callbacks timed): the \
                 figure calibrated at\n  start-up, and no note on the span names it costs most"
            ),
            "{report}"
        );
        // The back-off goes by the calibrated cost too.
        let own = rec.own_totals();
        assert!(!own.sure);
        assert_eq!((own.units, own.unit_ns), (12, 100.0));
        assert_eq!(own.estimated_ns, 1_200);
        // Sure from 64 on: 11 more spans, 33 more callbacks.
        for id in timed_ids(1 << 20, 11) {
            span(&rec, &mock, meta, id, Some(20), [100; 3]);
        }
        let own = rec.own_totals();
        assert!(own.sure, "{own:?}");
        assert_eq!((own.units, own.unit_ns), (23, 400.0));
        let snap = rec.snapshot();
        let o = snap.overhead.as_ref().unwrap();
        assert_eq!((o.measured_samples, o.span_ns_sure()), (66, Some(400.0)));
        let report = Table::new().with_tree(None).to_string(&snap);
        assert!(
            report.contains(
                "note: spanprof costs over 5% of these spans' own time: tiny 2000% (mean 20 ns)"
            ),
            "{report}"
        );
    }

    #[test]
    fn a_span_never_entered_or_of_no_busy_time_raises_no_costly_note() {
        // A sure estimate (40 spans timed), from a short name worth its note.
        let (rec, mock) = probing_recorder();
        let short = callsite("short");
        for id in timed_ids(1, 40) {
            span(&rec, &mock, short, id, Some(50), [100; 3]);
        }
        // Created and closed, never entered.
        let never = callsite("heap_probe");
        for id in timed_ids(1 << 20, 3) {
            span(&rec, &mock, never, id, None, [100; 3]);
        }
        // Entered, for no measurable time.
        let instant = callsite("instant");
        for id in timed_ids(2 << 20, 3) {
            span(&rec, &mock, instant, id, Some(0), [100; 3]);
        }
        let snap = rec.snapshot();
        assert!(snap.overhead.as_ref().unwrap().span_ns_sure().is_some());
        let heap_probe = snap.span("heap_probe").unwrap();
        assert_eq!((heap_probe.calls, heap_probe.instances), (0, 3));
        assert!(heap_probe.overhead_ns.unwrap() > 0, "it cost something");
        let report = Table::new().with_tree(None).to_string(&snap);
        let note = report
            .lines()
            .find(|l| l.starts_with("note: spanprof costs over 5% of these spans' own time: "))
            .unwrap_or_else(|| panic!("{report}"));
        assert!(note.contains("short 800% (mean 50 ns)"), "{note}");
        assert!(!note.contains("heap_probe"), "{note}");
        assert!(!note.contains("instant"), "{note}");
    }

    #[test]
    fn each_name_is_charged_its_own_callbacks() {
        // A loop of short spans whose callbacks hit the caches (30 ns), and long spans whose
        // exit and close follow a body that evicted them (1 µs): each name its own cost.
        let warm = NameWork {
            units: 1_000,
            callbacks: 4_000,
            probes: samples(&[30; 60]),
        };
        let cold = NameWork {
            units: 100,
            callbacks: 400,
            probes: samples(&[1_000; 40]),
        };
        let rare = NameWork {
            units: 10,
            callbacks: 40,
            probes: samples(&[500; 4]),
        };
        let est = estimate(&[warm, cold, rare], 100.0);
        assert_eq!(est.samples, 104);
        assert_eq!(&est.unit_ns[..2], &[120.0, 4_000.0]);
        // Too few of its own: every name's together (the trimmed mean of all 104).
        let mut all = warm.probes;
        all.merge(&cold.probes);
        all.merge(&rare.probes);
        assert_eq!(est.unit_ns[2], 4.0 * all.trimmed_mean().unwrap());
        let total = 1_000.0 * 120.0 + 100.0 * 4_000.0 + 10.0 * est.unit_ns[2];
        assert_eq!(est.measured, Some(total / 1_110.0));
        // Under 64 callbacks in all: the calibrated cost, for every name.
        let est = estimate(&[cold, rare], 100.0);
        assert_eq!((est.measured, est.unit_ns), (None, vec![100.0, 100.0]));
    }

    /// Timed callbacks of these times, all warm.
    fn samples(ns: &[u64]) -> ProbeSums {
        let mut sums = ProbeSums::default();
        for &ns in ns {
            sums.add(ns, false);
        }
        sums
    }

    #[test]
    fn the_trimmed_mean_leaves_out_a_tenth_at_each_end() {
        // 100 callbacks: 10 at 1 ns and 10 at 40 µs left out; the 80 between kept whole.
        let mut ns = vec![1; 10];
        ns.extend([100; 40]);
        ns.extend([300; 40]);
        ns.extend([40_000; 10]);
        assert_eq!(samples(&ns).trimmed_mean(), Some(200.0));
        // Fewer than 10: nothing left out.
        assert_eq!(samples(&[10, 20, 30_000]).trimmed_mean(), Some(10_010.0));
        assert_eq!(ProbeSums::default().trimmed_mean(), None);
        // A cold one counts apart.
        let mut sums = samples(&[100; 9]);
        sums.add(10_000, true);
        assert_eq!((sums.warm(), sums.cold, sums.cold_ns), (9, 1, 10_000));
        assert_eq!(sums.trimmed_mean(), Some(100.0));
    }
}

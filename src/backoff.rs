//! Automatic back-off: when spanprof's estimated cost goes over a share of the program's CPU
//! time ([`Builder::with_max_overhead`](crate::Builder::with_max_overhead), 5% by default),
//! its per-span resource readings (thread CPU time, heap counters, the marks of memory, GPU and
//! energy) are switched off, and back on once the program's span rate makes them affordable
//! again. Span timing itself always stays on.
//!
//! A thread of its own checks once a second ([`TICK`]): the cost over the last second is
//! spanprof's estimate ([`crate::profile::Overhead`]: calibrated cost per span × entries, plus
//! the measured time of the readings), compared with the process's CPU time over the same
//! second. Stepping back up is predicted with the readings' cost per entry measured when they
//! were stepped down, and happens only under half the threshold (no flapping). The first step
//! down is logged once at `spanprof::perf`; every step is in the profile
//! ([`Snapshot::backoff`](crate::profile::Snapshot::backoff)) and the report.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::profile::BackoffStep;
use crate::record::overhead::OwnTotals;
use crate::record::Recorder;
use crate::switches::Resources;
use crate::PERF_TARGET;

/// The default threshold: spanprof's estimated cost as a share of the process's CPU time, %.
pub(crate) const DEFAULT_MAX_OVERHEAD_PCT: f64 = 5.0;

/// How often the back-off looks at the cost.
pub(crate) const TICK: Duration = Duration::from_secs(1);

/// The most steps kept in the profile (later ones are counted, not kept).
pub(crate) const MAX_STEPS: usize = 64;

/// One reading of the controller's inputs.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Reading {
    /// ns since the profile started.
    pub(crate) t_ns: u64,
    /// spanprof's cost so far.
    pub(crate) own: OwnTotals,
    /// The process's CPU time so far, ns.
    pub(crate) cpu_ns: u64,
}

/// What the controller decided at a tick.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Decision {
    /// Switch these resources off (the readings cost `pct` % of the last interval).
    Down { off: Resources, pct: f64 },
    /// Switch these back on (predicted cost with them: `pct` %).
    Up { on: Resources, pct: f64 },
}

/// The back-off's state: a pure function of its readings (tests feed it numbers).
#[derive(Debug)]
pub(crate) struct Controller {
    max_pct: f64,
    last: Option<Reading>,
    /// What is stepped down, and what its readings cost per entry when it was.
    down: Option<(Resources, f64)>,
}

impl Controller {
    pub(crate) fn new(max_pct: f64) -> Self {
        Self {
            max_pct,
            last: None,
            down: None,
        }
    }

    /// One tick, with the resources switched on now.
    pub(crate) fn tick(&mut self, now: Reading, current: Resources) -> Option<Decision> {
        let last = self.last.replace(now)?;
        let cpu = now.cpu_ns.saturating_sub(last.cpu_ns);
        if cpu == 0 {
            return None;
        }
        let entries = now.own.entries.saturating_sub(last.own.entries);
        let estimated = now.own.estimated_ns.saturating_sub(last.own.estimated_ns);
        let readings = now.own.readings_ns.saturating_sub(last.own.readings_ns);
        let pct = |ns: f64| 100.0 * ns / cpu as f64;
        match self.down {
            None if !current.is_empty() && pct(estimated as f64) > self.max_pct => {
                let per_entry = readings as f64 / entries.max(1) as f64;
                self.down = Some((current, per_entry));
                Some(Decision::Down {
                    off: current,
                    pct: pct(estimated as f64),
                })
            }
            Some((off, per_entry)) => {
                let predicted = pct(estimated as f64 + entries as f64 * per_entry);
                (predicted < self.max_pct / 2.0).then(|| {
                    self.down = None;
                    Decision::Up {
                        on: off,
                        pct: predicted,
                    }
                })
            }
            None => None,
        }
    }
}

/// The running back-off: its thread, and the steps it took.
#[derive(Debug)]
pub(crate) struct Backoff {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
    steps: Arc<Mutex<Vec<BackoffStep>>>,
}

impl Backoff {
    /// Starts the back-off thread for `recorder` (none when there is nothing to step down or
    /// the thread cannot be started).
    pub(crate) fn start(recorder: Arc<Recorder>, max_pct: f64) -> Option<Self> {
        if recorder.available().is_empty() || crate::samplers::cpu::process_cpu_ns().is_none() {
            return None;
        }
        let steps = Arc::new(Mutex::new(Vec::new()));
        let (stop, stopped) = mpsc::channel::<()>();
        let log = steps.clone();
        let thread = std::thread::Builder::new()
            .name("spanprof-backoff".to_string())
            .spawn(move || {
                let mut controller = Controller::new(max_pct);
                let mut said = false;
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(TICK) {
                    let reading = Reading {
                        t_ns: recorder.elapsed_ns(),
                        own: recorder.own_totals(),
                        cpu_ns: crate::samplers::cpu::process_cpu_ns().map_or(0, |(u, s)| u + s),
                    };
                    let Some(decision) = controller.tick(reading, recorder.resources()) else {
                        continue;
                    };
                    let step = match decision {
                        Decision::Down { off, pct } => {
                            recorder.set_resources(Resources::NONE);
                            if !said {
                                said = true;
                                tracing::warn!(
                                    target: PERF_TARGET,
                                    overhead_pct = pct,
                                    max_pct,
                                    "spanprof costs more than its limit: per-span resource \
                                     readings off until the span rate falls (in the report)"
                                );
                            }
                            BackoffStep::new(reading.t_ns, false, off, pct)
                        }
                        Decision::Up { on, pct } => {
                            recorder.set_resources(on);
                            BackoffStep::new(reading.t_ns, true, on, pct)
                        }
                    };
                    let mut steps = log.lock().unwrap_or_else(|e| e.into_inner());
                    if steps.len() < MAX_STEPS {
                        steps.push(step);
                    }
                }
            })
            .ok()?;
        Some(Self {
            stop: Some(stop),
            thread: Some(thread),
            steps,
        })
    }

    /// The steps taken so far.
    pub(crate) fn steps(&self) -> Vec<BackoffStep> {
        self.steps.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Stops the thread (it wakes at once) and waits for it.
    pub(crate) fn stop(&mut self) {
        self.stop.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Backoff {
    fn drop(&mut self) {
        self.stop();
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
        }
    }

    #[test]
    fn steps_down_over_the_limit_and_back_up_when_the_rate_falls() {
        let mut c = Controller::new(5.0);
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
    fn nothing_to_step_down_at_basic() {
        let mut c = Controller::new(5.0);
        let mut t = OwnTotals::default();
        c.tick(at(0, &mut t, 0, 60, 0), Resources::NONE);
        assert_eq!(
            c.tick(at(1, &mut t, 1_000_000, 60, 0), Resources::NONE),
            None
        );
    }
}

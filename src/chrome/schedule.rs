//! The step schedule: which steps are traced, with `torch.profiler.schedule` semantics.

use crate::error::{Error, Result};

/// What the [`Schedule`] does at one step; the same four actions as `torch.profiler`'s
/// `ProfilerAction`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StepAction {
    /// Not traced: one of the `skip_first` steps, a wait step, or a step after the last repeat.
    None,
    /// A warm-up step: not traced either.
    ///
    /// torch.profiler starts its tracer during warm-up and throws the events away, so that the
    /// tracer's start-up cost does not land in the first active step. tracing-chrome has no such
    /// start-up cost (its file is opened when the window's first step begins), so spanprof
    /// treats warm-up steps exactly like wait steps. They are kept so that schedules written for
    /// torch select the same steps.
    Warmup,
    /// Traced; not the last step of its window.
    Record,
    /// Traced; the last step of its window. The window's file is finished when this step's span
    /// closes.
    RecordAndSave,
}

impl StepAction {
    /// Whether the step is traced.
    pub fn is_active(self) -> bool {
        matches!(self, StepAction::Record | StepAction::RecordAndSave)
    }
}

/// The active steps of one cycle of a [`Schedule`]: one trace file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct StepWindow {
    /// The cycle (0 for the first), counted after the `skip_first` steps.
    pub cycle: u64,
    /// The first active step (0-based, counting every step span since tracing began).
    pub first: u64,
    /// The last active step (inclusive).
    pub last: u64,
}

/// Which steps are traced: `torch.profiler.schedule(wait, warmup, active, repeat, skip_first)`.
///
/// Steps are counted from 0, one per step span created (see
/// [`ChromeOptions::with_steps`](super::ChromeOptions::with_steps)). The first `skip_first`
/// steps are ignored; then cycles of `wait` steps (not traced), `warmup` steps (not traced, see
/// [`StepAction::Warmup`]) and `active` steps (traced, into one file per cycle) follow, `repeat`
/// times (0: until the program ends).
///
/// ```
/// use spanprof::chrome::{Schedule, StepAction};
///
/// // skip 10 steps, then wait 5, warm up 1, trace 3; twice.
/// let s = Schedule::new(5, 1, 3)?.with_repeat(2).with_skip_first(10);
/// assert_eq!(s.action(9), StepAction::None);
/// assert_eq!(s.action(15), StepAction::Warmup);
/// assert_eq!(s.action(16), StepAction::Record);
/// assert_eq!(s.action(18), StepAction::RecordAndSave);
/// let w = s.window(26).unwrap();
/// assert_eq!((w.cycle, w.first, w.last), (1, 25, 27));
/// assert_eq!(s.action(28), StepAction::None); // both repeats done
/// # Ok::<(), spanprof::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Schedule {
    wait: u64,
    warmup: u64,
    active: u64,
    repeat: u64,
    skip_first: u64,
}

impl Schedule {
    /// Cycles of `wait` untraced steps, `warmup` untraced steps and `active` traced steps,
    /// repeated until the program ends ([`Schedule::with_repeat`] bounds it), from the first
    /// step on ([`Schedule::with_skip_first`] skips some).
    ///
    /// # Errors
    /// [`Error::InvalidChromeOptions`] if `active` is 0 or the cycle length overflows `u64`.
    pub fn new(wait: u64, warmup: u64, active: u64) -> Result<Self> {
        if active == 0 {
            return Err(Error::InvalidChromeOptions {
                reason: "a schedule needs at least one active step",
            });
        }
        if wait
            .checked_add(warmup)
            .and_then(|n| n.checked_add(active))
            .is_none()
        {
            return Err(Error::InvalidChromeOptions {
                reason: "wait + warmup + active overflows u64",
            });
        }
        Ok(Self {
            wait,
            warmup,
            active,
            repeat: 0,
            skip_first: 0,
        })
    }

    /// Every step traced, each into a file of its own (`Schedule::new(0, 0, 1)`).
    pub fn every_step() -> Self {
        Self {
            wait: 0,
            warmup: 0,
            active: 1,
            repeat: 0,
            skip_first: 0,
        }
    }

    /// Stops after `repeat` cycles (default 0: never stops).
    #[must_use]
    pub fn with_repeat(self, repeat: u64) -> Self {
        Self { repeat, ..self }
    }

    /// Ignores the first `skip_first` steps (default 0).
    #[must_use]
    pub fn with_skip_first(self, skip_first: u64) -> Self {
        Self { skip_first, ..self }
    }

    /// Untraced steps at the start of each cycle.
    pub fn wait(&self) -> u64 {
        self.wait
    }
    /// Warm-up (untraced) steps after the wait steps of each cycle.
    pub fn warmup(&self) -> u64 {
        self.warmup
    }
    /// Traced steps at the end of each cycle.
    pub fn active(&self) -> u64 {
        self.active
    }
    /// Cycles before the schedule stops (0: never).
    pub fn repeat(&self) -> u64 {
        self.repeat
    }
    /// Steps ignored before the first cycle.
    pub fn skip_first(&self) -> u64 {
        self.skip_first
    }

    fn cycle_len(&self) -> u64 {
        // Checked in `new`; `every_step` is 1.
        self.wait + self.warmup + self.active
    }

    /// The cycle of a step and its position in the cycle, or `None` before the first cycle and
    /// after the last.
    fn position(&self, step: u64) -> Option<(u64, u64)> {
        let step = step.checked_sub(self.skip_first)?;
        let len = self.cycle_len();
        let cycle = step / len;
        if self.repeat > 0 && cycle >= self.repeat {
            return None;
        }
        Some((cycle, step % len))
    }

    /// What the schedule does at `step` (0-based).
    pub fn action(&self, step: u64) -> StepAction {
        let Some((_, at)) = self.position(step) else {
            return StepAction::None;
        };
        if at < self.wait {
            StepAction::None
        } else if at < self.wait + self.warmup {
            StepAction::Warmup
        } else if at + 1 < self.cycle_len() {
            StepAction::Record
        } else {
            StepAction::RecordAndSave
        }
    }

    /// The window (the active steps of one cycle) that `step` belongs to, if it is active.
    pub fn window(&self, step: u64) -> Option<StepWindow> {
        let (cycle, at) = self.position(step)?;
        let lead = self.wait + self.warmup;
        if at < lead {
            return None;
        }
        let first = step - (at - lead);
        Some(StepWindow {
            cycle,
            first,
            last: first.saturating_add(self.active - 1),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `torch.profiler.schedule`'s `schedule_fn`, transliterated (torch/profiler/profiler.py).
    fn torch(wait: u64, warmup: u64, active: u64, repeat: u64, skip_first: u64, step: u64) -> u8 {
        // 0 NONE, 1 WARMUP, 2 RECORD, 3 RECORD_AND_SAVE
        if step < skip_first {
            return 0;
        }
        let step = step - skip_first;
        let num_steps = wait + warmup + active;
        if repeat > 0 && step / num_steps >= repeat {
            return 0;
        }
        let mod_step = step % num_steps;
        if mod_step < wait {
            0
        } else if mod_step < wait + warmup {
            1
        } else if mod_step < num_steps - 1 {
            2
        } else {
            3
        }
    }

    fn code(a: StepAction) -> u8 {
        match a {
            StepAction::None => 0,
            StepAction::Warmup => 1,
            StepAction::Record => 2,
            StepAction::RecordAndSave => 3,
        }
    }

    #[test]
    fn matches_torch_schedule_fn_on_a_grid() {
        for wait in 0..4 {
            for warmup in 0..3 {
                for active in 1..4 {
                    for repeat in 0..3 {
                        for skip_first in 0..4 {
                            let s = Schedule::new(wait, warmup, active)
                                .unwrap()
                                .with_repeat(repeat)
                                .with_skip_first(skip_first);
                            for step in 0..60 {
                                assert_eq!(
                                    code(s.action(step)),
                                    torch(wait, warmup, active, repeat, skip_first, step),
                                    "{s:?} step {step}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn exact_table() {
        use StepAction::*;
        // skip_first 2, wait 1, warmup 1, active 2, repeat 2
        let s = Schedule::new(1, 1, 2)
            .unwrap()
            .with_repeat(2)
            .with_skip_first(2);
        let got: Vec<StepAction> = (0..12).map(|k| s.action(k)).collect();
        assert_eq!(
            got,
            [
                None,          // 0 skipped
                None,          // 1 skipped
                None,          // 2 wait
                Warmup,        // 3
                Record,        // 4
                RecordAndSave, // 5
                None,          // 6 wait
                Warmup,        // 7
                Record,        // 8
                RecordAndSave, // 9
                None,          // 10 repeats done
                None,          // 11
            ]
        );
        let w = |cycle, first, last| Some(StepWindow { cycle, first, last });
        assert_eq!(s.window(3), Option::None);
        assert_eq!(s.window(4), w(0, 4, 5));
        assert_eq!(s.window(5), w(0, 4, 5));
        assert_eq!(s.window(8), w(1, 8, 9));
        assert_eq!(s.window(9), w(1, 8, 9));
        assert_eq!(s.window(10), Option::None);
    }

    #[test]
    fn windows_agree_with_actions() {
        let s = Schedule::new(2, 1, 3).unwrap().with_skip_first(1);
        for step in 0..100 {
            let action = s.action(step);
            match s.window(step) {
                Some(w) => {
                    assert!(action.is_active());
                    assert!(w.first <= step && step <= w.last);
                    assert_eq!(w.last - w.first + 1, 3);
                    assert_eq!(w.first, 1 + w.cycle * 6 + 3);
                    assert_eq!(action == StepAction::RecordAndSave, step == w.last);
                    assert!(s.action(w.first - 1) == StepAction::Warmup);
                }
                Option::None => assert!(!action.is_active(), "step {step}"),
            }
        }
    }

    #[test]
    fn back_to_back_windows_and_every_step() {
        let s = Schedule::new(0, 0, 2).unwrap();
        assert_eq!(
            s.window(3),
            Some(StepWindow {
                cycle: 1,
                first: 2,
                last: 3
            })
        );
        let e = Schedule::every_step();
        assert_eq!(e, Schedule::new(0, 0, 1).unwrap());
        for k in [0, 1, 1000] {
            assert_eq!(e.action(k), StepAction::RecordAndSave);
            assert_eq!(e.window(k).map(|w| (w.first, w.last)), Some((k, k)));
        }
    }

    #[test]
    fn invalid_schedules_and_huge_steps() {
        assert!(matches!(
            Schedule::new(1, 1, 0),
            Err(Error::InvalidChromeOptions { .. })
        ));
        assert!(matches!(
            Schedule::new(u64::MAX, 1, 1),
            Err(Error::InvalidChromeOptions { .. })
        ));
        let s = Schedule::new(0, 0, 10).unwrap();
        let w = s.window(u64::MAX).unwrap();
        assert_eq!((w.first, w.last), (u64::MAX - 5, u64::MAX));
        let s = Schedule::new(3, 0, 1).unwrap().with_skip_first(u64::MAX);
        assert_eq!(s.action(u64::MAX - 1), StepAction::None);
    }
}

//! The time source: one place to swap the counter spanprof reads.

use std::sync::Arc;
use std::time::Duration;

/// The clock spanprof reads on every span enter and exit.
///
/// [`Clock::new`] reads the CPU's time-stamp counter where it is invariant (through
/// [`quanta`]), which costs a fraction of `Instant::now()`; raw readings are converted to
/// nanoseconds with one multiply and shift. [`Clock::mock`] gives a clock that only moves when a
/// test moves it, so tests can assert exact durations.
#[derive(Clone, Debug)]
pub struct Clock {
    inner: quanta::Clock,
    /// A [`Clock::mock`]: spanprof does not calibrate its own costs against it.
    mocked: bool,
    /// Where quanta reads the TSC (x86_64), the raw reading is taken inline with `rdtsc` (the
    /// same units); elsewhere, through quanta.
    tsc: bool,
    /// Nanoseconds per 2^32 raw units, as quanta converts them: readings are converted with one
    /// multiply and shift, whatever the source (quanta's monotonic and mock clocks count
    /// nanoseconds: 2^32, an exact conversion).
    scale: u64,
}

/// The control side of a [`Clock::mock`] clock.
#[derive(Clone, Debug)]
pub struct MockClock {
    mock: Arc<quanta::Mock>,
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock {
    /// The fastest monotonic clock of this machine (calibrated once per process).
    pub fn new() -> Self {
        let inner = quanta::Clock::new();
        let tsc = tsc_scale(&inner);
        Self {
            inner,
            mocked: false,
            tsc: tsc.is_some(),
            scale: tsc.unwrap_or(1 << 32),
        }
    }

    /// A clock that stands still until [`MockClock::advance`] moves it.
    pub fn mock() -> (Self, MockClock) {
        let (inner, mock) = quanta::Clock::mock();
        // Readings of 0 mean "not set" inside spanprof: start the mock at 1 ns.
        mock.increment(1);
        (
            Self {
                inner,
                mocked: true,
                tsc: false,
                scale: 1 << 32,
            },
            MockClock { mock },
        )
    }

    /// Whether this is a [`Clock::mock`].
    pub(crate) fn is_mock(&self) -> bool {
        self.mocked
    }

    /// A raw reading: TSC ticks where quanta counts them, else quanta's units.
    #[inline(always)]
    pub(crate) fn raw(&self) -> u64 {
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
        if self.tsc {
            #[allow(unsafe_code)]
            // SAFETY: `rdtsc` has no preconditions; `tsc` is only set where quanta itself
            // reads this counter (`tsc_scale`), so the CPU has it.
            return unsafe { core::arch::x86_64::_rdtsc() };
        }
        self.inner.raw()
    }

    /// Nanoseconds between two raw readings (0 if `end` is not after `start`).
    #[inline(always)]
    pub(crate) fn delta_ns(&self, start: u64, end: u64) -> u64 {
        // No branch on the source: a saturating subtraction, a multiply and a shift.
        ((u128::from(end.saturating_sub(start)) * u128::from(self.scale)) >> 32) as u64
    }
}

/// The TSC's nanoseconds per 2^32 ticks, when `clock` reads the TSC (x86_64): quanta scales its
/// deltas only then (its monotonic and mock clocks count nanoseconds, which [`Clock::delta_ns`]
/// converts with a scale of exactly 2^32), so a delta it converts to something else than itself
/// comes from the TSC.
fn tsc_scale(clock: &quanta::Clock) -> Option<u64> {
    if !cfg!(all(target_arch = "x86_64", target_feature = "sse2")) {
        return None;
    }
    let ticks = 1u64 << 32;
    let scale = clock.delta_as_nanos(1, 1 + ticks);
    (scale != ticks && scale != 0).then_some(scale)
}

impl MockClock {
    /// Moves the mock clock forward.
    pub fn advance(&self, by: Duration) {
        self.mock.increment(by);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_readings_convert_to_real_time() {
        let clock = Clock::new();
        // Each reading bracketed by `Instant`s: a thread switched out between two readings
        // (a loaded machine) widens the bracket rather than failing the test.
        let w0 = std::time::Instant::now();
        let start = clock.raw();
        let w1 = std::time::Instant::now();
        std::thread::sleep(Duration::from_millis(20));
        let w2 = std::time::Instant::now();
        let end = clock.raw();
        let w3 = std::time::Instant::now();
        let ns = clock.delta_ns(start, end);
        let (inner, outer) = ((w2 - w1).as_nanos() as u64, (w3 - w0).as_nanos() as u64);
        assert!(
            ns >= inner - inner / 10 && ns <= outer + outer / 10,
            "clock {ns} ns vs Instant between {inner} and {outer} ns"
        );
    }

    #[test]
    fn the_inline_tsc_reads_and_converts_as_quanta_does() {
        let clock = Clock::new();
        if !clock.tsc {
            eprintln!("SKIPPED: quanta does not read the TSC on this machine");
            return;
        }
        // Same units: an inline reading falls between two of quanta's.
        let before = clock.inner.raw();
        let inline = clock.raw();
        let after = clock.inner.raw();
        assert!(
            before <= inline && inline <= after,
            "{before} {inline} {after}"
        );
        // Same conversion, to quanta's rounding: over 1 s, 1 s and a few ticks' worth.
        for ticks in [0u64, 1, 1_000, 3_000_000_000, 1 << 40] {
            let ours = clock.delta_ns(inline, inline + ticks);
            let quanta = clock.inner.delta_as_nanos(inline, inline + ticks);
            assert!(
                ours.abs_diff(quanta) <= 1 + quanta / 1_000_000_000,
                "{ticks}: {ours} vs {quanta}"
            );
        }
        assert_eq!(clock.delta_ns(inline + 5, inline), 0, "backwards is 0");
    }

    #[test]
    fn mock_moves_only_when_told() {
        let (clock, mock) = Clock::mock();
        let a = clock.raw();
        assert_eq!(clock.raw(), a);
        mock.advance(Duration::from_nanos(250));
        let b = clock.raw();
        assert_eq!(clock.delta_ns(a, b), 250);
        assert_eq!(clock.delta_ns(b, a), 0, "backwards is 0");
        // Nanoseconds convert to themselves (a scale of 2^32), up to hours.
        mock.advance(Duration::from_secs(7_200));
        assert_eq!(clock.delta_ns(a, clock.raw()), 7_200_000_000_250);
    }
}

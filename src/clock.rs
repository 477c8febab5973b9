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
        Self {
            inner: quanta::Clock::new(),
            mocked: false,
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
            },
            MockClock { mock },
        )
    }

    /// Whether this is a [`Clock::mock`].
    pub(crate) fn is_mock(&self) -> bool {
        self.mocked
    }

    #[inline(always)]
    pub(crate) fn raw(&self) -> u64 {
        self.inner.raw()
    }

    /// Nanoseconds between two raw readings (0 if `end` is not after `start`).
    #[inline(always)]
    pub(crate) fn delta_ns(&self, start: u64, end: u64) -> u64 {
        self.inner.delta_as_nanos(start, end)
    }
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
        let start = clock.raw();
        let wall = std::time::Instant::now();
        std::thread::sleep(Duration::from_millis(20));
        let ns = clock.delta_ns(start, clock.raw());
        let real = wall.elapsed().as_nanos() as u64;
        assert!(
            ns.abs_diff(real) < real / 10 + 2_000_000,
            "clock {ns} ns vs Instant {real} ns"
        );
    }

    #[test]
    fn mock_moves_only_when_told() {
        let (clock, mock) = Clock::mock();
        let a = clock.raw();
        assert_eq!(clock.raw(), a);
        mock.advance(Duration::from_nanos(250));
        assert_eq!(clock.delta_ns(a, clock.raw()), 250);
    }
}

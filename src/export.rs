//! The export cadence: one thread, `spanprof-export`, that every `T` seconds or every `N` closes
//! of a step span takes a snapshot, logs the window's summary at [`PERF_TARGET`], re-writes the
//! outputs whose format is periodic ([`Format::periodic`](crate::output::Format::periodic)) and
//! pushes OTLP metrics (feature `otlp`).
//!
//! The thread reads snapshots only (`ProfileSession::snapshot`), like every output. The hot path
//! does not change, but for step spans: their callsite is marked once, when it is decided, and
//! their close counts one step (an atomic add) and, every `N` steps, wakes this thread.
//!
//! It is a [`Worker`] (start, wake, stop): it holds the session weakly and runs while a layer or
//! a handle lives. Once they are all dropped nothing more can be recorded, and it ends even if
//! the guard is kept (or leaked); the last window, when the profile ends, then runs on a fresh
//! thread with the windows' state the first one left.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use crate::output::units::{format_count, format_duration};
use crate::profile::figures::SELF_SHARE;
use crate::profile::{Snapshot, SpanStats};
use crate::session::ProfileSession;
use crate::worker::{Job, Waker, WeakUse, Worker};
use crate::PERF_TARGET;

/// How often spanprof logs a summary of the last window at [`PERF_TARGET`]
/// (`spanprof::perf`), re-writes its periodic outputs and pushes OTLP metrics:
/// [`Builder::with_every`](crate::Builder::with_every), or `SPANPROF_EVERY`.
///
/// `SPANPROF_EVERY` spells it as a duration (`30s`, `500ms`, `2m`, `1h 30m`) or as a number of
/// steps (`100 steps`); steps are closes of the span named by `SPANPROF_STEP`
/// ([`Builder::with_step_span`](crate::Builder::with_step_span)), e.g. `train_step`.
///
/// ```
/// use spanprof::Every;
/// use std::time::Duration;
/// assert_eq!("30s".parse::<Every>()?, Every::Period(Duration::from_secs(30)));
/// assert_eq!("100 steps".parse::<Every>()?, Every::Steps(100));
/// assert!("often".parse::<Every>().is_err());
/// # Ok::<(), spanprof::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Every {
    /// Every period of time, from [`Every::MIN_PERIOD`] to [`Every::MAX_PERIOD`].
    Period(Duration),
    /// Every `n` closes of the step span (at least 1).
    Steps(u64),
}

impl Every {
    /// The shortest period accepted: 10 ms.
    pub const MIN_PERIOD: Duration = Duration::from_millis(10);
    /// The longest period accepted: 24 h.
    pub const MAX_PERIOD: Duration = Duration::from_secs(24 * 3600);
    /// What `SPANPROF_EVERY` and [`Builder::with_every`](crate::Builder::with_every) accept.
    pub(crate) const ACCEPTED: &'static str = "a duration from 10 ms to 24 h (e.g. 30s, 500ms, \
         2m) or a number of steps, at least 1 (e.g. 100 steps), with the step span named by \
         SPANPROF_STEP or Builder::with_step_span";

    /// Whether the value is within its rule.
    pub(crate) fn is_valid(self) -> bool {
        match self {
            Every::Period(p) => (Self::MIN_PERIOD..=Self::MAX_PERIOD).contains(&p),
            Every::Steps(n) => n >= 1,
        }
    }
}

impl fmt::Display for Every {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Every::Period(p) => write!(f, "{}", humantime::format_duration(*p)),
            Every::Steps(1) => f.write_str("1 step"),
            Every::Steps(n) => write!(f, "{n} steps"),
        }
    }
}

impl FromStr for Every {
    type Err = crate::Error;

    /// Parses `SPANPROF_EVERY`'s syntax (see [`Every`]); the value must be within the rule.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || crate::Error::InvalidEnv {
            var: crate::env::ENV_EVERY,
            value: text.to_string(),
            expected: Every::ACCEPTED,
        };
        let t = text.trim();
        let lower = t.to_ascii_lowercase();
        let every = match lower
            .strip_suffix("steps")
            .or_else(|| lower.strip_suffix("step"))
        {
            Some(n) => Every::Steps(n.trim().parse().map_err(|_| invalid())?),
            None => Every::Period(humantime::parse_duration(t).map_err(|_| invalid())?),
        };
        if every.is_valid() {
            Ok(every)
        } else {
            Err(invalid())
        }
    }
}

/// The step span of a cadence of steps: counts its closes and wakes the export thread every
/// `every` of them. Shared by the recorder (which counts) and the thread.
#[derive(Debug)]
pub(crate) struct StepSignal {
    name: String,
    every: u64,
    closed: AtomicU64,
    waiter: OnceLock<Waker>,
}

impl StepSignal {
    pub(crate) fn new(name: String, every: u64) -> Self {
        Self {
            name,
            every: every.max(1),
            closed: AtomicU64::new(0),
            waiter: OnceLock::new(),
        }
    }

    /// The step span's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// A step span closed: counted; every `every` steps the export thread is woken.
    pub(crate) fn closed(&self) {
        let n = self.closed.fetch_add(1, Ordering::Relaxed) + 1;
        if n % self.every == 0 {
            if let Some(waiter) = self.waiter.get() {
                waiter.wake();
            }
        }
    }

    /// Step spans closed so far.
    #[cfg(test)]
    pub(crate) fn count(&self) -> u64 {
        self.closed.load(Ordering::Relaxed)
    }

    fn windows(&self) -> u64 {
        self.closed.load(Ordering::Relaxed) / self.every
    }
}

/// What the export thread does at each window.
pub(crate) struct ExportSettings {
    pub(crate) every: Every,
    /// The step span's name, if one is named (its closes are reported in each window).
    pub(crate) step_span: Option<String>,
    /// The step counter, with [`Every::Steps`].
    pub(crate) steps: Option<Arc<StepSignal>>,
    /// The OTLP metrics push, if configured.
    #[cfg(feature = "otlp")]
    pub(crate) otlp: Option<crate::otlp::Pusher>,
    /// The span names the push shows, as every output
    /// ([`Builder::with_output_filter`](crate::Builder::with_output_filter)).
    #[cfg(feature = "otlp")]
    pub(crate) selection: crate::output::Selection,
}

impl fmt::Debug for ExportSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExportSettings")
            .field("every", &self.every)
            .field("step_span", &self.step_span)
            .finish_non_exhaustive()
    }
}

/// Span names in a window's summary.
pub(crate) const SUMMARY_TOP: usize = 5;
/// How long finishing waits for the last window without an OTLP push.
const LAST_WINDOW_WAIT: Duration = Duration::from_secs(1);
/// The name of the export thread.
const THREAD_NAME: &str = "spanprof-export";

/// The running export thread.
pub(crate) struct Exporter {
    worker: Worker<ExportJob>,
    /// The final snapshot, handed to the thread for the last window, and whether it is done.
    last: Arc<Mutex<LastWindow>>,
    /// How long [`Exporter::finish`] waits for the last window (and push).
    last_wait: Duration,
}

impl fmt::Debug for Exporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Exporter").finish_non_exhaustive()
    }
}

#[derive(Default)]
struct LastWindow {
    snapshot: Option<Snapshot>,
    done: bool,
}

impl Exporter {
    /// Starts the export thread, which ends once no `uses` is left (its last window then runs
    /// on a fresh thread at [`Exporter::finish`]); `None` (with a warning) if the thread cannot
    /// be spawned.
    pub(crate) fn start(
        settings: ExportSettings,
        session: Weak<ProfileSession>,
        uses: &WeakUse,
    ) -> Option<Self> {
        #[cfg(feature = "otlp")]
        let last_wait = settings.otlp.as_ref().map_or(LAST_WINDOW_WAIT, |p| {
            p.timeout() + Duration::from_millis(250)
        });
        #[cfg(not(feature = "otlp"))]
        let last_wait = LAST_WINDOW_WAIT;
        let last = Arc::new(Mutex::new(LastWindow::default()));
        let steps = settings.steps.clone();
        let first = Instant::now() + period_of(settings.every);
        let job = ExportJob {
            next: first,
            settings,
            session,
            last: last.clone(),
            previous: None,
            index: 0,
            windows_seen: 0,
            panicked: false,
        };
        match Worker::start(THREAD_NAME, job, first, Some(uses)) {
            Ok(worker) => {
                if let Some(steps) = steps {
                    let _ = steps.waiter.set(worker.waker());
                    // Steps counted before the waiter was known: wake it to look.
                    worker.wake();
                }
                Some(Self {
                    worker,
                    last,
                    last_wait,
                })
            }
            Err(e) => {
                tracing::warn!(target: PERF_TARGET, error = %e, "spanprof could not start its export thread: no periodic summaries, outputs or OTLP pushes");
                None
            }
        }
    }

    /// Hands the final snapshot to the thread for the last window (summary and push) and waits
    /// for it, at most the OTLP timeout (plus a margin) or a second without OTLP; a thread that
    /// ended (no use left) gets a fresh one for it. Returns whether it completed in time; if
    /// not, the thread is left to finish alone.
    pub(crate) fn finish(mut self, snapshot: Snapshot) -> bool {
        let deadline = Instant::now() + self.last_wait;
        lock(&self.last).snapshot = Some(snapshot);
        loop {
            self.worker.wake();
            let left = deadline.saturating_duration_since(Instant::now());
            if !self.worker.wait(left) {
                return false;
            }
            if lock(&self.last).done {
                return true;
            }
            // The thread ended before it saw the snapshot (no use left): its job, with the
            // windows so far, runs the last one on a fresh thread, whatever the uses.
            let Some(job) = self.worker.take_job() else {
                return false;
            };
            match Worker::start(THREAD_NAME, job, Instant::now(), None) {
                Ok(worker) => self.worker = worker,
                Err(_) => return false,
            }
        }
    }
}

fn lock(last: &Mutex<LastWindow>) -> std::sync::MutexGuard<'_, LastWindow> {
    last.lock().unwrap_or_else(|e| e.into_inner())
}

fn period_of(every: Every) -> Duration {
    match every {
        Every::Period(p) => p,
        // Steps: the thread also wakes this often to see whether the session is gone.
        Every::Steps(_) => Duration::from_millis(500),
    }
}

/// The export thread's job: a window when one is due, then the last one.
struct ExportJob {
    settings: ExportSettings,
    session: Weak<ProfileSession>,
    last: Arc<Mutex<LastWindow>>,
    /// The snapshot at the end of the previous window (`None` before the first).
    previous: Option<Snapshot>,
    /// Windows logged.
    index: u64,
    /// When the next window ends (a period), or the step windows seen (steps).
    next: Instant,
    windows_seen: u64,
    /// Whether a window panicked already (warned once).
    panicked: bool,
}

impl Job for ExportJob {
    fn run(&mut self, now: Instant) -> Option<Instant> {
        let last = lock(&self.last).snapshot.take();
        if let Some(snapshot) = last {
            self.guarded(|w| w.window(snapshot, true));
            lock(&self.last).done = true;
            return None;
        }
        if self.session.strong_count() == 0 {
            return None;
        }
        if self.due(now) {
            let session = self.session.upgrade()?;
            let snapshot = session.snapshot();
            session.write_periodic(&snapshot);
            drop(session);
            self.guarded(|w| w.window(snapshot, false));
        }
        Some(match (&self.settings.every, &self.settings.steps) {
            (Every::Steps(_), Some(_)) => Instant::now() + period_of(self.settings.every),
            _ => self.next,
        })
    }
}

impl ExportJob {
    /// Whether a window ended: `N` more steps, or the period (the next one set).
    fn due(&mut self, now: Instant) -> bool {
        match (&self.settings.every, &self.settings.steps) {
            (Every::Steps(_), Some(steps)) => {
                let windows = steps.windows();
                let due = windows > self.windows_seen;
                self.windows_seen = windows;
                due
            }
            (every, _) => {
                if now < self.next {
                    return false;
                }
                let period = period_of(*every);
                self.next += period;
                if self.next <= now {
                    self.next = now + period;
                }
                true
            }
        }
    }

    /// Runs `f`; a panic in it is warned about once and the thread goes on.
    fn guarded(&mut self, f: impl FnOnce(&mut Self)) {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(self)));
        if result.is_err() && !self.panicked {
            self.panicked = true;
            tracing::warn!(target: PERF_TARGET, "spanprof's export thread panicked in a window; it goes on");
        }
    }

    /// One window: its summary and the push of the cumulative snapshot.
    fn window(&mut self, snapshot: Snapshot, last: bool) {
        let interval = match &self.previous {
            Some(previous) => snapshot.since(previous),
            None => snapshot.clone(),
        };
        let active = interval
            .spans
            .iter()
            .any(|s| s.calls > 0 || s.instances > 0);
        if !last || active {
            self.index += 1;
            summary_event(
                &interval,
                self.index,
                last,
                self.settings.step_span.as_deref(),
            );
        }
        #[cfg(feature = "otlp")]
        if let Some(otlp) = &mut self.settings.otlp {
            otlp.push(&self.settings.selection.apply(&snapshot));
        }
        self.previous = Some(snapshot);
    }
}

/// The span names of `interval` with self time recorded, at most `top`, in the order of every
/// report ([`Snapshot::by_self_time`]: totals of names the back-off sampled scaled to every
/// call).
pub(crate) fn top_by_self(interval: &Snapshot, top: usize) -> Vec<&SpanStats> {
    let mut active = interval.by_self_time();
    active.retain(|s| s.entry_self.count > 0);
    active.truncate(top);
    active
}

/// The summary of one window at [`PERF_TARGET`]: structured fields for the window and each of
/// its top span names by self time (`top1_name`, `top1_calls`, `top1_self_ns`,
/// `top1_self_pct`, `top1_p99_ns`, … up to `top5`), and a readable message. Self times and
/// shares are the reports' ([`SpanStats::self_ns`], [`Snapshot::totals`]): of names the back-off
/// sampled, scaled to every call (marked `≈` in the message).
pub(crate) fn summary_event(interval: &Snapshot, window: u64, last: bool, step_span: Option<&str>) {
    let steps = step_span.map(|name| {
        interval
            .spans
            .iter()
            .filter(|s| s.name == name)
            .map(|s| s.instances)
            .sum::<u64>()
    });
    let top = top_by_self(interval, SUMMARY_TOP);
    let totals = interval.totals();
    let active = interval.spans.iter().filter(|s| s.calls > 0).count();
    let window_ms = interval.run.duration_ns / 1_000_000;
    let mut message = format!("spanprof window {window}");
    match steps {
        Some(n) => message.push_str(&format!(
            " ({} {}, {})",
            format_count(n),
            if n == 1 { "step" } else { "steps" },
            format_duration(interval.run.duration_ns)
        )),
        None => message.push_str(&format!(" ({})", format_duration(interval.run.duration_ns))),
    }
    if last {
        message.push_str(", the last");
    }
    if top.is_empty() {
        message.push_str(": no span closed");
    } else {
        message.push_str(": top self time ");
        let rows: Vec<String> = top
            .iter()
            .map(|s| {
                format!(
                    "{} {}× self {}{} ({:.1}%) p99 {}",
                    s.name,
                    format_count(s.calls),
                    if s.is_estimate() { "≈" } else { "" },
                    format_duration(s.self_ns()),
                    totals.self_share_pct(s.self_ns()),
                    format_duration(s.entry_self.p99_ns)
                )
            })
            .collect();
        message.push_str(&rows.join("; "));
    }
    let name = |i: usize| top.get(i).map(|s| s.name.as_str());
    let calls = |i: usize| top.get(i).map(|s| s.calls);
    let self_ns = |i: usize| top.get(i).map(|s| s.self_ns());
    // Rounded to 0.1 as the message shows it (an unrounded f64 reads 48.59549388387226).
    let self_pct = |i: usize| {
        top.get(i).map(|s| {
            let pct = SELF_SHARE.value(s, &totals).map_or(0.0, |v| v.as_f64());
            (pct * 10.0).round() / 10.0
        })
    };
    let p99_ns = |i: usize| top.get(i).map(|s| s.entry_self.p99_ns);
    tracing::info!(
        target: PERF_TARGET,
        window,
        last,
        steps,
        window_ms,
        span_names = active,
        top1_name = name(0),
        top1_calls = calls(0),
        top1_self_ns = self_ns(0),
        top1_self_pct = self_pct(0),
        top1_p99_ns = p99_ns(0),
        top2_name = name(1),
        top2_calls = calls(1),
        top2_self_ns = self_ns(1),
        top2_self_pct = self_pct(1),
        top2_p99_ns = p99_ns(1),
        top3_name = name(2),
        top3_calls = calls(2),
        top3_self_ns = self_ns(2),
        top3_self_pct = self_pct(2),
        top3_p99_ns = p99_ns(2),
        top4_name = name(3),
        top4_calls = calls(3),
        top4_self_ns = self_ns(3),
        top4_self_pct = self_pct(3),
        top4_p99_ns = p99_ns(3),
        top5_name = name(4),
        top5_calls = calls(4),
        top5_self_ns = self_ns(4),
        top5_self_pct = self_pct(4),
        top5_p99_ns = p99_ns(4),
        "{message}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_parses_durations_and_steps_within_its_rule() {
        for (text, want) in [
            ("30s", Every::Period(Duration::from_secs(30))),
            (" 500ms ", Every::Period(Duration::from_millis(500))),
            ("1h 30m", Every::Period(Duration::from_secs(5400))),
            ("100 steps", Every::Steps(100)),
            ("1 step", Every::Steps(1)),
            ("7Steps", Every::Steps(7)),
        ] {
            assert_eq!(text.parse::<Every>().unwrap(), want, "{text:?}");
        }
        for text in [
            "",
            "often",
            "0 steps",
            "-1 steps",
            "5ms",
            "25h",
            "1.5 steps",
            "10",
        ] {
            let e = text.parse::<Every>().unwrap_err();
            assert!(e.to_string().contains("SPANPROF_EVERY"), "{text:?}: {e}");
        }
        assert_eq!(Every::Steps(3).to_string(), "3 steps");
        assert_eq!(Every::Period(Duration::from_secs(90)).to_string(), "1m 30s");
    }

    #[test]
    fn step_signal_counts_windows() {
        let s = StepSignal::new("step".into(), 3);
        for _ in 0..7 {
            s.closed();
        }
        assert_eq!(s.windows(), 2);
        assert_eq!(s.name(), "step");
    }
}

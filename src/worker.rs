//! spanprof's background threads, one protocol for all three: the sampler
//! (`samplers/thread.rs`), the back-off (`backoff.rs`) and the export cadence (`export.rs`) are
//! each a [`Job`] that a [`Worker`] runs on a thread of its own.
//!
//! - **Start**: [`Worker::start`] spawns the named thread (`spanprof-…`), which calls
//!   [`Job::start`] once, then [`Job::run`] at the first time given and from then on at the time
//!   each run returns (its period), or at once when woken ([`Worker::wake`], a [`Waker`]). A run
//!   returning `None` ends the thread.
//! - **Liveness**: the thread holds no strong reference to the profile. Its job holds `Weak`s to
//!   what it works on and ends when they are gone; the worker holds a [`WeakUse`]. The layers and
//!   the profile's handles hold the [`Use`]s, the guard does not: once they are all dropped, the
//!   last one wakes every worker and each thread ends, so a guard leaked with `mem::forget` keeps
//!   no thread running.
//! - **Stop**: [`Worker::stop`] asks, wakes and waits up to a bound; a thread that does not end
//!   in time (a job hanging in a GPU driver) is left to end alone, and `stop` says so. No run
//!   starts after `stop` returned `true`. Dropping a running worker is `stop(STOP_WAIT)`.
//! - **Dispatch**: the threads set no default subscriber for their life.
//!   `set_default(NoSubscriber)` registers a dispatcher, which turns every callsite the program's
//!   subscriber enables `always` into `sometimes` (an `enabled` call per span from then on:
//!   `tests/callsite_interest.rs`), and a scoped default held for a thread's life puts every
//!   thread's dispatch on `tracing`'s slower scoped path. Calls into other crates' code that may
//!   trace (a GPU backend) run inside [`silent`] instead, for their duration only. spanprof's
//!   own events (the back-off's warnings, the windows' summaries at `spanprof::perf`) go to the
//!   program's subscriber, on purpose.

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

/// How long dropping a running [`Worker`] waits for its thread to end.
pub(crate) const STOP_WAIT: Duration = Duration::from_secs(1);

/// The periodic work of one background thread.
pub(crate) trait Job: Send + 'static {
    /// Runs once on the thread before the first [`Job::run`] (a slow device discovery, say); a
    /// stop asked meanwhile is seen before that first run.
    fn start(&mut self) {}

    /// The work due at `now`, or earlier when the worker was woken. Returns when to run next;
    /// `None` ends the thread.
    fn run(&mut self, now: Instant) -> Option<Instant>;
}

/// Runs `f` (code of another crate, which may emit `tracing` events: a GPU backend) with no
/// subscriber on this thread, so that spanprof's own work never lands in the program's profile
/// or logs. `Dispatch::none()` is not a registered dispatcher: the program's callsites keep
/// their interest, and the dispatcher's scoped path is taken only while `f` runs (see the
/// module's docs).
pub(crate) fn silent<R>(f: impl FnOnce() -> R) -> R {
    tracing::dispatcher::with_default(&tracing::Dispatch::none(), f)
}

/// Stop request, wake-up and exit notice, shared by the thread, its [`Worker`] and [`Waker`]s.
#[derive(Debug, Default)]
struct Control {
    stop: AtomicBool,
    woken: AtomicBool,
    state: Mutex<State>,
    cv: Condvar,
}

#[derive(Debug, Default)]
struct State {
    /// The job's first run returned.
    ran: bool,
    /// The thread ended, normally or by a panic.
    done: bool,
}

impl Control {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set(&self, f: impl FnOnce(&mut State)) {
        f(&mut self.lock());
        self.cv.notify_all();
    }

    /// Waits until `until` holds or `timeout` passed; returns whether it holds.
    fn wait(&self, timeout: Duration, until: impl Fn(&State) -> bool) -> bool {
        // `None`: a timeout too large to represent, i.e. none.
        let deadline = Instant::now().checked_add(timeout);
        let mut state = self.lock();
        while !until(&state) {
            let left = match deadline {
                None => Duration::from_secs(3600),
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => left,
                    _ => return false,
                },
            };
            state = self
                .cv
                .wait_timeout(state, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }
}

/// Marks the thread done when it ends, normally or by a panic.
struct Done(Arc<Control>);

impl Drop for Done {
    fn drop(&mut self) {
        self.0.set(|s| s.done = true);
    }
}

/// Wakes a worker: its job runs at once. An atomic store and an unpark (no lock): the step
/// span's close calls it on the program's thread.
#[derive(Debug, Clone)]
pub(crate) struct Waker {
    control: Arc<Control>,
    thread: Thread,
}

impl Waker {
    pub(crate) fn wake(&self) {
        self.control.woken.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

/// A claim on spanprof's background threads, held by whatever reads what they produce (the
/// layers and the profile's handles): a worker started with its [`WeakUse`] ends once every
/// clone is dropped.
#[derive(Debug, Clone)]
pub(crate) struct Use(Arc<Uses>);

/// A [`Use`] that keeps no thread running (the guard's: a leaked guard must not).
#[derive(Debug, Clone, Default)]
pub(crate) struct WeakUse(Weak<Uses>);

/// The workers to wake when the last [`Use`] goes.
#[derive(Debug, Default)]
struct Uses {
    workers: Mutex<Vec<Waker>>,
}

impl Drop for Uses {
    fn drop(&mut self) {
        let workers = self.workers.get_mut().unwrap_or_else(|e| e.into_inner());
        for worker in workers.drain(..) {
            worker.wake();
        }
    }
}

impl Use {
    pub(crate) fn new() -> Self {
        Self(Arc::default())
    }

    /// A reference that keeps no thread running, to make new uses from while one lives.
    pub(crate) fn downgrade(&self) -> WeakUse {
        WeakUse(Arc::downgrade(&self.0))
    }
}

impl WeakUse {
    /// A new use while some other one lives; `None` once none does (the workers end for good).
    pub(crate) fn upgrade(&self) -> Option<Use> {
        self.0.upgrade().map(Use)
    }

    fn alive(&self) -> bool {
        self.0.strong_count() > 0
    }

    /// Wakes `worker` when the last use goes (at once if it is gone already).
    fn watch(&self, worker: Waker) {
        match self.0.upgrade() {
            Some(uses) => uses
                .workers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(worker),
            None => worker.wake(),
        }
    }
}

/// A running background thread and its [`Job`]; see the module's docs.
pub(crate) struct Worker<J> {
    control: Arc<Control>,
    thread: Thread,
    end: End<J>,
}

/// Where a worker's thread is.
enum End<J> {
    Running(JoinHandle<J>),
    /// Ended and joined: its job back, as the thread left it (`None` if it panicked).
    Ended(Option<J>),
    /// Did not end within a wait: left to end alone.
    Left,
}

impl<J> fmt::Debug for Worker<J> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker")
            .field("thread", &self.thread.name())
            .finish_non_exhaustive()
    }
}

impl<J: Job> Worker<J> {
    /// Starts the thread `name`, which runs `job` first at `first`. With `uses`, it also ends
    /// once no [`Use`] lives (woken by the last one).
    ///
    /// # Errors
    /// The thread could not be spawned.
    pub(crate) fn start(
        name: &str,
        job: J,
        first: Instant,
        uses: Option<&WeakUse>,
    ) -> io::Result<Self> {
        let control = Arc::new(Control::default());
        let handle = {
            let (control, uses) = (control.clone(), uses.cloned());
            std::thread::Builder::new()
                .name(name.to_string())
                .spawn(move || run(job, first, control, uses))?
        };
        let worker = Self {
            control,
            thread: handle.thread().clone(),
            end: End::Running(handle),
        };
        if let Some(uses) = uses {
            uses.watch(worker.waker());
        }
        Ok(worker)
    }
}

/// The thread's loop.
fn run<J: Job>(mut job: J, mut next: Instant, control: Arc<Control>, uses: Option<WeakUse>) -> J {
    let _done = Done(control.clone());
    job.start();
    let mut ran = false;
    loop {
        if control.stop.load(Ordering::Acquire) || uses.as_ref().is_some_and(|u| !u.alive()) {
            return job;
        }
        // Cleared before the run: a wake during it runs the job again.
        let woken = control.woken.swap(false, Ordering::Acquire);
        let now = Instant::now();
        if !woken && now < next {
            // Woken early by `stop`, a `Waker` or spuriously: the loop looks again.
            std::thread::park_timeout(next - now);
            continue;
        }
        match job.run(now) {
            Some(at) => next = at,
            None => return job,
        }
        if !ran {
            ran = true;
            control.set(|s| s.ran = true);
        }
    }
}

impl<J> Worker<J> {
    /// A waker for this worker, to keep (the step span's signal).
    pub(crate) fn waker(&self) -> Waker {
        Waker {
            control: self.control.clone(),
            thread: self.thread.clone(),
        }
    }

    /// Runs the job at once (a no-op once the thread ended).
    pub(crate) fn wake(&self) {
        self.waker().wake();
    }

    /// Waits up to `timeout` for the job's first run to return; returns whether it did.
    pub(crate) fn wait_first_run(&self, timeout: Duration) -> bool {
        self.control.wait(timeout, |s| s.ran || s.done);
        self.control.lock().ran
    }

    /// Whether the thread ended (its job returned `None`, what it works on is gone, or it was
    /// stopped or panicked).
    #[cfg(test)]
    pub(crate) fn ended(&self) -> bool {
        self.control.lock().done
    }

    /// Stops the thread: asks it, wakes it and waits up to `timeout`. Returns `true` if it ended
    /// in time; if not (its job hanging), it is left to end alone (it runs the job no more) and
    /// `false` returned, now and at every later call.
    pub(crate) fn stop(&mut self, timeout: Duration) -> bool {
        self.control.stop.store(true, Ordering::Release);
        self.thread.unpark();
        self.wait(timeout)
    }

    /// Waits up to `timeout` for the thread to end by itself (or after [`Worker::stop`]), then
    /// joins it: see [`Worker::take_job`]. One that does not end in time is left to end alone,
    /// and `false` returned, now and at every later call.
    pub(crate) fn wait(&mut self, timeout: Duration) -> bool {
        match self.end {
            End::Ended(_) => return true,
            End::Left => return false,
            End::Running(_) => {}
        }
        if std::thread::current().id() == self.thread.id() {
            // The worker dropped on its own thread (the last reference to what owns it went
            // there): it cannot wait for itself; the thread ends when its run returns.
            return false;
        }
        let ended = self.control.wait(timeout, |s| s.done);
        if let End::Running(handle) = std::mem::replace(&mut self.end, End::Left) {
            if ended {
                // `done` is set by the thread's last destructor: the join is immediate. A panic
                // in the job was already reported by the panic hook.
                self.end = End::Ended(handle.join().ok());
            }
            // Else the handle is dropped: the thread is detached.
        }
        ended
    }

    /// The job, as the thread left it, once [`Worker::wait`] or [`Worker::stop`] saw it end
    /// (`None` before, after a panic, or once taken).
    pub(crate) fn take_job(&mut self) -> Option<J> {
        match &mut self.end {
            End::Ended(job) => job.take(),
            _ => None,
        }
    }
}

impl<J> Drop for Worker<J> {
    fn drop(&mut self) {
        if matches!(self.end, End::Running(_)) {
            self.stop(STOP_WAIT);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    /// Counts its runs; runs every `period`; hangs in a run while `gate` is closed.
    struct Counter {
        /// Runs begun, and returned.
        entered: Arc<AtomicU64>,
        runs: Arc<AtomicU64>,
        period: Duration,
        gate: Arc<(Mutex<bool>, Condvar)>,
        /// Ends the thread at this many runs.
        last: Option<u64>,
    }

    impl Job for Counter {
        fn run(&mut self, now: Instant) -> Option<Instant> {
            self.entered.fetch_add(1, Ordering::Relaxed);
            let (open, cv) = &*self.gate;
            let mut open = open.lock().unwrap();
            while !*open {
                open = cv.wait(open).unwrap();
            }
            let runs = self.runs.fetch_add(1, Ordering::Relaxed) + 1;
            (self.last != Some(runs)).then(|| now + self.period)
        }
    }

    fn counter(period: Duration, open: bool) -> (Counter, Arc<AtomicU64>) {
        let runs = Arc::new(AtomicU64::new(0));
        let job = Counter {
            entered: Arc::default(),
            runs: runs.clone(),
            period,
            gate: Arc::new((Mutex::new(open), Condvar::new())),
            last: None,
        };
        (job, runs)
    }

    fn eventually(what: &str, f: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !f() {
            assert!(Instant::now() < deadline, "{what}: not within 10 s");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn runs_at_its_period_and_at_once_when_woken_and_stops_promptly() {
        let (job, runs) = counter(Duration::from_secs(3600), true);
        let mut worker = Worker::start("spanprof-test", job, Instant::now(), None).unwrap();
        assert_eq!(worker.thread.name(), Some("spanprof-test"));
        assert!(worker.wait_first_run(Duration::from_secs(10)));
        assert_eq!(runs.load(Ordering::Relaxed), 1);
        // The next run is an hour away: a wake runs it now.
        worker.wake();
        eventually("the woken run", || runs.load(Ordering::Relaxed) == 2);
        let t = Instant::now();
        assert!(worker.stop(Duration::from_secs(5)));
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        assert!(worker.ended());
        // Final: no run after `stop` returned, and a wake does nothing.
        worker.wake();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(runs.load(Ordering::Relaxed), 2);
        assert!(worker.take_job().is_some());
        assert!(worker.stop(Duration::ZERO), "stopped already");
    }

    /// The one bounded-stop test: a job that hangs. `stop` returns after its bound and says so;
    /// the thread, left alone, ends by itself once the job returns, without running it again.
    #[test]
    fn stop_of_a_hanging_job_returns_within_its_bound_and_says_so() {
        let (job, runs) = counter(Duration::from_millis(1), false);
        let (gate, entered) = (job.gate.clone(), job.entered.clone());
        let mut worker = Worker::start("spanprof-test", job, Instant::now(), None).unwrap();
        eventually("the run that hangs", || {
            entered.load(Ordering::Relaxed) == 1
        });
        let t = Instant::now();
        assert!(!worker.stop(Duration::from_millis(100)));
        let took = t.elapsed();
        assert!(
            took >= Duration::from_millis(100) && took < Duration::from_secs(2),
            "{took:?}"
        );
        assert!(
            !worker.stop(Duration::from_secs(1)),
            "left alone: still says so"
        );
        assert!(worker.take_job().is_none());
        *gate.0.lock().unwrap() = true;
        gate.1.notify_all();
        eventually("the detached thread's end", || worker.ended());
        assert_eq!(runs.load(Ordering::Relaxed), 1, "no run after the stop");
        // Dropping a worker left alone waits for nothing.
        let t = Instant::now();
        drop(worker);
        assert!(t.elapsed() < Duration::from_millis(500));
    }

    /// The thread holds only a `WeakUse`: once the last use is dropped it is woken and ends (not
    /// at its next run, an hour away). While a use lives, it runs.
    #[test]
    fn ends_when_the_last_use_is_dropped() {
        let (job, runs) = counter(Duration::from_secs(3600), true);
        let first = Use::new();
        let weak = first.downgrade();
        let mut worker = Worker::start("spanprof-test", job, Instant::now(), Some(&weak)).unwrap();
        assert!(worker.wait_first_run(Duration::from_secs(10)));
        let second = weak.upgrade().unwrap();
        drop(first);
        std::thread::sleep(Duration::from_millis(20));
        assert!(!worker.ended(), "a use lives");
        drop(second);
        eventually("the end without uses", || worker.ended());
        assert!(weak.upgrade().is_none());
        assert_eq!(runs.load(Ordering::Relaxed), 1);
        assert!(worker.stop(Duration::from_secs(1)));
        // Started with no use left: it ends at once, without running.
        let (job, runs) = counter(Duration::from_millis(1), true);
        let mut late = Worker::start("spanprof-test", job, Instant::now(), Some(&weak)).unwrap();
        assert!(late.wait(Duration::from_secs(10)));
        assert!(!late.wait_first_run(Duration::ZERO));
        assert_eq!(runs.load(Ordering::Relaxed), 0);
    }

    /// A job that returns `None` ends its thread; its state comes back.
    #[test]
    fn a_job_ends_its_thread_and_comes_back() {
        let (mut job, runs) = counter(Duration::ZERO, true);
        job.last = Some(3);
        let mut worker = Worker::start("spanprof-test", job, Instant::now(), None).unwrap();
        assert!(worker.wait(Duration::from_secs(10)));
        assert_eq!(runs.load(Ordering::Relaxed), 3);
        let job = worker.take_job().unwrap();
        assert_eq!(job.last, Some(3));
        assert!(worker.take_job().is_none());
    }

    /// Dropped on its own thread (what owns it dropped there), a worker does not wait for itself.
    #[test]
    fn dropped_on_its_own_thread_it_does_not_wait_for_itself() {
        struct Own(Arc<Mutex<Option<Worker<Own>>>>);
        impl Job for Own {
            fn run(&mut self, _: Instant) -> Option<Instant> {
                let worker = self.0.lock().unwrap().take();
                drop(worker);
                None
            }
        }
        let slot = Arc::new(Mutex::new(None));
        let worker = Worker::start(
            "spanprof-test",
            Own(slot.clone()),
            Instant::now() + Duration::from_millis(20),
            None,
        )
        .unwrap();
        let control = worker.control.clone();
        *slot.lock().unwrap() = Some(worker);
        assert!(control.wait(Duration::from_secs(10), |s| s.done));
    }
}

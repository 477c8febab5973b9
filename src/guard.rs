//! The guard that ends a profiling session, and cloneable handles for reading it.

use std::fmt;
use std::io::Write;
use std::sync::Arc;

use crate::error::Result;
use crate::output::Outputs;
use crate::profile::Snapshot;
use crate::samplers::{SamplerUse, WeakSamplerUse};
use crate::session::{ProfileSession, Tell};
use crate::switches::Resources;

/// A cloneable, cheap handle to read a running profile from anywhere.
///
/// While a handle lives, the sampler thread keeps sampling (as it does while a layer lives), so
/// that its snapshots and [`finish`](ProfileHandle::finish) have resource figures up to date.
#[derive(Clone)]
pub struct ProfileHandle {
    session: Arc<ProfileSession>,
    /// Keeps the sampler thread running. `None` in the guard's own handle: a leaked guard must
    /// not keep it sampling. Only held, for what dropping it means.
    _sampler_use: Option<SamplerUse>,
}

impl fmt::Debug for ProfileHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProfileHandle").finish_non_exhaustive()
    }
}

impl ProfileHandle {
    pub(crate) fn new(session: Arc<ProfileSession>) -> Self {
        Self {
            session,
            _sampler_use: None,
        }
    }

    /// Everything recorded so far. Recording goes on; spans still open are counted in `open`
    /// and their completed entries are included.
    pub fn snapshot(&self) -> Snapshot {
        self.session.snapshot()
    }

    /// The statistics since the previous interval: what was recorded between the previous call
    /// and this one (since the start for the first call), exactly — histogram differences, see
    /// [`Snapshot::since`]. Cumulative totals are not reset: [`snapshot`](Self::snapshot) and
    /// the outputs still see the whole run.
    ///
    /// The previous interval's end is kept once per profiling session, not per handle: every
    /// handle (and the guard) of a session shares it, so the intervals returned to all callers
    /// follow one another without gap or overlap, and their counts add up to the total exactly.
    /// Concurrent callers are served one after the other.
    ///
    /// `calls`, `created` and `instances` add up exactly whatever the timing (they come from
    /// counters that never go down). Histograms and totals add up exactly between snapshots
    /// taken while no span of the name closes; a snapshot taken while one closes may count that
    /// span's first entry both as open and as closed, one sample more in its entry histograms
    /// until the next snapshot. The export cadence
    /// ([`Builder::with_every`](crate::Builder::with_every)) keeps its own windows and does not
    /// move this one.
    ///
    /// ```
    /// # use tracing_subscriber::prelude::*;
    /// let (layer, guard) = spanprof::ProfileLayer::builder()
    ///     .with_env(false)
    ///     .with_report(spanprof::ReportTarget::Off)
    ///     .build()?;
    /// let handle = guard.handle();
    /// tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
    ///     for _ in 0..3 {
    ///         tracing::info_span!("step").in_scope(|| {});
    ///     }
    ///     assert_eq!(handle.interval_snapshot().span("step").unwrap().calls, 3);
    ///     tracing::info_span!("step").in_scope(|| {});
    ///     assert_eq!(handle.interval_snapshot().span("step").unwrap().calls, 1);
    /// });
    /// assert_eq!(handle.snapshot().span("step").unwrap().calls, 4);
    /// # Ok::<(), spanprof::Error>(())
    /// ```
    pub fn interval_snapshot(&self) -> Snapshot {
        self.session.interval_snapshot()
    }

    /// The console report of a fresh snapshot, as configured (top rows).
    pub fn render_report(&self) -> String {
        self.session.table().to_string(&self.snapshot())
    }

    /// Writes the console report of a fresh snapshot to `out`.
    ///
    /// # Errors
    /// The writer's errors.
    pub fn render_report_to(&self, out: &mut impl Write) -> std::io::Result<()> {
        out.write_all(self.render_report().as_bytes())
    }

    /// Starts the `/metrics` endpoint on `listener` (see [`crate::http`]).
    #[cfg(feature = "http")]
    pub(crate) fn serve_metrics(&self, listener: crate::http::Listener) {
        ProfileSession::serve_metrics(&self.session, listener);
    }

    /// The address the Prometheus `/metrics` endpoint is bound to (the port chosen where port 0
    /// was asked for), while it serves: `None` without
    /// [`Builder::with_metrics_addr`](crate::Builder::with_metrics_addr) or
    /// `SPANPROF_METRICS_ADDR`, and once the profile has finished (feature `http`).
    #[cfg(feature = "http")]
    pub fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        self.session.metrics_addr()
    }

    /// The resources recorded per span now.
    pub fn resources(&self) -> Resources {
        self.session.resources()
    }

    /// Switches resources per span on or off while the program runs, e.g. to step detail down
    /// in a long run. Only resources the profile was built with can be on (the sampler thread
    /// samples only those); figures already recorded are kept. Returns the set now in effect.
    ///
    /// Spans entered or opened before the change keep the readings they started with.
    pub fn set_resources(&self, resources: Resources) -> Resources {
        self.session.set_resources(resources)
    }

    /// Stops recording and the sampler, finishes the Chrome traces, writes the report and the
    /// outputs: what the guard does when it drops, and the Ctrl-C handler before it exits.
    /// Only the first call writes; later ones return what it wrote.
    ///
    /// Then a few lines name every file written, the HTML report first: the report's last
    /// lines where it goes to stderr or stdout, on stderr otherwise. A run that recorded
    /// nothing (no span, no metric) writes nothing, so that the files of an earlier run stay
    /// as they are, and says so in one line naming the filters in force (`RUST_LOG`,
    /// `SPANPROF_FILTER`). A span filter directive whose target matches no callsite's target
    /// but is a span's name gets a line suggesting `[name]`.
    ///
    /// # Errors
    /// The error of the one output that failed ([`Error::Io`](crate::Error::Io) naming its
    /// file), or [`Error::Outputs`](crate::Error::Outputs) with each error when several did.
    /// Every output is attempted even if an earlier one failed.
    pub fn finish(&self) -> Result<Outputs> {
        self.session.finish(Tell::Log)
    }

    /// Installs a handler for the signals that end a program — `SIGINT` (Ctrl-C), `SIGTERM`
    /// (what `kill`, systemd, Kubernetes and job schedulers send) and `SIGHUP` (the terminal
    /// closed) on Unix; Ctrl-C, Ctrl-Break and closing the console on Windows — that does what
    /// the guard does when it drops: finishes the open trace window, prints the report, writes
    /// the outputs. It then says so on stderr and exits the process with 128 + the signal's
    /// number, what shells report for a program the signal ended: 130 for `SIGINT`
    /// ([`CTRLC_EXIT_CODE`](crate::CTRLC_EXIT_CODE)), 143 for `SIGTERM`, 129 for `SIGHUP` (130
    /// for every event on Windows). An interrupted or killed run keeps its profile and complete
    /// traces; `SIGKILL` cannot be caught. On Unix, a second signal while the outputs are being
    /// finished (one that does not finish: a stuck disk, a collector that does not answer)
    /// exits at once, with the second signal's status: the files not yet written keep their
    /// previous version.
    ///
    /// On Unix, a signal is taken over only while it has its default action:
    ///
    /// - a signal the program was started with ignored stays ignored: a job started with `&`
    ///   from a non-interactive shell script ignores `SIGINT`, one started with `nohup` ignores
    ///   `SIGHUP`. Its parent meant it to survive that signal, so spanprof does not make it
    ///   react to it; the other signals are still handled. Skipping `SIGINT` or `SIGTERM` is
    ///   logged once at [`PERF_TARGET`](crate::PERF_TARGET) (`spanprof::perf`), with the reason;
    /// - `SIGTERM` or `SIGHUP` already handled by the program (or another crate) is left to that
    ///   handler: call [`finish`](ProfileHandle::finish) from it.
    ///
    /// One thread named `spanprof-signal` waits for the signals (on Windows, the [`ctrlc`]
    /// crate's thread named `ctrl-c`). Its handler calls `finish` and exits even if finishing
    /// fails or panics.
    ///
    /// # Errors
    /// [`Error::CtrlC`](crate::Error::CtrlC) if a handler for `SIGINT` (Ctrl-C on Windows) is
    /// already installed — by an earlier call, by another crate, or by the program itself:
    /// spanprof does not replace it. Never for signals that are ignored.
    #[cfg(feature = "ctrlc")]
    pub fn install_signal_handler(&self) -> Result<()> {
        let handle = self.clone();
        signals::install(move |signal| {
            // Everything the guard would write: traces, report, profile.
            let finished =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handle.finish()));
            let what = signals::describe(signal);
            // Not `eprintln!`: stderr may be gone (a closed terminal) and the process must exit.
            let mut err = std::io::stderr().lock();
            let _ = match finished {
                Ok(Ok(outputs)) => writeln!(
                    err,
                    "spanprof: {what}; {} trace file(s) complete{}",
                    outputs.traces.len(),
                    outputs
                        .profile()
                        .map(|p| format!(", profile in {}", p.display()))
                        .unwrap_or_default()
                ),
                Ok(Err(e)) => writeln!(err, "spanprof: {what}; {e}"),
                Err(_) => writeln!(err, "spanprof: {what}; finishing the outputs panicked"),
            };
            drop(err);
            std::process::exit(signals::exit_code(signal));
        })
    }

    /// The same as [`install_signal_handler`](ProfileHandle::install_signal_handler), under its
    /// earlier name: it handles `SIGTERM` and `SIGHUP` too, not only Ctrl-C.
    #[cfg(feature = "ctrlc")]
    pub fn install_ctrlc_handler(&self) -> Result<()> {
        self.install_signal_handler()
    }
}

/// The signal handling behind [`ProfileHandle::install_signal_handler`] on Unix: a handler that
/// writes the signal's number to a pipe, and a thread that reads it and runs the callback.
#[cfg(all(feature = "ctrlc", unix))]
#[allow(unsafe_code)]
mod signals {
    use std::fs::File;
    use std::io::{self, Read};
    use std::os::fd::FromRawFd;
    use std::os::raw::c_int;
    use std::sync::atomic::{AtomicI32, Ordering::Relaxed};
    use std::sync::Mutex;

    use crate::error::{Error, Result};
    use crate::PERF_TARGET;

    /// The signals handled, with their names, `SIGINT` first.
    const SIGNALS: [(c_int, &str); 3] = [
        (libc::SIGINT, "SIGINT"),
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGHUP, "SIGHUP"),
    ];

    /// The pipe's write end, for the signal handler (-1 before installation).
    static WRITE_FD: AtomicI32 = AtomicI32::new(-1);
    /// Whether the handler was installed (one per process).
    static INSTALLED: Mutex<bool> = Mutex::new(false);

    /// What a signal does before spanprof installs anything.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(super) enum Disposition {
        Default,
        Ignored,
        Handled,
    }

    /// What [`install`] does with each signal.
    #[derive(Debug, Default)]
    pub(super) struct Plan {
        /// The signals to take over.
        take: Vec<c_int>,
        /// The names of the others, and why each is left alone.
        skip: Vec<(&'static str, &'static str)>,
    }

    /// The plan, given each signal's disposition (in [`SIGNALS`] order). `None` if `SIGINT`
    /// already has a handler.
    pub(super) fn plan(dispositions: [Disposition; 3]) -> Option<Plan> {
        if dispositions[0] == Disposition::Handled {
            return None;
        }
        let mut take = Vec::new();
        let mut skip = Vec::new();
        for ((signal, name), d) in SIGNALS.into_iter().zip(dispositions) {
            match d {
                Disposition::Default => take.push(signal),
                Disposition::Ignored => skip.push((
                    name,
                    "the program was started with it ignored (e.g. run with `&` from a \
                     non-interactive shell script, or with `nohup`); left ignored",
                )),
                Disposition::Handled => {
                    skip.push((name, "the program already handles it; left to its handler"))
                }
            }
        }
        Some(Plan { take, skip })
    }

    fn disposition(signal: c_int) -> io::Result<Disposition> {
        // SAFETY: an all-zero `sigaction` is a valid value to be overwritten; a null new action
        // makes `sigaction` only read the current one.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        if unsafe { libc::sigaction(signal, std::ptr::null(), &mut old) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(match old.sa_sigaction {
            libc::SIG_DFL => Disposition::Default,
            libc::SIG_IGN => Disposition::Ignored,
            _ => Disposition::Handled,
        })
    }

    /// The signal handler: only async-signal-safe calls (an atomic load and `write`).
    extern "C" fn on_signal(signal: c_int) {
        let saved = io::Error::last_os_error().raw_os_error();
        let byte = signal as u8;
        // SAFETY: `write` of one byte from a live stack variable; a bad or full (non-blocking)
        // pipe only makes it fail, which is ignored.
        unsafe {
            libc::write(WRITE_FD.load(Relaxed), (&byte as *const u8).cast(), 1);
        }
        if let Some(errno) = saved {
            set_errno(errno);
        }
    }

    /// Restores `errno` for the code the signal interrupted.
    fn set_errno(errno: c_int) {
        // SAFETY: the calling thread's errno location is always valid.
        #[cfg(any(target_os = "linux", target_os = "android", target_os = "emscripten"))]
        unsafe {
            *libc::__errno_location() = errno;
        }
        #[cfg(any(target_vendor = "apple", target_os = "freebsd"))]
        unsafe {
            *libc::__error() = errno;
        }
        #[cfg(not(any(
            target_os = "linux",
            target_os = "android",
            target_os = "emscripten",
            target_vendor = "apple",
            target_os = "freebsd"
        )))]
        let _ = errno;
    }

    /// A pipe, both ends close-on-exec, the write end non-blocking.
    fn pipe() -> io::Result<(c_int, c_int)> {
        let mut fds = [0 as c_int; 2];
        // SAFETY: `fds` has room for the two descriptors; `fcntl` on descriptors just created.
        unsafe {
            if libc::pipe(fds.as_mut_ptr()) != 0 {
                return Err(io::Error::last_os_error());
            }
            for fd in fds {
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            }
            let flags = libc::fcntl(fds[1], libc::F_GETFL);
            libc::fcntl(fds[1], libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
        Ok((fds[0], fds[1]))
    }

    fn system(e: io::Error) -> Error {
        Error::CtrlC {
            source: ctrlc::Error::System(e),
        }
    }

    /// Installs the handler for every signal [`plan`] takes; `callback` runs once, on the
    /// `spanprof-signal` thread, with the first signal received.
    pub(super) fn install(callback: impl FnOnce(c_int) + Send + 'static) -> Result<()> {
        let mut installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
        if *installed {
            return Err(Error::CtrlC {
                source: ctrlc::Error::MultipleHandlers,
            });
        }
        let mut dispositions = [Disposition::Default; 3];
        for (d, (signal, _)) in dispositions.iter_mut().zip(SIGNALS) {
            *d = disposition(signal).map_err(system)?;
        }
        let Plan { take, skip } = plan(dispositions).ok_or(Error::CtrlC {
            source: ctrlc::Error::MultipleHandlers,
        })?;
        for (name, why) in &skip {
            if *name == "SIGHUP" {
                tracing::debug!(target: PERF_TARGET, signal = name, "spanprof does not handle {name}: {why}");
            } else {
                tracing::warn!(target: PERF_TARGET, signal = name, "spanprof does not handle {name}: {why}");
            }
        }
        if take.is_empty() {
            return Ok(());
        }
        let (read_fd, write_fd) = pipe().map_err(system)?;
        // SAFETY: `read_fd` was just created and is owned by this `File` alone.
        let mut reader = unsafe { File::from_raw_fd(read_fd) };
        let spawned = std::thread::Builder::new()
            .name("spanprof-signal".to_string())
            .spawn(move || {
                let Some(first) = next_signal(&mut reader) else {
                    return;
                };
                // A second signal while the outputs are being finished (a render, a collector,
                // a disk that does not answer): the user insists, the process exits at once.
                // Files being written keep their previous version (written atomically).
                let again = std::thread::Builder::new()
                    .name("spanprof-signal".to_string())
                    .spawn(move || {
                        if let Some(signal) = next_signal(&mut reader) {
                            use std::io::Write;
                            let _ = writeln!(
                                io::stderr().lock(),
                                "spanprof: {} again; exiting without waiting for the outputs",
                                describe(signal)
                            );
                            std::process::exit(exit_code(signal));
                        }
                    });
                drop(again);
                callback(first);
            });
        if let Err(e) = spawned {
            // SAFETY: closing the write end nobody else knows of.
            unsafe { libc::close(write_fd) };
            return Err(system(e));
        }
        WRITE_FD.store(write_fd, Relaxed);
        *installed = true;
        for signal in take {
            // SAFETY: an all-zero `sigaction` with a handler, flags and an emptied mask is a
            // valid action; `on_signal` is async-signal-safe.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_signal as extern "C" fn(c_int) as libc::sighandler_t;
                action.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut action.sa_mask);
                if libc::sigaction(signal, &action, std::ptr::null_mut()) != 0 {
                    let e = io::Error::last_os_error();
                    tracing::warn!(target: PERF_TARGET, signal, error = %e, "spanprof could not install its signal handler");
                }
            }
        }
        Ok(())
    }

    /// The next signal written to the pipe; `None` if it cannot be read.
    fn next_signal(reader: &mut File) -> Option<c_int> {
        let mut byte = [0u8];
        loop {
            match reader.read(&mut byte) {
                Ok(1) => return Some(c_int::from(byte[0])),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // The write end is never closed: not reached.
                _ => return None,
            }
        }
    }

    /// What happened, for the message on stderr.
    pub(super) fn describe(signal: c_int) -> String {
        match SIGNALS.iter().find(|(s, _)| *s == signal) {
            Some((s, name)) if *s == libc::SIGINT => format!("interrupted ({name})"),
            Some((_, name)) => format!("terminated ({name})"),
            None => format!("terminated (signal {signal})"),
        }
    }

    /// 128 + the signal's number, as shells report a process the signal ended.
    pub(super) fn exit_code(signal: c_int) -> i32 {
        128 + signal
    }

    #[cfg(test)]
    mod tests {
        use super::Disposition::{Default as D, Handled as H, Ignored as I};
        use super::*;

        #[test]
        fn plan_takes_default_signals_and_leaves_the_others() {
            let Plan { take, skip } = plan([D, D, D]).unwrap();
            assert_eq!(take, [libc::SIGINT, libc::SIGTERM, libc::SIGHUP]);
            assert!(skip.is_empty());
            // `&` in a script: SIGINT ignored; nohup: SIGHUP ignored; SIGTERM handled elsewhere.
            let Plan { take, skip } = plan([I, H, I]).unwrap();
            assert!(take.is_empty());
            let names: Vec<_> = skip.iter().map(|(n, _)| *n).collect();
            assert_eq!(names, ["SIGINT", "SIGTERM", "SIGHUP"]);
            assert!(skip[0].1.contains("ignored"), "{}", skip[0].1);
            let take = plan([I, D, D]).unwrap().take;
            assert_eq!(take, [libc::SIGTERM, libc::SIGHUP]);
            // A SIGINT handler of someone else's: an error, as before.
            assert!(plan([H, D, D]).is_none());
        }

        #[test]
        fn exit_codes_and_messages() {
            assert_eq!(exit_code(libc::SIGINT), crate::CTRLC_EXIT_CODE);
            assert_eq!(exit_code(libc::SIGTERM), 143);
            assert_eq!(exit_code(libc::SIGHUP), 129);
            assert_eq!(describe(libc::SIGINT), "interrupted (SIGINT)");
            assert_eq!(describe(libc::SIGTERM), "terminated (SIGTERM)");
        }
    }
}

/// The signal handling behind [`ProfileHandle::install_signal_handler`] elsewhere (Windows):
/// the [`ctrlc`] crate, whose handler does not say which event came.
#[cfg(all(feature = "ctrlc", not(unix)))]
mod signals {
    use crate::error::{Error, Result};

    pub(super) fn install(callback: impl FnOnce(i32) + Send + 'static) -> Result<()> {
        let mut callback = Some(callback);
        ctrlc::try_set_handler(move || {
            if let Some(callback) = callback.take() {
                callback(0);
            }
        })
        .map_err(|source| Error::CtrlC { source })
    }

    pub(super) fn describe(_: i32) -> String {
        "interrupted".to_string()
    }

    pub(super) fn exit_code(_: i32) -> i32 {
        crate::CTRLC_EXIT_CODE
    }
}

#[cfg(feature = "chrome")]
impl ProfileHandle {
    /// The chrome tracing layer, to add to the same registry as the
    /// [`ProfileLayer`](crate::ProfileLayer); see [`ProfileGuard::chrome_layer`].
    pub fn chrome_layer<S>(&self) -> Option<crate::chrome::ChromeTraceLayer<S>>
    where
        S: tracing_core::Subscriber
            + for<'a> tracing_subscriber::registry::LookupSpan<'a>
            + Send
            + Sync,
    {
        self.session.chrome()?.layer()
    }

    #[cfg(test)]
    pub(crate) fn chrome_session(&self) -> Option<Arc<crate::chrome::Session>> {
        self.session.chrome().cloned()
    }

    /// The trace files completed so far (a window's file is listed once tracing-chrome has
    /// closed it and spanprof has added its counters).
    pub fn chrome_traces(&self) -> Vec<std::path::PathBuf> {
        self.session
            .chrome()
            .map(|c| c.written())
            .unwrap_or_default()
    }

    /// Finishes the open trace window and stops tracing for good, waiting until every trace file
    /// is complete; returns them all. The guard does this when it drops; call it yourself from
    /// your own signal handling. Further calls return the same files.
    ///
    /// # Errors
    /// [`Error::Io`](crate::Error::Io) naming the trace file that could not be written or
    /// completed, or [`Error::Outputs`](crate::Error::Outputs) with one error per such window;
    /// an `Error::Io` of kind `TimedOut` naming the windows not completed when writing them
    /// took longer than the bound (see [`crate::chrome`]).
    pub fn finish_chrome(&self) -> Result<Vec<std::path::PathBuf>> {
        match self.session.chrome() {
            Some(c) => c.finish(),
            None => Ok(Vec::new()),
        }
    }
}

/// Ends the profiling session when dropped: stops recording, prints the report, writes the
/// configured files and names them (see [`ProfileHandle::finish`]). Errors on drop are told on
/// stderr, one line each, never raised; call [`ProfileGuard::finish`] to get them as a
/// `Result` (it logs them at the `spanprof::perf` target instead).
///
/// Bind it to a named variable: `let _ = ...` drops it at once and ends profiling before
/// anything ran.
///
/// The outputs are written only when the guard drops or [`finish`](ProfileGuard::finish) is
/// called (or by [`ProfileHandle::finish`], or the handler of
/// [`ProfileHandle::install_signal_handler`] on a signal). Nothing is written — no report, no
/// profile, the open trace window left incomplete — if the program ends without that:
/// `std::process::exit` (it runs no destructors: drop or finish the guard before calling it),
/// a signal with no handler installed, an abort, or a guard leaked with `mem::forget` (or kept
/// in a `static`). A leaked guard does not keep the resource sampler thread running: it stops
/// once the layers and every [`ProfileHandle`] are dropped.
#[must_use = "dropping the guard ends profiling at once; bind it: `let _guard = ...`"]
pub struct ProfileGuard {
    handle: ProfileHandle,
    finished: bool,
    /// Makes the sampler uses of the handles it gives out, without keeping the thread running.
    sampler: WeakSamplerUse,
}

impl fmt::Debug for ProfileGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProfileGuard")
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}

impl ProfileGuard {
    pub(crate) fn new(handle: ProfileHandle) -> Self {
        Self {
            handle,
            finished: false,
            sampler: WeakSamplerUse::default(),
        }
    }

    /// Gives the guard the sampler's use (from `Sampler::take_use`),
    /// for the handles it gives out; the guard itself keeps only a weak reference to it.
    pub(crate) fn with_sampler_use(mut self, sampler_use: Option<&SamplerUse>) -> Self {
        self.sampler = sampler_use.map(SamplerUse::downgrade).unwrap_or_default();
        self
    }

    /// A handle that outlives nothing: reading it after the guard is gone still works. While
    /// it lives, the resource sampler keeps sampling.
    pub fn handle(&self) -> ProfileHandle {
        ProfileHandle {
            session: self.handle.session.clone(),
            _sampler_use: self.sampler.upgrade(),
        }
    }

    /// Everything recorded so far; see [`ProfileHandle::snapshot`].
    pub fn snapshot(&self) -> Snapshot {
        self.handle.snapshot()
    }

    /// The address of the Prometheus `/metrics` endpoint; see [`ProfileHandle::metrics_addr`].
    #[cfg(feature = "http")]
    pub fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        self.handle.metrics_addr()
    }

    /// The statistics since the previous interval; see [`ProfileHandle::interval_snapshot`].
    pub fn interval_snapshot(&self) -> Snapshot {
        self.handle.interval_snapshot()
    }

    /// Stops recording, writes the report and the outputs, and says where they went.
    ///
    /// # Errors
    /// See [`ProfileHandle::finish`].
    pub fn finish(mut self) -> Result<Outputs> {
        self.finished = true;
        self.handle.finish()
    }

    /// The chrome tracing layer, generic over the subscriber it is added to: `None` without
    /// [`Builder::with_chrome`](crate::Builder::with_chrome), with the `off` preset, and on
    /// every call after the first (a session has one layer). `Option<L>` is a layer itself:
    ///
    /// ```
    /// # use tracing_subscriber::prelude::*;
    /// # let (layer, guard) = spanprof::ProfileLayer::builder().with_env(false)
    /// #     .with_report(spanprof::ReportTarget::Off).build()?;
    /// let subscriber = tracing_subscriber::registry().with(layer);
    /// let subscriber = subscriber.with(guard.chrome_layer()); // None here: no with_chrome
    /// # drop(subscriber);
    /// # Ok::<(), spanprof::Error>(())
    /// ```
    ///
    /// Building it starts tracing-chrome's writer thread. Dropping the guard finishes the open
    /// window and joins that thread.
    #[cfg(feature = "chrome")]
    pub fn chrome_layer<S>(&self) -> Option<crate::chrome::ChromeTraceLayer<S>>
    where
        S: tracing_core::Subscriber
            + for<'a> tracing_subscriber::registry::LookupSpan<'a>
            + Send
            + Sync,
    {
        self.handle.chrome_layer()
    }
}

impl Drop for ProfileGuard {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        // A drop returns nothing, and the program's subscriber may show no warning (the
        // profiling layer alone, as in the quick start): each failed output is one line on
        // stderr. `finish` returns them instead, and logs them at `spanprof::perf`.
        let _ = self.handle.session.finish(Tell::Stderr);
    }
}

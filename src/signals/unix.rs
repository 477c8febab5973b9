//! The Unix mechanism behind `ProfileHandle::install_signal_handler`: a handler that writes the
//! signal's number to a pipe, and a thread that reads it and runs the callbacks.
#![allow(unsafe_code)]

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::FromRawFd;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicI32, Ordering::Relaxed};
use std::sync::Mutex;

use crate::PERF_TARGET;

/// The signals handled, with their names, `SIGINT` first.
const SIGNALS: [(c_int, &str); 3] = [
    (libc::SIGINT, "SIGINT"),
    (libc::SIGTERM, "SIGTERM"),
    (libc::SIGHUP, "SIGHUP"),
];

/// Why installing fails when `SIGINT` has a handler that is not spanprof's.
pub(super) const ALREADY_HANDLED: &str = "SIGINT already has a handler (installed by another \
     crate or the program itself); spanprof does not replace it";

/// The pipe's write end, for the signal handler (-1 before installation).
static WRITE_FD: AtomicI32 = AtomicI32::new(-1);
/// Whether the handler was installed (one per process).
static INSTALLED: Mutex<bool> = Mutex::new(false);

/// What a signal does before spanprof installs anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Disposition {
    Default,
    Ignored,
    Handled,
}

/// What [`install`] does with each signal.
#[derive(Debug, Default)]
struct Plan {
    /// The signals to take over.
    take: Vec<c_int>,
    /// The names of the others, and why each is left alone.
    skip: Vec<(&'static str, &'static str)>,
}

/// The plan, given each signal's disposition (in [`SIGNALS`] order). `None` if `SIGINT`
/// already has a handler.
fn plan(dispositions: [Disposition; 3]) -> Option<Plan> {
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

/// The signal handler: only async-signal-safe calls (an atomic load and `write`); no
/// allocation, no lock.
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

/// Installs the handler for every signal [`plan`] takes. On the `spanprof-signal` thread,
/// `first` runs once with the first signal received; a second signal received while it runs
/// is given to `again`, on a thread of its own (`first` does not return in spanprof's use:
/// it exits).
pub(super) fn install(
    first: impl FnOnce(c_int) + Send + 'static,
    again: impl FnOnce(c_int) + Send + 'static,
) -> io::Result<()> {
    let mut installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    if *installed {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "SIGINT already has a handler (spanprof's, installed by an earlier call)",
        ));
    }
    let mut dispositions = [Disposition::Default; 3];
    for (d, (signal, _)) in dispositions.iter_mut().zip(SIGNALS) {
        *d = disposition(signal)?;
    }
    let Plan { take, skip } = plan(dispositions)
        .ok_or_else(|| io::Error::new(io::ErrorKind::AlreadyExists, ALREADY_HANDLED))?;
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
    let (read_fd, write_fd) = pipe()?;
    // SAFETY: `read_fd` was just created and is owned by this `File` alone.
    let mut reader = unsafe { File::from_raw_fd(read_fd) };
    let spawned = std::thread::Builder::new()
        .name("spanprof-signal".to_string())
        .spawn(move || {
            let Some(signal) = next_signal(&mut reader) else {
                return;
            };
            // The next signal, while `first` runs.
            let waiting = std::thread::Builder::new()
                .name("spanprof-signal".to_string())
                .spawn(move || {
                    if let Some(signal) = next_signal(&mut reader) {
                        again(signal);
                    }
                });
            drop(waiting);
            first(signal);
        });
    if let Err(e) = spawned {
        // SAFETY: closing the write end nobody else knows of.
        unsafe { libc::close(write_fd) };
        return Err(e);
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

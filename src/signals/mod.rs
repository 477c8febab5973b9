//! The signal handler of [`ProfileHandle::install_signal_handler`] (feature `signals`): the
//! signals that end a program finish the profile before the process exits.
//!
//! The mechanism is per platform: on Unix spanprof installs the handler itself (`unix.rs`: the
//! handler writes the signal's number to a pipe, a thread named `spanprof-signal` reads it); on
//! Windows the `ctrlc` crate does (`windows.rs`). What happens then is here, on an ordinary
//! thread: the first signal finishes the outputs and exits; on Unix, a second one while that
//! runs exits at once. Both exits first remove the temporary files of outputs still being
//! written ([`crate::atomic_file::abandon_temporaries`]), so that no `.tmp` or `.partial` file
//! stays behind and every target keeps its previous version.

use std::io::Write;
use std::sync::mpsc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::guard::ProfileHandle;

#[cfg(unix)]
mod unix;
#[cfg(unix)]
use unix as os;
#[cfg(windows)]
mod windows;
#[cfg(windows)]
use windows as os;
#[cfg(not(any(unix, windows)))]
mod unsupported;
#[cfg(not(any(unix, windows)))]
use unsupported as os;

#[cfg_attr(docsrs, doc(cfg(feature = "signals")))]
impl ProfileHandle {
    /// Installs a handler for the signals that end a program — `SIGINT` (Ctrl-C), `SIGTERM`
    /// (what `kill`, systemd, Kubernetes and job schedulers send) and `SIGHUP` (the terminal
    /// closed) on Unix; Ctrl-C, Ctrl-Break and closing the console on Windows — that does what
    /// the guard does when it drops: finishes the open trace window, prints the report, writes
    /// the outputs. It then says so on stderr and exits the process with 128 + the signal's
    /// number, what shells report for a program the signal ended: 130 for `SIGINT`
    /// ([`CTRLC_EXIT_CODE`](crate::CTRLC_EXIT_CODE)), 143 for `SIGTERM`, 129 for `SIGHUP` (130
    /// for every event on Windows). An interrupted or killed run keeps its profile and complete
    /// traces; `SIGKILL` cannot be caught.
    ///
    /// On Unix, a second signal while the outputs are being finished (one that does not
    /// finish: a stuck disk, a collector that does not answer) exits at once, with the second
    /// signal's status. Before it exits, the temporary files of the outputs being written (the
    /// `.<file>.<pid>.<n>.tmp` of every file, the `.partial` of a trace window) are removed,
    /// and no new one is created: the files not yet written keep their previous version, and
    /// nothing else is left beside them. Removing them waits at most one second (a file system
    /// that does not answer); past that, the process exits anyway.
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
    /// The signal handler itself only writes the signal's number to a pipe (it is
    /// async-signal-safe); one thread named `spanprof-signal` reads it and does the work (on
    /// Windows, the `ctrlc` crate's thread named `ctrl-c`). That thread calls `finish` and
    /// exits even if finishing fails or panics.
    ///
    /// # Errors
    /// [`Error::SignalHandler`](crate::Error::SignalHandler), with an I/O error of kind
    /// [`AlreadyExists`](std::io::ErrorKind::AlreadyExists), if a handler for `SIGINT` (Ctrl-C
    /// on Windows) is already installed — by an earlier call, by another crate, or by the
    /// program itself: spanprof does not replace it; with the system's error if a pipe or the
    /// thread cannot be made. Never for signals that are ignored.
    pub fn install_signal_handler(&self) -> Result<()> {
        let handle = self.clone();
        os::install(move |signal| finish_and_exit(&handle, signal), exit_again)
            .map_err(|source| Error::SignalHandler { source })
    }

    /// The same as [`install_signal_handler`](ProfileHandle::install_signal_handler), under its
    /// earlier name: it handles `SIGTERM` and `SIGHUP` too, not only Ctrl-C.
    pub fn install_ctrlc_handler(&self) -> Result<()> {
        self.install_signal_handler()
    }
}

/// The first signal: everything the guard would write (traces, report, profile), said on
/// stderr, then the exit.
fn finish_and_exit(handle: &ProfileHandle, signal: i32) -> ! {
    let finished = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handle.finish()));
    let what = os::describe(signal);
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
    // Finishing gave up on a trace window (its bound) or failed midway: its temporaries go.
    exit(os::exit_code(signal))
}

/// A second signal while the first one's outputs are being finished (a render, a collector, a
/// disk that does not answer): the user insists, the process exits at once.
fn exit_again(signal: i32) {
    let _ = writeln!(
        std::io::stderr().lock(),
        "spanprof: {} again; exiting without waiting for the outputs",
        os::describe(signal)
    );
    exit(os::exit_code(signal))
}

/// How long an exit waits for the temporary files to be removed: an `unlink` on a file system
/// that does not answer must not keep the process alive.
const CLEANUP_WAIT: Duration = Duration::from_secs(1);

/// Exits the process with `code`, after removing the temporary files of outputs still being
/// written (on a thread of its own, waited for at most [`CLEANUP_WAIT`]); no new one can be
/// created meanwhile. The targets keep their previous version.
fn exit(code: i32) -> ! {
    let (done, removed) = mpsc::sync_channel(1);
    let cleaning = std::thread::Builder::new()
        .name("spanprof-exit".to_string())
        .spawn(move || {
            let _ = done.send(crate::atomic_file::abandon_temporaries());
        });
    if cleaning.is_ok() {
        let _ = removed.recv_timeout(CLEANUP_WAIT);
    }
    std::process::exit(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_error_names_the_signal_handler_and_the_cause() {
        let source = std::io::Error::new(std::io::ErrorKind::AlreadyExists, os::ALREADY_HANDLED);
        let e = Error::SignalHandler { source };
        let text = e.to_string();
        assert!(
            text.starts_with("installing the signal handler: "),
            "{text}"
        );
        assert!(text.contains("already has a handler"), "{text}");
        let source = std::error::Error::source(&e).expect("a source");
        let io = source
            .downcast_ref::<std::io::Error>()
            .expect("an io::Error");
        assert_eq!(io.kind(), std::io::ErrorKind::AlreadyExists);
    }
}

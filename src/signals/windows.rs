//! The Windows mechanism behind `ProfileHandle::install_signal_handler`: the `ctrlc` crate
//! (Ctrl-C, Ctrl-Break, closing the console), whose handler does not say which event came. Its
//! thread runs the handler once at a time, so a second event is not seen while the first one's
//! outputs are finished.

use std::io;

/// Why installing fails when Ctrl-C already has a handler.
pub(super) const ALREADY_HANDLED: &str = "Ctrl-C already has a handler (installed by an \
     earlier call, another crate or the program itself); spanprof does not replace it";

/// Installs `first`, run once with the first event; `_again` is never called (see above).
pub(super) fn install(
    first: impl FnOnce(i32) + Send + 'static,
    _again: impl FnOnce(i32) + Send + 'static,
) -> io::Result<()> {
    let mut first = Some(first);
    ctrlc::try_set_handler(move || {
        if let Some(first) = first.take() {
            first(0);
        }
    })
    .map_err(|e| match e {
        ctrlc::Error::MultipleHandlers => {
            io::Error::new(io::ErrorKind::AlreadyExists, ALREADY_HANDLED)
        }
        ctrlc::Error::System(e) => e,
        // The crate's own words; its type stays out of spanprof's error.
        other => io::Error::other(other.to_string()),
    })
}

/// What happened, for the message on stderr.
pub(super) fn describe(_: i32) -> String {
    "interrupted".to_string()
}

pub(super) fn exit_code(_: i32) -> i32 {
    crate::CTRLC_EXIT_CODE
}

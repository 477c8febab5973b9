//! Platforms with neither Unix signals nor Windows console events: installing fails.

use std::io;

/// Why installing fails when the signal already has a handler (never, here).
#[cfg(test)]
pub(super) const ALREADY_HANDLED: &str = "the signal already has a handler";

pub(super) fn install(
    _first: impl FnOnce(i32) + Send + 'static,
    _again: impl FnOnce(i32) + Send + 'static,
) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "no signal handling on this platform",
    ))
}

pub(super) fn describe(_: i32) -> String {
    "interrupted".to_string()
}

pub(super) fn exit_code(_: i32) -> i32 {
    crate::CTRLC_EXIT_CODE
}

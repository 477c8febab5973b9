//! The crate's error type.

use std::fmt;
use std::path::PathBuf;

/// Everything that can go wrong when configuring spanprof or reading and writing profiles.
///
/// `Debug` prints the same message as `Display`, followed by the causes that message does not
/// already include, so that `fn main() -> Result<(), spanprof::Error>` prints a readable line.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An environment variable holds a value spanprof does not accept.
    #[error("invalid value {} for environment variable {var}: expected {expected}", quote(.value))]
    InvalidEnv {
        /// The variable, e.g. `SPANPROF`.
        var: &'static str,
        /// The value found.
        value: String,
        /// What the variable accepts.
        expected: &'static str,
    },
    /// A builder method was given a value spanprof does not accept (checked by
    /// [`Builder::build`](crate::Builder::build), with the rule the environment variable of the
    /// same option follows).
    #[error("invalid value {} for Builder::{method}: expected {expected}", truncate(.value))]
    InvalidSetting {
        /// The builder method, e.g. `with_top`.
        method: &'static str,
        /// The value given, as Rust's `Debug` prints it.
        value: String,
        /// What the method accepts.
        expected: &'static str,
    },
    /// A filter directive (from the builder or `SPANPROF_FILTER`) does not parse.
    #[error("invalid filter directive {} (from {origin}): {source}", quote(.value))]
    InvalidFilter {
        /// Where the directive came from: `SPANPROF_FILTER` or `the builder`.
        origin: &'static str,
        /// The directive string.
        value: String,
        /// The parser's complaint.
        #[source]
        source: tracing_subscriber::filter::ParseError,
    },
    /// Reading or writing a file failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done, e.g. `writing profile`.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The chrome trace options or step schedule are not valid (e.g. a schedule with no active
    /// step, or a step schedule with a single trace file).
    #[cfg(feature = "chrome")]
    #[error("invalid chrome trace options: {reason}")]
    InvalidChromeOptions {
        /// What is wrong.
        reason: &'static str,
    },
    /// The signal handler of
    /// [`ProfileHandle::install_signal_handler`](crate::ProfileHandle::install_signal_handler)
    /// could not be installed: `SIGINT` (Ctrl-C on Windows) already has a handler (an error of
    /// kind [`AlreadyExists`](std::io::ErrorKind::AlreadyExists)), or the system could not
    /// make its pipe or thread.
    #[cfg(feature = "signals")]
    #[error("installing the signal handler: {source}")]
    SignalHandler {
        /// Why, in words that name the signal.
        #[source]
        source: std::io::Error,
    },
    /// A profile could not be parsed.
    #[error("invalid profile {origin}: {message}")]
    InvalidProfile {
        /// The file or source the profile came from.
        origin: String,
        /// What is wrong with it.
        message: String,
    },
    /// Several outputs failed when the profile was finished; each error, in the order of the
    /// outputs.
    #[error("{} outputs failed: {}", .0.len(), join(.0))]
    Outputs(Vec<Error>),
}

/// Longest part of a value an error message quotes, in characters.
const QUOTED_CHARS: usize = 100;

/// `value`, cut to [`QUOTED_CHARS`] characters with `…` when longer.
pub(crate) fn truncate(value: &str) -> String {
    match value.char_indices().nth(QUOTED_CHARS) {
        Some((end, _)) => format!("{}…", &value[..end]),
        None => value.to_string(),
    }
}

/// `value` in quotes (escaped as `Debug` does), cut to [`QUOTED_CHARS`] characters.
fn quote(value: &str) -> String {
    format!("{:?}", truncate(value))
}

impl fmt::Debug for Error {
    /// The `Display` message, then each cause it does not already include (as `anyhow` prints
    /// an error returned from `main`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let message = self.to_string();
        f.write_str(&message)?;
        let mut causes = Vec::new();
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            let text = cause.to_string();
            if !message.contains(&text) {
                causes.push(text);
            }
            source = cause.source();
        }
        if !causes.is_empty() {
            f.write_str("\n\nCaused by:")?;
            for (i, cause) in causes.iter().enumerate() {
                write!(f, "\n    {i}: {cause}")?;
            }
        }
        Ok(())
    }
}

fn join(errors: &[Error]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl Error {
    /// No error, the one error, or [`Error::Outputs`] with all of them.
    pub(crate) fn collect(mut errors: Vec<Error>) -> Option<Error> {
        match errors.len() {
            0 => None,
            1 => errors.pop(),
            _ => Some(Error::Outputs(errors)),
        }
    }
}

/// `Result<T, spanprof::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

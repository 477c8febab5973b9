//! Outputs: every format renders a [`Snapshot`] through one interface, [`Format`], and every
//! file is replaced atomically.
//!
//! The guard finishes by asking each configured output in turn to render the final snapshot
//! to its [`Destination`], and collects every error. Formats read only the snapshot (and
//! analyses of it), never the layer: rendering a saved profile gives the same bytes as the
//! live run did.
//!
//! | format | file | what |
//! |---|---|---|
//! | [`Table`] | `report.txt` | the console report: one row per span name, sorted by self time |
//! | [`Json`] | [`PROFILE_FILE`] | the JSON profile, full histograms (schema in the README) |
//! | `Csv` | `report.csv` | one row per span name, every figure of the report (feature `csv`) |
//! | `Prometheus` | `metrics.prom` | the Prometheus text exposition (feature `prometheus`) |
//!
//! ```
//! use spanprof::output::{Format, Table};
//! # let snapshot = spanprof::profile::Snapshot::from_json(
//! #     include_str!("../../tests/data/profile-v1-basic.json"), "doc")?;
//! let mut text = Vec::new();
//! Table::new().with_top(5).render(&snapshot, &mut text)?;
//! assert!(String::from_utf8(text)?.starts_with("spanprof: "));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! To add a format, implement [`Format`] and pass it to
//! [`Builder::with_output`](crate::Builder::with_output).

#[cfg(feature = "csv")]
mod csv;
mod json;
#[cfg(feature = "prometheus")]
mod prometheus;
mod table;
pub(crate) mod units;

use std::fmt;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

#[cfg(feature = "csv")]
pub use self::csv::{Csv, CSV_FILE};
#[cfg(feature = "prometheus")]
pub use self::prometheus::{Prometheus, METRICS_FILE};
pub use json::{Json, PROFILE_FILE};
pub use table::{Table, REPORT_FILE};

use crate::error::{Error, Result};
use crate::profile::Snapshot;

/// A way to render a profile: the console table, the JSON profile, ...
pub trait Format: Send + Sync + fmt::Debug {
    /// A short name for messages (`table`, `json`).
    fn name(&self) -> &'static str;

    /// The file name this format writes into an output directory.
    fn file_name(&self) -> &'static str;

    /// What writing it is called in errors: `writing profile` reads `writing profile
    /// out/profile.json: No space left on device`.
    fn action(&self) -> &'static str {
        "writing output"
    }

    /// Renders `snapshot` to `out`.
    ///
    /// # Errors
    /// The writer's errors.
    fn render(&self, snapshot: &Snapshot, out: &mut dyn Write) -> io::Result<()>;
}

/// Where an output goes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Destination {
    /// Standard error.
    Stderr,
    /// Standard output.
    Stdout,
    /// A file, replaced atomically: written to a temporary file in the same directory,
    /// renamed over the file when complete. A render that fails (or panics) midway leaves the
    /// previous file as it was and no temporary.
    File(PathBuf),
    /// The format's [`file_name`](Format::file_name) in a directory, replaced atomically like
    /// [`Destination::File`].
    Dir(PathBuf),
}

/// An output: a format and where it goes.
#[derive(Debug)]
pub(crate) struct Output {
    pub(crate) format: Box<dyn Format>,
    pub(crate) to: Destination,
    /// Rendered to standard error when writing it fails (the console report: never lost).
    pub(crate) fallback_to_stderr: bool,
}

impl Output {
    /// Renders `snapshot` to the destination. Returns the file written, if any. A format that
    /// panics is an error like one that fails: the panic does not reach the caller.
    pub(crate) fn write(&self, snapshot: &Snapshot) -> Result<Option<PathBuf>> {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.write_unguarded(snapshot)
        }))
        .unwrap_or_else(|_| {
            Err(Error::Io {
                action: self.format.action(),
                path: self.path(),
                source: io::Error::other(format!("the {} format panicked", self.format.name())),
            })
        })
    }

    /// What errors call the destination: the file, or `<stderr>` / `<stdout>`.
    fn path(&self) -> PathBuf {
        match &self.to {
            Destination::Stderr => PathBuf::from("<stderr>"),
            Destination::Stdout => PathBuf::from("<stdout>"),
            Destination::File(path) => path.clone(),
            Destination::Dir(dir) => dir.join(self.format.file_name()),
        }
    }

    fn write_unguarded(&self, snapshot: &Snapshot) -> Result<Option<PathBuf>> {
        let stream = |to: &mut dyn Write| {
            // Rendering into memory first: one write, not interleaved with other output, and
            // nothing printed if the render fails midway.
            let mut bytes = Vec::new();
            self.format
                .render(snapshot, &mut bytes)
                .and_then(|()| to.write_all(&bytes))
                .and_then(|()| to.flush())
                .map_err(|source| Error::Io {
                    action: self.format.action(),
                    path: self.path(),
                    source,
                })
                .map(|()| None)
        };
        match &self.to {
            Destination::Stderr => stream(&mut io::stderr().lock()),
            Destination::Stdout => stream(&mut io::stdout().lock()),
            Destination::File(path) => self.write_file(snapshot, path),
            Destination::Dir(dir) => self.write_file(snapshot, &dir.join(self.format.file_name())),
        }
    }

    fn write_file(&self, snapshot: &Snapshot, path: &Path) -> Result<Option<PathBuf>> {
        crate::atomic_file::write(path, self.format.action(), |out| {
            self.format.render(snapshot, out)
        })?;
        Ok(Some(path.to_path_buf()))
    }
}

/// What [`ProfileGuard::finish`](crate::ProfileGuard::finish) wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Outputs {
    /// Every file written, with the name of its format (`table`, `json`, ...), in the order of
    /// the configured outputs.
    pub files: Vec<(&'static str, PathBuf)>,
    /// Chrome trace files written during the run (see [`crate::chrome`]).
    pub traces: Vec<PathBuf>,
}

impl Outputs {
    /// The first file written by the format named `format`.
    pub fn file(&self, format: &str) -> Option<&Path> {
        self.files
            .iter()
            .find(|(f, _)| *f == format)
            .map(|(_, p)| p.as_path())
    }

    /// The JSON profile, if one was written.
    pub fn profile(&self) -> Option<&Path> {
        self.file(Json.name())
    }

    /// The report file, if the report went to a file.
    pub fn report(&self) -> Option<&Path> {
        self.file(Table::new().name())
    }
}

/// The formats an output directory gets, in the order they are written: the JSON profile,
/// then `report.csv` and `metrics.prom` where their features are on.
#[cfg_attr(not(any(feature = "csv", feature = "prometheus")), allow(unused_mut))]
pub(crate) fn directory_formats() -> Vec<Box<dyn Format>> {
    let mut formats: Vec<Box<dyn Format>> = vec![Box::new(Json)];
    #[cfg(feature = "csv")]
    formats.push(Box::new(Csv::new()));
    #[cfg(feature = "prometheus")]
    formats.push(Box::new(Prometheus::new()));
    formats
}

/// Renders every output, collecting the files written and every error.
pub(crate) fn write_all(outputs: &[Output], snapshot: &Snapshot, done: &mut Outputs) -> Vec<Error> {
    let mut errors = Vec::new();
    for output in outputs {
        match output.write(snapshot) {
            Ok(Some(path)) => done.files.push((output.format.name(), path)),
            Ok(None) => {}
            Err(e) => {
                if output.fallback_to_stderr {
                    let mut bytes = Vec::new();
                    let rendered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        output.format.render(snapshot, &mut bytes)
                    }));
                    if matches!(rendered, Ok(Ok(())))
                        && io::stderr().lock().write_all(&bytes).is_ok()
                    {
                        tracing::warn!(target: crate::PERF_TARGET, error = %e, "spanprof wrote its {} to stderr instead", output.format.name());
                    }
                }
                errors.push(e);
            }
        }
    }
    errors
}

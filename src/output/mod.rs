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
//! | [`Json`] | [`PROFILE_FILE`] | the JSON profile, full histograms (`docs/profile-format.md`) |
//! | [`TreeView`] | [`TREE_FILE`] | the call tree as indented text (the report shows it too) |
//! | [`Folded`] | [`FOLDED_FILE`] | the call tree as folded stacks (`a;b;c <self ns>`) |
//! | `Flamegraph` | `FLAMEGRAPH_FILE` | the call tree as an SVG flamegraph (feature `flamegraph`) |
//! | `Pprof` | `PPROF_FILE` | the call tree as a gzipped pprof profile (feature `pprof`) |
//! | `Csv` | `report.csv` | one row per span name, every figure of the report (feature `csv`) |
//! | `CsvMetrics` | `metrics.csv` | one row per metric from events and span name (feature `csv`) |
//! | `Prometheus` | `metrics.prom` | the Prometheus text exposition (feature `prometheus`) |
//! | [`Html`] | [`HTML_FILE`] | a self-contained page for a browser: charts and a sortable table |
//! | [`Markdown`] | [`MARKDOWN_FILE`] | the report as a Markdown table (pull-request comments) |
//!
//! [`format_named`] finds a format by its name (`spanprof report --format`). A [`Selection`]
//! (name globs, target globs, top N) picks the span names every output shows
//! ([`Builder::with_output_filter`](crate::Builder::with_output_filter),
//! `SPANPROF_OUTPUT_FILTER`, `spanprof report --filter`).
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
#[cfg(test)]
mod figures_agree;
#[cfg(feature = "flamegraph")]
mod flamegraph;
mod folded;
mod html;
mod json;
mod markdown;
#[cfg(feature = "pprof")]
mod pprof;
#[cfg(feature = "prometheus")]
mod prometheus;
#[cfg(test)]
mod sampled_marks;
mod select;
mod table;
mod tree;
pub mod units;

use std::fmt;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

#[cfg(feature = "csv")]
pub use self::csv::{Csv, CsvMetrics, CSV_FILE, METRICS_CSV_FILE};
#[cfg(feature = "prometheus")]
pub use self::prometheus::{Prometheus, METRICS_FILE};
#[cfg(feature = "flamegraph")]
pub use flamegraph::{Flamegraph, FLAMEGRAPH_FILE};
pub use folded::{Folded, FOLDED_FILE};
pub use html::{Html, HTML_FILE};
pub use json::{Json, PROFILE_FILE};
pub use markdown::{Markdown, MARKDOWN_FILE};
#[cfg(feature = "pprof")]
pub use pprof::{Pprof, PPROF_FILE};
pub use select::Selection;
pub(crate) use select::SELECTION_EXPECTED;
pub use table::{Table, REPORT_FILE};
pub use tree::{TreeView, TREE_FILE};
pub use units::{
    escape_controls, format_bytes, format_count, format_duration, format_duration_f64,
};

use crate::error::{Error, Result};
use crate::profile::{Figure, Snapshot, SpanStats, Totals};

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

    /// Whether the output is also re-written at each window of the export cadence
    /// ([`Builder::with_every`](crate::Builder::with_every)), with the cumulative snapshot of
    /// that moment, and not only at the end (default `false`). A file scraped while the program
    /// runs (a Prometheus text file) says `true`.
    fn periodic(&self) -> bool {
        false
    }
}

/// Figure `figure` of span name `s` as the text reports show it: in human units
/// ([`units::format_value`]), `≈` before an estimate ([`Figure::is_estimate`]), `-` where the
/// name has no such figure.
pub(crate) fn shown(figure: &Figure, s: &SpanStats, totals: &Totals) -> String {
    match figure.value(s, totals) {
        Some(v) => format!(
            "{}{}",
            if figure.is_estimate(s) { "≈" } else { "" },
            units::format_value(figure.kind, v)
        ),
        None => "-".to_string(),
    }
}

/// The metrics from events of `snap` in the order every report lists them: by name, kind,
/// span name and target (events outside every span first).
pub(crate) fn metrics_in_order(snap: &Snapshot) -> Vec<&crate::profile::Metric> {
    let mut metrics: Vec<_> = snap.metrics.iter().collect();
    metrics.sort_by(|a, b| {
        (&a.name, a.kind, &a.span, &a.span_target).cmp(&(&b.name, b.kind, &b.span, &b.span_target))
    });
    metrics
}

/// The names [`format_named`] knows, in the order `spanprof report --help` lists them.
pub const FORMAT_NAMES: &[&str] = &[
    "table",
    "json",
    "markdown",
    "html",
    #[cfg(feature = "csv")]
    "csv",
    #[cfg(feature = "csv")]
    "csv-metrics",
    #[cfg(feature = "prometheus")]
    "prom",
    "tree",
    "folded",
    #[cfg(feature = "flamegraph")]
    "flamegraph",
    #[cfg(feature = "pprof")]
    "pprof",
];

/// The format called `name` (one of [`FORMAT_NAMES`]), showing at most `top` span names where
/// it shows rows (the table, Markdown); `None` for an unknown name.
///
/// ```
/// use spanprof::output::format_named;
/// assert_eq!(format_named("markdown", 10).unwrap().file_name(), "report.md");
/// assert!(format_named("yaml", 10).is_none());
/// ```
pub fn format_named(name: &str, top: usize) -> Option<Box<dyn Format>> {
    match name {
        "table" => Some(Box::new(Table::new().with_top(top))),
        "json" => Some(Box::new(Json)),
        "markdown" => Some(Box::new(Markdown::new().with_top(top))),
        "html" => Some(Box::new(Html)),
        #[cfg(feature = "csv")]
        "csv" => Some(Box::new(Csv::new())),
        #[cfg(feature = "csv")]
        "csv-metrics" => Some(Box::new(CsvMetrics::new())),
        #[cfg(feature = "prometheus")]
        "prom" => Some(Box::new(Prometheus::new())),
        "tree" => Some(Box::new(TreeView::new())),
        "folded" => Some(Box::new(Folded)),
        #[cfg(feature = "flamegraph")]
        "flamegraph" => Some(Box::new(Flamegraph::new())),
        #[cfg(feature = "pprof")]
        "pprof" => Some(Box::new(Pprof)),
        _ => None,
    }
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
    /// previous file as it was and no temporary. A symbolic link is followed: its final target
    /// is replaced so, and the link kept. A path that is neither a regular file nor a
    /// directory (a fifo, a device such as `/dev/null`, `/dev/stdout` on a pipe or terminal)
    /// cannot be replaced atomically, and replacing it would destroy it: it is written in
    /// place, opened for writing and truncated, with no temporary (a fifo waits for its reader;
    /// a failed render leaves what was written).
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
/// the HTML report, then `report.csv`, `metrics.csv` and `metrics.prom` where their features are on, and with the call tree
/// (`tree`) its folded stacks, flamegraph and pprof profile.
pub(crate) fn directory_formats(tree: bool) -> Vec<Box<dyn Format>> {
    let mut formats: Vec<Box<dyn Format>> = vec![Box::new(Json), Box::new(Html)];
    #[cfg(feature = "csv")]
    formats.push(Box::new(Csv::new()));
    #[cfg(feature = "csv")]
    formats.push(Box::new(CsvMetrics::new()));
    #[cfg(feature = "prometheus")]
    formats.push(Box::new(Prometheus::new()));
    if tree {
        formats.push(Box::new(Folded));
        #[cfg(feature = "flamegraph")]
        formats.push(Box::new(Flamegraph::new()));
        #[cfg(feature = "pprof")]
        formats.push(Box::new(Pprof));
    }
    formats
}

/// An output that failed: its error, and the format rendered to standard error instead where
/// the output falls back there (the report file).
#[derive(Debug)]
pub(crate) struct Failed {
    pub(crate) error: Error,
    pub(crate) to_stderr_instead: Option<&'static str>,
}

/// Renders every output, collecting the files written and every failure. Logs nothing: the
/// caller reports each failure once (see `ProfileSession::finish`).
pub(crate) fn write_all(
    outputs: &[Output],
    snapshot: &Snapshot,
    done: &mut Outputs,
) -> Vec<Failed> {
    let mut failed = Vec::new();
    for output in outputs {
        match output.write(snapshot) {
            Ok(Some(path)) => done.files.push((output.format.name(), path)),
            Ok(None) => {}
            Err(error) => {
                let mut to_stderr_instead = None;
                if output.fallback_to_stderr {
                    let mut bytes = Vec::new();
                    let rendered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        output.format.render(snapshot, &mut bytes)
                    }));
                    if matches!(rendered, Ok(Ok(())))
                        && io::stderr().lock().write_all(&bytes).is_ok()
                    {
                        to_stderr_instead = Some(output.format.name());
                    }
                }
                failed.push(Failed {
                    error,
                    to_stderr_instead,
                });
            }
        }
    }
    failed
}

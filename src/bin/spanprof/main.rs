//! `spanprof`: report, compare, merge and analyse saved spanprof profiles.
//!
//! ```text
//! spanprof report PROFILE.json [--format FORMAT] [--top N] [--filter SELECTION]
//! spanprof compare [--metric typical] [--threshold 15%] [--policy FILE] [--format text|markdown|json] BASE.json NEW.json
//! spanprof compare [OPTIONS] BASE.json... -- NEW.json...
//! spanprof merge A.json B.json... -o ALL.json
//! spanprof top PROFILE.json [--format text|markdown|json]
//! ```
//!
//! `FORMAT` is one of `table` (the default), `json`, `markdown`, `html`, `csv`, `csv-metrics`,
//! `prom`, `tree`, `folded`, `flamegraph` and `pprof` (`spanprof::output::FORMAT_NAMES`; `csv`
//! and `csv-metrics` need the crate's `csv` feature, `prom` its `prometheus` feature,
//! `flamegraph` and `pprof` features of the same names, all on by default).
//!
//! Exit status: 0 = done (no regression), 1 = `compare` found a regression, 2 = bad input
//! (one line on stderr naming the file and the problem).

mod json;
mod policy;
mod render;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};

use spanprof::analysis::{self, CompareOptions, Measure};
use spanprof::output::{format_named, Selection, FORMAT_NAMES};
use spanprof::profile::Snapshot;

/// Report, compare, merge and analyse spanprof profiles (profile.json files).
#[derive(Debug, Parser)]
#[command(name = "spanprof", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Renders a saved profile in any output format, as the live run would have.
    Report {
        /// The profile (profile.json).
        profile: PathBuf,
        /// The output format.
        #[arg(long, short, default_value = "table", value_parser = clap::builder::PossibleValuesParser::new(FORMAT_NAMES))]
        format: String,
        /// Span names the table and Markdown show (as SPANPROF_TOP).
        #[arg(long, default_value_t = spanprof::Builder::DEFAULT_TOP as u64, value_parser = clap::value_parser!(u64).range(1..))]
        top: u64,
        /// Only these span names: comma-separated name globs, target=GLOB and top=N (as
        /// SPANPROF_OUTPUT_FILTER); may be repeated.
        #[arg(long)]
        filter: Vec<String>,
    },
    /// Compares baseline runs with new runs: `spanprof compare [OPTIONS] BASE NEW` for one run
    /// per side, `spanprof compare [OPTIONS] BASE... -- NEW...` for several (options before
    /// `--`: everything after it is a new run). Without `--`, exactly two profiles.
    ///
    /// Timing: per span name, the median of each side's runs; a change beyond the threshold
    /// (and --min-shift), each run beside the run-wide shift, is a regression, but with two or
    /// more runs per side only if every new run is beyond every baseline run; with one run per
    /// side the plain change must show it too, and the verdict is low-confidence. Span names with fewer than --min-calls calls in a run are
    /// not judged. Calls, instances and allocations are compared exactly. Where every run has
    /// the call tree, each call path (root;...;leaf) is judged too, by its leaf name's rule on
    /// busy and self time per instance. Exit status 1 on a regression of a name or a path.
    Compare {
        /// Baseline profiles (with `--`), or the baseline and the new profile (without).
        #[arg(required = true, value_name = "BASE")]
        base: Vec<PathBuf>,
        /// New profiles, after `--`.
        #[arg(last = true, value_name = "NEW")]
        new: Vec<PathBuf>,
        /// The timing figure compared [default: p50, or the policy's].
        #[arg(long)]
        metric: Option<MetricArg>,
        /// The change that counts for the timing figure compared, e.g. `5%` [default: 15%, or
        /// the policy's]; given here, it also replaces the policy's `[thresholds]` entry for
        /// that figure (a rule's threshold still applies to its names).
        #[arg(long, value_parser = policy::parse_pct)]
        threshold: Option<f64>,
        /// Fewest calls per run before a span name's timing is judged [default: 30].
        #[arg(long)]
        min_calls: Option<u64>,
        /// Smallest timing change that counts, e.g. `1us`, `0ns` [default: 1us].
        #[arg(long, value_parser = policy::parse_duration_ns)]
        min_shift: Option<f64>,
        /// A TOML policy file: thresholds per metric and per name glob, budgets.
        #[arg(long)]
        policy: Option<PathBuf>,
        /// Plain text, Markdown for a pull-request comment, or JSON (every judgement with
        /// its evidence, and the exit status).
        #[arg(long, short, value_enum, default_value_t = OutFormat::Text)]
        format: OutFormat,
    },
    /// Merges profiles of several processes, ranks or runs into one, exactly (histograms
    /// added, never percentiles averaged), keeping every input's metadata and timeline.
    Merge {
        /// The profiles to merge.
        #[arg(required = true)]
        profiles: Vec<PathBuf>,
        /// The merged profile to write.
        #[arg(long, short)]
        output: PathBuf,
    },
    /// The bottlenecks of a profile, each with the figures behind it.
    Top {
        /// The profile (profile.json).
        profile: PathBuf,
        /// Plain text, Markdown, or JSON (each finding with its figures).
        #[arg(long, short, value_enum, default_value_t = OutFormat::Text)]
        format: OutFormat,
    },
}

/// `--metric`'s values.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum MetricArg {
    Typical,
    P50,
    P90,
    P99,
    Mean,
    #[value(name = "self")]
    SelfTime,
    Total,
    /// Mean GPU time per call timed with CUDA events.
    Gpu,
}

impl From<MetricArg> for Measure {
    fn from(m: MetricArg) -> Measure {
        match m {
            MetricArg::Typical => Measure::Typical,
            MetricArg::P50 => Measure::P50,
            MetricArg::P90 => Measure::P90,
            MetricArg::P99 => Measure::P99,
            MetricArg::Mean => Measure::Mean,
            MetricArg::SelfTime => Measure::SelfTime,
            MetricArg::Total => Measure::Total,
            MetricArg::Gpu => Measure::Gpu,
        }
    }
}

/// How `compare` and `top` print.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum TextFormat {
    /// Plain text for a terminal.
    Text,
    /// Markdown, for a pull-request comment.
    Markdown,
}

/// How `compare` and `top` print: as [`TextFormat`], or JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum OutFormat {
    /// Plain text for a terminal.
    Text,
    /// Markdown, for a pull-request comment.
    Markdown,
    /// JSON, for programs and agents.
    Json,
}

impl OutFormat {
    /// The text format, or `None` for JSON.
    fn text(self) -> Option<TextFormat> {
        match self {
            OutFormat::Text => Some(TextFormat::Text),
            OutFormat::Markdown => Some(TextFormat::Markdown),
            OutFormat::Json => None,
        }
    }
}

/// `compare`'s runs per side: `BASE NEW` (exactly two profiles, without `--`) or
/// `BASE... -- NEW...`. `None`: anything else, a usage error.
fn sides(mut base: Vec<PathBuf>, new: Vec<PathBuf>) -> Option<(Vec<PathBuf>, Vec<PathBuf>)> {
    if !new.is_empty() {
        return Some((base, new));
    }
    if base.len() == 2 {
        let new = base.split_off(1);
        return Some((base, new));
    }
    None
}

/// Bad input: one line naming the input and the problem (exit status 2).
struct BadInput(String);

impl From<spanprof::Error> for BadInput {
    fn from(e: spanprof::Error) -> Self {
        BadInput(e.to_string())
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(code) => code,
        Err(BadInput(message)) => {
            // One line, whatever the message holds.
            let line = message.split_whitespace().collect::<Vec<_>>().join(" ");
            eprintln!("spanprof: {line}");
            ExitCode::from(2)
        }
    }
}

fn read(path: &Path) -> Result<Snapshot, BadInput> {
    Ok(Snapshot::read_json(path)?)
}

/// Writes `bytes` to stdout as they are (pprof's output is gzip, not text); a closed pipe
/// (`| head`) is not an error.
fn print(bytes: &[u8]) -> Result<(), BadInput> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(BadInput(format!("writing to standard output: {e}")))
        }
        _ => Ok(()),
    }
}

fn run(command: Command) -> Result<ExitCode, BadInput> {
    match command {
        Command::Report {
            profile,
            format,
            top,
            filter,
        } => {
            let snapshot = read(&profile)?;
            let mut selection = Selection::new();
            for text in &filter {
                let more: Selection = text
                    .parse()
                    .map_err(|_| BadInput(format!("invalid --filter {text:?}: expected comma-separated name globs, target=GLOB and top=N")))?;
                selection.names.extend(more.names);
                selection.targets.extend(more.targets);
                selection.top = more.top.or(selection.top);
            }
            let top = usize::try_from(top).unwrap_or(usize::MAX);
            // UNWRAP-FREE: clap accepted only FORMAT_NAMES.
            let Some(format) = format_named(&format, top) else {
                return Err(BadInput(format!("unknown format {format:?}")));
            };
            let mut bytes = Vec::new();
            format
                .render(&selection.apply(&snapshot), &mut bytes)
                .map_err(|e| BadInput(format!("rendering {}: {e}", profile.display())))?;
            print(&bytes)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Compare {
            base,
            new,
            metric,
            threshold,
            min_calls,
            min_shift,
            policy,
            format,
        } => {
            let mut options = match &policy {
                Some(path) => policy::read(path)?,
                None => CompareOptions::default(),
            };
            if let Some(m) = metric {
                options.metric = m.into();
            }
            if let Some(t) = threshold {
                // The command line over the file: the policy's entry for the same figure
                // would otherwise be the more specific threshold (`CompareOptions::for_name`).
                let judged = options.metric;
                options.thresholds.retain(|&(m, _)| m != judged);
                options.threshold_pct = t;
            }
            if let Some(n) = min_calls {
                options.min_calls = n;
            }
            if let Some(ns) = min_shift {
                options.min_shift_ns = ns;
            }
            let Some((base, new)) = sides(base, new) else {
                let mut cli = Cli::command();
                cli.build();
                let mut compare = cli.find_subcommand("compare").cloned().unwrap_or(cli);
                compare
                    .error(
                        clap::error::ErrorKind::WrongNumberOfValues,
                        "compare takes exactly two profiles (BASE NEW), or at least one on each \
                         side of `--` for several runs per side: compare BASE... -- NEW...",
                    )
                    .exit()
            };
            let base_runs = base
                .iter()
                .map(|p| read(p))
                .collect::<Result<Vec<_>, _>>()?;
            let new_runs = new.iter().map(|p| read(p)).collect::<Result<Vec<_>, _>>()?;
            let comparison = analysis::compare(&base_runs, &new_runs, &options);
            let status: u8 = if comparison.regressed() { 1 } else { 0 };
            let text = match format.text() {
                Some(format) => render::comparison(&comparison, &options, format),
                None => json::comparison(&comparison, &options, &base, &new, status),
            };
            print(text.as_bytes())?;
            Ok(ExitCode::from(status))
        }
        Command::Merge { profiles, output } => {
            let snapshots = profiles
                .iter()
                .map(|p| read(p))
                .collect::<Result<Vec<_>, _>>()?;
            let origins: Vec<String> = profiles.iter().map(|p| p.display().to_string()).collect();
            let origins: Vec<&str> = origins.iter().map(String::as_str).collect();
            let Some(merged) = Snapshot::merge(&snapshots, &origins) else {
                return Err(BadInput("merge needs at least one profile".to_string()));
            };
            merged.write_json(&output)?;
            eprintln!(
                "spanprof: merged {} profiles ({} span names) into {}",
                snapshots.len(),
                merged.spans.len(),
                output.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Top { profile, format } => {
            let snapshot = read(&profile)?;
            let findings = analysis::top(&snapshot);
            let text = match format.text() {
                Some(format) => render::findings(&snapshot, &findings, format),
                None => json::findings(&snapshot, &findings),
            };
            print(text.as_bytes())?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(names: &[&str]) -> Vec<PathBuf> {
        names.iter().map(PathBuf::from).collect()
    }

    /// Without `--`, exactly two profiles are one per side; with it, the sides as given.
    #[test]
    fn compare_sides_follow_the_ambiguity_rule() {
        assert_eq!(
            sides(paths(&["a", "b"]), vec![]),
            Some((paths(&["a"]), paths(&["b"])))
        );
        assert_eq!(sides(paths(&["a"]), vec![]), None);
        assert_eq!(sides(paths(&["a", "b", "c"]), vec![]), None);
        assert_eq!(
            sides(paths(&["a", "b"]), paths(&["c"])),
            Some((paths(&["a", "b"]), paths(&["c"])))
        );
        assert_eq!(
            sides(paths(&["a"]), paths(&["b"])),
            Some((paths(&["a"]), paths(&["b"])))
        );
    }
}

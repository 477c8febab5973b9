//! A small but real neural-network training run, profiled with `spanprof`.
//!
//! This file is the profiling part: the command line, the spanprof layer (with Chrome /
//! Perfetto traces on request), the guard that writes the report, and the training loop.
//! The workload (a synthetic data set and a multi-layer perceptron trained with hand-written
//! matrix maths, instrumented with `#[tracing::instrument]` only) is in `workload.rs`, whose
//! docs show the span tree.
//!
//! # Running
//!
//! ```text
//! # profile with the default filter ("info"): report on stderr, JSON in target/spanprof/profile.json
//! cargo run --release --example training_loop
//!
//! # choose where profile.json, report.csv and metrics.prom go, and how long to train
//! cargo run --release --example training_loop -- --out /tmp/prof --epochs 3
//!
//! # serve Prometheus metrics at http://127.0.0.1:9464/metrics while it trains
//! SPANPROF_METRICS_ADDR=9464 cargo run --release --features http --example training_loop
//!
//! # RUST_LOG is the usual `EnvFilter`: it decides which spans exist at all
//! RUST_LOG=debug cargo run --release --example training_loop    # add the per-layer `linear` spans
//! RUST_LOG=warn  cargo run --release --example training_loop    # no spans at all
//!
//! # spanprof reads its own SPANPROF* variables, which override the builder
//! SPANPROF=off   cargo run --release --example training_loop    # installed, but recording nothing
//! SPANPROF=basic cargo run --release --example training_loop    # the default preset: span timing
//! RUST_LOG=debug SPANPROF_FILTER=info cargo run --release --example training_loop
//!                         # `linear` spans exist for the other layers, but spanprof skips them
//! SPANPROF_OUT=/tmp/prof SPANPROF_TOP=10 SPANPROF_REPORT=report.txt cargo run --release --example training_loop
//!
//! # Chrome / Perfetto traces of a few steps (train_step 16-18 and 25-27) into DIR/traces/,
//! # with resource counters; `SPANPROF=full` turns them on too. Ctrl-C or `kill` still leave valid files.
//! cargo run --release --example training_loop -- --trace --out /tmp/prof
//! SPANPROF=full cargo run --release --example training_loop -- --out /tmp/prof
//! # then open /tmp/prof/traces/train_step_steps_16-18.json in https://ui.perfetto.dev
//! # the same windows in Perfetto's own format (.pftrace), written by tracing-perfetto-file
//! SPANPROF_TRACE=perfetto cargo run --release --features perfetto --example training_loop -- --trace --out /tmp/prof
//!
//! # a 20 % slower forward pass, for `spanprof compare` to flag
//! cargo run --release --example training_loop -- --slowdown 20 --out /tmp/slow
//!
//! # a summary of each window of 100 steps (the top span names by self time) as it runs
//! SPANPROF_EVERY="100 steps" SPANPROF_STEP=train_step cargo run --release --example training_loop
//!
//! # built with the `otlp` feature, push the profile's metrics to an OpenTelemetry collector
//! OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 cargo run --release --features otlp --example training_loop
//!
//! # the same workload with the same registry and EnvFilter, but without spanprof:
//! # compare its "training took" line with a profiled run to see spanprof's overhead
//! cargo run --release --example training_loop -- --no-profile
//! ```
//!
//! The wall time of the training loop is printed to stderr at the end
//! (`training took 3.42 s`), before spanprof's report.

mod workload;

use std::error::Error;
use std::path::PathBuf;
use std::time::Instant;

use tracing::instrument;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::prelude::*;
use tracing_subscriber::EnvFilter;

use spanprof::chrome::{ChromeOptions, Schedule};
use workload::Trainer;

const DEFAULT_EPOCHS: usize = 10;

const USAGE: &str = "\
usage: training_loop [--out DIR] [--epochs N] [--slowdown PCT] [--trace] [--no-profile]

  --out DIR      where spanprof writes profile.json, report.html, report.csv, metrics.csv,
                 metrics.prom, profile.folded, flamegraph.svg and profile.pb.gz
                 (default: target/spanprof)
  --epochs N     number of training epochs (default: 10)
  --slowdown PCT make every forward pass PCT % slower (busy-waiting): a regression
                 for `spanprof compare` to find
  --trace        also write Chrome / Perfetto traces of train_step 16-18 and 25-27
                 into DIR/traces/ (on too with SPANPROF=full)
  --no-profile   run the same workload without spanprof, to measure its overhead";

/// Which `train_step`s are traced with `--trace`: skip the first 10 steps, then wait 5, warm
/// up 1 and trace 3, twice (steps 16-18 and 25-27), like `torch.profiler.schedule`.
fn trace_schedule() -> Schedule {
    // UNWRAP: 3 active steps is a valid schedule.
    Schedule::new(5, 1, 3)
        .expect("valid schedule")
        .with_repeat(2)
        .with_skip_first(10)
}

/// Counts heap allocations per thread, so `SPANPROF=detailed` can show bytes allocated and
/// retained per span (1–2 ns per allocation; used in every mode, `--no-profile` included).
#[global_allocator]
static ALLOC: spanprof::CountingAlloc = spanprof::CountingAlloc::system();

fn main() -> Result<(), Box<dyn Error>> {
    let args = Args::parse().unwrap_or_else(|message| {
        eprintln!("error: {message}\n\n{USAGE}");
        std::process::exit(2);
    });

    // The user's log filter decides which spans exist; spanprof sees those.
    let filter = EnvFilter::builder()
        .with_default_directive(LevelFilter::INFO.into())
        .from_env_lossy();
    let guard = if args.profile {
        let mut builder = spanprof::ProfileLayer::builder().with_output_dir(&args.out_dir);
        if args.trace {
            builder = builder.with_chrome(
                ChromeOptions::dir(args.out_dir.join("traces"))
                    .with_steps("train_step", trace_schedule())
                    .with_args(true),
            );
        }
        let (layer, guard) = builder.build()?;
        // `chrome_layer()` is `None` unless tracing is on (`--trace`, or `SPANPROF_TRACE`, which
        // may also choose the Perfetto backend).
        // spanprof's own messages (its windows with SPANPROF_EVERY, its warnings) on stderr;
        // a per-layer filter on one target, so the spans of the workload cost this layer nothing.
        let messages = tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_filter(Targets::new().with_target(spanprof::PERF_TARGET, LevelFilter::INFO));
        tracing_subscriber::registry()
            .with(filter)
            .with(layer)
            .with(guard.chrome_layer())
            .with(messages)
            .init();
        // Ctrl-C, `kill` (SIGTERM) or a closed terminal (SIGHUP) write the report, the profile
        // and the open trace window, then exit with 128 + the signal (130, 143, 129).
        guard.handle().install_signal_handler()?;
        Some(guard)
    } else {
        tracing_subscriber::registry().with(filter).init();
        None
    };

    let mut trainer = Trainer::new(args.epochs, args.slowdown_pct);
    let start = Instant::now();
    train(&mut trainer);
    let elapsed = start.elapsed();
    // Dropping the trainer closes the model's long-lived `linear` spans.
    drop(trainer);
    eprintln!("training took {:.2} s", elapsed.as_secs_f64());

    // Prints spanprof's report to stderr and writes the JSON profile and the traces.
    if let Some(guard) = guard {
        let outputs = guard.finish()?;
        for trace in &outputs.traces {
            eprintln!(
                "trace: {} (open in https://ui.perfetto.dev)",
                trace.display()
            );
        }
    }
    Ok(())
}

/// The training loop: one `epoch` span per epoch, one line of metrics per epoch on stdout.
#[instrument(skip_all, fields(epochs = trainer.epochs, items = trainer.epochs * trainer.samples_per_epoch()))]
fn train(trainer: &mut Trainer) {
    for epoch in 1..=trainer.epochs {
        let lr = trainer.learning_rate();
        let stats = trainer.train_epoch(epoch);
        println!(
            "epoch {epoch:>2}/{}  lr {lr:.1e}  train loss {:.4}  test loss {:.4}  \
             test acc {:5.2}%  ({} bad batches skipped)",
            trainer.epochs,
            stats.train_loss,
            stats.test_loss,
            100.0 * stats.test_accuracy,
            stats.skipped,
        );
    }
}

/// Command-line options, parsed by hand.
struct Args {
    out_dir: PathBuf,
    epochs: usize,
    slowdown_pct: f64,
    profile: bool,
    trace: bool,
}

impl Args {
    fn parse() -> Result<Self, String> {
        let mut args = Args {
            out_dir: PathBuf::from("target/spanprof"),
            epochs: DEFAULT_EPOCHS,
            slowdown_pct: 0.0,
            profile: true,
            // `SPANPROF=full` (spanprof's preset variable) turns the traces on too.
            trace: std::env::var("SPANPROF").is_ok_and(|v| v.trim().eq_ignore_ascii_case("full")),
        };
        let mut argv = std::env::args().skip(1);
        while let Some(arg) = argv.next() {
            match arg.as_str() {
                "--out" => {
                    args.out_dir = argv.next().ok_or("--out needs a directory")?.into();
                }
                "--epochs" => {
                    let value = argv.next().ok_or("--epochs needs a number")?;
                    args.epochs =
                        value.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                            format!("--epochs: `{value}` is not a positive integer")
                        })?;
                }
                "--slowdown" => {
                    let value = argv.next().ok_or("--slowdown needs a percentage")?;
                    args.slowdown_pct = value
                        .trim_end_matches('%')
                        .parse()
                        .ok()
                        .filter(|p: &f64| p.is_finite() && *p >= 0.0)
                        .ok_or_else(|| {
                            format!("--slowdown: `{value}` is not a percentage, 0 or more")
                        })?;
                }
                "--no-profile" => args.profile = false,
                "--trace" => args.trace = true,
                "-h" | "--help" => {
                    println!("{USAGE}");
                    std::process::exit(0);
                }
                other => return Err(format!("unknown argument `{other}`")),
            }
        }
        Ok(args)
    }
}

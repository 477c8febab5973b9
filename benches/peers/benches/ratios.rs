//! # `ratios` — spanprof's cost as a ratio to the registry floor, robust to a noisy machine
//!
//! ```text
//! cargo bench -p spanprof-peers --bench ratios  # ROUNDS=30 SPANS=300000 by default
//! ```
//!
//! Criterion (the `overhead` bench) measures each case in turn, so a burst of load on a shared
//! machine lands on one case and skews its ratio to the floor. This bench interleaves the
//! cases: every round runs each of them once, and the best round of each is kept. Prints ns per
//! span (create + enter + exit + close, empty body) and the ratio to
//! `registry().with(Identity::new())`, for one span per iteration (flat), three nested, and
//! flat spans on two threads at once (each thread's ns per span, the mean of the two).
//! Prints the best round of each case, then the median round.
//! `spanprof_sampled` forces the back-off's second stage (a limit of 0.01%): once a second of
//! its spans has run, its short leaf spans are sampled 1 in N, and its best round is the cost
//! of a span left out by sampling.

use std::time::Instant;

mod common;

use common::spanprof;

fn flat(n: u64) -> f64 {
    let start = Instant::now();
    for _ in 0..n {
        tracing::info_span!("bench_span").in_scope(|| std::hint::black_box(()));
    }
    start.elapsed().as_nanos() as f64 / n as f64
}

fn nested(n: u64) -> f64 {
    let start = Instant::now();
    for _ in 0..n {
        tracing::info_span!("a").in_scope(|| {
            tracing::info_span!("b")
                .in_scope(|| tracing::info_span!("c").in_scope(|| std::hint::black_box(())))
        });
    }
    start.elapsed().as_nanos() as f64 / n as f64 / 3.0
}

/// Flat spans on two threads at once: the mean of each thread's ns per span.
fn two_threads(dispatch: &tracing::Dispatch, n: u64) -> f64 {
    let start = std::sync::Barrier::new(2);
    let per_thread: Vec<f64> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    tracing::dispatcher::with_default(dispatch, || {
                        start.wait();
                        flat(n)
                    })
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("bench thread"))
            .collect()
    });
    per_thread.iter().sum::<f64>() / per_thread.len() as f64
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    // `cargo test -p spanprof-peers --benches` runs benches without `--bench`: keep that quick.
    let quick = !std::env::args().any(|a| a == "--bench");
    let rounds = if quick { 1 } else { env("ROUNDS", 30) };
    let n = if quick { 1_000 } else { env("SPANS", 300_000) };
    // The back-off off: a loop of empty spans is over any limit, and its second stage would
    // sample them (the `spanprof_sampled` case measures that).
    let builder = || spanprof::ProfileLayer::builder().with_max_overhead(None);
    let (basic, basic_guard) = spanprof(builder());
    let (no_tree, _g0) = spanprof(builder().with_tree(false));
    let (matching, _g1) = spanprof(builder().with_filter("ratios=trace").expect("valid"));
    let (excluded, _g2) = spanprof(builder().with_filter("nothing=trace").expect("valid"));
    let (off, _g3) = spanprof(builder().with_preset(spanprof::Preset::Off));
    // Resources per entry, the back-off off: the cost of `detailed` itself.
    let (detailed, _g4) = spanprof(
        builder()
            .with_resources(spanprof::Resources::DETAILED)
            .with_sample_interval(std::time::Duration::from_secs(3600))
            .with_max_overhead(None),
    );
    // The back-off's second stage forced (a limit of 0.01%): after its first second of spans,
    // `bench_span` (a short leaf) is sampled 1 in 1024, so its best round is what a span left
    // out by sampling costs.
    let (sampled, sampled_guard) = spanprof(builder().with_max_overhead(Some(0.01)));
    let cases = [
        ("registry_identity", common::floor()),
        ("spanprof_basic", basic),
        ("spanprof_basic_no_tree", no_tree),
        ("spanprof_filter_matches", matching),
        ("spanprof_filtered_out", excluded),
        ("spanprof_off", off),
        ("spanprof_detailed", detailed),
        ("spanprof_sampled", sampled),
    ];
    // Per case: every round's flat, nested and two-thread figures.
    let mut rounds_of = vec![(Vec::new(), Vec::new(), Vec::new()); cases.len()];
    for _ in 0..rounds {
        for (i, (_, dispatch)) in cases.iter().enumerate() {
            tracing::dispatcher::with_default(dispatch, || {
                rounds_of[i].0.push(flat(n));
                rounds_of[i].1.push(nested(n / 3));
            });
            rounds_of[i].2.push(two_threads(dispatch, n / 2));
        }
    }
    let calls = basic_guard
        .snapshot()
        .span("bench_span")
        .map_or(0, |s| s.calls);
    assert!(calls >= n * rounds, "spanprof_basic recorded {calls} spans");
    let every = sampled_guard
        .snapshot()
        .span("bench_span")
        .and_then(|s| Some(s.sampled.as_ref()?.every));
    println!("spanprof_sampled: bench_span sampled 1 in {every:?} by the back-off (max 0.01%)");
    for (which, at) in [("best", 0.0), ("median", 0.5)] {
        let pick = |v: &[f64]| {
            let mut v = v.to_vec();
            v.sort_by(f64::total_cmp);
            v[((v.len() - 1) as f64 * at) as usize]
        };
        let figures: Vec<(f64, f64, f64)> = rounds_of
            .iter()
            .map(|(f, n, t)| (pick(f), pick(n), pick(t)))
            .collect();
        println!(
            "{which} of {rounds} interleaved rounds, {n} spans each; ratio to registry_identity"
        );
        for (i, (name, _)) in cases.iter().enumerate() {
            println!(
                "{name:<24} flat {:7.1} ns ({:.2}x)   nested {:7.1} ns/span ({:.2}x)   2 threads {:7.1} ns/span ({:.2}x)",
                figures[i].0,
                figures[i].0 / figures[0].0,
                figures[i].1,
                figures[i].1 / figures[0].1,
                figures[i].2,
                figures[i].2 / figures[0].2
            );
        }
    }
}

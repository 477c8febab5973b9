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
//!
//! With the `cuda` feature and `CUDA_LIB` naming a CUDA driver (the fake one of the tests,
//! `cc -shared -fPIC -O2 -o /tmp/libcuda.so.1 tests/fake_cuda/fake_cuda.c -lpthread -ldl`),
//! two more rows of GPU time per span, `basic` otherwise: `spanprof_gpu_other`, the loop's
//! spans not chosen while another name is (`[other]`, entered before the rounds), and
//! `spanprof_gpu_timed`, the loop's spans chosen (two events recorded per entry, on the fake
//! driver a `cuEventRecord` that takes a mutex; the driver's own cost is not spanprof's), with
//! pools of `GPU_POOL` event pairs per thread (131072 by default) so that spanprof's thread,
//! reading completed pairs every 10 ms, keeps up with the loop: the entries left untimed (a
//! pool found empty) are printed before the tables.
//!
//! Then the traced rows: spanprof `basic` with its trace layer, every span inside a trace window
//! (one window per round, `TRACE_SPANS` flat spans in it, 20000 by default), written by
//! tracing-chrome (`traced_by_chrome`) and by tracing-perfetto-file (`traced_by_perfetto`):
//! ns per traced span, its ratio to the floor and to `spanprof_basic` in the same run, and the
//! bytes of the files per traced span. Each round waits for its file to be complete before the
//! next case runs, so a backend's writer thread does not run during another case.

use std::time::{Duration, Instant};

mod common;

use common::spanprof;
use spanprof::chrome::TraceBackend;

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

/// The process's CPU time, user + system, all threads, ns.
fn process_cpu_ns() -> u64 {
    spanprof::__private::cpu::process_cpu_ns().map_or(0, |(user, sys)| user + sys)
}

/// One round of a traced case: `n` flat spans inside one `bench_round` span (one trace window).
/// Returns their ns per span on the traced thread, and the process's CPU time per span from the
/// round's start until the window's file (the `done`-th) is complete: the backend's writer
/// thread and spanprof's completion of the file included.
fn traced_round(
    dispatch: &tracing::Dispatch,
    guard: &spanprof::ProfileGuard,
    n: u64,
    done: usize,
) -> (f64, f64) {
    let cpu = process_cpu_ns();
    let ns = tracing::dispatcher::with_default(dispatch, || {
        let _round = tracing::info_span!("bench_round").entered();
        flat(n)
    });
    let start = Instant::now();
    while guard.handle().chrome_traces().len() < done && start.elapsed() < Duration::from_secs(120)
    {
        std::thread::sleep(Duration::from_micros(200));
    }
    assert_eq!(
        guard.handle().chrome_traces().len(),
        done,
        "trace window {done} written"
    );
    (ns, (process_cpu_ns() - cpu) as f64 / n as f64)
}

/// The rows of GPU time per span, against the CUDA driver at `CUDA_LIB` (none without it):
/// the loop's spans not chosen while `other` is, and chosen. Returns their guards, by case.
#[cfg(feature = "cuda")]
fn gpu_cases(
    builder: impl Fn() -> spanprof::Builder,
    cases: &mut Vec<(&'static str, tracing::Dispatch)>,
) -> Vec<(&'static str, spanprof::ProfileGuard)> {
    let Some(lib) = std::env::var_os("CUDA_LIB") else {
        println!("SKIPPED: the GPU rows need CUDA_LIB, a CUDA driver (the fake one: see the doc)");
        return Vec::new();
    };
    let pool = env("GPU_POOL", 1 << 17) as usize;
    let mut guards = Vec::new();
    for (name, chosen) in [
        ("spanprof_gpu_other", "[other]"),
        ("spanprof_gpu_timed", "[bench_span],[a],[b],[c]"),
    ] {
        let (dispatch, guard) = spanprof(
            builder()
                .with_cuda_library(&lib)
                .with_gpu_spans(chosen)
                .expect("valid")
                .with_gpu_pool(pool),
        );
        // A chosen name's callsite decided before the rounds (the switch set).
        tracing::dispatcher::with_default(&dispatch, || {
            tracing::info_span!("other").in_scope(|| ());
        });
        cases.push((name, dispatch));
        guards.push((name, guard));
    }
    guards
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
    #[cfg_attr(not(feature = "cuda"), allow(unused_mut))]
    let mut cases = Vec::from([
        ("registry_identity", common::floor()),
        ("spanprof_basic", basic),
        ("spanprof_basic_no_tree", no_tree),
        ("spanprof_filter_matches", matching),
        ("spanprof_filtered_out", excluded),
        ("spanprof_off", off),
        ("spanprof_detailed", detailed),
        ("spanprof_sampled", sampled),
    ]);
    #[cfg(feature = "cuda")]
    let gpu_guards = gpu_cases(builder, &mut cases);
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
    // The traced rows, after the others (their files are written between rounds).
    let trace_n = if quick {
        1_000
    } else {
        env("TRACE_SPANS", 20_000)
    };
    let trace_dir = std::env::temp_dir().join(format!("spanprof-ratios-{}", std::process::id()));
    let backends = [
        ("traced_by_chrome", TraceBackend::Chrome),
        ("traced_by_perfetto", TraceBackend::Perfetto),
    ];
    let traced: Vec<_> = backends
        .iter()
        .map(|(name, backend)| {
            let dir = trace_dir.join(backend.as_str());
            let (dispatch, guard) =
                common::spanprof_traced(builder(), *backend, &dir, Some("bench_round"));
            (*name, dispatch, guard)
        })
        .collect();
    // The writers alone, in a registry without spanprof, every span traced, into a sink.
    use tracing_subscriber::prelude::*;
    let (perfetto_alone, _perfetto_guard) =
        tracing_perfetto_file::PerfettoLayer::builder(std::io::sink())
            .span_mode(tracing_perfetto_file::SpanMode::ThreadTracks)
            .with_source_locations()
            .build();
    let perfetto_alone =
        tracing::Dispatch::new(tracing_subscriber::registry().with(perfetto_alone));
    let mut alone_rounds = Vec::new();
    let mut traced_rounds = vec![Vec::new(); traced.len()];
    let mut traced_cpu = vec![Vec::new(); traced.len()];
    let mut basic_rounds = Vec::new();
    let floor = common::floor();
    let mut floor_rounds = Vec::new();
    for round in 1..=rounds as usize {
        floor_rounds.push(tracing::dispatcher::with_default(&floor, || flat(trace_n)));
        basic_rounds.push(tracing::dispatcher::with_default(&cases[1].1, || {
            flat(trace_n)
        }));
        alone_rounds.push(tracing::dispatcher::with_default(&perfetto_alone, || {
            flat(trace_n)
        }));
        for (i, (_, dispatch, guard)) in traced.iter().enumerate() {
            let (ns, cpu) = traced_round(dispatch, guard, trace_n, round);
            traced_rounds[i].push(ns);
            traced_cpu[i].push(cpu);
        }
    }
    let mut trace_bytes = Vec::new();
    for (name, _, guard) in traced {
        let files = guard.finish().expect("trace files written").traces;
        assert_eq!(files.len(), rounds as usize, "{name}: one file per round");
        let bytes: u64 = files
            .iter()
            .map(|f| std::fs::metadata(f).map_or(0, |m| m.len()))
            .sum();
        // Each window holds the round's spans and its `bench_round` span.
        trace_bytes.push(bytes as f64 / ((trace_n + 1) * rounds) as f64);
    }
    let _ = std::fs::remove_dir_all(&trace_dir);

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
    #[cfg(feature = "cuda")]
    for (case, guard) in gpu_guards {
        let handle = guard.handle();
        guard.finish().expect("GPU case finished");
        let snap = handle.snapshot();
        for name in ["bench_span", "a", "b", "c"] {
            if let Some(g) = snap.span(name).and_then(|s| s.gpu_time.as_ref()) {
                println!(
                    "{case}: {name} {} entries timed on the GPU, {} untimed, {} abandoned",
                    g.time.count, g.untimed, g.abandoned
                );
            }
        }
    }
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
        let (floor, basic) = (pick(&floor_rounds), pick(&basic_rounds));
        println!(
            "traced: {which} of {rounds} rounds, {trace_n} flat spans in one trace window each; \
             registry_identity {floor:.1} ns, spanprof_basic {basic:.1} ns in the same rounds"
        );
        for (i, (name, _)) in backends.iter().enumerate() {
            let ns = pick(&traced_rounds[i]);
            println!(
                "{name:<24} flat {ns:7.1} ns ({:.2}x floor, {:.2}x spanprof_basic)   \
                 CPU of all threads {:7.1} ns/span   {:.1} bytes/span",
                ns / floor,
                ns / basic,
                pick(&traced_cpu[i]),
                trace_bytes[i]
            );
        }
        println!(
            "{:<24} flat {:7.1} ns (registry + tracing-perfetto-file alone, thread tracks, into a sink)",
            "perfetto_alone",
            pick(&alone_rounds)
        );
        println!(
            "traced_by_chrome / traced_by_perfetto: {:.2}x per traced span, {:.2}x CPU of all \
             threads, {:.2}x bytes",
            pick(&traced_rounds[0]) / pick(&traced_rounds[1]),
            pick(&traced_cpu[0]) / pick(&traced_cpu[1]),
            trace_bytes[0] / trace_bytes[1]
        );
    }
}

//! # `instructions` — the workload `scripts/instructions.sh` counts instructions of
//!
//! ```text
//! scripts/instructions.sh     # instructions per span of each case, under valgrind's callgrind
//! ```
//!
//! Runs `SPANS` flat spans (create, enter, exit, close; empty body) under the case named by
//! `CASE`: `floor` (`registry().with(Identity)`), `basic` (spanprof at its default preset),
//! `excluded` (spanprof with a span filter that excludes the span), `off` (`SPANPROF=off`),
//! `detailed` (spanprof with memory, heap and CPU per span), or `nested` (three nested spans
//! per iteration under spanprof `basic`; `nested_floor` the same under the floor); `notree` and
//! `nested_notree` are `basic` and `nested` with the call tree off. Instruction
//! counts do not move with the machine's load: the script counts only inside
//! `measured_spans`, at two span counts, and divides the difference, so first-use costs cancel
//! out too.
//!
//! Without `--bench` (as `cargo test --benches` runs it) it runs one small case and returns.

mod common;

use common::spanprof;

fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    let case = if quick {
        "basic".to_string()
    } else {
        std::env::var("CASE").unwrap_or_else(|_| "basic".to_string())
    };
    let spans: u64 = if quick {
        100
    } else {
        std::env::var("SPANS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(100_000)
    };
    let builder = spanprof::ProfileLayer::builder;
    let (dispatch, guard) = match case.as_str() {
        "floor" | "nested_floor" => (common::floor(), None),
        "basic" | "nested" => {
            let (d, g) = spanprof(builder());
            (d, Some(g))
        }
        "notree" | "nested_notree" => {
            let (d, g) = spanprof(builder().with_tree(false));
            (d, Some(g))
        }
        "excluded" => {
            let (d, g) = spanprof(builder().with_filter("nothing=trace").expect("valid"));
            (d, Some(g))
        }
        "off" => {
            let (d, g) = spanprof(builder().with_preset(spanprof::Preset::Off));
            (d, Some(g))
        }
        "detailed" => {
            let (d, g) = spanprof(
                builder()
                    .with_resources(spanprof::Resources::DETAILED)
                    .with_max_overhead(None)
                    .with_sample_interval(std::time::Duration::from_secs(3600)),
            );
            (d, Some(g))
        }
        other => panic!("unknown CASE {other:?}"),
    };
    let nested = case.starts_with("nested");
    tracing::dispatcher::with_default(&dispatch, || measured_spans(spans, nested));
    if let Some(guard) = guard {
        let calls: u64 = guard.snapshot().spans.iter().map(|s| s.calls).sum();
        let expected = match case.as_str() {
            "excluded" | "off" => 0,
            _ if nested => 3 * spans,
            _ => spans,
        };
        assert_eq!(calls, expected, "{case}: spans recorded");
    }
}

/// The spans counted: `scripts/instructions.sh` collects instructions only inside this function
/// (callgrind's `--toggle-collect`), so set-up, clock calibration and the snapshot stay out.
#[inline(never)]
fn measured_spans(spans: u64, nested: bool) {
    for _ in 0..spans {
        if nested {
            tracing::info_span!("a").in_scope(|| {
                tracing::info_span!("b")
                    .in_scope(|| tracing::info_span!("c").in_scope(|| std::hint::black_box(())))
            });
        } else {
            tracing::info_span!("bench_span").in_scope(|| std::hint::black_box(()));
        }
    }
}

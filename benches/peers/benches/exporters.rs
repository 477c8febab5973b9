//! # `exporters` — what do the file exporters and the `/metrics` endpoint cost?
//!
//! ```text
//! cargo bench -p spanprof-peers --bench exporters  # every case (about half a minute)
//! cargo test  -p spanprof-peers --bench exporters  # smoke: each case once, checks run
//! ```
//!
//! **render**: time to render one profile of 100 span names (each with the histograms of 2000
//! real entries of a few hundred ns to tens of µs, a child span, and `items`), in memory, by
//! each format: `prometheus` (metrics.prom, `/metrics`), `csv` (report.csv), and for scale
//! `json` (profile.json) and `table` (the console report).
//!
//! **scrape**: ns per span (create + enter + exit + close, empty body) on the measured thread,
//! `quiet` with nothing else running, `scraped` while another thread GETs `/metrics` from the
//! endpoint in a loop (each scrape a snapshot and a render; the number of scrapes is printed).
//! The endpoint must not slow recording down: a scrape reads the shards as a snapshot does,
//! taking no lock the recording thread takes once warm. On a 2-core machine the scraping
//! thread and the server thread share the cores with the measured one.
//!
//! Measurement: 1 s warm-up, 2 s measurement, 30 samples per case.

use std::hint::black_box;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use spanprof::output::{Csv, Format, Json, Prometheus, Table};
use spanprof::{ProfileLayer, Snapshot};
use tracing::info_span;

// Only `spanprof` of the shared subscribers is used here.
#[allow(dead_code)]
mod common;

const NAMES: usize = 100;

/// A profile of [`NAMES`] span names: one recorded name's statistics under 100 names.
fn profile() -> Snapshot {
    let (dispatch, guard) = common::spanprof(ProfileLayer::builder());
    tracing::dispatcher::with_default(&dispatch, || {
        for i in 0..2000u64 {
            info_span!("step", items = 64u64).in_scope(|| {
                let spin = (i * 7919) % 200;
                for k in 0..spin {
                    black_box(k);
                }
                info_span!("child").in_scope(|| black_box(i));
            });
        }
    });
    let mut snap = guard.snapshot();
    let step = snap.span("step").expect("recorded").clone();
    snap.spans = (0..NAMES)
        .map(|i| {
            let mut s = step.clone();
            s.name = format!("span_{i:03}");
            s
        })
        .collect();
    snap
}

fn render(c: &mut Criterion) {
    let snap = profile();
    let mut group = c.benchmark_group("render");
    let formats: [(&str, Box<dyn Format>); 4] = [
        ("prometheus", Box::new(Prometheus::new())),
        ("csv", Box::new(Csv::new())),
        ("json", Box::new(Json)),
        ("table", Box::new(Table::new())),
    ];
    for (name, format) in formats {
        let mut out = Vec::with_capacity(1 << 20);
        format.render(&snap, &mut out).expect("renders");
        assert!(
            String::from_utf8_lossy(&out).contains("span_099"),
            "{name}: every name rendered"
        );
        group.bench_function(name, |b| {
            b.iter(|| {
                out.clear();
                format.render(black_box(&snap), &mut out).expect("renders");
                black_box(out.len())
            })
        });
    }
    group.finish();
}

fn one_span() {
    let span = info_span!("bench_span");
    let entered = span.enter();
    black_box(&entered);
    drop(entered);
    drop(span);
}

/// GETs `/metrics` once; the body's length.
fn scrape(addr: SocketAddr) -> usize {
    let mut stream = TcpStream::connect(addr).expect("connects");
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").expect("sends");
    let mut body = Vec::new();
    stream.read_to_end(&mut body).expect("reads");
    assert!(body.starts_with(b"HTTP/1.1 200") || body.starts_with(b"HTTP/1.0 200"));
    body.len()
}

fn scrape_under_recording(c: &mut Criterion) {
    let mut group = c.benchmark_group("scrape");
    let (dispatch, guard) =
        common::spanprof(ProfileLayer::builder().with_metrics_addr(([127, 0, 0, 1], 0)));
    let addr = guard.metrics_addr().expect("served");
    tracing::dispatcher::with_default(&dispatch, || {
        group.bench_function("quiet", |b| b.iter(one_span));
        let stop = Arc::new(AtomicBool::new(false));
        let scrapes = Arc::new(AtomicU64::new(0));
        let scraper = std::thread::Builder::new()
            .name("bench-scraper".to_string())
            .spawn({
                let (stop, scrapes) = (stop.clone(), scrapes.clone());
                move || {
                    while !stop.load(Ordering::Relaxed) {
                        black_box(scrape(addr));
                        scrapes.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
            .expect("spawns");
        // The endpoint answers before the measurement starts.
        while scrapes.load(Ordering::Relaxed) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        group.bench_function("scraped", |b| b.iter(one_span));
        stop.store(true, Ordering::Relaxed);
        scraper.join().expect("scraper");
        eprintln!(
            "scrape/scraped: {} scrapes of /metrics during the case",
            scrapes.load(Ordering::Relaxed)
        );
    });
    let calls = guard.snapshot().span("bench_span").map_or(0, |s| s.calls);
    assert!(calls > 0, "the spans were recorded");
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30)
}

criterion_group! {
    name = benches;
    config = config();
    targets = render, scrape_under_recording
}
criterion_main!(benches);

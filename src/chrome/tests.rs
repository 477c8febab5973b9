//! Counter tracks end to end, with a fake counter source (the real sampler is wired in at
//! merge): the builder, the guard, the registry, tracing-chrome's file, the rewrite.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tracing_subscriber::prelude::*;

use super::counters::{Counter, CounterSource};
use super::{ChromeOptions, Schedule};
use crate::{ProfileLayer, ReportTarget};

/// Samples pushed by the test at known moments; answers with those inside the interval.
#[derive(Default)]
struct FakeSource {
    samples: Mutex<Vec<Counter>>,
    asked: Mutex<Vec<(Instant, Instant)>>,
}

impl FakeSource {
    fn sample(&self, step: u64) {
        self.samples.lock().unwrap().push(Counter {
            at: Instant::now(),
            name: "memory".into(),
            values: vec![
                ("rss_mb".into(), 800.0 + step as f64),
                ("heap_mb".into(), 100.0 + step as f64),
            ],
        });
    }
}

impl CounterSource for FakeSource {
    fn counters_between(&self, from: Instant, to: Instant) -> Vec<Counter> {
        self.asked.lock().unwrap().push((from, to));
        self.samples
            .lock()
            .unwrap()
            .iter()
            .filter(|c| from <= c.at && c.at <= to)
            .cloned()
            .collect()
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spanprof-unit-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn read(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn spin(d: Duration) {
    let start = Instant::now();
    while start.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// (begin ts, end ts) of every completed span of `name`, from well-formed B/E pairs.
fn intervals(events: &[Value], name: &str) -> Vec<(f64, f64)> {
    let mut stacks: BTreeMap<String, Vec<(String, f64)>> = BTreeMap::new();
    let mut out = Vec::new();
    for e in events {
        let stack = stacks.entry(e["tid"].to_string()).or_default();
        let ts = e["ts"].as_f64().unwrap_or(0.0);
        match e["ph"].as_str() {
            Some("B") => stack.push((e["name"].as_str().unwrap().to_string(), ts)),
            Some("E") => {
                let (n, begin) = stack.pop().expect("E without B");
                assert_eq!(n, e["name"].as_str().unwrap(), "E closes another span");
                if n == name {
                    out.push((begin, ts));
                }
            }
            _ => {}
        }
    }
    assert!(stacks.values().all(|s| s.is_empty()), "B without E");
    out
}

#[test]
fn counter_samples_become_counter_tracks_on_the_trace_time_base() {
    let dir = temp_dir("counters");
    let source = Arc::new(FakeSource::default());
    let (layer, guard) = ProfileLayer::builder()
        .with_env(false)
        .with_report(ReportTarget::Off)
        .with_chrome(
            ChromeOptions::dir(&dir)
                .with_steps("step", Schedule::new(1, 0, 2).unwrap().with_repeat(2)),
        )
        .build()
        .unwrap();
    let session = guard.handle().chrome_session().unwrap();
    session.set_counter_source(source.clone());
    let dispatch = tracing::Dispatch::new(
        tracing_subscriber::registry()
            .with(layer)
            .with(guard.chrome_layer()),
    );
    tracing::dispatcher::with_default(&dispatch, || {
        for step in 0..8u64 {
            let _s = tracing::info_span!("step", step).entered();
            let _w = tracing::info_span!("sampled").entered();
            spin(Duration::from_micros(300));
            source.sample(step); // in the middle of `sampled`
            spin(Duration::from_micros(300));
        }
    });
    let outputs = guard.finish().unwrap();
    // wait 1, active 2: steps 1-2 and 4-5.
    let expected = [
        dir.join("step_steps_1-2.json"),
        dir.join("step_steps_4-5.json"),
    ];
    assert_eq!(outputs.traces, expected);
    assert_eq!(
        source.asked.lock().unwrap().len(),
        2,
        "one request per window"
    );
    for (file, steps) in expected.iter().zip([[1u64, 2], [4, 5]]) {
        let events = read(file);
        let counters: Vec<&Value> = events.iter().filter(|e| e["ph"] == "C").collect();
        assert_eq!(counters.len(), 2, "{}", file.display());
        let sampled = intervals(&events, "sampled");
        assert_eq!(sampled.len(), 2);
        for ((c, step), (begin, end)) in counters.iter().zip(steps).zip(&sampled) {
            assert_eq!(c["name"], "memory");
            assert_eq!(c["args"]["rss_mb"].as_f64(), Some(800.0 + step as f64));
            assert_eq!(c["args"]["heap_mb"].as_f64(), Some(100.0 + step as f64));
            // Same time base as tracing-chrome's ts: the sample lies inside its span (300 µs
            // from either end, so any skew of the base above that would show).
            let ts = c["ts"].as_f64().unwrap();
            assert!(
                *begin + 250.0 < ts && ts < *end - 250.0,
                "counter at {ts} µs outside `sampled` [{begin}, {end}]"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn finish_is_idempotent_and_stops_tracing() {
    let dir = temp_dir("finish");
    let (layer, guard) = ProfileLayer::builder()
        .with_env(false)
        .with_report(ReportTarget::Off)
        .with_chrome(ChromeOptions::dir(&dir).with_steps("step", Schedule::every_step()))
        .build()
        .unwrap();
    let handle = guard.handle();
    let dispatch = tracing::Dispatch::new(
        tracing_subscriber::registry()
            .with(layer)
            .with(guard.chrome_layer()),
    );
    assert!(guard
        .chrome_layer::<tracing_subscriber::Registry>()
        .is_none());
    tracing::dispatcher::with_default(&dispatch, || {
        drop(tracing::info_span!("step").entered());
        let first = handle.finish_chrome().unwrap();
        assert_eq!(first, vec![dir.join("step_steps_0-0.json")]);
        // Finished: further steps open no window.
        drop(tracing::info_span!("step").entered());
        assert_eq!(handle.finish_chrome().unwrap(), first);
        assert_eq!(handle.chrome_traces(), first);
    });
    let outputs = guard.finish().unwrap();
    assert_eq!(outputs.traces.len(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

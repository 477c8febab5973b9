//! The OTLP metrics push against a collector on loopback: a `TcpListener` on 127.0.0.1 that reads
//! the HTTP requests and decodes their bodies with the official generated types
//! (`opentelemetry-proto`); data points checked against the profile.
//!
//! A test binary of its own (not a module of `tests/it/`): its tests set the global default
//! subscriber (`support::events::capture`, to read spanprof's warnings from its export thread)
//! and the `OTEL_*` variables of the process's environment.
#![cfg(feature = "otlp")]

mod support;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, HistogramDataPoint, Metric, NumberDataPoint,
};
use prost::Message;
use spanprof::otlp::OtlpOptions;
use spanprof::output::{Destination, Json};
use spanprof::profile::buckets::{bucket_top, export_bounds_ns};
use spanprof::profile::metrics::{HistogramValue, FLOAT_SCALE};
use spanprof::profile::{MetricKind, MetricValue, SpanStats, Stat};
use spanprof::{Every, ProfileLayer, ReportTarget, Snapshot};
use support::events::{capture, wait_until};
use tracing_subscriber::prelude::*;

/// One request the collector received.
#[derive(Debug, Clone)]
struct Received {
    path: String,
    /// Header names in lower case.
    headers: HashMap<String, String>,
    request: ExportMetricsServiceRequest,
}

/// A collector on 127.0.0.1 answering every request with `status`.
struct Collector {
    port: u16,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Collector {
    fn start(status: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let store = received.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let store = store.clone();
                std::thread::spawn(move || serve(stream, status, &store));
            }
        });
        Self { port, received }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

/// Serves the requests of one connection (kept alive) until the client closes it.
fn serve(stream: TcpStream, status: u16, store: &Mutex<Vec<Received>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
        assert!(line.starts_with("POST "), "{line}");
        let mut headers = HashMap::new();
        loop {
            let mut h = String::new();
            reader.read_line(&mut h).unwrap();
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            let (k, v) = h.split_once(':').unwrap();
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
        let len: usize = headers["content-length"].parse().unwrap();
        let mut body = vec![0; len];
        reader.read_exact(&mut body).unwrap();
        if headers.get("content-encoding").map(String::as_str) == Some("gzip") {
            let mut plain = Vec::new();
            flate2::read::GzDecoder::new(&body[..])
                .read_to_end(&mut plain)
                .unwrap();
            body = plain;
        }
        let request = ExportMetricsServiceRequest::decode(body.as_slice()).unwrap();
        store.lock().unwrap().push(Received {
            path,
            headers,
            request,
        });
        let reason = if status == 200 { "OK" } else { "Unavailable" };
        write!(
            writer,
            "HTTP/1.1 {status} {reason}\r\nContent-Length: 0\r\n\r\n"
        )
        .unwrap();
    }
}

/// Sets environment variables for the life of the value (the tests that do are run one at a
/// time by [`capture`]'s lock).
struct Env(Vec<&'static str>);

impl Env {
    fn set(pairs: &[(&'static str, &str)]) -> Self {
        for (k, v) in pairs {
            std::env::set_var(k, v);
        }
        Env(pairs.iter().map(|(k, _)| *k).collect())
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        for k in &self.0 {
            std::env::remove_var(k);
        }
    }
}

fn string(kv: &[KeyValue], key: &str) -> Option<String> {
    kv.iter()
        .find(|a| a.key == key)
        .and_then(|a| match a.value.as_ref()?.value.as_ref()? {
            any_value::Value::StringValue(s) => Some(s.clone()),
            _ => None,
        })
}

/// A string attribute of the request's resource.
fn resource_attribute(r: &Received, key: &str) -> String {
    let resource = r.request.resource_metrics[0].resource.as_ref().unwrap();
    string(&resource.attributes, key).unwrap_or_else(|| panic!("no resource attribute {key}"))
}

fn metrics(r: &Received) -> &[Metric] {
    &r.request.resource_metrics[0].scope_metrics[0].metrics
}

fn metric<'a>(r: &'a Received, name: &str) -> &'a Metric {
    metrics(r)
        .iter()
        .find(|m| m.name == name)
        .unwrap_or_else(|| panic!("no metric {name}"))
}

/// The data point of a histogram metric for span name `s`.
fn histogram_point<'a>(r: &'a Received, name: &str, s: &SpanStats) -> &'a HistogramDataPoint {
    let Some(metric::Data::Histogram(h)) = &metric(r, name).data else {
        panic!("{name} is not a histogram");
    };
    h.data_points
        .iter()
        .find(|p| {
            string(&p.attributes, "span.name").as_deref() == Some(&s.name)
                && string(&p.attributes, "span.target").as_deref() == Some(&s.target)
        })
        .unwrap_or_else(|| panic!("no {name} point for {}", s.name))
}

fn sum_point<'a>(r: &'a Received, name: &str, s: &SpanStats) -> &'a NumberDataPoint {
    let Some(metric::Data::Sum(sum)) = &metric(r, name).data else {
        panic!("{name} is not a sum");
    };
    assert!(sum.is_monotonic);
    sum.data_points
        .iter()
        .find(|p| string(&p.attributes, "span.name").as_deref() == Some(&s.name))
        .unwrap()
}

fn int(p: &NumberDataPoint) -> u64 {
    match p.value {
        Some(number_data_point::Value::AsInt(v)) => v as u64,
        ref v => panic!("not an integer: {v:?}"),
    }
}

/// Checks one histogram data point against the profile's statistic: counts, sum, minimum,
/// maximum and every bucket count exactly.
fn check_histogram(p: &HistogramDataPoint, stat: &Stat, what: &str) {
    let bounds = export_bounds_ns();
    assert_eq!(p.count, stat.count, "{what}");
    assert_eq!(p.sum, Some(stat.total_ns as f64 / 1e9), "{what}");
    assert_eq!(p.min, Some(stat.min_ns as f64 / 1e9), "{what}");
    assert_eq!(p.max, Some(stat.max_ns as f64 / 1e9), "{what}");
    let seconds: Vec<f64> = bounds.iter().map(|&b| b as f64 / 1e9).collect();
    assert_eq!(p.explicit_bounds, seconds, "{what}");
    assert_eq!(p.bucket_counts.len(), bounds.len() + 1, "{what}");
    assert_eq!(p.bucket_counts.iter().sum::<u64>(), stat.count, "{what}");
    let mut below = 0;
    for (i, &b) in bounds.iter().enumerate() {
        let at_or_below = stat.histogram.count_at_or_below(b);
        assert_eq!(
            p.bucket_counts[i],
            at_or_below - below,
            "{what} bucket ≤ {b} ns"
        );
        below = at_or_below;
    }
}

fn work(n: u64) {
    tracing::info_span!("train_step").in_scope(|| {
        for i in 0..n {
            tracing::info_span!("matmul", items = i).in_scope(|| {
                std::hint::black_box((0..(i * 500)).sum::<u64>());
            });
        }
        tracing::info_span!("load").in_scope(|| {
            tracing::error!("a bad batch");
        });
    });
}

#[test]
fn the_last_push_carries_the_profile_s_exact_histograms() {
    let (_one, _events) = capture();
    let collector = Collector::start(200);
    let (dispatch, guard) = support::install(
        ProfileLayer::builder().with_otlp(
            OtlpOptions::new(collector.url("/v1/metrics"))
                .with_header("authorization", "Bearer token")
                .with_service_name("unit-test"),
        ),
    );
    let handle = guard.handle();
    tracing::dispatcher::with_default(&dispatch, || {
        for _ in 0..20 {
            work(30);
        }
    });
    guard.finish().unwrap();
    let snapshot: Snapshot = handle.snapshot();
    // The default cadence with OTLP is 60 s: one push, the last.
    let received = collector.received();
    assert_eq!(received.len(), 1, "{received:#?}");
    let r = &received[0];
    assert_eq!(r.path, "/v1/metrics");
    assert_eq!(r.headers["content-type"], "application/x-protobuf");
    assert_eq!(r.headers["authorization"], "Bearer token");
    assert_eq!(resource_attribute(r, "service.name"), "unit-test");
    assert_eq!(resource_attribute(r, "telemetry.sdk.name"), "spanprof");
    assert_eq!(snapshot.spans.len(), 3);
    for s in &snapshot.spans {
        for (metric, stat) in [
            ("spanprof.span.busy", &s.entry_busy),
            ("spanprof.span.self", &s.entry_self),
            ("spanprof.span.wall", &s.wall),
        ] {
            let p = histogram_point(r, metric, s);
            check_histogram(p, stat, &format!("{} {metric}", s.name));
            assert_eq!(p.start_time_unix_nano, snapshot.run.start_unix_ns);
            assert!(p.time_unix_nano > p.start_time_unix_nano);
        }
        assert_eq!(int(sum_point(r, "spanprof.span.calls", s)), s.calls);
        assert_eq!(int(sum_point(r, "spanprof.span.instances", s)), s.instances);
        assert_eq!(int(sum_point(r, "spanprof.span.errors", s)), s.errors);
    }
    let matmul = snapshot.span("matmul").unwrap();
    assert_eq!(matmul.calls, 600);
    assert_eq!(
        int(sum_point(r, "spanprof.span.items", matmul)),
        20 * (0..30).sum::<u64>()
    );
    assert_eq!(snapshot.span("load").unwrap().errors, 20);
    // Several buckets in use: the check above compared more than one.
    let busy = histogram_point(r, "spanprof.span.busy", matmul);
    assert!(
        busy.bucket_counts.iter().filter(|&&n| n > 0).count() >= 2,
        "{busy:?}"
    );
}

#[test]
fn the_otel_variables_configure_the_push_with_no_code_change() {
    let (_one, _events) = capture();
    let collector = Collector::start(200);
    let base = collector.url("/base");
    let _env = Env::set(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", &base),
        (
            "OTEL_EXPORTER_OTLP_HEADERS",
            "x-api-key=secret%20one,x-team=ml",
        ),
        ("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "x-team=infra"),
        ("OTEL_SERVICE_NAME", "trainer"),
        ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=ci"),
        ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
        ("SPANPROF_EVERY", "2 steps"),
        ("SPANPROF_STEP", "train_step"),
    ]);
    // No OTLP or cadence in the code: the variables give both.
    let (layer, guard) = ProfileLayer::builder()
        .with_report(ReportTarget::Off)
        .build()
        .unwrap();
    let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
    tracing::dispatcher::with_default(&dispatch, || {
        for pushes in 1..=3 {
            work(2);
            work(2);
            wait_until("a push every 2 steps", || {
                collector.received().len() == pushes
            });
        }
    });
    let start = Instant::now();
    guard.finish().unwrap();
    assert!(start.elapsed() < Duration::from_secs(30));
    let received = collector.received();
    assert_eq!(
        received.len(),
        4,
        "3 windows of 2 steps, then the last push"
    );
    for (i, r) in received.iter().enumerate() {
        assert_eq!(r.path, "/base/v1/metrics");
        assert_eq!(r.headers["x-api-key"], "secret one");
        assert_eq!(r.headers["x-team"], "infra", "the metrics variable wins");
        assert_eq!(r.headers["content-encoding"], "gzip");
        assert_eq!(resource_attribute(r, "service.name"), "trainer");
        assert_eq!(resource_attribute(r, "deployment.environment"), "ci");
        // Cumulative: each push counts every step so far.
        let Some(metric::Data::Sum(calls)) = &metric(r, "spanprof.span.calls").data else {
            panic!()
        };
        let steps = calls
            .data_points
            .iter()
            .find(|p| string(&p.attributes, "span.name").as_deref() == Some("train_step"))
            .map(int);
        assert_eq!(steps, Some(2 * (i as u64 + 1).min(3)), "push {i}");
    }
}

#[test]
fn an_unsupported_protocol_is_a_warning_and_no_push() {
    let (_one, events) = capture();
    let collector = Collector::start(200);
    let base = collector.url("");
    let _env = Env::set(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", &base),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
    ]);
    let (layer, guard) = ProfileLayer::builder()
        .with_report(ReportTarget::Off)
        .build()
        .unwrap();
    let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
    tracing::dispatcher::with_default(&dispatch, || work(2));
    guard.finish().unwrap();
    assert!(collector.received().is_empty());
    let warned =
        events.lock().unwrap().iter().any(|e| {
            e["level"] == "WARN" && e["message"].contains("OTEL_EXPORTER_OTLP_PROTOCOL=grpc")
        });
    assert!(warned, "{:?}", events.lock().unwrap());
}

#[test]
fn a_collector_that_is_down_costs_a_bounded_retry_and_one_warning() {
    let (_one, events) = capture();
    let warnings = || {
        events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e["message"].contains("could not push OTLP metrics"))
            .count()
    };
    // A collector that answers 503 to everything: each push retries until its timeout.
    let unavailable = Collector::start(503);
    let (dispatch, guard) = support::install(
        ProfileLayer::builder()
            .with_every(Every::Period(Duration::from_millis(10)))
            .with_otlp(
                OtlpOptions::new(unavailable.url("/v1/metrics"))
                    .with_timeout(Duration::from_millis(300)),
            ),
    );
    tracing::dispatcher::with_default(&dispatch, || work(2));
    // Several pushes of several tries each (a push retries at 100 ms, then 200 ms).
    wait_until("failed pushes", || unavailable.received().len() >= 8);
    guard.finish().unwrap();
    assert_eq!(warnings(), 1, "one warning while it stays down");
    // It names the collector's answer, not the end of the retries.
    let warning = |events: &Mutex<Vec<HashMap<String, String>>>| {
        events
            .lock()
            .unwrap()
            .iter()
            .find(|e| e["message"].contains("could not push OTLP metrics"))
            .map(|e| e["message"].clone())
            .unwrap()
    };
    let told = warning(&events);
    assert!(
        told.contains("503") && !told.contains("timed out"),
        "{told}"
    );

    // A closed port: the connection is refused at once; finishing still returns promptly.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    events.lock().unwrap().clear();
    let (dispatch, guard) = support::install(
        ProfileLayer::builder().with_otlp(
            OtlpOptions::new(format!("http://127.0.0.1:{port}/v1/metrics"))
                .with_timeout(Duration::from_millis(500)),
        ),
    );
    tracing::dispatcher::with_default(&dispatch, || work(2));
    let start = Instant::now();
    guard.finish().unwrap();
    // Bounded by the 0.5 s timeout (plus a margin); 10 s is generous.
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(warnings(), 1);
    let told = warning(&events);
    assert!(!told.contains("timed out"), "{told}");
}

#[test]
fn encoding_a_push_of_100_span_names_is_cheap_enough_to_measure() {
    // The cost of building and encoding one push, for the README (printed, not asserted).
    let (dispatch, guard) = support::install(ProfileLayer::builder());
    tracing::dispatcher::with_default(&dispatch, || {
        macro_rules! names {
            ($($n:literal)*) => { $( for i in 0..20u64 { tracing::info_span!($n).in_scope(|| std::hint::black_box(i)); } )* };
        }
        names!("n00" "n01" "n02" "n03" "n04" "n05" "n06" "n07" "n08" "n09"
               "n10" "n11" "n12" "n13" "n14" "n15" "n16" "n17" "n18" "n19"
               "n20" "n21" "n22" "n23" "n24" "n25" "n26" "n27" "n28" "n29"
               "n30" "n31" "n32" "n33" "n34" "n35" "n36" "n37" "n38" "n39"
               "n40" "n41" "n42" "n43" "n44" "n45" "n46" "n47" "n48" "n49"
               "n50" "n51" "n52" "n53" "n54" "n55" "n56" "n57" "n58" "n59"
               "n60" "n61" "n62" "n63" "n64" "n65" "n66" "n67" "n68" "n69"
               "n70" "n71" "n72" "n73" "n74" "n75" "n76" "n77" "n78" "n79"
               "n80" "n81" "n82" "n83" "n84" "n85" "n86" "n87" "n88" "n89"
               "n90" "n91" "n92" "n93" "n94" "n95" "n96" "n97" "n98" "n99");
    });
    let snapshot = support::finish_snapshot(guard);
    assert_eq!(snapshot.spans.len(), 100);
    let options = OtlpOptions::new("http://127.0.0.1:9/v1/metrics");
    let body = options.encode(&snapshot);
    let decoded = ExportMetricsServiceRequest::decode(body.as_slice()).unwrap();
    let metrics = &decoded.resource_metrics[0].scope_metrics[0].metrics;
    let span_metrics: Vec<_> = metrics
        .iter()
        .filter(|m| m.name.starts_with("spanprof.span.") && m.name != "spanprof.span.overhead")
        .collect();
    assert_eq!(
        span_metrics.len(),
        9,
        "3 histograms, calls, instances, errors, busy and self time, self share"
    );
    for m in span_metrics {
        let points = match &m.data {
            Some(metric::Data::Histogram(h)) => h.data_points.len(),
            Some(metric::Data::Sum(s)) => s.data_points.len(),
            Some(metric::Data::Gauge(g)) => g.data_points.len(),
            other => panic!("{other:?}"),
        };
        assert_eq!(points, 100, "{}", m.name);
    }
    let rounds = 50;
    let start = Instant::now();
    for _ in 0..rounds {
        std::hint::black_box(options.encode(&snapshot));
    }
    eprintln!(
        "OTLP push of 100 span names: {} bytes, {:?} to build and encode (mean of {rounds})",
        body.len(),
        start.elapsed() / rounds
    );
}

/// The data points of `name` whose attributes are `span.name` = `span` (none for `None`).
fn points_of<'a, T>(
    points: &'a [T],
    attributes: fn(&T) -> &[KeyValue],
    span: Option<&str>,
) -> &'a T {
    let found: Vec<&T> = points
        .iter()
        .filter(|p| string(attributes(p), "span.name").as_deref() == span)
        .collect();
    assert_eq!(found.len(), 1, "one point for {span:?}");
    found[0]
}

fn number(p: &NumberDataPoint) -> number_data_point::Value {
    p.value.unwrap()
}

/// Checks a histogram of event values against the profile's: count, sum, minimum, maximum and
/// every bucket count, at bounds that are bucket tops of the scales present (so the counts
/// are exact, not estimates).
fn check_value_histogram(p: &HistogramDataPoint, h: &HistogramValue, what: &str) {
    let stats = [(&h.integers, 1.0), (&h.floats, FLOAT_SCALE)];
    assert_eq!(p.count, h.count(), "{what}");
    let sum: f64 = stats
        .iter()
        .filter_map(|(s, scale)| s.as_ref().map(|s| s.total_ns as f64 / scale))
        .sum();
    assert_eq!(p.sum, Some(sum), "{what}");
    let (min, max) = h.min_max();
    assert_eq!((p.min, p.max), (Some(min), Some(max)), "{what}");
    assert_eq!(p.bucket_counts.len(), p.explicit_bounds.len() + 1, "{what}");
    assert_eq!(p.bucket_counts.iter().sum::<u64>(), h.count(), "{what}");
    let mut below = 0;
    for (i, &bound) in p.explicit_bounds.iter().enumerate() {
        let mut at_or_below = 0;
        for (stat, scale) in &stats {
            if let Some(stat) = stat {
                // The bound in this scale: whole units, or nano-units.
                let at = if *scale == 1.0 {
                    bound.floor() as u64
                } else {
                    (bound * FLOAT_SCALE).round() as u64
                };
                assert_eq!(bucket_top(at), at, "{what}: {bound} is not a bucket top");
                at_or_below += stat.histogram.count_at_or_below(at);
            }
        }
        assert_eq!(
            p.bucket_counts[i],
            at_or_below - below,
            "{what} bucket ≤ {bound}"
        );
        below = at_or_below;
    }
    assert!(
        p.bucket_counts.iter().filter(|&&n| n > 0).count() >= 2,
        "{what}: several buckets compared: {:?}",
        p.bucket_counts
    );
}

#[test]
fn the_push_carries_metrics_from_events_and_spanprof_s_overhead_exactly() {
    let (_one, _events) = capture();
    let collector = Collector::start(200);
    let dir = support::temp_dir("otlp-event-metrics");
    let (dispatch, guard) = support::install(
        ProfileLayer::builder()
            // The profile written at the end is the snapshot of the last push.
            .with_output(Json, Destination::Dir(dir.clone()))
            .with_otlp(OtlpOptions::new(collector.url("/v1/metrics"))),
    );
    tracing::dispatcher::with_default(&dispatch, || {
        for step in 0..200u64 {
            tracing::info_span!("train_step").in_scope(|| {
                let delta = if step % 3 == 0 { -2i64 } else { 5 };
                tracing::info!(
                    monotonic_counter.samples = 32u64,
                    counter.queue_depth = delta,
                    histogram.batch_bytes = 100 + step * step * 50,
                    histogram.loss = 4.0 / (1.0 + step as f64),
                    gauge.learning_rate = 0.1 / (1.0 + step as f64),
                    "step"
                );
                // Integers and floats in one histogram.
                if step % 2 == 0 {
                    tracing::info!(histogram.wait_seconds = step / 10, "waited");
                } else {
                    tracing::info!(histogram.wait_seconds = step as f64 / 7.0, "waited");
                }
                tracing::info_span!("eval").in_scope(|| {
                    tracing::info!(monotonic_counter.samples = 1.5f64, "eval");
                });
            });
        }
        // Outside every span: no span attributes.
        tracing::info!(gauge.memory_bytes = 1_234_567u64, "outside");
    });
    guard.finish().unwrap();
    let snapshot = Snapshot::read_json(dir.join("profile.json")).unwrap();
    let received = collector.received();
    assert_eq!(received.len(), 1);
    let r = &received[0];
    assert!(snapshot.metrics.len() >= 7, "{:?}", snapshot.metrics);
    for m in &snapshot.metrics {
        let what = format!("{} {:?} in {:?}", m.name, m.kind, m.span);
        // The metric's own name, its unit in UCUM.
        let pushed = metrics(r)
            .iter()
            .find(|o| {
                o.name == m.name
                    && matches!(
                        (&o.data, m.kind),
                        (Some(metric::Data::Sum(_)), MetricKind::Counter)
                            | (Some(metric::Data::Sum(_)), MetricKind::MonotonicCounter)
                            | (Some(metric::Data::Histogram(_)), MetricKind::Histogram)
                            | (Some(metric::Data::Gauge(_)), MetricKind::Gauge)
                    )
            })
            .unwrap_or_else(|| panic!("no metric for {what}"));
        let unit = match m.name.as_str() {
            "batch_bytes" | "memory_bytes" => "By",
            "wait_seconds" => "s",
            _ => "",
        };
        assert_eq!(pushed.unit, unit, "{what}");
        let span = m.span.as_deref();
        match (&pushed.data, &m.value) {
            (Some(metric::Data::Sum(sum)), MetricValue::Sum(value)) => {
                assert_eq!(sum.is_monotonic, m.kind == MetricKind::MonotonicCounter);
                assert_eq!(sum.aggregation_temporality, 2, "cumulative");
                let p = points_of(&sum.data_points, |p| &p.attributes, span);
                let expected = if value.float == 0.0 {
                    number_data_point::Value::AsInt(value.integer)
                } else {
                    number_data_point::Value::AsDouble(value.total())
                };
                assert_eq!(number(p), expected, "{what}");
                assert_eq!(
                    string(&p.attributes, "span.target").as_deref(),
                    m.span_target.as_deref()
                );
            }
            (Some(metric::Data::Histogram(h)), MetricValue::Histogram(value)) => {
                let p = points_of(&h.data_points, |p| &p.attributes, span);
                check_value_histogram(p, value, &what);
                assert_eq!(
                    string(&p.attributes, "span.target").as_deref(),
                    m.span_target.as_deref()
                );
            }
            (Some(metric::Data::Gauge(g)), MetricValue::Gauge(value)) => {
                let p = points_of(&g.data_points, |p| &p.attributes, span);
                assert_eq!(
                    number(p),
                    number_data_point::Value::AsDouble(value.last),
                    "{what}"
                );
                assert_eq!(p.time_unix_nano, value.last_unix_ns, "{what}");
            }
            other => panic!("{what}: {other:?}"),
        }
    }
    // The figures the run recorded, so the comparison above was of the right things.
    let samples = |span: &str| {
        snapshot
            .metrics
            .iter()
            .find(|m| m.name == "samples" && m.span.as_deref() == Some(span))
            .map(|m| match &m.value {
                MetricValue::Sum(s) => s.total(),
                v => panic!("{v:?}"),
            })
    };
    assert_eq!(samples("train_step"), Some(32.0 * 200.0));
    assert_eq!(samples("eval"), Some(1.5 * 200.0));
    let Some(metric::Data::Sum(queue)) = &metric(r, "queue_depth").data else {
        panic!()
    };
    let queue_depth: i64 = (0..200).map(|s| if s % 3 == 0 { -2 } else { 5 }).sum();
    assert_eq!(
        queue.data_points[0].value,
        Some(number_data_point::Value::AsInt(queue_depth))
    );
    let Some(metric::Data::Gauge(memory)) = &metric(r, "memory_bytes").data else {
        panic!()
    };
    assert!(
        memory.data_points[0].attributes.is_empty(),
        "outside every span"
    );
    assert_eq!(
        memory.data_points[0].value,
        Some(number_data_point::Value::AsDouble(1_234_567.0))
    );
    let Some(metric::Data::Gauge(rate)) = &metric(r, "learning_rate").data else {
        panic!()
    };
    assert_eq!(
        rate.data_points[0].value,
        Some(number_data_point::Value::AsDouble(0.1 / 200.0))
    );

    // spanprof's own cost: the profile's estimate.
    let overhead = snapshot
        .overhead
        .as_ref()
        .expect("calibrated on the real clock");
    let gauge = |name: &str| {
        let Some(metric::Data::Gauge(g)) = &metric(r, name).data else {
            panic!("{name} is not a gauge")
        };
        assert_eq!(g.data_points.len(), 1);
        number(&g.data_points[0])
    };
    assert_eq!(
        gauge("spanprof.overhead.ratio"),
        number_data_point::Value::AsDouble(overhead.percent / 100.0)
    );
    assert_eq!(metric(r, "spanprof.overhead.ratio").unit, "1");
    assert_eq!(
        gauge("spanprof.overhead.estimated"),
        number_data_point::Value::AsDouble(overhead.estimated_ns as f64 / 1e9)
    );
    assert!(overhead.estimated_ns > 0);
    for s in &snapshot.spans {
        let p = sum_point(r, "spanprof.span.overhead", s);
        assert_eq!(
            number(p),
            number_data_point::Value::AsDouble(s.overhead_ns.unwrap() as f64 / 1e9),
            "{}",
            s.name
        );
        assert_eq!(
            string(&p.attributes, "span.target").as_deref(),
            Some(s.target.as_str())
        );
    }
    let Some(metric::Data::Sum(steps)) = &metric(r, "spanprof.backoff.steps").data else {
        panic!()
    };
    for p in &steps.data_points {
        let on = string(&p.attributes, "direction") == Some("on".to_string());
        let n = snapshot.backoff.iter().filter(|s| s.on == on).count();
        assert_eq!(int(p), n as u64);
    }
    assert_eq!(steps.data_points.len(), 2);
}

#[test]
fn the_push_shows_the_span_names_every_output_shows() {
    let (_one, _events) = capture();
    let collector = Collector::start(200);
    let (dispatch, guard) = support::install(
        ProfileLayer::builder()
            .with_otlp(OtlpOptions::new(collector.url("/v1/metrics")))
            .with_output_filter("matmul,load".parse().unwrap()),
    );
    let handle = guard.handle();
    tracing::dispatcher::with_default(&dispatch, || work(5));
    guard.finish().unwrap();
    let received = collector.received();
    assert_eq!(received.len(), 1, "{received:#?}");
    let Some(metric::Data::Sum(calls)) = &metric(&received[0], "spanprof.span.calls").data else {
        panic!("calls is not a sum");
    };
    let pushed: std::collections::BTreeSet<String> = calls
        .data_points
        .iter()
        .filter_map(|p| string(&p.attributes, "span.name"))
        .collect();
    assert_eq!(pushed, ["load", "matmul"].map(String::from).into());
    // The profile itself keeps every name.
    assert!(handle.snapshot().span("train_step").is_some());
}

/// GPU time per span (feature `cuda`) against the fake CUDA driver (tests/fake_cuda), whose
/// script sets each event's time: the push carries each timed name's GPU calls, GPU time,
/// GPU ÷ busy and GPU-time histogram with the scripted values, and no GPU data point for a
/// name not timed.
#[cfg(all(target_os = "linux", feature = "cuda"))]
#[test]
fn the_push_carries_the_gpu_time_of_the_span_names_timed_on_the_gpu() {
    let Some(fake) = support::CLibrary::build(
        "otlp_cuda",
        "gpu",
        "fake_cuda/fake_cuda.c",
        "libcuda.so.1",
        &[],
    ) else {
        return;
    };
    // Before each cuEventRecord: forward's start +0, its end +10 ms, then +0, +30 ms: GPU time
    // 10, 30, 10, 30 ms.
    fake.write("fake_cuda.conf", "ADVANCE_US=0,10000,0,30000\n");
    let (_one, _events) = capture();
    let collector = Collector::start(200);
    let (clock, mock) = spanprof::clock::Clock::mock();
    let (dispatch, guard) = support::install(
        ProfileLayer::builder()
            .with_clock(clock)
            .with_cuda_library(&fake.lib)
            .with_gpu_spans("[forward]")
            .unwrap()
            .with_otlp(OtlpOptions::new(collector.url("/v1/metrics"))),
    );
    let handle = guard.handle();
    tracing::dispatcher::with_default(&dispatch, || {
        for _ in 0..4 {
            tracing::info_span!("forward").in_scope(|| mock.advance(Duration::from_millis(5)));
            tracing::info_span!("load").in_scope(|| mock.advance(Duration::from_millis(1)));
        }
    });
    guard.finish().unwrap();
    let snapshot = handle.snapshot();
    let received = collector.received();
    assert_eq!(received.len(), 1, "{received:#?}");
    let r = &received[0];
    let forward = snapshot.span("forward").unwrap();
    // 4 entries timed, 80 ms on the GPU: 20 ms per entry over 5 ms busy, 4 (400 %).
    assert_eq!(int(sum_point(r, "spanprof.span.gpu_calls", forward)), 4);
    let gpu_time = sum_point(r, "spanprof.span.gpu_time", forward);
    assert_eq!(
        gpu_time.value,
        Some(number_data_point::Value::AsDouble(0.08))
    );
    let Some(metric::Data::Gauge(busy)) = &metric(r, "spanprof.span.gpu_busy").data else {
        panic!("gpu_busy is not a gauge");
    };
    assert_eq!(busy.data_points.len(), 1, "forward only");
    assert_eq!(
        busy.data_points[0].value,
        Some(number_data_point::Value::AsDouble(4.0))
    );
    assert_eq!(int(sum_point(r, "spanprof.span.gpu_untimed", forward)), 0);
    assert_eq!(int(sum_point(r, "spanprof.span.gpu_abandoned", forward)), 0);
    let gpu = forward.gpu_time.as_ref().unwrap();
    assert_eq!((gpu.time.count, gpu.time.total_ns), (4, 80_000_000));
    let p = histogram_point(r, "spanprof.span.gpu", forward);
    check_histogram(p, &gpu.time, "forward spanprof.span.gpu");
    assert_eq!(p.bucket_counts.iter().filter(|&&n| n > 0).count(), 2);
    // `load` was not chosen: no GPU data point of any GPU metric.
    for name in [
        "spanprof.span.gpu",
        "spanprof.span.gpu_calls",
        "spanprof.span.gpu_time",
        "spanprof.span.gpu_busy",
        "spanprof.span.gpu_untimed",
        "spanprof.span.gpu_abandoned",
    ] {
        let m = metric(r, name);
        let names: Vec<Option<String>> = match m.data.as_ref().unwrap() {
            metric::Data::Sum(s) => s
                .data_points
                .iter()
                .map(|p| string(&p.attributes, "span.name"))
                .collect(),
            metric::Data::Gauge(g) => g
                .data_points
                .iter()
                .map(|p| string(&p.attributes, "span.name"))
                .collect(),
            metric::Data::Histogram(h) => h
                .data_points
                .iter()
                .map(|p| string(&p.attributes, "span.name"))
                .collect(),
            other => panic!("{name}: {other:?}"),
        };
        assert_eq!(names, [Some("forward".to_string())], "{name}");
    }
}

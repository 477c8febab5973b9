//! OpenTelemetry metrics: the profile's histograms pushed to an OTLP/HTTP collector (feature
//! `otlp`), periodically and when the profile ends.
//!
//! Built with `otlp`, any program pushes when `OTEL_EXPORTER_OTLP_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` is set, with no code change; or configure it with
//! [`Builder::with_otlp`](crate::Builder::with_otlp) and [`OtlpOptions`].
//!
//! ```sh
//! OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 OTEL_SERVICE_NAME=trainer \
//!   cargo run --release --features otlp --example training_loop
//! ```
//!
//! # What is pushed
//!
//! One `ExportMetricsServiceRequest` per push (`POST`, `Content-Type: application/x-protobuf`,
//! optionally gzip), built from a snapshot on spanprof's export thread. Every metric is
//! cumulative since the profile started (`start_time_unix_nano`), with the attributes
//! `span.name` and `span.target` (one data point per span name and target):
//!
//! | metric | kind | unit | what |
//! |---|---|---|---|
//! | `spanprof.span.busy` | histogram | `s` | busy time of each entry (enter→exit) |
//! | `spanprof.span.self` | histogram | `s` | self time of each entry (busy minus child spans) |
//! | `spanprof.span.wall` | histogram | `s` | wall time of each closed instance (creation→close) |
//! | `spanprof.span.calls` | monotonic sum | `{call}` | completed entries |
//! | `spanprof.span.instances` | monotonic sum | `{instance}` | closed instances |
//! | `spanprof.span.errors` | monotonic sum | `{error}` | `error`-level events inside the spans |
//! | `spanprof.span.items`, `.bytes`, `.flops` | monotonic sum | `{item}`, `By`, `{flop}` | throughput fields, for names that have them |
//! | `spanprof.span.busy_time`, `.self_time` | monotonic sum | `s` | busy and self time of all calls, the report's `total` and `self`: where the back-off sampled the name, scaled to every call (the histograms' sums hold the spans recorded) |
//! | `spanprof.span.self_share` | gauge | `1` | self time as a share of every span name's (0 to 1), the report's self % |
//! | `spanprof.span.gpu` | histogram | `s` | GPU time of each entry timed with CUDA events (feature `cuda`), for span names timed on the GPU |
//! | `spanprof.span.gpu_calls`, `.gpu_time` | monotonic sum | `{call}`, `s` | entries timed on the GPU, and their GPU time |
//! | `spanprof.span.gpu_busy` | gauge | `1` | mean GPU time per timed entry ÷ mean busy time per entry (over 1: GPU-bound) |
//! | `spanprof.span.gpu_untimed`, `.gpu_abandoned` | monotonic sum | `{call}` | entries of a chosen name not timed (no free event pair, no context), and timed ones never read |
//!
//! The metrics of single values are figures of the catalogue ([`crate::profile::figures`]):
//! their names, units and descriptions come from its entries, as in the Prometheus text.
//!
//! Histograms have explicit bounds: [`crate::profile::buckets::export_bounds_ns`]
//! in seconds (1 µs to 100 s in a 1-2.5-5 series, each at the top of one of spanprof's
//! histogram buckets), so their bucket counts are the HDR histogram's exactly, not estimates;
//! sums, counts, minima and maxima are exact too.
//!
//! ## Metrics from events
//!
//! Each metric that events recorded ([`crate::profile::metrics`]) is pushed under its own
//! name, as `tracing-opentelemetry` does (`histogram.loss` → `loss`), one data point per span
//! name it was recorded in (attributes `span.name`, `span.target`; none for events outside
//! every profiled span), its unit in UCUM from the name's suffix (`_seconds` → `s`,
//! `_milliseconds` → `ms`, `_microseconds` → `us`, `_nanoseconds` → `ns`, `_bytes` → `By`,
//! `_ratio` → `1`, `_percent` → `%`; none otherwise):
//!
//! | field | pushed as |
//! |---|---|
//! | `monotonic_counter.<name>` | cumulative monotonic sum |
//! | `counter.<name>` | cumulative non-monotonic sum (up-down) |
//! | `histogram.<name>` | cumulative histogram with explicit bounds, in the metric's unit |
//! | `gauge.<name>` | gauge: the last value, at the time it was set |
//!
//! A sum is an integer while only integers were added (exact), a double once a float was.
//! A gauge's point has the time of its last value; its minimum and maximum stay in the
//! profile.
//!
//! A histogram's bucket counts are exact too: its bounds are a 1-2-5 series placed at tops
//! of the HDR buckets the values were recorded in (integers as they are, floats in
//! nano-units, see [`crate::profile::metrics`]):
//!
//! - integer values only: 1, 2, 5, 10, … 10¹² (from 256 on, each rounded up to its bucket's
//!   top, at most 1/128 above: 500 becomes 501);
//! - float values only: 10⁻⁹, 2 × 10⁻⁹, … 1000, each rounded up to the top of its
//!   nano-unit bucket (at most 1/128 above: 1 becomes 1.002438655);
//! - both: the same series, each bound moved up to the first nano-unit bucket top whose whole
//!   part is also an integer bucket top (every whole part below 256 is; above, up to 4%:
//!   1000 becomes 1039.38…).
//!
//! OpenTelemetry's exponential histograms cannot carry these counts exactly: their bucket
//! boundaries are powers of 2^(2^-scale), which the HDR buckets (linear within each power of
//! two, and in nano-units for floats) do not share, so explicit bounds are used. Counts,
//! sums (integers plus floats ÷ 10⁹), minima and maxima are the profile's exactly; floats are
//! as precise as the profile keeps them (nano-units; above 3600 clamped).
//!
//! ## spanprof's own cost
//!
//! Where the profile has the estimate ([`Snapshot::overhead`]):
//!
//! | metric | kind | unit | what |
//! |---|---|---|---|
//! | `spanprof.overhead.ratio` | gauge | `1` | estimated cost as a share of the process's CPU time (0..1; of wall time where CPU time is not readable) |
//! | `spanprof.overhead.estimated` | gauge | `s` | estimated cost since the start |
//! | `spanprof.backoff.steps` | monotonic sum | `{step}` | automatic back-off steps, attribute `direction` = `off` (readings switched off) or `on` (back on) |
//! | `spanprof.span.overhead` | monotonic sum | `s` | estimated cost in spans of each name (attributes `span.name`, `span.target`) |
//! | `spanprof.span.sample_every` | gauge (int) | `1` | N of each span name the back-off sampled: its histograms hold 1 span in N at least, its counts every span |
//!
//! The resource has `service.name` (`OTEL_SERVICE_NAME`, else `service.name` in
//! `OTEL_RESOURCE_ATTRIBUTES`, else `unknown_service:<program>`), the attributes of
//! `OTEL_RESOURCE_ATTRIBUTES`, `host.name`, `process.pid` and `telemetry.sdk.*`.
//!
//! # Environment
//!
//! | variable | meaning |
//! |---|---|
//! | `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` | the URL to post to, used as is |
//! | `OTEL_EXPORTER_OTLP_ENDPOINT` | a base URL: metrics go to its `v1/metrics` |
//! | `OTEL_EXPORTER_OTLP_HEADERS`, `…_METRICS_HEADERS` | `key=value,key2=value2` (values percent-decoded); the metrics ones win per key |
//! | `OTEL_EXPORTER_OTLP_TIMEOUT`, `…_METRICS_TIMEOUT` | milliseconds a push may take, retries included (default 10000) |
//! | `OTEL_EXPORTER_OTLP_COMPRESSION`, `…_METRICS_COMPRESSION` | `gzip` or `none` (default) |
//! | `OTEL_EXPORTER_OTLP_PROTOCOL`, `…_METRICS_PROTOCOL` | only `http/protobuf` (the default) |
//! | `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES` | the resource |
//! | `OTEL_METRIC_EXPORT_INTERVAL` | milliseconds between pushes (default 60000), unless [`Builder::with_every`](crate::Builder::with_every) or `SPANPROF_EVERY` sets the cadence |
//! | `OTEL_SDK_DISABLED=true`, `OTEL_METRICS_EXPORTER=none` | no push |
//!
//! The signal-specific variable wins over the generic one, and the variables over
//! [`OtlpOptions`]. As the OpenTelemetry specification asks, a value spanprof cannot use is a
//! warning naming the variable, never a failed build (other OpenTelemetry SDKs in the process
//! read the same variables): a bad timeout, interval or compression falls back to its default;
//! a protocol other than `http/protobuf` (`grpc`, `http/json`) or an endpoint that is not an
//! `http://` URL turns the push off. TLS is not built in: to reach an `https://` collector, push
//! to a local collector or agent over `http://`.
//!
//! # Cost and failures
//!
//! Pushes run on the export thread, never on the program's threads, and the hot path does not
//! change. A push that fails to connect, times out, or gets HTTP 429, 502, 503 or 504 is
//! retried with backoff (100 ms, doubling) until the timeout; a collector that is down costs
//! that and one warning at [`crate::PERF_TARGET`] (the next is logged after a
//! push succeeded again). When the profile ends, [`ProfileGuard::finish`](crate::ProfileGuard::finish)
//! waits for the last push at most the timeout.

use std::ffi::OsString;
use std::io::Write;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, AggregationTemporality, Gauge, Histogram, HistogramDataPoint,
    Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

use crate::error::{Error, Result};
use crate::profile::buckets::{bucket_top, export_bounds_ns};
use crate::profile::figures::{self as fig, Figure, Kind, Value};
use crate::profile::metrics::{HistogramValue, MetricKind, MetricValue, FLOAT_SCALE};
use crate::profile::{Snapshot, SpanStats, Stat, Totals};
use crate::PERF_TARGET;

/// Where and how to push OTLP metrics ([`Builder::with_otlp`](crate::Builder::with_otlp)); the
/// `OTEL_*` variables override it (see [`crate::otlp`]).
///
/// ```
/// use spanprof::otlp::OtlpOptions;
/// use std::time::Duration;
/// let options = OtlpOptions::new("http://127.0.0.1:4318/v1/metrics")
///     .with_header("authorization", "Bearer secret")
///     .with_timeout(Duration::from_secs(2))
///     .with_service_name("trainer");
/// assert_eq!(options.endpoint(), "http://127.0.0.1:4318/v1/metrics");
/// ```
#[derive(Clone, PartialEq)]
pub struct OtlpOptions {
    endpoint: String,
    headers: Vec<(String, String)>,
    timeout: Duration,
    gzip: bool,
    service_name: Option<String>,
    resource: Vec<(String, String)>,
}

/// Header values are not shown: they often hold credentials.
impl std::fmt::Debug for OtlpOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let headers: Vec<&str> = self.headers.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("OtlpOptions")
            .field("endpoint", &self.endpoint)
            .field("headers", &headers)
            .field("timeout", &self.timeout)
            .field("gzip", &self.gzip)
            .field("service_name", &self.service_name)
            .field("resource", &self.resource)
            .finish()
    }
}

impl OtlpOptions {
    /// How long a push may take, retries included, by default: 10 s (the OTLP default).
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
    /// Time between pushes by default (`OTEL_METRIC_EXPORT_INTERVAL`'s default): 60 s.
    pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);
    /// The longest timeout accepted: 1 h.
    pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);
    const ACCEPTED: &'static str =
        "an http:// URL (TLS is not built in) and a timeout from 1 ms to 1 h";

    /// Pushes to `metrics_endpoint`, the full URL (e.g. `http://127.0.0.1:4318/v1/metrics`),
    /// used as is, like `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`. It must be an `http://` URL, or
    /// [`Builder::build`](crate::Builder::build) fails.
    pub fn new(metrics_endpoint: impl Into<String>) -> Self {
        Self {
            endpoint: metrics_endpoint.into(),
            headers: Vec::new(),
            timeout: Self::DEFAULT_TIMEOUT,
            gzip: false,
            service_name: None,
            resource: Vec::new(),
        }
    }

    /// Adds a header sent with every push (e.g. an API key).
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        set(&mut self.headers, name.into(), value.into());
        self
    }

    /// How long one push may take, retries included (default [`Self::DEFAULT_TIMEOUT`]); from
    /// 1 ms to [`Self::MAX_TIMEOUT`], or [`Builder::build`](crate::Builder::build) fails.
    pub fn with_timeout(self, timeout: Duration) -> Self {
        Self { timeout, ..self }
    }

    /// Compresses the requests with gzip (default off).
    pub fn with_gzip(self, gzip: bool) -> Self {
        Self { gzip, ..self }
    }

    /// The `service.name` resource attribute (default `unknown_service:<program>`).
    pub fn with_service_name(self, name: impl Into<String>) -> Self {
        Self {
            service_name: Some(name.into()),
            ..self
        }
    }

    /// Adds a resource attribute (a string).
    pub fn with_resource_attribute(
        mut self,
        key: impl Into<String>,
        value: impl Into<String>,
    ) -> Self {
        set(&mut self.resource, key.into(), value.into());
        self
    }

    /// The URL pushes go to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The body of one push of `snapshot`: an `ExportMetricsServiceRequest`, protobuf-encoded
    /// (before compression).
    ///
    /// ```
    /// use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    /// use prost::Message;
    /// # let snapshot = spanprof::profile::Snapshot::from_json(
    /// #     include_str!("../tests/data/profile-v1-basic.json"), "doc")?;
    /// let options = spanprof::otlp::OtlpOptions::new("http://127.0.0.1:4318/v1/metrics");
    /// let request = ExportMetricsServiceRequest::decode(options.encode(&snapshot).as_slice())?;
    /// let metrics = &request.resource_metrics[0].scope_metrics[0].metrics;
    /// assert!(metrics.iter().any(|m| m.name == "spanprof.span.busy"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn encode(&self, snapshot: &Snapshot) -> Vec<u8> {
        request(snapshot, self, export_bounds_ns()).encode_to_vec()
    }

    /// The builder's options, checked by their rule.
    fn checked(self) -> Result<Self> {
        let timeout_ok = (Duration::from_millis(1)..=Self::MAX_TIMEOUT).contains(&self.timeout);
        if url_problem(&self.endpoint).is_some() || !timeout_ok {
            return Err(Error::InvalidSetting {
                method: "with_otlp",
                value: format!("{self:?}"),
                expected: Self::ACCEPTED,
            });
        }
        Ok(self)
    }
}

/// Sets `key` in a list of pairs (replacing an earlier value).
fn set(pairs: &mut Vec<(String, String)>, key: String, value: String) {
    match pairs.iter_mut().find(|(k, _)| *k == key) {
        Some(pair) => pair.1 = value,
        None => pairs.push((key, value)),
    }
}

/// Why `url` cannot be pushed to, if it cannot.
fn url_problem(url: &str) -> Option<&'static str> {
    let lower = url.to_ascii_lowercase();
    if lower.starts_with("https://") {
        Some("https needs TLS, which spanprof's OTLP exporter does not build in; push to an http:// collector or agent")
    } else if !lower.starts_with("http://") || url.len() <= "http://".len() {
        Some("not an http:// URL")
    } else {
        None
    }
}

/// A configuration warning at build time, when no subscriber may be installed yet: logged and
/// printed on stderr.
fn warn_config(why: &str) {
    tracing::warn!(target: PERF_TARGET, "{why}");
    eprintln!("spanprof: {why}");
}

/// `%XX` escapes decoded (W3C baggage values, as the OTLP variables spell them).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                // Both digits checked: below 256.
                out.push((hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0)) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `key=value,key2=value2` pairs (keys and values trimmed, values percent-decoded); an entry
/// without `=` or with an empty key is warned about and skipped.
fn parse_pairs(var: &str, text: &str) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    for entry in text.split(',').filter(|e| !e.trim().is_empty()) {
        match entry.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => {
                set(
                    &mut pairs,
                    percent_decode(k.trim()),
                    percent_decode(v.trim()),
                );
            }
            _ => warn_config(&format!(
                "spanprof ignores the entry {entry:?} of {var}: expected key=value"
            )),
        }
    }
    pairs
}

/// Resolves the OTLP push from the builder's options and the `OTEL_*` variables read through
/// `get`: the pusher (`None` when no endpoint is configured or the push is off) and the
/// interval between pushes.
pub(crate) fn resolve(
    options: Option<OtlpOptions>,
    get: &impl Fn(&str) -> Option<OsString>,
) -> Result<(Option<Pusher>, Option<Duration>)> {
    let options = options.map(OtlpOptions::checked).transpose()?;
    let var = |name: &str| {
        get(name)
            .map(|v| v.to_string_lossy().trim().to_string())
            .filter(|v| !v.is_empty())
    };
    // The metrics-specific variable, else the generic one: (variable, value).
    let either = |signal: &'static str, generic: &'static str| {
        var(signal)
            .map(|v| (signal, v))
            .or_else(|| var(generic).map(|v| (generic, v)))
    };
    if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
        || var("OTEL_METRICS_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"))
    {
        return Ok((None, None));
    }
    let endpoint = match (
        var("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"),
        var("OTEL_EXPORTER_OTLP_ENDPOINT"),
    ) {
        (Some(url), _) => Some(("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", url)),
        (None, Some(base)) => {
            let slash = if base.ends_with('/') { "" } else { "/" };
            Some((
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("{base}{slash}v1/metrics"),
            ))
        }
        (None, None) => None,
    };
    let Some(mut options) = (match (endpoint, options) {
        (Some((from, url)), options) => {
            if let Some(why) = url_problem(&url) {
                warn_config(&format!(
                    "spanprof does not push OTLP metrics: {from} gives {url:?}: {why}"
                ));
                return Ok((None, None));
            }
            Some(OtlpOptions {
                endpoint: url,
                ..options.unwrap_or_else(|| OtlpOptions::new(""))
            })
        }
        (None, options) => options,
    }) else {
        return Ok((None, None));
    };
    if let Some((from, protocol)) = either(
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ) {
        if protocol != "http/protobuf" {
            warn_config(&format!(
                "spanprof does not push OTLP metrics: {from}={protocol} is not supported; \
                 spanprof pushes over http/protobuf only (unset it or set http/protobuf)"
            ));
            return Ok((None, None));
        }
    }
    for generic_then_signal in [
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
    ] {
        if let Some(text) = var(generic_then_signal) {
            for (k, v) in parse_pairs(generic_then_signal, &text) {
                set(&mut options.headers, k, v);
            }
        }
    }
    if let Some((from, ms)) = either(
        "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    ) {
        match ms.parse::<u64>().map(Duration::from_millis) {
            Ok(t) if (Duration::from_millis(1)..=OtlpOptions::MAX_TIMEOUT).contains(&t) => {
                options.timeout = t;
            }
            _ => warn_config(&format!(
                "spanprof ignores {from}={ms:?}: expected milliseconds, 1 to 3600000; the timeout \
                 stays {} ms",
                options.timeout.as_millis()
            )),
        }
    }
    if let Some((from, c)) = either(
        "OTEL_EXPORTER_OTLP_METRICS_COMPRESSION",
        "OTEL_EXPORTER_OTLP_COMPRESSION",
    ) {
        match c.to_ascii_lowercase().as_str() {
            "gzip" => options.gzip = true,
            "none" => options.gzip = false,
            _ => warn_config(&format!(
                "spanprof ignores {from}={c:?}: expected gzip or none"
            )),
        }
    }
    if let Some(text) = var("OTEL_RESOURCE_ATTRIBUTES") {
        for (k, v) in parse_pairs("OTEL_RESOURCE_ATTRIBUTES", &text) {
            set(&mut options.resource, k, v);
        }
    }
    if let Some(name) = var("OTEL_SERVICE_NAME") {
        options.service_name = Some(name);
    }
    let interval = match var("OTEL_METRIC_EXPORT_INTERVAL") {
        None => OtlpOptions::DEFAULT_INTERVAL,
        Some(ms) => match ms.parse::<u64>().map(Duration::from_millis) {
            Ok(t) if crate::Every::Period(t).is_valid() => t,
            _ => {
                warn_config(&format!(
                    "spanprof ignores OTEL_METRIC_EXPORT_INTERVAL={ms:?}: expected milliseconds, \
                     10 to 86400000; pushes every 60 s"
                ));
                OtlpOptions::DEFAULT_INTERVAL
            }
        },
    };
    Ok((Some(Pusher::new(options)), Some(interval)))
}

/// The OTLP push, on the export thread.
pub(crate) struct Pusher {
    options: OtlpOptions,
    agent: ureq::Agent,
    bounds: Vec<u64>,
    /// Whether the last push failed (the failure was warned about).
    failing: bool,
}

impl Pusher {
    fn new(options: OtlpOptions) -> Self {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .user_agent(concat!("spanprof/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Self {
            options,
            agent,
            bounds: export_bounds_ns().to_vec(),
            failing: false,
        }
    }

    /// How long one push may take, retries included.
    pub(crate) fn timeout(&self) -> Duration {
        self.options.timeout
    }

    /// Pushes `snapshot`, retrying with backoff within the timeout; a failure is warned about
    /// once until a push succeeds again. Returns whether it was accepted.
    pub(crate) fn push(&mut self, snapshot: &Snapshot) -> bool {
        let body = request(snapshot, &self.options, &self.bounds).encode_to_vec();
        let body = if self.options.gzip {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            match gz.write_all(&body).and_then(|()| gz.finish()) {
                Ok(zipped) => zipped,
                Err(_) => body,
            }
        } else {
            body
        };
        let deadline = Instant::now() + self.options.timeout;
        let mut backoff = Duration::from_millis(100);
        // The last try's failure: what the warning names once the time is up (not "timed
        // out", which only says that the retries ended).
        let mut last = None;
        let error = loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                if let Some(error) = last {
                    break error;
                }
            }
            let (error, retry) = match self.send(&body, remaining) {
                Ok(()) => {
                    if self.failing {
                        self.failing = false;
                        tracing::info!(target: PERF_TARGET, endpoint = %self.options.endpoint, "spanprof pushes OTLP metrics again");
                    }
                    return true;
                }
                Err(failure) => failure,
            };
            let remaining = deadline.saturating_duration_since(Instant::now());
            if !retry || remaining.is_zero() {
                break error;
            }
            last = Some(error);
            std::thread::sleep(backoff.min(remaining));
            backoff *= 2;
        };
        if !self.failing {
            self.failing = true;
            tracing::warn!(
                target: PERF_TARGET,
                endpoint = %self.options.endpoint,
                error = %error,
                "spanprof could not push OTLP metrics to {}: {error} (retried for up to {} ms; \
                 it tries again at the next push, and says so once it succeeds)",
                self.options.endpoint,
                self.options.timeout.as_millis()
            );
        }
        false
    }

    /// One POST. `Err((why, retryable))` if not accepted.
    fn send(&self, body: &[u8], timeout: Duration) -> std::result::Result<(), (String, bool)> {
        if timeout.is_zero() {
            return Err(("timed out".to_string(), false));
        }
        let mut request = self
            .agent
            .post(&self.options.endpoint)
            .header("Content-Type", "application/x-protobuf");
        for (k, v) in &self.options.headers {
            request = request.header(k.as_str(), v.as_str());
        }
        if self.options.gzip {
            request = request.header("Content-Encoding", "gzip");
        }
        let response = request
            .config()
            .timeout_global(Some(timeout))
            .build()
            .send(body);
        match response {
            Ok(mut response) => {
                let status = response.status().as_u16();
                // Read to the end (the connection is reused), at most 64 KiB.
                let text = response
                    .body_mut()
                    .with_config()
                    .limit(64 * 1024)
                    .read_to_string()
                    .unwrap_or_default();
                match status {
                    200..=299 => Ok(()),
                    429 | 502 | 503 | 504 => Err((format!("HTTP {status}"), true)),
                    _ => {
                        let text: String = text.chars().take(200).collect();
                        Err((format!("HTTP {status} {}", text.trim()), false))
                    }
                }
            }
            Err(e) => Err((e.to_string(), true)),
        }
    }
}

fn string_kv(key: &str, value: impl Into<String>) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        ..Default::default()
    }
}

/// The resource: service name, the configured attributes, host, process and SDK.
fn resource(snapshot: &Snapshot, options: &OtlpOptions) -> Resource {
    let program = snapshot
        .run
        .command_line
        .first()
        .map(|p| {
            std::path::Path::new(p)
                .file_name()
                .map_or_else(|| p.clone(), |n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_default();
    let service = options
        .service_name
        .clone()
        .or_else(|| {
            options
                .resource
                .iter()
                .find(|(k, _)| k == "service.name")
                .map(|(_, v)| v.clone())
        })
        .unwrap_or_else(|| format!("unknown_service:{program}"));
    let mut attributes = vec![string_kv("service.name", service)];
    for (k, v) in &options.resource {
        if k != "service.name" {
            attributes.push(string_kv(k, v.as_str()));
        }
    }
    let mut defaults = vec![
        string_kv("host.name", snapshot.run.host.as_str()),
        KeyValue {
            key: "process.pid".to_string(),
            value: Some(AnyValue {
                value: Some(any_value::Value::IntValue(i64::from(snapshot.run.pid))),
            }),
            ..Default::default()
        },
        string_kv("telemetry.sdk.name", "spanprof"),
        string_kv("telemetry.sdk.language", "rust"),
        string_kv("telemetry.sdk.version", env!("CARGO_PKG_VERSION")),
    ];
    defaults.retain(|d| !attributes.iter().any(|a| a.key == d.key));
    attributes.extend(defaults);
    Resource {
        attributes,
        ..Default::default()
    }
}

/// The request of one push: every metric of every span name of `snapshot`.
fn request(
    snapshot: &Snapshot,
    options: &OtlpOptions,
    bounds: &[u64],
) -> ExportMetricsServiceRequest {
    let start = snapshot.run.start_unix_ns;
    let now = start.saturating_add(snapshot.run.duration_ns);
    let bounds_s: Vec<f64> = bounds.iter().map(|&b| b as f64 / 1e9).collect();
    let attributes = |s: &SpanStats| span_attributes(&s.name, &s.target);
    // One point per span name that has the statistic.
    let histogram = |name: &str, description: &str, stat: fn(&SpanStats) -> Option<&Stat>| {
        let points = snapshot
            .spans
            .iter()
            .filter_map(|s| {
                let point = histogram_point(stat(s)?, bounds, &bounds_s, attributes(s), start, now);
                Some(point)
            })
            .collect();
        otlp_metric(name, description, "s", cumulative_histogram(points))
    };
    let mut metrics = vec![
        histogram(
            "spanprof.span.busy",
            "Busy time of each entry (enter to exit) of spans of this name",
            |s| Some(&s.entry_busy),
        ),
        histogram(
            "spanprof.span.self",
            "Self time of each entry: busy time minus child spans' busy time",
            |s| Some(&s.entry_self),
        ),
        histogram(
            "spanprof.span.wall",
            "Wall time of each closed instance, creation to close",
            |s| Some(&s.wall),
        ),
    ];
    if snapshot.spans.iter().any(|s| s.gpu_time.is_some()) {
        metrics.push(histogram(
            "spanprof.span.gpu",
            "GPU time of each entry timed with CUDA events (on its stream, enter to exit), for \
             span names timed on the GPU",
            |s| Some(&s.gpu_time.as_ref()?.time),
        ));
    }
    let totals = snapshot.totals();
    metrics.extend(
        SPAN_FIGURES
            .iter()
            .filter_map(|f| figure_metric(snapshot, &totals, f, start, now)),
    );
    metrics.extend(event_metrics(snapshot, start, now));
    metrics.extend(overhead_metrics(snapshot, &totals, start, now));
    metrics.extend(figure_metric(
        snapshot,
        &totals,
        &fig::SAMPLE_EVERY,
        start,
        now,
    ));
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(resource(snapshot, options)),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "spanprof".to_string(),
                    version: env!("CARGO_PKG_VERSION").to_string(),
                    ..Default::default()
                }),
                metrics,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// The figures of each span name pushed after the histograms, in order (each a metric named by
/// [`Figure::otlp_name`]).
const SPAN_FIGURES: &[&Figure] = &[
    &fig::CALLS,
    &fig::INSTANCES,
    &fig::ERRORS,
    &fig::ITEMS,
    &fig::BYTES,
    &fig::FLOPS,
    &fig::BUSY,
    &fig::SELF,
    &fig::SELF_SHARE,
    &fig::GPU_CALLS,
    &fig::GPU_TOTAL,
    &fig::GPU_BUSY,
    &fig::GPU_UNTIMED,
    &fig::GPU_ABANDONED,
];

/// The metric of a figure of the catalogue: its name, unit and description from the entry, a
/// cumulative monotonic sum where it is cumulative, else a gauge; one data point per span name
/// that has it, in the base unit (counts as integers). `None` where no span name has it.
fn figure_metric(
    snapshot: &Snapshot,
    totals: &Totals,
    figure: &Figure,
    start: u64,
    now: u64,
) -> Option<Metric> {
    let data_points: Vec<NumberDataPoint> = snapshot
        .spans
        .iter()
        .filter_map(|s| {
            let value = match figure.value(s, totals)? {
                // Counts above i64::MAX cannot be sent as OTLP integers.
                Value::Int(n) if matches!(figure.kind, Kind::Count | Kind::Quantity) => {
                    number_data_point::Value::AsInt(i64::try_from(n).unwrap_or(i64::MAX))
                }
                v => number_data_point::Value::AsDouble(figure.in_base_unit(v)),
            };
            Some(number_point(
                span_attributes(&s.name, &s.target),
                start,
                now,
                value,
            ))
        })
        .collect();
    if data_points.is_empty() {
        return None;
    }
    let data = if figure.cumulative {
        cumulative_sum(data_points, true)
    } else {
        metric::Data::Gauge(Gauge { data_points })
    };
    Some(otlp_metric(
        &figure.otlp_name(),
        figure.help,
        figure.otlp_unit(),
        data,
    ))
}

/// One histogram data point with exact bucket counts: the samples in (bound i-1, bound i],
/// read at bucket tops, and the overflow bucket.
fn histogram_point(
    stat: &Stat,
    bounds: &[u64],
    bounds_s: &[f64],
    attributes: Vec<KeyValue>,
    start: u64,
    now: u64,
) -> HistogramDataPoint {
    let count = stat.histogram.len();
    let mut bucket_counts = Vec::with_capacity(bounds.len() + 1);
    let mut below = 0;
    for &bound in bounds {
        let at_or_below = stat.histogram.count_at_or_below(bound);
        bucket_counts.push(at_or_below - below);
        below = at_or_below;
    }
    bucket_counts.push(count - below);
    let seconds = |ns: u64| ns as f64 / 1e9;
    HistogramDataPoint {
        attributes,
        start_time_unix_nano: start,
        time_unix_nano: now,
        count,
        sum: Some(seconds(stat.total_ns)),
        bucket_counts,
        explicit_bounds: bounds_s.to_vec(),
        min: (count > 0).then(|| seconds(stat.min_ns)),
        max: (count > 0).then(|| seconds(stat.max_ns)),
        ..Default::default()
    }
}

/// The attributes of a data point of spans of `name` and `target`.
fn span_attributes(name: &str, target: &str) -> Vec<KeyValue> {
    vec![
        string_kv("span.name", name),
        string_kv("span.target", target),
    ]
}

/// A number data point from the profile's start to `time`.
fn number_point(
    attributes: Vec<KeyValue>,
    start: u64,
    time: u64,
    value: number_data_point::Value,
) -> NumberDataPoint {
    NumberDataPoint {
        attributes,
        start_time_unix_nano: start,
        time_unix_nano: time,
        value: Some(value),
        ..Default::default()
    }
}

/// A metric of `data`.
fn otlp_metric(name: &str, description: &str, unit: &str, data: metric::Data) -> Metric {
    Metric {
        name: name.to_string(),
        description: description.to_string(),
        unit: unit.to_string(),
        data: Some(data),
        ..Default::default()
    }
}

/// A cumulative sum of `data_points`.
fn cumulative_sum(data_points: Vec<NumberDataPoint>, is_monotonic: bool) -> metric::Data {
    metric::Data::Sum(Sum {
        data_points,
        aggregation_temporality: AggregationTemporality::Cumulative as i32,
        is_monotonic,
    })
}

/// A cumulative histogram of `data_points`.
fn cumulative_histogram(data_points: Vec<HistogramDataPoint>) -> metric::Data {
    metric::Data::Histogram(Histogram {
        data_points,
        aggregation_temporality: AggregationTemporality::Cumulative as i32,
    })
}

/// The UCUM unit of a metric's unit ([`crate::profile::metrics::unit_of`]); empty (no unit)
/// for a plain number.
fn ucum(unit: Option<&str>) -> &'static str {
    match unit {
        Some("seconds") => "s",
        Some("milliseconds") => "ms",
        Some("microseconds") => "us",
        Some("nanoseconds") => "ns",
        Some("bytes") => "By",
        Some("ratio") => "1",
        Some("percent") => "%",
        _ => "",
    }
}

/// One explicit bound of a histogram of event values: in the metric's unit, and the values at
/// which the integer and nano-unit histograms are read (both bucket tops).
#[derive(Debug, Clone, Copy)]
struct ValueBound {
    /// In the metric's unit.
    value: f64,
    /// Integer values at or below `value` are those at or below this (`floor(value)`).
    integer: u64,
    /// Float values at or below `value` are those at or below this, in nano-units.
    nano: u64,
}

/// The nominal 1-2-5 series from `from` to `to`, ascending.
fn one_two_five(from: u64, to: u64) -> impl Iterator<Item = u64> {
    std::iter::successors(Some(from), |&d| d.checked_mul(10))
        .take_while(move |&d| d <= to)
        .flat_map(|d| [d, d * 2, d * 5])
        .filter(move |&v| v <= to)
}

/// The bounds of histograms of integer values only: the tops of the integer buckets holding
/// 1, 2, 5, 10, … 10¹².
fn integer_bounds() -> &'static [ValueBound] {
    static BOUNDS: std::sync::OnceLock<Vec<ValueBound>> = std::sync::OnceLock::new();
    BOUNDS.get_or_init(|| {
        one_two_five(1, 1_000_000_000_000)
            .map(|nominal| {
                let top = bucket_top(nominal);
                ValueBound {
                    value: top as f64,
                    integer: top,
                    nano: top.saturating_mul(FLOAT_SCALE as u64),
                }
            })
            .collect()
    })
}

/// The bounds of histograms of float values only: the tops of the nano-unit buckets holding
/// 10⁻⁹, 2 × 10⁻⁹, 5 × 10⁻⁹, … 1000 (at most 1/128 above each).
fn float_bounds() -> &'static [ValueBound] {
    static BOUNDS: std::sync::OnceLock<Vec<ValueBound>> = std::sync::OnceLock::new();
    BOUNDS.get_or_init(|| nano_bounds(bucket_top))
}

/// The bounds of histograms with both integer and float values: for each of 10⁻⁹,
/// 2 × 10⁻⁹, … 1000, the first top of a nano-unit bucket at or above it whose whole part is
/// also the top of an integer bucket, so that both histograms' counts at the bound are exact
/// (every whole part below 256 is; above, a bound is up to 4% above its nominal value).
fn mixed_bounds() -> &'static [ValueBound] {
    static BOUNDS: std::sync::OnceLock<Vec<ValueBound>> = std::sync::OnceLock::new();
    BOUNDS.get_or_init(|| {
        nano_bounds(|nominal| {
            let scale = FLOAT_SCALE as u64;
            let mut nano = bucket_top(nominal);
            // One nano-unit bucket top in a few qualifies (a unit test checks every bound).
            for _ in 0..64 {
                let whole = nano / scale;
                if bucket_top(whole) == whole {
                    break;
                }
                nano = bucket_top(nano + 1);
            }
            nano
        })
    })
}

/// Bounds at `top(n)` nano-units for each `n` of the 1-2-5 series from 10⁻⁹ to 1000 units.
fn nano_bounds(top: impl Fn(u64) -> u64) -> Vec<ValueBound> {
    let scale = FLOAT_SCALE as u64;
    one_two_five(1, 1_000 * scale)
        .map(|nominal| {
            let nano = top(nominal);
            ValueBound {
                value: nano as f64 / FLOAT_SCALE,
                integer: nano / scale,
                nano,
            }
        })
        .collect()
}

/// The OTLP metrics of the metrics events recorded: one per metric name and kind, one data
/// point per span name.
fn event_metrics(snapshot: &Snapshot, start: u64, now: u64) -> Vec<Metric> {
    let mut out: Vec<(MetricKind, Metric)> = Vec::new();
    for m in &snapshot.metrics {
        let mut attributes = Vec::new();
        if let Some(span) = &m.span {
            attributes.push(string_kv("span.name", span.as_str()));
        }
        if let Some(target) = &m.span_target {
            attributes.push(string_kv("span.target", target.as_str()));
        }
        let index = match out
            .iter()
            .position(|(kind, o)| *kind == m.kind && o.name == m.name)
        {
            Some(index) => index,
            None => {
                let (description, data) = match &m.value {
                    MetricValue::Sum(_) => (
                        "Sum of the values of events' counter fields",
                        cumulative_sum(Vec::new(), m.kind == MetricKind::MonotonicCounter),
                    ),
                    MetricValue::Histogram(_) => (
                        "Values of events' histogram fields",
                        cumulative_histogram(Vec::new()),
                    ),
                    MetricValue::Gauge(_) => (
                        "Last value of events' gauge fields",
                        metric::Data::Gauge(Gauge::default()),
                    ),
                };
                let unit = ucum(m.unit.as_deref());
                out.push((m.kind, otlp_metric(&m.name, description, unit, data)));
                out.len() - 1
            }
        };
        match (&mut out[index].1.data, &m.value) {
            (Some(metric::Data::Sum(sum)), MetricValue::Sum(value)) => {
                // Integers stay exact as long as no float was added.
                let value = if value.float == 0.0 {
                    number_data_point::Value::AsInt(value.integer)
                } else {
                    number_data_point::Value::AsDouble(value.total())
                };
                sum.data_points
                    .push(number_point(attributes, start, now, value));
            }
            (Some(metric::Data::Histogram(h)), MetricValue::Histogram(value)) => {
                h.data_points
                    .push(value_histogram_point(value, attributes, start, now));
            }
            (Some(metric::Data::Gauge(g)), MetricValue::Gauge(value)) => {
                g.data_points.push(number_point(
                    attributes,
                    start,
                    value.last_unix_ns,
                    number_data_point::Value::AsDouble(value.last),
                ));
            }
            // Metrics of one name and kind have one kind of value.
            _ => {}
        }
    }
    out.into_iter().map(|(_, m)| m).collect()
}

/// The data point of a histogram of event values, in the metric's unit: bucket counts exact
/// at [`integer_bounds`] (integer values only), [`float_bounds`] (floats only) or
/// [`mixed_bounds`]; count, sum, minimum and maximum exact.
fn value_histogram_point(
    value: &HistogramValue,
    attributes: Vec<KeyValue>,
    start: u64,
    now: u64,
) -> HistogramDataPoint {
    let bounds = match (&value.integers, &value.floats) {
        (Some(_), Some(_)) => mixed_bounds(),
        (None, Some(_)) => float_bounds(),
        _ => integer_bounds(),
    };
    let cumulative = |stat: Option<&Stat>, at: fn(&ValueBound) -> u64| {
        let at: Vec<u64> = bounds.iter().map(at).collect();
        stat.map_or_else(
            || vec![0; bounds.len()],
            |s| s.histogram.cumulative_counts(&at),
        )
    };
    let integers = cumulative(value.integers.as_ref(), |b| b.integer);
    let floats = cumulative(value.floats.as_ref(), |b| b.nano);
    let count = value.integers.as_ref().map_or(0, |s| s.histogram.len())
        + value.floats.as_ref().map_or(0, |s| s.histogram.len());
    let mut bucket_counts = Vec::with_capacity(bounds.len() + 1);
    let mut below = 0;
    for (i, f) in integers.iter().zip(&floats) {
        bucket_counts.push(i + f - below);
        below = i + f;
    }
    bucket_counts.push(count - below);
    let sum = value.integers.as_ref().map_or(0.0, |s| s.total_ns as f64)
        + value
            .floats
            .as_ref()
            .map_or(0.0, |s| s.total_ns as f64 / FLOAT_SCALE);
    let (min, max) = value.min_max();
    HistogramDataPoint {
        attributes,
        start_time_unix_nano: start,
        time_unix_nano: now,
        count,
        sum: Some(sum),
        bucket_counts,
        explicit_bounds: bounds.iter().map(|b| b.value).collect(),
        min: (count > 0).then_some(min),
        max: (count > 0).then_some(max),
        ..Default::default()
    }
}

/// spanprof's own cost, where the profile has its estimate: the share of the process's CPU
/// time, the estimate in seconds, the back-off's steps and the cost per span name.
fn overhead_metrics(snapshot: &Snapshot, totals: &Totals, start: u64, now: u64) -> Vec<Metric> {
    let Some(overhead) = &snapshot.overhead else {
        return Vec::new();
    };
    let gauge = |value: f64| {
        metric::Data::Gauge(Gauge {
            data_points: vec![number_point(
                Vec::new(),
                start,
                now,
                number_data_point::Value::AsDouble(value),
            )],
        })
    };
    let steps = |on: bool| {
        let n = snapshot.backoff.iter().filter(|s| s.on == on).count();
        number_point(
            vec![string_kv("direction", if on { "on" } else { "off" })],
            start,
            now,
            number_data_point::Value::AsInt(i64::try_from(n).unwrap_or(i64::MAX)),
        )
    };
    let mut metrics = vec![
        otlp_metric(
            "spanprof.overhead.ratio",
            "spanprof's estimated cost as a share of the process's CPU time (of wall time where \
             that is not readable)",
            "1",
            gauge(overhead.percent / 100.0),
        ),
        otlp_metric(
            "spanprof.overhead.estimated",
            "spanprof's estimated cost since the start: spans times their calibrated cost plus \
             the measured time of its readings",
            "s",
            gauge(overhead.estimated_ns as f64 / 1e9),
        ),
        otlp_metric(
            "spanprof.backoff.steps",
            "Steps of the automatic back-off: per-span readings switched off, and back on; span \
             names sampled more (off), and less (on)",
            "{step}",
            cumulative_sum(vec![steps(false), steps(true)], true),
        ),
    ];
    metrics.extend(figure_metric(snapshot, totals, &fig::OVERHEAD, start, now));
    metrics
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::env::test_env as env;

    fn options(pairs: &[(&str, &str)]) -> Option<OtlpOptions> {
        resolve(None, &env(pairs)).unwrap().0.map(|p| p.options)
    }

    #[test]
    fn bounds_of_value_histograms_are_bucket_tops_in_both_scales() {
        let nominal: Vec<f64> = one_two_five(1, 1_000_000_000_000)
            .map(|n| n as f64 / FLOAT_SCALE)
            .collect();
        for (bounds, nano, ints, above) in [
            (integer_bounds(), false, true, 1.0 / 128.0),
            (float_bounds(), true, false, 1.0 / 128.0),
            (mixed_bounds(), true, true, 0.04),
        ] {
            assert_eq!(bounds.len(), 37);
            for pair in bounds.windows(2) {
                assert!(pair[0].value < pair[1].value, "{pair:?}");
            }
            for (i, b) in bounds.iter().enumerate() {
                assert_eq!(b.integer, b.value.floor() as u64, "{b:?}");
                if ints {
                    assert_eq!(bucket_top(b.integer), b.integer, "{b:?}");
                }
                if nano {
                    assert_eq!(bucket_top(b.nano), b.nano, "{b:?}");
                    assert_eq!((b.value * FLOAT_SCALE).round() as u64, b.nano, "{b:?}");
                    let n = nominal[i];
                    assert!(b.value >= n && b.value <= n * (1.0 + above), "{b:?} {n}");
                }
            }
        }
        assert_eq!(integer_bounds()[2].value, 5.0);
        assert_eq!(ucum(Some("bytes")), "By");
        assert_eq!(ucum(None), "");
    }

    #[test]
    fn endpoints_follow_the_specification() {
        let o = options(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")]).unwrap();
        assert_eq!(o.endpoint, "http://collector:4318/v1/metrics");
        let o = options(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/base/")]).unwrap();
        assert_eq!(o.endpoint, "http://c:4318/base/v1/metrics");
        let o = options(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://m:9/custom"),
        ])
        .unwrap();
        assert_eq!(o.endpoint, "http://m:9/custom", "used as is");
        assert!(options(&[]).is_none(), "no endpoint: no push");
        for off in [
            ("OTEL_SDK_DISABLED", "true"),
            ("OTEL_METRICS_EXPORTER", "none"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/json"),
        ] {
            assert!(
                options(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"), off]).is_none(),
                "{off:?}"
            );
        }
        assert!(options(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4318")]).is_none());
        assert!(options(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "c:4318")]).is_none());
    }

    #[test]
    fn headers_timeout_compression_and_resource() {
        let o = options(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "a=1, b = two%20words ,bad"),
            ("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "b=3"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
            ("OTEL_EXPORTER_OTLP_METRICS_COMPRESSION", "gzip"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "deployment.environment=test,service.name=x",
            ),
            ("OTEL_SERVICE_NAME", "trainer"),
        ])
        .unwrap();
        assert_eq!(
            o.headers,
            [("a".to_string(), "1".to_string()), ("b".into(), "3".into())]
        );
        assert_eq!(o.timeout, Duration::from_millis(2500));
        assert!(o.gzip);
        assert_eq!(o.service_name.as_deref(), Some("trainer"));
        let o = options(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "soon"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "k=v%2Cw"),
        ])
        .unwrap();
        assert_eq!(
            o.timeout,
            OtlpOptions::DEFAULT_TIMEOUT,
            "a bad value: the default"
        );
        assert_eq!(o.headers, [("k".to_string(), "v,w".to_string())]);
        let interval = |v: &str| {
            resolve(
                None,
                &env(&[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                    ("OTEL_METRIC_EXPORT_INTERVAL", v),
                ]),
            )
            .unwrap()
            .1
        };
        assert_eq!(interval("1500"), Some(Duration::from_millis(1500)));
        assert_eq!(interval("0"), Some(OtlpOptions::DEFAULT_INTERVAL));
    }

    #[test]
    fn builder_options_follow_their_rule() {
        let no_env = env(&[]);
        assert!(matches!(
            resolve(Some(OtlpOptions::new("https://c/v1/metrics")), &no_env),
            Err(Error::InvalidSetting {
                method: "with_otlp",
                ..
            })
        ));
        assert!(resolve(
            Some(OtlpOptions::new("http://c/v1/metrics").with_timeout(Duration::ZERO)),
            &no_env
        )
        .is_err());
        let e = resolve(
            Some(OtlpOptions::new("ftp://c").with_header("authorization", "Bearer secret")),
            &no_env,
        )
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("authorization") && !e.contains("secret"), "{e}");
        let (pusher, interval) =
            resolve(Some(OtlpOptions::new("http://c/v1/metrics")), &no_env).unwrap();
        assert_eq!(pusher.unwrap().options.endpoint, "http://c/v1/metrics");
        assert_eq!(interval, Some(OtlpOptions::DEFAULT_INTERVAL));
        // The variables win over the builder's options.
        let (pusher, _) = resolve(
            Some(OtlpOptions::new("http://c/v1/metrics").with_service_name("a")),
            &env(&[
                ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://d/x"),
                ("OTEL_SERVICE_NAME", "b"),
            ]),
        )
        .unwrap();
        let o = pusher.unwrap().options;
        assert_eq!(
            (o.endpoint.as_str(), o.service_name.as_deref()),
            ("http://d/x", Some("b"))
        );
    }
}

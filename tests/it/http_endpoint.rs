//! The `/metrics` endpoint (feature `http`): what it answers, scrapes while threads record, and
//! a real Prometheus server scraping it on loopback.

use crate::support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use spanprof::output::Prometheus;
use spanprof::ProfileLayer;

/// One HTTP/1.0 request; returns the status code, the headers and the body.
fn http(addr: SocketAddr, method: &str, path: &str) -> std::io::Result<(u16, String, String)> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        stream,
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Ok((status, head.to_string(), body.to_string()))
}

/// The series of the calls of span `span` recorded here (target: this module's path).
fn calls_series(span: &str) -> String {
    format!(
        r#"spanprof_span_calls_total{{span="{span}",target="{}"}}"#,
        module_path!()
    )
}

/// The value of the sample line that starts with `series` (name and labels as written).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn the_endpoint_serves_a_fresh_exposition_per_scrape() {
    let (dispatch, guard) =
        support::install(ProfileLayer::builder().with_metrics_addr(([127, 0, 0, 1], 0)));
    let addr = guard.metrics_addr().expect("the endpoint is served");
    assert!(addr.ip().is_loopback() && addr.port() != 0, "{addr}");
    let series = &calls_series("served");
    for round in 1..=3u32 {
        tracing::dispatcher::with_default(&dispatch, || {
            tracing::info_span!("served").in_scope(|| {});
        });
        let (status, head, body) = http(addr, "GET", "/metrics").unwrap();
        assert_eq!(status, 200, "{head}");
        assert!(
            head.to_ascii_lowercase()
                .contains(&format!("content-type: {}", Prometheus::CONTENT_TYPE)),
            "{head}"
        );
        // Each scrape sees the spans recorded before it.
        assert_eq!(sample(&body, series), Some(f64::from(round)), "{body}");
        let calls = guard.snapshot().span("served").unwrap().calls;
        assert_eq!(calls, u64::from(round));
    }
    let (status, _, _) = http(addr, "GET", "/metrics?x=1").unwrap();
    assert_eq!(status, 200);
    assert_eq!(http(addr, "GET", "/elsewhere").unwrap().0, 404);
    assert_eq!(http(addr, "POST", "/metrics").unwrap().0, 405);
    let (status, _, body) = http(addr, "HEAD", "/metrics").unwrap();
    assert_eq!((status, body.as_str()), (200, ""));

    // Finishing stops the server: the port no longer answers.
    let handle = guard.handle();
    guard.finish().unwrap();
    assert_eq!(handle.metrics_addr(), None);
    assert!(
        !matches!(http(addr, "GET", "/metrics"), Ok((200, _, _))),
        "still served"
    );
}

#[test]
fn scrapes_while_threads_record_lose_nothing() {
    let (dispatch, guard) =
        support::install(ProfileLayer::builder().with_metrics_addr(([127, 0, 0, 1], 0)));
    let addr = guard.metrics_addr().unwrap();
    const THREADS: u64 = 2;
    const SPANS: u64 = 20_000;
    let series = &calls_series("busy");
    let scrapes = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                let dispatch = dispatch.clone();
                scope.spawn(move || {
                    tracing::dispatcher::with_default(&dispatch, || {
                        for _ in 0..SPANS {
                            tracing::info_span!("busy").in_scope(|| {});
                        }
                    })
                })
            })
            .collect();
        // Scrape until the workers are done; every scrape answers, counts never go down.
        let mut seen = Vec::new();
        while !workers.iter().all(|w| w.is_finished()) || seen.is_empty() {
            let (status, _, body) = http(addr, "GET", "/metrics").unwrap();
            assert_eq!(status, 200);
            seen.push(sample(&body, series).unwrap_or(0.0));
        }
        seen
    });
    assert!(scrapes.windows(2).all(|w| w[0] <= w[1]), "{scrapes:?}");
    let (_, _, body) = http(addr, "GET", "/metrics").unwrap();
    assert_eq!(sample(&body, series), Some((THREADS * SPANS) as f64));
    assert_eq!(
        guard.snapshot().span("busy").unwrap().calls,
        THREADS * SPANS
    );
}

#[test]
fn an_address_in_use_is_an_error_naming_it() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let err = support::quiet(ProfileLayer::builder().with_metrics_addr(addr))
        .build()
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("binding the /metrics endpoint") && text.contains(&addr.to_string()),
        "{text}"
    );
}

/// A Prometheus server started for a test, killed when dropped.
struct PrometheusServer(Child);

impl Drop for PrometheusServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Percent-encodes a query for a URL.
fn encode(query: &str) -> String {
    query
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[test]
fn a_real_prometheus_server_scrapes_the_endpoint() {
    let binary = Path::new("/usr/bin/prometheus");
    if !binary.exists() {
        eprintln!(
            "SKIPPED: /usr/bin/prometheus not found; install Debian's `prometheus` package to \
             scrape the endpoint with a real server"
        );
        return;
    }
    let (dispatch, guard) =
        support::install(ProfileLayer::builder().with_metrics_addr(([127, 0, 0, 1], 0)));
    let target = guard.metrics_addr().unwrap();
    tracing::dispatcher::with_default(&dispatch, || {
        for _ in 0..7 {
            tracing::info_span!("scraped").in_scope(|| {});
        }
    });
    let calls = guard.snapshot().span("scraped").unwrap().calls;
    assert_eq!(calls, 7);

    let dir = support::temp_dir("prometheus-server");
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: \
             spanprof\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .unwrap();
    let port = free_port();
    let web: SocketAddr = ([127, 0, 0, 1], port).into();
    let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
    let _server = PrometheusServer(
        Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={web}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let query = encode(r#"spanprof_span_calls_total{span="scraped"}"#);
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut last = String::new();
    let found = loop {
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(500));
        let Ok((200, _, body)) = http(web, "GET", &format!("/api/v1/query?query={query}")) else {
            continue;
        };
        let json: serde_json::Value = serde_json::from_str(&body).unwrap();
        last = body;
        // {"status":"success","data":{"resultType":"vector","result":[{"metric":{…},"value":[t,"7"]}]}}
        if let Some(result) = json["data"]["result"].as_array().and_then(|r| r.first()) {
            break Some((result["metric"].clone(), result["value"][1].clone()));
        }
    };
    let Some((metric, value)) = found else {
        let log = std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default();
        panic!("Prometheus never returned the series; last answer {last}\nits log:\n{log}");
    };
    assert_eq!(value.as_str(), Some(calls.to_string().as_str()), "{metric}");
    assert_eq!(metric["target"], module_path!());
    assert_eq!(metric["job"], "spanprof");
    assert_eq!(metric["instance"], target.to_string());
    drop(guard);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_endpoint_shows_the_span_names_every_output_shows() {
    let selection: spanprof::output::Selection = "kept*".parse().unwrap();
    let (dispatch, guard) = support::install(
        ProfileLayer::builder()
            .with_metrics_addr(([127, 0, 0, 1], 0))
            .with_output_filter(selection),
    );
    let addr = guard.metrics_addr().expect("the endpoint is served");
    tracing::dispatcher::with_default(&dispatch, || {
        tracing::info_span!("kept_name").in_scope(|| {});
        tracing::info_span!("left_out").in_scope(|| {});
    });
    let (status, _, body) = http(addr, "GET", "/metrics").unwrap();
    assert_eq!(status, 200);
    let kept = &calls_series("kept_name");
    assert_eq!(sample(&body, kept), Some(1.0), "{body}");
    assert!(!body.contains(r#"span="left_out""#), "{body}");
    // The profile itself keeps every name.
    assert_eq!(guard.snapshot().span("left_out").unwrap().calls, 1);
}

/// A client that sends scrapes and never reads the answers (its socket's buffers fill) holds
/// up only itself: another client's scrape is answered, and finishing returns; before, the
/// server thread blocked writing to it, and `finish` (a guard's drop, a Ctrl-C) never did.
#[test]
fn a_client_that_never_reads_holds_up_no_one() {
    let (dispatch, guard) =
        support::install(ProfileLayer::builder().with_metrics_addr(([127, 0, 0, 1], 0)));
    tracing::dispatcher::with_default(&dispatch, || {
        for _ in 0..10 {
            tracing::info_span!("work").in_scope(|| {});
        }
    });
    let addr = guard.metrics_addr().unwrap();
    let mut stalled = TcpStream::connect(addr).unwrap();
    // Enough pipelined scrapes that their answers outgrow both sockets' buffers.
    let (_, _, one) = http(addr, "GET", "/metrics").unwrap();
    let requests = 4 * (8 << 20) / one.len().max(1) + 8;
    for _ in 0..requests {
        write!(stalled, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    }
    stalled.flush().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let (status, _, body) = http(addr, "GET", "/metrics").expect("another client is answered");
    assert_eq!(status, 200);
    assert!(body.contains("spanprof_span_calls_total"), "{body}");
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(guard.finish().map(|_| ()));
    });
    finished
        .recv_timeout(Duration::from_secs(60))
        .expect("finish returned")
        .unwrap();
    drop(stalled);
}

//! An in-process async "server" on tokio's multi-threaded runtime, profiled with `spanprof`.
//!
//! A client sends `--requests N` requests over a channel (no network), four per millisecond
//! (`--rate R`: R per millisecond).
//! The server spawns one task per request; each handler parses the request, awaits a
//! simulated database call (`tokio::time::sleep`, 1–4 ms) and hashes the rows it got back,
//! each step in its own span:
//!
//! ```text
//! client                 info  requests     (the main task: sends the requests)
//! serve                  info               (accepts requests, spawns a task per request)
//! └─ handle_request      info  id, bytes    (#[instrument(err)]: one request in 50 is malformed)
//!    ├─ parse_request    info  bytes
//!    ├─ db_query         info  user, items  (async: awaits the simulated round trip)
//!    └─ hash_rows        info  items
//! ```
//!
//! An async span is entered at every poll of its future, and a task may resume on another
//! worker thread after an `.await`. So in the report, `handle_request` and `db_query` have
//! more calls (entries) than instances, and the instance table shows how much of each one's
//! wall time (creation to close) was busy (polled): little, since most of it is the wait.
//!
//! ```text
//! cargo run --release --example async_server                    # 1000 requests
//! cargo run --release --example async_server -- --requests 200 --out /tmp/prof
//! ```

use std::error::Error;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::instrument;
use tracing_subscriber::{filter::LevelFilter, prelude::*, EnvFilter};

const USAGE: &str = "\
usage: async_server [--requests N] [--rate R] [--out DIR] [--no-profile]

  --requests N   number of requests the client sends (default: 1000)
  --rate R       requests sent per millisecond (default: 4)
  --out DIR      where spanprof writes profile.json (default: target/spanprof-async)
  --no-profile   run the same workload without spanprof, to measure its overhead (the
                 process's CPU time is printed either way)";

/// Passes of `hash_rows` over the rows: about 0.1 ms of CPU per request.
const HASH_ROUNDS: usize = 500;

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> Result<(), Box<dyn Error>> {
    let args = Args::parse().unwrap_or_else(|message| {
        eprintln!("error: {message}\n\n{USAGE}");
        std::process::exit(2);
    });

    let (layer, guard) = if args.profile {
        let (layer, guard) = spanprof::ProfileLayer::builder()
            .with_output_dir(&args.out_dir)
            .build()?;
        (Some(layer), Some(guard))
    } else {
        (None, None)
    };
    tracing_subscriber::registry()
        .with(
            EnvFilter::builder()
                .with_default_directive(LevelFilter::INFO.into())
                .from_env_lossy(),
        )
        .with(layer)
        .init();

    let start = Instant::now();
    let cpu_start = process_cpu_s();
    let (sender, receiver) = mpsc::channel(64);
    let server = tokio::spawn(serve(receiver));
    client(args.requests, args.rate, sender).await; // returns when every request is sent
    let stats = server.await?; // returns when every request is answered
    println!(
        "served {} requests in {:.2} s: {} ok, {} rejected (checksum {:016x}); \
         {} resumed on another worker thread after the database call",
        args.requests,
        start.elapsed().as_secs_f64(),
        stats.ok,
        stats.rejected,
        stats.checksum,
        stats.moved,
    );
    // The client paces the requests, so spanprof's cost shows in CPU time, not in wall time.
    eprintln!("serving took {:.3} s of CPU", process_cpu_s() - cpu_start);

    // Prints the report to stderr and writes profile.json.
    if let Some(guard) = guard {
        if let Some(profile) = guard.finish()?.profile() {
            eprintln!("profile: {}", profile.display());
        }
    }
    Ok(())
}

/// The CPU time (user + system) of every thread of this process so far, seconds.
fn process_cpu_s() -> f64 {
    // SAFETY: `usage` is a writable `rusage` that outlives the call; RUSAGE_SELF is valid.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    s(usage.ru_utime) + s(usage.ru_stime)
}

/// One request, as the client sends it: `user=ID&items=A,B,C,...`.
struct Request {
    id: u64,
    body: String,
}

/// What the server answers.
struct Response {
    digest: u64,
    /// Whether the handler resumed on another thread after awaiting the database.
    moved: bool,
}

/// Sends `count` requests, `rate` per millisecond; the channel pushes back when the server lags.
#[instrument(skip_all, fields(requests = count))]
async fn client(count: u64, rate: u64, server: mpsc::Sender<Request>) {
    let mut ticks = tokio::time::interval(Duration::from_millis(1));
    for id in 0..count {
        if id % rate == 0 {
            ticks.tick().await;
        }
        let items = (0..200).map(|i| (id * 31 + i * 7) % 10_000);
        let mut items: Vec<String> = items.map(|item| item.to_string()).collect();
        if id % 50 == 49 {
            items[100] = "4x2".to_string(); // a malformed request
        }
        let body = format!("user={}&items={}", id % 97, items.join(","));
        if server.send(Request { id, body }).await.is_err() {
            break;
        }
    }
}

/// Totals over all requests.
#[derive(Default)]
struct Stats {
    ok: u64,
    rejected: u64,
    moved: u64,
    checksum: u64,
}

/// Accepts requests until the client hangs up, handling each in its own task.
#[instrument(skip_all)]
async fn serve(mut requests: mpsc::Receiver<Request>) -> Stats {
    let mut handlers = JoinSet::new();
    while let Some(request) = requests.recv().await {
        handlers.spawn(handle_request(request));
    }
    let mut stats = Stats::default();
    while let Some(joined) = handlers.join_next().await {
        match joined.expect("a request handler panicked") {
            Ok(response) => {
                stats.ok += 1;
                stats.moved += u64::from(response.moved);
                stats.checksum ^= response.digest;
            }
            Err(_) => stats.rejected += 1,
        }
    }
    stats
}

/// Handles one request. Its span is entered at each poll, on whichever worker polls it.
#[instrument(skip_all, err, fields(id = request.id, bytes = request.body.len()))]
async fn handle_request(request: Request) -> Result<Response, String> {
    let query = parse_request(&request.body)?;
    let before = std::thread::current().id();
    let rows = db_query(query.user, &query.items).await;
    let moved = std::thread::current().id() != before;
    let digest = hash_rows(&rows);
    Ok(Response { digest, moved })
}

/// A parsed request.
struct Query {
    user: u64,
    items: Vec<u64>,
}

/// Parses `user=ID&items=A,B,C,...`.
#[instrument(skip_all, fields(bytes = body.len()))]
fn parse_request(body: &str) -> Result<Query, String> {
    let (mut user, mut items) = (None, Vec::new());
    for field in body.split('&') {
        match field.split_once('=') {
            Some(("user", value)) => {
                user = Some(value.parse().map_err(|_| format!("bad user `{value}`"))?);
            }
            Some(("items", value)) => {
                for item in value.split(',') {
                    items.push(item.parse().map_err(|_| format!("bad item `{item}`"))?);
                }
            }
            _ => return Err(format!("unknown field `{field}`")),
        }
    }
    let user = user.ok_or("no user")?;
    Ok(Query { user, items })
}

/// A simulated database round trip: waits 1–4 ms without holding a thread, then returns
/// one row per item.
#[instrument(skip(items), fields(items = items.len()))]
async fn db_query(user: u64, items: &[u64]) -> Vec<u64> {
    tokio::time::sleep(Duration::from_millis(1 + user % 4)).await;
    items.iter().map(|&item| item * 1_000_003 + user).collect()
}

/// CPU work on the rows: FNV-1a over them, `HASH_ROUNDS` times.
#[instrument(skip_all, fields(items = rows.len()))]
fn hash_rows(rows: &[u64]) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325_u64;
    for _ in 0..HASH_ROUNDS {
        for &row in rows {
            hash = (hash ^ row).wrapping_mul(0x100_0000_01b3);
        }
    }
    hash
}

/// Command-line options, parsed by hand.
struct Args {
    requests: u64,
    rate: u64,
    out_dir: PathBuf,
    profile: bool,
}

impl Args {
    fn parse() -> Result<Self, String> {
        let mut args = Args {
            requests: 1000,
            rate: 4,
            out_dir: PathBuf::from("target/spanprof-async"),
            profile: true,
        };
        let mut argv = std::env::args().skip(1);
        while let Some(arg) = argv.next() {
            match arg.as_str() {
                "--requests" => {
                    let value = argv.next().ok_or("--requests needs a number")?;
                    args.requests = value.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                        format!("--requests: `{value}` is not a positive integer")
                    })?;
                }
                "--rate" => {
                    let value = argv.next().ok_or("--rate needs a number")?;
                    args.rate =
                        value.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                            format!("--rate: `{value}` is not a positive integer")
                        })?;
                }
                "--out" => args.out_dir = argv.next().ok_or("--out needs a directory")?.into(),
                "--no-profile" => args.profile = false,
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

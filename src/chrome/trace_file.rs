//! One window's trace file: the writer handed to tracing-chrome, and what happens when
//! tracing-chrome closes it (check and repair the B/E pairs, append counter tracks, rename into
//! place).
//!
//! Nothing is written at a window's path until its file is complete: tracing-chrome writes into
//! a temporary file beside it (`.<name>.<pid>.<n>.partial`), and the completion step writes the
//! finished trace through [`crate::atomic_file::write`] (another temporary file, synced, renamed
//! over the path), then removes the partial file. A failure at any point (a full disk, an
//! unwritable directory) removes the temporary files, leaves whatever was at the path before,
//! and is reported by `Session::finish`. Both temporary files are [`Temporary`]s, listed while
//! they exist: an exit on a second signal removes them (`crate::signals`).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use serde_json::{json, Map, Value};

use super::counters::{Counter, CounterSource};
use super::TraceBackend;
use crate::atomic_file::Temporary;
use crate::error::{Error, Result};

/// What the windows of a session wrote, filled in on tracing-chrome's writer thread.
#[derive(Debug, Default)]
pub(super) struct Results {
    state: Mutex<ResultsState>,
    /// Windows not traced because too many earlier ones were still being written.
    pub(super) skipped: AtomicU64,
}

#[derive(Debug, Default)]
struct ResultsState {
    written: Vec<PathBuf>,
    errors: Vec<Error>,
    /// Windows opened and not completed yet (written, failed or abandoned), by number.
    pending: BTreeMap<u64, PathBuf>,
}

impl Results {
    fn lock(&self) -> MutexGuard<'_, ResultsState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Window `number` was opened: it is pending until it is written or fails.
    pub(super) fn opened(&self, number: u64, path: PathBuf) {
        self.lock().pending.insert(number, path);
    }

    fn wrote(&self, number: u64, path: PathBuf) {
        let mut state = self.lock();
        state.pending.remove(&number);
        state.written.push(path);
    }

    /// Keeps every error, in the order they happened; `number` is no longer pending.
    pub(super) fn failed(&self, number: Option<u64>, error: Error) {
        let mut state = self.lock();
        if let Some(number) = number {
            state.pending.remove(&number);
        }
        state.errors.push(error);
    }

    /// Windows opened and not completed yet.
    pub(super) fn pending(&self) -> Vec<PathBuf> {
        self.lock().pending.values().cloned().collect()
    }

    pub(super) fn pending_count(&self) -> usize {
        self.lock().pending.len()
    }

    pub(super) fn written(&self) -> Vec<PathBuf> {
        self.lock().written.clone()
    }

    /// The errors so far (each is returned once).
    pub(super) fn take_errors(&self) -> Vec<Error> {
        std::mem::take(&mut self.lock().errors)
    }
}

/// Everything the end of a window needs, shared by the session and the window's writer.
pub(super) struct WindowInfo {
    /// Which library writes the file, hence how it is completed.
    pub(super) backend: TraceBackend,
    /// The window's number in the session (from 1).
    pub(super) number: u64,
    pub(super) path: PathBuf,
    /// Shown as the process label in Perfetto, e.g. `train_step steps 16-18`.
    pub(super) label: String,
    /// tracing-chrome's time base: its `ts` are microseconds since this instant (unused by the
    /// Perfetto backend, whose timestamps are on a system clock).
    pub(super) base: Instant,
    pub(super) start: Instant,
    /// Set when the window closes, before tracing-chrome is told to close the file.
    pub(super) end: OnceLock<Instant>,
    pub(super) thread_names: bool,
    pub(super) counters: Option<Arc<dyn CounterSource>>,
    pub(super) results: Arc<Results>,
    /// Tests only: the bytes the "disk" still takes, shared by every file of the session;
    /// writes past it fail as on a full disk. `None`: no limit.
    pub(super) disk: Option<Arc<AtomicI64>>,
}

impl WindowInfo {
    pub(super) fn io_error(&self, action: &'static str, source: io::Error) -> Error {
        Error::Io {
            action,
            path: self.path.clone(),
            source,
        }
    }
}

/// The `Write` the backend writes one window's events into: a temporary file beside the
/// window's path.
///
/// It never returns an error (tracing-chrome's writer thread `unwrap`s every write, so an error
/// would kill it; tracing-perfetto-file would stop tracing): the first I/O error is kept, later
/// writes are dropped, and the window is reported as failed when it ends. Dropping it
/// (tracing-chrome does when it switches to the next window's writer, or when its `FlushGuard`
/// drops; tracing-perfetto-file when the window's layer is dropped) completes the file.
pub(super) struct WindowWriter {
    out: Option<BufWriter<Disk<File>>>,
    /// Listed while it exists, so that an exit that cannot wait removes it.
    partial: Temporary,
    info: Arc<WindowInfo>,
    error: Option<io::Error>,
}

impl WindowWriter {
    pub(super) fn create(info: Arc<WindowInfo>) -> Result<Self> {
        let (file, partial) = Temporary::create(
            partial_path(&info.path),
            File::options().create(true).truncate(true),
        )
        .map_err(|source| info.io_error("creating chrome trace", source))?;
        Ok(Self {
            out: Some(BufWriter::with_capacity(
                1 << 16,
                Disk {
                    inner: file,
                    left: info.disk.clone(),
                },
            )),
            partial,
            info,
            error: None,
        })
    }

    fn finish(&mut self) {
        let Some(out) = self.out.take() else {
            return;
        };
        let flushed = out.into_inner().map_err(|e| e.into_error());
        let error = self.error.take().or(flushed.err());
        let info = &self.info;
        let result = match error {
            Some(source) => Err(info.io_error("writing chrome trace", source)),
            None => match info.backend {
                TraceBackend::Chrome => complete_file(info, self.partial.path()),
                #[cfg(feature = "perfetto")]
                TraceBackend::Perfetto => super::perfetto::complete_file(info, self.partial.path()),
            },
        };
        let _ = self.partial.remove();
        match result {
            Ok(()) => info.results.wrote(info.number, info.path.clone()),
            Err(e) => info.results.failed(Some(info.number), e),
        }
    }
}

impl Write for WindowWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let (None, Some(out)) = (&self.error, &mut self.out) {
            if let Err(e) = out.write_all(buf) {
                self.error = Some(e);
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if let (None, Some(out)) = (&self.error, &mut self.out) {
            if let Err(e) = out.flush() {
                self.error = Some(e);
            }
        }
        Ok(())
    }
}

impl Drop for WindowWriter {
    fn drop(&mut self) {
        self.finish();
    }
}

/// A writer on a disk that may be full: with `left`, each write takes its length from the
/// shared budget and fails (`no space left on device`) once it is spent (tests simulate a full disk
/// with it; `None` in real sessions).
pub(super) struct Disk<W> {
    pub(super) inner: W,
    pub(super) left: Option<Arc<AtomicI64>>,
}

impl<W: Write> Write for Disk<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Some(left) = &self.left {
            let len = buf.len() as i64;
            if left.fetch_sub(len, Ordering::Relaxed) < len {
                left.store(0, Ordering::Relaxed);
                return Err(io::Error::other("no space left on device"));
            }
        }
        self.inner.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Microseconds from tracing-chrome's base to `at`, computed as tracing-chrome computes `ts`
/// (`start.elapsed().as_nanos() as f64 / 1000.0`); `None` before the base.
pub(super) fn micros(base: Instant, at: Instant) -> Option<f64> {
    at.checked_duration_since(base)
        .map(|d| d.as_nanos() as f64 / 1000.0)
}

/// Reads the window's closed partial file, completes it and writes it at the window's path
/// atomically (the path holds its old content, or nothing, until the rename).
fn complete_file(info: &WindowInfo, partial: &Path) -> Result<()> {
    let bytes =
        std::fs::read(partial).map_err(|source| info.io_error("reading chrome trace", source))?;
    let events: Vec<Value> = serde_json::from_slice(&bytes)
        .map_err(|e| info.io_error("parsing chrome trace", io::Error::from(e)))?;
    drop(bytes);
    let end = info.end.get().copied().unwrap_or_else(Instant::now);
    let counters = match &info.counters {
        Some(source) => source.window(info.start, end),
        None => Vec::new(),
    };
    let (events, _) = complete(
        events,
        &Completion {
            end_ts: micros(info.base, end).unwrap_or(0.0),
            base: info.base,
            counters: &counters,
            thread_names: info.thread_names,
            label: &info.label,
        },
    );
    crate::atomic_file::write(&info.path, "writing chrome trace", |out| {
        let mut out = Disk {
            inner: out,
            left: info.disk.clone(),
        };
        write_events(&mut out, &events)
    })
}

static PARTIAL: AtomicU64 = AtomicU64::new(0);

/// A temporary name beside `path` for tracing-chrome's output, unique in the process and
/// across processes.
fn partial_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "trace.json".to_string());
    path.with_file_name(format!(
        ".{name}.{}.{}.partial",
        std::process::id(),
        PARTIAL.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Writes events the way tracing-chrome does: a JSON array, one event per line.
fn write_events(out: &mut dyn Write, events: &[Value]) -> io::Result<()> {
    out.write_all(b"[\n")?;
    for (i, event) in events.iter().enumerate() {
        if i > 0 {
            out.write_all(b",\n")?;
        }
        serde_json::to_writer(&mut *out, event)?;
    }
    out.write_all(b"\n]\n")
}

/// What [`complete`] adds to a window's events.
pub(super) struct Completion<'a> {
    /// The window's end, in tracing-chrome's `ts` (µs since `base`).
    pub(super) end_ts: f64,
    pub(super) base: Instant,
    pub(super) counters: &'a [Counter],
    pub(super) thread_names: bool,
    pub(super) label: &'a str,
}

/// What [`complete`] had to repair.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Repairs {
    /// `E` events added for spans still entered when the window closed.
    pub(super) closed: usize,
    /// `E` events dropped because their `B` was not in the window.
    pub(super) dropped: usize,
}

struct Open {
    name: Value,
    cat: Value,
    tid: Value,
}

/// Makes a window's events a well-formed trace and adds the counter tracks:
///
/// * every `B` gets its `E` on the same thread, properly nested: a span still entered when the
///   window closed (a thread busy outside the step, or a step cut short by Ctrl-C) gets an `E` at
///   the window's end marked `"args": {"unfinished": true}`; an `E` whose `B` is missing is
///   dropped (the gating makes both rare: only spans entered in the window are forwarded);
/// * `thread_name` metadata is removed if thread names are off, a `process_name` and a
///   `process_labels` (the window's steps) metadata event are added;
/// * each counter sample becomes a `"ph": "C"` event at its `ts`, appended at the end.
pub(super) fn complete(events: Vec<Value>, with: &Completion<'_>) -> (Vec<Value>, Repairs) {
    let mut out = Vec::with_capacity(events.len() + with.counters.len() + 2);
    out.push(json!({
        "ph": "M", "pid": 1, "name": "process_name",
        "args": { "name": process_name() },
    }));
    out.push(json!({
        "ph": "M", "pid": 1, "name": "process_labels",
        "args": { "labels": with.label },
    }));
    let mut repairs = Repairs::default();
    // Per thread (keyed by the tid's JSON text): the spans entered, and the last timestamp.
    let mut stacks: BTreeMap<String, (Vec<Open>, f64)> = BTreeMap::new();
    for event in events {
        let ph = event.get("ph").and_then(Value::as_str).unwrap_or("");
        match ph {
            "B" | "E" => {
                let tid = event.get("tid").cloned().unwrap_or(Value::Null);
                let ts = event.get("ts").and_then(Value::as_f64).unwrap_or(0.0);
                let name = event.get("name").cloned().unwrap_or(Value::Null);
                let (stack, last) = stacks.entry(tid.to_string()).or_default();
                *last = last.max(ts);
                if ph == "B" {
                    let cat = event.get("cat").cloned().unwrap_or(Value::Null);
                    stack.push(Open { name, cat, tid });
                    out.push(event);
                    continue;
                }
                let Some(pos) = stack.iter().rposition(|open| open.name == name) else {
                    repairs.dropped += 1;
                    continue;
                };
                // Spans entered after this one and not exited end with it.
                while stack.len() > pos + 1 {
                    if let Some(open) = stack.pop() {
                        out.push(unfinished_end(open, ts));
                        repairs.closed += 1;
                    }
                }
                stack.pop();
                out.push(event);
            }
            "M" if !with.thread_names
                && event.get("name").and_then(Value::as_str) == Some("thread_name") => {}
            _ => out.push(event),
        }
    }
    for (stack, last) in stacks.into_values() {
        let ts = with.end_ts.max(last);
        for open in stack.into_iter().rev() {
            out.push(unfinished_end(open, ts));
            repairs.closed += 1;
        }
    }
    for counter in with.counters {
        let Some(ts) = micros(with.base, counter.at) else {
            continue;
        };
        let args: Map<String, Value> = counter
            .values
            .iter()
            .filter(|(_, v)| v.is_finite())
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        if !args.is_empty() {
            out.push(json!({
                "ph": "C", "pid": 1, "name": counter.name, "cat": "spanprof",
                "ts": ts, "args": args,
            }));
        }
    }
    (out, repairs)
}

fn unfinished_end(open: Open, ts: f64) -> Value {
    json!({
        "ph": "E", "pid": 1, "tid": open.tid, "ts": ts, "name": open.name, "cat": open.cat,
        "args": { "unfinished": true },
    })
}

fn process_name() -> String {
    let exe = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "process".to_string());
    format!("{exe} (pid {})", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ev(ph: &str, tid: u64, ts: f64, name: &str) -> Value {
        json!({"ph": ph, "pid": 1, "tid": tid, "ts": ts, "name": name, "cat": "t"})
    }

    fn phases(events: &[Value]) -> Vec<(String, String, f64)> {
        events
            .iter()
            .filter(|e| matches!(e["ph"].as_str(), Some("B" | "E")))
            .map(|e| {
                (
                    e["ph"].as_str().unwrap().to_string(),
                    e["name"].as_str().unwrap().to_string(),
                    e["ts"].as_f64().unwrap(),
                )
            })
            .collect()
    }

    /// A window's `.partial` file is listed as a temporary while it exists (an exit on a
    /// second signal removes it), and no longer once the window is complete.
    #[test]
    fn the_partial_file_is_a_listed_temporary_until_the_window_is_complete() {
        let dir = std::env::temp_dir().join(format!("spanprof-partial-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let now = Instant::now();
        let info = Arc::new(WindowInfo {
            backend: TraceBackend::Chrome,
            number: 1,
            path: dir.join("trace.json"),
            label: "l".to_string(),
            base: now,
            start: now,
            end: OnceLock::new(),
            thread_names: true,
            counters: None,
            results: Arc::default(),
            disk: None,
        });
        let mut writer = WindowWriter::create(info.clone()).unwrap();
        let partial = writer.partial.path().to_path_buf();
        assert!(partial.exists());
        assert!(crate::atomic_file::is_listed(&partial));
        writer.write_all(b"[\n]").unwrap();
        drop(writer);
        assert!(!partial.exists());
        assert!(!crate::atomic_file::is_listed(&partial));
        assert_eq!(info.results.written(), [dir.join("trace.json")]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn repairs_unmatched_and_unfinished_spans() {
        let base = Instant::now();
        let events = vec![
            json!({"ph": "M", "pid": 1, "name": "thread_name", "tid": 0, "args": {"name": "main"}}),
            ev("E", 0, 1.0, "from_before"), // its B was before the window: dropped
            ev("B", 0, 2.0, "step"),
            ev("B", 0, 3.0, "a"),
            ev("B", 0, 4.0, "b"), // never exited: ends with `a`
            ev("E", 0, 5.0, "a"),
            ev("B", 1, 6.0, "other_thread"), // still entered at the end
            ev("E", 0, 7.0, "step"),
        ];
        let with = Completion {
            end_ts: 9.0,
            base,
            counters: &[],
            thread_names: false,
            label: "l",
        };
        let (out, repairs) = complete(events, &with);
        assert_eq!(
            repairs,
            Repairs {
                closed: 2,
                dropped: 1
            }
        );
        let s = |ph: &str, n: &str, ts: f64| (ph.to_string(), n.to_string(), ts);
        assert_eq!(
            phases(&out),
            vec![
                s("B", "step", 2.0),
                s("B", "a", 3.0),
                s("B", "b", 4.0),
                s("E", "b", 5.0),
                s("E", "a", 5.0),
                s("B", "other_thread", 6.0),
                s("E", "step", 7.0),
                s("E", "other_thread", 9.0),
            ]
        );
        assert!(!out.iter().any(|e| e["name"] == "thread_name"));
        assert_eq!(out[1]["args"]["labels"], "l");
        let unfinished = out.iter().filter(|e| e["args"]["unfinished"] == true);
        assert_eq!(unfinished.count(), 2);
    }

    #[test]
    fn counters_become_counter_events_on_chrome_time_base() {
        let base = Instant::now();
        let at = |us: u64| base + Duration::from_micros(us);
        let counters = vec![
            Counter {
                at: at(1500),
                name: "memory".into(),
                values: vec![("rss_mb".into(), 812.0), ("heap_mb".into(), 100.5)],
            },
            Counter {
                at: at(2000),
                name: "gpu0".into(),
                values: vec![("util".into(), f64::NAN)], // nothing finite: no event
            },
        ];
        let with = Completion {
            end_ts: 3000.0,
            base,
            counters: &counters,
            thread_names: true,
            label: "l",
        };
        let (out, _) = complete(vec![], &with);
        let c: Vec<&Value> = out.iter().filter(|e| e["ph"] == "C").collect();
        assert_eq!(c.len(), 1);
        assert_eq!(c[0]["name"], "memory");
        assert_eq!(c[0]["ts"].as_f64(), Some(1500.0));
        assert_eq!(c[0]["args"]["rss_mb"].as_f64(), Some(812.0));
        assert_eq!(c[0]["args"]["heap_mb"].as_f64(), Some(100.5));
    }
}

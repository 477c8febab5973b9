//! One window's trace file: the writer handed to tracing-chrome, and what happens when
//! tracing-chrome closes it (check and repair the B/E pairs, append counter tracks, rewrite).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use serde_json::{json, Map, Value};

use super::counters::{Counter, CounterSource};
use crate::error::{Error, Result};

/// What the windows of a session wrote, filled in on tracing-chrome's writer thread.
#[derive(Debug, Default)]
pub(super) struct Results {
    written: Mutex<Vec<PathBuf>>,
    error: Mutex<Option<Error>>,
}

impl Results {
    fn wrote(&self, path: PathBuf) {
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(path);
    }

    /// Keeps the first error.
    pub(super) fn failed(&self, error: Error) {
        self.error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(error);
    }

    pub(super) fn written(&self) -> Vec<PathBuf> {
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(super) fn take_error(&self) -> Option<Error> {
        self.error.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// Everything the end of a window needs, shared by the session and the window's writer.
pub(super) struct WindowInfo {
    pub(super) path: PathBuf,
    /// Shown as the process label in Perfetto, e.g. `train_step steps 16-18`.
    pub(super) label: String,
    /// tracing-chrome's time base: its `ts` are microseconds since this instant.
    pub(super) base: Instant,
    pub(super) start: Instant,
    /// Set when the window closes, before tracing-chrome is told to close the file.
    pub(super) end: OnceLock<Instant>,
    pub(super) thread_names: bool,
    pub(super) counters: Option<Arc<dyn CounterSource>>,
    pub(super) results: Arc<Results>,
}

/// The `Write` tracing-chrome writes one window's events into.
///
/// It never returns an error (tracing-chrome's writer thread `unwrap`s every write, so an error
/// would kill it): the first I/O error is kept, later writes are dropped, and the window is
/// reported as failed when it ends. Dropping it (tracing-chrome does when it switches to the
/// next window's writer, or when its `FlushGuard` drops) finishes the file.
pub(super) struct WindowWriter {
    out: Option<BufWriter<File>>,
    info: Arc<WindowInfo>,
    error: Option<io::Error>,
}

impl WindowWriter {
    pub(super) fn create(info: Arc<WindowInfo>) -> Result<Self> {
        let file = File::create(&info.path).map_err(|source| Error::Io {
            action: "creating chrome trace",
            path: info.path.clone(),
            source,
        })?;
        Ok(Self {
            out: Some(BufWriter::with_capacity(1 << 16, file)),
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
            Some(source) => Err(Error::Io {
                action: "writing chrome trace",
                path: info.path.clone(),
                source,
            }),
            None => rewrite(info),
        };
        match result {
            Ok(()) => info.results.wrote(info.path.clone()),
            Err(e) => info.results.failed(e),
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

/// Microseconds from tracing-chrome's base to `at`, computed as tracing-chrome computes `ts`
/// (`start.elapsed().as_nanos() as f64 / 1000.0`); `None` before the base.
pub(super) fn micros(base: Instant, at: Instant) -> Option<f64> {
    at.checked_duration_since(base)
        .map(|d| d.as_nanos() as f64 / 1000.0)
}

/// Reads the closed file back, completes it and replaces it (through a temporary file and a
/// rename, so the file on disk is valid JSON at every moment).
fn rewrite(info: &WindowInfo) -> Result<()> {
    let path = &info.path;
    let io_err = |action: &'static str| {
        move |source: io::Error| Error::Io {
            action,
            path: path.clone(),
            source,
        }
    };
    let bytes = std::fs::read(path).map_err(io_err("reading chrome trace"))?;
    let events: Vec<Value> = serde_json::from_slice(&bytes)
        .map_err(|e| io_err("parsing chrome trace")(io::Error::from(e)))?;
    drop(bytes);
    let end = info.end.get().copied().unwrap_or_else(Instant::now);
    let counters = match &info.counters {
        Some(source) => source.counters_between(info.start, end),
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
    let tmp = tmp_path(path);
    write_events(&tmp, &events).map_err(io_err("writing chrome trace"))?;
    std::fs::rename(&tmp, path).map_err(io_err("renaming chrome trace"))
}

fn tmp_path(path: &Path) -> PathBuf {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    PathBuf::from(tmp)
}

/// Writes events the way tracing-chrome does: a JSON array, one event per line.
fn write_events(path: &Path, events: &[Value]) -> io::Result<()> {
    let mut out = BufWriter::with_capacity(1 << 16, File::create(path)?);
    out.write_all(b"[\n")?;
    for (i, event) in events.iter().enumerate() {
        if i > 0 {
            out.write_all(b",\n")?;
        }
        serde_json::to_writer(&mut out, event)?;
    }
    out.write_all(b"\n]\n")?;
    out.into_inner().map_err(|e| e.into_error())?.sync_all()
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

//! The console report: one row per span name, sorted by self time, like `torch.profiler`'s
//! `key_averages().table()`. Fits a 100-column terminal.

use std::fmt::{self, Write as _};

use crate::snapshot::{Snapshot, SpanStats};

/// A console report of a [`Snapshot`]; `Display` renders it.
///
/// ```
/// # use spanprof::{ProfileLayer, ReportTarget, Report};
/// # use tracing_subscriber::prelude::*;
/// let (layer, guard) = ProfileLayer::builder()
///     .with_env(false)
///     .with_report(ReportTarget::Off)
///     .build()?;
/// let subscriber = tracing_subscriber::registry().with(layer);
/// tracing::subscriber::with_default(subscriber, || {
///     tracing::info_span!("work").in_scope(|| std::hint::black_box(1 + 1));
/// });
/// let snapshot = guard.snapshot();
/// let text = Report::new(&snapshot).top(10).to_string();
/// assert!(text.contains("work"));
/// # Ok::<(), spanprof::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Report<'a> {
    snapshot: &'a Snapshot,
    top: usize,
}

const NAME_WIDTH: usize = 22;

impl<'a> Report<'a> {
    /// A report of all span names.
    pub fn new(snapshot: &'a Snapshot) -> Self {
        Self {
            snapshot,
            top: usize::MAX,
        }
    }

    /// Shows only the `n` span names with the most self time.
    pub fn top(self, n: usize) -> Self {
        Self { top: n, ..self }
    }
}

/// Formats nanoseconds in human units with three significant digits (`812 ns`, `1.25 ms`).
pub fn format_duration(ns: u64) -> String {
    let ns = ns as f64;
    let (value, unit) = if ns < 1e3 {
        return format!("{ns:.0} ns");
    } else if ns < 1e6 {
        (ns / 1e3, "µs")
    } else if ns < 1e9 {
        (ns / 1e6, "ms")
    } else if ns < 1e3 * 1e9 {
        (ns / 1e9, "s")
    } else if ns < 1e3 * 60e9 {
        (ns / 60e9, "min")
    } else {
        (ns / 3600e9, "h")
    };
    three_digits(value, unit)
}

fn three_digits(value: f64, unit: &str) -> String {
    if value < 10.0 {
        format!("{value:.2} {unit}")
    } else if value < 100.0 {
        format!("{value:.1} {unit}")
    } else {
        format!("{value:.0} {unit}")
    }
}

/// Formats a byte count in binary units (`812 B`, `1.25 MiB`); negative values keep their sign.
pub fn format_bytes(bytes: f64) -> String {
    let sign = if bytes < 0.0 { "-" } else { "" };
    let b = bytes.abs();
    let units = [
        ("B", 1.0),
        ("KiB", 1024.0),
        ("MiB", 1048576.0),
        ("GiB", 1073741824.0),
        ("TiB", 1099511627776.0),
    ];
    let chosen = largest_unit(b, &units);
    if chosen.1 == 1.0 {
        return format!("{sign}{b:.0} B");
    }
    format!("{sign}{}", three_digits(b / chosen.1, chosen.0))
}

/// The largest unit (name, size) not larger than `value`; the first one for smaller values.
fn largest_unit<'a>(value: f64, units: &[(&'a str, f64)]) -> (&'a str, f64) {
    units
        .iter()
        .copied()
        .take_while(|u| value >= u.1)
        .last()
        .unwrap_or(units[0])
}

/// Formats a count or rate with an SI prefix (`1.25 k`, `3.40 G`).
pub fn format_si(value: f64) -> String {
    let prefixes = [
        ("", 1.0),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
    ];
    let chosen = largest_unit(value, &prefixes);
    if chosen.1 == 1.0 {
        return if value.fract() == 0.0 {
            format!("{value:.0}")
        } else {
            format!("{value:.2}")
        };
    }
    three_digits(value / chosen.1, chosen.0)
        .trim_end()
        .to_string()
}

/// Exact counts where they fit a 7-character column, SI prefixes beyond.
fn format_count(n: u64) -> String {
    if n < 10_000_000 {
        n.to_string()
    } else {
        format_si(n as f64)
    }
}

fn short_name(s: &SpanStats) -> String {
    if s.name.chars().count() <= NAME_WIDTH {
        s.name.clone()
    } else {
        let mut n: String = s.name.chars().take(NAME_WIDTH - 1).collect();
        n.push('…');
        n
    }
}

impl fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let snap = self.snapshot;
        let mut rows: Vec<&SpanStats> = snap.spans.iter().collect();
        rows.sort_by(|a, b| {
            b.entry_self
                .total_ns
                .cmp(&a.entry_self.total_ns)
                .then(b.entry_busy.total_ns.cmp(&a.entry_busy.total_ns))
                .then(a.name.cmp(&b.name))
        });
        let all_self: u64 = rows.iter().map(|s| s.entry_self.total_ns).sum();
        let shown = &rows[..rows.len().min(self.top)];

        writeln!(
            f,
            "spanprof: {} span names, {} inside spans, run {} (preset {})",
            rows.len(),
            format_duration(all_self),
            format_duration(snap.run.duration_ns),
            snap.run.preset
        )?;
        writeln!(
            f,
            "calls = completed entries (enter→exit); per-call times; self % = share of time in spans"
        )?;
        writeln!(
            f,
            "{:<nw$} {:>7} {:>8} {:>8} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8}",
            "name",
            "calls",
            "total",
            "self",
            "self%",
            "mean",
            "p50",
            "p90",
            "p99",
            "max",
            nw = NAME_WIDTH
        )?;
        for s in shown {
            let e = &s.entry_busy;
            let share = if all_self == 0 {
                0.0
            } else {
                100.0 * s.entry_self.total_ns as f64 / all_self as f64
            };
            writeln!(
                f,
                "{:<nw$} {:>7} {:>8} {:>8} {:>5.1}% {:>8} {:>8} {:>8} {:>8} {:>8}",
                short_name(s),
                format_count(s.calls),
                format_duration(e.total_ns),
                format_duration(s.entry_self.total_ns),
                share,
                format_duration(e.mean_ns.round() as u64),
                format_duration(e.p50_ns),
                format_duration(e.p90_ns),
                format_duration(e.p99_ns),
                format_duration(e.max_ns),
                nw = NAME_WIDTH
            )?;
        }
        if rows.len() > shown.len() {
            writeln!(
                f,
                "… {} more span names (raise SPANPROF_TOP to show them)",
                rows.len() - shown.len()
            )?;
        }

        let throughput: Vec<&&SpanStats> = shown
            .iter()
            .filter(|s| s.items.is_some() || s.bytes.is_some() || s.flops.is_some())
            .collect();
        if !throughput.is_empty() {
            writeln!(f)?;
            writeln!(f, "throughput (field sum ÷ busy time)")?;
            writeln!(
                f,
                "{:<nw$} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
                "name",
                "items",
                "items/s",
                "bytes",
                "bytes/s",
                "FLOP",
                "FLOP/s",
                nw = NAME_WIDTH
            )?;
            for s in throughput {
                let cell =
                    |v: Option<u64>| v.map(|v| format_si(v as f64)).unwrap_or_else(|| "-".into());
                let rate = |v: Option<u64>| s.rate(v).map(format_si).unwrap_or_else(|| "-".into());
                writeln!(
                    f,
                    "{:<nw$} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
                    short_name(s),
                    cell(s.items),
                    rate(s.items),
                    cell(s.bytes),
                    rate(s.bytes),
                    cell(s.flops),
                    rate(s.flops),
                    nw = NAME_WIDTH
                )?;
            }
        }

        let errors: Vec<&&SpanStats> = shown.iter().filter(|s| s.errors > 0).collect();
        if !errors.is_empty() {
            writeln!(f)?;
            let mut line = String::from("errors:");
            for s in errors {
                let _ = write!(line, " {} {} of {} calls;", s.name, s.errors, s.calls);
            }
            writeln!(f, "{}", line.trim_end_matches(';'))?;
        }

        // Spans whose instances are not one entry each: async tasks, long-lived spans.
        let multi: Vec<&&SpanStats> = shown
            .iter()
            .filter(|s| s.open > 0 || s.instances != s.calls)
            .collect();
        if !multi.is_empty() {
            writeln!(f)?;
            writeln!(
                f,
                "span instances (busy = sum of entries; wall = creation to close)"
            )?;
            writeln!(
                f,
                "{:<nw$} {:>9} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9}",
                "name",
                "instances",
                "open",
                "calls/ins",
                "busy",
                "wall",
                "busy%",
                "running",
                nw = NAME_WIDTH
            )?;
            for s in multi {
                let per = if s.created == 0 {
                    "-".to_string()
                } else {
                    format_si(s.calls as f64 / s.created as f64)
                };
                let busy_share = if s.wall.total_ns == 0 {
                    "-".to_string()
                } else {
                    format!(
                        "{:.1}%",
                        100.0 * s.busy.total_ns as f64 / s.wall.total_ns as f64
                    )
                };
                let mean = |n: u64, t: u64| {
                    t.checked_div(n)
                        .map_or_else(|| "-".to_string(), format_duration)
                };
                writeln!(
                    f,
                    "{:<nw$} {:>9} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9}",
                    short_name(s),
                    s.instances,
                    s.open,
                    per,
                    mean(s.busy.count, s.busy.total_ns),
                    mean(s.wall.count, s.wall.total_ns),
                    busy_share,
                    format_duration(s.in_progress_ns),
                    nw = NAME_WIDTH
                )?;
            }
        }

        write_resources(f, snap, shown)?;

        let clamped: u64 = snap
            .spans
            .iter()
            .map(|s| s.entry_busy.clamped + s.wall.clamped)
            .sum();
        if clamped > 0 {
            writeln!(
                f,
                "note: {clamped} samples longer than {} were recorded as that value",
                format_duration(snap.histograms.highest)
            )?;
        }
        let d = &snap.dropped;
        if d.spans_table_full + d.spans_too_many_names > 0 {
            writeln!(
                f,
                "note: not profiled: {} spans (open-span table full), {} spans (too many names)",
                d.spans_table_full, d.spans_too_many_names
            )?;
        }
        Ok(())
    }
}

/// The resource sections (presets `detailed` and `full`): memory and CPU per span, GPU and
/// energy per span, leak suspicions, and what was not available.
fn write_resources(
    f: &mut fmt::Formatter<'_>,
    snap: &Snapshot,
    shown: &[&SpanStats],
) -> fmt::Result {
    let Some(info) = &snap.resources else {
        return Ok(());
    };
    writeln!(f)?;
    let mut status = format!(
        "resources: sampled every {} ms ({})",
        info.interval_ms,
        info.samplers.join(", ")
    );
    if let Some(peak) = info.peak_rss_bytes {
        let _ = write!(status, "; peak RSS {}", format_bytes(peak as f64));
    }
    if let Some(peak) = info.peak_heap_bytes {
        let _ = write!(status, "; peak heap {}", format_bytes(peak as f64));
    }
    writeln!(f, "{status}")?;
    let wants = |s: &str| info.samplers.iter().any(|x| x == s);
    if wants("heap") && !info.heap_allocator {
        writeln!(
            f,
            "heap: not measured (install spanprof::CountingAlloc as #[global_allocator])"
        )?;
    }
    if wants("gpu") {
        match &info.gpu_unavailable {
            Some(reason) => writeln!(f, "GPU: not available ({reason})")?,
            None => {
                for (i, d) in info.gpu_devices.iter().enumerate() {
                    writeln!(f, "GPU {i}: {}", d.name)?;
                }
            }
        }
    }
    if wants("energy") {
        if let Some(reason) = &info.cpu_energy_unavailable {
            writeln!(f, "CPU energy: not available ({reason})")?;
        }
    }

    let mem_rows: Vec<_> = shown
        .iter()
        .filter_map(|s| Some((s, s.resources.as_ref()?)))
        .filter(|(_, r)| r.cpu.is_some() || r.heap.is_some() || r.memory.is_some())
        .collect();
    if !mem_rows.is_empty() {
        writeln!(
            f,
            "memory and CPU (per call; RSS and peaks over instances, heap and CPU over entries)"
        )?;
        writeln!(
            f,
            "{:<nw$} {:>5} {:>9} {:>9} {:>9} {:>9} {:>7} {:>9} {:>9}",
            "name",
            "cpu%",
            "rss Δ",
            "peak rss",
            "peak heap",
            "alloc",
            "allocs",
            "kept",
            "self kept",
            nw = NAME_WIDTH
        )?;
        let dash = || "-".to_string();
        for (s, r) in &mem_rows {
            let per = |total: f64, n: u64| {
                if n == 0 {
                    dash()
                } else {
                    format_bytes(total / n as f64)
                }
            };
            writeln!(
                f,
                "{:<nw$} {:>5} {:>9} {:>9} {:>9} {:>9} {:>7} {:>9} {:>9}",
                short_name(s),
                r.cpu
                    .as_ref()
                    .map_or_else(dash, |c| format!("{:.0}%", c.utilization_pct)),
                r.memory
                    .as_ref()
                    .map_or_else(dash, |m| per(m.rss_delta_bytes as f64, m.instances)),
                r.memory
                    .as_ref()
                    .map_or_else(dash, |m| format_bytes(m.peak_rss_bytes as f64)),
                r.memory
                    .as_ref()
                    .and_then(|m| m.peak_heap_bytes)
                    .map_or_else(dash, |p| format_bytes(p as f64)),
                r.heap
                    .as_ref()
                    .map_or_else(dash, |h| per(h.allocated_bytes as f64, h.entries)),
                r.heap.as_ref().map_or_else(dash, |h| format_si(
                    h.allocations as f64 / h.entries.max(1) as f64
                )),
                r.heap
                    .as_ref()
                    .map_or_else(dash, |h| per(h.net_retained_bytes as f64, h.entries)),
                r.heap
                    .as_ref()
                    .map_or_else(dash, |h| per(h.self_retained_bytes as f64, h.entries)),
                nw = NAME_WIDTH
            )?;
        }
    }

    let gpu_rows: Vec<_> = shown
        .iter()
        .filter_map(|s| Some((s, s.resources.as_ref()?)))
        .filter(|(_, r)| !r.gpus.is_empty() || r.energy_j.is_some())
        .collect();
    if !gpu_rows.is_empty() {
        let co2 = info.grid_g_per_kwh.is_some();
        writeln!(
            f,
            "GPU and energy (over instances; GPU memory per call, energy in total)"
        )?;
        let row = |cells: [&str; 8]| {
            let line = format!(
                "{:<nw$} {:>4} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10}",
                cells[0],
                cells[1],
                cells[2],
                cells[3],
                cells[4],
                cells[5],
                cells[6],
                cells[7],
                nw = NAME_WIDTH
            );
            line.trim_end().to_string()
        };
        let co2_head = if co2 { "CO2e" } else { "" };
        writeln!(
            f,
            "{}",
            row(["name", "gpu", "util%", "mem Δ", "peak mem", "gpu J", "total J", co2_head])
        )?;
        for (s, r) in &gpu_rows {
            let total = r
                .energy_j
                .map_or_else(|| "-".to_string(), |j| format!("{j:.3}"));
            let co2e = r.co2e_g.map_or_else(String::new, |g| format!("{g:.4} g"));
            let name = short_name(s);
            if r.gpus.is_empty() {
                writeln!(
                    f,
                    "{}",
                    row([&name, "-", "-", "-", "-", "-", &total, &co2e])
                )?;
            }
            for (i, g) in r.gpus.iter().enumerate() {
                let first = i == 0;
                let util = g
                    .mean_utilization_pct
                    .map_or_else(|| "-".to_string(), |u| format!("{u:.0}%"));
                let mem = format_bytes(g.memory_delta_bytes as f64 / g.instances.max(1) as f64);
                let peak = format_bytes(g.peak_memory_bytes as f64);
                let joules = g
                    .energy_j
                    .map_or_else(|| "-".to_string(), |j| format!("{j:.3}"));
                let device = g.device.to_string();
                writeln!(
                    f,
                    "{}",
                    row([
                        if first { &name } else { "" },
                        &device,
                        &util,
                        &mem,
                        &peak,
                        &joules,
                        if first { &total } else { "" },
                        if first { &co2e } else { "" },
                    ])
                )?;
            }
        }
    }

    for s in shown {
        if let Some(leak) = s.resources.as_ref().and_then(|r| r.leak.as_ref()) {
            writeln!(f, "possible leak: {} {}", s.name, leak.evidence)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_in_human_units() {
        assert_eq!(format_duration(0), "0 ns");
        assert_eq!(format_duration(999), "999 ns");
        assert_eq!(format_duration(1_234), "1.23 µs");
        assert_eq!(format_duration(12_345_678), "12.3 ms");
        assert_eq!(format_duration(123_456_789), "123 ms");
        assert_eq!(format_duration(2_500_000_000), "2.50 s");
        assert_eq!(format_duration(3_600_000_000_000), "60.0 min");
        assert_eq!(format_duration(36_000_000_000_000), "600 min");
        assert_eq!(format_duration(360_000_000_000_000), "100 h");
    }

    #[test]
    fn si_counts() {
        assert_eq!(format_si(12.0), "12");
        assert_eq!(format_si(1_250.0), "1.25 k");
        assert_eq!(format_si(3.4e9), "3.40 G");
    }
}

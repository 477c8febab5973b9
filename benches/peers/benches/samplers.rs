//! # `samplers` — what does each resource reader cost per call?
//!
//! ```text
//! cargo bench -p spanprof-peers --bench samplers
//! cargo test  -p spanprof-peers --bench samplers  # smoke: each case once
//! ```
//!
//! Every case is **one call** of a reader, on the benchmarking thread:
//!
//! | case | what runs |
//! |---|---|
//! | `instant_now` | `Instant::now()`, for scale (vDSO, no system call) |
//! | `thread_cpu_ns` | `clock_gettime(CLOCK_THREAD_CPUTIME_ID)`: read on the span hot path at `detailed` |
//! | `thread_user_sys_ns` | `getrusage(RUSAGE_THREAD)` |
//! | `process_cpu_ns` | `getrusage(RUSAGE_SELF)` |
//! | `peak_rss_bytes` | `getrusage(RUSAGE_SELF).ru_maxrss` |
//! | `rss_bytes` | open, read, close `/proc/self/statm` |
//! | `rss_reader` | `pread` of a kept-open `/proc/self/statm` (what the sampler does) |
//! | `rapl_read` | `Rapl::read` on the real `/sys/class/powercap` if readable, else on a stand-in tree in the temp directory (one package) |
//!
//! ## Results on the development machine
//!
//! 2-vCPU Firecracker VM on AMD EPYC, Linux 6.18, glibc 2.36, shared with other builds;
//! `--warm-up-time 1 --measurement-time 3..5`, medians of criterion's estimates over two runs:
//!
//! | case | per call |
//! |---|---|
//! | `instant_now` | 24 ns |
//! | `thread_cpu_ns` | 550–600 ns |
//! | `thread_user_sys_ns` | 330–390 ns |
//! | `process_cpu_ns` | 810 ns |
//! | `peak_rss_bytes` | 0.7–1.1 µs |
//! | `rss_bytes` | 6.6 µs |
//! | `rss_reader` | 2.0 µs |
//! | `rapl_read` | 0.86 µs (stand-in tree: the VM has no RAPL) |

use std::hint::black_box;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion};
use spanprof::__private::{cpu, energy::Rapl, memory};

fn readers(c: &mut Criterion) {
    let mut g = c.benchmark_group("samplers");
    g.bench_function("instant_now", |b| b.iter(|| black_box(Instant::now())));
    g.bench_function("thread_cpu_ns", |b| {
        b.iter(|| black_box(cpu::thread_cpu_ns()))
    });
    g.bench_function("thread_user_sys_ns", |b| {
        b.iter(|| black_box(cpu::thread_user_sys_ns()))
    });
    g.bench_function("process_cpu_ns", |b| {
        b.iter(|| black_box(cpu::process_cpu_ns()))
    });
    g.bench_function("peak_rss_bytes", |b| {
        b.iter(|| black_box(memory::peak_rss_bytes()))
    });
    g.bench_function("rss_bytes", |b| b.iter(|| black_box(memory::rss_bytes())));
    if let Some(mut reader) = memory::RssReader::open() {
        g.bench_function("rss_reader", |b| b.iter(|| black_box(reader.read())));
    }

    let (mut rapl, stand_in) = match Rapl::open() {
        Ok(rapl) => (Some(rapl), None),
        Err(reason) => {
            eprintln!("RAPL not readable ({reason}); timing a stand-in tree instead");
            let root =
                std::env::temp_dir().join(format!("spanprof-bench-rapl-{}", std::process::id()));
            let zone = root.join("intel-rapl:0");
            let made = std::fs::create_dir_all(&zone)
                .and_then(|()| std::fs::write(zone.join("name"), "package-0\n"))
                .and_then(|()| std::fs::write(zone.join("energy_uj"), "123456789\n"))
                .and_then(|()| std::fs::write(zone.join("max_energy_range_uj"), "262143328850\n"));
            match made
                .map_err(|e| e.to_string())
                .and_then(|()| Rapl::open_at(&root))
            {
                Ok(rapl) => (Some(rapl), Some(root)),
                Err(e) => {
                    eprintln!("stand-in RAPL tree failed: {e}");
                    (None, Some(root))
                }
            }
        }
    };
    if let Some(rapl) = rapl.as_mut() {
        g.bench_function("rapl_read", |b| b.iter(|| black_box(rapl.read())));
    }
    g.finish();
    if let Some(root) = stand_in {
        let _ = std::fs::remove_dir_all(root);
    }
}

criterion_group!(benches, readers);
criterion_main!(benches);

//! The public resource readers return plausible values. (The sampler thread, the timeline and
//! the published readings are crate-internal: their tests are in `src/samplers/`.)
#![cfg(any(target_os = "linux", target_os = "android"))]

use std::hint::black_box;
use std::time::{Duration, Instant};

use spanprof::samplers::{cpu, energy::Rapl, memory};

#[test]
fn rss_grows_after_touching_64_mib() {
    let mut reader = memory::RssReader::open().expect("/proc/self/statm");
    let before = reader.read().expect("rss");
    assert!(before > 0);
    assert_eq!(before % 4096, 0, "a whole number of pages");
    let size = 64 << 20;
    let mut block = vec![0u8; size];
    // Touch every page so it becomes resident (calloc'd memory is mapped lazily).
    for i in (0..size).step_by(4096) {
        block[i] = 1;
    }
    black_box(&block);
    let after = reader.read().expect("rss");
    let one_shot = memory::rss_bytes().expect("rss");
    // Other tests run in parallel threads of this process: allow them 16 MiB either way.
    let slack = 16 << 20;
    assert!(after + slack >= before + size as u64, "{before} -> {after}");
    assert!(
        one_shot + slack >= before + size as u64,
        "{before} -> {one_shot}"
    );
    let peak = memory::peak_rss_bytes().expect("peak");
    // The kernel's high-water mark can trail `statm` by its per-CPU counter batching.
    assert!(peak + (4 << 20) >= after, "peak {peak} < rss {after}");
    drop(block);
}

#[test]
fn thread_cpu_time_counts_a_busy_loop() {
    let busy = Duration::from_millis(100);
    let (c0, us0) = (cpu::thread_cpu_ns(), cpu::thread_user_sys_ns().unwrap());
    let p0 = cpu::process_cpu_ns().unwrap();
    let start = Instant::now();
    let mut x = 0u64;
    while start.elapsed() < busy {
        x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
    let wall = start.elapsed();
    let (c1, us1) = (cpu::thread_cpu_ns(), cpu::thread_user_sys_ns().unwrap());
    let p1 = cpu::process_cpu_ns().unwrap();
    let used = c1 - c0;
    // On a shared 2-core machine the thread may be descheduled: at least half the wall time,
    // and never more than the wall time (plus the reads themselves).
    assert!(
        used >= busy.as_nanos() as u64 / 2,
        "{used} ns of CPU in {wall:?}"
    );
    assert!(
        used <= wall.as_nanos() as u64 + 5_000_000,
        "{used} ns of CPU in {wall:?}"
    );
    let rusage_used = (us1.0 + us1.1) - (us0.0 + us0.1);
    // getrusage's user/system split is tick-based: within 20 ms of the precise clock.
    assert!(
        rusage_used.abs_diff(used) < 20_000_000,
        "{rusage_used} vs {used}"
    );
    let process_used = (p1.0 + p1.1) - (p0.0 + p0.1);
    assert!(
        process_used + 20_000_000 >= used,
        "{process_used} vs {used}"
    );
}

#[test]
fn thread_cpu_time_is_per_thread() {
    let here = cpu::thread_cpu_ns();
    let other = std::thread::spawn(cpu::thread_cpu_ns).join().unwrap();
    // A fresh thread has used far less CPU than the test harness thread... or at least is
    // counted on its own clock: it cannot have used more than this process has.
    let (u, s) = cpu::process_cpu_ns().unwrap();
    assert!(other <= u + s + 10_000_000);
    assert!(here > 0 && other > 0);
}

#[test]
fn rapl_opens_or_says_why() {
    match Rapl::open() {
        Ok(mut rapl) => {
            assert!(!rapl.domains().is_empty());
            let a = rapl.read().expect("readable at open");
            std::thread::sleep(Duration::from_millis(50));
            let b = rapl.read().expect("readable");
            assert!(b >= a);
        }
        Err(reason) => {
            assert!(!reason.is_empty());
            eprintln!("RAPL: not available ({reason})");
        }
    }
}

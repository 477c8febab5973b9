//! The public resource readers return plausible values. (The sampler thread, the timeline and
//! the published readings are crate-internal: their tests are in `src/samplers/`.)
#![cfg(any(target_os = "linux", target_os = "android"))]

use std::hint::black_box;
use std::time::{Duration, Instant};

use super::{cpu, energy::Rapl, memory};

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
    // Busy-loop until getrusage (an independent account) says this thread used 100 ms: wall
    // time would not do on a shared machine, where the thread may wait for a core.
    let busy = 100_000_000u64;
    let rusage = || {
        let (u, s) = cpu::thread_user_sys_ns().unwrap();
        u + s
    };
    let (c0, r0, p0) = (
        cpu::thread_cpu_ns(),
        rusage(),
        cpu::process_cpu_ns().unwrap(),
    );
    let start = Instant::now();
    let mut x = 0u64;
    while rusage() - r0 < busy {
        for _ in 0..10_000 {
            x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no CPU time in 20 s"
        );
    }
    let wall = start.elapsed().as_nanos() as u64;
    let (c1, p1) = (cpu::thread_cpu_ns(), cpu::process_cpu_ns().unwrap());
    let used = c1 - c0;
    // getrusage leaves out the current time slice, at either end: 10 ms of slack.
    assert!(
        used + 10_000_000 >= busy,
        "{used} ns of CPU, getrusage says >= {busy}"
    );
    assert!(
        used <= wall + 5_000_000,
        "{used} ns of CPU in {wall} ns of wall time"
    );
    let process_used = (p1.0 + p1.1) - (p0.0 + p0.1);
    assert!(
        process_used + 10_000_000 >= busy,
        "process {process_used} ns"
    );
}

#[test]
fn thread_cpu_time_is_per_thread() {
    let here0 = cpu::thread_cpu_ns();
    // Another thread burns 50 ms of CPU while this one waits in `join`.
    let other = std::thread::spawn(|| {
        let t0 = cpu::thread_cpu_ns();
        let start = Instant::now();
        let mut x = 0u64;
        while cpu::thread_cpu_ns() - t0 < 50_000_000 {
            x = black_box(x.wrapping_add(1));
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "no CPU time in 10 s"
            );
        }
        cpu::thread_cpu_ns() - t0
    })
    .join()
    .unwrap();
    let here = cpu::thread_cpu_ns() - here0;
    assert!(other >= 50_000_000);
    // Spawning and joining costs this thread far less than the other thread's 50 ms.
    assert!(here < 25_000_000, "waiting thread used {here} ns");
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

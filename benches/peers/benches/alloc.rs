//! # `alloc` — what does [`spanprof::CountingAlloc`] add to an allocation?
//!
//! ```text
//! cargo bench -p spanprof-peers --bench alloc
//! cargo test  -p spanprof-peers --bench alloc  # smoke: each case once
//! ```
//!
//! This binary installs `CountingAlloc::system()` as its global allocator. Each case is one
//! **allocation + free** of the given size, through:
//!
//! | case | path |
//! |---|---|
//! | `system/N` | `System.alloc` + `System.dealloc` directly: the baseline |
//! | `counting/N` | the installed `CountingAlloc` (`GlobalAlloc` methods on the static): baseline + counting |
//! | `box_global/N` | `Box<[u8]>` of N bytes through the global allocator, as user code does |
//!
//! N = 16 and 256 bytes (the common small sizes, served from malloc's per-thread cache, where
//! the relative overhead is highest) and 64 KiB (crosses the process-view flush every time on
//! a 64 KiB net change: alternating +64 KiB / −64 KiB, so a flush each allocation and free).
//!
//! ## Results on the development machine
//!
//! 2-vCPU Firecracker VM on AMD EPYC, Linux 6.18, glibc 2.36 malloc;
//! `--warm-up-time 1 --measurement-time 3`, criterion's median estimate, per allocation + free:
//!
//! | N | `system` | `counting` | added | `box_global` |
//! |---|---|---|---|---|
//! | 16 B | 16.0 ns | 17.7 ns | +1.7 ns | 38 ns |
//! | 256 B | 15.3 ns | 18.7 ns | +3.4 ns | 74 ns |
//! | 64 KiB (a process-view flush on every call) | 32.2 ns | 36.0 ns | +3.8 ns | 1.18 µs |
//!
//! So about 1–2 ns per allocation or free.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use spanprof::CountingAlloc;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc::system();

fn alloc_free(c: &mut Criterion) {
    let mut g = c.benchmark_group("alloc");
    for size in [16usize, 256, 64 * 1024] {
        let Ok(layout) = Layout::from_size_align(size, 8) else {
            continue;
        };
        g.bench_with_input(BenchmarkId::new("system", size), &layout, |b, &layout| {
            b.iter(|| {
                // SAFETY: a non-zero-size layout; the block is freed with the same layout by
                // the allocator that allocated it, and never touched.
                #[allow(unsafe_code)]
                unsafe {
                    let p = System.alloc(black_box(layout));
                    if !p.is_null() {
                        System.dealloc(black_box(p), layout);
                    }
                }
            })
        });
        g.bench_with_input(BenchmarkId::new("counting", size), &layout, |b, &layout| {
            b.iter(|| {
                // SAFETY: as above, with the counting allocator.
                #[allow(unsafe_code)]
                unsafe {
                    let p = GLOBAL.alloc(black_box(layout));
                    if !p.is_null() {
                        GLOBAL.dealloc(black_box(p), layout);
                    }
                }
            })
        });
        g.bench_with_input(BenchmarkId::new("box_global", size), &size, |b, &size| {
            b.iter(|| black_box(vec![0u8; black_box(size)].into_boxed_slice()))
        });
    }
    g.finish();
    if let Some(h) = spanprof::alloc::HeapCounters::thread() {
        eprintln!("this thread: {h:?}");
    }
}

criterion_group!(benches, alloc_free);
criterion_main!(benches);

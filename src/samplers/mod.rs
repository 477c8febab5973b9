//! Resource samplers: readers of memory, CPU time and energy, the GPU source interface, and the
//! background thread that samples them into lock-free latest readings and a bounded timeline.
//!
//! The readers are public so that programs can use them directly; spanprof's layer only ever
//! reads what the sampler thread published (no system call on the span hot path), except
//! [`cpu::thread_cpu_ns`] at the `detailed` preset and up.

// The sampler thread, the readings and the timeline are wired into the layer and the report at
// integration; until then parts of their crate-internal API have no caller outside tests.
#![allow(dead_code)]

pub mod cpu;
pub mod energy;
pub mod gpu;
pub mod memory;
pub(crate) mod thread;
pub(crate) mod timeline;

pub use thread::DEFAULT_INTERVAL;
pub use timeline::Sample;

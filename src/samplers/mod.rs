//! Resource samplers: readers of memory, CPU time and energy, the GPU source interface and its
//! NVML backend, and the background thread that samples them into lock-free latest readings
//! and a bounded timeline.
//!
//! The readers are public so that programs can use them directly; spanprof's layer only reads
//! what the sampler thread published (no system call on the span hot path), except the thread
//! CPU clock at the `detailed` preset and up.

pub mod cpu;
pub mod energy;
pub mod gpu;
pub mod memory;
pub(crate) mod nvml;
pub(crate) mod thread;
pub(crate) mod timeline;

pub use thread::DEFAULT_INTERVAL;
pub use timeline::Sample;

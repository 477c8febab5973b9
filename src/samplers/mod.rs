//! Resource samplers: readers of memory, CPU time and energy, the GPU source interface and its
//! NVML backend, and the background thread that samples them into lock-free latest readings
//! and a bounded timeline.
//!
//! spanprof's layer only reads what the sampler thread published (no system call on the span
//! hot path), except the thread CPU clock when [`Resources::CPU`] is on.

pub mod cpu;
#[cfg(feature = "cuda")]
pub(crate) mod cuda;
pub mod energy;
pub(crate) mod gpu;
pub mod memory;
#[cfg(feature = "nvml")]
pub(crate) mod nvml;
#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod readers_tests;
mod thread;
mod timeline;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::switches::Resources;
use crate::PERF_TARGET;
use gpu::{GpuError, GpuSource};
pub(crate) use thread::{Sampler, SamplerConfig, DEFAULT_INTERVAL};
pub(crate) use timeline::{Readings, SourceStatus, Timeline};

/// How long the builder waits for the sampler's first sample, so that spans opened right after
/// it find readings to start from.
const FIRST_SAMPLE_WAIT: Duration = Duration::from_secs(1);

/// Starts the sampler thread for `resources` and waits (up to a second) for its first sample.
/// With [`Resources::GPU`], `gpu` is the backend (NVML when `None`). Returns `None`, with one
/// warning at [`PERF_TARGET`], if the thread cannot be started: resource figures are then
/// absent, and everything else works. The thread ends once no `uses` is left.
pub(crate) fn start(
    interval: Duration,
    resources: Resources,
    gpu: Option<Box<dyn GpuSource>>,
    origin: Instant,
    readings: &Arc<Readings>,
    timeline: &Arc<Timeline>,
    uses: &crate::worker::WeakUse,
) -> Option<Sampler> {
    let gpu = if resources.contains(Resources::GPU) {
        match gpu.map_or_else(default_gpu_source, Ok) {
            Ok(source) => Some(source),
            Err(reason) => {
                tracing::warn!(target: PERF_TARGET, %reason, "spanprof: GPU not available");
                readings.set_gpus(SourceStatus::Unavailable(reason.to_string()));
                None
            }
        }
    } else {
        None
    };
    let config = SamplerConfig {
        interval,
        resources,
    };
    match Sampler::start(
        config,
        gpu,
        origin,
        readings.clone(),
        timeline.clone(),
        Some(uses),
    ) {
        Ok(sampler) => {
            sampler.wait_first_sample(FIRST_SAMPLE_WAIT);
            Some(sampler)
        }
        Err(e) => {
            tracing::warn!(target: PERF_TARGET, error = %e, "spanprof: could not start the sampler thread; resource figures are off");
            None
        }
    }
}

#[cfg(feature = "nvml")]
fn default_gpu_source() -> Result<Box<dyn GpuSource>, GpuError> {
    nvml::NvmlSource::new().map(|s| Box::new(s) as Box<dyn GpuSource>)
}

#[cfg(not(feature = "nvml"))]
fn default_gpu_source() -> Result<Box<dyn GpuSource>, GpuError> {
    Err(GpuError::unavailable(
        "spanprof was built without its `nvml` feature",
    ))
}

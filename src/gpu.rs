//! GPU readings: the [`GpuSource`] interface the sampler thread reads devices through, its
//! [`GpuError`], the NVML backend ([`NvmlSource`], feature `nvml`), and [`ScriptedSource`] for
//! tests and demos.
//!
//! Pass a source to [`Builder::with_gpu_source`](crate::Builder::with_gpu_source); without one,
//! the `full` preset reads NVML.

pub use crate::profile::{GpuDevice, GpuSample};
pub use crate::samplers::gpu::{GpuError, GpuSource, ScriptedSource};
#[cfg(feature = "nvml")]
pub use crate::samplers::nvml::NvmlSource;

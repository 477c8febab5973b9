//! GPU sampling interface.
//!
//! Placeholder: a verbatim copy of the interface from the `gpu` branch, so that the sampler
//! thread compiles against it. That branch's `gpu.rs` (with its docs) replaces this file at merge.
#![allow(missing_docs)]

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GpuDevice {
    pub index: u32,
    pub name: String,
    pub uuid: Option<String>,
    pub memory_total_bytes: Option<u64>,
    pub power_limit_mw: Option<u32>,
}
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GpuSample {
    pub utilization_pct: Option<u32>,
    pub memory_used_bytes: Option<u64>,
    pub power_mw: Option<u32>,
    pub energy_mj: Option<u64>,
    pub temperature_c: Option<u32>,
    pub sm_clock_mhz: Option<u32>,
    pub process_memory_bytes: Option<u64>,
}
pub trait GpuSource: Send + 'static {
    fn backend(&self) -> &'static str;
    fn devices(&mut self) -> Result<Vec<GpuDevice>, String>;
    fn sample(&mut self, index: u32) -> GpuSample;
}

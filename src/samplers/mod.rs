//! Resource samplers: readings taken off the hot path, by a background thread.

pub(crate) mod gpu;
pub(crate) mod nvml;

//! The GPU reading interface every backend implements, and a scripted backend for tests and
//! demos.

use std::collections::HashMap;

use crate::profile::{GpuDevice, GpuSample};

/// A source of GPU readings: NVML ([`NvmlSource`](crate::gpu::NvmlSource)) or a script
/// ([`ScriptedSource`]).
///
/// spanprof calls it from its sampler thread only, never on the hot path.
pub trait GpuSource: Send + 'static {
    /// Short backend name for reports (`"nvml"`, `"scripted"`).
    fn backend(&self) -> &'static str;
    /// The devices, discovered once. `Err(reason)` = no GPU available (the reason is shown in
    /// the report).
    fn devices(&mut self) -> Result<Vec<GpuDevice>, String>;
    /// A fresh reading of device `index`. Must not panic; failing calls give `None` fields.
    fn sample(&mut self, index: u32) -> GpuSample;
}

/// A [`GpuSource`] that returns what it is given: for tests and demos, and to run GPU reports
/// on machines without a GPU.
///
/// Each device plays its own list of samples in order, one per [`GpuSource::sample`] call; the
/// last sample repeats. A device without samples reads as [`GpuSample::default`] (nothing
/// available).
///
/// ```
/// use spanprof::gpu::{GpuDevice, GpuSample, GpuSource, ScriptedSource};
///
/// let device = GpuDevice {
///     index: 0,
///     name: "Scripted GPU".to_string(),
///     uuid: None,
///     memory_total_bytes: Some(16 << 30),
///     power_limit_mw: Some(300_000),
/// };
/// let busy = GpuSample { utilization_pct: Some(90), power_mw: Some(250_000), ..GpuSample::default() };
/// let idle = GpuSample { utilization_pct: Some(0), power_mw: Some(60_000), ..GpuSample::default() };
/// let mut source = ScriptedSource::new(vec![device.clone()]).with_samples(0, vec![busy, idle]);
///
/// assert_eq!(source.devices(), Ok(vec![device]));
/// assert_eq!(source.sample(0), busy);
/// assert_eq!(source.sample(0), idle);
/// assert_eq!(source.sample(0), idle); // the last one repeats
/// ```
#[derive(Debug, Clone)]
pub struct ScriptedSource {
    devices: Result<Vec<GpuDevice>, String>,
    scripts: HashMap<u32, Script>,
}

#[derive(Debug, Clone)]
struct Script {
    samples: Vec<GpuSample>,
    next: usize,
}

impl ScriptedSource {
    /// A source with these devices. With no devices, [`GpuSource::devices`] reports that no GPU
    /// is available.
    pub fn new(devices: Vec<GpuDevice>) -> Self {
        let devices = if devices.is_empty() {
            Err("the scripted source has no devices".to_string())
        } else {
            Ok(devices)
        };
        Self {
            devices,
            scripts: HashMap::new(),
        }
    }

    /// A source that has no GPU, for this reason (as NVML without a driver would be).
    pub fn unavailable(reason: impl Into<String>) -> Self {
        Self {
            devices: Err(reason.into()),
            scripts: HashMap::new(),
        }
    }

    /// The samples device `index` returns, in order; the last one repeats. Replaces any earlier
    /// script for that device.
    #[must_use]
    pub fn with_samples(mut self, index: u32, samples: Vec<GpuSample>) -> Self {
        self.scripts.insert(index, Script { samples, next: 0 });
        self
    }
}

impl GpuSource for ScriptedSource {
    fn backend(&self) -> &'static str {
        "scripted"
    }

    fn devices(&mut self) -> Result<Vec<GpuDevice>, String> {
        self.devices.clone()
    }

    fn sample(&mut self, index: u32) -> GpuSample {
        let Some(script) = self.scripts.get_mut(&index) else {
            return GpuSample::default();
        };
        let Some(last) = script.samples.len().checked_sub(1) else {
            return GpuSample::default();
        };
        let sample = script.samples[script.next.min(last)];
        script.next = script.next.saturating_add(1).min(last);
        sample
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(index: u32) -> GpuDevice {
        GpuDevice {
            index,
            name: format!("GPU {index}"),
            uuid: Some(format!("GPU-{index}")),
            memory_total_bytes: Some(80 << 30),
            power_limit_mw: Some(700_000),
        }
    }

    fn util(pct: u32) -> GpuSample {
        GpuSample {
            utilization_pct: Some(pct),
            ..GpuSample::default()
        }
    }

    #[test]
    fn scripted_plays_samples_in_order_and_repeats_the_last() {
        let mut s = ScriptedSource::new(vec![device(0), device(3)])
            .with_samples(0, vec![util(10), util(20), util(30)])
            .with_samples(3, vec![util(99)]);
        assert_eq!(s.backend(), "scripted");
        assert_eq!(s.devices(), Ok(vec![device(0), device(3)]));
        let zero: Vec<_> = (0..5).map(|_| s.sample(0)).collect();
        assert_eq!(zero, vec![util(10), util(20), util(30), util(30), util(30)]);
        // Devices keep their own place.
        assert_eq!(s.sample(3), util(99));
        assert_eq!(s.sample(3), util(99));
        assert_eq!(s.sample(0), util(30));
    }

    #[test]
    fn scripted_without_samples_reads_nothing() {
        let mut s = ScriptedSource::new(vec![device(0)])
            .with_samples(1, vec![])
            .with_samples(2, vec![util(5)]);
        assert_eq!(s.sample(0), GpuSample::default());
        assert_eq!(s.sample(1), GpuSample::default());
        assert_eq!(s.sample(7), GpuSample::default());
        assert_eq!(s.sample(2), util(5));
    }

    #[test]
    fn scripted_replacing_a_script_restarts_it() {
        let mut s = ScriptedSource::new(vec![device(0)]).with_samples(0, vec![util(1), util(2)]);
        assert_eq!(s.sample(0), util(1));
        let mut s = s.with_samples(0, vec![util(7), util(8)]);
        assert_eq!(s.sample(0), util(7));
        assert_eq!(s.sample(0), util(8));
    }

    #[test]
    fn scripted_unavailable_and_empty_report_a_reason() {
        let mut s = ScriptedSource::unavailable("no driver");
        assert_eq!(s.devices(), Err("no driver".to_string()));
        assert_eq!(s.sample(0), GpuSample::default());
        let mut s = ScriptedSource::new(vec![]);
        assert_eq!(
            s.devices(),
            Err("the scripted source has no devices".to_string())
        );
    }

    #[test]
    fn gpu_device_round_trips_through_json() {
        let d = device(2);
        let json = serde_json::to_string(&d).unwrap();
        assert_eq!(
            json,
            r#"{"index":2,"name":"GPU 2","uuid":"GPU-2","memory_total_bytes":85899345920,"power_limit_mw":700000}"#
        );
        assert_eq!(serde_json::from_str::<GpuDevice>(&json).unwrap(), d);
    }
}

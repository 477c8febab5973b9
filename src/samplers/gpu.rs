//! The GPU reading interface every backend implements, a scripted backend for tests and demos,
//! and energy integration for devices without an energy counter.

use std::collections::HashMap;

/// A device found by a [`GpuSource`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GpuDevice {
    /// The backend's index of the device (NVML's index: the order of PCI bus IDs, which is not
    /// always CUDA's order). [`GpuSource::sample`] takes this index.
    pub index: u32,
    /// The product name, e.g. `"NVIDIA H100 80GB HBM3"` (`"unknown"` when the backend cannot
    /// tell).
    pub name: String,
    /// The globally unique identifier, e.g. `"GPU-3b5c…"`, where available.
    pub uuid: Option<String>,
    /// Installed device memory in bytes, where available.
    pub memory_total_bytes: Option<u64>,
    /// The power management limit in milliwatts, where available.
    pub power_limit_mw: Option<u32>,
}

/// One reading of one device. `None` = this reading is not available (the call failed or the
/// backend lacks it).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GpuSample {
    /// Percent of the last sample period (1/6 s to 1 s, device dependent) during which one or
    /// more kernels ran.
    pub utilization_pct: Option<u32>,
    /// Device memory in use by all processes, in bytes.
    pub memory_used_bytes: Option<u64>,
    /// Power draw of the board in milliwatts.
    pub power_mw: Option<u32>,
    /// The device's cumulative total-energy counter in millijoules (it counts from driver load,
    /// so only differences are meaningful).
    pub energy_mj: Option<u64>,
    /// Core temperature in °C.
    pub temperature_c: Option<u32>,
    /// Current streaming multiprocessor clock in MHz.
    pub sm_clock_mhz: Option<u32>,
    /// This process's device memory in bytes, where the backend offers it.
    pub process_memory_bytes: Option<u64>,
}

/// A source of GPU readings: NVML ([`NvmlSource`](crate::NvmlSource)) or a script
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
/// use spanprof::{GpuDevice, GpuSample, GpuSource, ScriptedSource};
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

/// Turns power readings into a cumulative energy total, for devices whose energy counter is
/// missing (NVML's `total_energy_consumption` needs Volta or newer).
///
/// Trapezoid rule between consecutive readings, kept exactly in milliwatt-nanoseconds, so
/// frequent readings lose nothing to rounding.
#[derive(Debug, Clone, Default)]
// UNUSED: read by the sampler thread, which lands in a later change of the same issue.
#[allow(dead_code)]
pub(crate) struct EnergyIntegrator {
    /// Time (ns) and power (mW) of the latest reading.
    last: Option<(u64, u32)>,
    /// Twice the energy so far, in milliwatt-nanoseconds (1 mJ = 10⁹ mW·ns).
    twice_mw_ns: u128,
}

// UNUSED: see the struct.
#[allow(dead_code)]
impl EnergyIntegrator {
    /// Twice 10⁹: mW·ns per mJ, times the trapezoid's 2.
    const TWICE_MW_NS_PER_MJ: u128 = 2_000_000_000;

    /// Adds the reading `power_mw` taken at `t_ns` (any monotonic clock, in ns) and returns the
    /// energy in millijoules since the first reading. Time going backwards adds nothing.
    pub(crate) fn update(&mut self, t_ns: u64, power_mw: u32) -> u64 {
        let t = match self.last {
            Some((t0, p0)) => {
                let dt = u128::from(t_ns.saturating_sub(t0));
                self.twice_mw_ns = self
                    .twice_mw_ns
                    .saturating_add((u128::from(p0) + u128::from(power_mw)) * dt);
                t0.max(t_ns)
            }
            None => t_ns,
        };
        self.last = Some((t, power_mw));
        self.total_mj()
    }

    /// Energy in millijoules since the first reading.
    pub(crate) fn total_mj(&self) -> u64 {
        u64::try_from(self.twice_mw_ns / Self::TWICE_MW_NS_PER_MJ).unwrap_or(u64::MAX)
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

    #[test]
    fn energy_trapezoid_exact() {
        let mut e = EnergyIntegrator::default();
        // The first reading starts the count.
        assert_eq!(e.update(5_000_000_000, 100_000), 0);
        // 100 W for 1 s = 100 J.
        assert_eq!(e.update(6_000_000_000, 100_000), 100_000);
        // 100 W → 200 W over 0.5 s: mean 150 W × 0.5 s = 75 J.
        assert_eq!(e.update(6_500_000_000, 200_000), 175_000);
        // Zero power adds the falling half: (200 + 0) / 2 W × 2 s = 200 J.
        assert_eq!(e.update(8_500_000_000, 0), 375_000);
        assert_eq!(e.total_mj(), 375_000);
    }

    #[test]
    fn energy_small_steps_lose_nothing_to_rounding() {
        let mut e = EnergyIntegrator::default();
        // 1 mW for 1 s in 1 ms steps: 1 mJ, although each step is 0.001 mJ.
        for i in 0..=1000u64 {
            let total = e.update(i * 1_000_000, 1);
            assert_eq!(total, u64::from(i == 1000));
        }
        // 4 mW for 1 ns, a million times: 0.004 mJ, so still 1 mJ in total; then 4 mW for
        // 249 ms less 1 ns: 1.999999996 mJ; then 1 ns more: 2 mJ exactly.
        let t0 = 1000 * 1_000_000;
        e.update(t0, 4);
        for i in 1..=1_000_000u64 {
            e.update(t0 + i, 4);
        }
        assert_eq!(e.total_mj(), 1);
        let t1 = t0 + 1_000_000 + 248_999_999;
        assert_eq!(e.update(t1, 4), 1);
        assert_eq!(e.update(t1 + 1, 4), 2);
    }

    #[test]
    fn energy_ignores_time_going_backwards() {
        let mut e = EnergyIntegrator::default();
        e.update(2_000_000_000, 1_000);
        assert_eq!(e.update(3_000_000_000, 1_000), 1_000);
        // Backwards: nothing added, and the next interval starts at the latest time seen.
        assert_eq!(e.update(1_000_000_000, 3_000), 1_000);
        assert_eq!(e.update(4_000_000_000, 3_000), 4_000);
    }

    #[test]
    fn energy_extremes_do_not_overflow() {
        let mut e = EnergyIntegrator::default();
        e.update(0, u32::MAX);
        let total = e.update(u64::MAX, u32::MAX);
        // u32::MAX mW × u64::MAX ns / 10⁹
        let expected = u128::from(u32::MAX) * u128::from(u64::MAX) / 1_000_000_000;
        assert_eq!(total, u64::try_from(expected).unwrap_or(u64::MAX));
    }
}

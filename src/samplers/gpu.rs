//! The GPU reading interface every backend implements, its error type, and a scripted backend
//! for tests and demos.

use std::collections::HashMap;

#[cfg(feature = "nvml")]
use nvml_wrapper::error::NvmlError;

use crate::profile::{GpuDevice, GpuSample};

/// A source of GPU readings: NVML ([`NvmlSource`](crate::gpu::NvmlSource)), a script
/// ([`ScriptedSource`]), or one of your own.
///
/// spanprof calls it from its sampler thread only, never on the hot path: [`devices`] once,
/// when the sampler starts, then [`sample`] for each device at every sampling interval. Its
/// code runs with no `tracing` subscriber, so its own spans and events never reach the profile.
///
/// [`devices`]: GpuSource::devices
/// [`sample`]: GpuSource::sample
///
/// A source of your own, for a device NVML does not read (here, a made-up accelerator):
///
/// ```
/// use spanprof::gpu::{GpuDevice, GpuError, GpuSample, GpuSource};
///
/// struct MyAccelerator {
///     /// `None` when the machine has no such device.
///     handle: Option<u32>,
/// }
///
/// impl GpuSource for MyAccelerator {
///     fn backend(&self) -> &'static str {
///         "my-accelerator"
///     }
///
///     fn devices(&mut self) -> Result<Vec<GpuDevice>, GpuError> {
///         // The report shows the reason: "GPU: not available (no accelerator found)".
///         let _handle = self.handle.ok_or_else(|| GpuError::unavailable("no accelerator found"))?;
///         Ok(vec![GpuDevice {
///             index: 0,
///             name: "My Accelerator".to_string(),
///             uuid: None,
///             memory_total_bytes: Some(32 << 30),
///             power_limit_mw: None,
///         }])
///     }
///
///     fn sample(&mut self, _index: u32) -> GpuSample {
///         // Readings the device does not give stay `None`.
///         GpuSample { utilization_pct: Some(75), ..GpuSample::default() }
///     }
/// }
///
/// let mut absent = MyAccelerator { handle: None };
/// assert_eq!(absent.devices().unwrap_err().to_string(), "no accelerator found");
/// let mut present = MyAccelerator { handle: Some(7) };
/// assert_eq!(present.devices().unwrap()[0].name, "My Accelerator");
///
/// let layer = spanprof::ProfileLayer::builder()
///     .with_preset(spanprof::Preset::Full)
///     .with_gpu_source(present);
/// # drop(layer);
/// ```
///
/// A source written when this method returned `Result<_, String>` migrates with
/// `.map_err(Into::into)` (or `?` on a `String` error): [`GpuError`] converts from `String` and
/// `&str`.
pub trait GpuSource: Send + 'static {
    /// Short backend name for reports (`"nvml"`, `"scripted"`).
    fn backend(&self) -> &'static str;
    /// The devices, discovered once. An error means no GPU is available: its `Display` text is
    /// shown in the report as the reason (an empty list reads as "no device found by"
    /// [`backend`](GpuSource::backend)).
    ///
    /// # Errors
    /// Why no GPU can be read: [`GpuError::unavailable`] with a reason of the source's own.
    fn devices(&mut self) -> Result<Vec<GpuDevice>, GpuError>;
    /// A fresh reading of device `index`. Must not panic; failing calls give `None` fields.
    fn sample(&mut self, index: u32) -> GpuSample;
}

/// Why a [`GpuSource`] cannot read any GPU.
///
/// Not an error for the profiler: it goes on without GPU readings, and the report and the
/// JSON profile (`resources.gpu_unavailable`) give this error's `Display` text as the reason.
/// NVML's variants keep NVML's error as their [`source`](std::error::Error::source); their text
/// already includes it.
///
/// A source of your own gives its reason with [`GpuError::unavailable`], or converts a `String`
/// or `&str` with `Into`.
///
/// ```
/// use spanprof::gpu::GpuError;
///
/// let e = GpuError::unavailable("no device");
/// assert_eq!(e.to_string(), "no device");
/// let from_string: GpuError = String::from("driver too old").into();
/// assert!(matches!(from_string, GpuError::Unavailable { reason } if reason == "driver too old"));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GpuError {
    /// No GPU can be read, for this reason: a source's own words, e.g. `"NVML reports no GPU"`.
    #[error("{reason}")]
    Unavailable {
        /// Why, as the report shows it.
        reason: String,
    },
    /// NVML could not be loaded or initialised (feature `nvml`): no library, not a usable one,
    /// no driver, no permission, or a library and driver of different versions. The text names
    /// the library, e.g. `NVIDIA driver not loaded (NVML: libnvidia-ml.so.1)`.
    #[cfg(feature = "nvml")]
    #[error("{}", super::nvml::init_message(.library, .source))]
    NvmlInit {
        /// The library as it was named: a path, or a name for the library search path.
        library: String,
        /// NVML's error.
        #[source]
        source: NvmlError,
    },
    /// NVML was initialised but could not count the GPUs (feature `nvml`).
    #[cfg(feature = "nvml")]
    #[error("NVML could not count the GPUs: {source}")]
    NvmlDeviceCount {
        /// NVML's error.
        #[source]
        source: NvmlError,
    },
    /// NVML counts GPUs, but none of them could be opened (feature `nvml`); the error is the
    /// last device's.
    #[cfg(feature = "nvml")]
    #[error("NVML reports {count} GPU(s), but none could be opened: {source}")]
    NvmlNoDeviceOpened {
        /// How many GPUs NVML counts.
        count: u32,
        /// NVML's error for the last device tried.
        #[source]
        source: NvmlError,
    },
}

impl GpuError {
    /// No GPU can be read, for this reason (shown in the report as it is given).
    pub fn unavailable(reason: impl Into<String>) -> Self {
        Self::Unavailable {
            reason: reason.into(),
        }
    }
}

impl From<String> for GpuError {
    /// [`GpuError::Unavailable`] with this reason.
    fn from(reason: String) -> Self {
        Self::unavailable(reason)
    }
}

impl From<&str> for GpuError {
    /// [`GpuError::Unavailable`] with this reason.
    fn from(reason: &str) -> Self {
        Self::unavailable(reason)
    }
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
/// assert_eq!(source.devices().unwrap(), vec![device]);
/// assert_eq!(source.sample(0), busy);
/// assert_eq!(source.sample(0), idle);
/// assert_eq!(source.sample(0), idle); // the last one repeats
/// ```
#[derive(Debug, Clone)]
pub struct ScriptedSource {
    /// The devices, or the reason there are none (kept as text, so that the source stays
    /// `Clone`).
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

    fn devices(&mut self) -> Result<Vec<GpuDevice>, GpuError> {
        self.devices.clone().map_err(GpuError::from)
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
        assert_eq!(s.devices().unwrap(), vec![device(0), device(3)]);
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
        assert!(matches!(
            s.devices(),
            Err(GpuError::Unavailable { reason }) if reason == "no driver"
        ));
        assert_eq!(s.sample(0), GpuSample::default());
        let mut s = ScriptedSource::new(vec![]);
        assert_eq!(
            s.devices().unwrap_err().to_string(),
            "the scripted source has no devices"
        );
    }

    #[test]
    fn gpu_error_from_words() {
        for e in [
            GpuError::unavailable("no device"),
            GpuError::from("no device"),
            GpuError::from("no device".to_string()),
        ] {
            assert_eq!(e.to_string(), "no device");
            assert!(std::error::Error::source(&e).is_none());
            assert!(matches!(e, GpuError::Unavailable { ref reason } if reason == "no device"));
        }
        // `?` on a `String` error, as a source that returned `Result<_, String>` did.
        fn old_style() -> Result<Vec<GpuDevice>, String> {
            Err("old reason".to_string())
        }
        fn migrated() -> Result<Vec<GpuDevice>, GpuError> {
            old_style().map_err(Into::into)
        }
        assert_eq!(migrated().unwrap_err().to_string(), "old reason");
        // Usable with `?` into boxed errors and `anyhow`-style wrappers.
        fn assert_send_sync<T: std::error::Error + Send + Sync + 'static>() {}
        assert_send_sync::<GpuError>();
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

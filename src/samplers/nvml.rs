//! The NVML backend: NVIDIA GPUs through `nvml-wrapper`, which loads `libnvidia-ml.so.1` at
//! run time (nothing NVIDIA is needed to build, and a machine without it reads as "no GPU").

use std::ffi::OsStr;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};

use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::ProcessInfo;
use nvml_wrapper::{Device, Nvml};

use super::gpu::{GpuError, GpuSource};
use crate::profile::{GpuDevice, GpuSample};

/// The library [`NvmlSource::new`] loads.
const DEFAULT_LIBRARY: &str = "libnvidia-ml.so.1";

/// A [`GpuSource`] reading NVIDIA GPUs through NVML.
///
/// NVML is loaded at run time: [`NvmlSource::new`] fails with a [`GpuError`] (no library, no
/// driver) on machines without an NVIDIA driver, and the program goes on without GPU readings.
///
/// Every NVML function is looked up on its own: a function the installed library lacks (an old
/// driver, a GPU that does not support it) makes only its own reading `None`. The readings and
/// the NVML functions behind them:
///
/// | reading | NVML function |
/// |---|---|
/// | [`utilization_pct`](GpuSample::utilization_pct) | `nvmlDeviceGetUtilizationRates` (`.gpu`) |
/// | [`memory_used_bytes`](GpuSample::memory_used_bytes) | `nvmlDeviceGetMemoryInfo_v2` (`.used`) |
/// | [`power_mw`](GpuSample::power_mw) | `nvmlDeviceGetPowerUsage` |
/// | [`energy_mj`](GpuSample::energy_mj) | `nvmlDeviceGetTotalEnergyConsumption` (Volta and newer) |
/// | [`temperature_c`](GpuSample::temperature_c) | `nvmlDeviceGetTemperature` (GPU sensor) |
/// | [`sm_clock_mhz`](GpuSample::sm_clock_mhz) | `nvmlDeviceGetClockInfo` (SM clock) |
/// | [`process_memory_bytes`](GpuSample::process_memory_bytes) | `nvmlDeviceGetComputeRunningProcesses_v3`, `nvmlDeviceGetGraphicsRunningProcesses_v3` |
///
/// `process_memory_bytes` is this process's entry (matched by [`std::process::id`]): the
/// larger of its compute and graphics totals, since a process with both contexts is listed in
/// both with the same memory. It is `None` when the process is not listed: it has no GPU
/// context yet, NVML does not know the amount (Windows WDDM), or it runs in a container whose
/// PID namespace hides its host PID from NVML.
pub struct NvmlSource {
    /// `None` only while dropping.
    nvml: Option<Nvml>,
    library: String,
    pid: u32,
}

impl NvmlSource {
    /// Loads NVML from `libnvidia-ml.so.1` (`nvml.dll` on Windows) through the usual library
    /// search path, and initialises it.
    ///
    /// # Errors
    /// [`GpuError::NvmlInit`] when NVML cannot be used, with NVML's error as its source; its
    /// text is the reason, e.g. `NVML library not found (libnvidia-ml.so.1): …` or
    /// `NVIDIA driver not loaded (NVML: libnvidia-ml.so.1)`.
    pub fn new() -> Result<Self, GpuError> {
        let library = if cfg!(windows) {
            "nvml.dll"
        } else {
            DEFAULT_LIBRARY
        };
        Self::init(library, Nvml::init())
    }

    /// Loads NVML from this library file (a path or a name for the library search path) and
    /// initialises it.
    ///
    /// # Errors
    /// As [`NvmlSource::new`].
    pub fn with_library(path: impl AsRef<OsStr>) -> Result<Self, GpuError> {
        let path = path.as_ref();
        Self::init(
            &path.to_string_lossy(),
            Nvml::builder().lib_path(path).init(),
        )
    }

    fn init(library: &str, nvml: Result<Nvml, NvmlError>) -> Result<Self, GpuError> {
        match nvml {
            Ok(nvml) => Ok(Self {
                nvml: Some(nvml),
                library: library.to_string(),
                pid: std::process::id(),
            }),
            Err(source) => Err(GpuError::NvmlInit {
                library: library.to_string(),
                source,
            }),
        }
    }

    /// The library this source loaded, as it was named.
    pub fn library(&self) -> &str {
        &self.library
    }
}

/// Why NVML could not be initialised from `library`, for the report: the text of
/// [`GpuError::NvmlInit`].
pub(super) fn init_message(library: &str, e: &NvmlError) -> String {
    match e {
        NvmlError::LibloadingError(cause) => {
            let cause = cause.to_string();
            if cause.contains("No such file") {
                format!("NVML library not found ({library}): {cause}")
            } else {
                format!("NVML library could not be loaded ({library}): {cause}")
            }
        }
        NvmlError::FailedToLoadSymbol(cause) => {
            format!("{library} is not a usable NVML library: {cause}")
        }
        NvmlError::DriverNotLoaded => format!("NVIDIA driver not loaded (NVML: {library})"),
        NvmlError::NoPermission => {
            format!("no permission to talk to the NVIDIA driver (NVML: {library})")
        }
        NvmlError::LibRmVersionMismatch => {
            format!("NVML ({library}) does not match the loaded NVIDIA driver version")
        }
        other => format!("NVML initialisation failed ({library}): {other}"),
    }
}

impl GpuSource for NvmlSource {
    fn backend(&self) -> &'static str {
        "nvml"
    }

    fn devices(&mut self) -> Result<Vec<GpuDevice>, GpuError> {
        let Some(nvml) = &self.nvml else {
            return Err(GpuError::unavailable("NVML was shut down"));
        };
        let count = nvml
            .device_count()
            .map_err(|source| GpuError::NvmlDeviceCount { source })?;
        if count == 0 {
            return Err(GpuError::unavailable("NVML reports no GPU"));
        }
        let mut devices = Vec::new();
        let mut last_error = None;
        for index in 0..count {
            let device = match nvml.device_by_index(index) {
                Ok(device) => device,
                Err(e) => {
                    last_error = Some(e);
                    continue;
                }
            };
            devices.push(GpuDevice {
                index,
                name: device.name().unwrap_or_else(|_| "unknown".to_string()),
                uuid: device.uuid().ok(),
                memory_total_bytes: device.memory_info().ok().map(|m| m.total),
                power_limit_mw: device.power_management_limit().ok(),
            });
        }
        match (devices.is_empty(), last_error) {
            (true, Some(source)) => Err(GpuError::NvmlNoDeviceOpened { count, source }),
            _ => Ok(devices),
        }
    }

    fn sample(&mut self, index: u32) -> GpuSample {
        let Some(nvml) = &self.nvml else {
            return GpuSample::default();
        };
        // Handles borrow `Nvml`, so they are looked up per sample: a table lookup in NVML once
        // `devices` has opened the device.
        let Ok(device) = nvml.device_by_index(index) else {
            return GpuSample::default();
        };
        GpuSample {
            utilization_pct: device.utilization_rates().ok().map(|u| u.gpu),
            memory_used_bytes: device.memory_info().ok().map(|m| m.used),
            power_mw: device.power_usage().ok(),
            energy_mj: device.total_energy_consumption().ok(),
            temperature_c: device.temperature(TemperatureSensor::Gpu).ok(),
            sm_clock_mhz: device.clock_info(Clock::SM).ok(),
            process_memory_bytes: process_memory(&device, self.pid),
        }
    }
}

/// This process's device memory: the larger of its compute and graphics totals.
fn process_memory(device: &Device<'_>, pid: u32) -> Option<u64> {
    let total = |list: Result<Vec<ProcessInfo>, NvmlError>| -> Option<u64> {
        list.ok()?
            .iter()
            .filter(|p| p.pid == pid)
            .filter_map(|p| match p.used_gpu_memory {
                UsedGpuMemory::Used(bytes) => Some(bytes),
                UsedGpuMemory::Unavailable => None,
            })
            .reduce(u64::saturating_add)
    };
    let compute = total(device.running_compute_processes());
    let graphics = total(device.running_graphics_processes());
    compute.max(graphics)
}

impl fmt::Debug for NvmlSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NvmlSource")
            .field("library", &self.library)
            .field("initialised", &self.nvml.is_some())
            .finish()
    }
}

impl Drop for NvmlSource {
    fn drop(&mut self) {
        if let Some(nvml) = self.nvml.take() {
            // nvml-wrapper's own `Drop` calls `nvmlShutdown` through a lookup that panics when
            // the library lacks the symbol (never a real NVML, but a stub or a broken install).
            // Keep that panic out of the user's program.
            let _ = catch_unwind(AssertUnwindSafe(move || drop(nvml)));
        }
    }
}

//! What spanprof records: the [`Preset`], the [`Resources`] switch set, and the atomic word the
//! layer reads them from at run time.

use std::fmt;
use std::ops::{BitAnd, BitOr};
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

use crate::env::{ENV_PRESET, ENV_SAMPLERS};
use crate::error::{Error, Result};

/// How much spanprof records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Preset {
    /// Record nothing: every callback returns at once.
    Off,
    /// Span timing: busy, self and wall time histograms, throughput and errors.
    #[default]
    Basic,
    /// `basic`, plus memory, heap and thread CPU time per span ([`Resources::DETAILED`]).
    Detailed,
    /// `detailed`, plus GPU and energy ([`Resources::ALL`]).
    Full,
}

impl Preset {
    pub(crate) const ACCEPTED: &'static str =
        "one of off, basic, detailed, full (case-insensitive)";

    /// The preset's name as `SPANPROF` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Preset::Off => "off",
            Preset::Basic => "basic",
            Preset::Detailed => "detailed",
            Preset::Full => "full",
        }
    }

    /// Whether the preset records anything.
    pub(crate) fn records(self) -> bool {
        self != Preset::Off
    }

    /// The resources the preset records: none at `off` and `basic`, [`Resources::DETAILED`] at
    /// `detailed`, [`Resources::ALL`] at `full`.
    pub fn resources(self) -> Resources {
        match self {
            Preset::Off | Preset::Basic => Resources::NONE,
            Preset::Detailed => Resources::DETAILED,
            Preset::Full => Resources::ALL,
        }
    }
}

impl std::str::FromStr for Preset {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "off" => Ok(Preset::Off),
            "basic" => Ok(Preset::Basic),
            "detailed" => Ok(Preset::Detailed),
            "full" => Ok(Preset::Full),
            _ => Err(Error::InvalidEnv {
                var: ENV_PRESET,
                value: s.to_string(),
                expected: Self::ACCEPTED,
            }),
        }
    }
}

/// Which resources spanprof records per span besides time: a set of switches.
///
/// The preset chooses ([`Preset::resources`]); [`Builder::with_resources`] or
/// `SPANPROF_SAMPLERS` switch each alone, and [`ProfileHandle::set_resources`] steps them down
/// while the program runs.
///
/// ```
/// use spanprof::Resources;
/// let r = Resources::MEMORY | Resources::CPU;
/// assert!(r.contains(Resources::CPU) && !r.contains(Resources::GPU));
/// assert_eq!(r.to_string(), "memory,cpu");
/// assert_eq!("cpu, Memory".parse::<Resources>()?, r);
/// # Ok::<(), spanprof::Error>(())
/// ```
///
/// [`Builder::with_resources`]: crate::Builder::with_resources
/// [`ProfileHandle::set_resources`]: crate::ProfileHandle::set_resources
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Resources(u8);

impl Resources {
    /// Nothing besides time.
    pub const NONE: Resources = Resources(0);
    /// RSS and peak RSS per span instance (sampled), and in the timeline.
    pub const MEMORY: Resources = Resources(1);
    /// Bytes and allocations per entry, with [`CountingAlloc`](crate::CountingAlloc) as the
    /// global allocator.
    pub const HEAP: Resources = Resources(2);
    /// Thread CPU time per entry (a system call at enter and exit), process CPU % in the
    /// timeline.
    pub const CPU: Resources = Resources(4);
    /// GPU memory, utilisation and energy per span instance (NVML).
    pub const GPU: Resources = Resources(8);
    /// CPU package energy per span instance (RAPL, where readable).
    pub const ENERGY: Resources = Resources(16);
    /// What the `detailed` preset records: memory, heap and CPU.
    pub const DETAILED: Resources = Resources(1 | 2 | 4);
    /// Every resource.
    pub const ALL: Resources = Resources(31);

    const NAMES: [(Resources, &'static str); 5] = [
        (Self::MEMORY, "memory"),
        (Self::HEAP, "heap"),
        (Self::CPU, "cpu"),
        (Self::GPU, "gpu"),
        (Self::ENERGY, "energy"),
    ];

    pub(crate) const ACCEPTED: &'static str =
        "a comma-separated list of memory, heap, cpu, gpu, energy (or none, or all)";

    /// Whether every switch of `other` is on in `self`.
    pub const fn contains(self, other: Resources) -> bool {
        self.0 & other.0 == other.0
    }

    /// `self` with the switches of `other` off.
    pub const fn without(self, other: Resources) -> Resources {
        Resources(self.0 & !other.0)
    }

    /// Whether no switch is on.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The names of the switches that are on, as `SPANPROF_SAMPLERS` spells them.
    pub fn names(self) -> Vec<&'static str> {
        Self::NAMES
            .iter()
            .filter(|(r, _)| self.contains(*r))
            .map(|(_, name)| *name)
            .collect()
    }

    /// Figures taken when a span opens and closes (RSS, GPU, energy).
    #[inline(always)]
    pub(crate) const fn instances(self) -> bool {
        self.0 & (Self::MEMORY.0 | Self::GPU.0 | Self::ENERGY.0) != 0
    }

    /// Figures taken when a span is entered and exited (CPU time, heap).
    #[inline(always)]
    pub(crate) const fn entries(self) -> bool {
        self.0 & (Self::CPU.0 | Self::HEAP.0) != 0
    }

    const fn bits(self) -> u32 {
        self.0 as u32
    }

    /// The set as one byte (for an atomic).
    pub(crate) const fn to_byte(self) -> u8 {
        self.0
    }

    /// A set from [`Resources::to_byte`] (unknown bits dropped).
    pub(crate) const fn from_byte(byte: u8) -> Resources {
        Resources(byte & Self::ALL.0)
    }
}

impl BitOr for Resources {
    type Output = Resources;
    fn bitor(self, rhs: Resources) -> Resources {
        Resources(self.0 | rhs.0)
    }
}

impl BitAnd for Resources {
    type Output = Resources;
    fn bitand(self, rhs: Resources) -> Resources {
        Resources(self.0 & rhs.0)
    }
}

impl fmt::Display for Resources {
    /// The names of the switches that are on, comma-separated; `none` when empty.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("none");
        }
        f.write_str(&self.names().join(","))
    }
}

impl fmt::Debug for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Resources({self})")
    }
}

impl std::str::FromStr for Resources {
    type Err = Error;

    /// Parses `SPANPROF_SAMPLERS` syntax: names separated by commas, `none`, or `all`; at least
    /// one name (an empty value is an error).
    fn from_str(value: &str) -> Result<Self> {
        let invalid = || Error::InvalidEnv {
            var: ENV_SAMPLERS,
            value: value.to_string(),
            expected: Self::ACCEPTED,
        };
        let mut out = Resources::NONE;
        let mut words = value.split(',').map(str::trim).filter(|w| !w.is_empty());
        let Some(first) = words.next() else {
            // An empty list is a mistake, not `none`: say `none`.
            return Err(invalid());
        };
        for word in std::iter::once(first).chain(words) {
            let word = word.to_ascii_lowercase();
            match word.as_str() {
                "none" => {}
                "all" => out = Resources::ALL,
                _ => match Self::NAMES.iter().find(|(_, n)| *n == word) {
                    Some((r, _)) => out = out | *r,
                    None => return Err(invalid()),
                },
            }
        }
        Ok(out)
    }
}

/// The switches the layer reads on every span: whether it records new spans, and which
/// resources. One atomic word, so they can change while the program runs.
#[derive(Debug)]
pub(crate) struct Switches(AtomicU32);

/// One reading of the [`Switches`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Switched(u32);

const RECORDING: u32 = 1 << 8;
/// Some span name is timed on the GPU (feature `cuda`): entries take the marked path, which
/// asks whether theirs is. Never set without a CUDA driver and a chosen name, so that the
/// common path is the same as without the feature.
const GPU_TIMED: u32 = 1 << 9;

impl Switches {
    pub(crate) fn new(recording: bool, resources: Resources) -> Self {
        Self(AtomicU32::new(Self::word(recording, resources)))
    }

    fn word(recording: bool, resources: Resources) -> u32 {
        resources.bits() | if recording { RECORDING } else { 0 }
    }

    #[inline(always)]
    pub(crate) fn get(&self) -> Switched {
        Switched(self.0.load(Relaxed))
    }

    /// Stops recording new spans (spans already open are still completed).
    pub(crate) fn stop_recording(&self) {
        self.0.fetch_and(!RECORDING, Relaxed);
    }

    /// Makes every entry ask whether its span is timed on the GPU (feature `cuda`; for good).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn set_gpu_timed(&self) {
        self.0.fetch_or(GPU_TIMED, Relaxed);
    }

    /// Sets the resources; returns the previous set.
    pub(crate) fn set_resources(&self, resources: Resources) -> Resources {
        let mask = Resources::ALL.bits();
        let old = self
            .0
            .fetch_update(Relaxed, Relaxed, |w| Some((w & !mask) | resources.bits()))
            // UNWRAP-free: the closure always returns `Some`.
            .unwrap_or_else(|w| w);
        Switched(old).resources()
    }
}

impl Switched {
    #[inline(always)]
    pub(crate) fn recording(self) -> bool {
        self.0 & RECORDING != 0
    }

    #[inline(always)]
    pub(crate) fn resources(self) -> Resources {
        Resources((self.0 & Resources::ALL.bits()) as u8)
    }

    /// Whether an enter has work besides the clock: readings per entry
    /// ([`Resources::entries`]), or spans timed on the GPU. One test, as `entries` alone.
    #[inline(always)]
    pub(crate) fn entry_work(self) -> bool {
        self.0 & (Resources::CPU.bits() | Resources::HEAP.bits() | GPU_TIMED) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_choose_resources() {
        assert_eq!(Preset::Basic.resources(), Resources::NONE);
        let d = Preset::Detailed.resources();
        assert!(d.contains(Resources::MEMORY | Resources::HEAP | Resources::CPU));
        assert!(!d.contains(Resources::GPU) && !d.contains(Resources::ENERGY));
        assert_eq!(Preset::Full.resources(), Resources::ALL);
        assert_eq!(
            Resources::ALL.names(),
            ["memory", "heap", "cpu", "gpu", "energy"]
        );
    }

    #[test]
    fn resources_parse_and_print() {
        assert_eq!("none".parse::<Resources>().unwrap(), Resources::NONE);
        assert_eq!("all".parse::<Resources>().unwrap(), Resources::ALL);
        assert_eq!(
            " GPU ,energy".parse::<Resources>().unwrap(),
            Resources::GPU | Resources::ENERGY
        );
        assert_eq!(Resources::NONE.to_string(), "none");
        assert_eq!(Resources::DETAILED.to_string(), "memory,heap,cpu");
        let e = "cpu,disk".parse::<Resources>().unwrap_err();
        assert!(e.to_string().contains("cpu,disk"), "{e}");
    }

    #[test]
    fn switches_change_at_run_time() {
        let s = Switches::new(true, Resources::DETAILED);
        assert!(s.get().recording());
        assert!(s.get().resources().entries() && s.get().resources().instances());
        assert_eq!(s.set_resources(Resources::MEMORY), Resources::DETAILED);
        assert!(!s.get().resources().entries() && s.get().resources().instances());
        s.stop_recording();
        assert!(!s.get().recording());
        assert_eq!(s.get().resources(), Resources::MEMORY);
    }
}

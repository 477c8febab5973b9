//! CPU package energy from Intel RAPL through the Linux powercap interface.
//!
//! Each CPU package has a directory `/sys/class/powercap/intel-rapl:N` whose `name` file says
//! `package-N`; its `energy_uj` counter counts microjoules and wraps at `max_energy_range_uj`
//! (typically every ten minutes to an hour of full load, so read it more often than that: the
//! sampler reads it every interval). Recent AMD CPUs appear under the same names. Sub-domains
//! (`intel-rapl:N:M`: cores, uncore, DRAM) are inside the package figure and are not added again,
//! and neither are `intel-rapl-mmio` duplicates or `psys`.
//!
//! Since Linux 5.10 `energy_uj` is readable by root only (CVE-2020-8694), so unprivileged
//! processes usually get [`Rapl::open`]'s `Err` with "Permission denied" in it: report it, don't
//! fail.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

#[cfg(unix)]
use std::os::unix::fs::FileExt;

/// Where the kernel exposes powercap zones.
pub const POWERCAP_ROOT: &str = "/sys/class/powercap";

/// Cumulative energy of the CPU packages, corrected for counter wraparound.
///
/// Each [`Rapl::read`] is one `pread` per package of a file kept open. Not measured on real
/// RAPL hardware here (the development VM has none); on a stand-in tree of regular files in the
/// temp directory a read costs ~0.85 µs per package (`benches/peers/benches/samplers.rs`), and
/// the kernel's RAPL read adds a model-specific-register read on the package (an
/// inter-processor call when issued from another package).
#[derive(Debug)]
pub struct Rapl {
    domains: Vec<Domain>,
    total_uj: u64,
}

#[derive(Debug)]
struct Domain {
    name: String,
    path: PathBuf,
    file: File,
    /// The counter wraps to 0 after this value (`None`: unknown, treat a decrease as a wrap
    /// from 0).
    max_range_uj: Option<u64>,
    last_uj: u64,
    /// This read's value, applied once every package was read.
    pending_uj: u64,
}

impl Rapl {
    /// Finds the package domains under [`POWERCAP_ROOT`] and reads each once.
    ///
    /// # Errors
    /// A reason to show in the report when there is no readable package domain: no powercap
    /// interface, no package domain, or (the common case) `energy_uj` not readable.
    pub fn open() -> Result<Self, String> {
        Self::open_at(Path::new(POWERCAP_ROOT))
    }

    /// As [`Rapl::open`], with another root (a container's mount of sysfs, or a test tree).
    ///
    /// # Errors
    /// As [`Rapl::open`].
    pub fn open_at(root: &Path) -> Result<Self, String> {
        let entries = std::fs::read_dir(root)
            .map_err(|e| format!("no RAPL powercap interface ({}: {e})", root.display()))?;
        let mut zones: Vec<(u32, PathBuf)> = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let n: u32 = name.strip_prefix("intel-rapl:")?.parse().ok()?;
                Some((n, e.path()))
            })
            .collect();
        zones.sort();
        let mut domains = Vec::new();
        for (_, dir) in zones {
            let Ok(name) = std::fs::read_to_string(dir.join("name")) else {
                continue;
            };
            let name = name.trim().to_string();
            if !name.starts_with("package") {
                continue;
            }
            let path = dir.join("energy_uj");
            let unreadable = |e: io::Error| format!("cannot read {}: {e}", path.display());
            let file = File::open(&path).map_err(unreadable)?;
            let last_uj = read_uj(&file).map_err(unreadable)?;
            let max_range_uj = std::fs::read_to_string(dir.join("max_energy_range_uj"))
                .ok()
                .and_then(|s| s.trim().parse().ok());
            domains.push(Domain {
                name,
                path: path.clone(),
                file,
                max_range_uj,
                last_uj,
                pending_uj: last_uj,
            });
        }
        if domains.is_empty() {
            return Err(format!("no RAPL package domain under {}", root.display()));
        }
        Ok(Self {
            domains,
            total_uj: 0,
        })
    }

    /// The package domains read, by name (`package-0`, …).
    pub fn domains(&self) -> Vec<&str> {
        self.domains.iter().map(|d| d.name.as_str()).collect()
    }

    /// Microjoules the packages consumed since [`Rapl::open`], summed over packages.
    ///
    /// `None` if a counter could not be read this time; the energy is not lost, the next
    /// successful read includes it (as long as no counter wrapped twice in between).
    pub fn read(&mut self) -> Option<u64> {
        for d in &mut self.domains {
            d.pending_uj = read_uj(&d.file).ok()?;
        }
        for d in &mut self.domains {
            let delta = wrapping_delta(d.last_uj, d.pending_uj, d.max_range_uj);
            d.last_uj = d.pending_uj;
            self.total_uj = self.total_uj.saturating_add(delta);
        }
        Some(self.total_uj)
    }

    /// The files read, for messages.
    pub fn paths(&self) -> Vec<&Path> {
        self.domains.iter().map(|d| d.path.as_path()).collect()
    }
}

/// The increase of a counter that wraps to 0 after `max`.
fn wrapping_delta(last: u64, now: u64, max: Option<u64>) -> u64 {
    if now >= last {
        now - last
    } else {
        match max {
            Some(max) if max >= last => (max - last).saturating_add(now),
            _ => now,
        }
    }
}

fn read_uj(file: &File) -> io::Result<u64> {
    let mut buf = [0u8; 32];
    #[cfg(unix)]
    let n = file.read_at(&mut buf, 0)?;
    #[cfg(not(unix))]
    let n = {
        use std::io::{Read, Seek};
        let mut f = file;
        f.seek(io::SeekFrom::Start(0))?;
        f.read(&mut buf)?
    };
    let text = std::str::from_utf8(buf.get(..n).unwrap_or(&[]))
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    text.trim()
        .parse()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone(root: &Path, dir: &str, name: &str, uj: u64, max: u64) {
        let d = root.join(dir);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("name"), format!("{name}\n")).unwrap();
        std::fs::write(d.join("energy_uj"), format!("{uj}\n")).unwrap();
        std::fs::write(d.join("max_energy_range_uj"), format!("{max}\n")).unwrap();
    }

    fn set(root: &Path, dir: &str, uj: u64) {
        std::fs::write(root.join(dir).join("energy_uj"), format!("{uj}\n")).unwrap();
    }

    fn tree(tag: &str) -> PathBuf {
        let root = std::env::temp_dir().join(format!("spanprof-rapl-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        root
    }

    #[test]
    fn delta_wraps() {
        assert_eq!(wrapping_delta(10, 25, Some(100)), 15);
        assert_eq!(wrapping_delta(90, 5, Some(100)), 15);
        assert_eq!(wrapping_delta(90, 5, None), 5);
        assert_eq!(wrapping_delta(7, 7, Some(100)), 0);
    }

    #[test]
    fn packages_only_summed_and_wrapped() {
        let root = tree("pk");
        zone(&root, "intel-rapl:0", "package-0", 1_000, 10_000);
        zone(&root, "intel-rapl:0:0", "core", 500, 10_000);
        zone(&root, "intel-rapl:1", "package-1", 9_000, 10_000);
        zone(&root, "intel-rapl:2", "psys", 5, 10_000);
        zone(&root, "intel-rapl-mmio:0", "package-0", 1_000, 10_000);
        let mut rapl = Rapl::open_at(&root).unwrap();
        assert_eq!(rapl.domains(), ["package-0", "package-1"]);
        assert_eq!(rapl.read(), Some(0));
        set(&root, "intel-rapl:0", 1_500);
        set(&root, "intel-rapl:0:0", 9_999);
        set(&root, "intel-rapl:1", 200); // wrapped: 1 000 to the top, then 200
        assert_eq!(rapl.read(), Some(500 + 1_200));
        set(&root, "intel-rapl:0", 1_600);
        assert_eq!(rapl.read(), Some(1_800));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn reasons() {
        let root = tree("none");
        let e = Rapl::open_at(&root.join("missing")).unwrap_err();
        assert!(e.contains("no RAPL powercap interface"), "{e}");
        let e = Rapl::open_at(&root).unwrap_err();
        assert!(e.contains("no RAPL package domain"), "{e}");
        zone(&root, "intel-rapl:0", "package-0", 1, 10);
        std::fs::remove_file(root.join("intel-rapl:0/energy_uj")).unwrap();
        let e = Rapl::open_at(&root).unwrap_err();
        assert!(e.contains("cannot read") && e.contains("energy_uj"), "{e}");
        std::fs::remove_dir_all(&root).unwrap();
    }
}

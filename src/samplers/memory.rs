//! Memory readers: resident set size now and at its peak.
//!
//! Linux (and Android) only; elsewhere every reader returns `None`.

#[cfg(any(target_os = "linux", target_os = "android"))]
use std::fs::File;
#[cfg(any(target_os = "linux", target_os = "android"))]
use std::os::unix::fs::FileExt;

/// The process's resident set size in bytes: resident pages (`/proc/self/statm`, second field)
/// times the page size. `None` where unsupported or unreadable.
///
/// Opens, reads and closes the file: ~6.5 µs per call on the development machine
/// (2-vCPU Firecracker VM, Linux 6.18; `benches/peers/benches/samplers.rs`). [`RssReader`] keeps
/// the file open and costs a third of that.
pub fn rss_bytes() -> Option<u64> {
    RssReader::open()?.read()
}

/// The process's peak resident set size in bytes (`getrusage(RUSAGE_SELF).ru_maxrss`, kept by
/// the kernel in KiB). `None` where unsupported.
///
/// The kernel updates its high-water mark from batched per-CPU counters, so right after a
/// growth it can be a little (observed: 250 KiB) below what [`rss_bytes`] reads; the sampler
/// publishes the larger of the two.
///
/// ~0.7–1.1 µs per call on the development machine (`benches/peers/benches/samplers.rs`).
pub fn peak_rss_bytes() -> Option<u64> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        super::cpu::rusage(libc::RUSAGE_SELF).map(|r| (r.ru_maxrss.max(0) as u64) * 1024)
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        None
    }
}

/// Reads the resident set size repeatedly through one open `/proc/self/statm` (one `pread` per
/// read, which makes the kernel regenerate the figures).
///
/// ~2 µs per read on the development machine (`benches/peers/benches/samplers.rs`).
#[derive(Debug)]
pub struct RssReader {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    file: File,
    #[cfg(any(target_os = "linux", target_os = "android"))]
    page_size: u64,
}

impl RssReader {
    /// Opens `/proc/self/statm`. `None` where unsupported or unreadable.
    pub fn open() -> Option<Self> {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            Some(Self {
                file: File::open("/proc/self/statm").ok()?,
                page_size: page_size()?,
            })
        }
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        {
            None
        }
    }

    /// The resident set size in bytes now; `None` if the read fails.
    pub fn read(&mut self) -> Option<u64> {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            // "size resident shared text lib data dt\n": seven decimal page counts.
            let mut buf = [0u8; 128];
            let n = self.file.read_at(&mut buf, 0).ok()?;
            let pages = parse_statm_resident(buf.get(..n)?)?;
            pages.checked_mul(self.page_size)
        }
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        {
            None
        }
    }
}

/// The second whitespace-separated field of `statm`.
#[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
fn parse_statm_resident(text: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(text).ok()?;
    text.split_ascii_whitespace().nth(1)?.parse().ok()
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn page_size() -> Option<u64> {
    // SAFETY: `sysconf` only reads a configuration value; `_SC_PAGESIZE` is always valid.
    #[allow(unsafe_code)]
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).ok().filter(|&s| s > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_statm() {
        assert_eq!(
            parse_statm_resident(b"12345 678 90 1 0 2000 0\n"),
            Some(678)
        );
        assert_eq!(parse_statm_resident(b"12345"), None);
        assert_eq!(parse_statm_resident(b""), None);
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn reader_matches_one_shot() {
        let mut r = RssReader::open().unwrap();
        let a = r.read().unwrap();
        let b = rss_bytes().unwrap();
        assert!(a > 0 && b > 0);
        // Same process, a moment apart: within 16 MiB of each other.
        assert!(a.abs_diff(b) < 16 << 20, "{a} vs {b}");
        assert!(peak_rss_bytes().unwrap() >= b.min(a) / 2);
    }
}

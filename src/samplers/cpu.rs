//! CPU time readers: the calling thread's CPU clock, its user/system split, and the process's.
//!
//! Linux (and Android) only; elsewhere [`thread_cpu_ns`] returns 0 and the others `None`
//! ([`SUPPORTED`] says which).
//!
//! Costs measured on the development machine (2-vCPU Firecracker VM, Linux 6.18, glibc 2.36,
//! `cargo bench --bench samplers`): see each function.

/// Whether this platform has the readers of this module (Linux and Android).
pub const SUPPORTED: bool = cfg!(any(target_os = "linux", target_os = "android"));

/// CPU time consumed by the calling thread, in nanoseconds (`CLOCK_THREAD_CPUTIME_ID`);
/// 0 where unsupported or if the clock fails.
///
/// Nanosecond resolution: the kernel accounts the running thread's time up to the call. This is
/// a real system call (the vDSO does not serve CPU-time clocks): it costs ~180 ns per call on
/// the development machine, where `Instant::now()` costs ~25 ns; see `benches/samplers.rs`.
/// spanprof reads it at span enter and exit at the `detailed` preset only.
#[inline]
pub fn thread_cpu_ns() -> u64 {
    imp::thread_cpu_ns()
}

/// User and system CPU time of the calling thread, in nanoseconds (`getrusage(RUSAGE_THREAD)`,
/// microsecond resolution). `None` where unsupported.
pub fn thread_user_sys_ns() -> Option<(u64, u64)> {
    imp::thread_user_sys_ns()
}

/// User and system CPU time of the whole process (every thread, including exited ones), in
/// nanoseconds (`getrusage(RUSAGE_SELF)`, microsecond resolution). `None` where unsupported.
pub fn process_cpu_ns() -> Option<(u64, u64)> {
    imp::process_cpu_ns()
}

#[cfg(any(target_os = "linux", target_os = "android"))]
mod imp {
    #[inline]
    pub(super) fn thread_cpu_ns() -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable `timespec` that outlives the call, and the clock id
        // is a constant the kernel accepts (it returns EINVAL otherwise, never UB).
        #[allow(unsafe_code)]
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        if rc != 0 {
            return 0;
        }
        (ts.tv_sec as u64)
            .wrapping_mul(1_000_000_000)
            .wrapping_add(ts.tv_nsec as u64)
    }

    pub(super) fn thread_user_sys_ns() -> Option<(u64, u64)> {
        rusage(libc::RUSAGE_THREAD).map(|r| user_sys(&r))
    }

    pub(super) fn process_cpu_ns() -> Option<(u64, u64)> {
        rusage(libc::RUSAGE_SELF).map(|r| user_sys(&r))
    }

    pub(crate) fn rusage(who: libc::c_int) -> Option<libc::rusage> {
        let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: `usage` points to writable memory of the right size and alignment for a
        // `rusage`; `who` is one of the RUSAGE_* constants.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::getrusage(who, usage.as_mut_ptr()) };
        if rc != 0 {
            return None;
        }
        // SAFETY: zero-initialised (all-zero is a valid `rusage`: plain integers) and filled in
        // by a successful `getrusage`.
        #[allow(unsafe_code)]
        Some(unsafe { usage.assume_init() })
    }

    fn timeval_ns(tv: &libc::timeval) -> u64 {
        (tv.tv_sec.max(0) as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(tv.tv_usec.max(0) as u64 * 1000)
    }

    fn user_sys(r: &libc::rusage) -> (u64, u64) {
        (timeval_ns(&r.ru_utime), timeval_ns(&r.ru_stime))
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
mod imp {
    #[inline]
    pub(super) fn thread_cpu_ns() -> u64 {
        0
    }

    pub(super) fn thread_user_sys_ns() -> Option<(u64, u64)> {
        None
    }

    pub(super) fn process_cpu_ns() -> Option<(u64, u64)> {
        None
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) use imp::rusage;

#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests {
    use super::*;

    #[test]
    fn thread_clock_is_monotonic_and_close_to_rusage() {
        let a = thread_cpu_ns();
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(20) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let b = thread_cpu_ns();
        assert!(b > a);
        let (u, s) = thread_user_sys_ns().unwrap();
        // getrusage's split is scaled from the same runtime, to microseconds.
        assert!(u + s <= b + 1_000_000_000, "{u} + {s} vs {b}");
        let (pu, ps) = process_cpu_ns().unwrap();
        assert!(pu + ps >= u + s - 10_000_000);
    }
}

//! CPU time readers: the calling thread's CPU clock, its user/system split, and the process's.
//!
//! Linux (and Android) only; elsewhere [`thread_cpu_ns`] returns 0 and the others `None`
//! ([`SUPPORTED`] says which).
//!
//! Costs per call measured on the development machine (2-vCPU Firecracker VM on AMD EPYC, Linux
//! 6.18, glibc 2.36; `cargo bench -p spanprof-peers --bench samplers`, where `Instant::now()`
//! costs 24 ns): see each function. System calls are expensive in this VM; expect less on
//! bare metal.

/// Whether this platform has the readers of this module (Linux and Android).
pub const SUPPORTED: bool = cfg!(any(target_os = "linux", target_os = "android"));

/// CPU time consumed by the calling thread, in nanoseconds (`CLOCK_THREAD_CPUTIME_ID`);
/// 0 where unsupported or if the clock fails.
///
/// Nanosecond resolution: the kernel accounts the running thread's time up to the call. This is
/// a real system call (the vDSO does not serve CPU-time clocks, and the kernel takes the run
/// queue lock to account the current slice): **~560 ns per call** on the development machine
/// (23× `Instant::now()`). spanprof reads it on the span hot path only at the `detailed` preset
/// and up.
#[inline]
pub fn thread_cpu_ns() -> u64 {
    imp::thread_cpu_ns()
}

/// User and system CPU time of the calling thread, in nanoseconds (`getrusage(RUSAGE_THREAD)`,
/// microsecond resolution). `None` where unsupported.
///
/// Cheaper than [`thread_cpu_ns`] (~350 ns) but less precise: it does not include the current
/// time slice, and the user/system split is estimated from tick samples.
pub fn thread_user_sys_ns() -> Option<(u64, u64)> {
    imp::thread_user_sys_ns()
}

/// User and system CPU time of the whole process (every thread, including exited ones), in
/// nanoseconds (`getrusage(RUSAGE_SELF)`, microsecond resolution). `None` where unsupported.
///
/// ~800 ns per call (it sums over the process's threads).
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
    fn readers_agree() {
        let a = thread_cpu_ns();
        let b = thread_cpu_ns();
        assert!(a > 0 && b >= a);
        let (u, s) = thread_user_sys_ns().unwrap();
        let (pu, ps) = process_cpu_ns().unwrap();
        let c = thread_cpu_ns();
        // getrusage leaves out the current slice: the precise clock is ahead, or within 10 ms.
        assert!(u + s <= c + 10_000_000, "{u} + {s} vs {c}");
        // The process has used at least what this thread has.
        assert!(pu + ps + 10_000_000 >= u + s, "{pu} + {ps} vs {u} + {s}");
    }
}

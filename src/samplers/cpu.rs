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

/// CPU time consumed by the calling thread, in nanoseconds; 0 where unsupported or if the clock
/// fails.
///
/// Read from a per-thread perf event counting the thread's task clock (`perf_event_open`,
/// `PERF_COUNT_SW_TASK_CLOCK`, opened on the thread's first call), or, where perf events are not
/// allowed (`perf_event_paranoid` above 2, a seccomp profile), past [`MAX_PERF_THREADS`] threads,
/// or with `SPANPROF_CPU_CLOCK=thread`, from `CLOCK_THREAD_CPUTIME_ID`. Both count the thread's
/// time on a CPU with nanosecond resolution, and both are a system call (~560–600 ns on the
/// development machine, 23× `Instant::now()`). The difference is where the scheduler switches
/// threads: reading `CLOCK_THREAD_CPUTIME_ID` brings the kernel's accounting of the running slice
/// up to date, which, once the slice is used up, switches the thread out right there, on the
/// way back from the call; on a shared CPU nearly every wait of the thread then lands inside
/// these reads (measured: 51% of the wall time of two processes on one CPU, against 0.5% with the
/// perf event, whose read leaves the scheduler alone). spanprof reads this clock on the span
/// path, at `detailed` and up: with the perf event, waits land where they would without it.
#[inline]
pub fn thread_cpu_ns() -> u64 {
    imp::thread_cpu_ns()
}

/// The most threads that hold a perf event for [`thread_cpu_ns`] at once (one file descriptor
/// each, closed when the thread exits); later threads read `CLOCK_THREAD_CPUTIME_ID`.
pub const MAX_PERF_THREADS: usize = 64;

/// The clock [`thread_cpu_ns`] reads: `"perf task-clock"` once a thread opened its perf event,
/// `"CLOCK_THREAD_CPUTIME_ID"` where perf events are not allowed or switched off; `None` before
/// the first read, or where there is no CPU clock.
pub fn thread_cpu_clock() -> Option<&'static str> {
    imp::thread_cpu_clock()
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
    use std::cell::Cell;
    use std::sync::atomic::{AtomicU32, AtomicU8, AtomicUsize, Ordering::Relaxed};
    use std::sync::Once;

    /// Whether perf events can be used: not known yet, yes, no (not allowed, or switched off).
    static PERF: AtomicU8 = AtomicU8::new(PERF_UNKNOWN);
    const PERF_UNKNOWN: u8 = 0;
    const PERF_YES: u8 = 1;
    const PERF_NO: u8 = 2;
    /// Threads holding a perf event now.
    static PERF_THREADS: AtomicUsize = AtomicUsize::new(0);
    /// Bumped in a forked child: an event inherited from the parent counts the parent's thread.
    static FORKS: AtomicU32 = AtomicU32::new(0);
    static AT_FORK: Once = Once::new();

    /// A thread's perf event: its file descriptor (`NONE`: not opened yet, `UNUSABLE`: this
    /// thread reads the other clock) and the fork generation it was opened in.
    struct ThreadEvent {
        fd: Cell<i32>,
        forks: Cell<u32>,
    }
    const NONE: i32 = -2;
    const UNUSABLE: i32 = -1;

    impl Drop for ThreadEvent {
        fn drop(&mut self) {
            close_event(self);
        }
    }

    thread_local! {
        static EVENT: ThreadEvent = const {
            ThreadEvent { fd: Cell::new(NONE), forks: Cell::new(0) }
        };
    }

    #[inline]
    pub(super) fn thread_cpu_ns() -> u64 {
        EVENT
            .try_with(|event| {
                let fd = event.fd.get();
                if fd >= 0 && event.forks.get() == FORKS.load(Relaxed) {
                    read_event(event, fd)
                } else if fd == UNUSABLE {
                    clock_ns()
                } else {
                    open_event(event)
                }
            })
            // The thread's state is gone (a span closed at thread exit).
            .unwrap_or_else(|_| clock_ns())
    }

    #[cfg(test)]
    pub(super) fn perf_threads() -> usize {
        PERF_THREADS.load(Relaxed)
    }

    pub(super) fn thread_cpu_clock() -> Option<&'static str> {
        match PERF.load(Relaxed) {
            PERF_YES => Some("perf task-clock"),
            PERF_NO => Some("CLOCK_THREAD_CPUTIME_ID"),
            _ => None,
        }
    }

    fn read_event(event: &ThreadEvent, fd: i32) -> u64 {
        let mut value = 0u64;
        // SAFETY: `value` is 8 writable bytes that outlive the call; a perf event's read
        // without a read format gives one u64.
        #[allow(unsafe_code)]
        let n = unsafe { libc::read(fd, (&mut value as *mut u64).cast(), 8) };
        if n == 8 {
            return value;
        }
        // The event failed: this thread reads the other clock from now on (its readings mix
        // two clocks once, at this switch).
        close_event(event);
        event.fd.set(UNUSABLE);
        clock_ns()
    }

    fn close_event(event: &ThreadEvent) {
        let fd = event.fd.get();
        if fd >= 0 {
            let inherited = event.forks.get() != FORKS.load(Relaxed);
            // SAFETY: `fd` is this thread's perf event (or this process's copy of its parent's).
            #[allow(unsafe_code)]
            unsafe {
                libc::close(fd)
            };
            if !inherited {
                PERF_THREADS.fetch_sub(1, Relaxed);
            }
        }
    }

    /// This thread's first read (or its first in a forked child): opens its perf event if perf
    /// events are allowed and there is room.
    #[cold]
    #[inline(never)]
    fn open_event(event: &ThreadEvent) -> u64 {
        close_event(event);
        event.fd.set(UNUSABLE);
        if PERF.load(Relaxed) == PERF_UNKNOWN {
            let off = std::env::var("SPANPROF_CPU_CLOCK").is_ok_and(|v| v.trim() == "thread");
            if off {
                PERF.store(PERF_NO, Relaxed);
            }
        }
        if PERF.load(Relaxed) == PERF_NO {
            return clock_ns();
        }
        if PERF_THREADS.fetch_add(1, Relaxed) >= super::MAX_PERF_THREADS {
            PERF_THREADS.fetch_sub(1, Relaxed);
            return clock_ns();
        }
        AT_FORK.call_once(|| {
            extern "C" fn forked() {
                FORKS.fetch_add(1, Relaxed);
                PERF_THREADS.store(0, Relaxed);
            }
            // SAFETY: registers a handler that only touches atomics (async-signal-safe).
            #[allow(unsafe_code)]
            unsafe {
                libc::pthread_atfork(None, None, Some(forked))
            };
        });
        match perf_event_open() {
            Some(fd) => {
                PERF.store(PERF_YES, Relaxed);
                event.fd.set(fd);
                event.forks.set(FORKS.load(Relaxed));
                read_event(event, fd)
            }
            None => {
                PERF_THREADS.fetch_sub(1, Relaxed);
                // Not allowed here (perf_event_paranoid, seccomp, no perf events) or out of
                // file descriptors: the other clock, for every thread when it is not allowed.
                if std::io::Error::last_os_error().raw_os_error() != Some(libc::EMFILE) {
                    PERF.compare_exchange(PERF_UNKNOWN, PERF_NO, Relaxed, Relaxed)
                        .ok();
                }
                clock_ns()
            }
        }
    }

    /// `perf_event_attr` up to `PERF_ATTR_SIZE_VER0` (64 bytes): type, size, config, then
    /// fields left zero (counting, not sampling; enabled; kernel time included).
    #[repr(C)]
    struct PerfEventAttr {
        kind: u32,
        size: u32,
        config: u64,
        zero: [u64; 6],
    }

    /// Opens a task-clock event counting the calling thread on any CPU.
    fn perf_event_open() -> Option<i32> {
        const PERF_TYPE_SOFTWARE: u32 = 1;
        const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;
        const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
        let attr = PerfEventAttr {
            kind: PERF_TYPE_SOFTWARE,
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            config: PERF_COUNT_SW_TASK_CLOCK,
            zero: [0; 6],
        };
        // SAFETY: `attr` is a valid `perf_event_attr` of the size it states (the kernel accepts
        // the version-0 size), alive for the call; pid 0 and cpu -1 count the calling thread.
        #[allow(unsafe_code)]
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                &attr as *const PerfEventAttr,
                0 as libc::pid_t,
                -1 as libc::c_int,
                -1 as libc::c_int,
                PERF_FLAG_FD_CLOEXEC,
            )
        };
        (fd >= 0).then_some(fd as i32)
    }

    /// `CLOCK_THREAD_CPUTIME_ID`.
    #[inline]
    pub(super) fn clock_ns() -> u64 {
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

    pub(super) fn thread_cpu_clock() -> Option<&'static str> {
        None
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

    /// `f`'s CPU time as [`thread_cpu_ns`] and as `CLOCK_THREAD_CPUTIME_ID` read it, ns.
    fn both_clocks(f: impl FnOnce()) -> (u64, u64) {
        let (a, b) = (thread_cpu_ns(), imp::clock_ns());
        f();
        (thread_cpu_ns() - a, imp::clock_ns() - b)
    }

    fn spin_cpu(ns: u64) {
        let start = imp::clock_ns();
        while imp::clock_ns() - start < ns {
            std::hint::black_box(0u64);
        }
    }

    #[test]
    fn the_perf_task_clock_counts_what_the_thread_clock_counts() {
        let (perf, clock) = both_clocks(|| spin_cpu(30_000_000));
        match thread_cpu_clock() {
            Some("perf task-clock") => {}
            other => eprintln!(
                "SKIPPED (part): perf events are not allowed here ({other:?}): both readings \
                 are CLOCK_THREAD_CPUTIME_ID"
            ),
        }
        assert!(clock >= 30_000_000, "{clock}");
        // The two clocks read at slightly different instants: 1 ms apart at most.
        assert!(
            perf.abs_diff(clock) < 1_000_000,
            "perf {perf} ns vs clock {clock} ns"
        );
        // Sleeping is not CPU time.
        let (perf, clock) =
            both_clocks(|| std::thread::sleep(std::time::Duration::from_millis(30)));
        assert!(perf < 5_000_000 && clock < 5_000_000, "{perf} {clock}");
    }

    #[test]
    fn perf_events_are_bounded_and_closed_when_their_threads_exit() {
        let threads = 2 * MAX_PERF_THREADS;
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(threads + 1));
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    let (perf, clock) = both_clocks(|| spin_cpu(1_000_000));
                    barrier.wait();
                    barrier.wait();
                    (perf, clock)
                })
            })
            .collect();
        barrier.wait();
        // Every thread is alive and has read its clock: no more events than the bound.
        let open = imp::perf_threads();
        assert!(open <= MAX_PERF_THREADS, "{open} events open");
        if thread_cpu_clock() == Some("perf task-clock") {
            assert!(open >= MAX_PERF_THREADS / 2, "{open} events open");
        }
        barrier.wait();
        for h in handles {
            // Threads past the bound read the other clock: every one measured its own work.
            let (perf, clock) = h.join().unwrap();
            assert!(
                perf >= 900_000 && perf.abs_diff(clock) < 1_000_000,
                "{perf} {clock}"
            );
        }
        // Their events are closed (other tests' threads may hold a few).
        let open = imp::perf_threads();
        assert!(open < MAX_PERF_THREADS / 4, "{open} events still open");
    }
}

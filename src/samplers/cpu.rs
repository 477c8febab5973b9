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
/// `PERF_COUNT_SW_TASK_CLOCK`, opened on the thread's first call, with `exclude_kernel` so that
/// a process without privileges may open it at `perf_event_paranoid` 2, the upstream default; it
/// still counts the thread's kernel time), or, where perf events are not allowed
/// (`perf_event_paranoid` above 2, a seccomp profile), past [`MAX_PERF_THREADS`] threads,
/// or with [`CpuClock::Thread`](crate::builder::CpuClock::Thread) (`SPANPROF_CPU_CLOCK=thread`),
/// from `CLOCK_THREAD_CPUTIME_ID`. Both count the thread's
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

/// Makes [`thread_cpu_ns`] read `CLOCK_THREAD_CPUTIME_ID` on every thread
/// ([`CpuClock::Thread`](crate::builder::CpuClock::Thread), chosen with the builder or
/// `SPANPROF_CPU_CLOCK`). The clock is the process's: once a thread has opened its perf event,
/// the choice is made and this does nothing.
pub(crate) fn use_thread_clock() {
    imp::use_thread_clock();
}

/// Whether [`thread_cpu_ns`] reads `CLOCK_THREAD_CPUTIME_ID`: a read updates the scheduler's
/// accounting, so a thread whose time slice is used up is switched out at the read (the perf
/// event's read leaves the scheduler alone).
pub(crate) fn reads_switch_threads_out() -> bool {
    thread_cpu_clock() == Some("CLOCK_THREAD_CPUTIME_ID")
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

    /// Every thread reads `CLOCK_THREAD_CPUTIME_ID` from now on, unless a thread opened its
    /// perf event already (the clock is the process's: the first choice stays).
    pub(super) fn use_thread_clock() {
        PERF.compare_exchange(PERF_UNKNOWN, PERF_NO, Relaxed, Relaxed)
            .ok();
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
    /// counting (no sample period, type or read format), the flags word, and fields left zero.
    #[repr(C)]
    struct PerfEventAttr {
        kind: u32,
        size: u32,
        config: u64,
        sample_period: u64,
        sample_type: u64,
        read_format: u64,
        /// The bit fields: `disabled` (bit 0), `inherit`, `pinned`, `exclusive`,
        /// `exclude_user` (bit 4), `exclude_kernel` (bit 5), `exclude_hv` (bit 6), …
        flags: u64,
        /// `wakeup_events`, `bp_type`, `config1`.
        rest: [u64; 2],
    }

    /// `perf_event_attr.exclude_kernel`: the event's samples leave kernel code out. A counting
    /// task-clock event counts the task's whole time on a CPU (user and kernel) either way,
    /// and a process without privileges may open it only with this bit set at
    /// `perf_event_paranoid` 2, the upstream kernel's default (Fedora, Arch, RHEL…).
    const EXCLUDE_KERNEL: u64 = 1 << 5;
    /// `perf_event_attr.exclude_hv` (the hypervisor), likewise.
    const EXCLUDE_HV: u64 = 1 << 6;

    /// Opens a task-clock event counting the calling thread on any CPU.
    fn perf_event_open() -> Option<i32> {
        perf_event_open_with(EXCLUDE_KERNEL | EXCLUDE_HV)
    }

    /// Opens a task-clock event with these attribute flags; `None` (and `errno` set) if refused.
    fn perf_event_open_with(flags: u64) -> Option<i32> {
        const PERF_TYPE_SOFTWARE: u32 = 1;
        const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;
        const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
        const _: () = assert!(std::mem::size_of::<PerfEventAttr>() == 64);
        let attr = PerfEventAttr {
            kind: PERF_TYPE_SOFTWARE,
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            config: PERF_COUNT_SW_TASK_CLOCK,
            sample_period: 0,
            sample_type: 0,
            read_format: 0,
            flags,
            rest: [0; 2],
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

    /// Whether this process may open the task-clock event with `exclude_kernel` and
    /// `exclude_hv` (what [`super::thread_cpu_ns`] opens), and with them left at 0 (what it
    /// opened before): `Err(errno)` where refused. Each event is closed at once.
    #[cfg(test)]
    pub(super) fn perf_event_allowed() -> [Result<(), i32>; 2] {
        [EXCLUDE_KERNEL | EXCLUDE_HV, 0].map(|flags| match perf_event_open_with(flags) {
            Some(fd) => {
                // SAFETY: `fd` was just opened here and is closed once.
                #[allow(unsafe_code)]
                unsafe {
                    libc::close(fd)
                };
                Ok(())
            }
            None => Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0)),
        })
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

    pub(super) fn use_thread_clock() {}

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

    /// Time the hypervisor took from this machine's virtual CPUs while `f` ran (all of them,
    /// `/proc/stat`'s steal, to its 10 ms ticks, plus one tick), ns. perf's task clock counts
    /// it in a thread's time, `CLOCK_THREAD_CPUTIME_ID` leaves it out: on a busy host the two
    /// part by that much.
    fn stolen_ns(f: impl FnOnce()) -> u64 {
        // SAFETY: sysconf has no preconditions.
        #[allow(unsafe_code)]
        let tick_ns = 1_000_000_000 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
        let steal_ticks = || -> u64 {
            let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
            stat.lines()
                .next()
                .and_then(|cpu| cpu.split_whitespace().nth(8))
                .and_then(|t| t.parse().ok())
                .unwrap_or(0)
        };
        let before = steal_ticks();
        f();
        (steal_ticks().saturating_sub(before) + 1) * tick_ns
    }

    fn spin_cpu(ns: u64) {
        let start = imp::clock_ns();
        while imp::clock_ns() - start < ns {
            std::hint::black_box(0u64);
        }
    }

    #[test]
    fn the_perf_task_clock_counts_what_the_thread_clock_counts() {
        let mut clocks = (0, 0);
        let stolen = stolen_ns(|| clocks = both_clocks(|| spin_cpu(30_000_000)));
        let (perf, clock) = clocks;
        match thread_cpu_clock() {
            Some("perf task-clock") => {}
            other => eprintln!(
                "SKIPPED (part): perf events are not allowed here ({other:?}): both readings \
                 are CLOCK_THREAD_CPUTIME_ID"
            ),
        }
        assert!(clock >= 30_000_000, "{clock}");
        // The two clocks read at slightly different instants: 1 ms apart at most, and the time
        // the host took from the machine meanwhile.
        assert!(
            perf.abs_diff(clock) < 1_000_000 + stolen,
            "perf {perf} ns vs clock {clock} ns (stolen {stolen} ns)"
        );
        // Sleeping is not CPU time.
        let (perf, clock) =
            both_clocks(|| std::thread::sleep(std::time::Duration::from_millis(30)));
        assert!(perf < 5_000_000 && clock < 5_000_000, "{perf} {clock}");
    }

    /// A loop that spends most of its time in the kernel (system calls), ~`ns` of CPU time;
    /// returns this thread's system time in it as `getrusage` splits it, ns.
    fn syscall_loop(ns: u64) -> u64 {
        use std::io::Write;
        let mut null = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .unwrap();
        let (_, sys0) = thread_user_sys_ns().unwrap();
        let start = imp::clock_ns();
        while imp::clock_ns() - start < ns {
            for _ in 0..200 {
                // SAFETY: getppid has no arguments and cannot fail.
                #[allow(unsafe_code)]
                std::hint::black_box(unsafe { libc::getppid() });
                null.write_all(&[0u8; 64]).unwrap();
            }
        }
        thread_user_sys_ns().unwrap().1 - sys0
    }

    /// The perf clock against `CLOCK_THREAD_CPUTIME_ID` over a loop of system calls: the event
    /// opened with `exclude_kernel` still counts the thread's kernel time. Returns the message.
    fn kernel_time_is_counted() -> String {
        let (mut sys, mut clocks) = (0, (0, 0));
        let stolen = stolen_ns(|| clocks = both_clocks(|| sys = syscall_loop(200_000_000)));
        let (perf, clock) = clocks;
        assert_eq!(thread_cpu_clock(), Some("perf task-clock"));
        // Most of the loop is in the kernel: without it the perf clock would read far less.
        assert!(sys * 4 >= clock, "system {sys} ns of {clock} ns");
        // The two clocks read at slightly different instants: 1% + 1 ms at most, and the time
        // the host took from the machine meanwhile.
        assert!(
            perf.abs_diff(clock) < clock / 100 + 1_000_000 + stolen,
            "perf {perf} ns vs clock {clock} ns (system {sys} ns, stolen {stolen} ns)"
        );
        format!("perf {perf} ns, CLOCK_THREAD_CPUTIME_ID {clock} ns, system {sys} ns")
    }

    #[test]
    fn the_perf_task_clock_counts_kernel_time() {
        if thread_cpu_clock().is_none() {
            thread_cpu_ns();
        }
        if thread_cpu_clock() != Some("perf task-clock") {
            eprintln!("SKIPPED: perf events are not allowed here: nothing to compare");
            return;
        }
        eprintln!("{}", kernel_time_is_counted());
    }

    fn paranoid() -> Option<i32> {
        std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Run as user `nobody` by [`a_process_without_privileges_gets_the_perf_clock`].
    #[test]
    #[ignore = "run without privileges by a_process_without_privileges_gets_the_perf_clock"]
    fn unprivileged_child() {
        // SAFETY: no arguments, cannot fail.
        #[allow(unsafe_code)]
        let uid = unsafe { libc::geteuid() };
        assert_ne!(uid, 0, "meant to run without privileges");
        let [new, old] = imp::perf_event_allowed();
        println!(
            "uid {uid}, perf_event_paranoid {:?}: with exclude_kernel {new:?}, without {old:?}",
            paranoid()
        );
        assert_eq!(new, Ok(()), "refused with exclude_kernel");
        if paranoid() >= Some(2) {
            assert_eq!(old, Err(libc::EACCES), "allowed without exclude_kernel");
        }
        println!("{}", kernel_time_is_counted());
    }

    #[test]
    fn a_process_without_privileges_gets_the_perf_clock() {
        // SAFETY: no arguments, cannot fail.
        #[allow(unsafe_code)]
        let root = unsafe { libc::geteuid() } == 0;
        let setpriv = std::path::Path::new("/usr/bin/setpriv");
        let skip = if !root {
            Some("not root: cannot drop privileges".to_string())
        } else if !setpriv.exists() {
            Some("/usr/bin/setpriv is not installed (util-linux)".to_string())
        } else if paranoid().is_none_or(|p| p > 2) {
            Some(format!(
                "perf_event_paranoid is {:?}: no perf events without privileges",
                paranoid()
            ))
        } else if imp::perf_event_allowed()[0].is_err() {
            Some("perf events are not allowed here, even to root".to_string())
        } else {
            None
        };
        if let Some(why) = skip {
            eprintln!("SKIPPED: {why}");
            return;
        }
        let out = std::process::Command::new(setpriv)
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(std::env::current_exe().unwrap())
            .args(["--exact", "samplers::cpu::tests::unprivileged_child"])
            .args(["--ignored", "--nocapture", "--test-threads=1"])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if matches!(out.status.code(), Some(126 | 127)) {
            eprintln!("SKIPPED: user nobody cannot run this test binary: {stderr}");
            return;
        }
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "{}\n{stdout}\n{stderr}",
            out.status
        );
        eprintln!(
            "{}",
            stdout
                .lines()
                .filter(|l| l.contains("uid ") || l.starts_with("perf "))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }

    #[test]
    fn perf_events_are_bounded_and_closed_when_their_threads_exit() {
        let threads = 2 * MAX_PERF_THREADS;
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(threads + 1));
        let mut handles = Vec::new();
        let stolen = stolen_ns(|| {
            handles = (0..threads)
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
        });
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
                perf >= 900_000 && perf.abs_diff(clock) < 1_000_000 + stolen,
                "{perf} {clock} (stolen {stolen})"
            );
        }
        // Their events are closed (other tests' threads may hold a few).
        let open = imp::perf_threads();
        assert!(open < MAX_PERF_THREADS / 4, "{open} events still open");
    }
}

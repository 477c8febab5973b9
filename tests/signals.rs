//! The signal handler (`install_signal_handler`, feature `signals`). The signal tests run this
//! binary again as a child process (the `child` test, selected by `SPANPROF_SIGNALS_CHILD`),
//! which sends itself signals. (The threads of a leaked guard: `tests/leaked_guard.rs`.)
//!
//! A test binary of its own (not a module of `tests/it/`): its tests act on signal dispositions
//! and spanprof's handler, one per process (in child processes of this binary).
#![cfg(unix)]

mod support;

#[cfg(feature = "signals")]
use std::path::{Path, PathBuf};
#[cfg(feature = "signals")]
use std::process::Output;
#[cfg(feature = "signals")]
use std::sync::atomic::{AtomicBool, Ordering};
#[cfg(feature = "signals")]
use std::time::{Duration, Instant};

#[cfg(feature = "signals")]
use spanprof::ProfileLayer;

/// How the parent starts the child: SIGINT ignored (as for a job started with `&` from a
/// non-interactive shell script) or every signal at its default action.
#[cfg(feature = "signals")]
#[derive(Clone, Copy)]
enum Start {
    SigintIgnored,
    Default,
}

/// Runs the `child` test in a new process of this binary, in `mode`, writing into `out`.
#[cfg(feature = "signals")]
fn run_child(mode: &str, start: Start, out: &Path) -> Output {
    use std::os::unix::process::CommandExt;
    let mut command = support::child_test(module_path!(), "child");
    command
        .env("SPANPROF_SIGNALS_CHILD", mode)
        .env("SPANPROF_SIGNALS_OUT", out);
    // SAFETY: between fork and exec, only `signal`, which is async-signal-safe. The
    // dispositions are set either way, so that the test does not depend on what the test
    // runner itself was started with.
    unsafe {
        command.pre_exec(move || {
            let int = match start {
                Start::SigintIgnored => libc::SIG_IGN,
                Start::Default => libc::SIG_DFL,
            };
            libc::signal(libc::SIGINT, int);
            libc::signal(libc::SIGTERM, libc::SIG_DFL);
            libc::signal(libc::SIGHUP, libc::SIG_DFL);
            Ok(())
        });
    }
    let output = command.output().unwrap();
    support::assert_ran_one_test(&output);
    output
}

#[cfg(feature = "signals")]
fn disposition(signal: libc::c_int) -> libc::sighandler_t {
    // SAFETY: a null new action only reads the current one into `old`.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        assert_eq!(libc::sigaction(signal, std::ptr::null(), &mut old), 0);
        old.sa_sigaction
    }
}

#[cfg(feature = "signals")]
fn send_self(signal: libc::c_int) {
    // SAFETY: `kill` of this process.
    assert_eq!(unsafe { libc::kill(libc::getpid(), signal) }, 0);
}

/// The child: runs only when a test below starts this binary with `SPANPROF_SIGNALS_CHILD`
/// set. It installs the handler, records `work` spans, and sends itself the signals its mode
/// names; spanprof's handler ends it. Exit status 3: nothing ended it.
#[cfg(feature = "signals")]
#[test]
fn child() {
    let Ok(mode) = std::env::var("SPANPROF_SIGNALS_CHILD") else {
        return;
    };
    let out = PathBuf::from(std::env::var_os("SPANPROF_SIGNALS_OUT").expect("output dir"));
    let mut builder = ProfileLayer::builder().with_output_dir(out.clone());
    if mode == "term-twice-stuck" {
        // An output that never finishes: only a second signal ends the process.
        builder = builder.with_output(Stuck, spanprof::output::Destination::Dir(out.clone()));
    }
    let (dispatch, guard) = support::install(builder);
    let ignored_at_start = disposition(libc::SIGINT) == libc::SIG_IGN;
    // Never an error for an ignored signal: the program must start.
    guard.handle().install_signal_handler().unwrap();
    // A second installation is refused, in words that name the handler and why.
    let again = guard.handle().install_signal_handler().unwrap_err();
    assert!(
        matches!(&again, spanprof::Error::SignalHandler { source }
            if source.kind() == std::io::ErrorKind::AlreadyExists),
        "{again:?}"
    );
    let text = again.to_string();
    assert!(
        text.starts_with("installing the signal handler: SIGINT already has a handler"),
        "{text}"
    );
    if ignored_at_start {
        assert_eq!(
            disposition(libc::SIGINT),
            libc::SIG_IGN,
            "an ignored SIGINT must stay ignored"
        );
    }
    assert_ne!(disposition(libc::SIGTERM), libc::SIG_DFL);
    let signals: &[libc::c_int] = match mode.as_str() {
        "int-then-term" => &[libc::SIGINT, libc::SIGTERM],
        "term" => &[libc::SIGTERM],
        "term-twice-stuck" => &[libc::SIGTERM, libc::SIGTERM],
        "hup" => &[libc::SIGHUP],
        other => panic!("unknown child mode {other}"),
    };
    let start = Instant::now();
    tracing::dispatcher::with_default(&dispatch, || {
        for round in 0u64.. {
            let _s = tracing::info_span!("work", round).entered();
            std::thread::sleep(Duration::from_millis(1));
            if let Some(&signal) = usize::try_from(round / 20)
                .ok()
                .filter(|_| round % 20 == 19)
                .and_then(|i| signals.get(i))
            {
                if mode == "term-twice-stuck" && round > 20 {
                    // The second signal only once finishing is stuck in `Stuck`, its temporary
                    // file open.
                    while !STUCK.load(Ordering::SeqCst) && start.elapsed() < Duration::from_secs(20)
                    {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                send_self(signal);
            }
            if start.elapsed() > Duration::from_secs(20) {
                break;
            }
        }
    });
    eprintln!("no signal ended the process");
    std::process::exit(3);
}

/// An output whose render never returns (a stuck disk or network file system). It sets
/// [`STUCK`] once it is stuck, with its temporary file created and written into.
#[cfg(feature = "signals")]
#[derive(Debug)]
struct Stuck;

#[cfg(feature = "signals")]
static STUCK: AtomicBool = AtomicBool::new(false);

#[cfg(feature = "signals")]
impl spanprof::output::Format for Stuck {
    fn name(&self) -> &'static str {
        "stuck"
    }
    fn file_name(&self) -> &'static str {
        "stuck.txt"
    }
    fn action(&self) -> &'static str {
        "writing a stuck output"
    }
    fn render(&self, _: &spanprof::Snapshot, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        out.write_all(b"half of it")?;
        out.flush()?;
        STUCK.store(true, Ordering::SeqCst);
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
}

/// A second SIGTERM while the outputs are finished (one never finishes) ends the process at
/// once, 143, saying so; the first one alone would wait for ever. The stuck output's temporary
/// file (`.stuck.txt.<pid>.<n>.tmp`) is removed before the exit: nothing is left but the files
/// written completely (the profile, written before it).
#[cfg(feature = "signals")]
#[test]
fn a_second_signal_exits_at_once() {
    let out = support::temp_dir("signals-twice");
    let output = run_child("term-twice-stuck", Start::Default, &out);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(143), "child stderr:\n{stderr}");
    assert!(
        stderr.contains("terminated (SIGTERM) again; exiting without waiting for the outputs"),
        "{stderr}"
    );
    let names: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let left: Vec<_> = names
        .iter()
        .filter(|n| n.ends_with(".tmp") || n.ends_with(".partial"))
        .collect();
    assert!(left.is_empty(), "temporaries left: {left:?}\n{stderr}");
    assert!(!names.iter().any(|n| n == "stuck.txt"), "{names:?}");
    assert!(profile_calls(&out) >= 19, "{names:?}");
    let _ = std::fs::remove_dir_all(&out);
}

#[cfg(feature = "signals")]
fn profile_calls(out: &Path) -> u64 {
    let profile = spanprof::Snapshot::read_json(out.join(spanprof::output::PROFILE_FILE))
        .unwrap_or_else(|e| panic!("no profile in {}: {e}", out.display()));
    profile.span("work").map_or(0, |s| s.calls)
}

/// SIGTERM (kill, systemd, Kubernetes): the profile is written and the exit status is 143.
#[cfg(feature = "signals")]
#[test]
fn sigterm_writes_the_profile_and_exits_143() {
    let out = support::temp_dir("signals-term");
    let output = run_child("term", Start::Default, &out);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(143), "child stderr:\n{stderr}");
    assert!(stderr.contains("terminated (SIGTERM)"), "{stderr}");
    assert!(stderr.contains("profile in"), "{stderr}");
    assert!(profile_calls(&out) >= 19);
    let _ = std::fs::remove_dir_all(&out);
}

/// SIGHUP (the terminal closed): written too, exit status 129.
#[cfg(feature = "signals")]
#[test]
fn sighup_writes_the_profile_and_exits_129() {
    let out = support::temp_dir("signals-hup");
    let output = run_child("hup", Start::Default, &out);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(129), "child stderr:\n{stderr}");
    assert!(profile_calls(&out) >= 19);
    let _ = std::fs::remove_dir_all(&out);
}

/// A program started with SIGINT ignored (`prog &` in a shell script): installing succeeds,
/// SIGINT stays ignored (the child survives it), and SIGTERM still writes the profile.
#[cfg(feature = "signals")]
#[test]
fn sigint_ignored_at_start_stays_ignored_and_sigterm_is_still_handled() {
    let out = support::temp_dir("signals-ignored");
    let output = run_child("int-then-term", Start::SigintIgnored, &out);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(143), "child stderr:\n{stderr}");
    assert!(!stderr.contains("interrupted"), "{stderr}");
    // It ran on after the SIGINT: the spans of both rounds of 20 are in the profile.
    assert!(profile_calls(&out) >= 39, "{stderr}");
    let _ = std::fs::remove_dir_all(&out);
}

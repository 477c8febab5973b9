//! Helpers shared by the integration tests: the `it` binary declares it once
//! (`#[path = "../support/mod.rs"] mod support;` in `tests/it/main.rs`, `use crate::support;` in
//! its modules); a test binary of its own in `tests/` declares it with `mod support;`.
//!
//! Each test binary compiles this module on its own and uses only some of it, hence the
//! `dead_code` allowance.
#![allow(dead_code)]

pub mod events;
pub mod v2;

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use spanprof::clock::{Clock, MockClock};
use spanprof::profile::SpanStats;
use spanprof::{Builder, ProfileGuard, ReportTarget, Snapshot};
use tracing::Dispatch;
use tracing_subscriber::prelude::*;

/// The builder as every test wants it: environment ignored, no report when the guard drops.
pub fn quiet(builder: Builder) -> Builder {
    builder.with_env(false).with_report(ReportTarget::Off)
}

/// Builds the layer (environment ignored, no report) into a dispatcher of its own.
pub fn install(builder: Builder) -> (Dispatch, ProfileGuard) {
    let (layer, guard) = quiet(builder).build().unwrap();
    (
        Dispatch::new(tracing_subscriber::registry().with(layer)),
        guard,
    )
}

/// Like [`install`], with another layer between the registry and spanprof's (to watch what the
/// subscriber sees).
pub fn install_beside<L>(builder: Builder, other: L) -> (Dispatch, ProfileGuard)
where
    L: tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync + 'static,
{
    let (layer, guard) = quiet(builder).build().unwrap();
    (
        Dispatch::new(tracing_subscriber::registry().with(other).with(layer)),
        guard,
    )
}

/// Like [`install`], with the guard's Chrome trace layer (if the builder configured one) after
/// spanprof's.
#[cfg(feature = "chrome")]
pub fn install_chrome(builder: Builder) -> (Dispatch, ProfileGuard) {
    let (layer, guard) = quiet(builder).build().unwrap();
    let subscriber = tracing_subscriber::registry()
        .with(layer)
        .with(guard.chrome_layer());
    (Dispatch::new(subscriber), guard)
}

/// A default layer on a mock clock, which moves only when the returned [`MockClock`] moves it.
pub fn mock() -> (Dispatch, ProfileGuard, MockClock) {
    mock_with(spanprof::ProfileLayer::builder())
}

/// [`install`] with a mock clock.
pub fn mock_with(builder: Builder) -> (Dispatch, ProfileGuard, MockClock) {
    let (clock, mock) = Clock::mock();
    let (dispatch, guard) = install(builder.with_clock(clock));
    (dispatch, guard, mock)
}

/// Runs `work` under a layer of its own and returns the snapshot taken right after.
pub fn run_with(builder: Builder, work: impl FnOnce()) -> Snapshot {
    let (dispatch, guard) = install(builder);
    tracing::dispatcher::with_default(&dispatch, work);
    guard.snapshot()
}

/// Finishes the guard and returns the final snapshot (the sampler stopped).
pub fn finish_snapshot(guard: ProfileGuard) -> Snapshot {
    let handle = guard.handle();
    guard.finish().unwrap();
    handle.snapshot()
}

/// The statistics of a span name; panics listing the names the snapshot has.
pub fn span<'a>(snap: &'a Snapshot, name: &str) -> &'a SpanStats {
    snap.span(name).unwrap_or_else(|| {
        panic!(
            "span {name} missing from {:?}",
            snap.spans.iter().map(|s| &s.name).collect::<Vec<_>>()
        )
    })
}

/// A scripted GPU source of one device ("Scripted A100", 40 GiB, 400 W limit) that reads
/// `reading` every time.
pub fn scripted_gpu(reading: spanprof::gpu::GpuSample) -> spanprof::gpu::ScriptedSource {
    let device = spanprof::gpu::GpuDevice {
        index: 0,
        name: "Scripted A100".to_string(),
        uuid: None,
        memory_total_bytes: Some(40 << 30),
        power_limit_mw: Some(400_000),
    };
    spanprof::gpu::ScriptedSource::new(vec![device]).with_samples(0, vec![reading])
}

/// The final profile of one `kernel` span, sampled every 5 ms from [`scripted_gpu`] reading
/// `reading`, open until the sampler has integrated some GPU energy (bounded by a count of
/// polls, not a time).
pub fn gpu_kernel_profile(reading: spanprof::gpu::GpuSample) -> Snapshot {
    let (dispatch, guard) = install(
        spanprof::ProfileLayer::builder()
            .with_resources(spanprof::Resources::GPU)
            .with_sample_interval(std::time::Duration::from_millis(5))
            .with_gpu_source(scripted_gpu(reading)),
    );
    tracing::dispatcher::with_default(&dispatch, || {
        tracing::info_span!("kernel").in_scope(|| {
            for _ in 0..2000 {
                let snap = guard.snapshot();
                let last = snap.resources.and_then(|r| r.timeline.last().cloned());
                if last.is_some_and(|s| s.gpus.first().and_then(|g| g.energy_mj) > Some(0)) {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        })
    });
    finish_snapshot(guard)
}

/// A C compiler: `$CC`, else the first of cc, gcc, clang that runs.
fn c_compiler() -> Option<&'static str> {
    static CC: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    CC.get_or_init(|| {
        let from_env = std::env::var("CC").ok().filter(|cc| !cc.trim().is_empty());
        from_env
            .into_iter()
            .chain(["cc", "gcc", "clang"].map(String::from))
            .find(|cc| {
                std::process::Command::new(cc)
                    .arg("--version")
                    .output()
                    .is_ok_and(|o| o.status.success())
            })
    })
    .as_deref()
}

/// A fake shared library built from C by a test (the fake NVML, the fake CUDA driver), in a
/// directory of its own, removed on drop.
pub struct CLibrary {
    /// Its directory (where the fake reads its configuration file).
    pub dir: PathBuf,
    /// The library file.
    pub lib: PathBuf,
}

impl CLibrary {
    /// Compiles `source` (under `tests/`) with these `-D` defines into
    /// `<target tmp>/<kind>/<pid>-<test>/<file>`, or returns `None` (after saying so loudly)
    /// when there is no C compiler.
    pub fn build(
        kind: &str,
        test: &str,
        source: &str,
        file: &str,
        defines: &[&str],
    ) -> Option<CLibrary> {
        use std::io::Write as _;
        let Some(cc) = c_compiler() else {
            // Straight to stderr: the test harness captures `eprintln!` of passing tests.
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: no C compiler (tried $CC, cc, gcc, clang): \
                 cannot build the fake {file} for `{test}`"
            );
            return None;
        };
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(kind)
            .join(format!("{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let lib = dir.join(file);
        let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests")
            .join(source);
        let out = std::process::Command::new(cc)
            .args(["-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-o"])
            .arg(&lib)
            .arg(&source)
            .args(defines.iter().map(|d| format!("-D{d}")))
            .args(["-lpthread", "-ldl"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{cc} failed to build the fake {file}:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some(CLibrary { dir, lib })
    }

    /// Replaces the file `name` in the library's directory (the fake's configuration).
    pub fn write(&self, name: &str, text: &str) {
        std::fs::write(self.dir.join(name), text).unwrap();
    }
}

impl Drop for CLibrary {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A path in the system temp directory that no other test (of any binary, or any run still
/// going) uses: `spanprof-<name>-<pid>-<n>`. Whatever a crashed run left there is removed; the
/// path itself is not created.
pub fn temp_dir(name: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("spanprof-{name}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&path);
    let _ = std::fs::remove_file(&path);
    path
}

/// The name the test harness gives test `name` of the module `module` (its `module_path!()`):
/// without the crate's name, so `it::chrome` and `ctrlc_child` give `chrome::ctrlc_child`, and
/// a test at the root of a binary of its own keeps its bare name.
pub fn test_name(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_krate, path)) => format!("{path}::{name}"),
        None => name.to_string(),
    }
}

/// A command that runs only test `name` of the caller's module (`module_path!()`) in a new
/// process of this test binary, one thread, output not captured. Set the variables that make
/// the test do its part, then check with [`assert_ran_one_test`] that the filter matched it.
pub fn child_test(module: &str, name: &str) -> std::process::Command {
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    command.args([
        "--exact",
        &test_name(module, name),
        "--nocapture",
        "--test-threads=1",
    ]);
    command
}

/// Panics unless a child run of [`child_test`] ran exactly one test (the harness prints
/// `running 1 test` before it starts; `running 0 tests` when `--exact` matched nothing, and
/// then exits successfully having checked nothing).
pub fn assert_ran_one_test(output: &std::process::Output) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.lines().any(|l| l == "running 1 test"),
        "the child ran no test (or more than one): {}\nstdout:\n{stdout}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Headless Chromium at `chromium` with a fresh profile directory (`profile`) and the flags
/// this machine's closed network needs (no background connections, no updates, no sync).
pub fn headless_chromium(
    chromium: &std::path::Path,
    profile: &std::path::Path,
) -> std::process::Command {
    let mut command = std::process::Command::new(chromium);
    command
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.display()));
    command
}

//! The NVML backend against a fake `libnvidia-ml.so.1` (tests/fake_nvml/fake_nvml.c), built
//! here with the system C compiler: no GPU or driver needed.
//!
//! Each test compiles its own copy of the fake into its own directory and configures it with a
//! `fake_nvml.conf` file there, which the fake reads at every call. Copies loaded from different
//! paths share nothing, so the tests run in parallel without touching the environment.

use crate::support;

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use nvml_wrapper::error::NvmlError;
use spanprof::gpu::{GpuDevice, GpuError, GpuSample, GpuSource, NvmlSource};

/// One test's copy of the fake library, removed with its directory on drop.
struct Fake(support::CLibrary);

impl std::ops::Deref for Fake {
    type Target = support::CLibrary;
    fn deref(&self) -> &support::CLibrary {
        &self.0
    }
}

impl Fake {
    /// Compiles the fake with these `-D` defines into a directory of its own, or returns `None`
    /// (after saying so) when there is no C compiler.
    fn build(test: &str, defines: &[&str]) -> Option<Fake> {
        support::CLibrary::build(
            "nvml_fake",
            test,
            "fake_nvml/fake_nvml.c",
            "libnvidia-ml.so.1",
            defines,
        )
        .map(Fake)
    }

    /// Replaces the fake's configuration (`KEY=VALUE` lines), read at its next call.
    fn configure(&self, lines: &str) {
        self.write("fake_nvml.conf", lines);
    }

    fn source(&self) -> NvmlSource {
        NvmlSource::with_library(&self.lib)
            .unwrap_or_else(|e| panic!("the fake NVML did not initialise: {e}"))
    }
}

/// Builds the fake or returns from the test (skipped) without a C compiler.
macro_rules! fake {
    ($test:expr $(, $define:expr)*) => {
        match Fake::build($test, &[$($define),*]) {
            Some(fake) => fake,
            None => return,
        }
    };
}

#[test]
fn finds_the_configured_devices() {
    let fake = fake!("devices");
    fake.configure(
        "DEVICES=2\n\
         # comments and a FAKE_NVML_ prefix are allowed\n\
         FAKE_NVML_NAME_0=Fake H100\n\
         NAME_1=Fake A100\n\
         UUID_0=GPU-aaaa\n\
         MEM_TOTAL_0=85899345920\n\
         MEM_TOTAL_1=42949672960\n\
         POWER_LIMIT_MW=700000\n",
    );
    let mut source = fake.source();
    assert_eq!(source.backend(), "nvml");
    assert_eq!(source.library(), fake.lib.to_str().unwrap());
    assert_eq!(
        source.devices().unwrap(),
        vec![
            GpuDevice {
                index: 0,
                name: "Fake H100".into(),
                uuid: Some("GPU-aaaa".into()),
                memory_total_bytes: Some(85_899_345_920),
                power_limit_mw: Some(700_000),
            },
            GpuDevice {
                index: 1,
                name: "Fake A100".into(),
                uuid: Some("GPU-fake-1".into()),
                memory_total_bytes: Some(42_949_672_960),
                power_limit_mw: Some(700_000),
            },
        ]
    );
}

#[test]
fn samples_carry_the_configured_readings() {
    let fake = fake!("samples");
    fake.configure(
        "DEVICES=2\n\
         UTIL=37\n\
         MEM_USED=1234567890\n\
         POWER_MW=150000\n\
         TEMP_C=71\n\
         SM_CLOCK_MHZ=1980\n\
         COMPUTE_PROCS=self:1000000,1:999,self:24\n\
         GRAPHICS_PROCS=self:4096\n\
         UTIL_1=99\n\
         POWER_MW_1=400000\n\
         COMPUTE_PROCS_1=1:5\n\
         GRAPHICS_PROCS_1=\n",
    );
    let mut source = fake.source();
    assert_eq!(source.devices().unwrap().len(), 2);

    // Sampled on another thread, as spanprof's sampler thread does.
    let (source, zero, one, missing) = std::thread::spawn(move || {
        let (zero, one, missing) = (source.sample(0), source.sample(1), source.sample(2));
        (source, zero, one, missing)
    })
    .join()
    .unwrap();
    let mut source = source;
    let energy = zero.energy_mj.expect("energy counter");
    assert_eq!(
        zero,
        GpuSample {
            utilization_pct: Some(37),
            memory_used_bytes: Some(1_234_567_890),
            power_mw: Some(150_000),
            energy_mj: Some(energy),
            temperature_c: Some(71),
            sm_clock_mhz: Some(1980),
            // Its two compute entries summed; the larger of compute and graphics.
            process_memory_bytes: Some(1_000_024),
        }
    );
    assert_eq!(one.utilization_pct, Some(99));
    assert_eq!(one.power_mw, Some(400_000));
    assert_eq!(one.memory_used_bytes, Some(1_234_567_890));
    // This process is not listed on device 1.
    assert_eq!(one.process_memory_bytes, None);
    assert_eq!(missing, GpuSample::default(), "no device 2");

    // Values are read at each call.
    fake.configure(
        "UTIL=5\nPOWER_MW=60000\nCOMPUTE_PROCS=self:na\nGRAPHICS_PROCS=self:na,self:na\n",
    );
    let later = source.sample(0);
    assert_eq!(later.utilization_pct, Some(5));
    assert_eq!(later.power_mw, Some(60_000));
    assert_eq!(later.memory_used_bytes, Some(1_073_741_824), "the default");
    assert_eq!(later.process_memory_bytes, None, "listed, amount unknown");
    assert!(later.energy_mj >= Some(energy));
}

#[test]
fn energy_counter_grows_at_the_configured_power() {
    let fake = fake!("energy");
    fake.configure("POWER_MW=150000\n");
    let mut source = fake.source();
    // Each reading is bracketed by clock reads, so the bounds hold however late the thread
    // runs: the fake reads the same monotonic clock.
    let read = |source: &mut NvmlSource| {
        let before = Instant::now();
        let energy = source.sample(0).energy_mj.expect("energy counter");
        (before, energy, Instant::now())
    };
    let (a0, e0, b0) = read(&mut source);
    std::thread::sleep(Duration::from_millis(200));
    let (a1, e1, b1) = read(&mut source);
    let mj = |d: Duration| 150_000.0 * d.as_secs_f64(); // 150 W = 150 000 mW
    let (low, high) = (mj(a1 - b0) - 2.0, mj(b1 - a0) + 2.0); // ±1 mJ rounding per reading
    let got = (e1 - e0) as f64;
    assert!(
        low <= got && got <= high,
        "{got} mJ at 150 W in about {:?}: expected {low}..={high} mJ",
        a1 - a0
    );
    assert!(got >= 0.8 * mj(Duration::from_millis(200)), "{got} mJ");
}

#[test]
fn a_failing_function_degrades_only_its_reading() {
    let fake = fake!("fail");
    fake.configure("FAIL=power\nCOMPUTE_PROCS=self:7\n");
    let mut source = fake.source();
    assert!(source.devices().is_ok());
    let s = source.sample(0);
    assert_eq!(s.power_mw, None);
    assert!(
        s.utilization_pct.is_some()
            && s.memory_used_bytes.is_some()
            && s.energy_mj.is_some()
            && s.temperature_c.is_some()
            && s.sm_clock_mhz.is_some()
            && s.process_memory_bytes == Some(7),
        "{s:?}"
    );

    // Device discovery degrades the same way.
    fake.configure("FAIL=name,uuid,memory,power_limit,temperature,compute_procs\n");
    assert_eq!(
        source.devices().unwrap(),
        vec![GpuDevice {
            index: 0,
            name: "unknown".into(),
            uuid: None,
            memory_total_bytes: None,
            power_limit_mw: None,
        }]
    );
    let s = source.sample(0);
    assert_eq!((s.memory_used_bytes, s.temperature_c), (None, None));
    assert_eq!(s.power_mw, Some(100_000));

    // Everything failing gives an empty sample, not a panic.
    fake.configure("FAIL=all\n");
    assert_eq!(source.sample(0), GpuSample::default());
    // No device handle: the same.
    fake.configure("FAIL=handle\n");
    assert_eq!(source.sample(0), GpuSample::default());
    let e = source.devices().unwrap_err();
    assert!(
        matches!(e, GpuError::NvmlNoDeviceOpened { count: 1, .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("none could be opened"), "{e}");
    assert!(
        std::error::Error::source(&e).is_some(),
        "NVML's error is the cause"
    );
}

#[test]
fn a_library_without_the_energy_function_still_samples() {
    let fake = fake!("omit-energy", "OMIT_ENERGY");
    fake.configure("POWER_MW=123000\nUTIL=12\n");
    let mut source = fake.source();
    assert_eq!(source.devices().unwrap().len(), 1);
    let s = source.sample(0);
    assert_eq!(s.energy_mj, None);
    assert_eq!(s.power_mw, Some(123_000));
    assert_eq!(s.utilization_pct, Some(12));
    assert!(s.memory_used_bytes.is_some() && s.temperature_c.is_some() && s.sm_clock_mhz.is_some());
}

#[test]
fn no_gpu_is_an_error_with_a_reason() {
    let fake = fake!("no-gpu");
    fake.configure("DEVICES=0\n");
    let e = fake.source().devices().unwrap_err();
    assert!(matches!(e, GpuError::Unavailable { .. }), "{e:?}");
    assert_eq!(e.to_string(), "NVML reports no GPU");
    fake.configure("FAIL=count\n");
    let e = fake.source().devices().unwrap_err();
    assert!(matches!(e, GpuError::NvmlDeviceCount { .. }), "{e:?}");
    assert!(
        e.to_string().starts_with("NVML could not count the GPUs"),
        "{e}"
    );
}

#[test]
fn driver_not_loaded_is_an_error_with_a_reason() {
    let fake = fake!("no-driver");
    fake.configure("INIT_ERROR=9\n"); // NVML_ERROR_DRIVER_NOT_LOADED
    let e = NvmlSource::with_library(&fake.lib).unwrap_err();
    assert!(
        matches!(
            &e,
            GpuError::NvmlInit { library, source: NvmlError::DriverNotLoaded }
                if *library == fake.lib.to_string_lossy()
        ),
        "{e:?}"
    );
    let text = e.to_string();
    assert!(text.starts_with("NVIDIA driver not loaded"), "{text}");
    assert!(text.contains("libnvidia-ml.so.1"), "{text}");
}

#[test]
fn a_library_without_nvml_init_is_an_error() {
    let fake = fake!("omit-init", "OMIT_INIT");
    let e = NvmlSource::with_library(&fake.lib).unwrap_err();
    assert!(
        matches!(
            e,
            GpuError::NvmlInit {
                source: NvmlError::FailedToLoadSymbol(_),
                ..
            }
        ),
        "{e:?}"
    );
    let text = e.to_string();
    assert!(text.contains("is not a usable NVML library"), "{text}");
    assert!(text.contains("nvmlInit_v2"), "{text}");
}

#[test]
fn a_library_without_nvml_shutdown_drops_without_panicking() {
    let fake = fake!("omit-shutdown", "OMIT_SHUTDOWN");
    let mut source = fake.source();
    assert!(source.devices().is_ok());
    // nvml-wrapper's Drop panics on the missing symbol; NvmlSource keeps it in.
    drop(source);
}

#[test]
fn a_missing_library_is_an_error_with_a_reason() {
    let e = NvmlSource::with_library("/nonexistent/libnvidia-ml.so.1").unwrap_err();
    assert!(
        matches!(
            e,
            GpuError::NvmlInit {
                source: NvmlError::LibloadingError(_),
                ..
            }
        ),
        "{e:?}"
    );
    // The cause chain: NVML's error, then the loader's.
    let cause = std::error::Error::source(&e).expect("NVML's error");
    assert!(cause.source().is_some(), "{cause:?}");
    let text = e.to_string();
    assert!(
        text.starts_with("NVML library not found (/nonexistent/libnvidia-ml.so.1)"),
        "{text}"
    );

    // Not a shared library at all.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("nvml_fake")
        .join(format!("{}-not-a-library", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bogus = dir.join("libnvidia-ml.so.1");
    std::fs::write(&bogus, "not an ELF file").unwrap();
    let e = NvmlSource::with_library(&bogus).unwrap_err().to_string();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(e.starts_with("NVML library could not be loaded"), "{e}");
}

/// Whether a real `libnvidia-ml.so.1` is where the dynamic loader would look.
fn real_nvml_installed() -> bool {
    let ldconfig = ["/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"]
        .iter()
        .find_map(|l| Command::new(l).arg("-p").output().ok())
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("libnvidia-ml.so.1"))
        .unwrap_or(false);
    let ld_path = std::env::var_os("LD_LIBRARY_PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("libnvidia-ml.so.1").exists()))
        .unwrap_or(false);
    let usual = [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
        "/lib64",
        "/usr/local/nvidia/lib64",
        "/usr/local/cuda/lib64/stubs",
    ]
    .iter()
    .any(|d| Path::new(d).join("libnvidia-ml.so.1").exists());
    ldconfig || ld_path || usual
}

#[test]
fn default_library_without_a_driver_is_an_error() {
    match NvmlSource::new() {
        // A machine with NVIDIA's library and driver: nothing to check but that it works.
        Ok(mut source) => eprintln!("NVML found: {:?}", source.devices()),
        Err(e) => {
            let e = e.to_string();
            eprintln!("NvmlSource::new(): {e}");
            if !real_nvml_installed() {
                assert!(
                    e.starts_with("NVML library not found (libnvidia-ml.so.1)"),
                    "{e}"
                );
            }
        }
    }
}

/// A profiled span at `full` with the fake as GPU backend: per-span GPU figures come from the
/// real NVML code path, and energy ≈ power × the span's wall time.
fn profile_one_span(source: Option<NvmlSource>) -> spanprof::Snapshot {
    let mut builder = spanprof::ProfileLayer::builder()
        .with_preset(spanprof::Preset::Full)
        .with_sample_interval(Duration::from_millis(10));
    if let Some(source) = source {
        builder = builder.with_gpu_source(source);
    }
    let (dispatch, guard) = support::install(builder);
    tracing::dispatcher::with_default(&dispatch, || {
        tracing::info_span!("train_step")
            .in_scope(|| std::thread::sleep(Duration::from_millis(300)));
    });
    let snap = support::finish_snapshot(guard);
    // The span's own wall time (a loaded machine may stretch the time around it).
    let wall = support::span(&snap, "train_step").wall.total_ns as f64 / 1e9;
    assert!(wall >= 0.3, "{wall} s");
    let gpu = &support::span(&snap, "train_step")
        .resources
        .as_ref()
        .unwrap()
        .gpus[0];
    let joules = gpu.energy_j.expect("energy");
    assert!(
        (joules - 150.0 * wall).abs() <= 0.15 * 150.0 * wall,
        "{joules} J in {wall} s at 150 W"
    );
    assert_eq!(gpu.mean_utilization_pct, Some(37.0));
    snap
}

#[test]
fn full_preset_profiles_spans_through_the_fake() {
    let fake = fake!("full_preset");
    fake.configure("POWER_MW=150000\nUTIL=37\nNAME=Fake H100\n");
    let snap = profile_one_span(Some(fake.source()));
    let info = snap.resources.as_ref().unwrap();
    assert_eq!(info.gpu_devices[0].name, "Fake H100");
    let report = spanprof::output::Table::new().to_string(&snap);
    assert!(report.contains("GPU 0: Fake H100"), "{report}");
}

/// `SPANPROF=full` with the fake on the loader path (`LD_LIBRARY_PATH`, read by the dynamic
/// loader at process start, so the check runs in a child process).
#[test]
fn full_preset_finds_the_fake_on_the_loader_path() {
    if std::env::var_os("SPANPROF_FAKE_NVML_CHILD").is_some() {
        let snap = profile_one_span(None);
        assert_eq!(
            snap.resources.unwrap().gpu_devices[0].name,
            "Loader Path GPU"
        );
        return;
    }
    if real_nvml_installed() {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: a real libnvidia-ml.so.1 is installed"
        );
        return;
    }
    let fake = fake!("loader_path");
    fake.configure("POWER_MW=150000\nUTIL=37\nNAME=Loader Path GPU\n");
    let out = support::child_test(
        module_path!(),
        "full_preset_finds_the_fake_on_the_loader_path",
    )
    .env("LD_LIBRARY_PATH", &fake.dir)
    .env("SPANPROF_FAKE_NVML_CHILD", "1")
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "child failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    support::assert_ran_one_test(&out);
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 passed"));
}

/// A profiler at `full`, sampling every 10 ms, with `fake` as its GPU backend.
fn install_full(fake: &Fake) -> (tracing::Dispatch, spanprof::ProfileGuard) {
    support::install(
        spanprof::ProfileLayer::builder()
            .with_preset(spanprof::Preset::Full)
            .with_sample_interval(Duration::from_millis(10))
            .with_gpu_source(fake.source()),
    )
}

/// Past the bound of 8 GPUs followed per span (`MAX_GPUS`): a machine of 10 devices has all 10
/// in the profile's device list and timeline, and per span the first 8, each its own figures.
#[test]
fn past_eight_gpus_later_devices_are_sampled_but_not_followed_per_span() {
    let fake = fake!("ten_devices");
    let utils: String = (0..10).map(|i| format!("UTIL_{i}={}\n", 10 + i)).collect();
    fake.configure(&format!("DEVICES=10\nPOWER_MW=100000\n{utils}"));
    let (dispatch, guard) = install_full(&fake);
    tracing::dispatcher::with_default(&dispatch, || {
        tracing::info_span!("step").in_scope(|| std::thread::sleep(Duration::from_millis(100)));
    });
    let snap = support::finish_snapshot(guard);
    let info = snap.resources.as_ref().unwrap();
    assert_eq!(info.gpu_devices.len(), 10);
    let last = info.timeline.last().expect("samples");
    assert_eq!(last.gpus.len(), 10, "the sampler reads every device");
    assert_eq!(last.gpus[9].utilization_pct, Some(19));
    let gpus = &support::span(&snap, "step")
        .resources
        .as_ref()
        .unwrap()
        .gpus;
    let devices: Vec<u32> = gpus.iter().map(|g| g.device).collect();
    assert_eq!(devices, (0..8).collect::<Vec<u32>>());
    for g in gpus {
        assert_eq!(g.mean_utilization_pct, Some(10.0 + f64::from(g.device)));
    }
}

/// A GPU whose every NVML call starts failing (fallen off the bus): the spans after it have
/// no GPU energy, not 0 J (its last counter was published as if nothing were spent since).
#[test]
fn a_gpu_that_stops_answering_gives_no_energy_not_zero() {
    let fake = fake!("stops_answering");
    fake.configure("POWER_MW=150000\nUTIL=37\n");
    let (dispatch, guard) = install_full(&fake);
    tracing::dispatcher::with_default(&dispatch, || {
        tracing::info_span!("before").in_scope(|| std::thread::sleep(Duration::from_millis(100)));
        fake.configure("FAIL=all\n");
        // A few samples of the failing device first.
        std::thread::sleep(Duration::from_millis(100));
        tracing::info_span!("after").in_scope(|| std::thread::sleep(Duration::from_millis(100)));
    });
    let snap = support::finish_snapshot(guard);
    let gpu = |name: &str| {
        support::span(&snap, name)
            .resources
            .as_ref()
            .and_then(|r| r.gpus.first().cloned())
    };
    assert!(gpu("before").and_then(|g| g.energy_j).unwrap() > 5.0);
    let after = gpu("after");
    assert_eq!(after.as_ref().and_then(|g| g.energy_j), None, "{after:?}");
    let energy = support::span(&snap, "after")
        .resources
        .as_ref()
        .and_then(|r| r.energy_j);
    assert_eq!(energy, None);
}

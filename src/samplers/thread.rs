//! The sampler thread: one named thread that reads memory, CPU, energy and GPU figures every
//! interval, publishes them in [`Readings`] and appends them to the [`Timeline`].
//!
//! The thread is a [`crate::worker::Worker`] (start, stop, liveness): it runs until
//! [`Sampler::stop`], until the [`Sampler`] is dropped, until the profile's last
//! [`Use`](crate::worker::Use) is dropped (a leaked guard keeps none), or until nothing can read
//! what it publishes: it holds only weak references to the readings and the timeline.

use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering::{Relaxed, Release};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::cpu;
use super::energy::Rapl;
use super::gpu::{GpuError, GpuSource};
use super::memory::{self, RssReader};
use super::timeline::{Readings, SourceStatus, Timeline};
use crate::profile::Sample;
use crate::profile::{GpuDevice, GpuSample};
use crate::switches::Resources;
use crate::worker::{silent, Job, WeakUse, Worker};

/// How often the sampler thread samples by default: 100 ms.
///
/// Measured cost of the sampler thread at this interval, with memory, CPU and energy (RAPL
/// unavailable) on and no GPU: 0.08 % of one core on the development machine (2-vCPU
/// Firecracker VM; release build, 5 s, 50 samples, 78 µs of thread CPU time per sample, most of
/// it the wake-up itself), from the thread's own CPU clock: run
/// `SPANPROF_SAMPLER_CPU_SECS=5 cargo test --release --lib sampler_cpu -- --nocapture`.
pub(crate) const DEFAULT_INTERVAL: Duration = Duration::from_millis(100);

/// The shortest interval the sampler accepts; shorter ones are raised to it.
pub(crate) const MIN_INTERVAL: Duration = Duration::from_millis(1);
/// The longest interval the sampler accepts; longer ones are lowered to it.
pub(crate) const MAX_INTERVAL: Duration = Duration::from_secs(3600);

/// The name of the sampler thread.
pub(crate) const THREAD_NAME: &str = "spanprof-sampler";

/// What the sampler thread samples, and how often.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SamplerConfig {
    /// Time between samples (default [`DEFAULT_INTERVAL`], clamped to [`MIN_INTERVAL`] ..=
    /// [`MAX_INTERVAL`]).
    pub(crate) interval: Duration,
    /// What to sample: RSS and the counting allocator's net heap ([`Resources::MEMORY`] or
    /// [`Resources::HEAP`]), process CPU % ([`Resources::CPU`]), GPU figures from the
    /// [`GpuSource`] ([`Resources::GPU`]), CPU package energy ([`Resources::ENERGY`]).
    pub(crate) resources: Resources,
}

impl SamplerConfig {
    fn memory(&self) -> bool {
        self.resources.contains(Resources::MEMORY) || self.resources.contains(Resources::HEAP)
    }
    fn cpu(&self) -> bool {
        self.resources.contains(Resources::CPU)
    }
    fn gpu(&self) -> bool {
        self.resources.contains(Resources::GPU)
    }
    fn energy(&self) -> bool {
        self.resources.contains(Resources::ENERGY)
    }
}

impl Default for SamplerConfig {
    fn default() -> Self {
        Self {
            interval: DEFAULT_INTERVAL,
            resources: Resources::ALL,
        }
    }
}

/// The running sampler thread. [`Sampler::stop`] ends it; dropping it stops it too (waiting
/// up to [`crate::worker::STOP_WAIT`]).
#[derive(Debug)]
pub(crate) struct Sampler {
    worker: Worker<SamplerJob>,
}

impl Sampler {
    /// Starts the sampler thread (`spanprof-sampler`), which takes its first sample at once.
    ///
    /// `clock_origin` is time 0 of [`Sample::t_ns`]. GPU devices are discovered once, on the
    /// sampler thread (so a slow driver does not hold up the caller): [`Readings::gpu_status`]
    /// is `Pending` until then, and the device list is fixed from then on. With `uses`, the
    /// thread also ends once no [`Use`](crate::worker::Use) lives.
    ///
    /// # Errors
    /// The thread could not be spawned.
    pub(crate) fn start(
        config: SamplerConfig,
        gpu: Option<Box<dyn GpuSource>>,
        clock_origin: Instant,
        readings: Arc<Readings>,
        timeline: Arc<Timeline>,
        uses: Option<&WeakUse>,
    ) -> io::Result<Self> {
        let config = SamplerConfig {
            interval: config.interval.clamp(MIN_INTERVAL, MAX_INTERVAL),
            ..config
        };
        if !config.gpu() {
            readings.set_gpus(SourceStatus::Off);
        } else if gpu.is_none() {
            readings.set_gpus(SourceStatus::Unavailable("no GPU backend".to_string()));
        }
        if !config.energy() {
            readings.set_cpu_energy_status(SourceStatus::Off);
        }
        let now = Instant::now();
        let job = SamplerJob {
            // The thread holds no strong reference to what it publishes into.
            target: Target {
                readings: Arc::downgrade(&readings),
                timeline: Arc::downgrade(&timeline),
            },
            opening: Some((config, if config.gpu() { gpu } else { None })),
            origin: clock_origin,
            sampling: None,
            next: now,
        };
        let worker = Worker::start(THREAD_NAME, job, now, uses)?;
        Ok(Self { worker })
    }

    /// Waits up to `timeout` for the first sample to be published (GPU discovery runs first on
    /// the sampler thread). Returns whether it was.
    pub(crate) fn wait_first_sample(&self, timeout: Duration) -> bool {
        self.worker.wait_first_run(timeout)
    }

    /// Stops the thread and waits for it up to `timeout`. Returns `true` if it ended in time; if
    /// not (a GPU driver call hanging, say), it is left to end on its own and `false` returned.
    /// No sample is published after `stop` returned `true`.
    pub(crate) fn stop(mut self, timeout: Duration) -> bool {
        self.worker.stop(timeout)
    }
}

/// Energy bookkeeping of one GPU device.
#[derive(Debug, Default)]
struct GpuEnergy {
    /// First counter reading (the device's counter counts since the driver loaded).
    counter_base: Option<u64>,
    /// Latest counter reading minus the base.
    counter_mj: Option<u64>,
    /// For devices without a counter: integral of power, mJ.
    integrated_mj: f64,
    /// Previous power reading (mW) and when it was taken, for the trapezoid.
    last_power: Option<(u32, Instant)>,
}

impl GpuEnergy {
    /// Energy since the sampler started, mJ: from the device's counter if its first reading has
    /// one, else the integral of power (trapezoid between consecutive power readings, bridging
    /// samples without one). `None` for a sample without the reading: the last figure would
    /// read as no energy spent since (a device whose calls all fail, fallen off the bus, made
    /// every later span claim 0 J).
    fn update(&mut self, s: &GpuSample, at: Instant) -> Option<u64> {
        if self.counter_base.is_none() && self.last_power.is_none() && s.energy_mj.is_some() {
            self.counter_base = s.energy_mj;
        }
        if let Some(base) = self.counter_base {
            let e = s.energy_mj?;
            self.counter_mj = Some(e.saturating_sub(base));
            return self.counter_mj;
        }
        // No reading this time: none published; the next one bridges the gap.
        let power = s.power_mw?;
        if let Some((p0, t0)) = self.last_power {
            let dt = at.saturating_duration_since(t0).as_secs_f64();
            self.integrated_mj += (f64::from(p0) + f64::from(power)) / 2.0 * dt;
        }
        self.last_power = Some((power, at));
        Some(self.integrated_mj as u64)
    }
}

/// What the thread publishes into, held weakly.
struct Target {
    readings: Weak<Readings>,
    timeline: Weak<Timeline>,
}

impl Target {
    /// The readings and the timeline, while they exist.
    fn upgrade(&self) -> Option<(Arc<Readings>, Arc<Timeline>)> {
        Some((self.readings.upgrade()?, self.timeline.upgrade()?))
    }
}

/// The sampler thread's job: its sources opened at its start, then one sample per interval.
struct SamplerJob {
    target: Target,
    /// What [`Job::start`] opens the sources with.
    opening: Option<(SamplerConfig, Option<Box<dyn GpuSource>>)>,
    origin: Instant,
    /// The sources, once opened.
    sampling: Option<Sampling>,
    /// When the next sample is due.
    next: Instant,
}

impl Job for SamplerJob {
    fn start(&mut self) {
        let Some((config, gpu)) = self.opening.take() else {
            return;
        };
        if let Some(readings) = self.target.readings.upgrade() {
            self.sampling = Some(Sampling::new(config, gpu, self.origin, &readings));
        }
        // The first sample now, the next ones an interval apart from it.
        self.next = Instant::now();
    }

    fn run(&mut self, _: Instant) -> Option<Instant> {
        let sampling = self.sampling.as_mut()?;
        // Nothing can read what the thread publishes any more: stop for good.
        let (readings, timeline) = self.target.upgrade()?;
        sampling.sample(&readings, &timeline);
        drop((readings, timeline));
        let interval = sampling.config.interval;
        self.next += interval;
        let now = Instant::now();
        if self.next <= now {
            // Fell behind (suspended, or sampling took longer than the interval): skip the
            // missed ticks rather than sampling in a burst.
            let behind = now - self.next;
            let ticks = behind.as_nanos() / interval.as_nanos() + 1;
            self.next += interval * u32::try_from(ticks).unwrap_or(u32::MAX);
        }
        Some(self.next)
    }
}

/// The sampler's sources and what it keeps between samples.
struct Sampling {
    config: SamplerConfig,
    origin: Instant,
    gpu: Option<Box<dyn GpuSource>>,
    devices: Vec<GpuDevice>,
    gpu_energy: Vec<GpuEnergy>,
    rss: Option<RssReader>,
    rapl: Option<Rapl>,
    last_cpu: Option<(u64, Instant)>,
    /// Previous CPU energy reading (µJ) and its time (ns), for the published power.
    last_energy: Option<(u64, u64)>,
    peak_heap: Option<i64>,
    seq: u64,
}

impl Sampling {
    fn new(
        config: SamplerConfig,
        mut gpu: Option<Box<dyn GpuSource>>,
        origin: Instant,
        readings: &Readings,
    ) -> Self {
        let mut devices = Vec::new();
        if let Some(source) = gpu.as_mut() {
            let found = catch_unwind(AssertUnwindSafe(|| silent(|| source.devices())))
                .unwrap_or_else(|_| Err(GpuError::unavailable("the GPU backend panicked")));
            match found {
                Ok(found) if !found.is_empty() => {
                    devices = found;
                    readings.set_gpus(SourceStatus::Available(devices.clone()));
                }
                Ok(_) => {
                    readings.set_gpus(SourceStatus::Unavailable(format!(
                        "no device found by {}",
                        source.backend()
                    )));
                }
                Err(reason) => readings.set_gpus(SourceStatus::Unavailable(reason.to_string())),
            }
        }
        if devices.is_empty() {
            gpu = None;
        }
        let rapl = if config.energy() {
            match Rapl::open() {
                Ok(rapl) => {
                    readings.set_cpu_energy_status(SourceStatus::Available(
                        rapl.domains().iter().map(|d| d.to_string()).collect(),
                    ));
                    Some(rapl)
                }
                Err(reason) => {
                    readings.set_cpu_energy_status(SourceStatus::Unavailable(reason));
                    None
                }
            }
        } else {
            None
        };
        Self {
            config,
            origin,
            gpu_energy: devices.iter().map(|_| GpuEnergy::default()).collect(),
            gpu,
            devices,
            rss: if config.memory() {
                RssReader::open()
            } else {
                None
            },
            rapl,
            last_cpu: None,
            last_energy: None,
            peak_heap: None,
            seq: 0,
        }
    }

    fn sample(&mut self, readings: &Readings, timeline: &Timeline) {
        let now = Instant::now();
        let t_ns = u64::try_from(now.saturating_duration_since(self.origin).as_nanos())
            .unwrap_or(u64::MAX);
        let mut sample = Sample {
            t_ns,
            seq: self.seq,
            rss_bytes: None,
            heap_bytes: None,
            process_cpu_pct: None,
            cpu_energy_uj: None,
            gpus: Vec::new(),
        };

        if self.config.memory() {
            sample.rss_bytes = self.rss.as_mut().and_then(RssReader::read);
            let peak = memory::peak_rss_bytes()
                .map(|p| p.max(sample.rss_bytes.unwrap_or(0)))
                .or(sample.rss_bytes);
            put(&readings.peak_rss_bytes, peak);
            sample.heap_bytes = crate::alloc::global_heap_bytes();
            if let Some(h) = sample.heap_bytes {
                let peak = self.peak_heap.map_or(h, |p| p.max(h));
                self.peak_heap = Some(peak);
                readings.peak_heap_bytes.store(peak, Relaxed);
            }
        }
        put(&readings.rss_bytes, sample.rss_bytes);
        readings.heap_bytes.store(
            sample.heap_bytes.unwrap_or(super::timeline::NA_I64),
            Relaxed,
        );

        if self.config.cpu() {
            if let Some((user, sys)) = cpu::process_cpu_ns() {
                let total = user.saturating_add(sys);
                if let Some((last, at)) = self.last_cpu {
                    let wall = now.saturating_duration_since(at).as_nanos() as f64;
                    if wall > 0.0 {
                        let used = total.saturating_sub(last) as f64;
                        sample.process_cpu_pct = Some((used / wall * 100.0) as f32);
                    }
                }
                self.last_cpu = Some((total, now));
            }
        }
        readings.set_process_cpu_pct(sample.process_cpu_pct);

        if let Some(rapl) = self.rapl.as_mut() {
            sample.cpu_energy_uj = rapl.read();
        }
        put(&readings.cpu_energy_uj, sample.cpu_energy_uj);
        let power = match (sample.cpu_energy_uj, self.last_energy) {
            (Some(e), Some((e0, t0))) if t_ns > t0 => {
                Some((e.saturating_sub(e0) as f64 * 1e6 / (t_ns - t0) as f64) as u64)
            }
            _ => None,
        };
        put(&readings.cpu_power_mw, power);
        self.last_energy = sample.cpu_energy_uj.map(|e| (e, t_ns));

        if let Some(source) = self.gpu.as_mut() {
            let devices = &self.devices;
            let read = catch_unwind(AssertUnwindSafe(|| {
                silent(|| {
                    devices
                        .iter()
                        .map(|d| source.sample(d.index))
                        .collect::<Vec<_>>()
                })
            }));
            match read {
                Ok(mut gpus) => {
                    // Integrate over the samples' own times (`t_ns`), so the timeline's energy
                    // is exactly consistent with its power readings and timestamps.
                    let at = now;
                    for ((g, energy), out) in gpus
                        .iter_mut()
                        .zip(&mut self.gpu_energy)
                        .zip(readings.gpus())
                    {
                        g.energy_mj = energy.update(g, at);
                        out.publish(g);
                    }
                    sample.gpus = gpus;
                }
                Err(_) => {
                    // A panicking backend is dropped; the panic hook reported it.
                    self.gpu = None;
                    for out in readings.gpus() {
                        out.publish(&GpuSample::default());
                    }
                }
            }
        }

        readings.t_ns.store(t_ns, Relaxed);
        readings.sampler_cpu_ns.store(cpu::thread_cpu_ns(), Relaxed);
        self.seq += 1;
        readings.seq.store(self.seq, Release);
        timeline.push(sample);
    }
}

fn put(a: &std::sync::atomic::AtomicU64, v: Option<u64>) {
    a.store(v.unwrap_or(super::timeline::NA), Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering::Acquire;
    use std::sync::{Condvar, Mutex};

    /// A GPU backend that plays back fixed figures and records where it ran.
    struct FakeGpu {
        devices: Vec<GpuDevice>,
        /// Per device: (utilisation, memory, power, energy counter).
        figures: Vec<(u32, u64, Option<u32>, Option<u64>)>,
        ran_on: Arc<Mutex<Vec<String>>>,
        calls: Arc<std::sync::atomic::AtomicU64>,
    }

    impl GpuSource for FakeGpu {
        fn backend(&self) -> &'static str {
            "fake"
        }

        fn devices(&mut self) -> Result<Vec<GpuDevice>, GpuError> {
            let name = std::thread::current().name().unwrap_or("").to_string();
            let silent =
                tracing::dispatcher::get_default(|d| d.is::<tracing::subscriber::NoSubscriber>());
            self.ran_on
                .lock()
                .unwrap()
                .push(format!("{name} silent={silent}"));
            Ok(self.devices.clone())
        }

        fn sample(&mut self, index: u32) -> GpuSample {
            self.calls.fetch_add(1, Relaxed);
            let (util, mem, power, counter) = self.figures[index as usize];
            GpuSample {
                utilization_pct: Some(util),
                memory_used_bytes: Some(mem),
                power_mw: power,
                energy_mj: counter.map(|c| c + self.calls.load(Relaxed) * 10),
                process_memory_bytes: Some(mem / 2),
                ..GpuSample::default()
            }
        }
    }

    fn device(index: u32) -> GpuDevice {
        GpuDevice {
            index,
            name: format!("Fake GPU {index}"),
            uuid: None,
            memory_total_bytes: Some(80 << 30),
            power_limit_mw: Some(700_000),
        }
    }

    fn start(
        config: SamplerConfig,
        gpu: Option<Box<dyn GpuSource>>,
    ) -> (Sampler, Arc<Readings>, Arc<Timeline>) {
        let readings = Arc::new(Readings::new());
        let timeline = Arc::new(Timeline::default());
        let sampler = Sampler::start(
            config,
            gpu,
            Instant::now(),
            readings.clone(),
            timeline.clone(),
            None,
        )
        .unwrap();
        (sampler, readings, timeline)
    }

    fn wait_for(readings: &Readings, seq: u64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while readings.seq.load(Acquire) < seq {
            assert!(Instant::now() < deadline, "no sample {seq} within 10 s");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn samples_cpu_side_figures() {
        let config = SamplerConfig {
            interval: Duration::from_millis(10),
            ..SamplerConfig::default()
        };
        let (sampler, readings, timeline) = start(config, None);
        wait_for(&readings, 3);
        assert!(sampler.stop(Duration::from_secs(5)));
        assert!(Readings::get(&readings.rss_bytes).unwrap() > 0);
        assert!(
            Readings::get(&readings.peak_rss_bytes).unwrap()
                >= Readings::get(&readings.rss_bytes).unwrap()
        );
        assert!(readings.process_cpu_pct().unwrap() >= 0.0);
        // The unit-test binary does not install the counting allocator.
        assert_eq!(Readings::get_i64(&readings.heap_bytes), None);
        assert!(matches!(
            readings.gpu_status(),
            SourceStatus::Unavailable(r) if r == "no GPU backend"
        ));
        assert!(!matches!(
            readings.cpu_energy_status(),
            SourceStatus::Pending | SourceStatus::Off
        ));
        let snap = timeline.snapshot();
        assert_eq!(snap.len() as u64, readings.seq.load(Acquire));
        assert_eq!(snap[0].seq, 0);
        assert_eq!(snap[0].process_cpu_pct, None);
        assert!(snap[1].process_cpu_pct.is_some());
        assert!(snap.windows(2).all(|w| w[0].t_ns < w[1].t_ns));
        assert_eq!(readings.t_ns.load(Relaxed), snap.last().unwrap().t_ns);
    }

    #[test]
    fn off_switches() {
        let config = SamplerConfig {
            interval: Duration::from_millis(10),
            resources: Resources::NONE,
        };
        let calls = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let gpu = FakeGpu {
            devices: vec![device(0)],
            figures: vec![(1, 2, None, None)],
            ran_on: Arc::default(),
            calls: calls.clone(),
        };
        let (sampler, readings, timeline) = start(config, Some(Box::new(gpu)));
        wait_for(&readings, 2);
        assert!(sampler.stop(Duration::from_secs(5)));
        assert_eq!(readings.gpu_status(), SourceStatus::Off);
        assert_eq!(readings.cpu_energy_status(), SourceStatus::Off);
        assert_eq!(calls.load(Relaxed), 0);
        assert_eq!(Readings::get(&readings.rss_bytes), None);
        assert_eq!(readings.process_cpu_pct(), None);
        let s = &timeline.snapshot()[1];
        assert_eq!(
            (
                s.rss_bytes,
                s.process_cpu_pct,
                s.cpu_energy_uj,
                s.gpus.len()
            ),
            (None, None, None, 0)
        );
    }

    #[test]
    fn stop_is_prompt_and_final() {
        let config = SamplerConfig {
            interval: Duration::from_secs(10),
            ..SamplerConfig::default()
        };
        let (sampler, readings, timeline) = start(config, None);
        wait_for(&readings, 1);
        let t = Instant::now();
        assert!(sampler.stop(Duration::from_secs(5)));
        let took = t.elapsed();
        assert!(took < Duration::from_secs(1), "stop took {took:?}");
        let seq = readings.seq.load(Acquire);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(readings.seq.load(Acquire), seq);
        assert_eq!(timeline.pushed(), seq);
        assert_eq!(seq, 1);
    }

    /// The thread stops by itself once the last use is dropped (a leaked guard), promptly, and
    /// `stop` still works after that. While a use lives, it samples.
    #[test]
    fn stops_when_its_uses_are_dropped() {
        let config = SamplerConfig {
            interval: Duration::from_secs(3600),
            resources: Resources::MEMORY,
        };
        let (readings, timeline) = (Arc::new(Readings::new()), Arc::new(Timeline::default()));
        let first = crate::worker::Use::new();
        let weak = first.downgrade();
        let sampler = Sampler::start(
            config,
            None,
            Instant::now(),
            readings.clone(),
            timeline.clone(),
            Some(&weak),
        )
        .unwrap();
        let second = weak.upgrade().unwrap();
        drop(first);
        wait_for(&readings, 1);
        assert!(!sampler.worker.ended(), "a use lives");
        drop(second);
        // Woken by the last use: not at its next tick, an hour away.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !sampler.worker.ended() {
            assert!(
                Instant::now() < deadline,
                "the sampler did not stop without uses"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(weak.upgrade().is_none());
        assert_eq!(readings.seq.load(Acquire), 1);
        assert_eq!(timeline.pushed(), 1);
        assert!(sampler.stop(Duration::from_secs(1)));
    }

    /// Without its readings or timeline (the recorder freed), the thread stops; it never kept
    /// them alive itself.
    #[test]
    fn stops_when_what_it_publishes_into_is_freed() {
        let config = SamplerConfig {
            interval: Duration::from_millis(5),
            resources: Resources::MEMORY,
        };
        let (sampler, readings, timeline) = start(config, None);
        wait_for(&readings, 2);
        let weak = Arc::downgrade(&timeline);
        drop(timeline);
        assert!(
            weak.upgrade().is_none(),
            "the sampler thread holds the timeline"
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while !sampler.worker.ended() {
            assert!(Instant::now() < deadline, "the sampler did not stop");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(sampler.stop(Duration::from_secs(1)));
    }

    /// A backend whose discovery hangs: stop gives up after its timeout.
    struct Hang(Arc<(Mutex<bool>, Condvar)>);

    impl GpuSource for Hang {
        fn backend(&self) -> &'static str {
            "hang"
        }
        fn devices(&mut self) -> Result<Vec<GpuDevice>, GpuError> {
            let (lock, cv) = &*self.0;
            let mut released = lock.lock().unwrap();
            while !*released {
                released = cv.wait(released).unwrap();
            }
            Err(GpuError::unavailable("released"))
        }
        fn sample(&mut self, _: u32) -> GpuSample {
            GpuSample::default()
        }
    }

    #[test]
    fn stop_times_out_on_a_hung_backend() {
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        let (sampler, readings, _timeline) =
            start(SamplerConfig::default(), Some(Box::new(Hang(gate.clone()))));
        assert_eq!(readings.gpu_status(), SourceStatus::Pending);
        let t = Instant::now();
        assert!(!sampler.stop(Duration::from_millis(100)));
        let took = t.elapsed();
        assert!(took >= Duration::from_millis(100) && took < Duration::from_secs(2));
        // Release it: the detached thread ends on its own without sampling.
        *gate.0.lock().unwrap() = true;
        gate.1.notify_all();
        let deadline = Instant::now() + Duration::from_secs(5);
        while readings.gpu_status() == SourceStatus::Pending {
            assert!(Instant::now() < deadline);
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(readings.seq.load(Acquire), 0);
    }

    #[test]
    fn gpu_readings_published_and_energy_integrated() {
        let ran_on = Arc::new(Mutex::new(Vec::new()));
        let gpu = FakeGpu {
            devices: vec![device(0), device(1)],
            // Device 0: power only, 200 W. Device 1: an energy counter from 5 000 000 mJ.
            figures: vec![
                (40, 1 << 30, Some(200_000), None),
                (90, 2 << 30, None, Some(5_000_000)),
            ],
            ran_on: ran_on.clone(),
            calls: Arc::default(),
        };
        let config = SamplerConfig {
            interval: Duration::from_millis(20),
            ..SamplerConfig::default()
        };
        let (sampler, readings, timeline) = start(config, Some(Box::new(gpu)));
        wait_for(&readings, 15);
        assert!(sampler.stop(Duration::from_secs(5)));
        assert_eq!(
            *ran_on.lock().unwrap(),
            [format!("{THREAD_NAME} silent=true")]
        );
        assert_eq!(
            readings.gpu_status(),
            SourceStatus::Available(vec![device(0), device(1)])
        );
        let g = readings.gpus();
        assert_eq!(g.len(), 2);
        assert_eq!(Readings::get(&g[0].util_pct), Some(40));
        assert_eq!(Readings::get(&g[0].mem_used_bytes), Some(1 << 30));
        assert_eq!(Readings::get(&g[0].process_mem_bytes), Some(1 << 29));
        assert_eq!(Readings::get(&g[0].power_mw), Some(200_000));
        assert_eq!(Readings::get(&g[1].util_pct), Some(90));
        assert_eq!(Readings::get(&g[1].power_mw), None);

        let snap = timeline.snapshot();
        let (first, last) = (&snap[0], snap.last().unwrap());
        // Power-only device: energy = 200 W × time between its first and last sample (1 mJ
        // for rounding: the integral is kept in f64 and published in whole mJ).
        let secs = (last.t_ns - first.t_ns) as f64 / 1e9;
        let expected = 200_000.0 * secs;
        let got = last.gpus[0].energy_mj.unwrap() as f64;
        assert_eq!(first.gpus[0].energy_mj, Some(0));
        assert!(
            (got - expected).abs() <= 1.0 + expected * 1e-9,
            "integrated {got} mJ, expected {expected} mJ over {secs} s"
        );
        assert!(secs > 0.2, "15 samples 20 ms apart: {secs} s");
        assert_eq!(Readings::get(&g[0].energy_mj), Some(got as u64));
        // Counter device: rebased to the first reading (the fake adds 10 mJ per call, 2 calls
        // per sample).
        assert_eq!(first.gpus[1].energy_mj, Some(0));
        let n = snap.len() as u64;
        assert_eq!(last.gpus[1].energy_mj, Some((n - 1) * 20));
        assert_eq!(timeline.max_gpu_mem_between(1, 0, last.t_ns), Some(2 << 30));
        assert_eq!(timeline.mean_gpu_util_between(0, 0, last.t_ns), Some(40.0));
    }

    #[test]
    fn gpu_energy_modes() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let power = |mw| GpuSample {
            power_mw: Some(mw),
            ..GpuSample::default()
        };
        let mut e = GpuEnergy::default();
        assert_eq!(e.update(&power(100_000), at(0)), Some(0));
        assert_eq!(e.update(&power(300_000), at(1000)), Some(200_000));
        // A sample without power: no figure (not the last one); the next reading bridges the
        // gap.
        assert_eq!(e.update(&GpuSample::default(), at(2000)), None);
        assert_eq!(e.update(&power(300_000), at(2500)), Some(650_000));
        // Without any power reading yet: nothing.
        assert_eq!(
            GpuEnergy::default().update(&GpuSample::default(), at(0)),
            None
        );
        // Counter mode sticks once chosen; a missing reading is no figure (a failing device's
        // stale counter read as 0 J spent).
        let counter = |mj| GpuSample {
            energy_mj: Some(mj),
            power_mw: Some(1),
            ..GpuSample::default()
        };
        let mut e = GpuEnergy::default();
        assert_eq!(e.update(&counter(1_000), at(0)), Some(0));
        assert_eq!(e.update(&power(5), at(100)), None);
        assert_eq!(e.update(&GpuSample::default(), at(150)), None);
        assert_eq!(e.update(&counter(1_500), at(200)), Some(500));
    }

    #[test]
    fn gpu_without_devices_or_failing() {
        /// `None`: discovery panics.
        struct NoDev(Option<Result<Vec<GpuDevice>, String>>);
        impl GpuSource for NoDev {
            fn backend(&self) -> &'static str {
                "nodev"
            }
            fn devices(&mut self) -> Result<Vec<GpuDevice>, GpuError> {
                let Some(found) = self.0.clone() else {
                    panic!("the fake GPU backend panics in discovery (expected by the test)");
                };
                // A source that still builds its reason as a `String` migrates with `Into`.
                found.map_err(Into::into)
            }
            fn sample(&mut self, _: u32) -> GpuSample {
                unreachable!("no device to sample")
            }
        }
        for (source, reason) in [
            (NoDev(Some(Ok(Vec::new()))), "no device found by nodev"),
            (
                NoDev(Some(Err("NVML: driver not loaded".into()))),
                "NVML: driver not loaded",
            ),
            (NoDev(None), "the GPU backend panicked"),
        ] {
            let config = SamplerConfig {
                interval: Duration::from_millis(5),
                ..SamplerConfig::default()
            };
            let (sampler, readings, _timeline) = start(config, Some(Box::new(source)));
            wait_for(&readings, 2);
            assert!(sampler.stop(Duration::from_secs(5)));
            assert_eq!(
                readings.gpu_status(),
                SourceStatus::Unavailable(reason.to_string())
            );
            assert!(readings.gpus().is_empty());
        }
    }

    /// The sampler's own CPU use at the default interval (memory, CPU and energy on, no GPU).
    /// Prints the figure; fails above 2 % of one core (target: ≤ 1 %).
    #[test]
    fn sampler_cpu_at_default_interval() {
        let secs: u64 = std::env::var("SPANPROF_SAMPLER_CPU_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1);
        let (sampler, readings, _timeline) = start(SamplerConfig::default(), None);
        wait_for(&readings, 1);
        let (cpu0, seq0, t0) = (
            readings.sampler_cpu_ns.load(Relaxed),
            readings.seq.load(Acquire),
            Instant::now(),
        );
        std::thread::sleep(Duration::from_secs(secs));
        let (cpu1, seq1) = (
            readings.sampler_cpu_ns.load(Relaxed),
            readings.seq.load(Acquire),
        );
        let wall = t0.elapsed();
        assert!(sampler.stop(Duration::from_secs(5)));
        let pct = (cpu1 - cpu0) as f64 / wall.as_nanos() as f64 * 100.0;
        let per_sample_us = (cpu1 - cpu0) as f64 / (seq1 - seq0).max(1) as f64 / 1e3;
        println!(
            "sampler CPU: {pct:.3} % of one core over {wall:?} ({} samples, {per_sample_us:.1} µs CPU per sample)",
            seq1 - seq0
        );
        assert!(pct < 2.0, "sampler used {pct:.3} % of one core");
    }
}

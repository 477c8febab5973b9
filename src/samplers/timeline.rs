//! What the sampler thread publishes: the latest readings in atomics (read on the span hot path
//! without a lock or a system call) and a bounded timeline of samples (for the profile and for
//! figures over a span's lifetime).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::profile::{GpuDevice, GpuSample, Sample};

/// Samples the whole-run timeline keeps at most.
pub(crate) const TIMELINE_CAPACITY: usize = 2048;
/// The most recent samples, kept at full resolution for per-span figures.
pub(crate) const RECENT_CAPACITY: usize = 512;

/// A bounded timeline that always spans the whole run.
///
/// Two parts, both bounded:
/// - the **whole run**: at most `capacity` samples. Every `stride`-th sample is kept (stride 1 at
///   first); when it is full, every other kept sample is dropped and the stride doubles. So it
///   always reaches from the first sample to within `stride` samples of now, with `capacity/2`
///   to `capacity` samples evenly spread: at the default 100 ms interval and 2048 samples, 0.1 s
///   apart for the first 3.4 minutes, 3.2 s apart after an hour, 100 s apart after a day.
/// - the **recent** samples at full resolution: the last `recent_capacity` (51 s at 100 ms), so
///   figures over a span that ended recently are not coarsened by the thinning.
///
/// Memory: at most `capacity + recent_capacity` samples, each `size_of::<Sample>()` (96 bytes)
/// plus 80 bytes per GPU device plus one allocation header: with the defaults about 250 KiB
/// without GPUs and 1.8 MiB with 8.
///
/// Writes (the sampler thread, once per interval) and range queries (span closes at the
/// `detailed` preset and up) take a mutex for a few microseconds at most (binary searches);
/// the hot path's lock-free alternative is [`Readings`].
#[derive(Debug)]
pub(crate) struct Timeline {
    state: Mutex<State>,
    capacity: usize,
    recent_capacity: usize,
}

#[derive(Debug, Default)]
struct State {
    whole: Vec<Sample>,
    stride: u64,
    pushed: u64,
    recent: VecDeque<Sample>,
}

impl Default for Timeline {
    fn default() -> Self {
        Self::new(TIMELINE_CAPACITY, RECENT_CAPACITY)
    }
}

impl Timeline {
    /// A timeline of at most `capacity` (at least 2) whole-run and `recent_capacity` (at least
    /// 1) recent samples.
    pub(crate) fn new(capacity: usize, recent_capacity: usize) -> Self {
        Self {
            state: Mutex::new(State {
                stride: 1,
                ..State::default()
            }),
            capacity: capacity.max(2),
            recent_capacity: recent_capacity.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends a sample; samples must come in time order.
    pub(crate) fn push(&self, sample: Sample) {
        let mut st = self.lock();
        if st.pushed % st.stride == 0 {
            if st.whole.capacity() == 0 {
                st.whole.reserve_exact(self.capacity);
            }
            st.whole.push(sample.clone());
            if st.whole.len() >= self.capacity {
                // Kept samples are pushes 0, s, 2s, …: keeping even positions keeps 0, 2s, 4s, …
                let mut i = 0;
                st.whole.retain(|_| {
                    i += 1;
                    i % 2 == 1
                });
                st.stride = st.stride.saturating_mul(2);
            }
        }
        st.pushed += 1;
        if st.recent.len() >= self.recent_capacity {
            st.recent.pop_front();
        }
        st.recent.push_back(sample);
    }

    /// Samples pushed so far (including the ones thinned out).
    #[cfg(test)]
    pub(crate) fn pushed(&self) -> u64 {
        self.lock().pushed
    }

    /// The whole-run timeline, first sample to latest, in time order.
    pub(crate) fn snapshot(&self) -> Vec<Sample> {
        let st = self.lock();
        let mut out = Vec::with_capacity(st.whole.len() + 1);
        out.extend(st.whole.iter().cloned());
        if let Some(latest) = st.recent.back() {
            if out.last().map_or(true, |s| s.seq < latest.seq) {
                out.push(latest.clone());
            }
        }
        out
    }

    /// Largest RSS among samples in `[t0_ns, t1_ns]`, or the nearest sample before `t0_ns`
    /// when none is inside.
    pub(crate) fn max_rss_between(&self, t0_ns: u64, t1_ns: u64) -> Option<u64> {
        let mut max = None;
        self.values_between(t0_ns, t1_ns, |s| s.rss_bytes, |v| max = max.max(Some(v)));
        max
    }

    /// Largest net heap among samples in the window (as [`Timeline::max_rss_between`]).
    pub(crate) fn max_heap_between(&self, t0_ns: u64, t1_ns: u64) -> Option<i64> {
        let mut max = None;
        self.values_between(t0_ns, t1_ns, |s| s.heap_bytes, |v| max = max.max(Some(v)));
        max
    }

    /// Largest memory used on GPU `dev` (position in the sampler's device list) among samples
    /// in the window (as [`Timeline::max_rss_between`]).
    pub(crate) fn max_gpu_mem_between(&self, dev: usize, t0_ns: u64, t1_ns: u64) -> Option<u64> {
        let mut max = None;
        self.values_between(
            t0_ns,
            t1_ns,
            |s| s.gpus.get(dev)?.memory_used_bytes,
            |v| max = max.max(Some(v)),
        );
        max
    }

    /// Mean utilisation of GPU `dev` over samples in the window (as
    /// [`Timeline::max_rss_between`]).
    pub(crate) fn mean_gpu_util_between(&self, dev: usize, t0_ns: u64, t1_ns: u64) -> Option<f64> {
        let (mut sum, mut n) = (0.0, 0u32);
        self.values_between(
            t0_ns,
            t1_ns,
            |s| s.gpus.get(dev)?.utilization_pct,
            |v| {
                sum += f64::from(v);
                n += 1;
            },
        );
        (n > 0).then(|| sum / f64::from(n))
    }

    /// Calls `each` with `get` of every sample in `[t0, t1]` that has the value; if none has,
    /// with `get` of the nearest sample before `t0` (if it has it).
    ///
    /// The samples searched are the whole-run ones older than the recent part, then the recent
    /// ones: full resolution where it is still kept, no sample twice.
    fn values_between<V>(
        &self,
        t0: u64,
        t1: u64,
        get: impl Fn(&Sample) -> Option<V>,
        mut each: impl FnMut(V),
    ) {
        let t1 = t1.max(t0);
        let st = self.lock();
        let recent_from = st.recent.front().map_or(u64::MAX, |s| s.t_ns);
        let old = &st.whole[..st.whole.partition_point(|s| s.t_ns < recent_from)];

        let mut found = false;
        let (a, b) = (
            old.partition_point(|s| s.t_ns < t0),
            old.partition_point(|s| s.t_ns <= t1),
        );
        for v in old[a..b].iter().filter_map(&get) {
            each(v);
            found = true;
        }
        let (c, d) = (
            st.recent.partition_point(|s| s.t_ns < t0),
            st.recent.partition_point(|s| s.t_ns <= t1),
        );
        for v in st.recent.range(c..d).filter_map(&get) {
            each(v);
            found = true;
        }
        if found {
            return;
        }
        let before = match c.checked_sub(1) {
            Some(i) => st.recent.get(i),
            None => a.checked_sub(1).and_then(|i| old.get(i)),
        };
        if let Some(v) = before.and_then(get) {
            each(v);
        }
    }
}

/// "Not available" in the `u64` fields of [`Readings`] and [`GpuReadings`].
pub(crate) const NA: u64 = u64::MAX;
/// "Not available" in the `i64` fields of [`Readings`].
pub(crate) const NA_I64: i64 = i64::MIN;
const NA_F32_BITS: u32 = u32::MAX;

/// The latest figures of one GPU device, each [`NA`] when not available.
#[derive(Debug)]
pub(crate) struct GpuReadings {
    pub(crate) mem_used_bytes: AtomicU64,
    pub(crate) util_pct: AtomicU64,
    pub(crate) power_mw: AtomicU64,
    /// Energy since the sampler started, in millijoules (device counter or integrated power).
    pub(crate) energy_mj: AtomicU64,
    pub(crate) process_mem_bytes: AtomicU64,
}

impl GpuReadings {
    fn new() -> Self {
        Self {
            mem_used_bytes: AtomicU64::new(NA),
            util_pct: AtomicU64::new(NA),
            power_mw: AtomicU64::new(NA),
            energy_mj: AtomicU64::new(NA),
            process_mem_bytes: AtomicU64::new(NA),
        }
    }

    pub(crate) fn publish(&self, s: &GpuSample) {
        let put = |a: &AtomicU64, v: Option<u64>| a.store(v.unwrap_or(NA), Ordering::Relaxed);
        put(&self.mem_used_bytes, s.memory_used_bytes);
        put(&self.util_pct, s.utilization_pct.map(u64::from));
        put(&self.power_mw, s.power_mw.map(u64::from));
        put(&self.energy_mj, s.energy_mj);
        put(&self.process_mem_bytes, s.process_memory_bytes);
    }
}

/// Whether a source of figures is sampled, and if not, why.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SourceStatus<T> {
    /// Not requested (the preset or configuration leaves it off).
    Off,
    /// Requested; the sampler thread has not looked yet.
    Pending,
    /// Requested but not available, with the reason (e.g. "Permission denied").
    Unavailable(String),
    /// Sampled.
    Available(T),
}

/// The latest readings, published by the sampler thread after every sample: what the layer
/// copies at span open and close with no lock and no system call.
///
/// Each field is its own relaxed atomic; `seq` is stored last (release), so a reader that loads
/// `seq` (acquire) first and again last knows whether a sample was published meanwhile. Values
/// are [`NA`] (or [`NA_I64`]) when not available.
#[derive(Debug)]
pub(crate) struct Readings {
    /// Samples published so far (0: none yet).
    pub(crate) seq: AtomicU64,
    /// Time of the latest sample, ns since the profiler started.
    pub(crate) t_ns: AtomicU64,
    pub(crate) rss_bytes: AtomicU64,
    pub(crate) peak_rss_bytes: AtomicU64,
    /// Net heap bytes ([`crate::alloc::HeapCounters::process_net_bytes`]), [`NA_I64`] when not installed.
    pub(crate) heap_bytes: AtomicI64,
    /// Largest `heap_bytes` seen by the sampler.
    pub(crate) peak_heap_bytes: AtomicI64,
    /// Process CPU % over the last interval, as `f32` bits.
    process_cpu_pct: AtomicU32,
    /// CPU package energy since the sampler started, µJ.
    pub(crate) cpu_energy_uj: AtomicU64,
    /// CPU package power over the last interval, mW (to extrapolate `cpu_energy_uj`).
    pub(crate) cpu_power_mw: AtomicU64,
    /// CPU time the sampler thread itself has used, ns.
    pub(crate) sampler_cpu_ns: AtomicU64,
    gpus: OnceLock<Box<[GpuReadings]>>,
    gpu_status: OnceLock<SourceStatus<Vec<GpuDevice>>>,
    cpu_energy_status: OnceLock<SourceStatus<Vec<String>>>,
}

impl Default for Readings {
    fn default() -> Self {
        Self::new()
    }
}

impl Readings {
    /// Nothing sampled yet.
    pub(crate) fn new() -> Self {
        Self {
            seq: AtomicU64::new(0),
            t_ns: AtomicU64::new(0),
            rss_bytes: AtomicU64::new(NA),
            peak_rss_bytes: AtomicU64::new(NA),
            heap_bytes: AtomicI64::new(NA_I64),
            peak_heap_bytes: AtomicI64::new(NA_I64),
            process_cpu_pct: AtomicU32::new(NA_F32_BITS),
            cpu_energy_uj: AtomicU64::new(NA),
            cpu_power_mw: AtomicU64::new(NA),
            sampler_cpu_ns: AtomicU64::new(0),
            gpus: OnceLock::new(),
            gpu_status: OnceLock::new(),
            cpu_energy_status: OnceLock::new(),
        }
    }

    /// A `u64` reading, `None` when [`NA`].
    #[inline]
    pub(crate) fn get(a: &AtomicU64) -> Option<u64> {
        let v = a.load(Ordering::Relaxed);
        (v != NA).then_some(v)
    }

    /// An `i64` reading, `None` when [`NA_I64`].
    #[inline]
    pub(crate) fn get_i64(a: &AtomicI64) -> Option<i64> {
        let v = a.load(Ordering::Relaxed);
        (v != NA_I64).then_some(v)
    }

    /// The latest process CPU %.
    #[cfg(test)]
    pub(crate) fn process_cpu_pct(&self) -> Option<f32> {
        let bits = self.process_cpu_pct.load(Ordering::Relaxed);
        (bits != NA_F32_BITS).then(|| f32::from_bits(bits))
    }

    pub(crate) fn set_process_cpu_pct(&self, pct: Option<f32>) {
        let bits = pct.map_or(NA_F32_BITS, f32::to_bits);
        self.process_cpu_pct.store(bits, Ordering::Relaxed);
    }

    /// Per-device readings, in the order of the device list (empty until the sampler
    /// discovered the devices, and when there are none). The list never changes once set.
    #[inline]
    pub(crate) fn gpus(&self) -> &[GpuReadings] {
        self.gpus.get().map_or(&[], |g| g)
    }

    /// Whether GPUs are sampled, and which.
    pub(crate) fn gpu_status(&self) -> SourceStatus<Vec<GpuDevice>> {
        self.gpu_status
            .get()
            .cloned()
            .unwrap_or(SourceStatus::Pending)
    }

    /// Whether CPU energy (RAPL) is sampled, and from which package domains.
    pub(crate) fn cpu_energy_status(&self) -> SourceStatus<Vec<String>> {
        self.cpu_energy_status
            .get()
            .cloned()
            .unwrap_or(SourceStatus::Pending)
    }

    /// Sets the device list (once: later calls are ignored) and the GPU status.
    pub(crate) fn set_gpus(&self, status: SourceStatus<Vec<GpuDevice>>) {
        let n = match &status {
            SourceStatus::Available(devices) => devices.len(),
            _ => 0,
        };
        let _ = self.gpus.set((0..n).map(|_| GpuReadings::new()).collect());
        let _ = self.gpu_status.set(status);
    }

    pub(crate) fn set_cpu_energy_status(&self, status: SourceStatus<Vec<String>>) {
        let _ = self.cpu_energy_status.set(status);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(seq: u64, t_ns: u64) -> Sample {
        Sample {
            t_ns,
            seq,
            rss_bytes: Some(seq * 10),
            heap_bytes: None,
            process_cpu_pct: None,
            cpu_energy_uj: None,
            gpus: Vec::new(),
        }
    }

    #[test]
    fn bounded_and_spans_the_run() {
        let tl = Timeline::default();
        let n = 100_000u64;
        for i in 0..n {
            tl.push(sample(i, i * 100));
        }
        let snap = tl.snapshot();
        assert!(snap.len() <= TIMELINE_CAPACITY + 1, "{}", snap.len());
        assert!(snap.len() >= TIMELINE_CAPACITY / 2, "{}", snap.len());
        assert_eq!(snap.first().unwrap().seq, 0);
        assert_eq!(snap.last().unwrap().seq, n - 1);
        assert!(snap.windows(2).all(|w| w[0].t_ns < w[1].t_ns));
        // Evenly spread: one stride apart, apart from the latest.
        let stride = snap[1].seq - snap[0].seq;
        assert!(stride.is_power_of_two() && stride >= 32);
        assert!(snap[..snap.len() - 1]
            .windows(2)
            .all(|w| w[1].seq - w[0].seq == stride));
        let st = tl.lock();
        assert!(st.whole.len() <= TIMELINE_CAPACITY);
        assert_eq!(st.recent.len(), RECENT_CAPACITY);
        assert_eq!(st.whole.capacity(), TIMELINE_CAPACITY);
        assert_eq!(st.pushed, n);
    }

    #[test]
    fn small_run_keeps_everything() {
        let tl = Timeline::new(8, 3);
        for i in 0..5 {
            tl.push(sample(i, i * 10));
        }
        let seqs: Vec<u64> = tl.snapshot().iter().map(|s| s.seq).collect();
        assert_eq!(seqs, [0, 1, 2, 3, 4]);
        // Capacity 8: at the 8th sample thin to 0,2,4,6 (stride 2), then keep 8, 10, ...
        for i in 5..12 {
            tl.push(sample(i, i * 10));
        }
        let seqs: Vec<u64> = tl.snapshot().iter().map(|s| s.seq).collect();
        assert_eq!(seqs, [0, 2, 4, 6, 8, 10, 11]);
    }

    fn gpu(util: u32, mem: u64) -> GpuSample {
        GpuSample {
            utilization_pct: Some(util),
            memory_used_bytes: Some(mem),
            ..GpuSample::default()
        }
    }

    /// t = 0, 100, ..., 900; rss = hand-picked; GPU 0 util = seq * 10, mem = 1000 - seq.
    fn hand_built(capacity: usize, recent: usize) -> Timeline {
        let tl = Timeline::new(capacity, recent);
        let rss = [5, 9, 3, 7, 7, 1, 8, 2, 6, 4];
        for (i, r) in rss.iter().enumerate() {
            let i = i as u64;
            tl.push(Sample {
                rss_bytes: Some(*r),
                gpus: vec![gpu(i as u32 * 10, 1000 - i)],
                ..sample(i, i * 100)
            });
        }
        tl
    }

    #[test]
    fn range_queries_exact() {
        // With all samples recent, with none recent, and split between the two parts.
        for (cap, recent) in [(64, 64), (64, 1), (64, 4), (16, 7)] {
            let tl = hand_built(cap, recent);
            let ctx = format!("capacity {cap}, recent {recent}");
            assert_eq!(tl.max_rss_between(0, 900), Some(9), "{ctx}");
            assert_eq!(tl.max_rss_between(200, 500), Some(7), "{ctx}");
            assert_eq!(tl.max_rss_between(250, 450), Some(7), "{ctx}");
            assert_eq!(tl.max_rss_between(500, 500), Some(1), "{ctx}");
            assert_eq!(tl.max_rss_between(600, 900), Some(8), "{ctx}");
            // No sample inside: the nearest before.
            assert_eq!(tl.max_rss_between(510, 590), Some(1), "{ctx}");
            assert_eq!(tl.max_rss_between(950, 990), Some(4), "{ctx}");
            assert_eq!(tl.max_rss_between(150, 199), Some(9), "{ctx}");
            // Window reversed: treated as [t0, t0].
            assert_eq!(tl.max_rss_between(300, 100), Some(7), "{ctx}");
            assert_eq!(tl.max_gpu_mem_between(0, 300, 600), Some(997), "{ctx}");
            assert_eq!(tl.max_gpu_mem_between(0, 850, 860), Some(992), "{ctx}");
            assert_eq!(tl.max_gpu_mem_between(1, 0, 900), None, "{ctx}");
            assert_eq!(tl.mean_gpu_util_between(0, 300, 600), Some(45.0), "{ctx}");
            assert_eq!(tl.mean_gpu_util_between(0, 0, 900), Some(45.0), "{ctx}");
            assert_eq!(tl.mean_gpu_util_between(0, 710, 790), Some(70.0), "{ctx}");
        }
        // (16, 7) never thinned; (4, 2) thins the old part: queries use what is kept.
        let tl = hand_built(4, 2);
        // Kept whole-run: 0, 4 (stride 4 after two thinnings), recent: 8, 9.
        let seqs: Vec<u64> = tl.snapshot().iter().map(|s| s.seq).collect();
        assert_eq!(seqs, [0, 4, 8, 9]);
        assert_eq!(tl.max_rss_between(0, 900), Some(7)); // rss 5, 7, 6, 4
        assert_eq!(tl.max_rss_between(100, 300), Some(5)); // nearest before: seq 0
        assert_eq!(tl.max_rss_between(850, 900), Some(4));
    }

    #[test]
    fn empty_timeline() {
        let tl = Timeline::default();
        assert!(tl.snapshot().is_empty());
        assert_eq!(tl.max_rss_between(0, 100), None);
        assert_eq!(tl.mean_gpu_util_between(0, 0, 100), None);
        let tl = hand_built(64, 64);
        // Before the first sample: nothing before it.
        let tl2 = Timeline::default();
        tl2.push(sample(0, 1000));
        assert_eq!(tl2.max_rss_between(0, 500), None);
        assert_eq!(tl.max_heap_between(0, 900), None);
    }

    #[test]
    fn serde_round_trip() {
        let s = Sample {
            heap_bytes: Some(-5),
            process_cpu_pct: Some(12.5),
            cpu_energy_uj: Some(77),
            gpus: vec![
                gpu(50, 1 << 30),
                GpuSample {
                    power_mw: Some(250_000),
                    energy_mj: Some(3),
                    temperature_c: Some(60),
                    sm_clock_mhz: Some(1400),
                    process_memory_bytes: Some(5),
                    ..GpuSample::default()
                },
            ],
            ..sample(3, 300)
        };
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<Sample>(&json).unwrap(), s);
        let bare = serde_json::to_string(&Sample {
            rss_bytes: None,
            ..sample(0, 0)
        })
        .unwrap();
        assert_eq!(bare, r#"{"t_ns":0,"seq":0}"#);
        assert_eq!(
            serde_json::from_str::<Sample>(&bare).unwrap(),
            Sample {
                rss_bytes: None,
                ..sample(0, 0)
            }
        );
    }

    #[test]
    fn readings_na() {
        let r = Readings::new();
        assert_eq!(Readings::get(&r.rss_bytes), None);
        assert_eq!(Readings::get_i64(&r.heap_bytes), None);
        assert_eq!(r.process_cpu_pct(), None);
        r.set_process_cpu_pct(Some(42.5));
        assert_eq!(r.process_cpu_pct(), Some(42.5));
        assert!(r.gpus().is_empty());
        assert_eq!(r.gpu_status(), SourceStatus::Pending);
        r.set_gpus(SourceStatus::Available(vec![GpuDevice {
            index: 0,
            name: "fake".into(),
            uuid: None,
            memory_total_bytes: None,
            power_limit_mw: None,
        }]));
        assert_eq!(r.gpus().len(), 1);
        r.gpus()[0].publish(&gpu(7, 8));
        assert_eq!(Readings::get(&r.gpus()[0].util_pct), Some(7));
        assert_eq!(Readings::get(&r.gpus()[0].power_mw), None);
        // Set once.
        r.set_gpus(SourceStatus::Off);
        assert_eq!(r.gpus().len(), 1);
    }
}

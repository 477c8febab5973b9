//! GPU time per span (feature `cuda`): a pair of CUDA events recorded on the thread's stream
//! at a chosen span's enter and exit, resolved off the hot path.
//!
//! - **Which spans**: the layer decides each callsite once with the GPU span filter
//!   ([`GpuTimer::choose`] marks the name). While no name is chosen the recorder's switch word
//!   says so and the hot path is what it is without this module.
//! - **Recording** (the program's thread): each thread has a bounded ring of event pairs
//!   ([`Ring`], made on the thread's first chosen entry, events created lazily while the
//!   thread's context is current). An enter takes the pair at the thread's head if it is free,
//!   records its start event and marks it open; the exit records its end event and marks it
//!   ready. A pair not free is an untimed entry, counted. No lock, no allocation once warm.
//! - **Resolving** (spanprof's `spanprof-cuda` thread, and each snapshot): every ready pair
//!   whose end event completed (`cuEventQuery`, which never blocks) is read
//!   (`cuEventElapsedTime`), recorded per span name, call-tree node and stream, and freed for
//!   reuse. The end of the run waits a bounded time for pairs still queued
//!   ([`GpuTimer::settle`]); those left are counted as abandoned.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{
    AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize,
    Ordering::{Acquire, Relaxed, Release},
};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use super::collect::{GpuFigures, Partial};
use super::names::MAX_SPAN_NAMES;
use crate::samplers::cuda::{CallError, Driver, Query};
use crate::PERF_TARGET;

/// Event pairs per thread by default: entries of chosen spans whose GPU work is still queued
/// past this many are not timed (counted).
pub(crate) const DEFAULT_POOL: usize = 256;
/// How long the end of the run waits by default for pairs still queued on the GPU.
pub(crate) const DEFAULT_WAIT: Duration = Duration::from_secs(1);
/// Pairs an enter looks at for a free one, from its thread's head.
const SCAN: usize = 4;
/// How often the `spanprof-cuda` thread looks for completed pairs.
const POLL_EVERY: Duration = Duration::from_millis(10);

/// A pair's states.
const FREE: u8 = 0;
/// Its start event recorded; the span is entered.
const OPEN: u8 = 1;
/// Its end event recorded: the resolver may read it.
const READY: u8 = 2;
/// Left by a thread that ended inside the span: freed and counted as abandoned.
const LOST: u8 = 3;

/// No call-tree node.
pub(crate) const NO_NODE: u32 = u32::MAX;

/// One pair of events and what it times.
#[derive(Debug, Default)]
struct Pair {
    state: AtomicU8,
    /// The events, made on first use (0: not yet).
    start: AtomicUsize,
    end: AtomicUsize,
    name: AtomicU32,
    node: AtomicU32,
    stream: AtomicUsize,
}

/// One thread's pairs: written by that thread, read and freed by the resolver.
#[derive(Debug)]
pub(crate) struct Ring {
    pairs: Box<[Pair]>,
    /// Held by a live thread (a ring whose thread ended is taken by the next new one).
    owned: AtomicBool,
}

/// A thread's side of its ring, in its recorder state: no atomics but the pairs' own.
#[derive(Debug)]
pub(crate) struct GpuLocal {
    ring: Arc<Ring>,
    /// The next pair to try.
    head: usize,
    /// The pairs of this thread's chosen entries in progress, in stack order.
    open: Vec<u32>,
}

impl Drop for GpuLocal {
    fn drop(&mut self) {
        // Entries the thread never exited: their pairs are abandoned.
        for &i in &self.open {
            self.ring.pairs[i as usize].state.store(LOST, Release);
        }
        self.ring.owned.store(false, Release);
    }
}

/// What the resolver recorded.
#[derive(Default)]
struct Results {
    /// Per span name: the GPU time of each timed entry.
    names: HashMap<u32, Partial>,
    /// Per span name: pairs abandoned (never completed, or the driver failed to read them).
    abandoned: HashMap<u32, u64>,
    /// Per call-tree node: timed entries and their GPU time, ns.
    nodes: HashMap<u32, (u64, u64)>,
    /// Per stream: timed entries and their GPU time, ns.
    streams: BTreeMap<usize, (u64, u64)>,
}

/// The GPU timing of one profiler.
pub(crate) struct GpuTimer {
    driver: Driver,
    pool: usize,
    wait: Duration,
    /// The span names chosen, by name index.
    chosen: Box<[AtomicBool]>,
    /// Entries of chosen names not timed (no free pair, no context, a failed record), by name.
    untimed: Box<[AtomicU64]>,
    rings: Mutex<Vec<Arc<Ring>>>,
    /// Taken by whoever resolves (the thread, a snapshot): one at a time.
    results: Mutex<Results>,
    /// Set at the first failure on the recording side, whose reason is kept in `failure`.
    failed: AtomicBool,
    /// The first failure's reason, until the resolver logs it (one line, from spanprof's
    /// thread: the recording thread is inside the subscriber's callback).
    failure: Mutex<Option<String>>,
}

impl std::fmt::Debug for GpuTimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuTimer")
            .field("driver", &self.driver)
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

impl GpuTimer {
    /// A timer on `driver`, with `pool` pairs per thread (at least 1) and `wait` at the end.
    pub(crate) fn new(driver: Driver, pool: usize, wait: Duration) -> Self {
        Self {
            driver,
            pool: pool.clamp(1, u32::MAX as usize),
            wait,
            chosen: (0..MAX_SPAN_NAMES)
                .map(|_| AtomicBool::new(false))
                .collect(),
            untimed: (0..MAX_SPAN_NAMES).map(|_| AtomicU64::new(0)).collect(),
            rings: Mutex::new(Vec::new()),
            results: Mutex::new(Results::default()),
            failed: AtomicBool::new(false),
            failure: Mutex::new(None),
        }
    }

    /// Marks span name `name` as timed on the GPU.
    pub(crate) fn choose(&self, name: u32) {
        if let Some(c) = self.chosen.get(name as usize) {
            c.store(true, Relaxed);
        }
    }

    /// Whether span name `name` is timed on the GPU.
    #[inline]
    pub(crate) fn chosen(&self, name: u32) -> bool {
        self.chosen
            .get(name as usize)
            .is_some_and(|c| c.load(Relaxed))
    }

    /// This thread's side of a ring: a ring left by an ended thread, else a new one.
    #[cold]
    #[inline(never)]
    pub(crate) fn local(&self) -> Box<GpuLocal> {
        let mut rings = lock(&self.rings);
        let ring = rings
            .iter()
            .find(|r| {
                r.owned
                    .compare_exchange(false, true, Acquire, Relaxed)
                    .is_ok()
            })
            .cloned()
            .unwrap_or_else(|| {
                let ring = Arc::new(Ring {
                    pairs: (0..self.pool).map(|_| Pair::default()).collect(),
                    owned: AtomicBool::new(true),
                });
                rings.push(ring.clone());
                ring
            });
        Box::new(GpuLocal {
            ring,
            head: 0,
            open: Vec::with_capacity(self.pool),
        })
    }

    /// A chosen entry begins: records a start event on this thread's stream. Returns whether
    /// the entry is timed (else it was counted untimed).
    pub(crate) fn enter(&self, local: &mut GpuLocal, name: u32, node: u32) -> bool {
        let n = local.ring.pairs.len();
        // The pair at the head, else one of the next few: a pair held by a long entry (an
        // outer span still open) does not stop the others. The head moves past the pair taken.
        let Some(i) = (0..n.min(SCAN))
            .map(|k| (local.head + k) % n)
            .find(|&i| local.ring.pairs[i].state.load(Acquire) == FREE)
        else {
            return self.untimed(name, None);
        };
        local.head = if i + 1 == n { 0 } else { i + 1 };
        let pair = &local.ring.pairs[i];
        let mut start = pair.start.load(Relaxed);
        if start == 0 {
            match self.make_events(pair) {
                Ok(s) => start = s,
                Err(e) => return self.untimed(name, Some(e)),
            }
        }
        let stream = crate::cuda::current_stream();
        if let Err(e) = self.driver.record(start, stream) {
            return self.untimed(name, Some(e));
        }
        pair.name.store(name, Relaxed);
        pair.node.store(node, Relaxed);
        pair.stream.store(stream, Relaxed);
        pair.state.store(OPEN, Relaxed);
        // Within the capacity reserved at the ring's creation: at most one open entry per pair.
        local.open.push(i as u32);
        true
    }

    /// A timed entry ends: `index` is its position among this thread's timed entries in
    /// progress (stack order). Records the end event on the stream of its start.
    pub(crate) fn exit(&self, local: &mut GpuLocal, index: usize) {
        if index >= local.open.len() {
            return;
        }
        let i = local.open.remove(index) as usize;
        let pair = &local.ring.pairs[i];
        let end = pair.end.load(Relaxed);
        match self.driver.record(end, pair.stream.load(Relaxed)) {
            Ok(()) => pair.state.store(READY, Release),
            Err(e) => {
                self.untimed(pair.name.load(Relaxed), Some(e));
                pair.state.store(FREE, Release);
            }
        }
    }

    /// The pair's two events, made in this thread's current context.
    #[cold]
    #[inline(never)]
    fn make_events(&self, pair: &Pair) -> Result<usize, CallError> {
        if !self.driver.has_context() {
            return Err(CallError {
                function: "cuCtxGetCurrent (no current context on this thread)",
                code: 0,
            });
        }
        let start = self.driver.create_event()?;
        let end = match self.driver.create_event() {
            Ok(end) => end,
            Err(e) => {
                self.driver.destroy(start);
                return Err(e);
            }
        };
        pair.start.store(start, Relaxed);
        pair.end.store(end, Relaxed);
        Ok(start)
    }

    /// Counts an untimed entry of `name`; the first failure of the driver is logged once.
    #[cold]
    #[inline(never)]
    fn untimed(&self, name: u32, error: Option<CallError>) -> bool {
        if let Some(c) = self.untimed.get(name as usize) {
            c.fetch_add(1, Relaxed);
        }
        if let Some(e) = error {
            if !self.failed.swap(true, Relaxed) {
                let reason = if e.code == 0 {
                    e.function.to_string()
                } else {
                    format!("{}: {}", e.function, self.driver.error_text(e.code))
                };
                *lock(&self.failure) = Some(reason);
            }
        }
        false
    }

    /// Logs the first failure on the recording side, once (from spanprof's thread or the end
    /// of the run).
    fn log_failure(&self) {
        if !self.failed.load(Relaxed) {
            return;
        }
        if let Some(reason) = lock(&self.failure).take() {
            tracing::warn!(
                target: PERF_TARGET,
                %reason,
                "spanprof: GPU time not recorded for some entries (counted as untimed)"
            );
        }
    }

    /// Resolves every completed pair; returns how many ready pairs are still queued.
    pub(crate) fn poll(&self) -> usize {
        let rings: Vec<Arc<Ring>> = lock(&self.rings).clone();
        let mut results = lock(&self.results);
        let mut queued = 0;
        for ring in &rings {
            for pair in ring.pairs.iter() {
                match pair.state.load(Acquire) {
                    READY => {}
                    LOST => {
                        *results
                            .abandoned
                            .entry(pair.name.load(Relaxed))
                            .or_default() += 1;
                        pair.state.store(FREE, Release);
                        continue;
                    }
                    _ => continue,
                }
                let (start, end) = (pair.start.load(Relaxed), pair.end.load(Relaxed));
                let name = pair.name.load(Relaxed);
                match self.driver.query(end) {
                    Query::NotReady => {
                        queued += 1;
                        continue;
                    }
                    Query::Done => match self.driver.elapsed_ns(start, end) {
                        Ok(ns) => results.add(
                            name,
                            pair.node.load(Relaxed),
                            pair.stream.load(Relaxed),
                            ns,
                        ),
                        Err(_) => *results.abandoned.entry(name).or_default() += 1,
                    },
                    Query::Failed(_) => *results.abandoned.entry(name).or_default() += 1,
                }
                pair.state.store(FREE, Release);
            }
        }
        queued
    }

    /// The end of the run: resolves the pairs queued, waiting up to the timer's bound for the
    /// GPU; those still queued then are counted as abandoned.
    pub(crate) fn settle(&self) {
        self.log_failure();
        let deadline = Instant::now() + self.wait;
        while self.poll() > 0 {
            if Instant::now() >= deadline {
                let rings: Vec<Arc<Ring>> = lock(&self.rings).clone();
                let mut results = lock(&self.results);
                for pair in rings.iter().flat_map(|r| r.pairs.iter()) {
                    if pair.state.load(Acquire) == READY {
                        *results
                            .abandoned
                            .entry(pair.name.load(Relaxed))
                            .or_default() += 1;
                        pair.state.store(FREE, Release);
                    }
                }
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// What is recorded now (after resolving what completed).
    pub(super) fn figures(&self) -> GpuFigures {
        self.poll();
        let results = lock(&self.results);
        let mut out = GpuFigures::default();
        for (name, chosen) in self.chosen.iter().enumerate() {
            if !chosen.load(Relaxed) {
                continue;
            }
            let name = name as u32;
            let stat = results
                .names
                .get(&name)
                .map_or_else(|| Partial::new().stat(), |p| p.clone().stat());
            let untimed = self.untimed[name as usize].load(Relaxed);
            let abandoned = results.abandoned.get(&name).copied().unwrap_or(0);
            out.names.insert(name, (stat, untimed, abandoned));
        }
        out.nodes = results.nodes.clone();
        out.streams = results
            .streams
            .iter()
            .map(|(&s, &(n, ns))| (s, n, ns))
            .collect();
        out
    }

    /// Starts the `spanprof-cuda` thread, which resolves pairs until no `uses` is left.
    pub(crate) fn start_thread(
        timer: &Arc<GpuTimer>,
        uses: &crate::worker::WeakUse,
    ) -> Option<crate::worker::Worker<Resolver>> {
        let job = Resolver(Arc::downgrade(timer));
        crate::worker::Worker::start("spanprof-cuda", job, Instant::now(), Some(uses)).ok()
    }
}

impl Drop for GpuTimer {
    fn drop(&mut self) {
        let rings = self.rings.get_mut().unwrap_or_else(|e| e.into_inner());
        for pair in rings.iter().flat_map(|r| r.pairs.iter()) {
            for event in [pair.start.load(Relaxed), pair.end.load(Relaxed)] {
                if event != 0 {
                    self.driver.destroy(event);
                }
            }
        }
    }
}

impl Results {
    fn add(&mut self, name: u32, node: u32, stream: usize, ns: u64) {
        self.names
            .entry(name)
            .or_insert_with(Partial::new)
            .record(ns);
        if node != NO_NODE {
            let n = self.nodes.entry(node).or_default();
            n.0 += 1;
            n.1 = n.1.saturating_add(ns);
        }
        let s = self.streams.entry(stream).or_default();
        s.0 += 1;
        s.1 = s.1.saturating_add(ns);
    }
}

/// The `spanprof-cuda` thread's job: resolve completed pairs every few ms.
pub(crate) struct Resolver(Weak<GpuTimer>);

impl crate::worker::Job for Resolver {
    fn run(&mut self, now: Instant) -> Option<Instant> {
        let timer = self.0.upgrade()?;
        timer.log_failure();
        crate::worker::silent(|| timer.poll());
        Some(now + POLL_EVERY)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The recorder's side: choosing names, and the pairs of its threads' entries.
impl super::Recorder {
    /// Times the spans chosen later ([`super::Recorder::choose_gpu`]) on the GPU with `timer`.
    pub(crate) fn with_gpu(mut self, timer: Option<Arc<GpuTimer>>) -> Self {
        self.gpu = timer;
        self
    }

    /// The GPU timer, if spans can be timed on the GPU.
    pub(crate) fn gpu(&self) -> Option<&Arc<GpuTimer>> {
        self.gpu.as_ref()
    }

    /// Times span name `name` on the GPU (once per callsite the GPU span filter chooses):
    /// from now on, every entry asks whether its span is.
    #[cold]
    pub(crate) fn choose_gpu(&self, name: u32) {
        if let Some(timer) = &self.gpu {
            timer.choose(name);
            self.switches.set_gpu_timed();
        }
    }

    /// An entry of span name `name` at call-tree node `node` begins: a start event if the
    /// name is timed on the GPU. The driver call's time is spanprof's: out of the enclosing
    /// entry's time. Returns whether the entry is timed.
    #[inline(always)]
    pub(super) fn gpu_enter(&self, local: &mut super::Local, name: u32, node: u16) -> bool {
        match &self.gpu {
            Some(timer) if timer.chosen(name) => self.gpu_start(timer, local, name, node),
            _ => false,
        }
    }

    #[inline(never)]
    fn gpu_start(&self, timer: &GpuTimer, local: &mut super::Local, name: u32, node: u16) -> bool {
        let before = self.clock.raw();
        let g = local.gpu.get_or_insert_with(|| timer.local());
        let node = if self.tree.is_some() {
            u32::from(node)
        } else {
            NO_NODE
        };
        let timed = timer.enter(g, name, node);
        let spent = self.clock.delta_ns(before, self.clock.raw());
        local.bracketed_ns += spent;
        if let Some(parent) = local.stack.last_mut() {
            parent.own_ns += spent;
            parent.own_cpu_ns += spent;
        }
        timed
    }

    /// A timed entry ends (its frame was at `top`, now removed): its end event. Returns the
    /// time the driver call took, ns (spanprof's, out of the enclosing entry's time).
    #[inline(never)]
    pub(super) fn gpu_exit(&self, local: &mut super::Local, top: usize) -> u64 {
        let Some(timer) = &self.gpu else { return 0 };
        let before = self.clock.raw();
        let index = local.stack[..top]
            .iter()
            .filter(|f| f.marked & super::shards::MARK_GPU != 0)
            .count();
        if let Some(g) = local.gpu.as_deref_mut() {
            timer.exit(g, index);
        }
        let spent = self.clock.delta_ns(before, self.clock.raw());
        local.bracketed_ns += spent;
        spent
    }

    /// The end of the run: waits (bounded) for the pairs still queued on the GPU.
    pub(crate) fn settle_gpu(&self) {
        if let Some(timer) = &self.gpu {
            timer.settle();
        }
    }
}

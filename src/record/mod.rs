//! Recording: the state one profiler shares between its layer, its guard and its handles, and
//! the hot path that writes it.
//!
//! The [`Recorder`] owns the span table ([`spans`]), the span names and per-callsite decisions
//! ([`names`]), the per-thread shards ([`shards`]) with their histograms ([`hist`]), resource
//! sums ([`resources`]) and metric cells ([`metrics`], from events' metric fields), and reads the sampler's published readings. The layer
//! (`crate::layer`) turns `tracing` callbacks into calls of its methods; [`collect`] merges
//! everything into a [`Snapshot`](crate::profile::Snapshot). Nothing outside this module sees
//! its fields.
//!
//! Per span: a callsite decision looked up once at creation (no lock, no hashing of names), one
//! slot (in the creating thread's region of the span table, or its lock-free hash table), a raw
//! clock read at new/enter/exit/close, and records into the current thread's shard. No
//! allocation once a thread and a callsite are warm, no system call (at `basic`), no
//! formatting, and no locked instruction for a span that stays on its thread.

mod collect;
#[cfg(feature = "cuda")]
pub(crate) mod gpu;
pub(crate) mod hist;
pub(crate) mod metrics;
pub(crate) mod names;
pub(crate) mod overhead;
pub(crate) mod resources;
pub(crate) mod sampling;
mod shards;
mod spans;
pub(crate) mod tree;

use std::fmt;
use std::sync::atomic::{
    AtomicU64,
    Ordering::{Acquire, Relaxed, Release, SeqCst},
};
use std::sync::Arc;
use std::time::SystemTime;

use tracing_core::field::{Field, Visit};
use tracing_core::span::{Attributes, Record};
use tracing_core::{Event, Metadata};

use crate::alloc::Own;
use crate::clock::Clock;
use crate::export::StepSignal;
use crate::samplers::{Readings, Timeline};
use crate::switches::{Resources, Switches};
use metrics::{EventSites, MetricVisitor, NO_SPAN};
use names::{
    throughput_fields, Decision, Kind, NameInfo, Names, FIELD_BYTES, FIELD_FLOPS, FIELD_ITEMS,
};
use overhead::Costs;
use resources::{
    entry_figures, instance_figures_into, EntryFigures, EntryMark, InstanceFigures, MarkCell,
};
use shards::{bump, with_local, Frame, Local, NameStats, Shards, MARK_READINGS};
use spans::{Slot, SlotIn};
use spans::{
    SpanTable, ENTRIES_MANY, ENTRIES_NONE, ENTRIES_ONE, FLAG_ERRORED, FLAG_MARKED, FLAG_SHARED,
    FLAG_STEP,
};

/// Recorder instances are even, from 2: a thread's state keeps its instance with the low bit
/// free to mark it in use (`shards::with_local`).
static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(2);

/// What a snapshot reports about how the profile was configured.
#[derive(Debug, Clone)]
pub(crate) struct RunSettings {
    /// The preset's name.
    pub(crate) preset: &'static str,
    /// The span filter's directives, if any.
    pub(crate) filter: Option<String>,
    /// The resources the sampler thread was started for (none if it is not running).
    pub(crate) sampled: Resources,
    /// Sampling interval, ms.
    pub(crate) interval_ms: u64,
    /// Grid carbon intensity, g/kWh.
    pub(crate) grid_g_per_kwh: Option<f64>,
    /// Whether the call tree is recorded.
    pub(crate) tree: bool,
}

/// The recording state of one profiler.
pub(crate) struct Recorder {
    /// Tells this profiler's thread-local state from another's.
    id: u64,
    switches: Switches,
    /// The resources that can be switched on: those asked for at build time that this process
    /// can record (the counting allocator installed, a CPU clock).
    available: Resources,
    clock: Clock,
    /// Open spans, with the readings taken when they opened kept beside their slots.
    table: Own<SpanTable<MarkCell>>,
    names: Own<Names>,
    /// Event callsites' metric fields, and the metrics known.
    events: Own<EventSites>,
    shards: Own<Arc<Shards>>,
    start_raw: u64,
    start_wall: SystemTime,
    dropped_table_full: AtomicU64,
    dropped_too_many_names: AtomicU64,
    /// Latest resource readings, published by the sampler thread.
    readings: Arc<Readings>,
    timeline: Arc<Timeline>,
    settings: RunSettings,
    /// The call tree, when it is recorded.
    tree: Own<Option<tree::Tree>>,
    /// Span names the back-off samples 1 in N (`sampling`).
    sampling: sampling::Sampling,
    /// spanprof's own costs (`record/overhead.rs`).
    costs: Costs,
    /// Whether callbacks are timed whole, 1 in `overhead::PROBE_EVERY` (not with a mock clock,
    /// which measures nothing, nor for the calibration's recorder).
    probing: bool,
    /// Called inside the brackets of the resource readings: tests make them take time.
    #[cfg(test)]
    reading_hook: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// The step span whose closes drive the export cadence, if it counts steps.
    steps: Option<Arc<StepSignal>>,
    /// GPU time per span from CUDA events, with a CUDA driver (feature `cuda`).
    #[cfg(feature = "cuda")]
    gpu: Option<Arc<gpu::GpuTimer>>,
}

impl fmt::Debug for Recorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recorder")
            .field("id", &self.id)
            .field("switches", &self.switches)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Recorder {
    /// A recorder; with `recording` false it records nothing, ever. `resources` are those asked
    /// for; the ones this process cannot record (heap without the counting allocator, thread CPU
    /// time where there is no thread CPU clock) are left out.
    /// `start_raw` is the clock's reading at time 0 of the profile.
    pub(crate) fn new(
        clock: Clock,
        start_raw: u64,
        recording: bool,
        resources: Resources,
        readings: Arc<Readings>,
        timeline: Arc<Timeline>,
        settings: RunSettings,
    ) -> Self {
        // A mock clock measures nothing: no costs (and no overhead figures) then.
        let costs = if recording && !clock.is_mock() {
            Costs::calibrated()
        } else {
            Costs::default()
        };
        Self::build(
            clock, start_raw, recording, resources, readings, timeline, settings, costs,
        )
    }

    /// [`Recorder::new`] with the given costs (calibration builds one with none).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn build(
        clock: Clock,
        start_raw: u64,
        recording: bool,
        resources: Resources,
        readings: Arc<Readings>,
        timeline: Arc<Timeline>,
        settings: RunSettings,
        costs: Costs,
    ) -> Self {
        let mut available = resources;
        if !crate::alloc::installed() {
            available = available.without(Resources::HEAP);
        }
        if !crate::samplers::cpu::SUPPORTED {
            available = available.without(Resources::CPU);
        }
        let probing = recording && !clock.is_mock() && costs.span_ns > 0.0;
        Self {
            id: NEXT_INSTANCE.fetch_add(2, Relaxed),
            switches: Switches::new(recording, available),
            available,
            start_raw,
            start_wall: SystemTime::now(),
            clock,
            table: Own::make(SpanTable::new),
            names: Own::make(Names::new),
            events: Own::make(EventSites::new),
            shards: Own::make(|| Arc::new(Shards::default())),
            dropped_table_full: AtomicU64::new(0),
            dropped_too_many_names: AtomicU64::new(0),
            readings,
            timeline,
            tree: Own::make(|| settings.tree.then(tree::Tree::new)),
            sampling: sampling::Sampling::new(),
            settings,
            probing,
            costs,
            #[cfg(test)]
            reading_hook: std::sync::OnceLock::new(),
            steps: None,
            #[cfg(feature = "cuda")]
            gpu: None,
        }
    }

    /// Resource readings just taken (tests: make them take time).
    #[inline(always)]
    fn readings_taken(&self) {
        #[cfg(test)]
        if let Some(hook) = self.reading_hook.get() {
            hook();
        }
    }

    /// Counts the closes of the spans named `steps.name()` for the export cadence (before any
    /// span is recorded).
    pub(crate) fn with_steps(mut self, steps: Option<Arc<StepSignal>>) -> Self {
        self.steps = steps;
        self
    }

    /// A step span closed.
    #[cold]
    #[inline(never)]
    fn step_closed(&self) {
        if let Some(steps) = &self.steps {
            steps.closed();
        }
    }

    /// Stops recording new spans; spans already open are still completed.
    pub(crate) fn stop(&self) {
        self.switches.stop_recording();
    }

    /// Switches resources on or off while the program runs; only those available at build time
    /// can be on. Returns the set now in effect.
    pub(crate) fn set_resources(&self, resources: Resources) -> Resources {
        let effective = resources & self.available;
        self.switches.set_resources(effective);
        effective
    }

    /// The resources recorded now.
    #[inline(always)]
    pub(crate) fn resources(&self) -> Resources {
        self.switches.get().resources()
    }

    /// Nanoseconds since the profiler started: the timeline's time base.
    #[inline]
    fn t_ns(&self, raw: u64) -> u64 {
        self.clock.delta_ns(self.start_raw, raw)
    }

    #[inline(always)]
    fn local<R>(&self, f: impl FnOnce(&mut Local) -> R) -> Option<R> {
        with_local(self.id, &self.shards, f)
    }

    /// Runs `f` with this thread's stats of `name` (`local`: this thread's state); while the
    /// thread is being torn down (its thread-local state gone), with the stats of a shared
    /// shard instead, so nothing is lost.
    #[inline(always)]
    fn in_stats(&self, local: Option<&mut Local>, name: u32, f: impl FnOnce(&NameStats)) {
        match local {
            Some(local) => f(local.stats(name)),
            None => self.shards.with_orphan(name, f),
        }
    }

    /// The cached decision for a callsite, if it was decided.
    #[inline(always)]
    pub(crate) fn cached(&self, meta: &'static Metadata<'static>) -> Option<Decision> {
        self.names.cached(meta)
    }

    /// Decides a callsite the span filter never enables: skipped for good.
    #[cold]
    pub(crate) fn skip(&self, meta: &'static Metadata<'static>) -> Decision {
        self.names.remember(meta, Decision::SKIP);
        Decision::SKIP
    }

    /// Decides, once per callsite, under which name its spans are recorded. `dynamic`: the
    /// span filter must be asked again for each span. Past [`MAX_SPAN_NAMES`] names, the
    /// callsite's spans are dropped, each counted ([`Recorder::dropped`]).
    ///
    /// [`MAX_SPAN_NAMES`]: names::MAX_SPAN_NAMES
    #[cold]
    pub(crate) fn decide(&self, meta: &'static Metadata<'static>, dynamic: bool) -> Decision {
        let decision = match self.names.intern(meta.name(), meta.target()) {
            Some(name) => {
                let step = self.steps.as_ref().is_some_and(|s| s.name() == meta.name());
                Decision::record(name, throughput_fields(meta), dynamic, step)
            }
            None => Decision::DROP,
        };
        self.names.remember(meta, decision);
        // A name sampled before, or while, its callsite was remembered (`set_sampling`).
        std::sync::atomic::fence(SeqCst);
        if !decision.is_skip() && self.ever_sampled(decision.name()) {
            self.names.mark_sampled(decision.name());
            return decision.sampled();
        }
        decision
    }

    /// A span of a callsite decided [`Decision::DROP`] was created: counted as dropped.
    #[cold]
    pub(crate) fn dropped(&self) {
        self.dropped_too_many_names.fetch_add(1, Relaxed);
    }

    /// Whether new spans are recorded.
    #[inline(always)]
    pub(crate) fn recording(&self) -> bool {
        self.switches.get().recording()
    }

    /// Opens a span the decision records. Returns whether it is recorded (not when the span
    /// table is full, nor when its name is sampled and this span left out: `sampling`).
    #[inline(always)]
    pub(crate) fn open(&self, id: u64, decision: Decision, attrs: &Attributes<'_>) -> bool {
        let name = decision.name();
        let every = self.sampling.every(name);
        if every > 1 && self.sample_out(name, every, attrs) {
            return false;
        }
        self.open_unsampled(id, decision, attrs)
    }

    /// [`Recorder::open`] for a decision of a name never sampled
    /// ([`Decision::is_static_record`]): no sampling to ask.
    #[inline(always)]
    pub(crate) fn open_unsampled(
        &self,
        id: u64,
        decision: Decision,
        attrs: &Attributes<'_>,
    ) -> bool {
        let now = self.clock.raw();
        // One thread-local lookup: the frame stack, the region, the stats.
        match self.local(|local| self.open_in(local, id, decision, attrs, now)) {
            Some(recorded) => recorded,
            None => self.open_orphan(id, decision, attrs, now),
        }
    }

    /// [`Recorder::open`] on a thread being torn down: no stack, no region, the shared orphan
    /// shard.
    #[cold]
    #[inline(never)]
    fn open_orphan(&self, id: u64, decision: Decision, attrs: &Attributes<'_>, now: u64) -> bool {
        let resources = self.switches.get().resources();
        let node = self.tree_node(decision.name(), attrs, None);
        // A marked slot's init, as `open_marked`'s (written out: a helper shared by the two
        // cost `detailed` 8 instructions per span there, `scripts/instructions.sh`).
        let inserted = self.table.insert(id, |s| {
            self.init_slot(s, decision, node, 0, now);
            if resources.instances() {
                s.flags.store(FLAG_MARKED | decision.step_flag(), Relaxed);
                s.with_mark(|m| m.update(&self.readings, self.t_ns(now), resources));
            }
        });
        if !inserted {
            return self.table_full();
        }
        self.shards.with_orphan(decision.name(), |stats| {
            self.opened(id, stats, decision, attrs)
        });
        true
    }

    #[inline(always)]
    fn open_in(
        &self,
        local: &mut Local,
        id: u64,
        decision: Decision,
        attrs: &Attributes<'_>,
        now: u64,
    ) -> bool {
        let resources = self.switches.get().resources();
        if resources.instances() {
            return self.open_marked(local, id, decision, attrs, now, resources);
        }
        let mut view = local.open_view(decision.name());
        let (node, owner) = (
            self.tree_node(decision.name(), attrs, Some(&view)),
            view.token,
        );
        let init = move |s: SlotIn<'_, MarkCell>| self.init_slot(s, decision, node, owner, now);
        // This thread's region first (no locked instruction); any span the region cannot
        // take in the table.
        let owned = view
            .region(|token| self.table.claim_region(id, token))
            .is_some_and(|claim| self.table.insert_owned(claim, id, init));
        if !owned && !self.table.insert(id, init) {
            return self.table_full();
        }
        self.opened(id, view.stats, decision, attrs);
        true
    }

    /// [`Recorder::open_in`] with readings at the open (`resources`), kept beside the span's
    /// slot (in this thread's region, or the table).
    #[inline(never)]
    fn open_marked(
        &self,
        local: &mut Local,
        id: u64,
        decision: Decision,
        attrs: &Attributes<'_>,
        now: u64,
        resources: Resources,
    ) -> bool {
        let mut view = local.open_view(decision.name());
        let (node, owner) = (
            self.tree_node(decision.name(), attrs, Some(&view)),
            view.token,
        );
        let init = |s: SlotIn<'_, MarkCell>| {
            self.init_slot(s, decision, node, owner, now);
            s.flags.store(FLAG_MARKED | decision.step_flag(), Relaxed);
            s.with_mark(|m| m.update(&self.readings, self.t_ns(now), resources));
        };
        // Region first, then the table, as in `open_in` (written out in both: one inlined
        // helper for the two cost `basic` 9 instructions per span, `scripts/instructions.sh`).
        let owned = view
            .region(|token| self.table.claim_region(id, token))
            .is_some_and(|claim| self.table.insert_owned(claim, id, init));
        if !owned && !self.table.insert(id, init) {
            return self.table_full();
        }
        self.opened(id, view.stats, decision, attrs);
        true
    }

    /// A new slot's fields.
    #[inline(always)]
    fn init_slot(
        &self,
        s: SlotIn<'_, MarkCell>,
        decision: Decision,
        node: u16,
        owner: u32,
        now: u64,
    ) {
        // MAX_SPAN_NAMES fits u16 (asserted in `names`).
        s.name.store(decision.name() as u16, Relaxed);
        s.entries.store(ENTRIES_NONE, Relaxed);
        s.owner.store(owner, Relaxed);
        s.created.store(now, Relaxed);
        s.busy.store(0, Relaxed);
        s.self_ns.store(0, Relaxed);
        s.shared_busy.store(0, Relaxed);
        s.shared_self.store(0, Relaxed);
        s.flags.store(decision.step_flag(), Relaxed);
        s.node.store(node, Relaxed);
    }

    /// The span table had no slot for a new span: counted as dropped.
    #[cold]
    #[inline(never)]
    fn table_full(&self) -> bool {
        self.dropped_table_full.fetch_add(1, Relaxed);
        false
    }

    /// A span was opened (its slot made): the name's count and throughput fields, in this
    /// thread's stats of the name (or the orphan shard's).
    #[inline(always)]
    fn opened(&self, id: u64, stats: &NameStats, decision: Decision, attrs: &Attributes<'_>) {
        bump(&stats.opened, 1);
        let fields = decision.fields();
        if fields != 0 {
            self.opened_throughput(id, stats, fields, attrs);
        }
    }

    /// The throughput fields of a new span: added to its name's sums, and kept beside its
    /// slot, so that a value recorded later replaces this one in the sums (tracing's
    /// `Span::record` replaces a field's value: the sums hold each span's last value).
    #[cold]
    #[inline(never)]
    fn opened_throughput(&self, id: u64, stats: &NameStats, fields: u32, attrs: &Attributes<'_>) {
        let record = |last: Option<&[AtomicU64; 3]>| {
            for value in last.into_iter().flatten() {
                value.store(0, Relaxed);
            }
            attrs.record(&mut Throughput {
                stats,
                fields,
                last,
            });
        };
        // The slot was just made, so it is found; were it not, the values are added as they are.
        if self
            .table
            .with(id, |slot| record(slot.mark().map(|m| &m.throughput)))
            .is_none()
        {
            record(None);
        }
    }

    /// Records the throughput fields of values recorded on span `id`: each replaces the span's
    /// previous value of the field in its name's sums. Returns whether the span is recorded.
    pub(crate) fn record_fields(&self, id: u64, values: &Record<'_>) -> bool {
        self.table
            .with(id, |slot| self.record_fields_of(&slot, values))
            .is_some()
    }

    fn record_fields_of(&self, slot: &SlotIn<'_, MarkCell>, values: &Record<'_>) {
        let name = u32::from(slot.name.load(Relaxed));
        let record = |stats: &NameStats| {
            values.record(&mut Throughput {
                stats,
                fields: FIELD_ITEMS | FIELD_BYTES | FIELD_FLOPS,
                last: slot.mark().map(|m| &m.throughput),
            });
        };
        // On a thread being torn down: the orphan shard's stats, as for a close.
        if self.local(|local| record(local.stats(name))).is_none() {
            self.shards.with_orphan(name, record);
        }
    }

    /// Span `id` was entered on this thread. Returns whether the span is recorded.
    #[inline(always)]
    pub(crate) fn enter(&self, id: u64) -> bool {
        // `move` (here, in `exit` and in the layer): captures as values, so that the compiler
        // passes them in registers and the layer's callback tail-calls this closure.
        self.table
            .with(id, move |slot| self.enter_slot(id, &slot))
            .is_some()
    }

    #[inline(always)]
    fn enter_slot(&self, id: u64, slot: &Slot) {
        self.local(|local| {
            // Entered on this thread already: a re-entry, counted once with its outermost entry.
            // (Other threads inside the same span have frames of their own.)
            if let Some(frame) = local.stack.iter_mut().rev().find(|f| f.id == id) {
                frame.reentries += 1;
                return;
            }
            let switched = self.switches.get();
            let name = u32::from(slot.name.load(Relaxed));
            let node = self.entry_node(local, slot, name);
            // Readings per entry, or spans timed on the GPU: one test for both.
            if switched.entry_work() {
                return self.enter_marked(local, id, name, node, switched.resources());
            }
            local.push(Frame {
                id,
                name,
                start: self.clock.raw(),
                child_ns: 0,
                own_ns: 0,
                own_cpu_ns: 0,
                v_start: 0,
                reentries: 0,
                node,
                marked: 0,
            });
        });
    }

    /// [`Recorder::enter_slot`] with per-entry readings on (timed in the thread's virtual
    /// time), or spans timed on the GPU (feature `cuda`).
    #[inline(never)]
    fn enter_marked(&self, local: &mut Local, id: u64, name: u32, node: u16, res: Resources) {
        #[allow(unused_mut)]
        let mut marked = 0;
        #[cfg(feature = "cuda")]
        if self.gpu_enter(local, name, node) {
            marked |= shards::MARK_GPU;
        }
        let (start, v_start) = if res.entries() {
            let (start, readings) = self.enter_marks(local, name, res);
            if readings {
                marked |= MARK_READINGS;
            }
            (start, overhead::virtual_ns(&self.clock, start))
        } else {
            (self.clock.raw(), 0)
        };
        local.push(Frame {
            id,
            name,
            start,
            child_ns: 0,
            own_ns: 0,
            own_cpu_ns: 0,
            v_start,
            reentries: 0,
            node,
            marked,
        });
    }

    /// Takes the resource readings of an enter (the CPU clock only when the name's entries are
    /// long or this one is sampled: `overhead`). The CPU clock's read (a system call) is
    /// bracketed by the cheap clock: its time is spanprof's, kept out of the enclosing frame;
    /// the heap counters alone (a few thread-local loads) are not worth a bracket. Returns the
    /// entry's start and whether it is marked.
    #[inline(always)]
    fn enter_marks(&self, local: &mut Local, name: u32, resources: Resources) -> (u64, bool) {
        let cpu = resources.contains(Resources::CPU) && self.cpu_due(local, name);
        let heap = resources.contains(Resources::HEAP);
        if !cpu {
            if heap {
                local.push_mark(EntryMark::read_some(false, true));
            }
            return (self.clock.raw(), heap);
        }
        let before = self.clock.raw();
        local.push_mark(EntryMark::read_some(cpu, heap));
        let marked = true;
        self.readings_taken();
        let now = self.clock.raw();
        // A wait beyond spanprof's own time is shared out over the spans: see `overhead`.
        let spent = self.clock.delta_ns(before, now);
        let (own, wait) = self.costs.split(spent, cpu);
        overhead::bracket(&self.clock, before, now, wait);
        if let Some(mark) = local.marks.last_mut() {
            mark.bracket_ns = own;
        }
        local.stats(name).cost.spent(own);
        local.bracketed_ns += spent;
        if let Some(parent) = local.stack.last_mut() {
            parent.own_ns += spent;
            parent.own_cpu_ns += own;
        }
        (now, marked)
    }

    /// Whether this enter of `name` reads the CPU clock (`overhead`): long names always; short
    /// ones 1 entry in `CPU_SAMPLE_EVERY`, or where reads switch threads out,
    /// [`Recorder::cpu_due_after_gap`].
    #[inline(always)]
    fn cpu_due(&self, local: &mut Local, name: u32) -> bool {
        let gap = self.costs.read_gap_ns;
        if gap == 0 {
            return local.stats(name).cost.read_cpu(self.costs.long_ns);
        }
        self.cpu_due_after_gap(local, name, gap)
    }

    /// [`Recorder::cpu_due`] where reads switch threads out: long names always; of the other
    /// names' entries, once `gap_ns` of the thread's time passed since its last read (at an
    /// enter or an exit), the one a draw of 0 to 31 entries later, whatever its name (the
    /// first one after the gap would be, most often, the one after the longest span without
    /// reads: the same names every time).
    #[inline(never)]
    fn cpu_due_after_gap(&self, local: &mut Local, name: u32, gap_ns: u64) -> bool {
        let now = self.clock.raw();
        let long = local.stats(name).cost.mean_ns() >= self.costs.long_ns;
        let read = long
            || ((local.last_cpu_read == 0
                || self.clock.delta_ns(local.last_cpu_read, now) >= gap_ns)
                && match local.gap_skip {
                    0 => true,
                    left => {
                        local.gap_skip = left - 1;
                        false
                    }
                });
        if read {
            local.last_cpu_read = now;
            if !long {
                // The next gap's draw (the raw clock's bits, hashed).
                local.gap_skip = (now.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 59) as u32;
            }
        } else {
            local.stats(name).cost.skip_cpu();
        }
        read
    }

    /// Span `id` was exited on this thread. Returns whether the span is recorded.
    #[inline(always)]
    pub(crate) fn exit(&self, id: u64) -> bool {
        self.table
            .with(id, move |slot| self.exit_slot(id, &slot))
            .is_some()
    }

    #[inline(always)]
    fn exit_slot(&self, id: u64, slot: &Slot) {
        if self.local(|local| self.exit_in(local, id, slot)).is_none() {
            self.exit_torn_down(id, slot);
        }
    }

    /// [`Recorder::exit_slot`] on a thread whose state is gone (torn down while inside spans:
    /// a span entered in a `thread_local!` dropped after spanprof's): the parked state, if it
    /// holds the span's frame.
    #[cold]
    #[inline(never)]
    fn exit_torn_down(&self, id: u64, slot: &Slot) {
        self.shards
            .with_parked(|local| self.exit_in(local, id, slot));
    }

    /// [`Recorder::exit_slot`] with this thread's state.
    #[inline(always)]
    fn exit_in(&self, local: &mut Local, id: u64, slot: &Slot) {
        {
            // Fast path: the span on top of this thread's stack (no search).
            let (top, frame) = match local.stack.split_last() {
                Some((frame, below)) if frame.id == id && frame.reentries == 0 => {
                    (below.len(), frame)
                }
                _ => match find_frame(local, id) {
                    Some(pos) => (pos, &local.stack[pos]),
                    None => return,
                },
            };
            let now = self.clock.raw();
            if frame.v_start != 0 || frame.marked != 0 {
                return self.exit_marked(local, slot, top, now);
            }
            // The time of spanprof's readings inside the frame (its children's) is not the
            // span's.
            let busy = self
                .clock
                .delta_ns(frame.start, now)
                .saturating_sub(frame.own_ns);
            let (name, node, own_ns, child_ns) =
                (frame.name, frame.node, frame.own_ns, frame.child_ns);
            let self_ns = busy.saturating_sub(child_ns);
            if child_ns > busy {
                self.overshot(local, node, child_ns - busy);
            }
            local.remove(top);
            self.exited(local, slot, top, name, node, busy, self_ns, own_ns);
        }
    }

    /// What every exit records once its busy and self time are known: the parent frame's child
    /// time (`top`: the frame's position, now removed), the node's call, the name's running
    /// mean, and the entry.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn exited(
        &self,
        local: &mut Local,
        slot: &Slot,
        top: usize,
        name: u32,
        node: u16,
        busy: u64,
        self_ns: u64,
        own_ns: u64,
    ) {
        if let Some(parent) = top.checked_sub(1).and_then(|p| local.stack.get_mut(p)) {
            parent.child_ns += busy;
            parent.own_ns += own_ns;
        }
        self.tree_entry(local, node, busy, self_ns, top == 0);
        let owner = local.token;
        let stats = local.stats(name);
        // The name's running mean: which entries get the CPU clock, and what a span left
        // out by sampling adds to its parent's child time.
        stats.cost.completed(busy);
        self.complete_entry(owner, stats, slot, name, busy, self_ns);
    }

    /// [`Recorder::exit_slot`] for a frame entered with readings on (`top`: its position):
    /// timed in the thread's virtual time, with the readings at its exit.
    #[inline(never)]
    fn exit_marked(&self, local: &mut Local, slot: &Slot, top: usize, now: u64) {
        let Some(frame) = local.remove(top) else {
            return;
        };
        // Entered with readings on: timed in the thread's virtual time (`overhead`).
        let v_now = (frame.v_start != 0).then(|| overhead::virtual_ns(&self.clock, now));
        #[allow(unused_mut)]
        let (figures, mut spent, own) = if frame.marked & MARK_READINGS != 0 {
            self.exit_marks(local, top, &frame, now)
        } else {
            (None, 0, 0)
        };
        #[cfg(feature = "cuda")]
        if frame.marked & shards::MARK_GPU != 0 {
            spent += self.gpu_exit(local, top);
        }
        if let Some(parent) = top.checked_sub(1).and_then(|p| local.stack.get_mut(p)) {
            parent.own_cpu_ns += frame.own_cpu_ns + own;
        }
        // The time of spanprof's readings inside the frame (its children's) is not the
        // span's; the waits in them are shared out over every span: see `overhead`.
        let busy = match v_now {
            Some(v_now) => v_now.saturating_sub(frame.v_start),
            None => self
                .clock
                .delta_ns(frame.start, now)
                .saturating_sub(frame.own_ns),
        };
        let self_ns = busy.saturating_sub(frame.child_ns);
        if frame.child_ns > busy {
            self.overshot(local, frame.node, frame.child_ns - busy);
        }
        if let Some(mut figures) = figures {
            // One thread runs an entry: its CPU time is at most its busy time. Over it is what
            // the readings' subtraction left (a read slower than its bracket's cap, a
            // migration between the two reads).
            figures.cpu = figures.cpu.map(|cpu| cpu.min(busy));
            local.stats(frame.name).res().add_entry(&figures, busy);
        }
        self.exited(
            local,
            slot,
            top,
            frame.name,
            frame.node,
            busy,
            self_ns,
            frame.own_ns + spent,
        );
    }

    /// Takes the resource readings of a marked frame's exit: returns its figures, the time
    /// they took (measured from `now`, the exit's clock reading) and spanprof's own part of it
    /// (`Costs::split`).
    fn exit_marks(
        &self,
        local: &mut Local,
        top: usize,
        frame: &Frame,
        now: u64,
    ) -> (Option<EntryFigures>, u64, u64) {
        // This frame's mark: one per marked frame below it, in stack order.
        let index = local.stack[..top]
            .iter()
            .filter(|f| f.marked & MARK_READINGS != 0)
            .count();
        let mut figures = None;
        let mut enter_bracket = None;
        if index < local.marks.len() {
            let at_enter = local.marks.remove(index);
            let at_exit = at_enter.read_again();
            let f = entry_figures(&at_enter, &at_exit);
            if f.cpu.is_some() {
                enter_bracket = Some(at_enter.bracket_ns);
            }
            if let (Some(parent), Some(heap)) = (
                index.checked_sub(1).and_then(|p| local.marks.get_mut(p)),
                f.heap,
            ) {
                parent.child_net += heap.net_bytes();
            }
            figures = Some(f);
        }
        let Some(enter_bracket) = enter_bracket else {
            // The heap counters alone: no bracket (see `enter_marks`).
            return (figures, 0, 0);
        };
        self.readings_taken();
        // An exit's read restarts the thread's gap too (`cpu_due`).
        local.last_cpu_read = now;
        let end = self.clock.raw();
        let spent = self.clock.delta_ns(now, end);
        let (own, wait) = self.costs.split(spent, true);
        overhead::bracket(&self.clock, now, end, wait);
        local.stats(frame.name).cost.spent(own);
        local.bracketed_ns += spent;
        if let Some(f) = figures.as_mut() {
            // The CPU clock ran through the children's readings, and through the part of each
            // of this entry's two brackets on the far side of its read: about half of both, as
            // measured (a read's cost varies with the caches; a calibrated one, taken hot,
            // reads under it, and short entries came out over 100% CPU). Not the span's; nor
            // are the waits in them, which the CPU clock did not count.
            let own_cpu = frame.own_cpu_ns + (enter_bracket + own) / 2;
            f.cpu = f.cpu.map(|c| c.saturating_sub(own_cpu));
        }
        (figures, spent, own)
    }

    /// Adds a completed entry to its span. The owner's (creating thread's) first entry is only
    /// added to the span's sums: if it stays the span's only one, close records it once as both
    /// entry and instance. The owner's next entries, and the first one with them, go to the entry
    /// histograms, as does every entry completed on another thread (at its exit).
    #[inline(always)]
    fn complete_entry(
        &self,
        owner: u32,
        stats: &NameStats,
        slot: &Slot,
        name: u32,
        busy: u64,
        self_ns: u64,
    ) {
        bump(&stats.entries, 1);
        if owner != 0 && slot.owner.load(Relaxed) == owner {
            // Only this thread writes `entries`, `busy` and `self_ns`: plain loads and stores.
            match slot.entries.load(Relaxed) {
                ENTRIES_NONE => {
                    bump(&slot.busy, busy);
                    bump(&slot.self_ns, self_ns);
                    slot.entries.store(ENTRIES_ONE, Release);
                    return;
                }
                ENTRIES_ONE => {
                    // Marked first, so that a snapshot stops counting it as pending.
                    slot.entries.store(ENTRIES_MANY, Release);
                    self.record(stats, name, Kind::EntryBusy, slot.busy.load(Relaxed));
                    self.record(stats, name, Kind::EntrySelf, slot.self_ns.load(Relaxed));
                }
                _ => {}
            }
            bump(&slot.busy, busy);
            bump(&slot.self_ns, self_ns);
        } else {
            slot.shared_busy.fetch_add(busy, Relaxed);
            slot.shared_self.fetch_add(self_ns, Relaxed);
            if slot.flags.load(Relaxed) & FLAG_SHARED == 0 {
                slot.flags.fetch_or(FLAG_SHARED, Release);
            }
        }
        self.record(stats, name, Kind::EntryBusy, busy);
        self.record(stats, name, Kind::EntrySelf, self_ns);
    }

    /// Span `id` closed. Returns whether the span was recorded.
    #[inline(always)]
    pub(crate) fn close(&self, id: u64) -> bool {
        self.table.with(id, |slot| self.close_slot(slot)).is_some()
    }

    #[inline(always)]
    fn close_slot(&self, slot: SlotIn<'_, MarkCell>) {
        let now = self.clock.raw();
        let closed = Closed::read(&slot, &self.clock, now);
        if closed.flags & FLAG_MARKED != 0 {
            return self.close_marked(slot, now);
        }
        self.table.remove(slot);
        self.closed(&closed, None);
    }

    /// [`Recorder::close_slot`] for a span with readings at its open: the instance's resource
    /// figures, from its open mark (kept beside the slot until the slot is freed) and the
    /// readings now, computed into this thread's scratch figures (they are large: no copy).
    #[inline(never)]
    fn close_marked(&self, slot: SlotIn<'_, MarkCell>, now: u64) {
        let closed = &Closed::read(&slot, &self.clock, now);
        let t_ns = self.t_ns(now);
        let done = self.local(|local| {
            let mut figures = local.take_scratch();
            let found = slot
                .with_mark(|open| {
                    instance_figures_into(open, &self.readings, t_ns, &self.timeline, &mut figures)
                })
                .is_some();
            self.table.remove(slot);
            // What the span's opening thread wrote (its `opened` count) is visible to a
            // snapshot that sees this close: see `collect`.
            std::sync::atomic::fence(Release);
            self.close_in(Some(&mut *local), closed, found.then_some(&*figures));
            local.scratch = Some(figures);
        });
        match done {
            Some(()) if closed.flags & FLAG_STEP != 0 => self.step_closed(),
            Some(()) => {}
            // A thread being torn down: the figures on its stack, the orphan shard.
            None => {
                let mut figures = InstanceFigures::default();
                let found = slot
                    .with_mark(|open| {
                        instance_figures_into(
                            open,
                            &self.readings,
                            t_ns,
                            &self.timeline,
                            &mut figures,
                        )
                    })
                    .is_some();
                self.table.remove(slot);
                self.closed(closed, found.then_some(&figures));
            }
        }
    }

    /// Records a span whose slot was freed.
    #[inline(always)]
    fn closed(&self, closed: &Closed, figures: Option<&InstanceFigures>) {
        // What the span's opening thread wrote (its `opened` count) is visible to a snapshot
        // that sees this close: see `collect`.
        std::sync::atomic::fence(Release);
        // One thread-local lookup for the name's and the node's stats.
        if self
            .local(|local| self.close_in(Some(local), closed, figures))
            .is_none()
        {
            self.close_orphan(*closed, figures);
        }
        if closed.flags & FLAG_STEP != 0 {
            self.step_closed();
        }
    }

    /// [`Recorder::close_in`] on a thread being torn down: the shared orphan shard.
    #[cold]
    #[inline(never)]
    fn close_orphan(&self, c: Closed, figures: Option<&InstanceFigures>) {
        self.close_in(None, &c, figures);
    }

    /// Records a closed span in this thread's stats (`local`), or the orphan shard's.
    #[inline(always)]
    fn close_in(&self, local: Option<&mut Local>, c: &Closed, figures: Option<&InstanceFigures>) {
        self.close_instance(local, c, figures);
    }

    /// [`Recorder::close_in`]: the instance per name; its count in its node.
    #[inline(always)]
    fn close_instance(
        &self,
        mut local: Option<&mut Local>,
        c: &Closed,
        figures: Option<&InstanceFigures>,
    ) {
        let name = c.name;
        self.in_stats(local.as_deref_mut(), name, |stats| {
            c.each(|kind, value| self.record(stats, name, kind, value));
            self.record(stats, name, Kind::Wall, c.wall);
            if let Some((busy, self_ns)) = c.first {
                self.record(stats, name, Kind::EntryBusy, busy);
                self.record(stats, name, Kind::EntrySelf, self_ns);
            }
            if let Some(figures) = figures {
                stats.res().add_instance(figures);
            }
            if c.flags & FLAG_ERRORED != 0 {
                bump(&stats.errored_instances, 1);
            }
            bump(&stats.closed, 1);
        });
        self.tree_close(local, c);
    }

    /// Whether an event's callsite has metric fields (one cache probe).
    #[inline(always)]
    pub(crate) fn has_metrics(&self, meta: &'static Metadata<'static>) -> bool {
        !self.events.has_none(meta)
    }

    /// The name of span `id` (of callsite `meta`) if the back-off left it out: a name sampled,
    /// and no slot for the span.
    #[cold]
    pub(crate) fn left_out_name(&self, id: u64, meta: &'static Metadata<'static>) -> Option<u32> {
        let decision = self.cached(meta)?;
        if decision.is_skip() || decision.is_drop() || !self.ever_sampled(decision.name()) {
            return None;
        }
        self.table
            .with(id, |_| ())
            .is_none()
            .then_some(decision.name())
    }

    /// An error-level event: counted for its explicit parent if recorded, else (`contextual`)
    /// for the span this thread is in; that span instance is marked as having had an error.
    ///
    /// `left_out`: the name of the span it occurs in where the back-off left that span out (it
    /// has no slot and no frame): counted for that name (no instance to mark).
    pub(crate) fn error_event(&self, parent: Option<u64>, contextual: bool, left_out: Option<u32>) {
        if let Some(name) = left_out {
            let count = |stats: &NameStats| bump(&stats.errors, 1);
            if self.local(|local| count(local.stats(name))).is_none() {
                self.shards.with_orphan(name, count);
            }
            return;
        }
        self.local(|local| {
            let id = match parent {
                Some(id) => Some(id),
                None if contextual => local.stack.last().map(|f| f.id),
                None => None,
            };
            let name = id.and_then(|id| {
                self.table.with(id, |slot| {
                    slot.flags.fetch_or(FLAG_ERRORED, Relaxed);
                    u32::from(slot.name.load(Relaxed))
                })
            });
            if let Some(name) = name {
                bump(&local.stats(name).errors, 1);
            }
        });
    }

    /// An event: records its metric fields, if its callsite has any (one cache probe when it
    /// has none), into this thread's cells of the span it occurs in: its explicit parent if
    /// recorded, else (`contextual`) the innermost span this thread is in that spanprof
    /// records; events elsewhere are kept under no span ([`Recorder::has_metrics`] first).
    /// `left_out`: as for [`Recorder::error_event`], the name the event is kept under.
    /// (Inlined in the layer's one caller, itself out of line.)
    #[inline(always)]
    pub(crate) fn metric_event(&self, event: &Event<'_>, left_out: Option<u32>) {
        let Some(fields) = self.events.fields_of(event.metadata()) else {
            return;
        };
        if !self.recording() {
            return;
        }
        let now = || self.clock.raw();
        let explicit = left_out.or_else(|| {
            event.parent().map(|id| {
                self.table
                    .with(id.into_u64(), |slot| u32::from(slot.name.load(Relaxed)))
                    .unwrap_or(NO_SPAN)
            })
        });
        let done = self.local(|local| {
            let span = match explicit {
                Some(span) => span,
                None if event.is_contextual() => local.stack.last().map_or(NO_SPAN, |f| f.name),
                None => NO_SPAN,
            };
            event.record(&mut MetricVisitor {
                fields,
                span,
                local: Some(local),
                orphan: &self.shards,
                dropped: &self.events.dropped,
                now: &now,
            });
        });
        if done.is_none() {
            // A thread being torn down: its stack is gone too.
            event.record(&mut MetricVisitor {
                fields,
                span: explicit.unwrap_or(NO_SPAN),
                local: None,
                orphan: &self.shards,
                dropped: &self.events.dropped,
                now: &now,
            });
        }
    }

    #[inline(always)]
    fn record(&self, stats: &NameStats, name: u32, kind: Kind, value: u64) {
        if stats.hist(kind).record(value) {
            self.drain(stats, name, kind);
        }
    }

    /// Drains one histogram of a thread's shard into the name's spill (rare: once per 65 535
    /// samples of that histogram).
    #[cold]
    #[inline(never)]
    fn drain(&self, stats: &NameStats, name: u32, kind: Kind) {
        let Some(info) = self.names.get(name) else {
            return;
        };
        let mut spill = info.spill.lock().unwrap_or_else(|e| e.into_inner());
        stats
            .hist(kind)
            .drain_into(NameInfo::spill_mut(&mut spill, kind));
    }
}

/// The frame an exit closes when it is not the plain top of the stack: `None` for spans not
/// entered on this thread, or a re-entry's exit (which only counts down).
#[cold]
#[inline(never)]
fn find_frame(local: &mut Local, id: u64) -> Option<usize> {
    let pos = local.stack.iter().rposition(|f| f.id == id)?;
    let frame = &mut local.stack[pos];
    if frame.reentries > 0 {
        frame.reentries -= 1;
        return None;
    }
    Some(pos)
}

/// A closed span, as `close_slot` read it from its slot.
#[derive(Clone, Copy)]
pub(crate) struct Closed {
    name: u32,
    pub(crate) node: u16,
    pub(crate) wall: u64,
    busy: u64,
    self_ns: u64,
    /// Entered once, by its owner: recorded as a single entry.
    single: bool,
    /// The owner's one entry (busy, self), when other threads had entries too.
    first: Option<(u64, u64)>,
    flags: u8,
}

impl Closed {
    /// Calls `record` with each instance histogram the span is recorded in (per name, or in its
    /// call-tree node) and its value: one record for a leaf entered once (its self time is its
    /// busy time), two otherwise. Inlined: the kinds are constants there.
    #[inline(always)]
    pub(crate) fn each(&self, mut record: impl FnMut(Kind, u64)) {
        if self.single && self.self_ns == self.busy {
            record(Kind::SingleLeaf, self.busy);
        } else if self.single {
            record(Kind::SingleBusy, self.busy);
            record(Kind::SingleSelf, self.self_ns);
        } else {
            record(Kind::Busy, self.busy);
            record(Kind::SelfTime, self.self_ns);
        }
    }

    /// The figures of the span in `slot`, closing at `now` (a raw clock reading).
    #[inline(always)]
    fn read(slot: &Slot, clock: &Clock, now: u64) -> Self {
        let flags = slot.flags.load(Acquire);
        let owner_entries = slot.entries.load(Acquire);
        let (owner_busy, owner_self) = (slot.busy.load(Relaxed), slot.self_ns.load(Relaxed));
        let single = owner_entries == ENTRIES_ONE && flags & FLAG_SHARED == 0;
        Closed {
            name: u32::from(slot.name.load(Relaxed)),
            node: slot.node.load(Relaxed),
            wall: clock.delta_ns(slot.created.load(Relaxed), now),
            busy: owner_busy + slot.shared_busy.load(Relaxed),
            self_ns: owner_self + slot.shared_self.load(Relaxed),
            single,
            // The owner's one entry, beside other threads' (recorded at their exits).
            first: (owner_entries == ENTRIES_ONE && !single).then_some((owner_busy, owner_self)),
            flags,
        }
    }
}

/// Adds the throughput fields of a span's values to its name's sums.
struct Throughput<'a> {
    stats: &'a NameStats,
    fields: u32,
    /// The span's values the sums hold (`items`, `bytes`, `flops`): a value replaces its
    /// field's there. `None`: the value is added.
    last: Option<&'a [AtomicU64; 3]>,
}

impl Throughput<'_> {
    fn add(&self, field: &Field, value: u64) {
        let (counter, i) = match field.name() {
            "items" if self.fields & FIELD_ITEMS != 0 => (&self.stats.items, 0),
            "bytes" if self.fields & FIELD_BYTES != 0 => (&self.stats.bytes, 1),
            "flops" if self.fields & FIELD_FLOPS != 0 => (&self.stats.flops, 2),
            _ => return,
        };
        // A smaller value than the last wraps: the shards' sums are added with wrapping
        // arithmetic (`collect`), so the total is each span's last value.
        let by = match self.last {
            Some(last) => value.wrapping_sub(last[i].swap(value, Relaxed)),
            None => value,
        };
        bump(counter, by);
    }
}

impl Visit for Throughput<'_> {
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.add(field, value);
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        if let Ok(v) = u64::try_from(value) {
            self.add(field, v);
        }
    }
    fn record_u128(&mut self, field: &Field, value: u128) {
        self.add(field, u64::try_from(value).unwrap_or(u64::MAX));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        if value.is_finite() && value >= 0.0 {
            self.add(field, value.round() as u64);
        }
    }
    fn record_debug(&mut self, _: &Field, _: &dyn fmt::Debug) {}
}

/// Callsite metadata made at run time, for tests of the callsite caches.
#[cfg(test)]
pub(crate) mod test_callsite {
    use tracing_core::callsite::{Callsite, Identifier};
    use tracing_core::field::FieldSet;
    use tracing_core::{Interest, Level, Metadata};

    struct Site;
    impl Callsite for Site {
        fn set_interest(&self, _: Interest) {}
        fn metadata(&self) -> &Metadata<'_> {
            unreachable!("not registered")
        }
    }
    static SITE: Site = Site;

    /// A new callsite's metadata (leaked: a distinct `'static` address each call).
    pub(crate) fn leak(
        fields: &'static [&'static str],
        kind: tracing_core::metadata::Kind,
    ) -> &'static Metadata<'static> {
        Box::leak(Box::new(Metadata::new(
            "callsite",
            "target",
            Level::INFO,
            None,
            None,
            None,
            FieldSet::new(fields, Identifier(&SITE)),
            kind,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::prelude::*;

    fn recorder() -> Arc<Recorder> {
        Arc::new(Recorder::standalone(
            Clock::new(),
            Resources::NONE,
            Costs::calibrated(),
        ))
    }

    #[test]
    fn past_the_last_span_name_every_span_is_counted_as_dropped() {
        let rec = recorder();
        for i in 0..names::MAX_SPAN_NAMES {
            let name: &'static str = Box::leak(format!("name{i}").into_boxed_str());
            assert!(rec.names.intern(name, "filler").is_some());
        }
        let layer = crate::layer::ProfileLayer::new(rec.clone(), None, true);
        let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
        tracing::dispatcher::with_default(&dispatch, || {
            for _ in 0..10 {
                tracing::info_span!("one").in_scope(|| {});
            }
            for _ in 0..5 {
                tracing::info_span!("other").in_scope(|| {});
            }
        });
        assert_eq!(rec.snapshot().dropped.spans_too_many_names, 15);
    }

    /// A recorder of CPU time per entry (50 ns a span, CPU clock reads calibrated at
    /// `cpu_read_ns`), whose readings run `hook` inside their bracket.
    fn cpu_recorder(
        clock: Clock,
        cpu_read_ns: f64,
        hook: impl Fn() + Send + Sync + 'static,
    ) -> Arc<Recorder> {
        let rec = Arc::new(Recorder::standalone(
            clock,
            Resources::CPU,
            Costs::from_reads(50.0, cpu_read_ns),
        ));
        assert!(
            rec.resources().contains(Resources::CPU),
            "CPU clock on Linux"
        );
        let _ = rec.reading_hook.set(Box::new(hook));
        rec
    }

    /// The CPU figures of span name `name` in `snap`.
    fn cpu_use(snap: &crate::profile::Snapshot, name: &str) -> crate::profile::CpuUse {
        let span = snap.span(name).unwrap();
        span.resources.as_ref().unwrap().cpu.clone().unwrap()
    }

    /// A parent span (10 µs, a child of 5 µs, 10 µs) recorded with CPU time, each bracket of
    /// readings taking `reading_ns`; readings calibrated at 1 µs a CPU clock read.
    fn parent_and_child(reading_ns: u64) -> crate::profile::Snapshot {
        let (clock, mock) = Clock::mock();
        let hook_clock = mock.clone();
        let rec = cpu_recorder(clock, 1000.0, move || {
            hook_clock.advance(std::time::Duration::from_nanos(reading_ns))
        });
        let layer = crate::layer::ProfileLayer::new(rec.clone(), None, true);
        let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
        let us = |n| mock.advance(std::time::Duration::from_micros(n));
        tracing::dispatcher::with_default(&dispatch, || {
            tracing::info_span!("parent").in_scope(|| {
                us(10);
                tracing::info_span!("child").in_scope(|| us(5));
                us(10);
            });
        });
        rec.snapshot()
    }

    #[test]
    fn spanprofs_readings_land_in_no_span() {
        // 2 µs per bracket: under the 2.25 µs two 1 µs reads may take, all spanprof's.
        let snap = parent_and_child(2_000);
        let span = |name| snap.span(name).unwrap();
        // Exactly what the test spent in each: none of the four readings.
        assert_eq!(span("child").busy.total_ns, 5_000);
        assert_eq!(span("parent").busy.total_ns, 25_000);
        assert_eq!(span("parent").self_time.total_ns, 20_000);
        assert_eq!(span("parent").entry_self.total_ns, 20_000);
        // They are spanprof's overhead instead: two per span, plus 50 ns per span.
        let overhead = snap.overhead.as_ref().unwrap();
        assert_eq!(overhead.readings_ns, 8_000);
        assert_eq!(overhead.estimated_ns, 8_100);
        assert_eq!(span("child").overhead_ns, Some(4_050));
        let cpu = span("child")
            .resources
            .as_ref()
            .unwrap()
            .cpu
            .clone()
            .unwrap();
        assert_eq!((cpu.entries, cpu.skipped_entries), (1, 0));
    }

    #[test]
    fn a_preemption_in_the_readings_is_shared_out_over_the_spans() {
        // 1 ms per bracket: 2.25 µs of it spanprof's, the rest a wait (a preemption), placed
        // right after its bracket here (`overhead::place_waits_within`).
        overhead::place_waits_within(0);
        let snap = parent_and_child(1_000_000);
        let span = |name| snap.span(name).unwrap();
        let wait = 1_000_000 - 2_250;
        // The wait at the parent's enter falls in the parent's first instant, the child's
        // enter's in the child, the child's exit's in the parent again; the parent's exit's
        // after it.
        assert_eq!(span("child").busy.total_ns, 5_000 + wait);
        assert_eq!(span("parent").busy.total_ns, 25_000 + 3 * wait);
        // Nested intervals of one time: the parent's self time is what its children leave.
        assert_eq!(span("parent").self_time.total_ns, 20_000 + 2 * wait);
        // Only spanprof's own time is its overhead.
        assert_eq!(snap.overhead.as_ref().unwrap().readings_ns, 4 * 2_250);
    }

    /// Spins until this thread used `ns` of CPU time.
    fn burn_cpu(ns: u64) {
        let start = crate::samplers::cpu::thread_cpu_ns();
        while crate::samplers::cpu::thread_cpu_ns() < start + ns {}
    }

    #[test]
    fn a_wait_in_a_childs_readings_is_not_taken_out_of_its_parents_cpu_time() {
        // Every bracket of readings burns 100 µs of this thread's CPU time and then waits 1 ms
        // (the mock clock: a preemption, which uses no CPU time).
        let (clock, mock) = Clock::mock();
        let hook_clock = mock.clone();
        let rec = cpu_recorder(clock, 1000.0, move || {
            burn_cpu(100_000);
            hook_clock.advance(std::time::Duration::from_millis(1));
        });
        let layer = crate::layer::ProfileLayer::new(rec.clone(), None, true);
        let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
        // The spans last long enough to hold the CPU time burnt in them (an entry's CPU time
        // is capped at its busy time), and the parent the waits put back over two ticks.
        let us = |n| mock.advance(std::time::Duration::from_micros(n));
        tracing::dispatcher::with_default(&dispatch, || {
            tracing::info_span!("parent").in_scope(|| {
                tracing::info_span!("child").in_scope(|| us(200));
                us(10_000);
            });
        });
        let snap = rec.snapshot();
        let cpu = |name| cpu_use(&snap, name).cpu_ns;
        // The parent's entry ran its own enter's burn and both of the child's: 300 µs of CPU
        // time, less the readings' calibrated cost (2 × 2.25 µs and 1 µs), not less the 2 ms
        // the child's readings lasted.
        assert!(cpu("parent") >= 200_000, "{} ns", cpu("parent"));
        assert!(cpu("child") >= 50_000, "{} ns", cpu("child"));
    }

    #[test]
    fn an_entrys_cpu_time_leaves_out_its_readings_as_they_cost_not_as_calibrated() {
        // Reads calibrated at 32 µs, but each bracket of readings burns 60 µs of CPU time after
        // its read (cold reads in a busy program cost more than the calibration's hot ones).
        // Every entry burns 20 µs and lasts 100 µs (the mock clock: it waits 80 µs).
        let (clock, mock) = Clock::mock();
        let hook_clock = mock.clone();
        let rec = cpu_recorder(clock, 32_000.0, move || {
            burn_cpu(60_000);
            hook_clock.advance(std::time::Duration::from_micros(60));
        });
        let layer = crate::layer::ProfileLayer::new(rec.clone(), None, true);
        let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
        tracing::dispatcher::with_default(&dispatch, || {
            for _ in 0..20 * overhead::CPU_SAMPLE_EVERY {
                tracing::info_span!("work").in_scope(|| {
                    burn_cpu(20_000);
                    mock.advance(std::time::Duration::from_micros(100));
                });
            }
        });
        let snap = rec.snapshot();
        let cpu = cpu_use(&snap, "work");
        assert_eq!((cpu.entries, cpu.busy_ns), (20, 20 * 100_000), "{cpu:?}");
        // Each read entry ran the rest of its enter's bracket (the 60 µs burn) and the start of
        // its exit's: about one bracket, as measured, not the calibrated 32 µs. Counted as
        // calibrated, it showed over 50 µs of CPU time for 20 µs burnt. Now 24–27 µs: the
        // mock clock leaves the reads themselves out of the brackets. (The first entries,
        // cold, and a tick's interrupt charged to an entry add to it, each entry's CPU time
        // capped at its 100 µs.)
        let per_entry = cpu.cpu_ns / cpu.entries;
        assert!(
            (15_000..=40_000).contains(&per_entry),
            "{per_entry} ns of CPU time per entry burning 20 µs: {cpu:?}"
        );
    }

    #[test]
    fn where_reads_switch_threads_out_a_threads_entries_are_read_a_gap_apart() {
        // `CLOCK_THREAD_CPUTIME_ID`: 8000 entries of 100 µs of two short names in turn, 800 ms
        // in all, and 4 of a name whose entries last 200 ms. Read 1 in 32 alone, each short
        // name's entries were read 125 times, every 3.2 ms.
        let (clock, mock) = Clock::mock();
        let costs = Costs::from_reads(50.0, 1000.0).switching_reads();
        let gap = overhead::SWITCHING_READ_GAP_NS;
        assert_eq!(costs.long_ns, gap);
        let rec = Arc::new(Recorder::standalone(clock, Resources::CPU, costs));
        let layer = crate::layer::ProfileLayer::new(rec.clone(), None, true);
        let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
        let advance = |us| mock.advance(std::time::Duration::from_micros(us));
        tracing::dispatcher::with_default(&dispatch, || {
            for i in 0..8000 {
                if i % 2 == 0 {
                    tracing::info_span!("a").in_scope(|| advance(100));
                } else {
                    tracing::info_span!("b").in_scope(|| advance(100));
                }
                if i % 2000 == 0 {
                    tracing::info_span!("long").in_scope(|| advance(200_000));
                }
            }
        });
        let snap = rec.snapshot();
        let cpu = |name: &str| cpu_use(&snap, name);
        // The short names: the first entry, then one 0–31 entries after each gap of 128 ms
        // since the thread's last read, whichever name it is. A long entry's reads, at its
        // enter and exit, restart the gap: about one read in each 200 ms between two long
        // entries (6 in all, 4 of `a` and 2 of `b`, with this mock clock's draws), never more
        // than one per 128 ms of the 1.6 s (13).
        let (a, b) = (cpu("a"), cpu("b"));
        let short_reads = a.entries + b.entries;
        assert!(
            (4..=(1 + 1_600_000_000 / gap)).contains(&short_reads),
            "{a:?} {b:?}"
        );
        assert!(a.entries > 0 && b.entries > 0, "{a:?} {b:?}");
        assert_eq!(a.entries + a.skipped_entries, 4000, "{a:?}");
        assert_eq!(b.entries + b.skipped_entries, 4000, "{b:?}");
        let overhead = snap.overhead.as_ref().unwrap();
        assert_eq!(overhead.cpu_sample_gap_ns, gap);
        // The long name: every entry once its mean is 200 ms; its first (no mean yet) came
        // 0.1 ms after the first short entry's read, within the gap.
        let long = cpu("long");
        assert_eq!((long.entries, long.skipped_entries), (3, 1), "{long:?}");
    }

    #[test]
    fn a_name_none_of_whose_entries_got_a_cpu_read_says_so() {
        // Where reads switch threads out: `first` takes the thread's one read of the gap,
        // `starved`'s few short entries come right after it and get none.
        let (clock, mock) = Clock::mock();
        let costs = Costs::from_reads(50.0, 1000.0).switching_reads();
        let rec = Arc::new(Recorder::standalone(clock, Resources::CPU, costs));
        let layer = crate::layer::ProfileLayer::new(rec.clone(), None, true);
        let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
        tracing::dispatcher::with_default(&dispatch, || {
            tracing::info_span!("first")
                .in_scope(|| mock.advance(std::time::Duration::from_micros(10)));
            for _ in 0..3 {
                tracing::info_span!("starved")
                    .in_scope(|| mock.advance(std::time::Duration::from_micros(10)));
            }
        });
        let snap = rec.snapshot();
        let starved = cpu_use(&snap, "starved");
        assert_eq!((starved.entries, starved.skipped_entries), (0, 3));
        assert!(!starved.any_read() && starved.sampled());
        // Every output reads the catalogue: no CPU time or share where none was read, the
        // entries sampled out said.
        use crate::profile::figures::{Value, CPU, CPU_PCT, CPU_SKIPPED};
        let span = snap.span("starved").unwrap();
        let totals = snap.totals();
        assert_eq!((CPU.read)(span, &totals), None);
        assert_eq!((CPU_PCT.read)(span, &totals), None);
        assert_eq!((CPU_SKIPPED.read)(span, &totals), Some(Value::Int(3)));
    }

    #[test]
    fn a_sampled_names_cpu_share_is_over_the_busy_time_of_all_its_entries() {
        // The entries read (1 in 32: the first of every 32) last 100 µs, the others 300 µs,
        // and each burns 20 µs. Over the sampled entries' own busy time the name read 20%;
        // where reads switch threads out, the entries read are the ones that just got a fresh
        // time slice, and read 100% on a shared CPU.
        let (clock, mock) = Clock::mock();
        let rec = cpu_recorder(clock, 1000.0, || {});
        let layer = crate::layer::ProfileLayer::new(rec.clone(), None, true);
        let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
        let rounds = 20u64;
        tracing::dispatcher::with_default(&dispatch, || {
            for i in 0..rounds * overhead::CPU_SAMPLE_EVERY {
                tracing::info_span!("work").in_scope(|| {
                    burn_cpu(20_000);
                    let us = if i % overhead::CPU_SAMPLE_EVERY == 0 {
                        100
                    } else {
                        300
                    };
                    mock.advance(std::time::Duration::from_micros(us));
                });
            }
        });
        let snap = rec.snapshot();
        let cpu = cpu_use(&snap, "work");
        assert_eq!(
            (cpu.entries, cpu.skipped_entries),
            (rounds, rounds * 31),
            "{cpu:?}"
        );
        // Mean busy time per entry: (100 + 31 × 300) / 32 = 293.75 µs.
        assert_eq!(cpu.busy_ns, rounds * 293_750, "{cpu:?}");
        // 20 µs burnt of 293.75 µs: 6.8%, and more with spanprof's own work between the reads
        // (in a debug build, 30 µs of CPU time per entry: 11%). Over the sampled entries' own
        // busy time, 20% at least.
        assert!(
            (5.0..15.0).contains(&cpu.utilization_pct),
            "{:.1}% CPU: {cpu:?}",
            cpu.utilization_pct
        );
    }

    #[test]
    fn an_entrys_cpu_time_is_at_most_its_busy_time() {
        // Reads calibrated at 10 µs, but each bracket burns 15 µs after its read, and the
        // entries burn 20 µs and wait for nothing: left out as calibrated, the readings'
        // remainder showed 125–140% of CPU time.
        let rec = cpu_recorder(Clock::new(), 10_000.0, || burn_cpu(15_000));
        let layer = crate::layer::ProfileLayer::new(rec.clone(), None, true);
        let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
        tracing::dispatcher::with_default(&dispatch, || {
            for _ in 0..10 * overhead::CPU_SAMPLE_EVERY {
                tracing::info_span!("work").in_scope(|| burn_cpu(20_000));
            }
        });
        let snap = rec.snapshot();
        let cpu = cpu_use(&snap, "work");
        assert_eq!(cpu.entries, 10, "{cpu:?}");
        assert!(cpu.cpu_ns <= cpu.busy_ns, "{cpu:?}");
        // Nor far under: every entry burnt 20 µs (less at most the cap of the readings' own
        // time, 20.25 µs, against the 15 µs burnt after the enter's read: 14.75 µs).
        let per_entry = cpu.cpu_ns / cpu.entries;
        assert!(
            per_entry >= 12_000,
            "{per_entry} ns of CPU time per 20 µs entry: {cpu:?}"
        );
    }

    /// A recorder without readings on a mock clock, and one span callsite it decided.
    fn one_callsite_on_a_mock_clock() -> (
        Arc<Recorder>,
        crate::clock::MockClock,
        &'static Metadata<'static>,
        Decision,
    ) {
        let (clock, mock) = Clock::mock();
        let rec = Arc::new(Recorder::standalone(
            clock,
            Resources::NONE,
            Costs::default(),
        ));
        let meta = test_callsite::leak(&[], tracing_core::metadata::Kind::SPAN);
        let decision = rec.decide(meta, false);
        (rec, mock, meta, decision)
    }

    /// Two threads whose span ids fall in the same region (a subscriber whose ids are not the
    /// registry's per thread): the first thread to open a span there owns the region, the
    /// other's spans go to the table; every span is recorded, exactly.
    #[test]
    fn a_thread_whose_region_another_holds_records_through_the_table() {
        let (rec, mock, meta, decision) = one_callsite_on_a_mock_clock();
        // Shard 7, addresses 1.. (the first thread) and 101.. (the second).
        let id = |address: u64| 7 << 38 | address;
        let span = |id: u64, ns: u64| {
            let values = meta.fields().value_set(&[]);
            assert!(rec.open(id, decision, &Attributes::new_root(meta, &values)));
            assert!(rec.enter(id));
            mock.advance(std::time::Duration::from_nanos(ns));
            assert!(rec.exit(id));
            // Open across the other thread's spans: the region stays held.
            id
        };
        let held = span(id(1), 10);
        assert!(
            rec.table.in_region(held).is_some(),
            "the first thread owns region 7"
        );
        std::thread::scope(|scope| {
            scope.spawn(|| {
                for address in 101..104 {
                    let other = span(id(address), 100);
                    assert!(
                        rec.table.in_region(other).is_none(),
                        "region 7 is held: the table"
                    );
                    assert!(rec.close(other));
                }
            });
        });
        assert!(rec.close(held));
        let snap = rec.snapshot();
        let stats = snap.spans.iter().find(|s| s.calls > 0).unwrap();
        assert_eq!((stats.calls, stats.instances), (4, 4));
        assert_eq!(stats.busy.total_ns, 310);
        assert_eq!((stats.busy.min_ns, stats.busy.max_ns), (10, 100));
    }

    /// The layer's callbacks (`probed`: timed whole for 1 span in 64) reach every held span,
    /// in its thread's region or in the table, timed or not, and record it once.
    #[test]
    fn the_layers_callbacks_reach_spans_in_regions_and_in_the_table_timed_or_not() {
        let (rec, mock, meta, decision) = one_callsite_on_a_mock_clock();
        // Shard 7: two spans timed whole and two not, from `addresses`.
        let ids = |addresses: std::ops::Range<u64>| -> Vec<u64> {
            let ids = addresses.map(|address| 7 << 38 | address);
            let due: Vec<u64> = ids.clone().filter(|&i| overhead::probe_due(i)).collect();
            let plain = ids.filter(|&i| !overhead::probe_due(i));
            due[..2].iter().copied().chain(plain.take(2)).collect()
        };
        let span = |id: u64, ns: u64, in_region: bool| {
            let values = meta.fields().value_set(&[]);
            assert!(rec.open(id, decision, &Attributes::new_root(meta, &values)));
            assert_eq!(rec.table.in_region(id).is_some(), in_region, "span {id:#x}");
            rec.probed(id, |r| r.enter(id));
            mock.advance(std::time::Duration::from_nanos(ns));
            rec.probed(id, |r| r.exit(id));
            rec.probed(id, |r| r.close(id));
        };
        for id in ids(1..200) {
            span(id, 10, true);
        }
        // Held open, so that the other thread's spans go to the table.
        let held = 7 << 38 | 255;
        let values = meta.fields().value_set(&[]);
        assert!(rec.open(held, decision, &Attributes::new_root(meta, &values)));
        std::thread::scope(|scope| {
            scope.spawn(|| {
                for id in ids(1000..1200) {
                    span(id, 100, false);
                }
            });
        });
        assert!(rec.close(held));
        let snap = rec.snapshot();
        let stats = snap.spans.iter().find(|s| s.calls > 0).unwrap();
        assert_eq!((stats.calls, stats.instances), (8, 9));
        assert_eq!(stats.busy.total_ns, 4 * 10 + 4 * 100);
    }

    /// Spans with readings at their open (memory) go to their thread's region like the others,
    /// their readings beside the region's slot: no locked instruction and no probe for them
    /// either, and their figures are whole.
    #[test]
    fn spans_with_readings_at_their_open_go_to_the_threads_region() {
        let rec = Arc::new(Recorder::standalone(
            Clock::new(),
            Resources::MEMORY,
            Costs::default(),
        ));
        let meta = test_callsite::leak(&[], tracing_core::metadata::Kind::SPAN);
        let decision = rec.decide(meta, false);
        let values = meta.fields().value_set(&[]);
        let attrs = Attributes::new_root(meta, &values);
        let readings = &rec.readings;
        readings.rss_bytes.store(1000, Relaxed);
        // Shard 3, address 1, then the same address's next generation.
        for (generation, grow) in [(0u64, 24u64), (1, 100)] {
            let id = generation << 51 | 3 << 38 | 1;
            assert!(rec.open(id, decision, &attrs));
            assert!(
                rec.table.in_region(id).is_some(),
                "in the region, not the table"
            );
            assert!(rec.enter(id) && rec.exit(id));
            // A sample published while the span is open.
            readings.rss_bytes.fetch_add(grow, Relaxed);
            readings.seq.fetch_add(1, Relaxed);
            assert!(rec.close(id));
        }
        let snap = rec.snapshot();
        let span = snap.spans.iter().find(|s| s.instances > 0).unwrap();
        let memory = span.resources.clone().unwrap().memory.unwrap();
        assert_eq!(span.instances, 2);
        assert_eq!(
            (
                memory.instances,
                memory.rss_delta_bytes,
                memory.growing_instances
            ),
            (2, 124, 2)
        );
        assert_eq!(memory.peak_rss_bytes, 1124);
    }

    #[test]
    fn past_the_span_tables_bound_every_span_is_counted_as_dropped() {
        let mut rec = Recorder::standalone(Clock::new(), Resources::NONE, Costs::default());
        // The bound made reachable: the first segment only, 4096 slots (the whole table's 12
        // segments are 1 GiB).
        rec.table = Own::make(|| SpanTable::with_segments(1));
        let meta = test_callsite::leak(&[], tracing_core::metadata::Kind::SPAN);
        let decision = rec.decide(meta, false);
        let values = meta.fields().value_set(&[]);
        let attrs = Attributes::new(meta, &values);
        // Addresses past this thread's region of the table (256 slots): every span goes to
        // the segments.
        let ids = 1000..1000 + 4096 + 100u64;
        let held = ids
            .clone()
            .filter(|&id| rec.open(id, decision, &attrs))
            .count();
        assert_eq!(held, 4096);
        let snap = rec.snapshot();
        assert_eq!(snap.dropped.spans_table_full, 100);
        assert_eq!(snap.span("callsite").unwrap().open, 4096);
        // The spans held complete as ever; the others cost a probe and are in no figure.
        for id in ids {
            rec.enter(id);
            rec.exit(id);
            rec.close(id);
        }
        let snap = rec.snapshot();
        let span = snap.span("callsite").unwrap();
        assert_eq!((span.calls, span.instances, span.open), (4096, 4096, 0));
        assert_eq!(snap.dropped.spans_table_full, 100);
    }

    #[test]
    fn timed_callbacks_leave_out_the_readings_brackets() {
        // The CPU clock read at every entry (calibrated at 0 ns: every name is long), each
        // bracket of readings taking 200 µs: far past what a timed callback may take.
        let rec = cpu_recorder(Clock::new(), 0.0, || {
            let start = std::time::Instant::now();
            while start.elapsed() < std::time::Duration::from_micros(200) {}
        });
        let meta = test_callsite::leak(&[], tracing_core::metadata::Kind::SPAN);
        let decision = rec.decide(meta, false);
        let values = meta.fields().value_set(&[]);
        let attrs = Attributes::new_root(meta, &values);
        // Warm (the thread's and the name's first state made), untimed.
        for id in (1..).filter(|&id| !overhead::probe_due(id)).take(4) {
            rec.open(id, decision, &attrs);
            rec.enter(id);
            rec.exit(id);
            rec.close(id);
        }
        let ids: Vec<u64> = (1..)
            .filter(|&id| overhead::probe_due(id))
            .take(8)
            .collect();
        for &id in &ids {
            rec.timed(|r| r.open(id, decision, &attrs));
            rec.timed(|r| r.enter(id));
            rec.timed(|r| r.exit(id));
            rec.timed(|r| r.close(id));
        }
        let (n, ns) = rec.shards.all().iter().fold((0, 0), |(n, ns), s| {
            (n + s.probed.load(Relaxed), ns + s.probed_ns.load(Relaxed))
        });
        // The brackets left out of each callback: counted (with them, every enter and exit
        // would be over the cap and dropped: 16 at most). A callback of this debug build may
        // still go over it on a loaded machine.
        assert!(
            n > 2 * ids.len() as u64 + 4 && n <= 4 * ids.len() as u64,
            "{n} counted"
        );
        assert!(ns / n <= overhead::PROBE_MAX_NS, "{} ns a callback", ns / n);
        // From 32 callbacks timed on, their mean is the cost of a span (12 spans: 4 callbacks
        // a unit).
        let measured = rec.snapshot().overhead.unwrap().measured_span_ns;
        assert_eq!(
            measured.is_some(),
            n >= overhead::MIN_PROBES,
            "{measured:?}"
        );
        if let Some(per_span) = measured {
            let mean = ns as f64 / n as f64;
            assert!(
                (per_span - 4.0 * mean).abs() < 1e-6 * per_span,
                "{per_span} {mean}"
            );
        }
    }

    #[test]
    fn callsites_beyond_the_cache_stay_cached() {
        let rec = recorder();
        let metas: Vec<&'static Metadata<'static>> = (0..3 * 8192)
            .map(|_| test_callsite::leak(&[], tracing_core::metadata::Kind::SPAN))
            .collect();
        for (i, meta) in metas.iter().enumerate() {
            rec.names
                .remember(meta, Decision::record(i as u32 % 64, 0, false, false));
        }
        for (i, meta) in metas.iter().enumerate() {
            let cached = rec
                .cached(meta)
                .expect("every callsite's decision is cached");
            assert_eq!(cached.name(), i as u32 % 64);
        }
    }
}

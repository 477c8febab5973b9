//! The [`Layer`] implementation: the hot path, and nothing else.
//!
//! Per span: a callsite decision looked up once at creation (no lock, no hashing of names), one
//! entry in the lock-free span table, a raw clock read at new/enter/exit/close, and records into
//! the current thread's shard. No allocation once a thread and a callsite are warm, no syscall,
//! no formatting.

use std::fmt;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::Arc;

use tracing_core::field::{Field, Visit};
use tracing_core::span::{Attributes, Id, Record};
use tracing_core::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use crate::config::Builder;
use crate::names::{throughput_fields, Decision, Kind, FIELD_BYTES, FIELD_FLOPS, FIELD_ITEMS};
use crate::profiler::Inner;
use crate::resources::{entry_figures, instance_figures, EntryMark, InstanceMark, Plan};
use crate::store::{bump, with_local, Frame, Local, NameStats};
use crate::table::{Entry, ENTRIES_MANY, ENTRIES_NONE, ENTRIES_ONE, ENTRIES_WRITING};

/// The profiling layer. Build it with [`ProfileLayer::builder`] and add it to a
/// `tracing_subscriber::registry()`.
///
/// It never filters what other layers see: spans it does not profile (see
/// [`Builder::with_filter`]) cost it one table probe per callback.
#[derive(Clone)]
pub struct ProfileLayer {
    pub(crate) inner: Arc<Inner>,
    /// False for the `off` preset: every callback returns at once.
    pub(crate) recording: bool,
    /// Resource figures recorded besides time.
    pub(crate) plan: Plan,
}

impl fmt::Debug for ProfileLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProfileLayer")
            .field("preset", &self.inner.config.preset)
            .field("filter", &self.inner.config.filter)
            .finish_non_exhaustive()
    }
}

impl ProfileLayer {
    /// A builder with the defaults (see [`Builder`]).
    pub fn builder() -> Builder {
        Builder::default()
    }

    #[inline(always)]
    fn local<R>(&self, f: impl FnOnce(&mut Local) -> R) -> Option<R> {
        with_local(self.inner.id, &self.inner.shards, f)
    }

    /// Decides, once per callsite, whether and under which name its spans are profiled.
    #[cold]
    #[inline(never)]
    fn decide<S>(&self, meta: &'static Metadata<'static>) -> Decision
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let dynamic = match &self.inner.filter {
            None => false,
            Some(filter) => {
                let interest =
                    <tracing_subscriber::EnvFilter as Layer<S>>::register_callsite(filter, meta);
                if interest.is_never() {
                    self.inner.names.remember(meta, Decision::SKIP);
                    return Decision::SKIP;
                }
                interest.is_sometimes()
            }
        };
        let decision = match self.inner.names.intern(meta.name(), meta.target()) {
            Some(name) => Decision::record(name, throughput_fields(meta), dynamic),
            None => {
                self.inner.dropped_too_many_names.fetch_add(1, Relaxed);
                Decision::SKIP
            }
        };
        self.inner.names.remember(meta, decision);
        decision
    }

    fn new_span<S>(
        &self,
        attrs: &Attributes<'_>,
        id: &Id,
        ctx: Context<'_, S>,
        decision: Option<Decision>,
    ) where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        if !self.inner.active.load(Relaxed) {
            return;
        }
        let meta = attrs.metadata();
        let decision = match decision {
            Some(d) => d,
            None => self.decide::<S>(meta),
        };
        if decision.is_skip() {
            return;
        }
        if decision.is_dynamic() {
            if let Some(filter) = &self.inner.filter {
                if !<tracing_subscriber::EnvFilter as Layer<S>>::enabled(filter, meta, ctx.clone())
                {
                    return;
                }
            }
        }
        let name = decision.name();
        let now = self.inner.clock.raw();
        let inserted = self.inner.table.insert(id.into_u64(), |e| {
            // MAX_SPAN_NAMES fits u16 (asserted in `names`).
            e.name.store(name as u16, Relaxed);
            e.entries.store(ENTRIES_NONE, Relaxed);
            e.owner.store(0, Relaxed);
            e.created.store(now, Relaxed);
            e.busy.store(0, Relaxed);
            e.self_ns.store(0, Relaxed);
            e.shared_busy.store(0, Relaxed);
            e.shared_self.store(0, Relaxed);
            e.entered_at.store(0, Relaxed);
        });
        if inserted.is_none() {
            self.inner.dropped_table_full.fetch_add(1, Relaxed);
            return;
        }
        if self.plan.instances() {
            let mark = InstanceMark::read(&self.inner.readings, self.inner.t_ns(now), self.plan);
            if let Some(span) = ctx.span(id) {
                span.extensions_mut().insert(OpenMark(mark));
            }
        }
        let fields = decision.fields();
        if fields != 0 {
            self.local(|local| {
                let stats = local.stats(name);
                attrs.record(&mut Throughput { stats, fields });
            });
        }
    }

    fn enter(&self, id: u64, entry: &Entry) {
        self.local(|local| {
            if entry.entered_at.load(Relaxed) != 0 {
                // Entered somewhere: if on this thread, this is a re-entry.
                if let Some(frame) = local.stack.iter_mut().rev().find(|f| f.id == id) {
                    frame.reentries += 1;
                    return;
                }
            }
            if self.plan.entries() {
                // Read before the clock, so the system call is not inside the span.
                local.marks.push(EntryMark::read(self.plan));
            }
            let now = self.inner.clock.raw();
            entry.entered_at.store(now, Relaxed);
            local.stack.push(Frame {
                id,
                name: u32::from(entry.name.load(Relaxed)),
                start: now,
                child_ns: 0,
                reentries: 0,
            });
        });
    }

    fn exit(&self, id: u64, entry: &Entry) {
        self.local(|local| {
            // Fast path: the span on top of this thread's stack (no table probe).
            let top = match local.stack.last() {
                Some(top) if top.id == id && top.reentries == 0 => local.stack.len() - 1,
                _ => match self.find_frame(local, id) {
                    Some(pos) => pos,
                    None => return,
                },
            };
            let now = self.inner.clock.raw();
            let stack = &mut local.stack;
            let frame = if top + 1 == stack.len() {
                stack.pop()
            } else {
                Some(stack.remove(top))
            };
            let Some(frame) = frame else { return };
            let busy = self.inner.clock.delta_ns(frame.start, now);
            let self_ns = busy.saturating_sub(frame.child_ns);
            if let Some(parent) = top.checked_sub(1).and_then(|p| stack.get_mut(p)) {
                parent.child_ns += busy;
            }
            entry.entered_at.store(0, Relaxed);
            if self.plan.entries() && top < local.marks.len() {
                let at_exit = EntryMark::read(self.plan);
                let at_enter = local.marks.remove(top);
                let figures = entry_figures(&at_enter, &at_exit);
                if let (Some(parent), Some(heap)) = (
                    top.checked_sub(1).and_then(|p| local.marks.get_mut(p)),
                    figures.heap,
                ) {
                    parent.child_net += heap.net_bytes();
                }
                local.stats(frame.name).res().add_entry(&figures, busy);
            }
            // The first entry is only added to the span's sums: if it stays the only one, close
            // records it once as both entry and instance. From the second entry on, every entry
            // (the first one included) goes to the entry histograms.
            let mut spins = 0u32;
            loop {
                match entry.entries.load(Acquire) {
                    ENTRIES_NONE => {
                        if entry
                            .entries
                            .compare_exchange(ENTRIES_NONE, ENTRIES_WRITING, Acquire, Relaxed)
                            .is_ok()
                        {
                            // The thread that completes the first entry owns the span's sums.
                            entry.owner.store(local.token, Relaxed);
                            add_entry(entry, local.token != 0, busy, self_ns);
                            entry.entries.store(ENTRIES_ONE, Release);
                            return;
                        }
                    }
                    ENTRIES_WRITING => {
                        // Another thread is adding the first entry (two stores away).
                        spins += 1;
                        if spins < 64 {
                            std::hint::spin_loop();
                        } else {
                            std::thread::yield_now();
                        }
                    }
                    ENTRIES_ONE => {
                        let first_busy = entry.busy.load(Relaxed) + entry.shared_busy.load(Relaxed);
                        let first_self =
                            entry.self_ns.load(Relaxed) + entry.shared_self.load(Relaxed);
                        if entry
                            .entries
                            .compare_exchange(ENTRIES_ONE, ENTRIES_MANY, Acquire, Relaxed)
                            .is_ok()
                        {
                            let stats = local.stats(frame.name);
                            self.record(stats, frame.name, Kind::EntryBusy, first_busy);
                            self.record(stats, frame.name, Kind::EntrySelf, first_self);
                            break;
                        }
                    }
                    _ => break,
                }
            }
            let owned = local.token != 0 && entry.owner.load(Relaxed) == local.token;
            add_entry(entry, owned, busy, self_ns);
            let stats = local.stats(frame.name);
            self.record(stats, frame.name, Kind::EntryBusy, busy);
            self.record(stats, frame.name, Kind::EntrySelf, self_ns);
        });
    }

    fn close(&self, entry: &Entry, open: Option<InstanceMark>) {
        let now = self.inner.clock.raw();
        let name = u32::from(entry.name.load(Relaxed));
        let wall = self.inner.clock.delta_ns(entry.created.load(Relaxed), now);
        let busy = entry.busy.load(Relaxed) + entry.shared_busy.load(Relaxed);
        let self_ns = entry.self_ns.load(Relaxed) + entry.shared_self.load(Relaxed);
        let (busy_kind, self_kind) = match entry.entries.load(Acquire) {
            ENTRIES_ONE => (Kind::SingleBusy, Kind::SingleSelf),
            _ => (Kind::Busy, Kind::SelfTime),
        };
        self.inner.table.remove(entry);
        self.local(|local| {
            let stats = local.stats(name);
            self.record(stats, name, busy_kind, busy);
            self.record(stats, name, self_kind, self_ns);
            self.record(stats, name, Kind::Wall, wall);
            if let Some(open) = open {
                let close =
                    InstanceMark::read(&self.inner.readings, self.inner.t_ns(now), self.plan);
                let figures = instance_figures(&open, &close, &self.inner.timeline);
                stats.res().add_instance(&figures);
            }
        });
    }

    /// The frame an exit closes when it is not the plain top of the stack: `None` for spans
    /// not profiled, or a re-entry's exit (which only counts down).
    #[cold]
    #[inline(never)]
    fn find_frame(&self, local: &mut Local, id: u64) -> Option<usize> {
        let pos = local.stack.iter().rposition(|f| f.id == id)?;
        let frame = &mut local.stack[pos];
        if frame.reentries > 0 {
            frame.reentries -= 1;
            return None;
        }
        Some(pos)
    }

    #[inline(always)]
    fn record(&self, stats: &NameStats, name: u32, kind: Kind, value: u64) {
        if stats.hist(kind).record(value) {
            self.inner.drain(stats, name, kind);
        }
    }
}

/// Resource readings at a span's creation, kept in the registry's span extensions (only at the
/// presets that record resources).
#[derive(Debug, Clone, Copy)]
struct OpenMark(InstanceMark);

/// Adds a completed entry to its span's sums: plain stores by the owning thread, atomic adds
/// by others.
#[inline(always)]
fn add_entry(entry: &Entry, owned: bool, busy: u64, self_ns: u64) {
    if owned {
        bump(&entry.busy, busy);
        bump(&entry.self_ns, self_ns);
    } else {
        entry.shared_busy.fetch_add(busy, Relaxed);
        entry.shared_self.fetch_add(self_ns, Relaxed);
    }
}

/// Adds the throughput fields of a span's values to its name's sums.
struct Throughput<'a> {
    stats: &'a NameStats,
    fields: u32,
}

impl Throughput<'_> {
    fn add(&self, field: &Field, value: u64) {
        let counter = match field.name() {
            "items" if self.fields & FIELD_ITEMS != 0 => &self.stats.items,
            "bytes" if self.fields & FIELD_BYTES != 0 => &self.stats.bytes,
            "flops" if self.fields & FIELD_FLOPS != 0 => &self.stats.flops,
            _ => return,
        };
        bump(counter, value);
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

impl<S> Layer<S> for ProfileLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    #[inline(always)]
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if self.recording {
            // Callsites spanprof does not profile leave here: one inlined cache probe.
            let decision = self.inner.names.cached(attrs.metadata());
            if !matches!(decision, Some(d) if d.is_skip()) {
                self.new_span(attrs, id, ctx, decision);
            }
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        if !self.recording {
            return;
        }
        let Some(entry) = self.inner.table.get(id.into_u64()) else {
            return;
        };
        let name = u32::from(entry.name.load(Relaxed));
        self.local(|local| {
            values.record(&mut Throughput {
                stats: local.stats(name),
                fields: FIELD_ITEMS | FIELD_BYTES | FIELD_FLOPS,
            });
        });
    }

    #[inline(always)]
    fn on_enter(&self, id: &Id, _ctx: Context<'_, S>) {
        // Spans not profiled leave here: one inlined table probe, no call.
        if self.recording {
            let id = id.into_u64();
            if let Some(entry) = self.inner.table.get(id) {
                self.enter(id, entry);
            }
        }
    }

    #[inline(always)]
    fn on_exit(&self, id: &Id, _ctx: Context<'_, S>) {
        // Spans not profiled leave here: one inlined table probe, no call.
        if self.recording {
            let id = id.into_u64();
            if let Some(entry) = self.inner.table.get(id) {
                self.exit(id, entry);
            }
        }
    }

    #[inline(always)]
    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if self.recording {
            if let Some(entry) = self.inner.table.get(id.into_u64()) {
                let open = if self.plan.instances() {
                    ctx.span(&id)
                        .and_then(|span| span.extensions().get::<OpenMark>().map(|m| m.0))
                } else {
                    None
                };
                self.close(entry, open);
            }
        }
    }

    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        if !self.recording || *event.metadata().level() != Level::ERROR {
            return;
        }
        let explicit = event.parent().map(|id| id.into_u64());
        let from_table = explicit
            .and_then(|id| self.inner.table.get(id))
            .map(|e| u32::from(e.name.load(Relaxed)));
        self.local(|local| {
            let name = if explicit.is_some() {
                from_table
            } else if event.is_contextual() {
                local.stack.last().map(|f| f.name)
            } else {
                None
            };
            if let Some(name) = name {
                bump(&local.stats(name).errors, 1);
            }
        });
    }
}

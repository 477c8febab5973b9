//! The [`Layer`] implementation: it turns `tracing` callbacks into calls of the recorder, and
//! asks the span filter; nothing else.
//!
//! The span filter is a `tracing_subscriber::EnvFilter` and decides what `EnvFilter` decides as
//! a per-layer filter (`layer.with_filter(env_filter)`). Target and level directives are decided
//! once per callsite. Span and field directives (`[name]`, `[{field=value}]`: any directive with
//! a span part, what `EnvFilter` calls dynamic, told from the directives by [`follows_spans`])
//! also make the filter watch spans: a callsite whose spans a directive names is always enabled,
//! and the filter keeps, per span of it, which field values matched and, per thread, the levels
//! of those spans entered now; other callsites are decided per span from that scope. So the
//! layer hands the filter the callbacks of the spans it enables (`on_new_span`, `on_record`,
//! `on_enter`, `on_exit`, `on_close`), as `Filtered` does. Filters without such directives are
//! never called after a callsite is decided.
//!
//! Why not tracing-subscriber's own `Filtered` (`layer.with_filter(env_filter)` inside the
//! builder)? Measured with `scripts/instructions.sh` on an `[outer]=info` filter, it costs 26 %
//! more instructions per span it enables and 32 % more per span it excludes (it looks the span
//! up in the registry at each enter, exit, close and record, and its `sometimes` interest makes
//! the subscriber call `enabled` for each span); that `sometimes` also makes every layer beside
//! it be asked about every span and event of those callsites, and the layer's type would depend
//! on the filter, which `SPANPROF_FILTER` sets at run time.
//!
//! [`follows_spans`]: crate::filter_hint::follows_spans

use std::collections::HashSet;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tracing_core::span::{Attributes, Id, Record};
use tracing_core::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::{EnvFilter, Layer};

use crate::filter_hint::{follows_spans, SeenCallsites};
use crate::record::names::Decision;
use crate::record::overhead::probe_due;
use crate::record::Recorder;

/// The profiling layer. Build it with [`ProfileLayer::builder`] and add it to a
/// `tracing_subscriber::registry()`.
///
/// It never filters what other layers see: spans it does not profile (see
/// [`Builder::with_filter`](crate::Builder::with_filter)) cost it one table probe per callback,
/// and one call of the filter at creation where span or field directives decide them.
#[derive(Clone)]
pub struct ProfileLayer {
    recorder: Arc<Recorder>,
    /// The span filter (`SPANPROF_FILTER`), if any.
    filter: Option<Arc<SpanFilter>>,
    mode: Mode,
    /// Keeps spanprof's threads (sampler, back-off, export) running while a layer lives.
    _uses: Option<crate::worker::Use>,
    /// The callsites registered, for the span filter's end-of-run hint (with a filter only).
    seen: Option<Arc<SeenCallsites>>,
    /// The GPU span filter (`SPANPROF_GPU_SPANS`, feature `cuda`), with a CUDA driver: asked
    /// once per callsite the layer records.
    #[cfg(feature = "cuda")]
    gpu_filter: Option<Arc<EnvFilter>>,
}

/// What the callbacks do, decided when the layer is built (one comparison per callback).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The `off` preset: every callback returns at once.
    Off,
    /// Recording, with no filter or one of target and level directives only: a callsite is
    /// decided once and the filter is never asked again.
    On,
    /// Recording, with a filter that has span or field directives: the filter also sees the
    /// callbacks of the spans it enables (see the module docs).
    Scoped,
}

impl fmt::Debug for ProfileLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProfileLayer")
            .field("mode", &self.mode)
            .field("filter", &self.filter.as_ref().map(|f| &f.env))
            .finish_non_exhaustive()
    }
}

/// The span filter, and the spans it enabled that the recorder does not hold.
struct SpanFilter {
    env: EnvFilter,
    /// Spans the filter enabled that are not in the recorder's span table (it was full, or the
    /// span's callsite came past [`MAX_SPAN_NAMES`](crate::builder::MAX_SPAN_NAMES)): the filter sees
    /// their callbacks all the same, or the spans inside them would be decided without them.
    /// Only filters with span or field directives use it.
    unheld: Mutex<HashSet<u64>>,
    /// Whether `unheld` holds a span: while it does not, a span not in the table is not looked
    /// up.
    any_unheld: AtomicBool,
}

/// A span filter as the builder hands it to the layer: the `EnvFilter` parsed from the
/// directives, and whether one of them makes it follow spans.
pub(crate) struct LayerFilter {
    env: EnvFilter,
    /// [`follows_spans`] of the directives.
    follows_spans: bool,
}

impl LayerFilter {
    /// `env`, parsed from `directives`.
    pub(crate) fn new(env: EnvFilter, directives: &str) -> Self {
        Self {
            env,
            follows_spans: follows_spans(directives),
        }
    }

    /// The filter of `directives` (valid ones: it panics otherwise).
    #[cfg(test)]
    pub(crate) fn parse(directives: &str) -> Self {
        let env = EnvFilter::builder()
            .parse(directives)
            .expect("valid directives");
        Self::new(env, directives)
    }
}

impl ProfileLayer {
    pub(crate) fn new(recorder: Arc<Recorder>, filter: Option<LayerFilter>, enabled: bool) -> Self {
        let mode = match &filter {
            _ if !enabled => Mode::Off,
            Some(filter) if filter.follows_spans => Mode::Scoped,
            _ => Mode::On,
        };
        if mode == Mode::Scoped {
            // A span left out by sampling would still go to the filter, under its lock.
            recorder.forbid_sampling();
        }
        Self {
            recorder,
            filter: filter.map(|LayerFilter { env, .. }| {
                Arc::new(SpanFilter {
                    env,
                    unheld: Mutex::new(HashSet::new()),
                    any_unheld: AtomicBool::new(false),
                })
            }),
            mode,
            _uses: None,
            seen: None,
            #[cfg(feature = "cuda")]
            gpu_filter: None,
        }
    }

    /// Times the spans of the callsites `filter` enables on the GPU (feature `cuda`).
    #[cfg(feature = "cuda")]
    pub(crate) fn with_gpu_filter(self, filter: Option<EnvFilter>) -> Self {
        Self {
            gpu_filter: filter.map(Arc::new),
            ..self
        }
    }

    /// Whether the GPU span filter chooses `meta`'s spans: its target and level, or a span
    /// directive naming it (decided for the callsite: field values are not looked at).
    #[cfg(feature = "cuda")]
    #[cold]
    fn decide_gpu<S>(&self, meta: &'static Metadata<'static>, ctx: &Context<'_, S>, d: Decision)
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let Some(filter) = &self.gpu_filter else {
            return;
        };
        if d.is_skip() {
            return;
        }
        let interest = <EnvFilter as Layer<S>>::register_callsite(filter, meta);
        if !interest.is_never() && <EnvFilter as Layer<S>>::enabled(filter, meta, ctx.clone()) {
            self.recorder.choose_gpu(d.name());
        }
    }

    /// Notes every callsite registered in `seen` (in `register_callsite`, once per callsite).
    pub(crate) fn with_seen_callsites(self, seen: Option<Arc<SeenCallsites>>) -> Self {
        Self { seen, ..self }
    }

    /// Keeps spanprof's threads running while this layer (or a clone) lives.
    pub(crate) fn with_use(self, uses: crate::worker::Use) -> Self {
        Self {
            _uses: Some(uses),
            ..self
        }
    }

    /// Decides, once per callsite, whether and under which name its spans are profiled.
    #[cold]
    #[inline(never)]
    fn decide<S>(&self, meta: &'static Metadata<'static>, ctx: &Context<'_, S>) -> Decision
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let dynamic = match &self.filter {
            None => false,
            Some(filter) => {
                // Registers the callsite with the filter: a callsite that span or field
                // directives name gets its matcher here.
                let interest = <EnvFilter as Layer<S>>::register_callsite(&filter.env, meta);
                if interest.is_never() {
                    return self.recorder.skip(meta);
                }
                // With span or field directives, `always` is a callsite a target or level
                // directive enables, or one a span or field directive names: the filter says
                // `always` for the latter so that it sees its spans, but `EnvFilter::enabled`
                // turns down all its spans if its level is above every span and field
                // directive's (`[work]=info` and a `debug` span named `work`). Its answer is the
                // same for every span of such a callsite: asked once, here.
                if self.mode == Mode::Scoped
                    && interest.is_always()
                    && !<EnvFilter as Layer<S>>::enabled(&filter.env, meta, ctx.clone())
                {
                    return self.recorder.skip(meta);
                }
                interest.is_sometimes()
            }
        };
        let decision = self.recorder.decide(meta, dynamic);
        #[cfg(feature = "cuda")]
        self.decide_gpu(meta, ctx, decision);
        decision
    }

    /// A new span of a callsite not decided yet, or one the filter decides per span (the
    /// common case, decided to be recorded, is `on_new_span`'s own): out of line.
    #[inline(never)]
    fn new_span<S>(
        &self,
        attrs: &Attributes<'_>,
        id: &Id,
        ctx: Context<'_, S>,
        decision: Option<Decision>,
    ) where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        if !self.recorder.recording() {
            return;
        }
        let meta = attrs.metadata();
        let decision = match decision {
            Some(d) => d,
            None => self.decide::<S>(meta, &ctx),
        };
        if decision.is_skip() {
            if decision.is_drop() {
                self.recorder.dropped();
            }
            if self.mode == Mode::Scoped {
                self.skipped_span(attrs, id, ctx);
            }
            return;
        }
        if decision.is_dynamic() {
            if let Some(filter) = &self.filter {
                if !<EnvFilter as Layer<S>>::enabled(&filter.env, meta, ctx.clone()) {
                    return;
                }
            }
        }
        // The filter keeps a span only if a span or field directive names its callsite, and
        // says `always` for such a callsite: the spans of the others, decided per span, are not
        // handed to it here (their enter, exit and close are: which spans it keeps is not
        // known then).
        if self.mode == Mode::Scoped && !decision.is_dynamic() {
            if let Some(filter) = &self.filter {
                filter.env.on_new_span(attrs, id, ctx.clone());
            }
        }
        if !self.recorder.open(id.into_u64(), decision, attrs)
            && self.mode == Mode::Scoped
            && !decision.is_dynamic()
        {
            self.unheld(id);
        }
    }

    /// A span of a skipped callsite, with a filter that has span or field directives. Such a
    /// filter skips a callsite only for spans it never enables, or the recorder has no name
    /// left for it: then the filter is asked, and sees the span if it enables it.
    #[cold]
    #[inline(never)]
    fn skipped_span<S>(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>)
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let Some(filter) = &self.filter else { return };
        if self.recorder.recording()
            && <EnvFilter as Layer<S>>::enabled(&filter.env, attrs.metadata(), ctx.clone())
        {
            filter.env.on_new_span(attrs, id, ctx);
            self.unheld(id);
        }
    }

    /// Remembers a span the filter enabled that the recorder does not hold.
    #[cold]
    #[inline(never)]
    fn unheld(&self, id: &Id) {
        if let Some(filter) = &self.filter {
            let mut unheld = filter.unheld.lock().unwrap_or_else(|e| e.into_inner());
            unheld.insert(id.into_u64());
            filter.any_unheld.store(true, Ordering::Release);
        }
    }

    /// The filter of a layer whose filter has span or field directives, if it enabled the span:
    /// `held` (the recorder holds the span), or it is one of the filter's unheld spans.
    /// `closing`: the span closes, and leaves the unheld ones.
    #[inline]
    fn scope_filter(&self, id: &Id, held: bool, closing: bool) -> Option<&EnvFilter> {
        let filter = self.filter.as_deref()?;
        if held {
            return Some(&filter.env);
        }
        if !filter.any_unheld.load(Ordering::Acquire) {
            return None;
        }
        let mut unheld = filter.unheld.lock().unwrap_or_else(|e| e.into_inner());
        let id = id.into_u64();
        let found = if closing {
            let found = unheld.remove(&id);
            if unheld.is_empty() {
                // Under the lock: a span is added with the flag set, so a span still in the set
                // sees it set.
                filter.any_unheld.store(false, Ordering::Release);
            }
            found
        } else {
            unheld.contains(&id)
        };
        found.then_some(&filter.env)
    }
}

impl<S> Layer<S> for ProfileLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    /// Notes the callsite for the span filter's hint, if asked to; the interest is the
    /// default's (`always`: the layer never filters what other layers see).
    fn register_callsite(&self, meta: &'static Metadata<'static>) -> tracing_core::Interest {
        if let Some(seen) = &self.seen {
            seen.add(meta);
        }
        tracing_core::Interest::always()
    }

    #[inline(always)]
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if self.mode == Mode::On {
            // Callsites spanprof does not profile leave here: one inlined cache probe.
            let decision = self.recorder.cached(attrs.metadata());
            // Recorded, the filter not asked per span: the callsite's decision is all there
            // is to know (one test, not a jump table over every kind of decision).
            if let Some(d) = decision.filter(|d| d.is_static_record()) {
                if probe_due(id.into_u64()) {
                    self.recorder.timed_span(id.into_u64(), |r| {
                        if r.recording() {
                            r.open_unsampled(id.into_u64(), d, attrs);
                        }
                        true
                    });
                } else if self.recorder.recording() {
                    self.recorder.open_unsampled(id.into_u64(), d, attrs);
                }
                return;
            }
            match decision {
                Some(d) if d.is_skip() => {
                    if d.is_drop() {
                        self.recorder.dropped();
                    }
                }
                decision => self.new_span(attrs, id, ctx, decision),
            }
        } else if self.mode != Mode::Off {
            self.scoped_new_span(attrs, id, ctx);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if self.mode != Mode::Off {
            let held = self.recorder.record_fields(id.into_u64(), values);
            if self.mode == Mode::Scoped {
                if let Some(filter) = self.scope_filter(id, held, false) {
                    filter.on_record(id, values, ctx);
                }
            }
        }
    }

    #[inline(always)]
    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        if self.mode == Mode::On {
            // Spans not profiled leave here: a hash of the id (is it timed?) and one inlined
            // table probe, no call. (`move`: the id is captured as a value, in a register; by
            // reference, it was stored to the stack on every callback.)
            let id = id.into_u64();
            self.recorder.probed(id, move |r| r.enter(id));
        } else if self.mode != Mode::Off {
            self.scoped_enter(id, ctx);
        }
    }

    #[inline(always)]
    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        if self.mode == Mode::On {
            // Spans not profiled leave here: a hash of the id (is it timed?) and one inlined
            // table probe, no call.
            let id = id.into_u64();
            self.recorder.probed(id, move |r| r.exit(id));
        } else if self.mode != Mode::Off {
            self.scoped_exit(id, ctx);
        }
    }

    #[inline(always)]
    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if self.mode == Mode::On {
            // Spans not profiled leave here: a hash of the id (is it timed?) and one inlined
            // table probe, no call.
            let id = id.into_u64();
            self.recorder.probed(id, move |r| r.close(id));
        } else if self.mode != Mode::Off {
            self.scoped_close(id, ctx);
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        if self.mode == Mode::Off {
            return;
        }
        if *event.metadata().level() == Level::ERROR {
            self.error_event(event, ctx.clone());
        }
        // Metric fields (`counter.`, `histogram.`, ...): one cache probe for events without.
        if self.recorder.has_metrics(event.metadata()) {
            self.metric_event(event, ctx);
        }
    }
}

impl ProfileLayer {
    /// An `error`-level event: counted for the span it occurs in (out of line, so that
    /// `on_event` stays small for every other event).
    #[inline(never)]
    fn error_event<S>(&self, event: &Event<'_>, ctx: Context<'_, S>)
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        self.recorder.error_event(
            event.parent().map(|id| id.into_u64()),
            event.is_contextual(),
            self.left_out(event, ctx),
        );
    }

    /// An event with metric fields: recorded under the span it occurs in.
    #[inline(never)]
    fn metric_event<S>(&self, event: &Event<'_>, ctx: Context<'_, S>)
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        self.recorder.metric_event(event, self.left_out(event, ctx));
    }

    /// The name of the span `event` occurs in if the back-off left that span out (it has no
    /// slot and no frame, so it is looked up in the registry); `None` until a name is sampled.
    #[inline(always)]
    fn left_out<S>(&self, event: &Event<'_>, ctx: Context<'_, S>) -> Option<u32>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        if !self.recorder.any_sampled() {
            return None;
        }
        self.left_out_span(event, ctx)
    }

    #[cold]
    #[inline(never)]
    fn left_out_span<S>(&self, event: &Event<'_>, ctx: Context<'_, S>) -> Option<u32>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let span = match event.parent() {
            Some(id) => ctx.span(id),
            None if event.is_contextual() => ctx.lookup_current(),
            None => None,
        }?;
        self.recorder
            .left_out_name(span.id().into_u64(), span.metadata())
    }
}

/// The callbacks in the modes other than `On`, out of line (`On`'s path tests its mode once):
/// none with `Off`; with a filter that has span or field directives, the recorder's part, then
/// the filter's, for the spans the filter enabled.
impl ProfileLayer {
    #[cold]
    #[inline(never)]
    fn scoped_new_span<S>(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>)
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        match self.recorder.cached(attrs.metadata()) {
            Some(d) if d.is_skip() => {
                if d.is_drop() {
                    self.recorder.dropped();
                }
                self.skipped_span(attrs, id, ctx);
            }
            decision => self.new_span(attrs, id, ctx, decision),
        }
    }

    #[cold]
    #[inline(never)]
    fn scoped_enter<S>(&self, id: &Id, ctx: Context<'_, S>)
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let held = self.recorder.enter(id.into_u64());
        if let Some(filter) = self.scope_filter(id, held, false) {
            filter.on_enter(id, ctx);
        }
    }

    #[cold]
    #[inline(never)]
    fn scoped_exit<S>(&self, id: &Id, ctx: Context<'_, S>)
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let held = self.recorder.exit(id.into_u64());
        if let Some(filter) = self.scope_filter(id, held, false) {
            filter.on_exit(id, ctx);
        }
    }

    #[cold]
    #[inline(never)]
    fn scoped_close<S>(&self, id: Id, ctx: Context<'_, S>)
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let held = self.recorder.close(id.into_u64());
        if let Some(filter) = self.scope_filter(&id, held, true) {
            filter.on_close(id, ctx);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{LayerFilter, Mode, ProfileLayer};
    use crate::clock::Clock;
    use crate::record::overhead::Costs;
    use crate::record::Recorder;
    use crate::switches::Resources;
    use std::sync::Arc;

    fn mode(directives: Option<&str>, enabled: bool) -> Mode {
        let recorder = Arc::new(Recorder::standalone(
            Clock::new(),
            Resources::NONE,
            Costs::default(),
        ));
        ProfileLayer::new(recorder, directives.map(LayerFilter::parse), enabled).mode
    }

    #[test]
    fn filters_with_a_span_part_follow_spans() {
        for (directives, want) in [
            (None, Mode::On),
            (Some("info"), Mode::On),
            (Some("my_app=trace,my_app::io=off,warn"), Mode::On),
            (Some("spanprof::perf"), Mode::On),
            // Field names alone: `EnvFilter` follows the spans that have them, too.
            (Some("[{items}]"), Mode::Scoped),
            (Some("[handle_request]"), Mode::Scoped),
            (Some("[work{n=1}]"), Mode::Scoped),
            (Some("[{n=1}]=debug"), Mode::Scoped),
            (Some("my_app[work]=info,warn"), Mode::Scoped),
            (Some("info,my_app::io[{path=\"a b\"}]=trace"), Mode::Scoped),
        ] {
            assert_eq!(mode(directives, true), want, "{directives:?}");
            assert_eq!(mode(directives, false), Mode::Off, "{directives:?}");
        }
    }
}

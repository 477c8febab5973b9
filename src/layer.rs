//! The [`Layer`] implementation: it turns `tracing` callbacks into calls of the recorder, and
//! asks the span filter; nothing else.

use std::fmt;
use std::sync::Arc;

use tracing_core::span::{Attributes, Id, Record};
use tracing_core::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::{EnvFilter, Layer};

use crate::record::names::Decision;
use crate::record::Recorder;

/// The profiling layer. Build it with [`ProfileLayer::builder`] and add it to a
/// `tracing_subscriber::registry()`.
///
/// It never filters what other layers see: spans it does not profile (see
/// [`Builder::with_filter`](crate::Builder::with_filter)) cost it one table probe per callback.
#[derive(Clone)]
pub struct ProfileLayer {
    recorder: Arc<Recorder>,
    /// The span filter (`SPANPROF_FILTER`), if any.
    filter: Option<Arc<EnvFilter>>,
    /// False for the `off` preset: every callback returns at once.
    enabled: bool,
}

impl fmt::Debug for ProfileLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProfileLayer")
            .field("enabled", &self.enabled)
            .field("filter", &self.filter)
            .finish_non_exhaustive()
    }
}

impl ProfileLayer {
    pub(crate) fn new(recorder: Arc<Recorder>, filter: Option<EnvFilter>, enabled: bool) -> Self {
        Self {
            recorder,
            filter: filter.map(Arc::new),
            enabled,
        }
    }

    /// Decides, once per callsite, whether and under which name its spans are profiled.
    #[cold]
    #[inline(never)]
    fn decide<S>(&self, meta: &'static Metadata<'static>) -> Decision
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let dynamic = match &self.filter {
            None => false,
            Some(filter) => {
                let interest = <EnvFilter as Layer<S>>::register_callsite(filter, meta);
                if interest.is_never() {
                    return self.recorder.skip(meta);
                }
                interest.is_sometimes()
            }
        };
        self.recorder.decide(meta, dynamic)
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
        if !self.recorder.recording() {
            return;
        }
        let meta = attrs.metadata();
        let decision = match decision {
            Some(d) => d,
            None => self.decide::<S>(meta),
        };
        if decision.is_skip() {
            if decision.is_drop() {
                self.recorder.dropped();
            }
            return;
        }
        if decision.is_dynamic() {
            if let Some(filter) = &self.filter {
                if !<EnvFilter as Layer<S>>::enabled(filter, meta, ctx.clone()) {
                    return;
                }
            }
        }
        self.recorder.open(id.into_u64(), decision, attrs);
    }
}

impl<S> Layer<S> for ProfileLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    #[inline(always)]
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if self.enabled {
            // Callsites spanprof does not profile leave here: one inlined cache probe.
            match self.recorder.cached(attrs.metadata()) {
                Some(d) if d.is_skip() => {
                    if d.is_drop() {
                        self.recorder.dropped();
                    }
                }
                decision => self.new_span(attrs, id, ctx, decision),
            }
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        if self.enabled {
            if let Some(slot) = self.recorder.slot(id.into_u64()) {
                self.recorder.record_fields(slot, values);
            }
        }
    }

    #[inline(always)]
    fn on_enter(&self, id: &Id, _ctx: Context<'_, S>) {
        // Spans not profiled leave here: one inlined table probe, no call.
        if self.enabled {
            let id = id.into_u64();
            if let Some(slot) = self.recorder.slot(id) {
                self.recorder.enter(id, slot);
            }
        }
    }

    #[inline(always)]
    fn on_exit(&self, id: &Id, _ctx: Context<'_, S>) {
        // Spans not profiled leave here: one inlined table probe, no call.
        if self.enabled {
            let id = id.into_u64();
            if let Some(slot) = self.recorder.slot(id) {
                self.recorder.exit(id, slot);
            }
        }
    }

    #[inline(always)]
    fn on_close(&self, id: Id, _ctx: Context<'_, S>) {
        if self.enabled {
            if let Some(slot) = self.recorder.slot(id.into_u64()) {
                self.recorder.close(slot);
            }
        }
    }

    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        if self.enabled && *event.metadata().level() == Level::ERROR {
            self.recorder.error_event(
                event.parent().map(|id| id.into_u64()),
                event.is_contextual(),
            );
        }
    }
}

//! [`ChromeTraceLayer`]: the trace backend's layer behind the step schedule's gate.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tracing_core::field::{Field, Value};
use tracing_core::span::{Attributes, Id, Record};
use tracing_core::{Event, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use super::session::Session;

/// The trace backend's layer (tracing-chrome's, or the open window's tracing-perfetto-file
/// layer), forwarded to only while a trace window is open.
///
/// Get it from [`ProfileGuard::chrome_layer`](crate::ProfileGuard::chrome_layer) and add it to
/// the same registry as the [`ProfileLayer`](crate::ProfileLayer):
/// `registry().with(layer).with(guard.chrome_layer())`.
///
/// Between windows every callback returns after one atomic load (creating a span also compares
/// its name with the step span's name). In a window, callbacks go to the backend's layer; a
/// span's exit is forwarded only if its entry was forwarded in the same window, so spans
/// entered before the window (the epoch around the step, a model layer's long-lived span) never
/// produce an unmatched end.
pub struct ChromeTraceLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    forward: Forward<S>,
    session: Arc<Session>,
    include_args: bool,
}

/// Where the gate forwards to.
pub(super) enum Forward<S>
where
    S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    /// tracing-chrome's one layer of the session.
    Chrome(tracing_chrome::ChromeLayer<S>),
    /// The open window's layer, if any.
    #[cfg(feature = "perfetto")]
    Perfetto(Arc<super::perfetto::Slot>),
}

impl<S> fmt::Debug for ChromeTraceLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChromeTraceLayer")
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

/// In a span's extensions: entries forwarded in `window` and not exited yet. With the Perfetto
/// backend, also says that the window's layer knows the span (it was announced in `window`).
struct Entered {
    window: u64,
    depth: u32,
}

/// Counts a forwarding call as in flight until dropped (also on unwind).
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Release);
    }
}

impl<S> ChromeTraceLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    pub(super) fn new(forward: Forward<S>, session: Arc<Session>) -> Self {
        Self {
            include_args: session.include_args(),
            forward,
            session,
        }
    }

    /// Whether the backend's layer must be told of a span (`on_new_span`) before its first
    /// entry in a window: tracing-perfetto-file ignores the entries of spans it does not know,
    /// and a window's layer knows only the spans announced to it.
    fn announces(&self) -> bool {
        match self.forward {
            Forward::Chrome(_) => false,
            #[cfg(feature = "perfetto")]
            Forward::Perfetto(_) => true,
        }
    }

    /// The open window, 0 if none: the one check between windows.
    #[inline(always)]
    fn window(&self) -> u64 {
        self.session.current.load(Ordering::Acquire)
    }

    /// Runs `f` with the backend's layer if window `w` is still open, counted as in flight so
    /// that the window is not switched under it.
    #[inline(always)]
    fn forward(&self, w: u64, f: impl FnOnce(&dyn Layer<S>)) {
        match &self.forward {
            Forward::Chrome(chrome) => {
                self.session.inflight.fetch_add(1, Ordering::SeqCst);
                let _in_flight = InFlight(&self.session.inflight);
                if self.session.current.load(Ordering::SeqCst) == w {
                    f(chrome);
                }
            }
            // The slot's read lock is the in-flight count: closing the window takes the write
            // lock, so it waits for the calls that saw the window open. `try_read` fails only
            // while the window is being switched: as if it were closed.
            #[cfg(feature = "perfetto")]
            Forward::Perfetto(slot) => {
                if let Ok(layer) = slot.try_read() {
                    if let (Some(layer), true) = (
                        layer.as_ref(),
                        self.session.current.load(Ordering::SeqCst) == w,
                    ) {
                        f(layer);
                    }
                }
            }
        }
    }

    #[inline(never)]
    fn new_span(&self, w: u64, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        self.forward(w, |layer| {
            if self.announces() {
                // Announced now, with its fields: not again at its first entry.
                if let Some(span) = ctx.span(id) {
                    span.extensions_mut().replace(Entered {
                        window: w,
                        depth: 0,
                    });
                }
            }
            layer.on_new_span(attrs, id, ctx);
        });
    }

    #[inline(never)]
    fn enter(&self, w: u64, id: &Id, ctx: Context<'_, S>) {
        self.forward(w, |layer| {
            let Some(span) = ctx.span(id) else {
                return;
            };
            let first = {
                let mut ext = span.extensions_mut();
                match ext.get_mut::<Entered>() {
                    Some(e) if e.window == w => {
                        e.depth += 1;
                        false
                    }
                    Some(e) => {
                        *e = Entered {
                            window: w,
                            depth: 1,
                        };
                        true
                    }
                    None => {
                        ext.insert(Entered {
                            window: w,
                            depth: 1,
                        });
                        true
                    }
                }
            };
            if first && self.announces() {
                // Created before the window: announced without its fields.
                let metadata = span.metadata();
                let none: [(&Field, Option<&dyn Value>); 0] = [];
                let values = metadata.fields().value_set(&none);
                drop(span);
                layer.on_new_span(&Attributes::new(metadata, &values), id, ctx.clone());
            } else {
                drop(span);
            }
            layer.on_enter(id, ctx);
        });
    }

    #[inline(never)]
    fn exit(&self, w: u64, id: &Id, ctx: Context<'_, S>) {
        self.forward(w, |layer| {
            let entered_here = ctx.span(id).is_some_and(|span| {
                let mut ext = span.extensions_mut();
                match ext.get_mut::<Entered>() {
                    Some(e) if e.window == w && e.depth > 0 => {
                        e.depth -= 1;
                        true
                    }
                    _ => false,
                }
            });
            if entered_here {
                layer.on_exit(id, ctx);
            }
        });
    }
}

impl<S> Layer<S> for ChromeTraceLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    fn on_register_dispatch(&self, subscriber: &tracing_core::Dispatch) {
        let _ = self.session.dispatch.set(subscriber.downgrade());
    }

    #[inline]
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if let Some(step) = self.session.step_name() {
            if attrs.metadata().name() == step {
                self.session.step_created(id);
            }
        }
        let w = self.window();
        if w != 0 && self.include_args {
            // The backend keeps the span's fields for its `args` (tracing-chrome does nothing
            // else here; without fields, tracing-perfetto-file is told at the first entry).
            self.new_span(w, attrs, id, ctx);
        }
    }

    #[inline]
    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let w = self.window();
        if w != 0 && self.include_args {
            self.forward(w, |layer| layer.on_record(id, values, ctx));
        }
    }

    #[inline]
    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let w = self.window();
        if w != 0 {
            self.forward(w, |layer| layer.on_event(event, ctx));
        }
    }

    #[inline]
    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        let w = self.window();
        if w != 0 {
            self.enter(w, id, ctx);
        }
    }

    #[inline]
    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        let w = self.window();
        if w != 0 {
            self.exit(w, id, ctx);
        }
    }

    #[inline]
    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let w = self.window();
        if w == 0 {
            return;
        }
        // tracing-chrome does nothing on close in its threaded style; tracing-perfetto-file
        // forgets the span.
        if self.announces() {
            self.forward(w, |layer| layer.on_close(id.clone(), ctx));
        }
        // The window may end here.
        if self.session.last_step.load(Ordering::Acquire) == id.into_u64() {
            self.session.span_closed(&id);
        }
    }
}

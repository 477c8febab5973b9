//! [`ChromeTraceLayer`]: the trace backend's layer behind the step schedule's gate.

use std::cell::RefCell;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use thread_local::ThreadLocal;
#[cfg(feature = "perfetto")]
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
/// its name with the step span's name). In a window, callbacks go to the backend's layer; an
/// exit is forwarded only if the thread's entry of that span was forwarded in the same window,
/// so spans entered before the window (the epoch around the step, a model layer's long-lived
/// span) never produce an unmatched end.
pub struct ChromeTraceLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    forward: Forward<S>,
    session: Arc<Session>,
    include_args: bool,
    /// Each thread's entries forwarded in the open window and not exited yet.
    entries: ThreadLocal<RefCell<Entries>>,
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

/// The backend's layer for one forwarded call, and (Perfetto) the spans it knows.
struct Target<'a, S>
where
    S: Subscriber,
{
    layer: &'a dyn Layer<S>,
    #[cfg(feature = "perfetto")]
    announced: Option<&'a super::announced::Announced>,
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

/// Entries a thread has deeper than this are not forwarded (a bound on its memory: a program
/// that leaks entered guards, or recursion this deep).
const MAX_ENTRIES: usize = 4096;

/// One thread's entries forwarded in window `window` and not exited yet, innermost last. A
/// span's exit happens on the thread of its entry, so a stack per thread pairs them without
/// state per span (none to allocate): a span exits as it was entered, in this window or not.
struct Entries {
    window: u64,
    ids: Vec<u64>,
}

impl Entries {
    fn new() -> RefCell<Self> {
        RefCell::new(Self {
            window: 0,
            ids: Vec::with_capacity(64),
        })
    }

    /// An entry of `id` in window `w` is forwarded; false if the thread has too many.
    #[inline]
    fn push(&mut self, w: u64, id: u64) -> bool {
        if self.window != w {
            // Entries of an earlier window never exit into this one.
            self.ids.clear();
            self.window = w;
        }
        let room = self.ids.len() < MAX_ENTRIES;
        if room {
            self.ids.push(id);
        }
        room
    }

    /// Whether an entry of `id` was forwarded in window `w` (and is now exited).
    #[inline]
    fn pop(&mut self, w: u64, id: u64) -> bool {
        if self.window != w {
            return false;
        }
        // The innermost entry, unless guards were dropped out of order.
        match self.ids.iter().rposition(|&e| e == id) {
            Some(i) => {
                self.ids.remove(i);
                true
            }
            None => false,
        }
    }
}

/// Counts a forwarding call as in flight until dropped (also on unwind).
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Release);
    }
}

/// Tells the window's layer of a span created before the window, without its fields (they
/// were recorded when no layer listened).
#[cfg(feature = "perfetto")]
#[cold]
#[inline(never)]
fn announce<S>(layer: &dyn Layer<S>, id: &Id, ctx: &Context<'_, S>)
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let Some(metadata) = ctx.metadata(id) else {
        return;
    };
    let none: [(&Field, Option<&dyn Value>); 0] = [];
    let values = metadata.fields().value_set(&none);
    layer.on_new_span(&Attributes::new(metadata, &values), id, ctx.clone());
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
            entries: ThreadLocal::new(),
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

    /// Runs `f` on this thread's entries (`None` if they are borrowed already: a callback
    /// re-entered from inside the backend).
    #[inline(always)]
    fn entries<R>(&self, f: impl FnOnce(&mut Entries) -> R) -> Option<R> {
        let entries = self.entries.get_or(Entries::new);
        let mut entries = entries.try_borrow_mut().ok()?;
        Some(f(&mut entries))
    }

    /// Runs `f` with the backend's layer if window `w` is still open, counted as in flight so
    /// that the window is not switched under it.
    #[inline(always)]
    fn forward(&self, w: u64, f: impl FnOnce(Target<'_, S>)) {
        match &self.forward {
            Forward::Chrome(chrome) => {
                self.session.inflight.fetch_add(1, Ordering::SeqCst);
                let _in_flight = InFlight(&self.session.inflight);
                if self.session.current.load(Ordering::SeqCst) == w {
                    f(Target {
                        layer: chrome,
                        #[cfg(feature = "perfetto")]
                        announced: None,
                    });
                }
            }
            // The window read from the slot is held (not freed, not completed) until this call
            // returns: closing it takes it out of the slot and the writer thread waits for such
            // calls. A window read after the switch is the next one, or none.
            #[cfg(feature = "perfetto")]
            Forward::Perfetto(slot) => {
                let window = slot.load();
                if let Some(window) = window.as_deref().filter(|win| win.number == w) {
                    f(Target {
                        layer: &window.layer,
                        announced: Some(&window.announced),
                    });
                }
            }
        }
    }

    #[inline(never)]
    fn new_span(&self, w: u64, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        self.forward(w, |target| {
            target.layer.on_new_span(attrs, id, ctx);
            // Announced now (with its fields): not again at its first entry.
            #[cfg(feature = "perfetto")]
            if let Some(announced) = target.announced {
                announced.created(id.into_u64());
            }
        });
    }

    #[inline(never)]
    fn enter(&self, w: u64, id: &Id, ctx: Context<'_, S>) {
        self.forward(w, |target| {
            #[cfg(feature = "perfetto")]
            if let Some(announced) = target.announced {
                if !announced.entered(id.into_u64(), || announce(target.layer, id, &ctx)) {
                    return;
                }
            }
            if self.entries(|e| e.push(w, id.into_u64())) == Some(true) {
                target.layer.on_enter(id, ctx);
            }
        });
    }

    #[inline(never)]
    fn exit(&self, w: u64, id: &Id, ctx: Context<'_, S>) {
        self.forward(w, |target| {
            if self.entries(|e| e.pop(w, id.into_u64())) == Some(true) {
                target.layer.on_exit(id, ctx);
            }
        });
    }

    #[inline(never)]
    fn close(&self, w: u64, id: &Id, ctx: Context<'_, S>) {
        self.forward(w, |target| {
            target.layer.on_close(id.clone(), ctx);
            #[cfg(feature = "perfetto")]
            if let Some(announced) = target.announced {
                announced.closed(id.into_u64());
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
        if w != 0 && (self.include_args || self.announces()) {
            // tracing-chrome keeps the span's fields for its `args` (it does nothing else here);
            // tracing-perfetto-file learns of the span (and its fields, with args).
            self.new_span(w, attrs, id, ctx);
        }
    }

    #[inline]
    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let w = self.window();
        if w != 0 && self.include_args {
            self.forward(w, |target| target.layer.on_record(id, values, ctx));
        }
    }

    #[inline]
    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let w = self.window();
        if w != 0 {
            self.forward(w, |target| target.layer.on_event(event, ctx));
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
            self.close(w, &id, ctx);
        }
        // The window may end here.
        if self.session.last_step.load(Ordering::Acquire) == id.into_u64() {
            self.session.span_closed(&id);
        }
    }
}

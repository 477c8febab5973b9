//! [`ChromeTraceLayer`]: the trace backend's layer behind the step schedule's gate.

use std::cell::RefCell;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
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
    /// Each thread's own state: its in-flight flag, its entries forwarded in the open window,
    /// the open window's Perfetto layer.
    threads: ThreadLocal<Local>,
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

/// One thread's state, reached without a lock: the thread is the only one to borrow `state`;
/// other threads read only `busy` (the session, when it closes a window).
struct Local {
    /// The window this thread is forwarding a call into, 0 if none (see `Session::busy`).
    busy: Arc<AtomicU64>,
    state: RefCell<State>,
}

/// What a thread keeps about the open window, `window`: its entries forwarded in that window
/// and not exited yet, innermost last, and (Perfetto) the window's layer. A span's exit happens
/// on the thread of its entry, so a stack per thread pairs them without state per span (none to
/// allocate): a span exits as it was entered, in this window or not.
struct State {
    window: u64,
    entries: Entries,
    /// The window's layer, taken from the slot at this thread's first call in the window. A
    /// reference held after the window closed only keeps memory: the file is completed by the
    /// session, not when the last reference goes.
    #[cfg(feature = "perfetto")]
    perfetto: Option<Arc<super::perfetto::Window>>,
}

/// See [`State`].
struct Entries(Vec<u64>);

impl Entries {
    /// An entry of `id` is forwarded; false if the thread has too many.
    #[inline]
    fn push(&mut self, id: u64) -> bool {
        let room = self.0.len() < MAX_ENTRIES;
        if room {
            self.0.push(id);
        }
        room
    }

    /// Whether an entry of `id` was forwarded (and is now exited).
    #[inline]
    fn pop(&mut self, id: u64) -> bool {
        // The innermost entry, unless guards were dropped out of order.
        match self.0.iter().rposition(|&e| e == id) {
            Some(i) => {
                self.0.remove(i);
                true
            }
            None => false,
        }
    }
}

/// Marks the thread's call into window `w` as in flight until dropped (also on unwind).
struct Busy<'a>(&'a AtomicU64);

impl<'a> Busy<'a> {
    #[inline(always)]
    fn new(flag: &'a AtomicU64, w: u64) -> Self {
        // SeqCst, as the session's store of the window and its reads of the flags: either the
        // session sees this call in flight, or the call sees the window closed.
        flag.store(w, Ordering::SeqCst);
        Self(flag)
    }
}

impl Drop for Busy<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.0.store(0, Ordering::Release);
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
            threads: ThreadLocal::new(),
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

    /// This thread's state, made (and its in-flight flag given to the session) at its first
    /// call in a window.
    #[inline(always)]
    fn local(&self) -> &Local {
        self.threads.get_or(|| Local {
            busy: self.session.thread_flag(),
            state: RefCell::new(State {
                window: 0,
                entries: Entries(Vec::with_capacity(64)),
                #[cfg(feature = "perfetto")]
                perfetto: None,
            }),
        })
    }

    /// Runs `f` with the backend's layer and this thread's entries if window `w` is still open,
    /// marked in flight on this thread so that the window is not closed under it. No lock and no
    /// write another thread reads on its hot path: the flag is this thread's own.
    #[inline(always)]
    fn forward(&self, w: u64, f: impl FnOnce(Target<'_, S>, &mut Entries)) {
        let local = self.local();
        // Already borrowed: a callback re-entered from inside the backend; not forwarded.
        let Ok(mut state) = local.state.try_borrow_mut() else {
            return;
        };
        let _busy = Busy::new(&local.busy, w);
        if self.session.current.load(Ordering::SeqCst) != w {
            return;
        }
        let state = &mut *state;
        if state.window != w {
            self.switch(state, w);
        }
        match &self.forward {
            Forward::Chrome(chrome) => f(
                Target {
                    layer: chrome,
                    #[cfg(feature = "perfetto")]
                    announced: None,
                },
                &mut state.entries,
            ),
            #[cfg(feature = "perfetto")]
            Forward::Perfetto(_) => {
                if let Some(window) = state.perfetto.as_deref() {
                    f(
                        Target {
                            layer: &window.layer,
                            announced: Some(&window.announced),
                        },
                        &mut state.entries,
                    );
                }
            }
        }
    }

    /// This thread's first call in window `w`: entries of an earlier window never exit into
    /// this one, and (Perfetto) the window's layer is taken from the slot.
    #[cold]
    #[inline(never)]
    fn switch(&self, state: &mut State, w: u64) {
        state.window = w;
        state.entries.0.clear();
        #[cfg(feature = "perfetto")]
        if let Forward::Perfetto(slot) = &self.forward {
            state.perfetto = slot
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
                .filter(|window| window.number == w);
        }
    }

    #[inline(never)]
    fn new_span(&self, w: u64, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        self.forward(w, |target, _| {
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
        self.forward(w, |target, entries| {
            #[cfg(feature = "perfetto")]
            if let Some(announced) = target.announced {
                if !announced.entered(id.into_u64(), || announce(target.layer, id, &ctx)) {
                    return;
                }
            }
            if entries.push(id.into_u64()) {
                target.layer.on_enter(id, ctx);
            }
        });
    }

    #[inline(never)]
    fn exit(&self, w: u64, id: &Id, ctx: Context<'_, S>) {
        self.forward(w, |target, entries| {
            if entries.pop(id.into_u64()) {
                target.layer.on_exit(id, ctx);
            }
        });
    }

    #[inline(never)]
    fn close(&self, w: u64, id: &Id, ctx: Context<'_, S>) {
        self.forward(w, |target, _| {
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
            self.forward(w, |target, _| target.layer.on_record(id, values, ctx));
        }
    }

    #[inline]
    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let w = self.window();
        if w != 0 {
            self.forward(w, |target, _| target.layer.on_event(event, ctx));
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

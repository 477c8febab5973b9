//! Span and field directives in the span filter (`SPANPROF_FILTER`, `Builder::with_filter`):
//! spanprof profiles exactly the spans a real `EnvFilter` enables as a per-layer filter, over a
//! scripted workload of nested spans, field values (given at creation and recorded later),
//! levels, re-entered spans and several threads.
//!
//! Each span carries `items = 1 << k`, with `k` unique among the spans of its name, so the sum
//! of `items` per name (spanprof's throughput sum, and the reference layer's) tells which spans
//! of that name were seen, not only how many.

use crate::support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use spanprof::ProfileLayer;
use support::quiet;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{debug_span, info_span, trace_span, Dispatch, Subscriber};
use tracing_subscriber::layer::{Context, Filter, Identity};
use tracing_subscriber::prelude::*;
use tracing_subscriber::EnvFilter;

/// Per span name: how many spans, and the `or` of their `items` bits.
type Seen = BTreeMap<String, (u64, u64)>;

/// The reference: a layer that notes every span it is shown.
#[derive(Clone, Default)]
struct Recording(Arc<Mutex<Seen>>);

impl Recording {
    fn seen(&self) -> Seen {
        self.0.lock().unwrap().clone()
    }
}

impl<S: Subscriber> tracing_subscriber::Layer<S> for Recording {
    fn on_new_span(&self, attrs: &Attributes<'_>, _: &Id, _: Context<'_, S>) {
        struct Items(u64);
        impl Visit for Items {
            fn record_u64(&mut self, field: &Field, value: u64) {
                if field.name() == "items" {
                    self.0 = value;
                }
            }
            fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
        }
        let mut items = Items(0);
        attrs.record(&mut items);
        let mut seen = self.0.lock().unwrap();
        let entry = seen.entry(attrs.metadata().name().to_string()).or_default();
        assert_eq!(entry.1 & items.0, 0, "items bit used twice");
        entry.0 += 1;
        entry.1 |= items.0;
    }
}

/// A per-layer filter that enables everything, and asks for every span (`sometimes`): beside
/// it, the subscriber asks every per-layer filter about every span (`Filter::enabled`) instead
/// of caching one callsite answer, and every span exists for spanprof's layer.
struct EverySpan;

impl<S> Filter<S> for EverySpan {
    fn enabled(&self, _: &tracing::Metadata<'_>, _: &Context<'_, S>) -> bool {
        true
    }
    fn callsite_enabled(
        &self,
        _: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        tracing::subscriber::Interest::sometimes()
    }
}

fn env_filter(directives: &str) -> EnvFilter {
    EnvFilter::builder().parse(directives).unwrap()
}

/// The spans of each name spanprof profiled, as [`Seen`].
fn profiled(snap: &spanprof::Snapshot) -> Seen {
    let mut seen = Seen::new();
    for s in snap.spans.iter().filter(|s| s.created > 0) {
        let entry = seen.entry(s.name.clone()).or_default();
        entry.0 += s.created;
        entry.1 |= s.items.unwrap_or(0);
    }
    seen
}

fn b(k: u64) -> u64 {
    assert!(k < 64);
    1 << k
}

/// Runs `f` on a new thread under the current dispatcher, and waits for it.
fn on_thread(f: impl FnOnce() + Send) {
    let dispatch = tracing::dispatcher::get_default(Dispatch::clone);
    std::thread::scope(|scope| {
        scope
            .spawn(move || tracing::dispatcher::with_default(&dispatch, f))
            .join()
            .unwrap()
    });
}

/// A request on the current thread: `parse`, then a `query` of `rows` rows.
fn request(id: u64, user: &str, table: &str, rows: std::ops::Range<u64>) -> tracing::Span {
    let req = info_span!(target: "app::server", "handle_request", id, user, items = b(id));
    req.in_scope(|| {
        debug_span!(target: "app::server", "parse", items = b(id)).in_scope(|| {});
        debug_span!(target: "app::db", "query", table, items = b(id)).in_scope(|| {
            for r in rows {
                trace_span!(target: "app::db", "row", items = b(r)).in_scope(|| {});
            }
        });
    });
    req
}

/// `work` spans `n` = `ns`, each with three `step`s, `odd` set for odd `n`.
fn work(ns: std::ops::Range<u64>) {
    for n in ns {
        let odd = n % 2 == 1;
        info_span!(target: "app::worker", "work", n, odd, items = b(n)).in_scope(|| {
            for k in 0..3 {
                debug_span!(target: "app::worker", "step", k, items = b(n * 3 + k)).in_scope(|| {});
            }
        });
    }
}

/// The scripted workload. Every span's `items` bit is unique among the spans of its name.
fn script() {
    // A row outside every request.
    trace_span!(target: "app::db", "row", items = b(0)).in_scope(|| {});
    request(1, "alice", "orders", 1..4);
    let bob = request(2, "bob", "users", 4..7);
    bob.in_scope(|| {
        // Inside bob's request on this thread; on another thread, the filter's scope of entered
        // spans is that thread's own.
        on_thread(|| {
            info_span!(target: "app::jobs", "job", items = b(0)).in_scope(|| {});
            info_span!(target: "app::jobs", parent: &bob, "job", items = b(1)).in_scope(|| {});
        });
        // A span with an explicit parent is decided by what this thread has entered (bob's
        // request), not by its parent.
        let other = info_span!(target: "app::server", "handle_request", id = 9u64, user = "eve", items = b(9));
        info_span!(target: "app::jobs", parent: &other, "job", items = b(2)).in_scope(|| {});
    });
    info_span!(target: "app::jobs", parent: &bob, "job", items = b(3)).in_scope(|| {});
    // Work on another thread, while requests go on on this one.
    std::thread::scope(|scope| {
        let dispatch = tracing::dispatcher::get_default(Dispatch::clone);
        scope.spawn(move || tracing::dispatcher::with_default(&dispatch, || work(0..10)));
        request(3, "alice", "orders", 7..10);
    });
    // A request created here and entered on another thread only.
    let moved = info_span!(target: "app::server", "handle_request", id = 4u64, user = "carol", items = b(4));
    on_thread(move || {
        moved.in_scope(|| {
            debug_span!(target: "app::server", "parse", items = b(4)).in_scope(|| {});
            debug_span!(target: "app::db", "query", table = "users", items = b(4)).in_scope(|| {
                trace_span!(target: "app::db", "row", items = b(10)).in_scope(|| {});
            });
        });
    });
    // `n` recorded before the span is entered.
    let w = info_span!(target: "app::worker", "work", n = tracing::field::Empty, odd = false, items = b(10));
    w.record("n", 7u64);
    w.in_scope(|| {
        debug_span!(target: "app::worker", "step", k = 0u64, items = b(30)).in_scope(|| {});
    });
    // `n` recorded while the span is entered: it counts from the next entry on.
    let w = info_span!(target: "app::worker", "work", n = tracing::field::Empty, odd = true, items = b(11));
    w.in_scope(|| {
        w.record("n", 1u64);
        debug_span!(target: "app::worker", "step", k = 0u64, items = b(31)).in_scope(|| {});
    });
    w.in_scope(|| {
        debug_span!(target: "app::worker", "step", k = 1u64, items = b(32)).in_scope(|| {});
    });
    // A `debug` span named `work`, and a request entered twice over (re-entry).
    debug_span!(target: "app::worker", "work", n = 1u64, odd = true, items = b(12)).in_scope(
        || {
            debug_span!(target: "app::worker", "step", k = 0u64, items = b(33)).in_scope(|| {});
        },
    );
    let req =
        info_span!(target: "app::server", "handle_request", id = 5u64, user = "bob", items = b(5));
    {
        let _outer = req.enter();
        {
            let _inner = req.enter();
            debug_span!(target: "app::server", "parse", items = b(5)).in_scope(|| {});
        }
        debug_span!(target: "app::server", "parse", items = b(6)).in_scope(|| {});
    }
    debug_span!(target: "app::server", "parse", items = b(7)).in_scope(|| {});
    tracing::warn_span!(target: "bg", "flush", items = b(0)).in_scope(|| {
        trace_span!(target: "app::db", "row", items = b(11)).in_scope(|| {});
    });
}

/// Runs the script once with the reference layer filtered by `EnvFilter` (asked about every
/// span) and spanprof's layer with the same directives in the same subscriber; returns what
/// each saw.
fn run_beside(directives: &str) -> (Seen, Seen) {
    let reference = Recording::default();
    let (layer, guard) = quiet(ProfileLayer::builder().with_filter(directives).unwrap())
        .build()
        .unwrap();
    let dispatch = Dispatch::new(
        tracing_subscriber::registry()
            .with(reference.clone().with_filter(env_filter(directives)))
            .with(Identity::new().with_filter(EverySpan))
            .with(layer),
    );
    tracing::dispatcher::with_default(&dispatch, script);
    (reference.seen(), profiled(&guard.snapshot()))
}

/// What the reference layer sees with `EnvFilter` as its per-layer filter, alone in its
/// subscriber.
fn reference_alone(directives: &str) -> Seen {
    let reference = Recording::default();
    let dispatch = Dispatch::new(
        tracing_subscriber::registry().with(reference.clone().with_filter(env_filter(directives))),
    );
    tracing::dispatcher::with_default(&dispatch, script);
    reference.seen()
}

/// Target and level directives, and span and field directives of every kind, alone and mixed.
const DIRECTIVES: &[&str] = &[
    "trace",
    "app=trace",
    "info",
    "app::db=off,info",
    "[handle_request]",
    "[handle_request]=debug",
    "app::server[handle_request]=info",
    "app::server[handle_request]=info,app::db=trace",
    "[handle_request{user=bob}]",
    "[{user=\"bob\"}]",
    "[{user=li}]",
    "[handle_request{user=al.*}]=debug",
    "[handle_request{id=4}]",
    "[handle_request{id=9}]",
    "[work{n=1}]",
    "[work{n=1}]=info",
    "[work{n=7}]",
    "[work{odd=true}]=debug",
    "[{odd=true}]",
    "[{table=users}]",
    "[{id=2}]=trace,app::worker=info",
    "[{items}]=info",
    "[{k}]",
    // A field name alone is checked on events only: every span up to its level.
    "[{n}]",
    "[{n}]=debug",
    // An empty span name: no span.
    "[]=info",
    "warn,[query]=trace",
    "app::db[query{table=orders}]=trace,app::server=info",
    "[work]=debug,[handle_request{id=4}]",
    "app::worker=off,[handle_request]",
    "[step]",
    "[job]",
    "[nothing]",
    "[flush]=warn",
];

#[test]
fn spanprof_profiles_what_envfilter_enables() {
    let mismatches: Vec<String> = DIRECTIVES
        .iter()
        .filter_map(|directives| {
            let (reference, spanprof) = run_beside(directives);
            (spanprof != reference).then(|| {
                format!("{directives:?}: EnvFilter enables {reference:?}, spanprof profiled {spanprof:?}")
            })
        })
        .collect();
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

#[test]
fn envfilter_alone_enables_the_same_spans() {
    // The same decisions with `EnvFilter` the only per-layer filter of its subscriber (its
    // callsite answers cached, levels above its maximum never created). Except where a span
    // directive's level is below a span it names (`[work{n=1}]=info` names a `debug` span,
    // `[{items}]=info` `debug` and `trace` ones): alone, `EnvFilter` answers "always" for such a
    // callsite and `tracing` then skips `enabled`, so only the global maximum level keeps the
    // span out, and the other tests' dispatchers alive at that moment raise it. See
    // `a_directive_level_caps_the_spans_it_names` for what spanprof does.
    const CACHED_ANSWER: &[&str] = &["[work{n=1}]=info", "[{items}]=info"];
    for directives in DIRECTIVES.iter().filter(|d| !CACHED_ANSWER.contains(d)) {
        let (reference, _) = run_beside(directives);
        assert_eq!(
            reference_alone(directives),
            reference,
            "directives {directives:?}"
        );
    }
}

/// Spans of a callsite made at run time (each `filler` has its own name).
mod fillers {
    use std::sync::OnceLock;
    use tracing::callsite::{Callsite, Identifier};
    use tracing::field::{FieldSet, Value};
    use tracing::metadata::Kind;
    use tracing::subscriber::Interest;
    use tracing::{Level, Metadata};

    struct Filler(OnceLock<Metadata<'static>>);

    impl Callsite for Filler {
        fn set_interest(&self, _: Interest) {}
        fn metadata(&self) -> &Metadata<'_> {
            self.0.get().unwrap()
        }
    }

    /// The metadata of a new span callsite (not registered).
    pub fn metadata(name: &'static str, level: Level) -> &'static Metadata<'static> {
        callsite(name, level).metadata()
    }

    fn callsite(name: &'static str, level: Level) -> &'static Filler {
        let callsite: &'static Filler = Box::leak(Box::new(Filler(OnceLock::new())));
        callsite.0.get_or_init(|| {
            Metadata::new(
                name,
                "fillers",
                level,
                None,
                None,
                None,
                FieldSet::new(&[], Identifier(callsite)),
                Kind::SPAN,
            )
        });
        callsite
    }

    /// Creates and closes one span of a new callsite named `filler<i>`, as the `span!` macro
    /// would (if the subscriber enables it).
    pub fn span(i: usize) {
        let name: &'static str = Box::leak(format!("filler{i}").into_boxed_str());
        let callsite = callsite(name, Level::INFO);
        let meta = callsite.metadata();
        tracing::callsite::register(callsite);
        if tracing::dispatcher::get_default(|d| d.enabled(meta)) {
            let values: [(&tracing::field::Field, Option<&dyn Value>); 0] = [];
            tracing::Span::new(meta, &meta.fields().value_set(&values)).in_scope(|| {});
        }
    }
}

#[test]
fn spans_inside_a_span_spanprof_cannot_hold_are_decided_as_envfilter_does() {
    // Once MAX_SPAN_NAMES names are in use, spanprof drops the spans of a new name; the filter
    // still sees such a span it enables, and the spans inside it are decided with it in scope.
    let directives = "[request]";
    let reference = Recording::default();
    let (layer, guard) = quiet(ProfileLayer::builder().with_filter(directives).unwrap())
        .build()
        .unwrap();
    let dispatch = Dispatch::new(
        tracing_subscriber::registry()
            .with(reference.clone().with_filter(env_filter(directives)))
            .with(Identity::new().with_filter(EverySpan))
            .with(layer),
    );
    let inner = || trace_span!("inner", items = b(0)).in_scope(|| {});
    tracing::dispatcher::with_default(&dispatch, || {
        inner();
        for i in 0..spanprof::builder::MAX_SPAN_NAMES {
            fillers::span(i);
        }
        info_span!("request", id = 1u64).in_scope(|| {
            inner();
            debug_span!("inner", items = b(1)).in_scope(|| {});
        });
        inner();
    });
    let snap = guard.snapshot();
    assert!(snap.dropped.spans_too_many_names > 0, "{:?}", snap.dropped);
    let mut seen = reference.seen();
    assert_eq!(seen.remove("request").map(|r| r.0), Some(1));
    assert_eq!(seen, Seen::from([("inner".to_string(), (2, b(0) | b(1)))]));
    assert_eq!(profiled(&snap), seen);
}

#[test]
fn a_directive_level_caps_the_spans_it_names() {
    // `[work{n=1}]=info`: the `info` spans named `work` and the spans up to `info` inside the
    // one with n=1; not the `debug` span named `work` (`EnvFilter::enabled` turns it down; a
    // subscriber that caches `EnvFilter`'s callsite interest instead may show it).
    let (reference, spanprof) = run_beside("[work{n=1}]=info");
    assert_eq!(
        reference,
        Seen::from([("work".to_string(), (12, (1 << 12) - 1))])
    );
    assert_eq!(spanprof, reference);
}

#[test]
fn span_directives_profile_the_spans_inside() {
    let bits = |ks: &[u64]| ks.iter().map(|&k| b(k)).fold(0, |a, b| a | b);
    let seen = |rows: &[(&str, &[u64])]| -> Seen {
        rows.iter()
            .map(|(name, ks)| (name.to_string(), (ks.len() as u64, bits(ks))))
            .collect()
    };
    // Every `handle_request` span, and what is created while one is entered on the same
    // thread: not the jobs of another thread, nor the spans before, after or beside them.
    let (reference, spanprof) = run_beside("[handle_request]");
    let expected = seen(&[
        ("handle_request", &[1, 2, 3, 4, 5, 9]),
        ("job", &[2]),
        ("parse", &[1, 2, 3, 4, 5, 6]),
        ("query", &[1, 2, 3, 4]),
        ("row", &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]),
    ]);
    assert_eq!(reference, expected);
    assert_eq!(spanprof, expected);
    // Every `work` span (the filter watches each), and the steps inside those whose `n` is 1:
    // n = 1, the span whose `n` became 1 while entered (its second entry), the `debug` one.
    let (reference, spanprof) = run_beside("[work{n=1}]");
    let expected = seen(&[
        ("step", &[3, 4, 5, 32, 33]),
        ("work", &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]),
    ]);
    assert_eq!(reference, expected);
    assert_eq!(spanprof, expected);
}

#[test]
fn a_filter_that_follows_spans_leaves_the_other_layers_interest_alone() {
    // spanprof's span filter is its own, not tracing-subscriber's per-layer filter
    // (`Filtered`): its layer answers `always` for every callsite, those the directives name,
    // leave to the scope or never enable alike, so a callsite the other layers enable always
    // stays so. (A per-layer `EnvFilter` with span directives answers `sometimes` for every
    // callsite they do not name, at any level, and then every layer is asked about each of its
    // spans and events.)
    use tracing::subscriber::Interest;
    use tracing_subscriber::{Layer, Registry};
    let (layer, _guard) = quiet(ProfileLayer::builder().with_filter("[outer]=info").unwrap())
        .build()
        .unwrap();
    let filter = env_filter("[outer]=info");
    for (name, level, per_layer) in [
        ("outer", tracing::Level::INFO, Interest::always()),
        ("inner", tracing::Level::INFO, Interest::sometimes()),
        ("inner", tracing::Level::DEBUG, Interest::sometimes()),
    ] {
        let meta = fillers::metadata(name, level);
        assert!(
            <ProfileLayer as Layer<Registry>>::register_callsite(&layer, meta).is_always(),
            "{name} at {level}"
        );
        let interest = <EnvFilter as Filter<Registry>>::callsite_enabled(&filter, meta);
        assert_eq!(
            format!("{interest:?}"),
            format!("{per_layer:?}"),
            "{name} at {level}"
        );
    }
}

//! The span filter's directives read as `EnvFilter` reads them, for two things:
//!
//! - whether the layer decides spans per span ([`follows_spans`]): `EnvFilter` does once a
//!   directive has a span part (a span's name or fields in brackets), told from the directives
//!   themselves, not from the filter's printed form;
//! - the hint for a directive that names a span where `EnvFilter` reads a target:
//!   `SPANPROF_FILTER=decode` enables the spans whose target starts with `decode`, not the spans
//!   named `decode` (`[decode]`). The layer notes the callsites it is told about in
//!   `register_callsite` (once per callsite, never on the hot path); at the end of the run each
//!   directive whose target matches none of their targets but is one of their span names gets
//!   one line.

use std::collections::HashSet;
use std::sync::Mutex;

use tracing_core::{LevelFilter, Metadata};

/// The targets and span names of the callsites registered while the layer lived.
#[derive(Debug, Default)]
pub(crate) struct SeenCallsites {
    seen: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    /// Every callsite's target (spans' and events').
    targets: HashSet<&'static str>,
    /// The names of span callsites.
    span_names: HashSet<&'static str>,
}

impl SeenCallsites {
    /// Notes a callsite (from `register_callsite`: once per callsite and dispatcher).
    pub(crate) fn add(&self, meta: &'static Metadata<'static>) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.targets.insert(meta.target());
        if meta.is_span() {
            seen.span_names.insert(meta.name());
        }
    }

    /// One line per directive of `directives` whose target matches no callsite's target (a
    /// target directive enables the targets it is a prefix of) but is the name of a span
    /// callsite. `origin` says where the directives came from (`SPANPROF_FILTER`).
    pub(crate) fn hints(&self, directives: &str, origin: &str) -> Vec<String> {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let mut lines = Vec::new();
        // `EnvFilter` splits its directives on commas, as here.
        for directive in directives.split(',').map(str::trim) {
            let Some(target) = directive_target(directive) else {
                continue;
            };
            if has_span_part(directive) {
                // Already a span directive within a target.
                continue;
            }
            let rest = &directive[target.len()..];
            let matches_a_target = seen.targets.iter().any(|t| t.starts_with(target));
            if !matches_a_target && seen.span_names.contains(target) {
                lines.push(format!(
                    "spanprof: {origin}: `{target}` matches no target; did you mean \
                     `[{target}]{rest}` (a span name)?"
                ));
            }
        }
        lines
    }
}

/// Whether `EnvFilter` decides some spans of `directives` per span: whether one of them has a
/// span part, `[...]` before its level: a span's name (`[name]`, `target[name]=level`, even
/// `[]`), fields (`[{field=value}]`, `[name{field}]`), or both. `EnvFilter` counts every such
/// directive among its dynamic ones (a field name without a value too: it then follows the
/// spans of the callsites that have the field), follows the spans they match (which field values
/// matched, which of them are entered), and decides the spans created inside them from that
/// scope. Directives of targets and levels alone are decided once per callsite.
///
/// Read from the directives as `EnvFilter` parses them (split on every comma, each trimmed),
/// not from the filter's printed form.
pub(crate) fn follows_spans(directives: &str) -> bool {
    directives.split(',').any(has_span_part)
}

/// Whether one directive (no comma) has a span part. `EnvFilter` reads a `[` before any `=` as
/// the start of the span part (the level comes after `=`, and a target holds neither); a `[`
/// after the `=` is in the level, which it rejects. A directive it rejects (`[a`, `[{}]`) has
/// been refused by the builder before the layer is made: answering `true` for those only costs.
fn has_span_part(directive: &str) -> bool {
    let directive = directive.trim();
    directive
        .find(['[', '='])
        .is_some_and(|at| directive[at..].starts_with('['))
}

/// The target a directive of `EnvFilter` syntax names, if any: what comes before its span part
/// (`[`) or its level (`=`). A directive that is a level alone (`info`, `3`) has none.
fn directive_target(directive: &str) -> Option<&str> {
    let end = directive.find(['[', '=']).unwrap_or(directive.len());
    let target = directive[..end].trim_end();
    if target.is_empty() || target.len() != end {
        return None;
    }
    if end == directive.len() && target.parse::<LevelFilter>().is_ok() {
        return None;
    }
    Some(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_of_directives() {
        for (directive, want) in [
            ("decode", Some("decode")),
            ("decode=debug", Some("decode")),
            ("my_app::db=trace", Some("my_app::db")),
            ("app[span]=info", Some("app")),
            ("[decode]", None),
            ("[decode]=debug", None),
            ("info", None),
            ("WARN", None),
            ("3", None),
            ("off", None),
            ("", None),
            ("info=debug", Some("info")),
        ] {
            assert_eq!(directive_target(directive), want, "{directive:?}");
        }
    }

    #[test]
    fn span_parts_of_directives() {
        for (directive, want) in [
            ("", false),
            ("info", false),
            ("target=debug", false),
            ("my_app::db", false),
            ("a[b]", true),
            ("a[b]=info", true),
            ("[]", true),
            ("[{x=1}]", true),
            ("[{x}]=debug", true),
            ("t::m[span{f=\"v w\"}]=trace", true),
            // A value holds anything but `}` and `,`.
            ("[s{re=a[b]=c}]", true),
            ("  [work{n=1}]=info  ", true),
            // A `[` after `=` is in the level (which `EnvFilter` rejects).
            ("a=[b]", false),
            ("=[", false),
            // Cut at the comma `EnvFilter` splits on: rejected, counted as span directives.
            ("t::m[span{f=\"v", true),
            ("[a", true),
        ] {
            assert_eq!(has_span_part(directive), want, "{directive:?}");
        }
    }

    /// Directives with a span part are followed per span; targets and levels are decided per
    /// callsite.
    const FOLLOWS_SPANS: &[(&str, bool)] = &[
        ("", false),
        (" ", false),
        ("info", false),
        ("target=debug", false),
        ("my_app=trace,my_app::io=off,warn", false),
        ("spanprof::perf", false),
        ("a=debug,b::c=off", false),
        ("[{items}]", true),
        ("[{items}]=info,app=debug", true),
        ("app[{k}]=trace", true),
        ("a[b]", true),
        ("[handle_request]", true),
        ("[]", true),
        ("[]=off", true),
        ("[{x=1}]", true),
        ("[{n=1}]=debug", true),
        ("[{x=}]", true),
        ("[work{n=1}]", true),
        ("[work{odd}]", true),
        ("my_app[work]=info,warn", true),
        ("info,my_app::io[{path=\"a b\"}]=trace", true),
        ("t::m[span{f=\"v,w\"}]=trace", true),
        ("  info ,  [work]  ", true),
        ("info,,[work]", true),
        ("[{items}],[{user=bob}]", true),
    ];

    #[test]
    fn directives_with_a_span_part_are_followed() {
        for &(directives, want) in FOLLOWS_SPANS {
            assert_eq!(follows_spans(directives), want, "{directives:?}");
        }
    }

    #[test]
    fn envfilter_follows_the_same_directives() {
        // The oracle: an `EnvFilter` with dynamic directives answers `sometimes` for a span
        // callsite that none names and no other directive enables (its spans are decided from
        // the scope); one without answers `never` for it. (`always`: a directive enables it,
        // `[{items}]` among them, whose field names are not checked for spans: no answer.)
        use tracing_subscriber::{EnvFilter, Layer, Registry};
        let probe = span_at("probe", "probe::target", tracing_core::Level::TRACE);
        let mut unanswered = Vec::new();
        for &(directives, want) in FOLLOWS_SPANS {
            let Ok(filter) = EnvFilter::builder().parse(directives) else {
                unanswered.push(directives); // Rejected: blank, or cut at a comma.
                continue;
            };
            let interest = <EnvFilter as Layer<Registry>>::register_callsite(&filter, probe);
            if interest.is_always() {
                unanswered.push(directives);
            } else {
                assert_eq!(interest.is_sometimes(), want, "{directives:?}");
            }
        }
        assert_eq!(
            unanswered,
            [
                " ",
                "[{items}]",
                "t::m[span{f=\"v,w\"}]=trace",
                "[{items}],[{user=bob}]"
            ]
        );
    }

    struct Site;
    impl tracing_core::Callsite for Site {
        fn set_interest(&self, _: tracing_core::Interest) {}
        fn metadata(&self) -> &Metadata<'_> {
            unimplemented!()
        }
    }

    fn span(name: &'static str, target: &'static str) -> &'static Metadata<'static> {
        span_at(name, target, tracing_core::Level::INFO)
    }

    fn span_at(
        name: &'static str,
        target: &'static str,
        level: tracing_core::Level,
    ) -> &'static Metadata<'static> {
        Box::leak(Box::new(Metadata::new(
            name,
            target,
            level,
            None,
            None,
            None,
            tracing_core::field::FieldSet::new(&[], tracing_core::identify_callsite!(&Site)),
            tracing_core::metadata::Kind::SPAN,
        )))
    }

    #[test]
    fn a_target_that_is_only_a_span_name_gets_a_hint() {
        let seen = SeenCallsites::default();
        for meta in [
            span("decode", "pipeline"),
            span("checksum", "pipeline::io"),
            span("pipeline", "other"),
        ] {
            seen.add(meta);
        }
        let hints = seen.hints(
            "decode,checksum=debug, pipeline,[decode],info",
            "SPANPROF_FILTER",
        );
        assert_eq!(
            hints,
            [
                "spanprof: SPANPROF_FILTER: `decode` matches no target; did you mean `[decode]` \
                 (a span name)?",
                "spanprof: SPANPROF_FILTER: `checksum` matches no target; did you mean \
                 `[checksum]=debug` (a span name)?",
            ]
        );
        // A target prefix matches: `pipe` enables `pipeline` and `pipeline::io`.
        seen.add(span("pipe", "x"));
        assert!(seen.hints("pipe", "SPANPROF_FILTER").is_empty());
        assert!(seen.hints("nothing", "SPANPROF_FILTER").is_empty());
    }
}

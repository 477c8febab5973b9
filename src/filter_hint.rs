//! The hint for a span filter directive that names a span where `EnvFilter` reads a target:
//! `SPANPROF_FILTER=decode` enables the spans whose target starts with `decode`, not the spans
//! named `decode` (`[decode]`). The layer notes the callsites it is told about in
//! `register_callsite` (once per callsite, never on the hot path); at the end of the run each
//! directive whose target matches none of their targets but is one of their span names gets
//! one line.

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
            let rest = &directive[target.len()..];
            if rest.starts_with('[') {
                // Already a span directive within a target.
                continue;
            }
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

    struct Site;
    impl tracing_core::Callsite for Site {
        fn set_interest(&self, _: tracing_core::Interest) {}
        fn metadata(&self) -> &Metadata<'_> {
            unimplemented!()
        }
    }

    fn span(name: &'static str, target: &'static str) -> &'static Metadata<'static> {
        Box::leak(Box::new(Metadata::new(
            name,
            target,
            tracing_core::Level::INFO,
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

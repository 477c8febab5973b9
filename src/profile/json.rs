//! The JSON form of a [`Snapshot`]: writing, reading (every schema version) and the histogram
//! encoding.

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;

use serde_json::error::Category;

use super::{
    HistogramSpec, Snapshot, Stat, HIGHEST_NS, LOWEST_NS, SCHEMA, SCHEMA_VERSION,
    SIGNIFICANT_DIGITS,
};
use crate::error::{Error, Result};

impl Snapshot {
    /// Serialises the profile as pretty-printed JSON (schema [`SCHEMA_VERSION`]).
    pub fn to_json(&self) -> String {
        // UNWRAP: the model holds only strings, integers, finite floats and options.
        serde_json::to_string_pretty(self).expect("snapshot serialises")
    }

    /// Parses a profile of any schema version up to [`SCHEMA_VERSION`]. `origin` names the
    /// input in errors (a path, `stdin`, ...).
    ///
    /// # Errors
    /// [`Error::InvalidProfile`] naming `origin` and what is wrong: not a JSON object, not a
    /// spanprof profile, a newer schema version, a field of the wrong type, a histogram that
    /// does not decode, a statistic whose figures disagree (with its histogram, or its mean
    /// with `total_ns / count`), a span name, metric or call path listed twice.
    pub fn from_json(json: &str, origin: &str) -> Result<Self> {
        let invalid = |message: String| Error::InvalidProfile {
            origin: origin.to_string(),
            message,
        };
        // The header first, so a newer or foreign file gets a precise complaint rather than a
        // missing field, and histograms of other bounds a complaint about the bounds. A profile
        // is a JSON object: serde's derived `Deserialize` would also take a struct from an
        // array of its fields in order, which would skip these checks.
        let header = match serde_json::from_str::<Top>(json) {
            Ok(Top::Object(header)) => header,
            Ok(Top::Other(found)) => {
                return Err(invalid(format!(
                    "not a JSON object but {found}: a {SCHEMA} file is an object with \
                     \"schema\" and \"version\" fields"
                )))
            }
            // Not expected (the header keeps its fields as they are), and not a syntax error.
            Err(e) if e.classify() == Category::Data => return Err(invalid(e.to_string())),
            Err(e) => return Err(invalid(format!("not a JSON object: {e}"))),
        };
        match &header.schema {
            Some(serde_json::Value::String(schema)) if schema == SCHEMA => {}
            Some(serde_json::Value::String(other)) => {
                return Err(invalid(format!("schema is {other:?}, expected {SCHEMA:?}")))
            }
            Some(other) => return Err(invalid(format!("schema is {other}, expected {SCHEMA:?}"))),
            None => return Err(invalid(format!("no \"schema\" field: not a {SCHEMA} file"))),
        }
        match &header.version {
            None => return Err(invalid("no \"version\" field".to_string())),
            Some(version) => match version.as_u64() {
                Some(v) if (1..=u64::from(SCHEMA_VERSION)).contains(&v) => {}
                Some(v) => {
                    return Err(invalid(format!(
                        "schema version {v} is not one this spanprof reads (1 to \
                         {SCHEMA_VERSION})"
                    )))
                }
                None => {
                    return Err(invalid(format!(
                        "version is {version}, expected an integer: the schema version (1 to \
                         {SCHEMA_VERSION})"
                    )))
                }
            },
        }
        // Histograms of the wrong type are left to the full parse below, which names them.
        if let Some(spec) = header
            .histograms
            .and_then(|h| HistogramSpec::deserialize(h).ok())
        {
            check_spec(&spec).map_err(invalid)?;
        }
        // Versions 1 and 2 parse into the current model: v1 lacks the optional `resources`,
        // v2 has a per-span `resources.leak` that is now an analysis (ignored here).
        // Histograms are checked and decoded as they are parsed (src/profile/hdr.rs), their
        // errors naming the field.
        path::reset();
        let parsed = serde_json::from_str::<Snapshot>(json);
        path::reset();
        let mut snapshot = parsed.map_err(|e| invalid(e.to_string()))?;
        check_spec(&snapshot.histograms).map_err(invalid)?;
        check_stats(&snapshot).map_err(invalid)?;
        snapshot.version = SCHEMA_VERSION;
        Ok(snapshot)
    }

    /// Writes the profile to a file, creating parent directories. The file is replaced
    /// atomically: readers see the old profile or the new one, never a part.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file.
    pub fn write_json(&self, path: impl AsRef<Path>) -> Result<()> {
        let json = self.to_json();
        crate::atomic_file::write(path.as_ref(), "writing profile", |w| {
            w.write_all(json.as_bytes())
        })
    }

    /// Reads a profile from a file.
    ///
    /// # Errors
    /// [`Error::Io`] if the file cannot be read, [`Error::InvalidProfile`] naming it if it is
    /// not a profile this crate reads.
    pub fn read_json(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let json = std::fs::read_to_string(path).map_err(|source| Error::Io {
            action: "reading profile",
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_json(&json, &path.display().to_string())
    }
}

/// The top of a profile's JSON: an object, of which only the header fields are kept (as
/// they are, so that a field of the wrong type gets a complaint naming it), or something else.
enum Top {
    Object(Header),
    /// What the document is instead: `an array`, `null`, ...
    Other(&'static str),
}

#[derive(Default)]
struct Header {
    schema: Option<serde_json::Value>,
    version: Option<serde_json::Value>,
    histograms: Option<serde_json::Value>,
}

impl<'de> Deserialize<'de> for Top {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
        struct TopVisitor;
        impl<'de> Visitor<'de> for TopVisitor {
            type Value = Top;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Top, A::Error> {
                let mut header = Header::default();
                while let Some(key) = map.next_key::<String>()? {
                    // A repeated field is refused by the full parse: the first is kept here.
                    let slot = match key.as_str() {
                        "schema" => &mut header.schema,
                        "version" => &mut header.version,
                        "histograms" => &mut header.histograms,
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                            continue;
                        }
                    };
                    let value = map.next_value()?;
                    slot.get_or_insert(value);
                }
                Ok(Top::Object(header))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Top, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Top::Other("an array"))
            }
            fn visit_unit<E>(self) -> Result<Top, E> {
                Ok(Top::Other("null"))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Top, E> {
                Ok(Top::Other("a boolean"))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Top, E> {
                Ok(Top::Other("a number"))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Top, E> {
                Ok(Top::Other("a number"))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Top, E> {
                Ok(Top::Other("a number"))
            }
            fn visit_str<E>(self, _: &str) -> Result<Top, E> {
                Ok(Top::Other("a string"))
            }
        }
        d.deserialize_any(TopVisitor)
    }
}

/// The `histograms.encoding` of every profile.
pub(crate) const ENCODING: &str = "hdrhistogram-v2-deflate-base64";

/// The histogram spec must be the one spanprof writes: histograms of other bounds would not
/// map onto its buckets.
fn check_spec(spec: &HistogramSpec) -> Result<(), String> {
    let wrong = |field: &str, found: &dyn std::fmt::Debug, expected: &dyn std::fmt::Debug| {
        Err(format!(
            "histograms.{field} is {found:?}, expected {expected:?}"
        ))
    };
    if spec.unit != "ns" {
        return wrong("unit", &spec.unit, &"ns");
    }
    if spec.significant_digits != SIGNIFICANT_DIGITS {
        return wrong(
            "significant_digits",
            &spec.significant_digits,
            &SIGNIFICANT_DIGITS,
        );
    }
    if spec.lowest != LOWEST_NS {
        return wrong("lowest", &spec.lowest, &LOWEST_NS);
    }
    if spec.highest != HIGHEST_NS {
        return wrong("highest", &spec.highest, &HIGHEST_NS);
    }
    if spec.encoding != ENCODING {
        return wrong("encoding", &spec.encoding, &ENCODING);
    }
    Ok(())
}

/// The figures of each statistic must agree with its histogram: `count` is the histogram's
/// samples, `min_ns` <= `max_ns`, each percentile of a non-empty statistic lies within
/// [`min_ns`, `max_ns`], `mean_ns` is `total_ns / count` and `stddev_ns` a finite number >= 0.
/// (`calls` is a counter, not the histogram's count: spans closing while a snapshot is taken
/// make them differ; it is not checked against it.) Span names, metrics and call paths are
/// each one entry per key.
fn check_stats(snapshot: &Snapshot) -> Result<(), String> {
    check_unique(snapshot)?;
    for (i, span) in snapshot.spans.iter().enumerate() {
        for (name, stat) in [
            ("entry_busy", &span.entry_busy),
            ("entry_self", &span.entry_self),
            ("busy", &span.busy),
            ("self", &span.self_time),
            ("wall", &span.wall),
        ] {
            check_stat(stat)
                .map_err(|(field, what)| format!("spans[{i}].{name}.{field}: {what}"))?;
        }
    }
    for (i, span) in snapshot.spans.iter().enumerate() {
        let gpus = span.resources.as_ref().map_or(&[][..], |r| &r.gpus[..]);
        if let Some(g) = gpus.iter().find(|g| g.device >= MAX_GPU_DEVICE) {
            return Err(format!(
                "spans[{i}].resources.gpus: device {} (a device index is below {MAX_GPU_DEVICE})",
                g.device
            ));
        }
    }
    let nodes = snapshot.tree.as_ref().map_or(&[][..], |t| &t.nodes[..]);
    let mut depths: Vec<usize> = Vec::with_capacity(nodes.len());
    for (i, node) in nodes.iter().enumerate() {
        if let Some(parent) = node.parent.filter(|&p| p as usize >= i) {
            return Err(format!(
                "tree.nodes[{i}].parent: {parent} is not the index of an earlier node"
            ));
        }
        let depth = node.parent.map_or(1, |p| depths[p as usize] + 1);
        if depth > MAX_TREE_DEPTH_READ {
            return Err(format!(
                "tree.nodes[{i}]: a call path {depth} deep (a tree is at most \
                 {MAX_TREE_DEPTH_READ} deep)"
            ));
        }
        depths.push(depth);
        for (name, stat) in [("busy", &node.busy), ("self", &node.self_time)] {
            check_stat(stat)
                .map_err(|(field, what)| format!("tree.nodes[{i}].{name}.{field}: {what}"))?;
        }
    }
    for (i, metric) in snapshot.metrics.iter().enumerate() {
        use super::{MetricKind as K, MetricValue as V};
        let (value, fits) = match &metric.value {
            V::Sum(_) => (
                "sum",
                matches!(metric.kind, K::Counter | K::MonotonicCounter),
            ),
            V::Histogram(_) => ("histogram", metric.kind == K::Histogram),
            V::Gauge(_) => ("gauge", metric.kind == K::Gauge),
        };
        if !fits {
            return Err(format!(
                "metrics[{i}]: a {} metric with a {value} value",
                metric.kind.as_str()
            ));
        }
        if let super::MetricValue::Histogram(h) = &metric.value {
            for (name, stat) in [("integers", &h.integers), ("floats", &h.floats)] {
                if let Some(stat) = stat {
                    check_stat(stat).map_err(|(field, what)| {
                        format!("metrics[{i}].value.histogram.{name}.{field}: {what}")
                    })?;
                }
            }
        }
    }
    Ok(())
}

/// The deepest call path a profile may hold: spanprof records 32 levels
/// (`MAX_TREE_DEPTH`); a reader of later profiles allows more, but not a crafted chain of
/// thousands, which every analysis of paths would take quadratic time and memory for.
const MAX_TREE_DEPTH_READ: usize = 256;

/// The GPU device indices a profile may hold: spanprof samples at most 8 devices; one column
/// group per index in the CSV report.
const MAX_GPU_DEVICE: u32 = 64;

/// One entry per key: span names by (name, target) (what [`Snapshot::merge`] and the
/// comparison match on), metrics by (name, kind, span name, target) ([`Metric::same_key`]),
/// call-tree nodes by (parent, name, target, other node) (the path [`CallTree::merge`] adds
/// by). A second entry would be reported twice and folded into the first by a merge.
///
/// [`Metric::same_key`]: super::Metric::same_key
/// [`CallTree::merge`]: super::CallTree::merge
fn check_unique(snapshot: &Snapshot) -> Result<(), String> {
    let mut spans = HashMap::with_capacity(snapshot.spans.len());
    for (i, span) in snapshot.spans.iter().enumerate() {
        if let Some(first) = spans.insert((&span.name, &span.target), i) {
            return Err(format!(
                "spans[{i}]: span name {:?} of target {:?} again (first at spans[{first}]): \
                 a profile has one entry per name and target",
                span.name, span.target
            ));
        }
    }
    let mut metrics = HashMap::with_capacity(snapshot.metrics.len());
    for (i, m) in snapshot.metrics.iter().enumerate() {
        let key = (&m.name, m.kind, &m.span, &m.span_target);
        if let Some(first) = metrics.insert(key, i) {
            let span = match (&m.span, &m.span_target) {
                (Some(name), Some(target)) => format!("span name {name:?} of target {target:?}"),
                (Some(name), None) => format!("span name {name:?}"),
                _ => "no span".to_string(),
            };
            return Err(format!(
                "metrics[{i}]: {} metric {:?} in {span} again (first at metrics[{first}]): a \
                 profile has one entry per metric and span name",
                m.kind.as_str(),
                m.name
            ));
        }
    }
    if let Some(tree) = &snapshot.tree {
        let mut paths = HashMap::with_capacity(tree.nodes.len());
        for (i, node) in tree.nodes.iter().enumerate() {
            let key = (node.parent, &node.name, &node.target, node.other);
            if let Some(first) = paths.insert(key, i) {
                return Err(format!(
                    "tree.nodes[{i}]: call path {:?} of target {:?} again (first at \
                     tree.nodes[{first}]): a tree has one node per path",
                    tree.path(i).join(";"),
                    node.target
                ));
            }
        }
    }
    Ok(())
}

fn check_stat(stat: &Stat) -> Result<(), (&'static str, String)> {
    let samples = stat.histogram.len();
    if stat.count != samples {
        return Err((
            "count",
            format!("{} samples, the histogram holds {samples}", stat.count),
        ));
    }
    // The mean as the writer computes it (`Stat::new`), to within far less than any real
    // difference and far more than a float's rounding. Not checked against [min_ns, max_ns]:
    // a snapshot of a running program may read a sample's sum and not yet its bucket.
    let mean = if stat.count == 0 {
        0.0
    } else {
        stat.total_ns as f64 / stat.count as f64
    };
    // (A NaN agrees with nothing.)
    let agrees = (stat.mean_ns - mean).abs() <= mean * 1e-9;
    if !agrees {
        let expected = if stat.count == 0 {
            "0 for no samples".to_string()
        } else {
            format!(
                "total_ns / count = {} / {} = {mean:?}",
                stat.total_ns, stat.count
            )
        };
        return Err((
            "mean_ns",
            format!("{:?}, expected {expected}", stat.mean_ns),
        ));
    }
    if !(stat.stddev_ns.is_finite() && stat.stddev_ns >= 0.0) {
        return Err((
            "stddev_ns",
            format!("{:?} is not a finite number >= 0", stat.stddev_ns),
        ));
    }
    if stat.min_ns > stat.max_ns {
        return Err((
            "min_ns",
            format!("{} is more than max_ns ({})", stat.min_ns, stat.max_ns),
        ));
    }
    if stat.count > 0 {
        for (field, p) in [
            ("p50_ns", stat.p50_ns),
            ("p90_ns", stat.p90_ns),
            ("p99_ns", stat.p99_ns),
            ("p999_ns", stat.p999_ns),
        ] {
            if p < stat.min_ns || p > stat.max_ns {
                return Err((
                    field,
                    format!(
                        "{p} is outside [min_ns, max_ns] = [{}, {}]",
                        stat.min_ns, stat.max_ns
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Where the parser is, for the errors of histograms: `spans[3].entry_busy.histogram`.
pub(super) mod path {
    use std::cell::Cell;

    use serde::de::{Deserialize, Deserializer, SeqAccess, Visitor};

    use crate::profile::{SpanStats, Stat};

    thread_local! {
        static SPAN: Cell<Option<usize>> = const { Cell::new(None) };
        static STAT: Cell<Option<&'static str>> = const { Cell::new(None) };
    }

    pub(crate) fn reset() {
        SPAN.with(|c| c.set(None));
        STAT.with(|c| c.set(None));
    }

    /// The path of the histogram being parsed.
    pub(crate) fn histogram() -> String {
        match (SPAN.with(Cell::get), STAT.with(Cell::get)) {
            (Some(i), Some(stat)) => format!("spans[{i}].{stat}.histogram"),
            (None, Some(stat)) => format!("{stat}.histogram"),
            _ => "histogram".to_string(),
        }
    }

    /// `Snapshot::spans`, noting the index of the span being parsed.
    pub(crate) fn spans<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<SpanStats>, D::Error> {
        struct Spans;
        impl<'de> Visitor<'de> for Spans {
            type Value = Vec<SpanStats>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an array of span statistics")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut spans = Vec::new();
                loop {
                    SPAN.with(|c| c.set(Some(spans.len())));
                    match seq.next_element()? {
                        Some(span) => spans.push(span),
                        None => break,
                    }
                }
                SPAN.with(|c| c.set(None));
                Ok(spans)
            }
        }
        d.deserialize_seq(Spans)
    }

    fn stat<'de, D: Deserializer<'de>>(name: &'static str, d: D) -> Result<Stat, D::Error> {
        let outer = STAT.with(|c| c.replace(Some(name)));
        let stat = Stat::deserialize(d);
        STAT.with(|c| c.set(outer));
        stat
    }

    macro_rules! stats {
        ($($field:ident = $name:literal),*) => {$(
            pub(crate) fn $field<'de, D: Deserializer<'de>>(d: D) -> Result<Stat, D::Error> {
                stat($name, d)
            }
        )*};
    }
    stats!(
        entry_busy = "entry_busy",
        entry_self = "entry_self",
        busy = "busy",
        self_time = "self",
        wall = "wall"
    );
}

/// HdrHistogram V2 + deflate, base64 (standard alphabet, padded).
pub(super) mod hdr_base64 {
    use base64::Engine;
    use hdrhistogram::serialization::{Serializer, V2DeflateSerializer};
    use hdrhistogram::Histogram;
    use serde::de::Visitor;

    use crate::profile::hdr::{validate, MAX_INFLATED_LEN};
    use crate::profile::Buckets;
    use crate::profile::{HIGHEST_NS, LOWEST_NS, SIGNIFICANT_DIGITS};

    /// The longest base64 text a histogram can need: its inflated bound stored uncompressed
    /// (deflate adds 5 bytes per 64 KiB block, zlib 6), with the 8-byte header, in base64.
    const MAX_BASE64_LEN: usize = (8 + MAX_INFLATED_LEN + 64).div_ceil(3) * 4;

    pub(crate) fn serialize<S: serde::Serializer>(h: &Buckets, s: S) -> Result<S::Ok, S::Error> {
        if let Some(bytes) = h.encoding() {
            // Read from a profile: written back as it was read.
            return serde::Serializer::serialize_str(
                s,
                &base64::engine::general_purpose::STANDARD.encode(bytes),
            );
        }
        let mut h = h.to_histogram();
        if h.high() > HIGHEST_NS {
            // A histogram that grew to hold HIGHEST_NS: written with the profile's bounds.
            // UNWRAP: the bounds are constants hdrhistogram accepts, and they hold every value.
            let mut bounded = Histogram::new_with_bounds(LOWEST_NS, HIGHEST_NS, SIGNIFICANT_DIGITS)
                .expect("valid bounds");
            bounded
                .add(&h)
                .expect("the profile's bounds hold every bucket");
            h = bounded;
        }
        let mut bytes = Vec::new();
        V2DeflateSerializer::new()
            .serialize(&h, &mut bytes)
            .map_err(|e| serde::ser::Error::custom(format!("encoding histogram: {e:?}")))?;
        serde::Serializer::serialize_str(
            s,
            &base64::engine::general_purpose::STANDARD.encode(bytes),
        )
    }

    pub(crate) fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Buckets, D::Error> {
        struct Text;
        impl Visitor<'_> for Text {
            type Value = Buckets;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a base64 HdrHistogram V2 + deflate string")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Buckets, E> {
                let fail =
                    |what: String| E::custom(format!("{}: {what}", super::path::histogram()));
                if text.len() > MAX_BASE64_LEN {
                    return Err(fail(format!(
                        "histogram does not decode: {} characters of base64, more than the \
                         {MAX_BASE64_LEN} any histogram of the profile's bounds needs",
                        text.len()
                    )));
                }
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(text.as_bytes())
                    .map_err(|e| fail(format!("histogram is not base64: {e}")))?;
                // Checked whole now, kept encoded (memory in proportion to the file), decoded
                // when its buckets are asked for.
                let len = validate(&bytes)
                    .map_err(|e| fail(format!("histogram does not decode: {e}")))?;
                Ok(Buckets::encoded(bytes, len))
            }
        }
        d.deserialize_str(Text)
    }
}

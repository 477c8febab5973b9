//! Crafted and broken input for `Snapshot::from_json`: every kind of bad file is an
//! `Error::InvalidProfile` that names where the input came from and what is wrong with it.

use crate::support;

use spanprof::profile::SCHEMA_VERSION;
use spanprof::{Error, Snapshot};
use support::v2::{number, zlib};

/// A valid profile (schema version 1, written by an earlier spanprof).
const VALID: &str = include_str!("../data/profile-v1-basic.json");

fn valid() -> serde_json::Value {
    serde_json::from_str(VALID).unwrap()
}

/// Reads `json` as coming from `origin`, expects `InvalidProfile`, and checks its message names
/// the origin and contains `phrase`. Returns the message.
fn rejected(json: &str, origin: &str, phrase: &str) -> String {
    let err = match Snapshot::from_json(json, origin) {
        Ok(_) => panic!("{origin}: read as a valid profile"),
        Err(e) => e,
    };
    let text = err.to_string();
    match &err {
        Error::InvalidProfile {
            origin: named,
            message,
        } => {
            assert_eq!(named, origin, "{text}");
            assert!(
                message.contains(phrase),
                "{origin}: {text:?} lacks {phrase:?}"
            );
        }
        other => panic!("{origin}: not InvalidProfile: {other:?}"),
    }
    assert!(text.contains(origin), "{text:?} does not name {origin:?}");
    assert!(text.contains(phrase), "{text:?} lacks {phrase:?}");
    text
}

#[test]
fn the_valid_base_is_read() {
    let snap = Snapshot::from_json(VALID, "profile-v1-basic.json").unwrap();
    assert_eq!(snap.version, SCHEMA_VERSION);
}

#[test]
fn another_schema() {
    let mut v = valid();
    v["schema"] = "chrome.trace".into();
    rejected(
        &v.to_string(),
        "other/schema.json",
        r#"schema is "chrome.trace", expected "spanprof.profile""#,
    );

    // Some other JSON document altogether.
    rejected(
        r#"{"traceEvents": []}"#,
        "trace.json",
        r#"no "schema" field"#,
    );
}

#[test]
fn a_newer_version() {
    let mut v = valid();
    v["version"] = 99.into();
    let text = rejected(
        &v.to_string(),
        "from/the/future.json",
        "schema version 99 is not one this spanprof reads",
    );
    assert!(
        text.contains(&format!("1 to {SCHEMA_VERSION}")),
        "names the versions it reads: {text}"
    );

    v["version"] = 0.into();
    rejected(&v.to_string(), "zero.json", "schema version 0");
}

#[test]
fn no_version() {
    let mut v = valid();
    v.as_object_mut().unwrap().remove("version");
    rejected(&v.to_string(), "unversioned.json", r#"no "version" field"#);
}

#[test]
fn not_json() {
    rejected(
        "spanprof: 3 span names, 1.00 s inside spans",
        "report.txt",
        "not a JSON object",
    );
    rejected("", "empty.json", "not a JSON object");
}

#[test]
fn a_truncated_profile() {
    let half = &VALID[..VALID.len() / 2];
    let text = rejected(half, "cut/profile.json", "not a JSON object");
    assert!(text.contains("EOF"), "says the input ended early: {text}");
}

#[test]
fn a_histogram_that_is_not_base64() {
    let mut v = valid();
    v["spans"][0]["entry_busy"]["histogram"] = "not base64!".into();
    rejected(
        &v.to_string(),
        "mangled-histogram.json",
        "histogram is not base64",
    );

    // Base64, but not an HdrHistogram.
    v["spans"][0]["entry_busy"]["histogram"] = "AAAA".into();
    rejected(
        &v.to_string(),
        "not-a-histogram.json",
        "histogram does not decode",
    );
}

#[test]
fn a_field_of_the_wrong_type() {
    let mut v = valid();
    v["spans"][0]["calls"] = "many".into();
    rejected(&v.to_string(), "typed.json", "invalid type");
}

// ---- Histogram payloads: crafted HdrHistogram V2 + deflate strings ----

/// The fields of an HdrHistogram V2 header.
#[derive(Clone, Copy)]
struct V2 {
    cookie: u32,
    /// `None`: the payload's real length.
    payload_len: Option<u32>,
    offset: u32,
    digits: u32,
    lowest: u64,
    highest: u64,
    ratio: f64,
}

impl V2 {
    /// spanprof's bounds.
    fn spanprof() -> Self {
        V2 {
            cookie: 0x1c84_9313,
            payload_len: None,
            offset: 0,
            digits: 2,
            lowest: 1,
            highest: spanprof::profile::HIGHEST_NS,
            ratio: 1.0,
        }
    }

    /// The uncompressed V2 histogram: this header and `payload`.
    fn bytes(&self, payload: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend(self.cookie.to_be_bytes());
        b.extend(
            self.payload_len
                .unwrap_or(payload.len() as u32)
                .to_be_bytes(),
        );
        b.extend(self.offset.to_be_bytes());
        b.extend(self.digits.to_be_bytes());
        b.extend(self.lowest.to_be_bytes());
        b.extend(self.highest.to_be_bytes());
        b.extend(self.ratio.to_bits().to_be_bytes());
        b.extend(payload);
        b
    }

    /// The profile's histogram string: compressed header, zlib stream, base64.
    fn encode(&self, payload: &[u8]) -> String {
        compressed(&zlib(&self.bytes(payload)), None)
    }
}

/// A compressed HdrHistogram: cookie, length (`None`: the real one), the zlib stream; base64.
fn compressed(deflated: &[u8], declared: Option<u32>) -> String {
    use base64::Engine;
    let mut b = Vec::new();
    b.extend(0x1c84_9314u32.to_be_bytes());
    b.extend(declared.unwrap_or(deflated.len() as u32).to_be_bytes());
    b.extend(deflated);
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// The valid base with `histogram` as spans[4].wall's histogram (train_step, 256 samples).
fn with_histogram(histogram: String) -> String {
    let mut v = valid();
    v["spans"][4]["wall"]["histogram"] = histogram.into();
    v.to_string()
}

#[test]
fn a_header_claiming_4_gib_is_rejected_before_any_allocation() {
    // 56 characters: a V2 header that declares a 4 GiB payload and holds none. The reader used
    // to allocate and zero the 4 GiB before finding the payload missing.
    let huge = V2 {
        payload_len: Some(u32::MAX),
        ..V2::spanprof()
    }
    .encode(&[]);
    assert_eq!(huge.len(), 56, "{huge}");
    let text = rejected(
        &with_histogram(huge),
        "huge.json",
        "spans[4].wall.histogram: histogram does not decode",
    );
    assert!(text.contains("4294967295 payload bytes"), "{text}");

    // The compressed header claims more (or fewer) deflated bytes than are present.
    let deflated = zlib(&V2::spanprof().bytes(&number(256)));
    for declared in [u32::MAX, deflated.len() as u32 - 1] {
        let text = rejected(
            &with_histogram(compressed(&deflated, Some(declared))),
            "short.json",
            "histogram does not decode",
        );
        assert!(text.contains("compressed bytes"), "{text}");
    }
    // Another cookie outside, another inside.
    let mut wrong = compressed(&deflated, None).into_bytes();
    wrong[0] = b'B';
    rejected(
        &with_histogram(String::from_utf8(wrong).unwrap()),
        "cookie.json",
        "is not a compressed HdrHistogram V2",
    );
    rejected(
        &with_histogram(
            V2 {
                cookie: 0x1c84_9301,
                ..V2::spanprof()
            }
            .encode(&number(256)),
        ),
        "inner-cookie.json",
        "is not an HdrHistogram V2",
    );
}

#[test]
fn a_deflate_stream_that_inflates_past_its_bounds_is_cut_off() {
    // 10 MB of zeros after the header: the 4608 counters of spanprof's bounds need at most
    // 9 bytes each; the reader stops inflating there.
    let mut v2 = V2::spanprof().bytes(&[]);
    v2.resize(v2.len() + 10_000_000, 0);
    let len = (v2.len() - 40) as u32;
    v2[4..8].copy_from_slice(&len.to_be_bytes());
    let text = rejected(
        &with_histogram(compressed(&zlib(&v2), None)),
        "bomb.json",
        "histogram does not decode",
    );
    assert!(text.contains("payload bytes"), "{text}");

    // A payload longer than its V2 header says.
    let v2 = V2 {
        payload_len: Some(1),
        ..V2::spanprof()
    }
    .bytes(&[2, 2]);
    let text = rejected(
        &with_histogram(compressed(&zlib(&v2), None)),
        "longer.json",
        "histogram does not decode",
    );
    assert!(text.contains("inflates past the 1 payload bytes"), "{text}");

    // A payload shorter than it says, and a stream cut short.
    let deflated = zlib(&V2::spanprof().bytes(&number(256)));
    let cut = &deflated[..deflated.len() - 6];
    rejected(
        &with_histogram(compressed(cut, None)),
        "cut-stream.json",
        "histogram does not decode",
    );
}

#[test]
fn histogram_headers_must_match_the_profiles_bounds() {
    let cases: [(V2, &str); 6] = [
        (
            V2 {
                digits: 3,
                ..V2::spanprof()
            },
            "3 significant digits, expected 2",
        ),
        (
            V2 {
                lowest: 0,
                ..V2::spanprof()
            },
            "lowest trackable value 0",
        ),
        (
            V2 {
                highest: 1 << 42,
                ..V2::spanprof()
            },
            "highest trackable value 4398046511104",
        ),
        (
            V2 {
                lowest: 1000,
                highest: 1500,
                ..V2::spanprof()
            },
            "less than twice the lowest",
        ),
        (
            V2 {
                offset: 3,
                ..V2::spanprof()
            },
            "normalizing index offset 3",
        ),
        (
            V2 {
                ratio: 2.0,
                ..V2::spanprof()
            },
            "integer to double ratio 2",
        ),
    ];
    for (header, phrase) in cases {
        rejected(
            &with_histogram(header.encode(&number(256))),
            "bounds.json",
            phrase,
        );
    }
    // The bounds spanprof writes read: a smaller highest value, and a lowest value above 1
    // (its counters are mapped to spanprof's buckets).
    // The top of the bucket of HIGHEST_NS is what hdrhistogram writes for a histogram that
    // grew to hold it.
    for (lowest, highest) in [(1, 2), (1, 65_535), (1024, 1 << 30), (1, (1 << 42) - 1)] {
        let h = V2 {
            lowest,
            highest,
            ..V2::spanprof()
        };
        let snap = Snapshot::from_json(&with_histogram(h.encode(&number(256))), "ok").unwrap();
        assert_eq!(snap.spans[4].wall.histogram.len(), 256);
    }
}

#[test]
fn crafted_payloads_are_errors_not_panics() {
    // A run of i64::MIN empty counters: hdrhistogram negates it, which overflows (a panic in
    // a debug build).
    for (payload, phrase) in [
        (number(i64::MIN), "empty counters"),
        (
            [number(-4000), number(-4000), number(1)].concat(),
            "empty counters",
        ),
        (
            [number(-4607), number(1), number(1)].concat(),
            "past the 4608 counters",
        ),
        (
            [number(i64::MAX), number(i64::MAX), number(2)].concat(),
            "more than 2^64 - 1",
        ),
        (vec![0x80, 0x80], "ends inside a number"),
    ] {
        let text = rejected(
            &with_histogram(V2::spanprof().encode(&payload)),
            "crafted.json",
            "histogram does not decode",
        );
        assert!(text.contains(phrase), "{text} lacks {phrase}");
    }
    // The largest count a file can hold: one counter of 2^63 - 1 samples (wall.count must
    // then match it).
    let mut v: serde_json::Value = serde_json::from_str(&with_histogram(
        V2::spanprof().encode(&[number(-300), number(i64::MAX)].concat()),
    ))
    .unwrap();
    let wall = &mut v["spans"][4]["wall"];
    wall["count"] = (i64::MAX as u64).into();
    // The mean, as ever, total_ns / count.
    wall["mean_ns"] = (wall["total_ns"].as_u64().unwrap() as f64 / i64::MAX as f64).into();
    let snap = Snapshot::from_json(&v.to_string(), "most.json").unwrap();
    assert_eq!(snap.spans[4].wall.histogram.len(), i64::MAX as u64);
}

#[test]
fn figures_that_disagree_with_their_histogram() {
    for (stat, field, value, phrase) in [
        (
            "entry_busy",
            "count",
            1000,
            "spans[3].entry_busy.count: 1000 samples, the histogram holds 1",
        ),
        ("wall", "min_ns", u64::MAX, "spans[3].wall.min_ns"),
        ("self", "p99_ns", 0, "spans[3].self.p99_ns"),
        ("busy", "p50_ns", u64::MAX, "spans[3].busy.p50_ns"),
    ] {
        let mut v = valid();
        v["spans"][3][stat][field] = value.into();
        rejected(&v.to_string(), "figures.json", phrase);
    }
    // `calls` counts entries: spans closing while a snapshot is taken make it differ from the
    // histogram's count, so it is not checked against it.
    let mut v = valid();
    v["spans"][3]["calls"] = 7.into();
    Snapshot::from_json(&v.to_string(), "calls.json").unwrap();
}

#[test]
fn histograms_of_other_bounds() {
    for (field, value, phrase) in [
        (
            "lowest",
            serde_json::json!(0),
            "histograms.lowest is 0, expected 1",
        ),
        (
            "highest",
            serde_json::json!(1000),
            "histograms.highest is 1000, expected 3600000000000",
        ),
        (
            "significant_digits",
            serde_json::json!(3),
            "histograms.significant_digits is 3, expected 2",
        ),
        (
            "encoding",
            serde_json::json!("hdrhistogram-v1"),
            "histograms.encoding is \"hdrhistogram-v1\"",
        ),
        ("unit", serde_json::json!("us"), "histograms.unit is \"us\""),
    ] {
        let mut v = valid();
        v["histograms"][field] = value;
        rejected(&v.to_string(), "spec.json", phrase);
    }
}

#[test]
fn an_hour_long_sample_is_written_within_the_profiles_bounds() {
    use base64::Engine;
    use spanprof::profile::{Buckets, HIGHEST_NS};
    let mut snap = Snapshot::from_json(VALID, "v1").unwrap();
    let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, HIGHEST_NS, 2).unwrap();
    h.record_n(HIGHEST_NS, 256).unwrap();
    snap.spans[4].wall.histogram = Buckets::from_histogram(&h);
    let json = snap.to_json();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(v["spans"][4]["wall"]["histogram"].as_str().unwrap())
        .unwrap();
    let back: hdrhistogram::Histogram<u64> = hdrhistogram::serialization::Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .unwrap();
    assert_eq!(back.high(), HIGHEST_NS);
    assert_eq!(Snapshot::from_json(&json, "round trip").unwrap(), snap);
}

#[test]
fn a_call_tree_with_a_bad_parent_or_statistic() {
    let golden: serde_json::Value =
        serde_json::from_str(include_str!("../data/golden-profile.json")).unwrap();
    assert!(Snapshot::from_json(&golden.to_string(), "golden")
        .unwrap()
        .tree
        .is_some());
    let mut v = golden.clone();
    // A parent must come before its child: no cycles, no dangling index.
    v["tree"]["nodes"][0]["parent"] = 5.into();
    rejected(
        &v.to_string(),
        "cycle.json",
        "tree.nodes[0].parent: 5 is not the index of an earlier node",
    );
    let mut v = golden;
    v["tree"]["nodes"][2]["self"]["count"] = 12345.into();
    rejected(
        &v.to_string(),
        "tree-count.json",
        "tree.nodes[2].self.count: 12345 samples",
    );
}

// ---- The document: a JSON object whose schema and version are always checked ----

#[test]
fn a_profile_is_a_json_object_not_an_array_of_its_fields() {
    let v = valid();
    // serde's derived `Deserialize` takes a struct from an array of its fields in order: such
    // an array must not get past the schema and version checks.
    let as_array = |schema: &str, version: u32| {
        serde_json::json!([
            schema,
            version,
            v["run"],
            v["histograms"],
            v["spans"],
            v["dropped"]
        ])
        .to_string()
    };
    let text = rejected(
        &as_array("not.spanprof", 99),
        "seq_v99.json",
        "not a JSON object but an array",
    );
    assert!(text.contains(r#""schema" and "version""#), "{text}");
    rejected(
        &as_array("spanprof.profile", 1),
        "seq_v1.json",
        "not a JSON object but an array",
    );
    for (json, found) in [
        ("[1, 2]", "an array"),
        ("null", "null"),
        ("4", "a number"),
        ("\"spanprof.profile\"", "a string"),
        (" true ", "a boolean"),
    ] {
        rejected(
            json,
            "scalar.json",
            &format!("not a JSON object but {found}"),
        );
    }
}

#[test]
fn a_schema_or_version_of_the_wrong_type_is_named() {
    for (field, value, phrase) in [
        (
            "version",
            serde_json::json!("4"),
            r#"version is "4", expected an integer: the schema version (1 to "#,
        ),
        (
            "version",
            serde_json::json!(4.0),
            "version is 4.0, expected an integer",
        ),
        (
            "version",
            serde_json::json!(-1),
            "version is -1, expected an integer",
        ),
        (
            "version",
            serde_json::json!(null),
            "version is null, expected an integer",
        ),
        (
            "schema",
            serde_json::json!(5),
            r#"schema is 5, expected "spanprof.profile""#,
        ),
    ] {
        let mut v = valid();
        v[field] = value;
        rejected(&v.to_string(), "typed-header.json", phrase);
    }
    // A header field given twice is refused, whichever comes first.
    assert!(VALID.contains("\"version\": 1,"));
    for (twice, phrase) in [
        (
            "\"version\": 1, \"version\": 99,",
            "duplicate field `version`",
        ),
        ("\"version\": 99, \"version\": 1,", "schema version 99"),
    ] {
        let json = VALID.replacen("\"version\": 1,", twice, 1);
        rejected(&json, "twice.json", phrase);
    }
}

// ---- Each statistic's mean and deviation agree with its figures ----

#[test]
fn a_mean_or_deviation_that_disagrees_with_the_figures() {
    // spans[3].busy: 1 sample of 72 730 ns.
    for (stat, field, value, phrase) in [
        (
            "busy",
            "mean_ns",
            serde_json::json!(-5e300),
            "spans[3].busy.mean_ns: -5e300, expected total_ns / count = 72730 / 1 = 72730.0",
        ),
        (
            "self",
            "mean_ns",
            serde_json::json!(72731.0),
            "spans[3].self.mean_ns: 72731.0, expected total_ns / count",
        ),
        (
            "wall",
            "mean_ns",
            serde_json::json!(1e308),
            "spans[3].wall.mean_ns: 1e308, expected total_ns / count",
        ),
        (
            "entry_busy",
            "stddev_ns",
            serde_json::json!(-1.0),
            "spans[3].entry_busy.stddev_ns: -1.0 is not a finite number >= 0",
        ),
    ] {
        let mut v = valid();
        v["spans"][3][stat][field] = value;
        rejected(&v.to_string(), "mean.json", phrase);
    }

    // Within rounding of total_ns / count: read.
    let mut v = valid();
    v["spans"][3]["busy"]["mean_ns"] = (72730.0 * (1.0 + 1e-12)).into();
    Snapshot::from_json(&v.to_string(), "rounded.json").unwrap();

    // A statistic with no samples has a mean of 0, whatever its total (a snapshot may read a
    // sample's sum before its bucket).
    let mut snap = Snapshot::from_json(VALID, "v1").unwrap();
    let empty = &mut snap.spans[3].wall;
    empty.histogram = spanprof::profile::Buckets::default();
    (empty.count, empty.total_ns, empty.min_ns, empty.max_ns) = (0, 5, 0, 0);
    (empty.p50_ns, empty.p90_ns, empty.p99_ns, empty.p999_ns) = (0, 0, 0, 0);
    (empty.mean_ns, empty.stddev_ns) = (0.0, 0.0);
    let mut v: serde_json::Value = serde_json::from_str(&snap.to_json()).unwrap();
    Snapshot::from_json(&v.to_string(), "empty.json").unwrap();
    v["spans"][3]["wall"]["mean_ns"] = 5.0.into();
    rejected(
        &v.to_string(),
        "empty.json",
        "spans[3].wall.mean_ns: 5.0, expected 0 for no samples",
    );

    // The statistics of metrics and call-tree nodes are checked the same way.
    let detailed: serde_json::Value =
        serde_json::from_str(include_str!("../data/cli-detailed.json")).unwrap();
    let mut v = detailed.clone();
    v["metrics"][0]["value"]["histogram"]["floats"]["mean_ns"] = (-1.0).into();
    rejected(
        &v.to_string(),
        "metric-mean.json",
        "metrics[0].value.histogram.floats.mean_ns: -1.0, expected total_ns / count",
    );
    let mut v = detailed;
    v["tree"]["nodes"][4]["busy"]["stddev_ns"] = (-0.5).into();
    rejected(
        &v.to_string(),
        "node-stddev.json",
        "tree.nodes[4].busy.stddev_ns: -0.5 is not a finite number >= 0",
    );
}

/// A metric's kind and value agree: a gauge holding a histogram's values is a crafted file.
#[test]
fn a_metric_whose_value_is_not_of_its_kind() {
    let detailed: serde_json::Value =
        serde_json::from_str(include_str!("../data/cli-detailed.json")).unwrap();
    for (kind, value) in [
        ("gauge", "histogram"),
        ("histogram", "sum"),
        ("counter", "histogram"),
    ] {
        let i = detailed["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .position(|m| m["value"].get(value).is_some())
            .unwrap();
        let mut v = detailed.clone();
        v["metrics"][i]["kind"] = kind.into();
        rejected(
            &v.to_string(),
            "kind.json",
            &format!("metrics[{i}]: a {kind} metric with a {value} value"),
        );
    }
}

// ---- One entry per span name, metric and call path ----

#[test]
fn one_entry_per_span_name_metric_and_call_path() {
    let detailed: serde_json::Value =
        serde_json::from_str(include_str!("../data/cli-detailed.json")).unwrap();
    let push = |v: &mut serde_json::Value, list: &str, entry: serde_json::Value| {
        let list = match list {
            "nodes" => &mut v["tree"]["nodes"],
            other => &mut v[other],
        };
        list.as_array_mut().unwrap().push(entry);
    };

    // `forward` twice in one target.
    let mut v = detailed.clone();
    push(&mut v, "spans", detailed["spans"][7].clone());
    rejected(
        &v.to_string(),
        "dup.json",
        r#"spans[12]: span name "forward" of target "training_loop::workload" again (first at spans[7])"#,
    );
    // The same name in another target is another span name.
    let mut other = detailed["spans"][7].clone();
    other["target"] = "training_loop::other".into();
    let mut v = detailed.clone();
    push(&mut v, "spans", other);
    let snap = Snapshot::from_json(&v.to_string(), "two-targets.json").unwrap();
    assert_eq!(snap.spans.len(), 13);

    // A metric twice in one span name.
    let mut v = detailed.clone();
    push(&mut v, "metrics", detailed["metrics"][1].clone());
    rejected(
        &v.to_string(),
        "dup-metric.json",
        r#"metrics[4]: monotonic_counter metric "samples" in span name "train_step" of target "training_loop::workload" again (first at metrics[1])"#,
    );
    // The same name as another kind, or in another span name, is another metric.
    for (field, value) in [("kind", "counter"), ("span", "evaluate")] {
        let mut metric = detailed["metrics"][1].clone();
        metric[field] = value.into();
        let mut v = detailed.clone();
        push(&mut v, "metrics", metric);
        Snapshot::from_json(&v.to_string(), "another-metric.json").unwrap();
    }

    // A call path twice: `train;epoch;train_step;forward`.
    let mut v = detailed.clone();
    push(&mut v, "nodes", detailed["tree"]["nodes"][7].clone());
    rejected(
        &v.to_string(),
        "dup-node.json",
        r#"tree.nodes[14]: call path "train;epoch;train_step;forward" of target "training_loop::workload" again (first at tree.nodes[7])"#,
    );
    // `forward` under another parent is another path.
    let mut node = detailed["tree"]["nodes"][7].clone();
    node["parent"] = 2.into();
    let mut v = detailed;
    push(&mut v, "nodes", node);
    Snapshot::from_json(&v.to_string(), "another-path.json").unwrap();
}

// ---- Merges and call-tree sums: saturating, finite, never a panic ----

/// The `cli-detailed.json` profile (resources, metrics, a call tree) as JSON.
fn detailed_json() -> serde_json::Value {
    serde_json::from_str(include_str!("../data/cli-detailed.json")).unwrap()
}

#[test]
fn merged_float_sums_saturate_and_the_merge_reads_back() {
    let mut v = detailed_json();
    // A counter's float part, and a span's energy, CPU energy and CO2e, near f64::MAX.
    v["metrics"][1]["value"]["sum"]["float"] = 1.5e308.into();
    let resources = &mut v["spans"][0]["resources"];
    for field in ["energy_j", "cpu_energy_j", "co2e_g"] {
        resources[field] = 1.5e308.into();
    }
    resources["gpus"] = serde_json::json!([{
        "device": 0,
        "instances": u64::MAX,
        "memory_delta_bytes": 0,
        "peak_memory_bytes": 0,
        "mean_utilization_pct": 1.5e308,
        "energy_j": 1.5e308
    }]);
    let p = Snapshot::from_json(&v.to_string(), "bigfloat.json").unwrap();

    let merged = Snapshot::merge(&[p.clone(), p], &[]).unwrap();
    let spanprof::profile::MetricValue::Sum(sum) = &merged.metrics[1].value else {
        panic!("a counter")
    };
    assert_eq!(sum.float, f64::MAX, "saturated, as the recorder's sums are");
    let r = merged.spans[0].resources.as_ref().unwrap();
    assert_eq!(r.energy_j, Some(f64::MAX));
    assert_eq!(r.cpu_energy_j, Some(f64::MAX));
    assert_eq!(r.co2e_g, Some(f64::MAX));
    assert_eq!(r.gpus[0].energy_j, Some(f64::MAX));
    assert_eq!(r.gpus[0].instances, u64::MAX);
    assert!(r.gpus[0].mean_utilization_pct.unwrap().is_finite());
    // Finite, so written as numbers (not `null`) and read back.
    let back = Snapshot::from_json(&merged.to_json(), "merged.json").unwrap();
    assert_eq!(back, merged);
}

#[test]
fn merged_and_call_tree_sums_saturate_rather_than_overflow() {
    const MAX: u64 = u64::MAX;
    let mut v = detailed_json();
    let resources = &mut v["spans"][0]["resources"];
    for field in ["entries", "cpu_ns", "busy_ns"] {
        resources["cpu"][field] = MAX.into();
    }
    for field in ["entries", "allocated_bytes", "allocations", "freed_bytes"] {
        resources["heap"][field] = MAX.into();
    }
    for field in ["net_retained_bytes", "self_retained_bytes"] {
        resources["heap"][field] = i64::MAX.into();
    }
    resources["heap"]["retaining_entries"] = MAX.into();
    resources["memory"]["instances"] = MAX.into();
    resources["memory"]["rss_delta_bytes"] = i64::MIN.into();
    resources["memory"]["growing_instances"] = MAX.into();
    v["resources"]["sampler_cpu_ns"] = MAX.into();
    // An input whose base is known only from its share: a tiny share, a huge base.
    v["overhead"]["percent"] = 1e-300.into();
    v["overhead"]
        .as_object_mut()
        .unwrap()
        .remove("process_cpu_ns");
    let node = &mut v["tree"]["nodes"][4];
    node["calls"] = MAX.into();
    node["instances"] = MAX.into();
    node["busy"]["clamped"] = MAX.into();
    // Two call paths whose self times add up past u64::MAX (each mean its total / count).
    for i in [0, 1] {
        let stat = &mut v["tree"]["nodes"][i]["self"];
        let count = stat["count"].as_u64().unwrap();
        stat["total_ns"] = (1u64 << 63).into();
        stat["mean_ns"] = ((1u64 << 63) as f64 / count as f64).into();
    }
    // A name sampled with every span but the recorded ones skipped.
    v["spans"][4]["sampled"] = serde_json::json!({"every": 2, "since_ns": 0, "skipped": MAX});
    let p = Snapshot::from_json(&v.to_string(), "big.json").unwrap();

    let tree = p.tree.as_ref().unwrap();
    assert_eq!(tree.self_ns(), MAX);
    let train_step = &p.spans[4];
    assert_eq!(train_step.scaled_total_ns(&train_step.busy), MAX);

    let merged = Snapshot::merge(&[p.clone(), p.clone()], &[]).unwrap();
    let r = merged.spans[0].resources.as_ref().unwrap();
    let (cpu, heap, memory) = (
        r.cpu.as_ref().unwrap(),
        r.heap.as_ref().unwrap(),
        r.memory.as_ref().unwrap(),
    );
    assert_eq!((cpu.entries, cpu.cpu_ns, cpu.busy_ns), (MAX, MAX, MAX));
    assert_eq!(
        (
            heap.entries,
            heap.allocated_bytes,
            heap.allocations,
            heap.freed_bytes
        ),
        (MAX, MAX, MAX, MAX)
    );
    assert_eq!(
        (
            heap.net_retained_bytes,
            heap.self_retained_bytes,
            heap.retaining_entries
        ),
        (i64::MAX, i64::MAX, MAX)
    );
    assert_eq!(
        (
            memory.instances,
            memory.rss_delta_bytes,
            memory.growing_instances
        ),
        (MAX, i64::MIN, MAX)
    );
    assert_eq!(merged.resources.as_ref().unwrap().sampler_cpu_ns, MAX);
    assert!(merged.overhead.as_ref().unwrap().percent.is_finite());
    let tree = merged.tree.as_ref().unwrap();
    let node = &tree.nodes[4];
    assert_eq!(
        (node.calls, node.instances, node.busy.clamped),
        (MAX, MAX, MAX)
    );
    assert_eq!(tree.self_ns(), MAX);
    let mut trees = p.tree.clone().unwrap();
    trees.merge(p.tree.as_ref().unwrap());
    assert_eq!(&trees, tree);
    // What the merge wrote reads back.
    let back = Snapshot::from_json(&merged.to_json(), "merged.json").unwrap();
    assert_eq!(back, merged);
}

#[test]
fn histograms_of_more_than_u64_max_samples_together_merge() {
    use spanprof::profile::{Buckets, Stat};
    let snap = Snapshot::from_json(VALID, "v1").unwrap();
    // Two statistics of 2^63 samples each, in different buckets.
    let big = |value: u64| {
        let mut h =
            hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 2).unwrap();
        h.record_n(value, 1 << 63).unwrap();
        let mut stat = snap.spans[3].busy.clone();
        stat.histogram = Buckets::from_histogram(&h);
        stat.count = 1 << 63;
        stat.total_ns = u64::MAX;
        (stat.min_ns, stat.max_ns) = (value, value);
        stat.mean_ns = u64::MAX as f64 / (1u64 << 63) as f64;
        stat
    };
    let (a, b) = (big(1_000), big(2_000));
    let mut buckets = a.histogram.clone();
    buckets.add(&b.histogram);
    // Each bucket saturated at `i64::MAX` (the encoding's limit), so both hold 2^64 − 2.
    let most = i64::MAX as u64;
    assert!(buckets.iter().all(|(_, n)| n <= most), "saturated");
    assert_eq!(buckets.len(), 2 * most);
    assert_eq!(buckets.count_at_or_below(5_000), 2 * most);
    let merged = Stat::merged([&a, &b]);
    assert_eq!(merged.count, 2 * most);
    assert_eq!((merged.min_ns, merged.max_ns), (1_000, 2_000));
    assert_eq!(merged.total_ns, u64::MAX);
}

// ---- Crafted profiles the reader accepts (a fuzzer's) ----

fn crafted(name: &str) -> (String, Snapshot) {
    let path = format!("{}/tests/data/crafted/{name}", env!("CARGO_MANIFEST_DIR"));
    let snap = Snapshot::read_json(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
    (name.to_string(), snap)
}

/// Merges of histograms whose samples add up past what a profile holds (a bucket past
/// `i64::MAX`, HdrHistogram's encoding limit: the merge panicked writing it; all of them past
/// `u64::MAX`: the merged file could not be read back) saturate, and read back.
#[test]
fn merges_of_the_largest_histograms_saturate_and_read_back() {
    for (a, b) in [
        ("bucket_2pow62.json", "bucket_2pow62.json"),
        ("metric_bucket_2pow62.json", "metric_bucket_2pow62.json"),
        ("sum_a.json", "sum_b.json"),
    ] {
        let (a, b) = (crafted(a), crafted(b));
        let merged = Snapshot::merge(&[a.1, b.1], &[&a.0, &b.0]).unwrap();
        let json = merged.to_json();
        let back = Snapshot::from_json(&json, "merged.json")
            .unwrap_or_else(|e| panic!("{} + {}: {e}", a.0, b.0));
        for s in &back.spans {
            assert_eq!(s.busy.count, s.busy.histogram.len(), "{}", s.name);
        }
    }
}

/// A GPU device index past any a profile holds (one CSV column group per index: the CSV
/// report of `u32::MAX` ran out of memory), and a call path thousands deep (every analysis of
/// paths is quadratic in it: `compare` ran out of memory), are refused by name.
#[test]
fn a_gpu_index_or_a_call_path_past_the_bounds_is_refused() {
    let json = std::fs::read_to_string(format!(
        "{}/tests/data/crafted/gpu_device_max.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    rejected(
        &json,
        "gpu.json",
        "spans[0].resources.gpus: device 4294967295",
    );

    let mut v: serde_json::Value =
        serde_json::from_str(include_str!("../data/golden-profile.json")).unwrap();
    let nodes = v["tree"]["nodes"].as_array_mut().unwrap();
    let template = nodes[0].clone();
    let first = nodes.len();
    for i in 0..300 {
        let mut node = template.clone();
        node["name"] = format!("deep{i}").into();
        node["parent"] = if i == 0 {
            serde_json::Value::Null
        } else {
            (first + i - 1).into()
        };
        nodes.push(node);
    }
    rejected(
        &v.to_string(),
        "deep.json",
        &format!("tree.nodes[{}]: a call path 257 deep", first + 256),
    );
}

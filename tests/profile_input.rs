//! Crafted and broken input for `Snapshot::from_json`: every kind of bad file is an
//! `Error::InvalidProfile` that names where the input came from and what is wrong with it.

use spanprof::profile::SCHEMA_VERSION;
use spanprof::{Error, Snapshot};

/// A valid profile (schema version 1, written by an earlier spanprof).
const VALID: &str = include_str!("data/profile-v1-basic.json");

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

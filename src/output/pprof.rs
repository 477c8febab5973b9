//! pprof: the call tree as a gzipped `profile.proto` message (feature `pprof`), read by
//! `go tool pprof`, Pyroscope and Grafana.
//!
//! One location (and one function) per call-path node: a sample per node carries the node's
//! location and those of its ancestors (leaf first), and the values `calls`, `self_ns` and
//! `busy_ns` (self time is the default). The span's target is a `target` label of each sample
//! and the function's file name. The tree is merged over threads, so there is no thread label;
//! allocations are not kept per call path, so there is no allocation value.
//!
//! The messages are pprof's `profile.proto` (github.com/google/pprof, `proto/profile.proto`),
//! declared with `prost`'s derive: only the fields spanprof writes.

use std::collections::HashMap;
use std::io::{self, Write};

use prost::Message;

use super::Format;
use crate::profile::Snapshot;

/// Name of the pprof profile in an output directory.
pub const PPROF_FILE: &str = "profile.pb.gz";

/// The call tree as a pprof profile (`profile.pb.gz`): `go tool pprof -top profile.pb.gz`.
///
/// Sample values, in order: `calls` (count), `self_ns` and `busy_ns` (nanoseconds). A node's
/// busy time includes its children's, so `busy_ns` summed over a path counts nested time once
/// per level: read it per node (`-top`'s flat column), and self time for totals.
///
/// ```
/// use spanprof::output::{Format, Pprof};
/// # let snapshot = spanprof::profile::Snapshot::from_json(
/// #     include_str!("../../tests/data/golden-profile.json"), "doc")?;
/// let mut gz = Vec::new();
/// Pprof.render(&snapshot, &mut gz)?;
/// assert_eq!(&gz[..2], &[0x1f, 0x8b]); // gzip
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Pprof;

impl Format for Pprof {
    fn name(&self) -> &'static str {
        "pprof"
    }

    fn file_name(&self) -> &'static str {
        PPROF_FILE
    }

    fn action(&self) -> &'static str {
        "writing pprof profile"
    }

    fn render(&self, snapshot: &Snapshot, out: &mut dyn Write) -> io::Result<()> {
        let bytes = profile(snapshot).encode_to_vec();
        let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
        gz.write_all(&bytes)?;
        gz.finish()?;
        Ok(())
    }
}

/// The string table: index 0 is the empty string, as pprof requires.
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Self {
        let mut strings = Self {
            table: Vec::new(),
            index: HashMap::new(),
        };
        strings.get("");
        strings
    }

    fn get(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

fn saturate(ns: u64) -> i64 {
    i64::try_from(ns).unwrap_or(i64::MAX)
}

fn profile(snapshot: &Snapshot) -> proto::Profile {
    let mut s = Strings::new();
    let value_type = |s: &mut Strings, ty: &str, unit: &str| proto::ValueType {
        r#type: s.get(ty),
        unit: s.get(unit),
    };
    let sample_type = vec![
        value_type(&mut s, "calls", "count"),
        value_type(&mut s, "self_ns", "nanoseconds"),
        value_type(&mut s, "busy_ns", "nanoseconds"),
    ];
    let target_key = s.get("target");
    let mut functions = Vec::new();
    let mut function_ids: HashMap<(&str, &str), u64> = HashMap::new();
    let mut locations = Vec::new();
    let mut samples = Vec::new();
    let nodes = snapshot.tree.as_ref().map_or(&[][..], |t| &t.nodes[..]);
    for (i, node) in nodes.iter().enumerate() {
        let function_id = *function_ids
            .entry((node.name.as_str(), node.target.as_str()))
            .or_insert_with(|| {
                let id = functions.len() as u64 + 1;
                functions.push(proto::Function {
                    id,
                    name: s.get(&node.name),
                    system_name: s.get(&node.name),
                    filename: s.get(&node.target),
                    start_line: 0,
                });
                id
            });
        // Location ids are node index + 1 (0 is not an id).
        locations.push(proto::Location {
            id: i as u64 + 1,
            mapping_id: 0,
            address: 0,
            line: vec![proto::Line {
                function_id,
                line: 0,
            }],
            is_folded: false,
        });
        let mut location_id = Vec::new();
        let mut at = Some(i);
        while let Some(j) = at {
            location_id.push(j as u64 + 1);
            at = nodes[j].parent.map(|p| p as usize).filter(|&p| p < j);
        }
        samples.push(proto::Sample {
            location_id,
            value: vec![
                saturate(node.calls),
                saturate(node.self_ns()),
                saturate(node.busy_ns()),
            ],
            label: vec![proto::Label {
                key: target_key,
                str: s.get(&node.target),
                num: 0,
                num_unit: 0,
            }],
        });
    }
    let period_type = value_type(&mut s, "self_ns", "nanoseconds");
    let default_sample_type = s.get("self_ns");
    proto::Profile {
        sample_type,
        sample: samples,
        location: locations,
        function: functions,
        string_table: s.table,
        time_nanos: saturate(snapshot.run.start_unix_ns),
        duration_nanos: saturate(snapshot.run.duration_ns),
        period_type: Some(period_type),
        period: 1,
        default_sample_type,
        ..Default::default()
    }
}

/// pprof's `profile.proto` messages, the fields spanprof writes (tags as in the proto).
mod proto {
    /// A profile.
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Profile {
        #[prost(message, repeated, tag = "1")]
        pub(super) sample_type: Vec<ValueType>,
        #[prost(message, repeated, tag = "2")]
        pub(super) sample: Vec<Sample>,
        #[prost(message, repeated, tag = "3")]
        pub(super) mapping: Vec<Mapping>,
        #[prost(message, repeated, tag = "4")]
        pub(super) location: Vec<Location>,
        #[prost(message, repeated, tag = "5")]
        pub(super) function: Vec<Function>,
        #[prost(string, repeated, tag = "6")]
        pub(super) string_table: Vec<String>,
        #[prost(int64, tag = "9")]
        pub(super) time_nanos: i64,
        #[prost(int64, tag = "10")]
        pub(super) duration_nanos: i64,
        #[prost(message, optional, tag = "11")]
        pub(super) period_type: Option<ValueType>,
        #[prost(int64, tag = "12")]
        pub(super) period: i64,
        #[prost(int64, tag = "14")]
        pub(super) default_sample_type: i64,
    }

    /// A value's type and unit (string table indices).
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct ValueType {
        #[prost(int64, tag = "1")]
        pub(super) r#type: i64,
        #[prost(int64, tag = "2")]
        pub(super) unit: i64,
    }

    /// Values at one stack (locations leaf first).
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Sample {
        #[prost(uint64, repeated, tag = "1")]
        pub(super) location_id: Vec<u64>,
        #[prost(int64, repeated, tag = "2")]
        pub(super) value: Vec<i64>,
        #[prost(message, repeated, tag = "3")]
        pub(super) label: Vec<Label>,
    }

    /// A sample's label.
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Label {
        #[prost(int64, tag = "1")]
        pub(super) key: i64,
        #[prost(int64, tag = "2")]
        pub(super) str: i64,
        #[prost(int64, tag = "3")]
        pub(super) num: i64,
        #[prost(int64, tag = "4")]
        pub(super) num_unit: i64,
    }

    /// A binary mapping (none written: spans have no addresses).
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Mapping {
        #[prost(uint64, tag = "1")]
        pub(super) id: u64,
    }

    /// A frame.
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Location {
        #[prost(uint64, tag = "1")]
        pub(super) id: u64,
        #[prost(uint64, tag = "2")]
        pub(super) mapping_id: u64,
        #[prost(uint64, tag = "3")]
        pub(super) address: u64,
        #[prost(message, repeated, tag = "4")]
        pub(super) line: Vec<Line>,
        #[prost(bool, tag = "5")]
        pub(super) is_folded: bool,
    }

    /// A location's function and line.
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Line {
        #[prost(uint64, tag = "1")]
        pub(super) function_id: u64,
        #[prost(int64, tag = "2")]
        pub(super) line: i64,
    }

    /// A function: a span name and target.
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Function {
        #[prost(uint64, tag = "1")]
        pub(super) id: u64,
        #[prost(int64, tag = "2")]
        pub(super) name: i64,
        #[prost(int64, tag = "3")]
        pub(super) system_name: i64,
        #[prost(int64, tag = "4")]
        pub(super) filename: i64,
        #[prost(int64, tag = "5")]
        pub(super) start_line: i64,
    }
}

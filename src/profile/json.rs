//! The JSON form of a [`Snapshot`]: writing, reading (every schema version) and the histogram
//! encoding.

use std::path::Path;

use serde::Deserialize;

use super::{Snapshot, SCHEMA, SCHEMA_VERSION};
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
    /// [`Error::InvalidProfile`] naming `origin` and what is wrong: not JSON, not a spanprof
    /// profile, a newer schema version, a field of the wrong type, a histogram that does not
    /// decode.
    pub fn from_json(json: &str, origin: &str) -> Result<Self> {
        let invalid = |message: String| Error::InvalidProfile {
            origin: origin.to_string(),
            message,
        };
        // The header first, so a newer or foreign file gets a precise complaint rather than a
        // missing field.
        #[derive(Deserialize)]
        struct Header {
            schema: Option<String>,
            version: Option<u32>,
        }
        let header: Header =
            serde_json::from_str(json).map_err(|e| invalid(format!("not a JSON object: {e}")))?;
        match header.schema.as_deref() {
            Some(SCHEMA) => {}
            Some(other) => {
                return Err(invalid(format!("schema is {other:?}, expected {SCHEMA:?}")))
            }
            None => return Err(invalid(format!("no \"schema\" field: not a {SCHEMA} file"))),
        }
        match header.version {
            Some(1..=SCHEMA_VERSION) => {}
            Some(v) => {
                return Err(invalid(format!(
                    "schema version {v} is not one this spanprof reads (1 to {SCHEMA_VERSION})"
                )))
            }
            None => return Err(invalid("no \"version\" field".to_string())),
        }
        // Versions 1 and 2 parse into the current model: v1 lacks the optional `resources`,
        // v2 has a per-span `resources.leak` that is now an analysis (ignored here).
        let mut snapshot: Snapshot =
            serde_json::from_str(json).map_err(|e| invalid(e.to_string()))?;
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

/// HdrHistogram V2 + deflate, base64 (standard alphabet, padded).
pub(super) mod hdr_base64 {
    use base64::Engine;
    use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
    use hdrhistogram::Histogram;
    use serde::de::Error as _;
    use serde::Deserialize;

    use crate::profile::Buckets;

    pub(crate) fn serialize<S: serde::Serializer>(h: &Buckets, s: S) -> Result<S::Ok, S::Error> {
        let h = h.to_histogram();
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
        let text = String::deserialize(d)?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text.as_bytes())
            .map_err(|e| D::Error::custom(format!("histogram is not base64: {e}")))?;
        let h: Histogram<u64> = Deserializer::new()
            .deserialize(&mut bytes.as_slice())
            .map_err(|e| D::Error::custom(format!("histogram does not decode: {e:?}")))?;
        Ok(Buckets::from_histogram(&h))
    }
}

//! The JSON profile: the [`Snapshot`] as written by [`Snapshot::to_json`].

use std::io::{self, Write};

use super::Format;
use crate::profile::Snapshot;

/// Name of the JSON profile in an output directory.
pub const PROFILE_FILE: &str = "profile.json";

/// The JSON profile (schema in the guide's `docs/profile-format.md`; read back with
/// [`Snapshot::read_json`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Json;

impl Format for Json {
    fn name(&self) -> &'static str {
        "json"
    }

    fn file_name(&self) -> &'static str {
        PROFILE_FILE
    }

    fn action(&self) -> &'static str {
        "writing profile"
    }

    fn render(&self, snapshot: &Snapshot, out: &mut dyn Write) -> io::Result<()> {
        out.write_all(snapshot.to_json().as_bytes())
    }
}

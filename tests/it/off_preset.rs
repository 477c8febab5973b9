//! `SPANPROF=off` (`Preset::Off`) writes nothing: no report, no profile, no custom output, and
//! files from an earlier run are left as they were.

use crate::support;

use std::io::{self, Write};

use spanprof::output::{Destination, Format, Outputs, PROFILE_FILE, REPORT_FILE};
use spanprof::{Preset, ProfileLayer, ReportTarget, Snapshot};
use tracing_subscriber::prelude::*;

/// A format that would write one line.
#[derive(Debug)]
struct Marker;

impl Format for Marker {
    fn name(&self) -> &'static str {
        "marker"
    }
    fn file_name(&self) -> &'static str {
        "marker.txt"
    }
    fn render(&self, _: &Snapshot, out: &mut dyn Write) -> io::Result<()> {
        writeln!(out, "written")
    }
}

#[test]
fn off_writes_nothing_and_leaves_an_earlier_profile_untouched() {
    let dir = support::temp_dir("off-writes-nothing");
    std::fs::create_dir_all(&dir).unwrap();
    let earlier = "{\"an earlier run's profile\": true}\n";
    std::fs::write(dir.join(PROFILE_FILE), earlier).unwrap();

    let (layer, guard) = ProfileLayer::builder()
        .with_env(false)
        .with_preset(Preset::Off)
        .with_output_dir(&dir)
        .with_report(ReportTarget::File(dir.join(REPORT_FILE)))
        .with_output(Marker, Destination::Dir(dir.clone()))
        .build()
        .unwrap();
    let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
    tracing::dispatcher::with_default(&dispatch, || {
        tracing::info_span!("work").in_scope(|| {});
    });
    let outputs = guard.finish().unwrap();

    assert_eq!(outputs, Outputs::default());
    assert_eq!(
        std::fs::read_to_string(dir.join(PROFILE_FILE)).unwrap(),
        earlier
    );
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, [PROFILE_FILE]);
    let _ = std::fs::remove_dir_all(&dir);
}

//! Every output marks the span names the automatic back-off sampled (with N), and scales
//! their totals: checked on one profile, each figure against the profile.

use super::{Format, Html, Json, Markdown, Table};
use crate::profile::{BackoffStep, Sampled, Snapshot};

/// The detailed test profile with its first span name sampled 1 in 8: 3 spans left out for
/// each one recorded, one step of the second stage at 2 s.
fn sampled_profile() -> (Snapshot, String, u64) {
    let mut snap = crate::profile::detailed_test_profile();
    let s = &mut snap.spans[0];
    let skipped = 3 * s.entry_busy.count;
    s.calls += skipped;
    s.sampled = Some(Sampled {
        every: 8,
        since_ns: 2_000_000_000,
        skipped,
        skipped_ns: 0,
    });
    let name = s.name.clone();
    // The mean of the recorded entries × all of them.
    let scaled = (s.entry_busy.mean_ns * (s.entry_busy.count + skipped) as f64).round() as u64;
    assert_eq!(s.scaled_total_ns(&s.entry_busy), scaled);
    assert!(
        scaled > 3 * s.entry_busy.total_ns,
        "scaled to four times the spans"
    );
    let step = BackoffStep::sampling(
        2_000_000_000,
        false,
        vec![(name.clone(), s.target.clone(), 8)],
        9.5,
    );
    snap.backoff.push(step);
    (snap, name, scaled)
}

fn render(format: &dyn Format, snap: &Snapshot) -> String {
    let mut out = Vec::new();
    format.render(snap, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn the_table_and_markdown_mark_sampled_names_and_scale_their_totals() {
    let (snap, name, scaled) = sampled_profile();
    let total = format!("≈{}", super::units::format_duration(scaled));
    let table = Table::new().to_string(&snap);
    let row = table
        .lines()
        .find(|l| l.starts_with(&name))
        .expect("the sampled name's row");
    assert!(row.contains(&total), "{row}\n{total}");
    assert!(
        table.contains("≈ sampled by the back-off")
            && table.contains(&format!("{name} 1/8 from 2.00 s")),
        "{table}"
    );
    assert!(
        table.contains(&format!("at 2.00 s {name} 1/8 (cost 9.5%)")),
        "{table}"
    );
    // The other names: exact totals, no mark.
    let other = &snap.spans[1];
    let other_row = table.lines().find(|l| l.starts_with(&other.name)).unwrap();
    assert!(!other_row.contains('≈'), "{other_row}");

    let md = Markdown::new().to_string(&snap);
    let row = md
        .lines()
        .find(|l| l.starts_with(&format!("| `{name}`")))
        .unwrap();
    assert!(row.contains(&total), "{row}");
    assert!(md.contains(&format!("{name} 1/8 from 2.00 s")), "{md}");
}

#[test]
fn json_and_html_carry_the_mark() {
    let (snap, name, scaled) = sampled_profile();
    let json = render(&Json, &snap);
    let back = Snapshot::from_json(&json, "json output").unwrap();
    assert_eq!(back.span(&name).unwrap().sampled, snap.spans[0].sampled);
    assert_eq!(back.backoff[0].sampled[0].every, 8);

    let html = render(&Html, &snap);
    let total = format!("≈{}", super::units::format_duration(scaled));
    assert!(html.contains(&total), "the table's total cell");
    assert!(html.contains("id=\"spans-sampled\""));
    assert!(html.contains(&format!("{name} 1/8 from 2.00 s")));
    // The back-off section names the step.
    assert!(html.contains(&format!("at 2.00 s {name} 1/8 (cost 9.5%)")));
}

#[cfg(feature = "csv")]
#[test]
fn csv_has_the_n_and_scaled_totals() {
    let (snap, name, scaled) = sampled_profile();
    let text = super::Csv::new().to_string(&snap).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |h: &str| header.iter().position(|c| *c == h).unwrap();
    let row: Vec<&str> = lines
        .find(|l| l.starts_with(&format!("{name},")))
        .unwrap()
        .split(',')
        .collect();
    assert_eq!(row[col("sample_every")], "8");
    let skipped = snap.spans[0].sampled.as_ref().unwrap().skipped;
    assert_eq!(row[col("sampled_out")], skipped.to_string());
    assert_eq!(row[col("total_ns")], scaled.to_string());
    assert_eq!(row[col("calls")], snap.spans[0].calls.to_string());
    let other = text.lines().nth(2).unwrap().split(',').collect::<Vec<_>>();
    assert_eq!(other[col("sample_every")], "");
}

#[cfg(feature = "prometheus")]
#[test]
fn prometheus_has_a_gauge_of_n() {
    let (snap, name, _) = sampled_profile();
    let text = super::Prometheus::new().to_string(&snap);
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("spanprof_span_sample_every{"))
        .collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert!(
        lines[0].contains(&format!("span=\"{name}\"")),
        "{}",
        lines[0]
    );
    assert!(lines[0].ends_with(" 8"), "{}", lines[0]);
    let skipped = snap.spans[0].sampled.as_ref().unwrap().skipped;
    assert!(text
        .lines()
        .any(|l| l.starts_with("spanprof_span_sampled_out_total{")
            && l.ends_with(&format!(" {skipped}"))));
}

#[cfg(feature = "otlp")]
#[test]
fn otlp_has_a_gauge_of_n() {
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::metrics::v1::{metric::Data, number_data_point::Value};
    use prost::Message;
    let (snap, name, _) = sampled_profile();
    let options = crate::otlp::OtlpOptions::new("http://127.0.0.1:4318/v1/metrics");
    let request = ExportMetricsServiceRequest::decode(options.encode(&snap).as_slice()).unwrap();
    let metrics = &request.resource_metrics[0].scope_metrics[0].metrics;
    let gauge = metrics
        .iter()
        .find(|m| m.name == "spanprof.span.sample_every")
        .expect("the gauge");
    let Some(Data::Gauge(g)) = &gauge.data else {
        panic!("{gauge:?}")
    };
    assert_eq!(g.data_points.len(), 1);
    assert_eq!(g.data_points[0].value, Some(Value::AsInt(8)));
    let attrs = format!("{:?}", g.data_points[0].attributes);
    assert!(attrs.contains(&name), "{attrs}");
}

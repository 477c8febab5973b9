//! `compare --format json` and `top --format json`: the analysis's findings as JSON, through
//! output structs of this binary (the library's analysis types do not derive `Serialize`).
//!
//! The shape is documented in `docs/cli-and-ci.md` ("JSON output"); `version` changes when a
//! field is removed or changes meaning (fields may be added).

use std::path::PathBuf;

use serde::Serialize;

use spanprof::analysis::{CompareOptions, Comparison, Finding, Side, TimingChange, Verdict};
use spanprof::profile::Snapshot;

use crate::render;
use crate::TextFormat;

/// The version of the `compare` JSON shape (2: `run_wide` replaced `overall_ratio`, and each
/// timing gained its change beside the run-wide shift).
const COMPARE_VERSION: u32 = 2;
/// The version of the `top` JSON shape.
const TOP_VERSION: u32 = 1;

fn to_json(value: &impl Serialize) -> String {
    // UNWRAP-FREE: plain structs of strings and numbers serialize (non-finite numbers as null).
    let mut text = serde_json::to_string_pretty(value)
        .unwrap_or_else(|e| serde_json::json!({ "error": e.to_string() }).to_string());
    text.push('\n');
    text
}

/// A finite number, or `None` (null) for an infinite or NaN one.
fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

#[derive(Serialize)]
struct CompareJson<'a> {
    version: u32,
    command: &'static str,
    base_profiles: Vec<String>,
    new_profiles: Vec<String>,
    base_runs: usize,
    new_runs: usize,
    low_confidence: bool,
    /// How every span name moved together, with its own verdict.
    run_wide: RunWideJson,
    options: OptionsJson,
    regressed: bool,
    /// The exit status the command returns: 0 no regression, 1 regression.
    exit_status: u8,
    /// The text output's result line.
    result: String,
    timings: Vec<TimingJson<'a>>,
    paths: Vec<TimingJson<'a>>,
    counts: Vec<CountJson<'a>>,
    budgets: Vec<BudgetJson<'a>>,
    only_in_base: Vec<NameJson<'a>>,
    only_in_new: Vec<NameJson<'a>>,
    paths_only_in_base: &'a [String],
    paths_only_in_new: &'a [String],
}

#[derive(Serialize)]
struct RunWideJson {
    metric: String,
    /// New / base of the runs' median factors.
    ratio: Option<f64>,
    change_pct: Option<f64>,
    /// Each run's factor: the median, over the names, of value / the baseline's median.
    base_factors: Vec<f64>,
    new_factors: Vec<f64>,
    /// The span names the factors are medians of.
    names: usize,
    threshold_pct: f64,
    verdict: &'static str,
    evidence: RunWideEvidenceJson,
}

#[derive(Serialize)]
struct RunWideEvidenceJson {
    decided_by: &'static str,
}

#[derive(Serialize)]
struct OptionsJson {
    metric: String,
    threshold_pct: f64,
    min_calls: u64,
    min_shift_ns: f64,
    count_threshold_pct: f64,
}

#[derive(Serialize)]
struct NameJson<'a> {
    name: &'a str,
    target: &'a str,
}

#[derive(Serialize)]
struct TimingJson<'a> {
    /// The span name, or the call path `root;…;leaf`.
    name: &'a str,
    target: &'a str,
    metric: String,
    /// Median of the baseline runs, ns.
    base_ns: f64,
    /// Median of the new runs, ns.
    new_ns: f64,
    /// `(new / base − 1) × 100`; null when the base is 0 and the new is not.
    change_pct: Option<f64>,
    /// The change with the run-wide shift taken out (what the verdict judges), %.
    relative_change_pct: Option<f64>,
    threshold_pct: f64,
    verdict: &'static str,
    evidence: EvidenceJson<'a>,
}

/// What decided a timing verdict, by the rule of `spanprof::analysis::compare`.
#[derive(Serialize)]
struct EvidenceJson<'a> {
    /// `too_few_calls`, `within_threshold`, `plain_change_within`, `below_min_shift`,
    /// `within_noise`, `beyond_threshold_and_noise` (two or more runs per side),
    /// `beside_neighbour` (judged beside `neighbour`) or
    /// `beyond_threshold` (one run on a side: low confidence).
    decided_by: &'static str,
    /// |new − base| of the medians, ns.
    shift_ns: f64,
    min_shift_ns: f64,
    min_calls: u64,
    base_min_calls: u64,
    new_min_calls: u64,
    /// max − min of each side's runs, each divided by its run-wide factor, ns; null for one
    /// run.
    base_spread_ns: Option<f64>,
    new_spread_ns: Option<f64>,
    base_values_ns: Vec<f64>,
    new_values_ns: Vec<f64>,
    /// Each run's value divided by its run-wide factor, ns.
    base_relative_ns: Vec<f64>,
    new_relative_ns: Vec<f64>,
    /// The largest N where a side's figures come from 1 span in N (the back-off).
    sampled_every: Option<u32>,
    /// The span name judged beside, where that decided (`beside_neighbour`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    neighbour: Option<NeighbourJson<'a>>,
}

/// The span name a timing was judged beside (`spanprof::analysis::Neighbour`).
#[derive(Serialize)]
struct NeighbourJson<'a> {
    name: &'a str,
    target: &'a str,
    /// The change beside the neighbour, %.
    change_pct: Option<f64>,
    /// The neighbour's own change beside the run-wide shift, %.
    own_change_pct: Option<f64>,
    /// Each run's value divided by the neighbour's value in that run ÷ its baseline median, ns.
    base_relative_ns: Vec<f64>,
    new_relative_ns: Vec<f64>,
}

#[derive(Serialize)]
struct CountJson<'a> {
    name: &'a str,
    target: &'a str,
    count: &'static str,
    base: f64,
    new: f64,
    change_pct: Option<f64>,
    threshold_pct: f64,
    verdict: &'static str,
    evidence: CountEvidenceJson,
}

#[derive(Serialize)]
struct CountEvidenceJson {
    decided_by: &'static str,
}

#[derive(Serialize)]
struct BudgetJson<'a> {
    name: &'a str,
    target: &'a str,
    metric: String,
    value_ns: f64,
    max_ns: f64,
    within: bool,
    verdict: &'static str,
}

fn names(v: &[(String, String)]) -> Vec<NameJson<'_>> {
    v.iter()
        .map(|(name, target)| NameJson { name, target })
        .collect()
}

fn verdict(v: Verdict) -> &'static str {
    match v {
        Verdict::Regression => "regression",
        Verdict::WithinNoise => "within_noise",
        Verdict::Improvement => "improvement",
        Verdict::Unchanged => "unchanged",
        Verdict::TooFewCalls => "too_few_calls",
        _ => "other",
    }
}

fn spread(side: &Side) -> Option<f64> {
    (side.values.len() >= 2).then_some(side.spread)
}

fn timing<'a>(t: &'a TimingChange, options: &CompareOptions) -> TimingJson<'a> {
    TimingJson {
        name: &t.name,
        target: &t.target,
        metric: t.metric.to_string(),
        base_ns: t.base.median,
        new_ns: t.new.median,
        change_pct: finite(t.change_pct()),
        relative_change_pct: finite(t.relative_change_pct()),
        threshold_pct: t.threshold_pct,
        verdict: verdict(t.verdict),
        evidence: EvidenceJson {
            decided_by: t.decided_by.name(),
            shift_ns: (t.new_relative.median - t.base_relative.median).abs(),
            min_shift_ns: options.min_shift_ns,
            min_calls: options.min_calls,
            base_min_calls: t.base.min_calls,
            new_min_calls: t.new.min_calls,
            base_spread_ns: spread(&t.base_relative),
            new_spread_ns: spread(&t.new_relative),
            base_values_ns: t.base.values.clone(),
            new_values_ns: t.new.values.clone(),
            base_relative_ns: t.base_relative.values.clone(),
            new_relative_ns: t.new_relative.values.clone(),
            sampled_every: t.base.sampled_every.max(t.new.sampled_every),
            neighbour: t.neighbour.as_ref().map(|n| NeighbourJson {
                name: &n.name,
                target: &n.target,
                change_pct: finite(n.change_pct()),
                own_change_pct: finite((n.own_ratio - 1.0) * 100.0),
                base_relative_ns: n.base_relative.values.clone(),
                new_relative_ns: n.new_relative.values.clone(),
            }),
        },
    }
}

/// `compare --format json`.
pub(crate) fn comparison(
    c: &Comparison,
    options: &CompareOptions,
    base: &[PathBuf],
    new: &[PathBuf],
    exit_status: u8,
) -> String {
    let regressions = render::regressions(c, TextFormat::Text);
    let result = if regressions.is_empty() {
        "no regression".to_string()
    } else {
        format!("REGRESSION in {}", regressions.join(", "))
    };
    let out = CompareJson {
        version: COMPARE_VERSION,
        command: "compare",
        base_profiles: base.iter().map(|p| p.display().to_string()).collect(),
        new_profiles: new.iter().map(|p| p.display().to_string()).collect(),
        base_runs: c.base_runs,
        new_runs: c.new_runs,
        low_confidence: c.low_confidence,
        run_wide: RunWideJson {
            metric: c.run_wide.metric.to_string(),
            ratio: finite(c.run_wide.ratio),
            change_pct: finite(c.run_wide.change_pct()),
            base_factors: c.run_wide.base_factors.clone(),
            new_factors: c.run_wide.new_factors.clone(),
            names: c.run_wide.names,
            threshold_pct: c.run_wide.threshold_pct,
            verdict: verdict(c.run_wide.verdict),
            evidence: RunWideEvidenceJson {
                decided_by: c.run_wide.decided_by.name(),
            },
        },
        options: OptionsJson {
            metric: options.metric.to_string(),
            threshold_pct: options.threshold_for(options.metric),
            min_calls: options.min_calls,
            min_shift_ns: options.min_shift_ns,
            count_threshold_pct: options.count_threshold_pct,
        },
        regressed: c.regressed(),
        exit_status,
        result,
        timings: c.timings.iter().map(|t| timing(t, options)).collect(),
        paths: c.paths.iter().map(|t| timing(t, options)).collect(),
        counts: c
            .counts
            .iter()
            .map(|x| CountJson {
                name: &x.name,
                target: &x.target,
                count: x.count.name(),
                base: x.base,
                new: x.new,
                change_pct: finite((x.new / x.base - 1.0) * 100.0),
                threshold_pct: options.count_threshold_pct,
                verdict: verdict(x.verdict),
                evidence: CountEvidenceJson {
                    decided_by: "exact_count",
                },
            })
            .collect(),
        budgets: c
            .budgets
            .iter()
            .map(|b| BudgetJson {
                name: &b.name,
                target: &b.target,
                metric: b.metric.to_string(),
                value_ns: b.value_ns,
                max_ns: b.max_ns,
                within: b.within,
                verdict: if b.within { "within" } else { "over" },
            })
            .collect(),
        only_in_base: names(&c.only_in_base),
        only_in_new: names(&c.only_in_new),
        paths_only_in_base: &c.paths_only_in_base,
        paths_only_in_new: &c.paths_only_in_new,
    };
    to_json(&out)
}

#[derive(Serialize)]
struct TopJson<'a> {
    version: u32,
    command: &'static str,
    span_names: usize,
    run_duration_ns: u64,
    host: &'a str,
    findings: Vec<FindingJson>,
}

/// One finding: its kind, what it is about, where in the call tree, its figures and the text
/// line `top` prints.
#[derive(Serialize)]
struct FindingJson {
    kind: &'static str,
    name: Option<String>,
    target: Option<String>,
    /// For `hot_path`, the call path; otherwise the call paths (`root;…;leaf`) of the tree
    /// that end at the span name (empty without a call tree).
    paths: Vec<String>,
    figures: serde_json::Value,
    text: Option<String>,
}

/// The call paths of `snapshot`'s tree that end at span `name` of `target`.
fn paths_to(snapshot: &Snapshot, name: &str, target: &str) -> Vec<String> {
    let Some(tree) = snapshot.tree.as_ref() else {
        return Vec::new();
    };
    (0..tree.nodes.len())
        .filter(|&i| tree.nodes[i].name == name && tree.nodes[i].target == target)
        .map(|i| tree.path(i).join(";"))
        .collect()
}

/// `top --format json`.
pub(crate) fn findings(snapshot: &Snapshot, findings: &[Finding]) -> String {
    use serde_json::json;
    let mut out = Vec::new();
    for finding in findings {
        let (kind, name, target, figures): (&str, Option<&str>, Option<&str>, _) = match finding {
            Finding::SelfTime {
                name,
                target,
                self_ns,
                share_pct,
            } => (
                "self_time",
                Some(name.as_str()),
                Some(target.as_str()),
                json!({ "self_ns": self_ns, "share_pct": share_pct }),
            ),
            Finding::HotPath {
                path,
                target,
                instances,
                self_ns,
                share_pct,
            } => (
                "hot_path",
                path.rsplit(';').next(),
                Some(target.as_str()),
                json!({ "instances": instances, "self_ns": self_ns, "share_pct": share_pct }),
            ),
            Finding::HeavyTail {
                name,
                target,
                calls,
                p50_ns,
                p99_ns,
                ratio,
            } => (
                "heavy_tail",
                Some(name.as_str()),
                Some(target.as_str()),
                json!({ "calls": calls, "p50_ns": p50_ns, "p99_ns": p99_ns, "ratio": ratio }),
            ),
            Finding::Instrumentation {
                name,
                target,
                calls,
                spans,
                entries_per_span,
                mean_ns,
                cost_per_span_ns,
                cost_share_pct,
                sampled_every,
            } => (
                "instrumentation",
                Some(name.as_str()),
                Some(target.as_str()),
                json!({
                    "calls": calls,
                    "spans": spans,
                    "entries_per_span": entries_per_span,
                    "mean_ns": mean_ns,
                    "cost_per_span_ns": cost_per_span_ns,
                    "cost_share_pct": cost_share_pct,
                    "sampled_every": sampled_every,
                }),
            ),
            Finding::Allocations {
                name,
                target,
                entries,
                per_call,
                bytes_per_call,
                share_pct,
                bytes_share_pct,
            } => (
                "allocations",
                Some(name.as_str()),
                Some(target.as_str()),
                json!({
                    "entries": entries,
                    "per_call": per_call,
                    "bytes_per_call": bytes_per_call,
                    "share_pct": share_pct,
                    "bytes_share_pct": bytes_share_pct,
                }),
            ),
            Finding::Leak(leak) => (
                "leak",
                Some(leak.name.as_str()),
                Some(leak.target.as_str()),
                json!({
                    "source": format!("{:?}", leak.source).to_lowercase(),
                    "retained_bytes": leak.retained_bytes,
                    "calls": leak.calls,
                    "per_call_bytes": leak.per_call_bytes,
                    "share_of_calls": leak.share_of_calls,
                    "process_growth_bytes": leak.process_growth_bytes,
                    "freed_elsewhere_bytes": leak.freed_elsewhere_bytes,
                }),
            ),
            Finding::GpuIdle {
                name,
                target,
                device,
                utilization_pct,
                wall_share_pct,
            } => (
                "gpu_idle",
                Some(name.as_str()),
                Some(target.as_str()),
                json!({
                    "device": device,
                    "utilization_pct": utilization_pct,
                    "wall_share_pct": wall_share_pct,
                }),
            ),
            Finding::GpuBound {
                name,
                target,
                calls,
                cpu_mean_ns,
                gpu_mean_ns,
                ratio,
            } => (
                "gpu_bound",
                Some(name.as_str()),
                Some(target.as_str()),
                json!({
                    "calls": calls,
                    "cpu_mean_ns": cpu_mean_ns,
                    "gpu_mean_ns": gpu_mean_ns,
                    "ratio": ratio,
                }),
            ),
            Finding::More { kind, left_out } => (
                "more",
                None,
                None,
                json!({ "of_kind": kind, "left_out": left_out }),
            ),
            _ => continue,
        };
        let paths = match finding {
            Finding::HotPath { path, .. } => vec![path.clone()],
            _ => match (name, target) {
                (Some(n), Some(t)) => paths_to(snapshot, n, t),
                _ => Vec::new(),
            },
        };
        out.push(FindingJson {
            kind,
            name: name.map(str::to_string),
            target: target.map(str::to_string),
            paths,
            figures,
            text: render::finding_line(finding, TextFormat::Text),
        });
    }
    to_json(&TopJson {
        version: TOP_VERSION,
        command: "top",
        span_names: snapshot.spans.len(),
        run_duration_ns: snapshot.run.duration_ns,
        host: &snapshot.run.host,
        findings: out,
    })
}

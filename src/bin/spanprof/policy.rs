//! The compare policy file (TOML): default metric and thresholds, per-name rules, budgets.
//!
//! ```toml
//! metric = "typical"        # typical (the default), p50, p90, p99, mean, self, total, gpu
//! threshold = "15%"         # timing change that counts
//! min_calls = 30            # fewest calls per run before a name's timing is judged
//! min_shift = "1us"         # smallest timing change that counts
//! count_threshold = "0%"    # calls, instances, allocations: any increase
//!
//! [thresholds]              # more metrics judged for every span name, each its threshold
//! p99 = "25%"
//!
//! [[rule]]                  # the first rule whose glob matches a span name applies
//! name = "train_*"
//! metric = "p99"
//! threshold = "20%"
//!
//! [[budget]]                # absolute limits on the new runs
//! name = "train_step"
//! metric = "p99"
//! max = "40ms"
//! ```

use std::path::Path;

use serde::Deserialize;

use spanprof::analysis::{Budget, CompareOptions, Measure, Rule};

use crate::BadInput;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    metric: Option<String>,
    threshold: Option<Pct>,
    min_calls: Option<u64>,
    min_shift: Option<String>,
    count_threshold: Option<Pct>,
    #[serde(default)]
    thresholds: std::collections::BTreeMap<String, Pct>,
    #[serde(default)]
    rule: Vec<RuleEntry>,
    #[serde(default)]
    budget: Vec<BudgetEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleEntry {
    name: String,
    metric: Option<String>,
    threshold: Option<Pct>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BudgetEntry {
    name: String,
    metric: String,
    max: String,
}

/// A percentage: `"5%"`, `"5"` or `5`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Pct {
    Number(f64),
    Text(String),
}

impl Pct {
    fn value(&self) -> Result<f64, String> {
        match self {
            Pct::Number(n) if n.is_finite() && *n >= 0.0 => Ok(*n),
            Pct::Number(n) => Err(format!("{n} is not a percentage, 0 or more")),
            Pct::Text(t) => parse_pct(t),
        }
    }
}

/// `5%`, `5` or `0.5%`: a finite percentage, 0 or more.
pub(crate) fn parse_pct(text: &str) -> Result<f64, String> {
    text.trim()
        .trim_end_matches('%')
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .ok_or_else(|| format!("{text:?} is not a percentage, 0 or more (e.g. 5%)"))
}

/// `40ms`, `1us`, `0ns`: a duration in nanoseconds.
pub(crate) fn parse_duration_ns(text: &str) -> Result<f64, String> {
    humantime::parse_duration(text.trim())
        .map(|d| d.as_nanos() as f64)
        .map_err(|e| format!("{text:?} is not a duration like 40ms or 1us ({e})"))
}

/// Reads a policy file into compare options.
pub(crate) fn read(path: &Path) -> Result<CompareOptions, BadInput> {
    let bad = |what: String| BadInput(format!("invalid policy {}: {what}", path.display()));
    let text = std::fs::read_to_string(path)
        .map_err(|e| BadInput(format!("reading policy {}: {e}", path.display())))?;
    let file: File = toml::from_str(&text).map_err(|e| bad(e.message().to_string()))?;
    let metric = |m: &str| m.parse::<Measure>().map_err(bad);
    let mut options = CompareOptions::default();
    if let Some(m) = &file.metric {
        options.metric = metric(m)?;
    }
    if let Some(t) = &file.threshold {
        options.threshold_pct = t.value().map_err(|e| bad(format!("threshold: {e}")))?;
    }
    if let Some(n) = file.min_calls {
        options.min_calls = n;
    }
    if let Some(shift) = &file.min_shift {
        options.min_shift_ns =
            parse_duration_ns(shift).map_err(|e| bad(format!("min_shift: {e}")))?;
    }
    if let Some(t) = &file.count_threshold {
        options.count_threshold_pct = t
            .value()
            .map_err(|e| bad(format!("count_threshold: {e}")))?;
    }
    for (name, pct) in &file.thresholds {
        let pct = pct
            .value()
            .map_err(|e| bad(format!("thresholds.{name}: {e}")))?;
        options.thresholds.push((metric(name)?, pct));
    }
    for r in &file.rule {
        let mut rule = Rule::new(r.name.clone());
        if let Some(m) = &r.metric {
            rule = rule.with_metric(metric(m)?);
        }
        if let Some(t) = &r.threshold {
            let pct = t
                .value()
                .map_err(|e| bad(format!("rule {:?} threshold: {e}", r.name)))?;
            rule = rule.with_threshold(pct);
        }
        options.rules.push(rule);
    }
    for b in &file.budget {
        let max =
            parse_duration_ns(&b.max).map_err(|e| bad(format!("budget {:?} max: {e}", b.name)))?;
        options
            .budgets
            .push(Budget::new(b.name.clone(), metric(&b.metric)?, max));
    }
    Ok(options)
}

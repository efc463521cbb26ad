//! Gate: failure conditions on the summary (SPEC §5). Parses the `--fail-on` grammar,
//! evaluates each condition against the computed summary, and names the operations that
//! breach it, so a CI log alone is enough to start the investigation.
//!
//! Grammar: `METRIC OP LIMIT`, where
//! - METRIC is a class (`nested-retry`, `healthy`, …: operations of that class), a finding
//!   (`retry-without-delay`, or `retries@gateway` at one hop: operations with it),
//!   `amplification[@HOP]` (attempts ÷ operations), `retry-ratio[@HOP]` (retries and
//!   redeliveries ÷ originals), `bursts`, `unfinished-attempts`, `orphan-attempts` or
//!   `duplicate-effects`; without `@HOP` a per-hop metric is checked at its worst hop;
//! - OP is one of `>`, `>=`, `<`, `<=`, `==` (or `=`), `!=`;
//! - LIMIT is a number of at least 0, or, for classes and findings, a percentage of
//!   operations (`1%`, at most 100%).
//!
//! The user documentation of this grammar is docs/ci.md.
//!
//! The condition says when to FAIL: `--fail-on 'overlap > 1%'` fails when more than 1% of
//! operations are `overlap`.

use anyhow::{bail, Result};
use serde::Serialize;

use crate::analysis::{Analysis, OperationResult};
use crate::classify::{Class, FindingKind};
use crate::config::HopOrder;
use crate::summary::{display_operation_key, Summary};

/// Operation IDs listed per breached threshold before the rest are only counted.
pub const OPERATIONS_LISTED: usize = 5;

const EXAMPLE: &str = "--fail-on 'nested-retry > 0' or --fail-on 'overlap > 1%'";

const FINDINGS: [FindingKind; 12] = [
    FindingKind::Retries,
    FindingKind::Redelivery,
    FindingKind::FanOut,
    FindingKind::Overlap,
    FindingKind::Burst,
    FindingKind::OverBudget,
    FindingKind::RetryWithoutDelay,
    FindingKind::RetryAfterNotHonoured,
    FindingKind::RetryAfterNotClamped,
    FindingKind::DuplicateEffect,
    FindingKind::Unfinished,
    FindingKind::Orphan,
];

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Metric {
    Class(Class),
    Finding { kind: FindingKind, hop: Option<u16> },
    Amplification { hop: Option<u16> },
    RetryRatio { hop: Option<u16> },
    Bursts,
    UnfinishedAttempts,
    OrphanAttempts,
    DuplicateEffects,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    Gt,
    Ge,
    Lt,
    Le,
    Eq,
    Ne,
}

impl Cmp {
    pub fn holds(self, value: f64, limit: f64) -> bool {
        match self {
            Cmp::Gt => value > limit,
            Cmp::Ge => value >= limit,
            Cmp::Lt => value < limit,
            Cmp::Le => value <= limit,
            Cmp::Eq => value == limit,
            Cmp::Ne => value != limit,
        }
    }

    /// Whether large values are the bad ones: the worst hop is then the largest.
    pub fn fails_high(self) -> bool {
        matches!(self, Cmp::Gt | Cmp::Ge | Cmp::Eq | Cmp::Ne)
    }
}

/// Where a condition came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    Flag,
    Policy,
}

/// One parsed failure condition.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    pub text: String,
    pub metric: Metric,
    pub cmp: Cmp,
    pub limit: f64,
    /// The limit is a share of operations (written with `%`), stored as a fraction.
    pub share: bool,
    pub origin: Origin,
}

impl Condition {
    /// The metric as written, without operator and limit: flags override policy conditions
    /// on the same metric.
    pub fn metric_key(&self) -> String {
        self.text
            .split(|c| "<>=!".contains(c))
            .next()
            .unwrap_or("")
            .trim()
            .to_string()
    }
}

/// Parses one condition; errors name the offending token and show a valid example.
pub fn parse_condition(text: &str, hops: &HopOrder, origin: Origin) -> Result<Condition> {
    let trimmed = text.trim();
    let op_at = trimmed.find(|c| "<>=!".contains(c));
    let Some(op_at) = op_at else {
        bail!("condition '{text}' has no comparison: write METRIC OP LIMIT, e.g. {EXAMPLE}");
    };
    let name = trimmed[..op_at].trim();
    let rest = &trimmed[op_at..];
    let op_len = rest
        .find(|c: char| !"<>=!".contains(c))
        .unwrap_or(rest.len());
    let cmp = match &rest[..op_len] {
        ">" => Cmp::Gt,
        ">=" => Cmp::Ge,
        "<" => Cmp::Lt,
        "<=" => Cmp::Le,
        "==" | "=" => Cmp::Eq,
        "!=" => Cmp::Ne,
        other => bail!("condition '{text}': unknown operator '{other}'; use one of >, >=, <, <=, ==, != (e.g. {EXAMPLE})"),
    };
    let limit_text = rest[op_len..].trim();
    let (number, share) = match limit_text.strip_suffix('%') {
        Some(n) => (n.trim(), true),
        None => (limit_text, false),
    };
    let Some(limit) = number.parse::<f64>().ok().filter(|v| v.is_finite()) else {
        bail!("condition '{text}': limit '{limit_text}' is not a number or percentage (e.g. {EXAMPLE})");
    };
    let metric = parse_metric(name, hops)
        .map_err(|e| anyhow::anyhow!("condition '{text}': {e} (e.g. {EXAMPLE})"))?;
    if share && !matches!(metric, Metric::Class(_) | Metric::Finding { .. }) {
        bail!("condition '{text}': '{name}' is not counted in operations, so it takes a plain number, not a percentage (e.g. --fail-on 'amplification@dependency > 2.5')");
    }
    // Every metric is 0 or more and a share at most 100%: a limit outside that range would
    // make the condition always or never hold, which is a typo, not a gate.
    if limit < 0.0 {
        bail!("condition '{text}': limit '{limit_text}' is negative, but every metric is 0 or more (e.g. {EXAMPLE})");
    }
    if share && limit > 100.0 {
        bail!("condition '{text}': limit '{limit_text}' is more than 100% of operations (e.g. {EXAMPLE})");
    }
    Ok(Condition {
        text: trimmed.to_string(),
        metric,
        cmp,
        limit: if share { limit / 100.0 } else { limit },
        share,
        origin,
    })
}

fn parse_metric(name: &str, hops: &HopOrder) -> Result<Metric, String> {
    if name.is_empty() {
        return Err("no metric before the operator".to_string());
    }
    let (base, hop) = match name.split_once('@') {
        Some((base, hop_name)) => {
            let Some(hop) = hops.index_of(hop_name) else {
                return Err(format!(
                    "unknown hop '{hop_name}'; known hops are {}",
                    hops.names().join(", ")
                ));
            };
            (base, Some(hop))
        }
        None => (name, None),
    };
    if hop.is_none() {
        if let Some(class) = Class::parse(base) {
            return Ok(Metric::Class(class));
        }
    }
    if let Some(kind) = FINDINGS.iter().find(|k| k.name() == base) {
        return Ok(Metric::Finding { kind: *kind, hop });
    }
    if let (Some(_), Some(_)) = (hop, Class::parse(base)) {
        let at = &name[base.len()..];
        return Err(format!(
            "'{base}' is a class: each operation has one, not one per hop; drop '{at}', or use a finding at that hop such as 'retries{at}'"
        ));
    }
    let metric = match base {
        "amplification" => Metric::Amplification { hop },
        "retry-ratio" => Metric::RetryRatio { hop },
        "bursts" => Metric::Bursts,
        "unfinished-attempts" => Metric::UnfinishedAttempts,
        "orphan-attempts" => Metric::OrphanAttempts,
        "duplicate-effects" => Metric::DuplicateEffects,
        _ => {
            return Err(format!(
                "unknown metric '{base}'; use a class ({}), a finding ({}), amplification, retry-ratio, bursts, unfinished-attempts, orphan-attempts or duplicate-effects",
                Class::ALL.map(Class::name).join(", "),
                FINDINGS.map(FindingKind::name).join(", "),
            ))
        }
    };
    if hop.is_some()
        && !matches!(
            metric,
            Metric::Amplification { .. } | Metric::RetryRatio { .. }
        )
    {
        return Err(format!("'{base}' is not measured per hop; drop '@…'"));
    }
    Ok(metric)
}

/// The result of one condition.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ThresholdResult {
    /// The condition as written.
    pub condition: String,
    pub origin: Origin,
    /// The measured value, in the unit of the limit (a fraction for shares).
    pub measured: f64,
    pub limit: f64,
    /// `operations`, `share`, `ratio` or `count`.
    pub unit: &'static str,
    /// The hop a per-hop metric was measured at (its worst hop without `@HOP`).
    pub hop: Option<String>,
    pub breached: bool,
    /// Operations behind the breach (0 when not breached).
    pub operations: u64,
    /// The first of them, sorted.
    pub operation_ids: Vec<String>,
}

impl ThresholdResult {
    /// `measured 22, limit 0`; `measured 6.00%, limit 1.00%`; `measured 1.968 at dependency,
    /// limit 1.500`
    pub fn describe(&self) -> String {
        let value = |v: f64| match self.unit {
            "share" => format!("{:.2}%", v * 100.0),
            "operations" | "count" => format!("{v}"),
            _ => format!("{v:.3}"),
        };
        let at = self
            .hop
            .as_deref()
            .map_or(String::new(), |h| format!(" at {h}"));
        format!(
            "measured {}{at}, limit {}",
            value(self.measured),
            value(self.limit)
        )
    }

    /// `run-3/op-1, run-3/op-2 and 17 more`
    pub fn operations_text(&self) -> String {
        let listed = self.operation_ids.join(", ");
        let rest = self
            .operations
            .saturating_sub(self.operation_ids.len() as u64);
        if rest > 0 {
            format!("{listed} and {rest} more")
        } else {
            listed
        }
    }
}

/// The gate's verdict over all conditions.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct GateReport {
    /// No condition breached.
    pub passed: bool,
    /// Breaches are reported but do not fail the run (`--report-only`).
    pub report_only: bool,
    pub thresholds: Vec<ThresholdResult>,
}

/// Evaluates every condition against the summary.
pub fn evaluate(
    conditions: &[Condition],
    summary: &Summary,
    analysis: &Analysis,
    hops: &HopOrder,
    report_only: bool,
) -> GateReport {
    let thresholds: Vec<ThresholdResult> = conditions
        .iter()
        .map(|c| evaluate_one(c, summary, analysis, hops))
        .collect();
    GateReport {
        passed: thresholds.iter().all(|t| !t.breached),
        report_only,
        thresholds,
    }
}

fn evaluate_one(
    c: &Condition,
    summary: &Summary,
    analysis: &Analysis,
    hops: &HopOrder,
) -> ThresholdResult {
    let ops_total = summary.operations;
    let mut hop_name = None;
    let (measured, unit) = match c.metric {
        Metric::Class(class) => {
            let n = summary
                .classes
                .iter()
                .find(|s| s.class == class)
                .map_or(0, |s| s.operations);
            share_or_count(n, ops_total, c.share)
        }
        Metric::Finding { .. } => {
            let n = analysis
                .operations
                .iter()
                .filter(|o| has_finding(o, c.metric))
                .count() as u64;
            share_or_count(n, ops_total, c.share)
        }
        Metric::Amplification { hop } | Metric::RetryRatio { hop } => {
            let value_at = |h: usize| {
                let s = &summary.hops[h];
                match c.metric {
                    Metric::Amplification { .. } => Some(s.amplification),
                    _ => s.retry_ratio,
                }
            };
            let candidates: Vec<(usize, f64)> = match hop {
                Some(h) => value_at(h as usize)
                    .map(|v| (h as usize, v))
                    .into_iter()
                    .collect(),
                None => (0..summary.hops.len())
                    .filter(|&h| summary.hops[h].attempts > 0)
                    .filter_map(|h| value_at(h).map(|v| (h, v)))
                    .collect(),
            };
            let worst = if c.cmp.fails_high() {
                candidates.into_iter().max_by(|a, b| a.1.total_cmp(&b.1))
            } else {
                candidates.into_iter().min_by(|a, b| a.1.total_cmp(&b.1))
            };
            let (h, v) = worst.unwrap_or((hop.map_or(0, usize::from), 0.0));
            hop_name = Some(hops.name(h as u16).to_string());
            (v, "ratio")
        }
        Metric::Bursts => (summary.bursts.count as f64, "count"),
        Metric::UnfinishedAttempts => (summary.unfinished_attempts as f64, "count"),
        Metric::OrphanAttempts => (summary.orphan_attempts as f64, "count"),
        Metric::DuplicateEffects => (summary.duplicate_effects as f64, "count"),
    };
    let breached = c.cmp.holds(measured, c.limit);
    let mut culprits: Vec<&OperationResult> = if breached {
        let hop_index = hop_name.as_deref().and_then(|h| hops.index_of(h));
        analysis
            .operations
            .iter()
            .filter(|o| breaches(o, c, hop_index))
            .collect()
    } else {
        Vec::new()
    };
    culprits.sort_by(|a, b| {
        b.total_attempts()
            .cmp(&a.total_attempts())
            .then(a.key.cmp(&b.key))
    });
    ThresholdResult {
        condition: c.text.clone(),
        origin: c.origin,
        measured,
        limit: c.limit,
        unit,
        hop: hop_name,
        breached,
        operations: culprits.len() as u64,
        operation_ids: culprits
            .iter()
            .take(OPERATIONS_LISTED)
            .map(|o| display_operation_key(&o.key))
            .collect(),
    }
}

fn share_or_count(n: u64, total: u64, share: bool) -> (f64, &'static str) {
    if share {
        (
            if total == 0 {
                0.0
            } else {
                n as f64 / total as f64
            },
            "share",
        )
    } else {
        (n as f64, "operations")
    }
}

fn has_finding(o: &OperationResult, metric: Metric) -> bool {
    let Metric::Finding { kind, hop } = metric else {
        return false;
    };
    o.findings
        .iter()
        .any(|f| f.kind == kind && hop.is_none_or(|h| h == f.hop))
}

fn has_kind(o: &OperationResult, kind: FindingKind, hop: Option<u16>) -> bool {
    has_finding(o, Metric::Finding { kind, hop })
}

/// Whether an operation is one that makes the condition breach.
fn breaches(o: &OperationResult, c: &Condition, hop: Option<u16>) -> bool {
    match c.metric {
        // A floor on a class (`healthy < 95%`) is breached by the operations outside it.
        Metric::Class(class) => (o.class == class) == c.cmp.fails_high(),
        Metric::Finding { .. } => has_finding(o, c.metric) == c.cmp.fails_high(),
        // The other metrics are sums over operations: the operations that add to them are
        // behind a ceiling's breach; a floor (`<`, `<=`) is breached by what is missing, and
        // no operation is to blame.
        _ if !c.cmp.fails_high() => false,
        Metric::Amplification { .. } => hop.is_some_and(|h| o.funnel[h as usize] > 1),
        Metric::RetryRatio { .. } => {
            has_kind(o, FindingKind::Retries, hop) || has_kind(o, FindingKind::Redelivery, hop)
        }
        Metric::Bursts => has_kind(o, FindingKind::Burst, None),
        Metric::UnfinishedAttempts => has_kind(o, FindingKind::Unfinished, None),
        Metric::OrphanAttempts => has_kind(o, FindingKind::Orphan, None),
        Metric::DuplicateEffects => has_kind(o, FindingKind::DuplicateEffect, None),
    }
}

/// Merges policy conditions with flag conditions: a flag replaces the policy's conditions
/// on the same metric.
pub fn merge(policy: Vec<Condition>, flags: Vec<Condition>) -> Vec<Condition> {
    let overridden: Vec<String> = flags.iter().map(Condition::metric_key).collect();
    policy
        .into_iter()
        .filter(|c| !overridden.contains(&c.metric_key()))
        .chain(flags)
        .collect()
}

/// The JUnit XML report: one test case per threshold, failures carrying the message.
pub fn junit_xml(report: &GateReport) -> String {
    let failures = report.thresholds.iter().filter(|t| t.breached).count();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    out += &format!(
        "<testsuites name=\"attempt-funnel\" tests=\"{}\" failures=\"{failures}\" errors=\"0\">\n",
        report.thresholds.len()
    );
    out += &format!(
        "  <testsuite name=\"attempt-funnel gate\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" skipped=\"0\">\n",
        report.thresholds.len()
    );
    for t in &report.thresholds {
        out += &format!(
            "    <testcase classname=\"attempt-funnel.gate\" name=\"{}\"",
            xml_escape(&t.condition)
        );
        if t.breached {
            let message = format!("{}: {}", t.condition, t.describe());
            let mut text = message.clone();
            if t.operations > 0 {
                text += &format!("\noperations: {}", t.operations_text());
            }
            out += &format!(
                ">\n      <failure type=\"threshold\" message=\"{}\">{}</failure>\n    </testcase>\n",
                xml_escape(&message),
                xml_escape(&text),
            );
        } else {
            out += &format!(
                ">\n      <system-out>{}</system-out>\n    </testcase>\n",
                xml_escape(&t.describe())
            );
        }
    }
    out += "  </testsuite>\n</testsuites>\n";
    out
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

/// The lines printed to stderr: the verdict, then one line per threshold.
pub fn log_lines(report: &GateReport) -> Vec<String> {
    let breached = report.thresholds.iter().filter(|t| t.breached).count();
    let mut lines = vec![match (report.passed, report.report_only) {
        (true, _) => format!("attempt-funnel: gate passed: {} thresholds within limits", report.thresholds.len()),
        (false, false) => format!("attempt-funnel: gate FAILED: {breached} of {} thresholds breached", report.thresholds.len()),
        (false, true) => format!(
            "attempt-funnel: gate would fail: {breached} of {} thresholds breached (--report-only: not failing)",
            report.thresholds.len()
        ),
    }];
    for t in &report.thresholds {
        if t.breached && t.operations > 0 {
            lines.push(format!(
                "  BREACHED {}: {}; operations: {}",
                t.condition,
                t.describe(),
                t.operations_text()
            ));
        } else if t.breached {
            lines.push(format!("  BREACHED {}: {}", t.condition, t.describe()));
        } else {
            lines.push(format!("  ok       {}: {}", t.condition, t.describe()));
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Condition> {
        parse_condition(text, &HopOrder::default(), Origin::Flag)
    }

    #[test]
    fn parses_the_documented_grammar() {
        let cases: [(&str, Metric, Cmp, f64, bool); 8] = [
            (
                "nested-retry > 0",
                Metric::Class(Class::NestedRetry),
                Cmp::Gt,
                0.0,
                false,
            ),
            (
                "overlap > 1%",
                Metric::Class(Class::Overlap),
                Cmp::Gt,
                0.01,
                true,
            ),
            (
                "healthy<95%",
                Metric::Class(Class::Healthy),
                Cmp::Lt,
                0.95,
                true,
            ),
            (
                "retries@gateway >= 10",
                Metric::Finding {
                    kind: FindingKind::Retries,
                    hop: Some(1),
                },
                Cmp::Ge,
                10.0,
                false,
            ),
            (
                "retry-without-delay != 0",
                Metric::Finding {
                    kind: FindingKind::RetryWithoutDelay,
                    hop: None,
                },
                Cmp::Ne,
                0.0,
                false,
            ),
            (
                "amplification@dependency > 2.5",
                Metric::Amplification { hop: Some(3) },
                Cmp::Gt,
                2.5,
                false,
            ),
            (
                "retry-ratio <= 0.2",
                Metric::RetryRatio { hop: None },
                Cmp::Le,
                0.2,
                false,
            ),
            ("bursts > 0", Metric::Bursts, Cmp::Gt, 0.0, false),
        ];
        for (text, metric, cmp, limit, share) in cases {
            let c = parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(
                (c.metric, c.cmp, c.limit, c.share),
                (metric, cmp, limit, share),
                "{text}"
            );
        }
    }

    #[test]
    fn errors_name_the_token_and_show_an_example() {
        let cases = [
            ("overlap >> 1%", "unknown operator '>>'"),
            ("overlap > lots", "limit 'lots'"),
            ("overlaps > 1", "unknown metric 'overlaps'"),
            ("retries@cache > 1", "unknown hop 'cache'"),
            ("amplification > 10%", "plain number"),
            ("overlap", "no comparison"),
            ("nested-retry@gateway > 0", "'nested-retry' is a class"),
            ("healthy < 150%", "more than 100%"),
            ("bursts > -1", "negative"),
        ];
        for (text, expected) in cases {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(expected), "{text}: {err}");
            assert!(err.contains("--fail-on '"), "{text}: no example in {err}");
        }
    }

    #[test]
    fn a_breach_with_no_operation_to_blame_lists_none() {
        let report = GateReport {
            passed: false,
            report_only: false,
            thresholds: vec![ThresholdResult {
                condition: "amplification@caller < 1.5".to_string(),
                origin: Origin::Flag,
                measured: 1.2,
                limit: 1.5,
                unit: "ratio",
                hop: Some("caller".to_string()),
                breached: true,
                operations: 0,
                operation_ids: vec![],
            }],
        };
        assert_eq!(
            log_lines(&report)[1],
            "  BREACHED amplification@caller < 1.5: measured 1.200 at caller, limit 1.500"
        );
        assert!(!junit_xml(&report).contains("operations:"));
    }

    #[test]
    fn flags_replace_policy_conditions_on_the_same_metric() {
        let p = |t: &str, o| parse_condition(t, &HopOrder::default(), o).unwrap();
        let merged = merge(
            vec![
                p("overlap > 1%", Origin::Policy),
                p("bursts > 0", Origin::Policy),
            ],
            vec![p("overlap > 5%", Origin::Flag)],
        );
        let texts: Vec<_> = merged.iter().map(|c| c.text.as_str()).collect();
        assert_eq!(texts, vec!["bursts > 0", "overlap > 5%"]);
    }
}

//! The failure conditions of the gate: the `--fail-on` grammar (and the policy file's
//! `fail_on`), parsed into [`Condition`]s. It depends only on the names of classes and
//! findings and on the hop order, so the configuration can hold conditions without
//! depending on the analysis.
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

use crate::classify::{Class, FindingKind};
use crate::rules::HopOrder;

const EXAMPLE: &str = "--fail-on 'nested-retry > 0' or --fail-on 'overlap > 1%'";

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
    if let Some(kind) = FindingKind::ALL.iter().find(|k| k.name() == base) {
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
                FindingKind::ALL.map(FindingKind::name).join(", "),
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

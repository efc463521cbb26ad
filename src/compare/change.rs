//! Change conditions of the gate on a comparison: `--fail-on 'METRIC increased OP LIMIT'`
//! (or `decreased`) fails when a metric moved from the first run to the second by more
//! than the limit. A limit with `%` is relative to the first run's value
//! (`amplification@dependency increased > 10%`); a plain number is the change itself in the
//! metric's unit (`nested-retry increased > 0`: more nested-retry operations). METRIC is
//! any metric of a plain condition (see `gate.rs`); without `@HOP` a per-hop metric is
//! judged at the hop where it moved most. The user documentation is docs/ci.md.

use anyhow::{bail, Context, Result};

use crate::analysis::tally::{Collected, RowSink};
use crate::gate::condition::{parse_condition, Metric, Origin};
use crate::gate::{ThresholdResult, Unit};
use crate::rules::HopOrder;
use crate::summary::Summary;

/// Which way a metric must move to count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Increased,
    Decreased,
}

impl Direction {
    fn word(self) -> &'static str {
        match self {
            Direction::Increased => "increased",
            Direction::Decreased => "decreased",
        }
    }
}

/// One parsed change condition.
#[derive(Debug, Clone, PartialEq)]
pub struct ChangeCondition {
    pub text: String,
    pub metric: Metric,
    pub direction: Direction,
    pub cmp: crate::gate::condition::Cmp,
    /// A fraction of the first run's value when `relative`, else the change itself.
    pub limit: f64,
    pub relative: bool,
    pub origin: Origin,
}

/// Whether a condition is a change condition (has `increased` or `decreased`).
pub fn is_change(text: &str) -> bool {
    split(text).is_some()
}

fn split(text: &str) -> Option<(&str, Direction, &str)> {
    [Direction::Increased, Direction::Decreased]
        .into_iter()
        .find_map(|d| {
            let at = text.find(&format!(" {} ", d.word()))?;
            Some((&text[..at], d, &text[at + d.word().len() + 2..]))
        })
}

const EXAMPLE: &str =
    "--fail-on 'amplification@dependency increased > 10%' or --fail-on 'nested-retry increased > 0'";

/// Parses `METRIC increased|decreased OP LIMIT[%]`; the metric, operator and limit follow
/// the plain conditions' grammar and errors.
pub fn parse(text: &str, hops: &HopOrder, origin: Origin) -> Result<ChangeCondition> {
    let trimmed = text.trim();
    let Some((metric, direction, rest)) = split(trimmed) else {
        bail!("condition '{text}' is not a change condition: write METRIC increased OP LIMIT, e.g. {EXAMPLE}");
    };
    let rest = rest.trim();
    let (rest, relative) = match rest.strip_suffix('%') {
        Some(r) => (r, true),
        None => (rest, false),
    };
    // The plain grammar checks the metric, the operator and the number.
    let plain = parse_condition(&format!("{metric} {rest}"), hops, origin)
        .map_err(|e| anyhow::anyhow!("condition '{text}': {e}"))
        .with_context(|| {
            format!("a change condition is METRIC increased OP LIMIT, e.g. {EXAMPLE}")
        })?;
    Ok(ChangeCondition {
        text: trimmed.to_string(),
        metric: plain.metric,
        direction,
        cmp: plain.cmp,
        limit: if relative {
            plain.limit / 100.0
        } else {
            plain.limit
        },
        relative,
        origin,
    })
}

/// A metric's value on one side, per hop for per-hop metrics (`None` for the others).
fn values(
    metric: Metric,
    summary: &Summary,
    analysis: Option<&Collected>,
    hops: &HopOrder,
    text: &str,
) -> Result<Vec<(Option<u16>, f64)>> {
    let hop_value = |h: u16, f: &dyn Fn(&crate::summary::HopSummary) -> f64| {
        summary
            .hops
            .iter()
            .find(|x| x.hop == hops.name(h))
            .map_or(0.0, f)
    };
    let per_hop = |hop: Option<u16>, f: &dyn Fn(&crate::summary::HopSummary) -> f64| {
        let all: Vec<u16> = match hop {
            Some(h) => vec![h],
            None => (0..hops.len() as u16).collect(),
        };
        all.into_iter()
            .map(|h| (Some(h), hop_value(h, f)))
            .collect::<Vec<_>>()
    };
    Ok(match metric {
        Metric::Class(class) => vec![(
            None,
            summary
                .classes
                .iter()
                .find(|c| c.class == class)
                .map_or(0, |c| c.operations) as f64,
        )],
        Metric::Finding { kind, hop } => match (hop, analysis) {
            (Some(h), _) => vec![(
                None,
                summary
                    .findings
                    .iter()
                    .find(|f| f.finding.kind == kind && f.finding.hop == hops.name(h))
                    .map_or(0, |f| f.operations) as f64,
            )],
            (None, Some(a)) => vec![(None, a.tally.with_finding(kind, None) as f64)],
            (None, None) => bail!(
                "condition '{text}': a saved summary counts findings per hop only; write {}@HOP, or give attempt logs",
                kind.name()
            ),
        },
        Metric::Amplification { hop } => per_hop(hop, &|s| s.amplification),
        Metric::RetryRatio { hop } => per_hop(hop, &|s| s.retry_ratio.unwrap_or(0.0)),
        Metric::Bursts => vec![(None, summary.bursts.count as f64)],
        Metric::UnfinishedAttempts => vec![(None, summary.unfinished_attempts as f64)],
        Metric::OrphanAttempts => vec![(None, summary.orphan_attempts as f64)],
        Metric::DuplicateEffects => vec![(None, summary.duplicate_effects as f64)],
    })
}

/// Evaluates a change condition from the first side to the second.
pub fn evaluate(
    c: &ChangeCondition,
    before: (&Summary, Option<&Collected>),
    after: (&Summary, Option<&Collected>),
    hops: &HopOrder,
) -> Result<ThresholdResult> {
    let b = values(c.metric, before.0, before.1, hops, &c.text)?;
    let a = values(c.metric, after.0, after.1, hops, &c.text)?;
    let moves: Vec<(Option<u16>, f64)> = b
        .iter()
        .zip(&a)
        .map(|(&(hop, bv), &(_, av))| {
            let change = match c.direction {
                Direction::Increased => av - bv,
                Direction::Decreased => bv - av,
            };
            let measured = if !c.relative {
                change
            } else if bv != 0.0 {
                change / bv
            } else if change == 0.0 {
                0.0
            } else {
                // From nothing to something is an unbounded relative change.
                change.signum() * f64::INFINITY
            };
            (hop, measured)
        })
        .collect();
    // The hop where the metric moved most in the condition's direction.
    let (hop, measured) = moves
        .into_iter()
        .max_by(|x, y| x.1.total_cmp(&y.1))
        .unwrap_or((None, 0.0));
    Ok(ThresholdResult {
        condition: c.text.clone(),
        origin: c.origin,
        measured,
        limit: c.limit,
        unit: if c.relative {
            Unit::Share
        } else {
            match c.metric {
                Metric::Class(_) | Metric::Finding { .. } => Unit::Operations,
                Metric::Amplification { .. } | Metric::RetryRatio { .. } => Unit::Ratio,
                _ => Unit::Count,
            }
        },
        hop: hop.map(|h| hops.name(h).to_string()),
        breached: c.cmp.holds(measured, c.limit),
        operations: 0,
        operation_ids: Vec::new(),
    })
}

/// The gate of a comparison: plain conditions judge the second run (which needs its
/// analysis, not a saved summary), change conditions compare the two. `None` without
/// conditions.
pub fn gate(
    plain: &[crate::gate::condition::Condition],
    changes: &[ChangeCondition],
    before: (&Summary, Option<&Collected>),
    after: (&Summary, Option<&Collected>),
    hops: &HopOrder,
    report_only: bool,
) -> Result<Option<crate::gate::GateReport>> {
    if plain.is_empty() && changes.is_empty() {
        return Ok(None);
    }
    let mut thresholds = Vec::new();
    if !plain.is_empty() {
        let Some(analysis) = after.1 else {
            bail!(
                "--fail-on '{}' judges the second run, which is a saved summary here: give its attempt logs, or write a change condition such as '{} increased > 0'",
                plain[0].text,
                plain[0].metric_key()
            );
        };
        let mut blame = crate::gate::Blame::new(plain, hops);
        for o in &analysis.operations {
            blame.row(o)?;
        }
        thresholds =
            crate::gate::evaluate(plain, after.0, &analysis.tally, &blame, hops, report_only)
                .thresholds;
    }
    for c in changes {
        thresholds.push(evaluate(c, before, after, hops)?);
    }
    Ok(Some(crate::gate::GateReport {
        passed: thresholds.iter().all(|t| !t.breached),
        report_only,
        inconclusive: None,
        thresholds,
        incomplete: None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::condition::Cmp;

    #[test]
    fn parses_change_conditions_with_the_plain_grammar() {
        let hops = HopOrder::default();
        let c = parse(
            "amplification@dependency increased > 10%",
            &hops,
            Origin::Flag,
        )
        .unwrap();
        assert_eq!(c.metric, Metric::Amplification { hop: Some(3) });
        assert_eq!(
            (c.direction, c.cmp, c.limit, c.relative),
            (Direction::Increased, Cmp::Gt, 0.1, true)
        );
        let c = parse("nested-retry increased > 0", &hops, Origin::Flag).unwrap();
        assert_eq!((c.limit, c.relative), (0.0, false));
        let c = parse("healthy decreased >= 5", &hops, Origin::Flag).unwrap();
        assert_eq!(c.direction, Direction::Decreased);
        assert!(is_change("bursts increased > 0"));
        assert!(!is_change("bursts > 0"));
        let err = format!(
            "{:#}",
            parse("amplifcation increased > 1", &hops, Origin::Flag).unwrap_err()
        );
        assert!(err.contains("unknown metric 'amplifcation'"), "{err}");
        assert!(err.contains("increased"), "{err}");
    }
}

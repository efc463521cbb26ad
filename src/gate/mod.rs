//! Gate: failure conditions on the summary (docs/ci.md). Evaluates each [`Condition`] (the
//! grammar is [`condition`]'s) against the computed summary and names the operations that
//! breach it, so a CI log alone is enough to start the investigation; writes the verdict
//! as log lines and JUnit XML. The verdict is returned beside the summary, never inside it.

pub mod condition;

use serde::Serialize;

use std::cmp::Reverse;

use crate::analysis::tally::{RowSink, Tally};
use crate::analysis::OperationResult;
use crate::classify::FindingKind;
use crate::model::named_enum;
use crate::model::OperationKey;
use crate::paint::Tone;
use crate::rules::HopOrder;
use crate::summary::{display_operation_key, Incomplete, Summary};
use crate::words::noun;
use condition::{Condition, Metric, Origin};

/// Operation IDs listed per breached threshold before the rest are only counted.
pub const OPERATIONS_LISTED: usize = 5;

named_enum! {
    /// What a measured value and its limit count (`unit` in the JSON verdict).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Unit {
        /// Operations (of a class, or with a finding).
        Operations => "operations",
        /// A share of all operations, as a fraction (written as a percentage).
        Share => "share",
        /// A ratio such as amplification.
        Ratio => "ratio",
        /// A count of bursts, attempts or effects.
        Count => "count",
    }
}

impl Unit {
    /// A value in this unit, for people: `6.00%`, `22`, `1.968`.
    fn format(self, value: f64) -> String {
        match self {
            Unit::Share => format!("{:.2}%", value * 100.0),
            Unit::Operations | Unit::Count => format!("{value}"),
            Unit::Ratio => format!("{value:.3}"),
        }
    }
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
    pub unit: Unit,
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
        let at = self
            .hop
            .as_deref()
            .map_or(String::new(), |h| format!(" at {h}"));
        format!(
            "measured {}{at}, limit {}",
            self.unit.format(self.measured),
            self.unit.format(self.limit)
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
    /// No condition breached, and the run's input was whole enough to say so (false when
    /// [`GateReport::inconclusive`] is set: a JSON reader checking `passed` alone must not
    /// read green on a run that exits 2).
    pub passed: bool,
    /// Breaches are reported but do not fail the run (`--report-only`).
    pub report_only: bool,
    /// Why the thresholds, though measured, decide nothing: the run exits 2 on its input
    /// (bad lines, no attempts read). Absent on a conclusive verdict.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inconclusive: Option<String>,
    pub thresholds: Vec<ThresholdResult>,
    /// The summary's: the verdict covers only the partitions merged. Absent when whole.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<Incomplete>,
}

/// The gate's verdict in one word, as every format and stderr print it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Passed,
    Failed,
    /// Breached under `--report-only`: reported, not failing.
    WouldFail,
    /// The run exits 2 on its input: the thresholds decide nothing.
    Inconclusive,
}

impl Verdict {
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Passed => "passed",
            Verdict::Failed => "FAILED",
            Verdict::WouldFail => "would fail (report only)",
            Verdict::Inconclusive => "not conclusive",
        }
    }

    pub fn tone(self) -> Tone {
        match self {
            Verdict::Passed => Tone::Good,
            Verdict::Failed => Tone::Bad,
            Verdict::WouldFail | Verdict::Inconclusive => Tone::Warning,
        }
    }
}

impl GateReport {
    /// The report of a gate with no conditions: what `--junit` writes without any.
    pub fn without_conditions(report_only: bool) -> GateReport {
        GateReport {
            passed: true,
            report_only,
            inconclusive: None,
            thresholds: Vec::new(),
            incomplete: None,
        }
    }

    pub fn verdict(&self) -> Verdict {
        match (&self.inconclusive, self.passed, self.report_only) {
            (Some(_), _, _) => Verdict::Inconclusive,
            (None, true, _) => Verdict::Passed,
            (None, false, false) => Verdict::Failed,
            (None, false, true) => Verdict::WouldFail,
        }
    }

    /// The run exits 2 on its input (`why`): the verdict says so in every format.
    pub fn mark_inconclusive(&mut self, why: &RunError) {
        self.passed = false;
        self.inconclusive = Some(why.message.clone());
    }

    /// Whether the verdict alone fails the run (exit 1).
    pub fn fails_run(&self) -> bool {
        self.verdict() == Verdict::Failed
    }
}

/// Evaluates every condition against the summary; `blame`: the operations behind each
/// condition, tallied as the rows went by.
pub fn evaluate(
    conditions: &[Condition],
    summary: &Summary,
    tally: &Tally,
    blame: &Blame,
    hops: &HopOrder,
    report_only: bool,
) -> GateReport {
    let thresholds: Vec<ThresholdResult> = conditions
        .iter()
        .enumerate()
        .map(|(i, c)| evaluate_one(c, summary, tally, blame.of(i), hops))
        .collect();
    GateReport {
        passed: thresholds.iter().all(|t| !t.breached),
        report_only,
        inconclusive: None,
        thresholds,
        incomplete: summary.incomplete.clone(),
    }
}

fn evaluate_one(
    c: &Condition,
    summary: &Summary,
    tally: &Tally,
    blamed: &[Culprits],
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
        Metric::Finding { kind, hop } => {
            share_or_count(tally.with_finding(kind, hop), ops_total, c.share)
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
            (v, Unit::Ratio)
        }
        Metric::Bursts => (summary.bursts.count as f64, Unit::Count),
        Metric::UnfinishedAttempts => (summary.unfinished_attempts as f64, Unit::Count),
        Metric::OrphanAttempts => (summary.orphan_attempts as f64, Unit::Count),
        Metric::DuplicateEffects => (summary.duplicate_effects as f64, Unit::Count),
    };
    let breached = c.cmp.holds(measured, c.limit);
    let culprits = if breached {
        // Per-hop metrics were tallied at every hop: the one measured names them.
        let slot = hop_name
            .as_deref()
            .and_then(|h| hops.index_of(h))
            .map_or(0, usize::from);
        blamed.get(slot).or(blamed.first())
    } else {
        None
    };
    ThresholdResult {
        condition: c.text.clone(),
        origin: c.origin,
        measured,
        limit: c.limit,
        unit,
        hop: hop_name,
        breached,
        operations: culprits.map_or(0, |b| b.count),
        operation_ids: culprits.map_or(Vec::new(), |b| {
            b.first
                .iter()
                .map(|(_, key)| display_operation_key(key))
                .collect()
        }),
    }
}

/// The operations that would make one condition breach (at one hop, for a per-hop
/// metric): how many, and the first [`OPERATIONS_LISTED`] by attempts, then key.
#[derive(Debug, Clone, Default)]
struct Culprits {
    count: u64,
    /// (attempts, key), most attempts first.
    first: Vec<(u64, OperationKey)>,
}

impl Culprits {
    fn add(&mut self, o: &OperationResult) {
        self.count += 1;
        let attempts = o.total_attempts();
        let at = self
            .first
            .partition_point(|(n, key)| (Reverse(*n), key) <= (Reverse(attempts), &o.key));
        if at < OPERATIONS_LISTED {
            self.first.insert(at, (attempts, o.key.clone()));
            self.first.truncate(OPERATIONS_LISTED);
        }
    }
}

/// The operations behind every condition, tallied as the rows stream by (before the
/// summary says which conditions breach): per condition, one [`Culprits`] per hop for the
/// per-hop metrics (the hop measured is known only at the end), one for the others.
pub struct Blame {
    conditions: Vec<Condition>,
    slots: Vec<Vec<Culprits>>,
}

impl Blame {
    pub fn new(conditions: &[Condition], hops: &HopOrder) -> Blame {
        let slots = conditions
            .iter()
            .map(|c| match c.metric {
                Metric::Amplification { .. } | Metric::RetryRatio { .. } => {
                    vec![Culprits::default(); hops.len()]
                }
                _ => vec![Culprits::default()],
            })
            .collect();
        Blame {
            conditions: conditions.to_vec(),
            slots,
        }
    }

    fn of(&self, condition: usize) -> &[Culprits] {
        &self.slots[condition]
    }
}

impl RowSink for Blame {
    fn row(&mut self, o: &OperationResult) -> anyhow::Result<()> {
        for (c, slots) in self.conditions.iter().zip(&mut self.slots) {
            if slots.len() == 1 {
                if breaches(o, c, None) {
                    slots[0].add(o);
                }
            } else {
                for (h, slot) in slots.iter_mut().enumerate() {
                    if breaches(o, c, Some(h as u16)) {
                        slot.add(o);
                    }
                }
            }
        }
        Ok(())
    }
}

fn share_or_count(n: u64, total: u64, share: bool) -> (f64, Unit) {
    if share {
        (
            if total == 0 {
                0.0
            } else {
                n as f64 / total as f64
            },
            Unit::Share,
        )
    } else {
        (n as f64, Unit::Operations)
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

/// Why the gate's verdict cannot stand on its own: the run failed on its input (bad lines
/// without `--skip-invalid`) or stopped on an error. JUnit shows it as an `<error>`, so a
/// CI system does not read the thresholds alone as "all green".
#[derive(Debug, Clone, PartialEq)]
pub struct RunError {
    /// One line: what failed.
    pub message: String,
    /// The details (the first bad lines), as the text of the error element.
    pub detail: String,
}

/// The JUnit XML report: one test case per threshold, failures carrying the message, and
/// one errored test case `input` when the run failed on its input.
pub fn junit_xml(report: &GateReport, run_error: Option<&RunError>) -> String {
    let failures = report.thresholds.iter().filter(|t| t.breached).count();
    let errors = usize::from(run_error.is_some());
    let tests = report.thresholds.len() + errors;
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    out += &format!(
        "<testsuites name=\"attempt-funnel\" tests=\"{tests}\" failures=\"{failures}\" errors=\"{errors}\">\n",
    );
    out += &format!(
        "  <testsuite name=\"attempt-funnel gate\" tests=\"{tests}\" failures=\"{failures}\" errors=\"{errors}\" skipped=\"0\">\n",
    );
    if let Some(incomplete) = &report.incomplete {
        out += &format!(
            "    <properties>\n      <property name=\"incomplete\" value=\"over only {} (--allow-missing)\"/>\n    </properties>\n",
            xml_escape(&incomplete.describe())
        );
    }
    if let Some(e) = run_error {
        out += &format!(
            "    <testcase classname=\"attempt-funnel.input\" name=\"input\">\n      <error type=\"input\" message=\"{}\">{}</error>\n    </testcase>\n",
            xml_escape(&e.message),
            xml_escape(&e.detail),
        );
    }
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
    crate::escape::xml(s)
}

/// The lines printed to stderr: the verdict, then one line per threshold. With `color`, the
/// verdict and each result word are coloured (green passed, red failed, yellow would fail).
pub fn log_lines(report: &GateReport, color: bool) -> Vec<String> {
    let ok = Tone::Good.paint_if(color, "ok");
    let breached_word = Tone::Bad.paint_if(color, "BREACHED");
    let breached = report.thresholds.iter().filter(|t| t.breached).count();
    let total = report.thresholds.len();
    let thresholds = noun(total as u64, "threshold", "thresholds");
    let verdict = report.verdict();
    let word = verdict.tone().paint_if(color, verdict.word());
    let mut lines = vec![match verdict {
        Verdict::Passed if total == 1 => format!("attempt-funnel: gate {word}: 1 threshold within its limit"),
        Verdict::Passed => format!("attempt-funnel: gate {word}: {total} thresholds within limits"),
        Verdict::Failed => format!("attempt-funnel: gate {word}: {breached} of {total} {thresholds} breached"),
        Verdict::WouldFail => format!(
            "attempt-funnel: gate {}: {breached} of {total} {thresholds} breached (--report-only: not failing)",
            Tone::Warning.paint_if(color, "would fail")
        ),
        Verdict::Inconclusive => format!(
            "attempt-funnel: gate {word}: {}; {breached} of {total} {thresholds} breached on what was read",
            report.inconclusive.as_deref().unwrap_or_default()
        ),
    }];
    if let Some(incomplete) = &report.incomplete {
        lines[0].push_str(&format!(
            " — over only {} (--allow-missing)",
            incomplete.describe()
        ));
    }
    // Operation IDs come from the input, and a condition from the command line: escaped,
    // they cannot act on the terminal or start a line of their own. Only the verdict words
    // are painted.
    let esc = |text: &str| crate::escape::terminal(text).into_owned();
    for t in &report.thresholds {
        let condition = esc(&t.condition);
        if t.breached && t.operations > 0 {
            lines.push(format!(
                "  {breached_word} {condition}: {}; operations: {}",
                t.describe(),
                esc(&t.operations_text())
            ));
        } else if t.breached {
            lines.push(format!("  {breached_word} {condition}: {}", t.describe()));
        } else {
            lines.push(format!("  {ok}       {condition}: {}", t.describe()));
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::condition::Origin;

    #[test]
    fn a_breach_with_no_operation_to_blame_lists_none() {
        let report = GateReport {
            passed: false,
            report_only: false,
            inconclusive: None,
            thresholds: vec![ThresholdResult {
                condition: "amplification@caller < 1.5".to_string(),
                origin: Origin::Flag,
                measured: 1.2,
                limit: 1.5,
                unit: Unit::Ratio,
                hop: Some("caller".to_string()),
                breached: true,
                operations: 0,
                operation_ids: vec![],
            }],
            incomplete: None,
        };
        assert_eq!(
            log_lines(&report, false)[1],
            "  BREACHED amplification@caller < 1.5: measured 1.200 at caller, limit 1.500"
        );
        assert!(!junit_xml(&report, None).contains("operations:"));
    }
}

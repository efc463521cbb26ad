//! The shared layout of the human-readable reports: the summary as titled sections of
//! cells. The terminal table and Markdown differ only in how they draw these.

use crate::gate::GateReport;
use crate::summary::{OperationRecord, Summary};

/// One titled block of a report: a table, or lines of text when `headers` is empty.
#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    pub title: String,
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
    /// Right-aligned columns (numbers).
    pub numeric: Vec<bool>,
    /// Columns of identifiers from the input or the rules (operation IDs, `kind@hop`),
    /// comma-separated when several: Markdown writes them as code so that no ID is read as
    /// markup or a link.
    pub code: Vec<bool>,
    pub notes: Vec<String>,
}

impl Section {
    pub(super) fn table(
        title: &str,
        headers: &[&str],
        numeric: &[bool],
        rows: Vec<Vec<String>>,
    ) -> Section {
        Section {
            title: title.to_string(),
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows,
            numeric: numeric.to_vec(),
            code: vec![false; numeric.len()],
            notes: vec![],
        }
    }

    pub(super) fn code_columns(mut self, columns: &[usize]) -> Section {
        for &c in columns {
            self.code[c] = true;
        }
        self
    }

    pub(super) fn text(title: &str, notes: Vec<String>) -> Section {
        Section {
            title: title.to_string(),
            headers: vec![],
            rows: vec![],
            numeric: vec![],
            code: vec![],
            notes,
        }
    }
}

/// A count with thin-space-free thousands separators: 1,234,567.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// `1 operation`, `2 operations`, `1,234 operations`.
pub fn counted(n: u64, singular: &str, plural: &str) -> String {
    format!("{} {}", count(n), if n == 1 { singular } else { plural })
}

pub fn percent(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}

pub fn millis(ms: f64) -> String {
    if ms.fract() == 0.0 || ms.abs() >= 100.0 {
        format!("{ms:.0}")
    } else {
        format!("{ms:.1}")
    }
}

pub(super) fn opt(v: Option<f64>, f: fn(f64) -> String) -> String {
    v.map_or_else(|| "–".to_string(), f)
}

/// `caller 3 → gateway 9 → dependency 9`
pub fn funnel_text(op: &OperationRecord) -> String {
    op.attempts
        .0
        .iter()
        .map(|(hop, n)| format!("{hop} {n}"))
        .collect::<Vec<_>>()
        .join(" → ")
}

/// The one-line headline of a report.
pub fn headline(s: &Summary) -> String {
    let amplified = s.hops.iter().map(|h| h.amplification).fold(0.0, f64::max);
    format!(
        "{} became {} (peak amplification {:.2}×); {} healthy.",
        counted(s.operations, "operation", "operations"),
        counted(s.attempts, "attempt", "attempts"),
        amplified,
        percent(s.classes.first().map_or(0.0, |c| c.share)),
    )
}

/// The gate's verdict and one row per threshold.
pub(super) fn gate_section(gate: &GateReport) -> Section {
    let verdict = match (gate.passed, gate.report_only) {
        (true, _) => "passed",
        (false, false) => "FAILED",
        (false, true) => "would fail (report only)",
    };
    Section::table(
        &format!("Gate: {verdict}"),
        &["result", "condition", "measured", "operations"],
        &[false, false, false, false],
        gate.thresholds
            .iter()
            .map(|t| {
                vec![
                    if t.breached { "BREACHED" } else { "ok" }.to_string(),
                    t.condition.clone(),
                    t.describe(),
                    t.operations_text(),
                ]
            })
            .collect(),
    )
}

/// All sections of the summary, in reading order: the gate's verdict first, when there is
/// one.
pub fn sections(s: &Summary, gate: Option<&GateReport>) -> Vec<Section> {
    let mut out = Vec::new();
    if let Some(gate) = gate {
        out.push(gate_section(gate));
    }
    let present: Vec<_> = s.hops.iter().filter(|h| h.attempts > 0).collect();
    out.push(Section::table(
        "Funnel per hop",
        &[
            "hop",
            "attempts",
            "amplification",
            "originals",
            "retries",
            "redeliveries",
            "retry success",
            "p50 ms",
            "p95 ms",
            "p99 ms",
            "first to multiply",
        ],
        &[
            false, true, true, true, true, true, true, true, true, true, true,
        ],
        present
            .iter()
            .map(|h| {
                vec![
                    h.hop.clone(),
                    count(h.attempts),
                    format!("{:.2}×", h.amplification),
                    count(h.originals),
                    count(h.retries),
                    count(h.redeliveries),
                    opt(h.retry_success_rate, percent),
                    opt(h.latency_ms.p50, millis),
                    opt(h.latency_ms.p95, millis),
                    opt(h.latency_ms.p99, millis),
                    count(h.first_multiplying),
                ]
            })
            .collect(),
    ));
    out.push(Section::table(
        "Classes",
        &["class", "operations", "share"],
        &[false, true, true],
        s.classes
            .iter()
            .map(|c| {
                vec![
                    c.class.name().to_string(),
                    count(c.operations),
                    percent(c.share),
                ]
            })
            .collect(),
    ));
    if !s.findings.is_empty() {
        out.push(
            Section::table(
                "Findings",
                &["finding", "operations"],
                &[false, true],
                s.findings
                    .iter()
                    .map(|f| vec![f.finding.clone(), count(f.operations)])
                    .collect(),
            )
            .code_columns(&[0]),
        );
    }
    out.push(Section::text(
        "Overlap and loose ends",
        vec![
            format!(
                "Overlap: {}; {} ms in all, longest {} ms.",
                counted(s.overlap.operations, "operation", "operations"),
                millis(s.overlap.total_ms),
                millis(s.overlap.max_ms)
            ),
            format!(
                "Unfinished attempts: {}. Orphan attempts: {}. Duplicate side effects: {}.",
                count(s.unfinished_attempts),
                count(s.orphan_attempts),
                count(s.duplicate_effects)
            ),
            format!(
                "Input: {} lines, {} bad, {} exact duplicate events counted once.",
                count(s.input.lines),
                count(s.input.bad_lines),
                count(s.input.duplicate_events)
            ),
        ],
    ));
    if s.bursts.count == 0 {
        out.push(Section::text(
            "Synchronized bursts",
            vec!["None found.".to_string()],
        ));
    } else {
        let mut section = Section::table(
            "Synchronized bursts",
            &[
                "hop",
                "start ms",
                "width ms",
                "operations",
                "retries",
                "expected",
                "backoff ms",
                "since previous ms",
            ],
            &[false, true, true, true, true, true, true, true],
            s.bursts
                .list
                .iter()
                .map(|b| {
                    let backoff = match (b.delay_min_ms, b.delay_max_ms) {
                        (Some(lo), Some(hi)) if lo == hi => format!("{} (no jitter)", millis(lo)),
                        (Some(lo), Some(hi)) => format!("{}–{}", millis(lo), millis(hi)),
                        _ => "–".to_string(),
                    };
                    vec![
                        b.hop.clone(),
                        millis(b.start_ms),
                        millis(b.width_ms),
                        count(b.operations),
                        count(b.retries),
                        format!("{:.1}", b.expected_retries),
                        backoff,
                        opt(b.since_previous_ms, millis),
                    ]
                })
                .collect(),
        );
        section.notes.push(format!(
            "{} bursts holding {} operations{}.",
            count(s.bursts.count),
            count(s.bursts.operations),
            s.bursts
                .median_interval_ms
                .map_or(String::new(), |m| format!(
                    "; they repeat every {} ms (median)",
                    millis(m)
                ))
        ));
        out.push(section);
    }
    out.push(
        Section::table(
            "Worst operations",
            &[
                "operation",
                "class",
                "first multiplying hop",
                "funnel",
                "findings",
            ],
            &[false, false, false, false, false],
            s.worst_operations
                .iter()
                .map(|o| {
                    vec![
                        o.display_id(),
                        o.class.name().to_string(),
                        o.first_multiplying_hop
                            .clone()
                            .unwrap_or_else(|| "–".into()),
                        funnel_text(o),
                        o.findings.join(", "),
                    ]
                })
                .collect(),
        )
        .code_columns(&[0, 4]),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_counts_and_times_for_people() {
        assert_eq!(count(0), "0");
        assert_eq!(count(1234567), "1,234,567");
        assert_eq!(count(999), "999");
        assert_eq!(percent(0.0126), "1.3%");
        assert_eq!(millis(550.0), "550");
        assert_eq!(millis(12.25), "12.2");
    }
}

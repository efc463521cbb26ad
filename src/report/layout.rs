//! The shared layout of the human-readable reports: the summary as titled sections of
//! cells. The terminal table and Markdown differ only in how they draw these.

use crate::classify::Class;
use crate::gate::GateReport;
pub use crate::paint::Tone;
use crate::summary::{OperationRecord, Summary};
pub use crate::words::{count, counted};

/// Which block of the report a section is: renderers that treat one differently (the HTML
/// page links the worst operations to their timelines) ask this, not the title.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SectionKind {
    Gate,
    Funnel,
    Classes,
    Findings,
    LooseEnds,
    Bursts,
    WorstOperations,
    /// A comparison (`replay`, `diff`): attempts per hop on both sides.
    HopChanges,
    /// A comparison: final outcomes lost, gained or unknown.
    OutcomeChanges,
    /// A comparison: bursts, and what budgets and the deadline refused.
    Refused,
    /// A replay: what it cannot know.
    Limit,
}

impl SectionKind {
    /// The section's title (the gate's adds its verdict).
    pub fn title(self) -> &'static str {
        match self {
            SectionKind::Gate => "Gate",
            SectionKind::Funnel => "Funnel per hop",
            SectionKind::Classes => "Classes",
            SectionKind::Findings => "Findings",
            SectionKind::LooseEnds => "Overlap and loose ends",
            SectionKind::Bursts => "Synchronized bursts",
            SectionKind::WorstOperations => "Worst operations",
            SectionKind::HopChanges => "Attempts per hop",
            SectionKind::OutcomeChanges => "Final outcomes",
            SectionKind::Refused => "Bursts, budgets and deadline",
            SectionKind::Limit => "Limit",
        }
    }
}

/// One titled block of a report: a table, or lines of text when `headers` is empty.
#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    pub kind: SectionKind,
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
    /// Shorter headers for a terminal too narrow for the full ones; same length as `headers`.
    pub short_headers: Vec<String>,
    /// Columns a narrow terminal drops, least important first.
    pub drop_order: Vec<usize>,
    /// The column whose cells are class names or verdicts, coloured on a terminal.
    pub tone_column: Option<usize>,
    /// The title's colour on a terminal (the gate's verdict).
    pub title_tone: Option<Tone>,
}

/// The tone of a class name or of a gate result (`ok`, `BREACHED`) shown in a cell.
pub fn tone_of(text: &str) -> Option<Tone> {
    match text {
        "ok" => Some(Tone::Good),
        "BREACHED" => Some(Tone::Bad),
        _ => Class::parse(text).map(|class| match class {
            Class::Healthy => Tone::Good,
            // Not retries: shapes to look at, not storms.
            Class::FanOut | Class::Redelivery => Tone::Warning,
            _ => Tone::Bad,
        }),
    }
}

/// Word-wraps `text` to lines of at most `width` characters, keeping its leading spaces;
/// continuation lines start with `indent` spaces. A word longer than a line is split.
pub fn wrap(text: &str, width: usize, indent: usize) -> Vec<String> {
    let width = width.max(indent + 8);
    let lead = text.len() - text.trim_start_matches(' ').len();
    let mut lines = Vec::new();
    let mut line = " ".repeat(lead);
    let mut len = lead;
    // No word on the line yet: the next one needs no space before it.
    let mut bare = true;
    for word in text[lead..].split(' ') {
        if word.is_empty() && bare {
            continue;
        }
        let mut word: Vec<char> = word.chars().collect();
        loop {
            let sep = usize::from(!bare);
            if len + sep + word.len() <= width {
                if !bare {
                    line.push(' ');
                }
                line.extend(word.iter());
                len += sep + word.len();
                bare = false;
                break;
            }
            if !bare {
                lines.push(std::mem::replace(&mut line, " ".repeat(indent)));
                len = indent;
                bare = true;
                continue;
            }
            // The word alone is wider than a line: split it.
            let room = width.saturating_sub(len).clamp(1, word.len());
            line.extend(word.drain(..room));
            lines.push(std::mem::replace(&mut line, " ".repeat(indent)));
            len = indent;
            if word.is_empty() {
                break;
            }
        }
    }
    lines.push(line);
    lines
}

impl Section {
    pub(super) fn table(
        kind: SectionKind,
        headers: &[&str],
        numeric: &[bool],
        rows: Vec<Vec<String>>,
    ) -> Section {
        Section {
            kind,
            title: kind.title().to_string(),
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows,
            numeric: numeric.to_vec(),
            code: vec![false; numeric.len()],
            notes: vec![],
            short_headers: headers.iter().map(|h| h.to_string()).collect(),
            drop_order: vec![],
            tone_column: None,
            title_tone: None,
        }
    }

    /// Headers for a narrow terminal, in column order.
    fn short(mut self, headers: &[&str]) -> Section {
        assert_eq!(headers.len(), self.headers.len(), "{}", self.title);
        self.short_headers = headers.iter().map(|h| h.to_string()).collect();
        self
    }

    /// The columns a narrow terminal drops, least important first.
    fn drop_first(mut self, columns: &[usize]) -> Section {
        self.drop_order = columns.to_vec();
        self
    }

    fn toned(mut self, column: usize) -> Section {
        self.tone_column = Some(column);
        self
    }

    pub(super) fn code_columns(mut self, columns: &[usize]) -> Section {
        for &c in columns {
            self.code[c] = true;
        }
        self
    }

    pub(super) fn text(kind: SectionKind, notes: Vec<String>) -> Section {
        Section {
            kind,
            title: kind.title().to_string(),
            headers: vec![],
            rows: vec![],
            numeric: vec![],
            code: vec![],
            notes,
            short_headers: vec![],
            drop_order: vec![],
            tone_column: None,
            title_tone: None,
        }
    }
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

/// A latency percentile at the precision the sketch keeps
/// ([`crate::stats::LATENCY_SIGNIFICANT_DIGITS`] significant digits): the sketch reports a
/// bucket's highest value, up to 0.1 % above the true one, so attempts of 1400 ms read
/// 1400, not 1401. The JSON keeps the sketch's value as it is.
pub fn latency_millis(ms: f64) -> String {
    if ms <= 0.0 || !ms.is_finite() {
        return millis(ms);
    }
    let digits = i32::from(crate::stats::LATENCY_SIGNIFICANT_DIGITS);
    let scale = 10f64.powi(digits - 1 - ms.log10().floor() as i32);
    millis((ms * scale).round() / scale)
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
    // First, so that no reader takes a part for the whole.
    let incomplete = s.incomplete.as_ref().map_or(String::new(), |i| {
        format!("Incomplete ({}): ", i.describe())
    });
    format!(
        "{incomplete}{} became {} (peak amplification {:.2}×); {} healthy.",
        counted(s.operations, "operation", "operations"),
        counted(s.attempts, "attempt", "attempts"),
        amplified,
        percent(s.classes.first().map_or(0.0, |c| c.share)),
    )
}

/// The gate's verdict and one row per threshold.
pub(super) fn gate_section(gate: &GateReport) -> Section {
    let verdict = gate.verdict();
    let mut section = Section::table(
        SectionKind::Gate,
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
    .toned(0);
    let word = verdict.word();
    section.title = match &gate.incomplete {
        Some(i) => format!(
            "{}: {word} — over only {}",
            SectionKind::Gate.title(),
            i.describe()
        ),
        None => format!("{}: {word}", SectionKind::Gate.title()),
    };
    section.title_tone = Some(verdict.tone());
    if let Some(why) = &gate.inconclusive {
        section.notes.push(format!(
            "Not conclusive: {why}. The thresholds below were measured on what was read; the run exits 2."
        ));
    }
    section
}

/// All sections of the summary, in reading order: the gate's verdict first, when there is
/// one.
pub fn sections(s: &Summary, gate: Option<&GateReport>) -> Vec<Section> {
    let mut out = Vec::new();
    if let Some(gate) = gate {
        out.push(gate_section(gate));
    }
    let present: Vec<_> = s.hops.iter().filter(|h| h.attempts > 0).collect();
    out.push(
        Section::table(
            SectionKind::Funnel,
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
                        opt(h.latency_ms.p50, latency_millis),
                        opt(h.latency_ms.p95, latency_millis),
                        opt(h.latency_ms.p99, latency_millis),
                        count(h.first_multiplying),
                    ]
                })
                .collect(),
        )
        .short(&[
            "hop", "attempts", "ampl.", "orig.", "retries", "redeliv.", "retry ok", "p50", "p95",
            "p99", "first×",
        ])
        .drop_first(&[7, 9, 5, 3, 6, 8, 4, 1]),
    );
    out.push(
        Section::table(
            SectionKind::Classes,
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
        )
        .toned(0),
    );
    if !s.findings.is_empty() {
        out.push(
            Section::table(
                SectionKind::Findings,
                &["finding", "operations"],
                &[false, true],
                s.findings
                    .iter()
                    .map(|f| vec![f.finding.to_string(), count(f.operations)])
                    .collect(),
            )
            .code_columns(&[0]),
        );
    }
    out.push(Section::text(
        SectionKind::LooseEnds,
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
                "Input: {}, {} bad, {}{} counted once.",
                counted(s.input.lines, "line", "lines"),
                count(s.input.bad_lines),
                other_lines(&s.input),
                counted(
                    s.input.duplicate_events,
                    "exact duplicate event",
                    "exact duplicate events"
                )
            ),
        ],
    ));
    if s.bursts.count == 0 {
        out.push(Section::text(
            SectionKind::Bursts,
            vec!["None found.".to_string()],
        ));
    } else {
        let mut section = Section::table(
            SectionKind::Bursts,
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
        )
        .short(&[
            "hop",
            "start ms",
            "width",
            "ops",
            "retries",
            "expected",
            "backoff ms",
            "since prev.",
        ])
        .drop_first(&[7, 5, 2, 4]);
        section.notes.push(format!(
            "{} holding {}{}.",
            counted(s.bursts.count, "burst", "bursts"),
            counted(s.bursts.operations, "operation", "operations"),
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
            SectionKind::WorstOperations,
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
                        o.findings
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join(", "),
                    ]
                })
                .collect(),
        )
        .code_columns(&[0, 4])
        .short(&["operation", "class", "first hop", "funnel", "findings"])
        .drop_first(&[4, 2])
        .toned(1),
    );
    out
}

/// `162 not attempts (e.g. app.log:1), `: the lines passed by, where there are any.
fn other_lines(input: &crate::summary::InputStats) -> String {
    if input.other_lines == 0 {
        return String::new();
    }
    let example = input
        .other_lines_example
        .as_deref()
        .map_or(String::new(), |at| format!(" (e.g. {at})"));
    format!("{} not attempts{example}, ", count(input.other_lines))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_words_to_the_width_with_a_hanging_indent() {
        let cases: [(&str, usize, usize, &[&str]); 5] = [
            ("short", 20, 2, &["short"]),
            (
                "one two three four",
                9,
                2,
                &["one two", "  three", "  four"],
            ),
            ("abcdefghijklmnop qr", 10, 0, &["abcdefghij", "klmnop qr"]),
            ("a  b", 10, 0, &["a  b"]),
            ("  lead kept on", 10, 2, &["  lead", "  kept on"]),
        ];
        for (text, width, indent, expected) in cases {
            assert_eq!(wrap(text, width, indent), expected, "{text:?}");
        }
    }

    #[test]
    fn every_class_and_gate_result_has_a_tone() {
        for class in Class::ALL {
            assert!(tone_of(class.name()).is_some(), "{}", class.name());
        }
        assert_eq!(tone_of("BREACHED"), Some(Tone::Bad));
        assert_eq!(tone_of("caller"), None);
    }

    #[test]
    fn formats_counts_and_times_for_people() {
        assert_eq!(percent(0.0126), "1.3%");
        assert_eq!(millis(550.0), "550");
        assert_eq!(millis(12.25), "12.2");
    }

    #[test]
    fn latency_percentiles_print_at_the_sketchs_three_significant_digits() {
        for (ms, text) in [
            (1401.0, "1400"),
            (1400.0, "1400"),
            (12.01, "12"),
            (12.34, "12.3"),
            (0.1001, "0.1"),
            (999.6, "1000"),
            (250.2, "250"),
            (0.0, "0"),
        ] {
            assert_eq!(latency_millis(ms), text, "{ms}");
        }
    }
}

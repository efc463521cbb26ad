//! The comparison report of `replay` and `diff`: the two runs side by side in every
//! format. It formats [`Comparison`]; every number in it was computed there.
//!
//! - table and Markdown: the verdict, then sections drawn by the same code as `analyze`'s;
//! - JSON: `{"schema_version", "kind", "<first>": <summary>, "<second>": <summary>,
//!   "gate" (with conditions), "changes": {"verdict", …}}`, each summary exactly as
//!   `analyze --format json` writes it;
//! - JSON Lines, CSV and Parquet: one row per operation of the second run, with the
//!   columns `analyze` writes plus the first run's class, attempts and final outcome
//!   (prefixed with its name) and the change of final outcome;
//! - HTML: both funnels on one axis, and the worst operations' timelines one above the
//!   other (see `html.rs`).

use polars::prelude::*;
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use super::layout::{count, counted, funnel_text, gate_section, percent, Section, SectionKind};
use super::OutputFormat;
use crate::analysis::tally::Collected;
use crate::compare::{loaded_hop, Comparison, Kind};
use crate::rules::Rules;

/// Operation IDs a report's table shows per outcome change (the JSON lists more).
const OPERATIONS_SHOWN: usize = 3;

pub fn render(
    format: OutputFormat,
    c: &Comparison,
    before: Option<&Collected>,
    after: Option<&Collected>,
    rules: &Rules,
    style: &super::Style,
) -> anyhow::Result<Vec<u8>> {
    let verdict = verdict(c, rules);
    let rows = || -> anyhow::Result<(&Collected, &Collected)> {
        match (before, after) {
            (Some(b), Some(a)) if !c.operations.is_empty() || a.operations.is_empty() => Ok((b, a)),
            _ => anyhow::bail!(
                "per-operation formats (jsonl, csv, parquet) need attempt logs on both sides, not a saved summary: use --format json, table, markdown or html"
            ),
        }
    };
    Ok(match format {
        OutputFormat::Table => {
            super::table::draw_report(&verdict, &sections(c), style).into_bytes()
        }
        OutputFormat::Markdown => super::markdown::draw(
            match c.kind {
                Kind::Replay => "attempt-funnel replay",
                Kind::Diff => "attempt-funnel diff",
            },
            &verdict,
            &input_files(c),
            &sections(c),
        )
        .into_bytes(),
        OutputFormat::Json => {
            let mut out = serde_json::to_vec_pretty(&Document {
                c,
                verdict: &verdict,
            })?;
            out.push(b'\n');
            out
        }
        OutputFormat::Html => {
            super::html::render_comparison(c, &verdict, &input_files(c), &sections(c)).into_bytes()
        }
        OutputFormat::Jsonl => {
            let (b, a) = rows()?;
            jsonl(c, b, a, rules)?
        }
        OutputFormat::Csv => {
            let (b, a) = rows()?;
            let mut frame = frame(c, b, a, rules, crate::escape::csv_cell)?;
            let mut out = Vec::new();
            CsvWriter::new(&mut out)
                .include_header(true)
                .finish(&mut frame)?;
            out
        }
        OutputFormat::Parquet => {
            let (b, a) = rows()?;
            let mut frame = frame(c, b, a, rules, super::rows::as_is)?;
            let mut out = Vec::new();
            ParquetWriter::new(&mut out).finish(&mut frame)?;
            out
        }
        OutputFormat::Partial => anyhow::bail!(OutputFormat::Partial.refusal().unwrap_or_default()),
    })
}

fn input_files(c: &Comparison) -> Vec<String> {
    let mut files = c.before.input.files.clone();
    for f in &c.after.input.files {
        if !files.contains(f) {
            files.push(f.clone());
        }
    }
    files
}

/// The one-line verdict: the change in attempts at the hop that takes the load, then in
/// final outcomes, then what budgets and the deadline refused.
pub fn verdict(c: &Comparison, rules: &Rules) -> String {
    let ch = &c.changes;
    let subject = match c.kind {
        Kind::Replay => "the candidate",
        Kind::Diff => "the second run",
    };
    let mut parts = Vec::new();
    match loaded_hop(ch, rules) {
        Some(h) if h.change < 0 => parts.push(format!(
            "{subject} removes {} of {} {} attempts ({})",
            count(h.change.unsigned_abs()),
            count(h.attempts.before),
            h.hop,
            percent(h.change_share.map_or(1.0, f64::abs))
        )),
        Some(h) if h.change > 0 => parts.push(format!(
            "{subject} adds {} {} attempts to {}{}",
            count(h.change as u64),
            h.hop,
            count(h.attempts.before),
            h.change_share
                .map_or(String::new(), |s| format!(" (+{})", percent(s)))
        )),
        Some(h) => parts.push(format!(
            "{subject} leaves the {} {} attempts unchanged",
            count(h.attempts.before),
            h.hop
        )),
        None => parts.push("no attempts on either side".to_string()),
    }
    if let Some(o) = &ch.outcomes {
        let lost = o.success_lost.operations;
        parts.push(match (c.kind, lost) {
            (Kind::Replay, 0) => "no operation that succeeded would have failed".to_string(),
            (Kind::Replay, n) => format!(
                "{} that succeeded on a retry would have failed",
                counted(n, "operation", "operations")
            ),
            (Kind::Diff, 0) => "no operation that succeeded before fails after".to_string(),
            (Kind::Diff, n) => format!(
                "{} that succeeded before failed after",
                counted(n, "operation", "operations")
            ),
        });
        if o.success_gained.operations > 0 {
            parts.push(format!(
                "{} that failed would have succeeded",
                counted(o.success_gained.operations, "operation", "operations")
            ));
        }
        if o.unknown.operations > 0 {
            parts.push(format!(
                "{} would end on an extrapolated attempt (outcome unknown)",
                counted(o.unknown.operations, "operation", "operations")
            ));
        }
    }
    if let Some(e) = &ch.exhausted {
        let budget: u64 = e.budget.iter().map(|h| h.retries).sum();
        let deadline: u64 = e.deadline.iter().map(|h| h.retries).sum();
        if budget > 0 {
            parts.push(format!(
                "retry budgets refuse {}",
                counted(budget, "retry", "retries")
            ));
        }
        if deadline > 0 {
            parts.push(format!(
                "the deadline stops {}",
                counted(deadline, "retry", "retries")
            ));
        }
    }
    let mut text = parts.join("; ");
    if let Some(first) = text.get(..1) {
        text = first.to_uppercase() + &text[1..];
    }
    text + "."
}

/// `9 → 3 (−6)`
fn arrow(before: u64, after: u64) -> String {
    let change = after as i64 - before as i64;
    if change == 0 {
        format!("{} → {}", count(before), count(after))
    } else {
        format!(
            "{} → {} ({}{})",
            count(before),
            count(after),
            if change > 0 { "+" } else { "−" },
            count(change.unsigned_abs())
        )
    }
}

/// The comparison as titled sections, in reading order.
pub fn sections(c: &Comparison) -> Vec<Section> {
    let [first, second] = c.kind.labels();
    let ch = &c.changes;
    let mut out = Vec::new();
    if let Some(gate) = &c.gate {
        out.push(gate_section(gate));
    }
    let replay = c.kind == Kind::Replay;
    let mut headers = vec![
        "hop".to_string(),
        first.to_string(),
        second.to_string(),
        "change".to_string(),
        "amplification".to_string(),
        "retries".to_string(),
    ];
    if replay {
        headers.push("extrapolated".to_string());
    }
    let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
    let mut numeric = vec![false, true, true, true, true, true];
    if replay {
        numeric.push(true);
    }
    out.push(Section::table(
        SectionKind::HopChanges,
        &headers,
        &numeric,
        ch.hops
            .iter()
            .map(|h| {
                let mut row = vec![
                    h.hop.clone(),
                    count(h.attempts.before),
                    count(h.attempts.after),
                    match h.change_share {
                        Some(s) if h.change != 0 => format!(
                            "{}{} ({}{})",
                            if h.change > 0 { "+" } else { "−" },
                            count(h.change.unsigned_abs()),
                            if h.change > 0 { "+" } else { "−" },
                            percent(s.abs())
                        ),
                        _ if h.change > 0 => format!("+{}", count(h.change as u64)),
                        _ => "0".to_string(),
                    },
                    format!(
                        "{:.2}× → {:.2}×",
                        h.amplification.before, h.amplification.after
                    ),
                    arrow(h.retries.before, h.retries.after),
                ];
                if replay {
                    row.push(count(h.extrapolated.unwrap_or(0)));
                }
                row
            })
            .collect(),
    ));
    out.push(Section::table(
        SectionKind::Classes,
        &["class", first, second, "change"],
        &[false, true, true, true],
        ch.classes
            .iter()
            .map(|k| {
                let change = k.operations.after as i64 - k.operations.before as i64;
                vec![
                    k.class.name().to_string(),
                    format!(
                        "{} ({})",
                        count(k.operations.before),
                        percent(k.share.before)
                    ),
                    format!("{} ({})", count(k.operations.after), percent(k.share.after)),
                    match change {
                        0 => "0".to_string(),
                        c if c > 0 => format!("+{}", count(c as u64)),
                        c => format!("−{}", count(c.unsigned_abs())),
                    },
                ]
            })
            .collect(),
    ));
    match &ch.outcomes {
        Some(o) => {
            let list = |l: &crate::compare::OperationList| {
                let shown = &l.operation_ids[..l.operation_ids.len().min(OPERATIONS_SHOWN)];
                let rest = l.operations.saturating_sub(shown.len() as u64);
                let mut text = shown.join(", ");
                if rest > 0 {
                    text.push_str(&format!(" and {} more", count(rest)));
                }
                text
            };
            let mut section = Section::table(
                SectionKind::OutcomeChanges,
                &["change", "operations", "first of them"],
                &[false, true, false],
                vec![
                    vec![
                        format!("success lost ({first}: success, {second}: failure)"),
                        count(o.success_lost.operations),
                        list(&o.success_lost),
                    ],
                    vec![
                        format!("success gained ({first}: failure, {second}: success)"),
                        count(o.success_gained.operations),
                        list(&o.success_gained),
                    ],
                    vec![
                        if replay {
                            "unknown (ends on an extrapolated attempt)".to_string()
                        } else {
                            format!("unknown ({second}: no outcome logged)")
                        },
                        count(o.unknown.operations),
                        list(&o.unknown),
                    ],
                ],
            )
            .code_columns(&[2]);
            section.notes.push(format!(
                "{} compared; {} changed class.",
                counted(o.compared, "operation", "operations"),
                counted(ch.reclassified.unwrap_or(0), "operation", "operations")
            ));
            out.push(section);
        }
        None => out.push(Section::text(
            SectionKind::OutcomeChanges,
            vec![format!(
                "Not compared: a saved summary has no per-operation outcomes. Give attempt logs on both sides to compare them."
            )],
        )),
    }
    let mut notes = vec![format!(
        "Synchronized bursts: {} → {}; operations in them: {}.",
        count(ch.bursts.before),
        count(ch.bursts.after),
        arrow(ch.burst_operations.before, ch.burst_operations.after)
    )];
    if let Some(e) = &ch.exhausted {
        let per_hop = |v: &[crate::compare::HopCount]| {
            if v.is_empty() {
                "none".to_string()
            } else {
                v.iter()
                    .map(|h| format!("{} at {}", counted(h.retries, "retry", "retries"), h.hop))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        notes.push(format!(
            "Retries refused by a retry budget: {} ({}).",
            per_hop(&e.budget),
            counted(e.budget_operations, "operation", "operations")
        ));
        notes.push(format!(
            "Retries past the deadline: {} ({}).",
            per_hop(&e.deadline),
            counted(e.deadline_operations, "operation", "operations")
        ));
    }
    out.push(Section::text(SectionKind::Refused, notes));
    if !c.timelines.is_empty() {
        let mut worst = Section::table(
            SectionKind::WorstOperations,
            &["operation", first, second],
            &[false, false, false],
            c.timelines
                .iter()
                .map(|p| {
                    let (b, _) = &p.before;
                    vec![
                        b.display_id(),
                        format!("{}: {}", b.class.name(), funnel_text(b)),
                        p.after.as_ref().map_or("–".to_string(), |(a, _)| {
                            format!("{}: {}", a.class.name(), funnel_text(a))
                        }),
                    ]
                })
                .collect(),
        )
        .code_columns(&[0]);
        worst.title = format!("Worst operations ({first})");
        out.push(worst);
    }
    if let Some(limit) = &ch.limit {
        out.push(Section::text(SectionKind::Limit, vec![limit.clone()]));
    }
    out
}

/// The JSON document.
struct Document<'a> {
    c: &'a Comparison,
    verdict: &'a str,
}

impl Serialize for Document<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Changes<'a> {
            verdict: &'a str,
            #[serde(flatten)]
            changes: &'a crate::compare::Changes,
        }
        let c = self.c;
        let [first, second] = c.kind.labels();
        let mut map = serializer.serialize_map(Some(5))?;
        map.serialize_entry("schema_version", &crate::compare::SCHEMA_VERSION)?;
        map.serialize_entry(
            "kind",
            match c.kind {
                Kind::Replay => "replay",
                Kind::Diff => "diff",
            },
        )?;
        match &c.saved[0] {
            Some(saved) => map.serialize_entry(first, saved)?,
            None => map.serialize_entry(first, &c.before)?,
        }
        match &c.saved[1] {
            Some(saved) => map.serialize_entry(second, saved)?,
            None => map.serialize_entry(second, &c.after)?,
        }
        if let Some(gate) = &c.gate {
            map.serialize_entry("gate", gate)?;
        }
        map.serialize_entry(
            "changes",
            &Changes {
                verdict: self.verdict,
                changes: &c.changes,
            },
        )?;
        map.end()
    }
}

/// One JSON object per operation of the second run: `analyze`'s row, then the first
/// run's class, attempts and final outcome, then the change.
fn jsonl(
    c: &Comparison,
    before: &Collected,
    after: &Collected,
    rules: &Rules,
) -> anyhow::Result<Vec<u8>> {
    let [first, _] = c.kind.labels();
    let mut out = Vec::new();
    for (record, change) in super::rows::records(&after.operations, &rules.hops).zip(&c.operations)
    {
        let serde_json::Value::Object(mut row) = serde_json::to_value(&record)? else {
            unreachable!("an operation record is a JSON object");
        };
        let b = change.before.map(|i| &before.operations[i]);
        let b_record = b.map(|b| crate::summary::OperationRecord::new(b, &rules.hops));
        row.insert(
            format!("{first}_class"),
            serde_json::to_value(b.map(|b| b.class))?,
        );
        row.insert(
            format!("{first}_attempts"),
            serde_json::to_value(b_record.as_ref().map(|r| &r.attempts))?,
        );
        row.insert(
            format!("{first}_total_attempts"),
            serde_json::to_value(b.map(|b| b.total_attempts()))?,
        );
        row.insert(
            format!("{first}_final_outcome"),
            serde_json::to_value(b.map(|b| b.final_outcome))?,
        );
        row.insert(
            "final_outcome".into(),
            serde_json::to_value(change.after_outcome)?,
        );
        row.insert(
            "outcome_change".into(),
            serde_json::to_value(change.change.map(|c| c.name()))?,
        );
        serde_json::to_writer(&mut out, &row)?;
        out.push(b'\n');
    }
    Ok(out)
}

/// `analyze`'s per-operation table of the second run, plus the first run's columns.
fn frame(
    c: &Comparison,
    before: &Collected,
    after: &Collected,
    rules: &Rules,
    cell: super::rows::Cell,
) -> PolarsResult<DataFrame> {
    let [first, _] = c.kind.labels();
    let mut frame = super::rows::operation_frame(&after.operations, &rules.hops, cell)?;
    let b = |i: usize| c.operations[i].before.map(|b| &before.operations[b]);
    let n = after.operations.len();
    let mut columns = vec![Column::new(
        format!("{first}_class").into(),
        (0..n)
            .map(|i| b(i).map(|o| o.class.name()))
            .collect::<Vec<_>>(),
    )];
    for (h, name) in rules.hops.names().iter().enumerate() {
        columns.push(Column::new(
            format!("{first}_{name}_attempts").into(),
            (0..n)
                .map(|i| b(i).map(|o| o.funnel[h]))
                .collect::<Vec<_>>(),
        ));
    }
    columns.extend([
        Column::new(
            format!("{first}_total_attempts").into(),
            (0..n)
                .map(|i| b(i).map(|o| o.total_attempts()))
                .collect::<Vec<_>>(),
        ),
        Column::new(
            format!("{first}_final_outcome").into(),
            (0..n)
                .map(|i| b(i).map(|o| o.final_outcome.name()))
                .collect::<Vec<_>>(),
        ),
        Column::new(
            "final_outcome".into(),
            c.operations
                .iter()
                .map(|o| o.after_outcome.name())
                .collect::<Vec<_>>(),
        ),
        Column::new(
            "outcome_change".into(),
            c.operations
                .iter()
                .map(|o| o.change.map(|c| c.name()))
                .collect::<Vec<_>>(),
        ),
    ]);
    for column in columns {
        frame.with_column(column)?;
    }
    Ok(frame)
}

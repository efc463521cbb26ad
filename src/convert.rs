//! `attempt-funnel convert`: the attempts that ingest and normalize made of the input, as
//! native JSON Lines attempt records (docs/input.md), one per line. For spans (OTLP, Zipkin) this
//! shows exactly what the mapping produced; for native input it pairs point events and
//! fills in inferred starts. Analysing the output gives the same per-operation results as
//! analysing the input.
//!
//! ```text
//! {"operation_id":"5b8e…","hop":"caller","attempt":2,"start_ms":1700000000250.0,"finish_ms":1700000000900.0,"outcome":"ok","target":"GET api-gateway/stock/42","span_id":"…"}
//! ```

use anyhow::Result;
use rayon::prelude::*;
use serde::Serialize;

use crate::diagnostics::Diagnostics;
use crate::ingest::spans::hop::Skip;
use crate::ingest::spans::resolve::SpanStats;
use crate::ingest::Ingested;
use crate::model::{Attempt, Millis, OperationKey, Outcome};
use crate::normalize::{normalize_operation, ByOperation, EventSorter, Normalized};
use crate::rules::HopOrder;
use crate::words::counted;

/// The converted records and what was wrong with the input.
pub struct Converted {
    pub bytes: Vec<u8>,
    pub records: u64,
    pub diagnostics: Diagnostics,
    pub duplicate_events: u64,
    pub span_stats: Option<SpanStats>,
}

/// One attempt record, keys in the order of docs/input.md; absent values are left out.
#[derive(Serialize)]
struct Record<'a> {
    operation_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    test_run_id: Option<&'a str>,
    hop: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    attempt: Option<u32>,
    start_ms: Millis,
    #[serde(skip_serializing_if = "Option::is_none")]
    finish_ms: Option<Millis>,
    #[serde(skip_serializing_if = "Option::is_none")]
    outcome: Option<OutcomeValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    target: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    delivery: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    span_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parent_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    delay_ms: Option<Millis>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after_ms: Option<Millis>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    effect: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    hidden: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    untimed: bool,
}

/// An outcome as the input reference spells it: a name, or an HTTP status as a number.
#[derive(Serialize)]
#[serde(untagged)]
enum OutcomeValue {
    Name(&'static str),
    Status(u16),
}

impl From<Outcome> for OutcomeValue {
    fn from(o: Outcome) -> Self {
        match (o, o.name()) {
            (Outcome::Http(code), _) => OutcomeValue::Status(code),
            (_, name) => OutcomeValue::Name(name.unwrap_or_default()),
        }
    }
}

/// Normalizes every operation and writes its attempts, operations in (test run, ID) order
/// and attempts in the pipeline's canonical order.
pub fn convert(mut ingested: Ingested, hops: &HopOrder) -> Result<Converted> {
    let events = std::mem::take(&mut ingested.events);
    let by_operation = ByOperation::new(&events, ingested.operations.len());
    let mut operations: Vec<(OperationKey, Normalized)> = (0..ingested.operations.len())
        .into_par_iter()
        .map_init(
            || (EventSorter::default(), Vec::new()),
            |(sorter, scratch), op| {
                sorter.sorted_events(&by_operation, &events, op, scratch);
                (
                    ingested.operation_key(op as u32),
                    normalize_operation(scratch),
                )
            },
        )
        .collect();

    let problems = operations
        .iter_mut()
        .flat_map(|(_, n)| std::mem::take(&mut n.problems))
        .collect();
    ingested
        .diagnostics
        .bad_sources_in_file_order(&ingested.files, problems)?;

    operations.sort_by(|a, b| a.0.cmp(&b.0));
    let mut bytes = Vec::new();
    let mut records = 0;
    let mut duplicate_events = 0;
    for (key, normalized) in &operations {
        duplicate_events += normalized.duplicates.len() as u64;
        for a in &normalized.attempts {
            let record = record(key, a, hops, &ingested);
            serde_json::to_writer(&mut bytes, &record)?;
            bytes.push(b'\n');
            records += 1;
        }
    }
    Ok(Converted {
        bytes,
        records,
        duplicate_events,
        diagnostics: ingested.diagnostics,
        span_stats: ingested.span_stats,
    })
}

fn record<'a>(
    key: &'a OperationKey,
    a: &Attempt,
    hops: &'a HopOrder,
    ingested: &'a Ingested,
) -> Record<'a> {
    let text = |s: Option<u32>| s.map(|s| ingested.strings.resolve(s));
    Record {
        operation_id: &key.operation_id,
        test_run_id: key.test_run_id.as_deref(),
        hop: hops.name(a.hop),
        attempt: a.attempt,
        start_ms: a.start_ms,
        finish_ms: a.finish_ms,
        outcome: a.outcome.map(OutcomeValue::from),
        target: text(a.target),
        message_id: text(a.message_id),
        delivery: a.delivery,
        span_id: text(a.span_id),
        parent_id: text(a.parent_id),
        delay_ms: a.delay_ms,
        retry_after_ms: a.retry_after_ms,
        effect: a.effect,
        hidden: a.hidden,
        untimed: a.untimed,
    }
}

/// The one-line account of the spans on stderr: how many became attempts, and which were
/// not attempts and why, so that a mapping that missed a hop is visible.
pub fn span_note(stats: &SpanStats, records: u64) -> String {
    /// Groups of non-attempt spans named one by one before the rest are only counted.
    const GROUPS_SHOWN: usize = 6;
    let skipped: u64 = stats.skipped.values().sum();
    let mut note = format!(
        "attempt-funnel: {} read, {}, {} written",
        counted(stats.spans, "span", "spans"),
        counted(stats.attempts, "attempt", "attempts"),
        counted(records, "attempt record", "attempt records"),
    );
    if skipped > 0 {
        let groups: Vec<String> = stats
            .skipped
            .iter()
            .take(GROUPS_SHOWN)
            .map(|((service, kind, why), n)| {
                // A service name comes from the input: escaped for the terminal.
                let service = if service.is_empty() {
                    "(no service)".into()
                } else {
                    crate::escape::terminal(service)
                };
                match why {
                    Skip::Internal => format!("{service} {kind} ×{n}"),
                    _ => format!("{service} {kind} ({}) ×{n}", why.describe()),
                }
            })
            .collect();
        let more = if stats.skipped.len() > GROUPS_SHOWN {
            ", …"
        } else {
            ""
        };
        note.push_str(&format!(
            "; {} {} not attempts: {}{more} (see docs/formats.md)",
            counted(skipped, "span", "spans"),
            if skipped == 1 { "is" } else { "are" },
            groups.join(", ")
        ));
    }
    note
}

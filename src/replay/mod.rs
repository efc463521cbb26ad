//! What-if replay (`attempt-funnel replay --candidate FILE`): the observed attempt trees,
//! replayed under a candidate retry policy ([`engine`]), become attempts that go through the
//! same analysis as read ones, so the replayed run is classified by the same rules.
//!
//! Its limit, stated in every report: the replay reuses the observed outcomes. It cannot
//! know how a dependency would have answered under the load the candidate changes.

pub mod candidate;
pub mod engine;

use rayon::prelude::*;

use crate::analysis::trace_end;
use crate::group::build_tree;
use crate::ingest::Ingested;
use crate::model::{Attempt, Millis};
use crate::normalize::ByOperation;
use crate::normalize::{canonical_attempt_order, normalize_operation};
use crate::rules::Rules;

pub use candidate::Candidate;

/// What every replay report says about itself.
pub const LIMIT: &str = "The replay reuses the observed outcomes and durations: it cannot know how the dependency would have answered under the load the candidate changes. Attempts past the observed ones repeat the last observed one and are counted as extrapolated; a success that needed a retry the candidate drops becomes the failure before it.";

/// The observed operations, as trees ready to replay, in operation-key order.
pub struct Prepared {
    /// Index of each operation in the ingested operation table.
    pub ops: Vec<u32>,
    pub observed: Vec<engine::Observed>,
    pub trace_end_ms: Millis,
}

/// Normalizes and groups every operation of `ingested` (its bad events are reported by the
/// observed run's analysis, not here).
pub fn prepare(ingested: &Ingested, rules: &Rules) -> Prepared {
    let events = &ingested.events;
    let trace_end_ms = trace_end(events);
    let by_operation = ByOperation::new(events, ingested.operations.len());
    let mut keyed: Vec<(crate::model::OperationKey, u32)> = (0..ingested.operations.len() as u32)
        .map(|op| (ingested.operation_key(op), op))
        .collect();
    // Key order: budgets break ties between operations by it, whatever the input order.
    keyed.sort();
    let prepared: Vec<(u32, engine::Observed)> = keyed
        .into_par_iter()
        .filter_map(|(key, op)| {
            let mut own = Vec::new();
            by_operation.sorted_events(events, op as usize, &mut own);
            let attempts = normalize_operation(&own).attempts;
            if attempts.is_empty() {
                return None;
            }
            let tree = build_tree(&attempts, rules, trace_end_ms);
            Some((
                op,
                engine::Observed {
                    key_hash: engine::key_hash(key.test_run_id.as_deref(), &key.operation_id),
                    attempts,
                    tree,
                },
            ))
        })
        .collect();
    let (ops, observed) = prepared.into_iter().unzip();
    Prepared {
        ops,
        observed,
        trace_end_ms,
    }
}

/// One operation's replay, beside its attempts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OperationNotes {
    pub op: u32,
    pub final_extrapolated: bool,
    pub budget_exhausted: bool,
    pub deadline_exhausted: bool,
}

/// The replayed run, ready for `crate::partial::analyze_attempts`.
pub struct Replay {
    /// Per operation (index into the ingested table), attempts in canonical order.
    pub operations: Vec<(u32, Vec<Attempt>)>,
    /// Parallel to `operations`.
    pub notes: Vec<OperationNotes>,
    pub counts: engine::Counts,
    /// Where unfinished replayed attempts are still active: the observed trace's end, or
    /// later when the candidate moved attempts past it.
    pub trace_end_ms: Millis,
}

/// Replays the prepared operations under `candidate`. Replayed attempts are linked to
/// their replayed parents by span IDs made for the purpose (`strings` interns them), so
/// the analysis rebuilds exactly the replayed tree whatever the new times are.
pub fn run(
    prepared: &Prepared,
    candidate: &Candidate,
    seed: u64,
    rules: &Rules,
    strings: &mut crate::model::Interner,
) -> anyhow::Result<Replay> {
    let (replayed, counts) = engine::replay(&prepared.observed, candidate, seed, rules.hops.len())?;
    let most = replayed.iter().map(|r| r.attempts.len()).max().unwrap_or(0);
    let span_ids: Vec<u32> = (0..most)
        .map(|i| strings.intern(&format!("replay-span-{i}")))
        .collect();
    let mut trace_end_ms = prepared.trace_end_ms;
    let mut operations = Vec::with_capacity(replayed.len());
    let mut notes = Vec::with_capacity(replayed.len());
    for (&op, r) in prepared.ops.iter().zip(replayed) {
        notes.push(OperationNotes {
            op,
            final_extrapolated: r.final_extrapolated,
            budget_exhausted: r.budget_exhausted,
            deadline_exhausted: r.deadline_exhausted,
        });
        let mut attempts = r.attempts;
        for (i, a) in attempts.iter_mut().enumerate() {
            a.span_id = Some(span_ids[i]);
            a.parent_id = r.parent[i].map(|p| span_ids[p as usize]);
            trace_end_ms = trace_end_ms.max(a.finish_ms.unwrap_or(a.start_ms));
        }
        attempts.sort_by(canonical_attempt_order);
        operations.push((op, attempts));
    }
    Ok(Replay {
        operations,
        notes,
        counts,
        trace_end_ms,
    })
}

//! Runs the per-operation stages (normalize → group → classify) over every operation in
//! parallel, then the one cross-operation rule (bursts), and collects per-operation results
//! and the attempt table that the summary aggregates.

use rayon::prelude::*;

use crate::burst::{find_bursts, Burst, RetryPoint};
use crate::classify::{classify, findings, operation_facts, Class, Finding, OperationFacts, Role};
use crate::config::{BadInputPolicy, Rules};
use crate::group::build_tree;
use crate::ingest::{Ingested, InputIssue};
use crate::model::{Attempt, Event, Millis, OperationKey};
use crate::normalize::{canonical_order, normalize_operation, problem_issue, Normalized};

/// Duplicate events named one by one before the rest are only counted.
const DUPLICATES_LISTED: usize = 3;

/// The result for one logical operation: the row of SPEC §4.
#[derive(Debug, Clone, PartialEq)]
pub struct OperationResult {
    pub key: OperationKey,
    pub class: Class,
    pub first_multiplying_hop: Option<u16>,
    /// Attempts per hop index.
    pub funnel: Vec<u32>,
    pub findings: Vec<Finding>,
    pub first_start_ms: Millis,
    pub last_finish_ms: Option<Millis>,
    pub overlap_ms: Millis,
}

impl OperationResult {
    pub fn total_attempts(&self) -> u64 {
        self.funnel.iter().map(|&n| u64::from(n)).sum()
    }
}

/// One row per attempt, as columns: what the per-hop aggregates are computed from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AttemptColumns {
    pub hop: Vec<u32>,
    pub duration_ms: Vec<Option<f64>>,
    pub role: Vec<Role>,
    pub success: Vec<Option<bool>>,
}

/// Everything analysed, ready to summarise and report.
#[derive(Debug)]
pub struct Analysis {
    /// Sorted by (test run, operation ID).
    pub operations: Vec<OperationResult>,
    pub attempts: AttemptColumns,
    pub bursts: Vec<Burst>,
    /// The operations of each burst, sorted, parallel to `bursts`.
    pub burst_operations: Vec<Vec<OperationKey>>,
    pub issues: Vec<InputIssue>,
    pub duplicate_events: u64,
    /// `path:line` of the first duplicates, for the message that reports them.
    pub duplicate_examples: Vec<String>,
    /// Side effects committed more than once in one line (each extra one).
    pub duplicate_effects: u64,
    /// Attempts without a finish, per hop index.
    pub unfinished_per_hop: Vec<u64>,
    /// Attempts with no upstream parent found, per hop index.
    pub orphans_per_hop: Vec<u64>,
    pub files: Vec<String>,
    pub lines_read: u64,
    pub events: u64,
}

/// One operation after the per-operation stages.
struct OperationWork {
    op: u32,
    normalized: Normalized,
    facts: OperationFacts,
}

pub fn analyze(
    mut ingested: Ingested,
    rules: &Rules,
    bad_input: BadInputPolicy,
) -> anyhow::Result<Analysis> {
    let events = std::mem::take(&mut ingested.events);
    let trace_end_ms = events
        .par_iter()
        .map(Event::latest_ms)
        .reduce(|| 0.0, Millis::max);
    let by_operation = group_by_operation(&events, ingested.operations.len());

    let mut work: Vec<OperationWork> = (0..ingested.operations.len())
        .into_par_iter()
        .map_init(Vec::new, |scratch: &mut Vec<Event>, op| {
            scratch.clear();
            let range = by_operation.offsets[op] as usize..by_operation.offsets[op + 1] as usize;
            scratch.extend(
                by_operation.order[range]
                    .iter()
                    .map(|&i| events[i as usize]),
            );
            scratch.sort_unstable_by(canonical_order);
            let normalized = normalize_operation(scratch);
            let tree = build_tree(&normalized.attempts, rules, trace_end_ms);
            let facts = operation_facts(&normalized.attempts, &tree, rules, trace_end_ms);
            OperationWork {
                op: op as u32,
                normalized,
                facts,
            }
        })
        .collect();
    let event_count = events.len() as u64;
    drop(by_operation);
    drop(events);

    let mut issues = std::mem::take(&mut ingested.issues);
    let mut problems: Vec<InputIssue> = work
        .iter_mut()
        .flat_map(|w| std::mem::take(&mut w.normalized.problems))
        .map(|(source, message)| problem_issue(&ingested.files, source, message))
        .collect();
    problems.sort_by(|a, b| (a.path.as_str(), a.line).cmp(&(b.path.as_str(), b.line)));
    if bad_input == BadInputPolicy::Strict {
        if let Some(first) = problems.first() {
            anyhow::bail!("{first}\n(stopped at the first bad line because of --strict)");
        }
    }
    issues.extend(problems);

    let bursts = detect_bursts(&work, rules);
    let mut burst_hops: Vec<(u32, u16)> = bursts
        .iter()
        .flat_map(|b| b.ops.iter().map(move |&op| (op, b.hop)))
        .collect();
    burst_hops.sort_unstable();
    burst_hops.dedup();

    let burst_operations = bursts
        .iter()
        .map(|b| {
            let mut keys: Vec<OperationKey> =
                b.ops.iter().map(|&op| ingested.operation_key(op)).collect();
            keys.sort();
            keys
        })
        .collect();
    let attempts = attempt_columns(&work);
    let mut duplicates: Vec<crate::model::SourceRef> = work
        .iter()
        .flat_map(|w| w.normalized.duplicates.iter().copied())
        .collect();
    duplicates.sort_unstable();
    let duplicate_events = duplicates.len() as u64;
    let duplicate_examples = duplicates
        .iter()
        .take(DUPLICATES_LISTED)
        .map(|&d| ingested.location(d))
        .collect();
    let hop_total = |pick: fn(&crate::classify::HopFacts) -> u32| -> Vec<u64> {
        (0..rules.hops.len())
            .map(|h| work.iter().map(|w| u64::from(pick(&w.facts.hops[h]))).sum())
            .collect()
    };
    let unfinished_per_hop = hop_total(|h| h.unfinished);
    let orphans_per_hop = hop_total(|h| h.orphans);
    let duplicate_effects = hop_total(|h| h.duplicate_effects).iter().sum();
    let mut operations: Vec<OperationResult> = work
        .par_iter()
        .map(|w| {
            let from = burst_hops.partition_point(|&(op, _)| op < w.op);
            let to = burst_hops.partition_point(|&(op, _)| op <= w.op);
            let hops_in_burst: Vec<u16> = burst_hops[from..to].iter().map(|&(_, h)| h).collect();
            OperationResult {
                key: ingested.operation_key(w.op),
                class: classify(&w.facts, !hops_in_burst.is_empty()),
                first_multiplying_hop: w.facts.first_multiplying_hop,
                funnel: w.facts.hops.iter().map(|h| h.attempts).collect(),
                findings: findings(&w.facts, &hops_in_burst),
                first_start_ms: w.facts.first_start_ms,
                last_finish_ms: w.facts.last_finish_ms,
                overlap_ms: w.facts.overlap_ms,
            }
        })
        .collect();
    // Operations whose every event was a problem have no attempts and no result.
    operations.retain(|o| o.total_attempts() > 0);
    operations.par_sort_unstable_by(|a, b| a.key.cmp(&b.key));

    Ok(Analysis {
        operations,
        attempts,
        bursts,
        burst_operations,
        issues,
        duplicate_events,
        duplicate_examples,
        duplicate_effects,
        unfinished_per_hop,
        orphans_per_hop,
        files: ingested.files,
        lines_read: ingested.lines_read,
        events: event_count,
    })
}

/// Event indexes grouped by operation (a counting sort): operation `op` owns
/// `order[offsets[op]..offsets[op + 1]]`. Cheaper than sorting 72-byte events globally.
struct ByOperation {
    offsets: Vec<u32>,
    order: Vec<u32>,
}

fn group_by_operation(events: &[Event], operations: usize) -> ByOperation {
    let mut offsets = vec![0u32; operations + 1];
    for e in events {
        offsets[e.op as usize + 1] += 1;
    }
    for i in 1..offsets.len() {
        offsets[i] += offsets[i - 1];
    }
    let mut next = offsets.clone();
    let mut order = vec![0u32; events.len()];
    for (i, e) in events.iter().enumerate() {
        let slot = &mut next[e.op as usize];
        order[*slot as usize] = i as u32;
        *slot += 1;
    }
    ByOperation { offsets, order }
}

fn detect_bursts(work: &[OperationWork], rules: &Rules) -> Vec<Burst> {
    let mut per_hop: Vec<Vec<RetryPoint>> = vec![Vec::new(); rules.hops.len()];
    for w in work {
        for r in &w.facts.retry_starts {
            per_hop[r.hop as usize].push(RetryPoint {
                start_ms: r.start_ms,
                op: w.op,
                delay_ms: r.delay_ms,
            });
        }
    }
    per_hop
        .into_par_iter()
        .enumerate()
        .flat_map_iter(|(hop, mut points)| {
            // Which retries a window holds depends on start times alone, so the tie-break
            // by operation index cannot change a result.
            points.sort_by(|a, b| a.start_ms.total_cmp(&b.start_ms).then(a.op.cmp(&b.op)));
            find_bursts(hop as u16, &points, rules.burst)
        })
        .collect()
}

fn attempt_columns(work: &[OperationWork]) -> AttemptColumns {
    let mut cols = AttemptColumns::default();
    for w in work {
        for (a, role) in w.normalized.attempts.iter().zip(&w.facts.roles) {
            push_attempt(&mut cols, a, *role);
        }
    }
    cols
}

fn push_attempt(cols: &mut AttemptColumns, a: &Attempt, role: Role) {
    cols.hop.push(u32::from(a.hop));
    cols.duration_ms.push(a.duration_ms());
    cols.role.push(role);
    cols.success.push(a.outcome.map(|o| o.is_success()));
}

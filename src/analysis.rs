//! Runs the per-operation stages (normalize → group → classify) over every operation in
//! parallel, then the one cross-operation rule (bursts), and collects per-operation results
//! and the attempt table that the summary aggregates. The attempts themselves are kept only
//! for the few operations a report draws ([`Keep`]): memory stays bounded by those.

use rayon::prelude::*;

use crate::burst::{find_bursts, Burst, RetryPoint};
use crate::classify::{classify, findings, operation_facts, Class, Finding, OperationFacts, Role};
use crate::config::{BadInputPolicy, Rules};
use crate::group::{build_tree, Tree};
use crate::ingest::{Ingested, InputIssue};
use crate::model::{Attempt, Event, Millis, OperationKey, Timing};
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

/// The order of the worst operations: most attempts first, then the longest overlap, then
/// the operation key. The summary's `worst_operations` and the kept timelines both use it.
pub fn worst_first(a: &OperationResult, b: &OperationResult) -> std::cmp::Ordering {
    b.total_attempts()
        .cmp(&a.total_attempts())
        .then(b.overlap_ms.total_cmp(&a.overlap_ms))
        .then(a.key.cmp(&b.key))
}

/// Which operations keep their attempts after the analysis, for timelines and `show`.
#[derive(Debug, Clone, PartialEq)]
pub enum Keep {
    /// The `n` worst operations, in [`worst_first`] order.
    Worst(usize),
    /// These operations, by index into the ingested operation table, in this order.
    Operations(Vec<u32>),
}

/// One operation whose attempts were kept: what its timeline is drawn from.
#[derive(Debug, Clone)]
pub struct KeptOperation {
    /// Index into the ingested operation table (what [`Burst::ops`] holds).
    pub op: u32,
    pub result: OperationResult,
    /// In canonical order: by hop, then start.
    pub attempts: Vec<Attempt>,
    pub tree: Tree,
    /// Parallel to `attempts`.
    pub roles: Vec<Role>,
    /// Each attempt's `target`, as read; parallel to `attempts`.
    pub targets: Vec<Option<Box<str>>>,
    /// Each attempt's `message_id`, as read; parallel to `attempts`.
    pub message_ids: Vec<Option<Box<str>>>,
}

/// One row per attempt, as columns: what the per-hop aggregates are computed from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AttemptColumns {
    pub hop: Vec<u32>,
    pub start_ms: Vec<Millis>,
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
    /// The latest time anywhere in the input: where unfinished attempts are still active.
    pub trace_end_ms: Millis,
    /// The operations asked for with [`Keep`], with their attempts.
    pub kept: Vec<KeptOperation>,
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
    keep: &Keep,
) -> anyhow::Result<Analysis> {
    let mut events = std::mem::take(&mut ingested.events);
    events.par_sort_unstable_by(canonical_order);
    let trace_end_ms = events
        .par_iter()
        .map(latest_time)
        .reduce(|| 0.0, Millis::max);

    let slices: Vec<&[Event]> = events.chunk_by(|a, b| a.op == b.op).collect();
    let mut work: Vec<OperationWork> = slices
        .into_par_iter()
        .map(|slice| {
            let normalized = normalize_operation(slice);
            let tree = build_tree(&normalized.attempts, rules, trace_end_ms);
            let facts = operation_facts(&normalized.attempts, &tree, rules, trace_end_ms);
            OperationWork {
                op: slice[0].op,
                normalized,
                facts,
            }
        })
        .collect();

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
    let kept = keep_operations(&work, &operations, keep, rules, trace_end_ms, &ingested);
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
        events: events.len() as u64,
        trace_end_ms,
        kept,
    })
}

/// Copies out the attempts of the operations `keep` asks for. `operations` is parallel to
/// `work`; the tree of each is built again, which is cheaper than keeping every tree.
fn keep_operations(
    work: &[OperationWork],
    operations: &[OperationResult],
    keep: &Keep,
    rules: &Rules,
    trace_end_ms: Millis,
    ingested: &Ingested,
) -> Vec<KeptOperation> {
    let chosen: Vec<usize> = match keep {
        Keep::Worst(n) => {
            let mut all: Vec<usize> = (0..work.len())
                .filter(|&i| operations[i].total_attempts() > 0)
                .collect();
            let by_worst = |&a: &usize, &b: &usize| worst_first(&operations[a], &operations[b]);
            if *n < all.len() {
                if *n == 0 {
                    return Vec::new();
                }
                all.select_nth_unstable_by(*n - 1, by_worst);
                all.truncate(*n);
            }
            all.sort_by(by_worst);
            all
        }
        Keep::Operations(ops) => ops
            .iter()
            .filter_map(|op| work.binary_search_by_key(op, |w| w.op).ok())
            .filter(|&i| operations[i].total_attempts() > 0)
            .collect(),
    };
    let resolve = |sym: Option<u32>| sym.map(|s| ingested.strings.resolve(s).into());
    chosen
        .into_iter()
        .map(|i| {
            let w = &work[i];
            let attempts = w.normalized.attempts.clone();
            KeptOperation {
                op: w.op,
                result: operations[i].clone(),
                tree: build_tree(&attempts, rules, trace_end_ms),
                roles: w.facts.roles.clone(),
                targets: attempts.iter().map(|a| resolve(a.target)).collect(),
                message_ids: attempts.iter().map(|a| resolve(a.message_id)).collect(),
                attempts,
            }
        })
        .collect()
}

fn latest_time(e: &Event) -> Millis {
    match e.timing {
        Timing::Record {
            start_ms,
            finish_ms,
        } => finish_ms.or(start_ms).unwrap_or(0.0),
        Timing::Point { at_ms, .. } => at_ms,
    }
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
    cols.start_ms.push(a.start_ms);
    cols.duration_ms.push(a.duration_ms());
    cols.role.push(role);
    cols.success.push(a.outcome.map(|o| o.is_success()));
}

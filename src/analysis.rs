//! Runs the per-operation stages (normalize → group → classify) over every operation in
//! parallel, then the one cross-operation rule (bursts), and collects per-operation results
//! and the attempt table that the summary aggregates. The attempts themselves are kept only
//! for the few operations a report draws ([`Keep`]): memory stays bounded by those.

use rayon::prelude::*;

use crate::burst::{find_bursts, Burst, RetryPoint};
use crate::classify::{classify, findings, operation_facts, Class, Finding, FindingKind, Role};
use crate::diagnostics::{BadInputPolicy, Diagnostics};
use crate::group::{build_tree, Parent, Tree};
use crate::ingest::Ingested;
use crate::model::{Attempt, Event, Millis, OperationKey, SourceRef};
use crate::normalize::{normalize_operation, ByOperation};
use crate::rules::Rules;

/// Duplicate events named one by one before the rest are only counted.
const DUPLICATES_LISTED: usize = 3;

/// The result for one logical operation: the row of docs/output.md.
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
    /// How the logical request ended for its caller: a replay or a diff compares it.
    pub final_outcome: FinalOutcome,
}

/// How a logical operation ended, judged by the last attempt of each line at its first hop
/// (what the user's request got back).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FinalOutcome {
    Success,
    Failure,
    /// No outcome was logged for a last attempt (or it was still in flight).
    Unknown,
}

impl FinalOutcome {
    /// Failure if any first-hop line ended in a failure; success if all ended in success.
    pub fn of(attempts: &[Attempt], tree: &Tree) -> FinalOutcome {
        let mut all_success = true;
        for line in tree.lines.iter().filter(|l| l.parent == Parent::Request) {
            let last = line.attempts.last().map(|&i| attempts[i as usize].outcome);
            match last.flatten() {
                Some(o) if o.is_success() => {}
                Some(_) => return FinalOutcome::Failure,
                None => all_success = false,
            }
        }
        if all_success {
            FinalOutcome::Success
        } else {
            FinalOutcome::Unknown
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            FinalOutcome::Success => "success",
            FinalOutcome::Failure => "failure",
            FinalOutcome::Unknown => "unknown",
        }
    }
}

impl OperationResult {
    pub fn total_attempts(&self) -> u64 {
        self.funnel.iter().map(|&n| u64::from(n)).sum()
    }
}

/// The order of the worst operations: most attempts first, then the longest overlap, then
/// the operation key (asked for only on a tie). The summary's `worst_operations` and the
/// kept timelines (which the HTML page links to by position) both sort by it.
fn worst_order<K: Ord>(
    (a_attempts, a_overlap_ms): (u64, Millis),
    (b_attempts, b_overlap_ms): (u64, Millis),
    keys: impl FnOnce() -> (K, K),
) -> std::cmp::Ordering {
    b_attempts
        .cmp(&a_attempts)
        .then(b_overlap_ms.total_cmp(&a_overlap_ms))
        .then_with(|| {
            let (a, b) = keys();
            a.cmp(&b)
        })
}

/// [`worst_order`] of two results.
pub fn worst_first(a: &OperationResult, b: &OperationResult) -> std::cmp::Ordering {
    worst_order(
        (a.total_attempts(), a.overlap_ms),
        (b.total_attempts(), b.overlap_ms),
        || (&a.key, &b.key),
    )
}

/// Which operations keep their attempts after the analysis, for timelines and `show`.
#[derive(Debug, Clone, PartialEq)]
pub enum Keep {
    /// The `n` worst operations, in [`worst_first`] order.
    Worst(usize),
    /// These operations, by index into the ingested operation table, in this order.
    Operations(Vec<u32>),
    /// The `n` worst operations, then these ones too (a replay draws its own worst
    /// operations and the observed run's worst ones, to compare them).
    WorstAnd(usize, Vec<u32>),
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

/// One worker's attempt rows, as columns: moved into the [`AttemptTable`] without a copy.
#[derive(Debug, Clone, Default, PartialEq)]
struct AttemptColumns {
    hop: Vec<u32>,
    start_ms: Vec<Millis>,
    /// NaN for an unfinished attempt.
    duration_ms: Vec<f64>,
    /// [`ROLE_ORIGINAL`], [`ROLE_RETRY`] or [`ROLE_REDELIVERY`].
    role: Vec<u32>,
    success: Vec<Option<bool>>,
}

pub const ROLE_ORIGINAL: u32 = Role::Original as u32;
pub const ROLE_RETRY: u32 = Role::Retry as u32;
pub const ROLE_REDELIVERY: u32 = Role::Redelivery as u32;

/// The attempt table: one row per attempt (hop, start_ms, duration_ms with NaN for
/// unfinished attempts, role, success), as a polars frame made of the workers' columns
/// without copying them. The summary's per-hop aggregates are computed on it.
#[derive(Debug, Clone, Default)]
pub struct AttemptTable {
    pub frame: polars::prelude::DataFrame,
}

impl AttemptTable {
    pub fn len(&self) -> usize {
        self.frame.height()
    }

    /// (hop, start_ms, role) of every attempt.
    pub fn rows(&self) -> impl Iterator<Item = (u32, Millis, Role)> + '_ {
        let column = |name: &str| self.frame.column(name).expect("attempt table column");
        let hop = column("hop").u32().expect("u32 hop");
        let start = column("start_ms").f64().expect("f64 start");
        let role = column("role").u32().expect("u32 role");
        hop.into_no_null_iter()
            .zip(start.into_no_null_iter())
            .zip(role.into_no_null_iter())
            .map(|((h, s), r)| (h, s, Role::ALL[r as usize]))
    }

    fn from_parts(parts: Vec<AttemptColumns>) -> polars::prelude::PolarsResult<AttemptTable> {
        use polars::prelude::*;
        let mut frame: Option<DataFrame> = None;
        for part in parts {
            let height = part.hop.len();
            let chunk = DataFrame::new(
                height,
                vec![
                    UInt32Chunked::from_vec("hop".into(), part.hop).into_column(),
                    Float64Chunked::from_vec("start_ms".into(), part.start_ms).into_column(),
                    Float64Chunked::from_vec("duration_ms".into(), part.duration_ms).into_column(),
                    UInt32Chunked::from_vec("role".into(), part.role).into_column(),
                    BooleanChunked::from_iter_options("success".into(), part.success.into_iter())
                        .into_column(),
                ],
            )?;
            match frame.as_mut() {
                // Appends the chunks by reference: no row is copied.
                Some(f) => {
                    f.vstack_mut(&chunk)?;
                }
                None => frame = Some(chunk),
            }
        }
        Ok(AttemptTable {
            frame: frame.unwrap_or_else(AttemptTable::empty_frame),
        })
    }

    fn empty_frame() -> polars::prelude::DataFrame {
        use polars::prelude::*;
        DataFrame::new(
            0,
            vec![
                UInt32Chunked::from_vec("hop".into(), vec![]).into_column(),
                Float64Chunked::from_vec("start_ms".into(), vec![]).into_column(),
                Float64Chunked::from_vec("duration_ms".into(), vec![]).into_column(),
                UInt32Chunked::from_vec("role".into(), vec![]).into_column(),
                BooleanChunked::from_iter_options("success".into(), std::iter::empty())
                    .into_column(),
            ],
        )
        .expect("an empty frame of equal columns")
    }
}

/// Everything analysed, ready to summarise and report.
#[derive(Debug)]
pub struct Analysis {
    /// Sorted by (test run, operation ID).
    pub operations: Vec<OperationResult>,
    pub attempts: AttemptTable,
    pub bursts: Vec<Burst>,
    /// The operations of each burst, sorted, parallel to `bursts`.
    pub burst_operations: Vec<Vec<OperationKey>>,
    /// Every bad line: of the input, and the events normalize could not use.
    pub diagnostics: Diagnostics,
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

/// What the per-operation stages keep of one operation: everything its result needs,
/// with the class decided both ways because bursts are only known once all operations
/// are done. Its attempts and tree are dropped as soon as this is made.
struct Pending {
    op: u32,
    class_without_burst: Class,
    class_in_burst: Class,
    first_multiplying_hop: Option<u16>,
    funnel: Vec<u32>,
    findings: Vec<Finding>,
    first_start_ms: Millis,
    last_finish_ms: Option<Millis>,
    overlap_ms: Millis,
    final_outcome: FinalOutcome,
}

/// What the per-operation pass accumulates, per worker, then concatenated in order.
#[derive(Default)]
struct Pass {
    pending: Vec<Pending>,
    attempts: AttemptColumns,
    retries: Vec<(u16, RetryPoint)>,
    duplicates: Vec<SourceRef>,
    problems: Vec<(SourceRef, String)>,
    unfinished_per_hop: Vec<u64>,
    orphans_per_hop: Vec<u64>,
    duplicate_effects: u64,
    /// Reused between operations: their events, gathered and sorted.
    scratch: Vec<Event>,
}

impl Pass {
    /// Concatenates the workers' passes in order, each list allocated once at its final
    /// size. The attempt columns are not copied: each worker's become chunks of the table.
    fn concat(parts: Vec<Pass>) -> (Pass, Vec<AttemptColumns>) {
        let mut out = Pass::default();
        out.pending
            .reserve_exact(parts.iter().map(|p| p.pending.len()).sum());
        out.retries
            .reserve_exact(parts.iter().map(|p| p.retries.len()).sum());
        let mut columns = Vec::with_capacity(parts.len());
        for mut part in parts {
            out.pending.append(&mut part.pending);
            columns.push(std::mem::take(&mut part.attempts));
            out.retries.append(&mut part.retries);
            out.duplicates.append(&mut part.duplicates);
            out.problems.append(&mut part.problems);
            add_counts(&mut out.unfinished_per_hop, &part.unfinished_per_hop);
            add_counts(&mut out.orphans_per_hop, &part.orphans_per_hop);
            out.duplicate_effects += part.duplicate_effects;
        }
        (out, columns)
    }

    /// Runs normalize → group → classify on one operation and keeps what is needed.
    /// `events`: the operation's events in canonical order.
    fn add_operation(&mut self, op: u32, events: &[Event], rules: &Rules, trace_end_ms: Millis) {
        let mut normalized = normalize_operation(events);
        self.duplicates.append(&mut normalized.duplicates);
        self.problems.append(&mut normalized.problems);
        self.add_attempts(op, &normalized.attempts, rules, trace_end_ms);
    }

    /// Runs group → classify on one operation's attempts (in canonical order).
    fn add_attempts(&mut self, op: u32, attempts: &[Attempt], rules: &Rules, trace_end_ms: Millis) {
        if attempts.is_empty() {
            return; // every event of it was a problem: no operation to report
        }
        let tree = build_tree(attempts, rules, trace_end_ms);
        let facts = operation_facts(attempts, &tree, rules, trace_end_ms);
        for (a, role) in attempts.iter().zip(&facts.roles) {
            self.attempts.push(a, *role);
        }
        self.retries.extend(facts.retry_starts.iter().map(|r| {
            (
                r.hop,
                RetryPoint {
                    start_ms: r.start_ms,
                    op,
                    delay_ms: r.delay_ms,
                },
            )
        }));
        let hops = rules.hops.len();
        self.unfinished_per_hop.resize(hops, 0);
        self.orphans_per_hop.resize(hops, 0);
        for (h, f) in facts.hops.iter().enumerate() {
            self.unfinished_per_hop[h] += u64::from(f.unfinished);
            self.orphans_per_hop[h] += u64::from(f.orphans);
            self.duplicate_effects += u64::from(f.duplicate_effects);
        }
        self.pending.push(Pending {
            op,
            class_without_burst: classify(&facts, false),
            class_in_burst: classify(&facts, true),
            first_multiplying_hop: facts.first_multiplying_hop,
            funnel: facts.hops.iter().map(|h| h.attempts).collect(),
            findings: findings(&facts, &[]),
            first_start_ms: facts.first_start_ms,
            last_finish_ms: facts.last_finish_ms,
            overlap_ms: facts.overlap_ms,
            final_outcome: FinalOutcome::of(attempts, &tree),
        });
    }
}

fn add_counts(into: &mut Vec<u64>, from: &[u64]) {
    if into.len() < from.len() {
        into.resize(from.len(), 0);
    }
    for (a, b) in into.iter_mut().zip(from) {
        *a += b;
    }
}

pub fn analyze(mut ingested: Ingested, rules: &Rules, keep: &Keep) -> anyhow::Result<Analysis> {
    analyze_in_place(&mut ingested, rules, keep)
}

/// [`analyze`], leaving the operation table and strings in `ingested` for a second analysis
/// of the same operations (a replay). Its events and diagnostics are taken.
pub fn analyze_in_place(
    ingested: &mut Ingested,
    rules: &Rules,
    keep: &Keep,
) -> anyhow::Result<Analysis> {
    let events = std::mem::take(&mut ingested.events);
    let event_count = events.len() as u64;
    // Under `--partition K/N` the other partitions' events count too: the trace end is
    // the whole input's, so every row is the one a run over all operations gives.
    let trace_end_ms = trace_end(&events).max(ingested.latest_elsewhere_ms.unwrap_or(0.0));
    let by_operation = ByOperation::new(&events, ingested.operations.len());
    // A few dozen workers' results: each becomes one chunk of the attempt table.
    let min_ops_per_worker = (ingested.operations.len() / 64).max(1024);
    let pass = (0..ingested.operations.len())
        .into_par_iter()
        .with_min_len(min_ops_per_worker)
        .fold(Pass::default, |mut pass, op| {
            let mut scratch = std::mem::take(&mut pass.scratch);
            by_operation.sorted_events(&events, op, &mut scratch);
            pass.add_operation(op as u32, &scratch, rules, trace_end_ms);
            pass.scratch = scratch;
            pass
        })
        .collect::<Vec<Pass>>();
    crate::profile::note("per-operation pass");
    let (mut pass, attempt_columns) = Pass::concat(pass);
    crate::profile::note("concat");
    // The operations a report draws run the per-operation stages once more, while their
    // events are at hand: cheaper than keeping every operation's attempts and tree.
    let chosen = choose_kept(&pass.pending, keep, ingested);
    let kept_work: Vec<(u32, Vec<Attempt>)> = chosen
        .iter()
        .map(|&op| {
            let mut own = Vec::new();
            by_operation.sorted_events(&events, op as usize, &mut own);
            (op, normalize_operation(&own).attempts)
        })
        .collect();
    drop(by_operation);
    drop(events);
    crate::profile::note("events dropped");
    ingested
        .diagnostics
        .bad_sources_in_file_order(&ingested.files, std::mem::take(&mut pass.problems))?;
    // Left empty: a second analysis of these operations has no bad lines of its own.
    let diagnostics = std::mem::replace(
        &mut ingested.diagnostics,
        Diagnostics::new(BadInputPolicy::Report),
    );
    finish(
        pass,
        attempt_columns,
        kept_work,
        ingested,
        rules,
        Totals {
            diagnostics,
            events: event_count,
            trace_end_ms,
        },
    )
}

/// The latest time anywhere in the events: where unfinished attempts are still active.
pub fn trace_end(events: &[Event]) -> Millis {
    events
        .par_iter()
        .map(Event::latest_ms)
        .reduce(|| 0.0, Millis::max)
}

/// Analyses attempts that were not read but made: each operation's attempts (index into
/// `ingested`'s operation table, attempts in canonical order) go through the same
/// group → classify → burst → result stages as read ones. A replay's attempts come here.
/// `events`: what the summary reports as events read; `trace_end_ms`: where unfinished
/// attempts are still active.
pub fn analyze_attempts(
    ingested: &Ingested,
    operations: &[(u32, Vec<Attempt>)],
    rules: &Rules,
    keep: &Keep,
    events: u64,
    trace_end_ms: Millis,
) -> anyhow::Result<Analysis> {
    let min_ops_per_worker = (operations.len() / 64).max(1024);
    let pass = operations
        .par_iter()
        .with_min_len(min_ops_per_worker)
        .fold(Pass::default, |mut pass, (op, attempts)| {
            pass.add_attempts(*op, attempts, rules, trace_end_ms);
            pass
        })
        .collect::<Vec<Pass>>();
    let (pass, attempt_columns) = Pass::concat(pass);
    let chosen = choose_kept(&pass.pending, keep, ingested);
    let kept_work = chosen
        .iter()
        .filter_map(|&op| {
            let (_, attempts) = operations.iter().find(|(o, _)| *o == op)?;
            Some((op, attempts.clone()))
        })
        .collect();
    finish(
        pass,
        attempt_columns,
        kept_work,
        ingested,
        rules,
        Totals {
            diagnostics: Diagnostics::new(BadInputPolicy::Report),
            events,
            trace_end_ms,
        },
    )
}

/// What the two ways into the analysis know beside the per-operation pass.
struct Totals {
    diagnostics: Diagnostics,
    events: u64,
    trace_end_ms: Millis,
}

/// The cross-operation part of the analysis: bursts, the class each operation gets once
/// bursts are known, and the kept operations' trees.
fn finish(
    pass: Pass,
    attempt_columns: Vec<AttemptColumns>,
    kept_work: Vec<(u32, Vec<Attempt>)>,
    ingested: &Ingested,
    rules: &Rules,
    totals: Totals,
) -> anyhow::Result<Analysis> {
    let Totals {
        diagnostics,
        events: event_count,
        trace_end_ms,
    } = totals;
    let attempts = AttemptTable::from_parts(attempt_columns)?;
    let Pass {
        pending,
        retries,
        mut duplicates,
        mut unfinished_per_hop,
        mut orphans_per_hop,
        duplicate_effects,
        ..
    } = pass;
    unfinished_per_hop.resize(rules.hops.len(), 0);
    orphans_per_hop.resize(rules.hops.len(), 0);

    let bursts = detect_bursts(retries, rules);
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

    duplicates.sort_unstable();
    let duplicate_examples = duplicates
        .iter()
        .take(DUPLICATES_LISTED)
        .map(|&d| ingested.location(d))
        .collect();

    let mut operations: Vec<(u32, OperationResult)> = pending
        .into_par_iter()
        .map(|p| {
            let from = burst_hops.partition_point(|&(op, _)| op < p.op);
            let to = burst_hops.partition_point(|&(op, _)| op <= p.op);
            let mut findings = p.findings;
            findings.extend(burst_hops[from..to].iter().map(|&(_, hop)| Finding {
                kind: FindingKind::Burst,
                hop,
            }));
            findings.sort_by_key(|f| (f.hop, f.kind));
            let result = OperationResult {
                key: ingested.operation_key(p.op),
                class: if from < to {
                    p.class_in_burst
                } else {
                    p.class_without_burst
                },
                first_multiplying_hop: p.first_multiplying_hop,
                funnel: p.funnel,
                findings,
                first_start_ms: p.first_start_ms,
                last_finish_ms: p.last_finish_ms,
                overlap_ms: p.overlap_ms,
                final_outcome: p.final_outcome,
            };
            (p.op, result)
        })
        .collect();
    operations.par_sort_unstable_by(|a, b| a.1.key.cmp(&b.1.key));
    let resolve = |sym: Option<u32>| sym.map(|s| ingested.strings.resolve(s).into());
    let kept = kept_work
        .into_iter()
        .filter_map(|(op, attempts)| {
            let result = operations.iter().find(|(o, _)| *o == op)?.1.clone();
            let tree = build_tree(&attempts, rules, trace_end_ms);
            let roles = operation_facts(&attempts, &tree, rules, trace_end_ms).roles;
            Some(KeptOperation {
                op,
                result,
                targets: attempts.iter().map(|a| resolve(a.target)).collect(),
                message_ids: attempts.iter().map(|a| resolve(a.message_id)).collect(),
                attempts,
                tree,
                roles,
            })
        })
        .collect();
    let operations: Vec<OperationResult> = operations.into_iter().map(|(_, r)| r).collect();
    crate::profile::note("results");

    Ok(Analysis {
        operations,
        attempts,
        bursts,
        burst_operations,
        diagnostics,
        duplicate_events: duplicates.len() as u64,
        duplicate_examples,
        duplicate_effects,
        unfinished_per_hop,
        orphans_per_hop,
        files: ingested.files.clone(),
        lines_read: ingested.lines_read,
        events: event_count,
        trace_end_ms,
        kept,
    })
}

/// The operations whose attempts to keep, by index into the operation table: the worst
/// ones in [`worst_first`] order, or the ones asked for.
fn choose_kept(pending: &[Pending], keep: &Keep, ingested: &Ingested) -> Vec<u32> {
    match keep {
        Keep::Operations(ops) => ops
            .iter()
            .copied()
            .filter(|op| pending.iter().any(|p| p.op == *op))
            .collect(),
        Keep::WorstAnd(n, also) => {
            let mut ops = choose_kept(pending, &Keep::Worst(*n), ingested);
            let extra = choose_kept(pending, &Keep::Operations(also.clone()), ingested);
            ops.extend(
                extra
                    .into_iter()
                    .filter(|op| !ops.contains(op))
                    .collect::<Vec<_>>(),
            );
            ops
        }
        Keep::Worst(0) => Vec::new(),
        Keep::Worst(n) => {
            let total = |p: &Pending| p.funnel.iter().map(|&a| u64::from(a)).sum::<u64>();
            let key = |p: &Pending| {
                let (run, id) = ingested.operations[p.op as usize];
                (
                    run.map(|r| ingested.strings.resolve(r)),
                    ingested.strings.resolve(id),
                )
            };
            let by_worst = |a: &&Pending, b: &&Pending| {
                worst_order((total(a), a.overlap_ms), (total(b), b.overlap_ms), || {
                    (key(a), key(b))
                })
            };
            let mut all: Vec<&Pending> = pending.iter().collect();
            if *n < all.len() {
                all.select_nth_unstable_by(*n - 1, by_worst);
                all.truncate(*n);
            }
            all.sort_by(by_worst);
            all.into_iter().map(|p| p.op).collect()
        }
    }
}

fn detect_bursts(retries: Vec<(u16, RetryPoint)>, rules: &Rules) -> Vec<Burst> {
    let mut per_hop: Vec<Vec<RetryPoint>> = vec![Vec::new(); rules.hops.len()];
    for (hop, point) in retries {
        per_hop[hop as usize].push(point);
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

impl AttemptColumns {
    fn push(&mut self, a: &Attempt, role: Role) {
        self.hop.push(u32::from(a.hop));
        self.start_ms.push(a.start_ms);
        self.duration_ms.push(a.duration_ms().unwrap_or(f64::NAN));
        self.role.push(role as u32);
        self.success.push(a.outcome.map(|o| o.is_success()));
    }
}

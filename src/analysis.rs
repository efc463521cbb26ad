//! Runs the per-operation stages (normalize → group → classify) over every operation of a
//! partition in parallel ([`partition_pass`]): each operation's row with its class decided
//! both ways (in a burst or not), its retry starts and its attempt statistics ([`AttemptStats`]). Crossing
//! operations (bursts, final classes) is the merge's (src/partial/, a later layer), whose
//! result is the [`Analysis`] defined here. The attempts themselves are kept only for the
//! few operations a report draws ([`Keep`]): memory stays bounded by those.

pub mod tally;

use rayon::prelude::*;

use crate::burst::{Burst, RetryPoint};
use crate::classify::{classify, findings, Class, Finding, FindingKind, OperationFacts, Role};
use crate::diagnostics::Diagnostics;
use crate::group::{Parent, Tree, TreeBuilder};
use crate::ingest::Ingested;
use crate::model::{Attempt, Event, Millis, OperationKey, SourceRef};
use crate::normalize::{normalize_operation, ByOperation, EventSorter, Normalized, Normalizer};
use crate::rules::Rules;
use crate::stats::{AttemptStats, StatsBuilder};
use tally::Tally;

/// Duplicate events named one by one before the rest are only counted.
pub const DUPLICATES_LISTED: usize = 3;

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
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
            let last = tree
                .attempts(line)
                .last()
                .map(|&i| attempts[i as usize].outcome);
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
    /// The operation's index in the merge (what [`Burst::ops`] holds).
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

/// Everything analysed, ready to summarise and report: what the merge of the partials
/// (src/partial/) makes, whether there was one partial or many.
#[derive(Debug)]
pub struct Analysis {
    /// The per-operation counts and the worst operations; the rows themselves went to the
    /// merge's [`crate::analysis::tally::RowSink`] in (test run, operation ID) order.
    pub tally: Tally,
    /// Per-hop attempt counts, latency sketches and starts over time: what the summary's
    /// per-hop numbers and the chart are computed from.
    pub stats: AttemptStats,
    pub bursts: Vec<Burst>,
    /// The first [`BURST_OPERATIONS_LISTED`] operations of each burst in key order,
    /// parallel to `bursts`.
    pub burst_operations: Vec<Vec<OperationKey>>,
    /// Distinct operations with a retry in some burst.
    pub burst_operations_total: u64,
    /// Every bad line: of the input, and the events normalize could not use.
    pub diagnostics: Diagnostics,
    /// The lines read that are not attempts.
    pub other_lines: crate::diagnostics::OtherLines,
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
    /// Set by a merge of partials that lacked some partitions (`merge --allow-missing`):
    /// every number covers only the partitions merged.
    pub incomplete: Option<Incomplete>,
}

/// A merge of `--partition` partials with some of the N missing (`merge --allow-missing`):
/// its report covers only the partitions merged, and every format says so.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Incomplete {
    /// How many partitions were merged, of `partitions`.
    pub partitions_merged: u32,
    /// N, the number of partitions the input was split into.
    pub partitions: u32,
    /// The missing ones, as `K/N`, in order.
    pub missing_partitions: Vec<String>,
}

impl Incomplete {
    /// `3 of 4 partitions, 2/4 missing`: the words every format uses.
    pub fn describe(&self) -> String {
        format!(
            "{} of {} partitions, {} missing",
            self.partitions_merged,
            self.partitions,
            self.missing_partitions.join(", ")
        )
    }
}

/// Operation IDs listed per burst before the rest are only counted.
pub const BURST_OPERATIONS_LISTED: usize = 10;

/// What the per-operation stages decide of one operation before bursts are known: the
/// class both ways (in a burst or not), because bursts need every operation's retries.
/// Its attempts and tree are dropped as soon as this is made. A row of a partial.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    pub class_without_burst: Class,
    pub class_in_burst: Class,
    pub first_multiplying_hop: Option<u16>,
    pub funnel: Vec<u32>,
    /// Every finding but the burst ones.
    pub findings: Vec<Finding>,
    pub first_start_ms: Millis,
    pub last_finish_ms: Option<Millis>,
    pub overlap_ms: Millis,
    pub final_outcome: FinalOutcome,
}

impl Pending {
    pub fn total_attempts(&self) -> u64 {
        self.funnel.iter().map(|&n| u64::from(n)).sum()
    }

    /// The operation's result once bursts are known: `burst_hops` are the hops where one of
    /// its retries lies in a burst (sorted, none when it is in no burst).
    pub fn resolve(self, key: OperationKey, burst_hops: &[u16]) -> OperationResult {
        let mut findings = self.findings;
        findings.extend(burst_hops.iter().map(|&hop| Finding {
            kind: FindingKind::Burst,
            hop,
        }));
        findings.sort_by_key(|f| (f.hop, f.kind));
        OperationResult {
            key,
            class: if burst_hops.is_empty() {
                self.class_without_burst
            } else {
                self.class_in_burst
            },
            first_multiplying_hop: self.first_multiplying_hop,
            funnel: self.funnel,
            findings,
            first_start_ms: self.first_start_ms,
            last_finish_ms: self.last_finish_ms,
            overlap_ms: self.overlap_ms,
            final_outcome: self.final_outcome,
        }
    }
}

/// What the per-operation pass gives for a set of operations, each named by an index the
/// caller chose (the ingested operation table's, or the merge's): the rows before bursts,
/// every retry start, the attempt statistics and the counts.
pub struct Pass {
    /// By operation index, in no particular order.
    pub pending: Vec<(u32, Pending)>,
    pub stats: AttemptStats,
    /// (hop, retry start) with the operation index in the point.
    pub retries: Vec<(u16, RetryPoint)>,
    pub duplicates: Vec<SourceRef>,
    pub problems: Vec<(SourceRef, String)>,
    pub unfinished_per_hop: Vec<u64>,
    pub orphans_per_hop: Vec<u64>,
    pub duplicate_effects: u64,
    /// Operations set aside with their attempts because they have an unfinished attempt
    /// and the trace end is not known yet (see [`TraceEnd::Local`]).
    pub deferred: Vec<(u32, Vec<Attempt>)>,
}

/// One worker's share of a [`Pass`].
struct Worker {
    /// All but the statistics, which are `stats`'.
    pass: Pass,
    stats: StatsBuilder,
    // Each operation's steps, in the memory of the operation before: nothing of them is
    // allocated per operation.
    /// Its events, gathered and sorted by `sorter`.
    scratch: Vec<Event>,
    sorter: EventSorter,
    /// Its attempts, normalized by `normalizer`.
    normalized: Normalized,
    normalizer: Normalizer,
    /// Its tree, built by `trees`.
    tree: Tree,
    trees: TreeBuilder,
    /// Its facts.
    facts: OperationFacts,
}

/// Whether the partition knows where the whole trace ends. Unfinished attempts are active
/// until the trace end, so it decides the overlap of operations with an unfinished attempt
/// (and nothing else): a partition that only knows its own end sets those operations
/// aside, with their attempts, for the merge to analyse with the end of all the input.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TraceEnd {
    /// The end of all the input (one machine, or every worker reading everything).
    Global(Millis),
    /// The end of this partition's input only.
    Local(Millis),
}

impl TraceEnd {
    pub fn ms(self) -> Millis {
        match self {
            TraceEnd::Global(ms) | TraceEnd::Local(ms) => ms,
        }
    }
}

impl Pass {
    fn new(hops: usize) -> Pass {
        Pass {
            pending: Vec::new(),
            stats: AttemptStats::new(hops),
            retries: Vec::new(),
            duplicates: Vec::new(),
            problems: Vec::new(),
            unfinished_per_hop: vec![0; hops],
            orphans_per_hop: vec![0; hops],
            duplicate_effects: 0,
            deferred: Vec::new(),
        }
    }

    /// Concatenates the workers' passes in order, each list allocated once at its final
    /// size, and merges their statistics, the two at once (each takes one core).
    fn concat(parts: Vec<Worker>, hops: usize) -> Pass {
        let (passes, stats): (Vec<Pass>, Vec<StatsBuilder>) =
            parts.into_iter().map(|w| (w.pass, w.stats)).unzip();
        let (mut out, stats) = rayon::join(
            || {
                let mut out = Pass::new(hops);
                out.pending
                    .reserve_exact(passes.iter().map(|p| p.pending.len()).sum());
                out.retries
                    .reserve_exact(passes.iter().map(|p| p.retries.len()).sum());
                for mut pass in passes {
                    out.pending.append(&mut pass.pending);
                    out.retries.append(&mut pass.retries);
                    out.duplicates.append(&mut pass.duplicates);
                    out.problems.append(&mut pass.problems);
                    out.deferred.append(&mut pass.deferred);
                    add_counts(&mut out.unfinished_per_hop, &pass.unfinished_per_hop);
                    add_counts(&mut out.orphans_per_hop, &pass.orphans_per_hop);
                    out.duplicate_effects += pass.duplicate_effects;
                }
                out
            },
            || StatsBuilder::finish(stats, hops),
        );
        out.stats = stats;
        out
    }
}

impl Worker {
    /// `operations`: how many it will see, reserved (see [`in_pieces`]).
    fn new(hops: usize, operations: usize) -> Worker {
        let mut pass = Pass::new(hops);
        pass.pending.reserve(operations);
        Worker {
            pass,
            stats: StatsBuilder::new(hops),
            scratch: Vec::new(),
            sorter: EventSorter::default(),
            normalized: Normalized::default(),
            normalizer: Normalizer::default(),
            tree: Tree::default(),
            trees: TreeBuilder::default(),
            facts: OperationFacts::default(),
        }
    }

    /// Runs normalize → group → classify on one operation and keeps what is needed.
    /// `events`: the operation's events in canonical order.
    fn add_operation(&mut self, op: u32, events: &[Event], rules: &Rules, trace_end: TraceEnd) {
        // Taken for the call, put back after: `add_attempts` borrows the whole worker.
        let mut normalized = std::mem::take(&mut self.normalized);
        self.normalizer.normalize(events, &mut normalized);
        self.pass.duplicates.append(&mut normalized.duplicates);
        self.pass.problems.append(&mut normalized.problems);
        let unfinished = normalized.attempts.iter().any(|a| a.finish_ms.is_none());
        if unfinished && matches!(trace_end, TraceEnd::Local(_)) {
            self.pass.deferred.push((op, normalized.attempts.clone()));
        } else {
            self.add_attempts(op, &normalized.attempts, rules, trace_end.ms());
        }
        self.normalized = normalized;
    }

    /// Runs group → classify on one operation's attempts (in canonical order).
    fn add_attempts(&mut self, op: u32, attempts: &[Attempt], rules: &Rules, trace_end_ms: Millis) {
        if attempts.is_empty() {
            return; // every event of it was a problem: no operation to report
        }
        let pass = &mut self.pass;
        self.trees
            .build(&mut self.tree, attempts, rules, trace_end_ms);
        let tree = &self.tree;
        self.facts.fill(attempts, tree, rules, trace_end_ms);
        let facts = &self.facts;
        for (a, role) in attempts.iter().zip(&facts.roles) {
            self.stats.add(a, *role);
        }
        self.stats.add_operation_start(facts.first_start_ms);
        pass.retries.extend(
            facts
                .retry_starts
                .iter()
                .map(|r| (r.hop, RetryPoint::new(r.start_ms, op, r.delay_ms))),
        );
        for (h, f) in facts.hops.iter().enumerate() {
            pass.unfinished_per_hop[h] += u64::from(f.unfinished);
            pass.orphans_per_hop[h] += u64::from(f.orphans);
            pass.duplicate_effects += u64::from(f.duplicate_effects);
        }
        pass.pending.push((
            op,
            Pending {
                class_without_burst: classify(facts, false),
                class_in_burst: classify(facts, true),
                first_multiplying_hop: facts.first_multiplying_hop,
                funnel: facts.hops.iter().map(|h| h.attempts).collect(),
                findings: findings(facts, &[]),
                first_start_ms: facts.first_start_ms,
                last_finish_ms: facts.last_finish_ms,
                overlap_ms: facts.overlap_ms,
                final_outcome: FinalOutcome::of(attempts, tree),
            },
        ));
    }
}

/// Operations a worker takes at least: each fills statistics of its own, merged at the end.
const MIN_OPS_PER_WORKER: usize = 1024;

/// Runs `each` over the operations `0..n` on every core, one worker per piece of
/// consecutive operations, the workers in order. Pieces of a size known beforehand let
/// each worker reserve its rows exactly: with rayon's `fold`, which cut the pieces itself,
/// the rows were grown by doubling (copied and faulted in again), and the worker, about
/// 500 bytes, was handed by value from one operation to the next (two copies each).
fn in_pieces(n: usize, hops: usize, each: impl Fn(&mut Worker, usize) + Sync) -> Vec<Worker> {
    // Eight pieces a core, so that stealing evens out a slow one; 64 at most.
    let per_piece = n
        .div_ceil(8 * rayon::current_num_threads())
        .max(n.div_ceil(64))
        .max(MIN_OPS_PER_WORKER);
    (0..n.div_ceil(per_piece))
        .into_par_iter()
        .map(|piece| {
            let ops = piece * per_piece..n.min((piece + 1) * per_piece);
            let mut worker = Worker::new(hops, ops.len());
            for op in ops {
                each(&mut worker, op);
            }
            worker
        })
        .collect()
}

pub fn add_counts(into: &mut Vec<u64>, from: &[u64]) {
    if into.len() < from.len() {
        into.resize(from.len(), 0);
    }
    for (a, b) in into.iter_mut().zip(from) {
        *a += b;
    }
}

/// The per-operation pass over one partition's events, before anything crosses
/// operations: what a partial is made of.
pub struct PartitionPass {
    /// Operation indexes are those of the ingested operation table.
    pub pass: Pass,
    /// The operations asked for with [`Keep`] (worst first, then the named ones), with
    /// their attempts; none of them is deferred.
    pub kept: Vec<KeptAttempts>,
    /// Valid events read.
    pub events: u64,
    pub trace_end: TraceEnd,
}

/// Runs the per-operation pass over every operation of `ingested` in parallel. Its events
/// are taken; the operation table and strings stay for the caller, and the bad events the
/// pass found are in `pass.problems`. `global`: this input is all the
/// input, so its latest time is the trace end (else operations with an unfinished attempt
/// are deferred).
pub fn partition_pass(
    ingested: &mut Ingested,
    rules: &Rules,
    keep: &Keep,
    global: bool,
) -> PartitionPass {
    let events = std::mem::take(&mut ingested.events);
    let event_count = events.len() as u64;
    // Under `--partition K/N` the other partitions' events count too: the trace end is
    // the whole input's, so every row is the one a run over all operations gives, and
    // nothing waits for the merge.
    let end = trace_end(&events).max(ingested.latest_elsewhere_ms.unwrap_or(0.0));
    let trace_end = if global || ingested.latest_elsewhere_ms.is_some() {
        TraceEnd::Global(end)
    } else {
        TraceEnd::Local(end)
    };
    let by_operation = ByOperation::new(&events, ingested.operations.len());
    let workers = in_pieces(ingested.operations.len(), rules.hops.len(), |worker, op| {
        let mut scratch = std::mem::take(&mut worker.scratch);
        worker
            .sorter
            .sorted_events(&by_operation, &events, op, &mut scratch);
        worker.add_operation(op as u32, &scratch, rules, trace_end);
        worker.scratch = scratch;
    });
    crate::profile::note("per-operation pass");
    let pass = Pass::concat(workers, rules.hops.len());
    crate::profile::note("concat");
    // The operations a report draws run the per-operation stages once more, while their
    // events are at hand: cheaper than keeping every operation's attempts and tree.
    let kept = choose_kept(&pass.pending, keep, ingested, |op| {
        let mut own = Vec::new();
        by_operation.sorted_events(&events, op as usize, &mut own);
        Some(normalize_operation(&own).attempts)
    });
    drop(by_operation);
    // Emptied, not freed: the next partition reads its events into these pages, which
    // it would otherwise fault in and zero again, page by page.
    // A caller that reads nothing more frees them (`Ingested::free_events`).
    let mut events = events;
    events.clear();
    ingested.events = events;
    crate::profile::note("events dropped");
    PartitionPass {
        pass,
        kept,
        events: event_count,
        trace_end,
    }
}

/// The latest time anywhere in the events: where unfinished attempts are still active.
pub fn trace_end(events: &[Event]) -> Millis {
    events
        .par_iter()
        .map(Event::latest_ms)
        .reduce(|| 0.0, Millis::max)
}

/// Runs group → classify over attempts that were made, not read (a replay's), or set aside
/// until the trace end was known (a partial's deferred operations): each operation, named
/// by the caller's index, with its attempts in canonical order.
pub fn attempts_pass(
    operations: &[(u32, Vec<Attempt>)],
    rules: &Rules,
    trace_end_ms: Millis,
) -> Pass {
    let workers = in_pieces(operations.len(), rules.hops.len(), |worker, i| {
        let (op, attempts) = &operations[i];
        worker.add_attempts(*op, attempts, rules, trace_end_ms);
    });
    Pass::concat(workers, rules.hops.len())
}

/// [`attempts_pass`] over a replay's attempts (indexes into `ingested`'s operation table),
/// with the operations asked for with [`Keep`].
pub fn attempts_partition_pass(
    ingested: &Ingested,
    operations: &[(u32, Vec<Attempt>)],
    rules: &Rules,
    keep: &Keep,
    events: u64,
    trace_end_ms: Millis,
) -> PartitionPass {
    let pass = attempts_pass(operations, rules, trace_end_ms);
    let kept = choose_kept(&pass.pending, keep, ingested, |op| {
        let (_, attempts) = operations.iter().find(|(o, _)| *o == op)?;
        Some(attempts.clone())
    });
    PartitionPass {
        pass,
        kept,
        events,
        trace_end: TraceEnd::Global(trace_end_ms),
    }
}

/// One operation kept with its attempts, and why.
#[derive(Debug, Clone)]
pub struct KeptAttempts {
    /// Index into the operation table.
    pub op: u32,
    /// In canonical order.
    pub attempts: Vec<Attempt>,
    /// Among this partition's worst operations (a candidate for the merge's worst ones).
    pub worst: bool,
    /// Asked for by index ([`Keep::Operations`]): kept whatever its rank.
    pub asked: bool,
}

/// How many of the worst operations a merge reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Worst {
    /// Listed in the summary (`--top`).
    pub listed: usize,
    /// Keeping their attempts (their timelines); operations a partial kept because they
    /// were asked for are kept too, after them.
    pub drawn: usize,
}

impl Keep {
    /// The worst operations a merge reports: `listed` of them, and those this keeps.
    pub fn worst(&self, listed: usize) -> Worst {
        Worst {
            listed,
            drawn: self.parts().0,
        }
    }

    /// How many worst operations, and which operations by index.
    pub fn parts(&self) -> (usize, &[u32]) {
        match self {
            Keep::Worst(n) => (*n, &[]),
            Keep::Operations(ops) => (0, ops),
            Keep::WorstAnd(n, ops) => (*n, ops),
        }
    }
}

/// The operations whose attempts to keep: the worst ones in [`worst_first`] order, then
/// the ones asked for, each with its attempts from `attempts_of`.
fn choose_kept(
    pending: &[(u32, Pending)],
    keep: &Keep,
    ingested: &Ingested,
    mut attempts_of: impl FnMut(u32) -> Option<Vec<Attempt>>,
) -> Vec<KeptAttempts> {
    let (n, asked) = keep.parts();
    let mut chosen: Vec<u32> = worst_of(pending, n, ingested);
    let worst = chosen.len();
    for &op in asked {
        if !chosen.contains(&op) && pending.iter().any(|p| p.0 == op) {
            chosen.push(op);
        }
    }
    chosen
        .into_iter()
        .enumerate()
        .filter_map(|(i, op)| {
            Some(KeptAttempts {
                op,
                attempts: attempts_of(op)?,
                worst: i < worst,
                asked: asked.contains(&op),
            })
        })
        .collect()
}

/// The `n` worst operations, by index into the operation table, in [`worst_first`] order.
fn worst_of(pending: &[(u32, Pending)], n: usize, ingested: &Ingested) -> Vec<u32> {
    if n == 0 {
        return Vec::new();
    }
    let key = |op: u32| {
        let (run, id) = ingested.operations[op as usize];
        (
            run.map(|r| ingested.strings.resolve(r)),
            ingested.strings.resolve(id),
        )
    };
    let by_worst = |a: &&(u32, Pending), b: &&(u32, Pending)| {
        worst_order(
            (a.1.total_attempts(), a.1.overlap_ms),
            (b.1.total_attempts(), b.1.overlap_ms),
            || (key(a.0), key(b.0)),
        )
    };
    // Most operations tie on the numbers (a few attempts, no overlap), and a tie compares
    // keys, two string lookups: the numbers alone find the n-th worst, and only the
    // operations no better than it are ranked by the whole order.
    let numbers = |p: &(u32, Pending)| (p.1.total_attempts(), p.1.overlap_ms);
    let by_numbers = |a: &(u64, Millis), b: &(u64, Millis)| worst_order(*a, *b, || ((), ()));
    let mut all: Vec<&(u32, Pending)> = if n < pending.len() {
        let mut values: Vec<(u64, Millis)> = pending.iter().map(numbers).collect();
        let (_, &mut cut, _) = values.select_nth_unstable_by(n - 1, by_numbers);
        pending
            .iter()
            .filter(|p| by_numbers(&numbers(p), &cut).is_le())
            .collect()
    } else {
        pending.iter().collect()
    };
    if n < all.len() {
        all.select_nth_unstable_by(n - 1, by_worst);
        all.truncate(n);
    }
    all.sort_by(by_worst);
    all.into_iter().map(|p| p.0).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The operations each worker of [`in_pieces`] was handed, in order, and the room it
    /// reserved for its rows.
    fn pieces(n: usize) -> Vec<(Vec<u32>, usize)> {
        let workers = in_pieces(n, 3, |worker, op| {
            worker.pass.deferred.push((op as u32, Vec::new()));
        });
        workers
            .into_iter()
            .map(|w| {
                let ops = w.pass.deferred.iter().map(|&(op, _)| op).collect();
                (ops, w.pass.pending.capacity())
            })
            .collect()
    }

    #[test]
    fn pieces_hand_each_operation_once_in_order_to_workers_with_room_for_their_rows() {
        for n in [0, 1, 1023, 1024, 1025, 70_001, 1_000_003] {
            let workers = pieces(n);
            let handed: Vec<u32> = workers.iter().flat_map(|(ops, _)| ops.clone()).collect();
            assert_eq!(
                handed,
                (0..n as u32).collect::<Vec<u32>>(),
                "{n} operations"
            );
            assert!(workers.len() <= 64, "{n}: {} workers", workers.len());
            for (i, (ops, room)) in workers.iter().enumerate() {
                assert!(*room >= ops.len(), "{n}: piece {i} grew its rows");
                if i + 1 < workers.len() {
                    assert!(ops.len() >= MIN_OPS_PER_WORKER, "{n}: piece {i} too small");
                }
            }
        }
    }
}

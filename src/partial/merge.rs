//! The merge: finishes the analysis from any number of partials. Bursts are found over the
//! retry starts of all of them; deferred operations are analysed with the trace end of all
//! the input; the rows come out in key order by a k-way merge of the partials' sorted rows,
//! each with its final class; the worst operations are chosen among the partials' own
//! worst ones (the worst N of all are among the worst N of each); the counts add up.

use anyhow::{bail, Context, Result};
use rayon::prelude::*;

use super::loser_tree::{code_offset, first_difference, offset_code, symbol, Coded, LoserTree};
use super::{format, OpAttempts, Partial, Retries, Row, Rows, Share};
use crate::analysis::tally::{RowSink, Tally};
use crate::analysis::{
    add_counts, attempts_pass, worst_first, Analysis, Incomplete, KeptOperation, OperationResult,
    TraceEnd, Worst, BURST_OPERATIONS_LISTED, DUPLICATES_LISTED,
};
use crate::burst::{Burst, BurstFinder, RetryPoint};
use crate::classify::operation_facts;
use crate::diagnostics::{BadInputPolicy, Diagnostics, InputIssue};
use crate::group::build_tree;
use crate::model::{Millis, OperationKey};
use crate::rules::Rules;
use crate::stats::AttemptStats;

/// Merges partials made under `rules` into the analysis of all their input. Every
/// operation's final row goes to `sink`, in key order, as it is made: the analysis keeps
/// only their counts and the worst of them.
pub fn merge(
    mut parts: Vec<Partial>,
    rules: &Rules,
    worst: Worst,
    sink: &mut dyn RowSink,
) -> Result<Analysis> {
    let Worst {
        listed,
        drawn: worst,
    } = worst;
    check_rules(&parts, rules)?;
    let trace_end_ms = trace_end(&parts)?;

    // Every row gets an index in the merge: the partials' rows in order, then the deferred
    // operations, in key order. Retry starts and kept operations name rows by it.
    let mut offsets = Vec::with_capacity(parts.len());
    let mut total: u64 = 0;
    for p in &parts {
        offsets.push(total as u32);
        total += p.rows.len() as u64;
    }
    let mut deferred: Vec<OpAttempts> = parts
        .iter_mut()
        .flat_map(|p| std::mem::take(&mut p.deferred))
        .collect();
    deferred.sort_by(|a, b| a.key.cmp(&b.key));
    if total + deferred.len() as u64 > u64::from(u32::MAX) {
        bail!(
            "the partials hold more than {} operations, more than one merge can index",
            u32::MAX
        );
    }
    if let Some(pair) = deferred.windows(2).find(|w| w[0].key == w[1].key) {
        bail!(
            "operation {} is in two partials: partials must split the input by operation (all events of an operation in one partition), see docs/scale.md",
            pair[0].key
        );
    }
    let deferred_base = total as u32;
    let deferred_ops: Vec<(u32, Vec<crate::model::Attempt>)> = deferred
        .iter()
        .enumerate()
        .map(|(j, d)| (deferred_base + j as u32, d.attempts.clone()))
        .collect();
    let mut late = attempts_pass(&deferred_ops, rules, trace_end_ms);
    drop(deferred_ops);
    late.pending.sort_by_key(|(id, _)| *id);

    // One hop at a time: a spilled run holds the retry starts of one hop, never all. The
    // deferred operations' retry starts already carry their merge indexes (offset 0).
    let late_retries = Retries::Memory(std::mem::take(&mut late.retries));
    let sources: Vec<(&Retries, u32)> = std::iter::once((&late_retries, 0))
        .chain(
            parts
                .iter()
                .map(|p| &p.retries)
                .zip(offsets.iter().copied()),
        )
        .collect();
    let hops = 0..rules.hops.len() as u16;
    let counts: Vec<usize> = hops
        .clone()
        .map(|hop| sources.iter().map(|(r, _)| r.count_at_hop(hop)).sum())
        .collect();
    // The hops side by side: each search holds a segment of its retry starts at a time,
    // never a whole hop's (see `BurstFinder`).
    // Each searching thread reads one file per source at a time.
    let buffer = format::read_buffer(sources.len() * rayon::current_num_threads());
    let bursts: Vec<Burst> = hops
        .into_par_iter()
        .map(|hop| bursts_at_hop(&sources, hop, counts[hop as usize], rules, buffer))
        .collect::<Result<Vec<Vec<Burst>>>>()?
        .into_iter()
        .flatten()
        .collect();
    drop(sources);
    drop(late_retries);
    for p in &mut parts {
        p.retries = Retries::Memory(Vec::new());
    }
    crate::profile::note("bursts");
    // (row index, hop, burst) of every retry in a burst, sorted by row index.
    let mut membership: Vec<(u32, u16, u32)> = bursts
        .iter()
        .enumerate()
        .flat_map(|(i, b)| b.ops.iter().map(move |&op| (op, b.hop, i as u32)))
        .collect();
    membership.sort_unstable();
    membership.dedup();
    let in_bursts = Membership::new(&membership);

    let kept = kept_operations(
        &parts,
        &offsets,
        (&deferred, deferred_base, &late.pending),
        worst,
        &in_bursts,
        rules,
        trace_end_ms,
    );

    // The rows, in key order, with their final class; the first operations of each burst
    // fall out of that order.
    let mut burst_operations: Vec<Vec<OperationKey>> = vec![Vec::new(); bursts.len()];
    let mut tally = Tally::new(rules.hops.len(), listed);
    let mut sources: Vec<Source> = Vec::new();
    let mut stats = AttemptStats::new(rules.hops.len());
    let buffer = format::read_buffer(parts.len());
    for (p, &offset) in parts.iter_mut().zip(&offsets) {
        let numbered = move |(i, row): (usize, Result<Row>)| row.map(|r| (r, offset + i as u32));
        sources.push(
            match std::mem::replace(&mut p.rows, Rows::Memory(Vec::new())) {
                Rows::Memory(rows) => Box::new(rows.into_iter().map(Ok).enumerate().map(numbered)),
                Rows::File(file) => Box::new(format::rows_of(&file)?.enumerate().map(numbered)),
                Rows::Spilled(spilled) => Box::new(spilled.read(buffer)?.enumerate().map(numbered)),
            },
        );
        stats
            .merge(&p.stats)
            .with_context(|| format!("the attempt statistics of {}", p.origin))?;
    }
    let late_rows: Vec<(Row, u32)> = std::mem::take(&mut late.pending)
        .into_iter()
        .map(|(id, pending)| {
            let key = deferred[(id - deferred_base) as usize].key.clone();
            (Row { key, pending }, id)
        })
        .collect();
    sources.push(Box::new(late_rows.into_iter().map(Ok)));
    stats.merge(&late.stats)?;
    // Rows are read and merged on a thread of their own while this one gives each its
    // final class, tallies and writes them: the reading thread is the busier of the two, so
    // the bursts are looked up here. Each batch goes back to that thread to be emptied there, with the
    // results made of its rows: their memory is freed by the thread that allocated it (a
    // free from another thread is the allocator's slow path), all but the findings lists a
    // burst grew here.
    std::thread::scope(|scope| -> Result<()> {
        let (batches, merged) = std::sync::mpsc::sync_channel::<Result<Vec<(Row, u32)>>>(4);
        let (done, spent) = std::sync::mpsc::channel::<Spent>();
        scope.spawn(move || {
            let mut previous: Option<OperationKey> = None;
            let sent = KWay::new(sources).and_then(|mut rows| loop {
                let mut batch = match spent.try_recv() {
                    Ok((mut used, results)) => {
                        drop(results);
                        used.clear();
                        used
                    }
                    Err(_) => Vec::with_capacity(ROWS_PER_BATCH),
                };
                while batch.len() < ROWS_PER_BATCH {
                    let Some((row, id)) = rows.next_row()? else {
                        break;
                    };
                    let before = batch.last().map(|(r, _)| &r.key).or(previous.as_ref());
                    if before == Some(&row.key) {
                        bail!(
                            "operation {} is in two partials: partials must split the input by operation (all events of an operation in one partition), see docs/scale.md",
                            row.key
                        );
                    }
                    batch.push((row, id));
                }
                previous = batch.last().map(|(r, _)| r.key.clone());
                let last = batch.len() < ROWS_PER_BATCH;
                // A send fails only when the receiving side stopped on an error of its own.
                if batches.send(Ok(batch)).is_err() || last {
                    return Ok(());
                }
            });
            if let Err(e) = sent {
                let _ = batches.send(Err(e));
            }
        });
        for batch in merged {
            let mut batch = batch?;
            let mut results = Vec::with_capacity(batch.len());
            for (row, id) in batch.drain(..) {
                let members = in_bursts.of(id);
                let result = row.pending.resolve(row.key, &hops_of(members));
                for &(_, _, b) in members {
                    let list = &mut burst_operations[b as usize];
                    if list.len() < BURST_OPERATIONS_LISTED && list.last() != Some(&result.key) {
                        list.push(result.key.clone());
                    }
                }
                tally.add(&result);
                sink.row(&result)?;
                results.push(result);
            }
            let _ = done.send((batch, results));
        }
        Ok(())
    })?;
    tally.finish();
    crate::profile::note("results");

    let mut burst_ids: Vec<u32> = membership.iter().map(|m| m.0).collect();
    burst_ids.dedup();
    let mut input = merge_input(&parts, &late)?;
    input.unfinished_per_hop.resize(rules.hops.len(), 0);
    input.orphans_per_hop.resize(rules.hops.len(), 0);
    Ok(Analysis {
        tally,
        stats,
        bursts,
        burst_operations,
        burst_operations_total: burst_ids.len() as u64,
        diagnostics: input.diagnostics,
        other_lines: input.other_lines,
        duplicate_events: input.duplicate_events,
        duplicate_examples: input.duplicate_examples,
        duplicate_effects: input.duplicate_effects,
        unfinished_per_hop: input.unfinished_per_hop,
        orphans_per_hop: input.orphans_per_hop,
        files: input.files,
        lines_read: input.lines,
        events: input.events,
        trace_end_ms,
        kept,
        incomplete: None,
    })
}

/// The bursts at `hop`, from the retry starts of every source (`count` of them) with their
/// merge indexes: each source gives its own in [`RetryPoint::order`] (a spilled partition's
/// file was written so, a held partial's are sorted here), and a loser tree takes the least
/// of their heads, so the search reads them in that order without holding them all.
fn bursts_at_hop(
    sources: &[(&Retries, u32)],
    hop: u16,
    count: usize,
    rules: &Rules,
    buffer: usize,
) -> Result<Vec<Burst>> {
    if count >= u32::MAX as usize {
        bail!(
            "{count} retry starts at hop '{}', more than the burst rule can index ({}): analyse the input in parts (by test run or by time)",
            rules.hops.name(hop),
            u32::MAX - 1
        );
    }
    let mut streams = sources
        .iter()
        .map(|&(retries, offset)| retries.at_hop_in_order(hop, offset, buffer))
        .collect::<Result<Vec<_>>>()?;
    let heads = streams
        .iter_mut()
        .map(|stream| Ok(stream.next().transpose()?.map(InOrder)))
        .collect::<Result<Vec<_>>>()?;
    let mut heads = LoserTree::new(heads);
    let mut finder = BurstFinder::new(hop, rules.burst);
    while let Some(s) = heads.winner() {
        let next = streams[s].next().transpose()?.map(InOrder);
        if let Some(InOrder(point)) = heads.replace_winner(next) {
            finder.push(point);
        }
    }
    Ok(finder.finish())
}

/// A retry start, ordered as the burst search reads them ([`RetryPoint::order`]).
struct InOrder(RetryPoint);

impl PartialEq for InOrder {
    fn eq(&self, other: &InOrder) -> bool {
        self.cmp(other).is_eq()
    }
}
impl Eq for InOrder {}
impl PartialOrd for InOrder {
    fn partial_cmp(&self, other: &InOrder) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for InOrder {
    fn cmp(&self, other: &InOrder) -> std::cmp::Ordering {
        self.0.order(&other.0)
    }
}
/// Played by `Ord` alone: a retry start's order is that of numbers.
impl Coded for InOrder {}

/// Checks that `parts`, read from files, are one set: either partials of whole inputs, or
/// the `--partition K/N` partials of one input, each of the N once, all with the same N and
/// read from the same input (their [`super::SourceFingerprint`]). A partition missing is
/// refused unless `allow_missing`, which returns what is missing for the report to say.
/// Partials of whole inputs cannot be checked for completeness (nothing says how many
/// inputs there were); their operations are still checked never to meet (see [`merge`]).
pub fn check_set(parts: &[Partial], allow_missing: bool) -> Result<Option<Incomplete>> {
    let shares: Vec<(&Partial, crate::model::Partition)> = parts
        .iter()
        .filter_map(|p| match p.share {
            Share::Partition(k) => Some((p, k)),
            Share::All => None,
        })
        .collect();
    let Some(&(first, first_share)) = shares.first() else {
        return Ok(None);
    };
    if let Some(whole) = parts.iter().find(|p| p.share == Share::All) {
        bail!(
            "'{}' holds all the operations of its input, but '{}' holds partition {} of its: merge either the partitions of one input (analyze --partition K/N) or partials of whole inputs, not both",
            whole.origin,
            first.origin,
            first.share
        );
    }
    let n = first_share.count;
    for &(p, share) in &shares[1..] {
        if share.count != n {
            bail!(
                "'{}' is partition {} but '{}' is partition {}: the partials of one set are made with the same N (--partition K/{n} for every K from 0 to {})",
                first.origin,
                first.share,
                p.origin,
                p.share,
                n - 1
            );
        }
        if p.source != first.source {
            bail!(
                "'{}' (partition {}) read other input than '{}' (partition {}): {} against {}; every partition of one set must read the same input (another day's log, or a file still being written?)",
                p.origin,
                p.share,
                first.origin,
                first.share,
                p.source,
                first.source
            );
        }
    }
    let mut holder: Vec<Option<&Partial>> = vec![None; n as usize];
    for &(p, share) in &shares {
        let slot = &mut holder[share.index as usize];
        if let Some(before) = slot {
            bail!(
                "partition {} is given twice, in '{}' and in '{}': its operations would count twice; give each partition's partial once",
                p.share,
                before.origin,
                p.origin
            );
        }
        *slot = Some(p);
    }
    let missing: Vec<String> = (0..n)
        .filter(|&k| holder[k as usize].is_none())
        .map(|k| format!("{k}/{n}"))
        .collect();
    if missing.is_empty() {
        return Ok(None);
    }
    let merged = n - missing.len() as u32;
    if !allow_missing {
        let (which, are) = match missing.len() {
            1 => ("partition", "is"),
            _ => ("partitions", "are"),
        };
        bail!(
            "{which} {} {are} missing (the partials given hold {merged} of the {n}): give every partition's partial, or --allow-missing to merge these and mark the report incomplete",
            missing.join(", ")
        );
    }
    Ok(Some(Incomplete {
        partitions_merged: merged,
        partitions: n,
        missing_partitions: missing,
    }))
}

/// Partials merge only when every setting that changes a result is the same.
fn check_rules(parts: &[Partial], rules: &Rules) -> Result<()> {
    let ours = super::RulesFingerprint::of(rules);
    for p in parts {
        if let Some(difference) = ours.difference(&p.rules) {
            bail!(
                "'{}' was made with other rules than this merge's, so its results cannot be merged: {difference} (this merge's first, then the partial's)",
                p.origin
            );
        }
    }
    Ok(())
}

/// The latest time in all the input. A partial that was told the end of all the input
/// analysed its unfinished attempts with it: another partial's input may not end later.
fn trace_end(parts: &[Partial]) -> Result<Millis> {
    let end = parts
        .iter()
        .map(|p| p.trace_end.ms())
        .fold(0.0, Millis::max);
    for p in parts {
        if let TraceEnd::Global(ms) = p.trace_end {
            if ms != end {
                bail!(
                    "'{}' was made as if all the input ended at {ms} ms, but another partial's input ends at {end} ms: partials that know the trace end must all be made from the same input",
                    p.origin
                );
            }
        }
    }
    Ok(end)
}

/// Which bursts and hops each row's retries lie in: (row index, hop, burst), sorted.
struct Membership<'a> {
    members: &'a [(u32, u16, u32)],
    /// A bit per row index up to the last member's: whether it has any. Most rows have
    /// none, and the binary search that found out for each row in the merge was nearly
    /// half of its thread's samples (a cache miss a step, over a list that outgrows the
    /// caches); the bits fit them (one a row: 125 KB for a million rows).
    any: Vec<u64>,
}

impl<'a> Membership<'a> {
    fn new(members: &'a [(u32, u16, u32)]) -> Membership<'a> {
        let rows = members.last().map_or(0, |m| m.0 as usize + 1);
        let mut any = vec![0u64; rows.div_ceil(64)];
        for &(id, _, _) in members {
            any[id as usize / 64] |= 1 << (id % 64);
        }
        Membership { members, any }
    }

    fn of(&self, id: u32) -> &'a [(u32, u16, u32)] {
        let bits = self.any.get(id as usize / 64).copied().unwrap_or(0);
        if bits & (1 << (id % 64)) == 0 {
            return &[];
        }
        let members = self.members;
        let from = members.partition_point(|m| m.0 < id);
        let len = members[from..].iter().take_while(|m| m.0 == id).count();
        &members[from..from + len]
    }

    /// The hops, sorted and distinct.
    fn hops(&self, id: u32) -> Vec<u16> {
        hops_of(self.of(id))
    }
}

/// The hops of one row's memberships, sorted and distinct.
fn hops_of(members: &[(u32, u16, u32)]) -> Vec<u16> {
    let mut hops: Vec<u16> = members.iter().map(|m| m.1).collect();
    hops.sort_unstable();
    hops.dedup();
    hops
}

/// The worst `worst` operations among the partials' worst ones and the deferred ones, in
/// worst-first order, then the ones asked for; each with its tree drawn again on the
/// trace end of all the input.
fn kept_operations(
    parts: &[Partial],
    offsets: &[u32],
    (deferred, deferred_base, late): (&[OpAttempts], u32, &[(u32, crate::analysis::Pending)]),
    worst: usize,
    in_bursts: &Membership,
    rules: &Rules,
    trace_end_ms: Millis,
) -> Vec<KeptOperation> {
    // (result, row index, attempts)
    let mut candidates: Vec<(OperationResult, u32, &OpAttempts)> = Vec::new();
    let mut asked: Vec<(OperationResult, u32, &OpAttempts)> = Vec::new();
    for (p, &offset) in parts.iter().zip(offsets) {
        for k in &p.kept {
            let row = &k.kept_row;
            let id = offset + k.row;
            let result = row
                .pending
                .clone()
                .resolve(row.key.clone(), &in_bursts.hops(id));
            if k.asked {
                asked.push((result.clone(), id, &k.attempts));
            }
            if k.worst {
                candidates.push((result, id, &k.attempts));
            }
        }
    }
    if worst > 0 {
        for (id, pending) in late {
            let d = &deferred[(id - deferred_base) as usize];
            let result = pending.clone().resolve(d.key.clone(), &in_bursts.hops(*id));
            candidates.push((result, *id, d));
        }
    }
    candidates.sort_by(|a, b| worst_first(&a.0, &b.0));
    candidates.truncate(worst);
    for a in asked {
        if !candidates.iter().any(|c| c.1 == a.1) {
            candidates.push(a);
        }
    }
    candidates
        .into_iter()
        .map(|(result, id, ops)| {
            let attempts = ops.attempts.clone();
            let tree = build_tree(&attempts, rules, trace_end_ms);
            let roles = operation_facts(&attempts, &tree, rules, trace_end_ms).roles;
            KeptOperation {
                op: id,
                result,
                targets: attempts
                    .iter()
                    .map(|a| ops.text(a.target).map(Into::into))
                    .collect(),
                message_ids: attempts
                    .iter()
                    .map(|a| ops.text(a.message_id).map(Into::into))
                    .collect(),
                attempts,
                tree,
                roles,
            }
        })
        .collect()
}

/// Rows in key order with their index in the merge, from a partial or the deferred ones.
type Source = Box<dyn Iterator<Item = Result<(Row, u32)>> + Send>;

/// Rows handed from the thread that reads and merges them to the one that writes them, at
/// a time.
const ROWS_PER_BATCH: usize = 1024;

/// A batch of rows sent back to the merge's reading thread, emptied, with the results made
/// of them, to be freed there.
type Spent = (Vec<(Row, u32)>, Vec<OperationResult>);

/// The k-way merge of row sources sorted by key: rows come out in key order, holding one
/// row per source at a time. Rows of equal keys (an operation in two partials, an error
/// the caller reports) come out one after the other, by source.
struct KWay {
    sources: Vec<Source>,
    /// Each source's next row. The tree holds the rows themselves, so a row's key is
    /// neither cloned nor lent out of it (a clone was two allocations a row).
    heads: LoserTree<ByKey>,
}

/// A row and its index in the merge, ordered by key alone.
struct ByKey((Row, u32));

impl PartialEq for ByKey {
    fn eq(&self, other: &ByKey) -> bool {
        self.0 .0.key == other.0 .0.key
    }
}
impl Eq for ByKey {}
impl PartialOrd for ByKey {
    fn partial_cmp(&self, other: &ByKey) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for ByKey {
    fn cmp(&self, other: &ByKey) -> std::cmp::Ordering {
        self.0 .0.key.cmp(&other.0 .0.key)
    }
}

/// A key's offset-value codes (see [`Coded`]), over the key read as one sequence of
/// symbols in its order: whether it has a test run (1 without, 2 with, as `None` comes
/// first), then the test run's bytes and its end, then the operation ID's bytes and its end
/// (see [`symbol`]).
impl Coded for ByKey {
    fn code_against(&self, before: Option<&ByKey>) -> u64 {
        key_code(&self.0 .0.key, before.map(|b| &b.0 .0.key))
    }

    fn play(&self, other: &ByKey, code: u64) -> (std::cmp::Ordering, u64) {
        key_play(&self.0 .0.key, &other.0 .0.key, code)
    }
}

/// [`Coded::code_against`] for keys.
fn key_code(key: &OperationKey, before: Option<&OperationKey>) -> u64 {
    match before {
        None => offset_code(0, key_tag(key)),
        Some(before) => {
            key_difference(key, before, 0).map_or(0, |(at, mine, _)| offset_code(at, mine))
        }
    }
}

/// [`Coded::play`] for keys.
fn key_play(a: &OperationKey, b: &OperationKey, code: u64) -> (std::cmp::Ordering, u64) {
    let from = if code == 0 { 0 } else { code_offset(code) + 1 };
    match key_difference(a, b, from) {
        None => (std::cmp::Ordering::Equal, 0),
        Some((at, mine, theirs)) => (mine.cmp(&theirs), offset_code(at, mine.max(theirs))),
    }
}

/// A key's first symbol: whether it has a test run.
fn key_tag(key: &OperationKey) -> u16 {
    if key.test_run_id.is_some() {
        2
    } else {
        1
    }
}

/// Where keys `a` and `b`, read as [`ByKey`]'s codes read them, first differ at or after
/// position `from` (every symbol before it the same in both), and each one's symbol there.
fn key_difference(a: &OperationKey, b: &OperationKey, from: u32) -> Option<(u32, u16, u16)> {
    let (tag_a, tag_b) = (key_tag(a), key_tag(b));
    if from == 0 && tag_a != tag_b {
        return Some((0, tag_a, tag_b));
    }
    let from = from as usize;
    let mut start = 1;
    if let (Some(run_a), Some(run_b)) = (&a.test_run_id, &b.test_run_id) {
        let (run_a, run_b) = (run_a.as_bytes(), run_b.as_bytes());
        if let Some(j) = first_difference(run_a, run_b, from.saturating_sub(start)) {
            return Some(((start + j) as u32, symbol(run_a, j), symbol(run_b, j)));
        }
        start += run_a.len() + 1;
    }
    let (id_a, id_b) = (a.operation_id.as_bytes(), b.operation_id.as_bytes());
    first_difference(id_a, id_b, from.saturating_sub(start))
        .map(|j| ((start + j) as u32, symbol(id_a, j), symbol(id_b, j)))
}

impl KWay {
    fn new(mut sources: Vec<Source>) -> Result<Self> {
        let heads = sources
            .iter_mut()
            .map(|source| Ok(source.next().transpose()?.map(ByKey)))
            .collect::<Result<Vec<_>>>()?;
        Ok(KWay {
            sources,
            heads: LoserTree::new(heads),
        })
    }

    fn next_row(&mut self) -> Result<Option<(Row, u32)>> {
        let Some(s) = self.heads.winner() else {
            return Ok(None);
        };
        let next = self.sources[s].next().transpose()?.map(ByKey);
        Ok(self.heads.replace_winner(next).map(|ByKey(row)| row))
    }
}

/// What the partials read, added up.
struct MergedInput {
    files: Vec<String>,
    lines: u64,
    events: u64,
    duplicate_events: u64,
    duplicate_examples: Vec<String>,
    diagnostics: Diagnostics,
    other_lines: crate::diagnostics::OtherLines,
    unfinished_per_hop: Vec<u64>,
    orphans_per_hop: Vec<u64>,
    duplicate_effects: u64,
}

/// The partials' input statistics, in the order the partials were given: their files (a
/// file read by several partials listed once), their bad lines as one run over the same
/// files in that order would list them — the bad lines of reading first, then the events
/// that could not become attempts, by file name and line.
fn merge_input(parts: &[Partial], late: &crate::analysis::Pass) -> Result<MergedInput> {
    let mut files: Vec<String> = Vec::new();
    let mut out = MergedInput {
        files: Vec::new(),
        lines: 0,
        events: 0,
        duplicate_events: 0,
        duplicate_examples: Vec::new(),
        diagnostics: diagnostics(parts),
        other_lines: Default::default(),
        unfinished_per_hop: Vec::new(),
        orphans_per_hop: Vec::new(),
        duplicate_effects: late.duplicate_effects,
    };
    for p in parts {
        let i = &p.input;
        for f in &i.files {
            if !files.contains(f) {
                files.push(f.clone());
            }
        }
        out.lines += i.lines;
        out.events += i.events;
        out.duplicate_events += i.duplicate_events;
        out.other_lines.add(&i.other_lines);
        out.duplicate_examples
            .extend(i.duplicate_examples.iter().cloned());
        add_counts(&mut out.unfinished_per_hop, &i.unfinished_per_hop);
        add_counts(&mut out.orphans_per_hop, &i.orphans_per_hop);
        out.duplicate_effects += i.duplicate_effects;
    }
    add_counts(&mut out.unfinished_per_hop, &late.unfinished_per_hop);
    add_counts(&mut out.orphans_per_hop, &late.orphans_per_hop);
    out.duplicate_examples.truncate(DUPLICATES_LISTED);
    out.files = files;
    Ok(out)
}

/// The partials' bad lines as one run over the same files in the partials' order would
/// list them: the bad lines of reading first, then the events that could not become
/// attempts, by file name and line.
pub fn diagnostics(parts: &[Partial]) -> Diagnostics {
    let policies: Vec<BadInputPolicy> = parts.iter().map(|p| p.input.bad_input_policy).collect();
    let policy = match policies.first() {
        Some(&first) if policies.iter().all(|&p| p == first) => first,
        // Bad lines a worker accepted with --skip-invalid and one that reported them: the
        // merge reports them.
        _ => BadInputPolicy::Report,
    };
    let mut diagnostics = Diagnostics::new(policy);
    let mut bad_events: Vec<&InputIssue> = Vec::new();
    let mut bad_events_total = 0;
    for p in parts {
        let i = &p.input;
        diagnostics.add_recorded(&i.bad_lines.shown, i.bad_lines.total);
        bad_events.extend(&i.bad_events.shown);
        bad_events_total += i.bad_events.total;
    }
    bad_events.sort_by(|a, b| (a.path.as_str(), a.line).cmp(&(b.path.as_str(), b.line)));
    let bad_events: Vec<InputIssue> = bad_events.into_iter().cloned().collect();
    diagnostics.add_recorded(&bad_events, bad_events_total);
    diagnostics
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rows_memberships_are_found_whether_or_not_it_has_any() {
        // Rows 0, 63, 64, 65 and 200 (on both sides of a word of bits), one with two
        // memberships; every other row, and rows past the last member, have none.
        let members = [
            (0, 1, 0),
            (63, 0, 1),
            (64, 2, 1),
            (64, 2, 3),
            (65, 0, 2),
            (200, 1, 4),
        ];
        let membership = Membership::new(&members);
        for id in 0..300u32 {
            let expected: Vec<_> = members.iter().filter(|m| m.0 == id).copied().collect();
            assert_eq!(membership.of(id), &expected[..], "row {id}");
        }
        assert!(Membership::new(&[]).of(0).is_empty());
        assert_eq!(membership.hops(64), vec![2]);
    }

    /// A key played in a loser tree by its codes alone, as [`ByKey`] is.
    #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
    struct Key(OperationKey);

    impl Coded for Key {
        fn code_against(&self, before: Option<&Key>) -> u64 {
            key_code(&self.0, before.map(|b| &b.0))
        }
        fn play(&self, other: &Key, code: u64) -> (std::cmp::Ordering, u64) {
            key_play(&self.0, &other.0, code)
        }
    }

    /// Keys of a small alphabet, with and without a test run: they share prefixes, are
    /// prefixes of each other, and one's test run may be another's operation ID.
    fn keys() -> impl Strategy<Value = OperationKey> {
        (prop::option::of("[ab]{0,3}"), "[ab]{0,4}").prop_map(|(run, id)| OperationKey {
            test_run_id: run.map(Into::into),
            operation_id: id.into(),
        })
    }

    use super::super::loser_tree::tests::{merged, sorted};
    use proptest::prelude::*;

    proptest! {
        /// Where two keys first differ orders them as keys order, from any position
        /// before it; equal keys do not differ.
        #[test]
        fn a_keys_first_difference_orders_it(a in keys(), b in keys()) {
            match key_difference(&a, &b, 0) {
                None => prop_assert_eq!(&a, &b),
                Some((at, sa, sb)) => {
                    prop_assert_ne!(sa, sb);
                    prop_assert_eq!(sa.cmp(&sb), a.cmp(&b));
                    for from in 0..=at {
                        prop_assert_eq!(key_difference(&a, &b, from), Some((at, sa, sb)));
                    }
                }
            }
        }

        /// Sorted sources of keys merge into the sort of their keys by (key, source).
        #[test]
        fn sources_of_keys_merge_by_their_codes_as_keys_sort(
            sources in prop::collection::vec(prop::collection::vec(keys(), 0..12), 0..12),
        ) {
            let sources = sources.into_iter().map(|s| s.into_iter().map(Key).collect());
            let (sources, expected) = sorted(sources.collect());
            prop_assert_eq!(merged(&sources), expected);
        }
    }
}

//! Partials: the result of analysing one partition of the operations, before anything that
//! crosses operations, and the merge that finishes the analysis from any number of them.
//!
//! An operation's events are always analysed together; different operations only meet in
//! the synchronized-burst rule and in the summary. So a partition (all the input on one
//! machine, one spilled share of it, or one worker's share on a cluster) yields a
//! [`Partial`]: its rows sorted by operation key, each with its class with and without a
//! burst, every retry start, the attempt statistics, the worst operations' attempts and the
//! input statistics. [`merge()`] then finds the bursts over all retry starts, gives every row
//! its final class, and streams the rows out in key order. `analyze` is exactly one
//! partial merged ([`analyze`]); `analyze --format partial` writes the partial instead
//! ([`mod@format`]), and `merge` reads partials back: the three give one answer by construction.

pub mod format;
mod loser_tree;
pub mod merge;

use std::collections::HashMap;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::analysis::tally::RowSink;
use crate::analysis::{
    attempts_partition_pass, partition_pass, Analysis, Keep, PartitionPass, Pending, TraceEnd,
};
use crate::burst::RetryPoint;
use crate::diagnostics::{BadInputPolicy, Diagnostics, InputIssue};
use crate::ingest::Ingested;
use crate::model::{Attempt, Millis, OperationKey, Partition, Sym};
use crate::rules::{BurstParams, HopOrder, Rules};
use crate::stats::AttemptStats;

pub use merge::merge;

/// One partition's result: everything the merge needs and nothing it can recompute.
#[derive(Debug, Clone)]
pub struct Partial {
    /// Where it came from, for messages: a file name, `<stdin>`, or `this run`.
    pub origin: String,
    /// Which operations of its input it holds.
    pub share: Share,
    /// What it read, as every partition of the same input reads it.
    pub source: SourceFingerprint,
    pub rules: RulesFingerprint,
    /// The latest time in this partition's input, and whether it is that of all the input.
    pub trace_end: TraceEnd,
    pub input: InputPart,
    /// Sorted by operation key. A row's position is its index in `retries` and `kept`.
    pub rows: Rows,
    /// Every retry start, with its row's position in `op`.
    pub retries: Retries,
    /// The attempt statistics of the analysed operations (not of the deferred ones).
    pub stats: AttemptStats,
    /// This partition's worst operations (worst first), then those asked for, with their
    /// attempts.
    pub kept: Vec<Kept>,
    /// Operations with an unfinished attempt whose partition did not know the trace end,
    /// sorted by key: the merge analyses them.
    pub deferred: Vec<OpAttempts>,
}

/// A partial's rows: in memory, or left in the partial's file and read again, in key
/// order, when the merge streams them out (a merge of files holds no partial's rows).
#[derive(Debug, Clone)]
pub enum Rows {
    Memory(Vec<Row>),
    File(format::FileRows),
    /// Written aside by a spilled run ([`build`]).
    Spilled(format::SpilledRows),
}

impl Rows {
    pub fn len(&self) -> usize {
        match self {
            Rows::Memory(rows) => rows.len(),
            Rows::File(file) => file.count as usize,
            Rows::Spilled(spilled) => spilled.count as usize,
        }
    }
}

/// A partial's retry starts: in memory, or set aside by a spilled run in one file per
/// hop, which the merge reads one hop at a time.
#[derive(Debug, Clone)]
pub enum Retries {
    /// (hop, retry start).
    Memory(Vec<(u16, RetryPoint)>),
    Spilled(format::SpilledRetries),
}

impl Retries {
    pub fn len(&self) -> usize {
        match self {
            Retries::Memory(points) => points.len(),
            Retries::Spilled(spilled) => spilled.len(),
        }
    }

    /// How many retry starts are at `hop`.
    pub fn count_at_hop(&self, hop: u16) -> usize {
        match self {
            Retries::Memory(points) => points.iter().filter(|(h, _)| *h == hop).count(),
            Retries::Spilled(spilled) => spilled.count_at_hop(hop),
        }
    }

    /// The retry starts at `hop`, their operations offset by `offset`, in
    /// [`RetryPoint::order`]: a spilled partition's read from its file as written (in that
    /// order, `buffer_bytes` at a time), held ones sorted here.
    pub fn at_hop_in_order(
        &self,
        hop: u16,
        offset: u32,
        buffer_bytes: usize,
    ) -> Result<Box<dyn Iterator<Item = Result<RetryPoint>> + Send + '_>> {
        let offset_by = move |mut point: RetryPoint| {
            point.op += offset;
            point
        };
        match self {
            Retries::Memory(points) => Ok(Box::new(
                sorted_at_hop(points, hop)
                    .into_iter()
                    .map(move |p| Ok(offset_by(p))),
            )),
            Retries::Spilled(spilled) => Ok(Box::new(
                spilled
                    .read_at(hop, buffer_bytes)?
                    .map(move |p| p.map(offset_by)),
            )),
        }
    }
}

/// The points of `points` at `hop`, in [`RetryPoint::order`]: as the merge reads them, and
/// as a spilled partition's file holds them.
fn sorted_at_hop(points: &[(u16, RetryPoint)], hop: u16) -> Vec<RetryPoint> {
    let mut at_hop: Vec<RetryPoint> = points
        .iter()
        .filter(|(h, _)| *h == hop)
        .map(|&(_, p)| p)
        .collect();
    at_hop.sort_unstable_by(RetryPoint::order);
    at_hop
}

/// The file of the rows that [`build`] sets aside under `name`.
fn rows_path(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    dir.join(format!("{name}-rows"))
}

/// Where the files of the retry starts that [`build`] sets aside under `name` are: one per
/// hop, this path with the hop's index as extension.
fn retries_stem(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    dir.join(format!("{name}-retries"))
}

/// One operation's row before bursts are known.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub key: OperationKey,
    pub pending: Pending,
}

/// A kept operation: its row (and the row's position) and its attempts.
#[derive(Debug, Clone, PartialEq)]
pub struct Kept {
    pub row: u32,
    /// A copy of the row: the merge needs it before the rows stream by.
    pub kept_row: Row,
    pub worst: bool,
    pub asked: bool,
    pub attempts: OpAttempts,
}

/// One operation's attempts, with the strings they name (target, message, span and parent
/// IDs) interned in `strings`: a partial's own small table, because the ingested one is
/// not kept and the merge compares these IDs within one operation only.
#[derive(Debug, Clone, PartialEq)]
pub struct OpAttempts {
    pub key: OperationKey,
    /// In canonical order; their `Sym`s index `strings`.
    pub attempts: Vec<Attempt>,
    pub strings: Vec<Box<str>>,
}

impl OpAttempts {
    /// Re-interns `attempts`' strings from the ingested table into a table of their own.
    fn new(key: OperationKey, mut attempts: Vec<Attempt>, resolve: impl Fn(Sym) -> String) -> Self {
        let mut strings: Vec<Box<str>> = Vec::new();
        let mut index: HashMap<Sym, Sym> = HashMap::new();
        let mut local = |sym: &mut Option<Sym>| {
            if let Some(s) = sym {
                *s = *index.entry(*s).or_insert_with(|| {
                    strings.push(resolve(*s).into());
                    (strings.len() - 1) as Sym
                });
            }
        };
        for a in &mut attempts {
            local(&mut a.target);
            local(&mut a.message_id);
            local(&mut a.span_id);
            local(&mut a.parent_id);
        }
        OpAttempts {
            key,
            attempts,
            strings,
        }
    }

    pub fn text(&self, sym: Option<Sym>) -> Option<&str> {
        sym.map(|s| &*self.strings[s as usize])
    }
}

/// Which operations of its input a partial holds: a merge of `--partition` shares checks
/// that each of the N is there once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Share {
    /// Every operation of its input (no `--partition`).
    All,
    /// `--partition K/N`: the operations whose key hashes to partition K of N.
    Partition(Partition),
}

impl Share {
    pub fn of(partition: Option<Partition>) -> Share {
        partition.map_or(Share::All, Share::Partition)
    }
}

/// As a partial's header and the merge's messages write it: `K/N`, or `all`.
impl std::fmt::Display for Share {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Share::All => f.write_str("all"),
            Share::Partition(p) => write!(f, "{}/{}", p.index, p.count),
        }
    }
}

impl Serialize for Share {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Share {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Share, D::Error> {
        let text = String::deserialize(d)?;
        if text == "all" {
            return Ok(Share::All);
        }
        text.parse::<Partition>()
            .map(Share::Partition)
            .map_err(|why| {
                serde::de::Error::custom(format!("its partition \"{text}\" is not valid: {why}"))
            })
    }
}

/// What a partition read, the same in every partition of one input (each worker under
/// `--partition` reads all of it): partials of one set that differ here read different
/// input (another day's log, a file still being written), and a merge of them would mix
/// two inputs. Cheap on purpose: counts the reader keeps anyway, no pass over the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceFingerprint {
    /// How many inputs (files, standard input) it read.
    pub inputs: u64,
    /// Their raw bytes, as stored (compressed or not).
    pub bytes: u64,
    /// Their non-blank lines.
    pub lines: u64,
}

impl SourceFingerprint {
    fn of(ingested: &Ingested) -> SourceFingerprint {
        SourceFingerprint {
            inputs: ingested.files.len() as u64,
            bytes: ingested.whole_input.bytes,
            lines: ingested.whole_input.lines,
        }
    }
}

/// `3 inputs, 1200 bytes, 40 lines`: for messages.
impl std::fmt::Display for SourceFingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use crate::words::counted;
        write!(
            f,
            "{}, {}, {}",
            counted(self.inputs, "input", "inputs"),
            counted(self.bytes, "byte", "bytes"),
            counted(self.lines, "line", "lines")
        )
    }
}

/// Every setting that changes a result, by hop name: partials made under different ones
/// cannot be merged, and the merge says which setting differs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RulesFingerprint {
    pub hops: Vec<String>,
    pub budgets: Vec<u32>,
    pub deadlines_ms: Vec<Option<Millis>>,
    pub overlap_allowed: Vec<bool>,
    pub queue_hops: Vec<bool>,
    pub burst_window_ms: Millis,
    pub burst_min_ops: usize,
    /// Rule v3: the inner layer's budget per hop (`null`: the hop's budget).
    pub inner_budgets: Vec<Option<u32>>,
    pub infer_layers: bool,
    pub retryable_4xx: Vec<u16>,
}

impl RulesFingerprint {
    pub fn of(rules: &Rules) -> RulesFingerprint {
        RulesFingerprint {
            hops: rules.hops.names().to_vec(),
            budgets: rules.budgets.clone(),
            deadlines_ms: rules.deadlines.clone(),
            overlap_allowed: rules.overlap_allowed.clone(),
            queue_hops: rules.queue_hops.clone(),
            burst_window_ms: rules.burst.window_ms,
            burst_min_ops: rules.burst.min_ops,
            inner_budgets: rules.inner_budgets.clone(),
            infer_layers: rules.infer_layers,
            retryable_4xx: rules.retryable_4xx.clone(),
        }
    }

    /// The rules it describes (checked: a hand-edited partial must not panic the merge).
    pub fn rules(&self) -> Result<Rules> {
        let hops = HopOrder::new(self.hops.clone())?;
        let n = hops.len();
        let per_hop = [
            self.budgets.len(),
            self.deadlines_ms.len(),
            self.overlap_allowed.len(),
            self.queue_hops.len(),
            self.inner_budgets.len(),
        ];
        if per_hop.iter().any(|&len| len != n) {
            anyhow::bail!("its rules list a value per hop for a different number of hops");
        }
        let rules = Rules {
            hops,
            budgets: self.budgets.clone(),
            overlap_allowed: self.overlap_allowed.clone(),
            queue_hops: self.queue_hops.clone(),
            burst: BurstParams {
                window_ms: self.burst_window_ms,
                min_ops: self.burst_min_ops,
            },
            deadlines: self.deadlines_ms.clone(),
            // The merge analyses the deferred operations itself: it needs these too.
            inner_budgets: self.inner_budgets.clone(),
            infer_layers: self.infer_layers,
            retryable_4xx: self.retryable_4xx.clone(),
        };
        rules.check()?;
        Ok(rules)
    }

    /// The first setting that differs, named as a user sets it, with both values.
    pub fn difference(&self, other: &RulesFingerprint) -> Option<String> {
        let per_hop = |values: &dyn Fn(&RulesFingerprint) -> Vec<String>| {
            let show = |f: &RulesFingerprint| {
                f.hops
                    .iter()
                    .zip(values(f))
                    .map(|(h, v)| format!("{h}={v}"))
                    .collect::<Vec<_>>()
                    .join(",")
            };
            (show(self), show(other))
        };
        let flags = |v: &[bool]| v.iter().map(|b| b.to_string()).collect::<Vec<_>>();
        let list = |v: &[u16]| v.iter().map(u16::to_string).collect::<Vec<_>>().join(",");
        let differences: [(&str, bool, (String, String)); 10] = [
            (
                "the hop order (--hops, policy hops)",
                self.hops != other.hops,
                (self.hops.join(","), other.hops.join(",")),
            ),
            (
                "the attempt budgets (--budget, policy [budgets])",
                self.budgets != other.budgets,
                per_hop(&|f| f.budgets.iter().map(u32::to_string).collect()),
            ),
            (
                "the deadlines (--deadline, policy [deadlines])",
                self.deadlines_ms != other.deadlines_ms,
                per_hop(&|f| {
                    f.deadlines_ms
                        .iter()
                        .map(|d| d.map_or("none".to_string(), |ms| ms.to_string()))
                        .collect()
                }),
            ),
            (
                "the hops allowed to overlap (--allow-overlap, policy allow_overlap)",
                self.overlap_allowed != other.overlap_allowed,
                per_hop(&|f| flags(&f.overlap_allowed)),
            ),
            (
                "the queue hops (policy queue_hops)",
                self.queue_hops != other.queue_hops,
                per_hop(&|f| flags(&f.queue_hops)),
            ),
            (
                "the burst window (--burst-window, policy [burst] window_ms)",
                self.burst_window_ms.to_bits() != other.burst_window_ms.to_bits(),
                (
                    self.burst_window_ms.to_string(),
                    other.burst_window_ms.to_string(),
                ),
            ),
            (
                "the burst size (--burst-min-ops, policy [burst] min_ops)",
                self.burst_min_ops != other.burst_min_ops,
                (
                    self.burst_min_ops.to_string(),
                    other.burst_min_ops.to_string(),
                ),
            ),
            (
                "the inner budgets (policy [inner_budgets])",
                self.inner_budgets != other.inner_budgets,
                per_hop(&|f| {
                    f.inner_budgets
                        .iter()
                        .map(|n| n.map_or("the hop's".to_string(), |n| n.to_string()))
                        .collect()
                }),
            ),
            (
                "layer inference (policy infer_layers)",
                self.infer_layers != other.infer_layers,
                (
                    self.infer_layers.to_string(),
                    other.infer_layers.to_string(),
                ),
            ),
            (
                "the retryable statuses (policy [retryable] statuses)",
                self.retryable_4xx != other.retryable_4xx,
                (list(&self.retryable_4xx), list(&other.retryable_4xx)),
            ),
        ];
        differences
            .into_iter()
            .find(|(_, differs, _)| *differs)
            .map(|(setting, _, (a, b))| format!("{setting}: {a} against {b}"))
    }
}

/// What a partition read, and the counts its pass made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputPart {
    /// Its inputs, in the order read.
    pub files: Vec<String>,
    pub lines: u64,
    pub events: u64,
    pub duplicate_events: u64,
    /// `path:line` of its first duplicate events.
    pub duplicate_examples: Vec<String>,
    pub bad_input_policy: BadInputPolicy,
    /// Bad lines found while reading, in reading order.
    pub bad_lines: Issues,
    /// Lines read that are not attempts (absent from partials made before they were
    /// counted: none).
    #[serde(default)]
    pub other_lines: crate::diagnostics::OtherLines,
    /// Events that could not become attempts, in file-name and line order.
    pub bad_events: Issues,
    /// Of the analysed operations (the deferred ones are counted by the merge).
    pub unfinished_per_hop: Vec<u64>,
    pub orphans_per_hop: Vec<u64>,
    pub duplicate_effects: u64,
}

/// Bad lines: the first ones whole, all of them counted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Issues {
    pub total: u64,
    pub shown: Vec<InputIssue>,
}

impl Issues {
    fn of(d: &Diagnostics) -> Issues {
        Issues {
            total: d.total(),
            shown: d.issues().to_vec(),
        }
    }
}

/// Analyses all the input, read into `ingested`: one partial, merged. `keep`: which
/// operations keep their attempts (their timelines); `listed`: how many worst operations
/// the summary lists; `sink`: where the rows go.
pub fn analyze(
    mut ingested: Ingested,
    rules: &Rules,
    keep: &Keep,
    listed: usize,
    sink: &mut dyn RowSink,
) -> Result<Analysis> {
    analyze_in_place(&mut ingested, rules, keep, listed, sink)
}

/// [`analyze`], leaving the operation table and strings in `ingested` for a second analysis
/// of the same operations (a replay). Its events and diagnostics are taken.
pub fn analyze_in_place(
    ingested: &mut Ingested,
    rules: &Rules,
    keep: &Keep,
    listed: usize,
    sink: &mut dyn RowSink,
) -> Result<Analysis> {
    let partial = build(ingested, rules, keep, true, None)?;
    ingested.free_events();
    merge(vec![partial], rules, keep.worst(listed), sink)
}

/// Analyses attempts that were made, not read (a replay's): each operation's attempts,
/// by index into `ingested`'s operation table, go through the same stages and merge as
/// read ones. `events`: what the summary reports as events read; `trace_end_ms`: where
/// unfinished attempts are still active.
pub fn analyze_attempts(
    ingested: &Ingested,
    operations: &[(u32, Vec<Attempt>)],
    rules: &Rules,
    keep: &Keep,
    events: u64,
    trace_end_ms: Millis,
    (listed, sink): (usize, &mut dyn RowSink),
) -> Result<Analysis> {
    let pass = attempts_partition_pass(ingested, operations, rules, keep, events, trace_end_ms);
    let diagnostics = Diagnostics::new(BadInputPolicy::Report);
    let partial = from_pass(pass, ingested, rules, &diagnostics, None)?;
    merge(vec![partial], rules, keep.worst(listed), sink)
}

/// The partial of the input read into `ingested` (its events and diagnostics are taken;
/// the events' vector is left empty for the next partition's, see
/// [`Ingested::free_events`]). `global`: this input is all the input (else operations
/// with an unfinished attempt are deferred to the merge, which knows where all the input
/// ends). `spill_to`: a directory and a name under which its rows and retry starts are
/// set aside for the merge to read back (straight from the pass, never held as rows): a
/// spilled run holds no partition's rows and only one hop's retry starts at a time.
pub fn build(
    ingested: &mut Ingested,
    rules: &Rules,
    keep: &Keep,
    global: bool,
    spill_to: Option<(&std::path::Path, &str)>,
) -> Result<Partial> {
    let pass = partition_pass(ingested, rules, keep, global);
    // Left empty: a second analysis of these operations has no bad lines of its own.
    let diagnostics = std::mem::replace(
        &mut ingested.diagnostics,
        Diagnostics::new(BadInputPolicy::Report),
    );
    from_pass(pass, ingested, rules, &diagnostics, spill_to)
}

/// Turns a pass over `ingested`'s operations into a partial: rows keyed and sorted, retry
/// starts and kept operations pointing at row positions, strings resolved; with
/// `spill_to`, the rows and retry starts written there (see [`build`]).
fn from_pass(
    pp: PartitionPass,
    ingested: &Ingested,
    rules: &Rules,
    diagnostics: &Diagnostics,
    spill_to: Option<(&std::path::Path, &str)>,
) -> Result<Partial> {
    let PartitionPass {
        mut pass,
        kept,
        events,
        trace_end,
    } = pp;
    // Found in parallel, in no useful order: recorded in file-name and line order, apart
    // from the bad lines of reading, as a merge must keep them.
    let mut bad_events = Diagnostics::new(diagnostics.policy());
    bad_events.bad_sources_in_file_order(&ingested.files, std::mem::take(&mut pass.problems))?;

    // The rows in key order, as indexes into the pass's: sorted by the keys as the
    // strings hold them, with no key allocated (nor a row moved) for it.
    let pending = std::mem::take(&mut pass.pending);
    let mut order: Vec<u32> = (0..pending.len() as u32).collect();
    {
        use rayon::slice::ParallelSliceMut;
        let key = |i: u32| ingested.key_ref(pending[i as usize].0);
        order.par_sort_unstable_by(|&a, &b| key(a).cmp(&key(b)));
    }
    let mut position = vec![u32::MAX; ingested.operations.len()];
    for (rank, &i) in order.iter().enumerate() {
        position[pending[i as usize].0 as usize] = rank as u32;
    }
    let row_of = |op: u32| {
        let (_, p) = &pending[order[position[op as usize] as usize] as usize];
        Row {
            key: ingested.operation_key(op),
            pending: p.clone(),
        }
    };
    let retries: Vec<(u16, RetryPoint)> = pass
        .retries
        .into_iter()
        .map(|(hop, mut point)| {
            point.op = position[point.op as usize];
            (hop, point)
        })
        .collect();
    let resolve = |s: Sym| ingested.strings.resolve(s).to_string();
    let kept = kept
        .into_iter()
        .map(|k| Kept {
            row: position[k.op as usize],
            kept_row: row_of(k.op),
            worst: k.worst,
            asked: k.asked,
            attempts: OpAttempts::new(ingested.operation_key(k.op), k.attempts, resolve),
        })
        .collect();
    let mut deferred: Vec<OpAttempts> = pass
        .deferred
        .into_iter()
        .map(|(op, attempts)| OpAttempts::new(ingested.operation_key(op), attempts, resolve))
        .collect();
    deferred.sort_by(|a, b| a.key.cmp(&b.key));

    let hops = rules.hops.len();
    let (rows, retries) = match spill_to {
        Some((dir, name)) => {
            let keyed = order.iter().map(|&i| {
                let (op, p) = &pending[i as usize];
                (ingested.key_ref(*op), p)
            });
            // Each on a core of its own: one after the other, each left the other idle.
            let (rows, retries) = rayon::join(
                || format::SpilledRows::write(keyed, &rules.hops, &rows_path(dir, name)),
                || format::SpilledRetries::write(&retries, hops, &retries_stem(dir, name)),
            );
            (Rows::Spilled(rows?), Retries::Spilled(retries?))
        }
        None => {
            let mut slots: Vec<Option<(u32, Pending)>> = pending.into_iter().map(Some).collect();
            let mut row = |i: u32| {
                let (op, pending) = slots[i as usize].take().expect("each row once");
                Row {
                    key: ingested.operation_key(op),
                    pending,
                }
            };
            let rows = Rows::Memory(order.iter().map(|&i| row(i)).collect());
            (rows, Retries::Memory(retries))
        }
    };

    let mut duplicates = pass.duplicates;
    duplicates.sort_unstable();
    let mut unfinished_per_hop = pass.unfinished_per_hop;
    let mut orphans_per_hop = pass.orphans_per_hop;
    unfinished_per_hop.resize(hops, 0);
    orphans_per_hop.resize(hops, 0);
    Ok(Partial {
        origin: "this run".to_string(),
        // `analyze --format partial` says which share it wrote (`Share::of`); within a run
        // the shares are merged there and then, never checked as a set.
        share: Share::All,
        source: SourceFingerprint::of(ingested),
        rules: RulesFingerprint::of(rules),
        trace_end,
        input: InputPart {
            files: ingested.files.clone(),
            lines: ingested.lines_read,
            events,
            duplicate_events: duplicates.len() as u64,
            duplicate_examples: duplicates
                .iter()
                .take(crate::analysis::DUPLICATES_LISTED)
                .map(|&d| ingested.location(d))
                .collect(),
            bad_input_policy: diagnostics.policy(),
            bad_lines: Issues::of(diagnostics),
            other_lines: ingested.other_lines.clone(),
            bad_events: Issues::of(&bad_events),
            unfinished_per_hop,
            orphans_per_hop,
            duplicate_effects: pass.duplicate_effects,
        },
        rows,
        retries,
        stats: pass.stats,
        kept,
        deferred,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_is_written_and_read_as_k_of_n_or_all() {
        let two_of_four = Share::Partition(Partition { index: 2, count: 4 });
        for (share, text) in [(two_of_four, "\"2/4\""), (Share::All, "\"all\"")] {
            assert_eq!(serde_json::to_string(&share).unwrap(), text);
            assert_eq!(serde_json::from_str::<Share>(text).unwrap(), share);
        }
        for bad in ["\"4/4\"", "\"2/0\"", "\"whole\"", "2"] {
            assert!(serde_json::from_str::<Share>(bad).is_err(), "{bad}");
        }
        let err = serde_json::from_str::<Share>("\"5/4\"").unwrap_err();
        assert!(
            err.to_string()
                .contains("its partition \"5/4\" is not valid"),
            "{err}"
        );
    }
}

//! The comparison of two runs: what a replay changed against the observed run, or what
//! changed between two observed runs (`diff`). Every number the comparison reports is
//! computed here once, from the two summaries and, where both sides were analysed from
//! attempt logs, their per-operation results; every format renders this.

pub mod change;
pub mod saved;

use serde::Serialize;

use crate::analysis::tally::Collected;
use crate::analysis::FinalOutcome;
use crate::classify::Class;
use crate::model::OperationKey;
use crate::rules::Rules;
use crate::summary::{display_operation_key, OperationRecord, Summary};
use crate::timeline::OperationTimeline;

/// Version of the comparison document (`--format json` of `replay` and `diff`).
pub const SCHEMA_VERSION: u32 = 1;

/// Operation IDs listed per outcome change before the rest are only counted.
pub const OPERATIONS_LISTED: usize = 10;

/// What is compared with what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The observed run against the same run replayed under a candidate policy.
    Replay,
    /// Two observed runs, before and after a change.
    Diff,
}

impl Kind {
    /// The names of the two sides, as the reports write them and as the JSON keys.
    pub fn labels(self) -> [&'static str; 2] {
        match self {
            Kind::Replay => ["observed", "replayed"],
            Kind::Diff => ["before", "after"],
        }
    }
}

/// A value on both sides, serialized as an object keyed by the sides' names (see
/// [`Kind::labels`]): `{"observed": 9, "replayed": 3}`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pair<T> {
    pub before: T,
    pub after: T,
    pub labels: [&'static str; 2],
}

impl<T: Serialize> Serialize for Pair<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry(self.labels[0], &self.before)?;
        map.serialize_entry(self.labels[1], &self.after)?;
        map.end()
    }
}

/// The whole comparison.
#[derive(Debug, Clone)]
pub struct Comparison {
    pub kind: Kind,
    pub before: Summary,
    pub after: Summary,
    pub changes: Changes,
    /// Parallel to the second side's operations; empty when a side is a saved summary.
    pub operations: Vec<OperationChange>,
    /// The sides that were saved summaries, as read.
    pub saved: [Option<serde_json::Value>; 2],
    /// The gate's verdict: plain conditions on the second run, change conditions between
    /// the two (see [`change`]); absent without conditions.
    pub gate: Option<crate::gate::GateReport>,
    /// The worst operations of the first side, each drawn as it was and as it became.
    pub timelines: Vec<TimelinePair>,
}

/// One operation drawn on both sides.
#[derive(Debug, Clone)]
pub struct TimelinePair {
    pub before: (OperationRecord, OperationTimeline),
    /// `None` when the operation is not on the second side.
    pub after: Option<(OperationRecord, OperationTimeline)>,
}

/// What changed.
#[derive(Debug, Clone, Serialize)]
pub struct Changes {
    /// What a replay cannot know (absent for `diff`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    pub operations: Pair<u64>,
    pub attempts: Pair<u64>,
    /// Per hop, in hop order (hops with attempts on either side).
    pub hops: Vec<HopChange>,
    /// Every class, in order.
    pub classes: Vec<ClassChange>,
    pub bursts: Pair<u64>,
    /// Operations with a retry in some burst.
    pub burst_operations: Pair<u64>,
    /// Operations on both sides whose class differs; null when a side is a saved summary.
    pub reclassified: Option<u64>,
    /// Final outcome changes of operations on both sides; null when a side is a saved
    /// summary (it has no per-operation outcomes).
    pub outcomes: Option<OutcomeChanges>,
    /// Retries the candidate wanted but its retry budgets or deadline refused (replay).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exhausted: Option<Exhausted>,
}

#[derive(Debug, Clone, Serialize)]
pub struct HopChange {
    pub hop: String,
    pub attempts: Pair<u64>,
    /// `after − before` (negative: attempts removed).
    pub change: i64,
    /// `change ÷ before`; null when there were none before.
    pub change_share: Option<f64>,
    pub amplification: Pair<f64>,
    pub retries: Pair<u64>,
    /// Replayed attempts at this hop that repeat the last observed outcome (replay).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extrapolated: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ClassChange {
    pub class: Class,
    pub operations: Pair<u64>,
    pub share: Pair<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct OutcomeChanges {
    /// Operations on both sides.
    pub compared: u64,
    /// Succeeded before, failed after.
    pub success_lost: OperationList,
    /// Failed (or unknown) before, succeeded after.
    pub success_gained: OperationList,
    /// Known before, not known after: in a replay, the request ends on an extrapolated
    /// attempt, whose outcome is a guess.
    pub unknown: OperationList,
}

/// A count of operations and the first of them.
#[derive(Debug, Clone, Default, Serialize)]
pub struct OperationList {
    pub operations: u64,
    /// The first operation IDs (`run/op` where a test run is set), in key order.
    pub operation_ids: Vec<String>,
}

impl OperationList {
    fn add(&mut self, key: &OperationKey) {
        self.operations += 1;
        if self.operation_ids.len() < OPERATIONS_LISTED {
            self.operation_ids.push(display_operation_key(key));
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Exhausted {
    /// Retries refused by a retry budget, per hop (hops with none left out).
    pub budget: Vec<HopCount>,
    /// Retries that would have started past the deadline, per hop.
    pub deadline: Vec<HopCount>,
    /// Operations that had a retry refused by a budget.
    pub budget_operations: u64,
    /// Operations that had a retry refused by the deadline.
    pub deadline_operations: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct HopCount {
    pub hop: String,
    pub retries: u64,
}

/// Per operation, what the replay knows beyond its attempts.
pub struct ReplayFacts<'a> {
    pub counts: &'a crate::replay::engine::Counts,
    pub notes: &'a [crate::replay::OperationNotes],
    /// The ingested operation table's keys of `notes[i].op`, parallel to `notes`.
    pub keys: Vec<OperationKey>,
}

/// One side of a comparison: its summary, and its analysis where it was read from attempt
/// logs (results per operation, the kept attempts to draw).
pub struct Side<'a> {
    pub summary: Summary,
    /// `None` for a saved summary.
    pub analysis: Option<&'a Collected>,
    /// A saved summary as it was read: the JSON report repeats it unchanged.
    pub saved: Option<serde_json::Value>,
}

fn pair<T>(kind: Kind, before: T, after: T) -> Pair<T> {
    Pair {
        before,
        after,
        labels: kind.labels(),
    }
}

/// Compares two sides. `replay`: what the replay engine counted (replay only).
pub fn compare(
    kind: Kind,
    before: Side,
    after: Side,
    rules: &Rules,
    replay: Option<ReplayFacts>,
) -> Comparison {
    let (b, a) = (&before.summary, &after.summary);
    let hops: Vec<HopChange> = (0..rules.hops.len())
        .filter_map(|h| {
            let name = rules.hops.name(h as u16);
            let find = |s: &Summary| s.hops.iter().find(|x| x.hop == name).cloned();
            let (hb, ha) = (find(b), find(a));
            let get = |x: &Option<crate::summary::HopSummary>| {
                x.as_ref().map_or((0, 0.0, 0), |x| {
                    (x.attempts, x.amplification, x.retries + x.redeliveries)
                })
            };
            let (bn, bamp, bret) = get(&hb);
            let (an, aamp, aret) = get(&ha);
            if bn == 0 && an == 0 {
                return None;
            }
            let change = an as i64 - bn as i64;
            Some(HopChange {
                hop: name.to_string(),
                attempts: pair(kind, bn, an),
                change,
                change_share: (bn > 0).then(|| change as f64 / bn as f64),
                amplification: pair(kind, bamp, aamp),
                retries: pair(kind, bret, aret),
                extrapolated: replay.as_ref().map(|r| r.counts.extrapolated[h]),
            })
        })
        .collect();
    let classes = Class::ALL
        .iter()
        .map(|&class| {
            let find = |s: &Summary| {
                s.classes
                    .iter()
                    .find(|c| c.class == class)
                    .map_or((0, 0.0), |c| (c.operations, c.share))
            };
            let ((bo, bs), (ao, as_)) = (find(b), find(a));
            ClassChange {
                class,
                operations: pair(kind, bo, ao),
                share: pair(kind, bs, as_),
            }
        })
        .collect();

    let (operations, outcomes, reclassified) = match (before.analysis, after.analysis) {
        (Some(ba), Some(aa)) => {
            let operations = operation_changes(ba, aa, replay.as_ref());
            let (o, r) = outcome_totals(ba, aa, &operations);
            (operations, Some(o), Some(r))
        }
        _ => (Vec::new(), None, None),
    };
    let exhausted = replay.as_ref().map(|r| {
        let per_hop = |v: &[u64]| -> Vec<HopCount> {
            v.iter()
                .enumerate()
                .filter(|(_, &n)| n > 0)
                .map(|(h, &n)| HopCount {
                    hop: rules.hops.name(h as u16).to_string(),
                    retries: n,
                })
                .collect()
        };
        Exhausted {
            budget: per_hop(&r.counts.budget_exhausted),
            deadline: per_hop(&r.counts.deadline_exhausted),
            budget_operations: r.notes.iter().filter(|n| n.budget_exhausted).count() as u64,
            deadline_operations: r.notes.iter().filter(|n| n.deadline_exhausted).count() as u64,
        }
    });
    let changes = Changes {
        limit: (kind == Kind::Replay).then(|| crate::replay::LIMIT.to_string()),
        operations: pair(kind, b.operations, a.operations),
        attempts: pair(kind, b.attempts, a.attempts),
        hops,
        classes,
        bursts: pair(kind, b.bursts.count, a.bursts.count),
        burst_operations: pair(kind, b.bursts.operations, a.bursts.operations),
        reclassified,
        outcomes,
        exhausted,
    };
    let timelines = timeline_pairs(&before, &after, rules);
    Comparison {
        kind,
        saved: [before.saved, after.saved],
        gate: None,
        before: before.summary,
        after: after.summary,
        changes,
        operations,
        timelines,
    }
}

/// How an operation's final outcome changed from one side to the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutcomeChange {
    SuccessLost,
    SuccessGained,
    /// Known on the first side, not on the second.
    Unknown,
}

impl OutcomeChange {
    pub fn of(before: FinalOutcome, after: FinalOutcome) -> Option<OutcomeChange> {
        match (before, after) {
            (FinalOutcome::Success, FinalOutcome::Failure) => Some(OutcomeChange::SuccessLost),
            (FinalOutcome::Failure | FinalOutcome::Unknown, FinalOutcome::Success) => {
                Some(OutcomeChange::SuccessGained)
            }
            (FinalOutcome::Success | FinalOutcome::Failure, FinalOutcome::Unknown) => {
                Some(OutcomeChange::Unknown)
            }
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            OutcomeChange::SuccessLost => "success-lost",
            OutcomeChange::SuccessGained => "success-gained",
            OutcomeChange::Unknown => "unknown",
        }
    }
}

/// One operation of the second side, against the first.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OperationChange {
    /// Index of the same operation in the first side's results, if it is there.
    pub before: Option<usize>,
    /// The final outcome on the second side; unknown where a replay extrapolated it.
    pub after_outcome: FinalOutcome,
    pub change: Option<OutcomeChange>,
}

/// Matches the operations of both sides by key (both lists are in key order): one
/// [`OperationChange`] per operation of the second side.
fn operation_changes(
    before: &Collected,
    after: &Collected,
    replay: Option<&ReplayFacts>,
) -> Vec<OperationChange> {
    let mut extrapolated: Vec<&OperationKey> = replay
        .map(|r| {
            r.notes
                .iter()
                .zip(&r.keys)
                .filter(|(n, _)| n.final_extrapolated)
                .map(|(_, k)| k)
                .collect()
        })
        .unwrap_or_default();
    extrapolated.sort();
    let mut i = 0;
    after
        .operations
        .iter()
        .map(|a| {
            while i < before.operations.len() && before.operations[i].key < a.key {
                i += 1;
            }
            let b = (i < before.operations.len() && before.operations[i].key == a.key).then_some(i);
            let after_outcome = if extrapolated.binary_search(&&a.key).is_ok() {
                FinalOutcome::Unknown
            } else {
                a.final_outcome
            };
            OperationChange {
                before: b,
                after_outcome,
                change: b.and_then(|b| {
                    OutcomeChange::of(before.operations[b].final_outcome, after_outcome)
                }),
            }
        })
        .collect()
}

/// The totals of the per-operation changes.
fn outcome_totals(
    before: &Collected,
    after: &Collected,
    changes: &[OperationChange],
) -> (OutcomeChanges, u64) {
    let mut out = OutcomeChanges {
        compared: 0,
        success_lost: OperationList::default(),
        success_gained: OperationList::default(),
        unknown: OperationList::default(),
    };
    let mut reclassified = 0;
    for (a, c) in after.operations.iter().zip(changes) {
        let Some(b) = c.before else { continue };
        out.compared += 1;
        reclassified += u64::from(before.operations[b].class != a.class);
        match c.change {
            Some(OutcomeChange::SuccessLost) => out.success_lost.add(&a.key),
            Some(OutcomeChange::SuccessGained) => out.success_gained.add(&a.key),
            Some(OutcomeChange::Unknown) => out.unknown.add(&a.key),
            None => {}
        }
    }
    (out, reclassified)
}

/// The hop that takes the load: the dependency when it has attempts, else the last hop
/// with attempts on either side.
pub fn loaded_hop<'a>(changes: &'a Changes, rules: &Rules) -> Option<&'a HopChange> {
    let dependency = rules.hops.name(rules.hops.dependency_index());
    changes
        .hops
        .iter()
        .find(|h| h.hop == dependency)
        .or(changes.hops.last())
}

/// The worst operations of the first side, drawn as they were and as they became.
fn timeline_pairs(before: &Side, after: &Side, rules: &Rules) -> Vec<TimelinePair> {
    let (Some(ba), Some(aa)) = (before.analysis, after.analysis) else {
        return Vec::new();
    };
    let draw = |k: &crate::analysis::KeptOperation, analysis: &Collected| {
        (
            OperationRecord::new(&k.result, &rules.hops),
            crate::timeline::operation_timeline(
                k,
                analysis,
                rules,
                Some(crate::summary::TIMELINE_ATTEMPTS_DRAWN),
            ),
        )
    };
    before
        .summary
        .worst_operations
        .iter()
        .take(crate::summary::TIMELINES_DRAWN)
        .filter_map(|w| {
            let key = |k: &&crate::analysis::KeptOperation| {
                k.result.key.operation_id.as_ref() == w.operation_id
                    && k.result.key.test_run_id.as_deref() == w.test_run_id.as_deref()
            };
            let b = ba.kept.iter().find(key)?;
            Some(TimelinePair {
                before: draw(b, ba),
                after: aa.kept.iter().find(key).map(|k| draw(k, aa)),
            })
        })
        .collect()
}

//! Where the merge's rows go, one at a time and in key order ([`RowSink`]), and the
//! per-operation counts the summary reads ([`Tally`]), made as the rows stream by. Nothing
//! here holds all the rows: a run over any number of operations keeps its counts and its
//! [`Tally::top`] worst operations, and whatever else a sink chooses to keep.

use std::collections::BTreeMap;

use anyhow::Result;

use super::{worst_first, Analysis, OperationResult};
use crate::classify::{Class, Finding, FindingKind};
use crate::model::Millis;

/// Receives each operation's final row, in key order, as the merge makes it: the tallies
/// of the summary and of the gate, the per-operation writers, or a collector for the
/// commands that compare rows (`diff`, `replay`).
pub trait RowSink {
    fn row(&mut self, row: &OperationResult) -> Result<()>;
}

/// Collects the rows: for the commands that need them all.
impl RowSink for Vec<OperationResult> {
    fn row(&mut self, row: &OperationResult) -> Result<()> {
        self.push(row.clone());
        Ok(())
    }
}

/// Nothing to do with the rows beyond the tally.
pub struct Discard;

impl RowSink for Discard {
    fn row(&mut self, _: &OperationResult) -> Result<()> {
        Ok(())
    }
}

/// Several sinks, each given every row in turn.
pub struct Both<'a, 'b>(pub &'a mut dyn RowSink, pub &'b mut dyn RowSink);

impl RowSink for Both<'_, '_> {
    fn row(&mut self, row: &OperationResult) -> Result<()> {
        self.0.row(row)?;
        self.1.row(row)
    }
}

/// Overlap added up over operations, in key order (so that the sum of the floating-point
/// values is the same however the input was split): the summary's `overlap` as it is.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct OverlapSummary {
    /// Operations with overlap.
    pub operations: u64,
    /// Sum of the operations' overlap_ms.
    pub total_ms: Millis,
    /// Largest overlap_ms of one operation.
    pub max_ms: Millis,
}

/// The counts over all operations that the summary reports, and the worst ones.
#[derive(Debug, Clone)]
pub struct Tally {
    pub operations: u64,
    /// Operations that first multiplied at each hop, by hop index.
    pub first_multiplying: Vec<u64>,
    /// Operations per class, in [`Class::ALL`] order.
    pub classes: [u64; Class::ALL.len()],
    /// Operations with each finding (an operation has a finding at a hop once).
    pub findings: BTreeMap<Finding, u64>,
    /// Operations with a finding of each kind at some hop, in [`FindingKind::ALL`] order.
    kinds: [u64; FindingKind::ALL.len()],
    pub overlap: OverlapSummary,
    /// How many worst operations are kept.
    top: usize,
    /// The worst operations so far: at most `2 × top`, trimmed to `top` when full, so
    /// that keeping them costs a sort per `top` rows and never all rows.
    worst: Vec<OperationResult>,
    /// Whether `worst` was trimmed once: its first `top` are then sorted, and the `top`-th
    /// is a bar that an operation must pass to be listed.
    trimmed: bool,
}

impl Tally {
    /// A tally over `hops` hops that keeps the `top` worst operations.
    pub fn new(hops: usize, top: usize) -> Tally {
        Tally {
            operations: 0,
            first_multiplying: vec![0; hops],
            classes: [0; Class::ALL.len()],
            findings: BTreeMap::new(),
            kinds: [0; FindingKind::ALL.len()],
            overlap: OverlapSummary::default(),
            top,
            worst: Vec::new(),
            trimmed: false,
        }
    }

    pub fn add(&mut self, op: &OperationResult) {
        self.operations += 1;
        if let Some(h) = op.first_multiplying_hop {
            self.first_multiplying[h as usize] += 1;
        }
        self.classes[op.class.index()] += 1;
        let mut kinds = [false; FindingKind::ALL.len()];
        for f in &op.findings {
            *self.findings.entry(*f).or_default() += 1;
            kinds[f.kind.index()] = true;
        }
        for (n, seen) in self.kinds.iter_mut().zip(kinds) {
            *n += u64::from(seen);
        }
        if op.overlap_ms > 0.0 {
            self.overlap.operations += 1;
            self.overlap.total_ms += op.overlap_ms;
            self.overlap.max_ms = self.overlap.max_ms.max(op.overlap_ms);
        }
        if self.top > 0 {
            // Below the current `top`-th worst, it can never be listed.
            let below = self.trimmed && worst_first(op, &self.worst[self.top - 1]).is_gt();
            if !below {
                self.worst.push(op.clone());
                if self.worst.len() == 2 * self.top {
                    self.trim();
                }
            }
        }
    }

    fn trim(&mut self) {
        self.worst.sort_by(worst_first);
        self.worst.truncate(self.top);
        self.trimmed = self.worst.len() == self.top;
    }

    /// Ends the tally: the worst operations sorted. The merge calls it after the last row.
    pub fn finish(&mut self) {
        self.trim();
    }

    /// The `top` worst operations, worst first (once [`Tally::finish`]ed).
    pub fn worst(&self) -> &[OperationResult] {
        &self.worst
    }

    /// Operations with a finding of `kind` at `hop`, or at any hop.
    pub fn with_finding(&self, kind: FindingKind, hop: Option<u16>) -> u64 {
        match hop {
            Some(hop) => self
                .findings
                .get(&Finding { kind, hop })
                .copied()
                .unwrap_or(0),
            None => self.kinds[kind.index()],
        }
    }
}

impl RowSink for Tally {
    fn row(&mut self, row: &OperationResult) -> Result<()> {
        self.add(row);
        Ok(())
    }
}

/// An analysis with every row kept, in key order: what `diff` and `replay` compare
/// operation by operation. Everything else reads the [`Analysis`] it derefs to.
pub struct Collected {
    pub analysis: Analysis,
    /// Sorted by (test run, operation ID).
    pub operations: Vec<OperationResult>,
}

impl std::ops::Deref for Collected {
    type Target = Analysis;

    fn deref(&self) -> &Analysis {
        &self.analysis
    }
}

impl Collected {
    /// Runs an analysis that sends its rows to the sink it is given, keeping them all.
    pub fn of(analyse: impl FnOnce(&mut dyn RowSink) -> Result<Analysis>) -> Result<Collected> {
        let mut operations = Vec::new();
        let analysis = analyse(&mut operations)?;
        Ok(Collected {
            analysis,
            operations,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::FinalOutcome;
    use crate::model::OperationKey;
    use proptest::prelude::*;

    fn op(id: u32, attempts: u32, overlap_ms: Millis) -> OperationResult {
        OperationResult {
            key: OperationKey {
                test_run_id: None,
                operation_id: format!("op-{id:05}").into(),
            },
            class: Class::Healthy,
            first_multiplying_hop: None,
            funnel: vec![attempts],
            findings: Vec::new(),
            first_start_ms: 0.0,
            last_finish_ms: None,
            overlap_ms,
            final_outcome: FinalOutcome::Success,
        }
    }

    proptest! {
        /// The worst operations kept as rows stream by, trimmed now and then, are the
        /// first `top` of all rows sorted worst first, whatever their order and ties.
        #[test]
        fn the_worst_kept_in_passing_are_the_worst_of_all(
            shape in prop::collection::vec((1u32..6, 0u8..3), 0..200),
            top in 0usize..12,
        ) {
            let rows: Vec<OperationResult> = shape
                .iter()
                .enumerate()
                .map(|(i, &(attempts, overlap))| op(i as u32, attempts, f64::from(overlap)))
                .collect();
            let mut tally = Tally::new(1, top);
            for row in &rows {
                tally.add(row);
            }
            tally.finish();
            let mut all = rows.clone();
            all.sort_by(worst_first);
            all.truncate(top);
            prop_assert_eq!(tally.worst(), &all[..]);
            prop_assert_eq!(tally.operations, rows.len() as u64);
        }
    }
}

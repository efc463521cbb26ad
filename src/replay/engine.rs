//! The replay engine: what a candidate retry policy would have made of the observed
//! attempt trees. Pure: observed trees in, replayed attempts out.
//!
//! Each operation's tree is walked top-down. Under the candidate, attempt k of a line
//! happens when attempt k−1 failed with an outcome the candidate retries, k is within the
//! hop's `max_attempts`, the operation's deadline has not passed, and the hop's retry
//! budget has room. Attempt k keeps the observed attempt k's outcome and duration; past the
//! observed attempts it repeats the last observed one (outcome, duration and everything it
//! caused downstream), marked as extrapolated. An attempt that no longer happens takes its
//! downstream subtree with it; an attempt that moves (a new backoff) moves its subtree by
//! the same time. An attempt that succeeded because a line below it succeeded in the end
//! fails when, under the candidate, that line ends in a failure: the failure comes back up,
//! and the layer above may retry it. Budgets are shared by all operations at a hop, so every operation is
//! replayed at once, in time order, from one queue of pending attempts.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

use anyhow::{bail, Result};

use super::candidate::{Budget, Candidate, HopPolicy};
use crate::group::{Parent, Tree};
use crate::model::{Attempt, Millis};

/// Replayed attempts allowed per observed attempt before the replay stops with an error:
/// a candidate that retries ten times at four nested layers would make 10,000 attempts of
/// one, and memory must stay bounded whatever the candidate says.
pub const GROWTH_LIMIT: usize = 50;

/// Replayed attempts always allowed, however few were observed.
pub const MIN_ATTEMPT_LIMIT: usize = 1_000_000;

/// One observed operation, ready to replay.
#[derive(Debug, Clone)]
pub struct Observed {
    /// A stable hash of the operation key: the jitter draws depend on it, not on the
    /// order the input was read in.
    pub key_hash: u64,
    /// In canonical order.
    pub attempts: Vec<Attempt>,
    pub tree: Tree,
}

/// One operation as the candidate would have run it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Replayed {
    /// In the order they were decided (time order); `parent` indexes this list.
    pub attempts: Vec<Attempt>,
    /// The replayed attempt that caused each one; `None` at the first hop (or an orphan).
    pub parent: Vec<Option<u32>>,
    /// The attempt repeats the last observed attempt of its line (or lies below one that
    /// does): its outcome is a guess.
    pub extrapolated: Vec<bool>,
    /// A first-hop line ended on an extrapolated attempt: whether the request succeeded is
    /// not known.
    pub final_extrapolated: bool,
    /// A retry the candidate wanted was refused by a retry budget.
    pub budget_exhausted: bool,
    /// A retry the candidate wanted would have started past the deadline.
    pub deadline_exhausted: bool,
}

/// Counts over all operations, per hop index.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counts {
    /// Replayed attempts that were extrapolated.
    pub extrapolated: Vec<u64>,
    /// Retries refused by the hop's retry budget.
    pub budget_exhausted: Vec<u64>,
    /// Retries that would have started past the operation's deadline.
    pub deadline_exhausted: Vec<u64>,
}

/// Replays every operation under `candidate`; `seed` drives the jitter draws.
pub fn replay(
    observed: &[Observed],
    candidate: &Candidate,
    seed: u64,
    hops: usize,
) -> Result<(Vec<Replayed>, Counts)> {
    let observed_total: usize = observed.iter().map(|o| o.attempts.len()).sum();
    let limit = (observed_total * GROWTH_LIMIT).max(MIN_ATTEMPT_LIMIT);
    let mut sim = Simulation {
        observed,
        candidate,
        seed,
        out: vec![Replayed::default(); observed.len()],
        lines: (0..observed.len()).map(|_| LineState::default()).collect(),
        counts: Counts {
            extrapolated: vec![0; hops],
            budget_exhausted: vec![0; hops],
            deadline_exhausted: vec![0; hops],
        },
        budgets: (0..hops)
            .map(|h| BudgetState::new(candidate.hops[h].budget))
            .collect(),
        children: observed
            .iter()
            .map(|o| Children::of(&o.tree, o.attempts.len()))
            .collect(),
        first_start: observed
            .iter()
            .map(|o| {
                o.attempts
                    .iter()
                    .map(|a| a.start_ms)
                    .fold(Millis::INFINITY, Millis::min)
            })
            .collect(),
        queue: BinaryHeap::new(),
        seq: 0,
        made: 0,
        limit,
    };
    for (op, o) in observed.iter().enumerate() {
        for (l, line) in o.tree.lines.iter().enumerate() {
            if matches!(line.parent, Parent::Request | Parent::Orphan(_)) {
                sim.push_decide(op as u32, l as u32, 1, None, false, 0.0, None);
            }
        }
    }
    while let Some(item) = sim.queue.pop() {
        match item.what {
            What::Finish(index) => sim.finish(item.op, index),
            What::Decide(d) => sim.decide(item.op, item.time, d)?,
        }
    }
    let Simulation {
        mut out,
        lines,
        counts,
        ..
    } = sim;
    for (replayed, lines) in out.iter_mut().zip(lines) {
        // The last replayed attempt of each first-hop line decides the request's outcome.
        replayed.final_extrapolated = lines
            .last_of
            .iter()
            .filter(|((parent, _), _)| *parent == NO_PARENT)
            .any(|(_, &i)| lines.uncertain[i as usize]);
    }
    Ok((out, counts))
}

/// An attempt waiting to be decided: attempt `k` of observed line `line`.
#[derive(Debug, Clone, Copy)]
struct Decide {
    line: u32,
    k: u32,
    /// The replayed parent attempt.
    parent: Option<u32>,
    /// The parent is extrapolated, so everything under it is.
    inherited: bool,
    /// How far the attempt moved from the observed attempt it repeats.
    shift_ms: Millis,
    /// The candidate's backoff before it, when the candidate sets one.
    delay_ms: Option<Millis>,
}

#[derive(Debug, Clone, Copy)]
enum What {
    /// A replayed attempt (index into its operation's attempts) finished: its outcome is
    /// settled, and whether its line goes on is decided.
    Finish(u32),
    Decide(Decide),
}

#[derive(Debug, Clone, Copy)]
struct Item {
    time: Millis,
    /// At one instant: originals (they fund ratio budgets), then retries, then finishes.
    rank: u8,
    op: u32,
    seq: u64,
    what: What,
}

impl Item {
    fn key(&self) -> (Millis, u8, u32, u64) {
        (self.time, self.rank, self.op, self.seq)
    }
}

impl PartialEq for Item {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Item {}
impl PartialOrd for Item {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Item {
    /// Reversed: `BinaryHeap` pops its largest item, and the earliest must come first.
    fn cmp(&self, other: &Self) -> Ordering {
        let (a, b) = (self.key(), other.key());
        b.0.total_cmp(&a.0)
            .then(b.1.cmp(&a.1))
            .then(b.2.cmp(&a.2))
            .then(b.3.cmp(&a.3))
    }
}

/// One hop's retry budget as time goes by.
#[derive(Debug)]
enum BudgetState {
    Unlimited,
    Ratio {
        ratio: f64,
        window_ms: Millis,
        reserve: f64,
        originals: VecDeque<Millis>,
        retries: VecDeque<Millis>,
    },
    Tokens {
        max: f64,
        ratio: f64,
        tokens: f64,
    },
}

/// Slack for comparing a count with a product of decimal fractions (0.1 × 100).
const BUDGET_EPSILON: f64 = 1e-9;

impl BudgetState {
    fn new(budget: Option<Budget>) -> BudgetState {
        match budget {
            None => BudgetState::Unlimited,
            Some(Budget::Ratio {
                ratio,
                window_ms,
                min_per_s,
            }) => BudgetState::Ratio {
                ratio,
                window_ms,
                reserve: min_per_s * window_ms / 1000.0,
                originals: VecDeque::new(),
                retries: VecDeque::new(),
            },
            Some(Budget::Tokens {
                max_tokens,
                token_ratio,
            }) => BudgetState::Tokens {
                max: max_tokens,
                ratio: token_ratio,
                tokens: max_tokens,
            },
        }
    }

    /// Whether a retry may start at `time`.
    fn has_room(&mut self, time: Millis) -> bool {
        match self {
            BudgetState::Unlimited => true,
            BudgetState::Ratio {
                ratio,
                window_ms,
                reserve,
                originals,
                retries,
            } => {
                let from = time - *window_ms;
                for q in [&mut *originals, &mut *retries] {
                    while q.front().is_some_and(|&t| t <= from) {
                        q.pop_front();
                    }
                }
                (retries.len() + 1) as f64
                    <= *ratio * originals.len() as f64 + *reserve + BUDGET_EPSILON
            }
            BudgetState::Tokens { max, tokens, .. } => *tokens > *max / 2.0,
        }
    }

    /// An attempt started at `time`.
    fn record(&mut self, time: Millis, original: bool) {
        if let BudgetState::Ratio {
            originals, retries, ..
        } = self
        {
            if original {
                originals.push_back(time);
            } else {
                retries.push_back(time);
            }
        }
    }

    /// An attempt finished.
    fn settle(&mut self, success: bool) {
        if let BudgetState::Tokens { max, ratio, tokens } = self {
            *tokens = if success {
                (*tokens + *ratio).min(*max)
            } else {
                (*tokens - 1.0).max(0.0)
            };
        }
    }
}

struct Simulation<'a> {
    observed: &'a [Observed],
    candidate: &'a Candidate,
    seed: u64,
    out: Vec<Replayed>,
    /// Per operation, where each replayed attempt stands.
    lines: Vec<LineState>,
    counts: Counts,
    budgets: Vec<BudgetState>,
    children: Vec<Children>,
    /// Each operation's first start: where its deadline counts from.
    first_start: Vec<Millis>,
    queue: BinaryHeap<Item>,
    seq: u64,
    made: usize,
    limit: usize,
}

impl Simulation<'_> {
    #[allow(clippy::too_many_arguments)]
    fn push_decide(
        &mut self,
        op: u32,
        line: u32,
        k: u32,
        parent: Option<u32>,
        inherited: bool,
        shift_ms: Millis,
        delay_ms: Option<Millis>,
    ) {
        let observed = self.observed;
        let o = &observed[op as usize];
        let members = o.tree.attempts(&o.tree.lines[line as usize]);
        let n = members.len() as u32;
        let repeats = &o.attempts[members[(k.min(n) - 1) as usize] as usize];
        self.seq += 1;
        self.queue.push(Item {
            time: repeats.start_ms + shift_ms,
            rank: if k == 1 { 1 } else { 2 },
            op,
            seq: self.seq,
            what: What::Decide(Decide {
                line,
                k,
                parent,
                inherited,
                shift_ms,
                delay_ms,
            }),
        });
    }

    fn decide(&mut self, op: u32, time: Millis, d: Decide) -> Result<()> {
        // Copied out of `self`: the observed trees outlive the simulation's mutable state.
        let observed = self.observed;
        let o = &observed[op as usize];
        let members = o.tree.attempts(&o.tree.lines[d.line as usize]);
        let n = members.len() as u32;
        let obs_index = members[(d.k.min(n) - 1) as usize];
        let obs = &o.attempts[obs_index as usize];
        let hop = obs.hop;
        if d.k > 1 && !self.budgets[hop as usize].has_room(time) {
            self.counts.budget_exhausted[hop as usize] += 1;
            self.out[op as usize].budget_exhausted = true;
            return Ok(());
        }
        self.made += 1;
        if self.made > self.limit {
            bail!(
                "the candidate would make more than {} attempts ({}× the {} observed): lower max_attempts, or replay fewer operations",
                self.limit,
                GROWTH_LIMIT,
                self.observed.iter().map(|o| o.attempts.len()).sum::<usize>()
            );
        }
        let extrapolated = d.inherited || d.k > n;
        let mut a = obs.clone();
        a.start_ms = obs.start_ms + d.shift_ms;
        a.finish_ms = obs.finish_ms.map(|f| f + d.shift_ms);
        if let Some(delay) = d.delay_ms {
            a.delay_ms = Some(delay);
        }
        if d.k > n {
            let beyond = d.k - n;
            a.attempt = a.attempt.map(|x| x + beyond);
            a.delivery = a.delivery.map(|x| x + beyond);
        }
        self.budgets[hop as usize].record(time, d.k == 1);
        if extrapolated {
            self.counts.extrapolated[hop as usize] += 1;
        }
        let replayed = &mut self.out[op as usize];
        let index = replayed.attempts.len() as u32;
        let (start, finish) = (a.start_ms, a.finish_ms);
        replayed.attempts.push(a);
        replayed.parent.push(d.parent);
        replayed.extrapolated.push(extrapolated);
        let state = &mut self.lines[op as usize];
        state.decided.push(d);
        state.observed.push(obs_index);
        state.uncertain.push(extrapolated);
        state
            .last_of
            .insert((d.parent.unwrap_or(NO_PARENT), d.line), index);

        // What this attempt caused downstream: the observed children of the attempt it
        // repeats, moved with it.
        let children = self.children[op as usize].lines_under(obs_index).to_vec();
        let shift = start - obs.start_ms;
        for child in children {
            self.push_decide(op, child, 1, Some(index), extrapolated, shift, None);
        }
        match finish {
            Some(finish) => {
                self.seq += 1;
                self.queue.push(Item {
                    time: finish,
                    rank: 3,
                    op,
                    seq: self.seq,
                    what: What::Finish(index),
                });
            }
            // Still in flight at the end of the trace: nothing waits for it to fail.
            None => self.next_attempt(op, index),
        }
        Ok(())
    }

    /// A replayed attempt finished. Its outcome is the observed one, unless it succeeded
    /// only because a line it called succeeded in the end, and under the candidate that
    /// line now ends in a failure: then the failure comes back up (a gateway that stops
    /// retrying hands its caller the dependency's 503). Then budgets are settled and the
    /// line's next attempt decided.
    fn finish(&mut self, op: u32, index: u32) {
        let observed = self.observed;
        let o = &observed[op as usize];
        let obs_index = self.lines[op as usize].observed[index as usize];
        let mut outcome = self.out[op as usize].attempts[index as usize].outcome;
        if outcome.is_some_and(|x| x.is_success()) {
            let state = &self.lines[op as usize];
            let failed_below = self.children[op as usize]
                .lines_under(obs_index)
                .iter()
                .filter_map(|&l| {
                    let observed_last = o.tree.attempts(&o.tree.lines[l as usize]).last()?;
                    let succeeded = o.attempts[*observed_last as usize]
                        .outcome
                        .is_some_and(|x| x.is_success());
                    let last = *state.last_of.get(&(index, l))?;
                    let now = self.out[op as usize].attempts[last as usize].outcome;
                    (succeeded && now.is_some_and(|x| !x.is_success()))
                        .then_some((now, state.uncertain[last as usize]))
                })
                .next();
            if let Some((failure, uncertain)) = failed_below {
                outcome = failure;
                self.out[op as usize].attempts[index as usize].outcome = failure;
                self.lines[op as usize].uncertain[index as usize] |= uncertain;
            }
        }
        let hop = self.out[op as usize].attempts[index as usize].hop;
        if let Some(outcome) = outcome {
            self.budgets[hop as usize].settle(outcome.is_success());
        }
        self.next_attempt(op, index);
    }

    /// Decides whether the line of replayed attempt `index` goes on, and when.
    fn next_attempt(&mut self, op: u32, index: u32) {
        let (observed, candidate) = (self.observed, self.candidate);
        let o = &observed[op as usize];
        let d = self.lines[op as usize].decided[index as usize];
        let a = &self.out[op as usize].attempts[index as usize];
        let (start, finish, outcome, hop) = (a.start_ms, a.finish_ms, a.outcome, a.hop);
        let members = o.tree.attempts(&o.tree.lines[d.line as usize]);
        let n = members.len() as u32;
        let policy: &HopPolicy = &candidate.hops[hop as usize];
        let next = d.k + 1;
        if next > policy.max_attempts.unwrap_or(n) {
            return;
        }
        let retried = match (&policy.retry_on, outcome) {
            (Some(set), Some(outcome)) => set.contains(&outcome),
            // An outcome not logged: the layer's observed retry shows it failed.
            (Some(_), None) => next <= n,
            (None, _) if next <= n => true,
            (None, outcome) => outcome.is_some_and(|o| !o.is_success()),
        };
        if !retried {
            return;
        }
        let observed_next = (next <= n).then(|| &o.attempts[members[next as usize - 1] as usize]);
        let last_two = (n >= 2).then(|| {
            let at = |k: u32| o.attempts[members[k as usize - 1] as usize].start_ms;
            at(n) - at(n - 1)
        });
        let (next_start, delay) = match (policy.backoff, finish) {
            (Some(backoff), Some(finish)) => {
                let draw = if backoff.is_jittered() {
                    unit_draw(self.seed, o.key_hash, d.line, next, d.parent)
                } else {
                    0.0
                };
                let delay = backoff.delay_ms(d.k, draw);
                (finish + delay, Some(delay))
            }
            // Without a candidate backoff (or a finish to wait from), the observed spacing.
            _ => match observed_next {
                Some(next_obs) => (next_obs.start_ms + d.shift_ms, None),
                None => (
                    start + last_two.unwrap_or_else(|| finish.map_or(0.0, |f| f - start)),
                    None,
                ),
            },
        };
        if let Some(deadline) = candidate.deadline_ms {
            if next_start >= self.first_start[op as usize] + deadline {
                self.counts.deadline_exhausted[hop as usize] += 1;
                self.out[op as usize].deadline_exhausted = true;
                return;
            }
        }
        let repeats = observed_next.unwrap_or(&o.attempts[members[n as usize - 1] as usize]);
        self.push_decide(
            op,
            d.line,
            next,
            d.parent,
            d.inherited,
            next_start - repeats.start_ms,
            delay,
        );
    }
}

/// Marks the first hop's lines, which have no replayed parent, in [`LineState::last_of`].
const NO_PARENT: u32 = u32::MAX;

/// Where the replayed attempts of one operation stand, parallel to its attempts.
#[derive(Debug, Default)]
struct LineState {
    /// How each attempt was decided.
    decided: Vec<Decide>,
    /// The observed attempt each one repeats.
    observed: Vec<u32>,
    /// Its outcome is a guess: it is extrapolated, or took its failure from a line that
    /// ended on an extrapolated attempt.
    uncertain: Vec<bool>,
    /// The last replayed attempt of each line, by (replayed parent, observed line).
    last_of: std::collections::HashMap<(u32, u32), u32>,
}

/// The lines under each observed attempt, as one list with offsets: `lines_under(i)` is
/// `lines[offsets[i]..offsets[i + 1]]`.
#[derive(Debug)]
struct Children {
    offsets: Vec<u32>,
    lines: Vec<u32>,
}

impl Children {
    fn of(tree: &Tree, attempts: usize) -> Children {
        let mut offsets = vec![0u32; attempts + 1];
        for l in &tree.lines {
            if let Parent::Attempt(p) = l.parent {
                offsets[p as usize + 1] += 1;
            }
        }
        for i in 1..offsets.len() {
            offsets[i] += offsets[i - 1];
        }
        let mut next = offsets.clone();
        let mut lines = vec![0u32; offsets[attempts] as usize];
        for (i, l) in tree.lines.iter().enumerate() {
            if let Parent::Attempt(p) = l.parent {
                lines[next[p as usize] as usize] = i as u32;
                next[p as usize] += 1;
            }
        }
        Children { offsets, lines }
    }

    fn lines_under(&self, attempt: u32) -> &[u32] {
        &self.lines
            [self.offsets[attempt as usize] as usize..self.offsets[attempt as usize + 1] as usize]
    }
}

/// A uniform draw in `[0, 1)` for one retry, from the seed and where the retry is: the
/// same seed gives the same draws whatever order the input was read in.
fn unit_draw(seed: u64, key_hash: u64, line: u32, k: u32, parent: Option<u32>) -> f64 {
    let mut x = seed ^ key_hash.rotate_left(17);
    for part in [
        u64::from(line),
        u64::from(k),
        parent.map_or(u64::MAX, u64::from),
    ] {
        x = splitmix64(x ^ part);
    }
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// SplitMix64's output function: a well-mixed 64-bit value from any input.
fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// FNV-1a over the operation key: the jitter's per-operation stream.
pub fn key_hash(test_run_id: Option<&str>, operation_id: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let bytes = test_run_id
        .unwrap_or("")
        .bytes()
        .chain([0x1f])
        .chain(operation_id.bytes());
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::build_tree;
    use crate::model::{Outcome, SourceRef};
    use crate::normalize::canonical_attempt_order;
    use crate::replay::candidate::{parse, Backoff};
    use crate::rules::{HopOrder, Rules};

    /// An attempt at `hop` (caller 0, gateway 1, dependency 3) from `start` to `finish`.
    fn attempt(hop: u16, start: Millis, finish: Millis, outcome: Outcome) -> Attempt {
        Attempt {
            source: SourceRef { file: 0, line: 0 },
            hop,
            attempt: None,
            start_ms: start,
            finish_ms: Some(finish),
            start_inferred: false,
            outcome: Some(outcome),
            target: None,
            message_id: None,
            delivery: None,
            span_id: None,
            parent_id: None,
            delay_ms: None,
            retry_after_ms: None,
            effect: false,
            hidden: false,
            untimed: false,
        }
    }

    fn observed(mut attempts: Vec<Attempt>) -> Observed {
        attempts.sort_by(canonical_attempt_order);
        let tree = build_tree(&attempts, &Rules::new(HopOrder::default()), 0.0);
        Observed {
            key_hash: 1,
            attempts,
            tree,
        }
    }

    fn replay_one(o: Observed, candidate: &str) -> (Replayed, Counts) {
        let c = parse(candidate, &HopOrder::default()).unwrap();
        let (mut out, counts) = replay(&[o], &c, 1, 4).unwrap();
        (out.remove(0), counts)
    }

    /// (hop, start, finish, outcome) of each replayed attempt, in start order.
    fn shape(r: &Replayed) -> Vec<(u16, Millis, Millis, Option<Outcome>)> {
        let mut v: Vec<_> = r
            .attempts
            .iter()
            .map(|a| (a.hop, a.start_ms, a.finish_ms.unwrap(), a.outcome))
            .collect();
        v.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        v
    }

    const E503: Outcome = Outcome::Http(503);

    /// Caller 0–1000 (ok) → gateway 10–300 (503), 400–990 (ok), each with one dependency
    /// attempt inside it with the gateway attempt's outcome.
    fn gateway_retry() -> Observed {
        observed(vec![
            attempt(0, 0.0, 1000.0, Outcome::Ok),
            attempt(1, 10.0, 300.0, E503),
            attempt(3, 20.0, 290.0, E503),
            attempt(1, 400.0, 990.0, Outcome::Ok),
            attempt(3, 410.0, 980.0, Outcome::Ok),
        ])
    }

    #[test]
    fn an_empty_candidate_replays_every_attempt_where_it_was() {
        let o = gateway_retry();
        let expected: Vec<_> = {
            let mut v: Vec<_> = o
                .attempts
                .iter()
                .map(|a| (a.hop, a.start_ms, a.finish_ms.unwrap(), a.outcome))
                .collect();
            v.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
            v
        };
        let (r, counts) = replay_one(o, "");
        assert_eq!(shape(&r), expected);
        assert!(r.extrapolated.iter().all(|&e| !e));
        assert_eq!(counts.extrapolated, vec![0; 4]);
    }

    #[test]
    fn a_layer_that_stops_retrying_takes_the_subtree_and_hands_up_its_failure() {
        let (r, _) = replay_one(gateway_retry(), "[hops.gateway]\nmax_attempts = 1\n");
        // Gateway attempt 2 and its dependency attempt are gone; the caller, which
        // succeeded only through that retry, now ends with the gateway's 503.
        assert_eq!(
            shape(&r),
            vec![
                (0, 0.0, 1000.0, Some(E503)),
                (1, 10.0, 300.0, Some(E503)),
                (3, 20.0, 290.0, Some(E503)),
            ]
        );
    }

    #[test]
    fn a_new_backoff_moves_the_retry_and_everything_below_it() {
        // Fixed 50 ms after gateway attempt 1 ends at 300: attempt 2 starts at 350, 50 ms
        // earlier than observed, and its dependency attempt moves by the same −50 ms.
        let (r, _) = replay_one(
            gateway_retry(),
            "[hops.gateway]\nbackoff = \"fixed\"\nbase_ms = 50\n",
        );
        let s = shape(&r);
        assert_eq!(s[3], (1, 350.0, 940.0, Some(Outcome::Ok)));
        assert_eq!(s[4], (3, 360.0, 930.0, Some(Outcome::Ok)));
        assert_eq!(
            r.attempts
                .iter()
                .filter(|a| a.hop == 1)
                .filter_map(|a| a.delay_ms)
                .collect::<Vec<_>>(),
            vec![50.0]
        );
    }

    #[test]
    fn extrapolated_attempts_repeat_the_last_observed_one_with_its_subtree() {
        // The caller's only attempt fails; with 3 attempts and exponential backoff from
        // 100 ms: attempt 2 at 1000 + 100 = 1100, attempt 3 at 2100 + 200 = 2300, each a
        // copy of attempt 1 (1000 ms long, 503) with its gateway and dependency attempts.
        let o = observed(vec![
            attempt(0, 0.0, 1000.0, E503),
            attempt(1, 10.0, 990.0, E503),
            attempt(3, 20.0, 980.0, E503),
        ]);
        let (r, counts) = replay_one(
            o,
            "[hops.caller]\nmax_attempts = 3\nbackoff = \"exponential\"\nbase_ms = 100\n",
        );
        let callers: Vec<Millis> = shape(&r).iter().filter(|a| a.0 == 0).map(|a| a.1).collect();
        assert_eq!(callers, vec![0.0, 1100.0, 2300.0]);
        assert_eq!(r.attempts.len(), 9);
        assert_eq!(counts.extrapolated, vec![2, 2, 0, 2]);
        assert!(r.final_extrapolated);
    }

    #[test]
    fn the_deadline_stops_retries_that_would_start_past_it() {
        // Caller attempts 0–100, 200–300, 400–500 (503, 503, ok). A deadline of 350 ms
        // lets attempt 2 (starts at 200) but not attempt 3 (starts at 400).
        let o = observed(vec![
            attempt(0, 0.0, 100.0, E503),
            attempt(0, 200.0, 300.0, E503),
            attempt(0, 400.0, 500.0, Outcome::Ok),
        ]);
        let (r, counts) = replay_one(o, "deadline_ms = 350\n");
        assert_eq!(r.attempts.len(), 2);
        assert!(r.deadline_exhausted);
        assert_eq!(counts.deadline_exhausted, vec![1, 0, 0, 0]);
    }

    #[test]
    fn a_token_bucket_stops_retries_once_half_empty() {
        // gRPC throttling with 4 tokens: retries stop at 2 tokens or fewer. Five
        // operations fail once each, one after the other (each failure takes a token
        // when it ends): after two failures the bucket holds 2, so from the third
        // operation on, no retry.
        let ops: Vec<Observed> = (0..5)
            .map(|i| {
                let t = i as Millis * 1000.0;
                observed(vec![
                    attempt(0, t, t + 100.0, E503),
                    attempt(0, t + 200.0, t + 300.0, Outcome::Ok),
                ])
            })
            .collect();
        let c = parse(
            "[hops.caller]\n[hops.caller.budget]\nmax_tokens = 4\ntoken_ratio = 0.1\n",
            &HopOrder::default(),
        )
        .unwrap();
        let (out, counts) = replay(&ops, &c, 1, 4).unwrap();
        // Op 0: 503 (4 → 3), retry allowed (3 > 2), ok (3.1). Op 1: 503 (2.1), retry
        // allowed (2.1 > 2), ok (2.2). Op 2: 503 (1.2), no retry; ops 3, 4 likewise.
        let attempts: Vec<usize> = out.iter().map(|r| r.attempts.len()).collect();
        assert_eq!(attempts, vec![2, 2, 1, 1, 1]);
        assert_eq!(counts.budget_exhausted[0], 3);
    }

    #[test]
    fn jitter_draws_stay_in_range_and_depend_on_the_seed() {
        let b = Backoff::FullJitter {
            base_ms: 100.0,
            cap_ms: 1000.0,
        };
        let draws: Vec<f64> = (0..1000).map(|k| unit_draw(7, 42, 0, k, None)).collect();
        assert!(draws.iter().all(|d| (0.0..1.0).contains(d)));
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        assert!((mean - 0.5).abs() < 0.05, "{mean}");
        assert_ne!(unit_draw(7, 42, 0, 1, None), unit_draw(8, 42, 0, 1, None));
        assert!(b.delay_ms(5, 0.999) <= 1000.0);
    }
}

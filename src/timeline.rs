//! Timelines: the numbers that the drawn reports need beyond the summary tables, computed
//! here once so that the HTML page and `show` only format them. Two shapes:
//!
//! - [`AttemptsOverTime`]: attempts started per time bucket, per hop and role, beside the
//!   logical operations started — the one graph that makes a storm visible. A fixed number
//!   of buckets, whatever the size of the input.
//! - [`OperationTimeline`]: one operation's attempts on its own clock (ms since its first
//!   start) with their roles, outcomes, gaps, lanes, tree order, overlaps and bursts.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};

use serde::Serialize;

use crate::analysis::{Analysis, KeptOperation};
use crate::classify::{overlap_spans, Role};
use crate::group::{line_key, LineKey, Parent};
use crate::model::{Millis, Outcome};
use crate::rules::{HopOrder, Rules};
use crate::stats::AttemptStats;

/// Most time buckets in [`AttemptsOverTime`]: one per 6 px of a 1,200 px chart, enough to
/// see a burst, few enough that the series stays a few kilobytes for any input.
pub const TIME_BUCKETS_MAX: usize = 200;

/// Attempts started per time bucket. Bucket `i` covers
/// `[start_ms + i × bucket_ms, start_ms + (i + 1) × bucket_ms)`; buckets are aligned to
/// multiples of `bucket_ms` on the input's clock, so that each is an exact sum of the
/// statistics' fine buckets (which merge across partitions).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct AttemptsOverTime {
    /// Start of the first bucket: the earliest attempt start, rounded down to a multiple
    /// of `bucket_ms`.
    pub start_ms: Millis,
    /// Width of a bucket: 1, 2 or 5 × a power of ten ms, the smallest that is at least
    /// 1/198 of the time from the first attempt start to the last, in whole ms (so that,
    /// aligned, at most 200 buckets cover the input).
    pub bucket_ms: Millis,
    /// Number of buckets; every series has this length.
    pub buckets: usize,
    /// The largest count in one bucket of any series below (operations, or one hop's
    /// originals + retries + redeliveries): the charts' common scale.
    pub peak: u64,
    /// Logical operations whose first attempt started in the bucket.
    pub operations_started: Vec<u64>,
    /// One per hop with attempts, in hop order.
    pub hops: Vec<HopSeries>,
}

/// Attempts started per bucket at one hop, by role.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct HopSeries {
    pub hop: String,
    pub originals: Vec<u64>,
    pub retries: Vec<u64>,
    pub redeliveries: Vec<u64>,
}

/// The smallest step of 1, 2 or 5 × a power of ten that is at least `raw` (and at least 1).
pub fn nice_step(raw: f64) -> f64 {
    if raw.is_nan() || raw <= 1.0 {
        return 1.0;
    }
    let magnitude = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|&step| step >= raw * (1.0 - 1e-12))
        .unwrap_or(10.0 * magnitude)
}

/// The chart of attempts over time, from the statistics' fine time buckets. `None` when
/// there are no attempts.
pub fn attempts_over_time(stats: &AttemptStats, hops: &HopOrder) -> Option<AttemptsOverTime> {
    let (first, last) = stats.start_range()?;
    // Buckets aligned to multiples of the step may start up to one step before the first
    // start, so the step covers the range in two buckets fewer than the most: at most
    // TIME_BUCKETS_MAX in all.
    let step = nice_step((last - first) as f64 / (TIME_BUCKETS_MAX - 2) as f64).round() as i64;
    // The step is a multiple of the fine resolution (see FINE_BUCKETS_MAX); rounding it up
    // to one would only guard against statistics that break that rule.
    let unit = stats.time_resolution_ms();
    let step = (step + unit - 1) / unit * unit;
    let counts = stats.counts_over_time(step)?;
    let buckets = counts.operations_started.len();
    let hop_series: Vec<HopSeries> = counts
        .hops
        .into_iter()
        .enumerate()
        .filter(|(_, [o, r, d])| o.iter().chain(r).chain(d).any(|&n| n > 0))
        .map(|(h, [originals, retries, redeliveries])| HopSeries {
            hop: hops.name(h as u16).to_string(),
            originals,
            retries,
            redeliveries,
        })
        .collect();
    let peak = hop_series
        .iter()
        .flat_map(|s| (0..buckets).map(|i| s.originals[i] + s.retries[i] + s.redeliveries[i]))
        .chain(counts.operations_started.iter().copied())
        .max()
        .unwrap_or(0);
    Some(AttemptsOverTime {
        start_ms: (counts.first_bucket * step) as Millis,
        bucket_ms: step as Millis,
        buckets,
        peak,
        operations_started: counts.operations_started,
        hops: hop_series,
    })
}

/// How an attempt ended, by the colour it gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutcomeKind {
    /// `ok`, or an HTTP status below 400.
    Ok,
    /// `error`, or an HTTP status of 400 or more that is none of the below.
    Error,
    /// `timeout`, HTTP 408 or 504.
    Timeout,
    /// `cancelled`.
    Cancelled,
    /// `rejected`, HTTP 429 or 503 (the server shed load).
    Rejected,
    /// No outcome logged.
    Unknown,
}

impl OutcomeKind {
    pub fn of(outcome: Option<Outcome>) -> OutcomeKind {
        match outcome {
            None => OutcomeKind::Unknown,
            Some(Outcome::Ok) => OutcomeKind::Ok,
            Some(Outcome::Error) => OutcomeKind::Error,
            Some(Outcome::Timeout) => OutcomeKind::Timeout,
            Some(Outcome::Cancelled) => OutcomeKind::Cancelled,
            Some(Outcome::Rejected) => OutcomeKind::Rejected,
            Some(Outcome::Http(code)) => match code {
                ..=399 => OutcomeKind::Ok,
                408 | 504 => OutcomeKind::Timeout,
                429 | 503 => OutcomeKind::Rejected,
                _ => OutcomeKind::Error,
            },
        }
    }

    /// The name of the outcome it stands for, or `unknown`.
    pub fn name(self) -> &'static str {
        let outcome = match self {
            OutcomeKind::Ok => Outcome::Ok,
            OutcomeKind::Error => Outcome::Error,
            OutcomeKind::Timeout => Outcome::Timeout,
            OutcomeKind::Cancelled => Outcome::Cancelled,
            OutcomeKind::Rejected => Outcome::Rejected,
            OutcomeKind::Unknown => return "unknown",
        };
        outcome.name().unwrap_or("unknown")
    }

    pub const ALL: [OutcomeKind; 6] = [
        OutcomeKind::Ok,
        OutcomeKind::Error,
        OutcomeKind::Timeout,
        OutcomeKind::Rejected,
        OutcomeKind::Cancelled,
        OutcomeKind::Unknown,
    ];
}

/// Serialized as its [`OutcomeKind::name`].
impl Serialize for OutcomeKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

/// One operation's attempts on its own clock: every time is ms since its first start.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct OperationTimeline {
    pub test_run_id: Option<String>,
    pub operation_id: String,
    /// The operation's first start, on the input's clock: time 0 of this timeline.
    pub start_ms: Millis,
    /// The latest finish (or start, for attempts still in flight) of the attempts.
    pub end_ms: Millis,
    /// Null where no hop multiplied.
    pub first_multiplying_hop: Option<String>,
    /// One row per hop with attempts, in hop order.
    pub rows: Vec<TimelineRow>,
    /// In hop order, then start order. `parent` indexes this list.
    pub attempts: Vec<TimelineAttempt>,
    /// Indexes into `attempts` in tree order: each attempt followed by the attempts it
    /// caused, depth first, siblings in hop and start order.
    pub tree_order: Vec<u32>,
    /// Stretches during which two or more attempts of one line were active at a hop.
    pub overlaps: Vec<TimelineOverlap>,
    /// The synchronized bursts this operation's retries took part in.
    pub bursts: Vec<TimelineBurst>,
    /// Attempts left out of `attempts` (the latest-starting ones) to keep a drawing small;
    /// absent when none was.
    #[serde(skip_serializing_if = "is_zero")]
    pub attempts_omitted: u64,
}

impl OperationTimeline {
    /// Whether any attempt drawn has no times of its own: a drawing then explains its mark.
    pub fn has_untimed(&self) -> bool {
        self.attempts.iter().any(|a| a.untimed)
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// One hop of a timeline.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TimelineRow {
    pub hop: String,
    /// Attempts at this hop (all of them, drawn or not).
    pub attempts: u64,
    /// Attempts at this hop that ran at the same time, at most: the lanes its row needs.
    pub lanes: u32,
    /// This is the operation's first multiplying hop.
    pub first_multiplying: bool,
}

/// One attempt of a timeline.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TimelineAttempt {
    pub hop: String,
    /// The attempt number as logged (`attempt`, else `delivery`), else its position in its
    /// line (1 = the original).
    pub number: u32,
    /// `original`, `retry` or `redelivery`.
    pub role: Role,
    /// Index of the upstream attempt that caused it; null for the first hop and orphans.
    pub parent: Option<u32>,
    /// No upstream parent was found.
    #[serde(skip_serializing_if = "is_false")]
    pub orphan: bool,
    /// Depth in the attempt tree (0 for attempts caused by the request itself).
    pub depth: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// What its line addresses, as the rules key it: `message ID` on a queue hop, else the
    /// target; null for attempts without a target.
    pub line_key: Option<String>,
    pub start_ms: Millis,
    /// Its start was not logged at this hop and was taken from the same attempt upstream.
    #[serde(skip_serializing_if = "is_false")]
    pub start_inferred: bool,
    /// Its own times were not logged: it is drawn over the request it was one of several
    /// attempts at (`untimed` in the input), and has no duration or gap of its own.
    #[serde(skip_serializing_if = "is_false")]
    pub untimed: bool,
    /// Null while still in flight at the end of the trace.
    pub finish_ms: Option<Millis>,
    /// Where the attempt is drawn to: its finish, else the end of the timeline.
    pub active_until_ms: Millis,
    pub duration_ms: Option<Millis>,
    /// For a retry or redelivery: time from the previous attempt of its line finishing to
    /// this one starting. Negative when it started while that one was still running; null
    /// for originals and when the previous one never finished.
    pub gap_ms: Option<Millis>,
    /// The backoff the retrying layer declared (`delay_ms`), if it did.
    pub delay_ms: Option<Millis>,
    /// As logged: `ok`, `timeout`, `503`, …; null when not logged.
    pub outcome: Option<String>,
    pub outcome_kind: OutcomeKind,
    /// Lane within its hop's row (0 = top): attempts that ran at the same time get
    /// different lanes.
    pub lane: u32,
}

/// A stretch of overlap at one hop.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TimelineOverlap {
    pub hop: String,
    pub start_ms: Millis,
    pub end_ms: Millis,
    /// The drawn attempts (indexes into `attempts`) of the overlapping line that were
    /// active during it.
    pub attempts: Vec<u32>,
}

/// A burst that holds a retry of this operation.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TimelineBurst {
    pub hop: String,
    /// On this timeline's clock.
    pub start_ms: Millis,
    pub width_ms: Millis,
    /// Distinct operations in the burst.
    pub operations: u64,
}

/// The timeline of a kept operation. `max_attempts`: draw at most this many attempts (the
/// earliest-starting ones); every count and overlap still covers all of them.
pub fn operation_timeline(
    kept: &KeptOperation,
    analysis: &Analysis,
    rules: &Rules,
    max_attempts: Option<usize>,
) -> OperationTimeline {
    let hops = &rules.hops;
    let attempts = &kept.attempts;
    let tree = &kept.tree;
    let origin = kept.result.first_start_ms;
    let rel = |t: Millis| t - origin;
    let end_ms = attempts
        .iter()
        .map(|a| rel(a.finish_ms.unwrap_or(a.start_ms)))
        .fold(0.0, Millis::max);

    // Which attempts are drawn: the earliest-starting ones, in canonical order.
    let mut drawn: Vec<usize> = (0..attempts.len()).collect();
    if let Some(max) = max_attempts.filter(|&m| m < attempts.len()) {
        drawn.sort_by(|&x, &y| {
            attempts[x]
                .start_ms
                .total_cmp(&attempts[y].start_ms)
                .then(x.cmp(&y))
        });
        drawn.truncate(max);
        drawn.sort_unstable();
    }
    let mut new_index = vec![None; attempts.len()];
    for (n, &i) in drawn.iter().enumerate() {
        new_index[i] = Some(n as u32);
    }

    // Each attempt's position in its line, found once for all (not by a scan per attempt).
    let mut position_in_line = vec![0usize; attempts.len()];
    for line in &tree.lines {
        for (p, &x) in tree.attempts(line).iter().enumerate() {
            position_in_line[x as usize] = p;
        }
    }
    let mut out: Vec<TimelineAttempt> = drawn
        .iter()
        .map(|&i| {
            let a = &attempts[i];
            let line = &tree.lines[tree.line_of[i] as usize];
            let position = position_in_line[i];
            let previous = position
                .checked_sub(1)
                .map(|p| &attempts[tree.attempts(line)[p] as usize]);
            let (parent, orphan) = match tree.parent[i] {
                Parent::Request => (None, false),
                Parent::Attempt(u) => (new_index[u as usize], false),
                Parent::Orphan(_) => (None, true),
            };
            TimelineAttempt {
                hop: hops.name(a.hop).to_string(),
                number: a.attempt.or(a.delivery).unwrap_or(position as u32 + 1),
                role: kept.roles[i],
                parent,
                orphan,
                depth: 0,
                line_key: match line_key(a, rules) {
                    LineKey::Message(_) => kept.message_ids[i]
                        .as_deref()
                        .map(|m| format!("message {m}")),
                    LineKey::Target(_) => kept.targets[i].as_deref().map(str::to_string),
                },
                target: kept.targets[i].as_deref().map(str::to_string),
                message_id: kept.message_ids[i].as_deref().map(str::to_string),
                start_ms: rel(a.start_ms),
                start_inferred: a.start_inferred,
                untimed: a.untimed,
                finish_ms: a.finish_ms.map(rel),
                active_until_ms: a.finish_ms.map_or(end_ms, rel),
                duration_ms: a.duration_ms(),
                gap_ms: previous.and_then(|p| a.gap_after(p)),
                delay_ms: a.delay_ms,
                outcome: a.outcome.map(|o| o.to_string()),
                outcome_kind: OutcomeKind::of(a.outcome),
                lane: 0,
            }
        })
        .collect();

    let rows = assign_lanes(&mut out, kept, hops);
    let tree_order = tree_order(&mut out);

    // The drawn attempts of each (hop, line key), in start order, for the overlaps.
    let mut by_key: HashMap<(u16, LineKey), Vec<(Millis, u32)>> = HashMap::new();
    for (n, &i) in drawn.iter().enumerate() {
        let a = &attempts[i];
        by_key
            .entry((a.hop, line_key(a, rules)))
            .or_default()
            .push((a.start_ms, n as u32));
    }
    for list in by_key.values_mut() {
        list.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
    }
    // Overlaps come per (hop, line key), in time order, and do not overlap each other: one
    // sweep per line key lists the attempts running during each, each attempt entering and
    // leaving the running set once.
    let spans = overlap_spans(attempts, rules, analysis.trace_end_ms);
    let mut overlaps = Vec::new();
    for group in spans.chunk_by(|x, y| (x.hop, x.key) == (y.hop, y.key)) {
        let list = by_key
            .get(&(group[0].hop, group[0].key))
            .map_or(&[][..], Vec::as_slice);
        let mut next = 0;
        let mut running: BTreeSet<(OrdMillis, u32)> = BTreeSet::new();
        for s in group {
            while next < list.len() && list[next].0 < s.end_ms {
                let n = list[next].1;
                let end = attempts[drawn[n as usize]].end_or(analysis.trace_end_ms);
                running.insert((OrdMillis(end), n));
                next += 1;
            }
            while running
                .first()
                .is_some_and(|&(OrdMillis(end), _)| end <= s.start_ms)
            {
                running.pop_first();
            }
            let mut who: Vec<u32> = running.iter().map(|&(_, n)| n).collect();
            who.sort_unstable();
            let overlap = TimelineOverlap {
                hop: hops.name(s.hop).to_string(),
                start_ms: rel(s.start_ms).max(0.0),
                end_ms: rel(s.end_ms).min(end_ms),
                attempts: who,
            };
            if overlap.end_ms > overlap.start_ms {
                overlaps.push(overlap);
            }
        }
    }
    let bursts = analysis
        .bursts
        .iter()
        .filter(|b| b.ops.binary_search(&kept.op).is_ok())
        .map(|b| TimelineBurst {
            hop: hops.name(b.hop).to_string(),
            start_ms: rel(b.start_ms),
            width_ms: b.width_ms,
            operations: b.ops.len() as u64,
        })
        .collect();

    OperationTimeline {
        test_run_id: kept.result.key.test_run_id.as_deref().map(str::to_string),
        operation_id: kept.result.key.operation_id.to_string(),
        start_ms: origin,
        end_ms,
        first_multiplying_hop: kept
            .result
            .first_multiplying_hop
            .map(|h| hops.name(h).to_string()),
        rows,
        attempts: out,
        tree_order,
        overlaps,
        bursts,
        attempts_omitted: (attempts.len() - drawn.len()) as u64,
    }
}

/// Gives every drawn attempt the lowest lane of its hop that is free at its start, and
/// returns the rows.
fn assign_lanes(
    out: &mut [TimelineAttempt],
    kept: &KeptOperation,
    hops: &HopOrder,
) -> Vec<TimelineRow> {
    let mut rows = Vec::new();
    for (h, &count) in kept.result.funnel.iter().enumerate() {
        if count == 0 {
            continue;
        }
        let name = hops.name(h as u16);
        let mut at_hop: Vec<usize> = (0..out.len()).filter(|&i| out[i].hop == name).collect();
        at_hop.sort_by(|&x, &y| out[x].start_ms.total_cmp(&out[y].start_ms).then(x.cmp(&y)));
        // Lanes in use, by the end of their last attempt (earliest first), and lanes free
        // (lowest first): starts only grow, so a lane once free stays free until taken.
        let mut busy: BinaryHeap<Reverse<(OrdMillis, u32)>> = BinaryHeap::new();
        let mut free: BinaryHeap<Reverse<u32>> = BinaryHeap::new();
        let mut lanes = 0u32;
        for i in at_hop {
            let (start, until) = (out[i].start_ms, out[i].active_until_ms);
            while let Some(&Reverse((OrdMillis(end), lane))) = busy.peek() {
                if end > start {
                    break;
                }
                busy.pop();
                free.push(Reverse(lane));
            }
            let lane = match free.pop() {
                Some(Reverse(lane)) => lane,
                None => {
                    lanes += 1;
                    lanes - 1
                }
            };
            busy.push(Reverse((OrdMillis(until.max(start)), lane)));
            out[i].lane = lane;
        }
        rows.push(TimelineRow {
            hop: name.to_string(),
            attempts: u64::from(count),
            lanes: lanes.max(1),
            first_multiplying: kept.result.first_multiplying_hop == Some(h as u16),
        });
    }
    rows
}

/// Milliseconds ordered by `total_cmp`, for a heap.
#[derive(Debug, Clone, Copy, PartialEq)]
struct OrdMillis(Millis);

impl Eq for OrdMillis {}

impl PartialOrd for OrdMillis {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for OrdMillis {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// Depth-first order of the attempt tree; sets each attempt's depth.
fn tree_order(out: &mut [TimelineAttempt]) -> Vec<u32> {
    let mut children: Vec<Vec<u32>> = vec![Vec::new(); out.len()];
    let mut roots = Vec::new();
    for (i, a) in out.iter().enumerate() {
        match a.parent {
            Some(p) => children[p as usize].push(i as u32),
            None => roots.push(i as u32),
        }
    }
    let mut order = Vec::with_capacity(out.len());
    // Indexes are in hop, then start order, so pushing children in reverse visits them in
    // that order.
    let mut stack: Vec<(u32, u32)> = roots.iter().rev().map(|&r| (r, 0)).collect();
    while let Some((i, depth)) = stack.pop() {
        out[i as usize].depth = depth;
        order.push(i);
        stack.extend(children[i as usize].iter().rev().map(|&c| (c, depth + 1)));
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_steps_are_one_two_or_five_times_a_power_of_ten() {
        assert_eq!(nice_step(0.0), 1.0);
        assert_eq!(nice_step(0.3), 1.0);
        assert_eq!(nice_step(1.5), 2.0);
        assert_eq!(nice_step(2.0), 2.0);
        assert_eq!(nice_step(3.0), 5.0);
        assert_eq!(nice_step(7.0), 10.0);
        assert_eq!(nice_step(11.3), 20.0);
        assert_eq!(nice_step(450.0), 500.0);
        assert_eq!(nice_step(1000.0), 1000.0);
        assert_eq!(nice_step(f64::NAN), 1.0);
    }

    #[test]
    fn outcomes_are_coloured_by_what_the_server_meant() {
        use crate::model::Outcome::*;
        assert_eq!(OutcomeKind::of(Some(Http(204))), OutcomeKind::Ok);
        assert_eq!(OutcomeKind::of(Some(Http(503))), OutcomeKind::Rejected);
        assert_eq!(OutcomeKind::of(Some(Http(504))), OutcomeKind::Timeout);
        assert_eq!(OutcomeKind::of(Some(Http(500))), OutcomeKind::Error);
        assert_eq!(OutcomeKind::of(None), OutcomeKind::Unknown);
    }
}

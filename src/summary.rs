//! The summary: every number any report prints, computed here once. Per-hop aggregates
//! (attempts, amplification, originals vs retries, retry success, latency percentiles) come
//! from the mergeable attempt statistics (`stats`), never from the attempts themselves;
//! every output format renders this struct.

use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};

pub use crate::analysis::tally::OverlapSummary;
pub use crate::analysis::Incomplete;
use crate::analysis::{Analysis, OperationResult};
use crate::burst::Burst;
use crate::classify::{Class, FindingLabel};
use crate::model::{Millis, OperationKey};
use crate::rules::{HopOrder, Rules};
use crate::stats::{AttemptStats, HopCounts};
use crate::timeline::{AttemptsOverTime, OperationTimeline};

/// Version of the JSON summary and per-operation row schema; bumped on any breaking change.
pub const SCHEMA_VERSION: u32 = 1;

/// Worst operations whose attempt timelines the summary carries: enough for an incident
/// review, few enough that the HTML page stays small whatever `--top` is.
pub const TIMELINES_DRAWN: usize = 20;

/// Attempts drawn per timeline (the earliest ones): a poison message redelivered ten
/// thousand times must not make one timeline ten thousand bars.
pub const TIMELINE_ATTEMPTS_DRAWN: usize = 300;

/// The summary of an analysis (`--format json` serializes exactly this). `diff` reads a
/// saved one back: every number, but not the worst operations, the drawings or the gate,
/// which only the run that made them reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    /// Version of this schema.
    pub schema_version: u32,
    /// Present only when the report covers part of its input: a merge of partials with
    /// partitions missing (`merge --allow-missing`). Additive: absent, the report is whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<Incomplete>,
    /// What was read.
    pub input: InputStats,
    /// Logical operations: distinct (test_run_id, operation_id).
    pub operations: u64,
    /// Attempts at all hops.
    pub attempts: u64,
    /// Per hop, in hop order.
    pub hops: Vec<HopSummary>,
    /// Retries and redeliveries at all hops: the attempts that retrying layers added.
    pub retry_attempts: u64,
    /// `retry_attempts ÷ attempts` (0 when there are no attempts).
    pub retry_share: f64,
    /// The hop where the most operations first multiplied (the upstream one on a tie); null
    /// when no operation multiplied.
    pub main_multiplying_hop: Option<String>,
    /// Every class, in the order of docs/rules.md, with its count and share of operations.
    pub classes: Vec<ClassShare>,
    /// Operations per finding (`kind@hop`), most frequent first.
    pub findings: Vec<FindingCount>,
    /// Overlapping attempts.
    pub overlap: OverlapSummary,
    /// Synchronized retry bursts.
    pub bursts: BurstSummary,
    /// Attempts without a finish: still in flight when the trace ended.
    pub unfinished_attempts: u64,
    /// Attempts whose upstream parent could not be found.
    pub orphan_attempts: u64,
    /// Side effects committed more than once in one line (each extra one counts).
    pub duplicate_effects: u64,
    /// The operations with the most attempts, worst first.
    #[serde(default, skip_deserializing)]
    pub worst_operations: Vec<OperationRecord>,
    /// Attempts started per time bucket, per hop and role: the storm over time. Absent when
    /// there are no operations.
    #[serde(default, skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub attempts_over_time: Option<AttemptsOverTime>,
    /// The attempt timelines of the first worst operations, in the same order. Absent when
    /// empty.
    #[serde(default, skip_deserializing, skip_serializing_if = "Vec::is_empty")]
    pub timelines: Vec<OperationTimeline>,
}

/// What was read.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InputStats {
    /// Inputs, in the order given.
    pub files: Vec<String>,
    /// Non-blank lines read.
    pub lines: u64,
    /// Valid events (lines that passed validation).
    pub events: u64,
    /// Exact duplicate events, counted once.
    pub duplicate_events: u64,
    /// Bad lines and events that could not become attempts.
    pub bad_lines: u64,
    /// Lines that are not attempts (a mixed log's banners and health checks): passed by,
    /// never errors; and `path:line` of the first. Absent from summaries made before they
    /// were counted.
    #[serde(default)]
    pub other_lines: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_lines_example: Option<String>,
}

/// Aggregates of one hop.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HopSummary {
    pub hop: String,
    /// Attempts at this hop.
    pub attempts: u64,
    /// Attempts ÷ logical operations.
    pub amplification: f64,
    /// First attempts of their line.
    pub originals: u64,
    /// Repeats within a line keyed by target.
    pub retries: u64,
    /// Repeats within a line keyed by message ID on a queue hop.
    pub redeliveries: u64,
    /// (retries + redeliveries) ÷ originals; null without originals.
    pub retry_ratio: Option<f64>,
    /// Share of retries and redeliveries with a known outcome that succeeded; null if none.
    pub retry_success_rate: Option<f64>,
    /// Attempt latency of finished attempts, in ms.
    pub latency_ms: Latency,
    /// Operations whose first multiplying hop is this one.
    pub first_multiplying: u64,
    /// Attempts budget of this hop (attempts per line).
    pub budget: u32,
    pub unfinished: u64,
    pub orphans: u64,
}

/// Latency percentiles; null where the hop has no finished attempt.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Latency {
    pub p50: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClassShare {
    pub class: Class,
    pub operations: u64,
    /// operations ÷ all operations (0 when there are none).
    pub share: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FindingCount {
    pub finding: FindingLabel,
    pub operations: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BurstSummary {
    pub count: u64,
    /// Distinct operations with a retry in some burst.
    pub operations: u64,
    /// Median time between the starts of consecutive bursts at one hop, when they repeat.
    pub median_interval_ms: Option<f64>,
    pub list: Vec<BurstReport>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BurstReport {
    pub hop: String,
    pub start_ms: f64,
    pub width_ms: f64,
    pub retries: u64,
    pub operations: u64,
    /// Retries the neighbouring windows' rate predicts for one window.
    pub expected_retries: f64,
    pub p_value: f64,
    /// Smallest and largest backoff before the burst's retries: equal means no jitter.
    pub delay_min_ms: Option<f64>,
    pub delay_max_ms: Option<f64>,
    /// Time since the previous burst at the same hop.
    pub since_previous_ms: Option<f64>,
    /// The first operation IDs (`run/op` where a test run is set), sorted.
    pub operation_ids: Vec<String>,
}

/// One operation as every per-operation format writes it (docs/output.md).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct OperationRecord {
    pub test_run_id: Option<String>,
    pub operation_id: String,
    pub class: Class,
    /// Null where no hop multiplied.
    pub first_multiplying_hop: Option<String>,
    /// Attempts per hop, in hop order (hops with none are left out).
    pub attempts: Funnel,
    pub total_attempts: u64,
    /// `kind@hop`, sorted by hop, then kind.
    pub findings: Vec<FindingLabel>,
    pub first_start_ms: f64,
    /// Null when no attempt finished.
    pub last_finish_ms: Option<f64>,
    pub overlap_ms: f64,
}

/// Attempts per hop, serialized as a JSON object in hop order.
#[derive(Debug, Clone, PartialEq)]
pub struct Funnel(pub Vec<(String, u64)>);

impl Serialize for Funnel {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (hop, n) in &self.0 {
            map.serialize_entry(hop, n)?;
        }
        map.end()
    }
}

impl OperationRecord {
    pub fn new(op: &OperationResult, hops: &HopOrder) -> OperationRecord {
        OperationRecord {
            test_run_id: op.key.test_run_id.as_deref().map(str::to_string),
            operation_id: op.key.operation_id.to_string(),
            class: op.class,
            first_multiplying_hop: op.first_multiplying_hop.map(|h| hops.name(h).to_string()),
            attempts: Funnel(
                op.funnel
                    .iter()
                    .enumerate()
                    .filter(|(_, &n)| n > 0)
                    .map(|(h, &n)| (hops.name(h as u16).to_string(), u64::from(n)))
                    .collect(),
            ),
            total_attempts: op.total_attempts(),
            findings: op.findings.iter().map(|f| f.label(hops)).collect(),
            first_start_ms: op.first_start_ms,
            last_finish_ms: op.last_finish_ms,
            overlap_ms: op.overlap_ms,
        }
    }

    /// `run/op`, or `op` alone without a test run.
    pub fn display_id(&self) -> String {
        display_key(self.test_run_id.as_deref(), &self.operation_id)
    }
}

fn display_key(run: Option<&str>, op: &str) -> String {
    match run {
        Some(run) => format!("{run}/{op}"),
        None => op.to_string(),
    }
}

pub fn display_operation_key(key: &OperationKey) -> String {
    key.to_string()
}

fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// Computes the summary of an analysis, from its tallies and statistics: the worst
/// operations listed are those the merge's tally kept (its `--top`).
pub fn summarize(analysis: &Analysis, rules: &Rules) -> anyhow::Result<Summary> {
    let hops = &rules.hops;
    let tally = &analysis.tally;
    let operations = tally.operations;
    let per_hop = hop_aggregates(&analysis.stats);
    let overlap = tally.overlap.clone();
    let mut findings: Vec<FindingCount> = tally
        .findings
        .iter()
        .map(|(f, &n)| FindingCount {
            finding: f.label(hops),
            operations: n,
        })
        .collect();
    findings.sort_by(|a, b| {
        b.operations
            .cmp(&a.operations)
            // Ties in the order the labels read.
            .then_with(|| a.finding.to_string().cmp(&b.finding.to_string()))
    });

    let hop_summaries: Vec<HopSummary> = per_hop
        .into_iter()
        .enumerate()
        .map(|(h, agg)| HopSummary {
            hop: hops.name(h as u16).to_string(),
            amplification: share(agg.counts.attempts(), operations),
            retry_ratio: (agg.counts.originals > 0).then(|| {
                (agg.counts.retries + agg.counts.redeliveries) as f64 / agg.counts.originals as f64
            }),
            first_multiplying: tally.first_multiplying[h],
            budget: rules.budgets[h],
            unfinished: analysis.unfinished_per_hop[h],
            orphans: analysis.orphans_per_hop[h],
            attempts: agg.counts.attempts(),
            originals: agg.counts.originals,
            retries: agg.counts.retries,
            redeliveries: agg.counts.redeliveries,
            retry_success_rate: agg.retry_success_rate,
            latency_ms: agg.latency,
        })
        .collect();

    let retry_attempts: u64 = hop_summaries
        .iter()
        .map(|h| h.retries + h.redeliveries)
        .sum();
    let main_multiplying_hop = hop_summaries
        .iter()
        .filter(|h| h.first_multiplying > 0)
        // `max_by_key` keeps the last of equals: reversed, that is the upstream one.
        .rev()
        .max_by_key(|h| h.first_multiplying)
        .map(|h| h.hop.clone());
    let worst = tally.worst();

    Ok(Summary {
        schema_version: SCHEMA_VERSION,
        incomplete: analysis.incomplete.clone(),
        input: InputStats {
            files: analysis.files.clone(),
            lines: analysis.lines_read,
            events: analysis.events,
            duplicate_events: analysis.duplicate_events,
            bad_lines: analysis.diagnostics.total(),
            other_lines: analysis.other_lines.lines,
            other_lines_example: analysis.other_lines.example.clone(),
        },
        operations,
        attempts: analysis.stats.attempts(),
        retry_attempts,
        retry_share: share(retry_attempts, analysis.stats.attempts()),
        main_multiplying_hop,
        unfinished_attempts: hop_summaries.iter().map(|h| h.unfinished).sum(),
        orphan_attempts: hop_summaries.iter().map(|h| h.orphans).sum(),
        duplicate_effects: analysis.duplicate_effects,
        hops: hop_summaries,
        classes: Class::ALL
            .iter()
            .map(|&class| (class, tally.classes[class.index()]))
            .map(|(class, n)| ClassShare {
                class,
                operations: n,
                share: share(n, operations),
            })
            .collect(),
        findings,
        overlap,
        bursts: burst_summary(
            &analysis.bursts,
            &analysis.burst_operations,
            analysis.burst_operations_total,
            hops,
        ),
        worst_operations: worst
            .iter()
            .map(|o| OperationRecord::new(o, hops))
            .collect(),
        attempts_over_time: crate::timeline::attempts_over_time(&analysis.stats, hops),
        timelines: worst
            .iter()
            .take(TIMELINES_DRAWN)
            .filter_map(|w| analysis.kept.iter().find(|k| k.result.key == w.key))
            .map(|k| {
                crate::timeline::operation_timeline(
                    k,
                    analysis,
                    rules,
                    Some(TIMELINE_ATTEMPTS_DRAWN),
                )
            })
            .collect(),
    })
}

/// Per-hop counts, retry success and latency percentiles, from the mergeable statistics.
fn hop_aggregates(stats: &AttemptStats) -> Vec<HopAggregate> {
    (0..stats.hop_count())
        .map(|h| {
            let hop = stats.hop(h);
            let c = &hop.counts;
            let q = |p: u64| hop.latency_us.percentile_ms(p);
            HopAggregate {
                counts: *c,
                retry_success_rate: (c.repeats_known > 0)
                    .then(|| c.repeats_succeeded as f64 / c.repeats_known as f64),
                latency: Latency {
                    p50: q(50),
                    p95: q(95),
                    p99: q(99),
                },
            }
        })
        .collect()
}

struct HopAggregate {
    counts: HopCounts,
    retry_success_rate: Option<f64>,
    latency: Latency,
}

/// `operations`: the first operations of each burst, in key order; `distinct`: how many
/// operations have a retry in some burst.
fn burst_summary(
    bursts: &[Burst],
    operations: &[Vec<OperationKey>],
    distinct: u64,
    hops: &HopOrder,
) -> BurstSummary {
    let mut order: Vec<usize> = (0..bursts.len()).collect();
    order.sort_by(|&a, &b| {
        bursts[a]
            .hop
            .cmp(&bursts[b].hop)
            .then(bursts[a].start_ms.total_cmp(&bursts[b].start_ms))
    });
    let mut list = Vec::with_capacity(bursts.len());
    let mut intervals: Vec<Millis> = Vec::new();
    let mut previous: Option<&Burst> = None;
    for i in order {
        let b = &bursts[i];
        let since_previous_ms = previous
            .filter(|p| p.hop == b.hop)
            .map(|p| b.start_ms - p.start_ms);
        intervals.extend(since_previous_ms);
        list.push(BurstReport {
            hop: hops.name(b.hop).to_string(),
            start_ms: b.start_ms,
            width_ms: b.width_ms,
            retries: b.retries as u64,
            operations: b.ops.len() as u64,
            expected_retries: b.expected_retries,
            p_value: b.p_value,
            delay_min_ms: b.delay_min_ms,
            delay_max_ms: b.delay_max_ms,
            since_previous_ms,
            operation_ids: operations[i].iter().map(display_operation_key).collect(),
        });
        previous = Some(b);
    }
    intervals.sort_by(f64::total_cmp);
    BurstSummary {
        count: bursts.len() as u64,
        operations: distinct,
        median_interval_ms: median(&intervals),
        list,
    }
}

fn median(sorted: &[f64]) -> Option<f64> {
    match sorted.len() {
        0 => None,
        n if n % 2 == 1 => Some(sorted[n / 2]),
        n => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// One operation as `show` prints it: its row and its whole timeline.
#[derive(Debug, Clone, Serialize)]
pub struct OperationView {
    pub record: OperationRecord,
    pub timeline: OperationTimeline,
}

/// The view of the first kept operation (`show` keeps exactly one); `None` when it had no
/// attempts.
pub fn operation_view(analysis: &Analysis, rules: &Rules) -> Option<OperationView> {
    let kept = analysis.kept.first()?;
    Some(OperationView {
        record: OperationRecord::new(&kept.result, &rules.hops),
        timeline: crate::timeline::operation_timeline(kept, analysis, rules, None),
    })
}

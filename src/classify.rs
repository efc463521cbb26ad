//! Classify: the rules of docs/rules.md for one operation. From its attempt tree, finds where one
//! became many (retries, redeliveries, fan-out per hop), overlap, budget breaches and retry
//! hygiene; then, once bursts across operations are known, picks the class by precedence
//! and keeps everything else as findings.

mod layers;

use layers::{asks_for_resend, line_layers};

use crate::group::{Line, Parent, Tree};
use crate::model::{named_enum, Attempt, Millis, Outcome};
use crate::rules::{HopOrder, Rules};

/// A retry that starts within this many ms of the previous attempt's end is back-to-back:
/// less than any deliberate backoff, about one scheduler tick plus a local round trip.
pub const BACK_TO_BACK_GAP_MS: Millis = 10.0;

/// A failure this fast (ms) came back before any real work happened (a refused connection,
/// an immediate 503): retrying it at once just hammers the dependency.
pub const FAST_FAILURE_MS: Millis = 100.0;

/// Slack (ms) for clocks and schedulers when checking that a retry waited out a server's
/// `retry_after_ms` hint.
pub const RETRY_AFTER_TOLERANCE_MS: Millis = 5.0;

/// Longest a client should wait on a server's hint (ms). Waiting more means the hint was
/// not clamped: one bad header can stall a caller for hours. One minute is the cap that
/// common SDKs apply to Retry-After.
pub const RETRY_AFTER_CLAMP_MS: Millis = 60_000.0;

named_enum! {
    /// The class of an operation, in the order of precedence (docs/rules.md).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
    pub enum Class {
        Healthy => "healthy",
        NestedRetry => "nested-retry",
        FanOut => "fan-out",
        Redelivery => "redelivery",
        Overlap => "overlap",
        SynchronizedBurst => "synchronized-burst",
        OverBudget => "over-budget",
    }
}

impl Class {
    pub fn parse(name: &str) -> Option<Class> {
        Class::ALL.into_iter().find(|c| c.name() == name)
    }
}

named_enum! {
    /// Something that holds for an operation, at a hop where it has one; the name is the one
    /// used in reports and in `--fail-on`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
    pub enum FindingKind {
        Retries => "retries",
        HiddenResends => "hidden-resends",
        Redelivery => "redelivery",
        FanOut => "fan-out",
        Overlap => "overlap",
        Burst => "burst",
        OverBudget => "over-budget",
        RetryWithoutDelay => "retry-without-delay",
        RetryAfterNotHonoured => "retry-after-not-honoured",
        RetryAfterNotClamped => "retry-after-not-clamped",
        AttemptAfterDeadline => "attempt-after-deadline",
        BackoffOverDeadline => "backoff-over-deadline",
        DuplicateEffect => "duplicate-effect",
        Unfinished => "unfinished",
        Orphan => "orphan",
        // Rule v3's findings come last: a partial file writes a finding as its index here,
        // and the kinds before keep theirs.
        InferredLayers => "inferred-layers",
        Resends => "resends",
        RetriedNonRetryable => "retried-non-retryable",
        IdempotencyKeyChanged => "idempotency-key-changed",
    }
}

impl FindingKind {
    /// What the finding means at `hop`, in a sentence (the reports' explanations; every
    /// kind has one, as this match is exhaustive).
    pub fn explain(self, hop: &str) -> String {
        match self {
            FindingKind::Retries => {
                format!("the {hop} retried: a line there has more than one attempt")
            }
            FindingKind::HiddenResends => format!(
                "a layer inside the {hop}'s client (an SDK or transport retry) resent without a span of its own: \
                 its sends, seen as several server spans under one client span, count as the {hop}'s attempts, \
                 and where the application's attempts repeat too it is the inner of two retrying layers, each \
                 with its own budget; to see that layer as a hop, map those server spans to one \
                 (docs/formats.md, \"Hidden resends\")"
            ),
            FindingKind::Redelivery => format!("the queue redelivered a message to the {hop}"),
            FindingKind::FanOut => {
                format!("the {hop} addressed several distinct targets or messages under one parent")
            }
            FindingKind::Overlap => {
                format!("two attempts of one line ran at the same time at the {hop}")
            }
            FindingKind::Burst => format!("a retry at the {hop} fell in a synchronized burst"),
            FindingKind::OverBudget => {
                format!("a line at the {hop} has more attempts than its budget")
            }
            FindingKind::RetryWithoutDelay => {
                format!("the {hop} retried back-to-back after a fast failure")
            }
            FindingKind::RetryAfterNotHonoured => {
                format!("a retry at the {hop} came sooner than the server's retry_after_ms")
            }
            FindingKind::RetryAfterNotClamped => {
                format!("the {hop} waited out an over-long retry_after_ms instead of capping it")
            }
            FindingKind::AttemptAfterDeadline => {
                format!("a line at the {hop} started an attempt after its deadline had passed")
            }
            FindingKind::BackoffOverDeadline => {
                format!(
                    "the backoff delays of a line at the {hop} add up to more than its deadline"
                )
            }
            FindingKind::DuplicateEffect => {
                format!("a side effect was committed more than once at the {hop}")
            }
            FindingKind::Unfinished => {
                format!("an attempt at the {hop} never finished before the trace ended")
            }
            FindingKind::Orphan => format!("an attempt at the {hop} has no upstream parent"),
            FindingKind::InferredLayers => format!(
                "a line at the {hop} falls into equal groups of back-to-back sends far apart: read from the timing \
                 as two retrying layers, an outer one around an inner one that writes no count of its own \
                 (policy infer_layers = false turns this off)"
            ),
            FindingKind::Resends => format!(
                "the {hop} followed a redirect or an authentication challenge: a resend, which repeats no failed work \
                 and counts against no budget"
            ),
            FindingKind::RetriedNonRetryable => format!(
                "the {hop} repeated a request after an answer a repeat cannot change (a 4xx other than 408, 425 and 429, \
                 or what the policy's [retryable] list leaves out)"
            ),
            FindingKind::IdempotencyKeyChanged => format!(
                "the attempts of one line at the {hop} carry different message IDs (the key a receiver \
                 deduplicates on), so the receiver cannot tell they are one request"
            ),
        }
    }
}

/// A finding at a hop, rendered `kind@hop` (e.g. `retries@gateway`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Finding {
    pub kind: FindingKind,
    pub hop: u16,
}

impl Finding {
    /// The finding as reports carry it, with its hop's name.
    pub fn label(&self, hops: &HopOrder) -> FindingLabel {
        FindingLabel {
            kind: self.kind,
            hop: hops.name(self.hop).to_string(),
        }
    }

    /// Writes the finding as its [`label`](Finding::label) reads, without building one.
    pub fn write_label(&self, hops: &HopOrder, out: &mut impl std::fmt::Write) -> std::fmt::Result {
        write_label(out, self.kind, hops.name(self.hop))
    }
}

/// `kind@hop`: the one spelling of a finding. Three plain writes, not `write!`: findings
/// are spelled for every CSV row that has them, and the format machinery costs more
/// than the writing.
fn write_label(out: &mut impl std::fmt::Write, kind: FindingKind, hop: &str) -> std::fmt::Result {
    out.write_str(kind.name())?;
    out.write_char('@')?;
    out.write_str(hop)
}

/// A finding with its hop's name: written `kind@hop` (e.g. `retries@gateway`) in every
/// report, and serialized as that string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FindingLabel {
    pub kind: FindingKind,
    pub hop: String,
}

impl FindingLabel {
    /// What it means, in a sentence.
    pub fn explain(&self) -> String {
        self.kind.explain(&self.hop)
    }
}

impl std::fmt::Display for FindingLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write_label(f, self.kind, &self.hop)
    }
}

impl serde::Serialize for FindingLabel {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

// Read back by `diff` from a saved summary.
impl<'de> serde::Deserialize<'de> for FindingLabel {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        let (kind, hop) = text.split_once('@').ok_or_else(|| {
            serde::de::Error::custom(format!("finding \"{text}\" is not kind@hop"))
        })?;
        let kind = FindingKind::ALL
            .into_iter()
            .find(|k| k.name() == kind)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown finding \"{kind}\"")))?;
        Ok(FindingLabel {
            kind,
            hop: hop.to_string(),
        })
    }
}

named_enum! {
    /// What an attempt is within its line. A role's discriminant is its index in `ALL`:
    /// the attempt table's `role` column and the timelines' series are indexed by it.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Role {
        Original => "original",
        Retry => "retry",
        Redelivery => "redelivery",
    }
}

/// What the rules found at one hop of one operation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HopFacts {
    pub attempts: u32,
    pub multiplies: bool,
    pub retries: bool,
    /// An attempt here was sent by a layer inside the client that records no attempt of
    /// its own (`hidden`); with `retries`, that layer resent.
    pub hidden_sends: bool,
    pub redelivers: bool,
    pub fans_out: bool,
    /// A line here was made by two retrying layers (an outer one's attempts, each sent
    /// more than once by an inner one).
    pub layered: bool,
    /// Of those, one whose layers were read from the timing alone.
    pub inferred_layers: bool,
    /// A send here followed a redirect or an authentication challenge.
    pub resends: bool,
    pub over_budget: bool,
    pub overlap_ms: Millis,
    pub retry_without_delay: bool,
    pub retry_after_not_honoured: bool,
    pub retry_after_not_clamped: bool,
    /// A line's attempt started at or after the hop's deadline.
    pub attempt_after_deadline: bool,
    /// A line's backoff delays add up to more than the hop's deadline.
    pub backoff_over_deadline: bool,
    /// A repeat followed an answer a repeat cannot change (a non-retryable 4xx).
    pub retried_non_retryable: bool,
    /// The attempts of a line carry different idempotency keys (message IDs).
    pub idempotency_key_changed: bool,
    pub duplicate_effects: u32,
    pub unfinished: u32,
    pub orphans: u32,
}

/// A retry's start, for the cross-operation burst rule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryStart {
    pub hop: u16,
    pub start_ms: Millis,
    /// The backoff before it: the declared `delay_ms`, else the observed gap since the
    /// previous attempt of its line ended.
    pub delay_ms: Option<Millis>,
}

/// Everything the per-operation rules found, before bursts are known.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OperationFacts {
    pub hops: Vec<HopFacts>,
    pub first_multiplying_hop: Option<u16>,
    pub roles: Vec<Role>,
    pub retry_starts: Vec<RetryStart>,
    pub first_start_ms: Millis,
    pub last_finish_ms: Option<Millis>,
    pub overlap_ms: Millis,
}

impl OperationFacts {
    pub fn has_overlap(&self) -> bool {
        self.overlap_ms > 0.0
    }
}

/// Applies the per-operation rules to one operation's tree.
pub fn operation_facts(
    attempts: &[Attempt],
    tree: &Tree,
    rules: &Rules,
    trace_end_ms: Millis,
) -> OperationFacts {
    let mut facts = OperationFacts::default();
    facts.fill(attempts, tree, rules, trace_end_ms);
    facts
}

impl OperationFacts {
    /// Makes these the facts of one operation (as [`operation_facts`]), whatever they held,
    /// in the memory of their lists: a worker of the pass keeps one for all its operations
    /// (see `group::TreeBuilder`).
    pub fn fill(&mut self, attempts: &[Attempt], tree: &Tree, rules: &Rules, trace_end_ms: Millis) {
        let OperationFacts {
            hops,
            roles,
            retry_starts,
            ..
        } = self;
        hops.clear();
        hops.resize(rules.hops.len(), HopFacts::default());
        roles.clear();
        roles.resize(attempts.len(), Role::Original);
        retry_starts.clear();
        let (overlap_ms, first_multiplying_hop) = rule_facts(
            attempts,
            tree,
            rules,
            trace_end_ms,
            hops,
            roles,
            retry_starts,
        );
        self.first_multiplying_hop = first_multiplying_hop;
        self.overlap_ms = overlap_ms;
        self.first_start_ms = attempts
            .iter()
            .map(|a| a.start_ms)
            .fold(Millis::INFINITY, Millis::min);
        self.last_finish_ms = attempts
            .iter()
            .filter_map(|a| a.finish_ms)
            .reduce(Millis::max);
    }
}

/// The rules' findings per hop, each attempt's role and the retry starts, into the lists
/// given (emptied and sized by the caller); the operation's overlap and first multiplying
/// hop returned.
fn rule_facts(
    attempts: &[Attempt],
    tree: &Tree,
    rules: &Rules,
    trace_end_ms: Millis,
    hops: &mut [HopFacts],
    roles: &mut [Role],
    retry_starts: &mut Vec<RetryStart>,
) -> (Millis, Option<u16>) {
    for a in attempts {
        let h = &mut hops[a.hop as usize];
        h.attempts += 1;
        h.unfinished += u32::from(a.finish_ms.is_none());
        h.hidden_sends |= a.hidden;
    }
    for p in &tree.parent {
        if let Parent::Orphan(i) = p {
            hops[attempts[*i as usize].hop as usize].orphans += 1;
        }
    }

    // Lines are sorted by (hop, parent, key): the lines of one parent are adjacent.
    let mut resend = Vec::new();
    let mut tries: Vec<&Attempt> = Vec::new();
    let mut group_start = 0;
    while group_start < tree.lines.len() {
        let first = &tree.lines[group_start];
        let group_end = tree.lines[group_start..]
            .iter()
            .position(|l| l.hop != first.hop || l.parent != first.parent)
            .map_or(tree.lines.len(), |n| group_start + n);
        let group = &tree.lines[group_start..group_end];
        let h = &mut hops[first.hop as usize];
        let attempts_under_parent: usize = group.iter().map(Line::len).sum();
        let resends = mark_resends(attempts, tree, group, &mut resend);
        h.resends |= resends > 0;
        // A resend continues the send before it, so it multiplies nothing, and a line that
        // starts with one (a redirect's new target) is not a thing of its own addressed.
        if attempts_under_parent - resends > 1 && !matches!(first.parent, Parent::Orphan(_)) {
            h.multiplies = true;
            let addressed = group
                .iter()
                .filter(|l| !is_resend(&resend, tree.attempts(l)[0]))
                .count();
            h.fans_out |= addressed > 1;
        }
        for line in group {
            let members = tree.attempts(line);
            let effects = members
                .iter()
                .filter(|&&i| attempts[i as usize].effect)
                .count() as u32;
            h.duplicate_effects += effects.saturating_sub(1);
            // The original and the repeats that are not resends.
            tries.clear();
            tries.extend(
                members
                    .iter()
                    .enumerate()
                    .filter(|&(k, &i)| k == 0 || !is_resend(&resend, i))
                    .map(|(_, &i)| &attempts[i as usize]),
            );
            let budget = rules.budgets[line.hop as usize];
            if line.is_delivery_line() || tries.len() < 2 {
                h.over_budget |= tries.len() as u32 > budget;
            } else {
                let layered = line_layers(&tries, rules.infer_layers);
                if layered.two_layers() {
                    h.layered = true;
                    h.inferred_layers |= layered.inferred;
                    let inner = rules.inner_budget(line.hop);
                    h.over_budget |= layered.groups.len() as u32 > budget
                        || layered.groups.iter().any(|g| g.len() as u32 > inner);
                } else {
                    h.over_budget |= tries.len() as u32 > budget;
                }
            }
            if !line.is_delivery_line() {
                h.idempotency_key_changed |= key_changed(&tries);
            }
            if tries.len() < 2 {
                continue;
            }
            let role = if line.is_delivery_line() {
                h.redelivers = true;
                Role::Redelivery
            } else {
                h.retries = true;
                Role::Retry
            };
            let mut backoff_ms: Millis = 0.0;
            for pair in members.windows(2) {
                // A resend is no repeat of failed work: no role of a retry, no backoff, no
                // burst start, no hygiene.
                if is_resend(&resend, pair[1]) {
                    continue;
                }
                let (prev, this) = (&attempts[pair[0] as usize], &attempts[pair[1] as usize]);
                roles[pair[1] as usize] = role;
                h.retried_non_retryable |=
                    matches!(prev.outcome, Some(Outcome::Http(code)) if !rules.retry_can_fix(code));
                // An untimed attempt's times are its request's: no backoff, burst start
                // or hygiene can be read from them.
                if prev.untimed || this.untimed {
                    continue;
                }
                let delay_ms = backoff_before(prev, this);
                backoff_ms += delay_ms.unwrap_or(0.0);
                retry_starts.push(RetryStart {
                    hop: this.hop,
                    start_ms: this.start_ms,
                    delay_ms,
                });
                let hygiene = retry_hygiene(prev, this);
                h.retry_without_delay |= hygiene.without_delay;
                h.retry_after_not_honoured |= hygiene.hint_not_honoured;
                h.retry_after_not_clamped |= hygiene.hint_not_clamped;
            }
            if let Some(deadline_ms) = rules.deadlines[line.hop as usize] {
                let first_start = attempts[members[0] as usize].start_ms;
                h.attempt_after_deadline |= members[1..].iter().any(|&i| {
                    let a = &attempts[i as usize];
                    !a.untimed && a.start_ms - first_start >= deadline_ms
                });
                h.backoff_over_deadline |= backoff_ms > deadline_ms;
            }
        }
        group_start = group_end;
    }

    let mut overlap_ms: Millis = 0.0;
    for span in overlap_spans(attempts, rules, trace_end_ms) {
        let h = &mut hops[span.hop as usize];
        h.overlap_ms = h.overlap_ms.max(span.len_ms());
        overlap_ms = overlap_ms.max(h.overlap_ms);
    }
    let first_multiplying_hop = hops.iter().position(|h| h.multiplies).map(|i| i as u16);
    (overlap_ms, first_multiplying_hop)
}

/// Marks, in `resend` (sized to the attempts on first use), the attempts of one parent's
/// lines at a hop that follow a redirect or an authentication challenge: each attempt is
/// judged by the send under the same parent that started last before it, if that one had
/// its answer before it started. Returns how many there are.
fn mark_resends(
    attempts: &[Attempt],
    tree: &Tree,
    group: &[Line],
    resend: &mut Vec<bool>,
) -> usize {
    let asks = |i: u32| asks_for_resend(attempts[i as usize].outcome);
    // Most parents have no answer that asks for one: nothing to sort.
    if !group
        .iter()
        .any(|l| tree.attempts(l).iter().any(|&i| asks(i)))
    {
        return 0;
    }
    if resend.len() < attempts.len() {
        resend.resize(attempts.len(), false);
    }
    // Attempt indexes of a hop follow start order.
    let mut sends: Vec<u32> = group
        .iter()
        .flat_map(|l| tree.attempts(l))
        .copied()
        .collect();
    sends.sort_unstable();
    let mut count = 0;
    for pair in sends.windows(2) {
        let (before, this) = (&attempts[pair[0] as usize], &attempts[pair[1] as usize]);
        let answered_first = before.finish_ms.is_some_and(|f| f <= this.start_ms) || before.untimed;
        let is = asks(pair[0]) && answered_first;
        resend[pair[1] as usize] = is;
        count += usize::from(is);
    }
    count
}

/// Whether attempt `i` was marked a resend (an empty list marks none).
fn is_resend(resend: &[bool], i: u32) -> bool {
    resend.get(i as usize).copied().unwrap_or(false)
}

/// Whether the tries of a line carry different idempotency keys (message IDs): tries
/// without one say nothing.
fn key_changed(tries: &[&Attempt]) -> bool {
    let mut keys = tries.iter().filter_map(|a| a.message_id);
    keys.next().is_some_and(|first| keys.any(|k| k != first))
}

/// The backoff before a repeat: the declared `delay_ms`, else the observed gap since the
/// previous attempt of its line ended (none when that one never finished, or when the
/// repeat started before it ended).
fn backoff_before(prev: &Attempt, this: &Attempt) -> Option<Millis> {
    this.delay_ms.or(this.gap_after(prev).filter(|g| *g >= 0.0))
}

struct Hygiene {
    without_delay: bool,
    hint_not_honoured: bool,
    hint_not_clamped: bool,
}

/// Checks one retry against the attempt before it in its line.
fn retry_hygiene(prev: &Attempt, this: &Attempt) -> Hygiene {
    let failed_fast = prev.outcome.is_some_and(|o| !o.is_success())
        && prev.duration_ms().is_some_and(|d| d < FAST_FAILURE_MS);
    let gap = this.gap_after(prev);
    let back_to_back =
        this.delay_ms == Some(0.0) || gap.is_some_and(|g| (0.0..BACK_TO_BACK_GAP_MS).contains(&g));
    let (hint_not_honoured, hint_not_clamped) = match (prev.retry_after_ms, gap) {
        (Some(hint), Some(gap)) => (
            gap + RETRY_AFTER_TOLERANCE_MS < hint.min(RETRY_AFTER_CLAMP_MS),
            hint > RETRY_AFTER_CLAMP_MS && gap > RETRY_AFTER_CLAMP_MS + RETRY_AFTER_TOLERANCE_MS,
        ),
        _ => (false, false),
    };
    Hygiene {
        without_delay: failed_fast && back_to_back,
        hint_not_honoured,
        hint_not_clamped,
    }
}

/// A stretch of time at one hop during which two or more attempts of one line key were
/// active: what an operation's overlap is made of.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OverlapSpan {
    pub hop: u16,
    /// The line key whose attempts overlap.
    pub key: crate::group::LineKey,
    pub start_ms: Millis,
    pub end_ms: Millis,
}

impl OverlapSpan {
    pub fn len_ms(&self) -> Millis {
        self.end_ms - self.start_ms
    }
}

/// Every overlap of the operation (docs/rules.md), by hop, then line key, then time. Hops where a
/// policy allows overlap have none. An operation's `overlap_ms` is the longest of these.
pub fn overlap_spans(
    attempts: &[Attempt],
    rules: &Rules,
    trace_end_ms: Millis,
) -> Vec<OverlapSpan> {
    // Only attempts at one hop can overlap. Most operations (every healthy one) make one
    // attempt per hop: nothing to list, sort or allocate for them.
    if at_most_one_per_hop(attempts) {
        return Vec::new();
    }
    // Sized once (a filter's collect grew it by doubling); sorted unstably, as attempts
    // that tie on all of hop, key and start give the same stretches in either order (and
    // a stable sort allocated a buffer of its own past twenty).
    let mut by_key: Vec<(u16, crate::group::LineKey, Millis, Millis)> =
        Vec::with_capacity(attempts.len());
    by_key.extend(
        attempts
            .iter()
            .filter(|a| !rules.overlap_allowed[a.hop as usize] && !a.untimed)
            .map(|a| {
                (
                    a.hop,
                    crate::group::line_key(a, rules),
                    a.start_ms,
                    a.end_or(trace_end_ms),
                )
            }),
    );
    by_key.sort_unstable_by(|x, y| (x.0, x.1).cmp(&(y.0, y.1)).then(x.2.total_cmp(&y.2)));
    let mut spans = Vec::new();
    for group in by_key.chunk_by(|x, y| (x.0, x.1) == (y.0, y.1)) {
        if group.len() < 2 {
            continue; // one attempt never overlaps: most lines, and no lists to make
        }
        let (hop, key) = (group[0].0, group[0].1);
        spans.extend(
            stretches_with_two_active(group.iter().map(|&(_, _, s, e)| (s, e)))
                .into_iter()
                .map(|(start_ms, end_ms)| OverlapSpan {
                    hop,
                    key,
                    start_ms,
                    end_ms,
                }),
        );
    }
    spans
}

/// Whether no two of the attempts are at one hop (false when it cannot tell cheaply: a
/// hop past the 64th).
fn at_most_one_per_hop(attempts: &[Attempt]) -> bool {
    let mut seen = 0u64;
    for a in attempts {
        let Some(bit) = 1u64.checked_shl(u32::from(a.hop)) else {
            return false;
        };
        if seen & bit != 0 {
            return false;
        }
        seen |= bit;
    }
    true
}

/// The stretches of time, in order, during which at least two of the intervals are active.
/// Touching intervals (one ends as the next starts) do not overlap.
pub fn stretches_with_two_active(
    intervals: impl Iterator<Item = (Millis, Millis)>,
) -> Vec<(Millis, Millis)> {
    let mut edges: Vec<(Millis, i32)> = Vec::with_capacity(2 * intervals.size_hint().0);
    for (s, e) in intervals {
        if e > s {
            edges.push((s, 1));
            edges.push((e, -1));
        }
    }
    // Ends before starts at the same instant; equal edges are alike, so unstably.
    edges.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut depth, mut stretch_start) = (0, 0.0);
    let mut stretches = Vec::new();
    for (t, d) in edges {
        let was_overlapping = depth >= 2;
        depth += d;
        match (was_overlapping, depth >= 2) {
            (false, true) => stretch_start = t,
            (true, false) => stretches.push((stretch_start, t)),
            _ => {}
        }
    }
    stretches
}

/// The class precedence of docs/rules.md. `in_burst`: one of the operation's retries lies in a burst.
pub fn classify(facts: &OperationFacts, in_burst: bool) -> Class {
    let Some(first) = facts.first_multiplying_hop else {
        return Class::Healthy;
    };
    let at_first = &facts.hops[first as usize];
    if at_first.retries {
        // Two retrying layers in one hop multiply as two hops retrying do.
        let retrying_layers: usize = facts
            .hops
            .iter()
            .filter(|h| h.retries)
            .map(|h| 1 + usize::from(h.layered))
            .sum();
        if retrying_layers >= 2 {
            Class::NestedRetry
        } else if facts.has_overlap() {
            Class::Overlap
        } else if in_burst {
            Class::SynchronizedBurst
        } else if facts.hops.iter().any(|h| h.over_budget) {
            Class::OverBudget
        } else if at_first.fans_out {
            Class::FanOut
        } else {
            Class::Healthy
        }
    } else if at_first.redelivers {
        Class::Redelivery
    } else {
        Class::FanOut
    }
}

/// Every fact that holds for the operation, class-defining ones included, sorted.
pub fn findings(facts: &OperationFacts, burst_hops: &[u16]) -> Vec<Finding> {
    let mut out = Vec::new();
    for (hop, h) in facts.hops.iter().enumerate() {
        let hop = hop as u16;
        let mut add = |holds: bool, kind: FindingKind| {
            if holds {
                out.push(Finding { kind, hop });
            }
        };
        add(h.retries, FindingKind::Retries);
        add(h.retries && h.hidden_sends, FindingKind::HiddenResends);
        add(h.redelivers, FindingKind::Redelivery);
        add(h.fans_out, FindingKind::FanOut);
        add(h.overlap_ms > 0.0, FindingKind::Overlap);
        add(burst_hops.contains(&hop), FindingKind::Burst);
        add(h.over_budget, FindingKind::OverBudget);
        add(h.retry_without_delay, FindingKind::RetryWithoutDelay);
        add(
            h.retry_after_not_honoured,
            FindingKind::RetryAfterNotHonoured,
        );
        add(h.retry_after_not_clamped, FindingKind::RetryAfterNotClamped);
        add(h.attempt_after_deadline, FindingKind::AttemptAfterDeadline);
        add(h.backoff_over_deadline, FindingKind::BackoffOverDeadline);
        add(h.duplicate_effects > 0, FindingKind::DuplicateEffect);
        add(h.unfinished > 0, FindingKind::Unfinished);
        add(h.orphans > 0, FindingKind::Orphan);
        add(h.inferred_layers, FindingKind::InferredLayers);
        add(h.resends, FindingKind::Resends);
        add(h.retried_non_retryable, FindingKind::RetriedNonRetryable);
        add(
            h.idempotency_key_changed,
            FindingKind::IdempotencyKeyChanged,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(hops: Vec<HopFacts>, overlap_ms: Millis) -> OperationFacts {
        OperationFacts {
            first_multiplying_hop: hops.iter().position(|h| h.multiplies).map(|i| i as u16),
            hops,
            roles: vec![],
            retry_starts: vec![],
            first_start_ms: 0.0,
            last_finish_ms: None,
            overlap_ms,
        }
    }

    fn hop(
        multiplies: bool,
        retries: bool,
        redelivers: bool,
        fans_out: bool,
        over_budget: bool,
    ) -> HopFacts {
        HopFacts {
            attempts: 1,
            multiplies,
            retries,
            redelivers,
            fans_out,
            over_budget,
            ..HopFacts::default()
        }
    }

    #[test]
    fn class_precedence_follows_spec_section_3() {
        let none = hop(false, false, false, false, false);
        let retry = hop(true, true, false, false, false);
        let retry_fan = hop(true, true, false, true, false);
        let retry_over = hop(true, true, false, false, true);
        let redeliver = hop(true, false, true, false, false);
        let fan = hop(true, false, false, true, false);
        let table: Vec<(Vec<HopFacts>, Millis, bool, Class)> = vec![
            (vec![none.clone(), none.clone()], 0.0, false, Class::Healthy),
            (
                vec![retry.clone(), none.clone()],
                0.0,
                false,
                Class::Healthy,
            ),
            (
                vec![retry.clone(), retry.clone()],
                100.0,
                true,
                Class::NestedRetry,
            ),
            (
                vec![retry.clone(), none.clone()],
                100.0,
                true,
                Class::Overlap,
            ),
            (
                vec![retry.clone(), none.clone()],
                0.0,
                true,
                Class::SynchronizedBurst,
            ),
            (
                vec![retry_over.clone(), none.clone()],
                0.0,
                false,
                Class::OverBudget,
            ),
            (
                vec![none.clone(), retry_over.clone()],
                0.0,
                false,
                Class::OverBudget,
            ),
            (
                vec![retry_fan.clone(), none.clone()],
                0.0,
                false,
                Class::FanOut,
            ),
            (
                vec![redeliver.clone(), retry.clone()],
                0.0,
                false,
                Class::Redelivery,
            ),
            (vec![fan.clone(), retry.clone()], 50.0, true, Class::FanOut),
            (
                vec![none.clone(), redeliver.clone()],
                0.0,
                false,
                Class::Redelivery,
            ),
        ];
        for (i, (hops, overlap, burst, expected)) in table.into_iter().enumerate() {
            assert_eq!(classify(&facts(hops, overlap), burst), expected, "row {i}");
        }
    }

    #[test]
    fn overlap_is_the_longest_stretch_with_two_active() {
        let longest = |v: &[(f64, f64)]| {
            stretches_with_two_active(v.iter().copied())
                .iter()
                .map(|(s, e)| e - s)
                .fold(0.0, f64::max)
        };
        assert_eq!(longest(&[(0.0, 1400.0), (850.0, 2250.0)]), 550.0);
        assert_eq!(longest(&[(0.0, 100.0), (100.0, 200.0)]), 0.0);
        assert_eq!(longest(&[(0.0, 100.0), (10.0, 20.0), (50.0, 65.0)]), 15.0);
        assert_eq!(longest(&[(0.0, 100.0), (10.0, 60.0), (50.0, 80.0)]), 70.0);
    }

    #[test]
    fn overlap_spans_are_listed_in_time_order_per_hop() {
        assert_eq!(
            stretches_with_two_active([(0.0, 100.0), (10.0, 20.0), (50.0, 65.0)].into_iter()),
            vec![(10.0, 20.0), (50.0, 65.0)]
        );
        let rules = Rules::new(crate::rules::HopOrder::default());
        let a = vec![
            crate::group::tests_support::attempt(0, 0.0, 800.0),
            crate::group::tests_support::attempt(0, 850.0, 2250.0),
            crate::group::tests_support::attempt(3, 0.0, 1400.0),
            crate::group::tests_support::attempt(3, 850.0, 2250.0),
        ];
        let spans = overlap_spans(&a, &rules, 2250.0);
        assert_eq!(
            spans,
            vec![OverlapSpan {
                hop: 3,
                key: crate::group::LineKey::Target(None),
                start_ms: 850.0,
                end_ms: 1400.0
            }]
        );
        assert_eq!(spans[0].len_ms(), 550.0);
    }

    #[test]
    fn only_attempts_sharing_a_hop_are_looked_at_for_overlaps() {
        let at = |hop, start, finish| crate::group::tests_support::attempt(hop, start, finish);
        // Overlapping in time, but at three hops: no overlap, found without listing them.
        let chain = [at(0, 0.0, 900.0), at(1, 10.0, 800.0), at(2, 20.0, 700.0)];
        assert!(at_most_one_per_hop(&chain));
        let rules = Rules::new(crate::rules::HopOrder::default());
        assert!(overlap_spans(&chain, &rules, 900.0).is_empty());
        // Two at one hop go the whole way (and overlap here).
        let retried = [at(0, 0.0, 900.0), at(1, 10.0, 800.0), at(1, 500.0, 850.0)];
        assert!(!at_most_one_per_hop(&retried));
        assert_eq!(overlap_spans(&retried, &rules, 900.0).len(), 1);
        // A hop past the 64th is never taken for unique.
        assert!(!at_most_one_per_hop(&[at(70, 0.0, 1.0)]));
        assert!(at_most_one_per_hop(&[at(63, 0.0, 1.0), at(0, 0.0, 1.0)]));
    }

    fn timed(start: f64, finish: f64, outcome: Option<crate::model::Outcome>) -> Attempt {
        let mut a = crate::group::tests_support::attempt(0, start, finish);
        a.outcome = outcome;
        a
    }

    /// The facts at the caller of one caller line: (start, finish, delay_ms) per attempt,
    /// under a caller deadline of 1000 ms.
    fn caller_line_under_deadline(line: &[(f64, f64, Option<f64>)]) -> HopFacts {
        let mut rules = Rules::new(crate::rules::HopOrder::default());
        rules
            .set_deadlines("--deadline", &["caller=1000".to_string()])
            .expect("valid deadline");
        let attempts: Vec<Attempt> = line
            .iter()
            .map(|&(start, finish, delay_ms)| {
                let mut a = crate::group::tests_support::attempt(0, start, finish);
                a.delay_ms = delay_ms;
                a
            })
            .collect();
        let tree = crate::group::build_tree(&attempts, &rules, 10_000.0);
        operation_facts(&attempts, &tree, &rules, 10_000.0).hops[0].clone()
    }

    #[test]
    fn a_deadline_flags_late_attempts_and_backoff_adding_up_past_it() {
        let cases = [
            // (line, attempt after the deadline, backoff over it)
            (
                vec![
                    (0.0, 100.0, None),
                    (500.0, 600.0, Some(400.0)),
                    (1300.0, 1400.0, Some(700.0)),
                ],
                true,
                true,
            ),
            // Slow attempts, short sleeps: late, but the backoff alone is 100 ms.
            (
                vec![
                    (0.0, 600.0, None),
                    (650.0, 1250.0, None),
                    (1300.0, 1400.0, None),
                ],
                true,
                false,
            ),
            // Without delay_ms the gaps are the backoff: 690 + 790 ms.
            (
                vec![
                    (0.0, 10.0, None),
                    (700.0, 710.0, None),
                    (1500.0, 1510.0, None),
                ],
                true,
                true,
            ),
            // At the deadline is after it; backoff equal to it is not over it.
            (
                vec![(0.0, 0.5, None), (1000.0, 1001.0, Some(1000.0))],
                true,
                false,
            ),
            (
                vec![
                    (0.0, 100.0, None),
                    (300.0, 400.0, Some(200.0)),
                    (800.0, 900.0, Some(400.0)),
                ],
                false,
                false,
            ),
            // A single attempt has no backoff, however long it runs.
            (vec![(0.0, 5000.0, None)], false, false),
        ];
        for (i, (line, late, over)) in cases.into_iter().enumerate() {
            let h = caller_line_under_deadline(&line);
            assert_eq!(
                (h.attempt_after_deadline, h.backoff_over_deadline),
                (late, over),
                "case {i}"
            );
        }
        // Without a deadline neither holds.
        let rules = Rules::new(crate::rules::HopOrder::default());
        let attempts = vec![
            crate::group::tests_support::attempt(0, 0.0, 10.0),
            crate::group::tests_support::attempt(0, 90_000.0, 90_010.0),
        ];
        let tree = crate::group::build_tree(&attempts, &rules, 100_000.0);
        let h = &operation_facts(&attempts, &tree, &rules, 100_000.0).hops[0];
        assert!(!h.attempt_after_deadline && !h.backoff_over_deadline);
    }

    #[test]
    fn flags_back_to_back_retries_after_fast_failures_only() {
        use crate::model::Outcome::Http;
        let fast_fail = timed(0.0, 20.0, Some(Http(503)));
        assert!(retry_hygiene(&fast_fail, &timed(22.0, 40.0, None)).without_delay);
        assert!(!retry_hygiene(&fast_fail, &timed(220.0, 240.0, None)).without_delay);
        let slow_fail = timed(0.0, 1000.0, Some(crate::model::Outcome::Timeout));
        assert!(!retry_hygiene(&slow_fail, &timed(1001.0, 1040.0, None)).without_delay);
    }

    #[test]
    fn flags_retry_after_hints_not_honoured_or_not_clamped() {
        let mut hinted = timed(0.0, 20.0, Some(crate::model::Outcome::Http(429)));
        hinted.retry_after_ms = Some(1000.0);
        let early = retry_hygiene(&hinted, &timed(500.0, 520.0, None));
        assert!(early.hint_not_honoured && !early.hint_not_clamped);
        assert!(!retry_hygiene(&hinted, &timed(1020.0, 1040.0, None)).hint_not_honoured);
        hinted.retry_after_ms = Some(3_600_000.0);
        let waited_an_hour = retry_hygiene(&hinted, &timed(3_600_020.0, 3_600_040.0, None));
        assert!(waited_an_hour.hint_not_clamped && !waited_an_hour.hint_not_honoured);
    }
}

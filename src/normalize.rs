//! Normalize: turns one operation's events into attempts. Drops exact duplicates (log
//! shippers deliver at least once), pairs point events into attempts (by attempt number,
//! or in order where none is given), and takes the start of an attempt seen only finishing
//! from the attempt with the same number upstream (docs/input.md).

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::model::{Attempt, Event, Millis, Outcome, PointKind, SourceRef, Timing};

/// One operation's attempts, in canonical order (hop, start, then content), and what
/// normalizing found wrong with its events.
#[derive(Debug, Default)]
pub struct Normalized {
    pub attempts: Vec<Attempt>,
    /// Where each dropped duplicate was read (the later copies).
    pub duplicates: Vec<SourceRef>,
    /// Events that cannot become an attempt, by source line.
    pub problems: Vec<(SourceRef, String)>,
}

/// Orders one operation's events canonically, by content alone, so that every later step
/// is independent of input order: by hop, attempt number, records before point events,
/// time, then the rest of the content; the source line only breaks exact ties.
pub fn canonical_order(a: &Event, b: &Event) -> std::cmp::Ordering {
    a.order_key()
        .cmp(&b.order_key())
        .then_with(|| a.content().cmp(&b.content()))
        .then(a.source.cmp(&b.source))
}

/// Normalizes the events of one operation, given in [`canonical_order`].
pub fn normalize_operation(events: &[Event]) -> Normalized {
    let mut out = Normalized::default();
    Normalizer::default().normalize(events, &mut out);
    out
}

/// Normalizes operations one after another in the same memory: the attempts and the
/// working lists, allocated and grown for each of millions of operations, were a good part
/// of the per-operation pass's allocations (a worker keeps one normalizer and one
/// [`Normalized`]; see `group::TreeBuilder`).
#[derive(Default)]
pub struct Normalizer {
    /// The index of each event kept (the first of each run of exact duplicates).
    unique: Vec<u32>,
}

impl Normalizer {
    /// Makes `out` the normalized form of `events` (as [`normalize_operation`]), whatever
    /// it held.
    pub fn normalize(&mut self, events: &[Event], out: &mut Normalized) {
        out.attempts.clear();
        out.duplicates.clear();
        out.problems.clear();
        let unique = &mut self.unique;
        unique.clear();
        for (i, e) in events.iter().enumerate() {
            if unique
                .last()
                .is_some_and(|&prev| events[prev as usize].same_content(e))
            {
                out.duplicates.push(e.source);
            } else {
                unique.push(i as u32);
            }
        }
        attempts_of(events, unique, out);
    }
}

/// The attempts of `events[i]` for each `i` of `unique`, into `out`.
fn attempts_of(events: &[Event], unique: &[u32], out: &mut Normalized) {
    // A hop's attempts seen only finishing, waiting for a start: allocated only by an
    // operation that has one (and handed on whole when it does, so not kept).
    let mut finish_only: Vec<Attempt> = Vec::new();

    // Events come by hop, upstream first: pair each hop's point events and number its
    // attempts; then give each attempt seen only finishing the start of its number
    // upstream, hop by hop, so that an inferred start can be passed further down.
    let mut starts = StartsByNumber::default();
    // Started attempts not yet numbered: numbering waits for a first attempt seen only
    // finishing, which most operations never have.
    let mut unnumbered_from = 0;
    let hop_of = |i: u32| events[i as usize].hop;
    for hop_events in unique.chunk_by(|&a, &b| hop_of(a) == hop_of(b)) {
        let mut points: Vec<&Event> = Vec::new();
        for e in hop_events.iter().map(|&i| &events[i as usize]) {
            match e.timing() {
                Timing::Record {
                    start_ms: Some(start_ms),
                    finish_ms,
                } => out.attempts.push(attempt_from(e, start_ms, finish_ms)),
                Timing::Record {
                    start_ms: None,
                    finish_ms,
                } => {
                    let mut a = attempt_from(e, Millis::NAN, finish_ms);
                    a.start_inferred = true;
                    finish_only.push(a);
                }
                Timing::Point { .. } => points.push(e),
            }
        }
        if !points.is_empty() {
            pair_points(&mut points, &mut out.attempts, &mut finish_only);
        }
        if finish_only.is_empty() {
            continue;
        }
        for hop_attempts in out.attempts[unnumbered_from..].chunk_by(|a, b| a.hop == b.hop) {
            starts.add_started(hop_attempts);
        }
        for (a, number) in in_finish_order(std::mem::take(&mut finish_only)) {
            match starts.upstream(a.hop, number) {
                Some(start) if a.finish_ms.is_none_or(|f| f >= start) => {
                    let mut a = a;
                    a.start_ms = start;
                    starts.add(a.hop, number, start);
                    out.attempts.push(a);
                }
                Some(start) => out.problems.push((
                    a.source,
                    format!(
                        "finish ({} ms) is earlier than the start taken from the same attempt upstream ({start} ms): log this attempt's start too",
                        a.finish_ms.unwrap_or_default()
                    ),
                )),
                None => out.problems.push((
                    a.source,
                    "attempt has a finish but no start, and no upstream attempt with the same attempt number to take it from: log its start (start_ms, or an event=start line)".to_string(),
                )),
            }
        }
        // Those just given a start are numbered already, by their finish order.
        unnumbered_from = out.attempts.len();
    }
    out.attempts.sort_by(canonical_attempt_order);
}

/// The earliest start of each (hop, attempt number) seen so far: what an attempt seen only
/// finishing further down takes its start from.
#[derive(Default)]
struct StartsByNumber(HashMap<(u16, u32), Millis>);

impl StartsByNumber {
    fn add(&mut self, hop: u16, number: u32, start_ms: Millis) {
        let earliest = self.0.entry((hop, number)).or_insert(start_ms);
        *earliest = earliest.min(start_ms);
    }

    /// Numbers one hop's started attempts: an attempt's own `attempt` number, else its
    /// place among the hop's attempts in start order (the k-th start opens attempt k).
    fn add_started(&mut self, hop_attempts: &[Attempt]) {
        let mut order: Vec<&Attempt> = hop_attempts.iter().collect();
        order.sort_by(|a, b| canonical_attempt_order(a, b));
        for (k, a) in order.into_iter().enumerate() {
            self.add(a.hop, a.attempt.unwrap_or(k as u32 + 1), a.start_ms);
        }
    }

    /// The start of attempt `number` at the nearest hop above `hop` that has one.
    fn upstream(&self, hop: u16, number: u32) -> Option<Millis> {
        (0..hop)
            .rev()
            .find_map(|h| self.0.get(&(h, number)).copied())
    }
}

/// One hop's attempts seen only finishing, in finish order, each with its number: its
/// own `attempt` number, else its place among them (the k-th finish-only event at a hop is
/// attempt k there).
fn in_finish_order(mut finish_only: Vec<Attempt>) -> Vec<(Attempt, u32)> {
    // Stable: equal finishes keep the content order they were read in.
    finish_only.sort_by(|a, b| {
        a.finish_ms
            .unwrap_or(Millis::INFINITY)
            .total_cmp(&b.finish_ms.unwrap_or(Millis::INFINITY))
    });
    finish_only
        .into_iter()
        .enumerate()
        .map(|(k, a)| {
            let number = a.attempt.unwrap_or(k as u32 + 1);
            (a, number)
        })
        .collect()
}

/// The order of attempts used by every later stage: by hop, then time, then content.
pub fn canonical_attempt_order(a: &Attempt, b: &Attempt) -> std::cmp::Ordering {
    a.hop
        .cmp(&b.hop)
        .then(a.start_ms.total_cmp(&b.start_ms))
        .then(
            a.finish_ms
                .unwrap_or(Millis::INFINITY)
                .total_cmp(&b.finish_ms.unwrap_or(Millis::INFINITY)),
        )
        .then(a.attempt.cmp(&b.attempt))
        .then(a.target.cmp(&b.target))
        .then(a.message_id.cmp(&b.message_id))
        .then(a.span_id.cmp(&b.span_id))
        .then(a.source.cmp(&b.source))
}

fn attempt_from(e: &Event, start_ms: Millis, finish_ms: Option<Millis>) -> Attempt {
    let f = e.fields();
    Attempt {
        source: e.source,
        hop: e.hop,
        attempt: f.attempt,
        start_ms,
        finish_ms,
        start_inferred: false,
        outcome: f.outcome,
        target: f.target,
        message_id: f.message_id,
        delivery: f.delivery,
        span_id: f.span_id,
        parent_id: f.parent_id,
        delay_ms: f.delay_ms,
        retry_after_ms: f.retry_after_ms,
        effect: f.effect,
        hidden: f.hidden,
        untimed: f.untimed,
    }
}

/// Pairs the point events of one hop in time order (a start before an end at the same
/// instant): a start opens an attempt; an end with an attempt number closes the earliest
/// open attempt with that number, an end without one the earliest open attempt. An end
/// with nothing to close is an attempt seen only finishing; its start comes from upstream.
fn pair_points(events: &mut [&Event], started: &mut Vec<Attempt>, finish_only: &mut Vec<Attempt>) {
    let at = |e: &Event| match e.timing() {
        Timing::Point { kind, at_ms } => (at_ms, kind != PointKind::Start),
        Timing::Record { .. } => unreachable!("only point events are paired"),
    };
    // Stable: events at one instant keep their content order.
    events.sort_by(|a, b| {
        let (ta, end_a) = at(a);
        let (tb, end_b) = at(b);
        ta.total_cmp(&tb).then(end_a.cmp(&end_b))
    });
    // Open attempts by the order they were opened, and each number's open ones in order.
    let mut open: BTreeMap<usize, Attempt> = BTreeMap::new();
    let mut open_by_number: HashMap<u32, VecDeque<usize>> = HashMap::new();
    for (seq, e) in events.iter().enumerate() {
        let Timing::Point { kind, at_ms } = e.timing() else {
            continue;
        };
        if kind == PointKind::Start {
            if let Some(n) = e.attempt() {
                open_by_number.entry(n).or_default().push_back(seq);
            }
            open.insert(seq, attempt_from(e, at_ms, None));
            continue;
        }
        let closes = match e.attempt() {
            Some(n) => open_by_number.get_mut(&n).and_then(VecDeque::pop_front),
            None => open.first_key_value().map(|(&seq, _)| seq),
        };
        let outcome = match kind {
            PointKind::Timeout => Some(Outcome::Timeout),
            PointKind::Cancel => Some(Outcome::Cancelled),
            _ => e.outcome,
        };
        match closes.and_then(|seq| open.remove(&seq)) {
            Some(mut a) => {
                if let (None, Some(n)) = (e.attempt(), a.attempt) {
                    // The earliest open attempt is the first open one of its number too.
                    open_by_number.get_mut(&n).and_then(VecDeque::pop_front);
                }
                a.finish_ms = Some(at_ms);
                a.outcome = outcome.or(a.outcome);
                merge_fields(&mut a, e);
                started.push(a);
            }
            None => {
                let mut a = attempt_from(e, Millis::NAN, Some(at_ms));
                a.outcome = outcome;
                a.start_inferred = true;
                finish_only.push(a);
            }
        }
    }
    // Starts with no end: still in flight when the trace ends.
    started.extend(open.into_values());
}

/// Fields logged only on the end event (a status code, a retry-after hint) complete the
/// attempt opened by its start event.
fn merge_fields(a: &mut Attempt, e: &Event) {
    let f = e.fields();
    a.target = a.target.or(f.target);
    a.message_id = a.message_id.or(f.message_id);
    a.delivery = a.delivery.or(f.delivery);
    a.span_id = a.span_id.or(f.span_id);
    a.parent_id = a.parent_id.or(f.parent_id);
    a.delay_ms = a.delay_ms.or(f.delay_ms);
    a.retry_after_ms = a.retry_after_ms.or(f.retry_after_ms);
    a.effect |= f.effect;
    a.hidden |= f.hidden;
    a.untimed |= f.untimed;
}

/// Event indexes grouped by operation (a counting sort): operation `op` owns
/// `order[offsets[op]..offsets[op + 1]]`. Cheaper than sorting 72-byte events globally.
pub struct ByOperation {
    offsets: Vec<u32>,
    order: Vec<u32>,
}

impl ByOperation {
    pub fn new(events: &[Event], operations: usize) -> ByOperation {
        let mut offsets = vec![0u32; operations + 1];
        for e in events {
            offsets[e.op as usize + 1] += 1;
        }
        for i in 1..offsets.len() {
            offsets[i] += offsets[i - 1];
        }
        let mut next = offsets.clone();
        let mut order = vec![0u32; events.len()];
        for (i, e) in events.iter().enumerate() {
            let slot = &mut next[e.op as usize];
            order[*slot as usize] = i as u32;
            *slot += 1;
        }
        ByOperation { offsets, order }
    }

    /// Fills `into` with the events of operation `op` in canonical order: what normalize
    /// takes. A pass over many operations keeps an [`EventSorter`] per thread instead.
    pub fn sorted_events(&self, events: &[Event], op: usize, into: &mut Vec<Event>) {
        EventSorter::default().sorted_events(self, events, op, into);
    }
}

/// Puts operations' events in canonical order one after another, in the same memory: the
/// order keys (`Event::order_key`) of an operation's events are sorted, each computed
/// once, and the events copied once, in that order. Sorting the events themselves
/// computed two keys a compare and moved 72 bytes at a time.
#[derive(Default)]
pub struct EventSorter {
    /// The order key and index of each event of the operation.
    keys: Vec<((u64, u64, u64), u32)>,
}

impl EventSorter {
    /// As [`ByOperation::sorted_events`].
    pub fn sorted_events(
        &mut self,
        by_operation: &ByOperation,
        events: &[Event],
        op: usize,
        into: &mut Vec<Event>,
    ) {
        let members = by_operation.offsets[op] as usize..by_operation.offsets[op + 1] as usize;
        self.keys.clear();
        self.keys.extend(
            by_operation.order[members]
                .iter()
                .map(|&i| (events[i as usize].order_key(), i)),
        );
        // Events that compare equal are the same in every field: either order gives the
        // same operation.
        self.keys.sort_unstable_by(|a, b| {
            a.0.cmp(&b.0)
                .then_with(|| canonical_order(&events[a.1 as usize], &events[b.1 as usize]))
        });
        into.clear();
        into.extend(self.keys.iter().map(|&(_, i)| events[i as usize]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The leading part of the canonical order field by field, as `canonical_order` was
    /// written before `Event::order_key`: what the keys must give.
    fn by_fields(a: &Event, b: &Event) -> std::cmp::Ordering {
        let time = |e: &Event| match e.timing() {
            Timing::Record {
                start_ms,
                finish_ms,
            } => (0u8, start_ms.unwrap_or(-1.0), finish_ms.unwrap_or(-1.0)),
            Timing::Point { at_ms, .. } => (1u8, at_ms, 0.0),
        };
        let ((ka, sa, fa), (kb, sb, fb)) = (time(a), time(b));
        a.hop
            .cmp(&b.hop)
            .then(a.attempt().cmp(&b.attempt()))
            .then(ka.cmp(&kb))
            .then(sa.total_cmp(&sb))
            .then(fa.total_cmp(&fb))
    }

    #[test]
    fn order_keys_order_events_as_their_fields_do() {
        let times = [
            None,
            Some(-f64::MAX),
            Some(-1e12),
            Some(-1.0),
            Some(-0.5),
            Some(-0.0),
            Some(0.0),
            Some(f64::MIN_POSITIVE),
            Some(0.5),
            Some(1.0),
            Some(1_700_000_000_001.0),
            Some(f64::MAX),
        ];
        let mut events = Vec::new();
        for hop in [0, 1, 3, u16::MAX] {
            for attempt in [None, Some(1), Some(2), Some(u32::MAX)] {
                let fields = crate::model::EventFields {
                    attempt,
                    ..Default::default()
                };
                let at =
                    |timing| Event::new(SourceRef { file: 0, line: 1 }, 0, hop, timing, fields);
                for &start_ms in &times {
                    for &finish_ms in &times[..4] {
                        events.push(at(Timing::Record {
                            start_ms,
                            finish_ms,
                        }));
                    }
                    if let Some(at_ms) = start_ms {
                        events.push(at(Timing::Point {
                            kind: PointKind::Start,
                            at_ms,
                        }));
                    }
                }
            }
        }
        for a in &events {
            for b in &events {
                assert_eq!(
                    a.order_key().cmp(&b.order_key()),
                    by_fields(a, b),
                    "{a:?} {b:?}"
                );
            }
        }
    }

    /// A point event; attempt number 0 means none given.
    fn point(line: u32, hop: u16, attempt: u32, kind: PointKind, at_ms: f64) -> Event {
        let fields = crate::model::EventFields {
            attempt: (attempt > 0).then_some(attempt),
            ..Default::default()
        };
        Event::new(
            SourceRef { file: 0, line },
            0,
            hop,
            Timing::Point { kind, at_ms },
            fields,
        )
    }

    fn normalize(mut events: Vec<Event>) -> Normalized {
        events.sort_by(canonical_order);
        normalize_operation(&events)
    }

    #[test]
    fn pairs_the_spec_trace_and_takes_server_starts_from_the_caller() {
        // The default hop order: caller = hop 0, dependency = hop 3.
        let got = normalize(vec![
            point(1, 0, 1, PointKind::Start, 0.0),
            point(2, 0, 1, PointKind::Timeout, 800.0),
            point(3, 0, 2, PointKind::Start, 850.0),
            point(4, 3, 1, PointKind::Finish, 1400.0),
            point(5, 3, 2, PointKind::Finish, 2250.0),
        ]);
        let spans: Vec<_> = got
            .attempts
            .iter()
            .map(|a| (a.hop, a.start_ms, a.finish_ms))
            .collect();
        assert_eq!(
            spans,
            vec![
                (0, 0.0, Some(800.0)),
                (0, 850.0, None),
                (3, 0.0, Some(1400.0)),
                (3, 850.0, Some(2250.0))
            ]
        );
        assert_eq!(got.attempts[0].outcome, Some(Outcome::Timeout));
        assert!(got.problems.is_empty());
    }

    fn spans(got: &Normalized) -> Vec<(u16, f64, Option<f64>)> {
        got.attempts
            .iter()
            .map(|a| (a.hop, a.start_ms, a.finish_ms))
            .collect()
    }

    #[test]
    fn the_spec_trace_without_attempt_numbers_pairs_in_order() {
        let got = normalize(vec![
            point(1, 0, 0, PointKind::Start, 0.0),
            point(2, 0, 0, PointKind::Timeout, 800.0),
            point(3, 0, 0, PointKind::Start, 850.0),
            point(4, 3, 0, PointKind::Finish, 1400.0),
            point(5, 3, 0, PointKind::Finish, 2250.0),
        ]);
        assert_eq!(
            spans(&got),
            vec![
                (0, 0.0, Some(800.0)),
                (0, 850.0, None),
                (3, 0.0, Some(1400.0)),
                (3, 850.0, Some(2250.0))
            ]
        );
        assert!(got.problems.is_empty());
    }

    #[test]
    fn the_kth_finish_only_event_takes_the_start_of_the_kth_attempt_upstream() {
        // Three caller attempts, the third still open; the gateway sees three finishes
        // only, out of order in the input.
        let got = normalize(vec![
            point(6, 1, 0, PointKind::Finish, 990.0),
            point(1, 0, 0, PointKind::Start, 0.0),
            point(2, 0, 0, PointKind::Finish, 300.0),
            point(3, 0, 0, PointKind::Start, 400.0),
            point(4, 0, 0, PointKind::Cancel, 700.0),
            point(5, 0, 0, PointKind::Start, 800.0),
            point(7, 1, 0, PointKind::Finish, 250.0),
            point(8, 1, 0, PointKind::Finish, 690.0),
        ]);
        let gateway: Vec<_> = spans(&got).into_iter().filter(|s| s.0 == 1).collect();
        assert_eq!(
            gateway,
            vec![
                (1, 0.0, Some(250.0)),
                (1, 400.0, Some(690.0)),
                (1, 800.0, Some(990.0))
            ]
        );
    }

    #[test]
    fn an_end_without_a_number_closes_the_earliest_open_attempt() {
        let got = normalize(vec![
            point(1, 0, 0, PointKind::Start, 0.0),
            point(2, 0, 0, PointKind::Start, 10.0),
            point(3, 0, 0, PointKind::Finish, 50.0),
            point(4, 0, 0, PointKind::Finish, 60.0),
        ]);
        assert_eq!(
            spans(&got),
            vec![(0, 0.0, Some(50.0)), (0, 10.0, Some(60.0))]
        );
    }

    #[test]
    fn an_inferred_start_passes_down_to_the_next_hop_by_number() {
        // caller starts 1 and 2; the gateway and the dependency see finishes only.
        let got = normalize(vec![
            point(1, 0, 1, PointKind::Start, 0.0),
            point(2, 0, 2, PointKind::Start, 500.0),
            point(3, 1, 2, PointKind::Finish, 900.0),
            point(4, 3, 0, PointKind::Finish, 100.0),
            point(5, 3, 0, PointKind::Finish, 880.0),
        ]);
        let below: Vec<_> = spans(&got).into_iter().filter(|s| s.0 > 0).collect();
        assert_eq!(
            below,
            vec![
                (1, 500.0, Some(900.0)),
                // Attempt 1 is not at the gateway: the caller's; attempt 2 is.
                (3, 0.0, Some(100.0)),
                (3, 500.0, Some(880.0))
            ]
        );
    }

    #[test]
    fn counts_exact_duplicates_once() {
        let e = point(1, 0, 1, PointKind::Start, 5.0);
        let mut again = e;
        again.source.line = 9;
        let got = normalize(vec![e, again]);
        assert_eq!(got.duplicates.len(), 1);
        assert_eq!(got.attempts.len(), 1);
    }

    #[test]
    fn a_finish_with_nothing_upstream_is_a_problem_not_a_guess() {
        let got = normalize(vec![point(7, 3, 1, PointKind::Finish, 10.0)]);
        assert!(got.attempts.is_empty());
        assert_eq!(got.problems.len(), 1);
        assert_eq!(got.problems[0].0.line, 7);
    }
}

//! Normalize: turns one operation's events into attempts. Drops exact duplicates (log
//! shippers deliver at least once), pairs point events into attempts, and takes the start
//! of an attempt seen only finishing from the same attempt upstream (SPEC §2).

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
    let time = |e: &Event| match e.timing() {
        Timing::Record {
            start_ms,
            finish_ms,
        } => (0u8, start_ms.unwrap_or(-1.0), finish_ms.unwrap_or(-1.0)),
        Timing::Point { at_ms, .. } => (1u8, at_ms, 0.0),
    };
    let (ka, sa, fa) = time(a);
    let (kb, sb, fb) = time(b);
    a.hop
        .cmp(&b.hop)
        .then(a.attempt().cmp(&b.attempt()))
        .then(ka.cmp(&kb))
        .then(sa.total_cmp(&sb))
        .then(fa.total_cmp(&fb))
        .then_with(|| a.content().cmp(&b.content()))
        .then(a.source.cmp(&b.source))
}

/// Normalizes the events of one operation, given in [`canonical_order`].
pub fn normalize_operation(events: &[Event]) -> Normalized {
    let mut out = Normalized::default();
    let mut unique: Vec<&Event> = Vec::with_capacity(events.len());
    for e in events {
        if unique.last().is_some_and(|prev| prev.same_content(e)) {
            out.duplicates.push(e.source);
        } else {
            unique.push(e);
        }
    }

    let mut pending_start: Vec<Attempt> = Vec::new();
    let mut i = 0;
    while i < unique.len() {
        let e = unique[i];
        match e.timing() {
            Timing::Record {
                start_ms,
                finish_ms,
            } => {
                let mut a = attempt_from(e, start_ms.unwrap_or(Millis::NAN), finish_ms);
                if start_ms.is_none() {
                    a.start_inferred = true;
                    pending_start.push(a);
                } else {
                    out.attempts.push(a);
                }
                i += 1;
            }
            Timing::Point { .. } => {
                // Point events of one (hop, attempt number) are adjacent and in time order.
                let mut j = i;
                while j < unique.len()
                    && matches!(unique[j].timing(), Timing::Point { .. })
                    && unique[j].hop == e.hop
                    && unique[j].attempt() == e.attempt()
                {
                    j += 1;
                }
                pair_points(&unique[i..j], &mut out, &mut pending_start);
                i = j;
            }
        }
    }

    for mut a in pending_start {
        match upstream_start(&out.attempts, &a) {
            Some(start) if a.finish_ms.is_none_or(|f| f >= start) => {
                a.start_ms = start;
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
    out.attempts.sort_by(canonical_attempt_order);
    out
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
    }
}

/// Pairs the point events of one (hop, attempt number) in time order: a start opens an
/// attempt, an end closes the oldest open one. An end with nothing open is an attempt seen
/// only finishing; its start comes from upstream.
fn pair_points(events: &[&Event], out: &mut Normalized, pending_start: &mut Vec<Attempt>) {
    let mut open: std::collections::VecDeque<Attempt> = Default::default();
    for e in events {
        let Timing::Point { kind, at_ms } = e.timing() else {
            continue;
        };
        if kind == PointKind::Start {
            open.push_back(attempt_from(e, at_ms, None));
            continue;
        }
        let outcome = match kind {
            PointKind::Timeout => Some(Outcome::Timeout),
            PointKind::Cancel => Some(Outcome::Cancelled),
            _ => e.outcome,
        };
        match open.pop_front() {
            Some(mut a) => {
                a.finish_ms = Some(at_ms);
                a.outcome = outcome.or(a.outcome);
                merge_fields(&mut a, e);
                out.attempts.push(a);
            }
            None => {
                let mut a = attempt_from(e, Millis::NAN, Some(at_ms));
                a.outcome = outcome;
                a.start_inferred = true;
                pending_start.push(a);
            }
        }
    }
    // Starts with no end: still in flight when the trace ends.
    out.attempts.extend(open);
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
}

/// The start of the same attempt (same attempt number, 1 when none is given) at the
/// nearest upstream hop that has it.
fn upstream_start(known: &[Attempt], a: &Attempt) -> Option<Millis> {
    let number = a.attempt.unwrap_or(1);
    known
        .iter()
        .filter(|u| u.hop < a.hop && u.attempt.unwrap_or(1) == number)
        .max_by(|x, y| x.hop.cmp(&y.hop).then(y.start_ms.total_cmp(&x.start_ms)))
        .map(|u| u.start_ms)
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
    /// takes.
    pub fn sorted_events(&self, events: &[Event], op: usize, into: &mut Vec<Event>) {
        let range = self.offsets[op] as usize..self.offsets[op + 1] as usize;
        into.clear();
        into.extend(self.order[range].iter().map(|&i| events[i as usize]));
        into.sort_unstable_by(canonical_order);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(line: u32, hop: u16, attempt: u32, kind: PointKind, at_ms: f64) -> Event {
        let fields = crate::model::EventFields {
            attempt: Some(attempt),
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
        // SPEC §2: caller = hop 0, dependency = hop 3.
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

//! Mapped spans and their resolution across all inputs: the operation, the test run and
//! the parent attempt of each attempt span, found by walking up through parent spans and
//! consumer links once every input has been read.

mod hidden;

use std::collections::{BTreeMap, HashMap};

use super::attributes::{attempt_fields, AttemptFields, MESSAGE_ID_KEYS};
use super::hop::{effective_kind, side, Role, Side, Skip};
use super::mapping::{SpanKind, SpanMapping};
use super::{AttrValue, Span};
use crate::ingest::fields::CheckedLine;
use crate::model::{Millis, SourceRef, Timing};
use crate::rules::HopOrder;

/// A span's identity: trace and span ID as numbers (hex IDs parse losslessly), and whether
/// it is the server half of a Zipkin shared span.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub trace: u128,
    pub span: u64,
    pub shared: bool,
}

impl Key {
    fn new(trace_hex: &str, span_hex: &str, shared: bool) -> Key {
        Key {
            trace: u128::from_str_radix(trace_hex, 16).unwrap_or(0),
            span: u64::from_str_radix(span_hex, 16).unwrap_or(0),
            shared,
        }
    }
}

/// A cause: the span's parent, or for a consumer span the producer it links to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cause {
    key: Key,
    /// Look up this exact key (a shared server span's own client half); otherwise a parent
    /// ID finds the server half of a shared span first, as its children hang below it.
    exact: bool,
}

/// One span after the per-span mapping: everything the resolution needs, nothing more.
#[derive(Debug, Clone, PartialEq)]
pub struct MappedSpan {
    pub source: SourceRef,
    /// Position of the span in its line, from 1.
    pub index: u32,
    key: Key,
    trace_id: String,
    /// The `span_id` the attempt gets (a shared server span's is `<id>:server`).
    out_span_id: String,
    service: String,
    kind: SpanKind,
    pub role: Role,
    cause: Option<Cause>,
    /// A consumer span's links: each is a delivery of the linked producer's message, with
    /// the message ID the link carries, if any.
    links: Vec<(Key, String, Option<String>)>,
    operation_attr: Option<String>,
    run_attr: Option<String>,
    start_ms: Millis,
    finish_ms: Option<Millis>,
    fields: AttemptFields,
    /// A send by a layer inside the client span above it, seen only as this server span.
    hidden: bool,
    /// A `receive` span's hop: it is a delivery there if it turns out to be a push
    /// consumer's (see [`mark_push_deliveries`]).
    receive_hop: Option<u16>,
}

/// `span 3 (id 5fb3a1c2d4e6f708)`: how messages name a span.
pub fn label(index: u32, id: Option<&str>) -> String {
    match id {
        Some(id) if !id.is_empty() => format!("span {index} (id {id})"),
        _ => format!("span {index} (no id)"),
    }
}

/// Maps one span read from line `source`. The error is the message of a bad line; a span
/// that is kept but reported (`Ok` with a problem) still serves as an ancestor.
pub fn map_span(
    span: Span,
    index: u32,
    source: SourceRef,
    mapping: &SpanMapping,
    hops: &HopOrder,
) -> (MappedSpan, Option<String>) {
    let name = label(index, Some(&span.span_id));
    let kind = effective_kind(&span);
    let mut problem = None;
    let mut receive_hop = None;
    let mut role = match side(&span, kind, mapping, hops) {
        Ok(Side::Role(r)) => r,
        Ok(Side::Receive(hop)) => {
            receive_hop = Some(hop);
            Role::NotAttempt(Skip::Receive)
        }
        Err(why) => {
            problem = Some(format!("{name} {why}"));
            Role::NotAttempt(Skip::Bad)
        }
    };
    let outbound = matches!(kind, SpanKind::Client | SpanKind::Producer);
    let fields = match attempt_fields(&span, outbound) {
        Ok(f) => f,
        Err(why) => {
            if matches!(role, Role::Attempt(_)) {
                problem = Some(format!("{name}: {why}"));
                role = Role::NotAttempt(Skip::Bad);
            }
            // A poll's fields are never read; a delivery's must be sound.
            receive_hop = None;
            AttemptFields::default()
        }
    };
    // A delivery needs the times an attempt needs (checked below for attempts).
    if !matches!((span.start_ms, span.finish_ms), (Some(s), f) if f.is_none_or(|f| f >= s)) {
        receive_hop = None;
    }
    if let Role::Attempt(_) = role {
        let why = match (span.start_ms, span.finish_ms) {
            (None, _) => Some("has no start time".to_string()),
            (Some(s), Some(f)) if f < s => Some(format!(
                "ends ({f} ms) before it starts ({s} ms): fix the clock or the span"
            )),
            _ => None,
        };
        if let Some(why) = why {
            problem = Some(format!("{name} {why}"));
            role = Role::NotAttempt(Skip::Bad);
        }
    }
    let key = Key::new(&span.trace_id, &span.span_id, span.shared);
    let mut links = Vec::new();
    if kind == SpanKind::Consumer {
        for l in &span.links {
            let message = MESSAGE_ID_KEYS.iter().find_map(|k| {
                l.attributes
                    .iter()
                    .find(|(lk, _)| lk == k)
                    .and_then(|(_, v)| v.text())
            });
            links.push((
                Key::new(&l.trace_id, &l.span_id, false),
                l.trace_id.clone(),
                message,
            ));
        }
    }
    let cause = if span.shared {
        Some(Cause {
            key: Key::new(&span.trace_id, &span.span_id, false),
            exact: true,
        })
    } else if let Some((k, _, _)) = links.first() {
        Some(Cause {
            key: *k,
            exact: false,
        })
    } else {
        span.parent_span_id.as_deref().map(|p| Cause {
            key: Key::new(&span.trace_id, p, false),
            exact: false,
        })
    };
    let attr_text = |key: &str| span.attr(key).and_then(AttrValue::text);
    let mapped = MappedSpan {
        source,
        index,
        key,
        out_span_id: if span.shared {
            format!("{}:server", span.span_id)
        } else {
            span.span_id.clone()
        },
        service: span.service.clone().unwrap_or_default(),
        kind,
        role,
        cause,
        links,
        operation_attr: mapping.operation_attribute.as_deref().and_then(attr_text),
        run_attr: attr_text(&mapping.run_attribute),
        start_ms: span.start_ms.unwrap_or(0.0),
        finish_ms: span.finish_ms,
        fields,
        hidden: false,
        receive_hop,
        trace_id: span.trace_id,
    };
    (mapped, problem)
}

/// A `receive` span with spans below it and no `process` (consumer) span among them is a
/// push consumer's delivery: the broker pushed the message and the callback's work hangs
/// below the receive span (pika names its delivery callback's span `receive`). A poll's
/// receive span has the `process` spans, or nothing, below it.
fn mark_push_deliveries(spans: &mut [MappedSpan], up: &[Option<usize>]) {
    if spans.iter().all(|s| s.receive_hop.is_none()) {
        return;
    }
    // Per span: whether anything hangs below it, and whether a consumer span does.
    let mut below = vec![(false, false); spans.len()];
    for (child, &parent) in up.iter().enumerate() {
        if let Some(p) = parent.filter(|&p| p != child) {
            below[p].0 = true;
            below[p].1 |= spans[child].kind == SpanKind::Consumer;
        }
    }
    for (s, (work, process)) in spans.iter_mut().zip(below) {
        if let (Some(hop), Role::NotAttempt(Skip::Receive), true, false) =
            (s.receive_hop, s.role, work, process)
        {
            s.role = Role::Attempt(hop);
        }
    }
}

/// What the resolution made of the spans: counts for `convert`'s note.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpanStats {
    pub spans: u64,
    pub attempts: u64,
    /// Spans that are not attempts, by (service, kind, reason).
    pub skipped: BTreeMap<(String, &'static str, Skip), u64>,
}

/// The spans' attempts as checked lines, and the spans whose operation could not be found.
pub struct Resolved {
    pub lines: Vec<(SourceRef, CheckedLine<'static>)>,
    pub problems: Vec<(SourceRef, String)>,
    pub stats: SpanStats,
}

/// Resolves operation, test run and parent of every attempt span, across all inputs.
pub fn resolve(mut spans: Vec<MappedSpan>, mapping: &SpanMapping) -> Resolved {
    spans.sort_by_key(|s| (s.source, s.index));
    let mut index: HashMap<Key, usize> = HashMap::with_capacity(spans.len());
    for (i, s) in spans.iter().enumerate() {
        index.entry(s.key).or_insert(i);
    }
    let find = |c: Cause| -> Option<usize> {
        if !c.exact {
            let shared = Key {
                shared: true,
                ..c.key
            };
            if let Some(&i) = index.get(&shared) {
                return Some(i);
            }
        }
        index
            .get(&Key {
                shared: false,
                ..c.key
            })
            .copied()
    };

    // The cause of each span, by index: one hash lookup each, never a scan.
    let up: Vec<Option<usize>> = spans.iter().map(|s| s.cause.and_then(find)).collect();
    let loops = find_loops(&up);
    let mut problems = Vec::new();
    for (i, &on_loop) in loops.on_loop.iter().enumerate() {
        if !on_loop {
            continue;
        }
        let s = &spans[i];
        let name = label(s.index, Some(&s.out_span_id));
        problems.push((
            s.source,
            match up[i] {
                Some(p) if p == i => format!(
                    "{name} is its own parent (its parent ID is its span ID): fix the parent ID"
                ),
                Some(p) => format!(
                    "{name} is in a loop of parent spans: its parent, {}, has it among its own parents; check the parent IDs",
                    label(spans[p].index, Some(&spans[p].out_span_id))
                ),
                None => unreachable!("a span on a loop has a parent"),
            },
        ));
    }
    for (s, &on_loop) in spans.iter_mut().zip(&loops.on_loop) {
        if on_loop {
            s.role = Role::NotAttempt(Skip::Bad);
        }
    }

    // A span whose direct child is an attempt at the same hop and service is a call span
    // over per-try spans: the tries are the attempts.
    let wrappers: Vec<usize> = spans
        .iter()
        .zip(&up)
        .filter_map(|(s, &p)| {
            let Role::Attempt(hop) = s.role else {
                return None;
            };
            let parent = &spans[p?];
            (parent.role == Role::Attempt(hop)
                && parent.service == s.service
                && parent.links.is_empty())
            .then_some(p?)
        })
        .collect();
    for w in wrappers {
        spans[w].role = Role::NotAttempt(Skip::Wrapper);
    }
    mark_push_deliveries(&mut spans, &up);
    hidden::mark_hidden_sends(&mut spans, &find);
    let chains = chains(&spans, &up, &loops.reaches);

    // The trace IDs as written, for operations named by the trace where the causes end.
    let trace_names: HashMap<u128, &str> = spans
        .iter()
        .flat_map(|s| {
            std::iter::once((s.key.trace, s.trace_id.as_str()))
                .chain(s.links.iter().map(|(k, t, _)| (k.trace, t.as_str())))
        })
        .collect();

    let mut out = Resolved {
        lines: Vec::new(),
        problems,
        stats: SpanStats {
            spans: spans.len() as u64,
            ..SpanStats::default()
        },
    };
    for s in &spans {
        let hop = match s.role {
            Role::Attempt(h) => h,
            Role::NotAttempt(skip) => {
                *out.stats
                    .skipped
                    .entry((s.service.clone(), s.kind.name(), skip))
                    .or_default() += 1;
                continue;
            }
        };
        // One attempt per link of a consumer span (a batch delivers each message once),
        // else one.
        let starts: Vec<(Option<Cause>, Option<&String>)> = if s.links.is_empty() {
            vec![(s.cause, None)]
        } else {
            s.links
                .iter()
                .map(|(k, _, m)| {
                    (
                        Some(Cause {
                            key: *k,
                            exact: false,
                        }),
                        m.as_ref(),
                    )
                })
                .collect()
        };
        for (cause, link_message) in starts {
            let above = cause.and_then(find);
            let chain = match above.map(|j| (j, loops.reaches[j])) {
                Some((_, Some(x))) => Err(format!(
                    "has parent spans that lead into a loop of parent spans (at {}): check the parent IDs",
                    label(spans[x].index, Some(&spans[x].out_span_id))
                )),
                Some((j, None)) => Ok(chains[j].as_ref()),
                None => Ok(None),
            };
            match chain.and_then(|chain| walk(s, hop, cause, chain, &spans, mapping, &trace_names))
            {
                Ok(found) => {
                    out.stats.attempts += 1;
                    out.lines
                        .push((s.source, checked_line(s, hop, found, link_message)));
                }
                Err(why) => out.problems.push((
                    s.source,
                    format!("{} {why}", label(s.index, Some(&s.out_span_id))),
                )),
            }
        }
    }
    out
}

/// What the walk up from an attempt span found.
struct Found {
    operation_id: String,
    test_run_id: Option<String>,
    parent_id: Option<String>,
}

/// Which spans' causes loop, from each span's cause (`up`, by index).
struct Loops {
    /// The span is on a loop of causes (its own parent, or a longer circle).
    on_loop: Vec<bool>,
    /// For a span whose causes lead into a loop (or that is on one), a span of that loop.
    reaches: Vec<Option<usize>>,
}

/// Finds the loops among the causes in one pass: every span has at most one cause, so
/// following causes from each span not yet seen either ends, meets a span already
/// settled, or comes back to a span on the current path, which closes a loop.
fn find_loops(up: &[Option<usize>]) -> Loops {
    const NEW: u8 = 0;
    const ON_PATH: u8 = 1;
    const SETTLED: u8 = 2;
    let mut state = vec![NEW; up.len()];
    let mut loops = Loops {
        on_loop: vec![false; up.len()],
        reaches: vec![None; up.len()],
    };
    let mut path = Vec::new();
    for first in 0..up.len() {
        if state[first] != NEW {
            continue;
        }
        path.clear();
        let mut at = first;
        let reached = loop {
            match state[at] {
                SETTLED => break loops.reaches[at],
                ON_PATH => {
                    let from = path.iter().position(|&p| p == at).unwrap_or(0);
                    for &p in &path[from..] {
                        loops.on_loop[p] = true;
                    }
                    break Some(at);
                }
                _ => {}
            }
            state[at] = ON_PATH;
            path.push(at);
            match up[at] {
                Some(next) => at = next,
                None => break None,
            }
        };
        for &p in &path {
            state[p] = SETTLED;
            loops.reaches[p] = reached;
        }
    }
    loops
}

/// What the chain of causes from a span upward holds, the span itself included.
#[derive(Debug, Clone)]
struct Chain {
    /// The first span of the chain with the operation (run) attribute.
    operation: Option<usize>,
    run: Option<usize>,
    /// The trace where the causes end: the operation when no attribute names it.
    end_trace: u128,
    /// The attempts of the chain whose hop is upstream of every attempt before them in the
    /// chain: the first of them upstream of hop `h` is the parent of an attempt at `h`. At
    /// most one per hop.
    attempts: Vec<(u16, usize)>,
}

/// The [`Chain`] of every span whose causes do not loop, each computed once from its
/// cause's: linear in the spans, however deep the chains.
fn chains(
    spans: &[MappedSpan],
    up: &[Option<usize>],
    loops: &[Option<usize>],
) -> Vec<Option<Chain>> {
    let mut chains: Vec<Option<Chain>> = vec![None; spans.len()];
    let mut path = Vec::new();
    for first in 0..spans.len() {
        if loops[first].is_some() || chains[first].is_some() {
            continue;
        }
        path.clear();
        let mut at = first;
        loop {
            path.push(at);
            match up[at] {
                Some(next) if chains[next].is_none() => at = next,
                _ => break,
            }
        }
        for &i in path.iter().rev() {
            let above = up[i].and_then(|p| chains[p].as_ref());
            let s = &spans[i];
            let chain = Chain {
                operation: if s.operation_attr.is_some() {
                    Some(i)
                } else {
                    above.and_then(|a| a.operation)
                },
                run: if s.run_attr.is_some() {
                    Some(i)
                } else {
                    above.and_then(|a| a.run)
                },
                end_trace: match (s.cause, above) {
                    (None, _) => s.key.trace,
                    (Some(c), None) => c.key.trace,
                    (Some(_), Some(a)) => a.end_trace,
                },
                attempts: match s.role {
                    Role::Attempt(h) => std::iter::once((h, i))
                        .chain(
                            above
                                .iter()
                                .flat_map(|a| a.attempts.iter().copied())
                                .filter(|&(upper, _)| upper < h),
                        )
                        .collect(),
                    Role::NotAttempt(_) => above.map(|a| a.attempts.clone()).unwrap_or_default(),
                },
            };
            chains[i] = Some(chain);
        }
    }
    chains
}

/// What an attempt span finds above it, from its cause `start` and the [`Chain`] there
/// (`None` when the cause is not among the spans read): the first attempt at an upstream
/// hop is its parent; the first span with the operation (run) attribute, itself included,
/// gives the operation (run); without an operation attribute, the operation is the trace
/// where the causes end.
fn walk(
    s: &MappedSpan,
    hop: u16,
    start: Option<Cause>,
    chain: Option<&Chain>,
    spans: &[MappedSpan],
    mapping: &SpanMapping,
    trace_names: &HashMap<u128, &str>,
) -> Result<Found, String> {
    let inherited = |pick: fn(&Chain) -> Option<usize>,
                     attr: fn(&MappedSpan) -> &Option<String>| {
        chain.and_then(pick).and_then(|i| attr(&spans[i]).clone())
    };
    let operation = s
        .operation_attr
        .clone()
        .or_else(|| inherited(|c| c.operation, |m| &m.operation_attr));
    let run = s
        .run_attr
        .clone()
        .or_else(|| inherited(|c| c.run, |m| &m.run_attr));
    let parent_id = chain
        .and_then(|c| c.attempts.iter().find(|&&(h, _)| h < hop))
        .map(|&(_, i)| spans[i].out_span_id.clone());
    let last_trace = match (start, chain) {
        (None, _) => s.key.trace,
        (Some(c), None) => c.key.trace,
        (Some(_), Some(chain)) => chain.end_trace,
    };
    let operation_id = match (&mapping.operation_attribute, operation) {
        (_, Some(op)) if !op.trim().is_empty() => op,
        (Some(attr), _) => {
            return Err(format!(
                "has no {attr} attribute, and neither has any span above it: add it, or leave out --operation-attribute to use the trace ID"
            ))
        }
        (None, _) => trace_names
            .get(&last_trace)
            .map_or_else(|| format!("{last_trace:032x}"), |t| t.to_string()),
    };
    Ok(Found {
        operation_id,
        test_run_id: run.filter(|r| !r.trim().is_empty()),
        parent_id,
    })
}

fn checked_line(
    s: &MappedSpan,
    hop: u16,
    found: Found,
    link_message: Option<&String>,
) -> CheckedLine<'static> {
    let f = &s.fields;
    CheckedLine {
        operation_id: found.operation_id.into(),
        test_run_id: found.test_run_id.map(Into::into),
        hop,
        attempt: f.attempt,
        timing: Timing::Record {
            start_ms: Some(s.start_ms),
            finish_ms: s.finish_ms,
        },
        outcome: f.outcome,
        target: f.target.clone().map(Into::into),
        message_id: link_message
            .or(f.message_id.as_ref())
            .cloned()
            .map(Into::into),
        delivery: f.delivery,
        span_id: Some(s.out_span_id.clone().into()),
        parent_id: found.parent_id.map(Into::into),
        delay_ms: None,
        retry_after_ms: f.retry_after_ms,
        effect: false,
        hidden: s.hidden,
        untimed: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::spans::mapping::HopRule;
    use crate::ingest::spans::test_support::*;
    use crate::ingest::spans::Link;
    use std::sync::Arc;

    fn mapped(sp: Span, m: &SpanMapping) -> MappedSpan {
        let (mapped, problem) = map_span(
            sp,
            1,
            SourceRef { file: 0, line: 1 },
            m,
            &HopOrder::default(),
        );
        assert_eq!(problem, None);
        mapped
    }

    fn child(
        id: &str,
        parent: Option<&str>,
        kind: SpanKind,
        service: &str,
        attrs: &[(&str, AttrValue)],
    ) -> Span {
        let mut sp = span(kind, service, attrs);
        sp.span_id = id.into();
        sp.parent_span_id = parent.map(String::from);
        sp
    }

    #[test]
    fn parents_skip_spans_that_are_not_attempts_and_call_spans_over_tries_are_wrappers() {
        let mut m = mapping();
        m.hop_rules.push(HopRule {
            service: "inventory".into(),
            kind: None,
            hop: Some(3),
        });
        m.hop_rules.push(HopRule {
            service: "checkout".into(),
            kind: None,
            hop: Some(0),
        });
        let spans = vec![
            // checkout: a call span over one try (both client spans).
            child("0000000000000001", None, SpanKind::Client, "checkout", &[]),
            child(
                "0000000000000002",
                Some("0000000000000001"),
                SpanKind::Client,
                "checkout",
                &[],
            ),
            // inventory's server span hangs below the try.
            child(
                "0000000000000003",
                Some("0000000000000002"),
                SpanKind::Server,
                "inventory",
                &[],
            ),
        ];
        let resolved = resolve(spans.into_iter().map(|s| mapped(s, &m)).collect(), &m);
        assert!(resolved.problems.is_empty());
        let lines: Vec<_> = resolved.lines.iter().map(|(_, l)| l).collect();
        assert_eq!(lines.len(), 2, "the call span is not an attempt");
        assert_eq!(lines[0].span_id.as_deref(), Some("0000000000000002"));
        assert_eq!(lines[1].parent_id.as_deref(), Some("0000000000000002"));
        assert_eq!(
            resolved
                .stats
                .skipped
                .get(&("checkout".into(), "client", Skip::Wrapper)),
            Some(&1)
        );
    }

    #[test]
    fn a_receive_span_with_its_work_below_it_is_a_push_delivery_a_poll_is_not() {
        let m = mapping();
        let receive = || [("messaging.operation", AttrValue::Str("receive".into()))];
        let spans = vec![
            // pika: the delivery callback's receive span, its handling below it.
            child(
                "00000000000000a1",
                None,
                SpanKind::Consumer,
                "consumer",
                &receive(),
            ),
            child(
                "00000000000000a2",
                Some("00000000000000a1"),
                SpanKind::Internal,
                "consumer",
                &[],
            ),
            // A poll: the process span below it is the delivery.
            child(
                "00000000000000b1",
                None,
                SpanKind::Consumer,
                "consumer",
                &receive(),
            ),
            child(
                "00000000000000b2",
                Some("00000000000000b1"),
                SpanKind::Consumer,
                "consumer",
                &[("messaging.operation", AttrValue::Str("process".into()))],
            ),
            // A poll with nothing below it.
            child(
                "00000000000000c1",
                None,
                SpanKind::Consumer,
                "consumer",
                &receive(),
            ),
        ];
        let resolved = resolve(spans.into_iter().map(|s| mapped(s, &m)).collect(), &m);
        assert!(resolved.problems.is_empty(), "{:?}", resolved.problems);
        let attempts: Vec<_> = resolved
            .lines
            .iter()
            .map(|(_, l)| l.span_id.as_deref().unwrap_or(""))
            .collect();
        assert_eq!(attempts, vec!["00000000000000a1", "00000000000000b2"]);
        assert_eq!(
            resolved
                .stats
                .skipped
                .get(&("consumer".into(), "consumer", Skip::Receive)),
            Some(&2)
        );
    }

    #[test]
    fn operation_and_run_attributes_are_inherited_from_the_spans_above() {
        let mut m = mapping();
        m.operation_attribute = Some("idempotency".into());
        m.hop_rules.push(HopRule {
            service: "inventory".into(),
            kind: None,
            hop: Some(3),
        });
        let mut root = child(
            "0000000000000001",
            None,
            SpanKind::Client,
            "api-gateway",
            &[("idempotency", s("order-7"))],
        );
        root.resource = Arc::new(vec![("cicd.pipeline.run.id".into(), s("run-3"))]);
        let below = child(
            "0000000000000002",
            Some("0000000000000001"),
            SpanKind::Server,
            "inventory",
            &[],
        );
        let orphan = child("0000000000000009", None, SpanKind::Server, "inventory", &[]);
        let resolved = resolve(
            vec![mapped(root, &m), mapped(below, &m), mapped(orphan, &m)],
            &m,
        );
        let ops: Vec<(&str, Option<&str>)> = resolved
            .lines
            .iter()
            .map(|(_, l)| (l.operation_id.as_ref(), l.test_run_id.as_deref()))
            .collect();
        assert_eq!(
            ops,
            vec![("order-7", Some("run-3")), ("order-7", Some("run-3"))]
        );
        assert_eq!(resolved.problems.len(), 1);
        assert!(resolved.problems[0]
            .1
            .contains("has no idempotency attribute"));
    }

    #[test]
    fn a_consumer_span_belongs_to_the_trace_of_the_producer_it_links_to() {
        let m = mapping();
        let mut delivery = child(
            "0000000000000005",
            None,
            SpanKind::Consumer,
            "billing-consumer",
            &[],
        );
        delivery.trace_id = "11111111111111111111111111111111".into();
        delivery.links.push(Link {
            trace_id: "0af7651916cd43dd8448eb211c80319c".into(),
            span_id: "0000000000000001".into(),
            attributes: vec![("messaging.message.id".into(), s("m-9"))],
        });
        let producer = child("0000000000000001", None, SpanKind::Producer, "caller", &[]);
        let resolved = resolve(vec![mapped(producer, &m), mapped(delivery, &m)], &m);
        let consumer = &resolved.lines[1].1;
        assert_eq!(consumer.operation_id, "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(consumer.parent_id.as_deref(), Some("0000000000000001"));
        assert_eq!(consumer.message_id.as_deref(), Some("m-9"));
    }

    #[test]
    fn parent_links_that_loop_are_reported_not_followed_forever() {
        let m = mapping();
        let a = child(
            "0000000000000001",
            Some("0000000000000002"),
            SpanKind::Client,
            "caller",
            &[],
        );
        let b = child(
            "0000000000000002",
            Some("0000000000000001"),
            SpanKind::Internal,
            "caller",
            &[],
        );
        let resolved = resolve(vec![mapped(a, &m), mapped(b, &m)], &m);
        assert!(resolved.lines.is_empty());
        assert!(
            resolved.problems[0].1.contains("loop"),
            "{:?}",
            resolved.problems
        );
    }

    #[test]
    fn a_span_without_a_start_time_is_a_bad_span() {
        let mut sp = span(SpanKind::Client, "caller", &[]);
        sp.start_ms = None;
        let (m, problem) = map_span(
            sp,
            3,
            SourceRef { file: 0, line: 1 },
            &mapping(),
            &HopOrder::default(),
        );
        assert_eq!(m.role, Role::NotAttempt(Skip::Bad));
        assert_eq!(
            problem.as_deref(),
            Some("span 3 (id 00f067aa0ba902b7) has no start time")
        );
    }

    /// A caller client span with two gateway server spans below it (a layer inside the
    /// client resent), each with a gateway client span below; and a second caller span
    /// with one server span below it (no resend).
    fn resent_spans() -> Vec<Span> {
        let url = ("url.full", s("http://gateway/items/42"));
        let route = ("http.route", s("/items/<id>"));
        vec![
            child(
                "0000000000000001",
                None,
                SpanKind::Client,
                "caller",
                std::slice::from_ref(&url),
            ),
            child(
                "0000000000000002",
                Some("0000000000000001"),
                SpanKind::Server,
                "gateway",
                &[
                    route.clone(),
                    ("http.response.status_code", AttrValue::Int(503)),
                ],
            ),
            child(
                "0000000000000003",
                Some("0000000000000001"),
                SpanKind::Server,
                "gateway",
                std::slice::from_ref(&route),
            ),
            child(
                "0000000000000004",
                Some("0000000000000002"),
                SpanKind::Client,
                "gateway",
                &[],
            ),
            child(
                "0000000000000005",
                Some("0000000000000003"),
                SpanKind::Client,
                "gateway",
                &[],
            ),
            child("0000000000000006", None, SpanKind::Client, "caller", &[url]),
            child(
                "0000000000000007",
                Some("0000000000000006"),
                SpanKind::Server,
                "gateway",
                &[route],
            ),
        ]
    }

    #[test]
    fn server_spans_resent_inside_one_client_span_are_the_clients_hidden_sends() {
        let m = mapping();
        let resolved = resolve(
            resent_spans().into_iter().map(|s| mapped(s, &m)).collect(),
            &m,
        );
        assert!(resolved.problems.is_empty());
        // (span, hop, hidden, parent, target) of each attempt.
        #[allow(clippy::type_complexity)]
        let got: Vec<(&str, u16, bool, Option<&str>, Option<&str>)> = resolved
            .lines
            .iter()
            .map(|(_, l)| {
                (
                    l.span_id.as_deref().unwrap(),
                    l.hop,
                    l.hidden,
                    l.parent_id.as_deref(),
                    l.target.as_deref(),
                )
            })
            .collect();
        let target = Some("gateway/items/42");
        assert_eq!(
            got,
            vec![
                // The two sends are the caller's, addressing what its client span did.
                ("0000000000000002", 0, true, None, target),
                ("0000000000000003", 0, true, None, target),
                // The gateway's calls hang below the send that carried them.
                (
                    "0000000000000004",
                    1,
                    false,
                    Some("0000000000000002"),
                    Some("op")
                ),
                (
                    "0000000000000005",
                    1,
                    false,
                    Some("0000000000000003"),
                    Some("op")
                ),
                // One server span under a client span is no resend.
                ("0000000000000006", 0, false, None, target),
            ]
        );
        assert_eq!(
            resolved.lines[0].1.outcome,
            Some(crate::model::Outcome::Http(503))
        );
        assert_eq!(
            resolved
                .stats
                .skipped
                .get(&("caller".into(), "client", Skip::HiddenSends)),
            Some(&1)
        );
    }

    #[test]
    fn server_spans_mapped_to_a_hop_are_never_hidden_sends() {
        let hops = HopOrder::new(vec![
            "caller".into(),
            "sdk".into(),
            "gateway".into(),
            "dependency".into(),
        ])
        .unwrap();
        let mut m = SpanMapping::new(&hops, vec![false; 4]);
        m.add_hop_rules("--hop", &["gateway:server=sdk".into()], &hops)
            .unwrap();
        let spans: Vec<MappedSpan> = resent_spans()
            .into_iter()
            .map(|sp| {
                let (mapped, problem) = map_span(sp, 1, SourceRef { file: 0, line: 1 }, &m, &hops);
                assert_eq!(problem, None);
                mapped
            })
            .collect();
        let resolved = resolve(spans, &m);
        let got: Vec<(&str, u16, bool)> = resolved
            .lines
            .iter()
            .map(|(_, l)| (l.span_id.as_deref().unwrap(), l.hop, l.hidden))
            .collect();
        assert_eq!(
            got,
            vec![
                ("0000000000000001", 0, false),
                ("0000000000000002", 1, false),
                ("0000000000000003", 1, false),
                ("0000000000000004", 2, false),
                ("0000000000000005", 2, false),
                ("0000000000000006", 0, false),
                ("0000000000000007", 1, false),
            ]
        );
    }
}

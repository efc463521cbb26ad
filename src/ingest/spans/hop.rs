//! Which spans are attempts, and at which hop (docs/formats.md, "Hops"): by the user's
//! `--hop-map` rules, by a service named like a hop, and by the side of the call each hop
//! records.

use super::attributes::MESSAGING_OPERATION_KEYS;
use super::mapping::{SpanKind, SpanMapping};
use super::Span;
use crate::rules::HopOrder;

/// Why a span that was read is not an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Skip {
    /// Work inside one attempt (kind internal or unspecified).
    Internal,
    /// Not the side of the call that its hop records (a gateway's server span, a
    /// dependency's client span).
    OtherSide,
    /// A messaging `receive` span: a poll; the `process` spans are the deliveries.
    Receive,
    /// Mapped to `-` by `--hop-map` or `[hop_map]`.
    MappedOut,
    /// Its direct children at the same hop and service are the attempts (a call span
    /// over per-try spans).
    Wrapper,
    /// A client span whose sends are the server spans below it: a layer inside the
    /// client resent without spans of its own (hidden resends).
    HiddenSends,
    /// Reported as a bad line (no hop, no start time, …); still followed as an ancestor.
    Bad,
}

impl Skip {
    pub fn describe(self) -> &'static str {
        match self {
            Skip::Internal => "internal",
            Skip::OtherSide => "other side of the call",
            Skip::Receive => "messaging receive (poll)",
            Skip::MappedOut => "mapped to '-'",
            Skip::Wrapper => "wraps per-try spans",
            Skip::HiddenSends => "its sends are the server spans below it: hidden resends",
            Skip::Bad => "bad (reported)",
        }
    }
}

/// What a span is to the analysis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Attempt(u16),
    NotAttempt(Skip),
}

/// The kind to judge a span by. gRPC's own OpenTelemetry tracing (gRFC A72) writes its
/// attempt spans (`Attempt.<method>`, with `previous-rpc-attempts`) and server spans
/// (`Recv.<method>`) without a kind; they are read as client and server spans.
pub fn effective_kind(span: &Span) -> SpanKind {
    if span.kind != SpanKind::Internal {
        return span.kind;
    }
    if span.attr("previous-rpc-attempts").is_some() {
        SpanKind::Client
    } else if span.name.starts_with("Recv.") {
        SpanKind::Server
    } else {
        SpanKind::Internal
    }
}

/// The hop a service's name implies: the hop named exactly so, or a hop name that is a
/// whole word of the service name (`api-gateway` → `gateway`, `orders-consumer` →
/// `consumer`). Two hop names in one service name are ambiguous.
pub fn hop_by_name(service: &str, hops: &HopOrder) -> Result<u16, Vec<String>> {
    if let Some(h) = hops.index_of(service) {
        return Ok(h);
    }
    let lower = service.to_ascii_lowercase();
    let found: Vec<u16> = (0..hops.len() as u16)
        .filter(|&h| contains_word(&lower, &hops.name(h).to_ascii_lowercase()))
        .collect();
    match found.as_slice() {
        [one] => Ok(*one),
        many => Err(many.iter().map(|&h| hops.name(h).to_string()).collect()),
    }
}

fn contains_word(text: &str, word: &str) -> bool {
    let is_word_char = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    text.match_indices(word).any(|(at, _)| {
        !is_word_char(text[..at].chars().next_back())
            && !is_word_char(text[at + word.len()..].chars().next())
    })
}

/// Decides the role of a span from its service and kind. `Err` is the message of a span
/// that has no hop (reported as a bad line). The resolver reads [`side`], which keeps a
/// `receive` span's hop; this is its answer before the spans below are known.
#[cfg(test)]
pub fn role(
    span: &Span,
    kind: SpanKind,
    mapping: &SpanMapping,
    hops: &HopOrder,
) -> Result<Role, String> {
    Ok(match side(span, kind, mapping, hops)? {
        Side::Role(r) => r,
        Side::Receive(_) => Role::NotAttempt(Skip::Receive),
    })
}

/// A span's role, or: a messaging `receive` span that would be an attempt at this hop.
/// Such a span is a poll, unless the spans below it show a push consumer's delivery (the
/// resolver decides).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Role(Role),
    Receive(u16),
}

/// The role of a span, as `role` gives it, but with a `receive` span's hop kept.
pub fn side(
    span: &Span,
    kind: SpanKind,
    mapping: &SpanMapping,
    hops: &HopOrder,
) -> Result<Side, String> {
    let service = span.service.as_deref().unwrap_or("");
    let rule = |k: Option<SpanKind>| {
        mapping
            .hop_rules
            .iter()
            .rev()
            .find(|r| r.service == service && r.kind == k)
    };
    if let Some(r) = rule(Some(kind)) {
        return Ok(Side::Role(
            r.hop
                .map_or(Role::NotAttempt(Skip::MappedOut), Role::Attempt),
        ));
    }
    if kind == SpanKind::Internal {
        return Ok(Side::Role(Role::NotAttempt(Skip::Internal)));
    }
    let hop = match rule(None) {
        Some(r) => match r.hop {
            Some(h) => h,
            None => return Ok(Side::Role(Role::NotAttempt(Skip::MappedOut))),
        },
        None if service.is_empty() => {
            return Err(format!(
                "has no service name (service.name), so no hop: set service.name, or map the span with --hop-map SERVICE=HOP (hops: {})",
                hops.names().join(", ")
            ))
        }
        None => match hop_by_name(service, hops) {
            Ok(h) => h,
            Err(candidates) => {
                let why = if candidates.is_empty() {
                    "maps to no hop".to_string()
                } else {
                    format!("could be hop {}", candidates.join(" or "))
                };
                return Err(format!(
                    "service \"{service}\" ({} span) {why}: map it with --hop-map {service}=HOP (hops: {}), or --hop-map {service}=- if its spans are not attempts",
                    kind.name(),
                    hops.names().join(", ")
                ));
            }
        },
    };
    let recorded = if mapping.queue_hops[hop as usize] {
        kind == SpanKind::Consumer
    } else if hop == mapping.serving_hop {
        matches!(kind, SpanKind::Server | SpanKind::Consumer)
    } else {
        matches!(kind, SpanKind::Client | SpanKind::Producer)
    };
    if !recorded {
        return Ok(Side::Role(Role::NotAttempt(Skip::OtherSide)));
    }
    let operation = span
        .first_text(&MESSAGING_OPERATION_KEYS)
        .map(|o| o.to_ascii_lowercase());
    if kind == SpanKind::Consumer && operation.as_deref() == Some("receive") {
        return Ok(Side::Receive(hop));
    }
    Ok(Side::Role(Role::Attempt(hop)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::spans::test_support::*;
    use crate::ingest::spans::AttrValue;

    #[test]
    fn services_named_like_a_hop_map_to_it() {
        let hops = HopOrder::default();
        let cases = [
            ("gateway", Ok(1)),
            ("api-gateway", Ok(1)),
            ("orders_consumer", Ok(2)),
            ("Billing.Consumer", Ok(2)),
            ("gatewayish", Err(vec![])),
            ("inventory", Err(vec![])),
            (
                "gateway-consumer",
                Err(vec!["gateway".into(), "consumer".into()]),
            ),
        ];
        for (service, expected) in cases {
            assert_eq!(hop_by_name(service, &hops), expected, "{service}");
        }
    }

    #[test]
    fn each_hop_records_its_side_of_the_call() {
        let hops = HopOrder::default();
        let mut m = mapping();
        m.add_hop_rules(
            "--hop-map",
            &[
                "checkout=caller".into(),
                "inventory=dependency".into(),
                "edge:server=gateway".into(),
                "cache=-".into(),
            ],
            &hops,
        )
        .unwrap();
        let cases = [
            ("checkout", SpanKind::Client, Ok(Role::Attempt(0))),
            ("checkout", SpanKind::Producer, Ok(Role::Attempt(0))),
            (
                "checkout",
                SpanKind::Server,
                Ok(Role::NotAttempt(Skip::OtherSide)),
            ),
            (
                "checkout",
                SpanKind::Internal,
                Ok(Role::NotAttempt(Skip::Internal)),
            ),
            ("api-gateway", SpanKind::Client, Ok(Role::Attempt(1))),
            (
                "api-gateway",
                SpanKind::Server,
                Ok(Role::NotAttempt(Skip::OtherSide)),
            ),
            ("billing-consumer", SpanKind::Consumer, Ok(Role::Attempt(2))),
            (
                "billing-consumer",
                SpanKind::Client,
                Ok(Role::NotAttempt(Skip::OtherSide)),
            ),
            ("inventory", SpanKind::Server, Ok(Role::Attempt(3))),
            (
                "inventory",
                SpanKind::Client,
                Ok(Role::NotAttempt(Skip::OtherSide)),
            ),
            ("edge", SpanKind::Server, Ok(Role::Attempt(1))),
            (
                "cache",
                SpanKind::Server,
                Ok(Role::NotAttempt(Skip::MappedOut)),
            ),
        ];
        for (service, kind, expected) in cases {
            let sp = span(kind, service, &[]);
            assert_eq!(role(&sp, kind, &m, &hops), expected, "{service} {kind:?}");
        }
        let err = role(
            &span(SpanKind::Client, "cart", &[]),
            SpanKind::Client,
            &m,
            &hops,
        )
        .unwrap_err();
        assert!(err.contains("--hop-map cart=HOP"), "{err}");
        let receive = span(
            SpanKind::Consumer,
            "billing-consumer",
            &[("messaging.operation.type", s("receive"))],
        );
        assert_eq!(
            role(&receive, SpanKind::Consumer, &m, &hops),
            Ok(Role::NotAttempt(Skip::Receive))
        );
    }

    #[test]
    fn grpc_attempt_and_server_spans_without_a_kind_are_read_as_client_and_server() {
        let attempt = span(
            SpanKind::Internal,
            "svc",
            &[("previous-rpc-attempts", AttrValue::Int(0))],
        );
        assert_eq!(effective_kind(&attempt), SpanKind::Client);
        let mut recv = span(SpanKind::Internal, "svc", &[]);
        recv.name = "Recv.inventory.Stock/Get".into();
        assert_eq!(effective_kind(&recv), SpanKind::Server);
    }
}

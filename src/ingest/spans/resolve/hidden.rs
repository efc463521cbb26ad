//! Resends hidden inside one client span (docs/formats.md, "Hidden resends"). An HTTP
//! client instrumentation writes one client span per call of the application; a retrying
//! layer below it (urllib3's `Retry` inside one `requests` call, an SDK's transport retry)
//! resends without a span or a resend count of its own. The sends show only on the
//! receiving side: several server spans of the next service under that one client span.
//!
//! Those sends are the client side's attempts, made by a layer inside it: each server
//! span becomes an attempt at the client's hop, marked `hidden` and numbered 1, 2, … in
//! its client span, and the client span that wraps them is not one. Read the other way, as the next service's client spans under one
//! caller attempt, the sends would look like retries of the next hop, which never retried.

use std::collections::BTreeMap;

use super::{Cause, MappedSpan, Role, Skip, SpanKind};

/// Turns the server spans that are a client span's hidden sends into attempts at the
/// client's hop, and the client span into a wrapper. A span that is already an attempt
/// (a server span the user mapped to a hop, or the serving hop's own) is left as it is:
/// an explicit map says where the layer is.
pub(super) fn mark_hidden_sends(spans: &mut [MappedSpan], find: &dyn Fn(Cause) -> Option<usize>) {
    // Client span → the server spans of another service directly below it that no hop
    // records.
    let mut sends: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (i, s) in spans.iter().enumerate() {
        if s.kind != SpanKind::Server || s.role != Role::NotAttempt(Skip::OtherSide) {
            continue;
        }
        let Some(p) = s.cause.and_then(find) else {
            continue;
        };
        let client = &spans[p];
        if client.kind == SpanKind::Client
            && matches!(client.role, Role::Attempt(_))
            && client.service != s.service
        {
            sends.entry(p).or_default().push(i);
        }
    }
    for (client, mut below) in sends {
        if below.len() < 2 {
            continue;
        }
        below.sort_by(|&a, &b| {
            spans[a]
                .start_ms
                .total_cmp(&spans[b].start_ms)
                .then(a.cmp(&b))
        });
        let Role::Attempt(hop) = spans[client].role else {
            continue;
        };
        // The sends address what the client span addressed: one line of the client's.
        let target = spans[client].fields.target.clone();
        spans[client].role = Role::NotAttempt(Skip::HiddenSends);
        for (n, i) in below.into_iter().enumerate() {
            let send = &mut spans[i];
            send.role = Role::Attempt(hop);
            send.hidden = true;
            send.fields.target.clone_from(&target);
            // Numbered as the layer that made them would: 1, 2, … under each client span,
            // so that the sends of the next client span start again from 1 and show the
            // application's attempts around them (two layers: docs/rules.md).
            send.fields.attempt = Some(n as u32 + 1);
        }
    }
}

//! Spans → attempts. The OTLP and Zipkin readers fill the format-neutral [`Span`]; this
//! module maps each span onto the attempt fields of SPEC §2 (the attribute tables of
//! docs/formats.md), decides which spans are attempts and at which hop, and, once every
//! input has been read, resolves what one span cannot know alone: the operation, the test
//! run and the parent attempt, found by walking up through parent spans and consumer links.
//!
//! The result is the same [`CheckedLine`]s that JSON Lines and logfmt produce, so every rule
//! downstream is unchanged. A span that cannot be mapped is reported as a bad line
//! (`path:line: span 3 (id …): why`), never dropped silently; a span that is not an attempt
//! by the documented rules (an internal span, a gateway's server span) is counted.

mod hidden;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::fields::{CheckedLine, CheckedTiming};
use crate::config::{HopOrder, SpanKind, SpanMapping};
use crate::model::{Millis, Outcome, SourceRef};

/// Longest chain of parents and links followed from one span. Real call trees are a few
/// dozen spans deep; a longer chain means the links loop.
const MAX_CHAIN: usize = 1024;

/// An attribute value as OTLP carries it. Zipkin tags are all strings.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    Str(String),
    Int(i64),
    Double(f64),
    Bool(bool),
    Array(Vec<AttrValue>),
    /// A key-value list or bytes: never a value the mapping reads.
    Other,
}

impl AttrValue {
    /// The value as text. An array is its first element: captured headers are arrays
    /// (`http.request.header.idempotency-key` = `["order-7"]`), one element per time the
    /// header was sent, and the first is the one the request carried first.
    pub fn text(&self) -> Option<String> {
        match self {
            AttrValue::Str(s) => Some(s.clone()),
            AttrValue::Int(i) => Some(i.to_string()),
            AttrValue::Double(d) => Some(d.to_string()),
            AttrValue::Bool(b) => Some(b.to_string()),
            AttrValue::Array(items) => items.first().and_then(AttrValue::text),
            AttrValue::Other => None,
        }
    }

    /// The value as a whole number: an integer, a whole double, or a string of one.
    pub fn int(&self) -> Option<i64> {
        match self {
            AttrValue::Int(i) => Some(*i),
            AttrValue::Double(d) if d.fract() == 0.0 && d.is_finite() => Some(*d as i64),
            AttrValue::Str(s) => s.trim().parse().ok(),
            AttrValue::Array(items) if items.len() == 1 => items[0].int(),
            _ => None,
        }
    }
}

/// Key-value pairs in the order the producer wrote them.
pub type AttrList = Vec<(String, AttrValue)>;

/// The status a span ended with (OTLP `status.code`; Zipkin `otel.status_code`/`error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SpanStatus {
    #[default]
    Unset,
    Ok,
    Error,
}

/// A link from a span to another span (OTLP `links`): for a consumer span, the producer
/// span that created the message.
#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    pub trace_id: String,
    pub span_id: String,
    pub attributes: AttrList,
}

/// One span as read, in either format. IDs are lower-case hex.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: Option<String>,
    /// Zipkin's `shared`: a server span that reuses its client's span ID.
    pub shared: bool,
    pub name: String,
    pub kind: SpanKind,
    pub service: Option<String>,
    pub start_ms: Option<Millis>,
    pub finish_ms: Option<Millis>,
    pub attributes: AttrList,
    /// The attributes of the span's resource (shared by its spans); span attributes win.
    pub resource: Arc<AttrList>,
    pub links: Vec<Link>,
    pub status: SpanStatus,
    /// The `exception.type` of each `exception` span event, in order: the only record of
    /// a timeout that an instrumentation reports as a raised exception (Python's requests
    /// instrumentation sets no status code and, by default, no `error.type`).
    pub exceptions: Vec<String>,
}

/// The prefixes of captured HTTP header attributes.
const HEADER_PREFIXES: [&str; 2] = ["http.request.header.", "http.response.header."];

/// Whether the attribute key `written` is the key `wanted`. Captured header names are
/// compared as HTTP compares them, ignoring case, and with `-` and `_` alike: Python's
/// instrumentation writes `http.request.header.x_operation_id` for the header
/// `X-Operation-Id` (WSGI hands headers over with underscores), Java's and Go's
/// `http.request.header.x-operation-id`.
fn same_key(written: &str, wanted: &str, header: bool) -> bool {
    if !header {
        return written == wanted;
    }
    let fold = |b: u8| {
        if b == b'_' {
            b'-'
        } else {
            b.to_ascii_lowercase()
        }
    };
    written.len() == wanted.len()
        && written
            .bytes()
            .zip(wanted.bytes())
            .all(|(a, b)| fold(a) == fold(b))
}

impl Span {
    /// A span attribute, else a resource attribute.
    pub fn attr(&self, key: &str) -> Option<&AttrValue> {
        let header = HEADER_PREFIXES.iter().any(|p| key.starts_with(p));
        self.attributes
            .iter()
            .chain(self.resource.iter())
            .find(|(k, _)| same_key(k, key, header))
            .map(|(_, v)| v)
    }

    fn first_text(&self, keys: &[&str]) -> Option<String> {
        keys.iter()
            .find_map(|k| self.attr(k).and_then(AttrValue::text))
    }
}

/// Why a span could not be read, with the span's ID as written (for the message).
#[derive(Debug, Clone, PartialEq)]
pub struct SpanError {
    pub id: Option<String>,
    pub message: String,
}

/// What the readers return for one line: the line's spans, each read or not.
pub type SpanResults = Vec<Result<Span, SpanError>>;

// ---------------------------------------------------------------------------------------
// IDs and times
// ---------------------------------------------------------------------------------------

/// A trace or span ID of `bytes` bytes as lower-case hex. OTLP JSON writes IDs as hex;
/// some producers follow the plain protobuf JSON mapping and write base64, so both are read
/// (their lengths differ: 32 hex digits vs 24 base64 characters for a trace ID).
pub fn hex_id(what: &str, raw: &str, bytes: usize) -> Result<String, String> {
    let raw = raw.trim();
    let hex = if raw.len() == bytes * 2 && raw.bytes().all(|b| b.is_ascii_hexdigit()) {
        raw.to_ascii_lowercase()
    } else {
        match base64_decode(raw) {
            Some(decoded) if decoded.len() == bytes => {
                decoded.iter().map(|b| format!("{b:02x}")).collect()
            }
            _ => {
                return Err(format!(
                    "{what} \"{raw}\" is neither {} hex digits nor base64 of {bytes} bytes",
                    bytes * 2
                ))
            }
        }
    };
    if hex.bytes().all(|b| b == b'0') {
        return Err(format!("{what} is all zeros, which is not a valid ID"));
    }
    Ok(hex)
}

/// Standard or URL-safe base64, padded or not. `None` when it is not base64.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let text = text.trim_end_matches('=');
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for c in text.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    (!text.is_empty()).then_some(out)
}

/// Nanoseconds since the epoch as milliseconds, without losing the sub-millisecond digits
/// to the size of the number.
pub fn nanos_to_ms(nanos: u64) -> Millis {
    (nanos / 1_000_000) as f64 + (nanos % 1_000_000) as f64 / 1e6
}

// ---------------------------------------------------------------------------------------
// The attribute mapping (docs/formats.md, "Attributes")
// ---------------------------------------------------------------------------------------

/// Resends of one request before this one: the attempt number is the count + 1. HTTP
/// semconv since 1.21, its older names, and gRPC's attempt spans.
pub const RESEND_COUNT_KEYS: [&str; 4] = [
    "http.request.resend_count",
    "http.resend_count",
    "http.retry_count",
    "previous-rpc-attempts",
];
/// HTTP response status, stable then legacy name.
pub const HTTP_STATUS_KEYS: [&str; 2] = ["http.response.status_code", "http.status_code"];
/// gRPC/RPC status: the numeric gRPC code, then the string forms of newer conventions.
pub const RPC_STATUS_KEYS: [&str; 3] = [
    "rpc.grpc.status_code",
    "rpc.response.status_code",
    "rpc.status_code",
];
/// The stable identity of a message.
pub const MESSAGE_ID_KEYS: [&str; 2] = ["messaging.message.id", "messaging.message_id"];
/// The delivery number a queue reports (Pub/Sub reports 0 without a dead-letter policy).
pub const DELIVERY_KEYS: [&str; 2] = [
    "messaging.gcp_pubsub.message.delivery_attempt",
    "messaging.servicebus.message.delivery_count",
];
/// The HTTP method, stable then legacy.
pub const METHOD_KEYS: [&str; 2] = ["http.request.method", "http.method"];
/// The host addressed, stable then legacy.
pub const ADDRESS_KEYS: [&str; 2] = ["server.address", "net.peer.name"];
/// The path addressed: the real path before the low-cardinality route, so that calls for
/// nine SKUs stay nine targets (fan-out) and are not mistaken for one target retried.
pub const PATH_KEYS: [&str; 4] = ["url.path", "http.target", "http.path", "http.route"];
/// The full URL, stable then legacy: the target when no path is given.
pub const URL_KEYS: [&str; 2] = ["url.full", "http.url"];
/// Where a message went.
pub const DESTINATION_KEYS: [&str; 2] = ["messaging.destination.name", "messaging.destination"];
/// The messaging operation (`receive` spans are polls, not deliveries).
pub const MESSAGING_OPERATION_KEYS: [&str; 2] = ["messaging.operation.type", "messaging.operation"];
/// A captured `Retry-After` response header.
pub const RETRY_AFTER_KEY: &str = "http.response.header.retry-after";

/// The attempt fields one span carries by itself.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AttemptFields {
    pub attempt: Option<u32>,
    pub outcome: Option<Outcome>,
    pub target: Option<String>,
    pub message_id: Option<String>,
    pub delivery: Option<u32>,
    pub retry_after_ms: Option<Millis>,
}

/// Maps a span's attributes onto attempt fields. `outbound` spans (client, producer) are
/// the retrying layer's attempts: an HTTP client span without a resend count is attempt 1.
pub fn attempt_fields(span: &Span, outbound: bool) -> Result<AttemptFields, String> {
    let mut attempt = None;
    for key in RESEND_COUNT_KEYS {
        if let Some(v) = span.attr(key) {
            match v.int() {
                Some(n) if (0..i64::from(u32::MAX)).contains(&n) => {
                    attempt = Some(n as u32 + 1);
                    break;
                }
                _ => {
                    return Err(format!(
                        "{key} must be a whole number of at least 0, got {}",
                        describe(v)
                    ))
                }
            }
        }
    }
    // Absent means the first attempt only where the convention that defines the count is
    // in use (stable HTTP names, semconv 1.21+); older and Zipkin spans never carry it.
    if attempt.is_none() && outbound && span.attr("http.request.method").is_some() {
        attempt = Some(1);
    }
    let mut delivery = None;
    for key in DELIVERY_KEYS {
        if let Some(v) = span.attr(key) {
            match v.int() {
                Some(0) => {}
                Some(n) if (1..=i64::from(u32::MAX)).contains(&n) => {
                    delivery = Some(n as u32);
                    break;
                }
                _ => {
                    return Err(format!(
                        "{key} must be a whole number of at least 1, got {}",
                        describe(v)
                    ))
                }
            }
        }
    }
    Ok(AttemptFields {
        attempt,
        outcome: outcome(span),
        target: target(span),
        message_id: span.first_text(&MESSAGE_ID_KEYS),
        delivery,
        retry_after_ms: span
            .attr(RETRY_AFTER_KEY)
            .and_then(AttrValue::text)
            .and_then(|t| retry_after_ms(&t)),
    })
}

fn describe(v: &AttrValue) -> String {
    match v {
        AttrValue::Str(s) => format!("\"{s}\""),
        other => other.text().unwrap_or_else(|| "a list".into()),
    }
}

/// HTTP status first (it is the most specific), then the RPC status, then `error.type`,
/// then the span status. An unset status with nothing else is no outcome, not `ok`.
pub fn outcome(span: &Span) -> Option<Outcome> {
    if let Some(code) = HTTP_STATUS_KEYS
        .iter()
        .find_map(|k| span.attr(k).and_then(AttrValue::int))
    {
        if let Some(o) = Outcome::from_status(code) {
            return Some(o);
        }
    }
    if let Some(o) = RPC_STATUS_KEYS
        .iter()
        .find_map(|k| span.attr(k).and_then(rpc_outcome))
    {
        return Some(o);
    }
    if let Some(kind) = span.attr("error.type").and_then(AttrValue::text) {
        return Some(failure(&kind));
    }
    // An exception that ended a span that did not end OK: the last one recorded.
    if span.status != SpanStatus::Ok {
        if let Some(kind) = span.exceptions.last() {
            return Some(failure(kind));
        }
    }
    match span.status {
        SpanStatus::Error => Some(Outcome::Error),
        SpanStatus::Ok => Some(Outcome::Ok),
        SpanStatus::Unset => None,
    }
}

/// What a failure's type name (`error.type`, an exception event's `exception.type`) says:
/// `java.net.SocketTimeoutException`, `requests.exceptions.ReadTimeout`,
/// `urllib3.exceptions.ReadTimeoutError`, `TimeoutError`, `DeadlineExceeded` are timeouts;
/// `asyncio.CancelledError` is a cancellation; anything else is an error.
fn failure(kind: &str) -> Outcome {
    let k = kind.to_ascii_lowercase();
    if k.contains("timeout") || k.contains("timedout") || k.contains("deadline") {
        Outcome::Timeout
    } else if k.contains("cancel") {
        Outcome::Cancelled
    } else {
        Outcome::Error
    }
}

/// A gRPC status, as its number (`4`) or its name (`DEADLINE_EXCEEDED`).
fn rpc_outcome(v: &AttrValue) -> Option<Outcome> {
    const NAMES: [&str; 17] = [
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    ];
    let code = match v.int() {
        Some(n) => n,
        None => {
            let name = v.text()?;
            NAMES
                .iter()
                .position(|n| n.eq_ignore_ascii_case(name.trim()))? as i64
        }
    };
    Some(match code {
        0 => Outcome::Ok,
        1 => Outcome::Cancelled,
        4 => Outcome::Timeout,
        8 => Outcome::Rejected,
        2..=16 => Outcome::Error,
        _ => return None,
    })
}

/// What the attempt addressed: `METHOD host/path` for HTTP, `service/method` for RPC, the
/// destination for messaging, else the span name.
pub fn target(span: &Span) -> Option<String> {
    let method = span.first_text(&METHOD_KEYS);
    let address = span.first_text(&ADDRESS_KEYS);
    let path = span
        .first_text(&PATH_KEYS)
        .map(|p| strip_query(&p).to_string());
    let where_ = match (address, path) {
        (Some(a), Some(p)) => Some(format!("{a}{p}")),
        (None, Some(p)) => Some(p),
        (address, None) => span
            .first_text(&URL_KEYS)
            .map(|u| strip_query(u.split_once("://").map_or(&u, |(_, rest)| rest)).to_string())
            .or(address),
    };
    if let Some(w) = where_ {
        return Some(match method {
            Some(m) => format!("{m} {w}"),
            None => w,
        });
    }
    if let Some(m) = span.attr("rpc.method").and_then(AttrValue::text) {
        return Some(match span.attr("rpc.service").and_then(AttrValue::text) {
            Some(s) if !m.contains('/') => format!("{s}/{m}"),
            _ => m,
        });
    }
    if let Some(d) = span.first_text(&DESTINATION_KEYS) {
        return Some(d);
    }
    (!span.name.is_empty()).then(|| span.name.clone())
}

fn strip_query(s: &str) -> &str {
    s.split(['?', '#']).next().unwrap_or(s)
}

/// `Retry-After` as delay-seconds. The HTTP-date form needs the response's own clock and
/// is not read.
fn retry_after_ms(text: &str) -> Option<Millis> {
    let secs: f64 = text.trim().parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then_some(secs * 1000.0)
}

// ---------------------------------------------------------------------------------------
// Which spans are attempts, at which hop (docs/formats.md, "Hops")
// ---------------------------------------------------------------------------------------

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
    /// Mapped to `-` by `--hop` or `[hop_map]`.
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
/// that has no hop (reported as a bad line).
pub fn role(
    span: &Span,
    kind: SpanKind,
    mapping: &SpanMapping,
    hops: &HopOrder,
) -> Result<Role, String> {
    let service = span.service.as_deref().unwrap_or("");
    let rule = |k: Option<SpanKind>| {
        mapping
            .hop_rules
            .iter()
            .rev()
            .find(|r| r.service == service && r.kind == k)
    };
    if let Some(r) = rule(Some(kind)) {
        return Ok(r
            .hop
            .map_or(Role::NotAttempt(Skip::MappedOut), Role::Attempt));
    }
    if kind == SpanKind::Internal {
        return Ok(Role::NotAttempt(Skip::Internal));
    }
    let hop = match rule(None) {
        Some(r) => match r.hop {
            Some(h) => h,
            None => return Ok(Role::NotAttempt(Skip::MappedOut)),
        },
        None if service.is_empty() => {
            return Err(format!(
                "has no service name (service.name), so no hop: set service.name, or map the span with --hop SERVICE=HOP (hops: {})",
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
                    "service \"{service}\" ({} span) {why}: map it with --hop {service}=HOP (hops: {}), or --hop {service}=- if its spans are not attempts",
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
        return Ok(Role::NotAttempt(Skip::OtherSide));
    }
    let operation = span
        .first_text(&MESSAGING_OPERATION_KEYS)
        .map(|o| o.to_ascii_lowercase());
    if kind == SpanKind::Consumer && operation.as_deref() == Some("receive") {
        return Ok(Role::NotAttempt(Skip::Receive));
    }
    Ok(Role::Attempt(hop))
}

// ---------------------------------------------------------------------------------------
// Mapped spans and their resolution across all inputs
// ---------------------------------------------------------------------------------------

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
    let mut role = match role(&span, kind, mapping, hops) {
        Ok(r) => r,
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
            AttemptFields::default()
        }
    };
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
        trace_id: span.trace_id,
    };
    (mapped, problem)
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

    // A span whose direct child is an attempt at the same hop and service is a call span
    // over per-try spans: the tries are the attempts.
    let wrappers: Vec<usize> = spans
        .iter()
        .filter_map(|s| {
            let Role::Attempt(hop) = s.role else {
                return None;
            };
            let p = find(s.cause?)?;
            let parent = &spans[p];
            (parent.role == Role::Attempt(hop)
                && parent.service == s.service
                && parent.links.is_empty())
            .then_some(p)
        })
        .collect();
    for w in wrappers {
        spans[w].role = Role::NotAttempt(Skip::Wrapper);
    }
    hidden::mark_hidden_sends(&mut spans, &find);

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
        problems: Vec::new(),
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
            match walk(s, hop, cause, &spans, &find, mapping, &trace_names) {
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

/// Walks from an attempt span up its causes: the first attempt at an upstream hop is its
/// parent; the first span with the operation (run) attribute gives the operation (run);
/// without an operation attribute, the operation is the trace where the causes end.
fn walk(
    s: &MappedSpan,
    hop: u16,
    start: Option<Cause>,
    spans: &[MappedSpan],
    find: &dyn Fn(Cause) -> Option<usize>,
    mapping: &SpanMapping,
    trace_names: &HashMap<u128, &str>,
) -> Result<Found, String> {
    let mut operation = s.operation_attr.clone();
    let mut run = s.run_attr.clone();
    let mut parent_id = None;
    let mut last_trace = s.key.trace;
    let mut cause = start;
    let mut steps = 0;
    while let Some(c) = cause {
        steps += 1;
        if steps > MAX_CHAIN {
            return Err(format!(
                "has a chain of parent spans and links longer than {MAX_CHAIN}: they loop; check the parent IDs"
            ));
        }
        last_trace = c.key.trace;
        let Some(i) = find(c) else { break };
        let up = &spans[i];
        if parent_id.is_none() {
            if let Role::Attempt(h) = up.role {
                if h < hop {
                    parent_id = Some(up.out_span_id.clone());
                }
            }
        }
        if operation.is_none() {
            operation.clone_from(&up.operation_attr);
        }
        if run.is_none() {
            run.clone_from(&up.run_attr);
        }
        cause = up.cause;
    }
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
        timing: CheckedTiming::Record {
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::HopRule;

    fn span(kind: SpanKind, service: &str, attrs: &[(&str, AttrValue)]) -> Span {
        Span {
            trace_id: "0af7651916cd43dd8448eb211c80319c".into(),
            span_id: "00f067aa0ba902b7".into(),
            parent_span_id: None,
            shared: false,
            name: "op".into(),
            kind,
            service: Some(service.into()),
            start_ms: Some(0.0),
            finish_ms: Some(10.0),
            attributes: attrs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
            resource: Arc::new(Vec::new()),
            links: Vec::new(),
            status: SpanStatus::Unset,
            exceptions: Vec::new(),
        }
    }

    fn s(v: &str) -> AttrValue {
        AttrValue::Str(v.into())
    }

    fn mapping() -> SpanMapping {
        SpanMapping::new(&HopOrder::default(), vec![false, false, true, false])
    }

    #[test]
    fn the_attribute_table_maps_each_convention() {
        use AttrValue::Int;
        let http = ("http.request.method", s("GET"));
        #[allow(clippy::type_complexity)]
        let cases: Vec<(Vec<(&str, AttrValue)>, bool, AttemptFields)> = vec![
            // A stable HTTP client span without a resend count is the original attempt.
            (
                vec![
                    http.clone(),
                    ("server.address", s("inv")),
                    ("url.path", s("/a")),
                ],
                true,
                AttemptFields {
                    attempt: Some(1),
                    target: Some("GET inv/a".into()),
                    ..Default::default()
                },
            ),
            // resend_count n is attempt n + 1; the status code is the outcome.
            (
                vec![
                    http.clone(),
                    ("http.request.resend_count", Int(2)),
                    ("http.response.status_code", Int(503)),
                ],
                true,
                AttemptFields {
                    attempt: Some(3),
                    outcome: Some(Outcome::Http(503)),
                    target: Some("op".into()),
                    ..Default::default()
                },
            ),
            // Legacy names; intValue as a string; the query is not part of the target.
            (
                vec![
                    ("http.method", s("POST")),
                    ("http.retry_count", s("1")),
                    ("http.status_code", s("429")),
                    ("http.url", s("https://pay/charges?id=7")),
                ],
                true,
                AttemptFields {
                    attempt: Some(2),
                    outcome: Some(Outcome::Http(429)),
                    target: Some("POST pay/charges".into()),
                    ..Default::default()
                },
            ),
            // gRPC attempt spans count previous attempts; the status name maps.
            (
                vec![
                    ("previous-rpc-attempts", Int(1)),
                    ("rpc.service", s("inventory.Stock")),
                    ("rpc.method", s("Get")),
                    ("rpc.grpc.status_code", Int(4)),
                ],
                true,
                AttemptFields {
                    attempt: Some(2),
                    outcome: Some(Outcome::Timeout),
                    target: Some("inventory.Stock/Get".into()),
                    ..Default::default()
                },
            ),
            (
                vec![("rpc.response.status_code", s("RESOURCE_EXHAUSTED"))],
                false,
                AttemptFields {
                    outcome: Some(Outcome::Rejected),
                    target: Some("op".into()),
                    ..Default::default()
                },
            ),
            // Messaging: message ID, delivery count, destination; Pub/Sub's 0 is "unknown".
            (
                vec![
                    ("messaging.message.id", s("m-1")),
                    ("messaging.gcp_pubsub.message.delivery_attempt", Int(3)),
                    ("messaging.destination.name", s("orders")),
                ],
                false,
                AttemptFields {
                    message_id: Some("m-1".into()),
                    delivery: Some(3),
                    target: Some("orders".into()),
                    ..Default::default()
                },
            ),
            (
                vec![
                    ("messaging.message_id", s("m-2")),
                    ("messaging.gcp_pubsub.message.delivery_attempt", Int(0)),
                    ("messaging.servicebus.message.delivery_count", Int(2)),
                ],
                false,
                AttemptFields {
                    message_id: Some("m-2".into()),
                    delivery: Some(2),
                    target: Some("op".into()),
                    ..Default::default()
                },
            ),
            // error.type names the failure; a Retry-After header becomes milliseconds.
            (
                vec![
                    ("error.type", s("java.net.SocketTimeoutException")),
                    (
                        "http.response.header.retry-after",
                        AttrValue::Array(vec![s("2")]),
                    ),
                ],
                false,
                AttemptFields {
                    outcome: Some(Outcome::Timeout),
                    target: Some("op".into()),
                    retry_after_ms: Some(2000.0),
                    ..Default::default()
                },
            ),
        ];
        for (attrs, outbound, expected) in cases {
            let got = attempt_fields(&span(SpanKind::Client, "svc", &attrs), outbound).unwrap();
            assert_eq!(got, expected, "{attrs:?}");
        }
    }

    #[test]
    fn span_status_is_the_outcome_of_last_resort() {
        let mut sp = span(SpanKind::Server, "svc", &[]);
        assert_eq!(outcome(&sp), None);
        sp.status = SpanStatus::Error;
        assert_eq!(outcome(&sp), Some(Outcome::Error));
        sp.attributes
            .push(("http.response.status_code".into(), AttrValue::Int(200)));
        assert_eq!(outcome(&sp), Some(Outcome::Http(200)));
    }

    #[test]
    fn a_negative_resend_count_is_an_error() {
        let sp = span(
            SpanKind::Client,
            "svc",
            &[("http.request.resend_count", AttrValue::Int(-1))],
        );
        assert!(attempt_fields(&sp, true)
            .unwrap_err()
            .contains("http.request.resend_count"));
    }

    #[test]
    fn ids_are_read_as_hex_or_base64() {
        assert_eq!(
            hex_id("spanId", "00F067AA0BA902B7", 8).unwrap(),
            "00f067aa0ba902b7"
        );
        assert_eq!(
            hex_id("traceId", "CvdlGRbNQ92ESOshHIAxnA==", 16).unwrap(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert_eq!(
            hex_id("spanId", "APBnqgupArc=", 8).unwrap(),
            "00f067aa0ba902b7"
        );
        assert!(hex_id("spanId", "xyz", 8)
            .unwrap_err()
            .contains("16 hex digits"));
        assert!(hex_id("spanId", "0000000000000000", 8)
            .unwrap_err()
            .contains("all zeros"));
    }

    #[test]
    fn nanoseconds_keep_their_sub_millisecond_digits() {
        assert_eq!(nanos_to_ms(1_700_000_000_250_500_000), 1_700_000_000_250.5);
    }

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
            "--hop",
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
        assert!(err.contains("--hop cart=HOP"), "{err}");
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
    fn captured_headers_match_in_any_spelling_and_an_array_is_its_first_element() {
        let header = AttrValue::Array(vec![s("order-7"), s("order-8")]);
        let sp = span(
            SpanKind::Server,
            "svc",
            &[
                ("http.request.header.x_operation_id", header),
                ("http.response.header.Retry_After", s("2")),
                ("x_operation_id", s("not a header")),
            ],
        );
        for key in [
            "http.request.header.x-operation-id",
            "http.request.header.X-Operation-Id",
            "http.request.header.x_operation_id",
        ] {
            assert_eq!(
                sp.attr(key).and_then(AttrValue::text).as_deref(),
                Some("order-7"),
                "{key}"
            );
        }
        assert_eq!(
            attempt_fields(&sp, false).unwrap().retry_after_ms,
            Some(2000.0)
        );
        // Only captured headers are compared loosely; other keys must match exactly.
        assert_eq!(sp.attr("x-operation-id"), None);
        assert_eq!(sp.attr("http.request.header.x-operation"), None);
        assert_eq!(sp.attr("http.response.header.x-operation-id"), None);
    }

    #[test]
    fn an_exception_event_names_the_failure_of_a_span_that_did_not_end_ok() {
        let cases = [
            (
                "requests.exceptions.ReadTimeout",
                SpanStatus::Error,
                Some(Outcome::Timeout),
            ),
            (
                "urllib3.exceptions.ReadTimeoutError",
                SpanStatus::Error,
                Some(Outcome::Timeout),
            ),
            ("TimeoutError", SpanStatus::Unset, Some(Outcome::Timeout)),
            (
                "DeadlineExceeded",
                SpanStatus::Error,
                Some(Outcome::Timeout),
            ),
            (
                "asyncio.exceptions.CancelledError",
                SpanStatus::Error,
                Some(Outcome::Cancelled),
            ),
            ("ValueError", SpanStatus::Error, Some(Outcome::Error)),
            // An exception the span recorded and got over: the span says it ended OK.
            (
                "requests.exceptions.ReadTimeout",
                SpanStatus::Ok,
                Some(Outcome::Ok),
            ),
        ];
        for (kind, status, expected) in cases {
            let mut sp = span(SpanKind::Client, "svc", &[]);
            sp.status = status;
            sp.exceptions = vec!["ConnectionResetError".into(), kind.into()];
            assert_eq!(outcome(&sp), expected, "{kind} {status:?}");
        }
        // A status code and error.type come first.
        let mut sp = span(
            SpanKind::Client,
            "svc",
            &[("http.response.status_code", AttrValue::Int(503))],
        );
        sp.status = SpanStatus::Error;
        sp.exceptions = vec!["requests.exceptions.HTTPError".into()];
        assert_eq!(outcome(&sp), Some(Outcome::Http(503)));
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
                &[url.clone()],
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
                &[route.clone()],
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
        assert_eq!(resolved.lines[0].1.outcome, Some(Outcome::Http(503)));
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
}

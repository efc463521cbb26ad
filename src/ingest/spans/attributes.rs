//! The attribute mapping (docs/formats.md, "Attributes"): which span attributes hold an
//! attempt's number, outcome, target, message and delivery, in every spelling of the
//! semantic conventions we read.

use super::{AttrValue, Span, SpanStatus};
use crate::model::{Millis, Outcome};

/// Resends of one request before this one: the attempt number is the count + 1. HTTP
/// semconv since 1.21, its older names, and gRPC's attempt spans.
pub const RESEND_COUNT_KEYS: [&str; 4] = [
    "http.request.resend_count",
    "http.resend_count",
    "http.retry_count",
    "previous-rpc-attempts",
];
/// Attempt numbers that real stacks send as request headers, read where a span captured
/// them (`http.request.header.*`), as (key, what its value says). Envoy's router numbers
/// its tries from 1; the AWS SDKs send `attempt=N; max=M` on every attempt; gRPC counts
/// the attempts before this one.
pub const ATTEMPT_HEADER_KEYS: [(&str, AttemptHeader); 3] = [
    (
        "http.request.header.x-envoy-attempt-count",
        AttemptHeader::Number,
    ),
    ("http.request.header.amz-sdk-request", AttemptHeader::AwsSdk),
    (
        "http.request.header.grpc-previous-rpc-attempts",
        AttemptHeader::Previous,
    ),
];

/// How an attempt header's value gives the attempt number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptHeader {
    /// The number itself, from 1.
    Number,
    /// The count of attempts before this one.
    Previous,
    /// `attempt=N` among `;`-separated `key=value` pairs (`ttl=…; attempt=2; max=4`).
    AwsSdk,
}

impl AttemptHeader {
    /// The attempt number `value` gives, `None` when it is not one.
    fn number(self, value: &str) -> Option<u32> {
        let n = |t: &str| t.trim().parse::<u32>().ok();
        match self {
            AttemptHeader::Number => n(value).filter(|&a| a >= 1),
            AttemptHeader::Previous => n(value).and_then(|p| p.checked_add(1)),
            AttemptHeader::AwsSdk => value
                .split(';')
                .find_map(|pair| pair.trim().strip_prefix("attempt="))
                .and_then(n)
                .filter(|&a| a >= 1),
        }
    }

    fn expected(self) -> &'static str {
        match self {
            AttemptHeader::Number => "a whole number of at least 1",
            AttemptHeader::Previous => "a whole number of at least 0",
            AttemptHeader::AwsSdk => "'attempt=N; max=M' with N at least 1",
        }
    }
}

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
/// The delivery number a queue reports, from 1 (Pub/Sub reports 0 without a dead-letter
/// policy). Azure Service Bus's count is the delivery number too, under its older and its
/// current name.
pub const DELIVERY_KEYS: [&str; 3] = [
    "messaging.gcp_pubsub.message.delivery_attempt",
    "messaging.servicebus.message.delivery_count",
    "azure.servicebus.message.delivery_count",
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
    if attempt.is_none() {
        for (key, header) in ATTEMPT_HEADER_KEYS {
            let Some(v) = span.attr(key) else { continue };
            let text = v.text().unwrap_or_default();
            match header.number(&text) {
                Some(n) => {
                    attempt = Some(n);
                    break;
                }
                None => {
                    return Err(format!(
                        "{key} must be {}, got {}",
                        header.expected(),
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
        outcome: if outbound {
            outbound_outcome(span)
        } else {
            outcome(span)
        },
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

/// The outcome of a client or producer span: as [`outcome`], except that an HTTP request
/// (it has a method) that got no response status got no response, so it is no success
/// however its span ended: a fetch aborted by its timeout ends its span with no status
/// and no `error.type`, and some instrumentations set OK on every span they end. Its
/// failure is the one the span names, else an error.
fn outbound_outcome(span: &Span) -> Option<Outcome> {
    let found = outcome(span);
    let http_request = span.first_text(&METHOD_KEYS).is_some();
    let answered = HTTP_STATUS_KEYS
        .iter()
        .any(|k| span.attr(k).and_then(AttrValue::int).is_some());
    if !http_request || answered {
        return found;
    }
    match found {
        None | Some(Outcome::Ok) => Some(Outcome::Error),
        failure => failure,
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
    let ms = secs * 1000.0 + 0.0;
    // Beyond what an attempt keeps (an f32) is no real hint: not read, as an HTTP date is not.
    (0.0..=crate::ingest::fields::MAX_DURATION_MS)
        .contains(&ms)
        .then_some(ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::spans::mapping::SpanKind;
    use crate::ingest::spans::test_support::*;

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
                // No response status: no response, an error.
                AttemptFields {
                    attempt: Some(1),
                    outcome: Some(Outcome::Error),
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
            // Service Bus's renamed count.
            (
                vec![
                    ("messaging.message.id", s("m-3")),
                    ("azure.servicebus.message.delivery_count", Int(1)),
                ],
                false,
                AttemptFields {
                    message_id: Some("m-3".into()),
                    delivery: Some(1),
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
    fn an_http_request_without_a_response_status_is_no_success() {
        let method = ("http.request.method", s("GET"));
        // Aborted: no status, no error.type, the span status unset or even OK.
        for status in [SpanStatus::Unset, SpanStatus::Ok, SpanStatus::Error] {
            let mut sp = span(SpanKind::Client, "svc", std::slice::from_ref(&method));
            sp.status = status;
            let got = attempt_fields(&sp, true).unwrap().outcome;
            assert_eq!(got, Some(Outcome::Error), "{status:?}");
            // The receiving side's view is its own.
            assert_eq!(attempt_fields(&sp, false).unwrap().outcome, outcome(&sp));
        }
        // A failure the span names is kept.
        let mut sp = span(SpanKind::Client, "svc", std::slice::from_ref(&method));
        sp.exceptions = vec!["TimeoutError".into()];
        assert_eq!(
            attempt_fields(&sp, true).unwrap().outcome,
            Some(Outcome::Timeout)
        );
        // An answered request, and a span that is no HTTP request, are as they were.
        let sp = span(
            SpanKind::Client,
            "svc",
            &[method, ("http.response.status_code", AttrValue::Int(200))],
        );
        assert_eq!(
            attempt_fields(&sp, true).unwrap().outcome,
            Some(Outcome::Http(200))
        );
        let sp = span(SpanKind::Producer, "svc", &[]);
        assert_eq!(attempt_fields(&sp, true).unwrap().outcome, None);
    }

    #[test]
    fn attempt_headers_that_real_stacks_send_number_the_attempt() {
        let header = |v: &str| AttrValue::Array(vec![s(v)]);
        for (key, value, expected) in [
            ("http.request.header.x-envoy-attempt-count", "2", 2),
            (
                "http.request.header.amz_sdk_request",
                "ttl=20261207T065322Z; attempt=3; max=4",
                3,
            ),
            ("http.request.header.amz-sdk-request", "attempt=1; max=4", 1),
            ("http.request.header.grpc-previous-rpc-attempts", "0", 1),
        ] {
            let sp = span(SpanKind::Server, "svc", &[(key, header(value))]);
            assert_eq!(
                attempt_fields(&sp, false).unwrap().attempt,
                Some(expected),
                "{key} {value}"
            );
        }
        // A resend count the span's own layer wrote comes first.
        let sp = span(
            SpanKind::Client,
            "svc",
            &[
                ("http.request.resend_count", AttrValue::Int(1)),
                ("http.request.header.x-envoy-attempt-count", header("5")),
            ],
        );
        assert_eq!(attempt_fields(&sp, true).unwrap().attempt, Some(2));
        // A value that is no number is an error naming the header.
        for (key, value) in [
            ("http.request.header.x-envoy-attempt-count", "0"),
            ("http.request.header.amz-sdk-request", "max=4"),
            ("http.request.header.grpc-previous-rpc-attempts", "two"),
        ] {
            let sp = span(SpanKind::Server, "svc", &[(key, header(value))]);
            let err = attempt_fields(&sp, false).unwrap_err();
            assert!(err.contains(key), "{err}");
        }
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
}

//! Zipkin v2 JSON: a line is one span, an array of spans (what `POST /api/v2/spans` takes
//! and `GET /api/v2/trace/{id}` returns), or an array of such arrays (`GET /api/v2/traces`).
//!
//! ```text
//! [{"traceId":"4e441824ec2b6a44ffdc9bb9a6453df3","id":"ffdc9bb9a6453df3","parentId":"a2fb4a1d1a96d312",
//!   "kind":"CLIENT","name":"get","timestamp":1700000000000000,"duration":180000,
//!   "localEndpoint":{"serviceName":"checkout"},"remoteEndpoint":{"serviceName":"api-gateway"},
//!   "tags":{"http.method":"GET","http.path":"/stock/42","http.status_code":"503","error":"503"}}]
//! ```
//!
//! Times are microseconds (fractions allowed); a span without `duration` is unfinished.
//! Tags are strings and go through the same attribute mapping as OTLP attributes. The span
//! status comes from the `otel.status_code` tag (what OpenTelemetry's Zipkin exporter
//! writes) or an `error` tag. A `shared` server span reuses its client's span ID.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use super::spans::mapping::SpanKind;
use super::spans::{hex_id, AttrList, AttrValue, Span, SpanError, SpanResults, SpanStatus};

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct ZipkinSpan {
    trace_id: Option<String>,
    id: Option<String>,
    parent_id: Option<String>,
    name: Option<String>,
    kind: Option<String>,
    timestamp: Option<Value>,
    duration: Option<Value>,
    local_endpoint: Option<Endpoint>,
    remote_endpoint: Option<Endpoint>,
    tags: BTreeMap<String, Value>,
    shared: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct Endpoint {
    service_name: Option<String>,
    ipv4: Option<String>,
    ipv6: Option<String>,
    port: Option<u32>,
}

/// Reads one line: a span, an array of spans, or an array of arrays of spans.
pub fn parse(text: &str, unterminated_last: bool) -> Result<SpanResults, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| {
        if e.is_eof() && unterminated_last {
            "truncated line: the JSON ends before it closes (was the file cut mid-write?); complete or delete the line".to_string()
        } else {
            format!("not valid JSON ({e}); each line must be a Zipkin span or an array of spans")
        }
    })?;
    let mut items = Vec::new();
    match value {
        Value::Array(list) => {
            for item in list {
                match item {
                    Value::Array(inner) => items.extend(inner),
                    other => items.push(other),
                }
            }
        }
        object @ Value::Object(_) => items.push(object),
        _ => {
            return Err(
                "not a Zipkin span: each line must be a span object or an array of spans"
                    .to_string(),
            )
        }
    }
    Ok(items.into_iter().map(span).collect())
}

/// Reads one span object.
pub(super) fn span(raw: Value) -> Result<Span, SpanError> {
    let written_id = raw.get("id").and_then(Value::as_str).map(String::from);
    let fail = |message: String| SpanError {
        id: written_id.clone(),
        message,
    };
    let s: ZipkinSpan =
        serde_json::from_value(raw).map_err(|e| fail(format!("is not a Zipkin v2 span: {e}")))?;
    let trace_id = match s.trace_id.as_deref() {
        // Zipkin trace IDs are 64 or 128 bits.
        Some(t) if t.len() <= 16 && !t.is_empty() => hex_id("traceId", &format!("{t:0>16}"), 8),
        Some(t) if !t.is_empty() => hex_id("traceId", &format!("{t:0>32}"), 16),
        _ => return Err(fail("has no traceId".into())),
    }
    .map_err(|e| fail(format!("has a bad {e}")))?;
    let span_id = match s.id.as_deref() {
        Some(i) if !i.is_empty() => {
            hex_id("id", &format!("{i:0>16}"), 8).map_err(|e| fail(format!("has a bad {e}")))?
        }
        _ => return Err(fail("has no id".into())),
    };
    let parent_span_id = match s.parent_id.as_deref() {
        Some(p) if !p.is_empty() => Some(
            hex_id("parentId", &format!("{p:0>16}"), 8)
                .map_err(|e| fail(format!("has a bad {e}")))?,
        ),
        _ => None,
    };
    let kind = match s.kind.as_deref().map(str::to_ascii_uppercase).as_deref() {
        None => SpanKind::Internal,
        Some("CLIENT") => SpanKind::Client,
        Some("SERVER") => SpanKind::Server,
        Some("PRODUCER") => SpanKind::Producer,
        Some("CONSUMER") => SpanKind::Consumer,
        Some(other) => {
            return Err(fail(format!(
                "has kind \"{other}\": use CLIENT, SERVER, PRODUCER or CONSUMER"
            )))
        }
    };
    let start_us = micros("timestamp", s.timestamp.as_ref()).map_err(&fail)?;
    let duration_us = micros("duration", s.duration.as_ref()).map_err(&fail)?;
    let mut attributes: AttrList = s
        .tags
        .into_iter()
        .filter_map(|(k, v)| {
            let text = match v {
                Value::String(s) => s,
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                _ => return None,
            };
            Some((k, AttrValue::Str(text)))
        })
        .collect();
    let tag = |k: &str| tag_text(&attributes, k);
    let status = status_from_tags(&attributes);
    // The remote endpoint names the server a client or producer addressed.
    if matches!(kind, SpanKind::Client | SpanKind::Producer)
        && tag("server.address").is_none()
        && tag("net.peer.name").is_none()
    {
        if let Some(remote) = s.remote_endpoint.as_ref().and_then(endpoint_name) {
            attributes.push(("server.address".to_string(), AttrValue::Str(remote)));
        }
    }
    Ok(Span {
        trace_id,
        span_id,
        parent_span_id,
        shared: s.shared.unwrap_or(false) && kind == SpanKind::Server,
        name: s.name.unwrap_or_default(),
        kind,
        service: s
            .local_endpoint
            .and_then(|e| e.service_name)
            .filter(|n| !n.is_empty()),
        start_ms: start_us.map(|us| us / 1000.0),
        finish_ms: start_us.zip(duration_us).map(|(s, d)| (s + d) / 1000.0),
        attributes,
        resource: Arc::new(Vec::new()),
        links: Vec::new(),
        status,
        // Zipkin annotations are bare strings: an exception's type is not recorded.
        exceptions: Vec::new(),
    })
}

fn tag_text(attributes: &AttrList, key: &str) -> Option<String> {
    attributes
        .iter()
        .find(|(k, _)| k == key)
        .and_then(|(_, v)| v.text())
}

/// The span status that tags record, in Zipkin and in Jaeger alike: the `otel.status_code`
/// tag (what OpenTelemetry's exporters write; `ot.status_code`, a gRPC code name, is what
/// older ones wrote), else an `error` tag that is not `false`.
pub(super) fn status_from_tags(attributes: &AttrList) -> SpanStatus {
    let tag = |k: &str| tag_text(attributes, k);
    let code = tag("otel.status_code").or_else(|| tag("ot.status_code"));
    match (code, tag("error")) {
        (Some(c), _) if c.eq_ignore_ascii_case("OK") => SpanStatus::Ok,
        (Some(c), _) if !c.eq_ignore_ascii_case("UNSET") && !c.is_empty() => SpanStatus::Error,
        (_, Some(e)) if e != "false" => SpanStatus::Error,
        _ => SpanStatus::Unset,
    }
}

fn endpoint_name(e: &Endpoint) -> Option<String> {
    if let Some(name) = e.service_name.as_ref().filter(|n| !n.is_empty()) {
        return Some(name.clone());
    }
    let ip = e.ipv4.as_ref().or(e.ipv6.as_ref())?;
    Some(match e.port {
        Some(p) => format!("{ip}:{p}"),
        None => ip.clone(),
    })
}

/// The start-time fields, whose 0 means "not set": Zipkin's `timestamp`, Jaeger's
/// `startTime`.
const START_FIELDS: [&str; 2] = ["timestamp", "startTime"];

/// Microseconds as a number (fractions allowed) or a decimal string (Zipkin and Jaeger
/// times). A start time of 0 means "not set", as in Zipkin.
pub(super) fn micros(field: &str, v: Option<&Value>) -> Result<Option<f64>, String> {
    let us = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n.as_f64(),
        Some(Value::String(s)) => s.trim().parse::<f64>().ok(),
        Some(_) => None,
    };
    match us {
        Some(us) if us.is_finite() && us >= 0.0 => {
            Ok((!START_FIELDS.contains(&field) || us > 0.0).then_some(us))
        }
        _ => Err(format!(
            "has {field} {}, which is not a number of microseconds at or after 0",
            v.map_or_else(String::new, Value::to_string)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_an_array_a_single_span_and_an_array_of_traces() {
        let span = r#"{"traceId":"6b221d5bc9e6496c","id":"2b00000000000001","kind":"CLIENT","timestamp":1700000000000000,"duration":100500,"localEndpoint":{"serviceName":"checkout"},"remoteEndpoint":{"serviceName":"api-gateway"},"tags":{"http.status_code":"503","error":"503"}}"#;
        let one = parse(span, false).unwrap();
        let s = one[0].as_ref().unwrap();
        assert_eq!(s.trace_id, "6b221d5bc9e6496c");
        assert_eq!(s.kind, SpanKind::Client);
        assert_eq!(s.service.as_deref(), Some("checkout"));
        assert_eq!(s.start_ms, Some(1_700_000_000_000.0));
        assert_eq!(s.finish_ms, Some(1_700_000_000_100.5));
        assert_eq!(s.status, SpanStatus::Error);
        assert_eq!(
            s.attr("server.address"),
            Some(&AttrValue::Str("api-gateway".into()))
        );
        assert_eq!(parse(&format!("[{span}]"), false).unwrap(), one);
        assert_eq!(
            parse(&format!("[[{span}],[{span}]]"), false).unwrap().len(),
            2
        );
    }

    #[test]
    fn a_shared_server_span_and_an_unfinished_span() {
        let line = r#"{"traceId":"463ac35c9f6413ad48485a3953bb6124","id":"1a00000000000001","parentId":"1a00000000000000","kind":"SERVER","shared":true,"timestamp":5,"localEndpoint":{"serviceName":"api-gateway"},"tags":{"otel.status_code":"OK"}}"#;
        let spans = parse(line, false).unwrap();
        let s = spans[0].as_ref().unwrap();
        assert!(s.shared);
        assert_eq!(s.parent_span_id.as_deref(), Some("1a00000000000000"));
        assert_eq!(s.finish_ms, None, "no duration: still in flight");
        assert_eq!(s.status, SpanStatus::Ok);
        let old = parse(
            r#"{"traceId":"6b221d5bc9e6496c","id":"3","timestamp":5,"tags":{"ot.status_code":"DEADLINE_EXCEEDED"}}"#,
            false,
        )
        .unwrap();
        assert_eq!(old[0].as_ref().unwrap().status, SpanStatus::Error);
    }

    #[test]
    fn a_bad_span_names_what_is_wrong() {
        let spans = parse(r#"[{"traceId":"x","id":"1"},{"id":"2"},{"traceId":"6b221d5bc9e6496c","id":"3","kind":"LOCAL"}]"#, false).unwrap();
        let messages: Vec<String> = spans.into_iter().map(|s| s.unwrap_err().message).collect();
        assert!(messages[0].contains("bad traceId"), "{messages:?}");
        assert!(messages[1].contains("no traceId"), "{messages:?}");
        assert!(messages[2].contains("kind \"LOCAL\""), "{messages:?}");
    }

    /// Fuzz target (see `crate::fuzz`): no line makes the Zipkin reader or the span mapping
    /// panic.
    #[test]
    fn fuzz_zipkin() {
        crate::ingest::spans::test_support::fuzz_span_lines("zipkin", parse);
    }
}

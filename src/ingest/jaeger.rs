//! Jaeger JSON, as the Jaeger UI's "Download JSON" and the query API
//! (`GET /api/traces/{id}`, `GET /api/traces?service=…`) return it: a document of traces,
//! each with its spans and the processes (services) they ran in.
//!
//! ```text
//! {"data":[{"traceID":"0af7651916cd43dd8448eb211c80319c",
//!   "spans":[{"traceID":"0af7651916cd43dd8448eb211c80319c","spanID":"a1c0000000000001",
//!     "operationName":"GET","references":[{"refType":"CHILD_OF",
//!     "traceID":"0af7651916cd43dd8448eb211c80319c","spanID":"00f067aa0ba902b7"}],
//!     "startTime":1700000000010000,"duration":1200000,"processID":"p1","logs":[],
//!     "tags":[{"key":"span.kind","type":"string","value":"client"},
//!             {"key":"http.response.status_code","type":"int64","value":503},
//!             {"key":"error","type":"bool","value":true}]}],
//!   "processes":{"p1":{"serviceName":"checkout","tags":[]}}}],
//!  "total":0,"limit":0,"offset":0,"errors":null}
//! ```
//!
//! This module reads one span and one process; [`super::document`] walks the document.
//! Times are microseconds. The span kind is the `span.kind` tag; the status comes from
//! `otel.status_code` and `error` tags as for Zipkin. The first `CHILD_OF` reference in the
//! span's own trace is its parent; every other reference (`FOLLOWS_FROM`, or a reference
//! into another trace) is a link. Process tags are the resource attributes. `logs` are span
//! events; only `exception` ones are read, for their `exception.type` (docs/formats.md).

use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use super::spans::mapping::SpanKind;
use super::spans::{hex_id, AttrList, AttrValue, Link, Span, SpanError};
use super::zipkin::{micros, status_from_tags};

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct JaegerSpan {
    #[serde(rename = "traceID", alias = "traceId")]
    trace_id: Option<String>,
    #[serde(rename = "spanID", alias = "spanId")]
    span_id: Option<String>,
    operation_name: Option<String>,
    references: Vec<Reference>,
    start_time: Option<Value>,
    duration: Option<Value>,
    tags: Vec<Tag>,
    #[serde(rename = "processID", alias = "processId")]
    process_id: Option<String>,
    /// The span's own process, in the form without a `processes` table.
    process: Option<Value>,
    logs: Vec<Log>,
}

/// A span event: its name is the `event` field (as Jaeger's OTLP translation writes it).
#[derive(Deserialize, Default)]
#[serde(default)]
struct Log {
    fields: Vec<Tag>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct Reference {
    ref_type: Option<String>,
    #[serde(rename = "traceID", alias = "traceId")]
    trace_id: Option<String>,
    #[serde(rename = "spanID", alias = "spanId")]
    span_id: Option<String>,
}

#[derive(Deserialize)]
struct Tag {
    key: String,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    value: Value,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct RawProcess {
    service_name: Option<String>,
    tags: Vec<Tag>,
}

/// A process: the service a span ran in and its tags (the resource attributes).
#[derive(Debug, Clone, Default)]
pub struct Process {
    pub service: Option<String>,
    pub resource: Arc<AttrList>,
}

/// Reads a process (`{"serviceName":…,"tags":[…]}`). A malformed one is a process without
/// a service, so its spans are reported as having none.
pub fn process(raw: Value) -> Process {
    let p: RawProcess = serde_json::from_value(raw).unwrap_or_default();
    Process {
        service: p.service_name.filter(|s| !s.is_empty()),
        resource: Arc::new(tags(p.tags)),
    }
}

/// A span as read, before its process is known: the span, and the `processID` that names
/// its process in the trace's `processes` table (`None` when it carried its own process or
/// none at all).
pub struct Unattached {
    pub span: Result<Span, SpanError>,
    pub process_id: Option<String>,
}

/// Gives a span read by [`span`] its process from the trace's `processes` table.
pub fn attach(
    unattached: Unattached,
    processes: &std::collections::HashMap<String, Process>,
) -> Result<Span, SpanError> {
    let mut span = unattached.span?;
    if let Some(id) = unattached.process_id {
        let Some(p) = processes.get(&id) else {
            return Err(SpanError {
                id: Some(span.span_id),
                message: format!(
                    "has processID \"{id}\", which is not in the trace's processes: the download is incomplete"
                ),
            });
        };
        span.service.clone_from(&p.service);
        span.resource = Arc::clone(&p.resource);
    }
    Ok(span)
}

/// Reads one element of a trace's `spans`.
pub fn span(raw: Value) -> Unattached {
    let written_id = raw
        .get("spanID")
        .or_else(|| raw.get("spanId"))
        .and_then(Value::as_str)
        .map(String::from);
    let fail = |message: String| SpanError {
        id: written_id.clone(),
        message,
    };
    let s: JaegerSpan = match serde_json::from_value(raw) {
        Ok(s) => s,
        Err(e) => {
            return Unattached {
                span: Err(fail(format!("is not a Jaeger span: {e}"))),
                process_id: None,
            }
        }
    };
    let process_id = s.process_id.clone().filter(|_| s.process.is_none());
    Unattached {
        span: read(s).map_err(fail),
        process_id,
    }
}

fn read(s: JaegerSpan) -> Result<Span, String> {
    let trace_id = read_trace_id("traceID", s.trace_id.as_deref())?;
    let span_id = match s.span_id.as_deref() {
        Some(i) if !i.is_empty() => read_span_id("spanID", i)?,
        _ => return Err("has no spanID".into()),
    };
    let mut parent_span_id = None;
    let mut links = Vec::new();
    for r in &s.references {
        let (Some(t), Some(sp)) = (r.trace_id.as_deref(), r.span_id.as_deref()) else {
            continue;
        };
        let t = read_trace_id("reference traceID", Some(t))?;
        let sp = read_span_id("reference spanID", sp)?;
        let child_of = r
            .ref_type
            .as_deref()
            .is_none_or(|k| k.eq_ignore_ascii_case("CHILD_OF"));
        if child_of && t == trace_id && parent_span_id.is_none() {
            parent_span_id = Some(sp);
        } else {
            links.push(Link {
                trace_id: t,
                span_id: sp,
                attributes: Vec::new(),
            });
        }
    }
    let start_us = micros("startTime", s.start_time.as_ref())?;
    let duration_us = micros("duration", s.duration.as_ref())?;
    let attributes = tags(s.tags);
    let kind_tag = attributes
        .iter()
        .find(|(k, _)| k == "span.kind")
        .and_then(|(_, v)| v.text());
    let kind = match kind_tag.as_deref().map(str::to_ascii_lowercase).as_deref() {
        None | Some("internal" | "") => SpanKind::Internal,
        Some("client") => SpanKind::Client,
        Some("server") => SpanKind::Server,
        Some("producer") => SpanKind::Producer,
        Some("consumer") => SpanKind::Consumer,
        Some(other) => {
            return Err(format!(
                "has span.kind \"{other}\": use client, server, producer, consumer or internal"
            ))
        }
    };
    let own = s.process.map(process).unwrap_or_default();
    let exceptions = s
        .logs
        .into_iter()
        .filter_map(|log| {
            let fields = tags(log.fields);
            let field = |key: &str| {
                fields
                    .iter()
                    .find(|(k, _)| k == key)
                    .and_then(|(_, v)| v.text())
            };
            (field("event").as_deref() == Some("exception"))
                .then(|| field("exception.type"))
                .flatten()
        })
        .collect();
    Ok(Span {
        trace_id,
        span_id,
        parent_span_id,
        shared: false,
        name: s.operation_name.unwrap_or_default(),
        kind,
        service: own.service,
        start_ms: start_us.map(|us| us / 1000.0),
        finish_ms: start_us.zip(duration_us).map(|(s, d)| (s + d) / 1000.0),
        status: status_from_tags(&attributes),
        attributes,
        resource: own.resource,
        links,
        exceptions,
    })
}

/// A trace ID of 16 or 32 hex digits. Jaeger leaves out leading zeros of the high half
/// (and older versions of any ID), so shorter IDs are padded.
fn read_trace_id(what: &str, raw: Option<&str>) -> Result<String, String> {
    match raw.map(str::trim) {
        Some(t) if !t.is_empty() && t.len() <= 16 => hex_id(what, &format!("{t:0>16}"), 8),
        Some(t) if !t.is_empty() => hex_id(what, &format!("{t:0>32}"), 16),
        _ => return Err(format!("has no {what}")),
    }
    .map_err(|e| format!("has a bad {e}"))
}

fn read_span_id(what: &str, raw: &str) -> Result<String, String> {
    hex_id(what, &format!("{:0>16}", raw.trim()), 8).map_err(|e| format!("has a bad {e}"))
}

/// Tags as attributes, typed by their `type` (`string`, `bool`, `int64`, `float64`,
/// `binary`) or, without one, by their JSON value.
fn tags(list: Vec<Tag>) -> AttrList {
    list.into_iter()
        .map(|t| {
            let value = tag_value(t.kind.as_deref(), t.value);
            (t.key, value)
        })
        .collect()
}

fn tag_value(kind: Option<&str>, value: Value) -> AttrValue {
    let kind = kind.map(str::to_ascii_lowercase);
    match (kind.as_deref(), value) {
        (Some("binary"), _) => AttrValue::Other,
        (Some("int64"), Value::String(s)) => {
            s.trim().parse().map_or(AttrValue::Str(s), AttrValue::Int)
        }
        (Some("float64"), Value::String(s)) => s
            .trim()
            .parse()
            .map_or(AttrValue::Str(s), AttrValue::Double),
        (Some("bool"), Value::String(s)) => match s.trim() {
            "true" => AttrValue::Bool(true),
            "false" => AttrValue::Bool(false),
            _ => AttrValue::Str(s),
        },
        (_, Value::String(s)) => string_tag(s),
        (_, Value::Bool(b)) => AttrValue::Bool(b),
        (_, Value::Number(n)) => match n.as_i64() {
            Some(i) => AttrValue::Int(i),
            None => n.as_f64().map_or(AttrValue::Other, AttrValue::Double),
        },
        _ => AttrValue::Other,
    }
}

/// Jaeger has no array tags: its OTLP translation writes an array attribute (a captured
/// header such as `http.request.header.idempotency-key`) as the array's JSON text. Such a
/// string reads as the array it spells, so that the attribute means what it meant in OTLP.
fn string_tag(s: String) -> AttrValue {
    if s.starts_with('[') && s.ends_with(']') {
        if let Ok(items) = serde_json::from_str::<Vec<Value>>(&s) {
            let scalars: Option<Vec<AttrValue>> = items
                .into_iter()
                .map(|v| match v {
                    Value::String(s) => Some(AttrValue::Str(s)),
                    Value::Bool(b) => Some(AttrValue::Bool(b)),
                    Value::Number(n) => n
                        .as_i64()
                        .map(AttrValue::Int)
                        .or_else(|| n.as_f64().map(AttrValue::Double)),
                    _ => None,
                })
                .collect();
            if let Some(items) = scalars {
                return AttrValue::Array(items);
            }
        }
    }
    AttrValue::Str(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::spans::SpanStatus;
    use serde_json::json;

    fn one(raw: Value) -> Result<Span, SpanError> {
        let u = span(raw);
        let mut processes = std::collections::HashMap::new();
        processes.insert(
            "p1".to_string(),
            process(json!({"serviceName":"checkout","tags":[{"key":"cicd.pipeline.run.id","type":"string","value":"load-42"}]})),
        );
        attach(u, &processes)
    }

    #[test]
    fn reads_a_client_span_with_its_process_parent_and_typed_tags() {
        let s = one(json!({
            "traceID":"0af7651916cd43dd8448eb211c80319c","spanID":"a1c0000000000001","flags":1,
            "operationName":"GET",
            "references":[{"refType":"CHILD_OF","traceID":"0af7651916cd43dd8448eb211c80319c","spanID":"00f067aa0ba902b7"}],
            "startTime":1700000000010000u64,"duration":1200500,
            "tags":[{"key":"span.kind","type":"string","value":"client"},
                    {"key":"http.response.status_code","type":"int64","value":503},
                    {"key":"http.request.resend_count","type":"int64","value":"1"},
                    {"key":"error","type":"bool","value":true},
                    {"key":"http.request.header.idempotency-key","type":"string","value":"[\"order-1001\"]"}],
            "logs":[{"timestamp":1700000000020000u64,"fields":[{"key":"event","type":"string","value":"retry"},{"key":"exception.type","type":"string","value":"NotAnException"}]},
                {"timestamp":1700000000030000u64,"fields":[{"key":"event","type":"string","value":"exception"},{"key":"exception.type","type":"string","value":"requests.exceptions.ReadTimeout"}]}],
            "processID":"p1","warnings":null
        }))
        .unwrap();
        assert_eq!(s.trace_id, "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(s.parent_span_id.as_deref(), Some("00f067aa0ba902b7"));
        assert_eq!(s.kind, SpanKind::Client);
        // Only the exception log counts, for its type.
        assert_eq!(s.exceptions, vec!["requests.exceptions.ReadTimeout"]);
        assert_eq!(s.service.as_deref(), Some("checkout"));
        assert_eq!(s.start_ms, Some(1_700_000_000_010.0));
        assert_eq!(s.finish_ms, Some(1_700_000_001_210.5));
        assert_eq!(s.status, SpanStatus::Error);
        assert_eq!(
            s.attr("http.response.status_code"),
            Some(&AttrValue::Int(503))
        );
        assert_eq!(
            s.attr("http.request.resend_count"),
            Some(&AttrValue::Int(1))
        );
        assert_eq!(
            s.attr("http.request.header.idempotency-key")
                .and_then(AttrValue::text)
                .as_deref(),
            Some("order-1001")
        );
        assert_eq!(
            s.attr("cicd.pipeline.run.id")
                .and_then(AttrValue::text)
                .as_deref(),
            Some("load-42"),
            "process tags are the resource"
        );
    }

    #[test]
    fn follows_from_and_references_into_other_traces_are_links() {
        let s = one(json!({
            "traceID":"1111111111111111","spanID":"5","processID":"p1","startTime":5,
            "references":[
                {"refType":"FOLLOWS_FROM","traceID":"0af7651916cd43dd8448eb211c80319c","spanID":"a1"},
                {"refType":"CHILD_OF","traceID":"2222222222222222","spanID":"b2"}],
            "tags":[{"key":"span.kind","type":"string","value":"consumer"}]
        }))
        .unwrap();
        assert_eq!(s.parent_span_id, None);
        assert_eq!(s.span_id, "0000000000000005", "short IDs are padded");
        let linked: Vec<(&str, &str)> = s
            .links
            .iter()
            .map(|l| (l.trace_id.as_str(), l.span_id.as_str()))
            .collect();
        assert_eq!(
            linked,
            [
                ("0af7651916cd43dd8448eb211c80319c", "00000000000000a1"),
                ("2222222222222222", "00000000000000b2")
            ]
        );
        assert_eq!(s.finish_ms, None, "no duration: unfinished");
    }

    #[test]
    fn bad_spans_name_what_is_wrong() {
        let cases = [
            (json!({"spanID":"1","processID":"p1"}), "has no traceID"),
            (
                json!({"traceID":"abc","spanID":"zz","processID":"p1"}),
                "bad spanID",
            ),
            (
                json!({"traceID":"abc","spanID":"1","processID":"p9"}),
                "processID \"p9\"",
            ),
            (
                json!({"traceID":"abc","spanID":"1","processID":"p1","tags":[{"key":"span.kind","value":"rpc"}]}),
                "span.kind \"rpc\"",
            ),
            (
                json!({"traceID":"abc","spanID":"1","processID":"p1","startTime":-4}),
                "startTime -4",
            ),
            (
                json!({"traceID":"abc","spanID":"1","tags":5}),
                "not a Jaeger span",
            ),
        ];
        for (raw, expected) in cases {
            let e = one(raw).unwrap_err();
            assert!(e.message.contains(expected), "{} !~ {expected}", e.message);
        }
    }

    #[test]
    fn a_span_with_its_own_process_needs_no_table() {
        let s = span(json!({"traceID":"abc","spanID":"1","processID":"p7",
            "process":{"serviceName":"api-gateway","tags":[]}}));
        assert_eq!(s.process_id, None);
        let s = attach(s, &Default::default()).unwrap();
        assert_eq!(s.service.as_deref(), Some("api-gateway"));
    }
}

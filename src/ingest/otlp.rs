//! OpenTelemetry OTLP JSON, as the Collector's `file` exporter writes it: one `TracesData`
//! object per line, in the protobuf JSON mapping with OTLP's exceptions.
//!
//! ```text
//! {"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"checkout"}}]},
//!   "scopeSpans":[{"scope":{"name":"http-client"},"spans":[{"traceId":"5b8efff798038103d269b633813fc60c",
//!   "spanId":"eee19b7ec3c1b174","parentSpanId":"","name":"GET","kind":3,
//!   "startTimeUnixNano":"1700000000000000000","endTimeUnixNano":"1700000000180000000",
//!   "attributes":[{"key":"http.request.resend_count","value":{"intValue":"1"}}],"status":{"code":2}}]}]}]}
//! ```
//!
//! Read leniently, as producers differ: IDs as hex or base64; times as decimal strings or
//! numbers; `kind` and `status.code` as integers or enum names (`SPAN_KIND_CLIENT`,
//! `STATUS_CODE_ERROR`); camelCase or the proto's snake_case field names; the deprecated
//! `instrumentationLibrarySpans`. Unknown fields are ignored. Each span is read on its own,
//! so one malformed span is one bad span, not a lost line.

use std::sync::Arc;

use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::Value;

use super::spans::mapping::SpanKind;
use super::spans::{
    hex_id, nanos_to_ms, AttrList, AttrValue, Link, Span, SpanError, SpanResults, SpanStatus,
};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TracesData {
    /// `batches` is Grafana Tempo's name for it (`GET /api/traces/{id}`).
    #[serde(default, alias = "resource_spans", alias = "batches")]
    resource_spans: Option<Vec<ResourceSpans>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct ResourceSpans {
    resource: Option<Resource>,
    #[serde(
        alias = "scope_spans",
        alias = "instrumentationLibrarySpans",
        alias = "instrumentation_library_spans"
    )]
    scope_spans: Vec<ScopeSpans>,
}

/// The names a `ResourceSpans` gives its list of scopes: `instrumentationLibrarySpans` is
/// the deprecated one that Tempo and older Collectors still write.
pub(super) const SCOPE_SPANS_KEYS: [&str; 4] = [
    "scopeSpans",
    "scope_spans",
    "instrumentationLibrarySpans",
    "instrumentation_library_spans",
];

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct Resource {
    attributes: Vec<KeyValue>,
}

/// A resource's attributes, shared by its spans, and the service they name.
pub(super) fn resource(r: Option<Resource>) -> (Arc<AttrList>, Option<String>) {
    let attrs: Arc<AttrList> = Arc::new(r.map(|r| attributes(r.attributes)).unwrap_or_default());
    let service = attrs
        .iter()
        .find(|(k, _)| k == "service.name")
        .and_then(|(_, v)| v.text());
    (attrs, service)
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ScopeSpans {
    spans: Vec<Value>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct OtlpSpan {
    #[serde(alias = "trace_id")]
    trace_id: Option<String>,
    #[serde(alias = "span_id")]
    span_id: Option<String>,
    #[serde(alias = "parent_span_id")]
    parent_span_id: Option<String>,
    name: Option<String>,
    kind: Option<Value>,
    #[serde(alias = "start_time_unix_nano")]
    start_time_unix_nano: Option<Value>,
    #[serde(alias = "end_time_unix_nano")]
    end_time_unix_nano: Option<Value>,
    attributes: Vec<KeyValue>,
    links: Vec<OtlpLink>,
    status: Option<Status>,
    events: Vec<OtlpEvent>,
}

/// A span event; only `exception` events are read, for their `exception.type`.
#[derive(Deserialize, Default)]
#[serde(default)]
struct OtlpEvent {
    name: Option<String>,
    attributes: Vec<KeyValue>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct OtlpLink {
    #[serde(alias = "trace_id")]
    trace_id: Option<String>,
    #[serde(alias = "span_id")]
    span_id: Option<String>,
    attributes: Vec<KeyValue>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Status {
    code: Option<Value>,
}

#[derive(Deserialize)]
struct KeyValue {
    key: String,
    #[serde(default)]
    value: Option<AnyValue>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct AnyValue {
    #[serde(alias = "string_value")]
    string_value: Option<String>,
    #[serde(alias = "bool_value")]
    bool_value: Option<bool>,
    #[serde(alias = "int_value")]
    int_value: Option<Value>,
    #[serde(alias = "double_value")]
    double_value: Option<Value>,
    #[serde(alias = "array_value")]
    array_value: Option<ArrayValue>,
    #[serde(alias = "kvlist_value")]
    kvlist_value: Option<IgnoredAny>,
    #[serde(alias = "bytes_value")]
    bytes_value: Option<IgnoredAny>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ArrayValue {
    values: Vec<AnyValue>,
}

/// Reads one line: every span of every resource and scope, in order.
pub fn parse(text: &str, unterminated_last: bool) -> Result<SpanResults, String> {
    if !text.trim_start().starts_with('{') {
        return Err(
            "not an OTLP JSON object: each line must be one {\"resourceSpans\":[…]} object"
                .to_string(),
        );
    }
    let data: TracesData = serde_json::from_str(text).map_err(|e| {
        if e.is_eof() && unterminated_last {
            "truncated line: the JSON object ends before it closes (was the file cut mid-write?); complete or delete the line".to_string()
        } else if e.is_eof() || e.is_syntax() {
            format!("not valid JSON ({e}); each line must be one OTLP JSON object")
        } else {
            format!("not OTLP JSON: {e}")
        }
    })?;
    let Some(resource_spans) = data.resource_spans else {
        return Err("no resourceSpans: an OTLP traces line is {\"resourceSpans\":[…]} (metrics and logs hold no attempts)".to_string());
    };
    let mut out = Vec::new();
    for rs in resource_spans {
        let (resource, service) = resource(rs.resource);
        for scope in rs.scope_spans {
            for raw in scope.spans {
                out.push(span(raw, &resource, service.as_deref()));
            }
        }
    }
    Ok(out)
}

/// Reads one span of a resource whose attributes and service are given.
pub(super) fn span(
    raw: Value,
    resource: &Arc<AttrList>,
    service: Option<&str>,
) -> Result<Span, SpanError> {
    let written_id = raw
        .get("spanId")
        .or_else(|| raw.get("span_id"))
        .and_then(Value::as_str)
        .map(String::from);
    let fail = |message: String| SpanError {
        id: written_id.clone(),
        message,
    };
    let s: OtlpSpan =
        serde_json::from_value(raw).map_err(|e| fail(format!("is not an OTLP span: {e}")))?;
    let trace_id = match s.trace_id.as_deref() {
        Some(t) if !t.is_empty() => {
            hex_id("traceId", t, 16).map_err(|e| fail(format!("has a bad {e}")))?
        }
        _ => return Err(fail("has no traceId".into())),
    };
    let span_id = match s.span_id.as_deref() {
        Some(t) if !t.is_empty() => {
            hex_id("spanId", t, 8).map_err(|e| fail(format!("has a bad {e}")))?
        }
        _ => return Err(fail("has no spanId".into())),
    };
    let parent_span_id = match s.parent_span_id.as_deref() {
        Some(p) if !p.is_empty() => {
            Some(hex_id("parentSpanId", p, 8).map_err(|e| fail(format!("has a bad {e}")))?)
        }
        _ => None,
    };
    let kind = kind(s.kind.as_ref()).map_err(&fail)?;
    let start_ms = nanos("startTimeUnixNano", s.start_time_unix_nano.as_ref()).map_err(&fail)?;
    let finish_ms = nanos("endTimeUnixNano", s.end_time_unix_nano.as_ref()).map_err(&fail)?;
    let mut links = Vec::new();
    for l in s.links {
        let (Some(t), Some(sp)) = (l.trace_id.as_deref(), l.span_id.as_deref()) else {
            continue;
        };
        if t.is_empty() || sp.is_empty() {
            continue;
        }
        links.push(Link {
            trace_id: hex_id("link traceId", t, 16).map_err(|e| fail(format!("has a bad {e}")))?,
            span_id: hex_id("link spanId", sp, 8).map_err(|e| fail(format!("has a bad {e}")))?,
            attributes: attributes(l.attributes),
        });
    }
    let exceptions = s
        .events
        .into_iter()
        .filter(|e| e.name.as_deref() == Some("exception"))
        .filter_map(|e| {
            let kv = e
                .attributes
                .into_iter()
                .find(|kv| kv.key == "exception.type")?;
            any_value(kv.value?).text()
        })
        .collect();
    Ok(Span {
        trace_id,
        span_id,
        parent_span_id,
        shared: false,
        name: s.name.unwrap_or_default(),
        kind,
        service: service.map(String::from),
        start_ms,
        finish_ms,
        attributes: attributes(s.attributes),
        resource: Arc::clone(resource),
        links,
        status: s
            .status
            .and_then(|st| status(st.code.as_ref()))
            .unwrap_or_default(),
        exceptions,
    })
}

fn attributes(list: Vec<KeyValue>) -> AttrList {
    list.into_iter()
        .map(|kv| (kv.key, kv.value.map_or(AttrValue::Other, any_value)))
        .collect()
}

fn any_value(v: AnyValue) -> AttrValue {
    if let Some(s) = v.string_value {
        AttrValue::Str(s)
    } else if let Some(b) = v.bool_value {
        AttrValue::Bool(b)
    } else if let Some(i) = v.int_value {
        // intValue is a decimal string in the JSON mapping (int64); numbers are accepted.
        match &i {
            Value::Number(n) => n.as_i64().map_or(AttrValue::Other, AttrValue::Int),
            Value::String(s) => s.trim().parse().map_or(AttrValue::Other, AttrValue::Int),
            _ => AttrValue::Other,
        }
    } else if let Some(d) = v.double_value {
        match &d {
            Value::Number(n) => n.as_f64().map_or(AttrValue::Other, AttrValue::Double),
            Value::String(s) => s.trim().parse().map_or(AttrValue::Other, AttrValue::Double),
            _ => AttrValue::Other,
        }
    } else if let Some(a) = v.array_value {
        AttrValue::Array(a.values.into_iter().map(any_value).collect())
    } else {
        let _ = (v.kvlist_value, v.bytes_value);
        AttrValue::Other
    }
}

/// `kind`: 0–5, or `SPAN_KIND_CLIENT` (the `SPAN_KIND_` prefix may be left out).
fn kind(v: Option<&Value>) -> Result<SpanKind, String> {
    let code = match v {
        None | Some(Value::Null) => 0,
        Some(Value::Number(n)) => n.as_u64().unwrap_or(u64::MAX),
        Some(Value::String(s)) => {
            let name = s.trim().to_ascii_uppercase();
            let name = name.strip_prefix("SPAN_KIND_").unwrap_or(&name);
            match name {
                "UNSPECIFIED" => 0,
                "INTERNAL" => 1,
                "SERVER" => 2,
                "CLIENT" => 3,
                "PRODUCER" => 4,
                "CONSUMER" => 5,
                _ => u64::MAX,
            }
        }
        Some(_) => u64::MAX,
    };
    Ok(match code {
        0 | 1 => SpanKind::Internal,
        2 => SpanKind::Server,
        3 => SpanKind::Client,
        4 => SpanKind::Producer,
        5 => SpanKind::Consumer,
        _ => {
            return Err(format!(
                "has kind {}, which is not a span kind: use 0–5 or a name such as SPAN_KIND_CLIENT",
                v.map_or_else(String::new, Value::to_string)
            ))
        }
    })
}

/// A `*TimeUnixNano`: a decimal string (the JSON mapping of fixed64) or a number. 0 and
/// absent mean "not set".
fn nanos(field: &str, v: Option<&Value>) -> Result<Option<f64>, String> {
    let n: u64 = match v {
        None | Some(Value::Null) => 0,
        Some(Value::String(s)) => s.trim().parse().map_err(|_| {
            format!("has {field} \"{s}\", which is not a whole number of nanoseconds")
        })?,
        Some(Value::Number(n)) => match (n.as_u64(), n.as_f64()) {
            (Some(u), _) => u,
            (None, Some(f)) if f.is_finite() && f >= 0.0 => f as u64,
            _ => {
                return Err(format!(
                    "has {field} {n}, which is not a time at or after 1970"
                ))
            }
        },
        Some(other) => {
            return Err(format!(
                "has {field} {other}, which is not a whole number of nanoseconds"
            ))
        }
    };
    Ok((n > 0).then(|| nanos_to_ms(n)))
}

/// `status.code`: 0–2 or `STATUS_CODE_ERROR`.
fn status(v: Option<&Value>) -> Option<SpanStatus> {
    let code = match v? {
        Value::Number(n) => n.as_u64()?,
        Value::String(s) => {
            let name = s.trim().to_ascii_uppercase();
            match name.strip_prefix("STATUS_CODE_").unwrap_or(&name) {
                "OK" => 1,
                "ERROR" => 2,
                _ => 0,
            }
        }
        _ => return None,
    };
    Some(match code {
        1 => SpanStatus::Ok,
        2 => SpanStatus::Error,
        _ => SpanStatus::Unset,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = r#"{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"checkout"}}]},"scopeSpans":[{"scope":{},"spans":[{"traceId":"0af7651916cd43dd8448eb211c80319c","spanId":"00f067aa0ba902b7","parentSpanId":"","name":"GET","kind":3,"startTimeUnixNano":"1700000000000000000","endTimeUnixNano":"1700000000250500000","attributes":[{"key":"http.request.resend_count","value":{"intValue":"1"}}],"status":{"code":2},"unknownField":true}]}]}]}"#;

    #[test]
    fn reads_a_file_exporter_line() {
        let spans = parse(HEX, false).unwrap();
        let s = spans[0].as_ref().unwrap();
        assert_eq!(s.trace_id, "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(s.parent_span_id, None);
        assert_eq!(s.kind, SpanKind::Client);
        assert_eq!(s.service.as_deref(), Some("checkout"));
        assert_eq!(s.start_ms, Some(1_700_000_000_000.0));
        assert_eq!(s.finish_ms, Some(1_700_000_000_250.5));
        assert_eq!(s.status, SpanStatus::Error);
        assert_eq!(
            s.attr("http.request.resend_count"),
            Some(&AttrValue::Int(1))
        );
    }

    #[test]
    fn base64_ids_numeric_times_enum_names_and_snake_case_read_the_same() {
        let other = r#"{"resource_spans":[{"resource":{"attributes":[{"key":"service.name","value":{"string_value":"checkout"}}]},"scope_spans":[{"spans":[{"trace_id":"CvdlGRbNQ92ESOshHIAxnA==","span_id":"APBnqgupArc=","name":"GET","kind":"SPAN_KIND_CLIENT","start_time_unix_nano":1700000000000000000,"end_time_unix_nano":"1700000000250500000","attributes":[{"key":"http.request.resend_count","value":{"int_value":1}}],"status":{"code":"STATUS_CODE_ERROR"}}]}]}]}"#;
        assert_eq!(parse(other, false).unwrap(), parse(HEX, false).unwrap());
    }

    #[test]
    fn exception_events_are_read_for_their_type() {
        let line = r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0af7651916cd43dd8448eb211c80319c","spanId":"00f067aa0ba902b7","kind":3,"startTimeUnixNano":"1","events":[{"timeUnixNano":"2","name":"retry","attributes":[{"key":"exception.type","value":{"stringValue":"NotAnException"}}]},{"timeUnixNano":"3","name":"exception","attributes":[{"key":"exception.message","value":{"stringValue":"Read timed out."}},{"key":"exception.type","value":{"stringValue":"requests.exceptions.ReadTimeout"}}]},{"name":"exception"}],"status":{"code":2}}]}]}]}"#;
        let spans = parse(line, false).unwrap();
        let s = spans[0].as_ref().unwrap();
        assert_eq!(s.exceptions, vec!["requests.exceptions.ReadTimeout"]);
    }

    #[test]
    fn a_bad_span_is_one_error_and_the_others_are_kept() {
        let line = r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0af7651916cd43dd8448eb211c80319c","spanId":"zz","startTimeUnixNano":"1"},{"traceId":"0af7651916cd43dd8448eb211c80319c","spanId":"00f067aa0ba902b7","kind":9},{"traceId":"0af7651916cd43dd8448eb211c80319c","spanId":"00f067aa0ba902b8","startTimeUnixNano":"5"}]}]}]}"#;
        let spans = parse(line, false).unwrap();
        assert_eq!(spans.len(), 3);
        let e = spans[0].as_ref().unwrap_err();
        assert_eq!(e.id.as_deref(), Some("zz"));
        assert!(e.message.contains("bad spanId"), "{}", e.message);
        assert!(spans[1]
            .as_ref()
            .unwrap_err()
            .message
            .contains("not a span kind"));
        assert!(spans[2].is_ok());
    }

    #[test]
    fn lines_that_are_not_traces_are_bad_lines() {
        assert!(parse(r#"{"resourceMetrics":[]}"#, false)
            .unwrap_err()
            .contains("no resourceSpans"));
        assert!(parse(r#"{"resourceSpans":[{"#, true)
            .unwrap_err()
            .contains("truncated"));
        assert!(parse("[1]", false)
            .unwrap_err()
            .contains("not an OTLP JSON object"));
    }

    /// Fuzz target (see `crate::fuzz`): no line makes the OTLP reader or the span mapping
    /// panic.
    #[test]
    fn fuzz_otlp() {
        crate::ingest::spans::test_support::fuzz_span_lines("otlp", parse);
    }
}

//! Spans → attempts. The OTLP and Zipkin readers fill the format-neutral [`Span`] defined
//! here; [`attributes`] maps each span's attributes onto the attempt fields of an event
//! (the attribute tables of docs/formats.md); [`hop`] decides which spans are attempts and
//! at which hop; and once every input has been read, [`resolve`] finds what one span cannot
//! know alone: the operation, the test run and the parent attempt, by walking up through
//! parent spans and consumer links. [`mapping`] holds the user's settings for all of it.
//!
//! The result is the same [`CheckedLine`](super::fields::CheckedLine)s that JSON Lines and
//! logfmt produce, so every rule downstream is unchanged. A span that cannot be mapped is
//! reported as a bad line (`path:line: span 3 (id …): why`), never dropped silently; a span
//! that is not an attempt by the documented rules (an internal span, a gateway's server
//! span) is counted.

pub mod attributes;
pub mod hop;
pub mod mapping;
pub mod resolve;

use std::sync::Arc;

use crate::model::Millis;
use mapping::SpanKind;

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

#[cfg(test)]
pub(super) mod test_support {
    use super::*;
    use crate::rules::HopOrder;
    use mapping::SpanMapping;

    pub fn span(kind: SpanKind, service: &str, attrs: &[(&str, AttrValue)]) -> Span {
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

    pub fn s(v: &str) -> AttrValue {
        AttrValue::Str(v.into())
    }

    pub fn mapping() -> SpanMapping {
        SpanMapping::new(&HopOrder::default(), vec![false, false, true, false])
    }

    /// The fuzz target of a span format (see `crate::fuzz`): no line makes its reader
    /// (`parse`, each line read both as complete and as the unterminated last line) or the
    /// mapping of the spans it reads panic. OTLP and Zipkin differ only in the reader.
    pub fn fuzz_span_lines(target: &str, parse: fn(&str, bool) -> Result<SpanResults, String>) {
        let hops = HopOrder::default();
        let mapping = SpanMapping::new(&hops, vec![false; hops.len()]);
        crate::fuzz::run(target, |bytes| {
            for line in String::from_utf8_lossy(bytes).lines() {
                for unterminated in [false, true] {
                    let Ok(spans) = parse(line, unterminated) else {
                        continue;
                    };
                    for span in spans.into_iter().flatten() {
                        let source = crate::model::SourceRef { file: 0, line: 1 };
                        let _ = resolve::map_span(span, 1, source, &mapping, &hops);
                    }
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}

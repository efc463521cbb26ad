//! Whole JSON documents of spans, as users download traces: a pretty-printed OTLP
//! `TracesData` (opentelemetry-proto's `examples/trace.json`), Grafana Tempo's
//! `GET /api/traces/{id}` response (`{"batches":[…]}`, and `{"trace":{…}}` from its v2
//! API), Jaeger's JSON (`{"data":[trace, …]}`, the UI's "Download JSON" and the query API),
//! and Zipkin's arrays of spans. A file may hold several documents one after another.
//!
//! The document is streamed from the reader, never held whole: each span is parsed on its
//! own and handed on with the line it starts on. Only what a span cannot be read without is
//! kept back: the spans of one Jaeger trace until its `processes` table (which follows the
//! spans) is read, and the spans of an OTLP resource that come before its `resource`.
//! A cut-off or malformed document stops the reading at that point and is reported with
//! its line and column.

use std::cell::Cell;
use std::collections::HashMap;
use std::fmt;
use std::io::Read;
use std::rc::Rc;
use std::sync::Arc;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

use super::spans::{AttrList, Span, SpanError};
use super::{jaeger, otlp, zipkin};

/// The trace formats a document can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Otlp,
    Zipkin,
    Jaeger,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Otlp => "OTLP JSON",
            Kind::Zipkin => "Zipkin v2 JSON",
            Kind::Jaeger => "Jaeger JSON",
        }
    }
}

/// The top-level keys that hold an OTLP `resourceSpans` list: `batches` is Tempo's name.
const RESOURCE_SPANS_KEYS: [&str; 3] = ["resourceSpans", "resource_spans", "batches"];
/// Keys that wrap a whole document: Tempo's v2 API (`{"trace":{…}}`) and Jaeger's v3 API
/// (`{"result":{"resourceSpans":[…]}}`).
const WRAPPER_KEYS: [&str; 2] = ["trace", "result"];
/// The fields of a Zipkin v2 span: a top-level object with these is one span.
const ZIPKIN_KEYS: [&str; 13] = [
    "traceId",
    "id",
    "parentId",
    "name",
    "kind",
    "timestamp",
    "duration",
    "localEndpoint",
    "remoteEndpoint",
    "tags",
    "shared",
    "annotations",
    "debug",
];
/// How many unknown top-level keys a "not a trace document" message names.
const KEYS_SHOWN: usize = 5;

/// What the reader finds, in document order.
#[derive(Debug)]
pub enum Found {
    /// A span, or why it could not be read, starting on `line`.
    Span {
        line: u64,
        span: Result<Span, SpanError>,
    },
    /// Something wrong with the document itself rather than with one span.
    Problem {
        line: u64,
        column: Option<u64>,
        message: String,
    },
}

/// Receives what the reader finds; an error (under `--strict`) stops the reading.
pub type Sink<'a> = dyn FnMut(Found) -> anyhow::Result<()> + 'a;

/// Reads every document in `reader`, pretty-printed or not, and hands each span to `sink`.
/// With `expect`, documents of another format are reported instead of read. Returns the
/// number of lines read.
pub fn read(reader: impl Read, expect: Option<Kind>, sink: &mut Sink<'_>) -> anyhow::Result<u64> {
    let lines = Rc::new(LineCount::default());
    let counted = CountLines::new(reader, Rc::clone(&lines));
    let mut de = serde_json::Deserializer::from_reader(counted);
    let mut state = State {
        newlines: Rc::clone(&lines),
        expect,
        sink,
        stopped: None,
        held: 0,
    };
    loop {
        let result = Document(&mut state).deserialize(&mut de);
        if let Some(stop) = state.stopped.take() {
            return Err(stop);
        }
        if let Err(e) = result {
            if e.is_io() {
                return Err(e.into());
            }
            let problem = Found::Problem {
                line: e.line() as u64,
                column: Some(e.column() as u64),
                message: broken(&e, state.held),
            };
            (state.sink)(problem)?;
            break;
        }
        // Whitespace to the end is the end; anything else is the next document.
        match de.end() {
            Ok(()) => break,
            Err(e) if e.is_io() => return Err(e.into()),
            Err(_) => continue,
        }
    }
    Ok(lines.lines())
}

/// The message for a document that breaks off or is not JSON where it should be.
fn broken(e: &serde_json::Error, held: usize) -> String {
    let text = e.to_string();
    let what = text
        .strip_suffix(&format!(" at line {} column {}", e.line(), e.column()))
        .unwrap_or(&text);
    let lost = match held {
        0 => String::new(),
        1 => "; 1 span read before it is lost with it (its service comes later in the document)"
            .to_string(),
        n => format!(
            "; {n} spans read before it are lost with it (their service comes later in the document)"
        ),
    };
    match e.classify() {
        serde_json::error::Category::Eof => format!(
            "truncated document: the JSON ends before it closes ({what}); was the download cut short? Download it again{lost}"
        ),
        serde_json::error::Category::Data => {
            format!("not a trace document: {what}{lost}")
        }
        _ => format!("not valid JSON ({what}); the rest of the file is not read{lost}"),
    }
}

/// Newlines read so far, and whether the last byte read ended a line.
#[derive(Default)]
struct LineCount {
    newlines: Cell<u64>,
    open_line: Cell<bool>,
}

impl LineCount {
    /// The line the next byte is on.
    fn current(&self) -> u64 {
        self.newlines.get() + 1
    }

    /// Lines read, a last line without a newline included.
    fn lines(&self) -> u64 {
        self.newlines.get() + u64::from(self.open_line.get())
    }
}

/// Bytes read from the input at a time.
const READ_BYTES: usize = 1 << 16;

/// A buffered reader that counts the newlines passing through it. serde_json reads a stream
/// a byte at a time and looks one byte ahead, so when a value's first byte has been seen,
/// the count is the value's line. Its own buffer, rather than a `BufReader` below a
/// counter, makes the byte-at-a-time path one copy and one compare: that path is most of
/// the time spent reading a document.
struct CountLines<R> {
    inner: R,
    buf: Box<[u8]>,
    pos: usize,
    len: usize,
    count: Rc<LineCount>,
}

impl<R: Read> CountLines<R> {
    fn new(inner: R, count: Rc<LineCount>) -> CountLines<R> {
        CountLines {
            inner,
            buf: vec![0; READ_BYTES].into_boxed_slice(),
            pos: 0,
            len: 0,
            count,
        }
    }
}

impl<R: Read> Read for CountLines<R> {
    #[inline]
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.pos == self.len {
            self.len = self.inner.read(&mut self.buf)?;
            self.pos = 0;
            if self.len == 0 {
                return Ok(0);
            }
        }
        let count = &self.count;
        if let [one] = out {
            // serde_json's way: a byte at a time.
            let b = self.buf[self.pos];
            self.pos += 1;
            *one = b;
            count
                .newlines
                .set(count.newlines.get() + u64::from(b == b'\n'));
            count.open_line.set(b != b'\n');
            return Ok(1);
        }
        let n = out.len().min(self.len - self.pos);
        let read = &self.buf[self.pos..self.pos + n];
        out[..n].copy_from_slice(read);
        self.pos += n;
        if n > 0 {
            let newlines = memchr::memchr_iter(b'\n', read).count() as u64;
            count.newlines.set(count.newlines.get() + newlines);
            count.open_line.set(read[n - 1] != b'\n');
        }
        Ok(n)
    }
}

/// The reading's state, shared by the visitors below.
struct State<'s, 'a> {
    newlines: Rc<LineCount>,
    expect: Option<Kind>,
    sink: &'s mut Sink<'a>,
    /// The sink's error, when it asked to stop (`--strict`).
    stopped: Option<anyhow::Error>,
    /// Spans read but held back until their service is known.
    held: usize,
}

/// The error that unwinds serde when the sink asked to stop; `read` returns the sink's own.
const STOPPED: &str = "stopped by the sink";

impl State<'_, '_> {
    fn line(&self) -> u64 {
        self.newlines.current()
    }

    fn emit<E: de::Error>(&mut self, found: Found) -> Result<(), E> {
        if let Err(e) = (self.sink)(found) {
            self.stopped = Some(e);
            return Err(E::custom(STOPPED));
        }
        Ok(())
    }

    fn span<E: de::Error>(&mut self, line: u64, span: Result<Span, SpanError>) -> Result<(), E> {
        self.emit(Found::Span { line, span })
    }

    fn problem<E: de::Error>(&mut self, line: u64, message: String) -> Result<(), E> {
        self.emit(Found::Problem {
            line,
            column: None,
            message,
        })
    }

    /// Whether a document of `kind` may be read; if not, reports why.
    fn accepts<E: de::Error>(&mut self, kind: Kind, key: &str, line: u64) -> Result<bool, E> {
        match self.expect {
            Some(want) if want != kind => {
                let message = format!(
                    "this document is {} (it has {key}), not the {} that --input-format asks for; leave --input-format out to detect each file's format",
                    kind.name(),
                    want.name()
                );
                self.problem(line, message)?;
                Ok(false)
            }
            _ => Ok(true),
        }
    }
}

/// A seed that is its own visitor: it asks the deserializer for `$method` (any value, or a
/// map) and visits what comes.
macro_rules! visited_seed {
    ($ty:ty, $method:ident) => {
        impl<'de> DeserializeSeed<'de> for $ty {
            type Value = ();

            fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
                d.$method(self)
            }
        }
    };
}

/// A JSON value with the line it starts on.
struct At<'r>(&'r LineCount);

impl<'de> DeserializeSeed<'de> for At<'_> {
    type Value = (u64, Value);

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        let line = self.0.current();
        Ok((line, Value::deserialize(d)?))
    }
}

/// A whole document: an object holding spans somewhere known, or an array of Zipkin spans.
struct Document<'x, 's, 'a>(&'x mut State<'s, 'a>);

visited_seed!(Document<'_, '_, '_>, deserialize_any);

impl<'de> Visitor<'de> for Document<'_, '_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a trace document: an object with resourceSpans (OTLP), batches (Tempo) or data (Jaeger), or an array of Zipkin spans")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        let state = self.0;
        let line = state.line();
        if !state.accepts(Kind::Zipkin, "an array of spans", line)? {
            return drain(seq);
        }
        ZipkinList { state, depth: 0 }.visit_seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let state = self.0;
        let line = state.line();
        let mut read_spans = false;
        let mut zipkin_fields = serde_json::Map::new();
        let mut other_keys: Vec<String> = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            let key = key.as_str();
            if RESOURCE_SPANS_KEYS.contains(&key) {
                read_spans = true;
                if state.accepts(Kind::Otlp, key, line)? {
                    map.next_value_seed(ResourceSpansList(state))?;
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            } else if WRAPPER_KEYS.contains(&key) {
                read_spans = true;
                map.next_value_seed(Document(state))?;
            } else if key == "data" {
                read_spans = true;
                if state.accepts(Kind::Jaeger, key, line)? {
                    map.next_value_seed(JaegerTraces(state))?;
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            } else if key == "errors" {
                // Jaeger's query API reports traces it could not find here.
                let errors: Value = map.next_value()?;
                for e in errors.as_array().into_iter().flatten() {
                    let message = e.get("msg").and_then(Value::as_str).unwrap_or("an error");
                    let trace = e
                        .get("traceID")
                        .and_then(Value::as_str)
                        .map_or(String::new(), |t| format!(" for trace {t}"));
                    state.problem(line, format!("the Jaeger query reported{trace}: {message}"))?;
                }
            } else if ZIPKIN_KEYS.contains(&key) {
                zipkin_fields.insert(key.to_string(), map.next_value()?);
            } else {
                other_keys.push(key.to_string());
                map.next_value::<IgnoredAny>()?;
            }
        }
        if read_spans {
            return Ok(());
        }
        if zipkin_fields.contains_key("traceId") && zipkin_fields.contains_key("id") {
            if state.accepts(Kind::Zipkin, "traceId and id", line)? {
                let span = zipkin::span(Value::Object(zipkin_fields));
                state.span(line, span)?;
            }
            return Ok(());
        }
        let message = if other_keys
            .iter()
            .any(|k| matches!(k.as_str(), "resourceMetrics" | "resourceLogs"))
        {
            "no resourceSpans: this OTLP document holds metrics or logs, which hold no attempts"
                .to_string()
        } else {
            let mut keys: Vec<&str> = other_keys.iter().map(String::as_str).collect();
            keys.extend(zipkin_fields.keys().map(String::as_str));
            let shown = keys.iter().take(KEYS_SHOWN).copied().collect::<Vec<_>>();
            format!(
                "not a trace document: its keys are {}{}; a trace document has resourceSpans (OTLP), batches (Tempo), data (Jaeger), or is a Zipkin span or array of spans",
                if shown.is_empty() { "none".to_string() } else { shown.join(", ") },
                if keys.len() > KEYS_SHOWN { ", …" } else { "" }
            )
        };
        state.problem(line, message)
    }
}

/// Skips the rest of a list.
fn drain<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

/// OTLP `resourceSpans`.
struct ResourceSpansList<'x, 's, 'a>(&'x mut State<'s, 'a>);

visited_seed!(ResourceSpansList<'_, '_, '_>, deserialize_any);

impl<'de> Visitor<'de> for ResourceSpansList<'_, '_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of OTLP ResourceSpans")
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq
            .next_element_seed(ResourceSpans(&mut *self.0))?
            .is_some()
        {}
        Ok(())
    }
}

/// One OTLP `ResourceSpans`: its spans are handed on as they are read once the resource is
/// known; the ones before it (an unusual key order) wait for it.
struct ResourceSpans<'x, 's, 'a>(&'x mut State<'s, 'a>);

visited_seed!(ResourceSpans<'_, '_, '_>, deserialize_map);

/// The spans of one resource, and the resource once known.
struct ResourceState {
    resource: Option<(Arc<AttrList>, Option<String>)>,
    waiting: Vec<(u64, Value)>,
}

impl ResourceState {
    fn take<E: de::Error>(&mut self, state: &mut State, line: u64, raw: Value) -> Result<(), E> {
        match &self.resource {
            Some((attrs, service)) => {
                let span = otlp::span(raw, attrs, service.as_deref());
                state.span(line, span)
            }
            None => {
                state.held += 1;
                self.waiting.push((line, raw));
                Ok(())
            }
        }
    }

    /// Hands on the spans that waited, with `resource` (or none, at the end).
    fn settle<E: de::Error>(
        &mut self,
        state: &mut State,
        resource: Option<otlp::Resource>,
    ) -> Result<(), E> {
        let (attrs, service) = self.resource.insert(otlp::resource(resource));
        for (line, raw) in std::mem::take(&mut self.waiting) {
            state.held -= 1;
            let span = otlp::span(raw, attrs, service.as_deref());
            state.span(line, span)?;
        }
        Ok(())
    }
}

impl<'de> Visitor<'de> for ResourceSpans<'_, '_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an OTLP ResourceSpans object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let state = self.0;
        let mut rs = ResourceState {
            resource: None,
            waiting: Vec::new(),
        };
        while let Some(key) = map.next_key::<String>()? {
            if key == "resource" {
                let resource: Option<otlp::Resource> = map.next_value()?;
                rs.settle(state, resource)?;
            } else if otlp::SCOPE_SPANS_KEYS.contains(&key.as_str()) {
                map.next_value_seed(ScopeList {
                    state: &mut *state,
                    rs: &mut rs,
                })?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        if rs.resource.is_none() {
            rs.settle(state, None)?;
        }
        Ok(())
    }
}

/// A resource's `scopeSpans`; each scope's `spans`.
struct ScopeList<'x, 'r, 's, 'a> {
    state: &'x mut State<'s, 'a>,
    rs: &'r mut ResourceState,
}

visited_seed!(ScopeList<'_, '_, '_, '_>, deserialize_any);

impl<'de> Visitor<'de> for ScopeList<'_, '_, '_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of OTLP ScopeSpans")
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Self { state, rs } = self;
        while seq
            .next_element_seed(Scope {
                state: &mut *state,
                rs: &mut *rs,
            })?
            .is_some()
        {}
        Ok(())
    }
}

struct Scope<'x, 'r, 's, 'a> {
    state: &'x mut State<'s, 'a>,
    rs: &'r mut ResourceState,
}

visited_seed!(Scope<'_, '_, '_, '_>, deserialize_map);

impl<'de> Visitor<'de> for Scope<'_, '_, '_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an OTLP ScopeSpans object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Self { state, rs } = self;
        while let Some(key) = map.next_key::<String>()? {
            if key == "spans" {
                map.next_value_seed(Each {
                    lines: Rc::clone(&state.newlines),
                    what: "a list of OTLP spans",
                    each: |line, raw| rs.take(state, line, raw),
                })?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

/// Calls `each` with every element of a list and the line it starts on.
struct Each<F> {
    lines: Rc<LineCount>,
    what: &'static str,
    each: F,
}

impl<'de, F> DeserializeSeed<'de> for Each<F>
where
    F: FnMut(u64, Value) -> Result<(), serde_json::Error>,
{
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, F> Visitor<'de> for Each<F>
where
    F: FnMut(u64, Value) -> Result<(), serde_json::Error>,
{
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.what)
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        while let Some((line, raw)) = seq.next_element_seed(At(&self.lines))? {
            (self.each)(line, raw).map_err(de::Error::custom)?;
        }
        Ok(())
    }
}

/// Jaeger's `data`: a list of traces.
struct JaegerTraces<'x, 's, 'a>(&'x mut State<'s, 'a>);

visited_seed!(JaegerTraces<'_, '_, '_>, deserialize_any);

impl<'de> Visitor<'de> for JaegerTraces<'_, '_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of Jaeger traces")
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(JaegerTrace(&mut *self.0))?.is_some() {}
        Ok(())
    }
}

/// One Jaeger trace. Its `processes` come after its `spans`, so the spans wait for them.
struct JaegerTrace<'x, 's, 'a>(&'x mut State<'s, 'a>);

visited_seed!(JaegerTrace<'_, '_, '_>, deserialize_map);

impl<'de> Visitor<'de> for JaegerTrace<'_, '_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Jaeger trace object (traceID, spans, processes)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let state = self.0;
        let mut spans: Vec<(u64, jaeger::Unattached)> = Vec::new();
        let mut processes: HashMap<String, jaeger::Process> = HashMap::new();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "spans" => {
                    let held = &mut state.held;
                    map.next_value_seed(Each {
                        lines: Rc::clone(&state.newlines),
                        what: "a list of Jaeger spans",
                        each: |line, raw| {
                            *held += 1;
                            spans.push((line, jaeger::span(raw)));
                            Ok(())
                        },
                    })?;
                }
                "processes" => {
                    let table: Option<HashMap<String, Value>> = map.next_value()?;
                    processes.extend(
                        table
                            .into_iter()
                            .flatten()
                            .map(|(id, raw)| (id, jaeger::process(raw))),
                    );
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        for (line, unattached) in spans {
            state.held -= 1;
            state.span(line, jaeger::attach(unattached, &processes))?;
        }
        Ok(())
    }
}

/// Zipkin spans: a list of spans, or (`GET /api/v2/traces`) a list of such lists.
struct ZipkinList<'x, 's, 'a> {
    state: &'x mut State<'s, 'a>,
    depth: u8,
}

impl<'de> Visitor<'de> for ZipkinList<'_, '_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of Zipkin spans")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Self { state, depth } = self;
        while seq
            .next_element_seed(ZipkinItem {
                state: &mut *state,
                depth,
            })?
            .is_some()
        {}
        Ok(())
    }
}

/// An element of a Zipkin list: a span, or (at the top) a list of spans.
struct ZipkinItem<'x, 's, 'a> {
    state: &'x mut State<'s, 'a>,
    depth: u8,
}

impl<'de> DeserializeSeed<'de> for ZipkinItem<'_, '_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        let line = self.state.line();
        let (state, depth) = (self.state, self.depth);
        if depth > 0 {
            // Inside a trace's list every element is one span.
            let raw = Value::deserialize(d)?;
            return state.span(line, zipkin_span(raw));
        }
        d.deserialize_any(ZipkinTop { state, line })
    }
}

fn zipkin_span(raw: Value) -> Result<Span, SpanError> {
    if raw.is_object() {
        zipkin::span(raw)
    } else {
        Err(SpanError {
            id: None,
            message: format!("is {raw}, not a Zipkin span object"),
        })
    }
}

/// A top-level element of a Zipkin list, whose type decides what it is.
struct ZipkinTop<'x, 's, 'a> {
    state: &'x mut State<'s, 'a>,
    line: u64,
}

impl<'de> Visitor<'de> for ZipkinTop<'_, '_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Zipkin span or a list of spans")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        ZipkinList {
            state: self.state,
            depth: 1,
        }
        .visit_seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        let raw = Value::deserialize(de::value::MapAccessDeserializer::new(map))?;
        self.state.span(self.line, zipkin::span(raw))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.state.span(self.line, zipkin_span(Value::Bool(v)))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.state.span(self.line, zipkin_span(Value::from(v)))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.state.span(self.line, zipkin_span(Value::from(v)))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        self.state.span(self.line, zipkin_span(Value::from(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.state.span(self.line, zipkin_span(Value::from(v)))
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.state.span(self.line, zipkin_span(Value::Null))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every finding of `text` as `line: span id` or `line:column: problem`.
    fn read_text(text: &str, expect: Option<Kind>) -> (Vec<String>, u64) {
        let mut found = Vec::new();
        let lines = read(text.as_bytes(), expect, &mut |f| {
            found.push(match f {
                Found::Span { line, span: Ok(s) } => {
                    format!("{line}: {} {}", s.span_id, s.service.unwrap_or_default())
                }
                Found::Span { line, span: Err(e) } => format!("{line}: bad {}", e.message),
                Found::Problem {
                    line,
                    column,
                    message,
                } => format!("{line}:{}: {message}", column.unwrap_or(0)),
            });
            Ok(())
        })
        .unwrap();
        (found, lines)
    }

    const OTLP_PRETTY: &str = r#"{
  "resourceSpans": [
    {
      "scopeSpans": [
        {
          "spans": [
            {
              "traceId": "5B8EFFF798038103D269B633813FC60C",
              "spanId": "EEE19B7EC3C1B174",
              "kind": 2,
              "startTimeUnixNano": 1544712660000000000
            },
            { "traceId": "5B8EFFF798038103D269B633813FC60C", "spanId": "EEE19B7EC3C1B175" }
          ]
        }
      ],
      "resource": { "attributes": [ { "key": "service.name", "value": { "stringValue": "my.service" } } ] }
    },
    {
      "resource": { "attributes": [ { "key": "service.name", "value": { "stringValue": "other" } } ] },
      "instrumentationLibrarySpans": [ { "spans": [ { "traceId": "5B8EFFF798038103D269B633813FC60C", "spanId": "EEE19B7EC3C1B176" } ] } ]
    }
  ]
}
"#;

    #[test]
    fn a_pretty_otlp_document_gives_each_span_with_its_line_and_resource() {
        let (found, lines) = read_text(OTLP_PRETTY, None);
        assert_eq!(
            found,
            [
                "7: eee19b7ec3c1b174 my.service",
                "13: eee19b7ec3c1b175 my.service",
                "21: eee19b7ec3c1b176 other"
            ]
        );
        assert_eq!(lines, 24);
    }

    #[test]
    fn a_cut_off_document_is_reported_at_its_line_and_column_with_the_spans_lost() {
        let cut = &OTLP_PRETTY[..OTLP_PRETTY.find("\"resource\": {").unwrap()];
        let (found, _) = read_text(cut, None);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("17:6: truncated document"),
            "{found:?}"
        );
        assert!(
            found[0].contains("2 spans read before it are lost"),
            "{found:?}"
        );
        let (found, _) = read_text("{\n  \"data\": [ {\"spans\": [}\n", None);
        assert!(found[0].starts_with("2:"), "{found:?}");
        assert!(found[0].contains("not valid JSON"), "{found:?}");
    }

    #[test]
    fn jaeger_tempo_and_zipkin_documents_and_several_documents_in_one_file() {
        let jaeger = r#"{"data":[{"traceID":"abc","spans":[
            {"traceID":"abc","spanID":"1","processID":"p1"},
            {"traceID":"abc","spanID":"2","processID":"p2"}],
          "processes":{"p1":{"serviceName":"checkout"},"p2":{"serviceName":"api-gateway"}}}],
          "errors":[{"code":404,"msg":"trace not found","traceID":"def"}]}"#;
        let tempo = r#"{"trace":{"batches":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"inventory"}}]},
            "scopeSpans":[{"spans":[{"traceId":"CvdlGRbNQ92ESOshHIAxnA==","spanId":"APBnqgupArc="}]}]}]}}"#;
        let zipkin = "[\n [ {\"traceId\":\"abc\",\"id\":\"3\",\"localEndpoint\":{\"serviceName\":\"z\"}} ],\n [ 7 ]\n]";
        let single = "{\"traceId\":\"abc\",\n \"id\":\"4\"}";
        let (found, _) = read_text(&[jaeger, tempo, zipkin, single].join("\n"), None);
        assert_eq!(
            found,
            [
                "2: 0000000000000001 checkout",
                "3: 0000000000000002 api-gateway",
                "1:0: the Jaeger query reported for trace def: trace not found",
                "7: 00f067aa0ba902b7 inventory",
                "9: 0000000000000003 z",
                "10: bad is 7, not a Zipkin span object",
                "12: 0000000000000004 ",
            ]
        );
    }

    #[test]
    fn documents_that_hold_no_spans_or_another_format_are_reported() {
        let (found, _) = read_text("{\"resourceMetrics\":[]}", None);
        assert!(found[0].contains("metrics or logs"), "{found:?}");
        let (found, _) = read_text("{\n\"status\": \"ok\", \"count\": 3}", None);
        assert!(
            found[0].starts_with("1:0: not a trace document: its keys are status, count"),
            "{found:?}"
        );
        let (found, _) = read_text(OTLP_PRETTY, Some(Kind::Jaeger));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0]
                .contains("this document is OTLP JSON (it has resourceSpans), not the Jaeger JSON"),
            "{found:?}"
        );
        let (found, _) = read_text("{\"data\": [\"frontend\", \"checkout\"]}", None);
        assert!(
            found[0].contains("not a trace document: invalid type"),
            "{found:?}"
        );
    }

    #[test]
    fn the_sink_can_stop_the_reading() {
        let mut seen = 0;
        let err = read(OTLP_PRETTY.as_bytes(), None, &mut |_| {
            seen += 1;
            anyhow::bail!("enough")
        })
        .unwrap_err();
        assert_eq!(err.to_string(), "enough");
        assert_eq!(seen, 1);
    }
}

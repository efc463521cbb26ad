//! Ingest: reads files or stdin in chunks, detects each file's line format, parses and
//! validates lines in parallel, and interns them into [`Event`]s. Bad lines become
//! [`InputIssue`]s (`path:line: what is wrong`), never panics and never silent drops.
//!
//! Which inputs there are and how they are opened (directories, glob patterns, gzip, zstd,
//! Parquet) is [`source`]'s business; Parquet rows are read by [`parquet`]; the progress
//! line on stderr is [`progress`].

mod fields;
mod jsonl;
mod logfmt;
mod otlp;
mod parquet;
pub mod progress;
mod source;
pub mod spans;
mod zipkin;

use std::collections::HashMap;
use std::io::Read;

use anyhow::{bail, Context, Result};
use rayon::prelude::*;

use crate::config::{BadInputPolicy, HopOrder, InputConfig, InputFormat};
use crate::model::{Event, EventFields, Interner, OperationKey, SourceRef, Sym, Timing};
pub use fields::{CheckedLine, CheckedTiming};
use progress::Progress;
use source::Content;

/// Bytes read per chunk. Large enough that parallel parsing amortises its overhead, small
/// enough that the raw text of only one chunk is in memory at a time.
const CHUNK_BYTES: usize = 8 << 20;

/// A bad input line, as `path:line: message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputIssue {
    pub path: String,
    pub line: u64,
    pub message: String,
}

impl std::fmt::Display for InputIssue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.path, self.line, self.message)
    }
}

/// Everything read from the inputs.
#[derive(Debug, Default)]
pub struct Ingested {
    pub events: Vec<Event>,
    /// The (test run, operation) keys; `Event::op` indexes this.
    pub operations: Vec<(Option<Sym>, Sym)>,
    pub strings: Interner,
    /// Display names of the inputs; `SourceRef::file` indexes this.
    pub files: Vec<String>,
    /// Non-blank lines read.
    pub lines_read: u64,
    pub issues: Vec<InputIssue>,
    /// What became of the spans, when an input was OTLP or Zipkin.
    pub span_stats: Option<spans::SpanStats>,
    op_index: HashMap<(Option<Sym>, Sym), u32, foldhash::fast::FixedState>,
    /// Spans read so far; they become events once every input has been read.
    spans: Vec<spans::MappedSpan>,
}

impl Ingested {
    pub fn operation_key(&self, op: u32) -> OperationKey {
        let (run, id) = self.operations[op as usize];
        OperationKey {
            test_run_id: run.map(|r| self.strings.resolve(r).into()),
            operation_id: self.strings.resolve(id).into(),
        }
    }

    pub fn location(&self, source: SourceRef) -> String {
        format!("{}:{}", self.files[source.file as usize], source.line)
    }

    /// Records a bad input line; under `--strict` it stops the run.
    fn bad_line(
        &mut self,
        path: &str,
        line: u64,
        message: String,
        policy: BadInputPolicy,
    ) -> Result<()> {
        let issue = InputIssue {
            path: path.to_string(),
            line,
            message,
        };
        if policy == BadInputPolicy::Strict {
            bail!("{issue}\n(stopped at the first bad line because of --strict)");
        }
        self.issues.push(issue);
        Ok(())
    }

    fn push(&mut self, source: SourceRef, line: CheckedLine) {
        let run = line.test_run_id.as_deref().map(|r| self.strings.intern(r));
        let id = self.strings.intern(&line.operation_id);
        let next = self.operations.len() as u32;
        let op = *self.op_index.entry((run, id)).or_insert(next);
        if op == next {
            self.operations.push((run, id));
        }
        let mut intern = |s: Option<std::borrow::Cow<str>>| s.map(|s| self.strings.intern(&s));
        let timing = match line.timing {
            CheckedTiming::Record {
                start_ms,
                finish_ms,
            } => Timing::Record {
                start_ms,
                finish_ms,
            },
            CheckedTiming::Point { kind, at_ms } => Timing::Point { kind, at_ms },
        };
        let fields = EventFields {
            attempt: line.attempt,
            delivery: line.delivery,
            target: intern(line.target),
            message_id: intern(line.message_id),
            span_id: intern(line.span_id),
            parent_id: intern(line.parent_id),
            delay_ms: line.delay_ms,
            retry_after_ms: line.retry_after_ms,
            outcome: line.outcome,
            effect: line.effect,
            hidden: line.hidden,
        };
        let event = Event::new(source, op, line.hop, timing, fields);
        self.events.push(event);
    }
}

/// Reads every input named in `config`, in order (directories and patterns expanded).
pub fn read_inputs(config: &InputConfig, hops: &HopOrder) -> Result<Ingested> {
    let inputs = source::resolve(&config.paths)?;
    let mut progress = Progress::new(config.progress, source::total_size(&inputs));
    let mut out = Ingested::default();
    reserve_for(source::total_size(&inputs), &mut out);
    for input in &inputs {
        let name = &input.name;
        let content = source::open(input, &progress.counter())?;
        let file = out.files.len() as u32;
        out.files.push(name.clone());
        match content {
            Content::Lines(reader) => {
                read_one(reader, file, name, config, hops, &mut progress, &mut out)
            }
            Content::Parquet(data) => {
                parquet::read(data, input, file, config, hops, &mut progress, &mut out)
            }
        }
        .with_context(|| format!("could not read '{name}'"))?;
    }
    progress.finish();
    if out.span_stats.is_some() {
        push_spans(config, &mut out)?;
    }
    Ok(out)
}

/// The shortest event line worth reserving for: `{"operation_id":"a","start_ms":1}` and
/// a newline. Reserving for the most events the files can hold costs only address space
/// (pages never touched are never resident) and saves growing a vector of millions of
/// events by copying, which on a 1 M-event input was a tenth of the run.
const MIN_EVENT_LINE_BYTES: u64 = 35;

fn reserve_for(bytes_on_disk: Option<u64>, out: &mut Ingested) {
    out.events
        .reserve((bytes_on_disk.unwrap_or(0) / MIN_EVENT_LINE_BYTES) as usize);
}

fn read_one(
    mut reader: Box<dyn Read + Send>,
    file: u32,
    name: &str,
    config: &InputConfig,
    hops: &HopOrder,
    progress: &mut Progress,
    out: &mut Ingested,
) -> Result<()> {
    let mut format = match config.format {
        InputFormat::Auto => None,
        forced => Some(forced),
    };
    let mut buf: Vec<u8> = Vec::with_capacity(CHUNK_BYTES);
    let mut next_line: u64 = 1;
    loop {
        let had = buf.len();
        (&mut reader)
            .take(CHUNK_BYTES as u64)
            .read_to_end(&mut buf)?;
        let eof = buf.len() == had;
        // Only whole lines are parsed; the tail waits for the next read, or is the last line.
        let end = if eof {
            buf.len()
        } else {
            match memchr::memrchr(b'\n', &buf) {
                Some(i) => i + 1,
                None => continue, // a line longer than a chunk: keep reading
            }
        };
        if end > 0 {
            let format = *format.get_or_insert_with(|| detect_format(&buf[..end]));
            // Span formats map whole lines to several attempts; the rest to one event each.
            let parse = match format {
                InputFormat::Otlp | InputFormat::Zipkin => parse_span_chunk,
                _ => parse_chunk,
            };
            next_line = parse(
                &buf[..end],
                eof,
                next_line,
                file,
                name,
                format,
                config,
                hops,
                out,
            )?;
        }
        buf.drain(..end);
        progress.update(out.events.len(), out.operations.len());
        if eof {
            return Ok(());
        }
    }
}

/// By the first non-blank line: `[` is Zipkin (an array of spans); `{` is OTLP when the
/// object has `resourceSpans`, Zipkin when it has `traceId` and `id` (and no operation),
/// JSON Lines otherwise; anything else is logfmt.
fn detect_format(bytes: &[u8]) -> InputFormat {
    let Some(start) = bytes.iter().position(|b| !b.is_ascii_whitespace()) else {
        return InputFormat::Logfmt;
    };
    match bytes[start] {
        b'[' => InputFormat::Zipkin,
        b'{' => {
            let line = &bytes[start..];
            let line = memchr::memchr(b'\n', line).map_or(line, |i| &line[..i]);
            spans_format(line).unwrap_or(InputFormat::Jsonl)
        }
        _ => InputFormat::Logfmt,
    }
}

/// OTLP or Zipkin when the first object looks like one (see [`detect_format`]).
fn spans_format(line: &[u8]) -> Option<InputFormat> {
    use serde::de::IgnoredAny;
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Sniff {
        #[serde(alias = "resource_spans")]
        resource_spans: Option<IgnoredAny>,
        trace_id: Option<IgnoredAny>,
        id: Option<IgnoredAny>,
        #[serde(alias = "operation_id", alias = "operation")]
        operation_id: Option<IgnoredAny>,
    }
    let sniff: Sniff = serde_json::from_slice(line).ok()?;
    if sniff.resource_spans.is_some() {
        Some(InputFormat::Otlp)
    } else if sniff.trace_id.is_some() && sniff.id.is_some() && sniff.operation_id.is_none() {
        Some(InputFormat::Zipkin)
    } else {
        None
    }
}

/// The lines of a chunk, without their newlines; a final line without one is kept.
fn split_lines(chunk: &[u8]) -> Vec<&[u8]> {
    let mut lines: Vec<&[u8]> = Vec::with_capacity(chunk.len() / 64);
    let mut line_start = 0;
    for newline in memchr::memchr_iter(b'\n', chunk) {
        lines.push(&chunk[line_start..newline]);
        line_start = newline + 1;
    }
    if line_start < chunk.len() {
        lines.push(&chunk[line_start..]);
    }
    lines
}

/// Parses OTLP or Zipkin lines in parallel and keeps their spans for [`push_spans`]: the
/// operation and parent of a span may depend on spans later in the input.
#[allow(clippy::too_many_arguments)]
fn parse_span_chunk(
    chunk: &[u8],
    at_eof: bool,
    first_line: u64,
    file: u32,
    name: &str,
    format: InputFormat,
    config: &InputConfig,
    hops: &HopOrder,
    out: &mut Ingested,
) -> Result<u64> {
    let lines = split_lines(chunk);
    let last = lines.len().saturating_sub(1);
    let truncated_tail = at_eof && chunk.last() != Some(&b'\n');
    type Mapped = Vec<Result<(spans::MappedSpan, Option<String>), String>>;
    let parsed: Vec<Option<Result<Mapped, String>>> = lines
        .par_iter()
        .enumerate()
        .map(|(i, raw)| {
            let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
            if raw.iter().all(u8::is_ascii_whitespace) {
                return None;
            }
            let Ok(text) = std::str::from_utf8(raw) else {
                return Some(Err("not valid UTF-8: spans must be UTF-8 JSON".to_string()));
            };
            let unterminated = truncated_tail && i == last;
            let read = match format {
                InputFormat::Otlp => otlp::parse(text, unterminated),
                _ => zipkin::parse(text, unterminated),
            };
            let source = SourceRef {
                file,
                line: u32::try_from(first_line + i as u64).unwrap_or(u32::MAX),
            };
            Some(read.map(|results| {
                results
                    .into_iter()
                    .enumerate()
                    .map(|(n, r)| {
                        let index = n as u32 + 1;
                        match r {
                            Ok(span) => {
                                Ok(spans::map_span(span, index, source, &config.spans, hops))
                            }
                            Err(e) => Err(format!(
                                "{} {}",
                                spans::label(index, e.id.as_deref()),
                                e.message
                            )),
                        }
                    })
                    .collect()
            }))
        })
        .collect();
    // Marks the input as holding spans, so that push_spans runs even if none was readable.
    out.span_stats.get_or_insert_with(Default::default);
    for (i, result) in parsed.into_iter().enumerate() {
        let line = first_line + i as u64;
        let Some(result) = result else { continue };
        out.lines_read += 1;
        let mut problems = Vec::new();
        match result {
            Err(message) => problems.push(message),
            Ok(mapped) => {
                for m in mapped {
                    match m {
                        Ok((span, problem)) => {
                            out.spans.push(span);
                            problems.extend(problem);
                        }
                        Err(message) => {
                            out.span_stats.get_or_insert_with(Default::default).spans += 1;
                            problems.push(message);
                        }
                    }
                }
            }
        }
        for message in problems {
            out.bad_line(name, line, message, config.bad_input)?;
        }
    }
    Ok(first_line + lines.len() as u64)
}

/// Resolves every span read (operation, test run, parent: see [`spans::resolve`]) and adds
/// the attempts as events.
fn push_spans(config: &InputConfig, out: &mut Ingested) -> Result<()> {
    let resolved = spans::resolve(std::mem::take(&mut out.spans), &config.spans);
    let mut problems: Vec<InputIssue> = resolved
        .problems
        .into_iter()
        .map(|(source, message)| InputIssue {
            path: out.files[source.file as usize].clone(),
            line: u64::from(source.line),
            message,
        })
        .collect();
    if config.bad_input == BadInputPolicy::Strict {
        if let Some(first) = problems.first() {
            bail!("{first}\n(stopped at the first bad line because of --strict)");
        }
    }
    out.issues.append(&mut problems);
    let unreadable = out.span_stats.as_ref().map_or(0, |s| s.spans);
    let mut stats = resolved.stats;
    stats.spans += unreadable;
    out.span_stats = Some(stats);
    for (source, line) in resolved.lines {
        out.push(source, line);
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn parse_chunk(
    chunk: &[u8],
    at_eof: bool,
    first_line: u64,
    file: u32,
    name: &str,
    format: InputFormat,
    config: &InputConfig,
    hops: &HopOrder,
    out: &mut Ingested,
) -> Result<u64> {
    let lines = split_lines(chunk);
    let last = lines.len().saturating_sub(1);
    let truncated_tail = at_eof && chunk.last() != Some(&b'\n');
    let parsed: Vec<Option<Result<CheckedLine, String>>> = lines
        .par_iter()
        .enumerate()
        .map(|(i, raw)| parse_line(raw, format, hops, truncated_tail && i == last))
        .collect();
    for (i, result) in parsed.into_iter().enumerate() {
        let line = first_line + i as u64;
        let Some(result) = result else { continue };
        out.lines_read += 1;
        match result {
            Ok(checked) => {
                let source = SourceRef {
                    file,
                    line: u32::try_from(line).unwrap_or(u32::MAX),
                };
                out.push(source, checked);
            }
            Err(message) => out.bad_line(name, line, message, config.bad_input)?,
        }
    }
    Ok(first_line + lines.len() as u64)
}

/// `None` for a blank line; otherwise the validated line or what is wrong with it.
fn parse_line<'a>(
    raw: &'a [u8],
    format: InputFormat,
    hops: &HopOrder,
    unterminated_last: bool,
) -> Option<Result<CheckedLine<'a>, String>> {
    let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
    if raw.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    let Ok(text) = std::str::from_utf8(raw) else {
        return Some(Err(
            "not valid UTF-8: attempt events must be UTF-8 text".into()
        ));
    };
    let fields = match format {
        InputFormat::Logfmt => logfmt::parse(text),
        _ => jsonl::parse(text, unterminated_last),
    };
    Some(fields.and_then(|f| f.check(hops)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::InputConfig;

    fn ingest_bytes(bytes: &[u8], policy: BadInputPolicy) -> Result<Ingested> {
        let config = InputConfig {
            paths: vec![],
            format: InputFormat::Auto,
            bad_input: policy,
            progress: false,
            spans: crate::config::SpanMapping::new(&HopOrder::default(), vec![false; 4]),
        };
        let mut out = Ingested::default();
        out.files.push("mem".into());
        read_one(
            Box::new(std::io::Cursor::new(bytes.to_vec())),
            0,
            "mem",
            &config,
            &HopOrder::default(),
            &mut Progress::hidden(),
            &mut out,
        )?;
        Ok(out)
    }

    #[test]
    fn numbers_lines_across_blank_lines_and_reports_the_truncated_tail() {
        let text = b"{\"operation_id\":\"a\",\"start_ms\":1}\n\n{\"operation_id\":\"b\",\"start_ms\":2}\n{\"operation_id\":\"c\",\"sta";
        let got = ingest_bytes(text, BadInputPolicy::Report).unwrap();
        assert_eq!(got.events.len(), 2);
        assert_eq!(got.events[1].source.line, 3);
        assert_eq!(got.issues.len(), 1);
        assert_eq!(got.issues[0].line, 4);
        assert!(
            got.issues[0].message.contains("truncated"),
            "{}",
            got.issues[0].message
        );
    }

    #[test]
    fn strict_stops_at_the_first_bad_line() {
        let err = ingest_bytes(b"{\"start_ms\":1}\n", BadInputPolicy::Strict).unwrap_err();
        assert!(format!("{err:#}").contains("mem:1: missing operation_id"));
    }

    #[test]
    fn detects_each_format_from_the_first_line() {
        let cases: [(&[u8], InputFormat); 6] = [
            (b"\n{\"resourceSpans\":[]}\n", InputFormat::Otlp),
            (b"[{\"traceId\":\"a\",\"id\":\"b\"}]", InputFormat::Zipkin),
            (b"{\"traceId\":\"a\",\"id\":\"b\"}\n", InputFormat::Zipkin),
            // A native event that happens to carry trace fields stays JSON Lines.
            (
                b"{\"operation_id\":\"o\",\"traceId\":\"a\",\"id\":\"b\"}",
                InputFormat::Jsonl,
            ),
            (
                b"{\"operation_id\":\"o\"}\n{\"resourceSpans\":[]}",
                InputFormat::Jsonl,
            ),
            (b"operation=o start_ms=1", InputFormat::Logfmt),
        ];
        for (bytes, expected) in cases {
            assert_eq!(
                detect_format(bytes),
                expected,
                "{}",
                String::from_utf8_lossy(bytes)
            );
        }
    }

    #[test]
    fn detects_logfmt() {
        let got = ingest_bytes(
            b"operation=op-17 attempt=1 event=start t_ms=0\n",
            BadInputPolicy::Report,
        )
        .unwrap();
        assert_eq!(got.events.len(), 1);
        assert!(got.issues.is_empty());
    }
}

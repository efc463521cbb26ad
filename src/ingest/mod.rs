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
        // Both may quote the input: escaped, neither can act on the terminal nor forge a
        // message line of its own.
        write!(
            f,
            "{}:{}: {}",
            crate::escape::terminal(&self.path),
            self.line,
            crate::escape::terminal(&self.message)
        )
    }
}

/// Bad input lines: the first [`Issues::KEPT`] kept whole, to be shown; every one counted.
/// A hostile input can hold millions of bad lines, and their messages are not worth the
/// memory (a 64 KB gzip of 32 M bad lines once took 7 GB).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Issues {
    kept: Vec<InputIssue>,
    total: u64,
}

impl Issues {
    /// Bad lines shown one by one; the rest are only counted.
    pub const KEPT: usize = 10;

    pub fn push(&mut self, issue: InputIssue) {
        self.total += 1;
        if self.kept.len() < Self::KEPT {
            self.kept.push(issue);
        }
    }

    /// Every bad line, the ones not kept included.
    pub fn total(&self) -> u64 {
        self.total
    }

    pub fn is_empty(&self) -> bool {
        self.total == 0
    }
}

impl Extend<InputIssue> for Issues {
    fn extend<I: IntoIterator<Item = InputIssue>>(&mut self, issues: I) {
        for issue in issues {
            self.push(issue);
        }
    }
}

/// The kept bad lines, in the order they were found.
impl std::ops::Deref for Issues {
    type Target = [InputIssue];
    fn deref(&self) -> &[InputIssue] {
        &self.kept
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
    pub issues: Issues,
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
    pub(crate) fn bad_line(
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
        };
        let event = Event::new(source, op, line.hop, timing, fields);
        self.events.push(event);
    }
}

/// Reads every input named in `config`, in order (directories and patterns expanded).
pub fn read_inputs(config: &InputConfig, hops: &HopOrder) -> Result<Ingested> {
    let source::Resolved { inputs, notes } = source::resolve(&config.paths)?;
    for note in notes {
        eprintln!("attempt-funnel: {note}");
    }
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
                guarded(|| parquet::read(data, input, file, config, hops, &mut progress, &mut out))
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

/// Runs the Parquet reader, turning a panic inside it into an error. polars panics on some
/// corrupt files (a bad footer, a truncated page, a wrong thrift value) instead of
/// returning an error, and has no API that promises not to; a corrupt input file must be
/// an input error (exit 2) that names the file, not a crash.
fn guarded(read: impl FnOnce() -> Result<()>) -> Result<()> {
    let _quiet = crate::panics::Quiet::new();
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(read)) {
        Ok(result) => result,
        Err(payload) => {
            let why = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "the reader failed".to_string());
            bail!(
                "not a readable Parquet file: it is corrupt or truncated ({}); write it again, or convert it to JSON Lines",
                crate::escape::terminal(why.lines().next().unwrap_or(""))
            )
        }
    }
}

/// The shortest event line worth reserving for: `{"operation_id":"a","start_ms":1}` and
/// a newline. Reserving for the events the files can hold saves growing a vector of
/// millions of events by copying (a tenth of the run on a 1 M-event input).
const MIN_EVENT_LINE_BYTES: u64 = 35;

/// The most events reserved for up front, whatever the input size: reserving for a 1.5 GB
/// input (43 M events) took more address space than a `ulimit -v` of 3 GB allows, before
/// a single line was read. Past this the vector grows as it fills.
const MAX_EVENTS_RESERVED: u64 = 1 << 22;

fn reserve_for(bytes_on_disk: Option<u64>, out: &mut Ingested) {
    let events = (bytes_on_disk.unwrap_or(0) / MIN_EVENT_LINE_BYTES).min(MAX_EVENTS_RESERVED);
    out.events.reserve(events as usize);
}

/// Longest attempt-event line read by default (`--max-line-bytes`): a real event is a few
/// hundred bytes, so a megabyte is already a broken writer or a hostile input.
pub const DEFAULT_MAX_LINE_BYTES: u64 = 1 << 20;

/// Longest span line read by default: an OTLP export request or a Zipkin array holds a
/// whole batch of spans on one line (a collector's file exporter writes thousands).
pub const DEFAULT_MAX_SPAN_LINE_BYTES: u64 = 64 << 20;

/// The longest line of `format` read (`None`: not detected yet, so the larger default).
pub fn max_line_bytes(config: &InputConfig, format: Option<InputFormat>) -> u64 {
    match (config.max_line_bytes, format) {
        (Some(limit), _) => limit,
        (None, Some(InputFormat::Jsonl | InputFormat::Logfmt)) => DEFAULT_MAX_LINE_BYTES,
        (None, _) => DEFAULT_MAX_SPAN_LINE_BYTES,
    }
}

/// A UTF-8 byte-order mark: some Windows tools start a text file with one.
const BOM: &[u8] = b"\xef\xbb\xbf";

/// Non-blank lines parsed at a time (in parallel): enough to keep the cores busy, few
/// enough that their parsed form stays a few megabytes whatever the lines hold.
const LINES_PER_BATCH: usize = 1 << 14;

/// A line longer than the limit, being skipped as it is read.
struct LongLine {
    line: u64,
    bytes: u64,
    /// Only whitespace so far: a blank line, however long, is not a bad line.
    blank: bool,
}

fn is_blank(bytes: &[u8]) -> bool {
    bytes.iter().all(u8::is_ascii_whitespace)
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
    let mut first_read = true;
    let mut long: Option<LongLine> = None;
    loop {
        let had = buf.len();
        (&mut reader)
            .take(CHUNK_BYTES as u64)
            .read_to_end(&mut buf)?;
        let eof = buf.len() == had;
        if std::mem::take(&mut first_read) && buf.starts_with(BOM) {
            buf.drain(..BOM.len());
        }
        // The rest of a line over the limit is dropped as it comes, never held.
        if let Some(l) = &mut long {
            let end = memchr::memchr(b'\n', &buf);
            let part = &buf[..end.unwrap_or(buf.len())];
            l.bytes += part.len() as u64;
            l.blank &= is_blank(part);
            match end {
                Some(i) => {
                    buf.drain(..=i);
                }
                None => {
                    buf.clear();
                    if !eof {
                        continue;
                    }
                }
            }
            let l = long.take().expect("set above");
            next_line = l.line + 1;
            if !l.blank {
                let limit = max_line_bytes(config, format);
                out.bad_line(name, l.line, too_long(l.bytes, limit), config.bad_input)?;
            }
            if eof && buf.is_empty() {
                return Ok(());
            }
        }
        // Only whole lines are parsed; the tail waits for the next read, or is the last line.
        let end = if eof {
            buf.len()
        } else {
            match memchr::memrchr(b'\n', &buf) {
                Some(i) => i + 1,
                None => {
                    // A line longer than a chunk: keep reading, up to the limit.
                    if buf.len() as u64 > max_line_bytes(config, format) {
                        long = Some(LongLine {
                            line: next_line,
                            bytes: buf.len() as u64,
                            blank: is_blank(&buf),
                        });
                        buf.clear();
                    }
                    continue;
                }
            }
        };
        // The format is decided by the first non-blank line, however far in it is.
        if format.is_none() && !is_blank(&buf[..end]) {
            format = Some(detect_format(&buf[..end]));
        }
        match format {
            None => next_line += memchr::memchr_iter(b'\n', &buf[..end]).count() as u64,
            Some(format) => {
                let reading = Reading {
                    file,
                    name,
                    format,
                    config,
                    hops,
                    max_line_bytes: max_line_bytes(config, Some(format)),
                };
                next_line = match format {
                    // Span formats map whole lines to several attempts; the rest to one
                    // event each.
                    InputFormat::Otlp | InputFormat::Zipkin => {
                        reading.parse_span_chunk(&buf[..end], eof, next_line, out)?
                    }
                    _ => reading.parse_chunk(&buf[..end], eof, next_line, out)?,
                };
            }
        }
        buf.drain(..end);
        progress.update(out.events.len(), out.operations.len());
        if eof {
            return Ok(());
        }
    }
}

/// The message of a line over the limit.
fn too_long(bytes: u64, limit: u64) -> String {
    format!("line is {bytes} bytes, longer than the limit of {limit} bytes, and was skipped: split it, or raise the limit with --max-line-bytes (e.g. --max-line-bytes 64MiB)")
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

/// A non-blank line of a chunk: its number, its bytes (without the newline and a final
/// CR), and whether it is the last line of an input that ends without a newline.
type NumberedLine<'a> = (u64, &'a [u8], bool);

/// What parsing a chunk of one input needs to know.
struct Reading<'c> {
    file: u32,
    name: &'c str,
    format: InputFormat,
    config: &'c InputConfig,
    hops: &'c HopOrder,
    max_line_bytes: u64,
}

impl Reading<'_> {
    /// Calls `parse` on the non-blank lines of `chunk`, [`LINES_PER_BATCH`] at a time, and
    /// returns the number of the line after the chunk. Blank lines cost a scan, nothing more.
    fn batches<'a>(
        &self,
        chunk: &'a [u8],
        at_eof: bool,
        first_line: u64,
        mut parse: impl FnMut(&[NumberedLine<'a>]) -> Result<()>,
    ) -> Result<u64> {
        let truncated_tail = at_eof && chunk.last() != Some(&b'\n');
        let mut batch: Vec<NumberedLine> =
            Vec::with_capacity(LINES_PER_BATCH.min(chunk.len() / 16 + 1));
        let mut line = first_line;
        let mut start = 0;
        while start < chunk.len() {
            let (raw, next) = match memchr::memchr(b'\n', &chunk[start..]) {
                Some(i) => (&chunk[start..start + i], start + i + 1),
                None => (&chunk[start..], chunk.len()),
            };
            let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
            if !is_blank(raw) {
                batch.push((line, raw, truncated_tail && next == chunk.len()));
                if batch.len() == LINES_PER_BATCH {
                    parse(&batch)?;
                    batch.clear();
                }
            }
            line += 1;
            start = next;
        }
        if !batch.is_empty() {
            parse(&batch)?;
        }
        Ok(line)
    }

    /// The line over the limit, if it is.
    fn too_long(&self, raw: &[u8]) -> Option<String> {
        (raw.len() as u64 > self.max_line_bytes)
            .then(|| too_long(raw.len() as u64, self.max_line_bytes))
    }

    /// Parses OTLP or Zipkin lines in parallel and keeps their spans for [`push_spans`]:
    /// the operation and parent of a span may depend on spans later in the input.
    fn parse_span_chunk(
        &self,
        chunk: &[u8],
        at_eof: bool,
        first_line: u64,
        out: &mut Ingested,
    ) -> Result<u64> {
        // Marks the input as holding spans, so that push_spans runs even if none was
        // readable.
        out.span_stats.get_or_insert_with(Default::default);
        type Mapped = Vec<Result<(spans::MappedSpan, Option<String>), String>>;
        self.batches(chunk, at_eof, first_line, |batch| {
            let parsed: Vec<Result<Mapped, String>> = batch
                .par_iter()
                .map(|&(line, raw, unterminated)| {
                    if let Some(why) = self.too_long(raw) {
                        return Err(why);
                    }
                    let Ok(text) = std::str::from_utf8(raw) else {
                        return Err("not valid UTF-8: spans must be UTF-8 JSON".to_string());
                    };
                    let read = match self.format {
                        InputFormat::Otlp => otlp::parse(text, unterminated),
                        _ => zipkin::parse(text, unterminated),
                    };
                    let source = SourceRef {
                        file: self.file,
                        line: u32::try_from(line).unwrap_or(u32::MAX),
                    };
                    read.map(|results| {
                        results
                            .into_iter()
                            .enumerate()
                            .map(|(n, r)| {
                                let index = n as u32 + 1;
                                match r {
                                    Ok(span) => Ok(spans::map_span(
                                        span,
                                        index,
                                        source,
                                        &self.config.spans,
                                        self.hops,
                                    )),
                                    Err(e) => Err(format!(
                                        "{} {}",
                                        spans::label(index, e.id.as_deref()),
                                        e.message
                                    )),
                                }
                            })
                            .collect()
                    })
                })
                .collect();
            for (&(line, _, _), result) in batch.iter().zip(parsed) {
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
                    out.bad_line(self.name, line, message, self.config.bad_input)?;
                }
            }
            Ok(())
        })
    }

    /// Parses attempt-event lines (JSON Lines or logfmt) in parallel and adds them.
    fn parse_chunk(
        &self,
        chunk: &[u8],
        at_eof: bool,
        first_line: u64,
        out: &mut Ingested,
    ) -> Result<u64> {
        self.batches(chunk, at_eof, first_line, |batch| {
            let parsed: Vec<Result<CheckedLine, String>> = batch
                .par_iter()
                .map(|&(_, raw, unterminated)| match self.too_long(raw) {
                    Some(why) => Err(why),
                    None => parse_line(raw, self.format, self.hops, unterminated),
                })
                .collect();
            for (&(line, _, _), result) in batch.iter().zip(parsed) {
                out.lines_read += 1;
                match result {
                    Ok(checked) => {
                        let source = SourceRef {
                            file: self.file,
                            line: u32::try_from(line).unwrap_or(u32::MAX),
                        };
                        out.push(source, checked);
                    }
                    Err(message) => {
                        out.bad_line(self.name, line, message, self.config.bad_input)?
                    }
                }
            }
            Ok(())
        })
    }
}

/// Resolves every span read (operation, test run, parent: see [`spans::resolve`]) and adds
/// the attempts as events.
fn push_spans(config: &InputConfig, out: &mut Ingested) -> Result<()> {
    let resolved = spans::resolve(std::mem::take(&mut out.spans), &config.spans);
    let problems: Vec<InputIssue> = resolved
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
    out.issues.extend(problems);
    let unreadable = out.span_stats.as_ref().map_or(0, |s| s.spans);
    let mut stats = resolved.stats;
    stats.spans += unreadable;
    out.span_stats = Some(stats);
    for (source, line) in resolved.lines {
        out.push(source, line);
    }
    Ok(())
}

/// The validated line, or what is wrong with it; `raw` is not blank.
fn parse_line<'a>(
    raw: &'a [u8],
    format: InputFormat,
    hops: &HopOrder,
    unterminated_last: bool,
) -> Result<CheckedLine<'a>, String> {
    let Ok(text) = std::str::from_utf8(raw) else {
        return Err("not valid UTF-8: attempt events must be UTF-8 text".into());
    };
    let fields = match format {
        InputFormat::Logfmt => logfmt::parse(text),
        _ => jsonl::parse(text, unterminated_last),
    };
    fields.and_then(|f| f.check(hops))
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
            max_line_bytes: None,
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

    /// Fuzz target (see `crate::fuzz`): no input makes reading, span resolution or the
    /// analysis panic; bad input is bad lines.
    #[test]
    fn fuzz_ingest() {
        let rules = crate::config::Rules::new(HopOrder::default());
        let config = InputConfig {
            paths: vec![],
            format: InputFormat::Auto,
            bad_input: BadInputPolicy::Report,
            progress: false,
            max_line_bytes: Some(4096),
            spans: crate::config::SpanMapping::new(&HopOrder::default(), vec![false; 4]),
        };
        crate::fuzz::run("ingest", |bytes| {
            let mut out = Ingested::default();
            out.files.push("fuzz".into());
            read_one(
                Box::new(std::io::Cursor::new(bytes.to_vec())),
                0,
                "fuzz",
                &config,
                &rules.hops,
                &mut Progress::hidden(),
                &mut out,
            )
            .expect("bad input is reported, not an error");
            if out.span_stats.is_some() {
                push_spans(&config, &mut out).expect("not under --strict");
            }
            let keep = crate::analysis::Keep::Worst(3);
            crate::analysis::analyze(out, &rules, BadInputPolicy::Report, &keep)
                .expect("the analysis of what was read");
        });
    }

    /// Fuzz target (see `crate::fuzz`): a corrupt Parquet file is an error, never a panic
    /// out of the reader's boundary.
    #[test]
    fn fuzz_parquet() {
        let hops = HopOrder::default();
        let config = InputConfig {
            paths: vec![],
            format: InputFormat::Auto,
            bad_input: BadInputPolicy::Report,
            progress: false,
            max_line_bytes: None,
            spans: crate::config::SpanMapping::new(&hops, vec![false; 4]),
        };
        crate::fuzz::run("parquet", |bytes| {
            let mut out = Ingested::default();
            out.files.push("fuzz.parquet".into());
            let _ = guarded(|| {
                parquet::read(
                    source::ParquetData::Memory(std::io::Cursor::new(bytes.to_vec())),
                    &source::Input::named("fuzz.parquet"),
                    0,
                    &config,
                    &hops,
                    &mut Progress::hidden(),
                    &mut out,
                )
            });
        });
    }
}

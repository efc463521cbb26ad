//! The partial file format (docs/scale.md, "The partial format"): one JSON object per line,
//! so that a partial survives pipes, `cat`, compression and line-oriented tools. The first
//! line is the header (`{"partial":{…}}`: format name and version, the rules, the trace
//! end, the input statistics); then one line per kept operation, deferred operation, chunk
//! of attempt rows, retry start and row, each tagged by its kind; then `{"end":{…}}` with
//! the number of lines of each kind, so that a truncated partial is refused, not merged.
//! Several partials may follow each other in one stream (`cat a b | merge -`).
//!
//! Times are JSON numbers. The few that serde_json's default reader would not read back to
//! the same bits (some 17-digit decimals) are written as strings of the same digits: a
//! merge must see exactly the numbers the partition computed.

use std::io::{BufRead, Read, Write};

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::{
    InputPart, Kept, OpAttempts, Partial, Retries, Row, Rows, RulesFingerprint, Share,
    SourceFingerprint,
};
use crate::analysis::{FinalOutcome, Pending, TraceEnd};
use crate::burst::RetryPoint;
use crate::classify::{Class, Finding, FindingKind, FindingLabel};
use crate::codec::{put_varint, unzigzag, varint_at, whole_ms, zigzag};
use crate::ingest::source::Input;
use crate::model::{is_time, Attempt, KeyRef, Millis, OperationKey, Outcome, SourceRef, Sym};
use crate::rules::HopOrder;
use crate::stats::AttemptStats;

/// The format's name, in every header.
pub const FORMAT_NAME: &str = "attempt-funnel-partial";

/// The format's version: bumped on any change a merge of another version would misread.
/// A merge refuses partials of any other version. Version 2 added the partition, the
/// source fingerprint and rule v3's settings to the header: a version 1 partial cannot say
/// which partition it is, so it is refused, not guessed.
pub const FORMAT_VERSION: u32 = 2;

/// Times as JSON numbers that read back exactly (see the module's note).
pub mod exact {
    use serde::{Deserialize, Deserializer, Serializer};

    /// Whether serde_json reads the shortest decimal of `v` back to `v` itself.
    fn reads_back(v: f64) -> bool {
        let text = serde_json::to_string(&v).unwrap_or_default();
        serde_json::from_str::<f64>(&text).is_ok_and(|r| r.to_bits() == v.to_bits())
    }

    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        if !v.is_finite() || reads_back(*v) {
            s.serialize_f64(*v)
        } else {
            s.collect_str(v)
        }
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Number {
        Number(f64),
        Text(String),
    }

    fn value(n: Number) -> Result<f64, String> {
        match n {
            Number::Number(v) => Ok(v),
            Number::Text(t) => t
                .parse::<f64>()
                .map_err(|_| format!("\"{t}\" is not a number")),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        value(Number::deserialize(d)?).map_err(serde::de::Error::custom)
    }

    /// The same for an optional time (`null` when absent).
    pub mod option {
        use super::*;

        pub fn serialize<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
            match v {
                Some(v) => super::serialize(v, s),
                None => s.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
            Option::<Number>::deserialize(d)?
                .map(value)
                .transpose()
                .map_err(serde::de::Error::custom)
        }
    }
}

/// One line of a partial.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Line {
    Partial(Box<Header>),
    Kept(WireKept),
    Deferred(WireOperation),
    /// The partition's attempt statistics (src/stats.rs): exactly one line.
    Stats(Box<AttemptStats>),
    Retry(WireRetry),
    Row(WireRow),
    End(Counts),
}

#[derive(Serialize, Deserialize)]
struct Header {
    format: String,
    version: u32,
    /// `K/N` (`--partition K/N`), or `all`.
    partition: Share,
    source: SourceFingerprint,
    rules: RulesFingerprint,
    #[serde(with = "exact")]
    trace_end_ms: Millis,
    /// `global`: the end of all the input; `local`: of this partition's input only.
    trace_end: TraceEndKind,
    input: InputPart,
}

#[derive(Serialize, Deserialize, Clone, Copy, PartialEq)]
#[serde(rename_all = "snake_case")]
enum TraceEndKind {
    Global,
    Local,
}

/// How many lines of each kind the partial holds.
#[derive(Serialize, Deserialize, Default, PartialEq)]
struct Counts {
    kept: u64,
    deferred: u64,
    /// Lines of attempt statistics: always 1.
    stats: u64,
    retries: u64,
    rows: u64,
}

impl Counts {
    /// `3 rows, 2 retry starts, …` for messages.
    fn describe(&self) -> String {
        use crate::words::counted;
        [
            counted(self.rows, "row", "rows"),
            counted(self.retries, "retry start", "retry starts"),
            counted(self.kept, "kept operation", "kept operations"),
            counted(self.deferred, "deferred operation", "deferred operations"),
            counted(self.stats, "line of statistics", "lines of statistics"),
        ]
        .join(", ")
    }
}

#[derive(Serialize, Deserialize)]
struct WireRow {
    test_run_id: Option<String>,
    operation_id: String,
    class: Class,
    class_in_burst: Class,
    first_multiplying_hop: Option<String>,
    /// Attempts per hop, in the header's hop order.
    funnel: Vec<u32>,
    /// Every finding but the burst ones, `kind@hop`.
    findings: Vec<FindingLabel>,
    #[serde(with = "exact")]
    first_start_ms: Millis,
    #[serde(with = "exact::option")]
    last_finish_ms: Option<Millis>,
    #[serde(with = "exact")]
    overlap_ms: Millis,
    final_outcome: FinalOutcome,
}

/// `[hop index, start_ms, row position, delay_ms or null]`.
#[derive(Serialize, Deserialize)]
struct WireRetry(
    u16,
    #[serde(with = "exact")] Millis,
    u32,
    #[serde(with = "exact::option")] Option<Millis>,
);

#[derive(Serialize, Deserialize)]
struct WireKept {
    row: u32,
    worst: bool,
    asked: bool,
    #[serde(flatten)]
    operation: WireOperation,
}

#[derive(Serialize, Deserialize)]
struct WireOperation {
    test_run_id: Option<String>,
    operation_id: String,
    attempts: Vec<WireAttempt>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

#[derive(Serialize, Deserialize)]
struct WireAttempt {
    hop: u16,
    #[serde(with = "exact")]
    start_ms: Millis,
    #[serde(
        default,
        with = "exact::option",
        skip_serializing_if = "Option::is_none"
    )]
    finish_ms: Option<Millis>,
    #[serde(default, skip_serializing_if = "is_false")]
    start_inferred: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    attempt: Option<u32>,
    /// As logged: `ok`, `timeout`, `503`, …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    outcome: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    target: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    message_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    delivery: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    span_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    parent_id: Option<String>,
    #[serde(
        default,
        with = "exact::option",
        skip_serializing_if = "Option::is_none"
    )]
    delay_ms: Option<Millis>,
    #[serde(
        default,
        with = "exact::option",
        skip_serializing_if = "Option::is_none"
    )]
    retry_after_ms: Option<Millis>,
    #[serde(default, skip_serializing_if = "is_false")]
    effect: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    hidden: bool,
    /// Its times are its request's bounds, not its own (docs/input.md).
    #[serde(default, skip_serializing_if = "is_false")]
    untimed: bool,
}

fn wire_operation(op: &OpAttempts) -> WireOperation {
    let text = |s: Option<Sym>| op.text(s).map(str::to_string);
    WireOperation {
        test_run_id: op.key.test_run_id.as_deref().map(str::to_string),
        operation_id: op.key.operation_id.to_string(),
        attempts: op
            .attempts
            .iter()
            .map(|a| WireAttempt {
                hop: a.hop,
                start_ms: a.start_ms,
                finish_ms: a.finish_ms,
                start_inferred: a.start_inferred,
                attempt: a.attempt,
                outcome: a.outcome.map(|o| o.to_string()),
                target: text(a.target),
                message_id: text(a.message_id),
                delivery: a.delivery,
                span_id: text(a.span_id),
                parent_id: text(a.parent_id),
                delay_ms: a.delay_ms,
                retry_after_ms: a.retry_after_ms,
                effect: a.effect,
                hidden: a.hidden,
                untimed: a.untimed,
            })
            .collect(),
    }
}

fn wire_row(row: &Row, hops: &HopOrder) -> WireRow {
    let p = &row.pending;
    WireRow {
        test_run_id: row.key.test_run_id.as_deref().map(str::to_string),
        operation_id: row.key.operation_id.to_string(),
        class: p.class_without_burst,
        class_in_burst: p.class_in_burst,
        first_multiplying_hop: p.first_multiplying_hop.map(|h| hops.name(h).to_string()),
        funnel: p.funnel.clone(),
        findings: p.findings.iter().map(|f| f.label(hops)).collect(),
        first_start_ms: p.first_start_ms,
        last_finish_ms: p.last_finish_ms,
        overlap_ms: p.overlap_ms,
        final_outcome: p.final_outcome,
    }
}

/// The largest buffer a spill file is read through.
pub const READ_BUFFER_MAX: usize = 1 << 20;

/// The buffers of all the files a merge reads at once: spilled runs make more, smaller
/// partitions than they did (see `ingest::spill::PARTITION_SHARES`), and a buffer of
/// [`READ_BUFFER_MAX`] for each would grow with the input (200 files at 10 M operations,
/// 600 at 30 M).
pub const MERGE_READ_BYTES: usize = 64 << 20;

/// The buffer of each of `files` read at once: a share of [`MERGE_READ_BYTES`], at least
/// 16 KiB (a read per 16 KiB is still cheap next to decoding them), at most
/// [`READ_BUFFER_MAX`].
pub fn read_buffer(files: usize) -> usize {
    (MERGE_READ_BYTES / files.max(1)).clamp(16 << 10, READ_BUFFER_MAX)
}

/// A partition's rows set aside in a temporary file while the other partitions of a
/// spilled run are analysed, in key order, read back by the merge (so that a run holds the
/// rows of no partition in memory). The file lives and dies within one run, so its
/// encoding is a private binary one ([`RowCodec`]), not the partial format's JSON: reading
/// JSON rows back was most of a spilled merge's time.
#[derive(Debug, Clone)]
pub struct SpilledRows {
    path: std::path::PathBuf,
    pub count: u32,
    hops: usize,
}

impl SpilledRows {
    /// Writes `rows`, each a key and its row, to a new file `path`.
    pub fn write<'r>(
        rows: impl IntoIterator<Item = (KeyRef<'r>, &'r Pending)>,
        hops: &HopOrder,
        path: &std::path::Path,
    ) -> Result<SpilledRows> {
        let file = std::fs::File::create(path)
            .with_context(|| format!("could not create the spill file '{}'", path.display()))?;
        let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
        let (mut head, mut record) = (Vec::new(), Vec::new());
        let mut count = 0u32;
        for (key, pending) in rows {
            RowCodec::put(&mut head, &mut record, key, pending);
            out.write_all(&head)
                .and_then(|()| out.write_all(&record))
                .with_context(|| format!("could not write the spill file '{}'", path.display()))?;
            count += 1;
        }
        out.flush()
            .with_context(|| format!("could not write the spill file '{}'", path.display()))?;
        Ok(SpilledRows {
            path: path.to_path_buf(),
            count,
            hops: hops.len(),
        })
    }

    /// The rows, in order, read `buffer_bytes` at a time (at most [`READ_BUFFER_MAX`]:
    /// a merge of many shares [`MERGE_READ_BYTES`] out, see [`read_buffer`]).
    pub fn read(&self, buffer_bytes: usize) -> Result<impl Iterator<Item = Result<Row>>> {
        let file = std::fs::File::open(&self.path)
            .with_context(|| format!("could not open the spill file '{}'", self.path.display()))?;
        let mut input = std::io::BufReader::with_capacity(buffer_bytes.min(READ_BUFFER_MAX), file);
        let (hops, path) = (self.hops, self.path.clone());
        let mut record = Vec::new();
        Ok((0..self.count).map(move |_| {
            RowCodec::get(&mut input, &mut record, hops).with_context(|| {
                format!(
                    "the spill file '{}' is damaged or changed while it was used",
                    path.display()
                )
            })
        }))
    }
}

/// A spilled row's bytes: its length (varint), then flags (run ID, first multiplying hop,
/// last finish present and how, overlap present), the key's strings (their lengths as
/// varints, then their bytes), both classes, the first multiplying hop (varint), the funnel
/// (a varint per hop), the findings (count, then kind and hop each), the first start as
/// f64 bits, the last finish (the difference from the first start as a zigzag varint when
/// both are whole milliseconds, else f64 bits), the overlap (f64 bits, left out when it
/// is `+0.0`), and the final outcome. Little-endian; every time keeps its exact bits.
///
/// Varints and differences because lengths and counts are nearly all small: fixed-width
/// numbers would about double a row, and a spilled run writes its rows through the page
/// cache (or to the disk) and reads them back once.
struct RowCodec;

const HAS_RUN: u8 = 1;
const HAS_FIRST_MULTIPLYING: u8 = 1 << 1;
const HAS_LAST_FINISH: u8 = 1 << 2;
/// With [`HAS_LAST_FINISH`]: written as the difference from the first start.
const LAST_FINISH_AFTER: u8 = 1 << 3;
/// The overlap is not `+0.0` (most operations overlap nothing): its bits follow.
const HAS_OVERLAP: u8 = 1 << 4;
const FINAL_OUTCOMES: [FinalOutcome; 3] = [
    FinalOutcome::Success,
    FinalOutcome::Failure,
    FinalOutcome::Unknown,
];

impl RowCodec {
    /// The most bytes a row's length takes as a varint (a u32).
    const LEN_MAX: usize = 5;

    /// Encodes the row of `key` into `out` and its length into `head` (both cleared first):
    /// `head` is written before `out`.
    fn put(head: &mut Vec<u8>, out: &mut Vec<u8>, (run, id): KeyRef, p: &Pending) {
        out.clear();
        let first_start = whole_ms(p.first_start_ms);
        let after = match (first_start, p.last_finish_ms.and_then(whole_ms)) {
            (Some(from), Some(to)) => Some(to.wrapping_sub(from)),
            _ => None,
        };
        let flags = [
            (run.is_some(), HAS_RUN),
            (p.first_multiplying_hop.is_some(), HAS_FIRST_MULTIPLYING),
            (p.last_finish_ms.is_some(), HAS_LAST_FINISH),
            (after.is_some(), LAST_FINISH_AFTER),
            (p.overlap_ms.to_bits() != 0, HAS_OVERLAP),
        ]
        .iter()
        .filter(|(present, _)| *present)
        .fold(0, |flags, (_, bit)| flags | bit);
        out.push(flags);
        for text in run.into_iter().chain([id]) {
            put_varint(out, text.len() as u64);
        }
        for text in run.into_iter().chain([id]) {
            out.extend_from_slice(text.as_bytes());
        }
        out.push(p.class_without_burst.index() as u8);
        out.push(p.class_in_burst.index() as u8);
        if let Some(hop) = p.first_multiplying_hop {
            put_varint(out, u64::from(hop));
        }
        for &n in &p.funnel {
            put_varint(out, u64::from(n));
        }
        put_varint(out, p.findings.len() as u64);
        for f in &p.findings {
            out.push(f.kind.index() as u8);
            put_varint(out, u64::from(f.hop));
        }
        out.extend_from_slice(&p.first_start_ms.to_le_bytes());
        match (after, p.last_finish_ms) {
            (Some(after), _) => put_varint(out, zigzag(after)),
            (None, Some(t)) => out.extend_from_slice(&t.to_le_bytes()),
            (None, None) => {}
        }
        if flags & HAS_OVERLAP != 0 {
            out.extend_from_slice(&p.overlap_ms.to_le_bytes());
        }
        let outcome = FINAL_OUTCOMES.iter().position(|&o| o == p.final_outcome);
        out.push(outcome.expect("every final outcome is listed") as u8);
        head.clear();
        put_varint(head, out.len() as u64);
    }

    /// Reads the next row of a funnel of `hops` hops from `input`: decoded where the
    /// reader's buffer holds it whole (all but the rows of very long IDs), else through
    /// `record`.
    fn get(input: &mut impl std::io::BufRead, record: &mut Vec<u8>, hops: usize) -> Result<Row> {
        let len = Self::len(input)?;
        let buffered = input.fill_buf()?;
        if let Some(bytes) = buffered.get(..len) {
            let row = RowCodec::decode(bytes, hops);
            input.consume(len);
            return row;
        }
        // Read through `take`: a damaged length allocates no more than the file holds.
        record.clear();
        std::io::Read::read_to_end(&mut std::io::Read::take(&mut *input, len as u64), record)?;
        if record.len() != len {
            bail!("a row cut short");
        }
        RowCodec::decode(record, hops)
    }

    /// A row's length: from the reader's buffer, or a byte at a time where it lies across
    /// the buffer's end.
    fn len(input: &mut impl std::io::BufRead) -> Result<usize> {
        let mut at = 0;
        if let Some(n) = varint_at(input.fill_buf()?, &mut at).filter(|_| at <= Self::LEN_MAX) {
            input.consume(at);
            return usize::try_from(n).map_err(|_| anyhow!("a bad length"));
        }
        let mut bytes = [0u8; Self::LEN_MAX];
        for k in 0..Self::LEN_MAX {
            input.read_exact(&mut bytes[k..=k])?;
            if bytes[k] & 0x80 == 0 {
                let n = varint_at(&bytes[..=k], &mut 0).ok_or_else(|| anyhow!("a bad length"))?;
                return usize::try_from(n).map_err(|_| anyhow!("a bad length"));
            }
        }
        bail!("a bad length")
    }

    /// Decodes a row of a funnel of `hops` hops from its bytes.
    fn decode(record: &[u8], hops: usize) -> Result<Row> {
        let mut r = RowBytes { record, at: 0 };
        let flags = r.byte()?;
        let run_len = if flags & HAS_RUN != 0 {
            Some(r.number(u32::MAX.into())? as usize)
        } else {
            None
        };
        let id_len = r.number(u32::MAX.into())? as usize;
        // Both strings checked as one: at keys' lengths a check is mostly its fixed cost. Each
        // is valid when the split between them falls between characters.
        let key = std::str::from_utf8(r.take(run_len.unwrap_or(0).saturating_add(id_len))?)?;
        let split = run_len.unwrap_or(0);
        if !key.is_char_boundary(split) {
            bail!("a key split inside a character");
        }
        let (run, id) = key.split_at(split);
        let test_run_id = run_len.map(|_| Box::from(run));
        let operation_id = Box::from(id);
        let mut class = || {
            Class::ALL
                .get(usize::from(r.byte()?))
                .copied()
                .ok_or_else(|| anyhow!("an unknown class"))
        };
        let class_without_burst = class()?;
        let class_in_burst = class()?;
        let first_multiplying_hop = if flags & HAS_FIRST_MULTIPLYING != 0 {
            Some(r.number(u16::MAX.into())? as u16)
        } else {
            None
        };
        // Pushed in loops: collected from iterators of `Result`s, each number would go
        // through an adapter, on the thread the merge waits for.
        let mut funnel = Vec::with_capacity(hops);
        for _ in 0..hops {
            funnel.push(r.number(u32::MAX.into())? as u32);
        }
        let count = r.number(u32::MAX.into())? as usize;
        // A damaged count reserves no more than the row's bytes hold (two a finding).
        let mut findings = Vec::with_capacity(count.min(record.len() / 2));
        for _ in 0..count {
            let kind = FindingKind::ALL
                .get(usize::from(r.byte()?))
                .copied()
                .ok_or_else(|| anyhow!("an unknown finding"))?;
            let hop = r.number(u16::MAX.into())? as u16;
            findings.push(Finding { kind, hop });
        }
        let first_start_ms = r.f64()?;
        let last_finish_ms = match (flags & HAS_LAST_FINISH != 0, flags & LAST_FINISH_AFTER != 0) {
            (false, _) => None,
            (true, false) => Some(r.f64()?),
            (true, true) => {
                let from = whole_ms(first_start_ms).ok_or_else(|| anyhow!("a bad finish"))?;
                Some(from.wrapping_add(unzigzag(r.number(u64::MAX)?)) as f64)
            }
        };
        let overlap_ms = if flags & HAS_OVERLAP != 0 {
            r.f64()?
        } else {
            0.0
        };
        let final_outcome = *FINAL_OUTCOMES
            .get(usize::from(r.byte()?))
            .ok_or_else(|| anyhow!("an unknown final outcome"))?;
        Ok(Row {
            key: OperationKey {
                test_run_id,
                operation_id,
            },
            pending: Pending {
                class_without_burst,
                class_in_burst,
                first_multiplying_hop,
                funnel,
                findings,
                first_start_ms,
                last_finish_ms,
                overlap_ms,
                final_outcome,
            },
        })
    }
}

/// A spilled row's bytes, read from the front.
struct RowBytes<'a> {
    record: &'a [u8],
    at: usize,
}

impl<'a> RowBytes<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let bytes = self
            .record
            .get(self.at..self.at.saturating_add(n))
            .ok_or_else(|| anyhow!("a row cut short"))?;
        self.at += n;
        Ok(bytes)
    }

    #[inline(always)]
    fn byte(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn f64(&mut self) -> Result<f64> {
        Ok(f64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    /// A varint no larger than `max`. Always inline: a dozen a row.
    #[inline(always)]
    fn number(&mut self, max: u64) -> Result<u64> {
        varint_at(self.record, &mut self.at)
            .filter(|&n| n <= max)
            .ok_or_else(|| anyhow!("a number cut short or out of range"))
    }
}

/// A partition's retry starts set aside by a spilled run: one file per hop, each point
/// as its start, its row position and its delay (absent or not), in binary, so that the
/// merge holds the retry starts of one hop at a time.
#[derive(Debug, Clone)]
pub struct SpilledRetries {
    /// Per hop: the file and how many points it holds.
    hops: Vec<(std::path::PathBuf, u64)>,
}

/// Bytes of a spilled retry start: start (f64), row (u32), delay present (u8), delay (f64).
const RETRY_BYTES: usize = 8 + 4 + 1 + 8;

impl SpilledRetries {
    /// Writes `points` to one new file per hop, named after `stem`.
    pub fn write(
        points: &[(u16, RetryPoint)],
        hops: usize,
        stem: &std::path::Path,
    ) -> Result<SpilledRetries> {
        let mut files = Vec::with_capacity(hops);
        for hop in 0..hops {
            let path = stem.with_extension(hop.to_string());
            let file = std::fs::File::create(&path)
                .with_context(|| format!("could not create the spill file '{}'", path.display()))?;
            let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
            // In the order the burst search reads them, so that the merge streams each
            // file instead of holding and sorting a whole hop's.
            let mut count = 0;
            for p in &super::sorted_at_hop(points, hop as u16) {
                let mut record = [0u8; RETRY_BYTES];
                record[..8].copy_from_slice(&p.start_ms.to_le_bytes());
                record[8..12].copy_from_slice(&p.op.to_le_bytes());
                if let Some(delay) = p.delay_ms() {
                    record[12] = 1;
                    record[13..].copy_from_slice(&delay.to_le_bytes());
                }
                out.write_all(&record)?;
                count += 1;
            }
            out.flush()
                .with_context(|| format!("could not write the spill file '{}'", path.display()))?;
            files.push((path, count));
        }
        Ok(SpilledRetries { hops: files })
    }

    pub fn len(&self) -> usize {
        self.hops.iter().map(|(_, n)| *n as usize).sum()
    }

    /// How many retry starts are at `hop`.
    pub fn count_at_hop(&self, hop: u16) -> usize {
        self.hops
            .get(usize::from(hop))
            .map_or(0, |(_, n)| *n as usize)
    }

    /// The retry starts at `hop`, in the order written ([`RetryPoint::order`]), read
    /// `buffer_bytes` at a time (see [`SpilledRows::read`]).
    pub fn read_at(
        &self,
        hop: u16,
        buffer_bytes: usize,
    ) -> Result<impl Iterator<Item = Result<RetryPoint>> + Send> {
        // A hop without a file (none of its points here) reads as empty.
        let (path, count) = self.hops.get(usize::from(hop)).cloned().unwrap_or_default();
        let changed = move |path: &std::path::Path| {
            anyhow!(
                "the spill file '{}' changed while it was used",
                path.display()
            )
        };
        let mut input = None;
        if count > 0 {
            let unreadable = || format!("could not read the spill file '{}'", path.display());
            let file = std::fs::File::open(&path).with_context(unreadable)?;
            let length = file.metadata().with_context(unreadable)?.len();
            if length != count * RETRY_BYTES as u64 {
                return Err(changed(&path));
            }
            input = Some(std::io::BufReader::with_capacity(
                buffer_bytes.min(READ_BUFFER_MAX),
                file,
            ));
        }
        let f64_at =
            |r: &[u8], at: usize| f64::from_le_bytes(r[at..at + 8].try_into().expect("8 bytes"));
        let mut last: Option<RetryPoint> = None;
        Ok((0..count).map(move |_| {
            let mut record = [0u8; RETRY_BYTES];
            let input = input.as_mut().expect("opened when it holds points");
            input.read_exact(&mut record).map_err(|_| changed(&path))?;
            let point = RetryPoint::new(
                f64_at(&record, 0),
                u32::from_le_bytes(record[8..12].try_into().expect("4 bytes")),
                (record[12] == 1).then(|| f64_at(&record, 13)),
            );
            // Out of order, the search would answer wrongly without a word.
            if last.is_some_and(|l| l.order(&point).is_gt()) {
                return Err(changed(&path));
            }
            last = Some(point);
            Ok(point)
        }))
    }
}

/// Writes `partial` in the partial format.
pub fn write(partial: &Partial, out: &mut impl Write) -> Result<()> {
    let mut line = |l: &Line| -> Result<()> {
        serde_json::to_writer(&mut *out, l)?;
        out.write_all(b"\n")?;
        Ok(())
    };
    let (trace_end, trace_end_ms) = match partial.trace_end {
        TraceEnd::Global(ms) => (TraceEndKind::Global, ms),
        TraceEnd::Local(ms) => (TraceEndKind::Local, ms),
    };
    line(&Line::Partial(Box::new(Header {
        format: FORMAT_NAME.to_string(),
        version: FORMAT_VERSION,
        partition: partial.share,
        source: partial.source,
        rules: partial.rules.clone(),
        trace_end_ms,
        trace_end,
        input: partial.input.clone(),
    })))?;
    let hops = HopOrder::new(partial.rules.hops.clone())?;
    for k in &partial.kept {
        line(&Line::Kept(WireKept {
            row: k.row,
            worst: k.worst,
            asked: k.asked,
            operation: wire_operation(&k.attempts),
        }))?;
    }
    for d in &partial.deferred {
        line(&Line::Deferred(wire_operation(d)))?;
    }
    line(&Line::Stats(Box::new(partial.stats.clone())))?;
    // Each hop's in the order the merge's burst search reads them.
    for hop in 0..hops.len() as u16 {
        for r in partial.retries.at_hop_in_order(hop, 0, READ_BUFFER_MAX)? {
            let r = r?;
            line(&Line::Retry(WireRetry(hop, r.start_ms, r.op, r.delay_ms())))?;
        }
    }
    let rows: Box<dyn Iterator<Item = Result<Row>>> = match &partial.rows {
        Rows::Memory(rows) => Box::new(rows.iter().cloned().map(Ok)),
        Rows::File(file) => Box::new(rows_of(file)?),
        Rows::Spilled(spilled) => Box::new(spilled.read(READ_BUFFER_MAX)?),
    };
    for row in rows {
        line(&Line::Row(wire_row(&row?, &hops)))?;
    }
    line(&Line::End(Counts {
        kept: partial.kept.len() as u64,
        deferred: partial.deferred.len() as u64,
        stats: 1,
        retries: partial.retries.len() as u64,
        rows: partial.rows.len() as u64,
    }))?;
    out.flush()?;
    Ok(())
}

/// Reads every partial in a stream (one, or several one after the other). `name`: how
/// messages name the stream. `file`: the input it is, when it can be read again (a regular
/// file): its rows are then checked and left there, for the merge to stream them out.
pub fn read(name: &str, input: impl BufRead, file: Option<&Input>) -> Result<Vec<Partial>> {
    let mut out = Vec::new();
    let mut open: Option<Reading> = None;
    let mut number = 0u64;
    for line in input.lines() {
        number += 1;
        let line = line.with_context(|| format!("could not read '{name}'"))?;
        if line.trim().is_empty() {
            continue;
        }
        let at = || format!("{name}:{number}");
        match open.as_mut() {
            None => {
                let place = file.map(|f| (f.clone(), out.len()));
                open = Some(Reading::start(&line, name, number, place).with_context(at)?)
            }
            Some(reading) => {
                let parsed: Line = serde_json::from_str(&line).map_err(|e| {
                    anyhow!(
                        "{}: not a line of a partial ({e}); was the partial cut or edited?",
                        at()
                    )
                })?;
                if let Line::End(counts) = parsed {
                    let reading = open.take().expect("a partial is open");
                    out.push(reading.finish(counts).with_context(at)?);
                } else {
                    reading.add(parsed).with_context(at)?;
                }
            }
        }
    }
    if open.is_some() {
        bail!("'{name}' ends before its partial does (no \"end\" line): the partial was cut short; make it again");
    }
    if out.is_empty() {
        bail!("'{name}' holds no partial: give files made with attempt-funnel analyze --format partial");
    }
    Ok(out)
}

/// A partial being read.
struct Reading {
    partial: Partial,
    hops: HopOrder,
    counts: Counts,
    /// Kept operations until their rows are read: (position, worst, asked, attempts).
    kept: Vec<(u32, bool, bool, OpAttempts)>,
    /// The rows of kept operations, by position.
    kept_rows: std::collections::HashMap<u32, Row>,
    /// The rows, unless they are left in the file (`place`).
    rows: Vec<Row>,
    /// (hop, retry start), until the end line checks them.
    retries: Vec<(u16, RetryPoint)>,
    last_key: Option<OperationKey>,
    /// The file and which partial of it this is, when its rows are left there.
    place: Option<(Input, usize)>,
}

/// The rows of a partial left in its file.
#[derive(Debug, Clone)]
pub struct FileRows {
    input: Input,
    /// Which partial of the file (several may follow each other).
    index: usize,
    pub count: u32,
    hops: HopOrder,
}

/// The rows of a partial file, read again in order (their checks were made when it was
/// first read; a file that changed since is an error).
pub fn rows_of(file: &FileRows) -> Result<impl Iterator<Item = Result<Row>>> {
    let counter = crate::ingest::progress::Progress::new(false, None).counter();
    let reader = match crate::ingest::source::open(&file.input, &counter)? {
        crate::ingest::source::Content::Lines { text: reader, .. } => reader,
        crate::ingest::source::Content::Parquet(_) => {
            bail!("'{}' changed while it was merged", file.input.name)
        }
    };
    Ok(RowReader {
        lines: std::io::BufReader::with_capacity(1 << 20, reader).lines(),
        file: file.clone(),
        headers: 0,
        ours: false,
        read: 0,
        done: false,
    })
}

struct RowReader {
    lines: std::io::Lines<std::io::BufReader<Box<dyn std::io::Read + Send>>>,
    file: FileRows,
    /// Headers seen so far.
    headers: usize,
    /// Within the partial whose rows these are.
    ours: bool,
    read: u32,
    done: bool,
}

impl RowReader {
    /// The end of this partial's rows: all of them must have been read.
    fn end(&mut self) -> Option<Result<Row>> {
        self.done = true;
        (self.read != self.file.count).then(|| {
            Err(anyhow!(
                "'{}' changed while it was merged: {} rows read again, {} the first time",
                self.file.input.name,
                self.read,
                self.file.count
            ))
        })
    }
}

/// The kind of a partial's line, from its first key (without parsing the rest).
fn kind_of(line: &str) -> &str {
    let rest = line.trim_start().trim_start_matches('{').trim_start();
    let rest = rest.strip_prefix('"').unwrap_or(rest);
    &rest[..rest.find('"').unwrap_or(0)]
}

impl Iterator for RowReader {
    type Item = Result<Row>;

    fn next(&mut self) -> Option<Result<Row>> {
        while !self.done {
            let line = match self.lines.next() {
                None => return self.end(),
                Some(Err(e)) => {
                    self.done = true;
                    return Some(Err(e.into()));
                }
                Some(Ok(line)) => line,
            };
            match kind_of(&line) {
                "partial" => {
                    self.headers += 1;
                    self.ours = self.headers == self.file.index + 1;
                }
                "end" if self.ours => return self.end(),
                "row" if self.ours => {
                    self.read += 1;
                    let row = match serde_json::from_str::<Line>(&line) {
                        Ok(Line::Row(r)) => row_of(r, &self.file.hops),
                        _ => Err(anyhow!(
                            "'{}' changed while it was merged",
                            self.file.input.name
                        )),
                    };
                    return Some(row);
                }
                _ => {}
            }
        }
        None
    }
}

impl Reading {
    /// The header line: refused unless it is a partial of this version.
    fn start(
        line: &str,
        name: &str,
        number: u64,
        place: Option<(Input, usize)>,
    ) -> Result<Reading> {
        let value: serde_json::Value = serde_json::from_str(line).map_err(|_| {
            anyhow!("not a partial: its first line is not JSON (partials are made with attempt-funnel analyze --format partial)")
        })?;
        let header = value.get("partial").ok_or_else(|| {
            anyhow!("not a partial: its first line is not a partial's header (partials are made with attempt-funnel analyze --format partial)")
        })?;
        match header.get("format") {
            Some(serde_json::Value::String(f)) if f == FORMAT_NAME => {}
            Some(serde_json::Value::String(f)) => {
                bail!("not a partial: its header names the format \"{f}\", not \"{FORMAT_NAME}\"")
            }
            _ => bail!("not a partial: its header names no format (\"{FORMAT_NAME}\" expected)"),
        }
        let version = header.get("version").and_then(|v| v.as_u64());
        if version != Some(u64::from(FORMAT_VERSION)) {
            let shown = version.map_or("none".to_string(), |v| v.to_string());
            bail!("partial format version {shown}, but this attempt-funnel reads version {FORMAT_VERSION} only (version 1 partials do not record their partition): make every partial again with the attempt-funnel that merges them");
        }
        let header: Header = serde_path_to_error::deserialize(header.clone()).map_err(|e| {
            anyhow!(
                "the partial's header is not valid: {} is wrong: {}",
                e.path(),
                e.inner()
            )
        })?;
        let hops = HopOrder::new(header.rules.hops.clone())?;
        header
            .rules
            .rules()
            .context("the partial's header is not valid")?;
        time("the trace's end (trace_end_ms)", header.trace_end_ms)
            .context("the partial's header is not valid")?;
        let origin = if number == 1 {
            name.to_string()
        } else {
            format!("{name} (from line {number})")
        };
        Ok(Reading {
            partial: Partial {
                origin,
                share: header.partition,
                source: header.source,
                rules: header.rules,
                trace_end: match header.trace_end {
                    TraceEndKind::Global => TraceEnd::Global(header.trace_end_ms),
                    TraceEndKind::Local => TraceEnd::Local(header.trace_end_ms),
                },
                input: header.input,
                rows: Rows::Memory(Vec::new()),
                retries: Retries::Memory(Vec::new()),
                stats: AttemptStats::new(hops.len()),
                kept: Vec::new(),
                deferred: Vec::new(),
            },
            hops,
            counts: Counts::default(),
            kept: Vec::new(),
            kept_rows: std::collections::HashMap::new(),
            rows: Vec::new(),
            retries: Vec::new(),
            last_key: None,
            place,
        })
    }

    fn hop(&self, hop: u16) -> Result<u16> {
        if usize::from(hop) < self.hops.len() {
            Ok(hop)
        } else {
            bail!(
                "hop index {hop} is not one of the header's {} hops",
                self.hops.len()
            )
        }
    }

    fn add(&mut self, line: Line) -> Result<()> {
        let p = &mut self.partial;
        match line {
            Line::Partial(_) => bail!("a partial's header before the previous one ended"),
            Line::End(_) => unreachable!("handled by the caller"),
            Line::Kept(k) => {
                self.counts.kept += 1;
                let attempts = self.operation(k.operation)?;
                self.kept.push((k.row, k.worst, k.asked, attempts));
            }
            Line::Deferred(d) => {
                self.counts.deferred += 1;
                let op = self.operation(d)?;
                if let Some(last) = self.partial.deferred.last() {
                    if last.key >= op.key {
                        bail!("deferred operations out of key order: the partial was edited");
                    }
                }
                self.partial.deferred.push(op);
            }
            Line::Stats(stats) => {
                self.counts.stats += 1;
                if self.counts.stats > 1 {
                    bail!("a second line of attempt statistics: the partial was edited");
                }
                if stats.hop_count() != self.hops.len() {
                    bail!(
                        "attempt statistics of {} hops, but the header names {}",
                        stats.hop_count(),
                        self.hops.len()
                    );
                }
                p.stats = *stats;
            }
            Line::Retry(WireRetry(hop, start_ms, row, delay_ms)) => {
                self.counts.retries += 1;
                let hop = self.hop(hop)?;
                let start_ms = time("a retry start", start_ms)?;
                self.retries
                    .push((hop, RetryPoint::new(start_ms, row, delay_ms)));
            }
            Line::Row(r) => {
                let position = self.counts.rows as u32;
                self.counts.rows += 1;
                let row = row_of(r, &self.hops)?;
                if let Some(last) = &self.last_key {
                    if *last >= row.key {
                        bail!(
                            "rows out of key order ({} after {last}): the partial was edited",
                            row.key,
                        );
                    }
                }
                self.last_key = Some(row.key.clone());
                if self.kept.iter().any(|k| k.0 == position) {
                    self.kept_rows.insert(position, row.clone());
                }
                if self.place.is_none() {
                    self.rows.push(row);
                }
            }
        }
        Ok(())
    }

    fn operation(&self, w: WireOperation) -> Result<OpAttempts> {
        let mut strings: Vec<Box<str>> = Vec::new();
        let mut intern = |s: Option<String>| -> Option<Sym> {
            let s = s?;
            Some(match strings.iter().position(|t| **t == *s) {
                Some(i) => i as Sym,
                None => {
                    strings.push(s.into());
                    (strings.len() - 1) as Sym
                }
            })
        };
        let mut attempts = Vec::with_capacity(w.attempts.len());
        for a in w.attempts {
            let outcome = match a.outcome.as_deref() {
                Some(text) => Some(Outcome::parse(text).ok_or_else(|| {
                    anyhow!(
                        "an attempt's outcome \"{text}\" is not one of {}",
                        Outcome::EXPECTED
                    )
                })?),
                None => None,
            };
            attempts.push(Attempt {
                // Where the attempt was read is of no use after normalize, and not kept.
                source: SourceRef { file: 0, line: 0 },
                hop: self.hop(a.hop)?,
                attempt: a.attempt,
                start_ms: time("an attempt's start", a.start_ms)?,
                finish_ms: a
                    .finish_ms
                    .map(|ms| time("an attempt's finish", ms))
                    .transpose()?,
                start_inferred: a.start_inferred,
                outcome,
                target: intern(a.target),
                message_id: intern(a.message_id),
                delivery: a.delivery,
                span_id: intern(a.span_id),
                parent_id: intern(a.parent_id),
                delay_ms: a.delay_ms,
                retry_after_ms: a.retry_after_ms,
                effect: a.effect,
                hidden: a.hidden,
                untimed: a.untimed,
            });
        }
        if attempts.is_empty() {
            bail!("an operation kept without attempts");
        }
        Ok(OpAttempts {
            key: OperationKey {
                test_run_id: w.test_run_id.map(Into::into),
                operation_id: w.operation_id.into(),
            },
            attempts,
            strings,
        })
    }

    /// The end line: every line it counts was read, and every position points at a row.
    fn finish(mut self, counts: Counts) -> Result<Partial> {
        if counts != self.counts {
            bail!("the partial's end line counts {} but {} were read: the partial was cut or edited; make it again", counts.describe(), self.counts.describe());
        }
        let rows = counts.rows as u32;
        if self.retries.iter().any(|(_, r)| r.op >= rows) {
            bail!("a retry start points past the partial's rows");
        }
        self.partial.retries = Retries::Memory(std::mem::take(&mut self.retries));
        for (row, worst, asked, attempts) in std::mem::take(&mut self.kept) {
            let kept_row = self
                .kept_rows
                .remove(&row)
                .ok_or_else(|| anyhow!("a kept operation points past the partial's rows"))?;
            if kept_row.key != attempts.key {
                bail!("kept operation {} does not match its row", attempts.key);
            }
            self.partial.kept.push(Kept {
                row,
                kept_row,
                worst,
                asked,
                attempts,
            });
        }
        self.partial.rows = match self.place {
            None => Rows::Memory(self.rows),
            Some((input, index)) => Rows::File(FileRows {
                input,
                index,
                count: rows,
                hops: self.hops,
            }),
        };
        Ok(self.partial)
    }
}

fn hop_named(hops: &HopOrder, name: &str) -> Result<u16> {
    hops.index_of(name)
        .ok_or_else(|| anyhow!("hop \"{name}\" is not in the header's hop order"))
}

/// `ms`, a time or a duration of a partial, unless it is negative: every reader of events
/// refuses negative times, so no analysis writes one, and the partial was edited.
fn time(what: &str, ms: Millis) -> Result<Millis> {
    if is_time(ms) {
        Ok(ms)
    } else {
        bail!("{what} is {} ms, and a partial's times are never negative: the partial was edited; make it again", crate::words::number(ms))
    }
}

/// A row as read, checked against the header's hops.
fn row_of(r: WireRow, hops: &HopOrder) -> Result<Row> {
    if r.funnel.len() != hops.len() {
        bail!(
            "a funnel of {} hops, not the header's {}",
            r.funnel.len(),
            hops.len()
        );
    }
    let findings = r
        .findings
        .iter()
        .map(|f| {
            Ok(Finding {
                kind: f.kind,
                hop: hop_named(hops, &f.hop)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Row {
        key: OperationKey {
            test_run_id: r.test_run_id.map(Into::into),
            operation_id: r.operation_id.into(),
        },
        pending: Pending {
            class_without_burst: r.class,
            class_in_burst: r.class_in_burst,
            first_multiplying_hop: r
                .first_multiplying_hop
                .as_deref()
                .map(|h| hop_named(hops, h))
                .transpose()?,
            funnel: r.funnel,
            findings,
            first_start_ms: time("a row's first_start_ms", r.first_start_ms)?,
            last_finish_ms: r
                .last_finish_ms
                .map(|ms| time("a row's last_finish_ms", ms))
                .transpose()?,
            overlap_ms: time("a row's overlap_ms", r.overlap_ms)?,
            final_outcome: r.final_outcome,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(n: u32) -> Row {
        Row {
            key: OperationKey {
                test_run_id: n.is_multiple_of(2).then(|| format!("run-{n}").into()),
                operation_id: format!("op-{n}-é").into(),
            },
            pending: Pending {
                class_without_burst: Class::ALL[n as usize % Class::ALL.len()],
                class_in_burst: Class::SynchronizedBurst,
                first_multiplying_hop: n.is_multiple_of(3).then_some(1),
                funnel: vec![n, 2 * n, 7],
                findings: (0..n % 4)
                    .map(|i| Finding {
                        kind: FindingKind::ALL[(n + i) as usize % FindingKind::ALL.len()],
                        hop: i as u16,
                    })
                    .collect(),
                // Whole times (the finish written as a difference, either way) and not.
                first_start_ms: match n % 3 {
                    0 => 1_700_000_000_000.0 + f64::from(n),
                    _ => 1_700_000_000_000.1 + f64::from(n),
                },
                last_finish_ms: match n % 5 {
                    0 => None,
                    1 => Some(0.1 + 0.2),
                    2 => Some(1_700_000_000_000.0 - f64::from(n) * 1e9),
                    _ => Some(1_700_000_000_437.0),
                },
                // +0.0 is left out, -0.0 is not.
                overlap_ms: match n % 7 {
                    0 => 0.0,
                    1 => -0.0,
                    _ => f64::from(n) / 3.0,
                },
                final_outcome: FINAL_OUTCOMES[n as usize % 3],
            },
        }
    }

    /// `count` rows written to a spill file named after `name`: the rows, the file.
    fn spilled(count: u32, name: &str) -> (Vec<Row>, SpilledRows, std::path::PathBuf) {
        let hops = HopOrder::new(vec!["caller".into(), "gateway".into(), "dependency".into()])
            .expect("hops");
        let rows: Vec<Row> = (0..count).map(row).collect();
        let path = std::env::temp_dir().join(format!("af-rows-{}-{name}", std::process::id()));
        let keyed = rows.iter().map(|r| (r.key.key_ref(), &r.pending));
        let spilled = SpilledRows::write(keyed, &hops, &path).expect("written");
        (rows, spilled, path)
    }

    #[test]
    fn spilled_rows_come_back_bit_for_bit() {
        let (rows, spilled, path) = spilled(200, "whole");
        let back: Vec<Row> = spilled
            .read(READ_BUFFER_MAX)
            .expect("opened")
            .map(|r| r.expect("row"))
            .collect();
        std::fs::remove_file(&path).ok();
        assert_eq!(back, rows);
        // Equal floats could still differ in their bits: the merge must see the same ones.
        for (a, b) in back.iter().zip(&rows) {
            assert_eq!(
                a.pending.overlap_ms.to_bits(),
                b.pending.overlap_ms.to_bits()
            );
        }
    }

    #[test]
    fn a_key_split_inside_a_character_is_an_error() {
        // Run ID and operation ID one byte each: together "é", valid, but neither alone is.
        let record = [HAS_RUN, 1, 1, 0xC3, 0xA9];
        let err = RowCodec::decode(&record, 0).expect_err("split inside a character");
        assert!(err.to_string().contains("inside a character"), "{err}");
    }

    #[test]
    fn a_spilled_rows_file_cut_short_is_an_error_that_names_it() {
        let (_, spilled, path) = spilled(10, "cut");
        let bytes = std::fs::read(&path).expect("read");
        std::fs::write(&path, &bytes[..bytes.len() - 3]).expect("cut");
        let read: Vec<Result<Row>> = spilled.read(READ_BUFFER_MAX).expect("opened").collect();
        std::fs::remove_file(&path).ok();
        assert!(read[..9].iter().all(Result::is_ok));
        let err = format!("{:#}", read[9].as_ref().expect_err("cut short"));
        assert!(err.contains("af-rows-") && err.contains("damaged"), "{err}");
    }
}

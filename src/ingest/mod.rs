//! Ingest: reads files or stdin in chunks, detects each file's line format, parses and
//! validates lines in parallel, and interns them into [`Event`]s. Bad lines are recorded in
//! [`Diagnostics`] (`path:line: what is wrong`), never panics and never silent drops. Every
//! reader works through one [`Reader`] context.
//!
//! Which inputs there are and how they are opened (directories, glob patterns, gzip, zstd,
//! Parquet) is [`source`]'s business; Parquet rows are read by [`parquet`]; the progress
//! line on stderr is [`progress`]; logs with their own key names are read through
//! [`mapping`].

mod ahead;
mod document;
mod duration;
mod fields;
mod jaeger;
mod jsonl;
mod logfmt;
mod mapping;
mod otlp;
mod parquet;
mod preset;
pub mod progress;
pub mod source;
pub mod spans;
pub mod spill;
mod wrapper;
mod zipkin;

pub use parquet::{worker::main as run_parquet_worker, WORKER_COMMAND as PARQUET_WORKER_COMMAND};

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rayon::prelude::*;

use crate::diagnostics::{BadInputPolicy, Diagnostics, OtherLines};
use crate::model::{
    Event, EventFields, Interner, KeyRef, Millis, OperationKey, Partition, SourceRef, Step,
    StrHash, Sym,
};
use crate::rules::HopOrder;
pub use fields::CheckedLine;
pub use mapping::{split_pair, KeyMapping, TimeUnit};
use preset::GatewayAttempt;
pub use preset::Preset;
use progress::Progress;
use source::Content;
use spans::mapping::SpanMapping;
use spans::resolve::{MappedSpan, SpanStats};
use spill::{Budget, EventsRef, Spill};

/// Bytes read per chunk. Large enough that parallel parsing amortises its overhead, small
/// enough that the raw text of only one chunk is in memory at a time.
const CHUNK_BYTES: usize = 8 << 20;

/// Which line format a file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InputFormat {
    /// Each file's, from its first line.
    #[default]
    Auto,
    Jsonl,
    Logfmt,
    /// OpenTelemetry OTLP JSON, one `{"resourceSpans":[…]}` per line (docs/formats.md).
    Otlp,
    /// Zipkin v2 JSON: a span, or an array of spans, per line (docs/formats.md).
    Zipkin,
    /// Jaeger JSON documents, `{"data":[trace, …]}` (docs/formats.md).
    Jaeger,
}

/// Where input comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputPath {
    Stdin,
    File(PathBuf),
}

impl InputPath {
    pub fn display(&self) -> String {
        match self {
            InputPath::Stdin => "<stdin>".to_string(),
            InputPath::File(p) => p.display().to_string(),
        }
    }
}

/// Input options shared by every subcommand that reads events.
#[derive(Debug, Clone, PartialEq)]
pub struct InputConfig {
    pub paths: Vec<InputPath>,
    pub format: InputFormat,
    pub bad_input: BadInputPolicy,
    /// Show a progress line on stderr while reading (stderr is a terminal, not under CI).
    pub progress: bool,
    /// `--max-line-bytes`: the longest line read; longer ones are bad lines, skipped
    /// without being held. `None`: the default for the line format ([`max_line_bytes`]).
    pub max_line_bytes: Option<u64>,
    /// How OTLP and Zipkin spans become attempts.
    pub spans: SpanMapping,
    /// How to read JSON Lines, logfmt and Parquet input that names our keys its own way;
    /// `None`: our keys as they are, on the plain (fast) path.
    pub mapping: Option<KeyMapping>,
    /// `--preset`: tools whose logs are read as they write them, each reaching only the
    /// JSON Lines files it recognises ([`Preset::matches`]), each with its mapping (the
    /// preset's keys, under `mapping`'s: see [`KeyMapping::overlay`]).
    pub presets: Vec<(Preset, KeyMapping)>,
    /// `--partition K/N`: keep only the operations of partition K (every line is still
    /// read, and its key parsed); `None`: keep every operation.
    pub partition: Option<Partition>,
    /// `--memory-limit` and `--temp-dir`: events beyond the budget are spilled to disk
    /// ([`read_partitioned`]). `None`: every event is held (the commands that need them all
    /// at once).
    pub budget: Option<Budget>,
}

/// Everything read from the inputs: what the analysis receives.
#[derive(Debug)]
pub struct Ingested {
    pub events: Vec<Event>,
    /// The (test run, operation) keys; `Event::op` indexes this.
    pub operations: Vec<(Option<Sym>, Sym)>,
    pub strings: Interner,
    /// Display names of the inputs; `SourceRef::file` indexes this.
    pub files: Vec<String>,
    /// Non-blank lines read.
    pub lines_read: u64,
    /// What all the input read adds up to, whatever `--partition` keeps or reports: the
    /// same in every partition of one input, so a merge can tell partials of another.
    pub whole_input: WholeInput,
    /// The bad lines found so far, and the policy for them.
    pub diagnostics: Diagnostics,
    /// Lines read that are not attempts (see `Reader::event_chunk`).
    pub other_lines: OtherLines,
    /// What became of the spans, when an input was OTLP or Zipkin.
    pub span_stats: Option<SpanStats>,
    /// Under `--partition K/N`, and in a partition spilled to disk: the latest time of the
    /// events other partitions own (0 when there are none). With it the trace end, where unfinished attempts are still active,
    /// is the one of the whole input, as in a run that keeps every operation. `None`:
    /// every event read was kept.
    pub latest_elsewhere_ms: Option<Millis>,
}

impl Ingested {
    /// Frees the events' vector that a partition pass leaves empty for the next partition
    /// to read into: for an analysis that reads nothing more.
    pub fn free_events(&mut self) {
        self.events = Vec::new();
    }

    /// The key of operation `op`, borrowed from the strings.
    pub fn key_ref(&self, op: u32) -> KeyRef<'_> {
        let (run, id) = self.operations[op as usize];
        (
            run.map(|r| self.strings.resolve(r)),
            self.strings.resolve(id),
        )
    }

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
}

/// The size of all the input read: its raw bytes (as stored, compressed or not) and its
/// non-blank lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WholeInput {
    pub bytes: u64,
    pub lines: u64,
}

/// Reads every input named in `config`, in order (directories and patterns expanded),
/// holding every event whatever the budget.
pub fn read_inputs(config: &InputConfig, hops: &HopOrder) -> Result<Ingested> {
    let read = read_with(config, hops, None)?;
    Ok(read.head)
}

/// What was read, in memory or spilled in partitions (see [`spill`]).
#[derive(Debug)]
pub struct Partitioned {
    /// The input's files, lines read, bad lines and span statistics; and its events when
    /// nothing was spilled.
    pub head: Ingested,
    /// The spilled partitions, when the events did not fit the budget.
    pub spill: Option<Spill>,
    /// The latest time anywhere in the input (of every partition): where unfinished
    /// attempts are still active.
    pub trace_end_ms: Millis,
    budget: Option<Budget>,
}

impl Partitioned {
    /// Hands each partition to `each`, [`PARTITIONS_AT_ONCE`] at a time side by side, as
    /// the events of its operations (each operation whole, in one partition), each knowing
    /// the trace end of all the input (as `latest_elsewhere_ms`), so that none of its
    /// operations waits for the merge; then hands what `each` made of it to `done`, one
    /// partition after the other in a fixed order (with its number in that order, as
    /// `each` was given it). The first partition also carries the input's files, lines
    /// read, bad lines and span statistics, the others none of them. Without a spill the
    /// one partition is everything read. A partition that turns out larger than the
    /// budget is split again (by the same hash) before it is read.
    ///
    /// `each` is also given the spill's directory, where it may leave files of its own
    /// (a partition's rows, until the merge reads them); the directory is returned, and
    /// removed with what it holds when dropped.
    pub fn partitions<T: Send>(
        self,
        each: impl Fn(&mut Ingested, Option<&Path>, usize) -> Result<T> + Sync,
        mut done: impl FnMut(T) -> Result<()>,
    ) -> Result<Option<spill::TempDir>> {
        let Partitioned {
            head,
            spill,
            budget,
            trace_end_ms,
        } = self;
        let Some(spill) = spill else {
            let mut head = head;
            return done(each(&mut head, None, 0)?).map(|()| None);
        };
        let budget = budget.expect("a spill has a budget").partition_bytes();
        let files = head.files.clone();
        let policy = head.diagnostics.policy();
        // Each partition after the first reads into the operation table, strings and key
        // index of the one before, emptied: grown once, not again for every partition (a
        // fifth of reading a partition back went to growing them, on fresh pages).
        let next = |done: &mut Ingested| {
            let mut strings = std::mem::take(&mut done.strings);
            strings.clear();
            let mut operations = std::mem::take(&mut done.operations);
            operations.clear();
            let mut events = std::mem::take(&mut done.events);
            events.clear();
            Ingested {
                events,
                operations,
                strings,
                files: files.clone(),
                lines_read: 0,
                whole_input: WholeInput::default(),
                diagnostics: Diagnostics::new(policy),
                other_lines: OtherLines::default(),
                span_stats: None,
                latest_elsewhere_ms: None,
            }
        };
        // One slot per partition read at once, each with the key index and the decoding
        // thread's batches it hands from part to part for the same reason. The first reads
        // into the input's own tables (empty once spilled); the others start from nothing,
        // as the first's emptied tables would be handed on (`next` of the head takes them).
        let mut head = head;
        let mut slots: Vec<Slot> = (1..PARTITIONS_AT_ONCE)
            .map(|_| Slot::new(next(&mut head)))
            .collect();
        slots.insert(0, Slot::new(head));
        // Parts split from a partition come first, then the next partition. A part split
        // into one part only (one huge operation) is read whole (`true`): an operation is
        // analysed whole.
        let mut todo: Vec<(spill::Part, bool)> = Vec::new();
        let mut parts = spill.partitions.parts.clone().into_iter();
        let mut number = 0;
        loop {
            let mut batch: Vec<spill::Part> = Vec::with_capacity(PARTITIONS_AT_ONCE);
            while batch.len() < PARTITIONS_AT_ONCE {
                let Some((part, whole)) = todo.pop().or_else(|| parts.next().map(|p| (p, false)))
                else {
                    break;
                };
                if !whole && part.memory_bytes() > budget && part.events > 1 {
                    if let Some(mut split) = spill.split_parts(&part, part.memory_bytes(), budget) {
                        // Read and written on into its parts through a slot not in use yet,
                        // which it leaves empty.
                        let slot = &mut slots[batch.len()];
                        read_part(
                            &part,
                            &mut slot.into,
                            &mut slot.keys,
                            &mut Some((&mut split, budget)),
                            &mut slot.spare,
                        )?;
                        spill.remove(&part);
                        if split.parts.iter().all(|p| p.events < part.events) {
                            todo.extend(split.parts.into_iter().rev().map(|p| (p, false)));
                        } else {
                            let one = split.parts.into_iter().find(|p| p.events == part.events);
                            todo.push((one.expect("the one part"), true));
                        }
                        continue;
                    }
                }
                batch.push(part);
            }
            if batch.is_empty() {
                return Ok(Some(spill.into_dir()));
            }
            // Side by side: each partition's reading back keeps a core and a half busy,
            // and its pass's tail one; two at once fill what either leaves idle.
            let (spill, each) = (&spill, &each);
            let made: Vec<Result<T>> = slots[..batch.len()]
                .par_iter_mut()
                .zip(batch.par_iter())
                .enumerate()
                .map(|(j, (slot, part))| {
                    read_part(
                        part,
                        &mut slot.into,
                        &mut slot.keys,
                        &mut None,
                        &mut slot.spare,
                    )?;
                    spill.remove(part);
                    slot.into.latest_elsewhere_ms = Some(trace_end_ms);
                    each(&mut slot.into, Some(spill.dir()), number + j)
                })
                .collect();
            number += batch.len();
            for (slot, made) in slots.iter_mut().zip(made) {
                done(made?)?;
                slot.into = next(&mut slot.into);
            }
        }
    }
}

/// Partitions read back and analysed at once ([`Partitioned::partitions`]), each under
/// its share of the budget ([`spill::Budget::partition_bytes`]).
pub const PARTITIONS_AT_ONCE: usize = 2;

/// What one partition read at a time is read into, kept from one to the next.
struct Slot {
    into: Ingested,
    keys: Keys,
    spare: Vec<spill::Batch>,
}

impl Slot {
    fn new(into: Ingested) -> Slot {
        Slot {
            into,
            keys: Keys::default(),
            spare: Vec::new(),
        }
    }
}

/// How many blocks ahead of the one interned its own bytes are loaded
/// ([`spill::Block::prefetch_own`]): before the first step of loading its strings
/// ([`LOOK_AHEAD`]) reads them.
const OWN_AHEAD: usize = 4 * LOOK_AHEAD;

/// Batches of a spill file decoded ahead of the one being interned.
const BATCHES_AHEAD: usize = 2;

/// Reads a spilled part's events into `into`; with `split`, writes them on into the
/// smaller parts instead, a budget's worth at a time. `spare`: the decoded batches of the
/// part before, to be filled again (and this part's, when it returns).
fn read_part(
    part: &spill::Part,
    into: &mut Ingested,
    keys: &mut Keys,
    split: &mut Option<(&mut spill::Parts, u64)>,
    spare: &mut Vec<spill::Batch>,
) -> Result<()> {
    if part.events == 0 {
        return Ok(());
    }
    let mut reader = spill::PartReader::open(part)?;
    // The index of the part before, whose strings (its keys) are gone from `into`.
    keys.clear();
    let start = into.events.len();
    if split.is_none() {
        // The part is read whole: its events at once, not by doubling (and copying).
        let wanted = usize::try_from(part.events).unwrap_or(0);
        let capacity = into.events.capacity();
        if into.events.is_empty() && (capacity < wanted || capacity / 2 > wanted) {
            // Freed first: growing would copy the partition before's pages, all spare;
            // and a vector twice too large (reading's, sized for the whole input) would
            // hold its pages to the end of the run.
            into.events = Vec::new();
        }
        into.events.reserve(wanted);
    }
    // A thread of its own reads and decodes the file while this one interns what it
    // decoded: otherwise the other core idles while a partition is decoded.
    let (decoded, batches) = std::sync::mpsc::sync_channel(BATCHES_AHEAD);
    let (done, spent) = std::sync::mpsc::channel::<spill::Batch>();
    // Batches grown by the part before are filled first: a new batch grows its vectors by
    // doubling, on fresh pages, as each part's first batches would.
    for batch in spare.drain(..) {
        let _ = done.send(batch);
    }
    std::thread::scope(|scope| {
        let decoder = scope.spawn(move || {
            // The batch the end of the file was found with: kept for the next part with
            // the others (dropped, the next part grew a new one on fresh pages).
            let last = loop {
                let mut batch = spent.try_recv().unwrap_or_default();
                match reader.fill(&mut batch) {
                    Ok(true) => {
                        if decoded.send(Ok(batch)).is_err() {
                            break None; // the interning side stopped on an error
                        }
                    }
                    Ok(false) => break Some(batch),
                    Err(e) => {
                        let _ = decoded.send(Err(e));
                        break None;
                    }
                }
            };
            (spent, last)
        });
        for batch in batches {
            let batch: spill::Batch = batch?;
            // The table slots of the blocks ahead are loaded while this one is interned
            // (see `LOOK_AHEAD`): each partition's strings are new to the table.
            let blocks: Vec<spill::Block> = batch.blocks().collect();
            for block in blocks.iter().take(LOOK_AHEAD) {
                block.prefetch(&into.strings, Step::Slot);
            }
            for block in blocks.iter().take(OWN_AHEAD) {
                block.prefetch_own();
            }
            for (i, block) in blocks.iter().enumerate() {
                if let Some(far) = blocks.get(i + OWN_AHEAD) {
                    far.prefetch_own();
                }
                for (ahead, step) in PREFETCH_STEPS {
                    if let Some(next) = blocks.get(i + ahead) {
                        next.prefetch(&into.strings, step);
                    }
                }
                let (run, id) = block.key();
                let op = keys.op(into, run, id);
                block.push_events(op, &mut into.strings, &mut into.events);
                if let Some((parts, budget)) = split {
                    if held_bytes(into, keys) > *budget / 2 {
                        parts.write(events_of(into, start))?;
                        clear_events(into, start, keys);
                    }
                }
            }
            drop(blocks);
            // Back to the decoding thread, to be filled again: gone when it has finished.
            let _ = done.send(batch);
        }
        if let Some((parts, _)) = split {
            parts.write(events_of(into, start))?;
            clear_events(into, start, keys);
        }
        // Every batch came back (the decoder ended, and each one it sent was returned).
        if let Ok((spent, last)) = decoder.join() {
            spare.extend(spent.try_iter().chain(last));
        }
        Ok(())
    })
}

fn events_of(ingested: &Ingested, start: usize) -> EventsRef<'_> {
    EventsRef {
        events: &ingested.events[start..],
        operations: &ingested.operations,
        strings: &ingested.strings,
    }
}

/// Drops the events from `start` on, and the operations and strings with them (a spill
/// keeps nothing before `start`).
fn clear_events(ingested: &mut Ingested, start: usize, keys: &mut Keys) {
    debug_assert_eq!(start, 0, "events are only spilled from an empty table");
    ingested.events.truncate(start);
    ingested.operations.clear();
    ingested.strings.clear();
    keys.clear();
}

/// What the events, their operation table and strings hold in memory, in bytes (as
/// filled: a vector's spare capacity is never touched, so it costs no memory).
fn held_bytes(ingested: &Ingested, keys: &Keys) -> u64 {
    (ingested.events.len() * std::mem::size_of::<Event>()
        + ingested.operations.len() * std::mem::size_of::<(Option<Sym>, Sym)>()) as u64
        + keys.heap_bytes()
        + ingested.strings.heap_bytes()
}

/// The operation table's index: each (test run, operation) key once.
#[derive(Default)]
struct Keys {
    /// By the operation ID's string: the first operation with that ID. Almost every ID
    /// belongs to one test run, and a vector indexed by string is cheaper than hashing the
    /// pair: strings are numbered as they first appear, so IDs read close together are
    /// close together in it. [`NO_OPERATION`] where the string is no operation's ID.
    by_id: Vec<u32>,
    /// The other (test run, operation) keys: an ID seen again under another test run.
    index: HashMap<(Option<Sym>, Sym), u32, foldhash::fast::FixedState>,
}

/// In [`Keys::by_id`]: no operation has this string as its ID.
const NO_OPERATION: u32 = u32::MAX;

impl Keys {
    /// The index of an operation in `ingested`'s table, added when new; its strings come
    /// with their hashes.
    fn op(
        &mut self,
        ingested: &mut Ingested,
        run: Option<(StrHash, &str)>,
        (id_hash, id): (StrHash, &str),
    ) -> u32 {
        let run = run.map(|(hash, r)| ingested.strings.intern_hashed(r, hash));
        let id = ingested.strings.intern_hashed(id, id_hash);
        let next = ingested.operations.len() as u32;
        if self.by_id.len() <= id as usize {
            let len = (id as usize + 1).max(2 * self.by_id.len());
            self.by_id.resize(len, NO_OPERATION);
        }
        let first = self.by_id[id as usize];
        let op = if first == NO_OPERATION {
            self.by_id[id as usize] = next;
            next
        } else if ingested.operations[first as usize].0 == run {
            first
        } else {
            *self.index.entry((run, id)).or_insert(next)
        };
        if op == next {
            ingested.operations.push((run, id));
        }
        op
    }

    fn clear(&mut self) {
        self.by_id.clear();
        self.index.clear();
    }

    /// What the index holds in memory, in bytes.
    fn heap_bytes(&self) -> u64 {
        let entry = std::mem::size_of::<((Option<Sym>, Sym), u32)>() + 1;
        (self.by_id.len() * std::mem::size_of::<u32>() + self.index.len() * entry) as u64
    }
}

/// Reads every input named in `config`, in order (directories and patterns expanded);
/// with a budget, spills the events in partitions when they would not fit it.
pub fn read_partitioned(config: &InputConfig, hops: &HopOrder) -> Result<Partitioned> {
    read_with(config, hops, config.budget.as_ref())
}

fn read_with(
    config: &InputConfig,
    hops: &HopOrder,
    budget: Option<&Budget>,
) -> Result<Partitioned> {
    let source::Resolved { inputs, notes } = source::resolve(&config.paths)?;
    for note in notes {
        eprintln!("attempt-funnel: {note}");
    }
    // Before this run spills beside them: a killed run's spill files would stay for good.
    if let Some(budget) = budget {
        spill::remove_abandoned(budget);
    }
    let mut progress = Progress::new(config.progress, source::total_size(&inputs));
    let mut reader = Reader::new(config, hops);
    reader.budget = budget.cloned();
    reader.total_bytes = source::total_size(&inputs);
    reader.read_bytes = Some(progress.counter());
    reader.reserve_for(source::total_size(&inputs));
    for input in &inputs {
        let name = &input.name;
        let content = source::open(input, &progress.counter())?;
        let file = reader.add_file(name);
        match content {
            Content::Lines { text, as_stored } => {
                if !as_stored || input.size.is_none() {
                    reader.parsed_as_stored = None;
                }
                reader.read_lines(text, input.size, file, &mut progress)
            }
            Content::Parquet(data) => {
                reader.parsed_as_stored = None;
                parquet::read(data, input, file, &mut reader, &mut progress)
            }
        }
        .with_context(|| format!("could not read '{name}'"))?;
    }
    progress.finish();
    for (file, preset, lines) in std::mem::take(&mut reader.passed) {
        let lines = crate::words::counted(lines, "line", "lines");
        let file = &reader.out.files[file as usize];
        match preset {
            Some(preset) => eprintln!(
                "attempt-funnel: {file}: {lines} passed by, not attempts (--preset {preset}: {}; an attempt's line needs its operation ID: {})",
                preset.passes(),
                preset.missing_id()
            ),
            None => eprintln!(
                "attempt-funnel: {file}: {lines} passed by, not attempts (neither JSON nor logfmt, or without an operation ID; --strict makes them errors)"
            ),
        }
    }
    reader.finish_partitioned()
}

/// The shortest event line worth reserving for: `{"operation_id":"a","start_ms":1}` and
/// a newline. Reserving for the events the files can hold saves growing a vector of
/// millions of events by copying.
const MIN_EVENT_LINE_BYTES: u64 = 35;

/// The most events reserved for up front, whatever the input size: reserving for a 1.5 GB
/// input (43 M events) took more address space than a `ulimit -v` of 3 GB allows, before
/// a single line was read. Past this the vector grows as it fills.
const MAX_EVENTS_RESERVED: u64 = 1 << 22;

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
/// enough that their parsed form stays a few megabytes whatever the lines hold, and that
/// a chunk has several batches (the last one of a chunk is kept with no parsing beside).
const LINES_PER_BATCH: usize = 1 << 12;

/// Attempts per batch once lines are spilled as read: four times as many. A spilled
/// batch holds only its attempts' encoded bytes (about 25 each), and each batch ends in
/// a join where one core waits for the other's last stretch, so fewer, larger batches
/// wait less. Lines kept in memory stay at [`LINES_PER_BATCH`]: there larger batches hold
/// more and do not read faster.
const SPILLED_ATTEMPTS_PER_BATCH: usize = 4 * LINES_PER_BATCH;

/// A line to parse: its number, its bytes without the newline and a final CR, and whether
/// it is a last line cut short.
type Line<'b> = (u64, &'b [u8], bool);

/// A batch of lines parsed, for the keeping side.
enum Parsed<'b, H> {
    /// Each line and what parsing it gave, to be kept line by line.
    Kept {
        lines: Vec<Line<'b>>,
        results: Vec<Result<H, String>>,
    },
    /// Spilled as read, in stretches of [`SPILL_LINES`]: what keeping them still has to do.
    Spilled { lines: u64, stretches: Vec<Stretch> },
}

impl<H: LookAhead> Parsed<'_, H> {
    fn is_empty(&self) -> bool {
        match self {
            Parsed::Kept { lines, .. } => lines.is_empty(),
            Parsed::Spilled { lines, .. } => *lines == 0,
        }
    }

    /// How many lines the next batch takes: as many as make about [`LINES_PER_BATCH`]
    /// attempts ([`SPILLED_ATTEMPTS_PER_BATCH`] spilled as read), judged by this one. A
    /// line of a tool's log may stand for a thousand attempts, and a batch's attempts are
    /// all held at once: 4 096 such lines took 1.5 GB.
    fn next_batch_lines(&self) -> usize {
        let (lines, attempts, wanted): (u64, u64, usize) = match self {
            Parsed::Kept { lines, results } => (
                lines.len() as u64,
                results.iter().flatten().map(H::attempts).sum(),
                LINES_PER_BATCH,
            ),
            Parsed::Spilled { lines, stretches } => (
                *lines,
                stretches.iter().map(|s| s.attempts).sum(),
                SPILLED_ATTEMPTS_PER_BATCH,
            ),
        };
        if attempts <= lines {
            return wanted;
        }
        ((wanted as u64 * lines / attempts) as usize).max(1)
    }
}

/// A stretch of lines spilled as read: its attempts encoded for the spill files, and what
/// else keeping its lines would have done.
struct Stretch {
    encoded: spill::Encoded,
    /// Each bad line's number and what is wrong, in order.
    bad: Vec<(u64, String)>,
    /// The latest time of its events, and of those of other partitions (`--partition`).
    latest_ms: Millis,
    latest_elsewhere_ms: Option<Millis>,
    /// Lines passed by as not attempts, and the number of the first.
    passed: u64,
    first_passed: Option<u64>,
    /// The attempts its lines stand for.
    attempts: u64,
}

/// How many lines ahead of the one kept [`LookAhead::prefetch`] is first called: far
/// enough for a load from memory to arrive while the lines between are kept.
const LOOK_AHEAD: usize = 4;

/// How many lines ahead each step of loading a line's strings is taken: each a load that
/// needs the one before it arrived (see [`Interner::prefetch_step`]).
const PREFETCH_STEPS: [(usize, Step); 3] = [
    (LOOK_AHEAD, Step::Slot),
    (LOOK_AHEAD / 2, Step::Ends),
    (1, Step::Bytes),
];

/// What parsing a line gave, before it is kept: made ready for keeping on the parse
/// thread ([`ParsedLine::hashed`]), or, once spilling began, spilled there. `'a`: the
/// text it was parsed from.
trait ParsedLine<'a>: Send {
    /// The same, ready to be kept: its strings hashed for interning.
    type Hashed: LookAhead + Send;

    /// Whether lines of this kind are spilled as they are read once spilling began: what
    /// keeping them does is all in [`ParsedLine::spill_events`] and
    /// [`ParsedLine::passed`].
    const SPILLS_AS_READ: bool;

    fn hashed(self) -> Self::Hashed;

    /// Hands each of its attempts to `each` as it is spilled, in order, the line read at
    /// `source`.
    fn spill_events(self, _source: SourceRef, _each: impl FnMut(spill::LineEvent<'a>))
    where
        Self: Sized,
    {
    }

    /// A line of a tool's log passed by as not attempts (counted, see [`Reader::passed`]).
    fn passed(&self) -> bool {
        false
    }
}

impl<'a> ParsedLine<'a> for CheckedLine<'a> {
    type Hashed = HashedLine<'a>;
    const SPILLS_AS_READ: bool = true;

    fn hashed(self) -> HashedLine<'a> {
        HashedLine::new(self)
    }

    #[inline]
    fn spill_events(self, source: SourceRef, mut each: impl FnMut(spill::LineEvent<'a>)) {
        each(spill_event(self, None, source));
    }
}

impl<'a> ParsedLine<'a> for preset::Read<CheckedLine<'a>> {
    type Hashed = preset::Read<HashedLine<'a>>;
    const SPILLS_AS_READ: bool = true;

    fn hashed(self) -> Self::Hashed {
        self.map(HashedLine::new)
    }

    fn spill_events(self, source: SourceRef, mut each: impl FnMut(spill::LineEvent<'a>)) {
        match self {
            preset::Read::Attempt(line) => each(spill_event(line, None, source)),
            preset::Read::GatewayAttempts { last, count } => {
                for attempt in GatewayAttempt::all(count) {
                    each(spill_event(last.clone(), Some(attempt), source));
                }
            }
            preset::Read::Passed => {}
        }
    }

    fn passed(&self) -> bool {
        matches!(self, preset::Read::Passed)
    }
}

/// Spans are resolved once all are read ([`Reader::push_spans`]), never spilled as read.
impl ParsedLine<'_> for MappedSpans {
    type Hashed = MappedSpans;
    const SPILLS_AS_READ: bool = false;

    fn hashed(self) -> MappedSpans {
        self
    }
}

/// A parsed line about to be kept, which can say which strings it will intern.
trait LookAhead {
    /// Takes one step of loading what interning this line's strings will read.
    fn prefetch(&self, _strings: &Interner, _step: Step) {}

    /// How many attempts it stands for: what keeping it adds to the events held.
    fn attempts(&self) -> u64 {
        1
    }
}

/// Spans are interned once all are read ([`Reader::push_spans`]), not line by line. A line
/// of spans counts as one when batches are sized: its spans are held until the end however
/// the batches go, and a line of thousands of spans is best parsed beside another.
impl LookAhead for MappedSpans {}

impl LookAhead for preset::Read<HashedLine<'_>> {
    fn prefetch(&self, strings: &Interner, step: Step) {
        match self {
            preset::Read::Attempt(line) | preset::Read::GatewayAttempts { last: line, .. } => {
                line.prefetch(strings, step);
            }
            preset::Read::Passed => {}
        }
    }

    fn attempts(&self) -> u64 {
        match self {
            preset::Read::Attempt(_) => 1,
            preset::Read::GatewayAttempts { count, .. } => u64::from(*count),
            preset::Read::Passed => 0,
        }
    }
}

/// A checked line with the hashes of the strings it will intern, taken where it was parsed
/// (see [`StrHash`]).
#[derive(Clone)]
pub(super) struct HashedLine<'a> {
    /// Its target, message, span and parent IDs are in `others`.
    line: CheckedLine<'a>,
    operation_id: StrHash,
    test_run_id: Option<StrHash>,
    /// The target, message ID, span ID and parent ID, each with its hash.
    others: [Option<(StrHash, Cow<'a, str>)>; 4],
}

impl<'a> HashedLine<'a> {
    fn new(mut line: CheckedLine<'a>) -> HashedLine<'a> {
        let hashed = |s: Option<Cow<'a, str>>| s.map(|s| (StrHash::of(&s), s));
        HashedLine {
            operation_id: StrHash::of(&line.operation_id),
            test_run_id: line.test_run_id.as_deref().map(StrHash::of),
            others: [
                hashed(line.target.take()),
                hashed(line.message_id.take()),
                hashed(line.span_id.take()),
                hashed(line.parent_id.take()),
            ],
            line,
        }
    }
}

impl LookAhead for HashedLine<'_> {
    fn prefetch(&self, strings: &Interner, step: Step) {
        strings.prefetch_step(self.operation_id, step);
        for (hash, _) in self.others.iter().flatten() {
            strings.prefetch_step(*hash, step);
        }
    }
}

/// The event fields of a line, its strings apart (set once interned, or written as text);
/// as one of a request's attempts at the gateway, when it is one.
fn fields_of(line: &CheckedLine, gateway: Option<GatewayAttempt>) -> EventFields {
    let mut fields = EventFields {
        attempt: line.attempt,
        delivery: line.delivery,
        target: None,
        message_id: None,
        span_id: None,
        parent_id: None,
        delay_ms: line.delay_ms,
        retry_after_ms: line.retry_after_ms,
        outcome: line.outcome,
        effect: line.effect,
        hidden: line.hidden,
        untimed: line.untimed,
    };
    if let Some(attempt) = gateway {
        attempt.apply(&mut fields);
    }
    fields
}

/// A line as a spill file holds it, from line `source`: the event reading would keep (its
/// strings apart) and its operation's key and strings as text.
#[inline]
fn spill_event(
    line: CheckedLine<'_>,
    gateway: Option<GatewayAttempt>,
    source: SourceRef,
) -> spill::LineEvent<'_> {
    spill::LineEvent {
        event: spill::EventParts {
            source,
            hop: line.hop,
            timing: line.timing,
            fields: fields_of(&line, gateway),
        },
        run: line.test_run_id,
        id: line.operation_id,
        texts: [line.target, line.message_id, line.span_id, line.parent_id],
    }
}

/// Where lines are spilled as they are read, once spilling began: the partitions, and the
/// operations this run keeps (`--partition K/N`).
#[derive(Clone, Copy)]
struct SpillAsRead {
    router: spill::Router,
    partition: Option<Partition>,
}

/// Lines parsed at a time by one parse thread once lines are spilled as they are read:
/// each such stretch is encoded into blocks of its own (see [`spill::encode_lines`]).
const SPILL_LINES: usize = 1 << 10;

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

/// The message of a line over the limit.
fn too_long(bytes: u64, limit: u64) -> String {
    format!("line is {bytes} bytes, longer than the limit of {limit} bytes, and was skipped: split it, or raise the limit with --max-line-bytes (e.g. --max-line-bytes 64MiB)")
}

/// The input being read: its index in [`Ingested::files`] and its display name.
#[derive(Clone, Copy)]
pub(super) struct File<'n> {
    pub index: u32,
    pub name: &'n str,
}

impl File<'_> {
    /// Line `line` of this input, as an event's source.
    fn line(self, line: u64) -> SourceRef {
        SourceRef {
            file: self.index,
            line: u32::try_from(line).unwrap_or(u32::MAX),
        }
    }
}

/// The context every reader (lines of every format, Parquet rows) shares: the settings,
/// what has been read so far, and the scratch that only reading needs (the operation index,
/// the spans waiting for every input to be read).
pub(super) struct Reader<'c> {
    pub config: &'c InputConfig,
    pub hops: &'c HopOrder,
    pub out: Ingested,
    keys: Keys,
    /// Spans read so far; they become events once every input has been read.
    spans: Vec<MappedSpan>,
    /// Each preset with its key mapping, built once.
    presets: Vec<(Preset, KeyMapping)>,
    /// Per file read with a preset: the lines it passed by as not attempts.
    passed: Vec<(u32, Option<Preset>, u64)>,
    /// The memory budget, when events may be spilled; where the events went that did not
    /// fit it.
    budget: Option<Budget>,
    spill: Option<Spill>,
    /// Lines of a tool's log passed by as not attempts, in the chunk being read
    /// ([`Reader::preset_chunk`]).
    passed_lines: u64,
    /// Where the first of them is.
    first_passed: Option<SourceRef>,
    /// Bytes of the input parsed so far, as stored, while every input read so far is a
    /// plain file of known size (`None` once one is not: a compressed file, a stream,
    /// Parquet).
    parsed_as_stored: Option<u64>,
    /// Bytes of text parsed so far (decompressed).
    parsed_text: u64,
    /// Bytes of text read so far, parsed or read ahead, counted by the reading thread.
    text_read: progress::ByteCounter,
    /// Lines in a batch, as the last batch of the input being read judged it
    /// ([`Parsed::next_batch_lines`]).
    batch_lines: usize,
    /// The latest time of every event read, spilled ones included.
    latest_ms: Millis,
    /// The inputs' size as stored, when known, and the bytes of it read so far: how much
    /// of the input the events held stand for, when the first spill chooses its partitions.
    total_bytes: Option<u64>,
    read_bytes: Option<progress::ByteCounter>,
}

impl<'c> Reader<'c> {
    pub fn new(config: &'c InputConfig, hops: &'c HopOrder) -> Reader<'c> {
        Reader {
            config,
            hops,
            out: Ingested {
                events: Vec::new(),
                operations: Vec::new(),
                strings: Interner::default(),
                files: Vec::new(),
                lines_read: 0,
                whole_input: WholeInput::default(),
                diagnostics: Diagnostics::new(config.bad_input),
                other_lines: OtherLines::default(),
                span_stats: None,
                latest_elsewhere_ms: config.partition.map(|_| 0.0),
            },
            keys: Keys::default(),
            spans: Vec::new(),
            presets: config.presets.clone(),
            passed: Vec::new(),
            budget: None,
            spill: None,
            passed_lines: 0,
            first_passed: None,
            batch_lines: LINES_PER_BATCH,
            parsed_as_stored: Some(0),
            parsed_text: 0,
            text_read: progress::ByteCounter::default(),
            latest_ms: 0.0,
            total_bytes: None,
            read_bytes: None,
        }
    }

    fn reserve_for(&mut self, bytes_on_disk: Option<u64>) {
        let mut events =
            (bytes_on_disk.unwrap_or(0) / MIN_EVENT_LINE_BYTES).min(MAX_EVENTS_RESERVED);
        if let Some(budget) = &self.budget {
            // As many as the budget could hold: were the vector to outgrow its room, it
            // would be copied into one twice as large and both held at once (a quarter
            // of a 1 M-operation run's peak). Room never filled is never touched.
            events = events.min(budget.events_bytes() / std::mem::size_of::<Event>() as u64);
        }
        self.out.events.reserve(events as usize);
    }

    /// Spills the events held when they exceed the budget. Called between batches of lines
    /// (a few thousand events), not per event.
    pub(super) fn after_batch(&mut self) -> Result<()> {
        let Some(budget) = &self.budget else {
            return Ok(());
        };
        let held = held_bytes(&self.out, &self.keys);
        if held <= budget.events_bytes() {
            return Ok(());
        }
        self.spill_events(held)
    }

    /// After each chunk of lines: spills the events held when the input's size says they
    /// will not fit by its end ([`spill::spills_anyway`]), so that the rest of the input is
    /// spilled as it is read instead of kept until the budget is full. Judged when the
    /// inputs' size is known, on the bytes parsed as stored ([`Reader::read_so_far_as_stored`]:
    /// for compressed inputs an estimate).
    fn after_chunk(&mut self) -> Result<()> {
        let (Some(budget), None, Some(total)) = (&self.budget, &self.spill, self.total_bytes)
        else {
            return Ok(());
        };
        let read = match self.parsed_as_stored {
            Some(parsed) if parsed >= spill::MIN_PARSED_TO_JUDGE.min(total) => parsed,
            None if self.parsed_text >= spill::MIN_PARSED_TO_JUDGE => self.read_so_far_as_stored(),
            _ => return Ok(()),
        };
        let held = held_bytes(&self.out, &self.keys);
        if spill::spills_anyway(held, read, Some(total), budget.events_bytes()) {
            self.spill_events(held)?;
        }
        Ok(())
    }

    /// How much of the input, as stored, has been parsed: known for plain files; for
    /// compressed ones the bytes read as stored, scaled by the share of the text they gave
    /// that is parsed (the rest, a chunk or two, is read and decompressed ahead: taken for
    /// parsed, it made a compressed input look several times smaller after 16 MiB of text).
    fn read_so_far_as_stored(&self) -> u64 {
        if let Some(parsed) = self.parsed_as_stored {
            return parsed;
        }
        let stored = self.read_bytes.as_ref().map_or(0, |c| c.get());
        match self.text_read.get() {
            // No text (Parquet): the bytes read.
            0 => stored,
            text => (stored as f64 * (self.parsed_text as f64 / text as f64).min(1.0)) as u64,
        }
    }

    /// Writes the events held to their partitions' files and forgets them, their
    /// operations and strings.
    fn spill_events(&mut self, held: u64) -> Result<()> {
        let budget = self.budget.as_ref().expect("spilling needs a budget");
        let read = self.read_so_far_as_stored();
        let spill = match &mut self.spill {
            Some(spill) => spill,
            None => {
                let partitions =
                    spill::first_partitions(held, read, self.total_bytes, budget.partition_bytes());
                self.spill.insert(Spill::create(budget, partitions)?)
            }
        };
        spill.partitions.write(events_of(&self.out, 0))?;
        clear_events(&mut self.out, 0, &mut self.keys);
        crate::profile::note(&format!("spilled, {} MB so far", spill.bytes() >> 20));
        Ok(())
    }

    /// What the progress line counts: the events read, spilled ones included, and their
    /// operations while nothing was spilled.
    pub(super) fn progress_counts(&self) -> progress::Counts {
        let held = self.out.events.len() as u64;
        match &self.spill {
            None => progress::Counts {
                events: held,
                operations: Some(self.out.operations.len() as u64),
            },
            Some(spill) => progress::Counts {
                events: held + spill.events(),
                operations: None,
            },
        }
    }

    /// Names the next input; its index is the `file` of its events' [`SourceRef`]s.
    pub fn add_file(&mut self, name: &str) -> u32 {
        self.out.files.push(name.to_string());
        (self.out.files.len() - 1) as u32
    }

    /// Ends the reading: resolves the spans read, if any input held spans.
    #[cfg(test)]
    pub fn finish(self) -> Result<Ingested> {
        let read = self.finish_partitioned()?;
        assert!(read.spill.is_none(), "spilled without a budget");
        Ok(read.head)
    }

    /// Ends the reading: resolves the spans read, if any input held spans; once events
    /// were spilled, the rest follow them.
    fn finish_partitioned(mut self) -> Result<Partitioned> {
        if self.out.span_stats.is_some() {
            self.push_spans()?;
        }
        self.after_batch()?;
        if let Some(spill) = &self.spill {
            let as_read = spill.appended_events;
            crate::profile::note(&format!("{as_read} events spilled as read"));
            // Also writes what was spilled as read and is still held for a larger write.
            let held = held_bytes(&self.out, &self.keys);
            self.spill_events(held)?;
        }
        self.out.whole_input = WholeInput {
            bytes: self.read_bytes.as_ref().map_or(0, |c| c.get()),
            lines: self.out.lines_read,
        };
        if !self.reports_input() {
            self.out.lines_read = 0;
            self.out.other_lines = OtherLines::default();
        }
        // Under --partition K/N, the events other partitions own count for the trace end.
        let trace_end_ms = self
            .latest_ms
            .max(self.out.latest_elsewhere_ms.unwrap_or(0.0));
        Ok(Partitioned {
            head: self.out,
            spill: self.spill,
            trace_end_ms,
            budget: self.budget,
        })
    }

    /// Whether this run reports the input's own facts, lines read and bad lines: every run
    /// but those of a partition other than 0 (see [`Partition::reports_input`]).
    fn reports_input(&self) -> bool {
        self.config.partition.is_none_or(Partition::reports_input)
    }

    /// Records a bad line of `file`; under `--strict` it stops the run.
    pub fn bad_line(&mut self, file: File, line: u64, message: String) -> Result<()> {
        if !self.reports_input() {
            return Ok(());
        }
        self.out.diagnostics.bad_line(file.name, line, message)
    }

    /// Records a bad line with the column where it goes wrong, when known.
    fn bad_position(
        &mut self,
        file: File,
        line: u64,
        column: Option<u64>,
        message: String,
    ) -> Result<()> {
        if !self.reports_input() {
            return Ok(());
        }
        self.out
            .diagnostics
            .bad_position(file.name, line, column, message)
    }

    /// Keeps a validated line as an event, when its operation is this run's partition's
    /// (`--partition K/N`): the line is dropped before anything of it is stored.
    pub fn push(&mut self, source: SourceRef, line: CheckedLine) {
        self.push_hashed(source, HashedLine::new(line), None);
    }

    /// [`Reader::push`] of a line whose strings were hashed as it was parsed; as one of a
    /// request's attempts at the gateway, when it is one.
    fn push_hashed(
        &mut self,
        source: SourceRef,
        hashed: HashedLine,
        gateway: Option<GatewayAttempt>,
    ) {
        let HashedLine {
            line,
            operation_id,
            test_run_id,
            others,
        } = hashed;
        if let Some(partition) = self.config.partition {
            if !partition.owns(line.test_run_id.as_deref(), &line.operation_id) {
                let latest = self.out.latest_elsewhere_ms.get_or_insert(0.0);
                *latest = latest.max(line.timing.latest_ms());
                return;
            }
        }
        let op = self.keys.op(
            &mut self.out,
            test_run_id.zip(line.test_run_id.as_deref()),
            (operation_id, &line.operation_id),
        );
        let out = &mut self.out;
        let [target, message_id, span_id, parent_id] =
            others.map(|s| s.map(|(hash, s)| out.strings.intern_hashed(&s, hash)));
        let fields = EventFields {
            target,
            message_id,
            span_id,
            parent_id,
            ..fields_of(&line, gateway)
        };
        let event = Event::new(source, op, line.hop, line.timing, fields);
        self.latest_ms = self.latest_ms.max(event.latest_ms());
        out.events.push(event);
    }

    /// Reads one input of lines, chunk by chunk, in the format given or detected. `size`:
    /// its size on disk, when known ([`ahead::Bytes`] reads large inputs ahead).
    fn read_lines(
        &mut self,
        lines: Box<dyn Read + Send>,
        size: Option<u64>,
        index: u32,
        progress: &mut Progress,
    ) -> Result<()> {
        let lines = Box::new(progress::Counting::new(lines, self.text_read.clone()));
        let mut lines = ahead::Bytes::new(lines, size)?;
        self.batch_lines = LINES_PER_BATCH;
        let name = self.out.files[index as usize].clone();
        let file = File { index, name: &name };
        let mut format = match self.config.format {
            InputFormat::Auto => None,
            forced => Some(forced),
        };
        let mut text = ahead::Unparsed::default();
        let mut next_line: u64 = 1;
        let mut first_read = true;
        let mut long: Option<LongLine> = None;
        let mut preset: Option<usize> = None;
        // A container runtime's lines around the application's (detected, as the formats
        // are, unless a format is forced).
        let mut unwrapper: Option<wrapper::Unwrapper> = None;
        loop {
            let eof = lines.read_more(&mut text)? == 0;
            if std::mem::take(&mut first_read) {
                // A byte-order mark is no content: skipped before anything looks at the bytes.
                if text.bytes().starts_with(BOM) {
                    text.consume(BOM.len());
                }
                if self.config.format == InputFormat::Auto {
                    unwrapper = wrapper::Unwrapper::detect(first_line(text.bytes()));
                }
                // A tool's log of JSON Lines is read by its preset, whatever keys it has.
                if matches!(self.config.format, InputFormat::Auto | InputFormat::Jsonl) {
                    let line = first_object_line(text.bytes());
                    preset = self.presets.iter().position(|(p, _)| p.matches(line));
                    if preset.is_some() {
                        format = Some(InputFormat::Jsonl);
                    }
                }
                // A mapped log is attempt events whatever its keys look like (`trace`,
                // `traceId` and `id` are common log keys): it is never taken for spans.
                let layout = match (&self.config.mapping, self.config.format) {
                    _ if preset.is_some() => Layout::Lines(Some(InputFormat::Jsonl)),
                    (Some(_), InputFormat::Auto) => Layout::Lines(None),
                    _ => layout(text.bytes(), eof, self.config.format),
                };
                match layout {
                    Layout::Documents(kind) => {
                        let stream = std::io::Cursor::new(text.into_vec()).chain(lines);
                        return self.read_documents(stream, file, kind, progress);
                    }
                    Layout::Lines(detected) => format = format.or(detected),
                }
            }
            // The rest of a line over the limit is dropped as it comes, never held.
            if let Some(l) = &mut long {
                let buf = text.bytes();
                let end = memchr::memchr(b'\n', buf);
                let part = &buf[..end.unwrap_or(buf.len())];
                l.bytes += part.len() as u64;
                l.blank &= is_blank(part);
                match end {
                    Some(i) => text.consume(i + 1),
                    None => {
                        text.clear();
                        if !eof {
                            continue;
                        }
                    }
                }
                let l = long.take().expect("set above");
                next_line = l.line + 1;
                if !l.blank {
                    // A line read, like the shorter ones over the limit that a chunk holds.
                    self.out.lines_read += 1;
                    let limit = max_line_bytes(self.config, format);
                    self.bad_line(file, l.line, too_long(l.bytes, limit))?;
                }
                if eof && text.bytes().is_empty() {
                    return Ok(());
                }
            }
            // Only whole lines are parsed; the tail waits for the next read, or is the last line.
            let buf = text.bytes();
            let end = if eof {
                buf.len()
            } else {
                match memchr::memrchr(b'\n', buf) {
                    Some(i) => i + 1,
                    None => {
                        // A line longer than a chunk: keep reading, up to the limit.
                        if buf.len() as u64 > max_line_bytes(self.config, format) {
                            long = Some(LongLine {
                                line: next_line,
                                bytes: buf.len() as u64,
                                blank: is_blank(buf),
                            });
                            text.clear();
                        }
                        continue;
                    }
                }
            };
            // The format is decided by the first non-blank line, however far in it is.
            if format.is_none() && !is_blank(&buf[..end]) {
                format = Some(match self.config.mapping {
                    Some(_) => detect_event_format(&buf[..end]),
                    None => detect_format(&buf[..end]),
                });
            }
            match format {
                None => next_line += memchr::memchr_iter(b'\n', &buf[..end]).count() as u64,
                Some(format) => {
                    let unwrapped;
                    let bytes = match &mut unwrapper {
                        Some(u) if preset.is_none() => {
                            unwrapped = u.unwrap(&buf[..end], eof);
                            &unwrapped[..]
                        }
                        _ => &buf[..end],
                    };
                    let chunk = Chunk {
                        bytes,
                        at_eof: eof,
                        first_line: next_line,
                        max_line_bytes: max_line_bytes(self.config, Some(format)),
                    };
                    next_line = match format {
                        // Span formats map a line to several attempts; the rest to one event
                        // each.
                        InputFormat::Otlp | InputFormat::Zipkin => {
                            self.span_chunk(file, format, &chunk)?
                        }
                        _ => match preset {
                            Some(p) => self.preset_chunk(file, p, &chunk)?,
                            None => self.event_chunk(file, format, &chunk)?,
                        },
                    };
                }
            }
            text.consume(end);
            self.parsed_text += end as u64;
            if let Some(parsed) = &mut self.parsed_as_stored {
                *parsed += end as u64;
            }
            self.after_chunk()?;
            progress.update(self.progress_counts());
            if eof {
                return Ok(());
            }
        }
    }

    /// Parses the non-blank lines of a chunk in parallel with `parse` (given the line's
    /// text, its source, and whether it is a last line cut short), [`LINES_PER_BATCH`] at a
    /// time, then hands each result, in line order, to `keep`, which returns the line's
    /// problems; each is recorded as a bad line. A line over the chunk's limit is a bad
    /// line. Blank lines cost a scan, nothing more. Returns the number of the chunk's next
    /// line.
    ///
    /// `keep` runs on one thread, in line order; while it takes one batch, the next one is
    /// parsed on the other cores, so that neither waits for the other.
    fn chunk_lines<'b, P: ParsedLine<'b> + 'b>(
        &mut self,
        file: File,
        chunk: &Chunk<'b>,
        not_utf8: &str,
        parse: impl Fn(&'b str, SourceRef, bool) -> Result<P, String> + Sync,
        mut keep: impl FnMut(&mut Self, SourceRef, P::Hashed) -> Vec<String> + Send,
    ) -> Result<u64> {
        let bytes = chunk.bytes;
        let truncated_tail = chunk.at_eof && bytes.last() != Some(&b'\n');
        let source = |line: u64| file.line(line);
        let parse_line = |&(n, raw, unterminated): &Line<'b>| -> Result<P, String> {
            if raw.len() as u64 > chunk.max_line_bytes {
                return Err(too_long(raw.len() as u64, chunk.max_line_bytes));
            }
            // SIMD: every byte of every line is checked.
            let Ok(text) = simdutf8::basic::from_utf8(raw) else {
                return Err(not_utf8.to_string());
            };
            parse(text, source(n), unterminated)
        };
        // A stretch of lines parsed and spilled: nothing of a line outlives its encoding.
        let spill_stretch = |stretch: &[Line<'b>], to: SpillAsRead| {
            let mut out = Stretch {
                encoded: spill::Encoded::default(),
                bad: Vec::new(),
                latest_ms: 0.0,
                latest_elsewhere_ms: None,
                passed: 0,
                first_passed: None,
                attempts: 0,
            };
            // Reserved whole: grown by doubling, it would be moved again and again.
            let mut events = Vec::with_capacity(stretch.len());
            for line in stretch {
                let value = match parse_line(line) {
                    Ok(value) => value,
                    Err(message) => {
                        out.bad.push((line.0, message));
                        continue;
                    }
                };
                if value.passed() {
                    out.passed += 1;
                    out.first_passed.get_or_insert(line.0);
                }
                value.spill_events(source(line.0), |event| {
                    out.attempts += 1;
                    let latest = event.event.timing.latest_ms();
                    if to
                        .partition
                        .is_some_and(|p| !p.owns(event.run.as_deref(), &event.id))
                    {
                        let elsewhere = out.latest_elsewhere_ms.get_or_insert(0.0);
                        *elsewhere = elsewhere.max(latest);
                        return;
                    }
                    out.latest_ms = out.latest_ms.max(latest);
                    events.push(event);
                });
            }
            out.encoded = spill::encode_lines(to.router, &events);
            out
        };
        let parse_batch = |lines: Vec<Line<'b>>, spill: Option<SpillAsRead>| match spill {
            Some(to) if P::SPILLS_AS_READ => Parsed::Spilled {
                lines: lines.len() as u64,
                stretches: lines
                    .par_chunks(SPILL_LINES)
                    .map(|stretch| spill_stretch(stretch, to))
                    .collect(),
            },
            _ => Parsed::Kept {
                results: lines
                    .par_iter()
                    .map(|line| parse_line(line).map(P::hashed))
                    .collect(),
                lines,
            },
        };
        // A batch is reserved for the lines it asks for, but not for more than a small
        // chunk holds at 16 bytes a line.
        let capacity = bytes.len() / 16 + 1;
        // The next batch of non-blank lines from byte `start`, numbered from `line`, and
        // what parsing each gave. Finding the lines is part of the parallel step: done
        // before it, it was a pass over every byte while the other core waited.
        let next_batch =
            |start: &mut usize, line: &mut u64, spill: Option<SpillAsRead>, lines: usize| {
                let mut batch: Vec<Line<'b>> = Vec::with_capacity(capacity.min(lines));
                while *start < bytes.len() && batch.len() < lines {
                    let (raw, next) = match memchr::memchr(b'\n', &bytes[*start..]) {
                        Some(i) => (&bytes[*start..*start + i], *start + i + 1),
                        None => (&bytes[*start..], bytes.len()),
                    };
                    let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
                    if !is_blank(raw) {
                        batch.push((*line, raw, truncated_tail && next == bytes.len()));
                    }
                    *line += 1;
                    *start = next;
                }
                parse_batch(batch, spill)
            };
        let mut line = chunk.first_line;
        let mut start = 0;
        // The batch parsed last, waiting for `keep`.
        let mut parsed: Option<Parsed<'b, P::Hashed>> = None;
        let mut lines = self.batch_lines;
        loop {
            // Decided before the batch before is kept: if that one starts spilling, this
            // one is still kept as events, and spilled after it (see `keep_batch`).
            let spill = self.spilling_as_read();
            let next = match parsed.take() {
                None => next_batch(&mut start, &mut line, spill, lines),
                Some(batch) => {
                    lines = batch.next_batch_lines();
                    let (kept, next) = rayon::join(
                        || self.keep_batch(file, batch, &mut keep),
                        || next_batch(&mut start, &mut line, spill, lines),
                    );
                    kept?;
                    next
                }
            };
            // Only the end of the chunk leaves no line to parse.
            if next.is_empty() {
                break;
            }
            parsed = Some(next);
        }
        self.batch_lines = lines;
        Ok(line)
    }

    /// Where lines are spilled as they are read: once events were spilled, every line
    /// after is encoded where it is parsed and appended to its partition, never kept.
    fn spilling_as_read(&self) -> Option<SpillAsRead> {
        self.spill.as_ref().map(|spill| SpillAsRead {
            router: spill.partitions.router(),
            partition: self.config.partition,
        })
    }

    /// Hands a parsed batch to `keep`, line by line ([`Reader::chunk_lines`]), then spills
    /// if the events held exceed the budget. A batch spilled as it was read has its
    /// attempts appended to the partitions, its bad lines recorded and its lines counted.
    fn keep_batch<T: LookAhead>(
        &mut self,
        file: File,
        batch: Parsed<'_, T>,
        keep: &mut impl FnMut(&mut Self, SourceRef, T) -> Vec<String>,
    ) -> Result<()> {
        let (lines, mut results) = match batch {
            Parsed::Kept { lines, results } => (lines, results),
            Parsed::Spilled { lines, stretches } => {
                return self.keep_spilled(file, lines, stretches)
            }
        };
        for value in results.iter().take(LOOK_AHEAD).flatten() {
            value.prefetch(&self.out.strings, Step::Slot);
        }
        let mut checked = self.out.events.len();
        for (i, &(n, _, _)) in lines.iter().enumerate() {
            for (ahead, step) in PREFETCH_STEPS {
                if let Some(Ok(value)) = results.get(i + ahead) {
                    value.prefetch(&self.out.strings, step);
                }
            }
            // Taken out in place (an empty message allocates nothing): the lines ahead
            // are still to be looked at.
            let result = std::mem::replace(&mut results[i], Err(String::new()));
            self.out.lines_read += 1;
            let problems = match result {
                Ok(value) => keep(self, file.line(n), value),
                Err(message) => vec![message],
            };
            for message in problems {
                self.bad_line(file, n, message)?;
            }
            // A batch of lines that stand for many attempts each (the first of an input,
            // before its batches are sized down) is spilled as it grows, not at its end.
            if self.out.events.len() >= checked + LINES_PER_BATCH {
                self.after_batch()?;
                checked = self.out.events.len();
            }
        }
        self.after_batch()
    }

    /// [`Reader::keep_batch`] of a batch spilled as it was read.
    fn keep_spilled(&mut self, file: File, lines: u64, stretches: Vec<Stretch>) -> Result<()> {
        // Events still held (the batch kept while the first spill was made) go first:
        // each operation's events stay in input order.
        if !self.out.events.is_empty() {
            self.spill_events(held_bytes(&self.out, &self.keys))?;
        }
        self.out.lines_read += lines;
        let spill = self
            .spill
            .as_mut()
            .expect("spilled as read once spilling began");
        for stretch in &stretches {
            spill.append(&stretch.encoded)?;
        }
        for stretch in stretches {
            self.latest_ms = self.latest_ms.max(stretch.latest_ms);
            if let Some(elsewhere) = stretch.latest_elsewhere_ms {
                let latest = self.out.latest_elsewhere_ms.get_or_insert(0.0);
                *latest = latest.max(elsewhere);
            }
            self.passed_lines += stretch.passed;
            if let Some(n) = stretch.first_passed {
                self.first_passed.get_or_insert(file.line(n));
            }
            for (n, message) in stretch.bad {
                self.bad_line(file, n, message)?;
            }
        }
        Ok(())
    }

    /// JSON Lines or logfmt: one event per line. Unless `--strict` or `--input-format`
    /// says otherwise, each line is read in the format it is written in (a logfmt file may
    /// hold JSON lines and the other way round), and a line that is neither, or has no
    /// operation ID, is not an attempt: passed by and counted (see [`line_format`]).
    fn event_chunk(&mut self, file: File, format: InputFormat, chunk: &Chunk<'_>) -> Result<u64> {
        const NOT_UTF8: &str = "not valid UTF-8: attempt events must be UTF-8 text";
        let (hops, config) = (self.hops, self.config);
        let mixed =
            config.format == InputFormat::Auto && config.bad_input != BadInputPolicy::Strict;
        let keep = |reader: &mut Self, source, hashed| {
            match hashed {
                preset::Read::Attempt(line) => reader.push_hashed(source, line, None),
                _ => reader.pass_by(source),
            }
            Vec::new()
        };
        self.passed_lines = 0;
        // Two loops, not a test per line: the plain one is the fast path as it was, with
        // nothing of the mapping in it (BENCHMARKS.md, "Key mapping").
        let next = match &config.mapping {
            None => self.chunk_lines(
                file,
                chunk,
                NOT_UTF8,
                |text, _, unterminated| match line_as(text, mixed, format) {
                    Some((InputFormat::Logfmt, text)) => {
                        attempt(logfmt::parse(text).and_then(|f| f.check(hops)), mixed)
                    }
                    Some((_, text)) => {
                        attempt(jsonl::parse_checked(text, unterminated, hops), mixed)
                    }
                    None => Ok(preset::Read::Passed),
                },
                keep,
            ),
            // A mapped line is read whole and navigated: never the fast path.
            Some(mapping) => self.chunk_lines(
                file,
                chunk,
                NOT_UTF8,
                |text, _, unterminated| {
                    let object = match line_as(text, mixed, format) {
                        Some((InputFormat::Logfmt, text)) => logfmt::parse_object(text),
                        Some((_, text)) => jsonl::parse_object(text, unterminated),
                        None => return Ok(preset::Read::Passed),
                    };
                    attempt(
                        object
                            .and_then(|o| mapping.read_object(&o))
                            .and_then(|row| mapping.check(row, hops)),
                        mixed,
                    )
                },
                keep,
            ),
        };
        self.count_passed(file, None);
        next
    }

    /// A tool's JSON Lines log, read by the preset at `index` of [`Reader::presets`]: a line
    /// is some attempts, or passed by and counted.
    fn preset_chunk(&mut self, file: File, index: usize, chunk: &Chunk<'_>) -> Result<u64> {
        let presets = std::mem::take(&mut self.presets);
        let hops = self.hops;
        let (preset, mapping) = &presets[index];
        let mixed = self.config.bad_input != BadInputPolicy::Strict;
        self.passed_lines = 0;
        let next = self.chunk_lines(
            file,
            chunk,
            "not valid UTF-8: a JSON log must be UTF-8 text",
            |text, _, unterminated| {
                // A banner or a traceback among the tool's records, as in any mixed log.
                if mixed && line_format(text) != Some(InputFormat::Jsonl) {
                    return Ok(preset::Read::Passed);
                }
                jsonl::parse_object(text, unterminated)
                    .and_then(|object| preset.read(object, mapping, hops))
            },
            |reader, source, read| {
                match read {
                    preset::Read::Attempt(line) => reader.push_hashed(source, line, None),
                    preset::Read::GatewayAttempts { last, count } => {
                        for attempt in GatewayAttempt::all(count) {
                            reader.push_hashed(source, last.clone(), Some(attempt));
                        }
                    }
                    preset::Read::Passed => reader.pass_by(source),
                }
                Vec::new()
            },
        );
        let preset = *preset;
        self.presets = presets;
        self.count_passed(file, Some(preset));
        next
    }

    /// A line that is not an attempt, at `source`: counted.
    fn pass_by(&mut self, source: SourceRef) {
        self.passed_lines += 1;
        self.first_passed.get_or_insert(source);
    }

    /// Adds the lines of a chunk passed by as not attempts to their file's count and the
    /// input's.
    fn count_passed(&mut self, file: File, preset: Option<Preset>) {
        let passed = std::mem::take(&mut self.passed_lines);
        let first = self.first_passed.take();
        self.out.other_lines.lines += passed;
        if self.out.other_lines.example.is_none() {
            self.out.other_lines.example = first.map(|source| self.out.location(source));
        }
        if passed > 0 {
            match self.passed.last_mut() {
                Some((f, p, n)) if *f == file.index && *p == preset => *n += passed,
                _ => self.passed.push((file.index, preset, passed)),
            }
        }
    }

    /// OTLP or Zipkin: the spans of each line are kept for [`Reader::push_spans`], as the
    /// operation and parent of a span may depend on spans later in the input.
    fn span_chunk(&mut self, file: File, format: InputFormat, chunk: &Chunk<'_>) -> Result<u64> {
        let (mapping, hops) = (&self.config.spans, self.hops);
        // Marks the input as holding spans, so that push_spans runs even if none was readable.
        self.out.span_stats.get_or_insert_with(Default::default);
        self.chunk_lines(
            file,
            chunk,
            "not valid UTF-8: spans must be UTF-8 JSON",
            |text, source, unterminated| {
                let read = match format {
                    InputFormat::Otlp => otlp::parse(text, unterminated),
                    _ => zipkin::parse(text, unterminated),
                };
                read.map(|results| map_spans(results, source, mapping, hops))
            },
            |reader, _, mapped| {
                let mut problems = Vec::new();
                for m in mapped {
                    match m {
                        Ok((span, problem)) => {
                            reader.spans.push(span);
                            problems.extend(problem);
                        }
                        Err(message) => {
                            reader
                                .out
                                .span_stats
                                .get_or_insert_with(Default::default)
                                .spans += 1;
                            problems.push(message);
                        }
                    }
                }
                problems
            },
        )
    }

    /// Reads whole documents of spans (see [`document`]) and keeps their spans for
    /// [`Reader::push_spans`], as [`Reader::span_chunk`] does for lines.
    fn read_documents(
        &mut self,
        stream: impl Read,
        file: File,
        kind: Option<document::Kind>,
        progress: &mut Progress,
    ) -> Result<()> {
        let (mapping, hops) = (&self.config.spans, self.hops);
        // Marks the input as holding spans, so that push_spans runs even if none was readable.
        self.out.span_stats.get_or_insert_with(Default::default);
        let (mut last_line, mut index) = (0, 0);
        let lines = document::read(stream, kind, &mut |found| match found {
            document::Found::Span { line, span } => {
                // Spans are counted per line, as in line-delimited files.
                index = if line == last_line { index + 1 } else { 1 };
                last_line = line;
                let source = SourceRef {
                    file: file.index,
                    line: u32::try_from(line).unwrap_or(u32::MAX),
                };
                match map_span(span, index, source, mapping, hops) {
                    Ok((span, problem)) => {
                        self.spans.push(span);
                        if self.spans.len().is_multiple_of(PROGRESS_SPANS) {
                            progress.update(self.progress_counts());
                        }
                        match problem {
                            Some(message) => self.bad_line(file, line, message),
                            None => Ok(()),
                        }
                    }
                    Err(message) => {
                        self.out
                            .span_stats
                            .get_or_insert_with(Default::default)
                            .spans += 1;
                        self.bad_line(file, line, message)
                    }
                }
            }
            document::Found::Problem {
                line,
                column,
                message,
            } => self.bad_position(file, line, column, message),
        })?;
        self.out.lines_read += lines;
        Ok(())
    }

    /// Resolves every span read (operation, test run, parent: see
    /// [`spans::resolve::resolve`]) and adds the attempts as events.
    fn push_spans(&mut self) -> Result<()> {
        let resolved = spans::resolve::resolve(std::mem::take(&mut self.spans), &self.config.spans);
        if self.reports_input() {
            self.out
                .diagnostics
                .bad_sources(&self.out.files, resolved.problems)?;
        }
        let unreadable = self.out.span_stats.as_ref().map_or(0, |s| s.spans);
        let mut stats = resolved.stats;
        stats.spans += unreadable;
        self.out.span_stats = Some(stats);
        for (n, (source, line)) in resolved.lines.into_iter().enumerate() {
            self.push(source, line);
            if n % LINES_PER_BATCH == LINES_PER_BATCH - 1 {
                self.after_batch()?;
            }
        }
        Ok(())
    }
}

/// A chunk of whole lines of one input.
struct Chunk<'b> {
    bytes: &'b [u8],
    /// The input ends with this chunk (its last line may lack a newline).
    at_eof: bool,
    /// The number of the chunk's first line, from 1.
    first_line: u64,
    /// Lines longer than this are bad lines ([`max_line_bytes`]).
    max_line_bytes: u64,
}

/// The spans of one line, each mapped (with a problem to report, if any) or the message of
/// a span that could not be read.
type MappedSpans = Vec<Result<(MappedSpan, Option<String>), String>>;

fn map_spans(
    results: spans::SpanResults,
    source: SourceRef,
    mapping: &SpanMapping,
    hops: &HopOrder,
) -> MappedSpans {
    results
        .into_iter()
        .enumerate()
        .map(|(n, r)| map_span(r, n as u32 + 1, source, mapping, hops))
        .collect()
}

/// One span as read, the `index`th of its line: mapped (with a problem to report, if any),
/// or the message of a span that could not be read.
fn map_span(
    span: Result<spans::Span, spans::SpanError>,
    index: u32,
    source: SourceRef,
    mapping: &SpanMapping,
    hops: &HopOrder,
) -> Result<(MappedSpan, Option<String>), String> {
    match span {
        Ok(span) => Ok(spans::resolve::map_span(span, index, source, mapping, hops)),
        Err(e) => Err(format!(
            "{} {}",
            spans::resolve::label(index, e.id.as_deref()),
            e.message
        )),
    }
}

/// Spans read from a document between two updates of the progress line.
const PROGRESS_SPANS: usize = 1 << 14;

/// How a text input is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// Line by line, in this format (`None`: detected from the first line).
    Lines(Option<InputFormat>),
    /// As whole JSON documents (see [`document`]), of this kind (`None`: any).
    Documents(Option<document::Kind>),
}

/// Documents when the first line opens a JSON object or array that it does not close (a
/// pretty-printed document, or one line longer than a chunk), when the first line is a
/// document that only comes whole (Jaeger's `{"data":…}`, Tempo's `{"trace":…}`), and
/// always for `--input-format jaeger`. Lines otherwise: a bad line is then only one line.
fn layout(head: &[u8], eof: bool, forced: InputFormat) -> Layout {
    let lines = Layout::Lines((forced != InputFormat::Auto).then_some(forced));
    // Blank input holds no document (and no line).
    let Some(start) = head.iter().position(|b| !b.is_ascii_whitespace()) else {
        return lines;
    };
    let kind = match forced {
        InputFormat::Jsonl | InputFormat::Logfmt => return lines,
        InputFormat::Jaeger => return Layout::Documents(Some(document::Kind::Jaeger)),
        InputFormat::Otlp => Some(document::Kind::Otlp),
        InputFormat::Zipkin => Some(document::Kind::Zipkin),
        InputFormat::Auto => None,
    };
    if !matches!(head[start], b'{' | b'[') {
        return lines;
    }
    let rest = &head[start..];
    let newline = memchr::memchr(b'\n', rest);
    let (line, after) = match newline {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &rest[rest.len()..]),
    };
    let more = !eof || after.iter().any(|b| !b.is_ascii_whitespace());
    let unclosed = matches!(
        serde_json::from_slice::<serde::de::IgnoredAny>(line),
        Err(e) if e.is_eof()
    );
    // A first line that runs past what was read is only long, not a document's start,
    // unless it opens one of the documents that only come whole: an event line of 9 MiB
    // made the whole file a document that was not one.
    let line_ended = newline.is_some() || eof;
    if unclosed && more && (line_ended || kind.is_some() || opens_whole_document(line)) {
        return Layout::Documents(kind);
    }
    if kind.is_none() && spans_format(line) == Some(InputFormat::Jaeger) {
        return Layout::Documents(None);
    }
    lines
}

/// Whether `line`, the start of a JSON object, opens a document that comes only whole: its
/// first key is Jaeger's `data`, or `trace` or `result` (Tempo's and Jaeger v3's wrappers).
fn opens_whole_document(line: &[u8]) -> bool {
    let Some(rest) = line.trim_ascii_start().strip_prefix(b"{") else {
        return false;
    };
    let rest = rest.trim_ascii_start();
    [&b"\"data\""[..], b"\"trace\"", b"\"result\""]
        .iter()
        .any(|key| rest.starts_with(key))
}

/// By the first non-blank line: `[` is Zipkin (an array of spans); `{` is OTLP when the
/// object has `resourceSpans` (or `batches`), Zipkin when it has `traceId` and `id` (and no
/// operation), JSON Lines otherwise; anything else is logfmt. (Documents are told apart
/// before, by [`layout`].)
fn detect_format(bytes: &[u8]) -> InputFormat {
    let Some(start) = bytes.iter().position(|b| !b.is_ascii_whitespace()) else {
        return InputFormat::Logfmt;
    };
    match bytes[start] {
        // A Zipkin array, or text that starts with a bracket (Envoy's default access log
        // `[2026-03-01T10:00:00.000Z] "GET …`): only JSON is spans.
        b'[' if json_or_unfinished(first_line(&bytes[start..])) => InputFormat::Zipkin,
        b'[' => InputFormat::Logfmt,
        b'{' => {
            let line = &bytes[start..];
            let line = memchr::memchr(b'\n', line).map_or(line, |i| &line[..i]);
            spans_format(line).unwrap_or(InputFormat::Jsonl)
        }
        _ => InputFormat::Logfmt,
    }
}

/// The first line of `bytes` that starts with `{`, or the first non-blank one if none
/// does: a tool's JSON log may start with a banner (ecs-logging's app prints one).
fn first_object_line(bytes: &[u8]) -> &[u8] {
    bytes
        .split(|&b| b == b'\n')
        .map(<[u8]>::trim_ascii_start)
        .find(|line| line.starts_with(b"{"))
        .unwrap_or_else(|| first_line(bytes))
}

/// Whether `line` is JSON, or JSON cut short by the end of what was read.
fn json_or_unfinished(line: &[u8]) -> bool {
    match serde_json::from_slice::<serde::de::IgnoredAny>(line) {
        Ok(_) => true,
        Err(e) => e.is_eof(),
    }
}

/// The first non-blank line of `bytes` (without its newline), or what of it they hold.
fn first_line(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    let rest = &bytes[start..];
    let end = memchr::memchr(b'\n', rest).unwrap_or(rest.len());
    &rest[..end]
}

/// A checked line as an attempt; in a mixed log, a line without an operation ID is a
/// record of something else (a health check, a log record), passed by.
fn attempt(
    checked: Result<CheckedLine<'_>, String>,
    mixed: bool,
) -> Result<preset::Read<CheckedLine<'_>>, String> {
    match checked {
        Err(message) if mixed && fields::has_no_operation(&message) => Ok(preset::Read::Passed),
        checked => checked.map(preset::Read::Attempt),
    }
}

/// How to read one line of a file of attempt events in `format`: in a mixed log, without
/// the prefix `kubectl logs --prefix` writes, in the format the line is written in
/// ([`line_format`]; `None`: not an attempt); otherwise as it is, in `format`.
fn line_as(text: &str, mixed: bool, format: InputFormat) -> Option<(InputFormat, &str)> {
    if !mixed {
        return Some((format, text));
    }
    let text = without_pod_prefix(text);
    line_format(text).map(|format| (format, text))
}

/// `{…}` of `[pod/checkout-7d9f/app] {…}`: `kubectl logs --prefix` puts the pod and
/// container in brackets before each line. The line as it is when it has no such prefix.
fn without_pod_prefix(text: &str) -> &str {
    let Some(rest) = text.strip_prefix('[') else {
        return text;
    };
    let Some(end) = rest.find("] ") else {
        return text;
    };
    let name = &rest[..end];
    let is_pod = name.contains('/')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'-' | b'.' | b'_'));
    if is_pod {
        &rest[end + 2..]
    } else {
        text
    }
}

/// The format one line of a mixed log is written in: JSON when it starts with `{`, logfmt
/// when it starts with a `key=` pair, `None` (not an attempt) otherwise: a banner, a stack
/// trace, a plain log line.
fn line_format(text: &str) -> Option<InputFormat> {
    let text = text.trim_start();
    if text.starts_with('{') {
        return Some(InputFormat::Jsonl);
    }
    let key = text
        .bytes()
        .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b'@'))
        .count();
    (key > 0 && text.as_bytes().get(key) == Some(&b'=')).then_some(InputFormat::Logfmt)
}

/// JSON Lines when the first non-blank line starts with `{`, logfmt otherwise: the formats a
/// key mapping reads.
fn detect_event_format(bytes: &[u8]) -> InputFormat {
    match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => InputFormat::Jsonl,
        _ => InputFormat::Logfmt,
    }
}

/// OTLP, Zipkin or Jaeger when the first object looks like one (see [`detect_format`]).
fn spans_format(line: &[u8]) -> Option<InputFormat> {
    use serde::de::IgnoredAny;
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Sniff {
        #[serde(alias = "resource_spans", alias = "batches")]
        resource_spans: Option<IgnoredAny>,
        /// Jaeger's `data`, or a wrapper of a whole document (Tempo's `trace`, Jaeger
        /// v3's `result`).
        #[serde(alias = "trace", alias = "result")]
        data: Option<IgnoredAny>,
        trace_id: Option<IgnoredAny>,
        id: Option<IgnoredAny>,
        #[serde(alias = "operation_id", alias = "operation")]
        operation_id: Option<IgnoredAny>,
    }
    let sniff: Sniff = serde_json::from_slice(line).ok()?;
    if sniff.operation_id.is_some() {
        None
    } else if sniff.data.is_some() {
        Some(InputFormat::Jaeger)
    } else if sniff.resource_spans.is_some() {
        Some(InputFormat::Otlp)
    } else if sniff.trace_id.is_some() && sniff.id.is_some() {
        Some(InputFormat::Zipkin)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(policy: BadInputPolicy) -> InputConfig {
        InputConfig {
            paths: vec![],
            format: InputFormat::Auto,
            bad_input: policy,
            progress: false,
            max_line_bytes: None,
            spans: SpanMapping::new(&HopOrder::default(), vec![false; 4]),
            mapping: None,
            presets: Vec::new(),
            partition: None,
            budget: None,
        }
    }

    fn ingest_bytes(bytes: &[u8], policy: BadInputPolicy) -> Result<Ingested> {
        let (config, hops) = (config(policy), HopOrder::default());
        let mut reader = Reader::new(&config, &hops);
        let file = reader.add_file("mem");
        reader.read_lines(
            Box::new(std::io::Cursor::new(bytes.to_vec())),
            None,
            file,
            &mut Progress::hidden(),
        )?;
        reader.finish()
    }

    #[test]
    fn numbers_lines_across_blank_lines_and_reports_the_truncated_tail() {
        let text = b"{\"operation_id\":\"a\",\"start_ms\":1}\n\n{\"operation_id\":\"b\",\"start_ms\":2}\n{\"operation_id\":\"c\",\"sta";
        let got = ingest_bytes(text, BadInputPolicy::Report).unwrap();
        assert_eq!(got.events.len(), 2);
        assert_eq!(got.events[1].source.line, 3);
        assert_eq!(got.diagnostics.issues().len(), 1);
        assert_eq!(got.diagnostics.issues()[0].line, 4);
        assert!(
            got.diagnostics.issues()[0].message.contains("truncated"),
            "{}",
            got.diagnostics.issues()[0].message
        );
    }

    #[test]
    fn an_operation_id_under_two_test_runs_is_two_operations() {
        let lines = [
            r#"{"operation_id":"a","test_run_id":"r1","start_ms":1}"#,
            r#"{"operation_id":"a","start_ms":2}"#,
            r#"{"operation_id":"r1","test_run_id":"a","start_ms":3}"#,
            r#"{"operation_id":"a","test_run_id":"r2","start_ms":4}"#,
            r#"{"operation_id":"a","start_ms":5}"#,
            r#"{"operation_id":"a","test_run_id":"r1","start_ms":6}"#,
            r#"{"operation_id":"a","test_run_id":"r2","start_ms":7}"#,
        ];
        let got = ingest_bytes(lines.join("\n").as_bytes(), BadInputPolicy::Report).unwrap();
        let key = |e: &Event| {
            let (run, id) = got.operations[e.op as usize];
            (run.map(|r| got.strings.resolve(r)), got.strings.resolve(id))
        };
        let keys: Vec<_> = got.events.iter().map(key).collect();
        assert_eq!(
            keys,
            [
                (Some("r1"), "a"),
                (None, "a"),
                (Some("a"), "r1"),
                (Some("r2"), "a"),
                (None, "a"),
                (Some("r1"), "a"),
                (Some("r2"), "a"),
            ]
        );
        let ops: Vec<u32> = got.events.iter().map(|e| e.op).collect();
        assert_eq!(ops, [0, 1, 2, 3, 1, 0, 3]);
        assert_eq!(got.operations.len(), 4);
    }

    #[test]
    fn strict_stops_at_the_first_bad_line() {
        let err = ingest_bytes(b"{\"start_ms\":1}\n", BadInputPolicy::Strict).unwrap_err();
        assert!(format!("{err:#}").contains("mem:1: missing operation_id"));
    }

    #[test]
    fn a_json_document_the_first_line_does_not_close_is_read_whole() {
        use document::Kind;
        let auto = InputFormat::Auto;
        let cases: [(&[u8], bool, InputFormat, Layout); 12] = [
            // Pretty-printed: the first line opens what later lines close.
            (
                b"{\n  \"resourceSpans\": []\n}\n",
                true,
                auto,
                Layout::Documents(None),
            ),
            (
                b"[\n {\"traceId\":\"a\"}\n]",
                true,
                auto,
                Layout::Documents(None),
            ),
            // A first line longer than the chunk read so far is a long line (an OTLP
            // batch is a line up to its limit), unless it opens a document that only comes
            // whole.
            (b"{\"resourceSpans\":[{", false, auto, Layout::Lines(None)),
            (b"{\"data\":[{", false, auto, Layout::Documents(None)),
            (
                b"{\"operation_id\":\"o\",\"note\":\"aaa",
                false,
                auto,
                Layout::Lines(None),
            ),
            // One line cut off at the end of the file: a truncated line, as before.
            (b"{\"resourceSpans\":[{", true, auto, Layout::Lines(None)),
            // Jaeger's and Tempo v2's documents only come whole, even on one line.
            (b"{\"data\":[]}\n", true, auto, Layout::Documents(None)),
            (
                b"{\"trace\":{\"batches\":[]}}",
                true,
                auto,
                Layout::Documents(None),
            ),
            (
                b"{\"resourceSpans\":[]}\n{\"resourceSpans\":[]}\n",
                true,
                auto,
                Layout::Lines(None),
            ),
            (
                b"{\"operation_id\":\"o\",\"data\":1}\n",
                true,
                auto,
                Layout::Lines(None),
            ),
            (
                b"{\n\"resourceSpans\":[]}",
                true,
                InputFormat::Otlp,
                Layout::Documents(Some(Kind::Otlp)),
            ),
            (
                b"{\"data\":[]}",
                true,
                InputFormat::Jsonl,
                Layout::Lines(Some(InputFormat::Jsonl)),
            ),
        ];
        for (head, eof, forced, expected) in cases {
            assert_eq!(
                layout(head, eof, forced),
                expected,
                "{}",
                String::from_utf8_lossy(head)
            );
        }
        assert_eq!(
            layout(b"x", true, InputFormat::Jaeger),
            Layout::Documents(Some(Kind::Jaeger))
        );
        assert_eq!(
            layout(b" \n", true, InputFormat::Jaeger),
            Layout::Lines(Some(InputFormat::Jaeger))
        );
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
        assert!(got.diagnostics.issues().is_empty());
    }

    /// Fuzz target (see `crate::fuzz`): no input makes reading, span resolution or the
    /// analysis panic; bad input is bad lines.
    #[test]
    fn fuzz_ingest() {
        let rules = crate::rules::Rules::new(HopOrder::default());
        let mut config = config(BadInputPolicy::Report);
        config.max_line_bytes = Some(4096);
        crate::fuzz::run("ingest", |bytes| {
            let mut reader = Reader::new(&config, &rules.hops);
            let file = reader.add_file("fuzz");
            reader
                .read_lines(
                    Box::new(std::io::Cursor::new(bytes.to_vec())),
                    None,
                    file,
                    &mut Progress::hidden(),
                )
                .expect("bad input is reported, not an error");
            let ingested = reader.finish().expect("not under --strict");
            let keep = crate::analysis::Keep::Worst(3);
            crate::partial::analyze(
                ingested,
                &rules,
                &keep,
                3,
                &mut crate::analysis::tally::Discard,
            )
            .expect("the analysis of what was read");
        });
    }
}

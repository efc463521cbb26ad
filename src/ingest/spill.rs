//! Spilling: when the events read would not fit the memory budget (`--memory-limit`), they
//! are hash-partitioned by operation key ([`partition_of`]) into compact files under a
//! temporary directory (`--temp-dir`), then read back one partition at a time. Owns the
//! budget's figures, the spill file encoding, the splitting of a partition that turned out
//! too big, and the temporary directory's lifetime: removed when the run ends, on an error
//! and on Ctrl-C.
//!
//! A spill file is a sequence of blocks, one per operation and write (an operation read in
//! two stretches of the input has two blocks, which reading back joins):
//!
//! ```text
//! block:  run+1 (varint; 0 = no test run) [run bytes]  id_len (varint) id bytes
//!         events (varint)  event…
//! event:  flags (varint: which optional fields follow, effect, hidden, untimed, kind)
//!         file (varint) line (zigzag varint: the difference from the line before)
//!         hop (varint)
//!         [start] [finish]  (each: a zigzag varint, or an f64 when it is not whole)
//!         [attempt varint] [delivery varint] [outcome varint]
//!         [delay f32] [retry_after f32]
//!         [target] [message_id] [span_id] [parent_id]  (each: len varint, bytes)
//! ```
//!
//! An event is written against the one before it in its block ([`Before`]): its line as
//! the difference from that one's; a start of whole milliseconds (as nearly every log's
//! are) as the difference from that one's start, a finish from its own start. The
//! differences are a few bytes where the whole values are many, and every spilled byte is
//! copied twice (into the page cache and back).
//!
//! Blocks come from the events held in memory at a spill ([`Parts::write`]: one block per
//! operation and spill) and, once spilling began, from lines encoded where they were parsed
//! ([`encode_lines`]: one block per operation and stretch of lines); both encode through
//! one function, so that they write the same bytes for the same event.
//!
//! A string the event before it in its block has in the same place is not written again:
//! its flag says "the same" (an operation's events mostly share their target and message
//! ID; the spill files are a third smaller, and a repeat costs no lookup on either side).
//!
//! Little-endian, no padding: a generated event takes about 25 bytes with its share of
//! the strings, against 190 as JSON and 72 in memory (its strings apart). The files live
//! only as long as the run, so the encoding has no version: the same binary writes and
//! reads them.

use std::borrow::Cow;
use std::fs::{File, OpenOptions};
use std::hash::BuildHasher;
use std::io::{ErrorKind, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use rayon::prelude::*;

use crate::atomic;
use crate::codec::{put_varint, unzigzag, whole_ms, zigzag};
use crate::model::{
    partition_of, Event, EventFields, EventKind, Interner, Outcome, PointKind, SourceRef, Step,
    StrHash, Sym, Timing,
};

/// `--memory-limit` when none is given: 1 GiB. A laptop or a CI runner (GitHub's smallest
/// Linux runner has 7 GB, GitLab's 8 GB) has that to spare beside a browser or a build,
/// and it holds about 1.75 M events in memory before anything is spilled, so runs up to
/// about 350 k operations of a typical log never touch the disk.
pub const DEFAULT_MEMORY_LIMIT: u64 = 1 << 30;

/// The smallest `--memory-limit`: 64 MiB. Beside the events it budgets, a run holds a part
/// of its own that no limit shrinks (the program, thread stacks, read-ahead and
/// write-behind buffers, the allocator's arenas, the merge's heads), up to about
/// [`MIN_MEMORY_LIMIT`] more again: below it that part, not the limit, would bound the
/// process, and a limit of a few bytes would make a partition of every few events.
pub const MIN_MEMORY_LIMIT: u64 = 64 << 20;

/// The events read (with their strings and operation table) may hold this share of the
/// memory limit, 1/8, before they are spilled; a partition read back may hold as much. The
/// analysis of a partition takes about as much again (the grouping index, the per-operation
/// results, the partial), the rows and retry starts of the merge and the program's fixed
/// part (code, threads, 8 MiB read buffers, about 60 MB) come on top.
///
/// Not more: memory first touched is dear (the kernel zeroes each fresh page), while a
/// spill file is written into the page cache and read back once, so a larger share buys
/// no time and costs peak memory. Not less: more partitions raise the merge's peak.
pub const EVENTS_SHARE: u64 = 8;

/// The fewest and the most partitions one spill (or one split of a partition) makes. The
/// files are opened for each write and closed again, so many cost no file descriptors.
const MIN_PARTITIONS: u32 = 2;
const MAX_PARTITIONS: u32 = 1024;

/// Partitions made when the input's size is unknown (stdin): a partition that turns out
/// too big is split again when it is read back.
const PARTITIONS_UNKNOWN_SIZE: u32 = 16;

/// Room left in each partition when the input's size is estimated: the estimate is made
/// from the first part of the input, and a partition split again costs a second write.
const HEADROOM: f64 = 1.5;

/// Bytes a read-back event is counted as in memory beside its encoded bytes: the event
/// itself and its share of the grouping index.
const EVENT_MEMORY_BYTES: u64 = std::mem::size_of::<Event>() as u64 + 8;

/// The memory budget and where to spill beyond it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    /// `--memory-limit`, in bytes.
    pub limit_bytes: u64,
    /// `--temp-dir`; `None`: the system's ([`std::env::temp_dir`], `TMPDIR` on Unix).
    pub temp_dir: Option<PathBuf>,
}

impl Budget {
    /// The most bytes the events read may hold.
    pub fn events_bytes(&self) -> u64 {
        (self.limit_bytes / EVENTS_SHARE).max(1)
    }

    /// The most bytes one partition read back may hold: a [`PARTITION_SHARES`]th of the
    /// events' share, as [`super::PARTITIONS_AT_ONCE`] are read at once.
    pub fn partition_bytes(&self) -> u64 {
        (self.events_bytes() / PARTITION_SHARES).max(1)
    }
}

/// The events' share of the budget is split in three for the two partitions read back at
/// once ([`super::PARTITIONS_AT_ONCE`]): each partition's pass holds more than its events
/// (its rows, the workers' lists), so two at once in half the share each would peak
/// above one at a time in all of it; in a third each they peak as one does, and keep both
/// cores busy (BENCHMARKS.md has the figures). More, smaller partitions cost the merge little (its readers' buffers are
/// shared out, see `partial::merge`).
pub const PARTITION_SHARES: u64 = 3;

/// Events grouped as ingest holds them: the events, the operation table their `op` indexes,
/// and the strings their symbols name.
pub struct EventsRef<'a> {
    pub events: &'a [Event],
    pub operations: &'a [(Option<Sym>, Sym)],
    pub strings: &'a Interner,
}

/// One spill file: the operations whose key hashes to `residue` modulo `modulus`.
#[derive(Debug, Clone)]
pub struct Part {
    path: PathBuf,
    modulus: u32,
    residue: u32,
    pub events: u64,
    pub bytes: u64,
}

impl Part {
    /// What the part takes in memory once read back (its strings counted at their encoded
    /// size, which is more than they take interned).
    pub fn memory_bytes(&self) -> u64 {
        self.events * EVENT_MEMORY_BYTES + self.bytes
    }
}

/// A set of spill files, one per residue of a modulus (`first`, `first + step`, …): the
/// partitions of a spill, or the parts a partition too big to read back was split into.
#[derive(Debug)]
pub struct Parts {
    modulus: u32,
    first: u32,
    step: u32,
    pub parts: Vec<Part>,
    /// Per part, blocks encoded on the parse threads ([`Parts::append`]) not written yet.
    pending: Vec<Vec<u8>>,
}

/// Which of a [`Parts`]' files an operation's events go to: a copy the parse threads take.
#[derive(Debug, Clone, Copy)]
pub struct Router {
    modulus: u32,
    first: u32,
    step: u32,
}

impl Router {
    /// The index in [`Parts::parts`] of the part holding operation `(run, id)`.
    pub fn part_of(self, run: Option<&str>, id: &str) -> u32 {
        (partition_of(run, id, self.modulus) - self.first) / self.step
    }
}

impl Parts {
    fn new(dir: &TempDir, modulus: u32, first: u32, step: u32) -> Parts {
        let count = modulus / step;
        let parts: Vec<Part> = (0..count)
            .map(|k| {
                let residue = first + k * step;
                Part {
                    path: dir.path.join(format!("part-{modulus}-{residue}.bin")),
                    modulus,
                    residue,
                    events: 0,
                    bytes: 0,
                }
            })
            .collect();
        Parts {
            modulus,
            first,
            step,
            pending: vec![Vec::new(); parts.len()],
            parts,
        }
    }

    pub fn router(&self) -> Router {
        Router {
            modulus: self.modulus,
            first: self.first,
            step: self.step,
        }
    }

    /// Appends blocks encoded by [`encode_lines`] to their parts: kept in memory up to
    /// `pending_bytes` per part, then written.
    pub fn append(&mut self, encoded: &Encoded, pending_bytes: usize) -> Result<()> {
        let mut from = 0;
        for &(index, to, events) in &encoded.parts {
            let (part, pending) = (
                &mut self.parts[index as usize],
                &mut self.pending[index as usize],
            );
            let bytes = &encoded.bytes[from..to];
            pending.extend_from_slice(bytes);
            part.events += events;
            part.bytes += bytes.len() as u64;
            if pending.len() >= pending_bytes {
                Appender::open(&part.path)?.write(pending)?;
                pending.clear();
            }
            from = to;
        }
        Ok(())
    }

    /// Writes every part's pending blocks: before anything else is appended to the files
    /// (each operation's events stay in input order). Reading ends with a last
    /// [`Parts::write`], so the files are whole before they are read back.
    fn flush(&mut self) -> Result<()> {
        for (part, pending) in self.parts.iter().zip(&mut self.pending) {
            if !pending.is_empty() {
                Appender::open(&part.path)?.write(pending)?;
                *pending = Vec::new();
            }
        }
        Ok(())
    }

    /// Appends `events` to the files of their operations' partitions.
    pub fn write(&mut self, from: EventsRef) -> Result<()> {
        self.flush()?;
        let strings = from.strings;
        let key = |op: usize| {
            let (run, id) = from.operations[op];
            (run.map(|r| strings.resolve(r)), strings.resolve(id))
        };
        // Each operation's events, in input order (a counting sort: no comparison sort of
        // millions of events).
        let ops = from.operations.len();
        let mut offsets = vec![0u32; ops + 1];
        for e in from.events {
            offsets[e.op as usize + 1] += 1;
        }
        for i in 1..offsets.len() {
            offsets[i] += offsets[i - 1];
        }
        let mut next = offsets.clone();
        let mut order = vec![0u32; from.events.len()];
        for (i, e) in from.events.iter().enumerate() {
            order[next[e.op as usize] as usize] = i as u32;
            next[e.op as usize] += 1;
        }
        drop(next);
        // Each part's operations, in operation order.
        let mut by_part: Vec<Vec<u32>> = vec![Vec::new(); self.parts.len()];
        for op in 0..ops {
            if offsets[op] == offsets[op + 1] {
                continue;
            }
            let (run, id) = key(op);
            let residue = partition_of(run, id, self.modulus);
            by_part[((residue - self.first) / self.step) as usize].push(op as u32);
        }
        // The parts are encoded and written in parallel, each into its own buffer.
        self.parts
            .par_iter_mut()
            .zip(by_part)
            .filter(|(_, ops)| !ops.is_empty())
            .try_for_each(|(part, ops)| {
                // Written a piece at a time: encoding a whole spill before writing it
                // would hold another copy of the events.
                let mut file = Appender::open(&part.path)?;
                let mut buf = Vec::with_capacity(SPILL_WRITE_BYTES + (64 << 10));
                let events_of = |op: u32| {
                    &order[offsets[op as usize] as usize..offsets[op as usize + 1] as usize]
                };
                for (k, &op) in ops.iter().enumerate() {
                    // An operation's events lie anywhere in the input: loaded while the
                    // operations before them are encoded (waiting on each event's first
                    // load was half of encoding).
                    if let Some(&ahead) = ops.get(k + OPS_AHEAD) {
                        for &i in events_of(ahead) {
                            crate::model::prefetch(&from.events[i as usize]);
                        }
                    }
                    let events = events_of(op);
                    let (run, id) = key(op as usize);
                    put_block_header(&mut buf, run, id, events.len() as u64);
                    let mut before = Before::block();
                    for &i in events {
                        let e = EventParts::of(&from.events[i as usize]);
                        let texts = texts_of(&e.fields, strings);
                        put_event(&mut buf, &e, texts, &mut before);
                    }
                    part.events += events.len() as u64;
                    if buf.len() >= SPILL_WRITE_BYTES {
                        file.write(&buf)?;
                        part.bytes += buf.len() as u64;
                        buf.clear();
                    }
                }
                file.write(&buf)?;
                part.bytes += buf.len() as u64;
                Ok(())
            })
    }
}

/// An event of a line just parsed, for [`encode_lines`]: its operation's key, the event's
/// parts (its string fields empty) and its strings as text. It owns the strings, taken
/// from the parsed line, so that the line can be dropped as soon as it is parsed: kept
/// until its events were encoded, each line (240 bytes) was copied once more.
pub struct LineEvent<'a> {
    pub run: Option<Cow<'a, str>>,
    pub id: Cow<'a, str>,
    pub event: EventParts,
    pub texts: [Option<Cow<'a, str>>; 4],
}

/// What an event's encoding reads: an [`Event`]'s parts, unpacked. A line spilled as it is
/// read is encoded from these as the line gave them: packed into an `Event` and unpacked
/// again, it took more instructions than the encoding itself.
pub struct EventParts {
    pub source: SourceRef,
    pub hop: u16,
    pub timing: Timing,
    pub fields: EventFields,
}

impl EventParts {
    fn of(e: &Event) -> EventParts {
        EventParts {
            source: e.source,
            hop: e.hop,
            timing: e.timing(),
            fields: e.fields(),
        }
    }
}

/// Blocks encoded on a parse thread, ordered by part: for [`Parts::append`].
#[derive(Debug, Default)]
pub struct Encoded {
    bytes: Vec<u8>,
    /// Per part with events: its index, where its blocks end in `bytes`, its events.
    parts: Vec<(u32, usize, u64)>,
}

/// Encodes a stretch of lines' events as blocks, one per operation (in the order the
/// operations first appear, each one's events in input order), grouped by the part
/// `router` sends them to. Run on the parse threads, so that lines spilled as they are
/// read are never interned, kept or encoded on the one thread that keeps lines in order.
/// An operation's events mostly lie a few lines apart (in a generated log, half within 6
/// lines, three quarters within 44), so a stretch of a thousand lines makes few blocks.
pub fn encode_lines(router: Router, lines: &[LineEvent]) -> Encoded {
    // Each group by its index alone, its key read from its first line: four bytes a slot,
    // where a map of the keys would hold forty (two string references and the index).
    let hasher = foldhash::fast::FixedState::default();
    fn key_of<'l>(line: &'l LineEvent<'_>) -> (Option<&'l str>, &'l str) {
        (line.run.as_deref(), &line.id)
    }
    let mut groups: hashbrown::HashTable<u32> = hashbrown::HashTable::with_capacity(lines.len());
    let mut group_first: Vec<u32> = Vec::new();
    // Per group: its part and its events.
    let mut group_parts: Vec<u32> = Vec::new();
    let mut counts: Vec<u64> = Vec::new();
    // Each line as part, group and index, in one number: sorted, the order to write in.
    let mut order: Vec<u64> = Vec::with_capacity(lines.len());
    // A stretch is a thousand lines of at most a thousand attempts each (a preset's
    // attempt count is capped there): its indexes fit 22 bits, the parts 20.
    assert!(lines.len() < 1 << 22 && (MAX_PARTITIONS as usize) < 1 << 20);
    for (i, line) in lines.iter().enumerate() {
        let next = group_parts.len() as u32;
        let key = key_of(line);
        let first_of = |g: u32| &lines[group_first[g as usize] as usize];
        let group = *groups
            .entry(
                hasher.hash_one(key),
                |&g| key_of(first_of(g)) == key,
                |&g| hasher.hash_one(key_of(first_of(g))),
            )
            .or_insert(next)
            .get();
        if group == next {
            group_first.push(i as u32);
            group_parts.push(router.part_of(key.0, key.1));
            counts.push(0);
        }
        counts[group as usize] += 1;
        let part = u64::from(group_parts[group as usize]);
        order.push(part << 44 | u64::from(group) << 22 | i as u64);
    }
    order.sort_unstable();
    let mut out = Encoded {
        bytes: Vec::with_capacity(lines.len() * 48),
        parts: Vec::new(),
    };
    // The group being written, and the events of its part so far.
    let mut current: Option<u32> = None;
    let mut part_events = 0;
    let mut before = Before::block();
    for &key in &order {
        let (part, group, i) = (
            (key >> 44) as u32,
            (key >> 22 & ((1 << 22) - 1)) as u32,
            (key & ((1 << 22) - 1)) as usize,
        );
        let line = &lines[i];
        if current != Some(group) {
            if let Some(last) = current.map(|g| group_parts[g as usize]) {
                if last != part {
                    out.parts
                        .push((last, out.bytes.len(), std::mem::take(&mut part_events)));
                }
            }
            current = Some(group);
            put_block_header(
                &mut out.bytes,
                line.run.as_deref(),
                &line.id,
                counts[group as usize],
            );
            before = Before::block();
        }
        let texts = line.texts.each_ref().map(|t| t.as_deref());
        put_event(&mut out.bytes, &line.event, texts, &mut before);
        part_events += 1;
    }
    if let Some(last) = current.map(|g| group_parts[g as usize]) {
        out.parts.push((last, out.bytes.len(), part_events));
    }
    out
}

/// How many operations ahead of the one encoded a spill loads the events of: an
/// operation has a few events, so this is about ten events ahead.
const OPS_AHEAD: usize = 2;

/// How much of a part is encoded before it is written: large enough for few writes,
/// small enough not to count against the budget.
const SPILL_WRITE_BYTES: usize = 1 << 20;

/// A spill file opened for appending; a full disk says which directory and what to do.
struct Appender<'a> {
    file: File,
    path: &'a Path,
}

impl<'a> Appender<'a> {
    fn open(path: &'a Path) -> Result<Appender<'a>> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| write_error(path, e))?;
        Ok(Appender { file, path })
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.file
            .write_all(bytes)
            .map_err(|e| write_error(self.path, e))
    }
}

fn write_error(path: &Path, e: std::io::Error) -> anyhow::Error {
    let dir = path.parent().unwrap_or(path).display();
    if e.kind() == ErrorKind::StorageFull || e.kind() == ErrorKind::QuotaExceeded {
        anyhow::anyhow!(
            "the temporary directory '{dir}' is full: the events that do not fit --memory-limit are spilled there (about 25 bytes per event); free space, point --temp-dir at a larger disk, or raise --memory-limit"
        )
    } else {
        anyhow::Error::new(e).context(format!(
            "could not write the spill file '{}' (choose another directory with --temp-dir)",
            path.display()
        ))
    }
}

/// Reads a spill file in batches of decoded blocks. The file is read in large pieces and
/// decoded from memory: no call per byte, no string allocated per event. A batch owns its bytes, so one thread can decode the next
/// batch while another interns the last one.
pub struct PartReader {
    file: File,
    path: PathBuf,
    /// Bytes read and not decoded yet: the start of a block the last batch cut off.
    carry: Vec<u8>,
    eof: bool,
}

/// Bytes read from a spill file per batch (more when one block is larger): about 20 000
/// events, so the few batches in flight take a few megabytes.
const BATCH_BYTES: usize = 1 << 19;

/// Blocks decoded from a spill file, and the text their strings point into. Refilled
/// again and again: its buffers are kept.
#[derive(Default)]
pub struct Batch {
    bytes: Vec<u8>,
    /// The strings of the blocks, copied here as they are decoded and checked as UTF-8
    /// all at once when the batch is full: the interning side slices them without
    /// checking them again (not once by each step that looks at them, nor one by one).
    text: String,
    blocks: Vec<BlockAt>,
    events: Vec<SpilledEvent>,
}

/// Where a decoded block is in its batch: its key as ranges of the text, its events as a
/// range of the events.
struct BlockAt {
    run: Option<TextAt>,
    id: TextAt,
    events: std::ops::Range<usize>,
}

/// A string of a batch: its range in the text, and its hash for the interner, computed on
/// the decoding thread (the interning one only looks it up).
#[derive(Debug, Clone, Copy)]
struct TextAt {
    from: u32,
    to: u32,
    hash: StrHash,
}

impl Batch {
    /// The batch's blocks, in file order.
    pub fn blocks(&self) -> impl Iterator<Item = Block<'_>> {
        let text = &self.text[..];
        self.blocks.iter().map(move |b| Block {
            run: b.run.map(|r| slice(text, r)),
            id: slice(text, b.id),
            run_hash: b.run.map(|r| r.hash),
            id_hash: b.id.hash,
            events: &self.events[b.events.clone()],
            text,
        })
    }
}

/// One block: an operation's key and its events (their strings still as text).
pub struct Block<'r> {
    pub run: Option<&'r str>,
    pub id: &'r str,
    run_hash: Option<StrHash>,
    id_hash: StrHash,
    events: &'r [SpilledEvent],
    /// The text the events' string ranges point into.
    text: &'r str,
}

/// An event read back, built apart from its operation and strings (built on the decoding
/// thread, it is only copied on the interning one); its strings not yet interned, each a
/// range of the batch's text.
struct SpilledEvent {
    event: Event,
    strings: [Option<TextAt>; 4],
}

impl Block<'_> {
    /// Starts loading the block's own first event and its ID's text, which the decoding
    /// thread wrote on the other core: [`Block::prefetch`] reads them to know what to load,
    /// and would wait on them.
    pub fn prefetch_own(&self) {
        if let Some(first) = self.events.first() {
            crate::model::prefetch(first);
            crate::model::prefetch(&first.strings);
        }
        if let Some(byte) = self.id.as_bytes().first() {
            crate::model::prefetch(byte);
        }
    }

    /// Starts loading the table slots of the block's ID and of its first event's strings
    /// (the events after it mostly repeat them).
    pub fn prefetch(&self, strings: &Interner, step: Step) {
        strings.prefetch_step(self.id_hash, step);
        if let Some(first) = self.events.first() {
            for at in first.strings.iter().flatten() {
                strings.prefetch_step(at.hash, step);
            }
        }
    }

    /// The block's key, each string with its hash: for [`Interner::intern_hashed`].
    pub fn key(&self) -> (Option<(StrHash, &str)>, (StrHash, &str)) {
        (self.run_hash.zip(self.run), (self.id_hash, self.id))
    }

    /// Appends the block's events to `into`, as operation `op`, their strings interned
    /// into `strings`.
    pub fn push_events(&self, op: u32, strings: &mut Interner, into: &mut Vec<Event>) {
        into.reserve(self.events.len());
        // The events of an operation mostly repeat its target and message ID: a repeat is
        // the very range of the text the event before it had in its place (the decoder
        // hands it on), and takes that one's symbol without a look at the text. A string
        // written again is a different one (the encoder marks every equal string a
        // repeat); were it not, interning it would give the same symbol all the same.
        let mut last: [Option<(TextAt, Sym)>; 4] = [None; 4];
        for e in self.events {
            let mut syms = [None; 4];
            for ((sym, range), last) in syms.iter_mut().zip(e.strings).zip(&mut last) {
                let Some(range) = range else { continue };
                let id = match *last {
                    Some((seen, id)) if seen.from == range.from && seen.to == range.to => id,
                    _ => strings.intern_hashed(slice(self.text, range), range.hash),
                };
                *last = Some((range, id));
                *sym = Some(id);
            }
            let mut event = e.event.with_strings(syms);
            event.op = op;
            into.push(event);
        }
    }
}

/// A string of a block, by its range in the batch's text: whole characters, as the
/// decoder copied them there.
fn slice(text: &str, TextAt { from, to, .. }: TextAt) -> &str {
    &text[from as usize..to as usize]
}

impl PartReader {
    pub fn open(part: &Part) -> Result<PartReader> {
        let file = File::open(&part.path)
            .with_context(|| format!("could not read the spill file '{}'", part.path.display()))?;
        Ok(PartReader {
            file,
            path: part.path.clone(),
            carry: Vec::new(),
            eof: false,
        })
    }

    /// Fills `batch` with the next whole blocks, at least one; `false` at the end of the
    /// file.
    pub fn fill(&mut self, batch: &mut Batch) -> Result<bool> {
        batch.bytes.clear();
        batch.bytes.append(&mut self.carry);
        let mut text = std::mem::take(&mut batch.text).into_bytes();
        text.clear();
        batch.blocks.clear();
        batch.events.clear();
        let mut want = BATCH_BYTES;
        loop {
            if !self.eof && batch.bytes.len() < want {
                self.read_to(&mut batch.bytes, want)?;
            }
            let mut d = Decoder {
                bytes: &batch.bytes,
                at: 0,
                text: &mut text,
            };
            // The end of the last whole block decoded.
            let mut used = 0;
            while d.at < d.bytes.len() {
                let first = batch.events.len();
                let text_first = d.text.len();
                match decode_block(&mut d, &mut batch.events) {
                    Ok(header) => {
                        batch.blocks.push(BlockAt {
                            run: header.run,
                            id: header.id,
                            events: first..batch.events.len(),
                        });
                        used = d.at;
                    }
                    Err(Stop::More) => {
                        batch.events.truncate(first);
                        d.text.truncate(text_first);
                        break;
                    }
                    Err(Stop::Damaged(what)) => return Err(self.damaged(what)),
                }
            }
            if !batch.blocks.is_empty() {
                // The block cut off at the end starts the next batch.
                self.carry.extend_from_slice(&batch.bytes[used..]);
                batch.bytes.truncate(used);
                batch.text = checked_text(text, &mut batch.blocks, &mut batch.events)
                    .map_err(|what| self.damaged(what))?;
                return Ok(true);
            }
            if self.eof {
                if batch.bytes.is_empty() {
                    // The text's memory goes back with the batch, for the next part.
                    text.clear();
                    batch.text = String::from_utf8(text).unwrap_or_default();
                    return Ok(false);
                }
                return Err(self.damaged("cut short"));
            }
            // One block larger than the bytes read: read more.
            want = batch.bytes.len() * 2;
        }
    }

    fn damaged(&self, what: &str) -> anyhow::Error {
        anyhow::Error::new(damaged(what)).context(format!(
            "the spill file '{}' is damaged (was it changed while the run went on?)",
            self.path.display()
        ))
    }

    /// Reads on to `want` bytes in `bytes`, or to the end of the file.
    fn read_to(&mut self, bytes: &mut Vec<u8>, want: usize) -> Result<()> {
        let more = want - bytes.len();
        bytes.reserve(more);
        let read = (&mut self.file)
            .take(more as u64)
            .read_to_end(bytes)
            .with_context(|| format!("could not read the spill file '{}'", self.path.display()))?;
        if read < more {
            self.eof = true;
        }
        Ok(())
    }
}

// Presence and flag bits of an encoded event, the ones most events set first: a varint
// holds seven bits a byte, so a record with its times, attempt, outcome, target and
// message ID, repeated or not, takes two bytes of flags.
const HAS_START: u64 = 1;
const HAS_FINISH: u64 = 1 << 1;
const HAS_ATTEMPT: u64 = 1 << 2;
const HAS_OUTCOME: u64 = 1 << 3;
const HAS_TARGET: u64 = 1 << 4;
/// With the string's presence bit: the same string as the event before in the block.
const SAME_TARGET: u64 = 1 << 5;
const HAS_MESSAGE: u64 = 1 << 6;
const SAME_MESSAGE: u64 = 1 << 7;
/// The start (or the finish) is not a whole number of milliseconds: written as an `f64`,
/// not as the difference from the time before.
const START_FRACTION: u64 = 1 << 8;
const FINISH_FRACTION: u64 = 1 << 9;
const HAS_DELIVERY: u64 = 1 << 10;
const HAS_SPAN: u64 = 1 << 11;
const SAME_SPAN: u64 = 1 << 12;
const HAS_PARENT: u64 = 1 << 13;
const SAME_PARENT: u64 = 1 << 14;
const HAS_DELAY: u64 = 1 << 15;
const HAS_RETRY_AFTER: u64 = 1 << 16;
const EFFECT: u64 = 1 << 17;
const HIDDEN: u64 = 1 << 18;
const UNTIMED: u64 = 1 << 19;
/// The event's kind, its place in [`KINDS`] (0, a record, for most), in the top bits.
const KIND_SHIFT: u32 = 20;

/// Per string place (target, message ID, span ID, parent ID): its presence bit and its
/// "the same as before" bit.
const STRING_BITS: [(u64, u64); 4] = [
    (HAS_TARGET, SAME_TARGET),
    (HAS_MESSAGE, SAME_MESSAGE),
    (HAS_SPAN, SAME_SPAN),
    (HAS_PARENT, SAME_PARENT),
];

/// The kinds of event, by their code: a record, then the point kinds.
const KINDS: [EventKind; 5] = [
    EventKind::Record,
    EventKind::Point(PointKind::Start),
    EventKind::Point(PointKind::Finish),
    EventKind::Point(PointKind::Timeout),
    EventKind::Point(PointKind::Cancel),
];

/// Named outcomes as 1…5; an HTTP status as itself (100…599, never one of those).
const OUTCOMES: [Outcome; 5] = [
    Outcome::Ok,
    Outcome::Error,
    Outcome::Timeout,
    Outcome::Cancelled,
    Outcome::Rejected,
];

/// The code of an event's kind: its place in [`KINDS`].
fn kind_code(kind: EventKind) -> u64 {
    KINDS.iter().position(|&k| k == kind).expect("a kind") as u64
}

fn outcome_code(o: Outcome) -> u64 {
    match o {
        Outcome::Http(code) => u64::from(code),
        named => OUTCOMES.iter().position(|&n| n == named).expect("named") as u64 + 1,
    }
}

fn outcome_of(code: u64) -> Option<Outcome> {
    match code {
        1..=5 => Some(OUTCOMES[code as usize - 1]),
        _ => Outcome::from_status(code as i64),
    }
}

/// What an event is written against: the event before it in its block. Its strings, its
/// line and its start (a time without a start leaves the one before) — an operation's
/// events lie a few lines and milliseconds apart, so their differences take a byte or two
/// where the line took three or four and each time eight.
#[derive(Clone, Copy)]
struct Before<T> {
    strings: [Option<T>; 4],
    line: u32,
    ms: i64,
}

impl<T: Copy> Before<T> {
    /// What a block's first event is written against.
    fn block() -> Before<T> {
        Before {
            strings: [None; 4],
            line: 0,
            ms: 0,
        }
    }
}

fn put_str(buf: &mut Vec<u8>, s: &str) {
    put_varint(buf, s.len() as u64);
    buf.extend_from_slice(s.as_bytes());
}

fn put_block_header(buf: &mut Vec<u8>, run: Option<&str>, id: &str, events: u64) {
    match run {
        None => put_varint(buf, 0),
        Some(r) => {
            put_varint(buf, r.len() as u64 + 1);
            buf.extend_from_slice(r.as_bytes());
        }
    }
    put_str(buf, id);
    put_varint(buf, events);
}

/// The strings of an event held in memory, as text: target, message ID, span ID, parent ID.
fn texts_of<'s>(f: &EventFields, strings: &'s Interner) -> [Option<&'s str>; 4] {
    [f.target, f.message_id, f.span_id, f.parent_id].map(|s| s.map(|s| strings.resolve(s)))
}

/// The most bytes an event takes before its strings: flags (23 bits, 4 bytes as a
/// varint), file (5), line's difference (33 bits, 5), hop (3), start and finish (a 64-bit
/// difference, 10 each), attempt and delivery (5 each), outcome (2: at most 599), delay
/// and retry-after (4 each).
const FIXED_MAX: usize = 4 + 5 + 5 + 3 + 20 + 10 + 2 + 8;

/// An event's bytes before its strings, built in an array on the stack and appended to the
/// spill buffer at once: pushed byte by byte, each push would load the vector's length
/// and capacity again (a store through its pointer might have changed them).
struct Fixed {
    bytes: [u8; FIXED_MAX],
    len: usize,
}

impl Fixed {
    fn new() -> Fixed {
        Fixed {
            bytes: [0; FIXED_MAX],
            len: 0,
        }
    }

    #[inline(always)]
    fn varint(&mut self, mut n: u64) {
        while n >= 0x80 {
            self.bytes[self.len] = (n as u8) | 0x80;
            self.len += 1;
            n >>= 7;
        }
        self.bytes[self.len] = n as u8;
        self.len += 1;
    }

    #[inline(always)]
    fn put<const N: usize>(&mut self, bytes: [u8; N]) {
        self.bytes[self.len..self.len + N].copy_from_slice(&bytes);
        self.len += N;
    }

    fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// Appends `e` with its strings `texts` (its own string fields are not looked at: a line
/// spilled as it is read has none yet), written against `before`, the event before it in
/// its block.
fn put_event<'t>(
    buf: &mut Vec<u8>,
    e: &EventParts,
    texts: [Option<&'t str>; 4],
    before: &mut Before<&'t str>,
) {
    let f = &e.fields;
    let (kind, start, finish) = e.timing.parts();
    // As an `Event` holds them: attempt and delivery numbers start at 1, 0 is none.
    let (attempt, delivery) = (
        f.attempt.filter(|&n| n != 0),
        f.delivery.filter(|&n| n != 0),
    );
    let (start_ms, finish_ms) = (start.map(whole_ms), finish.map(whole_ms));
    let bit = |present: bool, flag: u64| if present { flag } else { 0 };
    let mut flags = bit(start.is_some(), HAS_START)
        | bit(finish.is_some(), HAS_FINISH)
        | bit(start_ms == Some(None), START_FRACTION)
        | bit(finish_ms == Some(None), FINISH_FRACTION)
        | bit(attempt.is_some(), HAS_ATTEMPT)
        | bit(delivery.is_some(), HAS_DELIVERY)
        | bit(f.outcome.is_some(), HAS_OUTCOME)
        | bit(f.delay_ms.is_some(), HAS_DELAY)
        | bit(f.retry_after_ms.is_some(), HAS_RETRY_AFTER)
        | bit(f.effect, EFFECT)
        | bit(f.hidden, HIDDEN)
        | bit(f.untimed, UNTIMED)
        | kind_code(kind) << KIND_SHIFT;
    for ((text, before), (present, same)) in
        texts.iter().zip(before.strings.iter()).zip(STRING_BITS)
    {
        if let Some(text) = text {
            flags |= present;
            // The same place in memory is the same string; an interned one is, too.
            if before.is_some_and(|b| {
                std::ptr::eq(*text, b) || crate::model::short_eq(text.as_bytes(), b.as_bytes())
            }) {
                flags |= same;
            }
        }
    }
    let mut out = Fixed::new();
    out.varint(flags);
    out.varint(u64::from(e.source.file));
    out.varint(zigzag(
        i64::from(e.source.line) - i64::from(std::mem::replace(&mut before.line, e.source.line)),
    ));
    out.varint(u64::from(e.hop));
    // A whole start as the difference from the start before; a whole finish as the
    // difference from its own start (or, without one, from the start before).
    match (start, start_ms) {
        (Some(_), Some(Some(ms))) => {
            out.varint(zigzag(ms.wrapping_sub(before.ms)));
            before.ms = ms;
        }
        (Some(t), _) => out.put(t.to_le_bytes()),
        (None, _) => {}
    }
    match (finish, finish_ms) {
        (Some(_), Some(Some(ms))) => out.varint(zigzag(ms.wrapping_sub(before.ms))),
        (Some(t), _) => out.put(t.to_le_bytes()),
        (None, _) => {}
    }
    for n in [attempt, delivery].into_iter().flatten() {
        out.varint(u64::from(n));
    }
    if let Some(o) = f.outcome {
        out.varint(outcome_code(o));
    }
    // The event holds these as f32 already: the f32 gives back the same value.
    for d in [f.delay_ms, f.retry_after_ms].into_iter().flatten() {
        out.put((d as f32).to_le_bytes());
    }
    buf.extend_from_slice(out.as_slice());
    for (text, (_, same)) in texts.iter().zip(STRING_BITS) {
        if let Some(text) = text.filter(|_| flags & same == 0) {
            put_str(buf, text);
        }
    }
    before.strings = texts;
}

fn damaged(what: &str) -> std::io::Error {
    std::io::Error::new(ErrorKind::InvalidData, what.to_string())
}

/// Why a block could not be decoded from the bytes at hand.
enum Stop {
    /// It goes on past them.
    More,
    Damaged(&'static str),
}

/// Decodes a block from bytes in memory, its strings copied to `text` as they are: they
/// are checked as UTF-8, and hashed, once the batch is decoded ([`checked_text`]).
struct Decoder<'a> {
    bytes: &'a [u8],
    at: usize,
    text: &'a mut Vec<u8>,
}

/// Where a decoded block's key is in the text.
struct Header {
    run: Option<TextAt>,
    id: TextAt,
}

impl<'a> Decoder<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Stop> {
        let end = self
            .at
            .checked_add(n)
            .ok_or(Stop::Damaged("length out of range"))?;
        let bytes = self.bytes.get(self.at..end).ok_or(Stop::More)?;
        self.at = end;
        Ok(bytes)
    }

    #[inline(always)]
    fn byte(&mut self) -> Result<u8, Stop> {
        let b = *self.bytes.get(self.at).ok_or(Stop::More)?;
        self.at += 1;
        Ok(b)
    }

    /// Always inline: several a decoded event, where a call costs more than the decoding.
    /// Its own loop rather than `codec::varint_at` (the same format): it tells a cut-off
    /// varint from a damaged one as it reads, not after the shared reader returned.
    #[inline(always)]
    fn varint(&mut self) -> Result<u64, Stop> {
        let mut n = 0u64;
        let mut shift = 0;
        loop {
            if shift > 63 {
                return Err(Stop::Damaged("varint too long"));
            }
            let byte = self.byte()?;
            n |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(n);
            }
            shift += 7;
        }
    }

    /// Always inline, as [`Decoder::varint`]: left to the compiler, it was a call in one
    /// build and inlined in the next.
    #[inline(always)]
    fn u32(&mut self) -> Result<u32, Stop> {
        u32::try_from(self.varint()?).map_err(|_| Stop::Damaged("number out of range"))
    }

    /// A string of `len` bytes, copied to the text: its range there (its hash still to
    /// be computed, by [`checked_text`]).
    fn string(&mut self, len: u64) -> Result<TextAt, Stop> {
        let len = usize::try_from(len).map_err(|_| Stop::Damaged("string too long"))?;
        let bytes = self.take(len)?;
        let from = self.text.len();
        self.text.extend_from_slice(bytes);
        let offset = |n: usize| u32::try_from(n).map_err(|_| Stop::Damaged("block too long"));
        Ok(TextAt {
            from: offset(from)?,
            to: offset(self.text.len())?,
            hash: StrHash::UNSET,
        })
    }

    fn f64(&mut self) -> Result<f64, Stop> {
        let b = self.take(8)?;
        Ok(f64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    fn f32(&mut self) -> Result<f32, Stop> {
        let b = self.take(4)?;
        Ok(f32::from_le_bytes(b.try_into().expect("4 bytes")))
    }
}

/// A batch's decoded text checked as UTF-8 at once, and the hash of each of its strings
/// set. The whole text being UTF-8 and each string starting and ending on a character
/// boundary, each string is UTF-8 on its own. A repeat holds the range of the string
/// before it in its place, and takes that one's hash.
fn checked_text(
    text: Vec<u8>,
    blocks: &mut [BlockAt],
    events: &mut [SpilledEvent],
) -> Result<String, &'static str> {
    const NOT_UTF8: &str = "string not UTF-8";
    let text = String::from_utf8(text).map_err(|_| NOT_UTF8)?;
    let hashed = |at: &mut TextAt| -> Result<(), &'static str> {
        let s = text.get(at.from as usize..at.to as usize).ok_or(NOT_UTF8)?;
        at.hash = StrHash::of(s);
        Ok(())
    };
    for block in blocks.iter_mut() {
        if let Some(run) = &mut block.run {
            hashed(run)?;
        }
        hashed(&mut block.id)?;
    }
    let mut last: [Option<TextAt>; 4] = [None; 4];
    for event in events.iter_mut() {
        for (at, last) in event.strings.iter_mut().zip(&mut last) {
            let Some(at) = at else { continue };
            match last {
                Some(seen) if seen.from == at.from && seen.to == at.to => at.hash = seen.hash,
                _ => {
                    hashed(at)?;
                    *last = Some(*at);
                }
            }
        }
    }
    Ok(text)
}

/// Decodes one block into its key, its events appended to `events`.
fn decode_block(d: &mut Decoder, events: &mut Vec<SpilledEvent>) -> Result<Header, Stop> {
    let run = match d.varint()? {
        0 => None,
        n => Some(d.string(n - 1)?),
    };
    let id_len = d.varint()?;
    let id = d.string(id_len)?;
    let count = d.varint()?;
    // Every event takes at least 4 bytes (flags, file, line, hop): a count beyond the
    // bytes left waits for more.
    events.reserve(count.min(((d.bytes.len() - d.at) / 4) as u64) as usize);
    let mut before = Before::block();
    for _ in 0..count {
        get_event(d, &mut before, events)?;
    }
    Ok(Header { run, id })
}

/// Decodes an event onto the end of `events`, read against `before`, the event before it
/// in its block. Pushed here rather than returned: a returned event (168 bytes,
/// in a `Result`) is built on the stack and copied into the vector, once per event read
/// back.
fn get_event(
    d: &mut Decoder,
    before: &mut Before<TextAt>,
    events: &mut Vec<SpilledEvent>,
) -> Result<(), Stop> {
    let flags = d.varint()?;
    let has = |bit: u64| flags & bit != 0;
    let file = d.u32()?;
    let line = i64::from(before.line)
        .checked_add(unzigzag(d.varint()?))
        .and_then(|line| u32::try_from(line).ok())
        .ok_or(Stop::Damaged("line out of range"))?;
    let source = SourceRef { file, line };
    before.line = source.line;
    let hop = u16::try_from(d.varint()?).map_err(|_| Stop::Damaged("hop out of range"))?;
    let kind = *usize::try_from(flags >> KIND_SHIFT)
        .ok()
        .and_then(|code| KINDS.get(code))
        .ok_or(Stop::Damaged("unknown kind"))?;
    // As `put_event` wrote them: a whole start against the start before, a whole finish
    // against its own start (or, without one, the start before).
    let start = match (has(HAS_START), has(START_FRACTION)) {
        (false, _) => None,
        (true, true) => Some(d.f64()?),
        (true, false) => {
            before.ms = before.ms.wrapping_add(unzigzag(d.varint()?));
            Some(before.ms as f64)
        }
    };
    let finish = match (has(HAS_FINISH), has(FINISH_FRACTION)) {
        (false, _) => None,
        (true, true) => Some(d.f64()?),
        (true, false) => Some(before.ms.wrapping_add(unzigzag(d.varint()?)) as f64),
    };
    let timing = match kind {
        EventKind::Record => Timing::Record {
            start_ms: start,
            finish_ms: finish,
        },
        EventKind::Point(kind) => Timing::Point {
            kind,
            at_ms: start.ok_or(Stop::Damaged("point event without its time"))?,
        },
    };
    let attempt = has(HAS_ATTEMPT).then(|| d.u32()).transpose()?;
    let delivery = has(HAS_DELIVERY).then(|| d.u32()).transpose()?;
    let outcome = match has(HAS_OUTCOME).then(|| d.varint()).transpose()? {
        Some(code) => Some(outcome_of(code).ok_or(Stop::Damaged("unknown outcome"))?),
        None => None,
    };
    let delay_ms = has(HAS_DELAY).then(|| d.f32()).transpose()?;
    let retry_after_ms = has(HAS_RETRY_AFTER).then(|| d.f32()).transpose()?;
    let mut strings: [Option<TextAt>; 4] = Default::default();
    for ((slot, before), (present, same)) in
        strings.iter_mut().zip(&before.strings).zip(STRING_BITS)
    {
        *slot = match (has(present), has(same)) {
            (false, false) => None,
            (true, false) => {
                let len = d.varint()?;
                Some(d.string(len)?)
            }
            (true, true) => Some(before.ok_or(Stop::Damaged("a repeat of no string"))?),
            (false, true) => return Err(Stop::Damaged("a repeat of an absent string")),
        };
    }
    before.strings = strings;
    let fields = EventFields {
        attempt,
        delivery,
        target: None,
        message_id: None,
        span_id: None,
        parent_id: None,
        delay_ms: delay_ms.map(f64::from),
        retry_after_ms: retry_after_ms.map(f64::from),
        outcome,
        effect: has(EFFECT),
        hidden: has(HIDDEN),
        untimed: has(UNTIMED),
    };
    events.push(SpilledEvent {
        event: Event::new(source, 0, hop, timing, fields),
        strings,
    });
    Ok(())
}

/// The spilled events of a run: the temporary directory and the partitions in it.
#[derive(Debug)]
pub struct Spill {
    dir: TempDir,
    pub partitions: Parts,
    /// How many encoded bytes each partition holds before they are written
    /// ([`Parts::append`]): all of them together take a quarter of the events' budget at
    /// most, and a write is never smaller than [`MIN_PENDING_BYTES`].
    pending_bytes: usize,
    /// Events appended as they were read ([`Spill::append`]).
    pub appended_events: u64,
}

/// The smallest write of blocks encoded as they were read: a file is opened for each.
const MIN_PENDING_BYTES: usize = 64 << 10;

impl Spill {
    /// A spill of `partitions` files in a new temporary directory under the budget's.
    pub fn create(budget: &Budget, partitions: u32) -> Result<Spill> {
        let dir = TempDir::new(budget.temp_dir.as_deref())?;
        let partitions = Parts::new(&dir, partitions.clamp(MIN_PARTITIONS, MAX_PARTITIONS), 0, 1);
        let share = budget.events_bytes() / 4 / partitions.parts.len() as u64;
        let pending_bytes = (share as usize).clamp(MIN_PENDING_BYTES, SPILL_WRITE_BYTES);
        Ok(Spill {
            dir,
            partitions,
            pending_bytes,
            appended_events: 0,
        })
    }

    /// Appends blocks encoded on a parse thread to the partitions ([`encode_lines`]).
    pub fn append(&mut self, encoded: &Encoded) -> Result<()> {
        self.appended_events += encoded.parts.iter().map(|&(_, _, n)| n).sum::<u64>();
        self.partitions.append(encoded, self.pending_bytes)
    }

    /// The directory of the spill files.
    pub fn dir(&self) -> &Path {
        &self.dir.path
    }

    /// The directory, which outlives the spill files it is removed with.
    pub fn into_dir(self) -> TempDir {
        self.dir
    }

    /// Events written to the spill files so far (or held to be written).
    pub fn events(&self) -> u64 {
        self.partitions.parts.iter().map(|p| p.events).sum()
    }

    /// Bytes written to the spill files so far.
    pub fn bytes(&self) -> u64 {
        self.partitions.parts.iter().map(|p| p.bytes).sum()
    }

    /// Splits `part` into smaller parts (by the same hash, modulo a multiple of its
    /// modulus), or `None` when it cannot be split: the modulus would overflow.
    pub fn split_parts(&self, part: &Part, memory_bytes: u64, budget: u64) -> Option<Parts> {
        let ways = partitions_for(memory_bytes, budget);
        let modulus = part.modulus.checked_mul(ways)?;
        Some(Parts::new(&self.dir, modulus, part.residue, part.modulus))
    }

    /// Removes a part's file once read.
    pub fn remove(&self, part: &Part) {
        // Removed with the directory at the end in any case.
        let _ = std::fs::remove_file(&part.path);
    }
}

/// How many partitions hold `memory_bytes` of events with each under `budget`.
pub fn partitions_for(memory_bytes: u64, budget: u64) -> u32 {
    let wanted = (memory_bytes as f64 * HEADROOM / budget.max(1) as f64).ceil();
    (wanted.min(f64::from(MAX_PARTITIONS)) as u32).max(MIN_PARTITIONS)
}

/// The partitions of a first spill: the events held so far (`held_bytes`) scaled to the
/// whole input by the share of it read (`read_bytes` of `total_bytes`, as stored, so a
/// compressed input scales as well as a plain one). Unknown size (stdin):
/// [`PARTITIONS_UNKNOWN_SIZE`].
pub fn first_partitions(held_bytes: u64, read: u64, total: Option<u64>, budget: u64) -> u32 {
    match whole_input_bytes(held_bytes, read, total) {
        Some(whole) => partitions_for(whole as u64, budget),
        None => PARTITIONS_UNKNOWN_SIZE,
    }
}

/// The events held (`held_bytes`, from `read` bytes of an input of `total` bytes as stored)
/// scaled to the whole input; `None` when its size is unknown or nothing is read yet.
fn whole_input_bytes(held_bytes: u64, read: u64, total: Option<u64>) -> Option<f64> {
    let total = total.filter(|_| read > 0)?;
    Some(held_bytes as f64 * (total as f64 / read as f64).max(1.0))
}

/// Whether the events held (`held_bytes`, standing for `read` bytes of an input of `total`
/// bytes as stored) will surely not fit `budget` by the end: the whole input, scaled as
/// [`first_partitions`] scales it, takes more than [`HEADROOM`] times the budget. Such an
/// input spills now rather than when the budget is full: every line read after the first
/// spill is spilled where it is parsed, never interned or kept (at 1 M operations the
/// first 1.4 M of 4.9 M events were). The caller says when enough is read to judge
/// ([`MIN_PARSED_TO_JUDGE`]).
pub fn spills_anyway(held_bytes: u64, read: u64, total: Option<u64>, budget: u64) -> bool {
    whole_input_bytes(held_bytes, read, total).is_some_and(|whole| whole > budget as f64 * HEADROOM)
}

/// How much of an input is parsed before its size is trusted to say it will not fit (of a
/// compressed one, in text): two chunks, so that its first lines (a header, a warm-up) do
/// not decide alone.
pub const MIN_PARSED_TO_JUDGE: u64 = 16 << 20;

/// The name of every spill directory: `attempt-funnel-PID-N`, `PID` its run's process ID
/// (see `crate::atomic` for how a later run tells a killed run's from a live one's).
const DIR_PREFIX: &str = "attempt-funnel-";

/// A directory of spill files, removed with them when dropped (the run ended, or stopped on
/// an error) and when the process is interrupted (SIGINT, SIGTERM, SIGHUP). Locked while
/// it lives: a run killed outright leaves it unlocked, for the next run to remove
/// ([`remove_abandoned`]).
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
    /// The directory held open: the lock that says its run lives.
    _lock: Option<File>,
}

impl TempDir {
    fn new(base: Option<&Path>) -> Result<TempDir> {
        let base = base.map_or_else(std::env::temp_dir, Path::to_path_buf);
        for n in 0u32.. {
            let path = base.join(format!("{DIR_PREFIX}{}-{n}", std::process::id()));
            let made = atomic::create_tracked(&path, atomic::Kind::Dir, |p| {
                std::fs::create_dir(p)?;
                // A directory that cannot be opened is still removed at the end and on a
                // signal; after a kill -9 it is left, as it was before there were locks.
                let lock = File::open(p).ok().filter(atomic::lock);
                Ok(lock)
            });
            match made {
                Ok(lock) => return Ok(TempDir { path, _lock: lock }),
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(anyhow::Error::new(e).context(format!(
                        "could not create a directory for spill files in '{}' (the events do not fit --memory-limit): choose a writable directory with --temp-dir",
                        base.display()
                    )))
                }
            }
        }
        bail!("no free name for a spill directory in '{}'", base.display())
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
        atomic::untrack(&self.path);
    }
}

/// Removes the spill directories that runs killed outright (`kill -9`, out of memory) left
/// in the budget's directory, saying so on stderr: a killed run's can hold as much as its
/// input's events, and nothing else would ever remove them.
pub fn remove_abandoned(budget: &Budget) {
    let base = budget.temp_dir.clone().unwrap_or_else(std::env::temp_dir);
    let removed = atomic::remove_abandoned(&base, |name| atomic::pid_after(name, DIR_PREFIX));
    removed.say(
        ("spill directory", "spill directories"),
        &format!("in '{}'", base.display()),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Events, their operation table and their strings.
    type Sample = (Vec<Event>, Vec<(Option<Sym>, Sym)>, Interner);

    fn sample() -> Sample {
        let mut strings = Interner::default();
        let run = strings.intern("run-1");
        let ops: Vec<(Option<Sym>, Sym)> = (0..50)
            .map(|i| {
                let id = strings.intern(&format!("op-{i}"));
                ((i % 3 != 0).then_some(run), id)
            })
            .collect();
        let target = strings.intern("sku-é");
        let other = strings.intern("sku-2");
        let mut events = Vec::new();
        for i in 0..400u32 {
            let op = i % 50;
            let timing = match i % 4 {
                0 => Timing::Record {
                    start_ms: Some(f64::from(i) + 0.25),
                    finish_ms: Some(f64::from(i) * 2.0),
                },
                1 => Timing::Record {
                    start_ms: None,
                    finish_ms: Some(1.5),
                },
                2 => Timing::Point {
                    kind: PointKind::Timeout,
                    at_ms: -0.0,
                },
                // Whole times far apart either way (written as differences, the one
                // from -4e18 to 9.2e18 past an i64), and one past an i64 (an f64).
                _ if i % 8 == 3 => Timing::Record {
                    start_ms: Some(1e15),
                    finish_ms: None,
                },
                _ => Timing::Record {
                    start_ms: Some(-4e18),
                    finish_ms: Some(if i % 16 == 7 { 9.2e18 } else { 9.3e18 }),
                },
            };
            let fields = EventFields {
                attempt: (i % 5 != 0).then_some(i % 7 + 1),
                delivery: (i % 6 == 0).then_some(300),
                // An operation's events (i, i + 50, …) repeat a target, change it, go
                // without one: each written as a repeat, as text, or not at all.
                target: (i % 2 == 0).then_some(if i % 150 < 100 { target } else { other }),
                message_id: (i % 3 == 0).then_some(ops[op as usize].1),
                span_id: None,
                parent_id: (i % 9 == 0).then_some(target),
                delay_ms: (i % 4 == 1).then_some(12.5),
                retry_after_ms: (i % 8 == 1).then_some(1000.0),
                outcome: [None, Some(Outcome::Http(503)), Some(Outcome::Cancelled)]
                    [(i % 3) as usize],
                effect: i % 11 == 0,
                hidden: i % 13 == 0,
                untimed: i % 17 == 0,
            };
            // An odd operation's lines go backwards (written as differences).
            let source = SourceRef {
                file: i % 2,
                line: if op % 2 == 0 {
                    i * 1000 + 1
                } else {
                    u32::MAX - i
                },
            };
            events.push(Event::new(source, op, (i % 4) as u16, timing, fields));
        }
        (events, ops, strings)
    }

    /// A budget of 1 MiB in the system's temporary directory.
    fn test_budget() -> Budget {
        Budget {
            limit_bytes: 1 << 20,
            temp_dir: None,
        }
    }

    /// Every event, with its key and strings as text, in a comparable form.
    fn described(key: (Option<&str>, &str), e: &Event, strings: &Interner) -> String {
        let f = e.fields();
        let text = |s: Option<Sym>| s.map(|s| strings.resolve(s).to_string());
        format!(
            "{key:?} {:?} {} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {} {}",
            e.source,
            e.hop,
            e.timing(),
            f.attempt,
            f.delivery,
            text(f.target),
            text(f.message_id),
            text(f.span_id),
            text(f.parent_id),
            f.delay_ms,
            f.retry_after_ms,
            f.outcome,
            f.effect,
            f.hidden,
            f.untimed
        )
    }

    #[test]
    fn events_spilled_come_back_whole_each_in_its_operations_partition() {
        let (events, ops, strings) = sample();
        let budget = test_budget();
        let mut spill = Spill::create(&budget, 7).unwrap();
        let dir = spill.dir.path.clone();
        // Written in two stretches: an operation's events come back from both.
        let half = events.len() / 2;
        for stretch in [&events[..half], &events[half..]] {
            spill
                .partitions
                .write(EventsRef {
                    events: stretch,
                    operations: &ops,
                    strings: &strings,
                })
                .unwrap();
        }
        let mut expected: Vec<String> = events
            .iter()
            .map(|e| {
                let (run, id) = ops[e.op as usize];
                described(
                    (run.map(|r| strings.resolve(r)), strings.resolve(id)),
                    e,
                    &strings,
                )
            })
            .collect();
        let mut got = Vec::new();
        for part in &spill.partitions.parts {
            let mut back = Interner::default();
            each_block(part, |block| {
                assert_eq!(partition_of(block.run, block.id, 7), part.residue);
                let mut events = Vec::new();
                block.push_events(0, &mut back, &mut events);
                assert_eq!(events.len(), block.events.len());
                for event in &events {
                    got.push(described((block.run, block.id), event, &back));
                }
            });
        }
        expected.sort();
        got.sort();
        assert_eq!(got, expected);
        let bytes = spill.bytes();
        assert!(bytes > 0 && bytes < 400 * 60, "{bytes} bytes");
        drop(spill);
        assert!(
            !dir.exists(),
            "the spill directory is removed with the spill"
        );
    }

    #[test]
    fn a_split_part_keeps_its_residue_modulo_the_old_modulus() {
        let (events, ops, strings) = sample();
        let budget = test_budget();
        let mut spill = Spill::create(&budget, 3).unwrap();
        let from = EventsRef {
            events: &events,
            operations: &ops,
            strings: &strings,
        };
        spill.partitions.write(from).unwrap();
        let part = &spill.partitions.parts[1];
        let mut split = spill.split_parts(part, 4000, 1000).unwrap();
        assert_eq!(split.modulus, 3 * 6);
        let mut back = Interner::default();
        let mut back_ops = Vec::new();
        let mut back_events = Vec::new();
        each_block(part, |block| {
            let run = block.run.map(|r| back.intern(r));
            let id = back.intern(block.id);
            back_ops.push((run, id));
            let op = back_ops.len() as u32 - 1;
            block.push_events(op, &mut back, &mut back_events);
        });
        split
            .write(EventsRef {
                events: &back_events,
                operations: &back_ops,
                strings: &back,
            })
            .unwrap();
        assert_eq!(
            split.parts.iter().map(|p| p.events).sum::<u64>(),
            part.events
        );
        for sub in &split.parts {
            assert_eq!(sub.residue % 3, 1);
            each_block(sub, |block| {
                assert_eq!(partition_of(block.run, block.id, 18), sub.residue);
            });
        }
    }

    #[test]
    fn a_damaged_file_is_an_error_that_names_it() {
        let budget = test_budget();
        let spill = Spill::create(&budget, 2).unwrap();
        let err = fill_error(&spill.partitions.parts[0], &[0, 3, b'o', b'p']);
        assert!(err.contains("is damaged"), "{err}");
    }

    /// The error of reading back a part whose file holds `bytes`.
    fn fill_error(part: &Part, bytes: &[u8]) -> String {
        Appender::open(&part.path)
            .and_then(|mut f| f.write(bytes))
            .unwrap();
        let mut batch = Batch::default();
        let err = PartReader::open(part)
            .unwrap()
            .fill(&mut batch)
            .unwrap_err();
        format!("{err:#}")
    }

    #[test]
    fn varints_come_back_at_every_length_and_at_the_end_of_the_bytes() {
        let values = [
            0,
            1,
            127,
            128,
            300,
            16_383,
            16_384,
            (1 << 21) - 1,
            1 << 21,
            u64::MAX,
        ];
        let mut bytes = Vec::new();
        for &n in &values {
            let mut out = Fixed::new();
            out.varint(n);
            bytes.extend_from_slice(out.as_slice());
        }
        // As written byte by byte, the shortest form.
        let mut plain = Vec::new();
        values.iter().for_each(|&n| put_varint(&mut plain, n));
        assert_eq!(bytes, plain);
        let mut text = Vec::new();
        let mut d = Decoder {
            bytes: &bytes,
            at: 0,
            text: &mut text,
        };
        let back: Vec<u64> = values.iter().map(|_| d.varint().ok().unwrap()).collect();
        assert_eq!(back, values);
        // A varint cut off waits for more bytes, however many are left.
        for cut in [&[0x80][..], &[0xff, 0xff], &[0xff, 0xff, 0xff], &[0xff; 4]] {
            let mut d = Decoder {
                bytes: cut,
                at: 0,
                text: &mut text,
            };
            assert!(matches!(d.varint(), Err(Stop::More)));
        }
    }

    #[test]
    fn a_string_not_utf8_on_its_own_is_damage_even_when_the_batch_text_is() {
        let budget = test_budget();
        let spill = Spill::create(&budget, 2).unwrap();
        // Blocks with no events: a test run, an ID. The first cuts an `é` (C3 A9) between
        // its run and its ID, so that the batch's text is UTF-8 as a whole; the second
        // holds a byte that is never UTF-8.
        let cut: &[u8] = &[2, 0xC3, 2, 0xA9, b'x', 0];
        let bad: &[u8] = &[2, 0xFF, 1, b'x', 0];
        for (part, bytes) in spill.partitions.parts.iter().zip([cut, bad]) {
            let err = fill_error(part, bytes);
            assert!(err.contains("string not UTF-8"), "{err}");
        }
    }

    /// Calls `each` with every block of `part`'s file, in order.
    fn each_block(part: &Part, mut each: impl FnMut(Block)) {
        let mut reader = PartReader::open(part).unwrap();
        let mut batch = Batch::default();
        while reader.fill(&mut batch).unwrap() {
            batch.blocks().for_each(&mut each);
        }
    }

    #[test]
    fn a_block_larger_than_a_batch_comes_back_whole_and_blocks_cut_off_carry_over() {
        let mut strings = Interner::default();
        let ops: Vec<(Option<Sym>, Sym)> = (0..3)
            .map(|i| (None, strings.intern(&format!("op-{i}"))))
            .collect();
        // A target of 110 kB per event, each its own (a repeat is not written again):
        // operation 1's block is 3.3 MB, more than three batches' worth.
        let long: Vec<Sym> = (0..30)
            .map(|i| strings.intern(&format!("{}{i:02}", "x".repeat(109_998))))
            .collect();
        let counts = [10_000u32, 30, 10_000];
        let mut events = Vec::new();
        for (op, &count) in counts.iter().enumerate() {
            for line in 0..count {
                let fields = EventFields {
                    target: (op == 1).then(|| long[line as usize]),
                    ..Default::default()
                };
                let timing = Timing::Record {
                    start_ms: Some(f64::from(line)),
                    finish_ms: None,
                };
                let source = SourceRef { file: 0, line };
                events.push(Event::new(source, op as u32, 0, timing, fields));
            }
        }
        let budget = test_budget();
        let spill = Spill::create(&budget, 2).unwrap();
        let mut one = Parts::new(&spill.dir, 1, 0, 1);
        one.write(EventsRef {
            events: &events,
            operations: &ops,
            strings: &strings,
        })
        .unwrap();
        assert!(one.parts[0].bytes > 3 * BATCH_BYTES as u64);
        let mut got = Vec::new();
        each_block(&one.parts[0], |block| {
            let mut back = Interner::default();
            let mut events = Vec::new();
            block.push_events(0, &mut back, &mut events);
            let lines: Vec<u32> = events.iter().map(|e| e.source.line).collect();
            let targets = events.iter().filter_map(|e| e.fields().target);
            assert!(targets.map(|t| back.resolve(t)).all(|t| t.len() == 110_000));
            got.push((block.id.to_string(), lines));
        });
        let expected: Vec<(String, Vec<u32>)> = counts
            .iter()
            .enumerate()
            .map(|(op, &count)| (format!("op-{op}"), (0..count).collect()))
            .collect();
        assert_eq!(got, expected);
    }
}

//! The attempt model every stage shares: events as read, attempts as paired, and the
//! small value types (times, outcomes, interned strings) they are made of.

use std::hash::BuildHasher;

/// Milliseconds on the input's clock. Kept as `f64` because RFC 3339 inputs carry
/// sub-millisecond precision and `*_ms` numbers may be fractional.
pub type Millis = f64;

/// Whether `ms` can be a time on the input's clock: finite and at or after 0. Every reader
/// of events refuses other times, and a partial read back holding one was edited.
pub fn is_time(ms: Millis) -> bool {
    ms.is_finite() && ms >= 0.0
}

/// An interned string: an index into [`Interner`]. Events carry thousands of repeats of the
/// same operation, target and message IDs; a `u32` keeps rows small and compares in one step.
pub type Sym = u32;

/// Where an event came from, for error messages (`path:line`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SourceRef {
    pub file: u32,
    pub line: u32,
}

/// Strings seen in the input, stored once, back to back in one buffer. A table of 8-byte
/// slots finds them: with a million operation and message IDs, one boxed string and one
/// 24-byte map entry per string would cost twice the memory, and memory touched for
/// the first time is zeroed by the kernel page by page. Strings are found by their
/// [`StrHash`].
#[derive(Debug, Default)]
pub struct Interner {
    /// Open addressing with linear probing, at most half full: per slot the high half of
    /// the string's hash and its ID + 1 (0: empty). One slot holds all a lookup needs
    /// before the string itself, so finding a string costs one trip to memory, not two (a
    /// control byte and then the entry, as a general hash map has them): interning is the
    /// one serial step of reading, and three quarters of it went waiting on those trips.
    slots: Vec<u64>,
    bytes: String,
    /// End offset in `bytes` of each string; a string starts where the previous one ends.
    ends: Vec<usize>,
}

/// A string's hash for an [`Interner`]. Reading computes it on the parse threads, once per
/// string, and interning (the serial step) takes it from there: the keep loop used to hash
/// each string four times, for its three loads ahead and the lookup itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StrHash(u64);

impl StrHash {
    /// A placeholder for a hash computed later (a spilled string's, once its batch is
    /// checked as UTF-8): never looked up.
    pub const UNSET: StrHash = StrHash(0);

    /// foldhash with its fixed seed, the same on every thread: a local file needs no
    /// protection from crafted collisions.
    #[inline]
    pub fn of(s: &str) -> StrHash {
        StrHash(foldhash::fast::FixedState::default().hash_one(s))
    }
}

/// The steps of [`Interner::prefetch_step`], in the order they are taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Slot,
    Ends,
    Bytes,
}

/// The fewest slots an interner starts with.
const MIN_SLOTS: usize = 1 << 10;

impl Interner {
    pub fn intern(&mut self, s: &str) -> Sym {
        self.intern_hashed(s, StrHash::of(s))
    }

    /// [`Interner::intern`] with the string's hash computed already.
    pub fn intern_hashed(&mut self, s: &str, StrHash(hash): StrHash) -> Sym {
        debug_assert_eq!(StrHash(hash), StrHash::of(s));
        if self.slots.len() < 2 * (self.ends.len() + 1) {
            self.grow();
        }
        let tag = hash >> 32;
        let mask = self.slots.len() - 1;
        let mut at = hash as usize & mask;
        loop {
            let slot = self.slots[at];
            if slot == 0 {
                let id = self.ends.len() as Sym;
                self.bytes.push_str(s);
                self.ends.push(self.bytes.len());
                self.slots[at] = tag << 32 | (u64::from(id) + 1);
                return id;
            }
            if slot >> 32 == tag {
                let id = (slot as u32) - 1;
                // Compared as bytes: sliced as a `str`, both ends of the range were checked
                // to fall between characters, in a call on every string interned.
                let stored = &self.bytes.as_bytes()[stored_range(&self.ends, id)];
                if short_eq(stored, s.as_bytes()) {
                    return id;
                }
            }
            at = (at + 1) & mask;
        }
    }

    /// One step of loading what interning the string with this hash will read, each a
    /// trip to memory that needs the one before in cache: its slot, then the end offsets
    /// of the string the slot names, then that string's bytes. Called for the same string
    /// a few lines apart, in that order, so that each step finds the one before loaded (a
    /// hit compares the stored string: with only the slot loaded, that compare was the
    /// next wait). The table outgrows the caches, and waiting on the slot alone was three
    /// quarters of interning, the serial step of reading.
    #[inline]
    pub fn prefetch_step(&self, StrHash(hash): StrHash, step: Step) {
        if self.slots.is_empty() {
            return;
        }
        let at = hash as usize & (self.slots.len() - 1);
        if step == Step::Slot {
            prefetch(&self.slots[at]);
            return;
        }
        let slot = self.slots[at];
        if slot == 0 || slot >> 32 != hash >> 32 {
            return; // a new string (or another one first): nothing stored to compare
        }
        let id = (slot as u32 - 1) as usize;
        if step == Step::Ends {
            prefetch(&self.ends[id]);
            if id > 0 {
                prefetch(&self.ends[id - 1]);
            }
        } else {
            let start = if id == 0 { 0 } else { self.ends[id - 1] };
            if let Some(first) = self.bytes.as_bytes().get(start) {
                prefetch(first);
            }
        }
    }

    /// Twice the slots (at least [`MIN_SLOTS`]), every string placed again: in ID order,
    /// so that the strings are read front to back.
    fn grow(&mut self) {
        let len = (2 * self.slots.len()).max(MIN_SLOTS);
        self.slots.clear();
        self.slots.resize(len, 0);
        let mask = len - 1;
        for id in 0..self.ends.len() as Sym {
            let StrHash(hash) = StrHash::of(stored(&self.bytes, &self.ends, id));
            let mut at = hash as usize & mask;
            while self.slots[at] != 0 {
                at = (at + 1) & mask;
            }
            self.slots[at] = (hash >> 32) << 32 | (u64::from(id) + 1);
        }
    }

    /// Forgets every string, keeping the memory for the next ones: after a spill, the
    /// strings that follow fill about as much again, on pages already touched.
    pub fn clear(&mut self) {
        self.slots.fill(0);
        self.bytes.clear();
        self.ends.clear();
    }

    pub fn resolve(&self, sym: Sym) -> &str {
        stored(&self.bytes, &self.ends, sym)
    }

    /// The memory the strings take: their bytes, their ends and the slots.
    pub fn heap_bytes(&self) -> u64 {
        (self.bytes.len()
            + self.ends.len() * std::mem::size_of::<usize>()
            + self.slots.len() * std::mem::size_of::<u64>()) as u64
    }
}

/// Starts loading the cache lines of `value`, its first and its last (a hint: it never
/// faults, and is nothing on other targets). For a loop that knows which scattered item it
/// will read a few steps on.
#[inline]
pub fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        let first = (value as *const T).cast::<i8>();
        // SAFETY: a prefetch is a hint that never faults; both addresses are inside the
        // live `value` (its first and last byte).
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(first);
            if std::mem::size_of::<T>() > 1 {
                _mm_prefetch::<_MM_HINT_T0>(first.add(std::mem::size_of::<T>() - 1));
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

/// Equality of byte strings, for the short ones compared on every line (keys, hop names,
/// IDs against the interned ones, the bytes between a line's values): up to 32 bytes
/// without a call into the C library's `memcmp`, whose call costs more than such a
/// compare. Always inline: see `jsonl::flat::KeyToken::starts`.
#[inline(always)]
pub fn short_eq(a: &[u8], b: &[u8]) -> bool {
    fn word(bytes: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
    }
    match a.len() {
        n if n != b.len() => false,
        0..=7 => a.iter().zip(b).all(|(x, y)| x == y),
        8..=16 => {
            // Two words that overlap when shorter than 16 bytes: every byte is compared.
            let last = a.len() - 8;
            word(a, 0) == word(b, 0) && word(a, last) == word(b, last)
        }
        17..=32 => {
            // The same, with two words from each end.
            let last = a.len() - 8;
            (word(a, 0) ^ word(b, 0))
                | (word(a, 8) ^ word(b, 8))
                | (word(a, last - 8) ^ word(b, last - 8))
                | (word(a, last) ^ word(b, last))
                == 0
        }
        _ => a == b,
    }
}

/// String `id` of an interner's buffer.
fn stored<'a>(bytes: &'a str, ends: &[usize], id: Sym) -> &'a str {
    &bytes[stored_range(ends, id)]
}

/// Where string `id` lies in an interner's buffer: it starts where the previous one ends.
#[inline]
fn stored_range(ends: &[usize], id: Sym) -> std::ops::Range<usize> {
    let start = if id == 0 { 0 } else { ends[id as usize - 1] };
    start..ends[id as usize]
}

#[cfg(test)]
mod interner_tests {
    use super::{short_eq, Interner};

    #[test]
    fn short_eq_tells_apart_a_difference_at_every_byte_of_every_length() {
        for len in 0..40usize {
            let a: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            assert!(short_eq(&a, &a.clone()), "{len}");
            for at in 0..len {
                let mut b = a.clone();
                b[at] ^= 0x20;
                assert!(!short_eq(&a, &b), "{len} {at}");
            }
            assert!(!short_eq(&a, &a[..len.saturating_sub(1)]) || len == 0);
        }
    }

    #[test]
    fn interns_each_string_once_and_gives_it_back() {
        let mut i = Interner::default();
        let words: Vec<String> = (0..10_000).map(|n| format!("op-{n:06}")).collect();
        let ids: Vec<u32> = words.iter().map(|w| i.intern(w)).collect();
        let again: Vec<u32> = words.iter().map(|w| i.intern(w)).collect();
        assert_eq!(ids, again);
        assert_eq!(i.intern(""), 10_000);
        for (w, id) in words.iter().zip(ids) {
            assert_eq!(i.resolve(id), w);
        }
        assert_eq!(i.resolve(10_000), "");
    }

    #[test]
    fn a_cleared_interner_numbers_from_zero_again_and_finds_no_old_string() {
        let mut i = Interner::default();
        for n in 0..5_000 {
            i.intern(&format!("old-{n}"));
        }
        i.clear();
        assert_eq!(i.intern("new-0"), 0);
        assert_eq!(i.intern("old-1"), 1);
        assert_eq!(i.intern("new-0"), 0);
        assert_eq!(i.resolve(1), "old-1");
        // Strings whose hashes share a place are told apart by their text.
        let ids: Vec<u32> = (0..3_000).map(|n| i.intern(&n.to_string())).collect();
        for (n, id) in ids.iter().enumerate() {
            assert_eq!(i.resolve(*id), n.to_string());
        }
    }
}

/// How an attempt ended, per docs/input.md: a named outcome or an HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outcome {
    Ok,
    Error,
    Timeout,
    Cancelled,
    Rejected,
    Http(u16),
}

impl Outcome {
    /// The name the reports write for an outcome that has one (every one but an HTTP
    /// status, which is written as its number).
    pub fn name(self) -> Option<&'static str> {
        match self {
            Outcome::Ok => Some("ok"),
            Outcome::Error => Some("error"),
            Outcome::Timeout => Some("timeout"),
            Outcome::Cancelled => Some("cancelled"),
            Outcome::Rejected => Some("rejected"),
            Outcome::Http(_) => None,
        }
    }

    /// The accepted spellings, for error messages.
    pub const EXPECTED: &'static str =
        "ok, error, timeout, cancelled, rejected, or an HTTP status such as 503";

    pub fn parse(text: &str) -> Option<Outcome> {
        /// Accepted spellings, compared ignoring ASCII case (no lowercase copy per line).
        const NAMES: [(&str, Outcome); 18] = [
            ("ok", Outcome::Ok),
            ("success", Outcome::Ok),
            ("succeeded", Outcome::Ok),
            ("ack", Outcome::Ok),
            ("error", Outcome::Error),
            ("err", Outcome::Error),
            ("failed", Outcome::Error),
            ("failure", Outcome::Error),
            ("nack", Outcome::Error),
            ("timeout", Outcome::Timeout),
            ("timed_out", Outcome::Timeout),
            ("timed-out", Outcome::Timeout),
            ("deadline_exceeded", Outcome::Timeout),
            ("cancelled", Outcome::Cancelled),
            ("canceled", Outcome::Cancelled),
            ("cancel", Outcome::Cancelled),
            ("rejected", Outcome::Rejected),
            ("throttled", Outcome::Rejected),
        ];
        // Spelled exactly as listed, as most logs do: the exact match is tried before
        // any trim, number parse or case folding, which every line would otherwise pay.
        if let Some(&(_, outcome)) = NAMES.iter().find(|(name, _)| *name == text) {
            return Some(outcome);
        }
        let t = text.trim();
        if let Ok(code) = t.parse::<u16>() {
            return Outcome::from_status(i64::from(code));
        }
        NAMES
            .iter()
            .find(|(name, _)| t.eq_ignore_ascii_case(name))
            .map(|&(_, outcome)| outcome)
    }

    pub fn from_status(code: i64) -> Option<Outcome> {
        (100..=599)
            .contains(&code)
            .then_some(Outcome::Http(code as u16))
    }

    /// Whether the attempt did what it was asked: `ok` or an HTTP status below 400.
    pub fn is_success(self) -> bool {
        match self {
            Outcome::Ok => true,
            Outcome::Http(code) => code < 400,
            _ => false,
        }
    }
}

/// An outcome as logged: `ok`, `timeout`, `503`, …
impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self, self.name()) {
            (Outcome::Http(code), _) => write!(f, "{code}"),
            (_, name) => f.write_str(name.unwrap_or_default()),
        }
    }
}

/// The kind of a point event (docs/input.md): one instant in an attempt's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PointKind {
    Start,
    Finish,
    Timeout,
    Cancel,
}

/// When an event happened: a whole attempt record, or one point in an attempt's life.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Timing {
    /// A whole attempt. Either end may be missing: no finish = still in flight; no start =
    /// seen only finishing, its start is taken from the same attempt upstream.
    Record {
        start_ms: Option<Millis>,
        finish_ms: Option<Millis>,
    },
    Point {
        kind: PointKind,
        at_ms: Millis,
    },
}

impl Timing {
    /// Its kind and its times as an [`Event`] stores them: a point event's instant is its
    /// start.
    pub fn parts(&self) -> (EventKind, Option<Millis>, Option<Millis>) {
        match *self {
            Timing::Record {
                start_ms,
                finish_ms,
            } => (EventKind::Record, start_ms, finish_ms),
            Timing::Point { kind, at_ms } => (EventKind::Point(kind), Some(at_ms), None),
        }
    }

    /// The latest instant this timing mentions (0 when it mentions none).
    pub fn latest_ms(&self) -> Millis {
        let (_, start, finish) = self.parts();
        match (start.and_then(nan_out), finish.and_then(nan_out)) {
            (_, Some(f)) => f,
            (Some(s), None) => s,
            (None, None) => 0.0,
        }
    }
}

/// What kind of line an event came from, packed in one byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EventKind {
    Record,
    Point(PointKind),
}

/// Marks an absent interned string in [`Event`].
const NO_SYM: u32 = u32::MAX;

/// One input line, validated and interned. Millions are held at once, so absent values
/// are sentinels (NaN, 0, [`NO_SYM`]) rather than `Option`s, which keeps an event at 72
/// bytes instead of 140; the accessors give them back as `Option`s.
#[derive(Debug, Clone, Copy)]
pub struct Event {
    /// Record: its start; point event: its instant. NaN when absent.
    start_ms: Millis,
    /// Record: its finish. NaN when absent.
    finish_ms: Millis,
    pub source: SourceRef,
    /// Index of the (test run, operation) key in the operation table.
    pub op: u32,
    attempt: u32,
    delivery: u32,
    target: u32,
    message_id: u32,
    span_id: u32,
    parent_id: u32,
    delay_ms: f32,
    retry_after_ms: f32,
    pub outcome: Option<Outcome>,
    /// Index of the hop in the configured hop order.
    pub hop: u16,
    pub kind: EventKind,
    pub effect: bool,
    pub hidden: bool,
    pub untimed: bool,
}

// The 72 bytes the docs and the memory budget count on (docs/architecture.md, "Memory"): a
// field added to Event must be paid for knowingly, so the build fails when the size moves.
const _: () = assert!(std::mem::size_of::<Event>() == 72);

/// The optional parts of an [`Event`], as `Option`s (how ingest builds one).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EventFields {
    pub attempt: Option<u32>,
    pub delivery: Option<u32>,
    pub target: Option<Sym>,
    pub message_id: Option<Sym>,
    pub span_id: Option<Sym>,
    pub parent_id: Option<Sym>,
    pub delay_ms: Option<Millis>,
    pub retry_after_ms: Option<Millis>,
    pub outcome: Option<Outcome>,
    pub effect: bool,
    pub hidden: bool,
    pub untimed: bool,
}

fn sym_in(s: Option<Sym>) -> u32 {
    s.unwrap_or(NO_SYM)
}

fn sym_out(s: u32) -> Option<Sym> {
    (s != NO_SYM).then_some(s)
}

fn nan_out<T: Into<f64> + Copy>(v: T) -> Option<Millis> {
    let v: f64 = v.into();
    (!v.is_nan()).then_some(v)
}

impl Event {
    /// Inline: its arguments are larger than the event, and a call took them and the
    /// event through the stack (85 instructions an event read back).
    #[inline]
    pub fn new(source: SourceRef, op: u32, hop: u16, timing: Timing, f: EventFields) -> Event {
        let (kind, start_ms, finish_ms) = timing.parts();
        Event {
            start_ms: start_ms.unwrap_or(Millis::NAN),
            finish_ms: finish_ms.unwrap_or(Millis::NAN),
            source,
            op,
            attempt: f.attempt.unwrap_or(0),
            delivery: f.delivery.unwrap_or(0),
            target: sym_in(f.target),
            message_id: sym_in(f.message_id),
            span_id: sym_in(f.span_id),
            parent_id: sym_in(f.parent_id),
            // Delays and hints are short durations: f32 keeps them to well under a ms.
            delay_ms: f.delay_ms.map_or(f32::NAN, |v| v as f32),
            retry_after_ms: f.retry_after_ms.map_or(f32::NAN, |v| v as f32),
            outcome: f.outcome,
            hop,
            kind,
            effect: f.effect,
            hidden: f.hidden,
            untimed: f.untimed,
        }
    }

    pub fn timing(&self) -> Timing {
        match self.kind {
            EventKind::Record => Timing::Record {
                start_ms: nan_out(self.start_ms),
                finish_ms: nan_out(self.finish_ms),
            },
            EventKind::Point(kind) => Timing::Point {
                kind,
                at_ms: self.start_ms,
            },
        }
    }

    /// The latest instant this event mentions.
    pub fn latest_ms(&self) -> Millis {
        self.timing().latest_ms()
    }

    pub fn attempt(&self) -> Option<u32> {
        (self.attempt != 0).then_some(self.attempt)
    }

    /// The leading part of the canonical order of an operation's events (see
    /// `normalize::canonical_order`) as three integers compared in turn: hop, attempt
    /// number (none first) and records before point events packed in one; then the start
    /// (a point event's instant) and the finish, absent ones as -1 ms and a point event's
    /// finish as 0, each as the bits that order as `f64::total_cmp` does. Integers
    /// compare in a few instructions where the fields, the times unpacked and compared
    /// one after the other, took about forty.
    #[inline]
    pub fn order_key(&self) -> (u64, u64, u64) {
        // As `f64::total_cmp`: the sign bit flips the rest, then unsigned order.
        let total = |x: f64| {
            let bits = x.to_bits() as i64;
            ((bits ^ (((bits >> 63) as u64) >> 1) as i64) as u64) ^ (1 << 63)
        };
        let (point, start, finish) = match self.kind {
            EventKind::Record => (
                0,
                nan_out(self.start_ms).unwrap_or(-1.0),
                nan_out(self.finish_ms).unwrap_or(-1.0),
            ),
            EventKind::Point(_) => (1, self.start_ms, 0.0),
        };
        // `attempt` is 0 when none was given, as `None` orders first.
        let head = u64::from(self.hop) << 33 | u64::from(self.attempt) << 1 | point;
        (head, total(start), total(finish))
    }

    /// The event with its strings (target, message ID, span ID, parent ID) set: how an
    /// event decoded apart from its strings gets them once they are interned.
    pub fn with_strings(self, strings: [Option<Sym>; 4]) -> Event {
        let [target, message_id, span_id, parent_id] = strings.map(sym_in);
        Event {
            target,
            message_id,
            span_id,
            parent_id,
            ..self
        }
    }

    pub fn fields(&self) -> EventFields {
        EventFields {
            attempt: self.attempt(),
            delivery: (self.delivery != 0).then_some(self.delivery),
            target: sym_out(self.target),
            message_id: sym_out(self.message_id),
            span_id: sym_out(self.span_id),
            parent_id: sym_out(self.parent_id),
            delay_ms: nan_out(self.delay_ms),
            retry_after_ms: nan_out(self.retry_after_ms),
            outcome: self.outcome,
            effect: self.effect,
            hidden: self.hidden,
            untimed: self.untimed,
        }
    }

    /// Everything but the source line, as plain comparable values (times by bit pattern,
    /// so that absent NaNs compare equal): the canonical order's tie-break, and what makes
    /// two lines exact duplicates.
    #[allow(clippy::type_complexity)]
    pub fn content(
        &self,
    ) -> (
        u32,
        u16,
        u32,
        EventKind,
        u64,
        u64,
        [u32; 6],
        [u32; 2],
        Option<Outcome>,
        [bool; 3],
    ) {
        (
            self.op,
            self.hop,
            self.attempt,
            self.kind,
            self.start_ms.to_bits(),
            self.finish_ms.to_bits(),
            [
                self.delivery,
                self.target,
                self.message_id,
                self.span_id,
                self.parent_id,
                0,
            ],
            [self.delay_ms.to_bits(), self.retry_after_ms.to_bits()],
            self.outcome,
            [self.effect, self.hidden, self.untimed],
        )
    }

    /// Equality of content, ignoring where the line was read: two such events are the
    /// at-least-once delivery of one event, not two attempts.
    pub fn same_content(&self, other: &Event) -> bool {
        self.content() == other.content()
    }
}

/// One attempt at one hop, after point events were paired and missing starts inferred.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    /// First input line that contributed to this attempt.
    pub source: SourceRef,
    pub hop: u16,
    pub attempt: Option<u32>,
    pub start_ms: Millis,
    /// `None` while still in flight at the end of the trace.
    pub finish_ms: Option<Millis>,
    /// The start was not logged at this hop and was taken from the same attempt upstream.
    pub start_inferred: bool,
    pub outcome: Option<Outcome>,
    pub target: Option<Sym>,
    pub message_id: Option<Sym>,
    pub delivery: Option<u32>,
    pub span_id: Option<Sym>,
    pub parent_id: Option<Sym>,
    pub delay_ms: Option<Millis>,
    pub retry_after_ms: Option<Millis>,
    pub effect: bool,
    /// Sent by a layer inside the client that records no attempt of its own (an SDK's
    /// resend inside one client span), known only from the receiving side.
    pub hidden: bool,
    /// Its own times were not logged: `start_ms` and `finish_ms` are the bounds of the
    /// request it was one of several attempts at (an access-log line with an attempt count,
    /// docs/input.md). Rules that read an attempt's own times pass it by.
    pub untimed: bool,
}

impl Attempt {
    /// How long it took; `None` while in flight, and for an untimed attempt, whose times
    /// are its request's.
    pub fn duration_ms(&self) -> Option<Millis> {
        self.finish_ms
            .filter(|_| !self.untimed)
            .map(|f| f - self.start_ms)
    }

    /// Time from `prev` finishing to this attempt starting, negative when they overlapped;
    /// `None` when `prev` never finished, and when either is untimed (a gap read off their
    /// request's bounds would be made up).
    pub fn gap_after(&self, prev: &Attempt) -> Option<Millis> {
        if self.untimed || prev.untimed {
            return None;
        }
        prev.finish_ms.map(|f| self.start_ms - f)
    }

    /// The end used for interval rules: an unfinished attempt is active until the trace ends.
    pub fn end_or(&self, trace_end_ms: Millis) -> Millis {
        self.finish_ms.unwrap_or(trace_end_ms.max(self.start_ms))
    }
}

/// The logical operation's identity: (test run, operation ID).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OperationKey {
    pub test_run_id: Option<Box<str>>,
    pub operation_id: Box<str>,
}

/// An operation's key borrowed, (test run, operation ID): it orders as [`OperationKey`]
/// does, without a key's two allocations.
pub type KeyRef<'a> = (Option<&'a str>, &'a str);

impl OperationKey {
    #[cfg(test)]
    pub fn key_ref(&self) -> KeyRef<'_> {
        (self.test_run_id.as_deref(), &self.operation_id)
    }
}

/// `run/op` as every report writes it, or `op` alone without a test run.
impl std::fmt::Display for OperationKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.test_run_id {
            Some(run) => write!(f, "{run}/{}", self.operation_id),
            None => f.write_str(&self.operation_id),
        }
    }
}

/// Which of `n` partitions an operation belongs to: FNV-1a (64-bit) over the test run's
/// bytes, one 0xFF byte (never part of UTF-8 text, so `("a", "bc")` and `("ab", "c")`
/// differ), then the operation ID's bytes, modulo `n`. Without a test run, the hash starts
/// at the 0xFF byte. Documented in docs/scale.md: engines and scripts that route lines
/// themselves may compute the same partition. Stable across versions and machines: a
/// change here is a breaking change of the partial format.
pub fn partition_of(test_run_id: Option<&str>, operation_id: &str, n: u32) -> u32 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let bytes = test_run_id
        .unwrap_or("")
        .bytes()
        .chain(std::iter::once(0xFF))
        .chain(operation_id.bytes());
    let hash = bytes.fold(OFFSET, |h, b| (h ^ u64::from(b)).wrapping_mul(PRIME));
    (hash % u64::from(n.max(1))) as u32
}

/// `analyze --partition K/N`: the run keeps the operations of partition `index` of `count`
/// ([`partition_of`]), for when every worker reads all the input and keeps its share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partition {
    pub index: u32,
    pub count: u32,
}

impl Partition {
    /// Whether the operation `(test_run_id, operation_id)` is this partition's.
    pub fn owns(self, test_run_id: Option<&str>, operation_id: &str) -> bool {
        partition_of(test_run_id, operation_id, self.count) == self.index
    }

    /// Whether this partition reports what belongs to the input rather than to an
    /// operation (lines read, bad lines): only partition 0 does, so that a merge of all N
    /// partitions counts each line once although every worker read it.
    pub fn reports_input(self) -> bool {
        self.index == 0
    }
}

impl std::str::FromStr for Partition {
    type Err = String;

    /// `K/N`, with N at least 1 and K in 0..N.
    fn from_str(text: &str) -> Result<Partition, String> {
        let example = "e.g. 0/8 for the first of 8 workers, 7/8 for the last";
        let (k, n) = text
            .split_once('/')
            .ok_or_else(|| format!("'{text}' is not K/N: give the partition's number K and the number of partitions N, {example}"))?;
        let number = |part: &str, what: &str| {
            part.trim().parse::<u32>().map_err(|_| {
                format!("'{part}' in '{text}' is not a whole number: {what}, {example}")
            })
        };
        let index = number(k, "K counts from 0")?;
        let count = number(n, "N is the number of partitions")?;
        if count == 0 {
            return Err(format!(
                "'{text}' has no partitions: N must be at least 1, {example}"
            ));
        }
        if index >= count {
            return Err(format!(
                "partition {index} does not exist among {count}: K counts from 0 to N-1 ({}), {example}",
                count - 1
            ));
        }
        Ok(Partition { index, count })
    }
}

/// An enum of names, each variant spelled once: with `ALL` (every variant, in declaration
/// order, so a new variant cannot be left out), `name()` (the one spelling reports, flags
/// and JSON use), `Display` and `Serialize` as that name.
macro_rules! named_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $Name:ident {
            $($(#[$variant_meta:meta])* $Variant:ident => $text:literal,)+
        }
    ) => {
        $(#[$meta])*
        $vis enum $Name {
            $($(#[$variant_meta])* $Variant,)+
        }

        impl $Name {
            // Not every enum of names needs its list outside the tests.
            #[allow(dead_code)]
            pub const ALL: [$Name; [$($text),+].len()] = [$($Name::$Variant),+];

            pub fn name(self) -> &'static str {
                match self {
                    $($Name::$Variant => $text,)+
                }
            }

            /// Its position in `ALL`: for tables indexed by variant.
            #[allow(dead_code)]
            pub fn index(self) -> usize {
                self as usize
            }
        }

        impl std::fmt::Display for $Name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl serde::Serialize for $Name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.name())
            }
        }

        // Read back by `diff` from a saved summary.
        impl<'de> serde::Deserialize<'de> for $Name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = String::deserialize(deserializer)?;
                $Name::ALL
                    .into_iter()
                    .find(|v| v.name() == text)
                    .ok_or_else(|| {
                        serde::de::Error::custom(format!(
                            "unknown {} \"{text}\"; expected one of {}",
                            stringify!($Name),
                            $Name::ALL.map($Name::name).join(", ")
                        ))
                    })
            }
        }
    };
}
pub(crate) use named_enum;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_name_is_read_back_and_listed_for_users() {
        let named = [
            Outcome::Ok,
            Outcome::Error,
            Outcome::Timeout,
            Outcome::Cancelled,
            Outcome::Rejected,
        ];
        for outcome in named {
            let name = outcome.name().expect("a named outcome");
            assert_eq!(Outcome::parse(name), Some(outcome), "{name}");
            assert_eq!(outcome.to_string(), name);
            assert!(Outcome::EXPECTED.contains(name), "{name}");
        }
        assert_eq!(Outcome::Http(503).name(), None);
        assert_eq!(Outcome::Http(503).to_string(), "503");
    }

    #[test]
    fn partitions_are_fnv1a_of_run_separator_and_id() {
        // Values computed independently (a Python FNV-1a over the same bytes): a script
        // that routes lines itself must land every operation where attempt-funnel does.
        assert_eq!(
            partition_of(None, "op-1", u32::MAX),
            (5303886137859691639 % u64::from(u32::MAX)) as u32
        );
        assert_eq!(partition_of(None, "op-1", 7), 5);
        assert_eq!(partition_of(Some("run-a"), "op-1", 7), 4);
        assert_eq!(partition_of(Some("ab"), "c", 1000), 44);
        assert_eq!(partition_of(Some("a"), "bc", 1000), 62);
        assert_eq!(partition_of(Some("run-a"), "op-1", 1), 0);
    }

    #[test]
    fn a_partition_is_k_of_n_with_k_below_n() {
        let p: Partition = "2/7".parse().unwrap();
        assert_eq!(p, Partition { index: 2, count: 7 });
        assert!(!p.reports_input());
        assert!("0/1".parse::<Partition>().unwrap().reports_input());
        // partition_of(Some("run-a"), "op-1", 7) is 4 (the test above).
        let owner: Partition = "4/7".parse().unwrap();
        assert!(owner.owns(Some("run-a"), "op-1"));
        assert!(!p.owns(Some("run-a"), "op-1"));
        for (text, says) in [
            ("3", "is not K/N"),
            ("a/3", "'a' in 'a/3' is not a whole number"),
            ("-1/3", "'-1' in '-1/3' is not a whole number"),
            ("0/0", "N must be at least 1"),
            (
                "3/3",
                "partition 3 does not exist among 3: K counts from 0 to N-1 (2)",
            ),
        ] {
            let err = text.parse::<Partition>().unwrap_err();
            assert!(err.contains(says), "{text}: {err}");
        }
    }
}

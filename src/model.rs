//! The attempt model every stage shares: events as read, attempts as paired, and the
//! small value types (times, outcomes, interned strings) they are made of.

use std::collections::HashMap;

/// Milliseconds on the input's clock. Kept as `f64` because RFC 3339 inputs carry
/// sub-millisecond precision and `*_ms` numbers may be fractional.
pub type Millis = f64;

/// An interned string: an index into [`Interner`]. Events carry thousands of repeats of the
/// same operation, target and message IDs; a `u32` keeps rows small and compares in one step.
pub type Sym = u32;

/// Where an event came from, for error messages (`path:line`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SourceRef {
    pub file: u32,
    pub line: u32,
}

/// Strings seen in the input, stored once.
#[derive(Debug, Default)]
pub struct Interner {
    ids: HashMap<Box<str>, Sym>,
    strings: Vec<Box<str>>,
}

impl Interner {
    pub fn intern(&mut self, s: &str) -> Sym {
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let id = self.strings.len() as Sym;
        let boxed: Box<str> = s.into();
        self.strings.push(boxed.clone());
        self.ids.insert(boxed, id);
        id
    }

    pub fn resolve(&self, sym: Sym) -> &str {
        &self.strings[sym as usize]
    }
}

/// How an attempt ended, per SPEC §2: a named outcome or an HTTP status.
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
    /// The accepted spellings, for error messages.
    pub const EXPECTED: &'static str =
        "ok, error, timeout, cancelled, rejected, or an HTTP status such as 503";

    pub fn parse(text: &str) -> Option<Outcome> {
        let t = text.trim();
        if let Ok(code) = t.parse::<u16>() {
            return Outcome::from_status(code as i64);
        }
        match t.to_ascii_lowercase().as_str() {
            "ok" | "success" | "succeeded" | "ack" => Some(Outcome::Ok),
            "error" | "err" | "failed" | "failure" | "nack" => Some(Outcome::Error),
            "timeout" | "timed_out" | "timed-out" | "deadline_exceeded" => Some(Outcome::Timeout),
            "cancelled" | "canceled" | "cancel" => Some(Outcome::Cancelled),
            "rejected" | "throttled" => Some(Outcome::Rejected),
            _ => None,
        }
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

/// The kind of a point event (SPEC §2): one instant in an attempt's life.
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

/// One input line, validated and interned. Everything after ingest works on these.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub source: SourceRef,
    /// Index of the (test run, operation) key in the operation table.
    pub op: u32,
    /// Index of the hop in the configured hop order.
    pub hop: u16,
    pub attempt: Option<u32>,
    pub timing: Timing,
    pub outcome: Option<Outcome>,
    pub target: Option<Sym>,
    pub message_id: Option<Sym>,
    pub delivery: Option<u32>,
    pub span_id: Option<Sym>,
    pub parent_id: Option<Sym>,
    pub delay_ms: Option<Millis>,
    pub retry_after_ms: Option<Millis>,
    pub effect: bool,
}

impl Event {
    /// Equality of content, ignoring where the line was read: two such events are the
    /// at-least-once delivery of one event, not two attempts.
    pub fn same_content(&self, other: &Event) -> bool {
        Event {
            source: other.source,
            ..self.clone()
        } == *other
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
}

impl Attempt {
    pub fn duration_ms(&self) -> Option<Millis> {
        self.finish_ms.map(|f| f - self.start_ms)
    }

    /// The end used for interval rules: an unfinished attempt is active until the trace ends.
    pub fn end_or(&self, trace_end_ms: Millis) -> Millis {
        self.finish_ms.unwrap_or(trace_end_ms.max(self.start_ms))
    }
}

/// The logical operation's identity: (test run, operation ID).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OperationKey {
    pub test_run_id: Option<Box<str>>,
    pub operation_id: Box<str>,
}

//! The native attempt-event fields as read from one line, before validation: the one key
//! table, [`FIELDS`], and the one validation every line format goes through.
//!
//! JSON Lines and logfmt both fill a [`RawFields`]; [`RawFields::check`] turns it into a
//! [`CheckedLine`] or a message that says what is wrong and how to fix it. Keeping this in
//! one place means every format accepts exactly the same keys and rejects the same mistakes.
//!
//! ```text
//! {"operation_id":"op-1","hop":"caller","attempt":2,"start_ms":100,"finish_ms":180,"outcome":503}
//! operation=op-17 attempt=1 event=client-timeout t_ms=800
//! ```

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, Visitor};
use serde::Deserialize;

use crate::model::{Millis, Outcome, PointKind, Timing};
use crate::rules::HopOrder;

/// One JSON scalar or logfmt value, kept as written until validation decides what it means.
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar<'a> {
    Str(Cow<'a, str>),
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl<'de: 'a, 'a> Deserialize<'de> for Scalar<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ScalarVisitor;
        impl<'de> Visitor<'de> for ScalarVisitor {
            type Value = Scalar<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string, number or boolean")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Scalar::Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Scalar::Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Scalar::Str(Cow::Owned(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(Scalar::Int(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                // Above i64 (a Datadog trace ID, say) the digits are kept as text: an ID must
                // read exactly, and a numeric field parses the text to the same f64.
                Ok(i64::try_from(v)
                    .map_or_else(|_| Scalar::Str(Cow::Owned(v.to_string())), Scalar::Int))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                Ok(Scalar::Float(v))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
                Ok(Scalar::Bool(v))
            }
        }
        deserializer.deserialize_any(ScalarVisitor)
    }
}

impl Scalar<'_> {
    pub(super) fn describe(&self) -> String {
        match self {
            Scalar::Str(s) => format!("\"{s}\""),
            Scalar::Int(i) => i.to_string(),
            Scalar::Float(f) => f.to_string(),
            Scalar::Bool(b) => b.to_string(),
        }
    }
}

/// The fields of one line as written, before validation: one per entry of [`FIELDS`],
/// which is where the keys that fill them are spelled. Unknown keys are ignored.
#[derive(Debug, Default)]
pub struct RawFields<'a> {
    pub operation_id: Option<Scalar<'a>>,
    pub test_run_id: Option<Scalar<'a>>,
    pub hop: Option<Scalar<'a>>,
    pub attempt: Option<Scalar<'a>>,
    pub start_ms: Option<Scalar<'a>>,
    pub finish_ms: Option<Scalar<'a>>,
    pub start: Option<Scalar<'a>>,
    pub finish: Option<Scalar<'a>>,
    pub outcome: Option<Scalar<'a>>,
    pub target: Option<Scalar<'a>>,
    pub message_id: Option<Scalar<'a>>,
    pub delivery: Option<Scalar<'a>>,
    pub span_id: Option<Scalar<'a>>,
    pub parent_id: Option<Scalar<'a>>,
    pub delay_ms: Option<Scalar<'a>>,
    pub retry_after_ms: Option<Scalar<'a>>,
    pub effect: Option<Scalar<'a>>,
    pub hidden: Option<Scalar<'a>>,
    pub untimed: Option<Scalar<'a>>,
    pub event: Option<Scalar<'a>>,
    pub ts: Option<Scalar<'a>>,
    pub t_ms: Option<Scalar<'a>>,
    pub time: Option<Scalar<'a>>,
}

impl<'a> RawFields<'a> {
    /// Stores the value of field `index` of [`FIELDS`] through its slot, called with a
    /// constant index in each arm so that the slot is inlined: the fast path's call through
    /// the table's function pointer would be one indirect call per key.
    #[inline]
    pub fn set(&mut self, index: usize, value: Option<Scalar<'a>>) {
        macro_rules! by_index {
            ($($i:literal)*) => {
                match index {
                    $($i => *(FIELDS[$i].slot)(self) = value,)*
                    _ => {}
                }
            };
        }
        const _: () = assert!(FIELDS.len() == 23, "one arm of `set` per field");
        by_index!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22);
    }
}

/// Where a key's value goes in [`RawFields`].
pub type Slot = for<'r, 'a> fn(&'r mut RawFields<'a>) -> &'r mut Option<Scalar<'a>>;

/// One input key: every spelling accepted for it (the snake_case name first, then its
/// camelCase spelling and the few spellings real loggers use, such as logfmt's
/// `operation=`), and the field of [`RawFields`] it fills.
pub struct Field {
    pub spellings: &'static [&'static str],
    pub slot: Slot,
}

impl Field {
    /// The key's name: its snake_case spelling.
    pub fn name(&self) -> &'static str {
        self.spellings[0]
    }
}

/// Every key of an attempt event (docs/input.md), in one table that every reader uses:
/// serde's [`RawFields`] deserializer (JSON Lines lines the fast path leaves, and logfmt),
/// the JSON Lines fast path, and the Parquet columns. A key added here is read by all of
/// them; the tests walk this table through each.
pub const FIELDS: [Field; 23] = [
    Field {
        spellings: &["operation_id", "operationId", "operation"],
        slot: |f| &mut f.operation_id,
    },
    Field {
        spellings: &["test_run_id", "testRunId", "run"],
        slot: |f| &mut f.test_run_id,
    },
    Field {
        spellings: &["hop"],
        slot: |f| &mut f.hop,
    },
    Field {
        spellings: &["attempt"],
        slot: |f| &mut f.attempt,
    },
    Field {
        spellings: &["start_ms", "startMs"],
        slot: |f| &mut f.start_ms,
    },
    Field {
        spellings: &["finish_ms", "finishMs"],
        slot: |f| &mut f.finish_ms,
    },
    Field {
        spellings: &["start"],
        slot: |f| &mut f.start,
    },
    Field {
        spellings: &["finish"],
        slot: |f| &mut f.finish,
    },
    Field {
        spellings: &["outcome"],
        slot: |f| &mut f.outcome,
    },
    Field {
        spellings: &["target"],
        slot: |f| &mut f.target,
    },
    Field {
        spellings: &["message_id", "messageId"],
        slot: |f| &mut f.message_id,
    },
    Field {
        spellings: &["delivery"],
        slot: |f| &mut f.delivery,
    },
    Field {
        spellings: &["span_id", "spanId"],
        slot: |f| &mut f.span_id,
    },
    Field {
        spellings: &["parent_id", "parentId"],
        slot: |f| &mut f.parent_id,
    },
    Field {
        spellings: &["delay_ms", "delayMs"],
        slot: |f| &mut f.delay_ms,
    },
    Field {
        spellings: &["retry_after_ms", "retryAfterMs"],
        slot: |f| &mut f.retry_after_ms,
    },
    Field {
        spellings: &["effect"],
        slot: |f| &mut f.effect,
    },
    Field {
        spellings: &["hidden"],
        slot: |f| &mut f.hidden,
    },
    Field {
        spellings: &["untimed"],
        slot: |f| &mut f.untimed,
    },
    Field {
        spellings: &["event"],
        slot: |f| &mut f.event,
    },
    Field {
        spellings: &["ts"],
        slot: |f| &mut f.ts,
    },
    Field {
        spellings: &["t_ms", "tMs"],
        slot: |f| &mut f.t_ms,
    },
    Field {
        spellings: &["time"],
        slot: |f| &mut f.time,
    },
];

/// The keys' names, as serde wants them for a struct.
const NAMES: [&str; FIELDS.len()] = {
    let mut names = [""; FIELDS.len()];
    let mut i = 0;
    while i < FIELDS.len() {
        names[i] = FIELDS[i].spellings[0];
        i += 1;
    }
    names
};

/// The index in [`FIELDS`] of the field whose snake_case name is `name`, at compile time
/// (a name that is no field's fails the build): for code that takes a field by its place,
/// as the typed fast path does ([`super::jsonl`]).
pub const fn field(name: &str) -> usize {
    let mut i = 0;
    while i < FIELDS.len() {
        if const_eq(FIELDS[i].spellings[0].as_bytes(), name.as_bytes()) {
            return i;
        }
        i += 1;
    }
    panic!("no such field")
}

const fn const_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The longest spelling in [`FIELDS`]; a longer key is none of ours.
const LONGEST_KEY: usize = 14;

/// The most spellings of one length.
const SPELLINGS_PER_LENGTH: usize = 8;

/// The spellings of [`FIELDS`] by length, each with its field's index: a key is compared
/// with the few spellings of its length, not with all thirty (the fast path looks up
/// every key of every line). Built at compile time, so that a lookup is one index into a
/// static table (the table built at first use cost a check and two pointers per key).
static BY_LENGTH: [[Option<(&str, u8)>; SPELLINGS_PER_LENGTH]; LONGEST_KEY + 1] = {
    let mut table = [[None; SPELLINGS_PER_LENGTH]; LONGEST_KEY + 1];
    let mut index = 0;
    while index < FIELDS.len() {
        let mut s = 0;
        while s < FIELDS[index].spellings.len() {
            let spelling = FIELDS[index].spellings[s];
            assert!(spelling.len() <= LONGEST_KEY, "raise LONGEST_KEY");
            let row = &mut table[spelling.len()];
            let mut slot = 0;
            while row[slot].is_some() {
                slot += 1;
                assert!(slot < SPELLINGS_PER_LENGTH, "raise SPELLINGS_PER_LENGTH");
            }
            row[slot] = Some((spelling, index as u8));
            s += 1;
        }
        index += 1;
    }
    table
};

/// The index in [`FIELDS`] of the field a key spells; `None` for a key we do not read.
pub fn field_index(key: &str) -> Option<usize> {
    BY_LENGTH
        .get(key.len())?
        .iter()
        .map_while(|&entry| entry)
        .find(|(spelling, _)| crate::model::short_eq(spelling.as_bytes(), key.as_bytes()))
        .map(|(_, index)| usize::from(index))
}

/// Reads an object whose keys are looked up in [`FIELDS`]: a key given twice (in any two
/// spellings) is an error, as a line must not say two things; unknown keys are skipped.
impl<'de: 'a, 'a> Deserialize<'de> for RawFields<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Key;
        impl<'de> DeserializeSeed<'de> for Key {
            type Value = Option<usize>;
            fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
                d.deserialize_identifier(self)
            }
        }
        impl Visitor<'_> for Key {
            type Value = Option<usize>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("field identifier")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(field_index(v))
            }
        }
        struct Object<'a>(std::marker::PhantomData<RawFields<'a>>);
        impl<'de: 'a, 'a> Visitor<'de> for Object<'a> {
            type Value = RawFields<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("struct RawFields")
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut fields = RawFields::default();
                let mut seen = [false; FIELDS.len()];
                while let Some(key) = map.next_key_seed(Key)? {
                    let Some(index) = key else {
                        map.next_value::<de::IgnoredAny>()?;
                        continue;
                    };
                    if std::mem::replace(&mut seen[index], true) {
                        return Err(de::Error::duplicate_field(NAMES[index]));
                    }
                    *(FIELDS[index].slot)(&mut fields) = map.next_value()?;
                }
                Ok(fields)
            }
        }
        deserializer.deserialize_struct("RawFields", &NAMES, Object(std::marker::PhantomData))
    }
}

/// A valid line whose strings still borrow from the input; ingest interns them.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedLine<'a> {
    pub operation_id: Cow<'a, str>,
    pub test_run_id: Option<Cow<'a, str>>,
    pub hop: u16,
    pub attempt: Option<u32>,
    pub timing: Timing,
    pub outcome: Option<Outcome>,
    pub target: Option<Cow<'a, str>>,
    pub message_id: Option<Cow<'a, str>>,
    pub delivery: Option<u32>,
    pub span_id: Option<Cow<'a, str>>,
    pub parent_id: Option<Cow<'a, str>>,
    pub delay_ms: Option<Millis>,
    pub retry_after_ms: Option<Millis>,
    pub effect: bool,
    pub hidden: bool,
    /// Its times are only the bounds of the request it was part of (docs/input.md).
    pub untimed: bool,
}

impl<'a> RawFields<'a> {
    /// Validates the line against docs/input.md. The error says what is wrong and the fix.
    pub fn check(self, hops: &HopOrder) -> Result<CheckedLine<'a>, String> {
        let operation_id = match self.operation_id {
            Some(v) => text("operation_id", v)?,
            None => return Err(format!("{MISSING_OPERATION}: every event needs the logical operation it belongs to (add \"operation_id\")")),
        };
        not_blank(&operation_id)?;
        let test_run_id = self
            .test_run_id
            .map(|v| text("test_run_id", v))
            .transpose()?;
        let attempt = self
            .attempt
            .map(|v| positive_int("attempt", v))
            .transpose()?;
        let delivery = self
            .delivery
            .map(|v| positive_int("delivery", v))
            .transpose()?;
        let outcome = self.outcome.map(outcome).transpose()?;
        let delay_ms = self.delay_ms.map(|v| duration("delay_ms", v)).transpose()?;
        let retry_after_ms = self
            .retry_after_ms
            .map(|v| duration("retry_after_ms", v))
            .transpose()?;
        let effect = self
            .effect
            .map(|v| boolean("effect", v))
            .transpose()?
            .unwrap_or(false);
        let hidden = self
            .hidden
            .map(|v| boolean("hidden", v))
            .transpose()?
            .unwrap_or(false);
        let untimed = self
            .untimed
            .map(|v| boolean("untimed", v))
            .transpose()?
            .unwrap_or(false);

        let explicit_hop = match self.hop {
            Some(v) => Some(hop_index(hops, &text("hop", v)?)?),
            None => None,
        };

        let (hop, timing) = match self.event {
            Some(name) => {
                let name = text("event", name)?;
                let (prefix_hop, kind) = point_kind(&name, hops)?;
                let at = [("t_ms", self.t_ms), ("ts", self.ts), ("time", self.time)]
                    .into_iter()
                    .find_map(|(key, v)| v.map(|v| (key, v)));
                let at_ms = match at {
                    Some((key, v)) => time(key, v)?,
                    None => {
                        return Err(format!(
                            "point event \"{name}\" has no timestamp: add t_ms (milliseconds), or ts/time (RFC 3339)"
                        ))
                    }
                };
                // An explicit hop wins; otherwise the client-/server- prefix; otherwise the
                // caller, as docs/input.md says for a bare point event.
                let hop = explicit_hop
                    .or(prefix_hop)
                    .unwrap_or_else(|| hops.caller_index());
                (hop, Timing::Point { kind, at_ms })
            }
            None => {
                let start_ms = either_time(("start_ms", self.start_ms), ("start", self.start))?;
                let finish_ms =
                    either_time(("finish_ms", self.finish_ms), ("finish", self.finish))?;
                let hop = explicit_hop.unwrap_or_else(|| hops.caller_index());
                (hop, record_timing(start_ms, finish_ms)?)
            }
        };

        Ok(CheckedLine {
            operation_id,
            test_run_id,
            hop,
            attempt,
            timing,
            outcome,
            target: self.target.map(|v| text("target", v)).transpose()?,
            message_id: self.message_id.map(|v| text("message_id", v)).transpose()?,
            delivery,
            span_id: self.span_id.map(|v| text("span_id", v)).transpose()?,
            parent_id: self.parent_id.map(|v| text("parent_id", v)).transpose()?,
            delay_ms,
            retry_after_ms,
            effect,
            hidden,
            untimed,
        })
    }
}

/// An operation ID must not be blank. One that starts with a visible ASCII character is
/// not: no trimming (a pass over its characters) for the usual one.
pub(super) fn not_blank(operation_id: &str) -> Result<(), String> {
    let starts_visible = operation_id
        .as_bytes()
        .first()
        .is_some_and(u8::is_ascii_graphic);
    if !starts_visible && operation_id.trim().is_empty() {
        return Err(format!(
            "{EMPTY_OPERATION}: every event needs the logical operation it belongs to"
        ));
    }
    Ok(())
}

/// How the message of a line without an operation ID begins (the key absent, or empty).
const MISSING_OPERATION: &str = "missing operation_id";
const EMPTY_OPERATION: &str = "empty operation_id";

/// Whether a line's error says it has no operation ID: in a mixed log, a line of something
/// else (a health check, a log record), not a broken attempt.
pub(super) fn has_no_operation(message: &str) -> bool {
    message.starts_with(MISSING_OPERATION) || message.starts_with(EMPTY_OPERATION)
}

/// An attempt record's times: at least one, and the finish not before the start.
pub(super) fn record_timing(
    start_ms: Option<Millis>,
    finish_ms: Option<Millis>,
) -> Result<Timing, String> {
    if start_ms.is_none() && finish_ms.is_none() {
        return Err("no time: an attempt record needs start_ms/finish_ms (or start/finish as RFC 3339), and a point event needs \"event\" with t_ms, ts or time".into());
    }
    if let (Some(s), Some(f)) = (start_ms, finish_ms) {
        if f < s {
            return Err(format!(
                "finish ({f} ms) is earlier than start ({s} ms): swap them or fix the clock"
            ));
        }
    }
    Ok(Timing::Record {
        start_ms,
        finish_ms,
    })
}

/// IDs may be written as numbers; they are compared as text.
fn text<'a>(key: &str, v: Scalar<'a>) -> Result<Cow<'a, str>, String> {
    match v {
        Scalar::Str(s) => Ok(s),
        Scalar::Int(i) => Ok(Cow::Owned(i.to_string())),
        // JSON readers give an integer beyond 64 bits as the nearest f64: its digits are gone.
        Scalar::Float(f) if f.fract() == 0.0 && f.abs() >= 2f64.powi(63) => Err(format!(
            "{key} is an integer of more than 64 bits, which cannot be read exactly: quote it (\"{key}\": \"…\")"
        )),
        other => Err(format!("{key} must be a string, got {}", other.describe())),
    }
}

fn number(key: &str, v: &Scalar) -> Result<f64, String> {
    let n = match v {
        Scalar::Int(i) => *i as f64,
        Scalar::Float(f) => *f,
        Scalar::Str(s) => s
            .trim()
            .parse::<f64>()
            .map_err(|_| format!("{key} must be a number, got \"{s}\""))?,
        Scalar::Bool(b) => return Err(format!("{key} must be a number, got {b}")),
    };
    if !n.is_finite() {
        return Err(format!("{key} is not a finite number"));
    }
    // `-0` and `-0.0` mean 0: one spelling, so that `0` and `-0.0` are the same time and
    // exact duplicates of each other.
    Ok(n + 0.0)
}

#[inline]
pub(super) fn positive_int(key: &str, v: Scalar) -> Result<u32, String> {
    // The usual case, as the general one below decides it, without going through f64.
    if let Scalar::Int(i @ 1..=0xFFFF_FFFF) = v {
        return Ok(i as u32);
    }
    any_positive_int(key, v)
}

fn any_positive_int(key: &str, v: Scalar) -> Result<u32, String> {
    let n = number(key, &v)?;
    if n.fract() != 0.0 || n < 1.0 || n > u32::MAX as f64 {
        return Err(format!(
            "{key} must be an integer of at least 1 (1 = the original), got {}",
            v.describe()
        ));
    }
    Ok(n as u32)
}

/// The longest duration kept. Delays and retry hints are stored as `f32` (see
/// `model::Event`), which turns anything above 3.4e38 into infinity; the limit sits well
/// inside that, so that no rounding of the text (one ulp between the JSON readers) decides
/// whether a value is kept. No real duration comes near it.
pub const MAX_DURATION_MS: Millis = 1e38;

pub(super) fn duration(key: &str, v: Scalar) -> Result<Millis, String> {
    let n = number(key, &v)?;
    if n < 0.0 {
        return Err(format!("{key} must not be negative, got {n}"));
    }
    if n > MAX_DURATION_MS {
        return Err(format!(
            "{key} is {n} ms, beyond any real duration (at most {MAX_DURATION_MS:e} ms): fix the value, or leave the key out"
        ));
    }
    Ok(n)
}

fn boolean(key: &str, v: Scalar) -> Result<bool, String> {
    match v {
        Scalar::Bool(b) => Ok(b),
        Scalar::Str(s) if s == "true" => Ok(true),
        Scalar::Str(s) if s == "false" => Ok(false),
        other => Err(format!(
            "{key} must be true or false, got {}",
            other.describe()
        )),
    }
}

pub(super) fn outcome(v: Scalar) -> Result<Outcome, String> {
    let parsed = match &v {
        Scalar::Int(i) => Outcome::from_status(*i),
        Scalar::Str(s) => Outcome::parse(s),
        _ => None,
    };
    parsed.ok_or_else(|| {
        format!(
            "unknown outcome {}: use {}",
            v.describe(),
            Outcome::EXPECTED
        )
    })
}

/// A time: milliseconds as a number, or an RFC 3339 timestamp. Inline, with the general
/// case out of line, like [`positive_int`]: on the typed path an integer then goes from its
/// digits to the field in registers, not through a `Scalar` in memory (read back whole
/// right after it was written field by field, a stall after every number of a line).
#[inline]
pub(super) fn time(key: &str, v: Scalar) -> Result<Millis, String> {
    // The usual case, as the general one below decides it.
    if let Scalar::Int(i @ 0..) = v {
        return Ok(i as Millis);
    }
    any_time(key, v)
}

fn any_time(key: &str, v: Scalar) -> Result<Millis, String> {
    let ms = match &v {
        Scalar::Str(s) if s.trim().parse::<f64>().is_err() => rfc3339_ms(s).ok_or_else(|| {
            format!("{key} \"{s}\" is neither milliseconds nor an RFC 3339 timestamp such as 2026-11-30T10:00:00.250Z")
        })?,
        _ => number(key, &v)?,
    };
    // `number` let only finite values through: what is left to refuse is a negative one.
    if !crate::model::is_time(ms) {
        return Err(format!(
            "{key} is negative ({ms}): times are milliseconds on one clock, at or after 0"
        ));
    }
    Ok(ms)
}

fn either_time(
    ms: (&str, Option<Scalar>),
    rfc: (&str, Option<Scalar>),
) -> Result<Option<Millis>, String> {
    match (ms, rfc) {
        ((key, Some(v)), _) | (_, (key, Some(v))) => time(key, v).map(Some),
        _ => Ok(None),
    }
}

pub fn rfc3339_ms(s: &str) -> Option<Millis> {
    let t = chrono::DateTime::parse_from_rfc3339(s.trim()).ok()?;
    Some(t.timestamp() as f64 * 1000.0 + f64::from(t.timestamp_subsec_nanos()) / 1e6)
}

fn hop_index(hops: &HopOrder, name: &str) -> Result<u16, String> {
    hops.index_of(name).ok_or_else(|| {
        format!(
            "unknown hop \"{name}\": known hops are {} (set another order with --hops)",
            hops.names().join(", ")
        )
    })
}

/// `start`, `client-timeout`, `server-finish`, … → (hop named by the prefix, kind).
fn point_kind(name: &str, hops: &HopOrder) -> Result<(Option<u16>, PointKind), String> {
    let (hop, bare) = if let Some(rest) = name.strip_prefix("client-") {
        (Some(hops.caller_index()), rest)
    } else if let Some(rest) = name.strip_prefix("server-") {
        (Some(hops.dependency_index()), rest)
    } else {
        (None, name)
    };
    let kind = match bare {
        "start" => PointKind::Start,
        "finish" | "end" => PointKind::Finish,
        "timeout" => PointKind::Timeout,
        "cancel" | "cancelled" | "canceled" => PointKind::Cancel,
        _ => {
            return Err(format!(
                "unknown event \"{name}\": use start, finish, timeout or cancel, optionally prefixed client- or server-"
            ))
        }
    };
    Ok((hop, kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_is_one_entry_of_the_key_table() {
        // A field of RawFields missing from FIELDS would be filled by no reader.
        let debug = format!("{:?}", RawFields::default());
        assert_eq!(debug.matches("None").count(), FIELDS.len(), "{debug}");
        let mut fields = RawFields::default();
        for (i, field) in FIELDS.iter().enumerate() {
            *(field.slot)(&mut fields) = Some(Scalar::Int(i as i64));
        }
        for (i, field) in FIELDS.iter().enumerate() {
            assert_eq!(
                *(field.slot)(&mut fields),
                Some(Scalar::Int(i as i64)),
                "{} shares its field with another key",
                field.name()
            );
        }
        let mut spellings: Vec<&str> = FIELDS.iter().flat_map(|f| f.spellings).copied().collect();
        let all = spellings.len();
        spellings.sort_unstable();
        spellings.dedup();
        assert_eq!(spellings.len(), all, "a spelling names two keys");
    }

    #[test]
    fn serde_reads_every_spelling_of_the_key_table_into_its_field() {
        for field in &FIELDS {
            for spelling in field.spellings {
                let line = format!("{{\"{spelling}\":\"v\",\"unknown\":[1]}}");
                let mut got: RawFields = serde_json::from_str(&line).unwrap();
                assert_eq!(
                    *(field.slot)(&mut got),
                    Some(Scalar::Str("v".into())),
                    "{spelling}"
                );
                assert_eq!(format!("{got:?}").matches("Some(").count(), 1, "{spelling}");
            }
        }
        for field in FIELDS.iter().filter(|f| f.spellings.len() > 1) {
            // Two spellings of one key, even with one of them null, are one key twice.
            let line = format!(
                "{{\"{}\":null,\"{}\":1}}",
                field.spellings[0], field.spellings[1]
            );
            let err = serde_json::from_str::<RawFields>(&line)
                .unwrap_err()
                .to_string();
            let expected = format!("duplicate field `{}`", field.name());
            assert!(err.starts_with(&expected), "{line}: {err}");
        }
    }

    fn hops() -> HopOrder {
        HopOrder::default()
    }

    fn json(line: &str) -> Result<CheckedLine<'_>, String> {
        let raw: RawFields = serde_json::from_str(line).map_err(|e| e.to_string())?;
        raw.check(&hops())
    }

    #[test]
    fn accepts_snake_and_camel_case_keys_alike() {
        let a =
            json(r#"{"operation_id":"o","start_ms":1,"finish_ms":2,"message_id":"m"}"#).unwrap();
        let b = json(r#"{"operationId":"o","startMs":1,"finishMs":2,"messageId":"m"}"#).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn rejects_each_bad_value_with_the_fix() {
        let cases = [
            (r#"{"start_ms":1}"#, "missing operation_id"),
            (
                r#"{"operation_id":"o","attempt":0,"start_ms":1}"#,
                "attempt must be an integer of at least 1",
            ),
            (
                r#"{"operation_id":"o","start_ms":5,"finish_ms":1}"#,
                "earlier than start",
            ),
            (r#"{"operation_id":"o","start_ms":-5}"#, "negative"),
            (
                r#"{"operation_id":"o","hop":"cache","start_ms":1}"#,
                "known hops are caller, gateway, consumer, dependency",
            ),
            (
                r#"{"operation_id":"o","outcome":"meh","start_ms":1}"#,
                "unknown outcome",
            ),
            (r#"{"operation_id":"o"}"#, "no time"),
            (r#"{"operation_id":"o","event":"start"}"#, "no timestamp"),
            (r#"{"operation_id":"o","start":"yesterday"}"#, "RFC 3339"),
        ];
        for (line, expected) in cases {
            let err = json(line).expect_err(line);
            assert!(err.contains(expected), "{line}: {err}");
        }
    }

    #[test]
    fn point_event_prefixes_name_the_hop() {
        let h = hops();
        let c = json(r#"{"operation_id":"o","event":"client-timeout","t_ms":800}"#).unwrap();
        assert_eq!(c.hop, h.caller_index());
        assert_eq!(
            c.timing,
            Timing::Point {
                kind: PointKind::Timeout,
                at_ms: 800.0
            }
        );
        let s =
            json(r#"{"operation_id":"o","event":"server-finish","ts":"1970-01-01T00:00:01.5Z"}"#)
                .unwrap();
        assert_eq!(s.hop, h.dependency_index());
        assert_eq!(
            s.timing,
            Timing::Point {
                kind: PointKind::Finish,
                at_ms: 1500.0
            }
        );
    }

    #[test]
    fn rfc3339_and_milliseconds_mean_the_same_instant() {
        let a = json(
            r#"{"operation_id":"o","start":"2026-11-30T00:00:00.250Z","finish_ms":1795996800300}"#,
        )
        .unwrap();
        assert_eq!(
            a.timing,
            Timing::Record {
                start_ms: Some(1_795_996_800_250.0),
                finish_ms: Some(1_795_996_800_300.0)
            }
        );
    }

    #[test]
    fn outcome_accepts_statuses_as_numbers_and_strings() {
        let a = json(r#"{"operation_id":"o","start_ms":1,"outcome":503}"#).unwrap();
        let b = json(r#"{"operation_id":"o","start_ms":1,"outcome":"503"}"#).unwrap();
        assert_eq!(a.outcome, Some(Outcome::Http(503)));
        assert_eq!(a.outcome, b.outcome);
    }
}

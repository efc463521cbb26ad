//! The native attempt-event fields (docs/input.md) as read from one line, before validation, and
//! the one validation every line format goes through.
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

use serde::de::{self, Deserializer, Visitor};
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
                Ok(i64::try_from(v).map_or(Scalar::Float(v as f64), Scalar::Int))
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
    fn describe(&self) -> String {
        match self {
            Scalar::Str(s) => format!("\"{s}\""),
            Scalar::Int(i) => i.to_string(),
            Scalar::Float(f) => f.to_string(),
            Scalar::Bool(b) => b.to_string(),
        }
    }
}

/// Every key of docs/input.md, each with its camelCase spelling (and a few spellings real
/// loggers use, such as logfmt's `operation=`). Unknown keys are ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RawFields<'a> {
    #[serde(borrow, alias = "operationId", alias = "operation")]
    pub operation_id: Option<Scalar<'a>>,
    #[serde(borrow, alias = "testRunId", alias = "run")]
    pub test_run_id: Option<Scalar<'a>>,
    #[serde(borrow)]
    pub hop: Option<Scalar<'a>>,
    #[serde(borrow)]
    pub attempt: Option<Scalar<'a>>,
    #[serde(borrow, alias = "startMs")]
    pub start_ms: Option<Scalar<'a>>,
    #[serde(borrow, alias = "finishMs")]
    pub finish_ms: Option<Scalar<'a>>,
    #[serde(borrow)]
    pub start: Option<Scalar<'a>>,
    #[serde(borrow)]
    pub finish: Option<Scalar<'a>>,
    #[serde(borrow)]
    pub outcome: Option<Scalar<'a>>,
    #[serde(borrow)]
    pub target: Option<Scalar<'a>>,
    #[serde(borrow, alias = "messageId")]
    pub message_id: Option<Scalar<'a>>,
    #[serde(borrow)]
    pub delivery: Option<Scalar<'a>>,
    #[serde(borrow, alias = "spanId")]
    pub span_id: Option<Scalar<'a>>,
    #[serde(borrow, alias = "parentId")]
    pub parent_id: Option<Scalar<'a>>,
    #[serde(borrow, alias = "delayMs")]
    pub delay_ms: Option<Scalar<'a>>,
    #[serde(borrow, alias = "retryAfterMs")]
    pub retry_after_ms: Option<Scalar<'a>>,
    #[serde(borrow)]
    pub effect: Option<Scalar<'a>>,
    #[serde(borrow)]
    pub event: Option<Scalar<'a>>,
    #[serde(borrow)]
    pub ts: Option<Scalar<'a>>,
    #[serde(borrow, alias = "tMs")]
    pub t_ms: Option<Scalar<'a>>,
    #[serde(borrow)]
    pub time: Option<Scalar<'a>>,
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
}

impl<'a> RawFields<'a> {
    /// Validates the line against docs/input.md. The error says what is wrong and the fix.
    pub fn check(self, hops: &HopOrder) -> Result<CheckedLine<'a>, String> {
        let operation_id = match self.operation_id {
            Some(v) => text("operation_id", v)?,
            None => return Err("missing operation_id: every event needs the logical operation it belongs to (add \"operation_id\")".into()),
        };
        if operation_id.trim().is_empty() {
            return Err(
                "empty operation_id: every event needs the logical operation it belongs to".into(),
            );
        }
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
        let effect = self.effect.map(boolean).transpose()?.unwrap_or(false);

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
                let hop = explicit_hop.or(prefix_hop).unwrap_or(hops.caller_index());
                (hop, Timing::Point { kind, at_ms })
            }
            None => {
                let start_ms = either_time(("start_ms", self.start_ms), ("start", self.start))?;
                let finish_ms =
                    either_time(("finish_ms", self.finish_ms), ("finish", self.finish))?;
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
                let hop = explicit_hop.unwrap_or(hops.caller_index());
                (
                    hop,
                    Timing::Record {
                        start_ms,
                        finish_ms,
                    },
                )
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
        })
    }
}

/// IDs may be written as numbers; they are compared as text.
fn text<'a>(key: &str, v: Scalar<'a>) -> Result<Cow<'a, str>, String> {
    match v {
        Scalar::Str(s) => Ok(s),
        Scalar::Int(i) => Ok(Cow::Owned(i.to_string())),
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
    Ok(n)
}

fn positive_int(key: &str, v: Scalar) -> Result<u32, String> {
    let n = number(key, &v)?;
    if n.fract() != 0.0 || n < 1.0 || n > u32::MAX as f64 {
        return Err(format!(
            "{key} must be an integer of at least 1 (1 = the original), got {}",
            v.describe()
        ));
    }
    Ok(n as u32)
}

fn duration(key: &str, v: Scalar) -> Result<Millis, String> {
    let n = number(key, &v)?;
    if n < 0.0 {
        return Err(format!("{key} must not be negative, got {n}"));
    }
    Ok(n)
}

fn boolean(v: Scalar) -> Result<bool, String> {
    match v {
        Scalar::Bool(b) => Ok(b),
        Scalar::Str(s) if s == "true" => Ok(true),
        Scalar::Str(s) if s == "false" => Ok(false),
        other => Err(format!(
            "effect must be true or false, got {}",
            other.describe()
        )),
    }
}

fn outcome(v: Scalar) -> Result<Outcome, String> {
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

/// A time: milliseconds as a number, or an RFC 3339 timestamp.
fn time(key: &str, v: Scalar) -> Result<Millis, String> {
    let ms = match &v {
        Scalar::Str(s) if s.trim().parse::<f64>().is_err() => rfc3339_ms(s).ok_or_else(|| {
            format!("{key} \"{s}\" is neither milliseconds nor an RFC 3339 timestamp such as 2026-11-30T10:00:00.250Z")
        })?,
        _ => number(key, &v)?,
    };
    if ms < 0.0 {
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

//! ISO 8601 durations as Java (`java.time.Duration::toString`), logback and many JSON
//! loggers write them: `PT0.045S`, `PT1M2.5S`, `PT2H`, `P1DT12H`, `P0D`, read as
//! milliseconds, wherever a mapped duration key (`duration`, `duration_ms`, …, and the
//! presets built on them) is read. A string is taken for one only when it starts with `P`,
//! so numbers and `250ms` read as before.
//!
//! The subset read, and why:
//!
//! - `P`, then days (`nD`) or weeks (`nW`, alone, as ISO 8601 writes them), then `T` and
//!   hours, minutes and seconds (`nH`, `nM`, `nS`), each at most once and in that order;
//!   at least one part. A day is 24 hours, as Java's `Duration` takes it: an attempt's
//!   duration is elapsed time, not a span of the calendar.
//! - A decimal fraction (`.` or `,`, as ISO 8601 allows both) on the last part only:
//!   `PT1.5M` and `PT0.045S`, not `PT1.5M2S`.
//! - Designators in either case (`pt0.045s`): Java reads them so.
//!
//! Refused, each with a message that says why: years and months (`P1Y`, `P2M`: no fixed
//! length in milliseconds), a sign (`-PT1S`, `PT-0.5S`: an attempt's duration is never
//! negative), the alternative format (`PT00:00:45`), exponents, and a number of more
//! than [`MAX_WHOLE_DIGITS`] digits.
//!
//! ```text
//! PT0.045S → 45 ms    PT1M2.5S → 62500 ms    P0D → 0 ms    P1DT2H → 93600000 ms
//! ```

use super::fields::MAX_DURATION_MS;
use crate::model::Millis;

/// Milliseconds in each unit, by its designator after `T` (time) or before it (date).
const HOUR_MS: f64 = 3_600_000.0;
const MINUTE_MS: f64 = 60_000.0;
const SECOND_MS: f64 = 1_000.0;
const DAY_MS: f64 = 24.0 * HOUR_MS;
const WEEK_MS: f64 = 7.0 * DAY_MS;

/// The most digits read in one part's whole number: beyond 15 digits an `f64` no longer
/// holds every integer exactly, and no real duration needs them. Fifteen digits of weeks
/// are some 6e23 ms, well inside [`MAX_DURATION_MS`], so nothing read here passes it.
const MAX_WHOLE_DIGITS: usize = 15;

/// The most fraction digits kept: nanoseconds are the finest a clock writes (Java prints
/// nine); more would only be rounded away.
const MAX_FRACTION_DIGITS: usize = 9;

/// Whether `text` is written as an ISO 8601 duration at all (it starts with `P`, or a
/// sign before one), so that a reader can tell it from `250ms` or a number before
/// [`iso8601_ms`] says what is wrong with it.
pub fn is_iso8601(text: &str) -> bool {
    let t = text.trim().trim_start_matches(['-', '+']);
    t.starts_with(['P', 'p'])
}

/// The duration `text` writes, in milliseconds, or what is wrong with it (a message that
/// quotes the text and names the fix).
pub fn iso8601_ms(text: &str) -> Result<Millis, String> {
    let written = text.trim();
    let bad = |why: &str| {
        format!("\"{written}\" is not an ISO 8601 duration such as PT0.045S or PT1M2.5S: {why}")
    };
    if written.starts_with(['-', '+']) || written.contains("-") {
        return Err(bad(
            "a duration of an attempt is never negative; write it without a sign",
        ));
    }
    let rest = written
        .strip_prefix(['P', 'p'])
        .ok_or_else(|| bad("it must start with P"))?;
    if rest.contains(':') {
        return Err(bad(
            "the alternative format (PT00:00:45) is not read; write PT45S",
        ));
    }
    let (date, time) = match rest.find(['T', 't']) {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    if time == Some("") {
        return Err(bad(
            "a T must be followed by hours, minutes or seconds (PT1S)",
        ));
    }
    let date_parts = parts(date, &bad)?;
    let time_parts = parts(time.unwrap_or(""), &bad)?;
    if date_parts.is_empty() && time_parts.is_empty() {
        return Err(bad("it has no part; write P0D or PT0S for no time at all"));
    }
    let mut ms = 0.0;
    let mut order = 0;
    let all = date_parts
        .iter()
        .map(|p| (false, p))
        .chain(time_parts.iter().map(|p| (true, p)));
    let count = date_parts.len() + time_parts.len();
    for (n, (in_time, part)) in all.enumerate() {
        let (rank, unit) = match (in_time, part.designator.to_ascii_uppercase()) {
            (false, 'W') => (0, WEEK_MS),
            (false, 'D') => (1, DAY_MS),
            (true, 'H') => (2, HOUR_MS),
            (true, 'M') => (3, MINUTE_MS),
            (true, 'S') => (4, SECOND_MS),
            (false, 'Y') => return Err(bad("years have no fixed length in milliseconds")),
            (false, 'M') => {
                return Err(bad(
                    "months have no fixed length in milliseconds (minutes are PT…M)",
                ))
            }
            (false, 'H' | 'S') => {
                return Err(bad("hours, minutes and seconds come after a T (PT1H)"))
            }
            (_, other) => return Err(bad(&format!("'{other}' is not a designator here"))),
        };
        if rank < order || (n > 0 && rank == order) {
            return Err(bad(
                "each part at most once, in the order W or D, then T, H, M, S",
            ));
        }
        if rank == 0 && count > 1 {
            return Err(bad("weeks are written alone (P2W); write days instead"));
        }
        order = rank;
        if part.fraction.is_some() && n + 1 < count {
            return Err(bad("only the last part may have a fraction (PT1M2.5S)"));
        }
        ms += part.ms(unit);
    }
    debug_assert!(ms <= MAX_DURATION_MS, "bounded by MAX_WHOLE_DIGITS");
    Ok(ms)
}

/// One `nX` of a duration: its number as written and its designator.
struct Part<'a> {
    whole: &'a str,
    fraction: Option<&'a str>,
    designator: char,
}

impl Part<'_> {
    /// The part in milliseconds. The whole number and the fraction are scaled apart, each
    /// exactly for the digits kept, so that `PT0.045S` is 45 ms, not 45.000000000000004.
    fn ms(&self, unit: f64) -> Millis {
        let whole: f64 = self.whole.parse::<u64>().unwrap_or(0) as f64 * unit;
        let fraction = self.fraction.map_or(0.0, |f| {
            let kept = &f[..f.len().min(MAX_FRACTION_DIGITS)];
            let digits: u64 = kept.parse().unwrap_or(0);
            digits as f64 * unit / 10f64.powi(kept.len() as i32)
        });
        whole + fraction
    }
}

/// The `nX` parts of one side of the `T`.
fn parts<'a>(mut text: &'a str, bad: &dyn Fn(&str) -> String) -> Result<Vec<Part<'a>>, String> {
    let mut out = Vec::new();
    while !text.is_empty() {
        let digits = text
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ','))
            .ok_or_else(|| bad("a number must be followed by its designator (S, M, H, D or W)"))?;
        let number = &text[..digits];
        let designator = text[digits..].chars().next().expect("found above");
        if number.is_empty() {
            return Err(bad(&format!("'{designator}' needs a number before it")));
        }
        let (whole, fraction) = match number.find(['.', ',']) {
            Some(i) => (&number[..i], Some(&number[i + 1..])),
            None => (number, None),
        };
        let digits_only = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits_only(whole) || fraction.is_some_and(|f| !digits_only(f)) {
            return Err(bad(&format!(
                "\"{number}\" is not a number such as 2 or 0.045"
            )));
        }
        if whole.len() > MAX_WHOLE_DIGITS {
            return Err(bad(&format!(
                "more than {MAX_WHOLE_DIGITS} digits is beyond any real duration"
            )));
        }
        out.push(Part {
            whole,
            fraction,
            designator,
        });
        text = &text[digits + designator.len_utf8()..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_java_and_loggers_write() {
        let cases: [(&str, Millis); 16] = [
            ("PT0.045S", 45.0),
            ("PT1M2.5S", 62_500.0),
            ("P0D", 0.0),
            ("PT0S", 0.0),
            ("PT2H", 7_200_000.0),
            ("P1DT2H", 93_600_000.0),
            ("P2W", 1_209_600_000.0),
            ("PT1.5M", 90_000.0),
            ("PT0,5S", 500.0),
            ("pt0.25s", 250.0),
            ("PT0.017368725S", 17.368725),
            ("PT0.000000001S", 0.000001),
            // Past nanoseconds the digits are dropped, not rounded into a wrong unit.
            ("PT0.0000000019S", 0.000001),
            ("PT25H", 90_000_000.0),
            ("  PT1S ", 1_000.0),
            ("P1DT1H1M1.5S", 90_061_500.0),
        ];
        for (text, ms) in cases {
            assert_eq!(iso8601_ms(text), Ok(ms), "{text}");
            assert!(is_iso8601(text), "{text}");
        }
    }

    #[test]
    fn refuses_the_rest_saying_why() {
        let cases = [
            ("P1Y", "years have no fixed length"),
            ("P2M", "months have no fixed length"),
            ("P1M2D", "months have no fixed length"),
            ("-PT1S", "never negative"),
            ("PT-0.5S", "never negative"),
            ("PT00:00:45", "alternative format"),
            ("P", "no part"),
            ("PT", "a T must be followed"),
            ("PT5", "followed by its designator"),
            ("PTS", "needs a number"),
            ("PT1.5M2S", "only the last part may have a fraction"),
            ("PT2S1M", "in the order"),
            ("PT1S1S", "in the order"),
            ("P1WT1H", "weeks are written alone"),
            ("P1H", "come after a T"),
            ("PT1X", "'X' is not a designator"),
            ("PT1e3S", "'E' is not a designator"),
            ("PT1..5S", "is not a number"),
            ("PT.5S", "is not a number"),
            ("0.045", "must start with P"),
            ("PT9999999999999999S", "beyond any real duration"),
            ("P9999999999999999W", "beyond any real duration"),
        ];
        for (text, why) in cases {
            let err = iso8601_ms(text).expect_err(text);
            assert!(
                err.contains(why) && err.contains(&format!("\"{}\"", text.trim())),
                "{text}: {err}"
            );
        }
        assert!(!is_iso8601("250ms") && !is_iso8601("0.045") && !is_iso8601(""));
    }

    /// Every `elapsed` of the captured logback log (java.time.Duration as it prints
    /// itself) is read, and agrees with the digits it was printed from.
    #[test]
    fn every_duration_of_the_captured_java_log_is_read() {
        let log = include_str!("../../fixtures/logs/logback.log");
        let mut read = 0;
        for line in log.lines().filter(|l| l.starts_with('{')) {
            let object: serde_json::Value = serde_json::from_str(line).unwrap();
            let Some(elapsed) = object.get("elapsed").and_then(|v| v.as_str()) else {
                continue;
            };
            let digits = elapsed
                .strip_prefix("PT")
                .and_then(|s| s.strip_suffix('S'))
                .unwrap();
            let seconds: f64 = digits.parse().unwrap();
            let ms = iso8601_ms(elapsed).unwrap();
            assert!((ms - seconds * 1000.0).abs() < 1e-9, "{elapsed}: {ms}");
            read += 1;
        }
        assert_eq!(read, 10);
        // The log's own messages print durations too, minutes included.
        assert!(log.contains("stopped after PT1M2.5S"));
    }
}

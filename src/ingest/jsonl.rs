//! JSON Lines: one attempt event object per line, keys as in [`super::fields::FIELDS`].
//!
//! Almost every real line is a flat object of plain strings and numbers, so a direct scan
//! handles those; anything else (escapes, nested values, a syntax error) goes to serde_json,
//! which is exact and gives the error message. A unit test holds the two to the same result.

use std::borrow::Cow;

use super::fields::{
    duration, field, field_index, not_blank, outcome, positive_int, record_timing, time,
    CheckedLine, RawFields, Scalar, FIELDS,
};
use crate::model::{Millis, Outcome};
use crate::rules::HopOrder;

pub fn parse(text: &str, unterminated_last: bool) -> Result<RawFields<'_>, String> {
    if let Some(fields) = flat::parse(text) {
        return Ok(fields);
    }
    slow(text, unterminated_last)
}

/// A line parsed and checked ([`RawFields::check`]) in one step. The usual line takes the
/// typed fast path ([`flat::parse_typed`]), which converts each value as it is found (a
/// line with the same bytes between its values as the lines before it is read by their
/// shape, without looking for its keys); a line it steps aside from is read again into
/// [`RawFields`] and checked, the path that says what is wrong with a bad line.
pub fn parse_checked<'a>(
    text: &'a str,
    unterminated_last: bool,
    hops: &HopOrder,
) -> Result<CheckedLine<'a>, String> {
    if let Some(line) = flat::typed_first(text, hops) {
        return Ok(line);
    }
    parse_checked_untyped(text, unterminated_last, hops)
}

/// [`parse_checked`] without the typed fast path, what that path must agree with: the
/// flat scan fills the fields in place (23 optional values are 736 bytes, and passing them
/// back through an `Option` and a `Result` before checking copied them twice a line), or
/// serde_json reads the line.
fn parse_checked_untyped<'a>(
    text: &'a str,
    unterminated_last: bool,
    hops: &HopOrder,
) -> Result<CheckedLine<'a>, String> {
    let mut fields = RawFields::default();
    if flat::parse_into(text, &mut fields).is_some() {
        return fields.check(hops);
    }
    slow(text, unterminated_last)?.check(hops)
}

/// serde_json's reading of a line the fast path left (which reads only objects): exact,
/// and its error says where.
fn slow(text: &str, unterminated_last: bool) -> Result<RawFields<'_>, String> {
    // serde would read an array by position; an event is an object, say so plainly.
    if !text.trim_start().starts_with('{') {
        return Err(
            "not a JSON object: each line must be one attempt event object, {\"operation_id\": …}"
                .to_string(),
        );
    }
    serde_json::from_str::<RawFields>(text).map_err(|e| {
        if e.is_eof() && unterminated_last {
            "truncated line: the JSON object ends before it closes (was the file cut mid-write?); complete or delete the line".to_string()
        } else if e.is_eof() || e.is_syntax() {
            format!("not valid JSON ({e}); each line must be one JSON object")
        } else {
            format!("{e}")
        }
    })
}

/// A line read whole as a JSON object, for a key mapping to navigate (see
/// [`super::mapping`]): never the fast path. A line that is not one gets [`parse`]'s
/// message, called only then, so that the plain path's code is as it was.
pub fn parse_object(
    text: &str,
    unterminated_last: bool,
) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    serde_json::from_str(text).map_err(|e| match parse(text, unterminated_last) {
        Err(message) => message,
        Ok(_) => format!("not valid JSON ({e}); each line must be one JSON object"),
    })
}

/// The fast path: a flat object whose strings have no escapes. `None` hands the line to
/// serde_json, never a different answer.
mod flat {
    use super::*;

    /// Integers with more digits than this may not fit an i64: serde_json decides those.
    const MAX_FAST_INT_DIGITS: usize = 18;

    struct Cursor<'a> {
        text: &'a str,
        at: usize,
    }

    impl<'a> Cursor<'a> {
        fn peek(&self) -> Option<u8> {
            self.text.as_bytes().get(self.at).copied()
        }

        fn skip_ws(&mut self) {
            while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
                self.at += 1;
            }
        }

        fn eat(&mut self, byte: u8) -> Option<()> {
            self.skip_ws();
            (self.peek()? == byte).then(|| self.at += 1)
        }

        /// A string without escapes or control characters (`None` for any other: serde
        /// reads those), which ends at the next quote.
        fn string(&mut self) -> Option<&'a str> {
            self.eat(b'"')?;
            let start = self.at;
            let len = plain_string_len(&self.text.as_bytes()[start..])?;
            self.at = start + len + 1;
            Some(&self.text[start..start + len])
        }

        fn literal(&mut self, word: &str) -> Option<()> {
            self.text[self.at..]
                .starts_with(word)
                .then(|| self.at += word.len())
        }

        /// A JSON number, by its grammar; integers that surely fit are read as such. Inline:
        /// see `fields::time`.
        #[inline]
        fn number(&mut self) -> Option<Scalar<'a>> {
            let bytes = self.text.as_bytes();
            let start = self.at;
            let negative = bytes.get(start) == Some(&b'-');
            let int_start = start + usize::from(negative);
            let int_digits = digit_run(bytes.get(int_start..)?);
            let int_end = int_start + int_digits;
            if int_digits == 0 || (int_digits > 1 && bytes[int_start] == b'0') {
                return None;
            }
            // An integer (no fraction, no exponent) is all but every number of a log: read
            // from its digits, the text never sliced out and the grammar's other branches
            // never tested.
            if !matches!(bytes.get(int_end), Some(b'.' | b'e' | b'E')) {
                if int_digits > MAX_FAST_INT_DIGITS {
                    return None;
                }
                self.at = int_end;
                // serde_json reads `-0` as the float -0.0, not as the integer 0.
                if negative && bytes[int_start] == b'0' {
                    return Some(Scalar::Float(-0.0));
                }
                let magnitude = digits_value(&bytes[int_start..int_end]);
                return Some(Scalar::Int(if negative { -magnitude } else { magnitude }));
            }
            let mut i = int_end;
            if bytes.get(i) == Some(&b'.') {
                i += 1;
                let frac_start = i;
                while bytes.get(i).is_some_and(u8::is_ascii_digit) {
                    i += 1;
                }
                if i == frac_start {
                    return None;
                }
            }
            if matches!(bytes.get(i), Some(b'e' | b'E')) {
                i += 1;
                if matches!(bytes.get(i), Some(b'+' | b'-')) {
                    i += 1;
                }
                let exp_start = i;
                while bytes.get(i).is_some_and(u8::is_ascii_digit) {
                    i += 1;
                }
                if i == exp_start {
                    return None;
                }
            }
            self.at = i;
            // Correctly rounded, so that a time `convert` wrote reads back exactly.
            // serde_json's default reader may land one ulp away on a few 17-digit
            // numbers (its `float_roundtrip` feature fixes that, at the cost of
            // rebuilding polars); the tests hold both paths to within that ulp.
            self.text[start..i]
                .parse::<f64>()
                .ok()
                .filter(|f| f.is_finite())
                .map(Scalar::Float)
        }

        /// `Some(None)` for null; `None` to give up (objects, arrays, bad syntax).
        fn value(&mut self) -> Option<Option<Scalar<'a>>> {
            self.skip_ws();
            match self.peek()? {
                b'"' => self.string().map(|s| Some(Scalar::Str(Cow::Borrowed(s)))),
                b't' => self.literal("true").map(|_| Some(Scalar::Bool(true))),
                b'f' => self.literal("false").map(|_| Some(Scalar::Bool(false))),
                b'n' => self.literal("null").map(|_| None),
                b'-' | b'0'..=b'9' => self.number().map(Some),
                _ => None,
            }
        }
    }

    /// How many ASCII digits `bytes` starts with. Eight bytes are tested at once: times
    /// in milliseconds have 13 digits, and a test per digit would be one per byte.
    #[inline]
    pub(super) fn digit_run(bytes: &[u8]) -> usize {
        const HIGH: u64 = 0xF0F0_F0F0_F0F0_F0F0;
        const THREES: u64 = 0x3030_3030_3030_3030;
        const SIXES: u64 = 0x0606_0606_0606_0606;
        let mut n = 0;
        while let Some(word) = bytes.get(n..n + 8) {
            let word = u64::from_le_bytes(word.try_into().expect("8 bytes"));
            // A digit's high half is 3, and adding 6 to it leaves that so (0x3A-0x3F
            // become 0x40-0x45). A carry out of a byte (0xFA and up, no digit) can only
            // flag the bytes after it: the first byte flagged is the first non-digit.
            let flags = ((word & HIGH) ^ THREES) | ((word.wrapping_add(SIXES) & HIGH) ^ THREES);
            if flags != 0 {
                return n + flags.trailing_zeros() as usize / 8;
            }
            n += 8;
        }
        n + bytes[n..].iter().take_while(|b| b.is_ascii_digit()).count()
    }

    /// The value of at most 18 ASCII digits (which fit an i64), eight at a time.
    #[inline]
    pub(super) fn digits_value(digits: &[u8]) -> i64 {
        debug_assert!(digits.len() <= MAX_FAST_INT_DIGITS);
        let mut n: i64 = 0;
        let mut rest = digits;
        while let Some(word) = rest.get(..8) {
            let word = u64::from_le_bytes(word.try_into().expect("8 bytes"));
            n = n * 100_000_000 + eight_digits(word) as i64;
            rest = &rest[8..];
        }
        let left = rest.len();
        if left == 0 {
            return n;
        }
        match digits.len().checked_sub(8) {
            // The last digits, fewer than eight, as the top bytes of the word that ends
            // with them (its lower bytes, digits already read, cleared to zeros): one
            // conversion instead of a multiply per digit (a 13-digit time has five).
            Some(from) => {
                let word = u64::from_le_bytes(digits[from..].try_into().expect("8 bytes"));
                let word = word & (u64::MAX << (8 * (8 - left)));
                n * POWERS_OF_TEN[left] + eight_digits(word) as i64
            }
            None => rest.iter().fold(n, |n, &d| n * 10 + i64::from(d - b'0')),
        }
    }

    /// 10ⁿ for n below 8: the scale of the last digits of [`digits_value`].
    const POWERS_OF_TEN: [i64; 8] = [1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000];

    /// Eight ASCII digits, the first in the lowest byte, as a number: pairs, then fours,
    /// then all eight combined by multiplication (the well-known SWAR conversion).
    fn eight_digits(word: u64) -> u64 {
        let pairs = (word & 0x0F0F_0F0F_0F0F_0F0F).wrapping_mul(10 << 8 | 1) >> 8;
        let fours = (pairs & 0x00FF_00FF_00FF_00FF).wrapping_mul(100 << 16 | 1) >> 16;
        (fours & 0x0000_FFFF_0000_FFFF).wrapping_mul(10_000 << 32 | 1) >> 32
    }

    /// Where the string that `bytes` start with ends (its closing quote), if no escape
    /// (a backslash) and no control character comes before: `None` hands the line to
    /// serde_json. The strings of a line are short (keys, IDs, hop names): eight bytes at
    /// a time in a register find their end sooner than a call to memchr, whose dispatch
    /// and setup, twice per key, outweigh strings this short. Checking for escapes here,
    /// in the strings only, saves a pass over every byte of the line.
    /// Always inline: it is called for every string of the general path and every text
    /// value of a shape's, and a call of its own cost both.
    #[inline(always)]
    pub(super) fn plain_string_len(bytes: &[u8]) -> Option<usize> {
        const ONES: u64 = 0x0101_0101_0101_0101;
        const HIGHS: u64 = ONES << 7;
        const QUOTES: u64 = ONES * b'"' as u64;
        const BACKSLASHES: u64 = ONES * b'\\' as u64;
        const SPACES: u64 = ONES * b' ' as u64;
        /// Past this, a string is long enough for memchr's vector loop.
        const SHORT: usize = 64;
        let is_special = |b: u8| b == b'"' || b == b'\\' || b < b' ';
        let mut at = 0;
        while let Some(word) = bytes.get(at..at + 8) {
            let word = u64::from_le_bytes(word.try_into().expect("8 bytes"));
            // Each test flags a byte in its high bit: a quote or a backslash is a zero byte
            // of `word ^ …`, a control character a byte that `- 0x20` borrows from
            // without its own high bit set. A borrow flags only bytes above the one that
            // caused it, and the words are little-endian: the lowest byte flagged is the
            // first special one.
            let (q, e) = (word ^ QUOTES, word ^ BACKSLASHES);
            let flags = (q.wrapping_sub(ONES) & !q)
                | (e.wrapping_sub(ONES) & !e)
                | (word.wrapping_sub(SPACES) & !word);
            let flags = flags & HIGHS;
            if flags != 0 {
                let first = at + flags.trailing_zeros() as usize / 8;
                return (bytes[first] == b'"').then_some(first);
            }
            at += 8;
            if at >= SHORT {
                let end = at + memchr::memchr(b'"', &bytes[at..])?;
                let plain = !bytes[at..end].iter().any(|&b| is_special(b));
                return plain.then_some(end);
            }
        }
        let first = at + bytes[at..].iter().position(|&b| is_special(b))?;
        (bytes[first] == b'"').then_some(first)
    }

    pub fn parse(text: &str) -> Option<RawFields<'_>> {
        let mut fields = RawFields::default();
        parse_into(text, &mut fields)?;
        Some(fields)
    }

    /// Where the fast path puts the value of each key it knows: the sink reads the value
    /// at the cursor itself, so that a typed sink converts it as it is found.
    trait Sink<'a> {
        /// Reads the value at the cursor as field `index` of [`FIELDS`]; `None` hands the
        /// line on.
        fn value(&mut self, index: usize, c: &mut Cursor<'a>) -> Option<()>;
    }

    impl<'a> Sink<'a> for RawFields<'a> {
        #[inline]
        fn value(&mut self, index: usize, c: &mut Cursor<'a>) -> Option<()> {
            let value = c.value()?;
            self.set(index, value);
            Some(())
        }
    }

    /// [`parse`] into `fields`, which must be empty (`RawFields::default`).
    pub fn parse_into<'a>(text: &'a str, fields: &mut RawFields<'a>) -> Option<()> {
        parse_with(text, fields, &mut NoMarks)
    }

    /// The object's keys, each known one's value read by `sink`; where each value lies is
    /// pushed to `marks` (for [`Shape::take`]).
    #[inline]
    fn parse_with<'a, M: Marks>(
        text: &'a str,
        sink: &mut impl Sink<'a>,
        marks: &mut M,
    ) -> Option<()> {
        let mut c = Cursor { text, at: 0 };
        // serde rejects a key given twice (e.g. operation_id and operationId); let it.
        let mut seen: u32 = 0;
        const _: () = assert!(FIELDS.len() <= 32, "one bit of `seen` per key");
        c.eat(b'{')?;
        c.skip_ws();
        if c.peek() == Some(b'}') {
            c.at += 1;
        } else {
            LAST_KEYS.with_borrow_mut(|last| -> Option<()> {
                // Whether this line's keys so far are the last line's, in its order.
                let mut same = true;
                for k in 0.. {
                    c.skip_ws();
                    let index = match last.get(k).filter(|key| same && key.starts(&c)) {
                        Some(key) => {
                            c.at += key.len as usize;
                            key.index
                        }
                        None => {
                            same = false;
                            let quote = c.at;
                            let key = c.string()?;
                            c.eat(b':')?;
                            let index = field_index(key);
                            last.truncate(k);
                            last.push(KeyToken::new(&text.as_bytes()[quote..c.at], index));
                            index
                        }
                    };
                    if M::ON {
                        c.skip_ws();
                    }
                    let start = c.at;
                    match index {
                        Some(index) => {
                            if seen & (1 << index) != 0 {
                                return None;
                            }
                            seen |= 1 << index;
                            sink.value(index, &mut c)?;
                        }
                        // A key not read: its value must still be valid JSON.
                        None => {
                            c.value()?;
                        }
                    }
                    if M::ON {
                        marks.push(Mark {
                            value: start..c.at,
                            field: index,
                        });
                    }
                    c.skip_ws();
                    match c.peek()? {
                        b',' => c.at += 1,
                        b'}' => {
                            c.at += 1;
                            break;
                        }
                        _ => return None,
                    }
                }
                Some(())
            })?;
        }
        c.skip_ws();
        (c.at == text.len()).then_some(())
    }

    /// The fields of a line as [`RawFields::check`] turns them out, converted as they are
    /// read: no [`Scalar`] is stored and checked afterwards, the 23 optional slots of
    /// [`RawFields`] (736 bytes) are neither cleared nor moved, and a line is not taken
    /// apart twice. Each value goes through the same conversion the checked path uses
    /// (`fields::time`, `positive_int`, …), so that the two cannot mean different things;
    /// any value those refuse, and the keys of point events and RFC 3339 times, hand the
    /// line to the checked path, whose error names the problem.
    struct Typed<'a, 'h> {
        hops: &'h HopOrder,
        line: TypedFields<'a>,
    }

    /// The fields of [`Typed`]'s line, each set as its key is read.
    #[derive(Default)]
    struct TypedFields<'a> {
        operation_id: Option<&'a str>,
        test_run_id: Option<&'a str>,
        hop: Option<u16>,
        attempt: Option<u32>,
        delivery: Option<u32>,
        start_ms: Option<Millis>,
        finish_ms: Option<Millis>,
        outcome: Option<Outcome>,
        target: Option<&'a str>,
        message_id: Option<&'a str>,
        span_id: Option<&'a str>,
        parent_id: Option<&'a str>,
        delay_ms: Option<Millis>,
        retry_after_ms: Option<Millis>,
        effect: bool,
        hidden: bool,
        untimed: bool,
    }

    const OPERATION_ID: usize = field("operation_id");
    const TEST_RUN_ID: usize = field("test_run_id");
    const HOP: usize = field("hop");
    const ATTEMPT: usize = field("attempt");
    const DELIVERY: usize = field("delivery");
    const START_MS: usize = field("start_ms");
    const FINISH_MS: usize = field("finish_ms");
    const OUTCOME: usize = field("outcome");
    const TARGET: usize = field("target");
    const MESSAGE_ID: usize = field("message_id");
    const SPAN_ID: usize = field("span_id");
    const PARENT_ID: usize = field("parent_id");
    const DELAY_MS: usize = field("delay_ms");
    const RETRY_AFTER_MS: usize = field("retry_after_ms");
    const EFFECT: usize = field("effect");
    const HIDDEN: usize = field("hidden");
    const UNTIMED: usize = field("untimed");

    impl<'a> Sink<'a> for Typed<'a, '_> {
        // Always inline, with the kinds below: called for every key of the general path,
        // and the compiler's choice changed with the code around it (out of line, 49
        // instructions a value more).
        #[inline(always)]
        fn value(&mut self, index: usize, c: &mut Cursor<'a>) -> Option<()> {
            c.skip_ws();
            match c.peek()? {
                // null leaves a field unset, as on the checked path.
                b'n' => c.literal("null"),
                b'"' => self.text(index, c.string()?),
                b'-' | b'0'..=b'9' => self.number(index, c.number()?),
                b't' => c.literal("true").and_then(|()| self.flag(index, true)),
                b'f' => c.literal("false").and_then(|()| self.flag(index, false)),
                _ => None,
            }
        }
    }

    /// Each kind of value into the fields that take it. A value a conversion refuses
    /// steps aside (`.ok()?`) for the checked path's message, and so does a kind of value
    /// a field does not take here: a number as an ID is text the checked path makes; a
    /// text time (RFC 3339) and the keys of point events (start, finish, event, ts, t_ms,
    /// time) are the checked path's.
    impl<'a> Typed<'a, '_> {
        #[inline(always)]
        fn text(&mut self, index: usize, text: &'a str) -> Option<()> {
            let line = &mut self.line;
            match index {
                OPERATION_ID => line.operation_id = Some(text),
                TEST_RUN_ID => line.test_run_id = Some(text),
                HOP => line.hop = Some(self.hops.index_of(text)?),
                OUTCOME => line.outcome = Some(outcome(Scalar::Str(Cow::Borrowed(text))).ok()?),
                TARGET => line.target = Some(text),
                MESSAGE_ID => line.message_id = Some(text),
                SPAN_ID => line.span_id = Some(text),
                PARENT_ID => line.parent_id = Some(text),
                _ => return None,
            }
            Some(())
        }

        #[inline(always)]
        fn number(&mut self, index: usize, number: Scalar<'a>) -> Option<()> {
            let line = &mut self.line;
            match index {
                ATTEMPT => line.attempt = Some(positive_int("attempt", number).ok()?),
                DELIVERY => line.delivery = Some(positive_int("delivery", number).ok()?),
                START_MS => line.start_ms = Some(time("start_ms", number).ok()?),
                FINISH_MS => line.finish_ms = Some(time("finish_ms", number).ok()?),
                OUTCOME => line.outcome = Some(outcome(number).ok()?),
                DELAY_MS => line.delay_ms = Some(duration("delay_ms", number).ok()?),
                RETRY_AFTER_MS => {
                    line.retry_after_ms = Some(duration("retry_after_ms", number).ok()?);
                }
                _ => return None,
            }
            Some(())
        }

        #[inline(always)]
        fn flag(&mut self, index: usize, flag: bool) -> Option<()> {
            match index {
                EFFECT => self.line.effect = flag,
                HIDDEN => self.line.hidden = flag,
                UNTIMED => self.line.untimed = flag,
                _ => return None,
            }
            Some(())
        }
    }

    impl<'a> Typed<'a, '_> {
        /// The checks across fields, as [`RawFields::check`] makes them.
        fn finish(self) -> Option<CheckedLine<'a>> {
            let operation_id = self.line.operation_id?;
            not_blank(operation_id).ok()?;
            Some(CheckedLine {
                operation_id: Cow::Borrowed(operation_id),
                test_run_id: self.line.test_run_id.map(Cow::Borrowed),
                hop: self.line.hop.unwrap_or_else(|| self.hops.caller_index()),
                attempt: self.line.attempt,
                timing: record_timing(self.line.start_ms, self.line.finish_ms).ok()?,
                outcome: self.line.outcome,
                target: self.line.target.map(Cow::Borrowed),
                message_id: self.line.message_id.map(Cow::Borrowed),
                delivery: self.line.delivery,
                span_id: self.line.span_id.map(Cow::Borrowed),
                parent_id: self.line.parent_id.map(Cow::Borrowed),
                delay_ms: self.line.delay_ms,
                retry_after_ms: self.line.retry_after_ms,
                effect: self.line.effect,
                hidden: self.line.hidden,
                untimed: self.line.untimed,
            })
        }
    }

    /// The typed fast path: a valid line of plain keys and values, converted as it is
    /// read. `None` for anything else (a bad line among them): the checked path decides.
    pub fn parse_typed<'a>(text: &'a str, hops: &HopOrder) -> Option<CheckedLine<'a>> {
        let mut typed = Typed {
            hops,
            line: TypedFields::default(),
        };
        // One `Typed` and one `finish` for both ways of reading: a second of each made
        // the compiler stop inlining the general path's `Sink::value` and `finish`
        // (+115 instructions a line where no line has the last one's shape).
        SHAPE.with_borrow_mut(|last| {
            if last.shaped && last.shape.read(text, &mut typed).is_some() {
                last.read = true;
                last.misses = 0;
                return Some(());
            }
            // What the shape read of the line before it stepped aside.
            typed.line = TypedFields::default();
            parse_with(text, &mut typed, &mut NoMarks)?;
            last.misses += 1;
            if last.misses >= last.wait {
                last.retake(text, hops);
            }
            Some(())
        })?;
        typed.finish()
    }

    /// Where a value of a line lies (its bytes as written, a string's quotes among them)
    /// and the field its key names (`None`: a key not read).
    struct Mark {
        value: std::ops::Range<usize>,
        field: Option<usize>,
    }

    /// Where [`parse_with`] puts where each value lies: nowhere on the general path, where
    /// a check per key would cost (`ON` is known when it is compiled), in a list when a
    /// shape is taken.
    trait Marks {
        const ON: bool;
        fn push(&mut self, mark: Mark);
    }

    struct NoMarks;

    impl Marks for NoMarks {
        const ON: bool = false;
        fn push(&mut self, _: Mark) {}
    }

    impl Marks for Vec<Mark> {
        const ON: bool = true;
        fn push(&mut self, mark: Mark) {
            Vec::push(self, mark);
        }
    }

    /// What a value of a [`Shape`] is.
    #[derive(Clone, Copy, PartialEq, Debug)]
    enum Kind {
        /// A plain string ([`plain_string_len`]).
        Text,
        /// Digits that [`Cursor::number`] reads as an integer: no sign, no fraction, no
        /// exponent, no leading zero, at most [`MAX_FAST_INT_DIGITS`].
        Count,
    }

    /// The shape of the last line the typed path read: the bytes between its values (its
    /// keys with their quotes, colons, commas and spaces) and what each value is. A log's
    /// lines mostly share one: a line with the same bytes between values of the same kinds
    /// has the same keys in the same order, and is read by comparing those bytes and
    /// scanning each value, without looking for its keys, its whitespace and its commas
    /// (about 80 instructions a key on the general path). Any difference hands the line to
    /// the general path, which gives the next shape.
    #[derive(PartialEq, Debug, Default)]
    struct Shape {
        /// The bytes before each value (after the value before it), then after the last.
        between: Vec<u8>,
        /// Each value: where its bytes before it end in `between`, its kind, its field.
        values: Vec<(usize, Kind, Option<usize>)>,
    }

    impl Shape {
        /// Becomes the shape of `text`, which the general path read with these `marks`
        /// (in the memory of the shape before: a log whose lines keep changing shape would
        /// otherwise allocate for each). False when a value is neither a plain string nor
        /// a count (a null, a flag, a float, a negative number): such a line has no shape
        /// to read the next ones by.
        fn take(&mut self, text: &str, marks: &[Mark]) -> bool {
            let bytes = text.as_bytes();
            self.between.clear();
            self.values.clear();
            let mut from = 0;
            for mark in marks {
                let value = &bytes[mark.value.clone()];
                let (kind, content) = match value.first() {
                    Some(b'"') => (Kind::Text, mark.value.start + 1..mark.value.end - 1),
                    Some(b'0'..=b'9') if is_count(value) => (Kind::Count, mark.value.clone()),
                    _ => return false,
                };
                self.between.extend_from_slice(&bytes[from..content.start]);
                self.values.push((self.between.len(), kind, mark.field));
                from = content.end;
            }
            self.between.extend_from_slice(&bytes[from..]);
            true
        }

        /// Reads `text` into `sink` if it has this shape; `None` if not (or if a value is
        /// one the sink refuses): the general path then reads it.
        #[inline]
        fn read<'a>(&self, text: &'a str, sink: &mut Typed<'a, '_>) -> Option<()> {
            let bytes = text.as_bytes();
            let (mut at, mut from) = (0, 0);
            for &(to, kind, field) in &self.values {
                let between = &self.between[from..to];
                let here = bytes.get(at..at + between.len())?;
                if !crate::model::short_eq(here, between) {
                    return None;
                }
                at += between.len();
                from = to;
                match kind {
                    Kind::Text => {
                        let len = plain_string_len(&bytes[at..])?;
                        // At an ASCII quote on either side: on a character boundary.
                        let value = text.get(at..at + len)?;
                        at += len;
                        if let Some(field) = field {
                            sink.text(field, value)?;
                        }
                    }
                    Kind::Count => {
                        let digits = &bytes[at..at + digit_run(&bytes[at..])];
                        if !is_count_run(digits) {
                            return None;
                        }
                        at += digits.len();
                        if let Some(field) = field {
                            sink.number(field, Scalar::Int(digits_value(digits)))?;
                        }
                    }
                }
            }
            crate::model::short_eq(bytes.get(at..)?, &self.between[from..]).then_some(())
        }
    }

    /// Whether `value` is a count of [`Kind::Count`].
    fn is_count(value: &[u8]) -> bool {
        value.iter().all(u8::is_ascii_digit) && is_count_run(value)
    }

    /// Whether a run of ASCII digits is a count of [`Kind::Count`].
    #[inline]
    fn is_count_run(digits: &[u8]) -> bool {
        matches!(digits.len(), 1..=MAX_FAST_INT_DIGITS) && (digits[0] != b'0' || digits.len() == 1)
    }

    /// The shape lines are read by, one per thread, and when to take the next one. A line
    /// of another shape is read by the general path; the shape is taken anew from a line
    /// only after [`LastShape::wait`] such lines in a row: a line now and then with a key
    /// more or less keeps the shape of the lines around it, a log that changes shape gets
    /// its new one from its second line. A shape that no line was read by makes the wait
    /// for the next twice as long (up to [`LastShape::MAX_WAIT`]), so that a log whose
    /// every line differs rarely pays for taking one (reading the line a second time).
    struct LastShape {
        shape: Shape,
        /// Whether `shape` is one: false before the first line, and after a line that
        /// has none (a null, a flag, a float among its values).
        shaped: bool,
        /// Whether the shape has read a line since it was taken (a flag, not a count: a
        /// count of every line read would overflow on a long enough log).
        read: bool,
        /// Lines in a row the shape did not read (at most `wait`).
        misses: u32,
        /// How many such lines in a row make the shape be taken anew.
        wait: u32,
        /// Where the values lie of the line a shape is taken from, kept for its memory.
        marks: Vec<Mark>,
    }

    impl Default for LastShape {
        fn default() -> LastShape {
            LastShape {
                shape: Shape::default(),
                shaped: false,
                read: false,
                misses: 0,
                // The first line gives the first shape.
                wait: 1,
                marks: Vec::new(),
            }
        }
    }

    impl LastShape {
        /// Lines in a row of another shape, after a shape that lines were read by.
        const WAIT: u32 = 2;
        const MAX_WAIT: u32 = 1024;

        /// Takes the shape of `text`, read again for where its values lie.
        #[cold]
        fn retake(&mut self, text: &str, hops: &HopOrder) {
            self.wait = match self.read {
                false => (self.wait * 2).min(LastShape::MAX_WAIT),
                true => LastShape::WAIT,
            };
            self.read = false;
            self.misses = 0;
            self.marks.clear();
            self.shaped = parse_with(
                text,
                &mut Typed {
                    hops,
                    line: TypedFields::default(),
                },
                &mut self.marks,
            )
            .is_some()
                && self.shape.take(text, &self.marks);
        }
    }

    /// Lines read the checked way after the typed path stepped aside from one: a log of
    /// point events or RFC 3339 times has every line step aside, and is then read twice
    /// only once in this many lines.
    const UNTYPED_AFTER_MISS: u32 = 64;

    /// [`parse_typed`], unless it stepped aside from a line of this thread's in the last
    /// [`UNTYPED_AFTER_MISS`].
    pub fn typed_first<'a>(text: &'a str, hops: &HopOrder) -> Option<CheckedLine<'a>> {
        UNTYPED_LEFT.with(|left| {
            if left.get() > 0 {
                left.set(left.get() - 1);
                return None;
            }
            let line = parse_typed(text, hops);
            if line.is_none() {
                left.set(UNTYPED_AFTER_MISS);
            }
            line
        })
    }

    thread_local! {
        /// Lines still to read the checked way ([`typed_first`]).
        static UNTYPED_LEFT: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };

        /// The keys of the last line this thread read: the next line mostly has the same
        /// keys in the same order, and each is then taken by one comparison of its bytes,
        /// not found by a scan and looked up in the key table.
        static LAST_KEYS: std::cell::RefCell<Vec<KeyToken>> = const { std::cell::RefCell::new(Vec::new()) };

        /// The shape of the last line this thread read on the typed path ([`Shape`]).
        static SHAPE: std::cell::RefCell<LastShape> = std::cell::RefCell::default();
    }

    /// A key as a line spelled it, from its opening quote through the colon after it, and
    /// its field (`None`: a key not read). The same bytes at the same place of a line
    /// without escapes are the same key.
    struct KeyToken {
        bytes: [u8; KeyToken::MAX],
        /// 0: longer than [`KeyToken::MAX`], never taken.
        len: u8,
        index: Option<usize>,
    }

    impl KeyToken {
        const MAX: usize = 32;

        fn new(spelled: &[u8], index: Option<usize>) -> KeyToken {
            let mut bytes = [0; KeyToken::MAX];
            let len = if spelled.len() <= KeyToken::MAX {
                bytes[..spelled.len()].copy_from_slice(spelled);
                spelled.len() as u8
            } else {
                0
            };
            KeyToken { bytes, len, index }
        }

        /// Whether the line goes on with this key at the cursor. Always inline, with the
        /// compare in it: left to the compiler, whether this was inlined into the parse
        /// loop changed from one build to the next with unrelated code, and a call per key
        /// costs more than the compare.
        #[inline(always)]
        fn starts(&self, c: &Cursor) -> bool {
            let n = self.len as usize;
            match c.text.as_bytes().get(c.at..c.at + n) {
                Some(here) => n > 0 && crate::model::short_eq(here, &self.bytes[..n]),
                None => false,
            }
        }
    }

    #[cfg(test)]
    mod shape_tests {
        use super::*;
        use proptest::prelude::*;

        /// The general typed path alone, and the shape it leaves.
        fn general<'a>(
            text: &'a str,
            hops: &'a HopOrder,
        ) -> Option<(CheckedLine<'a>, Option<Shape>)> {
            let mut typed = Typed {
                hops,
                line: TypedFields::default(),
            };
            let mut marks = Vec::new();
            parse_with(text, &mut typed, &mut marks)?;
            let mut shape = Shape::default();
            let shaped = shape.take(text, &marks);
            Some((typed.finish()?, shaped.then_some(shape)))
        }

        /// A value the typed path takes for `key`.
        fn valid(key: &str) -> BoxedStrategy<String> {
            let text = |s: String| format!("\"{s}\"");
            match key {
                "hop" => prop::sample::select(vec!["caller", "gateway", "consumer", "dependency"])
                    .prop_map(move |s| text(s.into()))
                    .boxed(),
                "outcome" => prop::sample::select(vec!["ok", "error", "timeout"])
                    .prop_map(move |s| text(s.into()))
                    .boxed(),
                "attempt" | "delivery" => (1u32..100).prop_map(|n| n.to_string()).boxed(),
                // Every start before every finish: the check across them passes.
                "start_ms" => (1u64..1_000_000_000_000)
                    .prop_map(|n| n.to_string())
                    .boxed(),
                "finish_ms" => (1_000_000_000_000u64..2_000_000_000_000)
                    .prop_map(|n| n.to_string())
                    .boxed(),
                "delay_ms" => (0u32..1_000_000).prop_map(|n| n.to_string()).boxed(),
                _ => "[a-z0-9-]{1,12}".prop_map(text).boxed(),
            }
        }

        /// Values a shape must not take where a count or a plain string was: signs,
        /// fractions, leading zeros, too many digits, escapes, other kinds, other text.
        const ODD: [&str; 25] = [
            "0",
            "00",
            "01",
            "-1",
            "-0",
            "1.5",
            "1e3",
            "2.0",
            "123456789012345678",
            "1234567890123456789",
            "99999999999999999999",
            "true",
            "false",
            "null",
            "\"\"",
            "\"a\\\"b\"",
            "\"\\u0041\"",
            "\"é\"",
            "\"x\ty\"",
            "\"503\"",
            "503",
            "{}",
            "[1]",
            "\"2026-11-30T00:00:00Z\"",
            "\"a\\\\\"",
        ];

        const KEYS: [&str; 12] = [
            "operation_id",
            "test_run_id",
            "hop",
            "attempt",
            "delivery",
            "start_ms",
            "finish_ms",
            "outcome",
            "target",
            "message_id",
            "delay_ms",
            "other",
        ];

        /// Two lines of the same keys, the second with up to two odd values, and whether
        /// each puts spaces after its commas.
        fn pair() -> impl Strategy<Value = (String, String)> {
            let keys = prop::sample::subsequence(KEYS.to_vec(), 1..=KEYS.len())
                .prop_map(|mut keys| {
                    // The operation ID and a time the checks across fields need.
                    for needed in ["operation_id", "start_ms"] {
                        if !keys.contains(&needed) {
                            keys.push(needed);
                        }
                    }
                    keys
                })
                .prop_shuffle();
            keys.prop_flat_map(|keys| {
                let values = |keys: &[&str]| keys.iter().map(|k| valid(k)).collect::<Vec<_>>();
                let odd = prop::collection::vec(
                    (0..keys.len(), prop::sample::select(ODD.to_vec())),
                    0..=2,
                );
                (
                    values(&keys),
                    values(&keys),
                    odd,
                    any::<bool>(),
                    any::<bool>(),
                )
                    .prop_map(move |(first, mut second, odd, spaced, respaced)| {
                        for (at, value) in odd {
                            second[at] = value.to_string();
                        }
                        let line = |values: &[String], spaced: bool| {
                            let fields: Vec<String> = keys
                                .iter()
                                .zip(values)
                                .map(|(k, v)| format!("\"{k}\":{v}"))
                                .collect();
                            format!("{{{}}}", fields.join(if spaced { ", " } else { "," }))
                        };
                        (line(&first, spaced), line(&second, spaced != respaced))
                    })
            })
        }

        proptest! {
            /// A line read by the shape of one before it (the same keys, other values) gives
            /// what the general path gives, and is read by that shape whenever it has it.
            #[test]
            fn a_line_read_by_a_shape_is_read_as_the_general_path_reads_it((a, b) in pair()) {
                let hops = HopOrder::default();
                let (_, shape) = general(&a, &hops).expect("a line of valid values is read");
                let shape = shape.expect("a line of counts and plain strings has a shape");
                let mut typed = Typed { hops: &hops, line: TypedFields::default() };
                let by_shape = shape.read(&b, &mut typed).and_then(|()| typed.finish());
                let by_general = general(&b, &hops);
                match (&by_shape, &by_general) {
                    (Some(line), Some((general, _))) => prop_assert_eq!(line, general),
                    (Some(line), None) => prop_assert!(false, "only the shape took {}: {:?}", b, line),
                    (None, Some((_, same))) => {
                        prop_assert!(same.as_ref() != Some(&shape), "the shape left {}", b)
                    }
                    (None, None) => {}
                }
            }
        }

        #[test]
        fn a_generated_line_has_a_shape_the_next_one_is_read_by() {
            let hops = HopOrder::default();
            let a = r#"{"operation_id":"op-000001","test_run_id":"run-1","hop":"caller","attempt":1,"start_ms":1700000000001,"finish_ms":1700000000437,"outcome":"error","target":"sku-486","message_id":"msg-000001"}"#;
            let b = r#"{"operation_id":"op-000002","test_run_id":"run-1","hop":"gateway","attempt":12,"start_ms":1700000000003,"finish_ms":1700000000036,"outcome":"ok","target":"sku-4","message_id":"msg-000002"}"#;
            let (_, shape) = general(a, &hops).expect("read");
            let shape = shape.expect("a shape");
            let mut typed = Typed {
                hops: &hops,
                line: TypedFields::default(),
            };
            shape.read(b, &mut typed).expect("read by the shape");
            assert_eq!(typed.finish(), general(b, &hops).map(|(line, _)| line));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_are_counted_and_read_as_one_at_a_time_would() {
        // Every byte value after a run of digits of every length up to 18 and beyond.
        for len in 0..=20usize {
            for next in 0..=255u8 {
                let mut bytes: Vec<u8> = (0..len).map(|i| b"9071834562"[i % 10]).collect();
                bytes.push(next);
                bytes.extend_from_slice(b"12345678");
                let run = len + usize::from(next.is_ascii_digit()) * 9;
                assert_eq!(flat::digit_run(&bytes), run, "len {len}, then {next:#x}");
                if run <= 18 && run > 0 {
                    let naive = bytes[..run]
                        .iter()
                        .fold(0i64, |n, &d| n * 10 + i64::from(d - b'0'));
                    assert_eq!(flat::digits_value(&bytes[..run]), naive, "{bytes:?}");
                }
            }
        }
        assert_eq!(
            flat::digits_value(b"999999999999999999"),
            999_999_999_999_999_999
        );
        assert_eq!(flat::digits_value(b"1700000000123"), 1_700_000_000_123);
    }

    #[test]
    fn a_plain_string_ends_at_its_first_quote_and_an_escape_or_control_stops_it() {
        // Bytes next to the special ones (`!` `#` by the quote, `[` `]` by the backslash,
        // space and DEL by the control characters) and high bytes: the neighbours a
        // word-at-a-time search could take for them.
        let filler = [b'!', b'#', 0xa2, b'a', b'[', b']', b' ', 0x7f, 0xff, 0x80];
        for len in 0..150 {
            for quote in (0..len).chain([len]) {
                let mut bytes: Vec<u8> = (0..len).map(|i| filler[i % filler.len()]).collect();
                let expected = (quote < len).then_some(quote);
                if quote < len {
                    bytes[quote] = b'"';
                    // A second quote after the first must not be found instead.
                    if quote + 1 < len {
                        bytes[quote + 1] = b'"';
                    }
                }
                assert_eq!(
                    flat::plain_string_len(&bytes),
                    expected,
                    "len {len}, quote {quote:?}"
                );
                // A special byte before the quote gives the string up; after it, it is
                // not the string's. Each at every place.
                for special in [b'\\', 0x00, b'\t', 0x1f] {
                    for at in 0..len {
                        if at == quote || at == quote + 1 {
                            continue;
                        }
                        let mut with = bytes.clone();
                        with[at] = special;
                        let want = if at < quote { None } else { expected };
                        assert_eq!(
                            flat::plain_string_len(&with),
                            want,
                            "len {len}, quote {quote:?}, {special:#x} at {at}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn the_fast_path_takes_a_typical_generated_line() {
        let line = r#"{"operation_id":"op-000004","test_run_id":"run-1","hop":"caller","attempt":1,"start_ms":1700000000006,"finish_ms":1700000000099,"outcome":"ok","target":"sku-13","message_id":"msg-000004"}"#;
        assert!(flat::parse(line).is_some());
    }

    #[test]
    fn the_fast_path_reads_every_spelling_of_the_key_table_as_serde_does() {
        for spelling in FIELDS.iter().flat_map(|f| f.spellings) {
            let line = format!("{{\"{spelling}\":\"v\",\"other\":2}}");
            let fast = flat::parse(&line).unwrap_or_else(|| panic!("fast path left {line}"));
            let serde = serde_json::from_str::<RawFields>(&line).unwrap();
            assert_eq!(format!("{fast:?}"), format!("{serde:?}"), "{line}");
        }
    }

    /// The fast path must give exactly serde_json's result, or step aside.
    #[test]
    fn the_fast_path_agrees_with_serde_json() {
        let lines = [
            r#"{"operation_id":"op-000123","test_run_id":"run-1","hop":"caller","attempt":1,"start_ms":1700000000123,"finish_ms":1700000000456,"outcome":"ok","target":"sku-42","message_id":"msg-000123"}"#,
            r#"  { "operationId" : "o" , "startMs": 1.5e3, "finishMs": -0.25, "outcome": 503, "effect": true, "delay_ms": null } "#,
            r#"{"operation":"o","event":"client-timeout","t_ms":800,"unknown":"x","other":12.5,"flag":false}"#,
            r#"{"operation_id":"o","start":"2026-11-30T00:00:00.250Z","retryAfterMs":0,"spanId":"a","parentId":"b","delivery":2}"#,
            r#"{"operation_id":"o","start_ms":12345678901234567890}"#,
            r#"{"operation_id":"o","target":"a\"b","start_ms":1}"#,
            r#"{"operation_id":"o","nested":{"a":1},"start_ms":1}"#,
            r#"{"operation_id":"o","operationId":"p","start_ms":1}"#,
            r#"{"operation_id":"o","start_ms":01}"#,
            r#"{"operation_id":"o","start_ms":1,}"#,
            r#"{"operation_id":"o" "start_ms":1}"#,
            r#"{"operation_id":"o","start_ms":1} x"#,
            r#"{}"#,
            r#"{"operation_id":"o","start_ms":-}"#,
            r#"{"operation_id":"o","start_ms":1.}"#,
            r#"{"operation_id":"o","start_ms":tru}"#,
            // The keys of the lines before with a change: each line is read after each
            // other one, so the keys remembered from the last line meet their variants.
            r#"{"operation_id":"op-000124","test_run_id":"run-1","hop":"gateway","attempt":2,"start_ms":1700000000123,"finish_ms":1700000000456,"outcome":"ok","target":"sku-42","message_id":"msg-000123"}"#,
            r#"{"operation_id":"op-1","test_run_id":"run-1","hop_x":"caller","attempt":1,"start_ms":1}"#,
            r#"{"operation_id" :"op-1","test_run_id":"run-1","hop":"caller","start_ms":1}"#,
            r#"{"operation_id":"op-1","test_run_id":"run-1","hop":"caller","hop":"gateway","start_ms":1}"#,
            r#"{"operation_id":"op-1","test_run_id":"run-1"}"#,
            r#"{"operation_id":"op-1","test_run_id":"run-1","hop":"caller","start_ms":1,"a_key_longer_than_thirty_two_bytes_in_all":1,"finish_ms":2}"#,
            r#"{"operation_id":"op-1","test_run_id":"run-1","hop":"caller","start_ms":1,"a_key_longer_than_thirty_two_bytes_in_all":1,"finish_ms":"x"}"#,
            r#"{"operation_id":"op-1","test_run_id":"run-1","hop":"caller","start_ms":1,"finish_ms""#,
            r#"{"operation_id":"op-1","test_run_id":"run-1","hop":"caller","start_ms":1,"finish"#,
            // A tab between tokens is JSON; a control character or a tab inside a string
            // is not.
            "{\"operation_id\":\t\"o\",\t\"start_ms\":1}",
            "{\"operation_id\":\"o\u{1}p\",\"start_ms\":1}",
            "{\"operation_id\":\"o\tp\",\"start_ms\":1}",
        ];
        for (before, line) in lines.iter().flat_map(|b| lines.iter().map(move |l| (b, l))) {
            // Keys are remembered per thread: this one just read `before`.
            let _ = flat::parse(before);
            let serde = serde_json::from_str::<RawFields>(line).map_err(|e| e.to_string());
            match flat::parse(line) {
                Some(fast) => assert_eq!(
                    format!("{:?}", Ok::<_, String>(fast)),
                    format!("{serde:?}"),
                    "{line} (read after {before})"
                ),
                None => assert!(
                    serde.is_err()
                        || line.contains('\\')
                        || line.contains('{') && line.matches('{').count() > 1
                        || line.contains("12345678901234567890"),
                    "fast path gave up on a plain line: {line}"
                ),
            }
        }
    }

    /// Whether two renderings of a result are the same, numbers allowed to differ by one
    /// ulp (serde_json's default float reader is not always correctly rounded).
    fn same_up_to_an_ulp(a: &str, b: &str) -> bool {
        if a == b {
            return true;
        }
        let is_num = |c: char| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-');
        let (ta, tb): (Vec<&str>, Vec<&str>) = (
            a.split(|c: char| !is_num(c)).collect(),
            b.split(|c: char| !is_num(c)).collect(),
        );
        let (sa, sb): (String, String) = (
            a.chars().filter(|&c| !is_num(c)).collect(),
            b.chars().filter(|&c| !is_num(c)).collect(),
        );
        sa == sb
            && ta.len() == tb.len()
            && ta.iter().zip(&tb).all(|(x, y)| {
                x == y
                    || matches!((x.parse::<f64>(), y.parse::<f64>()),
                        (Ok(x), Ok(y)) if (x.to_bits() as i64 - y.to_bits() as i64).abs() <= 1)
            })
    }

    /// Numbers mean the same on both paths (#13): every edge value, as a time, a duration,
    /// an attempt number and an ID, checked through the fast path and through serde (a line
    /// with an escape in it takes serde's path) to the same result, accepted or not.
    #[test]
    fn numbers_mean_the_same_on_the_fast_path_and_through_serde() {
        let values = [
            "0",
            "-0",
            "0.0",
            "-0.0",
            "-0e0",
            "1",
            "-1",
            "1.5",
            "1e3",
            "1E3",
            "1e+3",
            "1e-3",
            "0.1",
            "123456789012345678",
            "1234567890123456789",
            "9223372036854775807",
            "9223372036854775808",
            "-9223372036854775808",
            "18446744073709551616",
            "12345678901234567890123",
            "1e39",
            "3.4028234663852886e38",
            "3.5e38",
            "1e308",
            "1.7976931348623157e308",
            "1e309",
            "-1e309",
            "2.2250738585072014e-308",
            "5e-324",
            "1e-400",
            "9007199254740993",
            "1.0000000000000002",
            "4294967295",
            "4294967296",
            "1700000000123.456",
            "00",
            "01",
            "1.",
            ".5",
            "+1",
            "-",
            "1e",
            "0x10",
            "Infinity",
            "NaN",
        ];
        let hops = crate::rules::HopOrder::default();
        for value in values {
            for key in [
                "start_ms",
                "delay_ms",
                "retry_after_ms",
                "attempt",
                "operation_id",
            ] {
                let rest = if key == "operation_id" {
                    String::new()
                } else {
                    ",\"operation_id\":\"o\"".to_string()
                };
                let time = if key == "start_ms" {
                    ""
                } else {
                    ",\"finish_ms\":5e3"
                };
                let plain = format!("{{\"{key}\":{value}{rest}{time}}}");
                let escaped = format!("{{\"{key}\":{value}{rest}{time},\"target\":\"\\u0061\"}}");
                let check = |line: &str| {
                    parse(line, false).and_then(|f| f.check(&hops)).map(|c| {
                        format!(
                            "{:?} {:?} {:?} {:?} {:?}",
                            c.timing, c.delay_ms, c.retry_after_ms, c.attempt, c.operation_id
                        )
                    })
                };
                let fast = check(&plain);
                let slow = check(&escaped);
                assert!(
                    same_up_to_an_ulp(&format!("{fast:?}"), &format!("{slow:?}")),
                    "{key}: {value}: {fast:?} vs {slow:?}"
                );
                // No value turns infinite, and -0 is 0.
                if let Ok(text) = &fast {
                    assert!(
                        !text.contains("inf") && !text.contains("-0.0"),
                        "{key}: {value}: {text}"
                    );
                }
            }
        }
    }

    /// The typed fast path gives the checked path's line exactly, or steps aside.
    fn assert_typed_agrees(line: &str, hops: &crate::rules::HopOrder) -> bool {
        let Some(typed) = flat::parse_typed(line, hops) else {
            return false;
        };
        assert_eq!(
            Ok(&typed),
            parse_checked_untyped(line, false, hops).as_ref(),
            "{line}"
        );
        true
    }

    #[test]
    fn the_typed_path_gives_the_checked_line_or_steps_aside() {
        let hops = crate::rules::HopOrder::default();
        let base = r#""operation_id":"op-7","test_run_id":"run-1","start_ms":10,"finish_ms":20"#;
        // Every field the typed path reads, with values each conversion takes or refuses,
        // and the keys it leaves to the checked path.
        let values: &[(&str, &[&str])] = &[
            (
                "hop",
                &[r#""caller""#, r#""gateway""#, r#""nowhere""#, "1", "null"],
            ),
            (
                "attempt",
                &[
                    "1",
                    "2.0",
                    "1.5",
                    "0",
                    "-1",
                    "4294967296",
                    r#""3""#,
                    "true",
                    "null",
                ],
            ),
            ("delivery", &["2", "0", r#""2""#, "null"]),
            (
                "outcome",
                &[
                    r#""ok""#,
                    r#""ERROR""#,
                    r#""503""#,
                    "503",
                    "42",
                    r#""meh""#,
                    "1.5",
                    "null",
                ],
            ),
            ("target", &[r#""sku-1""#, "12", r#""""#, "null"]),
            ("message_id", &[r#""m""#, "7"]),
            ("span_id", &[r#""s""#, "7"]),
            ("parent_id", &[r#""p""#, "false"]),
            ("delay_ms", &["0", "2.5", "-1", "1e39", r#""5""#, "null"]),
            ("retry_after_ms", &["100", "-0", "null"]),
            ("effect", &["true", "false", r#""true""#, "1", "null"]),
            ("hidden", &["true", "false", "null"]),
            ("untimed", &["true", "false", "0"]),
            (
                "start_ms",
                &[
                    "5",
                    "15",
                    "-0",
                    "-0.0",
                    "1.5e3",
                    "-1",
                    r#""2026-11-30T00:00:00Z""#,
                    r#""x""#,
                    "null",
                ],
            ),
            ("finish_ms", &["5", "25", "1e3", r#""25""#, "null"]),
            ("start", &[r#""2026-11-30T00:00:00Z""#]),
            ("event", &[r#""start""#]),
            ("t_ms", &["5"]),
            ("unknown", &["{}", "[1]", "1", r#""x""#]),
        ];
        let mut taken = 0;
        for (key, values) in values {
            for value in *values {
                for line in [
                    format!("{{{base},\"{key}\":{value}}}"),
                    format!("{{\"{key}\":{value},{base}}}"),
                    format!("{{ \"{key}\" : {value} , {base} }}"),
                ] {
                    taken += usize::from(assert_typed_agrees(&line, &hops));
                }
            }
        }
        for line in [
            r#"{"operation_id":" ","start_ms":1}"#,
            r#"{"operation_id":"","start_ms":1}"#,
            r#"{"operation_id":" o","start_ms":1}"#,
            r#"{"operation_id":"o"}"#,
            r#"{"start_ms":1}"#,
            r#"{"operation_id":"o","start_ms":2,"finish_ms":1}"#,
            r#"{"operation_id":"o","finish_ms":1}"#,
            r#"{"operation_id":"o","start_ms":1,"start_ms":2}"#,
            r#"{"operation_id":"o","start_ms":1,"startMs":2}"#,
        ] {
            assert_typed_agrees(line, &hops);
        }
        assert!(taken > 0);
        // Not a vacuous agreement: lines of every kind the typed path is for take it.
        for line in [
            r#"{"operation_id":"op-000004","test_run_id":"run-1","hop":"caller","attempt":1,"start_ms":1700000000006,"finish_ms":1700000000099,"outcome":"ok","target":"sku-13","message_id":"msg-000004"}"#,
            r#"{ "operation_id" : "o" , "hop" : "gateway", "attempt": 2.0, "start_ms": 1.5e3 }"#,
            r#"{"operation_id":"o","outcome":503,"delivery":3,"finish_ms":-0,"other":"x","n":1.5,"b":false}"#,
            r#"{"operation_id":"o","outcome":"ERROR","span_id":"s","parent_id":"p","start_ms":1,"finish_ms":1}"#,
            r#"{"operation_id":"o","delay_ms":2.5,"retry_after_ms":0,"effect":true,"hidden":false,"untimed":true,"start_ms":1}"#,
            r#"{"operation_id":"o","hop":null,"attempt":null,"target":null,"start_ms":1,"finish_ms":null}"#,
        ] {
            assert!(
                assert_typed_agrees(line, &hops),
                "the typed path left {line}"
            );
        }
    }

    /// Fuzz target (see `crate::fuzz`): the fast path gives serde's answer or steps aside,
    /// the typed path the checked path's, and no line makes any of them panic.
    #[test]
    fn fuzz_jsonl() {
        let hops = crate::rules::HopOrder::default();
        crate::fuzz::run("jsonl", |bytes| {
            let text = String::from_utf8_lossy(bytes);
            for line in text.lines() {
                assert_typed_agrees(line, &hops);
                if let Some(fast) = flat::parse(line) {
                    let serde = serde_json::from_str::<RawFields>(line).map_err(|e| e.to_string());
                    let (fast, serde) =
                        (format!("{:?}", Ok::<_, String>(fast)), format!("{serde:?}"));
                    assert!(
                        same_up_to_an_ulp(&fast, &serde),
                        "{line}: {fast} vs {serde}"
                    );
                }
                let _ = parse(line, true).and_then(|f| f.check(&hops));
            }
        });
    }
}

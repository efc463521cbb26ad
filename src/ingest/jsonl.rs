//! JSON Lines: one attempt event object per line, keys as in [`super::fields::FIELDS`].
//!
//! Almost every real line is a flat object of plain strings and numbers, so a direct scan
//! handles those; anything else (escapes, nested values, a syntax error) goes to serde_json,
//! which is exact and gives the error message. A unit test holds the two to the same result.

use std::borrow::Cow;

use super::fields::{field_index, RawFields, Scalar, FIELDS};

pub fn parse(text: &str, unterminated_last: bool) -> Result<RawFields<'_>, String> {
    // serde would read an array by position; an event is an object, say so plainly.
    if !text.trim_start().starts_with('{') {
        return Err(
            "not a JSON object: each line must be one attempt event object, {\"operation_id\": …}"
                .to_string(),
        );
    }
    if let Some(fields) = flat::parse(text) {
        return Ok(fields);
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

        /// A string: [`parse`] has checked that the line has no escapes and no control
        /// characters, so the string ends at the next quote.
        fn string(&mut self) -> Option<&'a str> {
            self.eat(b'"')?;
            let start = self.at;
            let len = memchr::memchr(b'"', &self.text.as_bytes()[start..])?;
            self.at = start + len + 1;
            Some(&self.text[start..start + len])
        }

        fn literal(&mut self, word: &str) -> Option<()> {
            self.text[self.at..]
                .starts_with(word)
                .then(|| self.at += word.len())
        }

        /// A JSON number, by its grammar; integers that surely fit are read as such.
        fn number(&mut self) -> Option<Scalar<'a>> {
            let bytes = self.text.as_bytes();
            let start = self.at;
            let mut i = start;
            if bytes.get(i) == Some(&b'-') {
                i += 1;
            }
            let int_start = i;
            while bytes.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            let int_digits = i - int_start;
            if int_digits == 0 || (int_digits > 1 && bytes[int_start] == b'0') {
                return None;
            }
            let mut is_int = true;
            if bytes.get(i) == Some(&b'.') {
                is_int = false;
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
                is_int = false;
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
            let text = &self.text[start..i];
            self.at = i;
            if is_int {
                if int_digits > MAX_FAST_INT_DIGITS {
                    return None;
                }
                let digits = &bytes[int_start..i];
                let magnitude = digits
                    .iter()
                    .fold(0i64, |n, &d| n * 10 + i64::from(d - b'0'));
                Some(Scalar::Int(if int_start > start {
                    -magnitude
                } else {
                    magnitude
                }))
            } else {
                text.parse::<f64>()
                    .ok()
                    .filter(|f| f.is_finite())
                    .map(Scalar::Float)
            }
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

    pub fn parse(text: &str) -> Option<RawFields<'_>> {
        // One vectorisable pass over the line instead of a test per string byte: no
        // backslash (escapes) and no control character (invalid in strings; tabs between
        // tokens are legal but rare, and serde_json takes those lines).
        let odd = text.as_bytes().iter().fold(0u8, |odd, &b| {
            odd | u8::from(b == b'\\') | u8::from(b < 0x20)
        });
        if odd != 0 {
            return None;
        }
        let mut c = Cursor { text, at: 0 };
        let mut fields = RawFields::default();
        // serde rejects a key given twice (e.g. operation_id and operationId); let it.
        let mut seen: u32 = 0;
        const _: () = assert!(FIELDS.len() <= 32, "one bit of `seen` per key");
        c.eat(b'{')?;
        c.skip_ws();
        if c.peek() == Some(b'}') {
            c.at += 1;
        } else {
            loop {
                let key = c.string()?;
                c.eat(b':')?;
                let value = c.value()?;
                if let Some(index) = field_index(key) {
                    if seen & (1 << index) != 0 {
                        return None;
                    }
                    seen |= 1 << index;
                    *(FIELDS[index].slot)(&mut fields) = value;
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
        }
        c.skip_ws();
        (c.at == text.len()).then_some(fields)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        ];
        for line in lines {
            let serde = serde_json::from_str::<RawFields>(line).map_err(|e| e.to_string());
            match flat::parse(line) {
                Some(fast) => assert_eq!(
                    format!("{:?}", Ok::<_, String>(fast)),
                    format!("{serde:?}"),
                    "{line}"
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
}

//! logfmt: `key=value` pairs separated by spaces, values optionally double-quoted with
//! backslash escapes. Keys are the same as in JSON Lines (plus `operation=`).

use serde::Deserialize;
use std::borrow::Cow;

use super::fields::RawFields;

pub fn parse(text: &str) -> Result<RawFields<'_>, String> {
    // Through a JSON object so that logfmt accepts exactly the keys JSON Lines does; logfmt
    // is the rarer format, and this copy is cheap next to reading the line.
    RawFields::deserialize(serde_json::Value::Object(parse_object(text)?))
        .map_err(|e| format!("{e}"))
}

/// The line as a flat JSON object of strings (a repeated key: the last value), which a key
/// mapping reads as it reads a JSON Lines line (see [`super::mapping`]).
pub fn parse_object(text: &str) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    Ok(split_pairs(text)?
        .into_iter()
        .map(|(k, v)| (k.into_owned(), serde_json::Value::String(v.into_owned())))
        .collect())
}

/// One `key=value` pair; the value is owned only when it had escapes.
type Pair<'a> = (Cow<'a, str>, Cow<'a, str>);

fn split_pairs(text: &str) -> Result<Vec<Pair<'_>>, String> {
    let mut pairs = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if i == bytes.len() {
            break;
        }
        let key_start = i;
        while i < bytes.len() && bytes[i] != b'=' && !bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let key = &text[key_start..i];
        if i == bytes.len() || bytes[i] != b'=' {
            // A bare key is logfmt's `key=true`.
            pairs.push((Cow::Borrowed(key), Cow::Borrowed("true")));
            continue;
        }
        i += 1;
        if i < bytes.len() && bytes[i] == b'"' {
            i += 1;
            let mut value = String::new();
            let mut closed = false;
            while i < bytes.len() {
                match bytes[i] {
                    b'\\' if i + 1 < bytes.len() => {
                        // The escaped character may be multi-byte: take it whole.
                        let ch = text[i + 1..].chars().next().unwrap_or('\u{fffd}');
                        value.push(ch);
                        i += 1 + ch.len_utf8();
                    }
                    b'"' => {
                        closed = true;
                        i += 1;
                        break;
                    }
                    _ => {
                        let ch = text[i..].chars().next().unwrap_or('\u{fffd}');
                        value.push(ch);
                        i += ch.len_utf8();
                    }
                }
            }
            if !closed {
                return Err(format!(
                    "logfmt value of \"{key}\" opens a quote that never closes"
                ));
            }
            pairs.push((Cow::Borrowed(key), Cow::Owned(value)));
        } else {
            let value_start = i;
            while i < bytes.len() && !bytes[i].is_ascii_whitespace() {
                i += 1;
            }
            pairs.push((Cow::Borrowed(key), Cow::Borrowed(&text[value_start..i])));
        }
    }
    if pairs.is_empty() {
        return Err(
            "no key=value pairs: expected logfmt such as operation=op-1 event=start t_ms=0".into(),
        );
    }
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::fields::{Scalar, FIELDS};

    #[test]
    fn every_spelling_of_the_key_table_is_a_logfmt_key() {
        for field in &FIELDS {
            for spelling in field.spellings {
                let line = format!("{spelling}=v other=1");
                let mut got = parse(&line).unwrap();
                assert_eq!(
                    *(field.slot)(&mut got),
                    Some(Scalar::Str("v".into())),
                    "{spelling}"
                );
            }
        }
    }

    #[test]
    fn splits_quoted_and_bare_values() {
        let pairs = split_pairs(r#"operation=op-1 target="a \"b\" c" effect"#).unwrap();
        assert_eq!(pairs[0], ("operation".into(), "op-1".into()));
        assert_eq!(pairs[1], ("target".into(), "a \"b\" c".into()));
        assert_eq!(pairs[2], ("effect".into(), "true".into()));
    }

    #[test]
    fn an_escaped_multibyte_character_is_kept_whole() {
        let pairs = split_pairs("operation=\"a\\éb\" start_ms=1").unwrap();
        assert_eq!(pairs[0].1, "aéb");
    }

    #[test]
    fn rejects_an_unclosed_quote() {
        assert!(split_pairs(r#"operation="op-1"#)
            .unwrap_err()
            .contains("never closes"));
    }

    /// Fuzz target (see `crate::fuzz`): no line makes the logfmt reader or the validation
    /// panic.
    #[test]
    fn fuzz_logfmt() {
        let hops = crate::rules::HopOrder::default();
        crate::fuzz::run("logfmt", |bytes| {
            for line in String::from_utf8_lossy(bytes).lines() {
                let _ = parse(line).and_then(|f| f.check(&hops));
            }
        });
    }
}

//! JSON Lines: one attempt event object per line, keys as in [`super::fields::RawFields`].

use super::fields::RawFields;

pub fn parse(text: &str, unterminated_last: bool) -> Result<RawFields<'_>, String> {
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

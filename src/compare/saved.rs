//! Saved summaries as a side of `diff`: a file written by `analyze --format json` is read
//! back as a [`Summary`] (its numbers; the worst operations, drawings and gate stay in
//! the file and are repeated as they were).

use std::io::Read;
use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::summary::{Summary, SCHEMA_VERSION};

/// Bytes looked at to tell a saved summary from attempt logs.
const SNIFF_BYTES: u64 = 512;

/// Largest saved summary read: a summary holds aggregates and a few dozen operations, so
/// anything bigger is not one.
const MAX_SUMMARY_BYTES: u64 = 256 << 20;

/// Reads `path` as a saved summary, or returns `None` when it is not one (attempt logs, a
/// directory, a glob pattern, standard input). A summary is a JSON object whose first key is
/// `schema_version`, which no attempt record starts with.
pub fn read(path: &Path) -> Result<Option<(Summary, serde_json::Value)>> {
    if path.as_os_str() == "-" || !path.is_file() {
        return Ok(None);
    }
    let mut head = Vec::new();
    std::fs::File::open(path)
        .with_context(|| format!("could not read '{}'", path.display()))?
        .take(SNIFF_BYTES)
        .read_to_end(&mut head)
        .with_context(|| format!("could not read '{}'", path.display()))?;
    if !starts_like_a_summary(&head) {
        return Ok(None);
    }
    let size = std::fs::metadata(path)
        .with_context(|| format!("could not read '{}'", path.display()))?
        .len();
    if size > MAX_SUMMARY_BYTES {
        bail!(
            "'{}' starts like a saved summary but is {} MiB; a summary from `analyze --format json` is far smaller",
            path.display(),
            size >> 20
        );
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("could not read '{}'", path.display()))?;
    let json: serde_json::Value = serde_json::from_str(&text).with_context(|| {
        format!(
            "'{}' starts like a saved summary but is not valid JSON; save one with `attempt-funnel analyze --format json -o FILE`",
            path.display()
        )
    })?;
    if json.get("kind").is_some() {
        bail!(
            "'{}' is a replay or diff report, not a summary: save the run with `attempt-funnel analyze --format json -o FILE`",
            path.display()
        );
    }
    let version = json
        .get("schema_version")
        .and_then(serde_json::Value::as_u64);
    if version != Some(u64::from(SCHEMA_VERSION)) {
        bail!(
            "'{}' is a summary of schema version {}, but this attempt-funnel reads version {SCHEMA_VERSION}: analyse its attempt logs again",
            path.display(),
            version.map_or("unknown".to_string(), |v| v.to_string())
        );
    }
    let summary: Summary = serde_json::from_value(json.clone()).with_context(|| {
        format!(
            "'{}' is not a summary written by `attempt-funnel analyze --format json`",
            path.display()
        )
    })?;
    Ok(Some((summary, json)))
}

/// `{` then, after white space, the key `"schema_version"`.
fn starts_like_a_summary(head: &[u8]) -> bool {
    let text = String::from_utf8_lossy(head);
    let Some(rest) = text
        .trim_start_matches('\u{feff}')
        .trim_start()
        .strip_prefix('{')
    else {
        return false;
    };
    rest.trim_start().starts_with("\"schema_version\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tells_a_summary_from_attempt_records() {
        assert!(starts_like_a_summary(b"{\n  \"schema_version\": 1,"));
        assert!(starts_like_a_summary(b"{\"schema_version\":1}"));
        assert!(!starts_like_a_summary(
            b"{\"operation_id\":\"a\",\"schema_version\":1}"
        ));
        assert!(!starts_like_a_summary(b"operation=op-17 attempt=1"));
        assert!(!starts_like_a_summary(b""));
    }
}

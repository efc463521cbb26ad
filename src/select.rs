//! Select: finds the operation that `show` was asked for among the ingested ones, by
//! operation ID and test run, or by the `RUN/OPERATION` form the reports print, or, for
//! `show trace.json`, the only one there is. When the answer is not exactly one
//! operation, the error says what there is instead.

use anyhow::{bail, Result};

use crate::escape::terminal;
use crate::ingest::Ingested;
use crate::summary::display_operation_key;

/// Similar operation IDs suggested when the one asked for is not in the input.
const SUGGESTIONS: usize = 3;

/// Operations listed when `show FILE` finds more than one.
const LISTED: usize = 5;

/// The index of the input's only operation (in test run `run`, where given): what
/// `show FILE` shows.
pub fn only_operation(ingested: &Ingested, run: Option<&str>) -> Result<u32> {
    let ops: Vec<u32> = (0..ingested.operations.len() as u32)
        .filter(|&op| match run {
            None => true,
            Some(run) => {
                let want = (!run.is_empty()).then_some(run);
                ingested.operations[op as usize]
                    .0
                    .map(|r| ingested.strings.resolve(r))
                    == want
            }
        })
        .collect();
    let files = ingested.files.join(", ");
    let in_run = run.map_or(String::new(), |r| format!(" in test run \"{r}\""));
    match ops.as_slice() {
        [one] => Ok(*one),
        [] => bail!("{files} holds no operation{in_run} to show (see the messages above, if any)"),
        several => {
            let mut names: Vec<String> = several
                .iter()
                .map(|&op| display_operation_key(&ingested.operation_key(op)))
                .collect();
            names.sort();
            let first = names[0].clone();
            bail!(
                "{files} holds {} operations{in_run}, so name the one to show: attempt-funnel show {first} {files} (operations: {}{})",
                several.len(),
                names.iter().take(LISTED).cloned().collect::<Vec<_>>().join(", "),
                if names.len() > LISTED { ", …" } else { "" }
            )
        }
    }
}

/// The index of the operation `id` (in test run `run`, where given) in the ingested
/// operation table.
pub fn find_operation(ingested: &Ingested, id: &str, run: Option<&str>) -> Result<u32> {
    let name = |sym: u32| ingested.strings.resolve(sym);
    let run_of = |op: u32| ingested.operations[op as usize].0.map(name);
    let with_id = |want: &str| -> Vec<u32> {
        (0..ingested.operations.len() as u32)
            .filter(|&op| name(ingested.operations[op as usize].1) == want)
            .collect()
    };
    // Run IDs come from the input: escaped, they cannot forge a line of the message.
    let run_label = |op: u32| run_of(op).map_or("(none)".to_string(), |r| terminal(r).into_owned());

    let mut candidates = with_id(id);
    if candidates.is_empty() && run.is_none() {
        // `RUN/OPERATION`, as the reports write it; IDs may hold slashes themselves.
        for (at, _) in id.match_indices('/') {
            let (r, op) = (&id[..at], &id[at + 1..]);
            let found: Vec<u32> = with_id(op)
                .into_iter()
                .filter(|&o| run_of(o) == Some(r))
                .collect();
            if !found.is_empty() {
                candidates = found;
                break;
            }
        }
    }
    if candidates.is_empty() {
        bail!("{}", not_found(ingested, id));
    }
    let in_all_runs = candidates.clone();
    if let Some(run) = run {
        // An empty --run asks for the operation without a test run.
        let want = (!run.is_empty()).then_some(run);
        candidates.retain(|&op| run_of(op) == want);
        if candidates.is_empty() {
            let runs: Vec<String> = in_all_runs.iter().map(|&op| run_label(op)).collect();
            bail!(
                "operation \"{id}\" is not in test run \"{run}\"; it is in test run{} {}: pick one with --run",
                if runs.len() == 1 { "" } else { "s" },
                runs.join(", ")
            );
        }
    }
    match candidates.as_slice() {
        [one] => Ok(*one),
        several => {
            let mut runs: Vec<String> = several.iter().map(|&op| run_label(op)).collect();
            runs.sort();
            let example = several
                .iter()
                .find_map(|&op| run_of(op))
                .map_or(String::new(), |r| format!(", e.g. --run {r}"));
            bail!(
                "operation \"{id}\" is in {} test runs ({}); pick one with --run{example}{}",
                several.len(),
                runs.join(", "),
                if runs.iter().any(|r| r == "(none)") {
                    " (--run '' picks the one without a test run)"
                } else {
                    ""
                }
            )
        }
    }
}

fn not_found(ingested: &Ingested, id: &str) -> String {
    let needle = id.to_lowercase();
    let mut similar: Vec<String> = (0..ingested.operations.len() as u32)
        .map(|op| display_operation_key(&ingested.operation_key(op)))
        .filter(|display| !needle.is_empty() && display.to_lowercase().contains(&needle))
        .collect();
    similar.sort();
    similar.dedup();
    let similar: Vec<String> = similar.iter().map(|s| terminal(s).into_owned()).collect();
    let n = ingested.operations.len();
    let mut message = format!(
        "operation \"{id}\" is not in the input ({n} operation{} read from {})",
        if n == 1 { "" } else { "s" },
        ingested.files.join(", ")
    );
    let bad = ingested.diagnostics.total();
    if bad > 0 {
        // An operation whose every line was bad never became an operation: say where it
        // may be rather than that it is absent.
        message.push_str(&format!(
            "; {} could not be read, and the operation may be on {} (see above)",
            crate::words::counted(bad, "bad line", "bad lines"),
            crate::words::noun(bad, "it", "one of them")
        ));
    }
    if similar.is_empty() {
        message.push_str(
            "; 'attempt-funnel analyze --format jsonl' lists every operation_id and test_run_id",
        );
    } else {
        let shown: Vec<&str> = similar
            .iter()
            .take(SUGGESTIONS)
            .map(String::as_str)
            .collect();
        message.push_str(&format!(
            "; similar: {}{}",
            shown.join(", "),
            if similar.len() > SUGGESTIONS {
                ", …"
            } else {
                ""
            }
        ));
    }
    message
}

//! Snapshot tests of the human-readable outputs that people paste or read as they are: the
//! Markdown report and `show`, run by the real binary on the fixtures and compared with the
//! expected files in `tests/snapshots/`. A difference fails the test and prints the first
//! lines that differ. After a deliberate change, review it and refresh the files with
//! `UPDATE_SNAPSHOTS=1 cargo test --release --test snapshots`.

mod common;

use common::*;

/// Compares `actual` with `tests/snapshots/<name>`, or writes it when UPDATE_SNAPSHOTS is set.
fn assert_snapshot(name: &str, actual: &str) {
    let path = root().join("tests").join("snapshots").join(name);
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, actual).expect("write snapshot");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "no snapshot {} ({e}); create it with UPDATE_SNAPSHOTS=1 cargo test --release --test snapshots",
            path.display()
        )
    });
    if expected == actual {
        return;
    }
    let (exp, act): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
    let first = (0..exp.len().max(act.len()))
        .find(|&i| exp.get(i) != act.get(i))
        .unwrap_or(0);
    let mut diff = String::new();
    for i in first..(first + 8).min(exp.len().max(act.len())) {
        if let Some(e) = exp.get(i) {
            diff.push_str(&format!("-{:4} {e}\n", i + 1));
        }
        if let Some(a) = act.get(i) {
            diff.push_str(&format!("+{:4} {a}\n", i + 1));
        }
    }
    panic!(
        "{name} differs from its snapshot from line {} on (- expected, + actual):\n{diff}\n--- whole output ---\n{actual}\nIf the change is intended, refresh with UPDATE_SNAPSHOTS=1 cargo test --release --test snapshots",
        first + 1
    );
}

fn stdout_of(args: &[&str], code: i32) -> String {
    let run = run(args);
    run.expect_code(code);
    assert!(run.stderr.is_empty(), "unexpected stderr: {}", run.stderr);
    run.stdout_text()
}

#[test]
fn markdown_of_the_incident_matches_its_snapshot() {
    let md = stdout_of(
        &[
            "analyze",
            "--format",
            "markdown",
            "--top",
            "5",
            "fixtures/incident.jsonl",
        ],
        0,
    );
    assert_snapshot("incident.md", &md);
}

#[test]
fn markdown_of_every_class_fixture_matches_its_snapshot() {
    let mut args = vec!["analyze", "--format", "markdown", "--top", "3"];
    let files: Vec<String> = class_fixtures()
        .iter()
        .map(|p| {
            p.strip_prefix(root())
                .expect("fixture under the root")
                .display()
                .to_string()
        })
        .collect();
    args.extend(files.iter().map(String::as_str));
    assert_snapshot("classes.md", &stdout_of(&args, 0));
}

#[test]
fn show_of_the_spec_trace_matches_its_snapshot() {
    let out = stdout_of(&["show", "op-17", "fixtures/logfmt-trace.logfmt"], 0);
    assert_snapshot("show-op-17.txt", &out);
}

#[test]
fn show_of_a_nested_retry_in_the_incident_matches_its_snapshot() {
    let out = stdout_of(&["show", "run-3/op-000008", "fixtures/incident.jsonl"], 0);
    assert_snapshot("show-nested-retry.txt", &out);
}

#[test]
fn show_of_a_synchronized_burst_matches_its_snapshot() {
    let out = stdout_of(
        &["show", "s-03", "fixtures/classes/synchronized-burst.jsonl"],
        0,
    );
    assert_snapshot("show-synchronized-burst.txt", &out);
}

#[test]
fn show_of_a_redelivery_with_fan_out_matches_its_snapshot() {
    let out = stdout_of(&["show", "r-3", "fixtures/classes/redelivery.jsonl"], 0);
    assert_snapshot("show-redelivery.txt", &out);
}

#[test]
fn show_of_an_overlap_linked_by_span_ids_matches_its_snapshot() {
    let out = stdout_of(&["show", "o-1", "fixtures/classes/overlap.jsonl"], 0);
    assert_snapshot("show-overlap.txt", &out);
}

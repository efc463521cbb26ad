//! End-to-end tests of `attempt-funnel show`: finding the operation (by ID, `RUN/OP` or
//! `--run`), the exit code and message when it is not exactly one operation, and that it
//! reports what `analyze` computed for the same operation.

mod common;

use common::*;

fn show(args: &[&str]) -> Run {
    let mut all = vec!["show"];
    all.extend(args);
    run(&all)
}

#[test]
fn shows_the_class_funnel_tree_timeline_and_findings_of_one_operation() {
    let out = show(&["op-17", "fixtures/logfmt-trace.logfmt"]);
    out.expect_code(0);
    let text = out.stdout_text();
    for expected in [
        "op-17 — overlap",
        "caller 2 → dependency 2 (4 attempts)",
        "Attempt tree",
        "└ dependency #2",
        "Timeline",
        "dependency: 850–1400 ms (550 ms)",
        "overlap@dependency",
        "unfinished@caller",
    ] {
        assert!(text.contains(expected), "no {expected:?} in:\n{text}");
    }
    // The retry started 50 ms after the timed-out attempt: its gap.
    let retry = text
        .lines()
        .find(|l| l.starts_with("caller #2"))
        .expect("caller #2 row");
    assert!(retry.contains("retry") && retry.contains("+50"), "{retry}");
    // Bars fit the 60-column timeline, and the unfinished retry ends in '>'.
    let bars: Vec<&str> = text.lines().filter(|l| l.ends_with('|')).collect();
    assert_eq!(bars.len(), 4, "{text}");
    for bar in &bars {
        let inner = &bar[bar.find('|').unwrap() + 1..bar.len() - 1];
        assert_eq!(inner.chars().count(), 60, "{bar}");
    }
    assert!(bars
        .iter()
        .any(|b| b.starts_with("caller #2") && b.contains(">|")));
    assert!(
        bars.iter().any(|b| b.contains('#')),
        "overlap drawn with '#'"
    );
}

#[test]
fn show_agrees_with_analyze_on_class_and_findings_for_every_class_fixture() {
    for file in class_fixtures() {
        for row in analyze_rows(&[&file], &[]) {
            let mut args = vec![
                "show".to_string(),
                row.operation_id.clone(),
                file.display().to_string(),
            ];
            if let Some(run_id) = &row.test_run_id {
                args.extend(["--run".to_string(), run_id.clone()]);
            }
            let out = run(&args);
            out.expect_code(0);
            let text = out.stdout_text();
            let first = text.lines().next().unwrap_or_default();
            assert_eq!(first, format!("{} — {}", row.id(), row.class), "{text}");
            for finding in &row.findings {
                assert!(
                    text.contains(finding.as_str()),
                    "{}: no {finding}",
                    row.id()
                );
            }
        }
    }
}

#[test]
fn run_slash_operation_as_the_reports_print_it_is_accepted() {
    let out = show(&["run-a/h-3", "fixtures/classes/healthy.jsonl"]);
    out.expect_code(0);
    assert!(out.stdout_text().starts_with("run-a/h-3 — healthy"));
}

#[test]
fn an_operation_id_in_several_test_runs_asks_for_run_and_exits_2() {
    let out = show(&["h-1", "fixtures/classes/healthy.jsonl"]);
    out.expect_code(2);
    assert!(out.stdout.is_empty());
    assert!(
        out.stderr.contains("is in 2 test runs (run-a, run-b)")
            && out.stderr.contains("--run run-a"),
        "{}",
        out.stderr
    );
    let picked = show(&["h-1", "--run", "run-b", "fixtures/classes/healthy.jsonl"]);
    picked.expect_code(0);
    assert!(picked.stdout_text().starts_with("run-b/h-1 — healthy"));
}

#[test]
fn an_unknown_operation_exits_2_naming_it_and_suggesting_similar_ones() {
    let out = show(&["op-00000", "fixtures/incident.jsonl"]);
    out.expect_code(2);
    assert!(out.stdout.is_empty());
    assert!(
        out.stderr
            .contains("attempt-funnel: operation \"op-00000\" is not in the input (400 operations read from fixtures/incident.jsonl); similar: run-3/op-000001"),
        "{}",
        out.stderr
    );
    let nothing_like_it = show(&["zzz", "fixtures/incident.jsonl"]);
    nothing_like_it.expect_code(2);
    assert!(nothing_like_it.stderr.contains("--format jsonl"));
}

#[test]
fn an_operation_not_in_the_given_run_exits_2_naming_its_runs() {
    let out = show(&["h-1", "--run", "run-z", "fixtures/classes/healthy.jsonl"]);
    out.expect_code(2);
    assert!(
        out.stderr.contains(
            "operation \"h-1\" is not in test run \"run-z\"; it is in test runs run-a, run-b"
        ),
        "{}",
        out.stderr
    );
}

#[test]
fn show_reads_standard_input_and_applies_the_same_rule_flags_as_analyze() {
    let input = std::fs::read(fixture("classes/over-budget.jsonl")).expect("fixture");
    let out = run_with_stdin(&["show", "b-3"], Some(&input));
    out.expect_code(0);
    assert!(out.stdout_text().contains("— over-budget"));
    // With a budget of 4 at the dependency, its 4-attempt line is within budget.
    let relaxed = run_with_stdin(&["show", "b-3", "--budget", "dependency=4"], Some(&input));
    relaxed.expect_code(0);
    assert!(
        relaxed.stdout_text().contains("— healthy"),
        "{}",
        relaxed.stdout_text()
    );
}

#[test]
fn show_reports_bad_lines_and_exits_2_but_still_shows_a_good_operation() {
    let out = show(&["ok-1", "fixtures/bad/bad-lines.jsonl"]);
    out.expect_code(2);
    assert!(out.stdout_text().starts_with("ok-1 — healthy"));
    assert!(
        out.stderr.contains("fixtures/bad/bad-lines.jsonl:3:"),
        "{}",
        out.stderr
    );
}

/// An operation whose only line was bad is not "absent": the bad lines come first and the
/// message says the operation may be on one of them.
#[test]
fn an_operation_whose_only_line_was_bad_points_at_the_bad_lines() {
    let input = concat!(
        r#"{"operation_id":"x","hop":"caller","attempt":0,"start_ms":1,"finish_ms":2}"#,
        "\n",
        r#"{"operation_id":"y","hop":"caller","attempt":1,"start_ms":1,"finish_ms":2,"outcome":200}"#,
        "\n"
    );
    let out = run_with_stdin(&["show", "x"], Some(input.as_bytes()));
    out.expect_code(2);
    let bad = out
        .stderr
        .find("<stdin>:1: attempt must be")
        .expect(&out.stderr);
    let verdict = out
        .stderr
        .find("1 bad line could not be read, and the operation may be on it (see above)")
        .expect(&out.stderr);
    assert!(bad < verdict, "{}", out.stderr);
}

#[test]
fn show_without_an_operation_id_is_a_usage_error() {
    show(&[]).expect_code(2);
}

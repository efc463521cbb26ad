//! End-to-end tests of `diff` (issue #14): two runs, each attempt logs or a summary saved
//! with `analyze --format json`, compared by the real binary; change conditions in
//! `--fail-on` computed by hand in each test's comment.

mod common;

use common::*;
use serde_json::Value;

fn diff(args: &[&str]) -> Run {
    let mut all = vec!["diff"];
    all.extend_from_slice(args);
    run(&all)
}

fn json(run: &Run) -> Value {
    serde_json::from_slice(&run.stdout)
        .unwrap_or_else(|e| panic!("no JSON ({e}): exit {}\n{}", run.code, run.stderr))
}

/// Every metric of the gate, as a change condition that a run compared with itself must
/// pass: each measures a change of 0.
fn every_increased_condition() -> Vec<String> {
    let mut metrics: Vec<String> = CLASSES.iter().map(|c| c.to_string()).collect();
    for finding in [
        "retries",
        "redelivery",
        "fan-out",
        "overlap",
        "burst",
        "over-budget",
        "retry-without-delay",
        "retry-after-not-honoured",
        "retry-after-not-clamped",
        "duplicate-effect",
        "unfinished",
        "orphan",
    ] {
        metrics.push(finding.to_string());
        for hop in ["caller", "gateway", "consumer", "dependency"] {
            metrics.push(format!("{finding}@{hop}"));
        }
    }
    for metric in ["amplification", "retry-ratio"] {
        metrics.push(metric.to_string());
        for hop in ["caller", "gateway", "consumer", "dependency"] {
            metrics.push(format!("{metric}@{hop}"));
        }
    }
    for metric in [
        "bursts",
        "unfinished-attempts",
        "orphan-attempts",
        "duplicate-effects",
    ] {
        metrics.push(metric.to_string());
    }
    metrics
        .iter()
        .flat_map(|m| [format!("{m} increased > 0"), format!("{m} increased > 10%")])
        .collect()
}

/// The incident against itself: every change is 0, no operation changes class or final
/// outcome, and all 2 × 83 `increased` conditions pass (exit 0).
#[test]
fn a_run_diffed_with_itself_shows_no_change_and_passes_every_increased_condition() {
    let conditions = every_increased_condition();
    let mut args = vec![
        "fixtures/incident.jsonl",
        "fixtures/incident.jsonl",
        "--format",
        "json",
    ];
    for c in &conditions {
        args.push("--fail-on");
        args.push(c);
    }
    let run = diff(&args);
    run.expect_code(0);
    let doc = json(&run);
    assert_eq!(doc["kind"], "diff");
    assert_eq!(doc["before"], doc["after"]);
    let changes = &doc["changes"];
    for h in changes["hops"].as_array().unwrap() {
        assert_eq!(h["change"], 0, "{h}");
        assert_eq!(h["attempts"]["before"], h["attempts"]["after"], "{h}");
    }
    for c in changes["classes"].as_array().unwrap() {
        assert_eq!(c["operations"]["before"], c["operations"]["after"], "{c}");
    }
    assert_eq!(changes["reclassified"], 0);
    let outcomes = &changes["outcomes"];
    assert_eq!(outcomes["compared"], 400);
    for change in ["success_lost", "success_gained", "unknown"] {
        assert_eq!(outcomes[change]["operations"], 0, "{change}");
    }
    let gate = &doc["gate"];
    assert_eq!(gate["passed"], true);
    let thresholds = gate["thresholds"].as_array().unwrap();
    assert_eq!(thresholds.len(), conditions.len());
    for t in thresholds {
        assert_eq!(t["measured"], 0.0, "{t}");
    }
    assert!(
        changes["verdict"]
            .as_str()
            .unwrap()
            .starts_with("The second run leaves the 787 dependency attempts unchanged"),
        "{}",
        changes["verdict"]
    );
}

/// Before: the 3 × 3 nested retry (dependency 18 attempts for 2 operations, amplification
/// 9.00, 2 nested-retry operations). After: the gateway does not retry (dependency 6,
/// amplification 3.00, 0 nested-retry). Changes: amplification@dependency decreased by
/// (9 − 3) ÷ 9 = 66.7%, so `decreased > 50%` breaches and `increased > 10%` (−66.7%)
/// passes; nested-retry increased by 0 − 2 = −2, which passes `increased > 0`. The other
/// way round the dependency's amplification increased by (9 − 3) ÷ 3 = 200% and
/// nested-retry by 2: both breach (exit 1).
#[test]
fn change_conditions_measure_the_move_between_the_runs() {
    let (before, after) = (
        nested_all_failing(3, "before.jsonl"),
        nested_all_failing(1, "after.jsonl"),
    );
    let (b, a) = (
        before.path().display().to_string(),
        after.path().display().to_string(),
    );
    let run = diff(&[
        &b,
        &a,
        "--format",
        "json",
        "--fail-on",
        "amplification@dependency increased > 10%",
        "--fail-on",
        "nested-retry increased > 0",
        "--fail-on",
        "amplification@dependency decreased > 50%",
    ]);
    run.expect_code(1);
    let doc = json(&run);
    let t = doc["gate"]["thresholds"].as_array().unwrap();
    let measured = |i: usize| t[i]["measured"].as_f64().unwrap();
    assert!((measured(0) - (-6.0 / 9.0)).abs() < 1e-12, "{}", t[0]);
    assert_eq!(t[0]["breached"], false);
    assert_eq!(measured(1), -2.0);
    assert_eq!(t[1]["breached"], false);
    assert!((measured(2) - 6.0 / 9.0).abs() < 1e-12);
    assert_eq!(t[2]["breached"], true);
    assert!(run.stderr.contains("BREACHED amplification@dependency decreased > 50%: measured 66.67% at dependency, limit 50.00%"), "{}", run.stderr);
    let dependency = doc["changes"]["hops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["hop"] == "dependency")
        .unwrap()
        .clone();
    assert_eq!(dependency["attempts"]["before"], 18);
    assert_eq!(dependency["attempts"]["after"], 6);

    let run = diff(&[
        &a,
        &b,
        "--fail-on",
        "amplification@dependency increased > 10%",
        "--fail-on",
        "nested-retry increased > 0",
    ]);
    run.expect_code(1);
    assert!(
        run.stderr.contains("measured 200.00% at dependency"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("BREACHED nested-retry increased > 0: measured 2, limit 0"),
        "{}",
        run.stderr
    );
}

/// A summary saved with `analyze --format json` is a side: the changes are the same as
/// from its logs, the saved summary is repeated as it was, and what it cannot answer
/// (per-operation outcomes and rows) is said, not guessed.
#[test]
fn a_saved_summary_is_a_side_of_its_own() {
    let before = nested_all_failing(3, "before.jsonl");
    let after = nested_all_failing(1, "after.jsonl");
    let saved = TempFile::reserve("baseline.json");
    analyze(&[
        "--format",
        "json",
        "-o",
        &saved.path().display().to_string(),
        &before.path().display().to_string(),
    ])
    .expect_code(0);
    let (s, b, a) = (
        saved.path().display().to_string(),
        before.path().display().to_string(),
        after.path().display().to_string(),
    );
    let from_logs = json(diff(&[&b, &a, "--format", "json"]).expect_code(0));
    let from_saved = json(diff(&[&s, &a, "--format", "json"]).expect_code(0));
    assert_eq!(from_logs["changes"]["hops"], from_saved["changes"]["hops"]);
    assert_eq!(
        from_logs["changes"]["classes"],
        from_saved["changes"]["classes"]
    );
    let saved_json: Value = serde_json::from_slice(&std::fs::read(saved.path()).unwrap()).unwrap();
    assert_eq!(from_saved["before"], saved_json);
    assert_eq!(from_saved["changes"]["outcomes"], Value::Null);

    let rows = diff(&[&s, &a, "--format", "csv"]);
    rows.expect_code(2);
    assert!(
        rows.stderr.contains("need attempt logs on both sides"),
        "{}",
        rows.stderr
    );
    let plain = diff(&[&a, &s, "--fail-on", "overlap > 0"]);
    plain.expect_code(2);
    assert!(
        plain
            .stderr
            .contains("judges the second run, which is a saved summary"),
        "{}",
        plain.stderr
    );

    // A comparison report is not a summary.
    let report = TempFile::new("report.json", &diff(&[&b, &a, "--format", "json"]).stdout);
    let wrong = diff(&[&report.path().display().to_string(), &a]);
    wrong.expect_code(2);
    assert!(
        wrong
            .stderr
            .contains("is a replay or diff report, not a summary"),
        "{}",
        wrong.stderr
    );
}

/// The per-operation rows of a diff: the second run's rows with the first run's columns.
#[test]
fn rows_carry_both_runs() {
    let (before, after) = (
        nested_all_failing(3, "before.jsonl"),
        nested_all_failing(1, "after.jsonl"),
    );
    let run = diff(&[
        &before.path().display().to_string(),
        &after.path().display().to_string(),
        "--format",
        "jsonl",
    ]);
    run.expect_code(0);
    let rows: Vec<Value> = run
        .stdout_text()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["operation_id"], "n-1");
    assert_eq!(rows[0]["class"], "healthy");
    assert_eq!(rows[0]["before_class"], "nested-retry");
    assert_eq!(rows[0]["attempts"]["dependency"], 3);
    assert_eq!(rows[0]["before_attempts"]["dependency"], 9);
    assert_eq!(rows[0]["outcome_change"], Value::Null);
}

//! End-to-end tests of `replay` (issue #14): the real binary replays hand-built attempt
//! logs under candidate policies. Each worked case is computed by hand in its comment, and
//! the test checks the binary's JSON comparison (and per-operation rows) against it.

mod common;

use std::fmt::Write as _;

use common::*;
use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::Value;

/// `replay --candidate CANDIDATE FILE ARGS… --format json`, decoded.
fn replay_json(candidate: &str, file: &TempFile, extra: &[&str]) -> (Value, Run) {
    let cand = TempFile::new("candidate.toml", candidate.as_bytes());
    let mut args = vec![
        "replay".to_string(),
        "--candidate".to_string(),
        cand.path().display().to_string(),
        "--format".to_string(),
        "json".to_string(),
        file.path().display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let run = run(&args);
    let doc = serde_json::from_slice(&run.stdout).unwrap_or_else(|e| {
        panic!(
            "replay wrote no JSON ({e}); exit {}\n{}",
            run.code, run.stderr
        )
    });
    (doc, run)
}

/// The value of `hop`'s `field` in a summary's `hops` list.
fn hop(summary: &Value, hop: &str, field: &str) -> Value {
    summary["hops"]
        .as_array()
        .expect("hops")
        .iter()
        .find(|h| h["hop"] == hop)
        .unwrap_or_else(|| panic!("no hop {hop}"))[field]
        .clone()
}

fn class_count(summary: &Value, class: &str) -> u64 {
    summary["classes"]
        .as_array()
        .expect("classes")
        .iter()
        .find(|c| c["class"] == class)
        .expect("class")["operations"]
        .as_u64()
        .expect("count")
}

/// Worked case: the gateway stops retrying.
///
/// Observed, per operation: gateway 3 attempts, dependency 3 × 3 = 9; both hops retry, so
/// the class is nested-retry. Two operations: dependency 18 attempts, amplification 9.00.
///
/// Candidate `[hops.gateway] max_attempts = 1`: gateway attempt 2 no longer happens (k = 2 is
/// past max_attempts), and it takes its three dependency attempts with it; so does attempt 3.
/// Left per operation: gateway 1, dependency 3 (the ones under gateway attempt 1, at
/// their observed times). Dependency: 6 attempts, amplification 3.00; removed 12 of 18
/// (66.7%). Class: the first multiplying hop is the dependency (three attempts under one
/// parent, one target), the only hop that retries; no overlap (its attempts are 100 ms
/// apart), two operations cannot make a burst (5 needed), and a line of 3 is within the
/// default budget of 3 → healthy. With `--budget dependency=2` the same line of 3 is over
/// that budget → over-budget. The final outcome (the gateway's last attempt) is a 503 on
/// both sides: no outcome changes.
#[test]
fn the_gateway_not_retrying_leaves_three_dependency_attempts_instead_of_nine() {
    let file = nested_all_failing(3, "nested-3x3.jsonl");
    let (doc, run) = replay_json("[hops.gateway]\nmax_attempts = 1\n", &file, &[]);
    run.expect_code(0);
    let (observed, replayed) = (&doc["observed"], &doc["replayed"]);
    assert_eq!(hop(observed, "dependency", "attempts"), 18);
    assert_eq!(hop(observed, "dependency", "amplification"), 9.0);
    assert_eq!(class_count(observed, "nested-retry"), 2);
    assert_eq!(hop(replayed, "gateway", "attempts"), 2);
    assert_eq!(hop(replayed, "dependency", "attempts"), 6);
    assert_eq!(hop(replayed, "dependency", "amplification"), 3.0);
    assert_eq!(class_count(replayed, "healthy"), 2);
    let dependency = doc["changes"]["hops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["hop"] == "dependency")
        .unwrap()
        .clone();
    assert_eq!(dependency["attempts"]["observed"], 18);
    assert_eq!(dependency["attempts"]["replayed"], 6);
    assert_eq!(dependency["change"], -12);
    assert_eq!(dependency["extrapolated"], 0);
    let verdict = doc["changes"]["verdict"].as_str().unwrap();
    assert!(
        verdict.starts_with("The candidate removes 12 of 18 dependency attempts (66.7%)"),
        "{verdict}"
    );
    assert_eq!(doc["changes"]["outcomes"]["success_lost"]["operations"], 0);
    assert_eq!(doc["changes"]["reclassified"], 2);

    let (doc, run) = replay_json(
        "[hops.gateway]\nmax_attempts = 1\n",
        &file,
        &["--budget", "dependency=2"],
    );
    run.expect_code(0);
    assert_eq!(class_count(&doc["replayed"], "over-budget"), 2);
}

/// Worked case: a caller that succeeded on its third attempt, replayed with at most two.
///
/// Observed: caller attempts 1 (0–100 ms, 503), 2 (200–300, 503), 3 (400–500, ok): the
/// operation succeeded. Candidate `[hops.caller] max_attempts = 2`: attempt 3 would be
/// k = 3 > 2, so the caller's last attempt is attempt 2, a 503: success lost. Caller
/// attempts 3 → 2.
#[test]
fn a_success_on_the_third_attempt_is_lost_with_two_attempts() {
    let text = record("op-1", "caller", 1, 0, 100, "503")
        + &record("op-1", "caller", 2, 200, 300, "503")
        + &record("op-1", "caller", 3, 400, 500, "ok");
    let file = TempFile::new("third-time-lucky.jsonl", text.as_bytes());
    let (doc, run) = replay_json("[hops.caller]\nmax_attempts = 2\n", &file, &[]);
    run.expect_code(0);
    assert_eq!(hop(&doc["replayed"], "caller", "attempts"), 2);
    let lost = &doc["changes"]["outcomes"]["success_lost"];
    assert_eq!(lost["operations"], 1);
    assert_eq!(lost["operation_ids"][0], "op-1");
    let verdict = doc["changes"]["verdict"].as_str().unwrap();
    assert!(
        verdict.contains("1 operation that succeeded on a retry would have failed"),
        "{verdict}"
    );

    // The per-operation rows say the same.
    let cand = TempFile::new("candidate.toml", b"[hops.caller]\nmax_attempts = 2\n");
    let rows = run_rows(&cand, &file, "jsonl");
    assert_eq!(rows[0]["outcome_change"], "success-lost");
    assert_eq!(rows[0]["observed_final_outcome"], "success");
    assert_eq!(rows[0]["final_outcome"], "failure");
    assert_eq!(rows[0]["observed_total_attempts"], 3);
    assert_eq!(rows[0]["total_attempts"], 2);
}

fn run_rows(cand: &TempFile, file: &TempFile, format: &str) -> Vec<Value> {
    let run = run(&[
        "replay",
        "--candidate",
        &cand.path().display().to_string(),
        "--format",
        format,
        &file.path().display().to_string(),
    ]);
    run.expect_code(0);
    run.stdout_text()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON row"))
        .collect()
}

/// Worked case: more attempts than were observed.
///
/// Observed: caller attempts 1 (0–100), 2 (200–300), 3 (400–500), all 503. Candidate
/// `[hops.caller] max_attempts = 5`, no backoff given, so the observed spacing holds:
/// attempts start 200 ms apart. Attempt 4 (600–700) and 5 (800–900) were never observed:
/// they repeat the last observed outcome (503) and duration (100 ms) and are
/// extrapolated — 2 of them. The request now ends on an extrapolated attempt: its outcome
/// is unknown. A line of 5 is over the default budget of 3 → over-budget.
#[test]
fn five_attempts_where_three_were_observed_extrapolate_two() {
    let text = record("op-1", "caller", 1, 0, 100, "503")
        + &record("op-1", "caller", 2, 200, 300, "503")
        + &record("op-1", "caller", 3, 400, 500, "503");
    let file = TempFile::new("three-failures.jsonl", text.as_bytes());
    let (doc, run) = replay_json("[hops.caller]\nmax_attempts = 5\n", &file, &[]);
    run.expect_code(0);
    assert_eq!(hop(&doc["replayed"], "caller", "attempts"), 5);
    let caller = &doc["changes"]["hops"][0];
    assert_eq!(caller["hop"], "caller");
    assert_eq!(caller["extrapolated"], 2);
    assert_eq!(doc["changes"]["outcomes"]["unknown"]["operations"], 1);
    assert_eq!(class_count(&doc["replayed"], "over-budget"), 1);
    let worst = &doc["replayed"]["worst_operations"][0];
    assert_eq!(worst["first_start_ms"], 0.0);
    assert_eq!(worst["last_finish_ms"], 900.0);
}

/// Worked case: the burst fixture, whose ten operations all fail at 1,040 ms and retry
/// 960 ms later on one fixed schedule (a synchronized burst at 2,000 ms).
///
/// With `backoff = "fixed"`, `base_ms = 960` the candidate reproduces that schedule: still
/// one burst. With `backoff = "full-jitter"`, `base_ms = 1000`, each retry waits a uniform
/// draw in [0, 1000) ms: ten retries over a second expect 0.5 per 50 ms window, so five
/// operations in one window is no longer a cluster against its neighbours — no burst, and
/// the class synchronized-burst is gone. The draws are seeded: the same seed gives the
/// same replay.
#[test]
fn a_synchronized_burst_replayed_with_full_jitter_is_no_longer_a_burst() {
    let fixture_copy = TempFile::new(
        "burst.jsonl",
        &std::fs::read(fixture("classes/synchronized-burst.jsonl")).unwrap(),
    );
    let fixed = "[hops.caller]\nbackoff = \"fixed\"\nbase_ms = 960\n";
    let (doc, run) = replay_json(fixed, &fixture_copy, &[]);
    run.expect_code(0);
    assert!(doc["observed"]["bursts"]["count"].as_u64().unwrap() >= 1);
    assert_eq!(
        doc["replayed"]["bursts"]["count"],
        doc["observed"]["bursts"]["count"]
    );

    let jitter = "[hops.caller]\nbackoff = \"full-jitter\"\nbase_ms = 1000\n";
    let (doc, run) = replay_json(jitter, &fixture_copy, &["--seed", "7"]);
    run.expect_code(0);
    assert_eq!(
        doc["replayed"]["bursts"]["count"], 0,
        "{}",
        doc["replayed"]["bursts"]
    );
    assert_eq!(class_count(&doc["replayed"], "synchronized-burst"), 0);
    assert!(class_count(&doc["observed"], "synchronized-burst") > 0);
    let (again, _) = replay_json(jitter, &fixture_copy, &["--seed", "7"]);
    assert_eq!(again, doc, "the same seed must give the same replay");
}

/// Worked case: a 10% retry budget over a storm.
///
/// 100 operations; operation i's caller attempt 1 starts at i ms (0–99) and fails (503)
/// after 10 ms; observed attempts 2 (503) and 3 (ok) follow. Candidate: at most 3
/// attempts, fixed backoff 200 ms, budget ratio 0.1 over 10 s with no floor. All 100
/// originals start before the first retry (op 0's at 0 + 10 + 200 = 210 ms), so the budget
/// allows 0.1 × 100 = 10 retries: ops 0–9 retry at 210–219 ms; op 10's retry (220 ms)
/// would be the 11th and is refused, as are those of ops 11–99 (90 refused). Ops 0–9 fail
/// again and want attempt 3 at 420–429 ms: 10 retries are already in the window, so all
/// 10 are refused. Caller attempts: 100 originals + 10 retries = 110 (observed 300);
/// 100 retries refused by the budget, in 100 operations; every operation lost the
/// success that its observed attempt 3 had.
#[test]
fn a_ten_percent_retry_budget_caps_a_storm_at_ten_retries() {
    let mut text = String::new();
    for i in 0..100u64 {
        let op = format!("op-{i:03}");
        text += &record(&op, "caller", 1, i, i + 10, "503");
        text += &record(&op, "caller", 2, i + 300, i + 310, "503");
        text += &record(&op, "caller", 3, i + 600, i + 610, "ok");
    }
    let file = TempFile::new("storm.jsonl", text.as_bytes());
    let candidate = "[hops.caller]\nmax_attempts = 3\nbackoff = \"fixed\"\nbase_ms = 200\n[hops.caller.budget]\nratio = 0.1\nwindow_s = 10\nmin_per_s = 0\n";
    let (doc, run) = replay_json(candidate, &file, &[]);
    run.expect_code(0);
    assert_eq!(hop(&doc["observed"], "caller", "attempts"), 300);
    assert_eq!(hop(&doc["replayed"], "caller", "attempts"), 110);
    assert_eq!(hop(&doc["replayed"], "caller", "retries"), 10);
    let exhausted = &doc["changes"]["exhausted"];
    assert_eq!(exhausted["budget"][0]["hop"], "caller");
    assert_eq!(exhausted["budget"][0]["retries"], 100);
    assert_eq!(exhausted["budget_operations"], 100);
    assert_eq!(
        doc["changes"]["outcomes"]["success_lost"]["operations"],
        100
    );
}

/// The gate applies to the replayed run: the nested case's dependency amplification is
/// 9.00 observed and 3.00 replayed with the gateway not retrying, 1.00 with neither
/// retrying.
#[test]
fn the_gate_judges_the_replayed_run() {
    let file = nested_all_failing(3, "nested-3x3.jsonl");
    let gate = ["--fail-on", "amplification@dependency > 1.5"];
    let (doc, run) = replay_json("[hops.gateway]\nmax_attempts = 1\n", &file, &gate);
    run.expect_code(1);
    assert_eq!(doc["gate"]["passed"], false);
    assert!(
        run.stderr.contains("measured 3.000 at dependency"),
        "{}",
        run.stderr
    );
    let (doc, run) = replay_json(
        "[hops.gateway]\nmax_attempts = 1\n[hops.dependency]\nmax_attempts = 1\n",
        &file,
        &gate,
    );
    run.expect_code(0);
    assert_eq!(doc["gate"]["passed"], true);
    assert_eq!(hop(&doc["replayed"], "dependency", "amplification"), 1.0);
}

#[test]
fn a_candidate_with_an_unknown_key_is_an_error_naming_the_key() {
    let file = nested_all_failing(3, "nested-3x3.jsonl");
    let (_, run) = (Value::Null, {
        let cand = TempFile::new("bad.toml", b"[hops.gateway]\nmax_atempts = 1\n");
        run(&[
            "replay",
            "--candidate",
            &cand.path().display().to_string(),
            &file.path().display().to_string(),
        ])
    });
    run.expect_code(2);
    assert!(run.stderr.contains("max_atempts"), "{}", run.stderr);
    assert!(run.stderr.contains("docs/replay.md"), "{}", run.stderr);
}

/// Every format renders the comparison, and says what the replay cannot know.
#[test]
fn every_format_renders_the_comparison() {
    let file = nested_all_failing(3, "nested-3x3.jsonl");
    let cand = TempFile::new("candidate.toml", b"[hops.gateway]\nmax_attempts = 1\n");
    let args = |format: &str| {
        vec![
            "replay".to_string(),
            "--candidate".to_string(),
            cand.path().display().to_string(),
            "--format".to_string(),
            format.to_string(),
            file.path().display().to_string(),
        ]
    };
    for format in ["table", "markdown", "html"] {
        let run = run(&args(format));
        run.expect_code(0);
        let text = run.stdout_text();
        assert!(
            text.contains("removes 12 of 18 dependency attempts"),
            "{format}: {text}"
        );
        assert!(
            text.contains("reuses the observed outcomes"),
            "{format}: {text}"
        );
    }
    let html = run(&args("html")).stdout_text();
    assert_eq!(
        html.matches("<figure class=\"op\"").count(),
        4,
        "two operations, each drawn twice"
    );
    let csv = run(&args("csv")).stdout_text();
    let rows = parse_csv(&csv);
    let header = &rows[0];
    for column in [
        "class",
        "dependency_attempts",
        "observed_class",
        "observed_dependency_attempts",
        "outcome_change",
    ] {
        assert!(
            header.contains(&column.to_string()),
            "{column} in {header:?}"
        );
    }
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    assert_eq!(rows[1][col("dependency_attempts")], "3");
    assert_eq!(rows[1][col("observed_dependency_attempts")], "9");
    assert_eq!(rows[1][col("observed_class")], "nested-retry");
}

fn config() -> Config {
    Config {
        cases: 6,
        max_shrink_iters: 4,
        failure_persistence: None,
        ..Config::default()
    }
}

/// Runs the observed file through `analyze` and an empty candidate's replay, and checks
/// that the replayed run is the observed run, number for number.
fn assert_unchanged(file: &std::path::Path) {
    let f = TempFile::new("copy.jsonl", &std::fs::read(file).unwrap());
    let (doc, run) = replay_json("", &f, &[]);
    run.expect_code(0);
    assert_eq!(doc["observed"], doc["replayed"], "{}", file.display());
    let analyzed = analyze(&["--format", "json", &f.path().display().to_string()]);
    let analyzed: Value = serde_json::from_slice(&analyzed.stdout).unwrap();
    assert_eq!(
        doc["observed"], analyzed,
        "the observed run is analyze's summary"
    );
    for h in doc["changes"]["hops"].as_array().unwrap() {
        assert_eq!(h["change"], 0, "{h}");
    }
    assert_eq!(doc["changes"]["reclassified"], 0);
}

#[test]
fn a_candidate_that_changes_nothing_reproduces_every_fixture() {
    let mut files = class_fixtures();
    files.push(fixture("incident.jsonl"));
    for f in files {
        assert_unchanged(&f);
    }
}

proptest! {
    #![proptest_config(config())]

    /// Generated logs of every shape, any seed: the empty candidate reproduces them.
    #[test]
    fn a_candidate_that_changes_nothing_reproduces_the_observed_run(seed in any::<u64>()) {
        let out = TempFile::reserve("generated.jsonl");
        let mut args = String::new();
        let _ = write!(args, "{seed}");
        run(&["generate", "--ops", "300", "--seed", &args, "--mix",
              "healthy=30,nested-retry=10,fan-out=10,redelivery=10,overlap=10,burst=20,over-budget=10",
              "--output", &out.path().display().to_string()]).expect_code(0);
        assert_unchanged(out.path());
    }
}

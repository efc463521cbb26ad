//! End-to-end tests of the CI gate (docs/ci.md, issue #3): the real binary with `--fail-on`,
//! `--policy`, `--report-only`, `--junit` and `--format json|markdown` on the fixtures
//! described in `fixtures/README.md`, asserting exit codes, stderr text, the decoded `gate`
//! object and the parsed JUnit XML.

mod common;

use std::collections::BTreeMap;
use std::ffi::OsStr;

use common::*;
use serde::Deserialize;

/// The committed policy that docs/ci.md walks through.
const POLICY: &str = "fixtures/policy/attempt-funnel.toml";
const INCIDENT: &str = "fixtures/incident.jsonl";
const HEALTHY: &str = "fixtures/classes/healthy.jsonl";
const NESTED: &str = "fixtures/classes/nested-retry.jsonl";
const OVERLAP: &str = "fixtures/classes/overlap.jsonl";
const BURST: &str = "fixtures/classes/synchronized-burst.jsonl";
const LOGFMT: &str = "fixtures/logfmt-trace.logfmt";
const LOOSE_ENDS: &str = "fixtures/gate/loose-ends.jsonl";
const BAD_LINES: &str = "fixtures/bad/bad-lines.jsonl";

/// The conditions of the committed policy, in its order.
const POLICY_CONDITIONS: [&str; 10] = [
    "nested-retry > 0",
    "overlap > 1%",
    "healthy < 95%",
    "retry-without-delay > 0",
    "retries@gateway > 10%",
    "amplification@dependency > 1.5",
    "retry-ratio > 0.5",
    "bursts > 0",
    "unfinished-attempts > 0",
    "duplicate-effects > 0",
];

/// The committed policy's conditions that the incident breaches.
const INCIDENT_BREACHES: [&str; 7] = [
    "nested-retry > 0",
    "overlap > 1%",
    "healthy < 95%",
    "retries@gateway > 10%",
    "amplification@dependency > 1.5",
    "retry-ratio > 0.5",
    "bursts > 0",
];

/// The `gate` object of `--format json` (docs/ci.md).
#[derive(Debug, Clone, Deserialize)]
struct Gate {
    passed: bool,
    report_only: bool,
    thresholds: Vec<Threshold>,
}

#[derive(Debug, Clone, Deserialize)]
struct Threshold {
    condition: String,
    origin: String,
    measured: f64,
    limit: f64,
    unit: String,
    hop: Option<String>,
    breached: bool,
    operations: u64,
    operation_ids: Vec<String>,
}

impl Gate {
    fn threshold(&self, condition: &str) -> &Threshold {
        self.thresholds
            .iter()
            .find(|t| t.condition == condition)
            .unwrap_or_else(|| panic!("no threshold {condition:?} in {self:#?}"))
    }

    fn conditions(&self) -> Vec<&str> {
        self.thresholds
            .iter()
            .map(|t| t.condition.as_str())
            .collect()
    }

    fn breached(&self) -> Vec<&str> {
        self.thresholds
            .iter()
            .filter(|t| t.breached)
            .map(|t| t.condition.as_str())
            .collect()
    }
}

/// Runs `analyze --format json ARGS` and decodes its `gate` object.
fn analyze_gate(args: &[&str]) -> (Run, Gate) {
    let mut all = vec!["--format", "json"];
    all.extend_from_slice(args);
    let run = analyze(&all);
    let summary = decode_summary_value(&run.stdout);
    let gate = serde_json::from_value(summary["gate"].clone())
        .unwrap_or_else(|e| panic!("no gate object ({e}) in\n{summary:#}"));
    (run, gate)
}

/// The stderr lines that report one threshold each (`  BREACHED …` and `  ok       …`).
fn threshold_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("  BREACHED ") || l.starts_with("  ok "))
        .collect()
}

/// Runs `analyze --format jsonl ARGS` whatever the exit code, and returns rows by ID.
fn rows_by_id(args: &[&str]) -> BTreeMap<String, OperationRow> {
    let mut all = vec!["--format", "jsonl"];
    all.extend_from_slice(args);
    let run = analyze(&all);
    assert!(
        run.code == 0 || run.code == 1,
        "exit {}: {}",
        run.code,
        run.stderr
    );
    by_id(decode_rows(&run.stdout))
}

fn assert_close(actual: f64, expected: f64, what: &str) {
    assert!(
        (actual - expected).abs() < 1e-9,
        "{what}: measured {actual}, expected {expected}"
    );
}

// ---------------------------------------------------------------------------------------
// Every kind of threshold, passing and breaching
// ---------------------------------------------------------------------------------------

/// One condition on one fixture, and what the gate must make of it.
struct Case {
    file: &'static str,
    condition: &'static str,
    breached: bool,
    measured: f64,
    unit: &'static str,
    /// The hop a per-hop metric was measured at.
    hop: Option<&'static str>,
    /// Operations behind the breach (0 when it holds).
    operations: u64,
    /// The text after the condition on its stderr line.
    message: &'static str,
}

const CASES: &[Case] = &[
    // A class, counted.
    Case {
        file: NESTED,
        condition: "nested-retry > 0",
        breached: true,
        measured: 3.0,
        unit: "operations",
        hop: None,
        operations: 3,
        message: "measured 3, limit 0; operations: n-2, n-3, n-1",
    },
    Case {
        file: HEALTHY,
        condition: "nested-retry > 0",
        breached: false,
        measured: 0.0,
        unit: "operations",
        hop: None,
        operations: 0,
        message: "measured 0, limit 0",
    },
    // A class, as a share of operations.
    Case {
        file: INCIDENT,
        condition: "overlap > 1%",
        breached: true,
        measured: 0.06,
        unit: "share",
        hop: None,
        operations: 24,
        message: "measured 6.00%, limit 1.00%; operations: run-3/op-000059, run-3/op-000091, run-3/op-000138, run-3/op-000140, run-3/op-000229 and 19 more",
    },
    Case {
        file: INCIDENT,
        condition: "overlap > 10%",
        breached: false,
        measured: 0.06,
        unit: "share",
        hop: None,
        operations: 0,
        message: "measured 6.00%, limit 10.00%",
    },
    // A floor on a class: breached by the operations outside it.
    Case {
        file: INCIDENT,
        condition: "healthy < 95%",
        breached: true,
        measured: 0.67,
        unit: "share",
        hop: None,
        operations: 132,
        message: "measured 67.00%, limit 95.00%; operations: run-3/op-000008, run-3/op-000030, run-3/op-000049, run-3/op-000077, run-3/op-000146 and 127 more",
    },
    Case {
        file: HEALTHY,
        condition: "healthy < 95%",
        breached: false,
        measured: 1.0,
        unit: "share",
        hop: None,
        operations: 0,
        message: "measured 100.00%, limit 95.00%",
    },
    // A finding at any hop.
    Case {
        file: LOOSE_ENDS,
        condition: "retry-without-delay > 0",
        breached: true,
        measured: 1.0,
        unit: "operations",
        hop: None,
        operations: 1,
        message: "measured 1, limit 0; operations: nightly-12/le-1",
    },
    Case {
        file: HEALTHY,
        condition: "retry-without-delay > 0",
        breached: false,
        measured: 0.0,
        unit: "operations",
        hop: None,
        operations: 0,
        message: "measured 0, limit 0",
    },
    // The limit itself: 2 of 5 operations retry, which is 40% and not more.
    Case {
        file: HEALTHY,
        condition: "retries >= 40%",
        breached: true,
        measured: 0.4,
        unit: "share",
        hop: None,
        operations: 2,
        message: "measured 40.00%, limit 40.00%; operations: run-a/h-4, run-a/h-3",
    },
    Case {
        file: HEALTHY,
        condition: "retries > 40%",
        breached: false,
        measured: 0.4,
        unit: "share",
        hop: None,
        operations: 0,
        message: "measured 40.00%, limit 40.00%",
    },
    // A finding at one hop.
    Case {
        file: INCIDENT,
        condition: "retries@gateway > 10%",
        breached: true,
        measured: 0.125,
        unit: "share",
        hop: None,
        operations: 50,
        message: "measured 12.50%, limit 10.00%; operations: run-3/op-000008, run-3/op-000030, run-3/op-000049, run-3/op-000077, run-3/op-000146 and 45 more",
    },
    Case {
        file: HEALTHY,
        condition: "retries@gateway > 10%",
        breached: false,
        measured: 0.0,
        unit: "share",
        hop: None,
        operations: 0,
        message: "measured 0.00%, limit 10.00%",
    },
    Case {
        file: LOOSE_ENDS,
        condition: "retry-after-not-honoured@caller > 0",
        breached: true,
        measured: 1.0,
        unit: "operations",
        hop: None,
        operations: 1,
        message: "measured 1, limit 0; operations: nightly-12/le-3",
    },
    // Amplification at a hop, and at the worst hop.
    Case {
        file: NESTED,
        condition: "amplification@dependency > 2.5",
        breached: true,
        measured: 13.0 / 3.0,
        unit: "ratio",
        hop: Some("dependency"),
        operations: 2,
        message: "measured 4.333 at dependency, limit 2.500; operations: n-2, n-3",
    },
    Case {
        file: HEALTHY,
        condition: "amplification@dependency > 2.5",
        breached: false,
        measured: 0.8,
        unit: "ratio",
        hop: Some("dependency"),
        operations: 0,
        message: "measured 0.800 at dependency, limit 2.500",
    },
    Case {
        file: NESTED,
        condition: "amplification > 2.5",
        breached: true,
        measured: 13.0 / 3.0,
        unit: "ratio",
        hop: Some("dependency"),
        operations: 2,
        message: "measured 4.333 at dependency, limit 2.500; operations: n-2, n-3",
    },
    // Retries and redeliveries per original: the worst hop is the consumer's redeliveries.
    Case {
        file: INCIDENT,
        condition: "retry-ratio > 0.5",
        breached: true,
        measured: 1.5,
        unit: "ratio",
        hop: Some("consumer"),
        operations: 24,
        message: "measured 1.500 at consumer, limit 0.500; operations: run-3/op-000019, run-3/op-000061, run-3/op-000086, run-3/op-000119, run-3/op-000135 and 19 more",
    },
    Case {
        file: INCIDENT,
        condition: "retry-ratio@gateway > 0.5",
        breached: false,
        measured: 150.0 / 463.0,
        unit: "ratio",
        hop: Some("gateway"),
        operations: 0,
        message: "measured 0.324 at gateway, limit 0.500",
    },
    Case {
        file: HEALTHY,
        condition: "retry-ratio > 0.5",
        breached: false,
        measured: 0.4,
        unit: "ratio",
        hop: Some("caller"),
        operations: 0,
        message: "measured 0.400 at caller, limit 0.500",
    },
    // Bursts.
    Case {
        file: BURST,
        condition: "bursts > 0",
        breached: true,
        measured: 1.0,
        unit: "count",
        hop: None,
        operations: 10,
        message: "measured 1, limit 0; operations: s-01, s-02, s-03, s-04, s-05 and 5 more",
    },
    Case {
        file: HEALTHY,
        condition: "bursts > 0",
        breached: false,
        measured: 0.0,
        unit: "count",
        hop: None,
        operations: 0,
        message: "measured 0, limit 0",
    },
    // Unfinished attempts: The logfmt trace's leaves caller attempt 2 in flight.
    Case {
        file: LOGFMT,
        condition: "unfinished-attempts > 0",
        breached: true,
        measured: 1.0,
        unit: "count",
        hop: None,
        operations: 1,
        message: "measured 1, limit 0; operations: op-17",
    },
    Case {
        file: HEALTHY,
        condition: "unfinished-attempts > 0",
        breached: false,
        measured: 0.0,
        unit: "count",
        hop: None,
        operations: 0,
        message: "measured 0, limit 0",
    },
    // Duplicate side effects: each extra effect in a line counts (1 in le-1, 2 in le-2).
    Case {
        file: LOOSE_ENDS,
        condition: "duplicate-effects > 0",
        breached: true,
        measured: 3.0,
        unit: "count",
        hop: None,
        operations: 2,
        message: "measured 3, limit 0; operations: nightly-12/le-2, nightly-12/le-1",
    },
    Case {
        file: LOOSE_ENDS,
        condition: "duplicate-effects > 3",
        breached: false,
        measured: 3.0,
        unit: "count",
        hop: None,
        operations: 0,
        message: "measured 3, limit 3",
    },
    // Orphan attempts.
    Case {
        file: LOOSE_ENDS,
        condition: "orphan-attempts > 0",
        breached: true,
        measured: 1.0,
        unit: "count",
        hop: None,
        operations: 1,
        message: "measured 1, limit 0; operations: nightly-12/le-6",
    },
    Case {
        file: HEALTHY,
        condition: "orphan-attempts > 0",
        breached: false,
        measured: 0.0,
        unit: "count",
        hop: None,
        operations: 0,
        message: "measured 0, limit 0",
    },
];

#[test]
fn every_kind_of_threshold_passes_and_breaches_with_its_measured_value() {
    let kinds_breached: Vec<&str> = CASES
        .iter()
        .filter(|c| c.breached)
        .map(|c| c.condition)
        .collect();
    let kinds_passed: Vec<&str> = CASES
        .iter()
        .filter(|c| !c.breached)
        .map(|c| c.condition)
        .collect();
    // Every metric of the grammar appears on both sides.
    for metric in [
        "nested-retry",
        "overlap",
        "healthy",
        "retry-without-delay",
        "retries@gateway",
        "amplification@dependency",
        "retry-ratio",
        "bursts",
        "unfinished-attempts",
        "duplicate-effects",
        "orphan-attempts",
    ] {
        let starts = |c: &&str| c.starts_with(&format!("{metric} "));
        assert!(
            kinds_breached.iter().any(starts),
            "no breaching case for {metric}"
        );
        assert!(
            kinds_passed.iter().any(starts),
            "no passing case for {metric}"
        );
    }

    for case in CASES {
        let what = format!("{} on {}", case.condition, case.file);
        let (run, gate) = analyze_gate(&["--fail-on", case.condition, case.file]);
        run.expect_code(if case.breached { 1 } else { 0 });
        assert_eq!(gate.passed, !case.breached, "{what}");
        assert!(!gate.report_only, "{what}");
        assert_eq!(gate.thresholds.len(), 1, "{what}");
        let t = &gate.thresholds[0];
        assert_eq!(t.condition, case.condition, "{what}");
        assert_eq!(t.origin, "flag", "{what}");
        assert_eq!(t.breached, case.breached, "{what}");
        assert_close(t.measured, case.measured, &what);
        assert_eq!(t.unit, case.unit, "{what}");
        assert_eq!(t.hop.as_deref(), case.hop, "{what}");
        assert_eq!(t.operations, case.operations, "{what}");
        assert_eq!(
            t.operation_ids.len() as u64,
            case.operations.min(5),
            "{what}: the first five operations are listed"
        );

        let verdict = if case.breached {
            "attempt-funnel: gate FAILED: 1 of 1 threshold breached"
        } else {
            "attempt-funnel: gate passed: 1 threshold within its limit"
        };
        let line = if case.breached {
            format!("  BREACHED {}: {}", case.condition, case.message)
        } else {
            format!("  ok       {}: {}", case.condition, case.message)
        };
        assert_eq!(
            threshold_lines(&run.stderr),
            vec![line.as_str()],
            "{what}:\n{}",
            run.stderr
        );
        assert!(run.stderr.contains(verdict), "{what}:\n{}", run.stderr);
    }
}

#[test]
fn a_percentage_limit_is_compared_as_a_share_and_a_plain_one_as_a_count() {
    // 24 of 400 incident operations are overlap: 6%, and 24.
    let (run, gate) = analyze_gate(&[
        "--fail-on",
        "overlap > 7%",
        "--fail-on",
        "overlap > 7",
        INCIDENT,
    ]);
    run.expect_code(1);
    assert_eq!(gate.breached(), vec!["overlap > 7"]);
    assert_eq!(gate.threshold("overlap > 7%").unit, "share");
    assert_eq!(gate.threshold("overlap > 7").unit, "operations");
    assert_close(gate.threshold("overlap > 7").measured, 24.0, "count");
}

#[test]
fn a_bare_class_name_is_the_class_and_name_at_hop_is_the_finding() {
    // o-1 is overlap at the dependency, o-2 and o-3 at the gateway; all three are class overlap.
    let (run, gate) = analyze_gate(&[
        "--fail-on",
        "overlap > 2",
        "--fail-on",
        "overlap@gateway > 1",
        "--fail-on",
        "overlap@dependency > 1",
        OVERLAP,
    ]);
    run.expect_code(1);
    assert_close(gate.threshold("overlap > 2").measured, 3.0, "class");
    assert_close(
        gate.threshold("overlap@gateway > 1").measured,
        2.0,
        "finding at gateway",
    );
    assert_close(
        gate.threshold("overlap@dependency > 1").measured,
        1.0,
        "finding at dependency",
    );
    assert_eq!(gate.breached(), vec!["overlap > 2", "overlap@gateway > 1"]);
    assert_eq!(
        gate.threshold("overlap@gateway > 1").operation_ids,
        vec!["o-2", "o-3"]
    );
}

// ---------------------------------------------------------------------------------------
// Exit codes
// ---------------------------------------------------------------------------------------

#[test]
fn the_committed_policy_passes_a_healthy_load_test_with_exit_0() {
    let (run, gate) = analyze_gate(&["--policy", POLICY, HEALTHY]);
    run.expect_code(0);
    assert!(gate.passed);
    assert_eq!(gate.conditions(), POLICY_CONDITIONS.to_vec());
    assert!(gate.thresholds.iter().all(|t| t.origin == "policy"));
    assert!(
        run.stderr
            .starts_with("attempt-funnel: gate passed: 10 thresholds within limits\n"),
        "{}",
        run.stderr
    );
    assert_eq!(threshold_lines(&run.stderr).len(), 10);
    assert!(threshold_lines(&run.stderr)
        .iter()
        .all(|l| l.starts_with("  ok ")));
}

#[test]
fn the_committed_policy_fails_the_incident_with_exit_1() {
    let (run, gate) = analyze_gate(&["--policy", POLICY, INCIDENT]);
    run.expect_code(1);
    assert!(!gate.passed);
    assert_eq!(gate.breached(), INCIDENT_BREACHES.to_vec());
    assert!(
        run.stderr
            .starts_with("attempt-funnel: gate FAILED: 7 of 10 thresholds breached\n"),
        "{}",
        run.stderr
    );
    // The report is still written, in full, to stdout.
    let summary = decode_summary(&run.stdout);
    assert_eq!(summary.operations, 400);
}

#[test]
fn a_malformed_condition_is_a_usage_error_that_names_the_token_and_shows_an_example() {
    let cases = [
        ("overlap >> 1%", "unknown operator '>>'"),
        (
            "overlap > lots",
            "limit 'lots' is not a number or percentage",
        ),
        ("overlaps > 1", "unknown metric 'overlaps'"),
        (
            "retries@cache > 0",
            "unknown hop 'cache'; known hops are caller, gateway, consumer, dependency",
        ),
        ("nested-retry@gateway > 0", "'nested-retry' is a class"),
        ("bursts@caller > 0", "'bursts' is not measured per hop"),
        (
            "amplification > 10%",
            "takes a plain number, not a percentage",
        ),
        (
            "healthy < 150%",
            "limit '150%' is more than 100% of operations",
        ),
        ("overlap > -1", "limit '-1' is negative"),
        ("overlap", "has no comparison"),
        ("> 3", "no metric before the operator"),
    ];
    for (condition, expected) in cases {
        let run = analyze(&["--fail-on", condition, HEALTHY]);
        run.expect_code(2).expect_no_crash(condition);
        assert!(run.stdout.is_empty(), "{condition}: a report was written");
        assert!(
            run.stderr.starts_with("attempt-funnel: in --fail-on: "),
            "{condition}: {}",
            run.stderr
        );
        assert!(
            run.stderr.contains(&format!("'{condition}'")),
            "{condition}: the condition is not quoted: {}",
            run.stderr
        );
        assert!(run.stderr.contains(expected), "{condition}: {}", run.stderr);
        assert!(
            run.stderr.contains("--fail-on 'nested-retry > 0'")
                || run
                    .stderr
                    .contains("--fail-on 'amplification@dependency > 2.5'"),
            "{condition}: no valid example: {}",
            run.stderr
        );
    }
}

/// Runs `analyze --policy FILE` on the healthy fixture with a policy of `text`.
fn run_policy(text: &str) -> (Run, TempFile) {
    let policy = TempFile::new("policy.toml", text.as_bytes());
    let run = analyze(&[
        OsStr::new("--policy"),
        policy.path().as_os_str(),
        OsStr::new(HEALTHY),
    ]);
    (run, policy)
}

#[test]
fn a_malformed_policy_is_a_usage_error_that_names_the_key_and_shows_an_example() {
    let cases = [
        // An unknown key: a flag's spelling.
        (
            "fail-on = [\"nested-retry > 0\"]\n",
            "unknown field `fail-on`",
        ),
        ("[budget]\ngateway = 2\n", "unknown field `budget`"),
        ("[burst]\nwindow = 50\n", "unknown field `window`"),
        // A wrong type.
        ("[budgets]\ngateway = \"two\"\n", "gateway = \"two\""),
        (
            "fail_on = \"nested-retry > 0\"\n",
            "fail_on = \"nested-retry > 0\"",
        ),
        (
            "allow_overlap = \"gateway\"\n",
            "allow_overlap = \"gateway\"",
        ),
        // Not TOML.
        (
            "fail_on = [nested-retry > 0]\n",
            "fail_on = [nested-retry > 0]",
        ),
        ("[budgets\ngateway = 2\n", "[budgets"),
        // Values out of range, or naming a hop that is not in the hop order.
        ("[budgets]\ngateway = 0\n", "budgets.gateway = 0"),
        (
            "[budgets]\ncache = 2\n",
            "budgets names unknown hop \"cache\"",
        ),
        (
            "allow_overlap = [\"cache\"]\n",
            "allow_overlap names unknown hop \"cache\"",
        ),
        (
            "queue_hops = [\"cache\"]\n",
            "queue_hops names unknown hop \"cache\"",
        ),
        ("hops = []\n", "hops = []"),
        ("[burst]\nwindow_ms = -5\n", "burst.window_ms = -5"),
        ("[burst]\nmin_ops = 1\n", "burst.min_ops = 1"),
    ];
    for (text, expected) in cases {
        let (run, policy) = run_policy(text);
        run.expect_code(2).expect_no_crash(text);
        assert!(run.stdout.is_empty(), "{text}: a report was written");
        let prefix = format!(
            "attempt-funnel: invalid policy '{}': ",
            policy.path().display()
        );
        assert!(run.stderr.starts_with(&prefix), "{text}: {}", run.stderr);
        assert!(run.stderr.contains(expected), "{text}: {}", run.stderr);
        assert!(
            run.stderr
                .contains("A valid policy looks like this (see docs/ci.md):\nfail_on = ["),
            "{text}: no example: {}",
            run.stderr
        );
    }
}

#[test]
fn a_malformed_condition_in_the_policy_names_the_policy_the_key_and_the_token() {
    let (run, policy) = run_policy("fail_on = [\"nested-retry > 0\", \"overlap >> 1%\"]\n");
    run.expect_code(2);
    let expected = format!(
        "attempt-funnel: invalid policy '{}': fail_on: condition 'overlap >> 1%': unknown operator '>>'",
        policy.path().display()
    );
    assert!(run.stderr.starts_with(&expected), "{}", run.stderr);
    assert!(
        run.stderr.contains("--fail-on 'nested-retry > 0'"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_missing_policy_file_is_an_error_naming_it() {
    let run = analyze(&["--policy", "fixtures/policy/missing.toml", HEALTHY]);
    run.expect_code(2);
    assert!(
        run.stderr
            .starts_with("attempt-funnel: could not read policy 'fixtures/policy/missing.toml'"),
        "{}",
        run.stderr
    );
}

#[test]
fn the_committed_policy_and_the_documented_example_are_valid() {
    // Without conditions of its own the example policy gates nothing; it must still parse.
    let example = "fail_on = [\"nested-retry > 0\", \"overlap > 1%\"]\nallow_overlap = [\"dependency\"]\n[budgets]\ngateway = 2\n";
    let (run, _policy) = run_policy(example);
    run.expect_code(0);
    let run = analyze(&["--policy", POLICY, "--format", "jsonl", HEALTHY]);
    run.expect_code(0);
}

// ---------------------------------------------------------------------------------------
// --report-only
// ---------------------------------------------------------------------------------------

#[test]
fn report_only_prints_the_same_breaches_and_exits_0() {
    let enforced = analyze(&["--policy", POLICY, "--format", "jsonl", INCIDENT]);
    enforced.expect_code(1);
    let (rolled_out, gate) = analyze_gate(&["--policy", POLICY, "--report-only", INCIDENT]);
    rolled_out.expect_code(0);
    assert!(!gate.passed);
    assert!(gate.report_only);
    assert_eq!(gate.breached(), INCIDENT_BREACHES.to_vec());
    assert_eq!(
        threshold_lines(&rolled_out.stderr),
        threshold_lines(&enforced.stderr)
    );
    assert!(
        rolled_out.stderr.starts_with(
            "attempt-funnel: gate would fail: 7 of 10 thresholds breached (--report-only: not failing)\n"
        ),
        "{}",
        rolled_out.stderr
    );
}

#[test]
fn report_only_does_not_hide_an_input_error() {
    let run = analyze(&[
        "--fail-on",
        "nested-retry > 0",
        "--report-only",
        "--format",
        "jsonl",
        BAD_LINES,
        NESTED,
    ]);
    run.expect_code(2);
}

// ---------------------------------------------------------------------------------------
// Flags and the policy
// ---------------------------------------------------------------------------------------

#[test]
fn a_flag_replaces_the_policy_condition_on_the_same_metric() {
    let (run, gate) = analyze_gate(&[
        "--policy",
        POLICY,
        "--fail-on",
        "healthy < 60%",
        "--fail-on",
        "overlap > 5",
        INCIDENT,
    ]);
    run.expect_code(1);
    let conditions = gate.conditions();
    assert_eq!(conditions.len(), 10, "{conditions:?}");
    assert!(!conditions.contains(&"healthy < 95%"), "{conditions:?}");
    assert!(!conditions.contains(&"overlap > 1%"), "{conditions:?}");
    let healthy = gate.threshold("healthy < 60%");
    assert_eq!(healthy.origin, "flag");
    assert!(!healthy.breached, "66.75% healthy is not below 60%");
    let overlap = gate.threshold("overlap > 5");
    assert_eq!(overlap.origin, "flag");
    assert!(overlap.breached);
    // The other eight stay as the policy says.
    assert_eq!(
        gate.thresholds
            .iter()
            .filter(|t| t.origin == "policy")
            .count(),
        8
    );
    assert_eq!(gate.threshold("nested-retry > 0").origin, "policy");
}

#[test]
fn flags_can_relax_every_breached_policy_condition_to_a_pass() {
    // Under the policy, overlap.jsonl breaches three conditions (o-1 overlaps at the
    // dependency; o-1 and o-3 retry at the gateway).
    let (run, gate) = analyze_gate(&["--policy", POLICY, OVERLAP]);
    run.expect_code(1);
    assert_eq!(
        gate.breached(),
        vec!["overlap > 1%", "healthy < 95%", "retries@gateway > 10%"]
    );
    let (run, gate) = analyze_gate(&[
        "--policy",
        POLICY,
        "--fail-on",
        "overlap > 50%",
        "--fail-on",
        "healthy < 50%",
        "--fail-on",
        "retries@gateway > 70%",
        OVERLAP,
    ]);
    run.expect_code(0);
    assert!(gate.passed);
    assert_eq!(gate.thresholds.len(), 10);
}

#[test]
fn the_policy_budgets_change_classes_and_a_budget_flag_overrides_them() {
    // Without a policy, h-4's caller line of 3 is exactly the default budget.
    let plain = rows_by_id(&[HEALTHY]);
    assert_eq!(plain["run-a/h-4"].class, "healthy");

    let policy = TempFile::new("budgets.toml", b"[budgets]\ncaller = 2\n");
    let policy_path = policy.path().to_str().expect("UTF-8 temp path");
    let tight = rows_by_id(&["--policy", policy_path, HEALTHY]);
    assert_eq!(tight["run-a/h-4"].class, "over-budget");
    assert!(tight["run-a/h-4"].has_finding("over-budget@caller"));
    assert_eq!(tight["run-a/h-3"].class, "healthy");

    let relaxed = rows_by_id(&["--policy", policy_path, "--budget", "caller=3", HEALTHY]);
    assert_eq!(relaxed["run-a/h-4"].class, "healthy");

    // The committed policy allows 2 dependency attempts: le-2's 3 are over budget.
    let committed = rows_by_id(&["--policy", POLICY, LOOSE_ENDS]);
    assert_eq!(committed["nightly-12/le-2"].class, "over-budget");
    let summary =
        decode_summary(&analyze(&["--policy", POLICY, "--format", "json", LOOSE_ENDS]).stdout);
    let dependency = summary.hops.iter().find(|h| h.hop == "dependency").unwrap();
    assert_eq!(dependency.budget, 2);
}

#[test]
fn the_policy_allow_overlap_changes_classes_and_the_flag_adds_hops() {
    let plain = rows_by_id(&[OVERLAP]);
    for id in ["o-1", "o-2", "o-3"] {
        assert_eq!(plain[id].class, "overlap", "{id}");
    }
    // The committed policy allows overlap at the gateway (hedged reads).
    let policy = rows_by_id(&["--policy", POLICY, OVERLAP]);
    assert_eq!(policy["o-1"].class, "overlap");
    assert!(policy["o-1"].has_finding("overlap@dependency"));
    for id in ["o-2", "o-3"] {
        assert_eq!(policy[id].class, "healthy", "{id}");
        assert!(!policy[id].has_finding("overlap@gateway"), "{id}");
        assert_eq!(policy[id].overlap_ms, 0.0, "{id}");
    }
    // --allow-overlap adds to the policy's hops.
    let both = rows_by_id(&["--policy", POLICY, "--allow-overlap", "dependency", OVERLAP]);
    for id in ["o-1", "o-2", "o-3"] {
        assert_eq!(both[id].class, "healthy", "{id}");
    }
}

#[test]
fn the_policy_hops_are_the_hop_order_unless_the_flag_sets_another() {
    let policy = TempFile::new(
        "hops.toml",
        b"hops = [\"caller\", \"gateway\", \"dependency\"]\nfail_on = [\"retries@dependency > 0\"]\n",
    );
    let path = policy.path().to_str().unwrap();
    let (run, gate) = analyze_gate(&["--policy", path, HEALTHY]);
    run.expect_code(1);
    assert_eq!(
        gate.threshold("retries@dependency > 0").operation_ids,
        vec!["run-a/h-3"]
    );
    // A condition naming a hop outside the order in force is a usage error.
    let run = analyze(&["--policy", path, "--hops", "caller,gateway", HEALTHY]);
    run.expect_code(2);
    assert!(
        run.stderr
            .contains("unknown hop 'dependency'; known hops are caller, gateway"),
        "{}",
        run.stderr
    );
}

// ---------------------------------------------------------------------------------------
// What a breach says
// ---------------------------------------------------------------------------------------

#[test]
fn a_breach_lists_the_measured_value_the_limit_and_the_worst_operations_then_a_count() {
    let run = analyze(&[
        "--fail-on",
        "nested-retry > 0",
        "--format",
        "jsonl",
        INCIDENT,
    ]);
    run.expect_code(1);
    // The operations of the class, most attempts first, then by ID.
    let mut nested: Vec<OperationRow> = decode_rows(&run.stdout)
        .into_iter()
        .filter(|r| r.class == "nested-retry")
        .collect();
    assert_eq!(nested.len(), 22);
    nested.sort_by(|a, b| {
        b.total_attempts
            .cmp(&a.total_attempts)
            .then_with(|| (&a.test_run_id, &a.operation_id).cmp(&(&b.test_run_id, &b.operation_id)))
    });
    let first: Vec<String> = nested.iter().take(5).map(OperationRow::id).collect();
    let expected = format!(
        "  BREACHED nested-retry > 0: measured 22, limit 0; operations: {} and 17 more",
        first.join(", ")
    );
    assert_eq!(threshold_lines(&run.stderr), vec![expected.as_str()]);
}

#[test]
fn a_floor_on_a_class_lists_the_operations_outside_it() {
    let (run, gate) = analyze_gate(&["--fail-on", "healthy < 100%", LOOSE_ENDS, NESTED]);
    run.expect_code(1);
    let t = gate.threshold("healthy < 100%");
    assert_eq!(t.operations, 3);
    let mut ids = t.operation_ids.clone();
    ids.sort();
    assert_eq!(ids, vec!["n-1", "n-2", "n-3"]);
}

#[test]
fn a_breach_without_operations_to_blame_ends_after_the_limit() {
    // A floor on amplification is breached by retries that did not happen.
    let run = analyze(&[
        "--fail-on",
        "amplification@caller < 1.5",
        "--format",
        "jsonl",
        HEALTHY,
    ]);
    run.expect_code(1);
    assert_eq!(
        threshold_lines(&run.stderr),
        vec!["  BREACHED amplification@caller < 1.5: measured 1.400 at caller, limit 1.500"]
    );
}

// ---------------------------------------------------------------------------------------
// Bad input and the gate
// ---------------------------------------------------------------------------------------

#[test]
fn bad_input_with_a_breach_exits_2_because_the_input_error_outranks_it() {
    let run = analyze(&[
        "--fail-on",
        "nested-retry > 0",
        "--format",
        "jsonl",
        BAD_LINES,
        NESTED,
    ]);
    run.expect_code(2);
    // Both are reported: the breach, and the bad lines.
    assert!(
        run.stderr
            .contains("  BREACHED nested-retry > 0: measured 3, limit 0"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(&format!("{BAD_LINES}:3:")),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("7 bad input lines"), "{}", run.stderr);
}

#[test]
fn bad_input_with_skip_invalid_keeps_the_breach_exit_1() {
    let run = analyze(&[
        "--fail-on",
        "nested-retry > 0",
        "--skip-invalid",
        "--format",
        "jsonl",
        BAD_LINES,
        NESTED,
    ]);
    run.expect_code(1);
    assert!(
        run.stderr.contains("skipped 7 bad input lines"),
        "{}",
        run.stderr
    );
    let run = analyze(&[
        "--fail-on",
        "nested-retry > 0",
        "--skip-invalid",
        "--format",
        "jsonl",
        BAD_LINES,
        HEALTHY,
    ]);
    run.expect_code(0);
}

#[test]
fn bad_input_with_strict_stops_before_the_gate_with_exit_2() {
    let run = analyze(&[
        "--fail-on",
        "nested-retry > 0",
        "--strict",
        NESTED,
        BAD_LINES,
    ]);
    run.expect_code(2);
    assert!(!run.stderr.contains("gate"), "{}", run.stderr);
}

// ---------------------------------------------------------------------------------------
// JUnit XML
// ---------------------------------------------------------------------------------------

/// A JUnit file as CI systems read it.
#[derive(Debug)]
struct Junit {
    /// Attributes of `<testsuites>` and of its one `<testsuite>`.
    suites: BTreeMap<String, String>,
    suite: BTreeMap<String, String>,
    cases: Vec<JunitCase>,
}

#[derive(Debug)]
struct JunitCase {
    name: String,
    classname: String,
    /// `message` attribute and text of `<failure>`, when it failed.
    failure: Option<(String, String)>,
}

fn attrs(node: roxmltree::Node) -> BTreeMap<String, String> {
    node.attributes()
        .map(|a| (a.name().to_string(), a.value().to_string()))
        .collect()
}

fn parse_junit(xml: &str) -> Junit {
    let doc = roxmltree::Document::parse(xml).unwrap_or_else(|e| panic!("not XML ({e}):\n{xml}"));
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "testsuites");
    let suites: Vec<_> = root
        .children()
        .filter(|n| n.has_tag_name("testsuite"))
        .collect();
    assert_eq!(suites.len(), 1, "{xml}");
    let suite = suites[0];
    let cases = suite
        .children()
        .filter(|n| n.is_element())
        .map(|case| {
            assert!(case.has_tag_name("testcase"), "{xml}");
            let failure = case
                .children()
                .find(|n| n.has_tag_name("failure"))
                .map(|f| {
                    (
                        f.attribute("message").unwrap_or_default().to_string(),
                        f.text().unwrap_or_default().to_string(),
                    )
                });
            JunitCase {
                name: case.attribute("name").unwrap_or_default().to_string(),
                classname: case.attribute("classname").unwrap_or_default().to_string(),
                failure,
            }
        })
        .collect();
    Junit {
        suites: attrs(root),
        suite: attrs(suite),
        cases,
    }
}

fn run_junit(args: &[&str]) -> (Run, Junit) {
    let out = TempFile::reserve("gate.xml");
    let mut all = vec!["--junit", out.path().to_str().unwrap(), "--format", "json"];
    all.extend_from_slice(args);
    let run = analyze(&all);
    let xml = std::fs::read_to_string(out.path())
        .unwrap_or_else(|e| panic!("no JUnit file ({e}):\n{}", run.stderr));
    (run, parse_junit(&xml))
}

#[test]
fn junit_has_one_testcase_per_threshold_with_failures_carrying_the_message() {
    let (run, junit) = run_junit(&["--policy", POLICY, INCIDENT]);
    run.expect_code(1);
    let gate: Gate =
        serde_json::from_value(decode_summary_value(&run.stdout)["gate"].clone()).unwrap();

    for attrs in [&junit.suites, &junit.suite] {
        assert_eq!(attrs["tests"], "10", "{attrs:?}");
        assert_eq!(attrs["failures"], "7", "{attrs:?}");
        assert_eq!(attrs["errors"], "0", "{attrs:?}");
    }
    let names: Vec<&str> = junit.cases.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, POLICY_CONDITIONS.to_vec());
    for (case, threshold) in junit.cases.iter().zip(&gate.thresholds) {
        assert_eq!(case.classname, "attempt-funnel.gate");
        assert_eq!(case.failure.is_some(), threshold.breached, "{}", case.name);
        // Each failure carries the same message as the stderr line.
        if let Some((message, text)) = &case.failure {
            let line = threshold_lines(&run.stderr)
                .into_iter()
                .find(|l| l.starts_with(&format!("  BREACHED {}: ", case.name)))
                .unwrap();
            let (head, operations) = line
                .trim_start_matches("  BREACHED ")
                .split_once("; operations: ")
                .unwrap();
            assert_eq!(message, head);
            assert_eq!(text, &format!("{head}\noperations: {operations}"));
        }
    }
    let nested = &junit.cases[0].failure.as_ref().unwrap().0;
    assert_eq!(nested, "nested-retry > 0: measured 22, limit 0");
    // `<` and `%` survive the XML escaping.
    assert_eq!(
        junit.cases[2].failure.as_ref().unwrap().0,
        "healthy < 95%: measured 66.75%, limit 95.00%"
    );
}

#[test]
fn junit_of_a_passing_gate_has_no_failures() {
    let (run, junit) = run_junit(&["--policy", POLICY, HEALTHY]);
    run.expect_code(0);
    assert_eq!(junit.suite["tests"], "10");
    assert_eq!(junit.suite["failures"], "0");
    assert_eq!(junit.cases.len(), 10);
    assert!(junit.cases.iter().all(|c| c.failure.is_none()));
}

#[test]
fn junit_under_report_only_still_records_the_failures() {
    let (run, junit) = run_junit(&["--policy", POLICY, "--report-only", INCIDENT]);
    run.expect_code(0);
    assert_eq!(junit.suite["failures"], "7");
}

#[test]
fn junit_is_written_without_conditions_so_the_upload_step_finds_it() {
    let (run, junit) = run_junit(&[HEALTHY]);
    run.expect_code(0);
    assert_eq!(junit.suite["tests"], "0");
    assert!(junit.cases.is_empty());
    assert!(
        run.stderr.contains("--junit: no failure conditions"),
        "{}",
        run.stderr
    );
}

// ---------------------------------------------------------------------------------------
// Reports
// ---------------------------------------------------------------------------------------

#[test]
fn json_carries_the_gate_object_only_when_there_are_conditions() {
    let run = analyze(&["--format", "json", HEALTHY]);
    run.expect_code(0);
    let summary = decode_summary_value(&run.stdout);
    assert!(summary.get("gate").is_none(), "{summary:#}");

    let (_, gate) = analyze_gate(&["--policy", POLICY, INCIDENT]);
    let t = gate.threshold("amplification@dependency > 1.5");
    assert_eq!(t.origin, "policy");
    assert_eq!(t.unit, "ratio");
    assert_eq!(t.hop.as_deref(), Some("dependency"));
    assert_close(t.limit, 1.5, "limit");
    assert!(t.breached);
    // Shares are fractions in JSON, as in the classes table.
    assert_close(gate.threshold("overlap > 1%").limit, 0.01, "share limit");
}

#[test]
fn markdown_puts_the_gate_table_first_and_stays_small_enough_for_a_job_summary() {
    let run = analyze(&["--policy", POLICY, "--format", "markdown", INCIDENT]);
    run.expect_code(1);
    let md = run.stdout_text();
    // GitHub caps a job summary at 1 MiB; a useful one fits on a screen or two.
    assert!(md.len() < 8 * 1024, "{} bytes:\n{md}", md.len());
    let gate_at = md.find("\n### Gate: FAILED\n").expect("gate section");
    let funnel_at = md.find("\n### Funnel per hop\n").expect("funnel section");
    assert!(gate_at < funnel_at, "the gate comes first");
    assert!(
        md.contains("| result | condition | measured | operations |\n| --- | --- | --- | --- |\n")
    );
    let rows: Vec<&str> = md[gate_at..funnel_at]
        .lines()
        .filter(|l| l.starts_with("| BREACHED |") || l.starts_with("| ok |"))
        .collect();
    assert_eq!(rows.len(), 10, "{md}");
    assert!(md.contains(
        "| BREACHED | nested-retry \\> 0 | measured 22, limit 0 | run-3/op-000008, run-3/op-000030, run-3/op-000049, run-3/op-000077, run-3/op-000146 and 17 more |"
    ), "{md}");
    assert!(
        md.contains("| ok | unfinished-attempts \\> 0 | measured 0, limit 0 |"),
        "{md}"
    );

    let run = analyze(&[
        "--policy",
        POLICY,
        "--report-only",
        "--format",
        "markdown",
        INCIDENT,
    ]);
    run.expect_code(0);
    assert!(run
        .stdout_text()
        .contains("\n### Gate: would fail (report only)\n"));
    let run = analyze(&["--policy", POLICY, "--format", "markdown", HEALTHY]);
    run.expect_code(0);
    assert!(run.stdout_text().contains("\n### Gate: passed\n"));
}

// ---------------------------------------------------------------------------------------
// The documentation
// ---------------------------------------------------------------------------------------

#[test]
fn the_gate_output_shown_in_docs_ci_md_is_what_the_binary_prints() {
    let doc = std::fs::read_to_string(root().join("docs/ci.md")).expect("docs/ci.md");
    let prompt = "$ attempt-funnel analyze --policy fixtures/";
    let mut checked = 0;
    for block in doc.split("```console\n").skip(1) {
        let block = &block[..block.find("```").expect("closed block")];
        let mut lines = block.lines();
        let Some(command) = lines.next().filter(|l| l.starts_with(prompt)) else {
            continue;
        };
        // Files the command writes go to a temporary directory instead.
        let outputs: Vec<TempFile> = (0..2).map(|_| TempFile::reserve("doc-output")).collect();
        let mut args: Vec<String> = Vec::new();
        let mut words = command.trim_start_matches("$ attempt-funnel ").split(' ');
        while let Some(word) = words.next() {
            args.push(word.to_string());
            if word == "--output" || word == "--junit" {
                words.next();
                let out = &outputs[usize::from(word == "--junit")];
                args.push(out.path().to_str().unwrap().to_string());
            }
        }
        let shown: Vec<&str> = lines.by_ref().take_while(|l| *l != "$ echo $?").collect();
        let code: i32 = lines.next().expect("exit code").parse().expect("a number");
        let run = run(&args);
        run.expect_code(code);
        let printed: Vec<&str> = run.stderr.lines().collect();
        assert_eq!(printed, shown, "docs/ci.md: {command}");
        checked += 1;
    }
    assert_eq!(checked, 2, "the passing and the failing example");
}

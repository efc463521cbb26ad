//! Tools' logs read as they are (#15): `--preset envoy|istio|k6` on fixtures written from
//! the tools' documented formats, classified end to end by the real binary, and the
//! cookbook of docs/input.md ("My logs look like this"), each example run with its
//! documented command.

mod common;

use std::collections::BTreeMap;

use common::*;

/// Runs `analyze --format jsonl` with `args`, expecting exit 0; the rows by operation ID
/// (`run/op` where the operation has a test run) and stderr.
fn rows(args: &[&str]) -> (BTreeMap<String, OperationRow>, String) {
    let mut all = vec!["--format", "jsonl"];
    all.extend_from_slice(args);
    let run = analyze(&all);
    run.expect_code(0);
    (by_id(decode_rows(&run.stdout)), run.stderr)
}

/// An operation's ID, class, and attempts per hop.
type Classified = (String, String, Vec<(String, u64)>);

/// An expected operation: ID, class, attempts per hop.
type Expected<'a> = (&'a str, &'a str, &'a [(&'a str, u64)]);

/// Each operation's class, and its attempts per hop.
fn classes(rows: &BTreeMap<String, OperationRow>) -> Vec<Classified> {
    rows.iter()
        .map(|(id, r)| {
            let attempts = r.attempts.iter().map(|(h, n)| (h.clone(), *n)).collect();
            (id.clone(), r.class.clone(), attempts)
        })
        .collect()
}

fn expect(got: &BTreeMap<String, OperationRow>, want: &[Expected]) {
    let want: Vec<Classified> = want
        .iter()
        .map(|(id, class, attempts)| {
            (
                id.to_string(),
                class.to_string(),
                attempts.iter().map(|(h, n)| (h.to_string(), *n)).collect(),
            )
        })
        .collect();
    assert_eq!(classes(got), want);
}

const ENVOY: &str = "fixtures/presets/envoy.jsonl";
const K6: &str = "fixtures/presets/k6.json";
const WAVE: &str = "fixtures/presets/envoy-wave.jsonl";
const ISTIO: &str = "fixtures/presets/istio.jsonl";

#[test]
fn an_envoy_access_log_is_the_gateways_attempts_per_request() {
    let (got, stderr) = rows(&["--preset", "envoy", ENVOY]);
    assert!(stderr.is_empty(), "{stderr}");
    // Without the caller's log, ck-2's two requests (3 gateway attempts each) are one line
    // of 6 at the gateway whose attempt numbers start again (1 2 3 1 2 3): two retrying
    // layers, the client's 2 requests around Envoy's 3 tries, each within its budget of 3.
    expect(
        &got,
        &[
            ("checkout/ck-1", "healthy", &[("gateway", 1)]),
            ("checkout/ck-2", "nested-retry", &[("gateway", 6)]),
            ("checkout/ck-3", "healthy", &[("gateway", 2)]),
            ("checkout/ck-4", "over-budget", &[("gateway", 4)]),
        ],
    );
    assert_eq!(got["checkout/ck-3"].findings, ["retries@gateway"]);
    // The line's own times bound its attempts: the request's start and end.
    assert_eq!(got["checkout/ck-4"].first_start_ms, 1_796_032_806_004.0);
    assert_eq!(
        got["checkout/ck-4"].last_finish_ms,
        Some(1_796_032_808_001.0)
    );
}

#[test]
fn k6_results_join_the_gateways_log_as_the_caller_side() {
    let (got, stderr) = rows(&["--preset", "k6", "--preset", "envoy", K6, ENVOY]);
    expect(
        &got,
        &[
            ("checkout/ck-1", "healthy", &[("caller", 1), ("gateway", 1)]),
            // k6 retried a 504 whose request the gateway had tried 3 times: 2 × 3.
            (
                "checkout/ck-2",
                "nested-retry",
                &[("caller", 2), ("gateway", 6)],
            ),
            ("checkout/ck-3", "healthy", &[("caller", 1), ("gateway", 2)]),
            (
                "checkout/ck-4",
                "over-budget",
                &[("caller", 1), ("gateway", 4)],
            ),
        ],
    );
    assert_eq!(
        got["checkout/ck-2"].findings,
        ["retries@caller", "retries@gateway"]
    );
    // The k6 request's start is its end minus http_req_duration.
    assert_eq!(got["checkout/ck-1"].first_start_ms, 1_796_032_800_000.0);
    // The other metrics' points are counted, not silently dropped.
    assert!(
        stderr.contains(&format!("{K6}: 32 lines passed by"))
            && stderr.contains("k6 metrics other than http_req_duration"),
        "{stderr}"
    );
}

#[test]
fn k6_outcomes_come_from_the_status_tag_and_a_timeout_error_code() {
    let run = common::run(&["convert", "--preset", "k6", K6]);
    run.expect_code(0);
    let outcomes: Vec<(String, String)> = run
        .stdout_text()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (v["operation_id"].to_string(), v["outcome"].to_string())
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            ("\"ck-1\"", "200"),
            ("\"ck-2\"", "504"),
            ("\"ck-2\"", "200"),
            ("\"ck-3\"", "200"),
            ("\"ck-4\"", "\"timeout\""),
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()))
    );
}

/// Six requests within 40 ms, each tried twice by the gateway. The log gives no time of
/// each try, so the analysis must not find what only invented times would show: the
/// attempts are marked untimed, and the same attempts with their bounds taken for their
/// own times would be a burst and an overlap (the control below).
#[test]
fn attempts_without_times_of_their_own_raise_no_time_finding() {
    let (got, _) = rows(&["--preset", "envoy", WAVE]);
    assert_eq!(got.len(), 6);
    for (id, row) in &got {
        assert_eq!(row.class, "healthy", "{id}");
        assert_eq!(row.findings, ["retries@gateway"], "{id}");
        assert_eq!(row.overlap_ms, 0.0, "{id}");
    }
    let summary = analyze_summary(&[WAVE], &["--preset", "envoy"]);
    assert_eq!(summary.bursts.count, 0);

    // The control: convert writes the attempts with `untimed`; without it, the same
    // records overlap and burst.
    let converted = common::run(&["convert", "--preset", "envoy", WAVE]);
    converted.expect_code(0);
    let text = converted.stdout_text();
    assert_eq!(text.matches("\"untimed\":true").count(), 12, "{text}");
    let timed = TempFile::new(
        "wave-timed.jsonl",
        text.replace(",\"untimed\":true", "").as_bytes(),
    );
    let (control, _) = rows(&[timed.path().to_str().unwrap()]);
    assert!(
        control.values().all(|r| r.class == "nested-retry"
            || r.class == "overlap"
            || r.class == "synchronized-burst"),
        "{:?}",
        classes(&control)
    );
    assert!(control.values().any(|r| r.overlap_ms > 0.0));
}

/// Attempts without times of their own are drawn over their request's time, and every
/// timeline says so: `show` (its table and its bars), the JSON timelines (no duration, no
/// gap read off the request's bounds) and the HTML page; the one timed attempt is not.
#[test]
fn untimed_attempts_are_marked_wherever_a_timeline_draws_them() {
    let show = common::run(&["show", "checkout/ck-2", "--preset", "envoy", ENVOY]);
    show.expect_code(0);
    let text = show.stdout_text();
    assert_eq!(
        text.matches("(untimed: its request's times)").count(),
        6,
        "{text}"
    );
    let bars: Vec<&str> = text.lines().filter(|l| l.ends_with('|')).collect();
    assert_eq!(bars.len(), 6, "{text}");
    assert!(
        bars.iter().all(|b| b.contains('~') && !b.contains('=')),
        "{text}"
    );
    assert!(text.contains("~ untimed (its request's time)"), "{text}");

    let json = analyze(&["--format", "json", "--preset", "envoy", ENVOY]);
    json.expect_code(0);
    let summary = decode_summary_value(&json.stdout);
    let mut marked = 0;
    for t in summary["timelines"].as_array().unwrap() {
        let one_attempt = t["operation_id"] == "ck-1";
        for a in t["attempts"].as_array().unwrap() {
            if one_attempt {
                // A request tried once: its times are the attempt's own.
                assert!(a.get("untimed").is_none(), "{a}");
                assert_eq!(a["duration_ms"], 120.0, "{a}");
            } else {
                assert_eq!(a["untimed"], true, "{a}");
                assert!(a["duration_ms"].is_null() && a["gap_ms"].is_null(), "{a}");
                marked += 1;
            }
        }
    }
    assert_eq!(marked, 12);

    let html = analyze(&["--format", "html", "--preset", "envoy", ENVOY]);
    html.expect_code(0);
    let page = html.stdout_text();
    assert_eq!(page.matches(" untimed\" x=").count(), 12);
    assert!(page.contains("untimed: drawn over its request's time"));
    assert!(page.contains("(its request&#39;s times: the attempt&#39;s own were not logged)"));
    // A report without such attempts neither marks nor explains them.
    let plain = analyze(&["--format", "html", "fixtures/logfmt-trace.logfmt"]);
    plain.expect_code(0);
    let page = plain.stdout_text();
    assert!(
        page.contains("class=\"attempt "),
        "the control draws attempts"
    );
    assert!(!page.contains(" untimed\"") && !page.contains("untimed: drawn"));
}

#[test]
fn istio_inbound_lines_are_attempts_and_outbound_lines_are_counted_apart() {
    let (got, stderr) = rows(&["--preset", "istio", ISTIO]);
    let id = |n: u32| format!("3c6a5b51-7a0e-9d4b-8f5e-{n:012}");
    expect(
        &got,
        &[
            (&id(1), "healthy", &[("gateway", 1)]),
            (&id(2), "healthy", &[("gateway", 3)]),
            (&id(3), "overlap", &[("gateway", 2)]),
        ],
    );
    // The per-try timeout's retry ran beside the first try: 2260-2360.
    assert_eq!(got[&id(3)].overlap_ms, 100.0);
    assert!(
        stderr.contains(&format!("{ISTIO}: 3 lines passed by")) && stderr.contains("outbound"),
        "{stderr}"
    );
}

#[test]
fn a_preset_reaches_only_the_files_it_recognises() {
    // A service's own JSON Lines log read beside k6's output keeps its own reading.
    let plain = analyze_rows(&["fixtures/classes/nested-retry.jsonl"], &[]);
    let (with_k6, _) = rows(&[
        "--preset",
        "k6",
        "--preset",
        "envoy",
        "fixtures/classes/nested-retry.jsonl",
        K6,
    ]);
    for row in plain {
        assert_eq!(with_k6[&row.operation_id].class, row.class);
        assert_eq!(with_k6[&row.operation_id].attempts, row.attempts);
    }
}

#[test]
fn lines_a_preset_cannot_read_are_path_line_errors_with_exit_2_and_lines_without_an_id_pass_by() {
    let lines = [
        r#"{"start_time":"2026-11-30T10:00:00.000Z","duration":5,"response_code":200,"response_flags":"-","request_id":"a","upstream_cluster":"c","upstream_request_attempt_count":1}"#,
        r#"{"start_time":"2026-11-30T10:00:00.000Z","duration":5,"response_code":200,"response_flags":"-","request_id":"b","upstream_cluster":"c"}"#,
        r#"{"start_time":"2026-11-30T10:00:00.000Z","duration":5,"response_code":700,"response_flags":"-","request_id":"c","upstream_cluster":"c","upstream_request_attempt_count":1}"#,
        r#"{"start_time":"2026-11-30T10:00:00.000Z","duration":5,"response_code":200,"response_flags":"-","request_id":"-","upstream_cluster":"c","upstream_request_attempt_count":1}"#,
        r#"{"start_time":"2026-11-30T10:00:00.000Z","duration":5,"response_code":200,"request_id":"e","upstream_cluster":"c","upstream_request_attempt_count":100000}"#,
    ];
    let file = TempFile::new("envoy-bad.jsonl", (lines.join("\n") + "\n").as_bytes());
    let path = file.path().to_str().unwrap();
    let run = analyze(&["--preset", "envoy", path]);
    run.expect_code(2);
    for (line, message) in [
        (2, "no upstream_request_attempt_count: add"),
        (3, "response_code must be an HTTP status"),
        (
            5,
            "upstream_request_attempt_count must be a whole number from 0 to 1000",
        ),
    ] {
        assert!(
            run.stderr.contains(&format!("{path}:{line}: {message}")),
            "line {line}: {}",
            run.stderr
        );
    }
    // A line without a request ID (line 4, Envoy's `-`) is not an attempt: passed by.
    assert!(
        run.stderr
            .contains(&format!("{path}: 1 line passed by, not attempts")),
        "{}",
        run.stderr
    );
    assert!(
        !run.stderr.contains(&format!("{path}:4:")),
        "{}",
        run.stderr
    );
    // A k6 request without the operation tag passes by too; with nothing else read, the run
    // has no attempt (exit 2), and the note says how to tag one.
    let k6 = TempFile::new(
        "k6-untagged.json",
        br#"{"metric":"http_req_duration","type":"Point","data":{"time":"2026-11-30T10:00:00.5Z","value":12.5,"tags":{"status":"200","scenario":"s"}}}
"#,
    );
    let k6_path = k6.path().to_str().unwrap();
    let run = analyze(&["--preset", "k6", k6_path]);
    run.expect_code(2);
    assert!(
        run.stderr
            .contains(&format!("{k6_path}: 1 line passed by, not attempts"))
            && run.stderr.contains("tags: { operation_id: id }")
            && run.stderr.contains("no attempts read from"),
        "{}",
        run.stderr
    );
}

#[test]
fn envoy_and_istio_together_are_a_usage_error_and_help_lists_every_preset() {
    let run = analyze(&["--preset", "envoy", "--preset", "istio", ENVOY]);
    run.expect_code(2);
    assert!(run.stderr.contains("give one"), "{}", run.stderr);
    let help = common::run(&["analyze", "--help"]).stdout_text();
    for preset in ["envoy", "istio", "k6", "ecs"] {
        assert!(help.contains(&format!("{preset}:")), "{preset}\n{help}");
    }
}

/// The cookbook of docs/input.md, each example by its documented command.
#[test]
fn every_cookbook_example_classifies_as_documented() {
    let spring = rows(&[
        "--policy",
        "fixtures/cookbook/spring-boot.toml",
        "fixtures/cookbook/spring-boot.jsonl",
    ])
    .0;
    expect(
        &spring,
        &[
            ("ord-1", "healthy", &[("caller", 1)]),
            ("ord-2", "healthy", &[("caller", 3)]),
            ("ord-3", "over-budget", &[("caller", 5)]),
        ],
    );
    let pino = rows(&[
        "--field",
        "operation_id=req.headers[\"idempotency-key\"]",
        "--field",
        "hop=name",
        "--hop-value",
        "orders-api=dependency",
        "--field",
        "finish_ms=time",
        "--field",
        "duration_ms=responseTime",
        "--field",
        "outcome=res.statusCode",
        "--field",
        "target=req.url",
        "fixtures/cookbook/pino.jsonl",
    ])
    .0;
    expect(
        &pino,
        &[
            ("ord-11", "healthy", &[("dependency", 1)]),
            ("ord-12", "healthy", &[("dependency", 3)]),
            ("ord-13", "overlap", &[("dependency", 2)]),
        ],
    );
    assert_eq!(pino["ord-13"].overlap_ms, 80.0);
    let nginx = rows(&[
        "--field",
        "operation_id=http_idempotency_key",
        "--field",
        "finish=msec",
        "--time-unit",
        "s",
        "--field",
        "duration_s=request_time",
        "--field",
        "outcome=status",
        "--field",
        "target=uri",
        "fixtures/cookbook/nginx.jsonl",
    ])
    .0;
    expect(
        &nginx,
        &[
            ("pay-1", "healthy", &[("caller", 1)]),
            ("pay-2", "over-budget", &[("caller", 4)]),
            ("pay-3", "healthy", &[("caller", 2)]),
        ],
    );
    assert_eq!(
        nginx["pay-3"].findings,
        ["retries@caller", "retry-without-delay@caller"]
    );
    // Envoy and k6: the preset tests above run the cookbook's commands on the same files.
}

// ---------------------------------------------------------------------------------------
// Presets compose with --field and the policy's [fields]; lines without an ID pass by (#45)
// ---------------------------------------------------------------------------------------

const ENVOY_X_REQUEST_ID: &str = "fixtures/logs/envoy-x-request-id.jsonl";

/// An Envoy format that logs the `x-request-id` header under its own name: the flag (or the
/// policy) says where the operation is, and the preset reads the rest. The replaced key is
/// said once; the health check without an ID passes by, counted, and the run exits 0.
#[test]
fn a_field_overrides_the_presets_key_for_that_field_from_the_flag_or_the_policy() {
    let policy = TempFile::new(
        "fields.toml",
        b"[fields]\noperation_id = \"x-request-id\"\n",
    );
    let policy = policy.path().to_str().unwrap().to_string();
    for (way, extra, origin) in [
        (
            "flag",
            vec!["--field", "operation_id=x-request-id"],
            "--field",
        ),
        (
            "policy",
            vec!["--policy", policy.as_str()],
            "policy [fields]",
        ),
    ] {
        let mut args = vec!["--preset", "envoy"];
        args.extend(extra);
        args.push(ENVOY_X_REQUEST_ID);
        let (got, stderr) = rows(&args);
        // Two requests of xr-3 (3 tries, then the caller's retry with 2): two layers.
        expect(
            &got,
            &[
                ("xr-1", "healthy", &[("gateway", 1)]),
                ("xr-2", "healthy", &[("gateway", 3)]),
                ("xr-3", "nested-retry", &[("gateway", 5)]),
                ("xr-4", "healthy", &[("gateway", 2)]),
            ],
        );
        let replaced = format!(
            "attempt-funnel: {origin} operation_id=x-request-id replaces --preset envoy's operation_id=request_id"
        );
        assert_eq!(stderr.matches(&replaced).count(), 1, "{way}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "{ENVOY_X_REQUEST_ID}: 1 line passed by, not attempts (--preset envoy: lines without a request ID"
            )),
            "{way}: {stderr}"
        );
    }
    // Without the mapping no line has the ID the preset looks for: no attempt, exit 2, and
    // the note says how to log it.
    let run = analyze(&["--preset", "envoy", ENVOY_X_REQUEST_ID]);
    run.expect_code(2).expect_stderr_says(&[
        "6 lines passed by",
        "log %REQ(X-REQUEST-ID)% as request_id",
        "no attempts read from",
    ]);
}

/// k6 as it runs a real script: setup and teardown make untagged requests, which pass by
/// with the other metrics instead of failing the run.
#[test]
fn k6s_untagged_setup_requests_pass_by() {
    let (got, stderr) = rows(&["--preset", "k6", "fixtures/logs/k6.json"]);
    expect(
        &got,
        &[
            ("default/k-1", "healthy", &[("caller", 1)]),
            ("default/k-2", "healthy", &[("caller", 2)]),
            ("default/k-3", "over-budget", &[("caller", 4)]),
            ("default/k-4", "healthy", &[("caller", 2)]),
        ],
    );
    assert!(
        stderr.contains("fixtures/logs/k6.json: 124 lines passed by, not attempts (--preset k6: k6 metrics other than http_req_duration, and requests without the operation_id tag"),
        "{stderr}"
    );
}

/// An Elastic Common Schema log as ecs-logging writes it, stdout and stderr in one file: a
/// banner first, a traceback, the operation's other records (no `event.duration`) and
/// records without a trace passed by; each record with a duration one caller attempt, its
/// outcome from the status code, or a timeout from `error.type`.
#[test]
fn an_ecs_log_reads_its_timed_records_as_attempts_under_their_trace() {
    let file = "fixtures/logs/ecs.log";
    let (got, stderr) = rows(&["--preset", "ecs", file]);
    let (o1, o2, o3, o4) = (
        "4bf92f3577b34da6a3ce929d0e0e4701",
        "4bf92f3577b34da6a3ce929d0e0e4702",
        "4bf92f3577b34da6a3ce929d0e0e4703",
        "4bf92f3577b34da6a3ce929d0e0e4704",
    );
    let want: [Expected; 4] = [
        (o1, "healthy", &[("caller", 1)]),
        (o2, "healthy", &[("caller", 3)]),
        (o3, "over-budget", &[("caller", 4)]),
        (o4, "healthy", &[("caller", 2)]),
    ];
    expect(&got, &want);
    assert!(
        stderr.contains(&format!(
            "{file}: 25 lines passed by, not attempts (--preset ecs"
        )),
        "{stderr}"
    );
}

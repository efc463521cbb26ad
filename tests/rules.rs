//! End-to-end tests of three rules, run through the binary on committed fixtures: the
//! synchronized-burst rule on a retry wave that arrives in two sub-clusters and on a big
//! jittered wave, point events paired in order when they carry no attempt number,
//! per-hop deadlines (see #12), and rule v3: resends that are not retries, retry hygiene
//! II and the policy's settings for two layers in one hop (see #48).

mod common;

use common::*;

#[test]
fn a_fixed_delay_wave_in_two_sub_clusters_is_one_burst_of_all_30_operations() {
    let file = [fixture("bursts/two-sub-clusters.jsonl")];
    let rows = by_id(analyze_rows(&file, &[]));
    assert_eq!(rows.len(), 70);
    for (id, row) in &rows {
        if id.starts_with("w-") {
            assert_eq!(row.class, "synchronized-burst", "{id}: {row:?}");
            assert!(row.has_finding("burst@caller"), "{id}: {row:?}");
        } else {
            assert_eq!(row.class, "healthy", "{id}: {row:?}");
            assert!(!row.has_finding("burst@caller"), "{id}: {row:?}");
        }
    }
    let out = analyze(&["--format", "json", "fixtures/bursts/two-sub-clusters.jsonl"]);
    out.expect_code(0);
    let summary = decode_summary_value(&out.stdout);
    let bursts = &summary["bursts"];
    assert_eq!(bursts["count"], 1);
    assert_eq!(bursts["operations"], 30);
    let burst = &bursts["list"][0];
    assert_eq!(burst["hop"], "caller");
    assert_eq!(
        (burst["start_ms"].as_f64(), burst["width_ms"].as_f64()),
        (Some(10_500.0), Some(96.0))
    );
    assert_eq!(
        (burst["retries"].as_u64(), burst["operations"].as_u64()),
        (Some(30), Some(30))
    );
    assert_eq!(
        (
            burst["delay_min_ms"].as_f64(),
            burst["delay_max_ms"].as_f64()
        ),
        (Some(500.0), Some(500.0))
    );
    assert_eq!(burst["expected_retries"].as_f64(), Some(1.0));
    assert!(
        burst["p_value"].as_f64().is_some_and(|p| p < 1e-6),
        "{burst}"
    );
}

#[test]
fn the_two_sub_cluster_wave_is_one_burst_for_any_window_wider_than_its_gap() {
    // The wave is 96 ms wide; before rule v2 only a window of about 100 ms found all of it.
    // Its sub-clusters are 38 ms apart: any wider window joins them into one burst.
    let file = [fixture("bursts/two-sub-clusters.jsonl")];
    for window in ["40", "50", "100", "150"] {
        let summary = analyze_summary(&file, &["--burst-window", window]);
        assert_eq!(summary.bursts.count, 1, "--burst-window {window}");
        assert_eq!(summary.bursts.operations, 30, "--burst-window {window}");
    }
    // A narrower one finds the two sub-clusters as two bursts, of all 30 operations still.
    let summary = analyze_summary(&file, &["--burst-window", "30"]);
    assert_eq!(summary.bursts.count, 2);
    assert_eq!(summary.bursts.operations, 30);
    assert_eq!(summary.class_count("synchronized-burst"), 30);
}

#[test]
fn a_big_wave_retried_with_full_jitter_is_no_burst() {
    let file = [fixture("bursts/jittered-wave.jsonl")];
    let summary = analyze_summary(&file, &[]);
    assert_eq!(summary.operations, 2000);
    assert_eq!(summary.bursts.count, 0, "{:?}", summary.bursts);
    assert_eq!(summary.class_count("healthy"), 2000);
}

#[test]
fn the_burst_fixtures_are_what_their_script_writes() {
    // The fixtures are committed; the script that made them must still make them, so that
    // their description (fixtures/README.md) is the script's.
    let script = std::fs::read_to_string(fixture("bursts/make.py")).expect("make.py");
    for name in ["two-sub-clusters.jsonl", "jittered-wave.jsonl"] {
        assert!(script.contains(name), "make.py does not write {name}");
        let lines = fixture_lines(&format!("bursts/{name}"));
        assert!(lines.iter().all(|l| l.contains("\"hop\":\"caller\"")));
    }
}

#[test]
fn the_spec_trace_without_attempt_numbers_is_overlap_of_550_ms_like_with_them() {
    let numbered = analyze_rows(&[fixture("logfmt-trace.logfmt")], &[]);
    let unnumbered = analyze_rows(&[fixture("logfmt-trace-unnumbered.logfmt")], &[]);
    assert_eq!(unnumbered.len(), 1);
    let op = &unnumbered[0];
    assert_eq!(op.class, "overlap");
    assert_eq!(op.overlap_ms, 550.0);
    assert_eq!(
        op.findings,
        ["retries@caller", "unfinished@caller", "overlap@dependency"]
    );
    assert_eq!(numbered, unnumbered);
}

#[test]
fn show_draws_the_unnumbered_trace_with_the_starts_taken_from_the_kth_caller_attempt() {
    let out = run(&["show", "op-17", "fixtures/logfmt-trace-unnumbered.logfmt"]);
    out.expect_code(0);
    let text = out.stdout_text();
    assert!(text.contains("op-17 — overlap"), "{text}");
    assert!(text.contains("dependency: 850–1400 ms (550 ms)"), "{text}");
}

#[test]
fn unnumbered_finish_only_events_pair_with_the_kth_upstream_attempt_in_any_line_order() {
    // Three caller attempts (timeout, timeout, ok) and three gateway attempts seen only
    // finishing: each gateway attempt runs under the caller attempt of its number.
    let lines = [
        "operation=op-9 event=start t_ms=0",
        "operation=op-9 event=client-timeout t_ms=300",
        "operation=op-9 event=start t_ms=400",
        "operation=op-9 event=client-timeout t_ms=700",
        "operation=op-9 event=start t_ms=800",
        "operation=op-9 event=client-finish t_ms=1000",
        "operation=op-9 hop=gateway event=finish t_ms=350",
        "operation=op-9 hop=gateway event=finish t_ms=750",
        "operation=op-9 hop=gateway event=finish t_ms=990",
    ];
    let forward = TempFile::new("pairs.logfmt", (lines.join("\n") + "\n").as_bytes());
    let mut reversed: Vec<&str> = lines.to_vec();
    reversed.reverse();
    let backward = TempFile::new("pairs-rev.logfmt", (reversed.join("\n") + "\n").as_bytes());
    let a = analyze_rows(&[forward.path()], &[]);
    let b = analyze_rows(&[backward.path()], &[]);
    assert_eq!(a, b);
    let op = &a[0];
    // Each gateway attempt outlives its caller attempt by 50 ms, while the next caller
    // attempt starts 100 ms after the timeout: no two gateway attempts overlap. Taking
    // every start from the first caller attempt would make them all overlap.
    assert_eq!(op.attempts_at("caller"), 3);
    assert_eq!(op.attempts_at("gateway"), 3);
    assert_eq!(op.overlap_ms, 0.0, "{op:?}");
    assert_eq!(op.class, "healthy", "{op:?}");
    assert_eq!(op.first_multiplying_hop.as_deref(), Some("caller"));
}

#[test]
fn deadlines_find_late_attempts_and_backoff_adding_up_past_them() {
    let file = [fixture("deadlines.jsonl")];
    let without = by_id(analyze_rows(&file, &[]));
    assert!(without.values().all(|r| r.findings == ["retries@caller"]));
    let rows = by_id(analyze_rows(&file, &["--deadline", "caller=1000"]));
    assert!(rows.values().all(|r| r.class == "healthy"), "{rows:?}");
    assert_eq!(
        rows["d-1"].findings,
        [
            "retries@caller",
            "attempt-after-deadline@caller",
            "backoff-over-deadline@caller"
        ]
    );
    assert_eq!(
        rows["d-2"].findings,
        ["retries@caller", "attempt-after-deadline@caller"]
    );
    assert_eq!(rows["d-3"].findings, ["retries@caller"]);
    // A deadline at one hop says nothing about the others.
    let elsewhere = by_id(analyze_rows(&file, &["--deadline", "gateway=1"]));
    assert_eq!(elsewhere, without);
}

#[test]
fn a_deadline_comes_from_the_policy_and_a_flag_overrides_it() {
    let policy = TempFile::new("deadline.toml", b"[deadlines]\ncaller = 1000\n");
    let policy_arg = policy.path().to_str().expect("utf-8 temp path");
    let file = [fixture("deadlines.jsonl")];
    let rows = by_id(analyze_rows(&file, &["--policy", policy_arg]));
    assert!(rows["d-2"].has_finding("attempt-after-deadline@caller"));
    let rows = by_id(analyze_rows(
        &file,
        &["--policy", policy_arg, "--deadline", "caller=5000"],
    ));
    assert!(rows.values().all(|r| r.findings == ["retries@caller"]));
}

#[test]
fn deadline_findings_gate_like_every_finding() {
    let run = analyze(&[
        "--deadline",
        "caller=1000",
        "--fail-on",
        "backoff-over-deadline > 0",
        "--fail-on",
        "attempt-after-deadline@caller > 50%",
        "fixtures/deadlines.jsonl",
    ]);
    run.expect_code(1);
    assert!(
        run.stderr.contains("backoff-over-deadline > 0") && run.stderr.contains("d-1"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("attempt-after-deadline@caller > 50%"),
        "{}",
        run.stderr
    );
    let passes = analyze(&[
        "--deadline",
        "caller=2000",
        "--fail-on",
        "attempt-after-deadline > 0",
        "fixtures/deadlines.jsonl",
    ]);
    passes.expect_code(0);
}

#[test]
fn deadline_findings_are_shown_in_every_report_format() {
    let args = ["--deadline", "caller=1000", "fixtures/deadlines.jsonl"];
    for format in ["table", "markdown", "html", "csv", "json"] {
        let mut all = vec!["--format", format];
        all.extend(args);
        let out = analyze(&all);
        out.expect_code(0);
        let text = out.stdout_text();
        for finding in [
            "attempt-after-deadline@caller",
            "backoff-over-deadline@caller",
        ] {
            assert!(text.contains(finding), "{format}: no {finding} in\n{text}");
        }
    }
    let out = run(&[
        "show",
        "d-1",
        "--deadline",
        "caller=1000",
        "fixtures/deadlines.jsonl",
    ]);
    out.expect_code(0);
    let text = out.stdout_text();
    assert!(
        text.contains("backoff-over-deadline@caller")
            && text.contains("add up to more than its deadline"),
        "{text}"
    );
}

#[test]
fn a_bad_deadline_is_a_usage_error_naming_the_flag_or_key() {
    for (args, expected) in [
        (vec!["--deadline", "caller"], "expected HOP=MS"),
        (vec!["--deadline", "caller=0"], "at least 0.000001"),
        (vec!["--deadline", "caller=soon"], "at least 0.000001"),
        (vec!["--deadline", "cache=100"], "unknown hop \"cache\""),
    ] {
        let mut all = args.clone();
        all.push("fixtures/deadlines.jsonl");
        let out = analyze(&all);
        out.expect_code(2);
        assert!(
            out.stderr.contains("--deadline"),
            "{args:?}: {}",
            out.stderr
        );
        assert!(out.stderr.contains(expected), "{args:?}: {}", out.stderr);
    }
    let policy = TempFile::new("bad-deadline.toml", b"[deadlines]\ncaller = -1\n");
    let out = analyze(&[
        "--policy",
        policy.path().to_str().expect("utf-8 temp path"),
        "fixtures/deadlines.jsonl",
    ]);
    out.expect_code(2);
    assert!(
        out.stderr.contains("deadlines.caller = -1"),
        "{}",
        out.stderr
    );
}

/// Rows of a rule v3 fixture, with extra flags.
fn v3_rows(name: &str, extra: &[&str]) -> std::collections::BTreeMap<String, OperationRow> {
    by_id(analyze_rows(&[fixture(&format!("rules-v3/{name}"))], extra))
}

#[test]
fn redirects_and_authentication_challenges_are_resends_not_retries() {
    let rows = v3_rows("resends.jsonl", &[]);
    assert_eq!(rows.len(), 6);
    // A redirect to a new target, a 401 and a 407 followed up: two sends, no retry, no
    // fan-out, nothing multiplied.
    for id in ["redirect", "challenge", "proxy"] {
        let row = &rows[id];
        assert_eq!(row.attempts_at("caller"), 2, "{id}");
        assert_eq!(row.class, "healthy", "{id}");
        assert_eq!(row.first_multiplying_hop, None, "{id}");
        assert_eq!(row.findings, vec!["resends@caller"], "{id}");
    }
    // Two retries and a challenge: three tries within the budget of 3, and one resend.
    let row = &rows["retried-then-challenged"];
    assert_eq!(row.attempts_at("caller"), 4);
    assert_eq!(row.class, "healthy", "{row:?}");
    assert_eq!(row.findings, vec!["retries@caller", "resends@caller"]);
    // The same four sends, all failures retried: over the budget.
    let row = &rows["four-failures"];
    assert_eq!(row.class, "over-budget", "{row:?}");
    assert!(!row.has_finding("resends@caller"));
    // 304 Not Modified is an answer, not a redirect: the send after it is a retry.
    let row = &rows["not-modified"];
    assert_eq!(row.findings, vec!["retries@caller"]);
}

#[test]
fn a_retry_after_an_answer_a_retry_cannot_change_is_retried_non_retryable() {
    let rows = v3_rows("hygiene.jsonl", &[]);
    fn non_retryable(rows: &std::collections::BTreeMap<String, OperationRow>) -> Vec<&str> {
        rows.iter()
            .filter(|(_, r)| r.has_finding("retried-non-retryable@caller"))
            .map(|(id, _)| id.as_str())
            .collect()
    }
    // 400 and 409 by default; 429 and 503 can be fixed by waiting.
    assert_eq!(non_retryable(&rows), vec!["bad-request", "conflict"]);
    // Hygiene never changes the class.
    assert!(rows.values().all(|r| r.class == "healthy"), "{rows:?}");
    // A policy that calls 409 retryable.
    let rows = v3_rows(
        "hygiene.jsonl",
        &["--policy", "fixtures/rules-v3/retryable-409.toml"],
    );
    assert_eq!(non_retryable(&rows), vec!["bad-request"]);
}

#[test]
fn attempts_of_one_line_with_different_message_ids_changed_their_key() {
    let rows = v3_rows("hygiene.jsonl", &[]);
    let changed: Vec<&str> = rows
        .iter()
        .filter(|(_, r)| r.has_finding("idempotency-key-changed@caller"))
        .map(|(id, _)| id.as_str())
        .collect();
    assert_eq!(changed, vec!["key-changed"]);
}

#[test]
fn rule_v3_findings_gate_like_every_finding() {
    let file = fixture("rules-v3/hygiene.jsonl");
    let file = file.to_str().expect("UTF-8 path");
    let run = analyze(&["--fail-on", "retried-non-retryable@caller > 1", file]);
    run.expect_code(1);
    let run = analyze(&["--fail-on", "retried-non-retryable@caller > 2", file]);
    run.expect_code(0);
    let file = fixture("rules-v3/resends.jsonl");
    let file = file.to_str().expect("UTF-8 path");
    analyze(&["--fail-on", "resends > 3", file]).expect_code(1);
    analyze(&["--fail-on", "resends > 4", file]).expect_code(0);
}

#[test]
fn the_policy_turns_layers_from_timing_off_and_sets_the_inner_budget() {
    let header = "http.request.header.x-operation-id";
    // Without timing, p-retry × axios-retry reads as one layer of nine sends.
    let rows = by_id(analyze_rows(
        &[fixture("otlp/node/p-retry-axios.otlp.jsonl")],
        &[
            "--policy",
            "fixtures/rules-v3/no-inferred-layers.toml",
            "--operation-attribute",
            header,
            "--hop-map",
            "web=caller",
        ],
    ));
    assert_eq!(rows.len(), 3);
    for (id, row) in &rows {
        assert_eq!(row.class, "over-budget", "{id}");
        assert!(!row.has_finding("inferred-layers@caller"), "{id}");
    }
    // Three sends per application attempt, over an inner budget of 2: still two layers,
    // one of them over its budget.
    let rows = by_id(analyze_rows(
        &[fixture("otlp/real/two-layer.otlp.jsonl")],
        &[
            "--policy",
            "fixtures/rules-v3/inner-budget-2.toml",
            "--operation-attribute",
            header,
        ],
    ));
    assert_eq!(rows.len(), 3);
    for (id, row) in &rows {
        assert_eq!(row.class, "nested-retry", "{id}");
        assert!(row.has_finding("over-budget@caller"), "{id}");
    }
}

#[test]
fn a_bad_rule_v3_policy_setting_names_the_key() {
    let dir = TempDir::new("rules-v3");
    for (text, key) in [
        ("[inner_budgets]\ncaller = 0\n", "inner_budgets.caller = 0"),
        (
            "[inner_budgets]\nedge = 2\n",
            "inner_budgets names unknown hop \"edge\"",
        ),
        (
            "[retryable]\nstatuses = [503]\n",
            "retryable.statuses lists 503",
        ),
        ("infer_layers = \"no\"\n", "infer_layers"),
    ] {
        let policy = dir.file("policy.toml", text.as_bytes());
        let run = analyze(&[
            "--policy",
            policy.to_str().expect("UTF-8 path"),
            "fixtures/rules-v3/hygiene.jsonl",
        ]);
        run.expect_code(2);
        assert!(run.stderr.contains(key), "{text}: {}", run.stderr);
    }
}

// ---------------------------------------------------------------------------------------
// Every numeric rule setting at its extremes, through each way in
// ---------------------------------------------------------------------------------------

/// A numeric rule setting and how each way in spells it (`None`: no such way).
struct Setting {
    /// What every refusal of a bad value names, whichever way it came in.
    named: &'static str,
    flag: Option<fn(&str) -> Vec<String>>,
    policy: fn(&str) -> String,
    /// The partial header's `rules` key and, for a per-hop list, the default list with
    /// `V` where the value goes.
    header: (&'static str, &'static str),
    /// The extremes this setting accepts; every other one is refused.
    valid: &'static [&'static str],
}

/// 0, subnormal, negative, NaN, infinity, huge, and one past u32.
const EXTREMES: [&str; 7] = ["0", "5e-324", "-1", "nan", "inf", "1e300", "4294967296"];

fn settings() -> Vec<Setting> {
    vec![
        Setting {
            named: "budget",
            flag: Some(|v| vec![format!("--budget=gateway={v}")]),
            policy: |v| format!("[budgets]\ngateway = {v}\n"),
            header: ("budgets", "[3,V,3,3]"),
            valid: &[],
        },
        Setting {
            named: "deadline",
            flag: Some(|v| vec![format!("--deadline=caller={v}")]),
            policy: |v| format!("[deadlines]\ncaller = {v}\n"),
            header: ("deadlines_ms", "[V,null,null,null]"),
            valid: &["1e300", "4294967296"],
        },
        Setting {
            named: "window",
            flag: Some(|v| vec![format!("--burst-window={v}")]),
            policy: |v| format!("[burst]\nwindow_ms = {v}\n"),
            header: ("burst_window_ms", "V"),
            valid: &[],
        },
        Setting {
            named: "burst",
            flag: Some(|v| vec![format!("--burst-min-ops={v}")]),
            policy: |v| format!("[burst]\nmin_ops = {v}\n"),
            header: ("burst_min_ops", "V"),
            valid: &["4294967296"],
        },
        Setting {
            named: "inner",
            flag: None,
            policy: |v| format!("[inner_budgets]\ncaller = {v}\n"),
            header: ("inner_budgets", "[V,null,null,null]"),
            valid: &[],
        },
        Setting {
            named: "retryable",
            flag: None,
            policy: |v| format!("[retryable]\nstatuses = [{v}]\n"),
            header: ("retryable_4xx", "[V]"),
            valid: &[],
        },
    ]
}

/// A partial of the incident whose header's rules say `value` for `setting`, as JSON text
/// (NaN and infinity, which JSON cannot write, as the words a hand edit would leave).
fn partial_saying(base: &str, setting: &Setting, value: &str) -> Vec<u8> {
    let (header, rest) = base.split_once('\n').expect("a partial has a header line");
    let json_value = match value {
        "nan" => "NaN",
        "inf" => "1e999",
        v => v,
    };
    let (key, list) = setting.header;
    let start = header
        .find(&format!("\"{key}\":"))
        .unwrap_or_else(|| panic!("no {key} in {header}"));
    let value_start = start + key.len() + 3;
    let value_len = header[value_start..]
        .find([',', '}'])
        .map(|end| {
            // A list runs to its closing bracket.
            if header[value_start..].starts_with('[') {
                header[value_start..].find(']').unwrap() + 1
            } else {
                end
            }
        })
        .unwrap();
    let edited = format!(
        "{}{}{}",
        &header[..value_start],
        list.replace('V', json_value),
        &header[value_start + value_len..]
    );
    format!("{edited}\n{rest}").into_bytes()
}

/// Each setting gets each extreme through the flag, the policy file and a partial's
/// header: a value out of range is refused with exit 2, naming the setting (and the file
/// it came from), never a panic; a value in range is taken, and a partial made so merges.
#[test]
fn every_numeric_setting_at_its_extremes_is_refused_or_taken_the_same_way_in_through_each_way_in() {
    let made = analyze(&["--format", "partial", "fixtures/incident.jsonl"]);
    made.expect_code(0);
    let base = made.stdout_text();
    for setting in settings() {
        for value in EXTREMES {
            let valid = setting.valid.contains(&value);
            let case = format!("{} = {value}", setting.named);
            // A refusal names the setting, or quotes the line of the file that set it.
            let judge = |run: &Run, way: &str, names: &[&str]| {
                assert!(
                    !run.stderr.contains("panicked"),
                    "{case} by {way}: {}",
                    run.stderr
                );
                if valid {
                    run.expect_code(0);
                } else {
                    assert_eq!(run.code, 2, "{case} by {way}: {}", run.stderr);
                    let stderr = run.stderr.to_lowercase();
                    assert!(
                        names.iter().any(|n| stderr.contains(&n.to_lowercase())),
                        "{case} by {way} names one of {names:?}: {stderr}"
                    );
                    // Extremes are quoted in exponent form, never as hundreds of digits.
                    assert!(
                        !stderr.contains("0000000000000000000000"),
                        "{case} by {way}: {stderr}"
                    );
                }
            };
            if let Some(flag) = setting.flag {
                let mut args: Vec<String> = vec!["analyze".into()];
                args.extend(flag(value));
                args.push("fixtures/incident.jsonl".into());
                judge(&run(&args), "flag", &[setting.named]);
            }
            let policy_text = (setting.policy)(value);
            let policy_line = policy_text.lines().last().unwrap();
            let policy = TempFile::new("policy.toml", policy_text.as_bytes());
            let policy_path = policy.path().to_str().unwrap().to_string();
            let by_policy = run(&[
                "analyze",
                "--policy",
                &policy_path,
                "fixtures/incident.jsonl",
            ]);
            judge(&by_policy, "policy", &[setting.named, policy_line]);
            // The policy names the file; an error also names the setting as the policy spells it.
            if !valid {
                assert!(
                    by_policy.stderr.contains(&policy_path),
                    "{case}: {}",
                    by_policy.stderr
                );
            }
            let partial = TempFile::new("edited.partial", &partial_saying(&base, &setting, value));
            let partial_path = partial.path().to_str().unwrap().to_string();
            let merged = if valid {
                run(&["merge", "--policy", &policy_path, &partial_path])
            } else {
                run(&["merge", &partial_path])
            };
            // A header that is not JSON any more (NaN, 1e999) is refused as such.
            let names = if value == "nan" || value == "inf" {
                "partial"
            } else {
                setting.named
            };
            judge(&merged, "partial header", &[names, setting.header.0]);
            if !valid {
                assert!(
                    merged.stderr.contains(&format!("{partial_path}:1")),
                    "{case}: {}",
                    merged.stderr
                );
            }
        }
    }
}

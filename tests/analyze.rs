//! End-to-end tests of `attempt-funnel analyze`: the real binary on the hand-written files in
//! `fixtures/` (described in `fixtures/README.md` and `fixtures/bad/README.md`), asserting
//! exit codes, stderr text and decoded output.

mod common;

use std::collections::BTreeMap;

use common::*;

const BAD_LINES: &str = "fixtures/bad/bad-lines.jsonl";

// ---------------------------------------------------------------------------------------
// Classification of the fixtures
// ---------------------------------------------------------------------------------------

#[test]
fn every_class_fixture_classifies_as_its_name_says() {
    let expected_counts: BTreeMap<&str, usize> = [
        ("healthy", 5),
        ("nested-retry", 3),
        ("fan-out", 3),
        ("redelivery", 3),
        ("overlap", 3),
        ("synchronized-burst", 10),
        ("over-budget", 3),
    ]
    .into();
    let files = class_fixtures();
    let names: Vec<String> = files
        .iter()
        .map(|f| f.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names.iter().map(String::as_str).collect::<Vec<_>>(),
        expected_counts.keys().copied().collect::<Vec<_>>(),
        "one fixture per class"
    );
    for (file, class) in files.iter().zip(&names) {
        let rows = analyze_rows(&[file], &[]);
        assert_eq!(
            rows.len(),
            expected_counts[class.as_str()],
            "{class}: operations"
        );
        for row in &rows {
            assert_eq!(&row.class, class, "{class}.jsonl: {row:?}");
        }
    }
}

#[test]
fn class_fixtures_have_the_funnels_and_hops_the_fixture_readme_describes() {
    let all: Vec<_> = class_fixtures();
    let ops = by_id(analyze_rows(&all, &[]));
    let op = |id: &str| ops.get(id).unwrap_or_else(|| panic!("no operation {id}"));

    // The same operation ID in two test runs is two operations, and neither overlaps.
    for id in ["run-a/h-1", "run-b/h-1"] {
        assert_eq!(op(id).class, "healthy");
        assert_eq!(op(id).first_multiplying_hop, None);
        assert_eq!(op(id).overlap_ms, 0.0);
    }
    // A caller line of exactly the budget is not over it.
    assert_eq!(op("run-a/h-4").attempts_at("caller"), 3);
    assert_eq!(
        op("run-a/h-4").first_multiplying_hop.as_deref(),
        Some("caller")
    );

    // 3 × 3 = 9 under the gateway, linked by explicit span IDs.
    assert_eq!(op("n-2").first_multiplying_hop.as_deref(), Some("gateway"));
    assert_eq!(op("n-2").attempts_at("gateway"), 3);
    assert_eq!(op("n-2").attempts_at("dependency"), 9);
    // Retrying hops that are not adjacent, linked by time containment.
    assert_eq!(op("n-3").first_multiplying_hop.as_deref(), Some("caller"));
    assert_eq!(op("n-3").attempts_at("dependency"), 4);

    assert_eq!(op("f-1").attempts_at("dependency"), 4);
    assert_eq!(op("f-2").first_multiplying_hop.as_deref(), Some("gateway"));
    assert_eq!(
        op("f-3").first_multiplying_hop.as_deref(),
        Some("dependency")
    );

    assert_eq!(op("load-7/r-1").attempts_at("consumer"), 3);
    assert_eq!(op("load-7/r-2").attempts_at("consumer"), 2);
    assert!(op("load-7/r-3").has_finding("fan-out@consumer"));

    for (id, overlap_ms) in [("o-1", 540.0), ("o-2", 585.0), ("o-3", 195.0)] {
        assert_eq!(op(id).overlap_ms, overlap_ms, "{id}");
    }
    assert!(op("o-1").has_finding("overlap@dependency"));
    assert!(op("o-2").has_finding("overlap@gateway"));

    for (id, hop, n) in [
        ("ci-42/b-1", "caller", 4),
        ("ci-42/b-2", "gateway", 5),
        ("ci-42/b-3", "dependency", 4),
    ] {
        assert_eq!(op(id).attempts_at(hop), n, "{id}");
        assert_eq!(op(id).first_multiplying_hop.as_deref(), Some(hop), "{id}");
        assert!(op(id).has_finding(&format!("over-budget@{hop}")), "{id}");
    }

    for i in 1..=10 {
        let id = format!("s-{i:02}");
        assert!(op(&id).has_finding("burst@caller"), "{id}");
        assert_eq!(op(&id).attempts_at("caller"), 2, "{id}");
    }
}

#[test]
fn spec_logfmt_trace_is_overlap_of_550_ms_with_an_unfinished_caller_attempt() {
    let rows = analyze_rows(&[fixture("logfmt-trace.logfmt")], &[]);
    assert_eq!(rows.len(), 1);
    let op = &rows[0];
    assert_eq!(op.operation_id, "op-17");
    assert_eq!(op.test_run_id, None);
    assert_eq!(op.class, "overlap");
    assert_eq!(op.overlap_ms, 550.0);
    assert!(op.has_finding("unfinished@caller"), "{:?}", op.findings);
    assert!(op.has_finding("overlap@dependency"), "{:?}", op.findings);
    assert_eq!(op.attempts_at("caller"), 2);
    assert_eq!(op.attempts_at("dependency"), 2);
    assert_eq!(op.first_start_ms, 0.0);
    assert_eq!(op.last_finish_ms, Some(2250.0));
}

#[test]
fn spec_logfmt_trace_counts_one_unfinished_attempt_in_the_summary() {
    let summary = analyze_summary(&[fixture("logfmt-trace.logfmt")], &[]);
    assert_eq!(summary.unfinished_attempts, 1);
    assert_eq!(summary.overlap.operations, 1);
    assert_eq!(summary.overlap.max_ms, 550.0);
    assert_eq!(summary.class_count("overlap"), 1);
}

#[test]
fn mixed_attempt_records_and_point_events_classify_as_the_fixture_readme_says() {
    let ops = by_id(analyze_rows(&[fixture("mixed-forms.jsonl")], &[]));
    assert_eq!(ops.len(), 4);

    let mx1 = &ops["mx-1"];
    assert_eq!(mx1.class, "overlap");
    assert_eq!(mx1.overlap_ms, 100.0);
    assert_eq!(mx1.attempts_at("caller"), 2);
    assert_eq!(mx1.attempts_at("dependency"), 2);
    assert_eq!(mx1.first_start_ms, 1000.0);
    assert_eq!(mx1.last_finish_ms, Some(1860.0));

    let mx2 = &ops["mx-2"];
    assert_eq!(mx2.class, "healthy");
    assert_eq!(mx2.first_multiplying_hop.as_deref(), Some("gateway"));
    assert_eq!(mx2.attempts_at("gateway"), 2);
    assert_eq!(mx2.overlap_ms, 0.0);

    let mx3 = &ops["mx-3"];
    assert_eq!(mx3.class, "fan-out");
    assert_eq!(mx3.attempts_at("caller"), 1);
    assert_eq!(mx3.attempts_at("dependency"), 3);
    assert_eq!(
        mx3.last_finish_ms.map(|f| f - mx3.first_start_ms),
        Some(150.0)
    );

    let mx4 = &ops["mx-4"];
    assert_eq!(mx4.class, "redelivery");
    assert_eq!(mx4.first_multiplying_hop.as_deref(), Some("consumer"));
    assert_eq!(mx4.attempts_at("consumer"), 2);
}

// ---------------------------------------------------------------------------------------
// Bad input
// ---------------------------------------------------------------------------------------

#[test]
fn bad_lines_are_reported_as_path_line_message_and_exit_2() {
    let run = analyze(&["--format", "jsonl", BAD_LINES]);
    run.expect_code(2).expect_no_crash("bad-lines");
    for line in [3, 4, 5, 6, 8, 9, 11] {
        let prefix = format!("{BAD_LINES}:{line}:");
        assert!(
            run.stderr.lines().any(|l| l.starts_with(&prefix)),
            "no line starting with {prefix}\n{}",
            run.stderr
        );
    }
    assert!(
        run.stderr.contains('7'),
        "count of bad lines: {}",
        run.stderr
    );
}

#[test]
fn bad_line_messages_say_what_is_wrong() {
    let run = analyze(&["--format", "jsonl", BAD_LINES]);
    let message = |line: u32| -> String {
        let prefix = format!("{BAD_LINES}:{line}:");
        run.stderr
            .lines()
            .find(|l| l.starts_with(&prefix))
            .unwrap_or_else(|| panic!("no message for line {line}:\n{}", run.stderr))
            .to_lowercase()
    };
    assert!(message(3).contains("json"), "{}", message(3));
    assert!(
        message(4).contains("operation_id must be a string, got 4.5"),
        "{}",
        message(4)
    );
    assert!(message(5).contains("attempt"), "{}", message(5));
    assert!(message(5).contains('0'), "{}", message(5));
    assert!(message(6).contains("earlier than start"), "{}", message(6));
    assert!(message(8).contains("negative"), "{}", message(8));
    assert!(message(9).contains("cache"), "{}", message(9));
    assert!(
        message(9).contains("known hops are caller, gateway, consumer, dependency"),
        "{}",
        message(9)
    );
    assert!(message(11).contains("truncated"), "{}", message(11));
}

/// An integer ID reads as its digits up to u64 (Datadog's trace IDs exceed i64), in the
/// fast reader, the general one (a long line) and under a key mapping; beyond 64 bits the
/// digits are lost to any JSON reader, so the line is refused and told to quote it.
#[test]
fn integer_ids_read_as_their_digits_up_to_64_bits() {
    let line = |id: &str, pad: &str| {
        format!(
            r#"{{"operation_id":{id},"hop":"caller","attempt":1,"start_ms":1,"finish_ms":2,"outcome":200{pad}}}"#
        )
    };
    for id in [
        "7",
        "9223372036854775807",
        "9223372036854775808",
        "18446744073709551615",
    ] {
        for pad in ["", r#","note":{"nested":[1,2]}"#] {
            let run = run_with_stdin(
                &["analyze", "--format", "jsonl"],
                Some(line(id, pad).as_bytes()),
            );
            run.expect_code(0);
            let rows = decode_rows(&run.stdout);
            assert_eq!(rows[0].operation_id, id, "{pad}");
        }
        let mapped = format!(
            r#"{{"req":{id},"hop":"caller","attempt":1,"start_ms":1,"finish_ms":2,"outcome":200}}"#
        );
        let run = run_with_stdin(
            &[
                "analyze",
                "--format",
                "jsonl",
                "--field",
                "operation_id=req",
            ],
            Some(mapped.as_bytes()),
        );
        run.expect_code(0);
        assert_eq!(decode_rows(&run.stdout)[0].operation_id, id);
    }
    let run = run_with_stdin(
        &["analyze", "--format", "jsonl"],
        Some(line("123456789012345678901234", "").as_bytes()),
    );
    run.expect_code(2);
    assert!(
        run.stderr
            .contains("<stdin>:1: operation_id is an integer of more than 64 bits"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("quote it"), "{}", run.stderr);
}

#[test]
fn an_exact_duplicate_line_is_counted_once_and_is_not_an_error() {
    let run = analyze(&["--format", "json", BAD_LINES]);
    run.expect_code(2);
    let prefix = format!("{BAD_LINES}:7:");
    assert!(
        !run.stderr.lines().any(|l| l.starts_with(&prefix)),
        "line 7 reported as an error:\n{}",
        run.stderr
    );
    let summary = decode_summary(&run.stdout);
    assert_eq!(summary.input.duplicate_events, 1);
    assert_eq!(summary.input.bad_lines, 7);
    assert_eq!(summary.input.lines, 11);
    // Lines 1, 2 and 10 (line 7 is line 1 again): three attempts.
    assert_eq!(summary.attempts, 3);
}

#[test]
fn the_default_report_mentions_duplicate_events() {
    let run = analyze(&[BAD_LINES]);
    let text = format!("{}\n{}", run.stdout_text(), run.stderr).to_lowercase();
    let mentions = text
        .lines()
        .any(|l| l.contains("duplicate") && !l.contains("duplicate side effects"));
    assert!(mentions, "no mention of the duplicate event:\n{text}");
}

#[test]
fn good_operations_are_still_analysed_next_to_bad_lines() {
    let run = analyze(&["--format", "jsonl", BAD_LINES]);
    run.expect_code(2);
    let ops = by_id(decode_rows(&run.stdout));
    assert_eq!(
        ops.keys().map(String::as_str).collect::<Vec<_>>(),
        ["ok-1", "ok-2"]
    );
    let ok1 = &ops["ok-1"];
    assert_eq!(
        ok1.class, "healthy",
        "the duplicate must not make ok-1 overlap"
    );
    assert_eq!(ok1.attempts_at("caller"), 1);
    assert_eq!(ok1.attempts_at("gateway"), 1);
    assert_eq!(ok1.overlap_ms, 0.0);
    assert_eq!(ops["ok-2"].class, "healthy");
    assert_eq!(ops["ok-2"].attempts_at("caller"), 1);
}

#[test]
fn strict_stops_at_the_first_bad_line_without_a_report() {
    let run = analyze(&["--strict", BAD_LINES]);
    run.expect_code(2).expect_no_crash("--strict");
    assert!(
        run.stdout.is_empty(),
        "report written: {}",
        run.stdout_text()
    );
    assert!(
        run.stderr.contains(&format!("{BAD_LINES}:3:")),
        "{}",
        run.stderr
    );
    for later in [4, 5, 6, 8, 9, 11] {
        assert!(
            !run.stderr.contains(&format!("{BAD_LINES}:{later}:")),
            "went on past line 3 to line {later}:\n{}",
            run.stderr
        );
    }
}

#[test]
fn skip_invalid_reports_the_count_and_exits_0() {
    let run = analyze(&["--skip-invalid", "--format", "jsonl", BAD_LINES]);
    run.expect_code(0).expect_no_crash("--skip-invalid");
    assert!(
        run.stderr
            .split(|c: char| !c.is_ascii_digit())
            .any(|n| n == "7"),
        "count 7 not mentioned: {}",
        run.stderr
    );
    assert!(
        !run.stderr.contains(&format!("{BAD_LINES}:3:")),
        "--skip-invalid should report the count, not each line:\n{}",
        run.stderr
    );
    let ops = by_id(decode_rows(&run.stdout));
    assert_eq!(ops.len(), 2);
    assert!(ops.values().all(|o| o.class == "healthy"));
}

#[test]
fn strict_and_skip_invalid_together_are_a_usage_error() {
    let run = analyze(&["--strict", "--skip-invalid", BAD_LINES]);
    run.expect_code(2);
    assert!(run.stdout.is_empty());
}

#[test]
fn bad_lines_on_stdin_are_reported_against_stdin() {
    let bytes = std::fs::read(fixture("bad/bad-lines.jsonl")).unwrap();
    let run = run_with_stdin(&["analyze", "--format", "jsonl"], Some(&bytes));
    run.expect_code(2).expect_no_crash("bad lines on stdin");
    assert!(run.stderr.contains(":3:"), "{}", run.stderr);
    assert!(run.stderr.contains(":11:"), "{}", run.stderr);
    assert!(run.stderr.contains("truncated"), "{}", run.stderr);
    assert_eq!(decode_rows(&run.stdout).len(), 2);
}

#[test]
fn more_than_ten_bad_lines_show_the_first_ten_then_a_count() {
    let mut text = String::new();
    for _ in 0..15 {
        text.push_str("{\"operation_id\":\"bad\",\"start_ms\":2,\"finish_ms\":1}\n");
    }
    text.push_str("{\"operation_id\":\"good\",\"start_ms\":1,\"finish_ms\":2}\n");
    let file = TempFile::new("fifteen-bad.jsonl", text.as_bytes());
    let run = analyze(&[
        std::ffi::OsStr::new("--format"),
        "jsonl".as_ref(),
        file.path().as_os_str(),
    ]);
    run.expect_code(2);
    let name = file.path().to_string_lossy().into_owned();
    let shown = run
        .stderr
        .lines()
        .filter(|l| l.starts_with(&format!("{name}:")))
        .count();
    assert!((1..15).contains(&shown), "shown {shown}:\n{}", run.stderr);
    assert!(run.stderr.contains(&format!("{name}:1:")), "{}", run.stderr);
    assert!(
        run.stderr.contains("15"),
        "total count missing:\n{}",
        run.stderr
    );
    assert_eq!(decode_rows(&run.stdout).len(), 1);
}

#[test]
fn bad_line_numbers_count_blank_lines_and_restart_in_every_file() {
    let first = TempFile::new(
        "numbering-1.jsonl",
        b"\n{\"operation_id\":\"a\",\"start_ms\":1,\"finish_ms\":2}\n\n\n{\"operation_id\":\"b\",\"attempt\":0,\"start_ms\":1,\"finish_ms\":2}\n",
    );
    let second = TempFile::new(
        "numbering-2.jsonl",
        b"{\"operation_id\":\"c\",\"start_ms\":9,\"finish_ms\":2}\n",
    );
    let run = analyze(&[
        std::ffi::OsStr::new("--format"),
        "jsonl".as_ref(),
        first.path().as_os_str(),
        second.path().as_os_str(),
    ]);
    run.expect_code(2);
    let one = format!("{}:5:", first.path().display());
    let two = format!("{}:1:", second.path().display());
    assert!(run.stderr.contains(&one), "{one} missing:\n{}", run.stderr);
    assert!(run.stderr.contains(&two), "{two} missing:\n{}", run.stderr);
}

#[test]
fn strict_with_several_files_stops_in_the_first_file_with_a_bad_line() {
    let run = analyze(&[
        "--strict",
        "fixtures/classes/healthy.jsonl",
        BAD_LINES,
        "fixtures/classes/overlap.jsonl",
    ]);
    run.expect_code(2);
    assert!(run.stdout.is_empty());
    assert!(
        run.stderr.contains(&format!("{BAD_LINES}:3:")),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("overlap.jsonl:"), "{}", run.stderr);
}

#[test]
fn line_numbers_stay_right_past_the_first_read_chunk() {
    // Over 8 MiB (one read chunk) of valid events with one bad line near the end, so that
    // lines straddle the chunk boundary and the bad one is counted across it.
    let lines = fixture_lines("incident.jsonl");
    let mut text = String::new();
    let mut n = 0u64;
    for copy in 0..25 {
        for line in &lines {
            text.push_str(&line.replace("\"run-3\"", &format!("\"copy-{copy}\"")));
            n += 1;
        }
    }
    text.push_str("{\"operation_id\":\"broken\",\"start_ms\":5,\"finish_ms\":1}\n");
    let bad_line = n + 1;
    // And after it, a duplicate of the very first line: counted once, not an error.
    text.push_str(&lines[0].replace("\"run-3\"", "\"copy-0\""));
    assert!(
        text.len() > (8 << 20) + (512 << 10),
        "input must span two read chunks"
    );
    let file = TempFile::new("big.jsonl", text.as_bytes());

    let from_file = analyze(&[
        std::ffi::OsStr::new("--format"),
        "json".as_ref(),
        file.path().as_os_str(),
    ]);
    let from_stdin = run_with_stdin(&["analyze", "--format", "json"], Some(text.as_bytes()));
    for (run, name) in [
        (&from_file, file.path().display().to_string()),
        (&from_stdin, String::new()),
    ] {
        run.expect_code(2);
        let bad: Vec<&str> = run
            .stderr
            .lines()
            .filter(|l| l.contains("earlier than start"))
            .collect();
        assert_eq!(bad.len(), 1, "exactly one bad line:\n{}", run.stderr);
        assert!(
            bad[0].starts_with(&name) && bad[0].contains(&format!(":{bad_line}:")),
            "expected line {bad_line}: {}",
            bad[0]
        );
        let summary = decode_summary(&run.stdout);
        assert_eq!(summary.operations, 25 * 400);
        assert_eq!(summary.input.lines, n + 2);
        assert_eq!(summary.input.bad_lines, 1);
        assert_eq!(summary.input.duplicate_events, 1);
    }
}

#[test]
fn the_same_events_read_twice_are_counted_once() {
    let once = analyze_rows(&["fixtures/incident.jsonl"], &[]);
    let run = analyze(&[
        "--format",
        "jsonl",
        "fixtures/incident.jsonl",
        "fixtures/incident.jsonl",
    ]);
    run.expect_code(0);
    assert!(
        run.stderr
            .contains("1,947 exact duplicate events counted once (fixtures/incident.jsonl:1,"),
        "duplicates not reported: {}",
        run.stderr
    );
    assert_eq!(decode_rows(&run.stdout), once);
    let summary = analyze_summary(&["fixtures/incident.jsonl", "fixtures/incident.jsonl"], &[]);
    assert_eq!(summary.input.duplicate_events, summary.input.lines / 2);
    assert_eq!(summary.operations, 400);
}

// ---------------------------------------------------------------------------------------
// Inputs
// ---------------------------------------------------------------------------------------

#[test]
fn stdin_gives_the_same_result_as_the_file() {
    for rel in ["mixed-forms.jsonl", "logfmt-trace.logfmt", "incident.jsonl"] {
        let path = fixture(rel);
        let bytes = std::fs::read(&path).unwrap();
        let from_file = analyze(&[
            std::ffi::OsStr::new("--format"),
            "jsonl".as_ref(),
            path.as_os_str(),
        ]);
        from_file.expect_code(0);
        for args in [
            &["analyze", "--format", "jsonl"][..],
            &["analyze", "--format", "jsonl", "-"][..],
        ] {
            let from_stdin = run_with_stdin(args, Some(&bytes));
            from_stdin.expect_code(0);
            assert_eq!(
                decode_rows(&from_stdin.stdout),
                decode_rows(&from_file.stdout),
                "{rel} via {args:?}"
            );
        }

        let mut file_summary = decode_summary_value(
            &analyze(&[
                std::ffi::OsStr::new("--format"),
                "json".as_ref(),
                path.as_os_str(),
            ])
            .stdout,
        );
        let stdin_run = run_with_stdin(&["analyze", "--format", "json", "-"], Some(&bytes));
        stdin_run.expect_code(0);
        let mut stdin_summary = decode_summary_value(&stdin_run.stdout);
        file_summary["input"]["files"] = serde_json::Value::Null;
        stdin_summary["input"]["files"] = serde_json::Value::Null;
        assert_eq!(stdin_summary, file_summary, "{rel}: json summary");
    }
}

#[test]
fn several_input_files_are_analysed_together() {
    let rows = analyze_rows(
        &[
            fixture("classes/healthy.jsonl"),
            fixture("classes/overlap.jsonl"),
        ],
        &[],
    );
    assert_eq!(rows.len(), 8);
    let summary = analyze_summary(
        &[
            "fixtures/classes/healthy.jsonl",
            "fixtures/classes/overlap.jsonl",
        ],
        &[],
    );
    assert_eq!(
        summary.input.files,
        [
            "fixtures/classes/healthy.jsonl",
            "fixtures/classes/overlap.jsonl"
        ]
    );
    assert_eq!(summary.class_count("healthy"), 5);
    assert_eq!(summary.class_count("overlap"), 3);
}

#[test]
fn crlf_line_endings_are_accepted() {
    let text = std::fs::read_to_string(fixture("classes/overlap.jsonl")).unwrap();
    let crlf = TempFile::new("crlf.jsonl", text.replace('\n', "\r\n").as_bytes());
    assert_eq!(
        analyze_rows(&[crlf.path()], &[]),
        analyze_rows(&[fixture("classes/overlap.jsonl")], &[])
    );
}

// ---------------------------------------------------------------------------------------
// Output formats
// ---------------------------------------------------------------------------------------

#[test]
fn json_summary_has_schema_version_1_and_class_counts_that_sum_to_the_operations() {
    for files in [
        vec![fixture("incident.jsonl")],
        class_fixtures(),
        vec![fixture("mixed-forms.jsonl")],
    ] {
        let summary = analyze_summary(&files, &[]);
        let rows = analyze_rows(&files, &[]);
        assert_eq!(summary.schema_version, 1);
        assert_eq!(summary.operations, rows.len() as u64);
        assert_eq!(
            summary
                .classes
                .iter()
                .map(|c| c.class.as_str())
                .collect::<Vec<_>>(),
            CLASSES,
            "every class, in the order of docs/rules.md"
        );
        assert_eq!(
            summary.classes.iter().map(|c| c.operations).sum::<u64>(),
            summary.operations
        );
        for class in &summary.classes {
            let n = rows.iter().filter(|r| r.class == class.class).count() as u64;
            assert_eq!(class.operations, n, "{}", class.class);
            let share = n as f64 / summary.operations as f64;
            assert!((class.share - share).abs() < 1e-9, "{}", class.class);
        }
    }
}

#[test]
fn json_summary_amplification_is_attempts_per_operation_at_each_hop() {
    let files = [fixture("incident.jsonl")];
    let summary = analyze_summary(&files, &[]);
    let rows = analyze_rows(&files, &[]);
    assert_eq!(
        summary
            .hops
            .iter()
            .map(|h| h.hop.as_str())
            .collect::<Vec<_>>(),
        ["caller", "gateway", "consumer", "dependency"]
    );
    for hop in &summary.hops {
        let from_rows: u64 = rows.iter().map(|r| r.attempts_at(&hop.hop)).sum();
        assert_eq!(hop.attempts, from_rows, "{}", hop.hop);
        let amplification = hop.attempts as f64 / summary.operations as f64;
        assert!(
            (hop.amplification - amplification).abs() < 1e-9,
            "{}: {} vs {amplification}",
            hop.hop,
            hop.amplification
        );
        assert_eq!(
            hop.originals + hop.retries + hop.redeliveries,
            hop.attempts,
            "{}",
            hop.hop
        );
        assert_eq!(hop.budget, 3, "{}", hop.hop);
        let first: u64 = rows
            .iter()
            .filter(|r| r.first_multiplying_hop.as_deref() == Some(&hop.hop))
            .count() as u64;
        assert_eq!(hop.first_multiplying, first, "{}", hop.hop);
    }
    assert_eq!(
        summary.attempts,
        summary.hops.iter().map(|h| h.attempts).sum::<u64>()
    );
    assert_eq!(
        summary.attempts,
        rows.iter().map(|r| r.total_attempts).sum::<u64>()
    );
}

#[test]
fn json_summary_worst_operations_are_the_ones_with_most_attempts() {
    let files = [fixture("incident.jsonl")];
    let summary = analyze_summary(&files, &["--top", "5"]);
    assert_eq!(summary.worst_operations.len(), 5);
    let worst = &summary.worst_operations;
    assert!(worst
        .windows(2)
        .all(|w| w[0].total_attempts >= w[1].total_attempts));
    let rows = by_id(analyze_rows(&files, &[]));
    let max = rows.values().map(|r| r.total_attempts).max().unwrap();
    assert_eq!(worst[0].total_attempts, max);
    for op in worst {
        assert_eq!(
            &rows[&op.id()],
            op,
            "worst operation row equals its jsonl row"
        );
    }
}

#[test]
fn csv_has_one_row_per_operation_matching_the_jsonl_rows() {
    let mut files = class_fixtures();
    files.push(fixture("mixed-forms.jsonl"));
    // The logfmt trace has no test run and an unfinished attempt (null fields).
    files.push(fixture("logfmt-trace.logfmt"));
    let rows = by_id(analyze_rows(&files, &[]));

    let mut args: Vec<std::ffi::OsString> = vec!["--format".into(), "csv".into()];
    args.extend(files.iter().map(|f| f.clone().into_os_string()));
    let run = analyze(&args);
    run.expect_code(0);
    let table = parse_csv(&run.stdout_text());
    let header = &table[0];
    let hops = ["caller", "gateway", "consumer", "dependency"];
    let mut expected_header: Vec<String> = [
        "test_run_id",
        "operation_id",
        "class",
        "first_multiplying_hop",
    ]
    .map(String::from)
    .to_vec();
    expected_header.extend(hops.iter().map(|h| format!("{h}_attempts")));
    assert_eq!(
        &header[..expected_header.len()],
        &expected_header[..],
        "CSV header starts with the funnel columns"
    );
    let col = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("no CSV column {name}: {header:?}"))
    };
    let num = |s: &str| -> Option<f64> {
        (!s.is_empty()).then(|| s.parse().unwrap_or_else(|e| panic!("{s:?}: {e}")))
    };
    let opt = |s: &str| (!s.is_empty()).then(|| s.to_string());

    assert_eq!(table.len() - 1, rows.len(), "one CSV row per operation");
    for record in &table[1..] {
        assert_eq!(record.len(), header.len(), "{record:?}");
        let run_id = opt(&record[col("test_run_id")]);
        let op_id = &record[col("operation_id")];
        let id = match &run_id {
            Some(r) => format!("{r}/{op_id}"),
            None => op_id.clone(),
        };
        let row = rows
            .get(&id)
            .unwrap_or_else(|| panic!("CSV operation {id} not in jsonl"));
        assert_eq!(record[col("class")], row.class, "{id}");
        assert_eq!(
            opt(&record[col("first_multiplying_hop")]),
            row.first_multiplying_hop,
            "{id}"
        );
        for hop in hops {
            assert_eq!(
                record[col(&format!("{hop}_attempts"))]
                    .parse::<u64>()
                    .unwrap(),
                row.attempts_at(hop),
                "{id} {hop}"
            );
        }
        assert_eq!(
            record[col("total_attempts")].parse::<u64>().unwrap(),
            row.total_attempts,
            "{id}"
        );
        let findings: Vec<String> = record[col("findings")]
            .split(';')
            .filter(|f| !f.is_empty())
            .map(String::from)
            .collect();
        assert_eq!(findings, row.findings, "{id}");
        assert_eq!(
            num(&record[col("first_start_ms")]),
            Some(row.first_start_ms),
            "{id}"
        );
        assert_eq!(
            num(&record[col("last_finish_ms")]),
            row.last_finish_ms,
            "{id}"
        );
        assert_eq!(
            num(&record[col("overlap_ms")]),
            Some(row.overlap_ms),
            "{id}"
        );
    }
}

#[test]
fn csv_quotes_operation_ids_with_commas_quotes_and_newlines() {
    let line = br#"{"operation_id":"a,b \"q\"\nnl","test_run_id":"r,1","start_ms":0,"finish_ms":1}
"#;
    let run = run_with_stdin(&["analyze", "--format", "csv"], Some(line));
    run.expect_code(0);
    let table = parse_csv(&run.stdout_text());
    assert_eq!(table.len(), 2, "{table:?}");
    let header = &table[0];
    let row = &table[1];
    assert_eq!(row.len(), header.len(), "{row:?}");
    assert_eq!(row[0], "r,1");
    assert_eq!(row[1], "a,b \"q\"\nnl");
    assert_eq!(row[2], "healthy");
}

#[test]
fn a_closed_stdout_pipe_exits_quietly() {
    use std::process::{Command, Stdio};
    let mut child = Command::new(BIN)
        .args(["analyze", "--format", "jsonl", "fixtures/incident.jsonl"])
        .current_dir(root())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The report (~100 KB) is larger than a pipe buffer, so the writer sees the pipe close.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
}

#[test]
fn output_flag_writes_the_report_to_the_file_and_nothing_to_stdout() {
    for (format, short) in [
        ("json", false),
        ("jsonl", true),
        ("csv", false),
        ("table", true),
    ] {
        let out = TempFile::reserve(&format!("report.{format}"));
        let flag = if short { "-o" } else { "--output" };
        let run = analyze(&[
            std::ffi::OsStr::new("--format"),
            format.as_ref(),
            flag.as_ref(),
            out.path().as_os_str(),
            fixture("classes/overlap.jsonl").as_os_str(),
        ]);
        run.expect_code(0);
        assert!(run.stdout.is_empty(), "{format}: stdout not empty");
        let written = std::fs::read(out.path()).expect("report file written");
        let to_stdout = analyze(&[
            std::ffi::OsStr::new("--format"),
            format.as_ref(),
            fixture("classes/overlap.jsonl").as_os_str(),
        ]);
        assert_eq!(
            written, to_stdout.stdout,
            "{format}: file equals stdout report"
        );
    }
}

#[test]
fn output_to_an_unwritable_path_exits_2_naming_it() {
    let dir = TempFile::reserve("no-such-dir");
    let target = dir.path().join("report.json");
    let run = analyze(&[
        std::ffi::OsStr::new("-o"),
        target.as_os_str(),
        fixture("classes/healthy.jsonl").as_os_str(),
    ]);
    run.expect_code(2).expect_no_crash("unwritable output");
    assert!(
        run.stderr.contains(&*target.to_string_lossy()),
        "{}",
        run.stderr
    );
}

#[test]
fn table_report_shows_the_funnel_per_hop_and_the_worst_operations() {
    let run = analyze(&["fixtures/incident.jsonl"]);
    run.expect_code(0);
    let text = run.stdout_text();
    assert!(text.contains("Funnel per hop"), "{text}");
    assert!(text.contains("Worst operations"), "{text}");
    for class in CLASSES {
        assert!(text.contains(class), "class {class} missing:\n{text}");
    }
    for hop in ["caller", "gateway", "consumer", "dependency"] {
        assert!(text.contains(hop), "hop {hop} missing:\n{text}");
    }
}

#[test]
fn table_report_of_an_empty_input_still_renders() {
    let empty = TempFile::new("empty.jsonl", b"");
    let run = analyze(&[empty.path()]);
    // No attempt read is an input error, said on stderr, but the report is still whole.
    run.expect_code(2).expect_no_crash("empty table");
    assert!(run.stdout_text().contains("Funnel per hop"));
    assert!(
        run.stderr.contains("no attempts read from '") && run.stderr.contains("(0 lines"),
        "{}",
        run.stderr
    );
}

// ---------------------------------------------------------------------------------------
// Rules set by flags
// ---------------------------------------------------------------------------------------

#[test]
fn an_event_at_a_hop_outside_a_custom_hop_order_fails_naming_the_known_hops() {
    let run = analyze(&[
        "--hops",
        "edge,caller,dependency",
        "--format",
        "jsonl",
        "fixtures/classes/healthy.jsonl",
    ]);
    run.expect_code(2).expect_no_crash("--hops");
    let gateway_lines: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.starts_with("fixtures/classes/healthy.jsonl:"))
        .collect();
    assert!(!gateway_lines.is_empty(), "{}", run.stderr);
    for line in gateway_lines {
        assert!(line.contains("gateway"), "{line}");
        assert!(line.contains("edge, caller, dependency"), "{line}");
    }
    // The other hops still make a report, in the custom order.
    let rows = decode_rows(&run.stdout);
    assert_eq!(rows.len(), 5);
    for row in &rows {
        assert!(!row.attempts.contains_key("gateway"), "{row:?}");
    }
}

#[test]
fn a_custom_hop_order_names_the_hops_in_every_format() {
    let args = [
        "--hops",
        "edge,caller,gateway,consumer,dependency",
        "fixtures/classes/healthy.jsonl",
    ];
    let summary = analyze_summary(&args[2..], &args[..2]);
    assert_eq!(
        summary
            .hops
            .iter()
            .map(|h| h.hop.as_str())
            .collect::<Vec<_>>(),
        ["edge", "caller", "gateway", "consumer", "dependency"]
    );
    assert_eq!(summary.hops[0].attempts, 0);
    assert_eq!(summary.class_count("healthy"), 5);

    let run = analyze(&[&["--format", "csv"][..], &args[..]].concat());
    run.expect_code(0);
    let header = parse_csv(&run.stdout_text()).remove(0);
    assert!(header.contains(&"edge_attempts".to_string()), "{header:?}");
}

#[test]
fn an_unknown_hop_in_the_default_order_fails_naming_the_default_hops() {
    let line = br#"{"operation_id":"x","hop":"cache","attempt":1,"start_ms":1,"finish_ms":2}
"#;
    let run = run_with_stdin(&["analyze", "--format", "jsonl"], Some(line));
    run.expect_code(2);
    assert!(
        run.stderr
            .contains("known hops are caller, gateway, consumer, dependency"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_caller_budget_of_5_makes_a_4_attempt_caller_line_healthy() {
    let file = [fixture("classes/over-budget.jsonl")];
    let before = by_id(analyze_rows(&file, &[]));
    assert_eq!(
        before["ci-42/b-1"].attempts_at("caller"),
        4,
        "fixture changed"
    );
    assert_eq!(before["ci-42/b-1"].class, "over-budget");

    let after = by_id(analyze_rows(&file, &["--budget", "caller=5"]));
    let b1 = &after["ci-42/b-1"];
    assert_eq!(b1.class, "healthy");
    assert!(!b1.has_finding("over-budget@caller"), "{:?}", b1.findings);
    // Budgets of other hops are untouched.
    assert_eq!(after["ci-42/b-2"].class, "over-budget");
    assert_eq!(after["ci-42/b-3"].class, "over-budget");

    let summary = analyze_summary(&file, &["--budget", "caller=5"]);
    let budgets: Vec<(String, u32)> = summary
        .hops
        .iter()
        .map(|h| (h.hop.clone(), h.budget))
        .collect();
    assert_eq!(
        budgets,
        [
            ("caller", 5),
            ("gateway", 3),
            ("consumer", 3),
            ("dependency", 3)
        ]
        .map(|(h, b)| (h.to_string(), b))
    );
}

#[test]
fn a_tighter_budget_makes_a_within_budget_retry_over_budget() {
    let rows = by_id(analyze_rows(
        &[fixture("classes/healthy.jsonl")],
        &["--budget", "caller=2"],
    ));
    assert_eq!(rows["run-a/h-4"].class, "over-budget");
    assert_eq!(rows["run-a/h-3"].class, "healthy");
}

#[test]
fn bad_budget_and_burst_flags_are_usage_errors() {
    for args in [
        &["--budget", "caller=0"][..],
        &["--budget", "caller"][..],
        &["--budget", "cache=3"][..],
        &["--burst-min-ops", "1"][..],
        &["--burst-window", "0"][..],
        &["--burst-window", "-5"][..],
        &["--hops", "caller,caller"][..],
    ] {
        let mut all = args.to_vec();
        all.push("fixtures/classes/healthy.jsonl");
        let run = analyze(&all);
        run.expect_code(2).expect_no_crash(&format!("{args:?}"));
        assert!(run.stdout.is_empty(), "{args:?}");
        assert!(!run.stderr.is_empty(), "{args:?}");
    }
}

#[test]
fn burst_min_ops_above_the_burst_size_leaves_no_synchronized_burst() {
    let file = [fixture("classes/synchronized-burst.jsonl")];
    // The fixture's burst holds exactly 10 operations.
    let at_ten = analyze_rows(&file, &["--burst-min-ops", "10"]);
    assert!(at_ten.iter().all(|r| r.class == "synchronized-burst"));

    for min_ops in ["11", "20"] {
        let rows = analyze_rows(&file, &["--burst-min-ops", min_ops]);
        assert_eq!(rows.len(), 10);
        for row in &rows {
            assert_ne!(row.class, "synchronized-burst", "{min_ops}: {row:?}");
            assert!(
                !row.findings.iter().any(|f| f.starts_with("burst@")),
                "{min_ops}: {row:?}"
            );
            // One retrying layer inside its budget, no overlap: healthy.
            assert_eq!(row.class, "healthy", "{min_ops}: {row:?}");
        }
        let summary = analyze_summary(&file, &["--burst-min-ops", min_ops]);
        assert_eq!(summary.bursts.count, 0);
        assert_eq!(summary.class_count("synchronized-burst"), 0);
    }
}

#[test]
fn the_synchronized_burst_fixture_reports_one_burst_of_ten_operations() {
    let summary = analyze_summary(&[fixture("classes/synchronized-burst.jsonl")], &[]);
    assert_eq!(summary.bursts.count, 1);
    assert_eq!(summary.bursts.operations, 10);
    assert_eq!(summary.class_count("synchronized-burst"), 10);
}

#[test]
fn findings_beside_the_class_name_what_else_went_wrong() {
    let events = br#"{"operation_id":"effect","hop":"caller","attempt":1,"start_ms":0,"finish_ms":100,"outcome":"timeout","effect":true,"target":"POST /pay"}
{"operation_id":"effect","hop":"caller","attempt":2,"start_ms":400,"finish_ms":450,"outcome":"ok","effect":true,"target":"POST /pay","delay_ms":300}
{"operation_id":"hint","hop":"caller","attempt":1,"start_ms":10000,"finish_ms":10010,"outcome":429,"retry_after_ms":1000}
{"operation_id":"hint","hop":"caller","attempt":2,"start_ms":10110,"finish_ms":10150,"outcome":"ok","delay_ms":100}
{"operation_id":"hasty","hop":"caller","attempt":1,"start_ms":20000,"finish_ms":20005,"outcome":503}
{"operation_id":"hasty","hop":"caller","attempt":2,"start_ms":20005,"finish_ms":20050,"outcome":"ok"}
{"operation_id":"orphan","hop":"caller","attempt":1,"start_ms":30100,"finish_ms":30200,"outcome":"ok"}
{"operation_id":"orphan","hop":"gateway","attempt":1,"start_ms":30050,"finish_ms":30090,"outcome":"ok"}
"#;
    let run = run_with_stdin(&["analyze", "--format", "jsonl"], Some(events));
    run.expect_code(0);
    let ops = by_id(decode_rows(&run.stdout));
    // Each retries once within budget, so each is healthy; the finding says what went wrong.
    for (id, finding) in [
        ("effect", "duplicate-effect@caller"),
        ("hint", "retry-after-not-honoured@caller"),
        ("hasty", "retry-without-delay@caller"),
        ("orphan", "orphan@gateway"),
    ] {
        assert_eq!(ops[id].class, "healthy", "{id}");
        assert!(ops[id].has_finding(finding), "{id}: {:?}", ops[id].findings);
    }
    let run = run_with_stdin(&["analyze", "--format", "json"], Some(events));
    let summary = decode_summary(&run.stdout);
    assert_eq!(summary.duplicate_effects, 1);
    assert_eq!(summary.orphan_attempts, 1);
    let counted = |f: &str| {
        summary
            .findings
            .iter()
            .find(|c| c.finding == f)
            .map(|c| c.operations)
    };
    assert_eq!(counted("retries@caller"), Some(3));
    assert_eq!(counted("orphan@gateway"), Some(1));
}

// ---------------------------------------------------------------------------------------
// Usage and I/O errors
// ---------------------------------------------------------------------------------------

#[test]
fn a_missing_input_file_exits_2_naming_the_path() {
    let run = analyze(&["fixtures/no-such-file.jsonl"]);
    run.expect_code(2).expect_no_crash("missing file");
    assert!(run.stdout.is_empty());
    assert!(
        run.stderr.contains("fixtures/no-such-file.jsonl"),
        "{}",
        run.stderr
    );
}

#[test]
fn an_unknown_flag_exits_2() {
    let run = analyze(&["--no-such-flag", "fixtures/classes/healthy.jsonl"]);
    run.expect_code(2);
    assert!(run.stdout.is_empty());
    assert!(run.stderr.contains("--no-such-flag"), "{}", run.stderr);
}

#[test]
fn an_unknown_format_or_subcommand_exits_2() {
    analyze(&["--format", "xml", "fixtures/classes/healthy.jsonl"]).expect_code(2);
    run(&["frobnicate"]).expect_code(2);
    run::<&str>(&[]).expect_code(2);
}

// ---------------------------------------------------------------------------------------
// The incident fixture
// ---------------------------------------------------------------------------------------

#[test]
fn the_incident_fixture_analyses_cleanly_with_every_class_counted() {
    let run = analyze(&["--format", "json", "fixtures/incident.jsonl"]);
    run.expect_code(0);
    assert!(run.stderr.is_empty(), "{}", run.stderr);
    let summary = decode_summary(&run.stdout);
    assert_eq!(summary.operations, 400);
    assert_eq!(summary.input.bad_lines, 0);
    assert_eq!(summary.input.events, summary.input.lines);
    assert_eq!(
        summary
            .classes
            .iter()
            .map(|c| c.class.as_str())
            .collect::<Vec<_>>(),
        CLASSES
    );
    assert_eq!(
        summary.classes.iter().map(|c| c.operations).sum::<u64>(),
        400
    );
    // The generator's shapes: most operations are healthy, and every shape it makes shows up.
    for class in [
        "nested-retry",
        "fan-out",
        "redelivery",
        "overlap",
        "synchronized-burst",
    ] {
        assert!(summary.class_count(class) > 0, "no {class} operation");
    }
    assert!(summary.class_count("healthy") > 200);
    assert!(summary.bursts.count > 0);
    assert!(summary.overlap.operations >= summary.class_count("overlap"));
}

// ---------------------------------------------------------------------------------------
// Garbage input never panics
// ---------------------------------------------------------------------------------------

/// A small deterministic generator (xorshift64*), so that garbage is the same on every run.
struct Garbage(u64);

impl Garbage {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }

    /// Printable text in lines, some of it shaped like logfmt and JSON.
    fn text(&mut self, lines: usize) -> Vec<u8> {
        const PIECES: &[&str] = &[
            "{",
            "}",
            "\"",
            ":",
            ",",
            "=",
            " ",
            "[",
            "]",
            "operation_id",
            "operation",
            "attempt",
            "hop",
            "caller",
            "dependency",
            "start_ms",
            "finish_ms",
            "event",
            "t_ms",
            "start",
            "finish",
            "server-finish",
            "client-timeout",
            "-1",
            "0",
            "1",
            "1e308",
            "NaN",
            "null",
            "true",
            "\\",
            "\\u0000",
            "é",
            "2025-03-14T12:00:00Z",
        ];
        let mut out = Vec::new();
        for _ in 0..lines {
            let n = (self.next() % 24) as usize;
            for _ in 0..n {
                let piece = PIECES[(self.next() % PIECES.len() as u64) as usize];
                out.extend_from_slice(piece.as_bytes());
            }
            out.push(b'\n');
        }
        out
    }
}

/// Lines that are nearly valid, each at an edge of what the parser accepts.
const NASTY_LINES: &[&str] = &[
    "{}",
    "[1,2,3]",
    "null",
    "\"just a string\"",
    "42",
    r#"{"operation_id":1}"#,
    r#"{"operation_id":""}"#,
    r#"{"operation_id":null,"start_ms":0,"finish_ms":1}"#,
    r#"{"operation_id":"a","start_ms":1e308,"finish_ms":1.7e308}"#,
    r#"{"operation_id":"a","start_ms":0,"finish_ms":1e400}"#,
    r#"{"operation_id":"a","start_ms":"NaN","finish_ms":"inf"}"#,
    r#"{"operation_id":"a","attempt":18446744073709551616,"start_ms":0,"finish_ms":1}"#,
    r#"{"operation_id":"a","attempt":4294967297,"start_ms":0,"finish_ms":1}"#,
    r#"{"operation_id":"a","attempt":65537,"start_ms":0,"finish_ms":1}"#,
    r#"{"operation_id":"a","attempt":1.5,"start_ms":0,"finish_ms":1}"#,
    r#"{"operation_id":"a","attempt":-1,"start_ms":0,"finish_ms":1}"#,
    r#"{"operation_id":"a","hop":"consumer","delivery":0,"start_ms":0,"finish_ms":1}"#,
    r#"{"operation_id":"a","event":"finish","t_ms":5}"#,
    r#"{"operation_id":"a","event":"start","t_ms":5}"#,
    r#"{"operation_id":"a","event":"bogus","t_ms":5}"#,
    r#"{"operation_id":"a","event":"server-finish","t_ms":5}"#,
    r#"{"operation_id":"a","event":"client-timeout"}"#,
    r#"{"operation_id":"a","start":"2024-13-45T99:00:00Z","finish":"x"}"#,
    r#"{"operation_id":"a","start":"0000-01-01T00:00:00Z","finish":"9999-12-31T23:59:59Z"}"#,
    r#"{"operation_id":"a","start":"1969-12-31T23:59:59Z","finish":"1970-01-01T00:00:01Z"}"#,
    r#"{"operation_id":"a","start_ms":0,"finish_ms":1,"delay_ms":-5,"retry_after_ms":1e300}"#,
    r#"{"operation_id":"a","start_ms":9007199254740993,"finish_ms":9007199254740995}"#,
    r#"{"operation_id":"a","span_id":"s","parent_id":"s","start_ms":0,"finish_ms":1}"#,
    r#"{"operation_id":"a","hop":"gateway","span_id":"g","parent_id":"nowhere","start_ms":0,"finish_ms":1}"#,
    r#"{"operation_id":"a","hop":"dependency","attempt":3,"start_ms":5,"finish_ms":6}"#,
    r#"{"operation_id":"a","outcome":{"nested":[1]},"target":[],"start_ms":0,"finish_ms":1}"#,
    r#"{"operation_id":"a","outcome":999999999999,"start_ms":0,"finish_ms":1,"effect":"yes"}"#,
    r#"{"operation_id":"a","operation_id":"b","start_ms":0,"finish_ms":1}"#,
    r#"{"operation_id":"a","operationId":"b","start_ms":0,"finish_ms":1}"#,
    "operation=x attempt=1 event=start t_ms=0",
    "operation=x attempt=1 event=finish t_ms=-3",
    "a=b c",
    "=",
    "===",
    "operation=",
    "operation=\"unterminated",
    "\u{feff}{\"operation_id\":\"bom\",\"start_ms\":0,\"finish_ms\":1}",
    "\0\0\0",
];

/// Runs every output format on one input and checks the exit-code contract.
fn assert_never_panics(name: &str, contents: &[u8]) {
    let file = TempFile::new(name, contents);
    for format in ["table", "json", "jsonl", "csv"] {
        analyze(&[
            std::ffi::OsStr::new("--format"),
            format.as_ref(),
            file.path().as_os_str(),
        ])
        .expect_no_crash(&format!("{name} as {format}"));
    }
    let run = run_with_stdin(&["analyze", "--format", "json"], Some(contents));
    run.expect_no_crash(&format!("{name} on stdin"));
    if run.code == 0 {
        decode_summary(&run.stdout);
    }
}

/// A start at 1e308 ms is a finite time, so a valid one; beside a start at 0 it made the
/// attempts-over-time histogram's span overflow (a panic, in every version before this test).
#[test]
fn a_start_at_the_end_of_the_float_range_beside_one_at_zero_does_not_panic() {
    let lines = concat!(
        r#"{"operation_id":"a","start_ms":1e308,"finish_ms":1.7e308}"#,
        "\n",
        r#"{"operation_id":"a","attempt":2,"start_ms":0,"finish_ms":1}"#,
        "\n",
    );
    assert_never_panics("float-range.jsonl", lines.as_bytes());
    let file = TempFile::new("float-range-json.jsonl", lines.as_bytes());
    let run = analyze(&[
        std::ffi::OsStr::new("--format"),
        "json".as_ref(),
        file.path().as_os_str(),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let summary = decode_summary(&run.stdout);
    assert_eq!(
        (summary.operations, summary.attempts),
        (1, 2),
        "{summary:?}"
    );
}

#[test]
fn random_bytes_never_panic() {
    let mut g = Garbage(0x9E37_79B9_7F4A_7C15);
    for (i, size) in [1usize, 7, 512, 65_536].into_iter().enumerate() {
        let bytes = g.bytes(size);
        assert_never_panics(&format!("random-{i}.bin"), &bytes);
    }
}

#[test]
fn random_text_shaped_like_events_never_panics() {
    let mut g = Garbage(0xD1B5_4A32_D192_ED03);
    for i in 0..6 {
        let text = g.text(200);
        assert_never_panics(&format!("text-{i}.jsonl"), &text);
    }
}

#[test]
fn nearly_valid_lines_never_panic_alone_or_together() {
    for (i, line) in NASTY_LINES.iter().enumerate() {
        let file = TempFile::new(&format!("nasty-{i}.jsonl"), format!("{line}\n").as_bytes());
        analyze(&[
            std::ffi::OsStr::new("--format"),
            "json".as_ref(),
            file.path().as_os_str(),
        ])
        .expect_no_crash(line);
    }
    let all: String = NASTY_LINES.iter().map(|l| format!("{l}\n")).collect();
    assert_never_panics("nasty-all.jsonl", all.as_bytes());
}

#[test]
fn a_binary_file_never_panics() {
    assert_never_panics(
        "binary.bin",
        &std::fs::read(BIN).expect("read the binary itself")[..1 << 20],
    );
}

#[test]
fn an_empty_file_is_zero_operations_and_exit_2_unless_allowed() {
    for (name, contents) in [
        ("empty.jsonl", &b""[..]),
        ("blank.jsonl", &b"\n\n   \n\t\n\r\n\n"[..]),
    ] {
        assert_never_panics(name, contents);
        let file = TempFile::new(name, contents);
        let run = analyze(&[
            std::ffi::OsStr::new("--format"),
            "json".as_ref(),
            file.path().as_os_str(),
        ]);
        run.expect_code(2);
        assert!(run.stderr.contains("no attempts read"), "{}", run.stderr);
        let run = analyze(&[
            std::ffi::OsStr::new("--format"),
            "json".as_ref(),
            "--allow-empty".as_ref(),
            file.path().as_os_str(),
        ]);
        run.expect_code(0);
        assert!(run.stderr.is_empty(), "{}", run.stderr);
        let summary = decode_summary(&run.stdout);
        assert_eq!(summary.operations, 0, "{name}");
        assert_eq!(summary.input.bad_lines, 0, "{name}");
        assert_eq!(summary.classes.len(), 7, "{name}");
        assert!(summary
            .classes
            .iter()
            .all(|c| c.operations == 0 && c.share == 0.0));
        assert!(summary.hops.iter().all(|h| h.amplification == 0.0));
        let rows = analyze_rows(&[file.path()], &["--allow-empty"]);
        assert!(rows.is_empty(), "{name}");
    }
}

#[test]
fn attempts_marked_hidden_that_resend_give_the_hidden_resends_finding() {
    let lines = concat!(
        // h-1: one caller line of three sends, two of them resent by a layer inside the
        // client (`hidden`): retries at the caller, made by that layer.
        r#"{"operation_id":"h-1","hop":"caller","start_ms":0,"finish_ms":10,"outcome":503,"target":"GET /a","hidden":true}"#,
        "\n",
        r#"{"operation_id":"h-1","hop":"caller","start_ms":300,"finish_ms":310,"outcome":503,"target":"GET /a","hidden":"true"}"#,
        "\n",
        r#"{"operation_id":"h-1","hop":"caller","start_ms":600,"finish_ms":610,"outcome":"ok","target":"GET /a","hidden":true}"#,
        "\n",
        // h-2: one hidden send and no resend: nothing to report.
        r#"{"operation_id":"h-2","hop":"caller","start_ms":0,"finish_ms":10,"outcome":"ok","target":"GET /a","hidden":true}"#,
        "\n",
    );
    let file = TempFile::new("hidden.jsonl", lines.as_bytes());
    let rows = by_id(analyze_rows(&[file.path()], &[]));
    assert_eq!(
        rows["h-1"].findings,
        vec!["retries@caller", "hidden-resends@caller"]
    );
    assert_eq!(rows["h-1"].class, "healthy");
    assert!(rows["h-2"].findings.is_empty());

    let bad = TempFile::new(
        "bad-hidden.jsonl",
        br#"{"operation_id":"h-3","hop":"caller","start_ms":0,"finish_ms":1,"hidden":"yes"}
"#,
    );
    let run = analyze(&[bad.path()]);
    run.expect_code(2);
    assert!(
        run.stderr.contains("hidden must be true or false"),
        "{}",
        run.stderr
    );
}

/// A report that cannot be written (here a link to `/dev/full`, where every write fails for
/// want of space) is an error naming the file, and what `-o` names is left alone: only a
/// plain file of the run's own is removed when a run fails (as root, a failed run once
/// deleted the device it wrote to).
#[cfg(target_os = "linux")]
#[test]
fn an_output_that_cannot_be_written_is_an_error_naming_it_and_is_not_removed() {
    let dir = TempDir::new("full-output");
    // Rows of several MiB: the write fails while the rows are still being made.
    let events = dir.path.join("events.jsonl");
    run(&[
        "generate",
        "--ops",
        "40000",
        "-o",
        &events.display().to_string(),
    ])
    .expect_code(0);
    for (format, link) in [
        ("csv", "rows.csv"),
        ("jsonl", "rows.jsonl"),
        ("markdown", "report.md"),
    ] {
        let out = dir.path.join(link);
        std::os::unix::fs::symlink("/dev/full", &out).unwrap();
        let run = analyze(&[
            events.display().to_string(),
            "--format".into(),
            format.into(),
            "-o".into(),
            out.display().to_string(),
        ]);
        run.expect_code(2);
        let named = format!("could not write '{}'", out.display());
        assert!(
            run.stderr.contains(&named) && run.stderr.contains("No space left on device"),
            "{format}: {}",
            run.stderr
        );
        assert!(
            std::fs::symlink_metadata(&out).is_ok(),
            "{format}: the failed run removed {}",
            out.display()
        );
    }
}

//! Logs as they come (#45): a log whose attempt lines sit among banners, stack traces,
//! health checks and other records classifies exactly as its attempt lines alone; the
//! others are passed by and counted, never errors, unless `--strict` or `--input-format`
//! says the input is all attempts. Each line is read in the format it is written in, and a
//! long first line or a line that starts with `[` decides nothing for the rest of the file.

mod common;

use common::*;

const APP: &str = "fixtures/logs/mixed/app.log";
const ATTEMPTS: &str = "fixtures/logs/mixed/attempts.jsonl";
const MALFORMED: &str = "fixtures/logs/mixed/malformed.log";
const BANNER_FIRST: &str = "fixtures/logs/banner-first.log";

/// `analyze --format jsonl` of `args`, expecting `code`: the rows and stderr.
fn rows_and_stderr(args: &[&str], code: i32) -> (Vec<u8>, String) {
    let mut all = vec!["--format", "jsonl"];
    all.extend_from_slice(args);
    let run = analyze(&all);
    run.expect_code(code);
    (run.stdout, run.stderr)
}

/// Runs `file` and checks it gives the rows `alone` gives, with `others` (`162 lines`)
/// passed by; its stderr.
fn classifies_as(file: &str, alone: &[u8], others: &str) -> String {
    let (rows, stderr) = rows_and_stderr(&[file], 0);
    assert_eq!(
        String::from_utf8_lossy(&rows),
        String::from_utf8_lossy(alone),
        "{file}"
    );
    assert!(
        stderr.contains(&format!("{file}: {others} passed by, not attempts")),
        "{file}: {stderr}"
    );
    stderr
}

#[test]
fn a_mixed_log_classifies_as_its_attempt_lines_alone_and_counts_the_others() {
    let (alone, quiet) = rows_and_stderr(&[ATTEMPTS], 0);
    assert!(quiet.is_empty(), "{quiet}");
    // Nine lines in ten of app.log are not attempts; one other line leads banner-first.log.
    for (file, others) in [(APP, "162 lines"), (BANNER_FIRST, "1 line")] {
        let stderr = classifies_as(file, &alone, others);
        // No bad line (`path:line: …`).
        assert!(
            !stderr.lines().any(|l| l.starts_with(&format!("{file}:"))),
            "{file}: {stderr}"
        );
    }
    // What the README says of them.
    let classes: Vec<(String, String)> = decode_rows(&alone)
        .into_iter()
        .map(|r| (r.operation_id, r.class))
        .collect();
    let expected = [
        ("m-1", "healthy"),
        ("m-2", "healthy"),
        ("m-3", "over-budget"),
        ("m-4", "nested-retry"),
        ("m-5", "overlap"),
        ("m-6", "fan-out"),
    ];
    assert_eq!(
        classes,
        expected.map(|(id, class)| (id.to_string(), class.to_string()))
    );
}

#[test]
fn a_malformed_attempt_line_in_a_mixed_log_is_still_a_bad_line() {
    let (_, stderr) = rows_and_stderr(&[MALFORMED], 2);
    assert!(
        stderr.contains(&format!("{MALFORMED}:30: finish")),
        "{stderr}"
    );
    assert!(stderr.contains("1 bad input line"), "{stderr}");
}

#[test]
fn strict_or_a_forced_format_makes_the_other_lines_errors() {
    let run = analyze(&["--strict", APP]);
    run.expect_code(2);
    run.expect_stderr_says(&[&format!("{APP}:1:")]);
    let (_, stderr) = rows_and_stderr(&["--input-format", "jsonl", APP], 2);
    assert!(stderr.contains("162 bad input lines"), "{stderr}");
    assert!(!stderr.contains("passed by"), "{stderr}");
}

#[test]
fn an_input_with_no_attempt_line_exits_2_saying_what_its_lines_were() {
    let banner = "2026-03-01 10:00:00 INFO Starting\n  at com.example.Main.main(Main.java:12)\n";
    let run = run_with_stdin(&["analyze"], Some(banner.as_bytes()));
    run.expect_code(2).expect_stderr_says(&[
        "<stdin>: 2 lines passed by, not attempts",
        "no attempts read from",
    ]);
}

/// A logfmt trace and JSON attempt lines in one stream: each line in its own format.
#[test]
fn json_and_logfmt_lines_mix_in_one_input() {
    let logfmt = std::fs::read_to_string(root().join("fixtures/logfmt-trace.logfmt")).unwrap();
    let json = std::fs::read_to_string(root().join(ATTEMPTS)).unwrap();
    let together = run_with_stdin(
        &["analyze", "--format", "jsonl"],
        Some(format!("{logfmt}{json}").as_bytes()),
    );
    together.expect_code(0);
    let mut apart = decode_rows(&rows_and_stderr(&["fixtures/logfmt-trace.logfmt"], 0).0);
    apart.extend(decode_rows(&rows_and_stderr(&[ATTEMPTS], 0).0));
    let key = |r: &OperationRow| (r.operation_id.clone(), r.class.clone(), r.attempts.clone());
    let mut got: Vec<_> = decode_rows(&together.stdout).iter().map(key).collect();
    let mut want: Vec<_> = apart.iter().map(key).collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);
}

/// A first line longer than a read (9 MiB) is one long line, not the start of a trace
/// document; a first line that starts with `[` but is not JSON (Envoy's default text
/// format) is not Zipkin.
#[test]
fn a_long_or_bracketed_first_line_decides_nothing_for_the_rest() {
    let json = std::fs::read_to_string(root().join(ATTEMPTS)).unwrap();
    let (alone, _) = rows_and_stderr(&[ATTEMPTS], 0);
    let long = format!(
        "{{\"operation_id\":\"big\",\"note\":\"{}\"}}\n{json}",
        "a".repeat(9 << 20)
    );
    let run = run_with_stdin(&["analyze", "--format", "jsonl"], Some(long.as_bytes()));
    run.expect_code(2);
    run.expect_stderr_says(&["<stdin>:1: line is 9437216 bytes, longer than the limit"]);
    assert_eq!(run.stdout, alone);
    let bracketed = format!(
        "[2026-03-01T10:00:00.100Z] \"GET /ready HTTP/1.1\" 200 - 0 15 1 - \"-\" \"kube-probe/1.29\" \"-\" \"inventory\" \"-\"\n{json}"
    );
    let run = run_with_stdin(
        &["analyze", "--format", "jsonl"],
        Some(bracketed.as_bytes()),
    );
    run.expect_code(0);
    assert_eq!(run.stdout, alone);
    run.expect_stderr_says(&["<stdin>: 1 line passed by"]);
}

/// The lines passed by are in the summary, in every format, computed once: the JSON
/// summary's `input.other_lines` and its first example, the text reports' input line; and
/// they survive a partial and its merge, and a run that spills to disk.
#[test]
fn the_summary_counts_the_other_lines_in_every_format_partial_and_spill() {
    let json = analyze(&["--format", "json", APP]);
    json.expect_code(0);
    let summary = decode_summary_value(&json.stdout);
    assert_eq!(summary["input"]["other_lines"], 162);
    assert_eq!(summary["input"]["other_lines_example"], format!("{APP}:1"));
    let line = format!("162 not attempts (e.g. {APP}:1)");
    for format in ["table", "markdown", "html"] {
        let run = analyze(&["--format", format, APP]);
        run.expect_code(0);
        assert!(run.stdout_text().contains(&line), "{format}");
    }
    // Through a partial and its merge.
    let partial = analyze(&["--format", "partial", APP]);
    partial.expect_code(0);
    let merged = run_with_stdin(&["merge", "--format", "json", "-"], Some(&partial.stdout));
    merged.expect_code(0);
    assert_eq!(
        decode_summary_value(&merged.stdout)["input"],
        summary["input"]
    );
    // Spilled to disk as read: 300 copies of the log, each with its own operations.
    let text = std::fs::read_to_string(root().join(APP)).unwrap();
    let many: String = (0..300)
        .map(|i| text.replace("\"m-", &format!("\"c{i}-m-")))
        .collect();
    let held = run_with_stdin(&["analyze", "--format", "json"], Some(many.as_bytes()));
    let spilled = run_with_env(
        &["analyze", "--format", "json", "--memory-limit", "64KiB"],
        Some(many.as_bytes()),
        &[("ATTEMPT_FUNNEL_PROFILE", "1")],
    );
    held.expect_code(0);
    spilled.expect_code(0);
    assert!(
        partitions_read_back(&spilled.stderr) > 1,
        "{}",
        spilled.stderr
    );
    let held = decode_summary_value(&held.stdout);
    assert_eq!(held["input"]["other_lines"], 162 * 300);
    assert_eq!(held["input"]["other_lines_example"], "<stdin>:1");
    assert_eq!(
        decode_summary_value(&spilled.stdout)["input"],
        held["input"]
    );
}

/// What container runtimes write around an application's lines: the kubelet's CRI files
/// (long lines in `P` pieces, cut mid-character), Docker's json-file driver and `kubectl logs
/// --prefix`. Each classifies as the application's own lines; the stderr traceback between
/// them is other lines.
#[test]
fn container_log_wrappers_classify_as_the_lines_they_wrap() {
    let (plain, quiet) = rows_and_stderr(&["fixtures/logs/containers/app.jsonl"], 0);
    assert!(quiet.is_empty(), "{quiet}");
    for wrapped in ["cri.log", "docker-json.log", "kubectl-prefix.log"] {
        classifies_as(
            &format!("fixtures/logs/containers/{wrapped}"),
            &plain,
            "4 lines",
        );
    }
}

/// A line split into CRI pieces is joined across the chunks the input is read in (8 MiB):
/// 250 copies of the application's log, every line in 1000-byte pieces, read as the copies
/// themselves; and a split line whose last piece never comes ends the file cut short.
#[test]
fn cri_pieces_join_across_reads_and_an_unfinished_one_is_a_bad_line() {
    let app = std::fs::read_to_string(root().join("fixtures/logs/containers/app.jsonl")).unwrap();
    let (mut plain, mut cri) = (String::new(), Vec::new());
    for copy in 0..250 {
        let lines = app.replace("\"c-", &format!("\"k{copy}-c-"));
        plain.push_str(&lines);
        for line in lines.lines() {
            let pieces: Vec<&[u8]> = line.as_bytes().chunks(1000).collect();
            for (i, piece) in pieces.iter().enumerate() {
                let tag = if i + 1 == pieces.len() { "F" } else { "P" };
                cri.extend_from_slice(
                    format!("2026-03-01T10:00:00.{i:09}Z stdout {tag} ").as_bytes(),
                );
                cri.extend_from_slice(piece);
                cri.push(b'\n');
            }
        }
    }
    assert!(
        cri.len() > 9 << 20,
        "{} bytes: more than one read",
        cri.len()
    );
    let wrapped = run_with_stdin(&["analyze", "--format", "jsonl"], Some(&cri));
    wrapped.expect_code(0);
    let alone = run_with_stdin(&["analyze", "--format", "jsonl"], Some(plain.as_bytes()));
    alone.expect_code(0);
    assert_eq!(wrapped.stdout, alone.stdout);
    assert_eq!(decode_rows(&wrapped.stdout).len(), 1000);
    let cut = b"2026-03-01T10:00:00.1Z stdout F {\"operation_id\":\"a\",\"start_ms\":1,\"finish_ms\":2}\n2026-03-01T10:00:00.2Z stdout P {\"operation_id\":\"b\",\n";
    let run = run_with_stdin(&["analyze"], Some(cut));
    run.expect_code(2).expect_stderr_says(&["<stdin>:3:"]);
}

//! End-to-end tests of `analyze --partition K/N` (#11): every worker reads all the input
//! and keeps the operations whose key hashes to its partition. The partitions' rows are the
//! rows of one run, each operation in exactly the partition the documented hash names
//! (computed here independently, as a script routing lines itself would); the input's own
//! facts (lines read, bad lines) are reported by partition 0 only; the trace end is the
//! whole input's. Every input format partitions the same way (Parquet: tests/inputs.rs).

mod common;

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::path::Path;

use common::*;

const INCIDENT: &str = "fixtures/incident.jsonl";

/// The partition counts every check splits into.
const SPLITS: [u32; 3] = [1, 3, 7];

/// Bursts join operations across partitions, so a partition alone cannot find them: with
/// them out of reach, a partition's rows must be exactly one run's.
const NO_BURSTS: [&str; 2] = ["--burst-min-ops", "1000000"];

/// FNV-1a (64-bit) over the test run's bytes, a 0xFF byte, the operation ID's bytes, modulo
/// `n`: the partition docs/scale.md documents, written again from its description.
fn partition_of(test_run_id: Option<&str>, operation_id: &str, n: u32) -> u32 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let bytes = test_run_id
        .unwrap_or("")
        .bytes()
        .chain([0xFF])
        .chain(operation_id.bytes());
    for b in bytes {
        hash = (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    (hash % u64::from(n)) as u32
}

/// `analyze --format jsonl` with `args`: exit 0 expected, the output's lines.
fn jsonl_lines<S: AsRef<OsStr>>(args: &[S]) -> Vec<String> {
    let mut all: Vec<&OsStr> = vec![OsStr::new("--format"), OsStr::new("jsonl")];
    all.extend(args.iter().map(AsRef::as_ref));
    let run = analyze(&all);
    run.expect_code(0);
    run.stdout_text().lines().map(str::to_string).collect()
}

/// Splits `inputs` (with `flags`) into each of [`SPLITS`] by `--partition K/N` and checks
/// that every operation is in the partition the hash names and that, together, the
/// partitions' rows are the rows of one run, byte for byte.
fn check_partitions_are_one_run(inputs: &[&Path], flags: &[&str]) {
    let args = |extra: &[String]| -> Vec<String> {
        let mut args: Vec<String> = flags.iter().map(|s| s.to_string()).collect();
        args.extend(extra.iter().cloned());
        args.extend(inputs.iter().map(|p| p.display().to_string()));
        args
    };
    let mut one_run = jsonl_lines(&args(&[]));
    assert!(one_run.len() > 1, "{inputs:?}: too few operations to split");
    one_run.sort();
    for n in SPLITS {
        let mut together = Vec::new();
        let mut nonempty = 0;
        for k in 0..n {
            let lines = jsonl_lines(&args(&["--partition".into(), format!("{k}/{n}")]));
            for row in decode_rows(lines.join("\n").as_bytes()) {
                assert_eq!(
                    partition_of(row.test_run_id.as_deref(), &row.operation_id, n),
                    k,
                    "{inputs:?}: {} is not partition {k} of {n}",
                    row.id()
                );
            }
            nonempty += usize::from(!lines.is_empty());
            together.extend(lines);
        }
        together.sort();
        assert_eq!(together, one_run, "{inputs:?} as {n} partitions");
        // The split is a real one: several partitions hold operations.
        assert!(
            nonempty > 1 || n == 1 || one_run.len() < 3,
            "{inputs:?}: {n} partitions, only {nonempty} with operations"
        );
    }
}

#[test]
fn the_partitions_rows_are_one_runs_rows_in_json_lines_and_logfmt() {
    let incident = root().join(INCIDENT);
    check_partitions_are_one_run(&[&incident], &NO_BURSTS);
    let logfmt = [
        fixture("logfmt-trace.logfmt"),
        fixture("logfmt-trace-unnumbered.logfmt"),
        fixture("classes/nested-retry.jsonl"),
        fixture("classes/overlap.jsonl"),
    ];
    let logfmt: Vec<&Path> = logfmt.iter().map(|p| p.as_path()).collect();
    check_partitions_are_one_run(&logfmt, &NO_BURSTS);
}

#[test]
fn spans_are_partitioned_after_their_operation_is_resolved() {
    // A child span takes its operation from the span above it, possibly on another line
    // or in another file: every worker resolves all spans, then keeps its operations.
    let dir = fixture("otlp/real");
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
        .expect("fixtures/otlp/real")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.to_string_lossy().ends_with(".otlp.jsonl"))
        .collect();
    files.sort();
    let files: Vec<&Path> = files.iter().map(|p| p.as_path()).collect();
    let mut flags = vec!["--policy", "fixtures/otlp/real/hop-map.toml"];
    flags.extend(NO_BURSTS);
    check_partitions_are_one_run(&files, &flags);
    let zipkin = fixture("zipkin/checkout.json");
    let jaeger = fixture("documents/jaeger-traces.json");
    let mut flags = vec!["--policy", "fixtures/otlp/hop-map.toml"];
    flags.extend(NO_BURSTS);
    check_partitions_are_one_run(&[&zipkin, &jaeger], &flags);
}

#[test]
fn partition_zero_alone_reports_lines_read_and_bad_lines() {
    let bad = "fixtures/bad/bad-lines.jsonl";
    let whole = analyze(&["--format", "json", bad]);
    whole.expect_code(2);
    let whole_summary = decode_summary(&whole.stdout);
    assert!(whole_summary.input.bad_lines > 0 && whole_summary.input.lines > 0);
    let (mut events, mut operations) = (0, 0);
    for k in 0..3 {
        let partition = format!("{k}/3");
        let run = analyze(&["--format", "json", "--partition", &partition, bad]);
        let summary = decode_summary(&run.stdout);
        events += summary.input.events;
        operations += summary.operations;
        let listed = run.stderr.contains("bad-lines.jsonl:3: not valid JSON");
        if k == 0 {
            // Every bad line, as one run reports it, whoever owns its operation.
            run.expect_code(2);
            assert_eq!(summary.input.lines, whole_summary.input.lines);
            assert_eq!(summary.input.bad_lines, whole_summary.input.bad_lines);
            assert!(listed, "{}", run.stderr);
        } else {
            run.expect_code(0);
            assert_eq!((summary.input.lines, summary.input.bad_lines), (0, 0));
            assert!(
                !listed && !run.stderr.contains("bad input line"),
                "{}",
                run.stderr
            );
        }
    }
    // The good lines' events are all somewhere, each once.
    assert_eq!(events, whole_summary.input.events);
    assert_eq!(operations, whole_summary.operations);
}

#[test]
fn the_trace_end_is_the_whole_inputs_in_every_partition() {
    // `open` has two unfinished attempts at the caller, so they overlap until the trace
    // ends; the input's latest time is `late`'s, in another partition.
    let (open, late) = ("open-2", "late-1");
    let n = 2;
    assert_ne!(partition_of(None, open, n), partition_of(None, late, n));
    let unfinished = |attempt: u32, start: u64| {
        format!("{{\"operation_id\":\"{open}\",\"hop\":\"caller\",\"attempt\":{attempt},\"start_ms\":{start}}}\n")
    };
    let text =
        unfinished(1, 0) + &unfinished(2, 100) + &record(late, "caller", 1, 50, 10_000, "ok");
    let file = TempFile::new("trace-end.jsonl", text.as_bytes());
    let overlap_of = |extra: &[&str]| -> f64 {
        let rows = by_id(analyze_rows(&[file.path()], extra));
        rows[open].overlap_ms
    };
    let whole = overlap_of(&[]);
    assert_eq!(whole, 9_900.0, "overlap from 100 ms to the trace end");
    let own = format!("{}/{n}", partition_of(None, open, n));
    assert_eq!(overlap_of(&["--partition", &own]), whole);
}

#[test]
fn a_partition_that_is_not_k_of_n_is_a_usage_error() {
    for (value, says) in [
        ("3/3", "partition 3 does not exist among 3"),
        ("1/0", "N must be at least 1"),
        ("two/3", "is not a whole number"),
        ("2", "is not K/N"),
    ] {
        let run = analyze(&["--partition", value, INCIDENT]);
        run.expect_code(2);
        assert!(run.stderr.contains(says), "{value}: {}", run.stderr);
    }
    let run = run(&[
        "replay",
        "--candidate",
        "fixtures/candidates/recommended.toml",
        "--partition",
        "0/2",
        INCIDENT,
    ]);
    run.expect_code(2);
    assert!(
        run.stderr.contains("replay does not take --partition"),
        "{}",
        run.stderr
    );
}

/// The test's own hash spreads the incident's operations over every partition of 7, so the
/// checks above split for real (and the hash is not constant).
#[test]
fn the_incident_spreads_over_every_partition() {
    let rows = analyze_rows(&[INCIDENT], &[]);
    let used: BTreeSet<u32> = rows
        .iter()
        .map(|r| partition_of(r.test_run_id.as_deref(), &r.operation_id, 7))
        .collect();
    assert_eq!(used.len(), 7, "{used:?}");
}

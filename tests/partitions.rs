//! End-to-end tests of splitting an analysis into partitions (#11). With
//! `analyze --partition K/N` every worker reads all the input and keeps the operations whose
//! key hashes to its partition: the partitions' rows are the rows of one run, each operation
//! in exactly the partition the documented hash names (computed here independently, as a
//! script routing lines itself would); the input's own facts (lines read, bad lines) are
//! reported by partition 0 only; the trace end is the whole input's. Every input format
//! partitions the same way (Parquet: tests/inputs.rs).
//!
//! Then the whole route: the incident and a generated input split into 1, 3 and 7
//! partitions, by `--partition K/N` and by lines routed here, each made a partial and
//! merged, give one run's rows byte for byte, its JSON summary (timelines included) and its
//! gate verdict, bursts whose operations lie in different partitions included.

mod common;

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

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

/// A gate condition that the incident and the generated input both breach, so that the
/// verdict compared is a failing one (exit 1), not a vacuous pass.
const GATE: &str = "nested-retry > 1%";

/// How the input reaches the partitions.
#[derive(Debug, Clone, Copy)]
enum Split {
    /// Every worker reads all the input: `analyze --partition K/N`.
    Flag,
    /// The lines are routed here by the hash of their key, one file per partition, as an
    /// engine's shuffle would.
    Lines,
}

/// The (test run, operation ID) of a JSON Lines event.
fn key_of(line: &str) -> (Option<String>, String) {
    let event: serde_json::Value = serde_json::from_str(line).expect("a JSON event");
    let text = |v: &serde_json::Value| v.as_str().map(str::to_string);
    (
        text(&event["test_run_id"]),
        text(&event["operation_id"]).expect("an operation_id"),
    )
}

/// `input`'s lines routed into `n` files by [`partition_of`] of their key.
fn route_lines(input: &Path, n: u32, dir: &TempDir) -> Vec<PathBuf> {
    let text = std::fs::read_to_string(input).expect("read the input");
    let mut parts = vec![String::new(); n as usize];
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (run, operation) = key_of(line);
        let share = &mut parts[partition_of(run.as_deref(), &operation, n) as usize];
        share.push_str(line);
        share.push('\n');
    }
    parts
        .iter()
        .enumerate()
        .map(|(k, text)| dir.file(&format!("lines-{n}-{k}.jsonl"), text.as_bytes()))
        .collect()
}

/// The partials of `input` split `how` into `n`, in `dir`; with the files the one run to
/// compare with must read (the input, or the routed files in partition order, so that the
/// summary names the same files).
fn make_partials(input: &Path, n: u32, how: Split, dir: &TempDir) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let (reads, partials): (Vec<PathBuf>, Vec<PathBuf>) = match how {
        Split::Flag => {
            let partials = (0..n)
                .map(|k| {
                    let out = dir.path.join(format!("flag-{n}-{k}.partial"));
                    analyze(&[
                        "--partition".as_ref(),
                        format!("{k}/{n}").as_ref(),
                        "--format".as_ref(),
                        "partial".as_ref(),
                        "-o".as_ref(),
                        out.as_os_str(),
                        input.as_os_str(),
                    ])
                    .expect_code(0);
                    out
                })
                .collect();
            (vec![input.to_path_buf()], partials)
        }
        Split::Lines => {
            let files = route_lines(input, n, dir);
            let partials = files
                .iter()
                .map(|file| {
                    let out = file.with_extension("partial");
                    analyze(&[
                        "--format".as_ref(),
                        "partial".as_ref(),
                        "-o".as_ref(),
                        out.as_os_str(),
                        file.as_os_str(),
                    ])
                    .expect_code(0);
                    out
                })
                .collect();
            (files, partials)
        }
    };
    (reads, partials)
}

/// `command` (analyze or merge) over `files` with `flags`.
fn run_over(command: &str, files: &[PathBuf], flags: &[&str]) -> Run {
    let mut args: Vec<&OsStr> = vec![OsStr::new(command)];
    args.extend(flags.iter().map(OsStr::new));
    args.extend(files.iter().map(|f| f.as_os_str()));
    run(&args)
}

/// What the comparisons need of one side: rows, summary, gate.
struct Outcome {
    jsonl: Vec<u8>,
    csv: Vec<u8>,
    /// The JSON summary with the gate's verdict in it.
    summary: serde_json::Value,
    gate_code: i32,
}

/// The JSON summary of `command` over `files`, gated by [`GATE`], and its exit code.
fn gated_summary(command: &str, files: &[PathBuf]) -> (serde_json::Value, i32) {
    let run = run_over(command, files, &["--format", "json", "--fail-on", GATE]);
    assert!(run.code == 0 || run.code == 1, "{command}: {}", run.stderr);
    (decode_summary_value(&run.stdout), run.code)
}

fn outcome(command: &str, files: &[PathBuf]) -> Outcome {
    let rows = |format: &str| {
        run_over(command, files, &["--format", format])
            .expect_code(0)
            .stdout
            .clone()
    };
    let (summary, gate_code) = gated_summary(command, files);
    Outcome {
        jsonl: rows("jsonl"),
        csv: rows("csv"),
        summary,
        gate_code,
    }
}

/// Splits `input` into 1, 3 and 7 partitions both ways, makes a partial of each, merges,
/// and checks the merge against one run.
fn check_split_and_merge(input: &Path, what: &str) {
    let dir = TempDir::new("partitions-merge");
    let whole = outcome("analyze", &[input.to_path_buf()]);
    assert_eq!(
        whole.gate_code, 1,
        "{what}: the gate must breach for the verdict to mean something"
    );
    for n in SPLITS {
        for how in [Split::Flag, Split::Lines] {
            let at = format!("{what}, {n} partitions by {how:?}");
            let (reads, partials) = make_partials(input, n, how, &dir);
            let merged = outcome("merge", &partials);
            assert!(merged.jsonl == whole.jsonl, "{at}: jsonl rows differ");
            assert!(merged.csv == whole.csv, "{at}: csv rows differ");
            assert_eq!(merged.gate_code, whole.gate_code, "{at}: gate verdict");
            // One run over the very files the partitions read: the same summary to the last
            // field, the files it names included.
            let same_files = match how {
                Split::Flag => whole.summary.clone(),
                Split::Lines => gated_summary("analyze", &reads).0,
            };
            assert!(
                merged.summary == same_files,
                "{at}: JSON summaries differ:\n{}\n{}",
                merged.summary,
                same_files
            );
            assert!(
                !merged.summary["timelines"]
                    .as_array()
                    .expect("timelines")
                    .is_empty(),
                "{at}: no timelines"
            );
        }
    }
    // Bursts straddle partitions: analysed alone, the partitions of 7 see fewer of the
    // burst's operations than it takes to make one; the merge (equal to one run, above)
    // finds them all.
    let bursts = |jsonl: &[u8]| {
        decode_rows(jsonl)
            .iter()
            .filter(|r| r.class == "synchronized-burst")
            .count()
    };
    let in_one_run = bursts(&whole.jsonl);
    assert!(in_one_run > 0, "{what}: no burst to split");
    let alone: usize = (0..7)
        .map(|k| {
            let partition = format!("{k}/7");
            let run = run_over(
                "analyze",
                &[input.to_path_buf()],
                &["--format", "jsonl", "--partition", &partition],
            );
            bursts(&run.expect_code(0).stdout)
        })
        .sum();
    assert!(
        alone < in_one_run,
        "{what}: the partitions alone found {alone} of the {in_one_run} burst operations"
    );
}

#[test]
fn the_incident_in_1_3_and_7_partitions_merges_to_one_run() {
    check_split_and_merge(&root().join(INCIDENT), "incident");
}

/// Operations of the generated input the suite splits: 20 000 (about 100 000 lines) keeps
/// the test to seconds on a loaded two-core machine. The size of the issue, 200 000 (about
/// two minutes of CPU), and the input of examples/spark/run.sh, is the deep run's
/// (`ATTEMPT_FUNNEL_DEEP_TESTS=1`).
const GENERATED_OPS: u32 = 20_000;
const DEEP_GENERATED_OPS: u32 = 200_000;

#[test]
fn a_generated_input_in_1_3_and_7_partitions_merges_to_one_run() {
    let ops = if deep_tests() {
        DEEP_GENERATED_OPS
    } else {
        GENERATED_OPS
    };
    let dir = TempDir::new("partitions-generated");
    let input = dir.path.join("generated.jsonl");
    let ops = ops.to_string();
    run(&[
        "generate".as_ref(),
        "--ops".as_ref(),
        ops.as_ref(),
        "--seed".as_ref(),
        "5".as_ref(),
        "-o".as_ref(),
        input.as_os_str(),
    ])
    .expect_code(0);
    check_split_and_merge(&input, &format!("{ops} generated operations"));
}

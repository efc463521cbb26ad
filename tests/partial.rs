//! Partials and `merge`: input split by operation into files, each analysed with
//! `analyze --format partial`, then merged, gives exactly what one `analyze` run over the
//! same files gives — rows byte for byte, the JSON summary with its timelines, the gate's
//! verdict and exit code — including bursts whose retries fall in different partials and
//! operations whose unfinished attempts only the end of all the input settles.

mod common;

use std::path::{Path, PathBuf};

use common::{analyze, fixture, run, run_with_stdin, Run, TempDir};

/// Splits JSON Lines events into `n` files by operation (every event of an operation in
/// one file), by a hash of its key of our own: any split by operation must do.
fn split_by_operation(events: &str, n: usize, dir: &TempDir, stem: &str) -> Vec<PathBuf> {
    let mut parts = vec![String::new(); n];
    for line in events.lines().filter(|l| !l.trim().is_empty()) {
        let value: serde_json::Value = serde_json::from_str(line).expect("a JSON event");
        let key = format!("{}/{}", value["test_run_id"], value["operation_id"]);
        let share = key
            .bytes()
            .fold(7u64, |h, b| h.wrapping_mul(31) ^ u64::from(b))
            % n as u64;
        parts[share as usize].push_str(line);
        parts[share as usize].push('\n');
    }
    parts
        .iter()
        .enumerate()
        .map(|(i, text)| dir.file(&format!("{stem}-{i}.jsonl"), text.as_bytes()))
        .collect()
}

fn path_args(paths: &[PathBuf]) -> Vec<String> {
    paths.iter().map(|p| p.display().to_string()).collect()
}

/// `analyze FILE --format partial -o FILE.partial` for each file (plus `extra` flags).
fn partials(files: &[PathBuf], extra: &[&str]) -> Vec<PathBuf> {
    files
        .iter()
        .map(|f| {
            let out = f.with_extension("partial");
            let mut args = vec![
                "analyze".to_string(),
                f.display().to_string(),
                "--format".into(),
                "partial".into(),
                "-o".into(),
                out.display().to_string(),
            ];
            args.extend(extra.iter().map(|s| s.to_string()));
            run(&args).expect_code(0);
            out
        })
        .collect()
}

fn merge(parts: &[PathBuf], extra: &[&str]) -> Run {
    let mut args = vec!["merge".to_string()];
    args.extend(path_args(parts));
    args.extend(extra.iter().map(|s| s.to_string()));
    run(&args)
}

fn analyze_files(files: &[PathBuf], extra: &[&str]) -> Run {
    let mut args = path_args(files);
    args.extend(extra.iter().map(|s| s.to_string()));
    analyze(&args)
}

/// One run over `files` and the merge of their partials agree in every output format.
fn assert_merge_is_one_run(files: &[PathBuf], parts: &[PathBuf], extra: &[&str]) {
    for format in ["jsonl", "csv", "json", "markdown", "table", "html"] {
        let mut flags = vec!["--format", format];
        flags.extend(extra);
        let one = analyze_files(files, &flags);
        let merged = merge(parts, &flags);
        assert_eq!(
            merged.code, one.code,
            "{format}: exit code\n{}",
            merged.stderr
        );
        assert!(
            merged.stdout == one.stdout,
            "{format}: the merge differs from one run\n--- one run ---\n{}\n--- merge ---\n{}",
            String::from_utf8_lossy(&one.stdout),
            String::from_utf8_lossy(&merged.stdout)
        );
    }
}

#[test]
fn the_incident_split_in_three_merges_to_one_run_in_every_format() {
    let dir = TempDir::new("partial-incident");
    let events = std::fs::read_to_string(fixture("incident.jsonl")).unwrap();
    let files = split_by_operation(&events, 3, &dir, "incident");
    let parts = partials(&files, &[]);
    assert_merge_is_one_run(&files, &parts, &[]);

    // The rows do not depend on how the input was split into files at all.
    let whole = analyze(&[
        fixture("incident.jsonl").display().to_string(),
        "--format".into(),
        "jsonl".into(),
    ]);
    let merged = merge(&parts, &["--format", "jsonl"]);
    assert_eq!(merged.stdout, whole.expect_code(0).stdout);

    // The summary names the files the partials read, in the order of the partials.
    let summary: serde_json::Value =
        serde_json::from_slice(&merge(&parts, &["--format", "json"]).stdout).unwrap();
    let named: Vec<String> = summary["input"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .collect();
    assert_eq!(named, path_args(&files));
    assert!(!summary["timelines"].as_array().unwrap().is_empty());
}

#[test]
fn a_generated_input_split_in_three_merges_to_one_run_with_the_same_gate() {
    let dir = TempDir::new("partial-generated");
    let generated = run(&["generate", "--ops", "3000", "--seed", "11"]);
    let events = generated.expect_code(0).stdout_text();
    let files = split_by_operation(&events, 3, &dir, "gen");
    let parts = partials(&files, &[]);
    assert_merge_is_one_run(&files, &parts, &[]);

    // The gate: the same verdict, exit code and JUnit file.
    let gate = [
        "--fail-on",
        "nested-retry > 0",
        "--fail-on",
        "healthy < 50%",
    ];
    let one_junit = dir.path.join("one.xml");
    let merged_junit = dir.path.join("merged.xml");
    let mut one_flags: Vec<&str> = gate.to_vec();
    let one_path = one_junit.display().to_string();
    one_flags.extend(["--junit", &one_path]);
    let one = analyze_files(&files, &one_flags);
    let mut merged_flags: Vec<&str> = gate.to_vec();
    let merged_path = merged_junit.display().to_string();
    merged_flags.extend(["--junit", &merged_path]);
    let merged = merge(&parts, &merged_flags);
    one.expect_code(1);
    merged.expect_code(1);
    assert_eq!(merged.stderr, one.stderr);
    assert_eq!(
        std::fs::read_to_string(&merged_junit).unwrap(),
        std::fs::read_to_string(&one_junit).unwrap()
    );
    let mut report_only = gate.to_vec();
    report_only.push("--report-only");
    merge(&parts, &report_only).expect_code(0);
}

/// A burst of `ops` operations whose retries start within a few ms, on a quiet background.
fn burst_events(ops: usize) -> String {
    let mut out = String::new();
    let line = |op: &str, hop: &str, attempt: u32, start: u64, finish: u64, outcome: &str| {
        format!(
            "{{\"operation_id\":\"{op}\",\"hop\":\"{hop}\",\"attempt\":{attempt},\"start_ms\":{start},\"finish_ms\":{finish},\"outcome\":\"{outcome}\",\"target\":\"t\"}}\n"
        )
    };
    for i in 0..ops {
        let op = format!("burst-{i:02}");
        let t = 10_000 + i as u64;
        out += &line(&op, "caller", 1, t, t + 900, "ok");
        out += &line(&op, "gateway", 1, t + 1, t + 50, "503");
        out += &line(&op, "gateway", 2, t + 500, t + 550, "ok");
    }
    // Quiet background: single healthy operations spread over a minute.
    for i in 0..40 {
        let op = format!("quiet-{i:02}");
        let t = i * 1_500;
        out += &line(&op, "caller", 1, t, t + 20, "ok");
    }
    out
}

#[test]
fn a_burst_whose_operations_are_in_different_partials_is_found() {
    let dir = TempDir::new("partial-burst");
    let files = split_by_operation(&burst_events(12), 3, &dir, "burst");
    let parts = partials(&files, &[]);
    let summary = |run: Run| -> serde_json::Value {
        serde_json::from_slice(&run.expect_code(0).stdout).unwrap()
    };
    let merged = summary(merge(&parts, &["--format", "json"]));
    assert_eq!(merged["bursts"]["count"], 1, "{merged:#}");
    assert_eq!(merged["bursts"]["operations"], 12);
    // No partial alone holds enough of it: the burst is found only across them.
    for part in &parts {
        let alone = summary(merge(std::slice::from_ref(part), &["--format", "json"]));
        assert_eq!(alone["bursts"]["count"], 0, "{}", part.display());
    }
    assert_merge_is_one_run(&files, &parts, &[]);
}

#[test]
fn unfinished_attempts_take_the_end_of_all_the_input() {
    // Two attempts of one line at the gateway never finish: they overlap until the trace
    // ends, which is in the other file, 5 s later than anything in theirs.
    let unfinished = concat!(
        "{\"operation_id\":\"open\",\"hop\":\"caller\",\"attempt\":1,\"start_ms\":0,\"finish_ms\":1000,\"outcome\":\"timeout\"}\n",
        "{\"operation_id\":\"open\",\"hop\":\"gateway\",\"attempt\":1,\"start_ms\":10}\n",
        "{\"operation_id\":\"open\",\"hop\":\"gateway\",\"attempt\":2,\"start_ms\":200}\n",
    );
    let late = "{\"operation_id\":\"late\",\"hop\":\"caller\",\"attempt\":1,\"start_ms\":5000,\"finish_ms\":6000,\"outcome\":\"ok\"}\n";
    let dir = TempDir::new("partial-unfinished");
    let files = vec![
        dir.file("unfinished.jsonl", unfinished.as_bytes()),
        dir.file("late.jsonl", late.as_bytes()),
    ];
    let parts = partials(&files, &[]);
    let rows = merge(&parts, &["--format", "jsonl"])
        .expect_code(0)
        .stdout_text();
    let open: serde_json::Value =
        serde_json::from_str(rows.lines().find(|l| l.contains("\"open\"")).unwrap()).unwrap();
    assert_eq!(open["overlap_ms"], 5800.0, "{rows}");
    assert_merge_is_one_run(&files, &parts, &[]);
}

#[test]
fn partials_pass_through_pipes_compression_and_directories() {
    let dir = TempDir::new("partial-streams");
    let events = std::fs::read_to_string(fixture("incident.jsonl")).unwrap();
    let files = split_by_operation(&events, 3, &dir, "incident");
    let one = analyze_files(&files, &["--format", "jsonl"])
        .expect_code(0)
        .stdout
        .clone();

    // To standard output, then concatenated into one stream on standard input.
    let mut stream = Vec::new();
    for f in &files {
        let written = analyze(&[f.display().to_string(), "--format".into(), "partial".into()]);
        stream.extend(written.expect_code(0).stdout.clone());
    }
    let merged = run_with_stdin(&["merge", "-", "--format", "jsonl"], Some(&stream));
    assert_eq!(merged.expect_code(0).stdout, one);

    // Several partials one after the other in one file: each one's rows are read again
    // from its place in the file when the merge streams them out.
    let parts = partials(&files, &[]);
    let mut joined = Vec::new();
    for p in &parts {
        joined.extend(std::fs::read(p).unwrap());
    }
    let joined = dir.file("joined.partial", &joined);
    let merged = merge(&[joined], &["--format", "jsonl"]);
    assert_eq!(merged.expect_code(0).stdout, one);

    // zstd-compressed files in a directory.
    let packed = TempDir::new("partial-packed");
    for p in &parts {
        let name = format!("{}.zst", p.file_name().unwrap().to_string_lossy());
        packed.file(
            &name,
            &zstd::encode_all(&std::fs::read(p).unwrap()[..], 3).unwrap(),
        );
    }
    let merged = merge(std::slice::from_ref(&packed.path), &["--format", "jsonl"]);
    assert_eq!(merged.expect_code(0).stdout, one);
}

fn edit(part: &Path, from: &str, to: &str, dir: &TempDir, name: &str) -> PathBuf {
    let text = std::fs::read_to_string(part).unwrap();
    assert!(text.contains(from), "{from} not in the partial");
    dir.file(name, text.replacen(from, to, 1).as_bytes())
}

/// Values no analysis writes — rules no flag or policy file accepts, negative times — are
/// refused naming the line, not merged into a report (a burst size of 0 once made the burst
/// search panic).
#[test]
fn partials_with_values_no_analysis_writes_are_refused() {
    let dir = TempDir::new("partial-values");
    let events = std::fs::read_to_string(fixture("incident.jsonl")).unwrap();
    let files = split_by_operation(&events, 1, &dir, "incident");
    let part = partials(&files, &[]).remove(0);
    for (name, from, to, expected) in [
        (
            "min-ops.partial",
            "\"burst_min_ops\":5",
            "\"burst_min_ops\":0",
            ":1: the partial's header is not valid: the burst size is 0",
        ),
        (
            "window.partial",
            "\"burst_window_ms\":50.0",
            "\"burst_window_ms\":-50.0",
            ":1: the partial's header is not valid: the burst window is -50 ms",
        ),
        (
            "budget.partial",
            "\"budgets\":[3,",
            "\"budgets\":[0,",
            ":1: the partial's header is not valid: the attempt budget at caller is 0",
        ),
        (
            "retry.partial",
            "{\"retry\":[1,17",
            "{\"retry\":[1,-17",
            "a retry start is -17",
        ),
        (
            "row.partial",
            "\"first_start_ms\":17",
            "\"first_start_ms\":-17",
            "a row's first_start_ms is -17",
        ),
    ] {
        let edited = edit(&part, from, to, &dir, name);
        let refused = merge(std::slice::from_ref(&edited), &[]);
        refused.expect_code(2);
        assert!(
            refused.stderr.contains(&edited.display().to_string()),
            "{}",
            refused.stderr
        );
        assert!(refused.stderr.contains(expected), "{}", refused.stderr);
        assert!(!refused.stderr.contains("panicked"), "{}", refused.stderr);
    }
}

#[test]
fn partials_of_another_version_or_other_rules_are_refused() {
    let dir = TempDir::new("partial-refused");
    let events = std::fs::read_to_string(fixture("incident.jsonl")).unwrap();
    let files = split_by_operation(&events, 2, &dir, "incident");
    let parts = partials(&files, &[]);

    let future = edit(
        &parts[1],
        "\"version\":2",
        "\"version\":3",
        &dir,
        "future.partial",
    );
    let refused = merge(&[parts[0].clone(), future], &[]);
    refused.expect_code(2);
    assert!(refused.stderr.contains("version 3"), "{}", refused.stderr);

    let other_hops = partials(
        &files[1..],
        &["--hops", "caller,gateway,consumer,dependency,db"],
    );
    let refused = merge(&[parts[0].clone(), other_hops[0].clone()], &[]);
    refused.expect_code(2);
    assert!(refused.stderr.contains("hop order"), "{}", refused.stderr);

    let other_budget = partials(&files[1..], &["--budget", "gateway=5"]);
    let refused = merge(&[parts[0].clone(), other_budget[0].clone()], &[]);
    refused.expect_code(2);
    assert!(refused.stderr.contains("budgets"), "{}", refused.stderr);
    assert!(refused.stderr.contains("gateway=5"), "{}", refused.stderr);

    // A policy given to the merge may not change the partials' rules.
    let policy = dir.file("policy.toml", b"[budgets]\ndependency = 1\n");
    let refused = merge(&parts, &["--policy", &policy.display().to_string()]);
    refused.expect_code(2);
    assert!(refused.stderr.contains("budgets"), "{}", refused.stderr);

    // A cut partial, and not a partial at all.
    let text = std::fs::read_to_string(&parts[0]).unwrap();
    let cut = dir.file(
        "cut.partial",
        text[..text.len() / 2]
            .rsplit_once('\n')
            .unwrap()
            .0
            .as_bytes(),
    );
    merge(&[cut], &[]).expect_code(2);
    let refused = merge(&[files[0].clone()], &[]);
    refused.expect_code(2);
    assert!(
        refused.stderr.contains("not a partial"),
        "{}",
        refused.stderr
    );

    // An operation in two partials: the input was not split by operation.
    let refused = merge(&[parts[0].clone(), parts[0].clone()], &[]);
    refused.expect_code(2);
    assert!(
        refused.stderr.contains("in two partials"),
        "{}",
        refused.stderr
    );

    // Found while the rows were being written: the half-written row file is removed, so
    // that no file passes for the complete result of a failed merge.
    let out = dir.path.join("rows.jsonl");
    let refused = merge(
        &[parts[0].clone(), parts[0].clone()],
        &["--format", "jsonl", "-o", &out.display().to_string()],
    );
    refused.expect_code(2);
    assert!(
        refused.stderr.contains("in two partials"),
        "{}",
        refused.stderr
    );
    assert!(!out.exists(), "a failed merge left {}", out.display());

    // Rows written over a partial the merge still reads would destroy it: refused first.
    let before = std::fs::read(&parts[1]).unwrap();
    let refused = merge(
        &parts,
        &["--format", "jsonl", "-o", &parts[1].display().to_string()],
    );
    refused.expect_code(2);
    assert!(
        refused.stderr.contains("is also an input"),
        "{}",
        refused.stderr
    );
    assert_eq!(
        std::fs::read(&parts[1]).unwrap(),
        before,
        "the partial was changed"
    );
}

/// `analyze --partition K/N --format partial` of `input` for each K in `ks` (plus `extra`
/// flags), written to `dir` as `{stem}-K.partial`.
fn partition_partials(
    input: &Path,
    n: u32,
    ks: &[u32],
    extra: &[&str],
    dir: &TempDir,
    stem: &str,
) -> Vec<PathBuf> {
    ks.iter()
        .map(|k| {
            let out = dir.path.join(format!("{stem}-{k}.partial"));
            let mut args = vec![
                "analyze".to_string(),
                input.display().to_string(),
                "--partition".into(),
                format!("{k}/{n}"),
                "--format".into(),
                "partial".into(),
                "-o".into(),
                out.display().to_string(),
            ];
            args.extend(extra.iter().map(|s| s.to_string()));
            run(&args).expect_code(0);
            out
        })
        .collect()
}

/// A refused merge: exit 2, each of `expected` in its message, and no panic.
fn assert_refused(refused: &Run, expected: &[&str]) {
    refused.expect_code(2);
    for text in expected {
        assert!(
            refused.stderr.contains(text),
            "'{text}' not in:\n{}",
            refused.stderr
        );
    }
    assert!(!refused.stderr.contains("panicked"), "{}", refused.stderr);
    assert!(refused.stdout.is_empty(), "a refused merge wrote a report");
}

/// Four `--partition K/4` partials of the incident: all four merge to one run; three, or
/// one of them twice, are refused naming the partition (and both files of the one given
/// twice), where the merge once answered with three quarters of the operations and no word.
#[test]
fn a_set_of_partitions_with_one_missing_or_given_twice_is_refused_naming_it() {
    let dir = TempDir::new("partial-set");
    let incident = fixture("incident.jsonl");
    let parts = partition_partials(&incident, 4, &[0, 1, 2, 3], &[], &dir, "incident");
    let whole = analyze(&[
        incident.display().to_string(),
        "--format".into(),
        "json".into(),
    ]);
    let merged = merge(&parts, &["--format", "json"]);
    merged.expect_code(0);
    assert_eq!(merged.stdout, whole.stdout, "{}", merged.stderr);

    let three = [parts[0].clone(), parts[1].clone(), parts[3].clone()];
    assert_refused(
        &merge(&three, &[]),
        &["partition 2/4 is missing", "--allow-missing"],
    );
    assert_refused(
        &merge(&parts[..2], &[]),
        &["partitions 2/4, 3/4 are missing"],
    );

    let again = dir.file("again.partial", &std::fs::read(&parts[1]).unwrap());
    let twice = [parts.clone(), vec![again.clone()]].concat();
    assert_refused(
        &merge(&twice, &[]),
        &[
            "partition 1/4 is given twice",
            &parts[1].display().to_string(),
            &again.display().to_string(),
        ],
    );
    // --allow-missing does not make a duplicate countable.
    assert_refused(&merge(&twice, &["--allow-missing"]), &["given twice"]);
}

/// A partial foreign to the set — split into another N, made under other rules (a budget,
/// the layer inference of rule v3), read from other input, or holding a whole input — is
/// refused naming it.
#[test]
fn a_partial_foreign_to_the_set_is_refused_naming_it() {
    let dir = TempDir::new("partial-foreign");
    let incident = fixture("incident.jsonl");
    let parts = partition_partials(&incident, 4, &[0, 2, 3], &[], &dir, "incident");
    let with = |other: &Path| {
        let mut set = parts.clone();
        set.push(other.to_path_buf());
        set
    };

    let thirds = partition_partials(&incident, 3, &[1], &[], &dir, "thirds");
    assert_refused(
        &merge(&with(&thirds[0]), &[]),
        &["partition 1/3", "partition 0/4", "same N"],
    );

    let budget = partition_partials(
        &incident,
        4,
        &[1],
        &["--budget", "gateway=5"],
        &dir,
        "budget",
    );
    assert_refused(
        &merge(&with(&budget[0]), &[]),
        &[&budget[0].display().to_string(), "budgets", "gateway=5"],
    );

    let policy = dir.file("layers.toml", b"infer_layers = false\n");
    let policy = policy.display().to_string();
    let layers = partition_partials(&incident, 4, &[1], &["--policy", &policy], &dir, "layers");
    assert_refused(
        &merge(&with(&layers[0]), &[]),
        &[&layers[0].display().to_string(), "layer inference"],
    );
    // Nor may the merge's own policy change them.
    let mut set = parts.clone();
    set.extend(partition_partials(
        &incident,
        4,
        &[1],
        &[],
        &dir,
        "incident",
    ));
    assert_refused(
        &merge(&set, &["--policy", &policy]),
        &["layer inference", "true against false"],
    );

    let text = std::fs::read_to_string(&incident).unwrap();
    let fewer = dir.file(
        "fewer.jsonl",
        text.lines()
            .skip(1)
            .collect::<Vec<_>>()
            .join("\n")
            .as_bytes(),
    );
    let other = partition_partials(&fewer, 4, &[1], &[], &dir, "other");
    assert_refused(
        &merge(&with(&other[0]), &[]),
        &[&other[0].display().to_string(), "read other input"],
    );

    // Written beside its input: a copy here, not beside the fixture.
    let copy = dir.file("whole.jsonl", text.as_bytes());
    let whole = partials(&[copy], &[]).remove(0);
    assert_refused(
        &merge(&with(&whole), &[]),
        &["whole.partial", "holds all the operations of its input"],
    );
}

/// `--allow-missing` merges the partitions given; the report says it covers only them in
/// every format and in the gate's lines, and the exit code is the gate's.
#[test]
fn allow_missing_merges_what_is_there_and_every_format_says_so() {
    let dir = TempDir::new("partial-missing");
    let incident = fixture("incident.jsonl");
    let parts = partition_partials(&incident, 4, &[0, 1, 2, 3], &[], &dir, "incident");
    let three = [parts[0].clone(), parts[1].clone(), parts[3].clone()];
    let operations = |set: &[PathBuf]| {
        let merged = merge(set, &["--format", "json", "--allow-missing"]);
        merged.expect_code(0);
        common::decode_summary_value(&merged.stdout)["operations"]
            .as_u64()
            .unwrap()
    };
    let passing = ["--allow-missing", "--fail-on", "nested-retry > 100%"];

    let json = merge(&three, &[&passing[..], &["--format", "json"]].concat());
    json.expect_code(0);
    let summary = common::decode_summary_value(&json.stdout);
    let expected = serde_json::json!({
        "partitions_merged": 3,
        "partitions": 4,
        "missing_partitions": ["2/4"],
    });
    assert_eq!(summary["incomplete"], expected, "{summary}");
    assert_eq!(summary["gate"]["incomplete"], expected);
    // What is there is counted whole: the three partitions' operations, no more.
    assert_eq!(
        summary["operations"].as_u64().unwrap(),
        operations(&parts) - operations(&parts[2..3])
    );
    assert!(
        json.stderr.contains(
            "gate passed: 1 threshold within its limit — over only 3 of 4 partitions, 2/4 missing"
        ),
        "{}",
        json.stderr
    );

    let markdown = merge(&three, &[&passing[..], &["--format", "markdown"]].concat());
    markdown.expect_code(0);
    let text = markdown.stdout_text();
    assert!(
        text.contains("**Incomplete (3 of 4 partitions, 2/4 missing): "),
        "{text}"
    );
    assert!(
        text.contains("### Gate: passed — over only 3 of 4 partitions, 2/4 missing"),
        "{text}"
    );
    let html = merge(&three, &[&passing[..], &["--format", "html"]].concat());
    html.expect_code(0);
    assert!(
        html.stdout_text()
            .contains("<p class=\"lede\">Incomplete (3 of 4 partitions, 2/4 missing): "),
        "the HTML headline does not say it is incomplete"
    );
    let table = merge(&three, &passing);
    table.expect_code(0);
    assert!(
        table
            .stdout_text()
            .contains("Incomplete (3 of 4 partitions"),
        "{}",
        table.stdout_text()
    );

    let junit = dir.path.join("gate.xml");
    let junit_arg = junit.display().to_string();
    merge(&three, &[&passing[..], &["--junit", &junit_arg]].concat()).expect_code(0);
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains(
            "<property name=\"incomplete\" value=\"over only 3 of 4 partitions, 2/4 missing"
        ),
        "{xml}"
    );

    // The exit code is the gate's, over what is there.
    let failing = merge(
        &three,
        &["--allow-missing", "--fail-on", "nested-retry > 0"],
    );
    failing.expect_code(1);
    assert!(
        failing.stderr.contains("gate FAILED") && failing.stderr.contains("over only 3 of 4"),
        "{}",
        failing.stderr
    );

    // A whole set says nothing of the kind.
    let whole = merge(&parts, &["--format", "json", "--allow-missing"]);
    whole.expect_code(0);
    assert!(common::decode_summary_value(&whole.stdout)
        .get("incomplete")
        .is_none());
}

/// A header's burst window that no run could use (zero, subnormal, negative) and a
/// partial of the format's first version (which records no partition) are refused with a
/// message, never a panic (a subnormal window once panicked the burst search).
#[test]
fn a_header_with_an_unusable_burst_window_or_an_old_version_is_refused() {
    let dir = TempDir::new("partial-window");
    let incident = fixture("incident.jsonl");
    let part = partition_partials(&incident, 1, &[0], &[], &dir, "incident").remove(0);
    for (name, window, expected) in [
        ("subnormal.partial", "5e-324", "burst window is 5e-324 ms"),
        ("zero.partial", "0.0", "burst window is 0 ms"),
        ("negative.partial", "-50.0", "burst window is -50 ms"),
    ] {
        let edited = edit(
            &part,
            "\"burst_window_ms\":50.0",
            &format!("\"burst_window_ms\":{window}"),
            &dir,
            name,
        );
        assert_refused(
            &merge(std::slice::from_ref(&edited), &[]),
            &[&format!("{}:1", edited.display()), expected],
        );
    }
    let old = edit(&part, "\"version\":2", "\"version\":1", &dir, "old.partial");
    assert_refused(
        &merge(&[old], &[]),
        &["version 1", "make every partial again"],
    );
}

/// The merge analyses the operations a partial set aside (those with an unfinished
/// attempt) under the partials' rules, rule v3's settings included: a retry after a 400
/// that the policy calls retryable is no `retried-non-retryable` in the merge either (the
/// merge once analysed them under the default settings).
#[test]
fn set_aside_operations_are_merged_under_the_partials_two_layer_settings() {
    let dir = TempDir::new("partial-v3");
    let unfinished = "{\"operation_id\":\"a\",\"hop\":\"gateway\",\"attempt\":1,\"start_ms\":1}\n";
    let a = [
        common::record("a", "caller", 1, 0, 10, "400"),
        common::record("a", "caller", 2, 20, 30, "ok"),
        unfinished.to_string(),
    ]
    .concat();
    let files = vec![
        dir.file("a.jsonl", a.as_bytes()),
        dir.file(
            "b.jsonl",
            common::record("b", "caller", 1, 100, 200, "ok").as_bytes(),
        ),
    ];
    let policy = dir.file("retryable.toml", b"[retryable]\nstatuses = [400]\n");
    let policy = policy.display().to_string();
    let flag = |format: &'static str| vec!["--format", format, "--policy", &policy];

    let finding_of_a = |run: &Run| {
        run.stdout_text()
            .lines()
            .find(|l| l.contains("\"operation_id\":\"a\""))
            .map(|l| l.contains("retried-non-retryable"))
            .expect("a row of operation a")
    };
    let default = analyze_files(&files, &["--format", "jsonl"]);
    assert!(finding_of_a(&default), "{}", default.stdout_text());

    let parts = partials(&files, &["--policy", &policy]);
    let deferred = std::fs::read_to_string(&parts[0]).unwrap();
    assert!(deferred.contains("{\"deferred\":"), "a is not set aside");
    let one = analyze_files(&files, &flag("jsonl"));
    let merged = merge(&parts, &flag("jsonl"));
    merged.expect_code(0);
    assert!(!finding_of_a(&merged), "{}", merged.stdout_text());
    assert_eq!(merged.stdout, one.stdout);
}

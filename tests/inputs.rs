//! End-to-end tests of the inputs users actually have (#6): gzip and zstd files detected by
//! content, directories and quoted glob patterns, Parquet in and out, and the progress line.
//! Every form of the same events must give the same per-operation rows as the plain JSON
//! Lines file.

mod common;
#[path = "common/encoded.rs"]
mod encoded;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use polars::prelude::*;

use common::*;
use encoded::{gzip, jsonl_to_parquet, zstd};

const INCIDENT: &str = "fixtures/incident.jsonl";

fn incident_bytes() -> Vec<u8> {
    std::fs::read(root().join(INCIDENT)).expect("read the incident fixture")
}

/// The incident's lines split into `parts` consecutive pieces.
fn incident_parts(parts: usize) -> Vec<Vec<u8>> {
    let lines = fixture_lines("incident.jsonl");
    let per_part = lines.len().div_ceil(parts);
    lines
        .chunks(per_part)
        .map(|chunk| chunk.concat().into_bytes())
        .collect()
}

/// The per-operation rows of the plain JSON Lines incident, by operation.
fn baseline() -> BTreeMap<String, OperationRow> {
    let rows = by_id(analyze_rows(&[INCIDENT], &[]));
    assert_eq!(rows.len(), 400, "the incident fixture has 400 operations");
    rows
}

fn assert_same_rows_as_the_jsonl<S: AsRef<OsStr>>(inputs: &[S], what: &str) {
    let got = by_id(analyze_rows(inputs, &[]));
    assert!(
        got == baseline(),
        "{what}: rows differ from the plain JSON Lines input"
    );
}

fn read_parquet(path: &Path) -> DataFrame {
    let file = std::fs::File::open(path).expect("open the Parquet output");
    ParquetReader::new(file)
        .finish()
        .expect("read the Parquet output")
}

// ---------------------------------------------------------------------------------------
// The same events in every form give the same rows
// ---------------------------------------------------------------------------------------

#[test]
fn a_gzip_file_gives_the_same_rows_as_the_plain_file() {
    let file = TempFile::new("incident.jsonl.gz", &gzip(&incident_bytes()));
    assert_same_rows_as_the_jsonl(&[file.path()], "gzip");
}

#[test]
fn a_zstd_file_gives_the_same_rows_as_the_plain_file() {
    let file = TempFile::new("incident.jsonl.zst", &zstd(&incident_bytes()));
    assert_same_rows_as_the_jsonl(&[file.path()], "zstd");
}

#[test]
fn gzip_with_a_misleading_extension_is_still_detected() {
    let file = TempFile::new("incident.txt", &gzip(&incident_bytes()));
    assert_same_rows_as_the_jsonl(&[file.path()], "gzip named .txt");
}

#[test]
fn gzip_members_written_one_after_another_read_as_one_file() {
    let parts = incident_parts(3);
    let joined: Vec<u8> = parts.iter().flat_map(|p| gzip(p)).collect();
    let file = TempFile::new("appended.gz", &joined);
    assert_same_rows_as_the_jsonl(&[file.path()], "concatenated gzip members");
}

#[test]
fn gzip_on_stdin_gives_the_same_rows_as_the_plain_file() {
    let run = run_with_stdin(
        &["analyze", "--format", "jsonl"],
        Some(&gzip(&incident_bytes())),
    );
    run.expect_code(0);
    assert!(
        by_id(decode_rows(&run.stdout)) == baseline(),
        "gzip on stdin"
    );
}

#[test]
fn a_directory_of_split_parts_in_mixed_compression_gives_the_same_rows() {
    let dir = TempDir::new("parts");
    let parts = incident_parts(3);
    dir.file("part-1.jsonl", &parts[0]);
    dir.file("part-2.jsonl.gz", &gzip(&parts[1]));
    dir.file("more/part-3.jsonl.zst", &zstd(&parts[2]));
    // Hidden files are skipped: this one would be a bad line.
    dir.file(".part-0.swp", b"not an event\n");
    assert_same_rows_as_the_jsonl(&[&dir.path], "directory of parts");

    let summary = analyze_summary(&[&dir.path], &[]);
    let names: Vec<String> = summary
        .input
        .files
        .iter()
        .map(|f| {
            Path::new(f)
                .strip_prefix(&dir.path)
                .unwrap()
                .display()
                .to_string()
        })
        .collect();
    assert_eq!(
        names,
        ["more/part-3.jsonl.zst", "part-1.jsonl", "part-2.jsonl.gz"],
        "every file under the directory, in sorted path order"
    );
}

#[test]
fn a_quoted_glob_pattern_gives_the_same_rows() {
    let dir = TempDir::new("glob");
    for (i, part) in incident_parts(4).iter().enumerate() {
        dir.file(&format!("part-{i}.jsonl.gz"), &gzip(part));
    }
    dir.file("notes.txt", b"not an event and not matched\n");
    // The binary gets the pattern as written, as a shell passes a quoted one.
    let pattern = dir.path.join("part-*.jsonl.gz");
    assert_same_rows_as_the_jsonl(&[&pattern], "glob pattern");
}

#[test]
fn a_parquet_file_with_the_same_columns_gives_the_same_rows() {
    let file = TempFile::reserve("incident.parquet");
    jsonl_to_parquet(&incident_bytes(), file.path());
    assert_same_rows_as_the_jsonl(&[file.path()], "Parquet");
}

#[test]
fn a_parquet_file_splits_by_partition_as_its_jsonl_does() {
    let file = TempFile::reserve("incident.parquet");
    jsonl_to_parquet(&incident_bytes(), file.path());
    for k in 0..3 {
        let partition = format!("{k}/3");
        let flags = ["--partition", partition.as_str()];
        let from_parquet = by_id(analyze_rows(&[file.path()], &flags));
        let from_jsonl = by_id(analyze_rows(&[root().join(INCIDENT)], &flags));
        assert!(
            !from_jsonl.is_empty(),
            "partition {partition} holds operations"
        );
        assert!(from_parquet == from_jsonl, "partition {partition}");
    }
}

#[test]
fn parquet_of_point_events_and_records_classifies_like_its_jsonl() {
    let jsonl = std::fs::read(fixture("mixed-forms.jsonl")).unwrap();
    let file = TempFile::reserve("mixed-forms.parquet");
    jsonl_to_parquet(&jsonl, file.path());
    let from_parquet = by_id(analyze_rows(&[file.path()], &[]));
    let from_jsonl = by_id(analyze_rows(&[fixture("mixed-forms.jsonl")], &[]));
    assert!(!from_jsonl.is_empty());
    assert!(
        from_parquet == from_jsonl,
        "{from_parquet:#?}\n{from_jsonl:#?}"
    );
}

#[test]
fn bad_parquet_rows_are_reported_with_the_same_messages_as_bad_lines() {
    let jsonl = concat!(
        "{\"operation_id\":\"op-1\",\"hop\":\"caller\",\"start_ms\":1,\"finish_ms\":5}\n",
        "{\"hop\":\"caller\",\"start_ms\":2,\"finish_ms\":6}\n",
        "{\"operation_id\":\"op-3\",\"hop\":\"cache\",\"start_ms\":3,\"finish_ms\":7}\n",
        "{\"operation_id\":\"op-4\",\"hop\":\"caller\",\"start_ms\":9,\"finish_ms\":8}\n",
    );
    let lines = TempFile::new("bad.jsonl", jsonl.as_bytes());
    let table = TempFile::reserve("bad.parquet");
    jsonl_to_parquet(jsonl.as_bytes(), table.path());
    // Forced to JSON Lines, as a table's rows are: line 2, without an operation ID, would
    // otherwise be a line of something else in a mixed log, passed by.
    let from_lines = analyze(&[
        Path::new("--input-format"),
        Path::new("jsonl"),
        lines.path(),
    ]);
    let from_table = analyze(&[table.path()]);
    from_lines.expect_code(2);
    from_table.expect_code(2);
    let messages = |run: &Run, path: &Path| -> Vec<String> {
        let prefix = format!("{}:", path.display());
        run.stderr
            .lines()
            .filter_map(|l| l.strip_prefix(&prefix))
            .map(String::from)
            .collect()
    };
    let expected = messages(&from_lines, lines.path());
    assert_eq!(expected.len(), 3, "{}", from_lines.stderr);
    assert_eq!(messages(&from_table, table.path()), expected);
}

// ---------------------------------------------------------------------------------------
// Parquet output
// ---------------------------------------------------------------------------------------

#[test]
fn parquet_output_holds_the_csv_columns_and_the_jsonl_rows() {
    let out = TempFile::reserve("operations.parquet");
    let run = analyze(&[
        OsStr::new(INCIDENT),
        OsStr::new("--format"),
        OsStr::new("parquet"),
        OsStr::new("--output"),
        out.path().as_os_str(),
    ]);
    run.expect_code(0);
    assert!(run.stdout.is_empty(), "nothing on stdout with --output");
    let frame = read_parquet(out.path());

    let csv = analyze(&[INCIDENT, "--format", "csv"]);
    csv.expect_code(0);
    let header = parse_csv(&csv.stdout_text()).remove(0);
    let columns: Vec<String> = frame
        .get_column_names()
        .iter()
        .map(|c| c.to_string())
        .collect();
    assert_eq!(columns, header, "the same columns as --format csv");

    let rows = analyze_rows(&[INCIDENT], &[]);
    assert_eq!(frame.height(), rows.len());
    let text = |name: &str| -> Vec<Option<String>> {
        frame
            .column(name)
            .unwrap()
            .str()
            .unwrap()
            .iter()
            .map(|v| v.map(String::from))
            .collect()
    };
    let ids = text("operation_id");
    let classes = text("class");
    let runs = text("test_run_id");
    let totals: Vec<Option<u64>> = frame
        .column("total_attempts")
        .unwrap()
        .u64()
        .unwrap()
        .iter()
        .collect();
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(ids[i].as_deref(), Some(row.operation_id.as_str()));
        assert_eq!(classes[i].as_deref(), Some(row.class.as_str()));
        assert_eq!(runs[i], row.test_run_id);
        assert_eq!(totals[i], Some(row.total_attempts));
    }
}

#[test]
fn parquet_output_without_output_file_is_a_usage_error() {
    let run = analyze(&[INCIDENT, "--format", "parquet"]);
    run.expect_code(2);
    assert!(run.stdout.is_empty());
    assert!(
        run.stderr.contains("--format parquet") && run.stderr.contains("--output FILE"),
        "{}",
        run.stderr
    );
}

#[test]
fn parquet_output_goes_to_a_stdout_pipe_when_asked_with_dash() {
    let run = analyze(&[INCIDENT, "--format", "parquet", "--output", "-"]);
    run.expect_code(0);
    assert!(run.stdout.starts_with(b"PAR1"), "Parquet bytes on stdout");
    assert!(run.stdout.ends_with(b"PAR1"));
}

#[test]
fn the_parquet_output_read_back_as_input_is_refused_for_lacking_event_columns() {
    // Output rows are operations, not events: reading them back must fail clearly.
    let out = TempFile::reserve("operations.parquet");
    analyze(&[
        OsStr::new(INCIDENT),
        OsStr::new("-f"),
        OsStr::new("parquet"),
        OsStr::new("-o"),
        out.path().as_os_str(),
    ])
    .expect_code(0);
    let run = analyze(&[out.path()]);
    run.expect_code(2).expect_no_crash("operations as events");
    assert!(run.stderr.contains(&out.path().display().to_string()));
    assert!(
        run.stderr.contains("start_ms") || run.stderr.contains("no time"),
        "{}",
        run.stderr
    );
}

// ---------------------------------------------------------------------------------------
// Errors name the input
// ---------------------------------------------------------------------------------------

#[test]
fn a_corrupt_gzip_file_exits_2_naming_it() {
    let mut bytes = gzip(&incident_bytes());
    let middle = bytes.len() / 2;
    for b in &mut bytes[middle..middle + 64] {
        *b ^= 0x5a;
    }
    let corrupt = TempFile::new("corrupt.jsonl.gz", &bytes);
    let run = analyze(&[corrupt.path()]);
    run.expect_code(2).expect_no_crash("corrupt gzip");
    assert!(run.stdout.is_empty(), "no report from a corrupt input");
    assert!(
        run.stderr
            .contains(&format!("could not read '{}'", corrupt.path().display())),
        "{}",
        run.stderr
    );
}

#[test]
fn a_truncated_compressed_file_exits_2_naming_it() {
    for (name, bytes) in [
        ("cut.jsonl.gz", gzip(&incident_bytes())),
        ("cut.jsonl.zst", zstd(&incident_bytes())),
    ] {
        let cut = TempFile::new(name, &bytes[..bytes.len() / 2]);
        let run = analyze(&[cut.path()]);
        run.expect_code(2).expect_no_crash(name);
        assert!(
            run.stderr.contains(&cut.path().display().to_string()),
            "{name}: {}",
            run.stderr
        );
    }
}

#[test]
fn a_corrupt_parquet_file_exits_2_naming_it() {
    let good = TempFile::reserve("good.parquet");
    jsonl_to_parquet(&incident_bytes(), good.path());
    let bytes = std::fs::read(good.path()).unwrap();
    for (name, bytes) in [
        ("header-only.parquet", b"PAR1 and nothing else".to_vec()),
        ("cut.parquet", bytes[..bytes.len() / 2].to_vec()),
    ] {
        let bad = TempFile::new(name, &bytes);
        let run = analyze(&[bad.path()]);
        run.expect_code(2).expect_no_crash(name);
        assert!(
            run.stderr
                .contains(&format!("could not read '{}'", bad.path().display())),
            "{name}: {}",
            run.stderr
        );
    }
}

#[test]
fn a_glob_that_matches_nothing_exits_2_naming_the_pattern() {
    let dir = TempDir::new("empty-glob");
    let pattern = dir.path.join("*.jsonl.gz");
    let run = analyze(&[&pattern]);
    run.expect_code(2);
    assert!(run.stdout.is_empty());
    assert!(
        run.stderr
            .contains(&format!("no file matches '{}'", pattern.display())),
        "{}",
        run.stderr
    );
}

#[test]
fn an_empty_directory_exits_2_naming_it() {
    let dir = TempDir::new("empty-dir");
    let run = analyze(&[&dir.path]);
    run.expect_code(2);
    assert!(
        run.stderr.contains(&format!(
            "directory '{}' holds no input files",
            dir.path.display()
        )),
        "{}",
        run.stderr
    );
}

// ---------------------------------------------------------------------------------------
// Progress line
// ---------------------------------------------------------------------------------------

/// Distinct healthy operations, enough lines that reading them takes a while.
fn many_events(operations: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..operations {
        writeln!(
            out,
            "{{\"operation_id\":\"op-{i}\",\"hop\":\"caller\",\"attempt\":1,\"start_ms\":{i},\"finish_ms\":{},\"outcome\":\"ok\"}}",
            i + 5
        )
        .unwrap();
    }
    out
}

#[test]
fn progress_never_appears_when_stderr_is_not_a_terminal() {
    // Outside CI, with the input arriving in two parts a second apart, the run lasts long
    // enough that a progress line would be drawn if stderr were a terminal.
    let events = many_events(20_000);
    let (first, rest) = events.split_at(events.len() / 2);
    let mut child = Command::new(BIN)
        .args(["analyze", "--format", "jsonl"])
        .current_dir(root())
        .env_remove("CI")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start attempt-funnel");
    let mut stdin = child.stdin.take().unwrap();
    let (first, rest) = (first.to_vec(), rest.to_vec());
    let writer = std::thread::spawn(move || {
        stdin.write_all(&first).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(1000));
        stdin.write_all(&rest).unwrap();
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(decode_rows(&out.stdout).len(), 20_000);
    assert!(
        out.stderr.is_empty(),
        "stderr: {:?}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn progress_appears_on_a_terminal_and_is_cleared() {
    // The positive control of the test above: util-linux `script` gives the run a
    // terminal. Spilled (a tiny --memory-limit), the line counts the spilled events too.
    let dir = TempDir::new("progress");
    let events = many_events(20_000);
    let (first, rest) = events.split_at(events.len() / 2);
    let first = dir.file("first.jsonl", first);
    let rest = dir.file("rest.jsonl", rest);
    for limit in ["1GiB", "64K"] {
        let shell = format!(
            "{{ cat '{}'; sleep 1; cat '{}'; }} | '{BIN}' analyze --format jsonl --output /dev/null --memory-limit {limit}",
            first.display(),
            rest.display()
        );
        let out = Command::new("script")
            .args(["-q", "-e", "-c", &shell, "/dev/null"])
            .current_dir(root())
            .env_remove("CI")
            .env(MEMORY_FLOOR.0, MEMORY_FLOOR.1)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("this test needs `script` from util-linux to make a pseudo-terminal ({e}); install it (apt-get install util-linux)"));
        let screen = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{limit}: {screen}");
        assert!(
            screen.contains("attempt-funnel: read ") && screen.contains("20,000 events"),
            "{limit}: {screen:?}"
        );
        let last = screen
            .trim_end_matches(['\n', '\r'])
            .rsplit('\r')
            .next()
            .unwrap();
        assert!(
            last.trim().is_empty(),
            "{limit}: the line is cleared at the end: {screen:?}"
        );
    }
}

/// What the binary says on stderr, at once, when it is about to read a terminal (#15).
const STDIN_NOTICE: &str =
    "reading attempt events from standard input; pass a file or pipe logs in; Ctrl-D ends";

/// Runs the binary on a pseudo-terminal (util-linux `script`) with nothing typed: waits
/// until `STDIN_NOTICE` is on the screen while the input is still open (a notice shown only
/// at the end would be no notice), then ends the input as Ctrl-D does (`script` sends the
/// terminal's end-of-file when its own input closes) and returns the exit code and the
/// whole screen. Fails, rather than skipping, when `script` is missing.
fn notice_on_a_terminal(args: &[&str]) -> (i32, String) {
    use std::io::Read;
    use std::time::{Duration, Instant};
    let mut command_line = format!("exec '{BIN}'");
    for a in args {
        command_line.push_str(&format!(" '{a}'"));
    }
    let mut child = Command::new("script")
        .args(["-qec", &command_line, "/dev/null"])
        .current_dir(root())
        .env_remove("CI")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("this test needs `script` from util-linux to make a pseudo-terminal ({e}); install it (apt-get install util-linux)"));
    let mut out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = out.read(&mut buf) {
            if tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut deadline = Instant::now() + Duration::from_secs(30);
    let mut screen = Vec::new();
    while !String::from_utf8_lossy(&screen).contains(STDIN_NOTICE) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(bytes) => screen.extend(bytes),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "{args:?}: no notice within 30 s while waiting for input; the screen:\n{}",
                    String::from_utf8_lossy(&screen)
                );
            }
        }
    }
    drop(child.stdin.take());
    deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for script") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?}: one Ctrl-D did not end the input within 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    reader.join().unwrap();
    screen.extend(rx.try_iter().flatten());
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&screen).replace('\r', ""),
    )
}

#[test]
fn every_command_that_reads_a_terminal_says_so_at_once_and_ends_on_ctrl_d() {
    let replay = [
        "replay",
        "--candidate",
        "fixtures/candidates/caller-no-retry.toml",
    ];
    let cases: [&[&str]; 6] = [
        &["analyze"],
        &["analyze", "-"],
        &["convert"],
        &["show", "op-17"],
        &replay,
        &["diff", "-", "fixtures/incident.jsonl"],
    ];
    for args in cases {
        let (code, screen) = notice_on_a_terminal(args);
        // Nothing was typed: the input holds no attempt, which is not a crash.
        assert!(
            (0..=2).contains(&code) && !screen.contains("panicked"),
            "{args:?}: exit {code}:\n{screen}"
        );
        assert_eq!(
            screen.matches(STDIN_NOTICE).count(),
            1,
            "{args:?}:\n{screen}"
        );
    }
}

#[test]
fn no_notice_when_the_input_is_a_pipe_or_a_file() {
    let piped = run_with_stdin(&["analyze"], Some(&incident_bytes()));
    piped.expect_code(0);
    assert!(!piped.stderr.contains("standard input"), "{}", piped.stderr);
    let file = analyze(&["fixtures/incident.jsonl"]);
    file.expect_code(0);
    assert!(!file.stderr.contains("standard input"), "{}", file.stderr);
}

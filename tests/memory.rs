//! Bounded memory (#10): a run whose events do not fit `--memory-limit` spills them in
//! partitions to `--temp-dir` and analyses them one partition at a time. Nothing of the
//! output may change: every format is compared byte for byte with the run that held
//! everything in memory. The spill directory is gone when the run ends, however it ends.
//!
//! Each input is just large enough, and each limit just small enough, to force what its
//! test is about (a spill, partitions split again, lines spilled as read), and each test
//! checks from the run's profile (`ATTEMPT_FUNNEL_PROFILE=1`) that it did. Each partition
//! is a few files the kernel creates and removes, so a limit smaller than the test needs
//! costs the suite minutes, not coverage. `ATTEMPT_FUNNEL_DEEP_TESTS=1` runs the same
//! tests on the large inputs and tiny limits of old (200 000 operations; a few events per
//! partition), which take minutes.

mod common;

use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// Every output format of `analyze`, with the file name it is written to.
const FORMATS: [(&str, &str); 7] = [
    ("table", "report.txt"),
    ("json", "report.json"),
    ("jsonl", "rows.jsonl"),
    ("csv", "rows.csv"),
    ("markdown", "report.md"),
    ("parquet", "rows.parquet"),
    ("html", "report.html"),
];

/// A limit that holds every test input in memory.
const IN_MEMORY: &str = "16G";

/// Where a run reads its first input from.
#[derive(Debug, Clone, Copy, PartialEq)]
enum First {
    /// Named on the command line, as the others.
    File,
    /// Piped to standard input (`-`): its size is unknown, so a spill starts with
    /// [`FIRST_PARTITIONS_FROM_STDIN`] partitions.
    Stdin,
}

/// The bytes of every format, in memory (under a limit far above the input) and under
/// `limit`, and what the spilled run said; returns what the last spilled run wrote to
/// stderr, its profile included.
fn compare_every_format(inputs: &[&Path], first: First, limit: &str, extra: &[&str]) -> String {
    let mut spilled_stderr = String::new();
    let out = TempDir::new("memory-out");
    let spill = TempDir::new("memory-spill");
    for (format, file) in FORMATS {
        let mut outputs = Vec::new();
        let mut said = Vec::new();
        for memory in [None, Some(limit)] {
            let path = out.path.join(format!("{}-{file}", memory.unwrap_or("all")));
            let mut args: Vec<OsString> = vec![
                "--format".into(),
                format.into(),
                "--output".into(),
                path.clone().into(),
                "--temp-dir".into(),
                spill.path.clone().into(),
            ];
            args.extend(["--memory-limit".into(), memory.unwrap_or(IN_MEMORY).into()]);
            args.extend(extra.iter().map(OsString::from));
            let stdin = match first {
                First::File => None,
                First::Stdin => {
                    args.push("-".into());
                    Some(std::fs::read(inputs[0]).unwrap())
                }
            };
            let named = if first == First::Stdin {
                &inputs[1..]
            } else {
                inputs
            };
            args.extend(named.iter().map(|p| p.as_os_str().to_owned()));
            let env = [("ATTEMPT_FUNNEL_PROFILE", "1"), ("NO_COLOR", "1")];
            let mut all: Vec<OsString> = vec!["analyze".into()];
            all.extend(args);
            let run = run_with_env(&all, stdin.as_deref(), &env);
            run.expect_code(0);
            // The profile notes each spill: the tiny limit did force it, and the large one
            // did not.
            let spilled = run.stderr.contains("spilled");
            assert_eq!(spilled, memory.is_some(), "{format}: {}", run.stderr);
            // What the run said besides the profile (bad lines, lines passed by, notes)
            // is the same, too.
            said.push(without_profile(&run.stderr));
            assert_eq!(
                std::fs::read_dir(&spill.path).unwrap().count(),
                0,
                "{format}: the spill directory is left empty"
            );
            outputs.push(std::fs::read(&path).unwrap());
            if memory.is_some() {
                spilled_stderr = run.stderr;
            }
        }
        assert!(!outputs[0].is_empty(), "{format}");
        assert!(
            outputs[0] == outputs[1],
            "{format}: the spilled run wrote other bytes than the run in memory"
        );
        assert_eq!(
            said[0], said[1],
            "{format}: the spilled run said other things"
        );
    }
    spilled_stderr
}

/// The events a spilled run's profile says were spilled as they were read.
fn spilled_as_read(stderr: &str) -> u64 {
    stderr
        .lines()
        .find_map(|l| {
            l.strip_prefix("profile:   ")?
                .split(" events spilled as read")
                .next()?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no note of events spilled as read: {stderr}"))
}

/// `generate --ops OPS --seed SEED` in `dir`, as `events.jsonl`.
fn generated(dir: &TempDir, ops: u32, seed: u32) -> std::path::PathBuf {
    let events = dir.path.join("events.jsonl");
    run(&[
        OsString::from("generate"),
        "--ops".into(),
        ops.to_string().into(),
        "--seed".into(),
        seed.to_string().into(),
        "--output".into(),
        events.clone().into(),
    ])
    .expect_code(0);
    events
}

/// `analyze` with `args` and extra environment variables.
fn analyze_env(args: &[OsString], env: &[(&str, &str)]) -> Run {
    let out = Command::new(BIN)
        .arg("analyze")
        .args(args)
        .env(MEMORY_FLOOR.0, MEMORY_FLOOR.1)
        .envs(env.iter().copied())
        .current_dir(root())
        .stdin(Stdio::null())
        .output()
        .expect("run the binary");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The incident from stdin, under a limit of half its bytes: its 16 first partitions hold
/// about three times what one may, and each is split again as it is read back. Deep, also
/// from the file under 4 KiB: a few events per partition, split again and again, to parts
/// of one operation (some 2 000 partitions).
#[test]
fn the_incident_spilled_and_split_again_gives_every_format_byte_for_byte() {
    let incident = fixture("incident.jsonl");
    let half = std::fs::metadata(&incident).unwrap().len() / 2;
    let said = compare_every_format(&[&incident], First::Stdin, &half.to_string(), &[]);
    let read_back = partitions_read_back(&said);
    assert!(
        read_back > FIRST_PARTITIONS_FROM_STDIN,
        "{read_back} partitions read back: none was split again"
    );
    if deep_tests() {
        compare_every_format(&[&incident], First::File, "4K", &[]);
    }
}

/// Once the first spill is made, lines are encoded into the partitions where they are
/// parsed: every reader of lines that makes attempts takes that path, with bad lines and
/// lines passed by still reported in order. A first input of ten thousand lines (a few
/// batches of lines, more than an eighth of the 2 MiB limit) starts the spilling, so that
/// each fixture after it is spilled as read; deep, under 64 KiB, in hundreds of partitions.
#[test]
fn every_line_reader_spilled_as_read_gives_the_same_report() {
    let dir = TempDir::new("memory-as-read");
    let plain = dir.path.join("filler.jsonl");
    let mapped = dir.path.join("filler-k8s.jsonl");
    let lines =
        |line: &dyn Fn(u32) -> String| (0..10_000).map(|i| line(i) + "\n").collect::<String>();
    std::fs::write(
        &plain,
        lines(&|i| format!(r#"{{"operation_id":"filler-{i}","test_run_id":"filler","hop":"caller","start_ms":{i},"finish_ms":{},"outcome":"ok"}}"#, i + 5)),
    )
    .unwrap();
    std::fs::write(
        &mapped,
        lines(&|i| format!(r#"{{"@timestamp":"2026-11-30T09:{:02}:{:02}.000Z","duration":"5ms","trace":{{"request_id":"filler-{i}"}},"labels":{{"test_run":"filler"}},"kubernetes":{{"labels":{{"app":"checkout-web"}}}},"retries":0,"http.status":"ok"}}"#, i / 60 % 60, i % 60)),
    )
    .unwrap();
    let cases: [(&Path, &[&str], &[&str]); 5] = [
        (&plain, &["bad/bad-lines.jsonl"], &["--skip-invalid"]),
        (
            &plain,
            &["logfmt-trace.logfmt", "point-events-unnumbered.jsonl"],
            &[],
        ),
        (
            &plain,
            &["presets/k6.json", "presets/envoy-wave.jsonl"],
            &["--preset", "k6", "--preset", "envoy"],
        ),
        (
            &mapped,
            &["mapping/k8s-nested.jsonl"],
            &["--policy", "fixtures/mapping/k8s.toml"],
        ),
        // A worker's share of the operations: the others' count only for the trace end.
        (&plain, &["incident.jsonl"], &["--partition", "1/3"]),
    ];
    for (filler, fixtures, extra) in cases {
        let mut inputs = vec![filler.to_path_buf()];
        inputs.extend(fixtures.iter().map(|f| fixture(f)));
        let inputs: Vec<&Path> = inputs.iter().map(|p| p.as_path()).collect();
        let limit = if deep_tests() { "64K" } else { "2M" };
        let said = compare_every_format(&inputs, First::File, limit, extra);
        // More than the filler's last batch was spilled as read: the fixtures were.
        let as_read = spilled_as_read(&said);
        assert!(as_read > 0, "{fixtures:?}: nothing was spilled as read");
    }
}

#[test]
fn span_inputs_spilled_give_the_same_report() {
    // Spans are resolved across the trace in memory; the events they become are spilled.
    let otlp = fixture("otlp/gateway-retries.jsonl");
    let policy = fixture("otlp/hop-map.toml");
    // 32 KiB: a dozen partitions for the three operations; deep, 2 KiB and some 180.
    let limit = if deep_tests() { "2K" } else { "32K" };
    let said = compare_every_format(
        &[&otlp],
        First::File,
        limit,
        &["--policy", policy.to_str().unwrap()],
    );
    assert!(partitions_read_back(&said) > 1, "{said}");
}

/// A generated input of every class and synchronized bursts across partitions, spilled
/// several times: 20 000 operations (about 100 000 events, 11 MB held in memory) under
/// 8 MiB; deep, 200 000 operations (a million events, 110 MB) under 24 MiB.
#[test]
fn a_generated_input_spilled_gives_every_format_byte_for_byte() {
    let dir = TempDir::new("memory-generated");
    let (ops, limit) = if deep_tests() {
        (200_000, "24M")
    } else {
        (20_000, "8M")
    };
    let events = generated(&dir, ops, 7);
    let said = compare_every_format(&[&events], First::File, limit, &["--top", "20"]);
    let spills = profile_notes(&said, "spilled,");
    assert!(spills >= 2, "spilled {spills} times: {said}");
    assert!(spilled_as_read(&said) > 0, "{said}");
}

/// The input the early spill is judged on, and the limit: large enough that its first
/// 16 MiB are a small share of it, and a limit under which its events take more than one
/// and a half times the events' eighth, so that waiting for that eighth to fill would
/// spill far fewer as read. 100 000 operations (94 MB, 490 000 events) under 192 MiB:
/// judged after 16 MiB, 73 % are spilled as read, against 42 % when the first spill waits
/// for the budget to fill (as it does from stdin). Deep: 200 000 operations (187 MB) under
/// 256 MiB, 87 % against 63 %.
fn judged_early(dir: &TempDir) -> (std::path::PathBuf, &'static str, u64) {
    if deep_tests() {
        (generated(dir, 200_000, 7), "256M", 4)
    } else {
        (generated(dir, 100_000, 7), "192M", 3)
    }
}

/// A plain file whose first megabytes say it will not fit is spilled from there on, not
/// once the budget is full.
#[test]
fn a_file_that_will_not_fit_is_spilled_from_its_first_chunks() {
    let dir = TempDir::new("memory-early");
    let (events, limit, fifths) = judged_early(&dir);
    let said = compare_every_format(&[&events], First::File, limit, &[]);
    let lines = std::fs::read_to_string(&events).unwrap().lines().count() as u64;
    let as_read = spilled_as_read(&said);
    assert!(
        as_read * 5 > lines * fifths,
        "{as_read} of {lines} events spilled as read: fewer than {fifths} in 5"
    );
}

/// The same file compressed is judged as early: its size as stored is known only as it is
/// read, and the reading runs ahead of the parsing, so how much of it the events held stand
/// for is estimated from the share of its text parsed. The same rows as the plain file's.
#[test]
fn a_compressed_file_that_will_not_fit_is_spilled_from_its_first_chunks() {
    let dir = TempDir::new("memory-early-zstd");
    let (events, limit, fifths) = judged_early(&dir);
    let text = std::fs::read(&events).unwrap();
    let lines = text.iter().filter(|&&b| b == b'\n').count() as u64;
    let compressed = dir.file("events.jsonl.zst", &zstd::encode_all(&text[..], 1).unwrap());
    drop(text);
    let rows = |input: &Path, name: &str| {
        let out = dir.path.join(name);
        let args: Vec<OsString> = vec![
            input.into(),
            "--memory-limit".into(),
            limit.into(),
            "--format".into(),
            "csv".into(),
            "-o".into(),
            out.clone().into(),
        ];
        let run = analyze_env(&args, &[("ATTEMPT_FUNNEL_PROFILE", "1")]);
        run.expect_code(0);
        (std::fs::read(&out).unwrap(), run.stderr)
    };
    let (from_zstd, said) = rows(&compressed, "zstd.csv");
    let as_read = spilled_as_read(&said);
    // As many spilled as read as for the plain file; a compressed input not judged waited
    // for the budget to fill.
    assert!(
        as_read * 5 > lines * fifths,
        "{as_read} of {lines} events spilled as read: fewer than {fifths} in 5"
    );
    assert!(
        from_zstd == rows(&events, "plain.csv").0,
        "other rows than the plain file's"
    );
}

/// The merge reads one file per partition at once, for each hop searched at once: under a
/// small limit, or at tens of millions of operations, more than the common soft limit on
/// open files. The run raises its soft limit to the hard one: under a soft limit of 40,
/// `generate --ops 10000` under a 1 MiB limit (some 180 partitions) merges, and gives the
/// rows of the run in memory.
#[test]
fn more_partitions_than_the_soft_open_files_limit_merge() {
    let dir = TempDir::new("memory-files");
    let events = generated(&dir, 10_000, 3);
    let rows = |name: &str, limit: &str, soft_files: Option<u32>| {
        let path = dir.path.join(name);
        let mut command = match soft_files {
            // The shell lowers its soft limit and the binary starts under it.
            Some(n) => {
                let mut c = Command::new("sh");
                c.args(["-c", &format!("ulimit -Sn {n} && exec \"$0\" \"$@\""), BIN]);
                c
            }
            None => Command::new(BIN),
        };
        let out = command
            .env(MEMORY_FLOOR.0, MEMORY_FLOOR.1)
            .arg("analyze")
            .args(["--format", "csv", "--memory-limit", limit, "--temp-dir"])
            .arg(&dir.path)
            .arg("--output")
            .arg(&path)
            .arg(&events)
            .env("ATTEMPT_FUNNEL_PROFILE", "1")
            .stdin(Stdio::null())
            .output()
            .expect("run the binary");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let partitions = stderr.matches("partition read back").count();
        (std::fs::read(&path).expect("rows written"), partitions)
    };
    let (in_memory, _) = rows("memory.csv", IN_MEMORY, None);
    let (spilled, partitions) = rows("spilled.csv", "1M", Some(40));
    assert!(
        partitions > 100,
        "{partitions} partitions: too few to need more than 40 files at once"
    );
    assert!(
        spilled == in_memory,
        "the spilled run wrote other rows than the run in memory"
    );
}

/// One operation of 30 000 attempts holds more than a partition may (a third of an eighth
/// of 1 MiB): its partition is split again as it is read back, every part but one is
/// empty (an operation is never split), and that part is analysed whole, beside the other
/// partitions read two at a time. From standard input (size unknown) and from the file.
#[test]
fn an_operation_larger_than_a_partition_is_analysed_whole() {
    let dir = TempDir::new("memory-huge");
    let events = dir.path.join("huge.jsonl");
    let mut text = String::new();
    for n in 1..=30_000u64 {
        let outcome = if n < 30_000 { "error" } else { "ok" };
        text.push_str(&format!(
            "{{\"operation_id\":\"huge\",\"hop\":\"caller\",\"attempt\":{n},\"start_ms\":{},\"finish_ms\":{},\"outcome\":\"{outcome}\"}}\n",
            1_700_000_000_000 + n * 10,
            1_700_000_000_005 + n * 10
        ));
    }
    for k in 0..200u64 {
        text.push_str(&format!(
            "{{\"operation_id\":\"small-{k}\",\"hop\":\"caller\",\"attempt\":1,\"start_ms\":{},\"finish_ms\":{},\"outcome\":\"ok\"}}\n",
            1_700_000_000_000 + k,
            1_700_000_000_003 + k
        ));
    }
    std::fs::write(&events, &text).unwrap();
    let rows = |limit: &str, stdin: bool| {
        let path = dir.path.join(format!("rows-{limit}-{stdin}.csv"));
        let mut command = Command::new(BIN);
        command
            .env(MEMORY_FLOOR.0, MEMORY_FLOOR.1)
            .arg("analyze")
            .args(["--format", "csv", "--memory-limit", limit, "--temp-dir"])
            .arg(&dir.path)
            .arg("--output")
            .arg(&path)
            .env("ATTEMPT_FUNNEL_PROFILE", "1");
        if stdin {
            command
                .arg("-")
                .stdin(Stdio::from(std::fs::File::open(&events).unwrap()));
        } else {
            command.arg(&events).stdin(Stdio::null());
        }
        let out = command.output().expect("run the binary");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert_eq!(
            stderr.contains("partition read back"),
            limit != IN_MEMORY,
            "{stderr}"
        );
        std::fs::read(&path).expect("rows written")
    };
    let in_memory = rows(IN_MEMORY, false);
    assert_eq!(
        String::from_utf8_lossy(&in_memory).lines().count(),
        202,
        "a header and 201 operations"
    );
    for stdin in [false, true] {
        assert!(
            rows("1M", stdin) == in_memory,
            "spilled (stdin: {stdin}): other rows than in memory"
        );
    }
}

#[test]
fn an_unwritable_temp_dir_is_a_clear_error() {
    let dir = TempDir::new("memory-not-a-dir");
    let file = dir.file("plain-file", b"");
    let run = analyze(&[
        OsString::from("--memory-limit"),
        "1K".into(),
        "--temp-dir".into(),
        file.clone().into(),
        fixture("incident.jsonl").into(),
    ]);
    run.expect_code(2);
    assert!(
        run.stderr.contains(&format!(
            "could not create a directory for spill files in '{}'",
            file.display()
        )) && run.stderr.contains("--temp-dir"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_memory_limit_below_the_floor_is_a_usage_error() {
    // Without the tests' lower floor: below 64MiB the run's own memory, not the limit,
    // would bound the process (and `--memory-limit 1` made a partition of every event).
    let out = Command::new(BIN)
        .args([
            "analyze",
            "--memory-limit",
            "16MiB",
            "fixtures/incident.jsonl",
        ])
        .env_remove(MEMORY_FLOOR.0)
        .current_dir(root())
        .output()
        .expect("run attempt-funnel");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("the smallest limit is 64MiB"), "{stderr}");
}

#[test]
fn a_memory_limit_that_is_not_a_size_is_a_usage_error() {
    let run = analyze(&["--memory-limit", "lots", "fixtures/incident.jsonl"]);
    run.expect_code(2);
    assert!(
        run.stderr.contains("'lots' is not a size"),
        "{}",
        run.stderr
    );
}

#[test]
fn ctrl_c_while_spilling_removes_the_spill_directory() {
    let spill = TempDir::new("memory-ctrl-c");
    // More than one 8 MiB read: the first is analysed (and spilled) while the run waits
    // for the rest.
    let lines = run(&["generate", "--ops", "60000"])
        .expect_code(0)
        .stdout
        .clone();
    assert!(lines.len() > 9 << 20, "{} bytes", lines.len());
    let mut child = Command::new(BIN)
        .env(MEMORY_FLOOR.0, MEMORY_FLOOR.1)
        .args(["analyze", "--memory-limit", "1K", "--temp-dir"])
        .arg(&spill.path)
        .current_dir(root())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the binary");
    let mut stdin = child.stdin.take().unwrap();
    // Lines in, the pipe left open: the run waits for more after its first spills.
    use std::io::Write;
    stdin.write_all(&lines).unwrap();
    stdin.flush().unwrap();
    let started = Instant::now();
    while std::fs::read_dir(&spill.path).unwrap().count() == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no spill directory appeared"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = child.wait().unwrap();
    drop(stdin);
    assert_eq!(status.code(), Some(130), "ends as interrupted");
    assert_eq!(
        std::fs::read_dir(&spill.path).unwrap().count(),
        0,
        "the spill directory is removed on Ctrl-C"
    );
}

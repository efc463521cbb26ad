//! Hostile input (#13): every kind of input that once made the binary panic, abort, hang,
//! blow up its memory, answer wrongly, or let input text act on a terminal or a document,
//! as a small regression test. Inputs are generated here, never committed; the compression
//! bombs are compressed on the fly.

mod common;
#[path = "../src/fuzz.rs"]
mod fuzz;

use std::ffi::OsStr;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use polars::prelude::*;

use common::*;

/// A run that takes longer than this is a hang (the tests below take a second or two).
const HANG: Duration = Duration::from_secs(300);

/// Address space the binary gets in the memory tests (`ulimit -v`, in KiB): far above what
/// a bounded run needs, far below what the unbounded readers took on these inputs.
const ADDRESS_SPACE_KIB: u64 = 1_500_000;

/// Runs the binary with `args`, `stdin` piped in (or empty), under `ulimit -v` when
/// `limit_kib` is given; a run that outlives [`HANG`] is killed and fails the test.
fn run_guarded<S: AsRef<OsStr>>(args: &[S], stdin: Option<Vec<u8>>, limit_kib: Option<u64>) -> Run {
    let mut command = match limit_kib {
        Some(kib) => {
            let mut c = Command::new("sh");
            c.arg("-c")
                .arg(format!("ulimit -v {kib} && exec \"$0\" \"$@\""))
                .arg(BIN);
            c
        }
        None => Command::new(BIN),
    };
    let mut child = command
        .args(args)
        .current_dir(root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("could not start the binary");
    let mut pipe = child.stdin.take().expect("stdin is piped");
    let writer = std::thread::spawn(move || {
        if let Some(bytes) = stdin {
            let _ = pipe.write_all(&bytes);
        }
    });
    let pid = child.id();
    let started = Instant::now();
    let watchdog = std::thread::spawn(move || {
        while started.elapsed() < HANG {
            std::thread::sleep(Duration::from_millis(100));
            if std::fs::metadata(format!("/proc/{pid}")).is_err() {
                return false;
            }
        }
        let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
        true
    });
    let out = child.wait_with_output().expect("wait for the binary");
    let _ = writer.join();
    // The watchdog notices the exit within a tenth of a second.
    let hung = out.status.code().is_none() && started.elapsed() >= HANG;
    drop(watchdog);
    assert!(
        !hung,
        "the binary hung (killed after {HANG:?}): {args:?}",
        args = args
            .iter()
            .map(|a| a.as_ref().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
    );
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

/// `total` bytes of `byte`, zstd-compressed as they are generated (never all in memory).
fn zstd_bomb(byte: u8, total: usize) -> Vec<u8> {
    let mut encoder = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap();
    let block = vec![byte; 1 << 20];
    let mut left = total;
    while left > 0 {
        let n = left.min(block.len());
        encoder.write_all(&block[..n]).unwrap();
        left -= n;
    }
    encoder.finish().unwrap()
}

fn event(op: &str, hop: &str, attempt: u32, start: u64, finish: u64) -> String {
    format!(
        "{{\"operation_id\":\"{op}\",\"hop\":\"{hop}\",\"attempt\":{attempt},\"start_ms\":{start},\"finish_ms\":{finish},\"outcome\":\"ok\"}}\n"
    )
}

fn rows_of(run: &Run) -> Vec<OperationRow> {
    decode_rows(&run.stdout)
}

// --- panics -------------------------------------------------------------------------------

/// A small valid Parquet file of attempt events.
fn parquet_events() -> Vec<u8> {
    let n = 200;
    let mut frame = DataFrame::new_infer_height(vec![
        Column::new(
            "operation_id".into(),
            (0..n).map(|i| format!("op-{}", i / 2)).collect::<Vec<_>>(),
        ),
        Column::new("hop".into(), (0..n).map(|_| "caller").collect::<Vec<_>>()),
        Column::new(
            "start_ms".into(),
            (0..n).map(|i| 1000 + i as i64 * 10).collect::<Vec<_>>(),
        ),
        Column::new(
            "finish_ms".into(),
            (0..n).map(|i| 1005 + i as i64 * 10).collect::<Vec<_>>(),
        ),
    ])
    .unwrap();
    let mut out = Vec::new();
    ParquetWriter::new(&mut out).finish(&mut frame).unwrap();
    out
}

/// Corrupt variants of a Parquet file: a bad footer length, a cut file, and bytes flipped
/// at positions spread over the footer's thrift metadata and the pages.
fn corrupt_parquets() -> Vec<(String, Vec<u8>)> {
    let good = parquet_events();
    let len = good.len();
    let mut out = Vec::new();
    let mut footer = good.clone();
    footer[len - 8..len - 4].copy_from_slice(&u32::MAX.to_le_bytes());
    out.push(("bad-footer-length".to_string(), footer));
    out.push(("truncated".to_string(), good[..len * 2 / 3].to_vec()));
    let mut cut_footer = good[..len - 12].to_vec();
    cut_footer.extend_from_slice(&good[len - 8..]);
    out.push(("footer-cut-short".to_string(), cut_footer));
    let metadata_len = u32::from_le_bytes(good[len - 8..len - 4].try_into().unwrap()) as usize;
    let metadata_start = len - 8 - metadata_len;
    for k in 0..24 {
        let at = metadata_start + k * metadata_len / 24;
        for value in [0xff, 0x00, 0x19] {
            let mut bytes = good.clone();
            bytes[at] = value;
            out.push((format!("thrift-{at}-{value:02x}"), bytes));
        }
    }
    for k in 1..8 {
        let at = 4 + k * (metadata_start - 4) / 8;
        let mut bytes = good.clone();
        bytes[at] ^= 0xff;
        out.push((format!("page-{at}"), bytes));
    }
    out
}

#[test]
fn corrupt_parquet_is_an_input_error_never_a_panic_on_every_command_and_path() {
    let dir = TempDir::new("corrupt-parquet");
    for (name, bytes) in corrupt_parquets() {
        let path = dir.file(&format!("{name}.parquet"), &bytes);
        let what = |how: &str| format!("{name} ({how})");
        let direct = run_guarded(&[OsStr::new("analyze"), path.as_os_str()], None, None);
        direct.expect_no_crash(&what("analyze"));
        if direct.code != 0 {
            assert!(
                direct.stderr.contains(&path.display().to_string()),
                "{}: the error names the file: {}",
                what("analyze"),
                direct.stderr
            );
        }
        for command in ["show", "convert"] {
            let args: Vec<&OsStr> = match command {
                "show" => vec![OsStr::new("show"), OsStr::new("op-1"), path.as_os_str()],
                _ => vec![OsStr::new("convert"), path.as_os_str()],
            };
            run_guarded(&args, None, None).expect_no_crash(&what(command));
        }
        run_guarded(&["analyze"], Some(bytes.clone()), None).expect_no_crash(&what("stdin"));
        let gz = dir.file(&format!("{name}.parquet.gz"), &gzip(&bytes));
        run_guarded(&[OsStr::new("analyze"), gz.as_os_str()], None, None)
            .expect_no_crash(&what("gzipped"));
    }
}

#[test]
fn a_parquet_file_with_a_broken_footer_exits_2_naming_it() {
    let (name, bytes) = corrupt_parquets().remove(0);
    let file = TempFile::new(&format!("{name}.parquet"), &bytes);
    let run = run_guarded(
        &[OsStr::new("analyze"), file.path().as_os_str()],
        None,
        None,
    );
    run.expect_code(2).expect_no_crash(&name);
    assert!(
        run.stderr
            .contains(&format!("could not read '{}'", file.path().display())),
        "{}",
        run.stderr
    );
}

/// The corrupt file the Parquet fuzz target found (#13): a page header that makes polars
/// ask for 2^61 bytes, and the failed allocation aborted the process (exit 134), which no
/// panic boundary catches. Now polars runs in a worker process, and the abort is the
/// input error that names the file, from a file, stdin and gzipped, on every command.
#[test]
fn a_parquet_file_that_aborts_the_reader_is_an_input_error_naming_it() {
    let path = root().join("fuzz/corpus/parquet/alloc-abort-2pow61.parquet");
    let bytes = std::fs::read(&path).unwrap();
    let dir = TempDir::new("parquet-abort");
    let gz = dir.file("abort.parquet.gz", &gzip(&bytes));
    let file = path.display().to_string();
    let gz_name = gz.display().to_string();
    // (arguments, standard input, the name the error gives the input)
    type Case<'a> = (Vec<&'a OsStr>, Option<Vec<u8>>, &'a str);
    let cases: Vec<Case> = vec![
        (vec![OsStr::new("analyze"), path.as_os_str()], None, &file),
        (vec![OsStr::new("analyze")], Some(bytes.clone()), "<stdin>"),
        (vec![OsStr::new("analyze"), gz.as_os_str()], None, &gz_name),
        (
            vec![OsStr::new("show"), OsStr::new("op-1"), path.as_os_str()],
            None,
            &file,
        ),
        (vec![OsStr::new("convert"), path.as_os_str()], None, &file),
    ];
    for (args, stdin, name) in cases {
        let run = run_guarded(&args, stdin, None);
        run.expect_code(2).expect_no_crash(name);
        for part in [
            format!(
                "could not read '{name}': not a readable Parquet file: it is corrupt or truncated"
            ),
            "write it again, or convert it to JSON Lines".to_string(),
        ] {
            assert!(
                run.stderr.contains(&part),
                "{args:?}: {part}\n{}",
                run.stderr
            );
        }
    }
}

/// Fuzz target `parquet` (the mutation fuzzer of src/fuzz.rs; `fuzz/run.sh parquet`):
/// whatever the bytes, the binary reads them as Parquet to an answer or to the input error
/// that names the input, from a file and from stdin, within the address-space limit;
/// never a panic, an abort or a hang. Every `cargo test` replays fuzz/corpus/parquet/.
#[test]
fn fuzz_parquet() {
    let dir = TempDir::new("fuzz-parquet");
    let path = dir.file("fuzz.parquet", b"");
    fuzz::run("parquet", |bytes| {
        std::fs::write(&path, bytes).unwrap();
        // Both ways in: the file on disk (read by seeking) and a stream (held in memory).
        let (run, name) = if bytes.len() % 2 == 0 {
            let args = [OsStr::new("analyze"), path.as_os_str()];
            let run = run_guarded(&args, None, Some(ADDRESS_SPACE_KIB));
            (run, path.display().to_string())
        } else {
            let run = run_guarded(&["analyze"], Some(bytes.to_vec()), Some(ADDRESS_SPACE_KIB));
            (run, "<stdin>".to_string())
        };
        // Exit 2 is the input error or bad rows (`name:row: …`): both name the input.
        run.expect_no_crash(&name).expect_error_names(&name);
    });
}

/// Fuzz target `partial` (`fuzz/run.sh partial`): whatever the bytes of a partial file,
/// `merge` reads it to an answer or to an input error that names the file, within the
/// address-space limit; never a panic, an abort or a hang. A partial is input like any
/// other: made on another machine, copied, cut short or edited. The corpus is partials of
/// the fixtures (bursts, a deferred operation, retries at every hop, two partials in one
/// file); every `cargo test` replays fuzz/corpus/partial/.
#[test]
fn fuzz_partial() {
    let dir = TempDir::new("fuzz-partial");
    let path = dir.file("fuzz.partial", b"");
    let name = path.display().to_string();
    fuzz::run("partial", |bytes| {
        std::fs::write(&path, bytes).unwrap();
        let args = [OsStr::new("merge"), path.as_os_str()];
        let run = run_guarded(&args, None, Some(ADDRESS_SPACE_KIB));
        run.expect_no_crash(&name).expect_error_names(&name);
    });
}

// --- aborts and memory ---------------------------------------------------------------------

#[test]
fn a_gigabyte_of_compressed_zeros_runs_in_bounded_memory_as_one_long_bad_line() {
    let bomb = TempFile::new("zeros.zst", &zstd_bomb(0, 1 << 30));
    let run = run_guarded(
        &[OsStr::new("analyze"), bomb.path().as_os_str()],
        None,
        Some(ADDRESS_SPACE_KIB),
    );
    run.expect_code(2).expect_no_crash("zeros");
    assert!(
        run.stderr.contains(&format!(
            "{}:1: line is 1073741824 bytes, longer than the limit",
            bomb.path().display()
        )),
        "{}",
        run.stderr
    );
}

#[test]
fn a_gigabyte_of_compressed_newlines_or_spaces_costs_nothing() {
    for (byte, what) in [(b'\n', "newlines"), (b' ', "spaces")] {
        let mut bytes = zstd_bomb(byte, 1 << 30);
        // A valid event after the bomb, on a line of its own: it is still read.
        let after = format!("\n{}", event("op-after", "caller", 1, 1, 2));
        bytes.extend(zstd::encode_all(after.as_bytes(), 1).unwrap());
        let file = TempFile::new(&format!("{what}.zst"), &bytes);
        let run = run_guarded(
            &[
                OsStr::new("analyze"),
                OsStr::new("--format"),
                OsStr::new("jsonl"),
                file.path().as_os_str(),
            ],
            None,
            Some(ADDRESS_SPACE_KIB),
        );
        // A billion blank lines, or one blank line of a billion spaces: nothing to report.
        run.expect_code(0);
        assert!(run.stderr.is_empty(), "{what}: {}", run.stderr);
        assert_eq!(rows_of(&run)[0].operation_id, "op-after", "{what}");
    }
}

/// An Envoy access-log line stands for as many attempts as its
/// `upstream_request_attempt_count` says (up to 1 000): 20 000 such lines, 5 MB, are 20 M
/// attempts. Each line held its attempts, and a batch of 4 096 lines was kept at once:
/// 3 GB, an abort under this address space. Now a line holds one, batches shrink to
/// about 4 096 attempts, and the attempts are spilled as they come.
#[test]
fn access_log_lines_of_a_thousand_attempts_each_run_in_bounded_memory() {
    let line = |i: u32| {
        format!(
            "{{\"start_time\":\"2026-11-30T10:00:{:02}.{:03}Z\",\"response_code\":503,\"response_flags\":\"URX\",\"duration\":700,\"request_id\":\"r-{i}\",\"upstream_cluster\":\"inventory\",\"upstream_request_attempt_count\":1000}}\n",
            i / 1000 % 60,
            i % 1000
        )
    };
    let input: String = (0..20_000).map(line).collect();
    let run = run_guarded(
        &["analyze", "--preset", "envoy", "--format", "jsonl"],
        Some(input.into_bytes()),
        Some(ADDRESS_SPACE_KIB),
    );
    run.expect_code(0).expect_no_crash("envoy");
    let rows = rows_of(&run);
    assert_eq!(rows.len(), 20_000);
    assert!(
        rows.iter().all(|r| r.attempts_at("gateway") == 1000),
        "every request kept its thousand attempts"
    );
}

#[test]
fn a_line_longer_than_the_limit_is_a_bad_line_and_the_next_lines_are_read() {
    let mut input = event("op-1", "caller", 1, 1, 2).into_bytes();
    input.extend(b"{\"operation_id\":\"");
    input.extend(std::iter::repeat_n(b'x', 3 << 20));
    input.extend(b"\",\"start_ms\":1}\n");
    input.extend(event("op-2", "caller", 1, 5, 6).as_bytes());
    for (args, limit) in [
        (vec!["analyze", "--format", "jsonl"], 1u64 << 20),
        (
            vec!["analyze", "--format", "jsonl", "--max-line-bytes", "64K"],
            64 << 10,
        ),
    ] {
        let run = run_guarded(&args, Some(input.clone()), None);
        run.expect_code(2);
        assert!(
            run.stderr.contains(&format!(
                "<stdin>:2: line is {} bytes, longer than the limit of {limit} bytes",
                3 * (1 << 20) + 32
            )),
            "{}",
            run.stderr
        );
        let ids: Vec<String> = rows_of(&run).into_iter().map(|r| r.operation_id).collect();
        assert_eq!(ids, ["op-1", "op-2"]);
    }
    // Raised above the line, the limit lets it through (as a valid event).
    let run = run_guarded(
        &["analyze", "--format", "jsonl", "--max-line-bytes", "4MiB"],
        Some(input),
        None,
    );
    run.expect_code(0);
    assert_eq!(rows_of(&run).len(), 3);
}

/// A line over the limit is a line read, however long: the ones a read chunk holds and the
/// ones dropped as they stream past (16 MiB and more) count alike in `input.lines`.
#[test]
fn a_line_over_the_limit_counts_in_input_lines_at_any_length() {
    for length in [3usize << 20, 17 << 20] {
        let mut input = event("op-1", "caller", 1, 1, 2).into_bytes();
        input.extend(b"{\"x\":\"");
        input.extend(std::iter::repeat_n(b'x', length));
        input.extend(b"\"}\n");
        input.extend(event("op-2", "caller", 1, 5, 6).as_bytes());
        let run = run_guarded(
            &["analyze", "--format", "json", "--skip-invalid"],
            Some(input),
            None,
        );
        run.expect_code(0);
        let input = &decode_summary_value(&run.stdout)["input"];
        assert_eq!(input["lines"], 3, "a {length}-byte line: {input}");
        assert_eq!(input["bad_lines"], 1, "a {length}-byte line: {input}");
    }
}

/// The events' vector is reserved for by input size (docs/security.md, Limits), but never
/// for more than 4 M events: a 2 GiB file (one event, then zeros; sparse, so it costs no
/// disk), under a memory limit that would let it reserve for 60 M, runs within the address
/// space the other memory tests give.
#[test]
fn a_huge_input_reserves_a_bounded_event_vector() {
    let file = TempFile::new("huge.jsonl", event("op-1", "caller", 1, 1, 2).as_bytes());
    std::fs::OpenOptions::new()
        .write(true)
        .open(file.path())
        .and_then(|f| f.set_len(2 << 30))
        .expect("make the sparse file");
    let run = run_guarded(
        &[
            OsStr::new("analyze"),
            OsStr::new("--format"),
            OsStr::new("jsonl"),
            OsStr::new("--memory-limit"),
            OsStr::new("64GiB"),
            file.path().as_os_str(),
        ],
        None,
        Some(ADDRESS_SPACE_KIB),
    );
    run.expect_code(2).expect_no_crash("huge");
    assert!(run.stderr.contains(":2: line is"), "{}", run.stderr);
    assert_eq!(rows_of(&run).len(), 1);
}

#[test]
fn millions_of_bad_lines_are_counted_not_kept() {
    let lines = 4_000_000;
    let bomb = gzip(&b"x\n".repeat(lines));
    let file = TempFile::new("bad-lines.gz", &bomb);
    let run = run_guarded(
        &[
            OsStr::new("analyze"),
            // Forced: a line of `x` in a mixed log is not an attempt, passed by.
            OsStr::new("--input-format"),
            OsStr::new("jsonl"),
            OsStr::new("--skip-invalid"),
            OsStr::new("--allow-empty"),
            file.path().as_os_str(),
        ],
        None,
        Some(ADDRESS_SPACE_KIB),
    );
    run.expect_code(0);
    assert!(
        run.stderr.contains("skipped 4,000,000 bad input lines"),
        "{}",
        run.stderr
    );
    let run = run_guarded(
        &[
            OsStr::new("analyze"),
            OsStr::new("--input-format"),
            OsStr::new("jsonl"),
            file.path().as_os_str(),
        ],
        None,
        Some(ADDRESS_SPACE_KIB),
    );
    run.expect_code(2);
    let shown = run.stderr.lines().filter(|l| l.contains(".gz:")).count();
    assert_eq!(shown, 10, "{}", run.stderr);
    assert!(
        run.stderr.contains("… and 3,999,990 more bad lines"),
        "{}",
        run.stderr
    );
}

// --- hangs -----------------------------------------------------------------------------------

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().expect("mkfifo");
    assert!(status.success(), "mkfifo {}", path.display());
}

#[test]
fn a_fifo_in_a_directory_is_skipped_with_a_note_and_read_when_named() {
    let dir = TempDir::new("fifo-dir");
    dir.file("events.jsonl", event("op-1", "caller", 1, 1, 2).as_bytes());
    let fifo = dir.path.join("pipe.jsonl");
    mkfifo(&fifo);
    let run = run_guarded(
        &[
            OsStr::new("analyze"),
            OsStr::new("--format"),
            OsStr::new("jsonl"),
            dir.path.as_os_str(),
        ],
        None,
        None,
    );
    run.expect_code(0);
    assert_eq!(rows_of(&run).len(), 1);
    assert!(
        run.stderr
            .contains(&format!("skipped '{}': not a regular file", fifo.display())),
        "{}",
        run.stderr
    );
    // Named, it is a stream like any other.
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut pipe = std::fs::OpenOptions::new().write(true).open(fifo).unwrap();
            pipe.write_all(event("op-9", "caller", 1, 1, 2).as_bytes())
                .unwrap();
        })
    };
    let run = run_guarded(
        &[
            OsStr::new("analyze"),
            OsStr::new("--format"),
            OsStr::new("jsonl"),
            fifo.as_os_str(),
        ],
        None,
        None,
    );
    writer.join().unwrap();
    run.expect_code(0);
    assert_eq!(rows_of(&run)[0].operation_id, "op-9");
}

#[test]
fn a_policy_that_is_not_a_policy_file_is_refused_without_hanging() {
    let run = run_guarded(
        &[
            "analyze",
            "--policy",
            "/dev/zero",
            "fixtures/incident.jsonl",
        ],
        None,
        Some(ADDRESS_SPACE_KIB),
    );
    run.expect_code(2);
    assert!(
        run.stderr
            .contains("policy '/dev/zero' is larger than 1024 KiB"),
        "{}",
        run.stderr
    );
}

// --- quadratic or worse ----------------------------------------------------------------------

#[test]
fn twenty_thousand_retries_of_one_line_are_analysed_and_shown() {
    let n = 20_000;
    let mut input = String::new();
    for i in 0..n {
        input.push_str(&event(
            "hot",
            "caller",
            i + 1,
            u64::from(i) * 10,
            u64::from(i) * 10 + 15,
        ));
    }
    let run = run_guarded(
        &["analyze", "--format", "jsonl"],
        Some(input.clone().into_bytes()),
        None,
    );
    run.expect_code(0);
    let rows = rows_of(&run);
    assert_eq!(rows[0].total_attempts, u64::from(n));
    assert!(rows[0].has_finding("overlap@caller"), "{:?}", rows[0]);
    let run = run_guarded(&["show", "hot"], Some(input.into_bytes()), None);
    run.expect_code(0);
    assert!(run.stdout_text().contains(&format!("caller #{n}")));
}

#[test]
fn a_hot_loop_under_one_parent_links_every_attempt_once() {
    // One caller attempt, thousands of dependency attempts inside it, each with an
    // explicit parent: the linking is by hash, not by a scan per attempt.
    let n = 20_000;
    let mut input = String::from(
        "{\"operation_id\":\"loop\",\"hop\":\"caller\",\"start_ms\":0,\"finish_ms\":1000000,\"span_id\":\"root\"}\n",
    );
    for i in 0..n {
        input.push_str(&format!(
            "{{\"operation_id\":\"loop\",\"hop\":\"dependency\",\"attempt\":{},\"start_ms\":{},\"finish_ms\":{},\"parent_id\":\"root\",\"span_id\":\"s{i}\"}}\n",
            i + 1,
            i * 10,
            i * 10 + 5
        ));
    }
    let run = run_guarded(
        &["analyze", "--format", "jsonl"],
        Some(input.into_bytes()),
        None,
    );
    run.expect_code(0);
    let rows = rows_of(&run);
    assert_eq!(rows[0].attempts_at("dependency"), n);
    assert!(
        rows[0].has_finding("over-budget@dependency"),
        "{:?}",
        rows[0]
    );
}

/// An OTLP export of `n` client spans under one root span, in one trace.
fn otlp_siblings(n: usize) -> String {
    let mut spans = vec![
        "{\"traceId\":\"0af7651916cd43dd8448eb211c80319c\",\"spanId\":\"1000000000000000\",\"name\":\"root\",\"kind\":2,\"startTimeUnixNano\":\"1000000000\",\"endTimeUnixNano\":\"999000000000\"}".to_string(),
    ];
    for i in 0..n {
        spans.push(format!(
            "{{\"traceId\":\"0af7651916cd43dd8448eb211c80319c\",\"spanId\":\"{:016x}\",\"parentSpanId\":\"1000000000000000\",\"name\":\"GET\",\"kind\":3,\"startTimeUnixNano\":\"{}\",\"endTimeUnixNano\":\"{}\",\"attributes\":[{{\"key\":\"server.address\",\"value\":{{\"stringValue\":\"db\"}}}}]}}",
            0x2000_0000_0000_0000u64 + i as u64,
            1_000_000_000 + i * 10_000_000,
            1_005_000_000 + i * 10_000_000
        ));
    }
    format!(
        "{{\"resourceSpans\":[{{\"resource\":{{\"attributes\":[{{\"key\":\"service.name\",\"value\":{{\"stringValue\":\"caller\"}}}}]}},\"scopeSpans\":[{{\"spans\":[{}]}}]}}]}}\n",
        spans.join(",")
    )
}

#[test]
fn an_otlp_trace_of_twenty_thousand_sibling_spans_is_resolved() {
    let n = 20_000;
    let run = run_guarded(
        &["analyze", "--format", "jsonl"],
        Some(otlp_siblings(n).into_bytes()),
        None,
    );
    run.expect_code(0);
    let rows = rows_of(&run);
    assert_eq!(rows.len(), 1, "{}", run.stderr);
    assert_eq!(rows[0].total_attempts, n as u64);
}

// --- silent loss: span loops and deep chains ----------------------------------------------

fn zipkin_span(id: &str, parent: Option<&str>, service: &str, kind: &str, start_us: u64) -> String {
    let parent = parent.map_or(String::new(), |p| format!(",\"parentId\":\"{p}\""));
    format!(
        "{{\"traceId\":\"00000000000000000000000000000abc\",\"id\":\"{id}\"{parent},\"kind\":\"{kind}\",\"name\":\"call\",\"timestamp\":{start_us},\"duration\":100,\"localEndpoint\":{{\"serviceName\":\"{service}\"}}}}"
    )
}

#[test]
fn a_self_parented_span_and_a_parent_loop_are_input_errors_named_per_span() {
    let lines = [
        zipkin_span(
            "00000000000000a1",
            Some("00000000000000a1"),
            "caller",
            "CLIENT",
            1000,
        ),
        zipkin_span(
            "00000000000000b1",
            Some("00000000000000b2"),
            "caller",
            "CLIENT",
            2000,
        ),
        zipkin_span(
            "00000000000000b2",
            Some("00000000000000b1"),
            "caller",
            "CLIENT",
            2100,
        ),
    ];
    let input = format!("{}\n", lines.join("\n"));
    let run = run_guarded(&["analyze"], Some(input.into_bytes()), None);
    run.expect_code(2);
    assert!(
        run.stderr
            .contains("<stdin>:1: span 1 (id 00000000000000a1) is its own parent"),
        "{}",
        run.stderr
    );
    for (line, id) in [(2, "00000000000000b1"), (3, "00000000000000b2")] {
        assert!(
            run.stderr.contains(&format!(
                "<stdin>:{line}: span 1 (id {id}) is in a loop of parent spans"
            )),
            "{}",
            run.stderr
        );
    }
}

#[test]
fn a_chain_of_five_thousand_spans_is_followed_to_its_root() {
    // caller client span at the top, then a long chain of internal spans, then one
    // dependency server span at the bottom: its parent is the caller span, its operation
    // the trace.
    let n = 5_000;
    let mut lines = vec![zipkin_span(
        "1000000000000000",
        None,
        "caller",
        "CLIENT",
        1000,
    )];
    for i in 0..n {
        let parent = if i == 0 {
            "1000000000000000".to_string()
        } else {
            format!("{:016x}", 0x2000_0000_0000_0000u64 + i as u64 - 1)
        };
        lines.push(
            zipkin_span(
                &format!("{:016x}", 0x2000_0000_0000_0000u64 + i as u64),
                Some(&parent),
                "worker",
                "CLIENT",
                1001,
            )
            .replace("\"kind\":\"CLIENT\",", ""),
        );
    }
    lines.push(zipkin_span(
        "3000000000000000",
        Some(&format!("{:016x}", 0x2000_0000_0000_0000u64 + n as u64 - 1)),
        "dependency",
        "SERVER",
        1002,
    ));
    let run = run_guarded(
        &["convert"],
        Some(format!("{}\n", lines.join("\n")).into_bytes()),
        None,
    );
    run.expect_code(0);
    let records: Vec<serde_json::Value> = run
        .stdout_text()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let dependency = records
        .iter()
        .find(|r| r["hop"] == "dependency")
        .unwrap_or_else(|| panic!("no dependency attempt: {}", run.stderr));
    assert_eq!(dependency["parent_id"], "1000000000000000");
    assert_eq!(
        dependency["operation_id"],
        "00000000000000000000000000000abc"
    );
}

// --- wrong answers ------------------------------------------------------------------------------

#[test]
fn a_byte_order_mark_is_skipped_in_files_and_on_stdin() {
    let mut input = b"\xef\xbb\xbf".to_vec();
    input.extend(event("op-1", "caller", 1, 1, 2).as_bytes());
    input.extend(event("op-2", "caller", 1, 3, 4).as_bytes());
    let file = TempFile::new("bom.jsonl", &input);
    for run in [
        run_guarded(
            &[
                OsStr::new("analyze"),
                OsStr::new("--format"),
                OsStr::new("jsonl"),
                file.path().as_os_str(),
            ],
            None,
            None,
        ),
        run_guarded(&["analyze", "--format", "jsonl"], Some(input.clone()), None),
        run_guarded(&["analyze", "--format", "jsonl"], Some(gzip(&input)), None),
    ] {
        run.expect_code(0);
        assert!(run.stderr.is_empty(), "{}", run.stderr);
        assert_eq!(rows_of(&run).len(), 2);
    }
}

#[test]
fn the_format_is_detected_from_the_first_non_blank_line_however_far_in() {
    let mut input = b"\n".repeat(9 << 20);
    input.extend(event("op-1", "caller", 1, 1, 2).as_bytes());
    let run = run_guarded(
        &["analyze", "--format", "jsonl"],
        Some(input),
        Some(ADDRESS_SPACE_KIB),
    );
    run.expect_code(0);
    assert!(run.stderr.is_empty(), "{}", run.stderr);
    assert_eq!(rows_of(&run)[0].operation_id, "op-1");
}

#[test]
fn zero_and_negative_zero_times_are_exact_duplicates() {
    let input = "{\"operation_id\":\"z\",\"start_ms\":0,\"finish_ms\":5}\n{\"operation_id\":\"z\",\"start_ms\":-0.0,\"finish_ms\":5.0}\n";
    let run = run_guarded(&["analyze", "--format", "jsonl"], Some(input.into()), None);
    run.expect_code(0);
    let rows = rows_of(&run);
    assert_eq!(rows[0].total_attempts, 1, "{rows:?}");
    assert_eq!(rows[0].class, "healthy");
    assert!(
        run.stderr.contains("1 exact duplicate event counted once"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_number_means_the_same_with_or_without_an_escape_on_the_line() {
    // The second line has an escape, so it takes serde's path, not the fast one.
    let input = "{\"operation_id\":-0,\"start_ms\":1}\n{\"operation_id\":-0,\"start_ms\":1,\"target\":\"a\\u0062\"}\n";
    let run = run_guarded(&["analyze"], Some(input.into()), None);
    run.expect_code(2);
    for line in 1..=2 {
        assert!(
            run.stderr.contains(&format!(
                "<stdin>:{line}: operation_id must be a string, got -0"
            )),
            "{}",
            run.stderr
        );
    }
}

#[test]
fn a_duration_beyond_any_real_one_is_a_bad_line_not_infinity() {
    let input = "{\"operation_id\":\"o\",\"attempt\":1,\"start_ms\":0,\"finish_ms\":10,\"outcome\":503,\"retry_after_ms\":1e39}\n{\"operation_id\":\"o\",\"attempt\":2,\"start_ms\":100,\"finish_ms\":110,\"delay_ms\":1e39}\n";
    let run = run_guarded(&["analyze", "--format", "jsonl"], Some(input.into()), None);
    run.expect_code(2);
    assert!(
        run.stderr.contains("<stdin>:1: retry_after_ms is 1000000000000000000000000000000000000000 ms, beyond any real duration"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("<stdin>:2: delay_ms is"),
        "{}",
        run.stderr
    );
    assert!(
        !run.stdout_text().contains("retry-after-not-honoured"),
        "{}",
        run.stdout_text()
    );
}

// --- the gate -----------------------------------------------------------------------------------

#[test]
fn a_gate_over_no_attempts_fails_unless_empty_input_is_allowed() {
    for (input, extra) in [
        (b"".to_vec(), vec![]),
        (b"garbage\n{\"nope\":1}\n".to_vec(), vec!["--skip-invalid"]),
    ] {
        let mut args = vec!["analyze", "--fail-on", "nested-retry > 0"];
        args.extend(&extra);
        let run = run_guarded(&args, Some(input.clone()), None);
        run.expect_code(2);
        assert!(run.stderr.contains("no attempts read"), "{}", run.stderr);
        args.push("--allow-empty");
        let run = run_guarded(&args, Some(input), None);
        run.expect_code(0);
        assert!(!run.stderr.contains("no attempts read"), "{}", run.stderr);
    }
}

#[test]
fn a_run_that_exits_2_on_its_input_never_says_its_gate_passed() {
    // Two good lines of one healthy operation, then one bad line: every condition holds on
    // what was read, yet the run exits 2, so no format may read green.
    let input = concat!(
        r#"{"operation_id":"a","hop":"caller","attempt":1,"start_ms":0,"finish_ms":5,"outcome":"ok"}"#,
        "\n",
        r#"{"operation_id":"a","hop":"dependency","attempt":1,"start_ms":1,"finish_ms":4,"outcome":"ok"}"#,
        "\n",
        r#"{"operation_id":"b","hop":"caller","attempt":1,"start_ms":5,"finish_ms":1}"#,
        "\n",
    )
    .as_bytes()
    .to_vec();
    let dir = TempDir::new("inconclusive");
    let junit = dir.path.join("gate.xml");
    for format in ["table", "markdown", "json", "html"] {
        let run = run_guarded(
            &[
                "analyze".as_ref(),
                "--fail-on".as_ref(),
                "nested-retry > 0".as_ref(),
                "--format".as_ref(),
                format.as_ref(),
                "--junit".as_ref(),
                junit.as_os_str(),
            ],
            Some(input.clone()),
            None,
        );
        run.expect_code(2);
        let out = run.stdout_text();
        assert!(!out.contains("Gate: passed"), "{format}: {out}");
        assert!(
            run.stderr.contains("gate not conclusive: 1 bad input line"),
            "{format}: {}",
            run.stderr
        );
        assert!(!run.stderr.contains("gate passed"), "{}", run.stderr);
        match format {
            "json" => {
                let doc: serde_json::Value = serde_json::from_str(&out).expect("JSON report");
                assert_eq!(doc["gate"]["passed"], false, "{out}");
                assert!(
                    doc["gate"]["inconclusive"]
                        .as_str()
                        .is_some_and(|why| why.contains("1 bad input line")),
                    "{out}"
                );
            }
            _ => assert!(out.contains("Gate: not conclusive"), "{format}: {out}"),
        }
        let xml = std::fs::read_to_string(&junit).expect("JUnit file");
        assert!(xml.contains("errors=\"1\""), "{xml}");
    }
    // The same input read under --skip-invalid is conclusive: the gate passes, exit 0.
    let run = run_guarded(
        &[
            "analyze",
            "--fail-on",
            "nested-retry > 0",
            "--format",
            "markdown",
            "--skip-invalid",
        ],
        Some(input),
        None,
    );
    run.expect_code(0);
    assert!(
        run.stdout_text().contains("### Gate: passed"),
        "{}",
        run.stdout_text()
    );
}

#[test]
fn an_empty_input_exits_2_naming_what_was_read_gate_or_not() {
    let dir = TempDir::new("empty-input");
    let file = dir.path.join("selector-matched-nothing.jsonl");
    std::fs::write(&file, "").unwrap();
    let run = run_guarded(&["analyze".as_ref(), file.as_os_str()], None, None);
    run.expect_code(2);
    assert!(
        run.stderr.contains("no attempts read from '")
            && run
                .stderr
                .contains("selector-matched-nothing.jsonl' (0 lines"),
        "{}",
        run.stderr
    );
    let run = run_guarded(
        &[
            "analyze".as_ref(),
            "--allow-empty".as_ref(),
            file.as_os_str(),
        ],
        None,
        None,
    );
    run.expect_code(0);
    assert!(run.stderr.is_empty(), "{}", run.stderr);
}

// --- terminal and document injection -----------------------------------------------------------

/// Text that would act on a terminal or break a document, in every way we know of.
const EVIL: &str =
    "=evil\u{1b}[31mred\u{1b}]0;title\u{7}\u{1b}[2J\r\n|pipe|`tick`\u{0}nul\u{9b}c1\u{202e}rlo";

/// The operation ID: [`EVIL`] without its NUL, so that `show` can take it as an argument.
fn evil_id() -> String {
    format!("op{}", EVIL.replace('\0', ""))
}

/// JSON string escaping for the input lines.
fn js(text: &str) -> String {
    serde_json::to_string(text).unwrap()
}

/// An operation with retries, overlaps and a redelivery, every ID and target full of
/// control characters, plus bad lines that quote such text.
fn evil_input() -> String {
    let op = js(&evil_id());
    let run_id = js(&format!("-run{EVIL}"));
    let target = js(&format!("@target{EVIL}"));
    let mut lines = Vec::new();
    for (attempt, start, finish) in [(1, 0, 100), (2, 50, 200), (3, 150, 400), (4, 500, 600)] {
        lines.push(format!(
            "{{\"operation_id\":{op},\"test_run_id\":{run_id},\"hop\":\"caller\",\"attempt\":{attempt},\"start_ms\":{start},\"finish_ms\":{finish},\"outcome\":503,\"target\":{target}}}"
        ));
    }
    for (attempt, start) in [(1, 10), (2, 20)] {
        lines.push(format!(
            "{{\"operation_id\":{op},\"test_run_id\":{run_id},\"hop\":\"dependency\",\"attempt\":{attempt},\"start_ms\":{start},\"finish_ms\":{},\"outcome\":500,\"target\":{target}}}",
            start + 5
        ));
    }
    // Bad lines whose messages quote the input.
    lines.push(format!(
        "{{\"operation_id\":{op},\"hop\":{},\"start_ms\":1}}",
        js(EVIL)
    ));
    lines.push(format!(
        "{{\"operation_id\":{op},\"outcome\":{},\"start_ms\":1}}",
        js(EVIL)
    ));
    lines.join("\n") + "\n"
}

/// Panics when `text` holds a control character other than newline and tab, or a Unicode
/// bidirectional override: input text must reach the output only escaped. JSON keeps the
/// characters JSON does not escape (C1 controls, U+202E), so for JSON only bytes below
/// 0x20 count.
fn assert_no_raw_control(what: &str, text: &str) {
    let json = what.starts_with("json");
    let chars: Vec<char> = text.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        let below_space = (c as u32) < 0x20 && c != '\n' && c != '\t';
        let bad =
            below_space || (!json && (c.is_control() && c != '\n' && c != '\t' || c == '\u{202e}'));
        let context: String = chars[i.saturating_sub(40)..(i + 40).min(chars.len())]
            .iter()
            .collect();
        assert!(!bad, "{what}: raw {c:?} at char {i}: …{context:?}…");
    }
}

/// Panics when a line of `stderr` starts with text that came from a file name after a
/// newline in it: a forged message.
fn assert_no_forged_line(what: &str, stderr: &str) {
    for line in stderr.lines() {
        assert!(
            !line.starts_with(['\u{1b}', '[']) && !line.starts_with("forged"),
            "{what}: a forged message line: {line:?}\n{stderr}"
        );
    }
}

/// The pipes of a Markdown table row that split it into cells, as GFM reads them: a
/// backslash escapes the character after it, a backslash included.
fn cells_in_row(line: &str) -> usize {
    let mut count = 0;
    let mut escaped = false;
    for c in line.chars() {
        if escaped {
            escaped = false;
            continue;
        }
        match c {
            '\\' => escaped = true,
            '|' => count += 1,
            _ => {}
        }
    }
    count
}

#[test]
fn input_text_never_reaches_a_terminal_or_a_document_raw() {
    let dir = TempDir::new("evil");
    // A file name with a newline and escape sequences: it must not forge a message line.
    let name = "evil\n\u{1b}[31mforged.jsonl:9: fake message.jsonl";
    let path = dir.file(name, evil_input().as_bytes());
    let junit = dir.path.join("junit.xml");
    let gate = [
        OsStr::new("--fail-on"),
        OsStr::new("nested-retry > 0"),
        OsStr::new("--junit"),
        junit.as_os_str(),
        OsStr::new("--skip-invalid"),
    ];
    for format in ["table", "json", "jsonl", "csv", "markdown", "html"] {
        let mut args = vec![
            OsStr::new("analyze"),
            OsStr::new("--format"),
            OsStr::new(format),
        ];
        args.extend(gate);
        args.push(path.as_os_str());
        let run = run_guarded(&args, None, None);
        assert_eq!(run.code, 1, "{format}: the gate breaches\n{}", run.stderr);
        let stdout = run.stdout_text();
        assert_no_raw_control(&format!("{format} stdout"), &stdout);
        assert_no_raw_control(&format!("{format} stderr"), &run.stderr);
        if !format.starts_with("json") {
            assert!(
                stdout.contains("x1b"),
                "{format}: the ID is shown, escaped:\n{stdout}"
            );
        }
        assert_no_forged_line(format, &run.stderr);
        match format {
            "json" => {
                // JSON keeps the data exact: its own escaping is enough.
                let summary = decode_summary_value(&run.stdout);
                assert!(summary.to_string().contains("\\u001b[31mred"), "{summary}");
            }
            "jsonl" => {
                let rows = rows_of(&run);
                assert_eq!(rows[0].operation_id, evil_id());
            }
            "csv" => {
                let table = parse_csv(&stdout);
                let header = &table[0];
                let id = header.iter().position(|h| h == "operation_id").unwrap();
                let run_col = header.iter().position(|h| h == "test_run_id").unwrap();
                for row in &table[1..] {
                    assert_eq!(row.len(), header.len(), "{row:?}");
                    for cell in [&row[id], &row[run_col]] {
                        assert!(
                            !cell.starts_with(['=', '+', '-', '@', '\t', '\r']),
                            "a cell a spreadsheet would run: {cell:?}"
                        );
                    }
                    assert!(row[run_col].starts_with("'-run"), "{:?}", row[run_col]);
                }
            }
            "markdown" => {
                let mut table: Vec<&str> = Vec::new();
                for line in stdout.lines().chain([""]) {
                    if line.starts_with('|') {
                        table.push(line);
                        continue;
                    }
                    if let Some(header) = table.first() {
                        let columns = cells_in_row(header);
                        for row in &table {
                            assert_eq!(
                                cells_in_row(row),
                                columns,
                                "a Markdown row with a different column count:\n{header}\n{row}"
                            );
                        }
                    }
                    table.clear();
                }
            }
            _ => {}
        }
        let xml = std::fs::read_to_string(&junit).expect("the JUnit file");
        roxmltree::Document::parse(&xml)
            .unwrap_or_else(|e| panic!("{format}: JUnit XML does not parse: {e}\n{xml}"));
        assert!(xml.contains("failure"), "{xml}");
    }
    // `show` and `convert` and the bad-line messages without --skip-invalid.
    let show = run_guarded(
        &[OsStr::new("show"), OsStr::new(&evil_id()), path.as_os_str()],
        None,
        None,
    );
    assert_eq!(show.code, 2, "bad lines:\n{}", show.stderr);
    assert_no_raw_control("show stdout", &show.stdout_text());
    assert_no_raw_control("show stderr", &show.stderr);
    assert_no_forged_line("show", &show.stderr);
    assert!(
        show.stdout_text().contains("Attempt tree"),
        "{}",
        show.stdout_text()
    );
    assert!(
        show.stderr
            .contains("evil\\x0a\\x1b[31mforged.jsonl:9: fake message.jsonl:7: unknown hop"),
        "{}",
        show.stderr
    );
    let missing = run_guarded(
        &[
            OsStr::new("show"),
            OsStr::new("no-such-op"),
            path.as_os_str(),
        ],
        None,
        None,
    );
    assert_no_raw_control("show error", &missing.stderr);
    let convert = run_guarded(&[OsStr::new("convert"), path.as_os_str()], None, None);
    assert_no_raw_control("convert stderr", &convert.stderr);
}

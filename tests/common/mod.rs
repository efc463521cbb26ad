//! Helpers shared by the end-to-end tests: run the real binary, decode its per-operation
//! rows and its JSON summary into typed values, and write throw-away input files.
//!
//! Every test crate includes this module and uses a different part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Deserialize;

/// The binary under test, as cargo built it for this test run.
pub const BIN: &str = env!("CARGO_BIN_EXE_attempt-funnel");

/// Every class, in the order of docs/rules.md.
pub const CLASSES: [&str; 7] = [
    "healthy",
    "nested-retry",
    "fan-out",
    "redelivery",
    "overlap",
    "synchronized-burst",
    "over-budget",
];

/// The crate root. Every run uses it as its working directory, so fixture paths such as
/// `fixtures/bad/bad-lines.jsonl` appear in messages exactly as written.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A fixture path relative to the crate root.
pub fn fixture(rel: &str) -> PathBuf {
    root().join("fixtures").join(rel)
}

/// What one run of the binary did.
#[derive(Debug)]
pub struct Run {
    /// The exit code; -1 when the process was killed by a signal (a crash).
    pub code: i32,
    pub stdout: Vec<u8>,
    pub stderr: String,
}

impl Run {
    pub fn stdout_text(&self) -> String {
        String::from_utf8(self.stdout.clone()).expect("stdout is UTF-8")
    }

    /// Panics with the whole run when the exit code is not `code`.
    pub fn expect_code(&self, code: i32) -> &Run {
        assert_eq!(
            self.code,
            code,
            "expected exit code {code}, got {}\n--- stderr ---\n{}\n--- stdout ---\n{}",
            self.code,
            self.stderr,
            String::from_utf8_lossy(&self.stdout)
        );
        self
    }

    /// The binary neither panicked nor died of a signal, and kept to its exit-code contract.
    pub fn expect_no_crash(&self, what: &str) -> &Run {
        assert!(
            !self.stderr.contains("panicked"),
            "{what}: the binary panicked:\n{}",
            self.stderr
        );
        assert!(
            self.code == 0 || self.code == 2,
            "{what}: expected exit code 0 or 2, got {}\n{}",
            self.code,
            self.stderr
        );
        self
    }

    /// An input error (exit 2) names the input it is about, as `name` or `name:line`.
    pub fn expect_error_names(&self, name: &str) -> &Run {
        if self.code == 2 {
            assert!(
                self.stderr.contains(name),
                "the error names {name}: {}",
                self.stderr
            );
        }
        self
    }

    /// Stderr says each of `parts`.
    pub fn expect_stderr_says(&self, parts: &[&str]) -> &Run {
        for part in parts {
            assert!(
                self.stderr.contains(part),
                "stderr does not say {part:?}:\n{}",
                self.stderr
            );
        }
        self
    }
}

/// Runs the binary with `args` and, when given, `stdin` as its standard input (otherwise
/// standard input is empty, never the test runner's terminal).
pub fn run_with_stdin<S: AsRef<OsStr>>(args: &[S], stdin: Option<&[u8]>) -> Run {
    run_with_env(args, stdin, &[])
}

/// Lowers the smallest `--memory-limit` (64MiB) so that the tests can spill inputs of a few
/// kilobytes through the same path as gigabytes; it changes nothing else.
pub const MEMORY_FLOOR: (&str, &str) = ("ATTEMPT_FUNNEL_MEMORY_FLOOR", "1");

/// [`run_with_stdin`], with extra environment variables (`ATTEMPT_FUNNEL_PROFILE`, say).
pub fn run_with_env<S: AsRef<OsStr>>(
    args: &[S],
    stdin: Option<&[u8]>,
    env: &[(&str, &str)],
) -> Run {
    let mut child = Command::new(BIN)
        .args(args)
        .env(MEMORY_FLOOR.0, MEMORY_FLOOR.1)
        .envs(env.iter().copied())
        .current_dir(root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("could not start the attempt-funnel binary");
    let input = stdin.map(<[u8]>::to_vec).unwrap_or_default();
    let mut pipe = child.stdin.take().expect("stdin is piped");
    // Write from a thread so that a large input cannot deadlock against a full stdout pipe.
    let writer = std::thread::spawn(move || {
        // The binary may stop reading early (a usage error): a broken pipe here is fine.
        let _ = pipe.write_all(&input);
    });
    let out = child
        .wait_with_output()
        .expect("could not wait for attempt-funnel");
    writer.join().expect("stdin writer thread");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs the binary with `args` and empty standard input.
pub fn run<S: AsRef<OsStr>>(args: &[S]) -> Run {
    run_with_stdin(args, None)
}

/// `ATTEMPT_FUNNEL_DEEP_TESTS=1` (any value but empty or `0`): the deep runs — many more
/// property cases, and the spill tests on the large inputs and tiny memory limits that
/// take minutes (README, Development). Without it the same properties are checked on
/// inputs just large enough to force the path each test is about.
pub fn deep_tests() -> bool {
    std::env::var_os("ATTEMPT_FUNNEL_DEEP_TESTS").is_some_and(|v| !v.is_empty() && v != "0")
}

/// The partitions a spill of standard input starts with, its size being unknown
/// (docs/input.md, "Large inputs"): a run from stdin that reads back more partitions split
/// some of them again.
pub const FIRST_PARTITIONS_FROM_STDIN: usize = 16;

/// How many partitions a spilled run's profile (`ATTEMPT_FUNNEL_PROFILE=1`) read back.
pub fn partitions_read_back(stderr: &str) -> usize {
    profile_notes(stderr, "partition read back")
}

/// How many of the profile's lines (`ATTEMPT_FUNNEL_PROFILE=1`) on `stderr` note `what`.
pub fn profile_notes(stderr: &str, what: &str) -> usize {
    stderr
        .lines()
        .filter(|l| l.starts_with("profile:") && l.contains(what))
        .count()
}

/// What a run wrote to stderr besides the profile's lines.
pub fn without_profile(stderr: &str) -> String {
    stderr
        .lines()
        .filter(|l| !l.starts_with("profile:"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `analyze` followed by `args`.
pub fn analyze<S: AsRef<OsStr>>(args: &[S]) -> Run {
    let mut all: Vec<&OsStr> = vec![OsStr::new("analyze")];
    all.extend(args.iter().map(AsRef::as_ref));
    run(&all)
}

/// One operation as `--format jsonl` writes it (docs/output.md).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct OperationRow {
    pub test_run_id: Option<String>,
    pub operation_id: String,
    pub class: String,
    pub first_multiplying_hop: Option<String>,
    /// Hop → attempts, hops with none left out.
    pub attempts: BTreeMap<String, u64>,
    pub total_attempts: u64,
    pub findings: Vec<String>,
    pub first_start_ms: f64,
    pub last_finish_ms: Option<f64>,
    pub overlap_ms: f64,
}

impl OperationRow {
    /// `run/op`, or `op` alone without a test run (as the reports write it).
    pub fn id(&self) -> String {
        match &self.test_run_id {
            Some(run) => format!("{run}/{}", self.operation_id),
            None => self.operation_id.clone(),
        }
    }

    pub fn attempts_at(&self, hop: &str) -> u64 {
        self.attempts.get(hop).copied().unwrap_or(0)
    }

    pub fn has_finding(&self, finding: &str) -> bool {
        self.findings.iter().any(|f| f == finding)
    }
}

/// Decodes `--format jsonl` output: one object per non-empty line.
pub fn decode_rows(stdout: &[u8]) -> Vec<OperationRow> {
    let text = std::str::from_utf8(stdout).expect("jsonl output is UTF-8");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad jsonl row {l:?}: {e}")))
        .collect()
}

/// Runs `analyze --format jsonl` on `files` plus `extra` flags; expects exit 0 and no stderr.
pub fn analyze_rows<S: AsRef<OsStr>>(files: &[S], extra: &[&str]) -> Vec<OperationRow> {
    let mut args: Vec<&OsStr> = vec![OsStr::new("--format"), OsStr::new("jsonl")];
    args.extend(extra.iter().map(OsStr::new));
    args.extend(files.iter().map(AsRef::as_ref));
    let run = analyze(&args);
    run.expect_code(0);
    assert!(run.stderr.is_empty(), "unexpected stderr: {}", run.stderr);
    decode_rows(&run.stdout)
}

/// Rows by `run/op` (or `op`) ID.
pub fn by_id(rows: Vec<OperationRow>) -> BTreeMap<String, OperationRow> {
    let mut map = BTreeMap::new();
    for row in rows {
        let id = row.id();
        assert!(
            map.insert(id.clone(), row).is_none(),
            "operation {id} twice"
        );
    }
    map
}

/// The parts of the `--format json` summary that the tests assert.
#[derive(Debug, Clone, Deserialize)]
pub struct Summary {
    pub schema_version: u32,
    pub input: InputStats,
    pub operations: u64,
    pub attempts: u64,
    pub hops: Vec<HopSummary>,
    pub classes: Vec<ClassShare>,
    pub findings: Vec<FindingCount>,
    pub overlap: OverlapSummary,
    pub bursts: BurstSummary,
    pub unfinished_attempts: u64,
    pub orphan_attempts: u64,
    pub duplicate_effects: u64,
    pub worst_operations: Vec<OperationRow>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct InputStats {
    pub files: Vec<String>,
    pub lines: u64,
    pub events: u64,
    pub duplicate_events: u64,
    pub bad_lines: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct HopSummary {
    pub hop: String,
    pub attempts: u64,
    pub amplification: f64,
    pub originals: u64,
    pub retries: u64,
    pub redeliveries: u64,
    pub first_multiplying: u64,
    pub budget: u32,
    pub unfinished: u64,
    pub orphans: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ClassShare {
    pub class: String,
    pub operations: u64,
    pub share: f64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct FindingCount {
    pub finding: String,
    pub operations: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct OverlapSummary {
    pub operations: u64,
    pub total_ms: f64,
    pub max_ms: f64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct BurstSummary {
    pub count: u64,
    pub operations: u64,
}

impl Summary {
    /// Operations of `class` (panics when the class is not listed).
    pub fn class_count(&self, class: &str) -> u64 {
        self.classes
            .iter()
            .find(|c| c.class == class)
            .unwrap_or_else(|| panic!("class {class} not in the summary"))
            .operations
    }
}

/// Decodes `--format json` output as an untyped value.
pub fn decode_summary_value(stdout: &[u8]) -> serde_json::Value {
    serde_json::from_slice(stdout).unwrap_or_else(|e| {
        panic!(
            "summary is not JSON ({e}):\n{}",
            String::from_utf8_lossy(stdout)
        )
    })
}

/// Decodes `--format json` output into the typed fields above.
pub fn decode_summary(stdout: &[u8]) -> Summary {
    serde_json::from_value(decode_summary_value(stdout)).expect("summary has the documented schema")
}

/// Runs `analyze --format json` on `files` plus `extra` flags; expects exit 0.
pub fn analyze_summary<S: AsRef<OsStr>>(files: &[S], extra: &[&str]) -> Summary {
    let mut args: Vec<&OsStr> = vec![OsStr::new("--format"), OsStr::new("json")];
    args.extend(extra.iter().map(OsStr::new));
    args.extend(files.iter().map(AsRef::as_ref));
    let run = analyze(&args);
    run.expect_code(0);
    decode_summary(&run.stdout)
}

/// Parses CSV as RFC 4180 (quoted fields may hold commas, quotes and newlines).
pub fn parse_csv(text: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let mut row = Vec::new();
    let mut field = String::new();
    let mut chars = text.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        if quoted {
            match c {
                '"' if chars.peek() == Some(&'"') => {
                    chars.next();
                    field.push('"');
                }
                '"' => quoted = false,
                _ => field.push(c),
            }
            continue;
        }
        match c {
            '"' => quoted = true,
            ',' => row.push(std::mem::take(&mut field)),
            '\r' => {}
            '\n' => {
                row.push(std::mem::take(&mut field));
                rows.push(std::mem::take(&mut row));
            }
            _ => field.push(c),
        }
    }
    if !field.is_empty() || !row.is_empty() {
        row.push(field);
        rows.push(row);
    }
    rows
}

/// A file under the system temp directory with a name no other test (or test process)
/// uses; removed when dropped.
pub struct TempFile {
    pub path: PathBuf,
}

impl TempFile {
    pub fn new(name: &str, contents: &[u8]) -> TempFile {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let path = std::env::temp_dir().join(format!(
            "attempt-funnel-test-{}-{n}-{nanos}-{name}",
            std::process::id()
        ));
        std::fs::write(&path, contents)
            .unwrap_or_else(|e| panic!("could not write {}: {e}", path.display()));
        TempFile { path }
    }

    /// A unique path that does not exist yet (for `--output`); removed when dropped.
    pub fn reserve(name: &str) -> TempFile {
        let file = TempFile::new(name, b"");
        std::fs::remove_file(&file.path).expect("remove placeholder");
        file
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The lines of a fixture, each with its newline.
pub fn fixture_lines(rel: &str) -> Vec<String> {
    let text = std::fs::read_to_string(fixture(rel)).expect("read fixture");
    text.lines().map(|l| format!("{l}\n")).collect()
}

/// The `*.jsonl` files of `fixtures/classes`, sorted by name.
pub fn class_fixtures() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(fixture("classes"))
        .expect("fixtures/classes")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension() == Some(OsStr::new("jsonl")))
        .collect();
    files.sort();
    files
}

/// One whole attempt record as a JSON line (replay and diff build their worked cases of them).
pub fn record(op: &str, hop: &str, attempt: u32, start: u64, finish: u64, outcome: &str) -> String {
    format!(
        "{{\"operation_id\":\"{op}\",\"hop\":\"{hop}\",\"attempt\":{attempt},\"start_ms\":{start},\"finish_ms\":{finish},\"outcome\":\"{outcome}\"}}\n"
    )
}

/// A fresh directory under the system temp directory, removed when dropped.
pub struct TempDir {
    pub path: PathBuf,
}

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        // TempFile gives a unique name; a directory takes its place.
        let placeholder = TempFile::reserve(name);
        let path = placeholder.path().to_path_buf();
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir { path }
    }

    /// Writes `contents` to `rel` under the directory and returns its path.
    pub fn file(&self, rel: &str, contents: &[u8]) -> PathBuf {
        let path = self.path.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).expect("create parent");
        std::fs::write(&path, contents).expect("write temp file");
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Two operations (`n-1`, `n-2`), each a nested retry where every attempt fails with 503:
/// the gateway tries `gateway` times (0–600, 700–1300, 1400–2000 ms … after the operation
/// starts), and under each gateway attempt the dependency tries three times, 190 ms apart.
/// Used by the replay and diff worked cases.
pub fn nested_all_failing(gateway: u64, name: &str) -> TempFile {
    let mut text = String::new();
    for (n, base) in [(1, 0u64), (2, 10_000)] {
        let op = format!("n-{n}");
        for g in 0..gateway {
            let g_start = base + g * 700;
            text += &record(&op, "gateway", g as u32 + 1, g_start, g_start + 600, "503");
            for d in 0..3u64 {
                let d_start = g_start + 10 + d * 190;
                text += &record(
                    &op,
                    "dependency",
                    d as u32 + 1,
                    d_start,
                    d_start + 90,
                    "503",
                );
            }
        }
    }
    TempFile::new(name, text.as_bytes())
}

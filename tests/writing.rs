//! How files are written (docs/output.md, "How files are written"): a run interrupted
//! (SIGINT, SIGTERM, SIGHUP) or killed outright (`kill -9`) while it spills or writes its
//! rows leaves the earlier file at its `-o` path byte for byte, and no file of its own
//! behind once the next run has started; two runs writing one path leave one whole file;
//! an output that cannot be written to (stdout closed or full) is an error; an output that
//! is one of the inputs is refused before anything is read.

#![cfg(unix)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::*;

/// The earlier report at the output's path, which no failed run may touch.
const EARLIER: &[u8] = b"{\"the earlier report\":true}\n";

/// Operations in the generated input: enough that a 16 MiB memory limit spills it and the
/// rows take a while to write, few enough to generate in about a second.
const OPS: &str = "60000";

/// One generated input shared by the tests of this file (its directory lives as long as
/// the test process).
fn big_input() -> &'static Path {
    static INPUT: OnceLock<(TempDir, PathBuf)> = OnceLock::new();
    let (_, path) = INPUT.get_or_init(|| {
        let dir = TempDir::new("writing-input");
        let path = dir.path.join("events.jsonl");
        run(&[
            "generate",
            "--ops",
            OPS,
            "--seed",
            "1",
            "-o",
            &path.display().to_string(),
        ])
        .expect_code(0);
        (dir, path)
    });
    path
}

/// A directory holding the earlier report `out.jsonl` and a spill directory `spill/`.
struct Scene {
    dir: TempDir,
}

impl Scene {
    fn new(name: &str) -> Scene {
        let dir = TempDir::new(name);
        std::fs::create_dir(dir.path.join("spill")).unwrap();
        std::fs::write(dir.path.join("out.jsonl"), EARLIER).unwrap();
        Scene { dir }
    }

    fn out(&self) -> PathBuf {
        self.dir.path.join("out.jsonl")
    }

    fn spill(&self) -> PathBuf {
        self.dir.path.join("spill")
    }

    /// `analyze` of `input` spilling into `spill/`, its rows to `out.jsonl`.
    fn analyze_args(&self, input: &Path) -> Vec<String> {
        [
            "analyze",
            &input.display().to_string(),
            "--memory-limit",
            "16MiB",
            "--temp-dir",
            &self.spill().display().to_string(),
            "-f",
            "jsonl",
            "-o",
            &self.out().display().to_string(),
        ]
        .map(String::from)
        .to_vec()
    }

    fn start(&self, input: &Path) -> Child {
        Command::new(BIN)
            .env(MEMORY_FLOOR.0, MEMORY_FLOOR.1)
            .args(self.analyze_args(input))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start attempt-funnel")
    }

    /// Names beside the output other than the output and the spill directory: the run's
    /// unfinished files.
    fn strays(&self) -> Vec<String> {
        names(&self.dir.path)
            .into_iter()
            .filter(|n| n != "out.jsonl" && n != "spill")
            .collect()
    }

    /// Bytes in files under the spill directory: whether a spill is under way.
    fn spilled_bytes(&self) -> u64 {
        fn size(path: &Path) -> u64 {
            std::fs::read_dir(path).map_or(0, |entries| {
                entries
                    .flatten()
                    .map(|e| match e.metadata() {
                        Ok(m) if m.is_dir() => size(&e.path()),
                        Ok(m) => m.len(),
                        Err(_) => 0,
                    })
                    .sum()
            })
        }
        size(&self.spill())
    }

    /// Bytes in the run's unfinished output file: whether rows are being written.
    fn unfinished_bytes(&self) -> u64 {
        self.strays()
            .iter()
            .filter_map(|n| std::fs::metadata(self.dir.path.join(n)).ok())
            .map(|m| m.len())
            .sum()
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The points of a run at which it is stopped.
#[derive(Debug, Clone, Copy)]
enum Point {
    /// Spill files are being written (the input is still being read).
    Spilling,
    /// The per-operation rows are being written to the unfinished output.
    WritingRows,
}

impl Point {
    fn reached(self, scene: &Scene) -> bool {
        match self {
            Point::Spilling => scene.spilled_bytes() > 0,
            Point::WritingRows => scene.unfinished_bytes() > 0,
        }
    }
}

/// Starts the run and waits for `point`; panics when the run ended first.
fn start_and_wait_for(scene: &Scene, point: Point) -> Child {
    let mut child = scene.start(big_input());
    let deadline = Instant::now() + Duration::from_secs(60);
    while !point.reached(scene) {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the run ended ({status}) before {point:?}: give it a larger input");
        }
        assert!(Instant::now() < deadline, "{point:?} not reached in 60 s");
        std::thread::sleep(Duration::from_millis(1));
    }
    child
}

fn signal(child: &Child, signal: libc::c_int) {
    // SAFETY: sends a signal to our own child process, which has not been waited for.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, signal) }, 0);
}

fn stderr_of(child: Child) -> (Option<i32>, Option<i32>, String) {
    use std::os::unix::process::ExitStatusExt;
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        out.status.signal(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn an_interrupted_run_leaves_the_earlier_output_and_nothing_of_its_own() {
    for (sig, name) in [
        (libc::SIGINT, "SIGINT"),
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGHUP, "SIGHUP"),
    ] {
        for point in [Point::Spilling, Point::WritingRows] {
            let scene = Scene::new("interrupted");
            let child = start_and_wait_for(&scene, point);
            signal(&child, sig);
            let (code, _, stderr) = stderr_of(child);
            assert_eq!(code, Some(128 + sig), "{name} at {point:?}: {stderr}");
            // Once the output is open, the message says it was not written.
            let output_open = matches!(point, Point::WritingRows);
            assert!(
                stderr.contains(&format!("stopped by {name}"))
                    && (!output_open || stderr.contains("as it was")),
                "{name} at {point:?}: {stderr}"
            );
            assert_eq!(
                std::fs::read(scene.out()).unwrap(),
                EARLIER,
                "{name} at {point:?}: the earlier output changed"
            );
            assert_eq!(scene.strays(), Vec::<String>::new(), "{name} at {point:?}");
            assert_eq!(
                names(&scene.spill()),
                Vec::<String>::new(),
                "{name} at {point:?}: spill files left"
            );
        }
    }
}

#[test]
fn a_killed_runs_files_are_removed_by_the_next_run_which_says_so() {
    for point in [Point::Spilling, Point::WritingRows] {
        let scene = Scene::new("killed");
        let child = start_and_wait_for(&scene, point);
        signal(&child, libc::SIGKILL);
        let (_, signalled, _) = stderr_of(child);
        assert_eq!(signalled, Some(libc::SIGKILL), "{point:?}");
        assert_eq!(
            std::fs::read(scene.out()).unwrap(),
            EARLIER,
            "{point:?}: the earlier output changed"
        );
        let left_spill = names(&scene.spill());
        assert_eq!(left_spill.len(), 1, "{point:?}: {left_spill:?}");
        let left_beside = scene.strays();
        if let Point::WritingRows = point {
            assert_eq!(left_beside.len(), 1, "{point:?}: {left_beside:?}");
            assert!(
                left_beside[0].starts_with(".out.jsonl.attempt-funnel-"),
                "{left_beside:?}"
            );
        }

        // The next run, with the same --temp-dir and output: a small input that spills.
        let small = scene.dir.file(
            "small.jsonl",
            &std::fs::read(big_input()).unwrap()[..8 << 20],
        );
        let small = cut_to_whole_lines(&small);
        let next = run(&scene.analyze_args(&small));
        next.expect_code(0);
        assert!(
            next.stderr.contains("removed 1 spill directory")
                && next.stderr.contains("left by a run that was killed"),
            "{point:?}: {}",
            next.stderr
        );
        if let Point::WritingRows = point {
            assert!(
                next.stderr.contains("removed 1 unfinished file"),
                "{point:?}: {}",
                next.stderr
            );
        }
        assert_eq!(names(&scene.spill()), Vec::<String>::new(), "{point:?}");
        assert_eq!(scene.strays(), vec!["small.jsonl".to_string()], "{point:?}");
        let rows = decode_rows(&std::fs::read(scene.out()).unwrap());
        assert!(
            !rows.is_empty(),
            "{point:?}: the next run's report is whole"
        );
    }
}

/// `path` without its last, cut line.
fn cut_to_whole_lines(path: &Path) -> PathBuf {
    let mut bytes = std::fs::read(path).unwrap();
    let end = bytes.iter().rposition(|&b| b == b'\n').unwrap() + 1;
    bytes.truncate(end);
    std::fs::write(path, bytes).unwrap();
    path.to_path_buf()
}

#[test]
fn a_live_runs_spill_directory_is_not_taken_for_a_killed_ones() {
    let scene = Scene::new("live");
    let mut first = start_and_wait_for(&scene, Point::Spilling);
    // A second run in the same --temp-dir while the first one spills.
    let other = TempDir::new("live-other");
    let out = other.path.join("rows.jsonl");
    let second = run(&[
        "analyze",
        &other
            .file("one.jsonl", record("a", "caller", 1, 0, 5, "ok").as_bytes())
            .display()
            .to_string(),
        "--memory-limit",
        "16MiB",
        "--temp-dir",
        &scene.spill().display().to_string(),
        "-f",
        "jsonl",
        "-o",
        &out.display().to_string(),
    ]);
    second.expect_code(0);
    assert!(!second.stderr.contains("removed"), "{}", second.stderr);
    let status = first.wait().unwrap();
    assert!(status.success(), "the first run failed: {status}");
    assert!(decode_rows(&std::fs::read(scene.out()).unwrap()).len() > 1000);
}

#[test]
fn two_runs_writing_one_output_leave_one_whole_file() {
    let dir = TempDir::new("concurrent");
    let small = dir.file(
        "small.jsonl",
        (0..500)
            .map(|i| record(&format!("s-{i}"), "caller", 1, i, i + 5, "ok") + "\n")
            .collect::<String>()
            .as_bytes(),
    );
    let out = dir.path.join("rows.jsonl");
    for attempt in 0..3 {
        let start = |input: &Path| {
            Command::new(BIN)
                .env(MEMORY_FLOOR.0, MEMORY_FLOOR.1)
                .args(["analyze", &input.display().to_string(), "-f", "jsonl", "-o"])
                .arg(&out)
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        };
        let mut a = start(big_input());
        let mut b = start(&small);
        assert!(a.wait().unwrap().success() && b.wait().unwrap().success());
        let rows = decode_rows(&std::fs::read(&out).unwrap());
        let small_ones = rows.iter().filter(|r| r.id().starts_with("s-")).count();
        assert!(
            (rows.len() == 500 && small_ones == 500)
                || (rows.len() == OPS.parse::<usize>().unwrap() && small_ones == 0),
            "try {attempt}: {} rows, {small_ones} of the small input",
            rows.len()
        );
        assert_eq!(
            names(&dir.path),
            vec!["rows.jsonl".to_string(), "small.jsonl".to_string()]
        );
    }
}

#[test]
fn a_failed_run_leaves_the_earlier_output_as_it_was() {
    let scene = Scene::new("failed");
    let bad = scene.dir.file(
        "bad.jsonl",
        format!("{}\nnot json\n", record("a", "caller", 1, 0, 5, "ok")).as_bytes(),
    );
    for format in ["jsonl", "json", "csv"] {
        analyze(&[
            bad.display().to_string(),
            "--strict".into(),
            "-f".into(),
            format.into(),
            "-o".into(),
            scene.out().display().to_string(),
        ])
        .expect_code(2);
        assert_eq!(std::fs::read(scene.out()).unwrap(), EARLIER, "{format}");
        assert_eq!(scene.strays(), vec!["bad.jsonl".to_string()], "{format}");
    }
}

/// A report to a standard output that was closed (`>&-`) or is full is an error, exit 2.
#[test]
fn a_report_that_cannot_reach_standard_output_exits_2() {
    let input = fixture("classes/overlap.jsonl");
    for format in ["table", "json", "jsonl", "csv"] {
        let closed = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "exec '{BIN}' analyze '{}' -f {format} >&-",
                input.display()
            ))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&closed.stderr);
        assert_eq!(closed.status.code(), Some(2), "{format}, closed: {stderr}");
        assert!(
            stderr.contains("standard output is closed"),
            "{format}: {stderr}"
        );

        #[cfg(target_os = "linux")]
        {
            let full = Command::new(BIN)
                .env(MEMORY_FLOOR.0, MEMORY_FLOOR.1)
                .args(["analyze", &input.display().to_string(), "-f", format])
                .stdout(std::fs::File::create("/dev/full").unwrap())
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&full.stderr);
            assert_eq!(full.status.code(), Some(2), "{format}, full: {stderr}");
            assert!(
                stderr.contains("could not write standard output")
                    && stderr.contains("No space left on device")
                    && !stderr.contains("could not write standard output: could not write"),
                "{format}: {stderr}"
            );
        }
    }
    // Standard output as /dev/null is a choice, not an accident: no error.
    analyze(&[input.display().to_string()]).expect_code(0);
    let null = Command::new(BIN)
        .env(MEMORY_FLOOR.0, MEMORY_FLOOR.1)
        .args(["analyze", &input.display().to_string()])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(null.code(), Some(0));
}

/// `--junit`, `convert -o` and `-o` naming an input, or a hard link to one, are refused
/// before anything is read, and the input is left as it was.
#[test]
fn an_output_that_is_an_input_is_refused_and_the_input_kept() {
    let dir = TempDir::new("output-is-input");
    let text = std::fs::read(fixture("classes/overlap.jsonl")).unwrap();
    let input = dir.file("events.jsonl", &text);
    let link = dir.path.join("link.jsonl");
    std::fs::hard_link(&input, &link).unwrap();
    let input_s = input.display().to_string();
    let link_s = link.display().to_string();
    let dir_s = dir.path.display().to_string();
    let cases: Vec<(&str, Vec<&str>)> = vec![
        ("--junit", vec!["analyze", &input_s, "--junit", &input_s]),
        ("--junit", vec!["analyze", &input_s, "--junit", &link_s]),
        ("--output", vec!["analyze", &input_s, "-o", &link_s]),
        ("--output", vec!["analyze", &dir_s, "-o", &input_s]),
        ("--output", vec!["convert", &input_s, "-o", &link_s]),
        ("--output", vec!["convert", &link_s, "-o", &input_s]),
    ];
    for (flag, args) in cases {
        let run = run(&args);
        run.expect_code(2);
        assert!(
            run.stderr.contains(&format!("{flag} '")) && run.stderr.contains("is also an input"),
            "{args:?}: {}",
            run.stderr
        );
        assert!(
            !run.stderr.contains("no failure conditions"),
            "{}",
            run.stderr
        );
        assert_eq!(std::fs::read(&input).unwrap(), text, "{args:?}");
        assert_eq!(
            names(&dir.path),
            vec!["events.jsonl".to_string(), "link.jsonl".to_string()],
            "{args:?}"
        );
    }
}

//! Every command in the documentation runs (issue #17): each `console` and `sh` block of
//! README.md and docs/*.md is executed against the real binary, so that no flag, subcommand
//! or example file the docs show can drift from what the binary accepts. It checks the
//! commands, not the wording of their output (docs/ci.md's gate output is compared word for
//! word in tests/gate.rs).
//!
//! The commands run with `sh` in a scratch directory that holds the repository's `fixtures/`
//! and stand-ins for the files the examples name (`events.jsonl`, `logs/`, `a.gz`, …), with
//! the binary under test first on `PATH`; beside it only `cat`, `wc` and `gzip` may run. A
//! command passes when the binary neither panics nor rejects its arguments, and exits as
//! the docs say: the code after `$ echo $?` in a console block, the code in
//! [`FAILING_ON_PURPOSE`] for the examples of errors, else 0 or 1 (a gate may breach on the
//! stand-in data).

mod common;
#[path = "common/encoded.rs"]
mod encoded;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::*;
use encoded::{gzip, jsonl_to_parquet, zstd};

/// Commands that are not attempt-funnel's to run here, by their first words, and why.
const NOT_RUN: [(&str, &str); 11] = [
    ("cargo test", "runs this very test suite"),
    (
        "cargo install",
        "installs into the user's cargo bin directory",
    ),
    ("bash .ci/run", "is the whole CI, including this test"),
    (
        "bench/run.sh",
        "installs the benchmark's peers and runs for minutes",
    ),
    (
        "bench/scale.sh",
        "generates a million events and times runs for minutes",
    ),
    (
        "examples/spark/run.sh",
        "installs pyspark from PyPI and runs Spark for minutes",
    ),
    ("kubectl ", "needs a Kubernetes cluster"),
    ("fuzz/run.sh", "builds the tests and fuzzes for minutes"),
    ("FUZZ_SECONDS=", "fuzzes for minutes"),
    ("FUZZ_SEED=", "fuzzes for a minute"),
    (
        "duckdb ",
        "is another tool, reading the Parquet file written before it",
    ),
];

/// Examples of errors, the exit code they show, and a piece of the error that proves the
/// binary failed for the documented reason (not on a flag it no longer knows).
const FAILING_ON_PURPOSE: [(&str, i32, &str); 4] = [
    (
        "attempt-funnel analyze --fail-on 'overlap >> 1%' events.jsonl",
        2,
        "unknown operator '>>'",
    ),
    (
        "attempt-funnel analyze --fail-on 'retries@cache > 0' events.jsonl",
        2,
        "unknown hop 'cache'",
    ),
    (
        "attempt-funnel analyze --policy broken.toml events.jsonl",
        2,
        "invalid policy 'broken.toml'",
    ),
    // The stand-in events.jsonl has the default hop names, not these.
    (
        "attempt-funnel analyze --hops client,edge,api,db events.jsonl",
        2,
        "known hops are client, edge, api, db",
    ),
];

/// One command found in a document.
#[derive(Debug)]
struct DocCommand {
    doc: String,
    line: usize,
    text: String,
    /// The exit code shown after it with `$ echo $?`.
    shown_code: Option<i32>,
}

/// The commands of the `console` (`$ ` lines) and `sh` blocks of one Markdown file.
fn commands_in(doc: &str, text: &str) -> Vec<DocCommand> {
    let mut out: Vec<DocCommand> = Vec::new();
    let mut block: Option<&str> = None;
    let mut pending = String::new();
    let mut expect_code = false;
    for (i, line) in text.lines().enumerate() {
        if let Some(lang) = line.strip_prefix("```") {
            block = match block {
                None => Some(lang.trim()),
                Some(_) => None,
            };
            continue;
        }
        let command = match block {
            Some("console") => {
                if expect_code {
                    expect_code = false;
                    let code = line.trim().parse().unwrap_or_else(|_| {
                        panic!("{doc}:{}: `$ echo $?` is not followed by a code", i + 1)
                    });
                    out.last_mut().expect("a command before echo").shown_code = Some(code);
                    continue;
                }
                match line.strip_prefix("$ ") {
                    Some("echo $?") => {
                        expect_code = true;
                        continue;
                    }
                    Some(c) => c.to_string(),
                    None => continue,
                }
            }
            Some("sh" | "shell" | "bash") => {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                if let Some(head) = line.strip_suffix('\\') {
                    pending.push_str(head);
                    continue;
                }
                std::mem::take(&mut pending) + line
            }
            _ => continue,
        };
        out.push(DocCommand {
            doc: doc.to_string(),
            line: i + 1,
            text: command,
            shown_code: None,
        });
    }
    out
}

/// README.md and docs/*.md, in a fixed order.
fn documents() -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    docs.insert(0, root().join("README.md"));
    docs
}

/// The scratch directory: `fixtures` and the stand-ins for the files the examples name.
fn sandbox() -> TempFile {
    let dir = TempFile::reserve("docs-sandbox");
    let at = |rel: &str| dir.path().join(rel);
    let fixture_bytes = |rel: &str| std::fs::read(fixture(rel)).unwrap();
    for sub in ["logs/2025-03-14", "events"] {
        std::fs::create_dir_all(at(sub)).unwrap();
    }
    std::os::unix::fs::symlink(root().join("fixtures"), at("fixtures")).unwrap();
    let incident = fixture_bytes("incident.jsonl");
    let healthy = fixture_bytes("classes/healthy.jsonl");
    let nested = fixture_bytes("classes/nested-retry.jsonl");
    let files: Vec<(&str, Vec<u8>)> = vec![
        ("events.jsonl", incident.clone()),
        ("day1.jsonl", healthy.clone()),
        ("day2.logfmt", fixture_bytes("logfmt-trace.logfmt")),
        ("hops.toml", fixture_bytes("otlp/hop-map.toml")),
        ("otel.jsonl", fixture_bytes("otlp/gateway-retries.jsonl")),
        ("traces.jsonl", fixture_bytes("otlp/gateway-retries.jsonl")),
        (
            "attempt-funnel.toml",
            fixture_bytes("policy/attempt-funnel.toml"),
        ),
        (
            "broken.toml",
            b"fail-on = [\"nested-retry > 0\"]\n".to_vec(),
        ),
        ("incident.jsonl.gz", gzip(&incident)),
        ("incident.jsonl.zst", zstd(&incident)),
        ("a.gz", gzip(&healthy)),
        ("b.gz", gzip(&nested)),
        ("logs/2025-03-14/part-1.jsonl.gz", gzip(&healthy)),
        ("logs/2025-03-14/part-2.jsonl.zst", zstd(&nested)),
        ("events/run-1.jsonl", healthy),
        ("events/run-2.jsonl", nested),
    ];
    for (rel, bytes) in files {
        std::fs::write(at(rel), bytes).unwrap();
    }
    jsonl_to_parquet(&incident, &at("events.parquet"));
    dir
}

fn run_in(dir: &Path, command: &str) -> Run {
    let bin_dir = Path::new(BIN).parent().expect("the binary's directory");
    let path = std::env::join_paths(std::iter::once(bin_dir.to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .unwrap();
    let out = Command::new("sh")
        .args(["-c", command])
        .current_dir(dir)
        .env("PATH", path)
        .stdin(Stdio::null())
        .output()
        .expect("run sh");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn every_command_in_the_readme_and_the_docs_runs_as_documented() {
    let dir = sandbox();
    let mut ran = 0;
    let mut purposeful_failures = 0;
    let mut docs_with_commands = 0;
    for doc in documents() {
        let name = doc.strip_prefix(root()).unwrap().display().to_string();
        let commands = commands_in(&name, &std::fs::read_to_string(&doc).unwrap());
        docs_with_commands += usize::from(!commands.is_empty());
        for c in commands {
            let at = format!("{}:{}: {}", c.doc, c.line, c.text);
            // The README's first example builds and runs from the clone.
            let text = c.text.replace("cargo run --release -- ", "attempt-funnel ");
            if let Some((_, why)) = NOT_RUN.iter().find(|(p, _)| text.starts_with(p)) {
                eprintln!("not run ({why}): {at}");
                continue;
            }
            let programs: Vec<&str> = text
                .split('|')
                .map(|stage| stage.split_whitespace().next().unwrap_or(""))
                .collect();
            assert!(
                programs
                    .iter()
                    .all(|p| ["attempt-funnel", "cat", "wc", "gzip"].contains(p)),
                "{at}\nruns a program this test does not know ({programs:?}): make it an attempt-funnel command, or add it to NOT_RUN with the reason"
            );
            let run = run_in(dir.path(), &text);
            assert!(!run.stderr.contains("panicked"), "{at}\n{}", run.stderr);
            assert!(
                !run.stderr.lines().any(|l| l.starts_with("error:")),
                "{at}\nthe binary rejected its arguments:\n{}",
                run.stderr
            );
            // Compared without the trailing `# comment` of an sh line.
            let bare = text.split(" #").next().unwrap_or_default().trim_end();
            let purposeful = FAILING_ON_PURPOSE.iter().find(|(cmd, _, _)| *cmd == bare);
            match (c.shown_code, purposeful) {
                (Some(code), _) => assert_eq!(run.code, code, "{at}\n{}", run.stderr),
                (None, Some((_, code, why))) => {
                    assert_eq!(run.code, *code, "{at}\n{}", run.stderr);
                    assert!(run.stderr.contains(why), "{at}\n{}", run.stderr);
                    purposeful_failures += 1;
                }
                (None, None) => assert!(
                    run.code == 0 || run.code == 1,
                    "{at}\nexit code {}:\n{}",
                    run.code,
                    run.stderr
                ),
            }
            ran += 1;
        }
    }
    // Each example of an error is still in the docs and was run.
    assert_eq!(purposeful_failures, FAILING_ON_PURPOSE.len());
    assert!(docs_with_commands >= 5, "{docs_with_commands} documents");
    assert!(ran >= 40, "only {ran} commands ran");
    std::fs::remove_dir_all(dir.path()).unwrap();
}

#[test]
fn the_command_finder_reads_console_and_sh_blocks_and_shown_exit_codes() {
    let doc = "\
```sh
attempt-funnel analyze a.jsonl   # one
# a comment

attempt-funnel analyze \\
  b.jsonl
```
```console
$ attempt-funnel show op-1 c.jsonl
op-1 — healthy
$ echo $?
0
```
```json
{\"not\": \"a command\"}
```
";
    let found = commands_in("x.md", doc);
    let texts: Vec<&str> = found.iter().map(|c| c.text.as_str()).collect();
    assert_eq!(
        texts,
        [
            "attempt-funnel analyze a.jsonl   # one",
            "attempt-funnel analyze b.jsonl",
            "attempt-funnel show op-1 c.jsonl",
        ]
    );
    assert_eq!(found[2].shown_code, Some(0));
    assert_eq!(found[0].line, 2);
}

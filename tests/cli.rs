//! End-to-end tests of the command line's conventions (issue #17): a gate verdict that does
//! not depend on the report's reader, JUnit on bad input, `-` as standard output, the
//! terminal (width, colour, ASCII), completions, man pages, help and version, plurals and
//! the `--hop-map` rename. Every test runs the real binary.

mod common;

use std::process::{Command, Stdio};

use common::*;

const INCIDENT: &str = "fixtures/incident.jsonl";
const HEALTHY: &str = "fixtures/classes/healthy.jsonl";
const BAD_LINES: &str = "fixtures/bad/bad-lines.jsonl";
const LOGFMT: &str = "fixtures/logfmt-trace.logfmt";

/// Runs the binary with standard output a pipe whose reader is already gone: every write to
/// it fails with a broken pipe, as behind `| head -c 100` once head has exited.
fn run_with_closed_stdout(args: &[&str]) -> Run {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let out = Command::new(BIN)
        .args(args)
        .current_dir(root())
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("run attempt-funnel");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: Vec::new(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `--junit FILE` read back after the run.
fn junit_text(path: &TempFile) -> String {
    std::fs::read_to_string(path.path()).expect("the JUnit file was written")
}

fn parse_xml(xml: &str) -> roxmltree::Document<'_> {
    roxmltree::Document::parse(xml).unwrap_or_else(|e| panic!("not XML ({e}):\n{xml}"))
}

// ---------------------------------------------------------------------------------------
// The CI contract
// ---------------------------------------------------------------------------------------

#[test]
fn a_closed_stdout_changes_neither_the_gate_verdict_nor_the_exit_code_nor_the_junit_file() {
    let junit = TempFile::reserve("closed-pipe.xml");
    let junit_path = junit.path().to_str().unwrap();
    for format in ["jsonl", "table", "json", "markdown"] {
        let run = run_with_closed_stdout(&[
            "analyze",
            INCIDENT,
            "--fail-on",
            "nested-retry > 0",
            "-f",
            format,
            "--junit",
            junit_path,
        ]);
        run.expect_code(1);
        assert!(
            run.stderr
                .contains("attempt-funnel: gate FAILED: 1 of 1 threshold breached"),
            "{format}: {}",
            run.stderr
        );
        assert!(
            run.stderr
                .contains("  BREACHED nested-retry > 0: measured 22, limit 0"),
            "{format}: {}",
            run.stderr
        );
        assert!(!run.stderr.contains("Broken pipe"), "{}", run.stderr);
        let xml = junit_text(&junit);
        let doc = parse_xml(&xml);
        assert_eq!(doc.root_element().attribute("failures"), Some("1"), "{xml}");
        std::fs::remove_file(junit.path()).unwrap();
    }
    // The same run with a reader gives the same verdict and exit code.
    let run = analyze(&[INCIDENT, "--fail-on", "nested-retry > 0", "-f", "jsonl"]);
    run.expect_code(1);
}

#[test]
fn a_closed_stdout_keeps_the_input_error_exit_code_and_a_passing_gate_exits_0() {
    let run = run_with_closed_stdout(&["analyze", "--fail-on", "nested-retry > 0", BAD_LINES]);
    run.expect_code(2);
    assert!(run.stderr.contains("7 bad input lines"), "{}", run.stderr);
    let run = run_with_closed_stdout(&["analyze", "--fail-on", "nested-retry > 0", HEALTHY]);
    run.expect_code(0);
    assert!(
        run.stderr
            .contains("attempt-funnel: gate passed: 1 threshold within its limit"),
        "{}",
        run.stderr
    );
}

#[test]
fn junit_on_bad_input_has_an_error_element_not_all_green() {
    let junit = TempFile::reserve("bad-input.xml");
    let run = analyze(&[
        "--fail-on",
        "nested-retry > 0",
        "--junit",
        junit.path().to_str().unwrap(),
        "-f",
        "json",
        BAD_LINES,
        HEALTHY,
    ]);
    run.expect_code(2);
    let xml = junit_text(&junit);
    let doc = parse_xml(&xml);
    let root = doc.root_element();
    assert_eq!(root.attribute("errors"), Some("1"), "{xml}");
    assert_eq!(root.attribute("tests"), Some("2"), "{xml}");
    let error = doc
        .descendants()
        .find(|n| n.has_tag_name("error"))
        .unwrap_or_else(|| panic!("no <error> element:\n{xml}"));
    assert_eq!(error.attribute("type"), Some("input"));
    assert_eq!(
        error.attribute("message"),
        Some("7 bad input lines: the verdict covers the good lines only")
    );
    // The error's text names the first bad line as stderr does.
    let text = error.text().unwrap_or_default();
    let first_bad = run
        .stderr
        .lines()
        .find(|l| l.starts_with(BAD_LINES))
        .expect("a bad line on stderr");
    assert!(text.contains(first_bad), "{text}");
    // With --skip-invalid the bad lines are accepted: no error.
    let run = analyze(&[
        "--fail-on",
        "nested-retry > 0",
        "--skip-invalid",
        "--junit",
        junit.path().to_str().unwrap(),
        BAD_LINES,
        HEALTHY,
    ]);
    run.expect_code(0);
    assert!(!junit_text(&junit).contains("<error"));
}

#[test]
fn junit_of_a_run_stopped_by_strict_says_it_stopped() {
    let junit = TempFile::reserve("strict.xml");
    let run = analyze(&[
        "--fail-on",
        "nested-retry > 0",
        "--strict",
        "--junit",
        junit.path().to_str().unwrap(),
        BAD_LINES,
    ]);
    run.expect_code(2);
    let xml = junit_text(&junit);
    let doc = parse_xml(&xml);
    assert_eq!(doc.root_element().attribute("errors"), Some("1"), "{xml}");
    let error = doc.descendants().find(|n| n.has_tag_name("error")).unwrap();
    assert!(
        error
            .text()
            .unwrap_or_default()
            .contains(&format!("{BAD_LINES}:")),
        "{xml}"
    );
}

#[test]
fn a_dash_means_standard_output_for_junit_and_expected_and_never_a_file_named_dash() {
    let dash = root().join("-");
    assert!(!dash.exists(), "a file named '-' is in the crate root");
    let report = TempFile::reserve("report.json");
    let run = analyze(&[
        "--fail-on",
        "nested-retry > 0",
        "--junit",
        "-",
        "-f",
        "json",
        "--output",
        report.path().to_str().unwrap(),
        INCIDENT,
    ]);
    run.expect_code(1);
    let xml = run.stdout_text();
    assert!(xml.starts_with("<?xml"), "{xml}");
    assert_eq!(
        parse_xml(&xml).root_element().attribute("failures"),
        Some("1")
    );
    decode_summary(&std::fs::read(report.path()).unwrap());

    // Both on stdout would mix XML into the report: refused before any work.
    let run = analyze(&["--fail-on", "nested-retry > 0", "--junit", "-", INCIDENT]);
    run.expect_code(2);
    assert!(
        run.stderr
            .contains("--junit - and the report would both go to standard output"),
        "{}",
        run.stderr
    );

    let events = TempFile::reserve("events.jsonl");
    let run = common::run(&[
        "generate",
        "--ops",
        "20",
        "-o",
        events.path().to_str().unwrap(),
        "--expected",
        "-",
    ]);
    run.expect_code(0);
    let expected = run.stdout_text();
    assert!(expected.starts_with("operation_id,class\n"), "{expected}");
    assert_eq!(expected.lines().count(), 21, "{expected}");
    let run = common::run(&["generate", "--ops", "20", "--expected", "-"]);
    run.expect_code(2);
    assert!(run.stderr.contains("--expected -"), "{}", run.stderr);
    assert!(!dash.exists(), "a file named '-' was created");
}

// ---------------------------------------------------------------------------------------
// The terminal
// ---------------------------------------------------------------------------------------

/// Whether a line holding `word` has a colour escape in front of it.
fn coloured(text: &str, word: &str) -> bool {
    text.lines().any(|l| {
        l.find(word)
            .is_some_and(|at| l[..at].contains("\x1b[38;5;") || l[..at].contains("\x1b[3"))
    })
}

/// Visible characters of a line: ANSI colour escapes are not columns.
fn visible_width(line: &str) -> usize {
    let mut width = 0;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for e in chars.by_ref() {
                if e.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            width += 1;
        }
    }
    width
}

/// Runs the binary on a pseudo-terminal of `columns` columns, through `script` (util-linux),
/// and returns what the terminal showed. Fails, rather than skipping, when `script` is
/// missing: this is the only test of the terminal width.
fn run_on_terminal(columns: u16, args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    run_on_terminal_of(columns, 50, args, env)
}

/// [`run_on_terminal`] on a terminal of `rows` rows (0: one that reports none).
fn run_on_terminal_of(
    columns: u16,
    rows: u16,
    args: &[&str],
    env: &[(&str, &str)],
) -> (i32, String) {
    // `COLUMNS` is set after `stty`: the shell `script` runs updates an exported COLUMNS
    // to the terminal's new width.
    let columns_var = env
        .iter()
        .find(|(k, _)| *k == "COLUMNS")
        .map_or(String::new(), |(_, v)| format!("COLUMNS={v} "));
    let mut command_line = format!("stty cols {columns} rows {rows}; {columns_var}exec '{BIN}'");
    for a in args {
        command_line.push_str(&format!(" '{a}'"));
    }
    let mut command = Command::new("script");
    command
        .args(["-qec", &command_line, "/dev/null"])
        .current_dir(root())
        .stdin(Stdio::null())
        .env_remove("NO_COLOR")
        .env_remove("CLICOLOR_FORCE")
        .env_remove("COLUMNS")
        .env("TERM", "xterm");
    for (k, v) in env {
        command.env(k, v);
    }
    let out = command.output().unwrap_or_else(|e| {
        panic!("this test needs `script` from util-linux to make a pseudo-terminal ({e}); install it (apt-get install util-linux)")
    });
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).replace('\r', ""),
    )
}

#[test]
fn on_an_80_column_terminal_the_table_has_no_line_longer_than_80() {
    let (code, shown) = run_on_terminal(80, &["analyze", INCIDENT], &[]);
    assert_eq!(code, 0, "{shown}");
    for title in [
        "Funnel per hop",
        "Classes",
        "Synchronized bursts",
        "Worst operations",
    ] {
        assert!(shown.contains(title), "{title} missing:\n{shown}");
    }
    let long: Vec<&str> = shown.lines().filter(|l| visible_width(l) > 80).collect();
    assert!(
        long.is_empty(),
        "{} lines wider than 80:\n{}",
        long.len(),
        long.join("\n")
    );
    // Colour on a terminal: the class names.
    assert!(coloured(&shown, "healthy"), "{shown}");
    // Piped, the same table is drawn at full width, wider than 80, without colour.
    let piped = analyze(&[INCIDENT]);
    piped.expect_code(0);
    let piped = piped.stdout_text();
    assert!(piped.lines().any(|l| l.chars().count() > 80), "{piped}");
    assert!(!piped.contains('\x1b'), "{piped}");
    assert!(piped.contains("first to multiply"), "{piped}");
}

#[test]
fn on_an_80_column_terminal_show_has_no_line_longer_than_80() {
    let (code, shown) = run_on_terminal(80, &["show", "op-17", LOGFMT], &[]);
    assert_eq!(code, 0, "{shown}");
    assert!(shown.contains("Timeline"), "{shown}");
    let long: Vec<&str> = shown.lines().filter(|l| visible_width(l) > 80).collect();
    assert!(
        long.is_empty(),
        "{} lines wider than 80:\n{}",
        long.len(),
        long.join("\n")
    );
}

#[test]
fn no_color_and_color_never_turn_the_colour_off_on_a_terminal() {
    let (_, shown) = run_on_terminal(120, &["analyze", INCIDENT], &[("NO_COLOR", "1")]);
    assert!(!shown.contains('\x1b'), "{shown}");
    let (_, shown) = run_on_terminal(120, &["analyze", "--color", "never", INCIDENT], &[]);
    assert!(!shown.contains('\x1b'), "{shown}");
}

#[test]
fn color_always_and_clicolor_force_colour_a_pipe() {
    for (args, env) in [
        (vec!["--color", "always", INCIDENT], vec![]),
        (vec![INCIDENT], vec![("CLICOLOR_FORCE", "1")]),
    ] {
        let mut command = Command::new(BIN);
        command
            .arg("analyze")
            .args(&args)
            .current_dir(root())
            .env_remove("NO_COLOR")
            .env_remove("CLICOLOR_FORCE");
        for (k, v) in env {
            command.env(k, v);
        }
        let out = command.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(coloured(&text, "healthy"), "{args:?}: {text}");
        assert!(coloured(&text, "nested-retry"), "{args:?}: {text}");
    }
    // NO_COLOR wins over CLICOLOR_FORCE; JSON is never coloured.
    let out = Command::new(BIN)
        .args(["analyze", INCIDENT])
        .current_dir(root())
        .env("NO_COLOR", "1")
        .env("CLICOLOR_FORCE", "1")
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).contains('\x1b'));
    let run = analyze(&["--color", "always", "-f", "json", INCIDENT]);
    decode_summary(&run.stdout);
    assert!(!run.stdout_text().contains('\x1b'));
}

#[test]
fn ascii_draws_tables_and_trees_with_ascii_characters_only() {
    let run = analyze(&["--ascii", INCIDENT]);
    run.expect_code(0);
    let text = run.stdout_text();
    assert!(text.is_ascii(), "{text}");
    assert!(text.contains("+-"), "{text}");
    assert!(
        text.contains("caller 3 > gateway 9 > dependency 9"),
        "{text}"
    );
    let run = common::run(&["show", "--ascii", "op-17", LOGFMT]);
    run.expect_code(0);
    let text = run.stdout_text();
    assert!(text.is_ascii(), "{text}");
    assert!(text.contains("` dependency #1"), "{text}");
}

// ---------------------------------------------------------------------------------------
// Completions, man pages, help and version
// ---------------------------------------------------------------------------------------

#[test]
fn completions_for_bash_zsh_and_fish_generate() {
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef attempt-funnel"),
        ("fish", "complete -c attempt-funnel"),
    ] {
        let run = common::run(&["completions", shell]);
        run.expect_code(0);
        let script = run.stdout_text();
        assert!(script.contains(marker), "{shell}: {script}");
        for word in ["analyze", "fail-on", "hop-map", "color"] {
            assert!(script.contains(word), "{shell}: no {word}");
        }
    }
    let run = common::run(&["completions", "tcsh"]);
    run.expect_code(2);
    // Behind `| head -1` the script is cut short, quietly.
    let run = run_with_closed_stdout(&["completions", "bash"]);
    run.expect_code(0);
    assert!(run.stderr.is_empty(), "{}", run.stderr);
}

#[test]
fn man_writes_one_page_per_command() {
    let dir = TempFile::reserve("man");
    let run = common::run(&["man", dir.path().to_str().unwrap()]);
    run.expect_code(0);
    for page in [
        "attempt-funnel.1",
        "attempt-funnel-analyze.1",
        "attempt-funnel-show.1",
        "attempt-funnel-completions.1",
    ] {
        let text = std::fs::read_to_string(dir.path().join(page))
            .unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(text.contains(".TH"), "{page}");
    }
    let analyze_page =
        std::fs::read_to_string(dir.path().join("attempt-funnel-analyze.1")).unwrap();
    assert!(analyze_page.contains("fail\\-on"), "{analyze_page}");
    std::fs::remove_dir_all(dir.path()).unwrap();
}

#[test]
fn every_command_lists_its_exit_codes_in_help_and_prints_the_version() {
    for command in ["analyze", "show", "generate", "convert", "completions"] {
        let run = common::run(&[command, "--help"]);
        run.expect_code(0);
        assert!(run.stdout_text().contains("Exit codes: 0 "), "{command}");
        let run = common::run(&[command, "--version"]);
        run.expect_code(0);
        assert_eq!(
            run.stdout_text(),
            format!("attempt-funnel-{command} {}\n", env!("CARGO_PKG_VERSION")),
            "{command}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Words and names
// ---------------------------------------------------------------------------------------

#[test]
fn one_of_a_thing_is_singular() {
    let one_bad = TempFile::new("one-bad.jsonl", b"{\"operation_id\":\"op-1\",\"hop\":\"nowhere\",\"attempt\":1,\"start_ms\":0,\"finish_ms\":1}\n{\"operation_id\":\"op-2\",\"hop\":\"caller\",\"attempt\":1,\"start_ms\":0,\"finish_ms\":1,\"outcome\":\"ok\"}\n");
    let run = analyze(&[one_bad.path()]);
    run.expect_code(2);
    assert!(run.stderr.contains("1 bad input line;"), "{}", run.stderr);
    let run = analyze(&["--skip-invalid", one_bad.path().to_str().unwrap()]);
    assert!(
        run.stderr
            .contains("skipped 1 bad input line (--skip-invalid)"),
        "{}",
        run.stderr
    );
    let run = analyze(&[LOGFMT]);
    assert!(
        run.stdout_text().contains("Input: 5 lines, 0 bad"),
        "{}",
        run.stdout_text()
    );
    let single = TempFile::new("single.jsonl", b"{\"operation_id\":\"op-1\",\"hop\":\"caller\",\"attempt\":1,\"start_ms\":0,\"finish_ms\":1,\"outcome\":\"ok\"}\n");
    let run = analyze(&[single.path()]);
    let text = run.stdout_text();
    assert!(text.contains("1 operation became 1 attempt "), "{text}");
    assert!(text.contains("Input: 1 line, 0 bad"), "{text}");
    let run = common::run(&["show", "op-1", single.path().to_str().unwrap()]);
    assert!(
        run.stdout_text().contains("(1 attempt)"),
        "{}",
        run.stdout_text()
    );
}

#[test]
fn hop_map_is_the_new_name_of_hop_and_the_old_one_still_works_hidden() {
    let args = |flag: &str| {
        vec![
            "analyze".to_string(),
            "-f".into(),
            "jsonl".into(),
            flag.into(),
            "gateway=gateway".into(),
            "fixtures/otlp/gateway-retries.jsonl".into(),
            "--policy".into(),
            "fixtures/otlp/hop-map.toml".into(),
        ]
    };
    let new = common::run(&args("--hop-map"));
    let old = common::run(&args("--hop"));
    new.expect_code(0);
    old.expect_code(0);
    assert_eq!(new.stdout, old.stdout);
    let help = common::run(&["analyze", "--help"]).stdout_text();
    assert!(help.contains("--hop-map <SERVICE=HOP>"), "{help}");
    assert!(!help.contains("--hop <"), "{help}");
    let run = analyze(&["--hop-map", "nonsense", HEALTHY]);
    run.expect_code(2);
    assert!(
        run.stderr.contains("--hop-map \"nonsense\""),
        "{}",
        run.stderr
    );
}

/// `analyze --help` in groups a user can scan (#45), with first runs before the exit codes.
#[test]
fn analyze_help_is_grouped_and_ends_with_examples() {
    let help = run(&["analyze", "--help"]);
    help.expect_code(0);
    let text = help.stdout_text();
    let at = |heading: &str| {
        text.find(&format!("\n{heading}:\n"))
            .unwrap_or_else(|| panic!("no {heading} group in\n{text}"))
    };
    let order = [
        "Input", "Mapping", "Rules", "Scale", "Output", "Gate", "Examples",
    ];
    let places: Vec<usize> = order.iter().map(|h| at(h)).collect();
    assert!(
        places.windows(2).all(|w| w[0] < w[1]),
        "{order:?} at {places:?}"
    );
    // A flag sits in its group: --field under Mapping, --fail-on under Gate.
    assert!((at("Mapping")..at("Rules")).contains(&text.find("--field <OUR=THEIRS>").unwrap()));
    assert!((at("Gate")..at("Examples")).contains(&text.find("--fail-on <CONDITION>").unwrap()));
    assert!(text.contains("kubectl logs -l app=checkout --prefix | attempt-funnel analyze"));
    assert!(
        text.trim_end()
            .ends_with("(bad input lines, unless --skip-invalid)."),
        "{text}"
    );
}

/// The table fits a terminal that reports no rows (as some CI pseudo-terminals do), and
/// `COLUMNS` when set; `TERM=dumb` gets no colour.
#[test]
fn the_table_fits_columns_a_rowless_terminal_and_a_dumb_one_is_not_coloured() {
    let widest = |shown: &str| shown.lines().map(visible_width).max().unwrap_or(0);
    let (code, shown) = run_on_terminal_of(80, 0, &["analyze", INCIDENT], &[]);
    assert_eq!(code, 0, "{shown}");
    assert!(widest(&shown) <= 80, "{shown}");
    let (_, wide) = run_on_terminal(160, &["analyze", INCIDENT], &[]);
    assert!(widest(&wide) > 80, "{wide}");
    let (_, shown) = run_on_terminal(160, &["analyze", INCIDENT], &[("COLUMNS", "80")]);
    assert!(widest(&shown) <= 80, "{shown}");
    assert!(coloured(&shown, "healthy"), "{shown}");
    let (_, shown) = run_on_terminal(120, &["analyze", INCIDENT], &[("TERM", "dumb")]);
    assert!(!shown.contains('\x1b'), "{shown}");
    assert!(widest(&shown) <= 120, "{shown}");
}

/// One prefix for every error: clap's usage errors say `attempt-funnel:` as ours do.
#[test]
fn a_usage_error_has_the_same_prefix_as_every_other_error() {
    for args in [
        &["analyze", "--bogus"][..],
        &["analyze", "--burst-min-ops", "x", INCIDENT],
        &["no-such-command"],
    ] {
        let run = run(args);
        run.expect_code(2);
        assert!(
            run.stderr.starts_with("attempt-funnel: "),
            "{args:?}: {}",
            run.stderr
        );
        assert!(!run.stderr.contains("error: "), "{args:?}: {}", run.stderr);
    }
}

//! End-to-end tests of whole JSON trace documents, as users download them (#16): a
//! pretty-printed OTLP `TracesData`, Tempo's `/api/traces/{id}` response, Jaeger's JSON, a
//! pretty-printed Zipkin array, a truncated download, and `show FILE`. The fixtures in
//! `fixtures/documents/` hold the same traces as the line-delimited fixtures in
//! `fixtures/otlp/` and `fixtures/zipkin/` (see `fixtures/README.md`), so each test asserts
//! that the document gives exactly the rows of its line-delimited twin.

mod common;

use std::ffi::OsString;
use std::path::PathBuf;

use common::*;

const HOP_MAP: &str = "fixtures/otlp/hop-map.toml";
const OTLP_LINES: &str = "fixtures/otlp/gateway-retries.jsonl";
const REDELIVERY_LINES: &str = "fixtures/otlp/redelivery.jsonl";
const ZIPKIN_LINES: &str = "fixtures/zipkin/checkout.json";
const OTLP_PRETTY: &str = "fixtures/documents/otlp-pretty.json";
const TEMPO: &str = "fixtures/documents/tempo-trace.json";
const JAEGER: &str = "fixtures/documents/jaeger-traces.json";
const JAEGER_REDELIVERY: &str = "fixtures/documents/jaeger-redelivery.json";
const ZIPKIN_PRETTY: &str = "fixtures/documents/zipkin-traces.json";
const TRUNCATED: &str = "fixtures/bad/truncated-trace.json";

const OP_A: &str = "load-42/0af7651916cd43dd8448eb211c80319c";

/// The `--format jsonl` rows of `files` under the fixtures' hop map, sorted, as text:
/// exit 0 and nothing on stderr expected.
fn row_lines(files: &[&str], extra: &[&str]) -> Vec<String> {
    let mut args = vec!["--format", "jsonl", "--policy", HOP_MAP];
    args.extend_from_slice(extra);
    args.extend_from_slice(files);
    let run = analyze(&args);
    run.expect_code(0);
    assert!(run.stderr.is_empty(), "stderr: {}", run.stderr);
    let mut lines: Vec<String> = run.stdout_text().lines().map(String::from).collect();
    lines.sort();
    lines
}

fn show(args: &[&str]) -> Run {
    let mut all = vec!["show"];
    all.extend(args);
    run(&all)
}

#[test]
fn a_pretty_printed_otlp_document_gives_the_rows_of_its_one_object_per_line_form() {
    let lines = row_lines(&[OTLP_LINES], &[]);
    assert_eq!(
        lines.len(),
        3,
        "three traces in one document: three operations"
    );
    assert_eq!(row_lines(&[OTLP_PRETTY], &[]), lines);
    assert_eq!(
        row_lines(&[OTLP_PRETTY], &["--input-format", "otlp"]),
        lines
    );
}

#[test]
fn a_tempo_api_response_with_batches_is_the_one_trace_it_holds() {
    let tempo = row_lines(&[TEMPO], &[]);
    assert_eq!(tempo.len(), 1);
    let row: OperationRow = serde_json::from_str(&tempo[0]).unwrap();
    assert_eq!(row.id(), OP_A);
    assert_eq!(row.class, "nested-retry");
    let from_lines = row_lines(&[OTLP_LINES], &[]);
    assert!(
        from_lines.contains(&tempo[0]),
        "{tempo:?} not in {from_lines:?}"
    );
}

#[test]
fn a_jaeger_download_of_the_same_traces_gives_identical_rows_and_attempts() {
    assert_eq!(row_lines(&[JAEGER], &[]), row_lines(&[OTLP_LINES], &[]));
    assert_eq!(
        row_lines(&[JAEGER], &["--input-format", "jaeger"]),
        row_lines(&[OTLP_LINES], &[])
    );
    // Attempt by attempt too: the same span IDs, parents, targets and outcomes.
    let convert = |file: &str| {
        let run = run(&["convert", "--policy", HOP_MAP, file]);
        run.expect_code(0);
        (run.stdout_text(), run.stderr)
    };
    let (jaeger, jaeger_note) = convert(JAEGER);
    let (otlp, otlp_note) = convert(OTLP_LINES);
    assert_eq!(jaeger, otlp);
    assert_eq!(jaeger_note, otlp_note);
}

#[test]
fn jaeger_follows_from_references_join_each_delivery_to_its_producer() {
    let rows = row_lines(&[JAEGER_REDELIVERY], &[]);
    assert_eq!(rows, row_lines(&[REDELIVERY_LINES], &[]));
    let redelivered: OperationRow = rows
        .iter()
        .map(|l| serde_json::from_str::<OperationRow>(l).unwrap())
        .find(|r| r.operation_id == "7c3a5e0f9b1d4a2c8e6f0a1b2c3d4e5f")
        .expect("the redelivered operation");
    assert_eq!(redelivered.class, "redelivery");
    assert_eq!(redelivered.attempts_at("consumer"), 3);
}

#[test]
fn jaeger_array_tags_keep_their_meaning_for_operation_attribute() {
    let jaeger = row_lines(
        &[JAEGER],
        &[
            "--operation-attribute",
            "http.request.header.idempotency-key",
        ],
    );
    let otlp = row_lines(
        &[OTLP_LINES],
        &[
            "--operation-attribute",
            "http.request.header.idempotency-key",
        ],
    );
    assert_eq!(jaeger, otlp);
    assert!(
        jaeger[0].contains("\"operation_id\":\"order-1001\""),
        "{jaeger:?}"
    );
}

#[test]
fn a_pretty_printed_zipkin_array_of_traces_gives_the_rows_of_its_line_form() {
    let rows = row_lines(&[ZIPKIN_PRETTY], &[]);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows, row_lines(&[ZIPKIN_LINES], &[]));
}

#[test]
fn a_truncated_document_is_an_input_error_naming_its_file_line_and_column() {
    let text = std::fs::read_to_string(root().join(TRUNCATED)).unwrap();
    let line = text.lines().count();
    let column = text.lines().last().unwrap().chars().count();
    let run = analyze(&["--policy", HOP_MAP, TRUNCATED]);
    run.expect_code(2);
    let position = format!("{TRUNCATED}:{line}:{column}: truncated document");
    assert!(
        run.stderr.contains(&position),
        "no {position:?} in:\n{}",
        run.stderr
    );
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    // The traces that were whole before the cut are still read; the cut one is not.
    let rows = analyze(&["--format", "jsonl", "--policy", HOP_MAP, TRUNCATED]);
    rows.expect_code(2);
    let ops = by_id(decode_rows(&rows.stdout));
    assert_eq!(ops.keys().collect::<Vec<_>>(), [OP_A]);
    assert!(
        run.stderr.contains("spans read before it are lost"),
        "{}",
        run.stderr
    );

    let strict = analyze(&["--strict", "--policy", HOP_MAP, TRUNCATED]);
    strict.expect_code(2);
    assert!(strict.stderr.contains(&position), "{}", strict.stderr);
    assert!(strict.stdout.is_empty());
}

#[test]
fn a_document_that_is_not_json_where_it_should_be_names_line_and_column() {
    let file = TempFile::new(
        "broken.json",
        b"{\n  \"data\": [\n    {\"spans\": [}\n  ]\n}\n",
    );
    let run = analyze(&[file.path()]);
    run.expect_code(2);
    let path = file.path().display().to_string();
    assert!(
        run.stderr.contains(&format!("{path}:3:16: not valid JSON")),
        "{}",
        run.stderr
    );
}

#[test]
fn input_format_jaeger_refuses_a_document_of_another_format() {
    let run = analyze(&["--input-format", "jaeger", "--policy", HOP_MAP, OTLP_PRETTY]);
    run.expect_code(2);
    assert!(
        run.stderr.contains(&format!(
            "{OTLP_PRETTY}:1: this document is OTLP JSON (it has resourceSpans), not the Jaeger JSON that --input-format asks for"
        )),
        "{}",
        run.stderr
    );
}

#[test]
fn several_documents_in_a_directory_or_in_one_stream_are_several_operations() {
    let dir = std::env::temp_dir().join(format!("attempt-funnel-documents-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for f in [TEMPO, ZIPKIN_PRETTY] {
        let name = PathBuf::from(f).file_name().unwrap().to_owned();
        std::fs::copy(root().join(f), dir.join(name)).unwrap();
    }
    let from_dir = row_lines(&[dir.to_str().unwrap()], &[]);
    std::fs::remove_dir_all(&dir).unwrap();
    let from_files = row_lines(&[TEMPO, ZIPKIN_PRETTY], &[]);
    assert_eq!(from_dir.len(), 3);
    assert_eq!(from_dir, from_files);

    // Two documents one after the other on stdin, as `cat a.json b.json` gives them.
    let both = [
        std::fs::read(root().join(TEMPO)).unwrap(),
        std::fs::read(root().join(JAEGER_REDELIVERY)).unwrap(),
    ]
    .concat();
    let run = run_with_stdin(
        &["analyze", "--format", "jsonl", "--policy", HOP_MAP],
        Some(&both),
    );
    run.expect_code(0);
    let mut rows: Vec<String> = run.stdout_text().lines().map(String::from).collect();
    rows.sort();
    assert_eq!(rows, row_lines(&[TEMPO, JAEGER_REDELIVERY], &[]));
    assert_eq!(rows.len(), 3);
}

#[test]
fn show_on_a_file_that_holds_one_operation_shows_it() {
    let alone = show(&["--policy", HOP_MAP, TEMPO]);
    alone.expect_code(0);
    let text = alone.stdout_text();
    assert!(
        text.starts_with(&format!("{OP_A} — nested-retry")),
        "{text}"
    );
    let named = show(&[OP_A, "--policy", HOP_MAP, TEMPO]);
    named.expect_code(0);
    assert_eq!(text, named.stdout_text());
}

#[test]
fn show_on_a_file_of_several_operations_asks_which_and_exits_2() {
    let run = show(&["--policy", HOP_MAP, JAEGER]);
    run.expect_code(2);
    assert!(
        run.stderr.contains(&format!(
            "{JAEGER} holds 3 operations, so name the one to show: attempt-funnel show {OP_A} {JAEGER}"
        )),
        "{}",
        run.stderr
    );
    assert!(run
        .stderr
        .contains("load-42/5b8efff798038103d269b633813fc60c"));
    // An operation ID that is not a file still reads standard input, as before.
    let stdin = std::fs::read(root().join(TEMPO)).unwrap();
    let from_stdin = run_with_stdin(
        &[
            OsString::from("show"),
            OP_A.into(),
            "--policy".into(),
            HOP_MAP.into(),
        ],
        Some(&stdin),
    );
    from_stdin.expect_code(0);
}

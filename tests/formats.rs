//! End-to-end tests of the trace importers (OTLP JSON, Zipkin v2) and `convert`, running
//! the real binary on the fixtures in `fixtures/otlp/` and `fixtures/zipkin/` (described in
//! `fixtures/README.md`; the mapping is docs/formats.md). Regression tests for #5.

mod common;

use std::ffi::OsString;

use common::*;

const GATEWAY: &str = "fixtures/otlp/gateway-retries.jsonl";
const EQUIVALENT: &str = "fixtures/otlp/gateway-retries.equivalent.jsonl";
const REDELIVERY: &str = "fixtures/otlp/redelivery.jsonl";
const ZIPKIN: &str = "fixtures/zipkin/checkout.json";
const HOP_MAP: &str = "fixtures/otlp/hop-map.toml";

const OP_A: &str = "load-42/0af7651916cd43dd8448eb211c80319c";
const OP_B: &str = "load-42/4bf92f3577b34da6a3ce929d0e0e4736";
const OP_C: &str = "load-42/5b8efff798038103d269b633813fc60c";

/// `analyze --format jsonl --policy hop-map.toml` rows of `files`, by operation.
fn rows(files: &[&str], extra: &[&str]) -> std::collections::BTreeMap<String, OperationRow> {
    let mut flags = vec!["--policy", HOP_MAP];
    flags.extend_from_slice(extra);
    by_id(analyze_rows(files, &flags))
}

/// The jsonl rows of a run, sorted, as text (for exact comparisons).
fn row_lines(run: &Run) -> Vec<String> {
    run.expect_code(0);
    let mut lines: Vec<String> = run.stdout_text().lines().map(String::from).collect();
    lines.sort();
    lines
}

fn convert<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Run {
    let mut all: Vec<OsString> = vec!["convert".into()];
    all.extend(args.iter().map(|a| a.as_ref().to_owned()));
    run(&all)
}

#[test]
fn otlp_caller_retrying_through_a_gateway_classifies_per_trace() {
    let ops = rows(&[GATEWAY], &[]);
    assert_eq!(ops.len(), 3);

    // Trace A: the caller resends once, the gateway resends twice under the first caller
    // attempt: two retrying layers.
    let a = &ops[OP_A];
    assert_eq!(a.class, "nested-retry");
    assert_eq!(a.first_multiplying_hop.as_deref(), Some("caller"));
    assert_eq!(
        (
            a.attempts_at("caller"),
            a.attempts_at("gateway"),
            a.attempts_at("dependency")
        ),
        (2, 4, 4)
    );
    assert!(a.has_finding("retries@caller") && a.has_finding("retries@gateway"));

    // Trace B: the caller times out at 800 ms and resends while the gateway's first call
    // runs on to 1400 ms.
    let b = &ops[OP_B];
    assert_eq!(b.class, "overlap");
    assert_eq!(b.overlap_ms, 430.0);
    assert!(b.has_finding("overlap@gateway"));

    // Trace C: one attempt per hop. The internal root span, the gateway's server spans and
    // inventory's database client span are not attempts.
    let c = &ops[OP_C];
    assert_eq!(c.class, "healthy");
    assert_eq!(c.total_attempts, 3);

    // The test run comes from the caller's resource and reaches every hop below it.
    assert!(ops
        .values()
        .all(|r| r.test_run_id.as_deref() == Some("load-42")));
}

#[test]
fn otlp_producer_and_consumer_linked_by_span_links_show_the_redelivery() {
    let ops = rows(&[REDELIVERY], &[]);
    let op = &ops["load-42/7c3a5e0f9b1d4a2c8e6f0a1b2c3d4e5f"];
    // Each delivery is its own trace, linked to the producer: one operation, not three.
    assert_eq!(op.class, "redelivery");
    assert_eq!(op.first_multiplying_hop.as_deref(), Some("consumer"));
    assert_eq!(
        (
            op.attempts_at("caller"),
            op.attempts_at("consumer"),
            op.attempts_at("dependency")
        ),
        (1, 3, 3)
    );
    let single = &ops["load-42/8d4b6f1a0c2e5b3d9f7a1b2c3d4e5f60"];
    assert_eq!(single.class, "healthy");
    assert_eq!(ops.len(), 2);
}

#[test]
fn zipkin_spans_with_shared_ids_classify_as_fan_out_and_over_budget() {
    let ops = rows(&[ZIPKIN], &[]);
    let fan = &ops["463ac35c9f6413ad48485a3953bb6124"];
    assert_eq!(fan.class, "fan-out");
    assert_eq!(fan.first_multiplying_hop.as_deref(), Some("gateway"));
    assert_eq!(
        (
            fan.attempts_at("caller"),
            fan.attempts_at("gateway"),
            fan.attempts_at("dependency")
        ),
        (1, 3, 3)
    );
    let retried = &ops["6b221d5bc9e6496c"];
    assert_eq!(retried.class, "over-budget");
    assert_eq!(retried.attempts_at("caller"), 4);
}

#[test]
fn an_otlp_file_and_its_hand_written_json_lines_equivalent_give_identical_rows() {
    let otlp = analyze(&["--format", "jsonl", "--policy", HOP_MAP, GATEWAY]);
    let native = analyze(&["--format", "jsonl", EQUIVALENT]);
    assert_eq!(row_lines(&otlp), row_lines(&native));
}

#[test]
fn convert_then_analyze_gives_the_same_rows_as_analyze() {
    for inputs in [
        vec![GATEWAY, REDELIVERY],
        vec![ZIPKIN],
        vec!["fixtures/incident.jsonl"],
        vec!["fixtures/logfmt-trace.logfmt", "fixtures/mixed-forms.jsonl"],
    ] {
        let converted = TempFile::reserve("converted.jsonl");
        let mut args: Vec<OsString> = vec!["--policy".into(), HOP_MAP.into(), "-o".into()];
        args.push(converted.path().as_os_str().to_owned());
        args.extend(inputs.iter().map(OsString::from));
        convert(&args).expect_code(0);

        let mut direct_args: Vec<OsString> = vec![
            "--format".into(),
            "jsonl".into(),
            "--policy".into(),
            HOP_MAP.into(),
        ];
        direct_args.extend(inputs.iter().map(OsString::from));
        let direct = analyze(&direct_args);
        let again = analyze(&[
            OsString::from("--format"),
            "jsonl".into(),
            converted.path().as_os_str().to_owned(),
        ]);
        assert_eq!(row_lines(&direct), row_lines(&again), "{inputs:?}");
    }
}

#[test]
fn convert_writes_one_native_attempt_record_per_line_and_accounts_for_every_span() {
    let run = convert(&["--policy", HOP_MAP, GATEWAY]);
    run.expect_code(0);
    let records: Vec<serde_json::Value> = run
        .stdout_text()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON record per line"))
        .collect();
    assert_eq!(records.len(), 19);
    let first = &records[0];
    assert_eq!(first["operation_id"], "0af7651916cd43dd8448eb211c80319c");
    assert_eq!(first["test_run_id"], "load-42");
    assert_eq!(first["hop"], "caller");
    assert_eq!(first["attempt"], 1);
    assert_eq!(first["outcome"], 503);
    assert_eq!(first["target"], "GET api-gateway/stock/42");
    // A gateway attempt's parent is the caller's client span, past the gateway's own
    // server span (not an attempt).
    let gateway = records
        .iter()
        .find(|r| r["span_id"] == "a1b0000000000002")
        .expect("gateway attempt 2");
    assert_eq!(gateway["attempt"], 2);
    assert_eq!(gateway["parent_id"], "a1c0000000000001");
    assert!(
        run.stderr.contains("26 spans read, 19 attempts")
            && run
                .stderr
                .contains("api-gateway server (other side of the call) ×5"),
        "{}",
        run.stderr
    );
}

/// Rewrites every OTLP line: IDs to base64, times to JSON numbers, kinds to enum names.
fn otlp_variant(text: &str) -> String {
    fn b64(hex: &str) -> String {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let n = chunk.iter().fold(0u32, |acc, &b| acc << 8 | u32::from(b))
                << (8 * (3 - chunk.len()));
            for k in 0..=chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * k) & 63) as usize] as char);
            }
            out.push_str(&"=".repeat(3 - chunk.len()));
        }
        out
    }
    fn rewrite(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(map) => {
                for (k, val) in map.iter_mut() {
                    match (k.as_str(), &*val) {
                        ("traceId" | "spanId" | "parentSpanId", serde_json::Value::String(s))
                            if !s.is_empty() =>
                        {
                            *val = b64(s).into()
                        }
                        ("startTimeUnixNano" | "endTimeUnixNano", serde_json::Value::String(s)) => {
                            *val = s.parse::<u64>().unwrap().into()
                        }
                        ("kind", serde_json::Value::Number(n)) => {
                            let names = [
                                "UNSPECIFIED",
                                "INTERNAL",
                                "SERVER",
                                "CLIENT",
                                "PRODUCER",
                                "CONSUMER",
                            ];
                            *val =
                                format!("SPAN_KIND_{}", names[n.as_u64().unwrap() as usize]).into()
                        }
                        _ => rewrite(val),
                    }
                }
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(rewrite),
            _ => {}
        }
    }
    text.lines()
        .map(|line| {
            let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
            rewrite(&mut v);
            format!("{v}\n")
        })
        .collect()
}

#[test]
fn base64_ids_numeric_nanos_and_span_kind_names_read_the_same() {
    for fixture in [GATEWAY, REDELIVERY] {
        let text = std::fs::read_to_string(root().join(fixture)).unwrap();
        let variant = otlp_variant(&text);
        assert!(variant.contains("SPAN_KIND_CLIENT") || variant.contains("SPAN_KIND_PRODUCER"));
        assert!(variant.contains("\"startTimeUnixNano\":17"));
        let file = TempFile::new("variant.jsonl", variant.as_bytes());
        let plain = analyze(&["--format", "jsonl", "--policy", HOP_MAP, fixture]);
        let other = analyze(&[
            OsString::from("--format"),
            "jsonl".into(),
            "--policy".into(),
            HOP_MAP.into(),
            file.path().as_os_str().to_owned(),
        ]);
        assert_eq!(row_lines(&plain), row_lines(&other), "{fixture}");
    }
}

#[test]
fn unmapped_spans_are_reported_with_file_line_and_exit_2() {
    let run = analyze(&["--format", "jsonl", GATEWAY]);
    run.expect_code(2);
    assert!(
        run.stderr.contains(&format!(
            "{GATEWAY}:1: span 2 (id a1c0000000000001) service \"checkout\" (client span) maps to no hop: map it with --hop-map checkout=HOP"
        )),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains(&format!(
        "{GATEWAY}:3: span 1 (id a1d0000000000001) service \"inventory\""
    )));
    // The spans that could be mapped (the gateway's) are still analysed.
    let rows = decode_rows(&run.stdout);
    assert_eq!(rows.len(), 3);
    assert!(rows.iter().all(|r| r.attempts_at("gateway") > 0));
}

#[test]
fn a_span_with_no_start_time_or_a_bad_id_is_a_bad_line_naming_the_span() {
    let text = std::fs::read_to_string(root().join(GATEWAY)).unwrap();
    let broken = text
        .replacen(
            "\"startTimeUnixNano\":\"1700000000010000000\"",
            "\"startTimeUnixNano\":\"0\"",
            1,
        )
        .replacen(
            "\"spanId\":\"c3c0000000000001\"",
            "\"spanId\":\"not-an-id\"",
            1,
        );
    let file = TempFile::new("broken.jsonl", broken.as_bytes());
    let path = file.path().display().to_string();
    let run = analyze(&["--policy", HOP_MAP, "--format", "jsonl", &path]);
    run.expect_code(2);
    assert!(
        run.stderr.contains(&format!(
            "{path}:1: span 2 (id a1c0000000000001) has no start time"
        )),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(&format!(
            "{path}:1: span 6 (id not-an-id) has a bad spanId \"not-an-id\" is neither 16 hex digits nor base64 of 8 bytes"
        )),
        "{}",
        run.stderr
    );
    let strict = analyze(&["--policy", HOP_MAP, "--strict", &path]);
    strict.expect_code(2);
    assert!(
        strict.stderr.contains("stopped at the first bad line"),
        "{}",
        strict.stderr
    );
    assert!(strict.stdout.is_empty());
}

#[test]
fn hop_flags_map_services_like_the_policy_and_can_choose_a_span_kind() {
    let by_flags = analyze(&[
        "--format",
        "jsonl",
        "--hop-map",
        "checkout=caller",
        "--hop-map",
        "inventory=dependency",
        GATEWAY,
    ]);
    let by_policy = analyze(&["--format", "jsonl", "--policy", HOP_MAP, GATEWAY]);
    assert_eq!(row_lines(&by_flags), row_lines(&by_policy));

    // Counting the gateway's server spans instead of its client spans: one gateway attempt
    // per caller attempt, and the gateway's resends now show as three dependency attempts
    // under its first attempt.
    let ops = rows(
        &[GATEWAY],
        &[
            "--hop-map",
            "api-gateway:server=gateway",
            "--hop-map",
            "api-gateway:client=-",
        ],
    );
    let a = &ops[OP_A];
    assert_eq!(a.attempts_at("gateway"), 2);
    assert_eq!(a.class, "nested-retry");
    assert!(a.has_finding("retries@dependency"), "{a:?}");
}

#[test]
fn a_bad_hop_flag_is_a_usage_error_naming_the_known_hops() {
    let run = analyze(&["--hop-map", "checkout=frontend", GATEWAY]);
    run.expect_code(2);
    assert!(
        run.stderr.contains("--hop-map \"checkout=frontend\": unknown hop \"frontend\"; known hops are caller, gateway, consumer, dependency"),
        "{}",
        run.stderr
    );
    let run = analyze(&["--hop-map", "checkout:sideways=caller", GATEWAY]);
    run.expect_code(2);
    assert!(
        run.stderr.contains("unknown span kind \"sideways\""),
        "{}",
        run.stderr
    );
}

#[test]
fn operation_attribute_groups_spans_by_idempotency_key() {
    let ops = rows(
        &[GATEWAY],
        &[
            "--operation-attribute",
            "http.request.header.idempotency-key",
        ],
    );
    let ids: Vec<&str> = ops.keys().map(String::as_str).collect();
    assert_eq!(
        ids,
        [
            "load-42/order-1001",
            "load-42/order-1002",
            "load-42/order-1003"
        ]
    );
    // Spans without the header (the dependency's) take it from the spans above them.
    assert_eq!(ops["load-42/order-1001"].class, "nested-retry");
    assert_eq!(ops["load-42/order-1001"].attempts_at("dependency"), 4);

    let missing = analyze(&[
        "--policy",
        HOP_MAP,
        "--operation-attribute",
        "tenant.id",
        GATEWAY,
    ]);
    missing.expect_code(2);
    assert!(
        missing
            .stderr
            .contains("has no tenant.id attribute, and neither has any span above it"),
        "{}",
        missing.stderr
    );
}

#[test]
fn run_attribute_chooses_where_the_test_run_comes_from() {
    let ops = rows(&[GATEWAY], &["--run-attribute", "service.version"]);
    assert!(
        ops.keys().all(|k| k.starts_with("1.4.2/")),
        "{:?}",
        ops.keys()
    );
}

#[test]
fn input_format_forces_the_reader_for_every_input() {
    // A Zipkin file of one span per line is detected by its traceId and id.
    let single = "{\"traceId\":\"6b221d5bc9e6496c\",\"id\":\"2b00000000000001\",\"kind\":\"CLIENT\",\"timestamp\":1000,\"duration\":100,\"localEndpoint\":{\"serviceName\":\"caller\"}}\n";
    let file = TempFile::new("single.zipkin", single.as_bytes());
    let path = file.path().display().to_string();
    let detected = analyze_rows(&[&path], &[]);
    let forced = analyze_rows(&[&path], &["--input-format", "zipkin"]);
    assert_eq!(detected, forced);
    assert_eq!(detected[0].attempts_at("caller"), 1);

    // Forcing JSON Lines on an OTLP file reads its lines as (bad) attempt events.
    let wrong = analyze(&["--input-format", "jsonl", GATEWAY]);
    wrong.expect_code(2);
    assert!(
        wrong.stderr.contains("missing operation_id"),
        "{}",
        wrong.stderr
    );
}

#[test]
fn otlp_and_native_files_mix_in_one_run() {
    let ops = rows(&[GATEWAY, "fixtures/classes/healthy.jsonl"], &[]);
    assert_eq!(ops[OP_A].class, "nested-retry");
    assert_eq!(ops["run-a/h-1"].class, "healthy");
}

//! Key mapping end to end (docs/input.md, "Key mapping"): logs that name our keys their own
//! way, read with `--field`, `--hop-value`, `--attempt-base`, `--time-unit` or the policy's
//! `[fields]` and `[hop_values]`, classify exactly as the same events written with our keys,
//! in JSON Lines, logfmt and Parquet; mapping errors are `path:line` with exit 2; and
//! renaming every key of a generated input, then mapping it back, changes no output.

mod common;
#[path = "common/encoded.rs"]
#[allow(dead_code)] // only its Parquet writer is used here
mod encoded;

use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::{Map, Value};

use common::*;
use encoded::jsonl_to_parquet;

/// What classifying an operation decided, without its times (a mapped log's clock differs
/// from the native fixture's).
fn verdicts(rows: Vec<OperationRow>) -> BTreeMap<String, String> {
    by_id(rows)
        .into_iter()
        .map(|(id, r)| {
            let verdict = format!(
                "{} first={:?} attempts={:?} findings={:?} overlap={}",
                r.class, r.first_multiplying_hop, r.attempts, r.findings, r.overlap_ms
            );
            (id, verdict)
        })
        .collect()
}

/// The native events the mapping fixtures were written from.
fn native() -> BTreeMap<String, String> {
    verdicts(analyze_rows(
        &[
            fixture("classes/healthy.jsonl"),
            fixture("classes/nested-retry.jsonl"),
        ],
        &[],
    ))
}

const K8S_POLICY: &str = "fixtures/mapping/k8s.toml";
const K8S_LOG: &str = "fixtures/mapping/k8s-nested.jsonl";

/// The flags that read fixtures/mapping/epoch-seconds.logfmt.
const LOGFMT_FLAGS: [&str; 30] = [
    "--field",
    "operation_id=req",
    "--field",
    "test_run_id=run",
    "--field",
    "hop=svc",
    "--field",
    "attempt=try",
    "--attempt-base",
    "0",
    "--field",
    "finish_ms=ts",
    "--time-unit",
    "s",
    "--field",
    "duration_ms=took_ms",
    "--field",
    "outcome=status",
    "--field",
    "target=route",
    "--field",
    "span_id=span",
    "--field",
    "parent_id=parent",
    "--field",
    "delay_ms=backoff",
    "--hop-value",
    "checkout-web=caller",
    "--hop-value",
    "checkout-api=gateway",
];

#[test]
fn a_nested_json_log_mapped_by_the_policy_classifies_as_our_keys_do() {
    let expected = native();
    assert_eq!(expected.len(), 8, "{expected:?}");
    let got = verdicts(analyze_rows(&[K8S_LOG], &["--policy", K8S_POLICY]));
    assert_eq!(got, expected);
}

#[test]
fn a_logfmt_log_in_epoch_seconds_with_0_based_attempts_classifies_as_our_keys_do() {
    let mut flags = LOGFMT_FLAGS.to_vec();
    flags.extend(["--hop-value", "inventory-db=dependency"]);
    let got = verdicts(analyze_rows(
        &[fixture("mapping/epoch-seconds.logfmt")],
        &flags,
    ));
    assert_eq!(got, native());
}

/// `{"a":{"b":1}}` as `{"a.b":1}`: how a nested log lands in a Parquet file's columns.
fn flattened(prefix: &str, value: &Value, out: &mut Map<String, Value>) {
    match value {
        Value::Object(o) => {
            for (k, v) in o {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flattened(&key, v, out);
            }
        }
        v => {
            out.insert(prefix.to_string(), v.clone());
        }
    }
}

#[test]
fn a_parquet_file_with_the_logs_columns_is_mapped_by_the_same_policy() {
    let mut flat = String::new();
    for line in fixture_lines("mapping/k8s-nested.jsonl") {
        let value: Value = serde_json::from_str(&line).unwrap();
        let mut out = Map::new();
        flattened("", &value, &mut out);
        flat.push_str(&serde_json::to_string(&out).unwrap());
        flat.push('\n');
    }
    let parquet = TempFile::reserve("k8s-flat.parquet");
    jsonl_to_parquet(flat.as_bytes(), parquet.path());
    let got = verdicts(analyze_rows(&[parquet.path()], &["--policy", K8S_POLICY]));
    assert_eq!(got, native());
    // The same columns without the mapping hold no operation_id: refused, naming the fix.
    let plain = analyze(&[parquet.path()]);
    plain.expect_code(2);
    assert!(
        plain.stderr.contains("--field operation_id=COLUMN"),
        "{}",
        plain.stderr
    );
}

#[test]
fn mapping_errors_are_path_and_line_with_exit_2() {
    let log = TempFile::new(
        "mapped-bad.jsonl",
        concat!(
            "{\"rid\":\"o-1\",\"at\":0,\"took\":\"120ms\",\"retries\":0}\n",
            "{\"at\":10,\"took\":\"5ms\",\"retries\":0}\n",
            "{\"rid\":\"o-1\",\"at\":200,\"took\":\"a while\",\"retries\":1}\n",
            "{\"rid\":\"o-1\",\"at\":400,\"took\":\"10ms\",\"retries\":-1}\n",
            "{\"rid\":{\"id\":1},\"at\":400,\"took\":\"10ms\",\"retries\":1}\n",
            "{\"rid\":\"o-2\",\"at\":900,\"took\":\"10ms\",\"retries\":0,\"hop\":\"checkout-api\"}\n",
        )
        .as_bytes(),
    );
    let path = log.path().display().to_string();
    let flags = [
        "--field",
        "operation_id=rid",
        "--field",
        "start_ms=at",
        "--field",
        "duration=took",
        "--field",
        "retry_count=retries",
    ];
    let mut args: Vec<&str> = flags.to_vec();
    args.push(&path);
    // In a mixed log, line 2 (no operation ID) is a line of something else: passed by.
    let mixed = analyze(&args);
    mixed.expect_code(2);
    assert!(
        !mixed.stderr.contains(&format!("{path}:2:")),
        "{}",
        mixed.stderr
    );
    assert!(
        mixed.stderr.contains(&format!("{path}: 1 line passed by")),
        "{}",
        mixed.stderr
    );
    args.extend(["--input-format", "jsonl"]);
    let run = analyze(&args);
    run.expect_code(2);
    for (line, expected) in [
        (2, "missing operation_id"),
        (2, "operation_id is read from \"rid\" (--field)"),
        (3, "duration (read from \"took\") must be a duration"),
        (
            4,
            "retry_count (read from \"retries\") must be a whole number of at least 0",
        ),
        (5, "operation_id (read from \"rid\") is an object"),
        (6, "unknown hop \"checkout-api\""),
        (6, "--hop-value"),
    ] {
        let prefix = format!("{path}:{line}: ");
        assert!(
            run.stderr
                .lines()
                .any(|l| l.starts_with(&prefix) && l.contains(expected)),
            "no {prefix}…{expected} in\n{}",
            run.stderr
        );
    }
    assert!(
        !run.stderr.contains(&format!("{path}:1:")),
        "{}",
        run.stderr
    );
    // --skip-invalid keeps the analysis' exit code; --strict stops at the first bad line.
    let mut skip = args.clone();
    skip.push("--skip-invalid");
    analyze(&skip).expect_code(0);
    let mut strict = args.clone();
    strict.push("--strict");
    let run = analyze(&strict);
    run.expect_code(2);
    assert!(
        run.stderr
            .contains(&format!("{path}:2: missing operation_id")),
        "{}",
        run.stderr
    );
    assert!(
        !run.stderr.contains(&format!("{path}:3:")),
        "{}",
        run.stderr
    );
}

#[test]
fn a_bad_mapping_is_refused_naming_the_key_with_exit_2() {
    let events = fixture("classes/healthy.jsonl");
    let events = events.to_str().unwrap();
    let policy = |text: &str| TempFile::new("mapping.toml", text.as_bytes());
    let unknown_key = policy("[fields]\nopid = \"request_id\"\n");
    let bad_hop = policy("[hop_values]\ncheckout-api = \"edge\"\n");
    let bad_unit = policy("time_unit = \"min\"\n");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--field", "opid=request_id"],
            "--field: \"opid\" is not one of our keys",
        ),
        (vec!["--field", "operation_id"], "expected OUR=THEIRS"),
        (
            vec!["--field", "hop=a..b"],
            "--field: hop: \"a..b\": an empty key",
        ),
        (
            vec!["--field", "attempt=a", "--field", "retry_count=b"],
            "attempt and retry_count both give the attempt",
        ),
        (vec!["--hop-value", "checkout-api=edge"], "unknown hop"),
        (
            vec!["--time-unit", "min"],
            "--time-unit \"min\": use one of",
        ),
        (vec!["--attempt-base", "2"], "--attempt-base"),
        (
            vec!["--policy", unknown_key.path().to_str().unwrap()],
            "policy [fields]: \"opid\" is not one of our keys",
        ),
        (
            vec!["--policy", bad_hop.path().to_str().unwrap()],
            "policy [hop_values]: checkout-api = \"edge\": unknown hop",
        ),
        (
            vec!["--policy", bad_unit.path().to_str().unwrap()],
            "time_unit = \"min\"",
        ),
    ];
    for (mut args, expected) in cases {
        args.push(events);
        let run = analyze(&args);
        run.expect_code(2);
        assert!(run.stderr.contains(expected), "{args:?}: {}", run.stderr);
    }
}

// --- renaming every key and mapping it back changes nothing ---------------------------------

/// A small deterministic generator (splitmix64): a case is one seed.
struct Seeded(u64);

impl Seeded {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// How one seed renames a log: every key gets another name (flat, nested in an object, or
/// a flat key with dots that only the bracket syntax names), and the numbers other forms:
/// attempts 0-based or as a retry count, times in microseconds, finishes as durations.
struct Renaming {
    /// Our key → where it goes, as path steps.
    places: BTreeMap<String, Vec<String>>,
    attempt_as_retries: bool,
    micros: bool,
    durations: bool,
}

impl Renaming {
    fn new(seed: u64, keys: &[String]) -> Renaming {
        let mut rng = Seeded(seed);
        let places = keys
            .iter()
            .map(|key| {
                let place = match rng.below(3) {
                    0 => vec![format!("x_{key}")],
                    1 => vec!["meta".to_string(), format!("{key}_v")],
                    _ => vec![format!("their.{key}")],
                };
                (key.clone(), place)
            })
            .collect();
        Renaming {
            places,
            attempt_as_retries: rng.below(2) == 0,
            micros: rng.below(2) == 0,
            durations: rng.below(2) == 0,
        }
    }

    /// Our key → the key it is read as (`attempt` may become `retry_count`, `finish_ms`
    /// `duration_ms`).
    fn ours(&self, key: &str) -> String {
        match key {
            "attempt" if self.attempt_as_retries => "retry_count".into(),
            "finish_ms" if self.durations => "duration_ms".into(),
            _ => key.to_string(),
        }
    }

    /// The `--field` flags that map the renamed log back.
    fn flags(&self) -> Vec<String> {
        let mut flags = Vec::new();
        for (key, place) in &self.places {
            let path = place
                .iter()
                .map(|step| {
                    if step.contains('.') {
                        format!("[\"{step}\"]")
                    } else {
                        step.clone()
                    }
                })
                .collect::<Vec<_>>()
                .join(".")
                .replace(".[", "[");
            flags.push("--field".to_string());
            flags.push(format!("{}={path}", self.ours(key)));
        }
        if !self.attempt_as_retries {
            flags.extend(["--attempt-base".to_string(), "0".to_string()]);
        }
        if self.micros {
            flags.extend(["--time-unit".to_string(), "us".to_string()]);
        }
        flags
    }

    fn line(&self, line: &str) -> String {
        let object: Map<String, Value> = serde_json::from_str(line).expect("a generated line");
        let start = object.get("start_ms").and_then(Value::as_i64);
        let mut out = Map::new();
        for (key, value) in &object {
            let value = match (key.as_str(), value) {
                // Both 0-based forms are the number of attempts before this one.
                ("attempt", Value::Number(n)) => Value::from(n.as_i64().unwrap() - 1),
                ("finish_ms", Value::Number(n)) if self.durations => {
                    Value::from(n.as_i64().unwrap() - start.expect("a start"))
                }
                ("start_ms" | "finish_ms", Value::Number(n)) if self.micros => {
                    Value::from(n.as_i64().unwrap() * 1000)
                }
                _ => value.clone(),
            };
            let place = &self.places[key];
            match place.as_slice() {
                [one] => {
                    out.insert(one.clone(), value);
                }
                [outer, inner] => {
                    out.entry(outer.clone())
                        .or_insert_with(|| Value::Object(Map::new()))
                        .as_object_mut()
                        .unwrap()
                        .insert(inner.clone(), value);
                }
                _ => unreachable!(),
            }
        }
        format!("{}\n", Value::Object(out))
    }
}

/// The per-operation rows (sorted) and the summary without the input's name.
fn outcome(file: &std::path::Path, flags: &[String]) -> (Vec<String>, Value) {
    let run_as = |format: &str| {
        let mut args: Vec<String> = vec!["--format".into(), format.into()];
        args.extend(flags.iter().cloned());
        args.push(file.display().to_string());
        let run = analyze(&args);
        run.expect_code(0);
        assert!(run.stderr.is_empty(), "{args:?}: {}", run.stderr);
        run.stdout
    };
    let mut rows: Vec<String> = String::from_utf8(run_as("jsonl"))
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    rows.sort();
    let mut summary = decode_summary_value(&run_as("json"));
    summary["input"].as_object_mut().unwrap().remove("files");
    (rows, summary)
}

proptest! {
    #![proptest_config(Config {
        cases: 6,
        max_shrink_iters: 4,
        failure_persistence: None,
        ..Config::default()
    })]

    #[test]
    fn renaming_every_key_and_mapping_it_back_changes_no_output(
        seed in any::<u64>(),
        input_seed in 1u64..1000,
    ) {
        let generated = run(&["generate", "--ops", "150", "--seed", &input_seed.to_string()]);
        generated.expect_code(0);
        let text = generated.stdout_text();
        let mut keys: Vec<String> = Vec::new();
        for line in text.lines() {
            let object: Map<String, Value> = serde_json::from_str(line).unwrap();
            for key in object.keys() {
                if !keys.contains(key) {
                    keys.push(key.clone());
                }
            }
        }
        let renaming = Renaming::new(seed, &keys);
        let renamed: String = text.lines().map(|l| renaming.line(l)).collect();
        // Not one of our keys is left where the plain reader would find it.
        let first: Map<String, Value> =
            serde_json::from_str(renamed.lines().next().unwrap()).unwrap();
        prop_assert!(first.keys().all(|k| !keys.contains(k)), "{first:?}");

        let native = TempFile::new("generated.jsonl", text.as_bytes());
        let mapped = TempFile::new("renamed.jsonl", renamed.as_bytes());
        let want = outcome(native.path(), &[]);
        let got = outcome(mapped.path(), &renaming.flags());
        prop_assert_eq!(got.0, want.0);
        prop_assert_eq!(got.1, want.1);
    }
}
